//! Tests of `src/backends/postgres/settle.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_contracts::Destination;
use bosun_contracts::routing::EVENTS_TOPIC;
use serde_json::json;
use uuid::Uuid;

use bosun_contracts::Envelope;
use sqlx_core::query::query;
use sqlx_core::row::Row;
use time::OffsetDateTime;

use super::*;
use crate::backends::postgres::store::PostgresStore;
use crate::backends::postgres::testing::{self, TestDatabase};
use crate::backends::postgres::transport::PostgresTransport;
use crate::backends::sqlite::transport::EmbeddedTransport;
use crate::ports::behaviour::settle::{Pairing, run_all};
use crate::ports::settle::StoreThenSettle;
use crate::ports::store::{HandledMessage, HandledStore, OutboxStore, SagaStore, TimelineStore};
use crate::ports::store::{SagaWrite, Store};
use crate::ports::store::{TimelineEntry, TimelineStatus};
use crate::ports::transport::{Broker, OutboundMessage, Topology, Transport, TransportAdmin};

const LOCK: Duration = Duration::from_secs(30);

#[tokio::test]
async fn postgres_store_and_transport_pass_the_commit_suite_in_one_transaction() {
    let schemas = Arc::new(Mutex::new(Vec::new()));
    run_all(|| {
        let schemas = Arc::clone(&schemas);
        async move {
            let test = testing::migrated().await;
            let transport = PostgresTransport::new(test.database.clone(), 10);
            let pairing = Pairing {
                store: Arc::new(PostgresStore::with_transport(&transport)),
                settle: Arc::new(PostgresSettle::new(&transport)),
                transport: Arc::new(transport),
            };
            schemas.lock().unwrap().push(test);
            pairing
        }
    })
    .await;
    let schemas = std::mem::take(&mut *schemas.lock().unwrap());
    for test in schemas {
        test.finish().await;
    }
}

#[tokio::test]
async fn the_postgres_store_with_the_embedded_transport_passes_the_commit_suite() {
    let dir = tempfile::tempdir().unwrap();
    let made = AtomicUsize::new(0);
    let schemas = Arc::new(Mutex::new(Vec::new()));
    run_all(|| {
        let schemas = Arc::clone(&schemas);
        let messages = dir
            .path()
            .join(format!("transport-{}.db", made.fetch_add(1, Ordering::SeqCst)));
        async move {
            let test = testing::migrated().await;
            let store: Arc<dyn Store> = Arc::new(PostgresStore::new(test.database.clone()));
            let transport: Arc<dyn Broker> = Arc::new(EmbeddedTransport::open(&messages, 10).unwrap());
            schemas.lock().unwrap().push(test);
            Pairing {
                settle: Arc::new(StoreThenSettle::new(
                    Arc::clone(&store),
                    Arc::clone(&transport) as Arc<dyn Transport>,
                )),
                store,
                transport,
            }
        }
    })
    .await;
    let schemas = std::mem::take(&mut *schemas.lock().unwrap());
    for test in schemas {
        test.finish().await;
    }
}

/// A store, a transport and their commit sharing one migrated schema.
async fn paired(test: &TestDatabase) -> (PostgresStore, PostgresTransport, PostgresSettle) {
    let transport = PostgresTransport::new(test.database.clone(), 10);
    transport.ensure_topology(&Topology::from_routing()).await.unwrap();
    let commit = PostgresSettle::new(&transport);
    (PostgresStore::with_transport(&transport), transport, commit)
}

fn commit_queue() -> Destination {
    Destination::Queue("commit".into())
}

/// A real envelope, so the `sent` timeline line can be written.
fn envelope_message(destination: Destination, message_type: &str, correlation: Uuid) -> OutboundMessage {
    let message_id = Uuid::now_v7();
    let body = json!({
        "messageId": message_id,
        "type": message_type,
        "kind": "event",
        "schemaVersion": 1,
        "correlationId": correlation,
        "causationId": null,
        "tenantId": "contoso",
        "source": "test",
        "occurredAt": "2026-01-01T00:00:00Z",
        "attempt": 0,
        "payload": {}
    });
    OutboundMessage {
        destination,
        broker_message_id: message_id.to_string(),
        message_type: Some(message_type.to_owned()),
        correlation_id: Some(correlation.to_string()),
        body: serde_json::to_vec(&body).unwrap(),
        scheduled_at: None,
    }
}

fn handled(
    message_id: &str,
    correlation: Uuid,
    outbox: Vec<OutboundMessage>,
    saga: Option<SagaWrite>,
) -> HandledMessage {
    HandledMessage {
        consumer: "commit".into(),
        message_id: message_id.into(),
        message_type: "CreateCommit".into(),
        saga,
        outbox,
        timeline: vec![TimelineEntry {
            correlation_id: correlation.to_string(),
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

async fn receive_one(transport: &PostgresTransport, lock: Duration) -> crate::ports::transport::ReceivedMessage {
    let mut received = transport.receive(&commit_queue(), 1, lock).await.unwrap();
    assert_eq!(received.len(), 1);
    received.remove(0)
}

#[tokio::test]
async fn the_commit_writes_handling_and_sends_in_one_transaction() {
    let test = testing::migrated().await;
    let (store, transport, commit) = paired(&test).await;
    let correlation = Uuid::now_v7();
    transport
        .send(vec![OutboundMessage {
            destination: commit_queue(),
            broker_message_id: "in-1".into(),
            message_type: Some("CreateCommit".into()),
            correlation_id: None,
            body: b"{}".to_vec(),
            scheduled_at: None,
        }])
        .await
        .unwrap();
    let received = receive_one(&transport, LOCK).await;
    let event = envelope_message(Destination::Topic(EVENTS_TOPIC.into()), "CommitCreated", correlation);
    let saga = SagaWrite {
        kind: "release".into(),
        key: "r-1".into(),
        expected_version: 0,
        state: json!({"step": 1}),
        tenant_id: None,
    };
    let outcome = commit
        .settle(
            Settlement::Handled(handled("m-1", correlation, vec![event.clone()], Some(saga))),
            &received.lock,
        )
        .await
        .unwrap();
    assert_eq!(outcome, Settled::Written);

    // The received message is gone, the event is on its subscription
    // already, and there is nothing left for the dispatcher.
    assert_eq!(transport.depth(&commit_queue()).await.unwrap(), 0);
    let pull_request = Destination::Subscription {
        topic: EVENTS_TOPIC.into(),
        subscription: "pull-request".into(),
    };
    let delivered = transport.receive(&pull_request, 10, LOCK).await.unwrap();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].body, event.body);
    assert_eq!(store.outbox_backlog().await.unwrap(), 0);
    assert_eq!(
        store.emitted(&correlation.to_string()).await.unwrap(),
        vec![event.body.clone()]
    );
    assert!(store.is_handled("commit", "m-1").await.unwrap());
    assert_eq!(store.load_saga("release", "r-1").await.unwrap().unwrap().version, 1);
    let statuses: Vec<_> = store
        .timeline(&correlation.to_string())
        .await
        .unwrap()
        .into_iter()
        .map(|line| line.status)
        .collect();
    assert_eq!(statuses, [TimelineStatus::Completed, TimelineStatus::Sent]);

    // The same message delivered again: acknowledged, nothing written twice.
    transport
        .send(vec![OutboundMessage {
            destination: commit_queue(),
            broker_message_id: "in-1.again".into(),
            message_type: Some("CreateCommit".into()),
            correlation_id: None,
            body: b"{}".to_vec(),
            scheduled_at: None,
        }])
        .await
        .unwrap();
    let again = receive_one(&transport, LOCK).await;
    let outcome = commit
        .settle(
            Settlement::Handled(handled("m-1", correlation, vec![event], None)),
            &again.lock,
        )
        .await
        .unwrap();
    assert_eq!(outcome, Settled::AlreadyHandled);
    assert_eq!(transport.depth(&commit_queue()).await.unwrap(), 0, "completed");
    assert_eq!(transport.depth(&pull_request).await.unwrap(), 1, "not sent twice");
    test.finish().await;
}

#[tokio::test]
async fn a_lost_lock_rolls_back_the_idempotency_record_and_the_outbox() {
    let test = testing::migrated().await;
    let (store, transport, commit) = paired(&test).await;
    let correlation = Uuid::now_v7();
    transport
        .send(vec![OutboundMessage {
            destination: commit_queue(),
            broker_message_id: "in-1".into(),
            message_type: Some("CreateCommit".into()),
            correlation_id: None,
            body: b"{}".to_vec(),
            scheduled_at: None,
        }])
        .await
        .unwrap();
    let stale = receive_one(&transport, Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Another replica took it after the lock expired.
    let other = PostgresTransport::new(test.connect_again().await, 10);
    let current = receive_one(&other, LOCK).await;

    let event = envelope_message(
        Destination::Queue("pull-request".into()),
        "OpenPullRequest",
        correlation,
    );
    let saga = SagaWrite {
        kind: "release".into(),
        key: "r-1".into(),
        expected_version: 0,
        state: json!({"step": 1}),
        tenant_id: None,
    };
    let result = commit
        .settle(
            Settlement::Handled(handled("m-1", correlation, vec![event.clone()], Some(saga))),
            &stale.lock,
        )
        .await;
    assert!(
        matches!(result, Err(SettleError::LockLost { sequence, .. }) if sequence == stale.lock.sequence),
        "{result:?}"
    );
    assert!(
        !store.is_handled("commit", "m-1").await.unwrap(),
        "idempotency record rolled back"
    );
    assert_eq!(store.outbox_backlog().await.unwrap(), 0, "outbox rolled back");
    assert!(store.emitted(&correlation.to_string()).await.unwrap().is_empty());
    assert!(
        store.load_saga("release", "r-1").await.unwrap().is_none(),
        "saga rolled back"
    );
    assert!(store.timeline(&correlation.to_string()).await.unwrap().is_empty());
    let pull_request = Destination::Queue("pull-request".into());
    assert_eq!(transport.depth(&pull_request).await.unwrap(), 0, "nothing sent");
    // The current holder's lock is untouched and it can settle.
    assert_eq!(transport.depth(&commit_queue()).await.unwrap(), 1);
    let outcome = commit
        .settle(
            Settlement::Handled(handled("m-1", correlation, vec![event], None)),
            &current.lock,
        )
        .await
        .unwrap();
    assert_eq!(outcome, Settled::Written);
    assert_eq!(transport.depth(&commit_queue()).await.unwrap(), 0);
    assert_eq!(transport.depth(&pull_request).await.unwrap(), 1);
    test.finish().await;
}

#[tokio::test]
async fn a_saga_conflict_leaves_the_message_locked_and_nothing_written() {
    let test = testing::migrated().await;
    let (store, transport, commit) = paired(&test).await;
    let correlation = Uuid::now_v7();
    let write = |version| SagaWrite {
        kind: "release".into(),
        key: "r-1".into(),
        expected_version: version,
        state: json!({"version": version}),
        tenant_id: None,
    };
    store
        .commit_handled(handled("m-0", correlation, vec![], Some(write(0))))
        .await
        .unwrap();
    transport
        .send(vec![OutboundMessage {
            destination: commit_queue(),
            broker_message_id: "in-1".into(),
            message_type: Some("CreateCommit".into()),
            correlation_id: None,
            body: b"{}".to_vec(),
            scheduled_at: None,
        }])
        .await
        .unwrap();
    let received = receive_one(&transport, LOCK).await;
    let event = envelope_message(
        Destination::Queue("pull-request".into()),
        "OpenPullRequest",
        correlation,
    );
    let stale = commit
        .settle(
            Settlement::Handled(handled("m-1", correlation, vec![event.clone()], Some(write(0)))),
            &received.lock,
        )
        .await;
    assert!(matches!(stale, Ok(Settled::SagaConflict { found: 1, .. })), "{stale:?}");
    assert!(!store.is_handled("commit", "m-1").await.unwrap());
    assert_eq!(
        transport
            .depth(&Destination::Queue("pull-request".into()))
            .await
            .unwrap(),
        0
    );
    // Still locked by us: renewable, and the retry with the fresh version settles it.
    transport.renew_lock(&received.lock, LOCK).await.unwrap();
    let outcome = commit
        .settle(
            Settlement::Handled(handled("m-1", correlation, vec![event], Some(write(1)))),
            &received.lock,
        )
        .await
        .unwrap();
    assert_eq!(outcome, Settled::Written);
    assert_eq!(store.load_saga("release", "r-1").await.unwrap().unwrap().version, 2);
    test.finish().await;
}

/// Messages sent to the commit queue and received, one lock each.
async fn received(transport: &PostgresTransport, count: usize) -> Vec<crate::ports::transport::ReceivedMessage> {
    let sends = (0..count)
        .map(|n| OutboundMessage {
            destination: commit_queue(),
            broker_message_id: format!("in-{n}"),
            message_type: Some("CreateCommit".into()),
            correlation_id: None,
            body: b"{}".to_vec(),
            scheduled_at: None,
        })
        .collect();
    transport.send(sends).await.unwrap();
    let received = transport.receive(&commit_queue(), count, LOCK).await.unwrap();
    assert_eq!(received.len(), count);
    received
}

#[tokio::test]
async fn commits_that_meet_go_in_one_call_and_each_gets_its_own_answer() {
    let test = testing::migrated().await;
    let (store, transport, commit) = paired(&test).await;
    let correlation = Uuid::now_v7();
    let saga = |key: &str, version| SagaWrite {
        kind: "release".into(),
        key: key.into(),
        expected_version: version,
        state: json!({"version": version}),
        tenant_id: None,
    };
    store
        .commit_handled(handled("m-0", correlation, vec![], Some(saga("r-1", 0))))
        .await
        .unwrap();
    let messages = received(&transport, 7).await;

    // Writers of idempotency records wait behind this lock, so the
    // first two commits stay on their way and the others queue.
    let mut blocker = test.database.pool().begin().await.unwrap();
    query("LOCK TABLE bosun_handled IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let blocker_pid: i32 = query("SELECT pg_backend_pid()")
        .fetch_one(&mut *blocker)
        .await
        .unwrap()
        .get(0);
    let run = |handled: HandledMessage, lock: LockToken| {
        let commit = commit.clone();
        tokio::spawn(async move { commit.settle(Settlement::Handled(handled), &lock).await })
    };
    let blocked = |count: i64| {
        let pool = test.database.pool().clone();
        move || {
            let pool = pool.clone();
            async move {
                query("SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))")
                    .bind(blocker_pid)
                    .fetch_one(&pool)
                    .await
                    .unwrap()
                    .get::<i64, _>(0)
                    == count
            }
        }
    };
    let first = run(handled("m-1", correlation, vec![], None), messages[0].lock.clone());
    wait_until(blocked(1)).await;
    let second = run(handled("m-2", correlation, vec![], None), messages[1].lock.clone());
    wait_until(blocked(2)).await;
    let pull_request = Destination::Queue("pull-request".into());
    let event = || envelope_message(pull_request.clone(), "OpenPullRequest", correlation);
    let (sent_first, sent_second) = (event(), event());
    let stale_lock = LockToken {
        token: Uuid::now_v7(),
        ..messages[6].lock.clone()
    };
    let commits = [
        // A saga conflict: undone alone, the message stays locked.
        (
            handled("m-3", correlation, vec![event()], Some(saga("r-1", 0))),
            messages[2].lock.clone(),
        ),
        // A saga, written.
        (
            handled("m-4", correlation, vec![], Some(saga("r-2", 0))),
            messages[3].lock.clone(),
        ),
        // The same envelope again in the same call: already handled.
        (
            handled("m-4", correlation, vec![event()], None),
            messages[4].lock.clone(),
        ),
        // Two outgoing messages after commits that sent none or were
        // undone: sent, and recorded as this message's only.
        (
            handled("m-5", correlation, vec![sent_first.clone(), sent_second.clone()], None),
            messages[5].lock.clone(),
        ),
        // A lock that is not the message's: nothing written.
        (handled("m-6", correlation, vec![event()], None), stale_lock),
    ];
    let mut queued = Vec::new();
    for (handled, lock) in commits {
        queued.push(run(handled, lock));
        let count = queued.len();
        wait_until(|| async { commit.batches.waiting() == count }).await;
    }
    blocker.commit().await.unwrap();

    assert_eq!(first.await.unwrap().unwrap(), Settled::Written);
    assert_eq!(second.await.unwrap().unwrap(), Settled::Written);
    let mut answers = Vec::new();
    for queued in queued {
        answers.push(queued.await.unwrap());
    }
    assert_eq!(
        commit.batches.largest_call(),
        5,
        "the five queued commits went in one call"
    );
    assert_eq!(commit.batches.calls(), (1, 0), "bosun_commit_many answered that call");
    assert!(
        matches!(&answers[0], Ok(Settled::SagaConflict { key, expected: 0, found: 1, .. }) if key == "r-1"),
        "{answers:?}"
    );
    assert_eq!(answers[1].as_ref().unwrap(), &Settled::Written);
    assert_eq!(answers[2].as_ref().unwrap(), &Settled::AlreadyHandled);
    assert_eq!(answers[3].as_ref().unwrap(), &Settled::Written);
    assert!(
        matches!(&answers[4], Err(SettleError::LockLost { sequence, .. }) if *sequence == messages[6].lock.sequence),
        "{answers:?}"
    );

    // What each wrote, and only that.
    for (consumer_message, handled) in [
        ("m-1", true),
        ("m-2", true),
        ("m-3", false),
        ("m-4", true),
        ("m-5", true),
        ("m-6", false),
    ] {
        assert_eq!(
            store.is_handled("commit", consumer_message).await.unwrap(),
            handled,
            "{consumer_message}"
        );
    }
    assert_eq!(
        store.load_saga("release", "r-1").await.unwrap().unwrap().version,
        1,
        "the conflict wrote nothing"
    );
    assert_eq!(store.load_saga("release", "r-2").await.unwrap().unwrap().version, 1);
    let recorded: Vec<(String, String)> =
        query("SELECT source_message_id, broker_message_id FROM bosun_outbox ORDER BY broker_message_id")
            .fetch_all(test.database.pool())
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
    let mut expected = vec![
        ("m-5".to_owned(), sent_first.broker_message_id.clone()),
        ("m-5".to_owned(), sent_second.broker_message_id.clone()),
    ];
    expected.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(recorded, expected, "m-5's two messages, recorded as its own");
    assert_eq!(
        transport.depth(&pull_request).await.unwrap(),
        2,
        "m-5's two messages, sent"
    );
    let lines: Vec<_> = store
        .timeline(&correlation.to_string())
        .await
        .unwrap()
        .into_iter()
        .map(|line| (line.message_id, line.status))
        .collect();
    let sent_ids =
        [&sent_first, &sent_second].map(|sent| Envelope::from_slice(&sent.body).unwrap().message_id.to_string());
    for (message_id, status) in [
        ("m-0", TimelineStatus::Completed),
        ("m-1", TimelineStatus::Completed),
        ("m-2", TimelineStatus::Completed),
        ("m-4", TimelineStatus::Completed),
        ("m-5", TimelineStatus::Completed),
        (sent_ids[0].as_str(), TimelineStatus::Sent),
        (sent_ids[1].as_str(), TimelineStatus::Sent),
    ] {
        assert!(
            lines.contains(&(message_id.to_owned(), status)),
            "{message_id}: {lines:?}"
        );
    }
    assert_eq!(lines.len(), 7, "{lines:?}");
    // Settled: the ones written or already handled; still locked by us:
    // the conflict (to run again) and the one whose lock was not ours.
    assert_eq!(transport.depth(&commit_queue()).await.unwrap(), 2);
    transport.renew_lock(&messages[2].lock, LOCK).await.unwrap();
    test.finish().await;
}

/// Waits (up to 10 s) until `done` says so.
async fn wait_until<F, Fut>(mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done().await {
        assert!(tokio::time::Instant::now() < deadline, "not reached in 10 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn unknown_destinations_stay_in_the_outbox() {
    let test = testing::migrated().await;
    let (store, transport, commit) = paired(&test).await;
    transport
        .send(vec![OutboundMessage {
            destination: commit_queue(),
            broker_message_id: "in-1".into(),
            message_type: Some("CreateCommit".into()),
            correlation_id: None,
            body: b"{}".to_vec(),
            scheduled_at: None,
        }])
        .await
        .unwrap();
    let received = receive_one(&transport, LOCK).await;
    let correlation = Uuid::now_v7();
    let lost = envelope_message(
        Destination::Queue("no-such-queue".into()),
        "OpenPullRequest",
        correlation,
    );
    let outcome = commit
        .settle(
            Settlement::Handled(handled("m-1", correlation, vec![lost], None)),
            &received.lock,
        )
        .await
        .unwrap();
    assert_eq!(outcome, Settled::Written);
    assert_eq!(
        store.outbox_backlog().await.unwrap(),
        1,
        "left for the dispatcher to report"
    );
    test.finish().await;
}

#[tokio::test]
async fn the_claim_says_whether_the_message_was_handled_when_it_shares_the_store_database() {
    let test = testing::migrated().await;
    let (_store, transport, commit) = paired(&test).await;
    let checking = transport.clone().checking_handled_in_claim();
    let id = Uuid::now_v7().to_string();
    let send = |broker_id: String| OutboundMessage {
        destination: commit_queue(),
        broker_message_id: broker_id,
        message_type: Some("CreateCommit".into()),
        correlation_id: None,
        body: b"{}".to_vec(),
        scheduled_at: None,
    };
    let lock = Duration::from_secs(30);

    // Not handled yet: the claim says so, for the envelope's id.
    checking.send(vec![send(id.clone())]).await.unwrap();
    let first = checking.receive(&commit_queue(), 1, lock).await.unwrap().remove(0);
    let check = first.handled.clone().expect("the claim looked the record up");
    assert_eq!((check.message_id.as_str(), check.handled), (id.as_str(), false));
    let status = commit
        .settle(
            Settlement::Handled(handled(&id, Uuid::now_v7(), vec![], None)),
            &first.lock,
        )
        .await
        .unwrap();
    assert_eq!(status, Settled::Written);

    // A retry copy of the same envelope (`<id>.retry-1`) is reported as
    // handled, under the envelope's id.
    checking.send(vec![send(format!("{id}.retry-1"))]).await.unwrap();
    let again = checking.receive(&commit_queue(), 1, lock).await.unwrap().remove(0);
    let check = again.handled.clone().expect("the claim looked the record up");
    assert_eq!((check.message_id.as_str(), check.handled), (id.as_str(), true));
    checking.complete(&again.lock).await.unwrap();

    // Without the option (another store's database), the transport does
    // not say: the host asks the store.
    transport.send(vec![send(format!("{id}.retry-2"))]).await.unwrap();
    let plain = transport.receive(&commit_queue(), 1, lock).await.unwrap().remove(0);
    assert_eq!(plain.handled, None);
    test.finish().await;
}
