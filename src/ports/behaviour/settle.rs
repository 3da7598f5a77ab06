//! The settle behaviour suite: what every [`Settle`] does, run against each
//! pair of backends it serves (written once for all of them).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bosun_contracts::Destination;
use serde_json::json;
use time::OffsetDateTime;

use crate::ports::settle::{Settle, SettleError, Settled, Settlement};
use crate::ports::store::{
    AttemptRecord, DeadLetterFilter, DeadLetterRecord, DeadLetterStatus, HandledMessage, OutboxPurpose, RetryWrite,
    SagaWrite, Store, TimelineEntry, TimelineStatus,
};
use crate::ports::transport::{Broker, OutboundMessage, ReceivedMessage, Topology};

const LOCK: Duration = Duration::from_secs(30);

/// A store, a transport and the settle over them, as wiring pairs them.
pub(crate) struct Pairing {
    /// The store.
    pub(crate) store: Arc<dyn Store>,
    /// The transport (its topology is created by the suite).
    pub(crate) transport: Arc<dyn Broker>,
    /// The settle under test.
    pub(crate) settle: Arc<dyn Settle>,
}

/// Runs every behaviour against fresh pairs made by `make`.
pub(crate) async fn run_all<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Pairing>,
{
    handling_is_written_and_the_message_settled(&ready(make().await).await).await;
    an_already_handled_message_is_settled_and_nothing_is_written_twice(&ready(make().await).await).await;
    a_saga_conflict_writes_nothing_and_keeps_the_lock(&ready(make().await).await).await;
    a_lost_lock_writes_nothing(&ready(make().await).await).await;
    a_retry_is_written_and_the_message_completed(&ready(make().await).await).await;
    a_dead_letter_is_written_and_the_message_dead_lettered(&ready(make().await).await).await;
    a_duplicate_is_recorded_and_completed(&ready(make().await).await).await;
    a_failure_settled_under_a_lost_lock_writes_nothing(&ready(make().await).await).await;
    an_abandoned_message_is_delivered_again(&ready(make().await).await).await;
}

async fn ready(pairing: Pairing) -> Pairing {
    pairing
        .transport
        .ensure_topology(&Topology::from_routing())
        .await
        .unwrap();
    pairing
}

fn inbound() -> Destination {
    Destination::Queue("commit".into())
}

fn outgoing_queue() -> Destination {
    Destination::Queue("pull-request".into())
}

fn outgoing(id: &str) -> OutboundMessage {
    OutboundMessage {
        destination: outgoing_queue(),
        broker_message_id: id.to_owned(),
        message_type: Some("OpenPullRequest".into()),
        correlation_id: Some("c-commit".into()),
        body: format!("{{\"id\":\"{id}\"}}").into_bytes(),
        scheduled_at: None,
    }
}

fn saga(expected_version: i64) -> SagaWrite {
    SagaWrite {
        kind: "release".into(),
        key: "contoso/r-1".into(),
        expected_version,
        state: json!({"step": expected_version + 1}),
        tenant_id: Some("contoso".into()),
    }
}

fn handled(message_id: &str, saga: Option<SagaWrite>, outbox: Vec<OutboundMessage>) -> HandledMessage {
    HandledMessage {
        consumer: "commit".into(),
        message_id: message_id.into(),
        message_type: "CreateCommit".into(),
        saga,
        outbox,
        timeline: vec![TimelineEntry {
            correlation_id: "c-commit".into(),
            message_id: message_id.into(),
            message_type: "CreateCommit".into(),
            consumer: Some("commit".into()),
            status: TimelineStatus::Completed,
            attempt: 0,
            at: OffsetDateTime::now_utc(),
            detail: None,
        }],
    }
}

/// Puts a copy of the handled command on the inbound queue and receives it.
async fn deliver(pairing: &Pairing, broker_id: &str, lock: Duration) -> ReceivedMessage {
    pairing
        .transport
        .send(vec![OutboundMessage {
            destination: inbound(),
            broker_message_id: broker_id.to_owned(),
            message_type: Some("CreateCommit".into()),
            correlation_id: Some("c-commit".into()),
            body: b"{}".to_vec(),
            scheduled_at: None,
        }])
        .await
        .unwrap();
    let mut received = pairing.transport.receive(&inbound(), 1, lock).await.unwrap();
    assert_eq!(received.len(), 1, "the copy {broker_id} is received");
    received.remove(0)
}

/// What the outbox dispatcher does: sends what is left in the outbox (a
/// commit that enqueued its messages itself left nothing). Returns the
/// purposes of what it sent.
async fn dispatch(pairing: &Pairing) -> Vec<OutboxPurpose> {
    let pending = pairing.store.claim_outbox(100, Duration::from_secs(30)).await.unwrap();
    if pending.is_empty() {
        return Vec::new();
    }
    let messages = pending.iter().map(|entry| entry.message.clone()).collect();
    pairing.transport.send(messages).await.unwrap();
    let ids: Vec<i64> = pending.iter().map(|entry| entry.id).collect();
    pairing.store.mark_dispatched(&ids).await.unwrap();
    pending.iter().map(|entry| entry.purpose).collect()
}

async fn handling_is_written_and_the_message_settled(pairing: &Pairing) {
    let received = deliver(pairing, "in-1", LOCK).await;
    let status = pairing
        .settle
        .settle(
            Settlement::Handled(handled("m-1", Some(saga(0)), vec![outgoing("out-1")])),
            &received.lock,
        )
        .await
        .unwrap();
    assert_eq!(status, Settled::Written);
    assert_eq!(pairing.transport.depth(&inbound()).await.unwrap(), 0, "settled");
    assert!(pairing.store.is_handled("commit", "m-1").await.unwrap());
    let saga = pairing
        .store
        .load_saga("release", "contoso/r-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((saga.version, saga.state), (1, json!({"step": 1})));
    assert_eq!(
        pairing.store.emitted("c-commit").await.unwrap(),
        vec![outgoing("out-1").body],
        "the outgoing message is recorded"
    );
    let purposes = dispatch(pairing).await;
    assert!(
        purposes.iter().all(|purpose| *purpose == OutboxPurpose::Emitted),
        "{purposes:?}"
    );
    assert_eq!(
        pairing.transport.depth(&outgoing_queue()).await.unwrap(),
        1,
        "the outgoing message is sent, by the commit or by the dispatcher"
    );
    let statuses: Vec<_> = pairing
        .store
        .timeline("c-commit")
        .await
        .unwrap()
        .into_iter()
        .map(|line| line.status)
        .collect();
    assert_eq!(statuses.first(), Some(&TimelineStatus::Completed), "{statuses:?}");
}

async fn an_already_handled_message_is_settled_and_nothing_is_written_twice(pairing: &Pairing) {
    let first = deliver(pairing, "in-1", LOCK).await;
    let status = pairing
        .settle
        .settle(
            Settlement::Handled(handled("m-1", Some(saga(0)), vec![outgoing("out-1")])),
            &first.lock,
        )
        .await
        .unwrap();
    assert_eq!(status, Settled::Written);
    // The broker delivers another copy; its handling reaches the commit.
    let again = deliver(pairing, "in-1.again", LOCK).await;
    let status = pairing
        .settle
        .settle(
            Settlement::Handled(handled("m-1", Some(saga(1)), vec![outgoing("out-1")])),
            &again.lock,
        )
        .await
        .unwrap();
    assert_eq!(status, Settled::AlreadyHandled);
    assert_eq!(pairing.transport.depth(&inbound()).await.unwrap(), 0, "settled");
    let saga = pairing
        .store
        .load_saga("release", "contoso/r-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(saga.version, 1, "the saga is not written again");
    assert_eq!(pairing.store.emitted("c-commit").await.unwrap().len(), 1);
    dispatch(pairing).await;
    assert_eq!(
        pairing.transport.depth(&outgoing_queue()).await.unwrap(),
        1,
        "sent once"
    );
}

async fn a_saga_conflict_writes_nothing_and_keeps_the_lock(pairing: &Pairing) {
    // Another message moved the saga to version 1 meanwhile.
    pairing
        .store
        .commit_handled(handled("m-0", Some(saga(0)), vec![]))
        .await
        .unwrap();
    let received = deliver(pairing, "in-1", LOCK).await;
    let status = pairing
        .settle
        .settle(
            Settlement::Handled(handled("m-1", Some(saga(0)), vec![outgoing("out-1")])),
            &received.lock,
        )
        .await
        .unwrap();
    assert!(
        matches!(
            status,
            Settled::SagaConflict {
                expected: 0,
                found: 1,
                ..
            }
        ),
        "{status:?}"
    );
    assert!(!pairing.store.is_handled("commit", "m-1").await.unwrap());
    assert!(pairing.store.emitted("c-commit").await.unwrap().is_empty());
    assert_eq!(pairing.transport.depth(&outgoing_queue()).await.unwrap(), 0);
    // Still locked by this receiver: the handling with the fresh version
    // settles it.
    pairing.transport.renew_lock(&received.lock, LOCK).await.unwrap();
    let status = pairing
        .settle
        .settle(
            Settlement::Handled(handled("m-1", Some(saga(1)), vec![outgoing("out-1")])),
            &received.lock,
        )
        .await
        .unwrap();
    assert_eq!(status, Settled::Written);
    assert_eq!(pairing.transport.depth(&inbound()).await.unwrap(), 0);
    let saga = pairing
        .store
        .load_saga("release", "contoso/r-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(saga.version, 2);
}

async fn a_lost_lock_writes_nothing(pairing: &Pairing) {
    let stale = deliver(pairing, "in-1", Duration::from_secs(1)).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    // Another receiver took it after the lock expired.
    let mut current = pairing.transport.receive(&inbound(), 1, LOCK).await.unwrap();
    assert_eq!(current.len(), 1, "redelivered after the lock expired");
    let current = current.remove(0);
    let result = pairing
        .settle
        .settle(
            Settlement::Handled(handled("m-1", Some(saga(0)), vec![outgoing("out-1")])),
            &stale.lock,
        )
        .await;
    assert!(
        matches!(result, Err(SettleError::LockLost { sequence, .. }) if sequence == stale.lock.sequence),
        "{result:?}"
    );
    assert!(
        !pairing.store.is_handled("commit", "m-1").await.unwrap(),
        "no idempotency record"
    );
    assert!(
        pairing
            .store
            .load_saga("release", "contoso/r-1")
            .await
            .unwrap()
            .is_none(),
        "no saga"
    );
    assert_eq!(pairing.store.outbox_backlog().await.unwrap(), 0, "no outbox entry");
    assert!(
        pairing.store.timeline("c-commit").await.unwrap().is_empty(),
        "no timeline"
    );
    assert_eq!(
        pairing.transport.depth(&outgoing_queue()).await.unwrap(),
        0,
        "nothing sent"
    );
    // The current holder's lock is untouched and its commit settles.
    let status = pairing
        .settle
        .settle(
            Settlement::Handled(handled("m-1", Some(saga(0)), vec![outgoing("out-1")])),
            &current.lock,
        )
        .await
        .unwrap();
    assert_eq!(status, Settled::Written);
    assert_eq!(pairing.transport.depth(&inbound()).await.unwrap(), 0);
}

fn line(message_id: &str, status: TimelineStatus) -> TimelineEntry {
    TimelineEntry {
        correlation_id: "c-commit".into(),
        message_id: message_id.into(),
        message_type: "CreateCommit".into(),
        consumer: Some("commit".into()),
        status,
        attempt: 0,
        at: OffsetDateTime::now_utc(),
        detail: None,
    }
}

fn retry(received: &ReceivedMessage) -> RetryWrite {
    RetryWrite {
        consumer: "commit".into(),
        message_id: "m-1".into(),
        received_broker_message_id: received.broker_message_id.clone(),
        attempt: AttemptRecord {
            attempt: 0,
            at: OffsetDateTime::now_utc(),
            error_chain: vec!["no repository".into()],
        },
        retry: OutboundMessage {
            destination: inbound(),
            broker_message_id: format!("{}.retry-1", received.broker_message_id),
            message_type: Some("CreateCommit".into()),
            correlation_id: Some("c-commit".into()),
            body: b"{\"attempt\":1}".to_vec(),
            scheduled_at: None,
        },
        timeline: line("m-1", TimelineStatus::RetryScheduled),
    }
}

fn dead(received: &ReceivedMessage) -> Settlement {
    Settlement::DeadLetter {
        record: DeadLetterRecord {
            id: uuid::Uuid::now_v7(),
            consumer: Some("commit".into()),
            entity: inbound().path(),
            transport_sequence: Some(received.lock.sequence),
            broker_message_id: received.broker_message_id.clone(),
            message_id: Some("m-1".into()),
            message_type: Some("CreateCommit".into()),
            correlation_id: Some("c-commit".into()),
            tenant_id: Some("contoso".into()),
            body: received.body.clone(),
            reason: "permanent-failure".into(),
            // Longer than a transport keeps: cut inside a character.
            description: format!("x{}", "é".repeat(600)),
            error_chain: vec!["no repository".into()],
            attempts: Vec::new(),
            dead_lettered_at: OffsetDateTime::now_utc(),
            origin: "host".into(),
            status: DeadLetterStatus::Dead,
            replays: Vec::new(),
        },
        timeline: Some(line("m-1", TimelineStatus::DeadLettered)),
    }
}

async fn statuses(pairing: &Pairing) -> Vec<TimelineStatus> {
    pairing
        .store
        .timeline("c-commit")
        .await
        .unwrap()
        .into_iter()
        .map(|line| line.status)
        .collect()
}

async fn a_retry_is_written_and_the_message_completed(pairing: &Pairing) {
    let received = deliver(pairing, "in-1", LOCK).await;
    let status = pairing
        .settle
        .settle(Settlement::Retry(retry(&received)), &received.lock)
        .await
        .unwrap();
    assert_eq!(status, Settled::Written);
    assert_eq!(pairing.transport.depth(&inbound()).await.unwrap(), 0, "completed");
    assert_eq!(pairing.store.attempts("commit", "m-1").await.unwrap().len(), 1);
    assert_eq!(statuses(pairing).await, [TimelineStatus::RetryScheduled]);
    assert_eq!(dispatch(pairing).await, [OutboxPurpose::Retry]);
    assert_eq!(
        pairing.transport.depth(&inbound()).await.unwrap(),
        1,
        "the retry is sent back to the entity"
    );
}

async fn a_dead_letter_is_written_and_the_message_dead_lettered(pairing: &Pairing) {
    let received = deliver(pairing, "in-1", LOCK).await;
    let settlement = dead(&received);
    let status = pairing.settle.settle(settlement.clone(), &received.lock).await.unwrap();
    assert_eq!(status, Settled::Written);
    assert_eq!(pairing.transport.depth(&inbound()).await.unwrap(), 0, "settled");
    let recorded = pairing.store.dead_letters(&DeadLetterFilter::default()).await.unwrap();
    let Settlement::DeadLetter { record, .. } = settlement else {
        unreachable!("dead() makes a dead letter")
    };
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].id, record.id);
    assert_eq!(
        recorded[0].description, record.description,
        "the record keeps all of it"
    );
    assert_eq!(statuses(pairing).await, [TimelineStatus::DeadLettered]);
    let native = pairing.transport.peek_dead_letters(&inbound(), 10).await.unwrap();
    assert_eq!(native.len(), 1, "dead-lettered on the transport");
    assert_eq!(native[0].reason, "permanent-failure");
    let description = &native[0].description;
    assert!(description.len() <= 1024 && record.description.starts_with(description.as_str()));
}

async fn a_duplicate_is_recorded_and_completed(pairing: &Pairing) {
    let received = deliver(pairing, "in-1", LOCK).await;
    let status = pairing
        .settle
        .settle(
            Settlement::Duplicate(line("m-1", TimelineStatus::Duplicate)),
            &received.lock,
        )
        .await
        .unwrap();
    assert_eq!(status, Settled::AlreadyHandled);
    assert_eq!(pairing.transport.depth(&inbound()).await.unwrap(), 0, "completed");
    assert_eq!(statuses(pairing).await, [TimelineStatus::Duplicate]);
}

async fn a_failure_settled_under_a_lost_lock_writes_nothing(pairing: &Pairing) {
    let stale = deliver(pairing, "in-1", Duration::from_secs(1)).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let mut current = pairing.transport.receive(&inbound(), 1, LOCK).await.unwrap();
    assert_eq!(current.len(), 1, "redelivered after the lock expired");
    for settlement in [Settlement::Retry(retry(&stale)), dead(&stale)] {
        let result = pairing.settle.settle(settlement, &stale.lock).await;
        assert!(
            matches!(result, Err(SettleError::LockLost { sequence, .. }) if sequence == stale.lock.sequence),
            "{result:?}"
        );
    }
    assert!(
        pairing.store.attempts("commit", "m-1").await.unwrap().is_empty(),
        "no attempt"
    );
    assert_eq!(pairing.store.outbox_backlog().await.unwrap(), 0, "no retry");
    let recorded = pairing.store.dead_letters(&DeadLetterFilter::default()).await.unwrap();
    assert!(recorded.is_empty(), "no dead letter: {recorded:?}");
    assert!(statuses(pairing).await.is_empty(), "no timeline");
    assert!(
        pairing
            .transport
            .peek_dead_letters(&inbound(), 10)
            .await
            .unwrap()
            .is_empty()
    );
    // The current holder settles it.
    let current = current.remove(0);
    let status = pairing
        .settle
        .settle(Settlement::Retry(retry(&current)), &current.lock)
        .await
        .unwrap();
    assert_eq!(status, Settled::Written);
}

async fn an_abandoned_message_is_delivered_again(pairing: &Pairing) {
    let received = deliver(pairing, "in-1", LOCK).await;
    pairing
        .settle
        .settle(Settlement::Abandon, &received.lock)
        .await
        .unwrap();
    let again = pairing.transport.receive(&inbound(), 1, LOCK).await.unwrap();
    assert_eq!(again.len(), 1, "given back at once");
    assert!(statuses(pairing).await.is_empty(), "nothing written");
}
