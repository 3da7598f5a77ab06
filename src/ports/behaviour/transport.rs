//! The transport behaviour suite: what every [`Transport`] must do, run
//! against each implementation.

use std::future::Future;
use std::time::Duration;

use bosun_contracts::Destination;
use bosun_contracts::routing::EVENTS_TOPIC;
use time::OffsetDateTime;

use crate::ports::transport::{Broker, OutboundMessage, Topology, TransportError};

const LOCK: Duration = Duration::from_secs(30);

// The short locks and schedules below leave a second or more of margin
// between the receives that must see them: the behaviour is checked, not
// the speed, and CI machines are shared and noisy.

pub(crate) fn outbound(destination: Destination, id: &str, message_type: &str) -> OutboundMessage {
    OutboundMessage {
        destination,
        broker_message_id: id.to_owned(),
        message_type: Some(message_type.to_owned()),
        correlation_id: Some("c-1".to_owned()),
        body: format!("{{\"id\":\"{id}\"}}").into_bytes(),
        scheduled_at: None,
    }
}

fn queue() -> Destination {
    Destination::Queue("commit".into())
}

fn subscription(name: &str) -> Destination {
    Destination::Subscription {
        topic: EVENTS_TOPIC.into(),
        subscription: name.into(),
    }
}

/// Every behaviour by name, with the maximum delivery count its entities need.
pub(crate) const BEHAVIOURS: &[(&str, u32)] = &[
    ("send_receive_complete", 10),
    ("topic_fans_out_by_type", 10),
    ("lock_hides_until_expiry", 10),
    ("abandon_redelivers", 10),
    ("max_delivery_count_dead_letters", 2),
    ("scheduled_messages_wait", 10),
    ("duplicates_are_dropped", 10),
    ("dead_letter_keeps_reason_and_bytes", 10),
    ("renew_extends_lock", 10),
    ("unknown_entity_is_refused", 10),
    ("subscription_send_reaches_only_it", 10),
    ("is_locked_until_settled", 10),
    ("pruning_keeps_duplicate_detection_within_its_window", 10),
];

/// Runs every behaviour against fresh transports made by `make(max_delivery_count)`.
pub(crate) async fn run_all<T, F, Fut>(make: F)
where
    T: Broker,
    F: Fn(u32) -> Fut,
    Fut: Future<Output = T>,
{
    for (name, max_delivery_count) in BEHAVIOURS {
        let transport = make(*max_delivery_count).await;
        transport.ensure_topology(&Topology::from_routing()).await.unwrap();
        run_one(name, &transport).await;
    }
}

/// Runs the behaviour called `name` (one of [`BEHAVIOURS`]) against
/// `transport`, whose topology is in place and whose entities are empty.
pub(crate) async fn run_one<T: Broker>(name: &str, transport: &T) {
    match name {
        "send_receive_complete" => send_receive_complete(transport).await,
        "topic_fans_out_by_type" => topic_fans_out_by_type(transport).await,
        "lock_hides_until_expiry" => lock_hides_until_expiry(transport).await,
        "abandon_redelivers" => abandon_redelivers(transport).await,
        "max_delivery_count_dead_letters" => max_delivery_count_dead_letters(transport).await,
        "scheduled_messages_wait" => scheduled_messages_wait(transport).await,
        "duplicates_are_dropped" => duplicates_are_dropped(transport).await,
        "dead_letter_keeps_reason_and_bytes" => dead_letter_keeps_reason_and_bytes(transport).await,
        "renew_extends_lock" => renew_extends_lock(transport).await,
        "unknown_entity_is_refused" => unknown_entity_is_refused(transport).await,
        "subscription_send_reaches_only_it" => subscription_send_reaches_only_it(transport).await,
        "is_locked_until_settled" => is_locked_until_settled(transport).await,
        "pruning_keeps_duplicate_detection_within_its_window" => {
            pruning_keeps_duplicate_detection_within_its_window(transport).await
        }
        other => panic!("no behaviour `{other}`"),
    }
}

async fn send_receive_complete<T: Broker>(transport: &T) {
    transport
        .send(vec![
            outbound(queue(), "a", "CreateCommit"),
            outbound(queue(), "b", "CreateCommit"),
        ])
        .await
        .unwrap();
    assert_eq!(transport.depth(&queue()).await.unwrap(), 2);
    let received = transport.receive(&queue(), 10, LOCK).await.unwrap();
    assert_eq!(
        received
            .iter()
            .map(|m| m.broker_message_id.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(received[0].delivery_count, 1);
    assert_eq!(received[0].body, b"{\"id\":\"a\"}");
    for message in &received {
        transport.complete(&message.lock).await.unwrap();
    }
    assert_eq!(transport.depth(&queue()).await.unwrap(), 0);
    assert!(matches!(
        transport.complete(&received[0].lock).await,
        Err(TransportError::LockLost { .. })
    ));
}

async fn is_locked_until_settled<T: Broker>(transport: &T) {
    transport
        .send(vec![
            outbound(queue(), "a", "CreateCommit"),
            outbound(queue(), "b", "CreateCommit"),
        ])
        .await
        .unwrap();
    let received = transport.receive(&queue(), 10, LOCK).await.unwrap();
    assert_eq!(received.len(), 2);
    for message in &received {
        assert!(transport.is_locked(&message.lock).await.unwrap(), "held after receive");
    }
    transport.complete(&received[0].lock).await.unwrap();
    assert!(!transport.is_locked(&received[0].lock).await.unwrap(), "completed");
    transport.abandon(&received[1].lock).await.unwrap();
    assert!(!transport.is_locked(&received[1].lock).await.unwrap(), "abandoned");
    // The redelivery holds a lock of its own.
    let again = transport.receive(&queue(), 10, LOCK).await.unwrap();
    assert_eq!(again.len(), 1);
    assert!(transport.is_locked(&again[0].lock).await.unwrap());
    assert!(
        !transport.is_locked(&received[1].lock).await.unwrap(),
        "the old lock stays lost"
    );
    transport.complete(&again[0].lock).await.unwrap();
}

async fn topic_fans_out_by_type<T: Broker>(transport: &T) {
    let topic = Destination::Topic(EVENTS_TOPIC.into());
    transport
        .send(vec![outbound(topic.clone(), "e1", "BuildCompleted")])
        .await
        .unwrap();
    for name in ["release-orchestration", "container-build", "package-publishing"] {
        let received = transport.receive(&subscription(name), 10, LOCK).await.unwrap();
        assert_eq!(received.len(), 1, "{name} should get BuildCompleted");
    }
    for name in ["pull-request", "gitops-sync"] {
        assert!(
            transport
                .receive(&subscription(name), 10, LOCK)
                .await
                .unwrap()
                .is_empty(),
            "{name}"
        );
    }
}

async fn lock_hides_until_expiry<T: Broker>(transport: &T) {
    transport
        .send(vec![outbound(queue(), "a", "CreateCommit")])
        .await
        .unwrap();
    let first = transport
        .receive(&queue(), 1, Duration::from_millis(1_500))
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    assert!(
        transport.receive(&queue(), 1, LOCK).await.unwrap().is_empty(),
        "locked message was delivered twice"
    );
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    let second = transport.receive(&queue(), 1, LOCK).await.unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].delivery_count, 2);
    assert!(matches!(
        transport.complete(&first[0].lock).await,
        Err(TransportError::LockLost { .. })
    ));
    transport.complete(&second[0].lock).await.unwrap();
}

async fn abandon_redelivers<T: Broker>(transport: &T) {
    transport
        .send(vec![outbound(queue(), "a", "CreateCommit")])
        .await
        .unwrap();
    let first = transport.receive(&queue(), 1, LOCK).await.unwrap();
    transport.abandon(&first[0].lock).await.unwrap();
    let second = transport.receive(&queue(), 1, LOCK).await.unwrap();
    assert_eq!(second[0].delivery_count, 2);
}

async fn max_delivery_count_dead_letters<T: Broker>(transport: &T) {
    transport
        .send(vec![outbound(queue(), "a", "CreateCommit")])
        .await
        .unwrap();
    for _ in 0..2 {
        let received = transport.receive(&queue(), 1, LOCK).await.unwrap();
        transport.abandon(&received[0].lock).await.unwrap();
    }
    assert!(transport.receive(&queue(), 1, LOCK).await.unwrap().is_empty());
    let dead = transport.peek_dead_letters(&queue(), 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, "MaxDeliveryCountExceeded");
    assert_eq!(dead[0].delivery_count, 2);
    assert_eq!(dead[0].body, b"{\"id\":\"a\"}");
}

async fn scheduled_messages_wait<T: Broker>(transport: &T) {
    let mut message = outbound(queue(), "later", "CreateCommit");
    message.scheduled_at = Some(OffsetDateTime::now_utc() + Duration::from_millis(1_500));
    transport.send(vec![message]).await.unwrap();
    assert!(
        transport.receive(&queue(), 1, LOCK).await.unwrap().is_empty(),
        "scheduled message came early"
    );
    assert_eq!(transport.depth(&queue()).await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    assert_eq!(transport.receive(&queue(), 1, LOCK).await.unwrap().len(), 1);
}

async fn duplicates_are_dropped<T: Broker>(transport: &T) {
    transport
        .send(vec![outbound(queue(), "same", "CreateCommit")])
        .await
        .unwrap();
    transport
        .send(vec![outbound(queue(), "same", "CreateCommit")])
        .await
        .unwrap();
    assert_eq!(transport.depth(&queue()).await.unwrap(), 1);
    let topic = Destination::Topic(EVENTS_TOPIC.into());
    transport
        .send(vec![outbound(topic.clone(), "ev", "CommitCreated")])
        .await
        .unwrap();
    transport
        .send(vec![outbound(topic, "ev", "CommitCreated")])
        .await
        .unwrap();
    assert_eq!(transport.depth(&subscription("pull-request")).await.unwrap(), 1);
}

async fn dead_letter_keeps_reason_and_bytes<T: Broker>(transport: &T) {
    transport
        .send(vec![outbound(queue(), "bad", "CreateCommit")])
        .await
        .unwrap();
    let received = transport.receive(&queue(), 1, LOCK).await.unwrap();
    transport
        .dead_letter(&received[0].lock, "invalid-field", "payload.branch is empty")
        .await
        .unwrap();
    assert!(transport.receive(&queue(), 1, LOCK).await.unwrap().is_empty());
    let dead = transport.peek_dead_letters(&queue(), 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, "invalid-field");
    assert_eq!(dead[0].description, "payload.branch is empty");
    assert_eq!(dead[0].body, b"{\"id\":\"bad\"}");
    assert!(transport.remove_dead_letter(&queue(), dead[0].sequence).await.unwrap());
    assert!(transport.peek_dead_letters(&queue(), 10).await.unwrap().is_empty());
    assert!(!transport.remove_dead_letter(&queue(), dead[0].sequence).await.unwrap());
}

async fn renew_extends_lock<T: Broker>(transport: &T) {
    transport
        .send(vec![outbound(queue(), "long", "CreateCommit")])
        .await
        .unwrap();
    let received = transport
        .receive(&queue(), 1, Duration::from_millis(1_500))
        .await
        .unwrap();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        transport
            .renew_lock(&received[0].lock, Duration::from_millis(1_500))
            .await
            .unwrap();
    }
    assert!(
        transport.receive(&queue(), 1, LOCK).await.unwrap().is_empty(),
        "renewed lock was stolen"
    );
    transport.complete(&received[0].lock).await.unwrap();
}

async fn unknown_entity_is_refused<T: Broker>(transport: &T) {
    let result = transport
        .send(vec![outbound(
            Destination::Queue("no-such-queue".into()),
            "x",
            "CreateCommit",
        )])
        .await;
    assert!(matches!(result, Err(TransportError::NoSuchEntity(_))), "{result:?}");
}

async fn subscription_send_reaches_only_it<T: Broker>(transport: &T) {
    transport
        .send(vec![outbound(
            subscription("container-build"),
            "replay-1",
            "BuildCompleted",
        )])
        .await
        .unwrap();
    assert_eq!(
        transport
            .receive(&subscription("container-build"), 10, LOCK)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        transport
            .receive(&subscription("package-publishing"), 10, LOCK)
            .await
            .unwrap()
            .is_empty()
    );
}

const DAY: Duration = Duration::from_secs(24 * 3600);

/// Retention never forgets a broker message id still within the
/// duplicate-detection window (7 days on the transports that keep one).
async fn pruning_keeps_duplicate_detection_within_its_window<T: Broker>(transport: &T) {
    let now = OffsetDateTime::now_utc();
    transport
        .send(vec![outbound(queue(), "kept", "CreateCommit")])
        .await
        .unwrap();
    assert_eq!(transport.prune_duplicates(now + DAY * 6, 100).await.unwrap(), 0);
    transport
        .send(vec![outbound(queue(), "kept", "CreateCommit")])
        .await
        .unwrap();
    assert_eq!(
        transport.depth(&queue()).await.unwrap(),
        1,
        "a duplicate got through after pruning"
    );
}

/// For transports that keep duplicate-detection records (SQLite,
/// PostgreSQL): records past the window are deleted, at most `limit` per
/// call; the id can then be sent again.
pub(crate) async fn duplicate_records_are_pruned_in_batches<T: Broker>(transport: &T) {
    let now = OffsetDateTime::now_utc();
    let sent = ["d-1", "d-2", "d-3"].map(|id| outbound(queue(), id, "CreateCommit"));
    transport.send(sent.to_vec()).await.unwrap();
    assert_eq!(
        transport.prune_duplicates(now + DAY * 6, 2).await.unwrap(),
        0,
        "within the window"
    );
    assert_eq!(
        transport.prune_duplicates(now + DAY * 8, 2).await.unwrap(),
        2,
        "one batch"
    );
    assert_eq!(transport.prune_duplicates(now + DAY * 8, 2).await.unwrap(), 1);
    assert_eq!(transport.prune_duplicates(now + DAY * 8, 2).await.unwrap(), 0);
    transport.send(vec![sent[0].clone()]).await.unwrap();
    assert_eq!(transport.depth(&queue()).await.unwrap(), 4, "a pruned id is new again");
}
