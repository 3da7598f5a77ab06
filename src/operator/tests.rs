//! Tests of `src/operator/mod.rs`.

use super::*;
use crate::backends::memory::MemoryTransport;
use crate::backends::sqlite::store::SqliteStore;
use crate::ports::store::{DeadLetterStore, DeliveryStore, OutboxStore};
use crate::ports::transport::{ReceivedMessage, Transport, TransportAdmin};

async fn operator(max_delivery_count: u32) -> (Operator, Arc<MemoryTransport>, Arc<SqliteStore>) {
    let transport = Arc::new(MemoryTransport::new(max_delivery_count));
    transport.ensure_topology(&Topology::from_routing()).await.unwrap();
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    (
        Operator::new(transport.clone(), store.clone(), "alice"),
        transport,
        store,
    )
}

/// Abandons `received` on a transport with a max delivery count of 1:
/// the transport dead-letters it on its own.
async fn give_up_on(transport: &MemoryTransport, queue: &Destination, received: &ReceivedMessage) {
    transport.abandon(&received.lock).await.unwrap();
    assert!(
        transport
            .receive(queue, 1, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty(),
        "the transport dead-lettered it"
    );
}

fn commit_payload() -> Value {
    serde_json::json!({
        "repository": "payments-api", "branch": "main", "message": "m",
        "files": [{"path": "README.md", "content": "x"}]
    })
}

/// The front door is one write (delivery, outbox entry, `sent` line),
/// then a send: a command whose send fails is still accepted, left in
/// the outbox for a dispatcher once its lease is over.
#[tokio::test]
async fn a_command_is_accepted_in_one_write_then_sent() {
    let (operator, transport, store) = operator(10).await;
    let sent = operator
        .send("CreateCommit", &commit_payload(), None, "contoso")
        .await
        .unwrap();
    assert_eq!(store.outbox_backlog().await.unwrap(), 0, "sent at once and marked sent");
    assert_eq!(transport.depth(&Destination::Queue("commit".into())).await.unwrap(), 1);
    let record = store
        .delivery_record(&sent.correlation_id.to_string())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.tenant_id, "contoso");

    // A transport without the queue: the send fails, the command stays
    // accepted and waits in the outbox, leased to this process.
    let bare = Arc::new(MemoryTransport::new(10));
    let operator = Operator::new(bare.clone(), store.clone(), "alice");
    let sent = operator
        .send("CreateCommit", &commit_payload(), None, "contoso")
        .await
        .unwrap();
    assert_eq!(store.outbox_backlog().await.unwrap(), 1, "kept for a dispatcher");
    assert!(
        store
            .claim_outbox(10, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty(),
        "leased to the process that accepted it"
    );
    let delivery = operator.delivery(&sent.correlation_id.to_string()).await.unwrap();
    assert_eq!(delivery.messages[0].status, TimelineStatus::Sent);
}

#[tokio::test]
async fn send_validates_and_names_the_field() {
    let (operator, _, _) = operator(10).await;
    let err = operator
        .send("CreateCommit", &serde_json::json!({"repository": "r"}), None, "contoso")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("branch"), "{err}");
    let err = operator
        .send("CreateCommit", &commit_payload(), None, "Not A Tenant")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("tenantId"), "{err}");
    let sent = operator
        .send("CreateCommit", &commit_payload(), None, "contoso")
        .await
        .unwrap();
    assert_eq!(sent.destination, "commit");
    let delivery = operator.delivery(&sent.correlation_id.to_string()).await.unwrap();
    assert_eq!(delivery.messages[0].status, TimelineStatus::Sent);
}

#[tokio::test]
async fn who_decides_is_who_sent_and_an_edited_replay_is_the_replayers_decision() {
    let (operator, transport, _) = operator(1).await;
    let approve = serde_json::json!({
        "releaseId": "payments-api-1", "environment": "prod",
        "onBehalfOf": "mallory", "approvedBy": "key:forged"
    });
    let sent = operator
        .send("ApproveRelease", &approve, None, "contoso")
        .await
        .unwrap();
    let queue = Destination::Queue("release-orchestration".into());
    let received = transport.receive(&queue, 1, Duration::from_secs(30)).await.unwrap();
    let envelope = Envelope::from_slice(&received[0].body).unwrap();
    assert_eq!(envelope.message_id, sent.message_id);
    assert_eq!(
        envelope.payload["approvedBy"], "cli:alice",
        "the payload's claim is replaced"
    );
    assert_eq!(envelope.payload["onBehalfOf"], "mallory", "kept as a note");
    // Dead-lettered by the transport, then replayed with an edited payload
    // by someone else.
    give_up_on(&transport, &queue, &received[0]).await;
    let listed = operator.dead_letters(&DeadLetterFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 1);
    let replayer = operator.clone().approving_as("cli:bob");
    let edited = serde_json::json!({
        "releaseId": "payments-api-1", "environment": "prod", "approvedBy": "cli:alice"
    });
    replayer
        .replay_with(&listed[0].id.to_string(), Some(&edited))
        .await
        .unwrap();
    let again = transport.receive(&queue, 1, Duration::from_secs(30)).await.unwrap();
    let replayed = Envelope::from_slice(&again[0].body).unwrap();
    assert_eq!(
        replayed.payload["approvedBy"], "cli:bob",
        "the edit's claim is replaced"
    );
    assert_eq!(replayed.payload.get("onBehalfOf"), None, "the rest of the edit applies");

    let timeout = serde_json::json!({
        "releaseId": "payments-api-1", "environment": "prod", "deadline": "2020-01-01T00:00:00Z"
    });
    let err = operator
        .send("ReleaseApprovalTimeout", &timeout, None, "contoso")
        .await
        .unwrap_err();
    assert!(matches!(err, OperatorError::Internal(_)), "{err}");
}

#[tokio::test]
async fn a_rollback_is_stamped_with_who_and_when_and_never_passes_for_the_release_sagas() {
    let (operator, transport, _) = operator(1).await;
    let forged = serde_json::json!({
        "environment": "prod", "moduleId": "payments-api", "reason": "INC-1",
        "failedReleaseId": "payments-api-2", "requestedBy": "policy:auto-rollback",
        "requestedAt": "2999-01-01T00:00:00Z"
    });
    let before = time::OffsetDateTime::now_utc();
    operator
        .send("RollbackEnvironment", &forged, None, "contoso")
        .await
        .unwrap();
    let queue = Destination::Queue("gitops-sync".into());
    let received = transport.receive(&queue, 1, Duration::from_secs(30)).await.unwrap();
    let envelope = Envelope::from_slice(&received[0].body).unwrap();
    assert_eq!(envelope.payload["requestedBy"], "cli:alice");
    assert_eq!(envelope.payload.get("failedReleaseId"), None);
    let at = time::OffsetDateTime::parse(
        envelope.payload["requestedAt"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert!(at >= before - time::Duration::SECOND && at.year() < 2999, "{at}");
    // Edited and replayed by someone else: the same.
    give_up_on(&transport, &queue, &received[0]).await;
    let listed = operator.dead_letters(&DeadLetterFilter::default()).await.unwrap();
    operator
        .clone()
        .approving_as("cli:bob")
        .replay_with(&listed[0].id.to_string(), Some(&forged))
        .await
        .unwrap();
    let again = transport.receive(&queue, 1, Duration::from_secs(30)).await.unwrap();
    let replayed = Envelope::from_slice(&again[0].body).unwrap();
    assert_eq!(replayed.payload["requestedBy"], "cli:bob");
    assert_eq!(replayed.payload.get("failedReleaseId"), None);
    assert_ne!(replayed.payload["requestedAt"], "2999-01-01T00:00:00Z");
}

#[tokio::test]
async fn native_dead_letters_are_listed_and_replayable() {
    let (operator, transport, _) = operator(1).await;
    let sent = operator
        .send("CreateCommit", &commit_payload(), None, "contoso")
        .await
        .unwrap();
    let queue = Destination::Queue("commit".into());
    // A consumer that dies twice without settling: the transport gives up.
    let first = transport.receive(&queue, 1, Duration::from_secs(30)).await.unwrap();
    give_up_on(&transport, &queue, &first[0]).await;

    let listed = operator.dead_letters(&DeadLetterFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].origin, "transport");
    assert_eq!(listed[0].reason, "MaxDeliveryCountExceeded");
    assert_eq!(listed[0].message_id, Some(sent.message_id.to_string()));
    // Listing again does not import it twice.
    assert_eq!(
        operator.dead_letters(&DeadLetterFilter::default()).await.unwrap().len(),
        1
    );

    let replay = operator.replay(&listed[0].id.to_string()).await.unwrap();
    assert_eq!(replay.by, "alice");
    assert!(
        transport.peek_dead_letters(&queue, 10).await.unwrap().is_empty(),
        "the native copy is removed"
    );
    let again = transport.receive(&queue, 1, Duration::from_secs(30)).await.unwrap();
    assert_eq!(again.len(), 1);
    let envelope = Envelope::from_slice(&again[0].body).unwrap();
    assert_eq!(envelope.message_id, sent.message_id, "a replay keeps the messageId");
    assert_eq!(envelope.attempt, 0);
    let shown = operator.dead_letter(&listed[0].id.to_string()[..8]).await.unwrap();
    assert_eq!(shown.status, DeadLetterStatus::Replayed);
    let delivery = operator.delivery(&sent.correlation_id.to_string()).await.unwrap();
    assert_eq!(delivery.messages[0].status, TimelineStatus::Replayed);
}

#[tokio::test]
async fn a_host_dead_letter_renumbered_by_the_transport_is_listed_once_and_its_copy_removed() {
    let (operator, transport, store) = operator(10).await;
    let sent = operator
        .send("CreateCommit", &commit_payload(), None, "contoso")
        .await
        .unwrap();
    let queue = Destination::Queue("commit".into());
    let received = transport.receive(&queue, 1, Duration::from_secs(30)).await.unwrap();
    transport
        .dead_letter(&received[0].lock, "retries-exhausted", "x")
        .await
        .unwrap();
    // The host's record, with the sequence number the message had in the
    // queue; like Service Bus, the dead-letter queue numbers it anew.
    let record = DeadLetterRecord {
        id: Uuid::now_v7(),
        consumer: Some("commit".into()),
        entity: "commit".into(),
        transport_sequence: Some(received[0].lock.sequence + 1000),
        broker_message_id: received[0].broker_message_id.clone(),
        message_id: Some(sent.message_id.to_string()),
        message_type: Some("CreateCommit".into()),
        correlation_id: Some(sent.correlation_id.to_string()),
        tenant_id: Some("contoso".into()),
        body: received[0].body.clone(),
        reason: "retries-exhausted".into(),
        description: "x".into(),
        error_chain: vec![],
        attempts: vec![],
        dead_lettered_at: OffsetDateTime::now_utc(),
        origin: "host".into(),
        status: DeadLetterStatus::Dead,
        replays: vec![],
    };
    store.record_dead_letter(record.clone(), None).await.unwrap();
    let listed = operator.dead_letters(&DeadLetterFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 1, "the native copy is not imported a second time");
    operator.replay(&record.id.to_string()).await.unwrap();
    assert!(
        transport.peek_dead_letters(&queue, 10).await.unwrap().is_empty(),
        "the native copy is removed by its broker message id"
    );
}

#[tokio::test(start_paused = true)]
async fn bulk_replay_is_throttled_and_reports_progress() {
    let (operator, transport, store) = operator(10).await;
    let mut ids = Vec::new();
    for index in 0..5 {
        let record = DeadLetterRecord {
            id: Uuid::now_v7(),
            consumer: Some("commit".into()),
            entity: "commit".into(),
            transport_sequence: None,
            broker_message_id: format!("b-{index}"),
            message_id: Some(Uuid::now_v7().to_string()),
            message_type: Some("CreateCommit".into()),
            correlation_id: Some(Uuid::now_v7().to_string()),
            tenant_id: Some("contoso".into()),
            body: format!("{{\"n\":{index}}}").into_bytes(),
            reason: "retries-exhausted".into(),
            description: "x".into(),
            error_chain: vec![],
            attempts: vec![],
            dead_lettered_at: OffsetDateTime::now_utc(),
            origin: "host".into(),
            status: DeadLetterStatus::Dead,
            replays: vec![],
        };
        ids.push(record.id);
        store.record_dead_letter(record, None).await.unwrap();
    }
    let started = tokio::time::Instant::now();
    let mut seen = Vec::new();
    let summary = operator
        .replay_many(&ids, Some(2.0), |done, total, _, result| {
            assert!(result.is_ok());
            seen.push((done, total));
        })
        .await;
    assert_eq!(summary.replayed.len(), 5);
    assert_eq!(seen, [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]);
    // 2 per second: the fifth replay starts two seconds after the first.
    assert!(started.elapsed() >= Duration::from_secs(2), "{:?}", started.elapsed());
    assert_eq!(transport.depth(&Destination::Queue("commit".into())).await.unwrap(), 5);

    operator.purge(&ids[0].to_string()).await.unwrap();
    assert!(operator.dead_letter(&ids[0].to_string()).await.is_err());
}

/// With `BOSUN_COMPAT_VERSION=1` an approval sent at the front door goes
/// out as version 1 with `approver`: only fields of the version 1 schema
/// the previous release reads; and this build still reads it as version 2.
#[tokio::test]
async fn with_compat_one_an_approval_is_sent_as_version_one() {
    let (current, transport, _) = operator(1).await;
    let compat = current.writing_for_wire(1);
    let approve = serde_json::json!({
        "releaseId": "payments-api-1", "environment": "prod", "onBehalfOf": "alice"
    });
    compat.send("ApproveRelease", &approve, None, "contoso").await.unwrap();
    let queue = Destination::Queue("release-orchestration".into());
    let received = transport.receive(&queue, 1, Duration::from_secs(30)).await.unwrap();
    let sent: serde_json::Value = serde_json::from_slice(&received[0].body).unwrap();
    assert_eq!(sent["schemaVersion"], 1);
    assert_eq!(sent["payload"]["approver"], "alice");
    assert_eq!(sent["payload"]["approvedBy"], "cli:alice");
    let v1: serde_json::Value =
        serde_json::from_str(include_str!("../../contracts/schemas/ApproveRelease.v1.schema.json")).unwrap();
    let fields = v1["properties"].as_object().unwrap();
    // Besides version 1's fields, only the optional `approverIdentities`
    // added since, which a version 1 reader ignores (its schema allows it).
    assert_ne!(v1["additionalProperties"], false);
    assert_eq!(sent["payload"]["approverIdentities"], serde_json::json!(["cli:alice"]));
    for field in sent["payload"].as_object().unwrap().keys() {
        assert!(
            fields.contains_key(field) || field == "approverIdentities",
            "`{field}` is not a version 1 field"
        );
    }
    let (_, message) = Envelope::parse(&received[0].body).unwrap();
    let bosun_contracts::Message::ApproveRelease(read) = message else {
        panic!("{message:?}")
    };
    assert_eq!(read.on_behalf_of.as_deref(), Some("alice"));

    // Without compat, the current version.
    let (current, transport, _) = operator(1).await;
    current.send("ApproveRelease", &approve, None, "contoso").await.unwrap();
    let received = transport.receive(&queue, 1, Duration::from_secs(30)).await.unwrap();
    let sent: serde_json::Value = serde_json::from_slice(&received[0].body).unwrap();
    assert_eq!(sent["schemaVersion"], 2);
    assert_eq!(sent["payload"]["onBehalfOf"], "alice");
}

/// An agent written against the previous release sends `approver`: the
/// front door reads its payload as version 1, so the name is kept as
/// `onBehalfOf` rather than dropped as an unknown field; one that sends
/// both names with different values is refused, naming the field.
#[tokio::test]
async fn an_approval_in_the_previous_releases_words_keeps_its_name() {
    let (operator, transport, _) = operator(1).await;
    let old_words = serde_json::json!({
        "releaseId": "payments-api-1", "environment": "prod", "approver": "alice"
    });
    operator
        .send("ApproveRelease", &old_words, None, "contoso")
        .await
        .unwrap();
    let queue = Destination::Queue("release-orchestration".into());
    let received = transport.receive(&queue, 1, Duration::from_secs(30)).await.unwrap();
    let sent: serde_json::Value = serde_json::from_slice(&received[0].body).unwrap();
    assert_eq!(sent["schemaVersion"], 2);
    assert_eq!(sent["payload"]["onBehalfOf"], "alice", "{sent}");
    assert!(sent["payload"].get("approver").is_none(), "{sent}");

    let both = serde_json::json!({
        "releaseId": "payments-api-1", "environment": "prod", "approver": "alice", "onBehalfOf": "bob"
    });
    let err = operator
        .send("ApproveRelease", &both, None, "contoso")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("payload.onBehalfOf"), "{err}");
}
