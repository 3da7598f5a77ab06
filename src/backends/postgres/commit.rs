//! [`PostgresCommit`]: the [`Commit`] of a store and a transport in one
//! PostgreSQL database, in one transaction.

use async_trait::async_trait;
use bosun_contracts::Envelope;
use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_postgres::PgConnection;
use time::OffsetDateTime;

use crate::backends::postgres::PostgresDatabase;
use crate::backends::postgres::queue::{Enqueued, KnownEntities, enqueue};
use crate::backends::postgres::store::handled::write_saga;
use crate::backends::postgres::store::outbox::insert_outbox;
use crate::backends::postgres::store::timeline::insert_timeline;
use crate::ports::commit::{Commit, CommitError, CommitStatus};
use crate::ports::store::{HandledMessage, OutboxPurpose, StoreError, TimelineEntry, TimelineStatus, doing};
use crate::ports::transport::{LockToken, OutboundMessage};

/// The commit for the PostgreSQL store with the PostgreSQL transport on the
/// same database. In one transaction: completes the received message
/// (deletes it, if its lock is still held; the row lock keeps competing
/// receivers away until the end), writes the idempotency record, the saga
/// (version checked), the outgoing messages straight into their queues or
/// subscriptions (with duplicate detection; recorded in the outbox as
/// already dispatched, with their `sent` timeline lines) and the timeline.
///
/// **Guarantee: exactly once per delivery.** Either all of it is written
/// and the message is gone, or nothing is: [`CommitError::LockLost`] (the
/// lock expired or another receiver took it; the message will be delivered
/// again), [`CommitStatus::SagaConflict`] (the message stays locked),
/// [`CommitError::Store`]. An outgoing message to an entity the transport
/// does not have is left in the outbox for the dispatcher, which reports
/// it.
#[derive(Debug, Clone)]
pub struct PostgresCommit {
    database: PostgresDatabase,
}

impl PostgresCommit {
    /// The commit over `database`, which the store and the transport must
    /// both use (the store's tables and the transport's are written in one
    /// transaction).
    pub fn new(database: PostgresDatabase) -> Self {
        Self { database }
    }
}

#[async_trait]
impl Commit for PostgresCommit {
    async fn commit(&self, handled: HandledMessage, lock: &LockToken) -> Result<CommitStatus, CommitError> {
        let doing = || doing::commit_handled(&handled);
        if handled.saga.is_none() && handled.outbox.is_empty() {
            // Nothing but the settlement, the idempotency record and the
            // timeline: one statement, atomic on its own (one round trip).
            let mut conn = self
                .database
                .pool()
                .acquire()
                .await
                .map_err(|err| StoreError::from(err).doing(doing()))?;
            return settle_first(&mut conn, &handled, lock).await.map_err(|err| match err {
                CommitError::Store(err) => CommitError::Store(err.doing(doing())),
                other => other,
            });
        }
        let mut tx = self
            .database
            .pool()
            .begin()
            .await
            .map_err(|err| StoreError::from(err).doing(doing()))?;
        match settle_in(&mut tx, &handled, lock).await {
            Ok(status @ (CommitStatus::Written | CommitStatus::AlreadyHandled)) => {
                tx.commit().await.map_err(|err| StoreError::from(err).doing(doing()))?;
                Ok(status)
            }
            Ok(conflict @ CommitStatus::SagaConflict { .. }) => {
                let _ = tx.rollback().await;
                Ok(conflict)
            }
            Err(err) => {
                // Release the message row and the saga at once.
                let _ = tx.rollback().await;
                Err(match err {
                    CommitError::Store(err) => CommitError::Store(err.doing(doing())),
                    other => other,
                })
            }
        }
    }
}

/// The body of [`PostgresCommit::commit`], inside its transaction.
async fn settle_in(
    conn: &mut PgConnection,
    handled: &HandledMessage,
    lock: &LockToken,
) -> Result<CommitStatus, CommitError> {
    // First: the message is deleted (its row lock keeps competing
    // receivers away until commit), the idempotency record and the
    // timeline written, in one statement.
    match settle_first(conn, handled, lock).await? {
        CommitStatus::Written => {}
        other => return Ok(other),
    }
    match write_saga(conn, handled).await {
        Ok(()) => {}
        Err(StoreError::SagaConflict {
            kind,
            key,
            expected,
            found,
        }) => {
            return Ok(CommitStatus::SagaConflict {
                kind,
                key,
                expected,
                found,
            });
        }
        Err(err) => return Err(err.into()),
    }
    let now = OffsetDateTime::now_utc();
    let mut sent_lines = Vec::new();
    let mut known = KnownEntities::default();
    for message in &handled.outbox {
        let dispatched = match enqueue(conn, &mut known, message).await.map_err(StoreError::from)? {
            Enqueued::Sent => {
                sent_lines.extend(sent_line(message, now));
                true
            }
            Enqueued::Duplicate => true,
            Enqueued::NoSuchEntity => false,
        };
        insert_outbox(
            conn,
            Some(&handled.consumer),
            Some(&handled.message_id),
            OutboxPurpose::Emitted,
            message,
            dispatched,
        )
        .await
        .map_err(StoreError::from)?;
    }
    insert_timeline(conn, &sent_lines).await.map_err(StoreError::from)?;
    Ok(CommitStatus::Written)
}

/// Deletes the message held under `lock`, then writes the idempotency
/// record and `handled.timeline` (notifying `bosun_timeline` as
/// `insert_timeline` does), in one statement: [`CommitError::LockLost`]
/// when the lock is no longer held (nothing written),
/// [`CommitStatus::AlreadyHandled`] when the record was there (the message
/// is deleted, nothing else written), else [`CommitStatus::Written`].
async fn settle_first(
    conn: &mut PgConnection,
    handled: &HandledMessage,
    lock: &LockToken,
) -> Result<CommitStatus, CommitError> {
    let lines = &handled.timeline;
    let row = query(
        "WITH done AS (
            DELETE FROM bosun_messages
            WHERE sequence = $1 AND lock_token = $2 AND locked_until > now() AND NOT dead_lettered
            RETURNING 1
         ), recorded AS (
            INSERT INTO bosun_handled (consumer, message_id, handled_at)
            SELECT $3, $4, now() WHERE EXISTS (SELECT 1 FROM done)
            ON CONFLICT DO NOTHING
            RETURNING 1
         ), lines AS (
            INSERT INTO bosun_timeline (correlation_id, message_id, message_type, consumer, status, attempt, at, detail)
            SELECT * FROM unnest($5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[],
                                 $11::timestamptz[], $12::text[])
            WHERE EXISTS (SELECT 1 FROM recorded)
            RETURNING correlation_id
         ), woken AS (
            -- Waits on these deliveries (the event stream, MCP waits) are
            -- woken when this commits, as by every timeline insert.
            SELECT pg_notify('bosun_timeline', correlation_id) FROM lines
         )
         SELECT EXISTS (SELECT 1 FROM done), EXISTS (SELECT 1 FROM recorded), (SELECT count(*) FROM woken)",
    )
    .bind(lock.sequence)
    .bind(lock.token)
    .bind(&handled.consumer)
    .bind(&handled.message_id)
    .bind(
        lines
            .iter()
            .map(|line| line.correlation_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(lines.iter().map(|line| line.message_id.as_str()).collect::<Vec<_>>())
    .bind(lines.iter().map(|line| line.message_type.as_str()).collect::<Vec<_>>())
    .bind(lines.iter().map(|line| line.consumer.as_deref()).collect::<Vec<_>>())
    .bind(lines.iter().map(|line| line.status.as_str()).collect::<Vec<_>>())
    .bind(lines.iter().map(|line| i64::from(line.attempt)).collect::<Vec<_>>())
    .bind(lines.iter().map(|line| line.at).collect::<Vec<_>>())
    .bind(lines.iter().map(|line| line.detail.as_deref()).collect::<Vec<_>>())
    .fetch_one(&mut *conn)
    .await
    .map_err(StoreError::from)?;
    let deleted: bool = row.try_get(0).map_err(StoreError::from)?;
    let recorded: bool = row.try_get(1).map_err(StoreError::from)?;
    Ok(match (deleted, recorded) {
        (false, _) => {
            return Err(CommitError::LockLost {
                entity: lock.entity.path(),
                sequence: lock.sequence,
            });
        }
        (true, false) => CommitStatus::AlreadyHandled,
        (true, true) => CommitStatus::Written,
    })
}

/// The `sent` line the outbox dispatcher would have written for `message`
/// (an emitted message: retries never come through a commit).
fn sent_line(message: &OutboundMessage, now: OffsetDateTime) -> Option<TimelineEntry> {
    let envelope = Envelope::from_slice(&message.body).ok()?;
    let detail = match message.scheduled_at {
        Some(at) if at > now => format!("to {} (scheduled for {at})", message.destination),
        _ => format!("to {}", message.destination),
    };
    Some(TimelineEntry {
        correlation_id: envelope.correlation_id.to_string(),
        message_id: envelope.message_id.to_string(),
        message_type: envelope.message_type.clone(),
        consumer: None,
        status: TimelineStatus::Sent,
        attempt: envelope.attempt,
        at: now,
        detail: Some(detail),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use bosun_contracts::Destination;
    use bosun_contracts::routing::EVENTS_TOPIC;
    use serde_json::json;
    use uuid::Uuid;

    use super::*;
    use crate::backends::postgres::store::PostgresStore;
    use crate::backends::postgres::testing::{self, TestDatabase};
    use crate::backends::postgres::transport::PostgresTransport;
    use crate::backends::sqlite::transport::EmbeddedTransport;
    use crate::ports::behaviour::commit::{Pairing, run_all};
    use crate::ports::commit::StoreThenComplete;
    use crate::ports::store::{SagaWrite, Store};
    use crate::ports::transport::{Topology, Transport};

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
                    commit: Arc::new(PostgresCommit::new(transport.database().clone())),
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
                let transport: Arc<dyn Transport> = Arc::new(EmbeddedTransport::open(&messages, 10).unwrap());
                schemas.lock().unwrap().push(test);
                Pairing {
                    commit: Arc::new(StoreThenComplete::new(Arc::clone(&store), Arc::clone(&transport))),
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
    async fn paired(test: &TestDatabase) -> (PostgresStore, PostgresTransport, PostgresCommit) {
        let transport = PostgresTransport::new(test.database.clone(), 10);
        transport.ensure_topology(&Topology::from_routing()).await.unwrap();
        let commit = PostgresCommit::new(transport.database().clone());
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
            .commit(
                handled("m-1", correlation, vec![event.clone()], Some(saga)),
                &received.lock,
            )
            .await
            .unwrap();
        assert_eq!(outcome, CommitStatus::Written);

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
            .commit(handled("m-1", correlation, vec![event], None), &again.lock)
            .await
            .unwrap();
        assert_eq!(outcome, CommitStatus::AlreadyHandled);
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
            .commit(
                handled("m-1", correlation, vec![event.clone()], Some(saga)),
                &stale.lock,
            )
            .await;
        assert!(
            matches!(result, Err(CommitError::LockLost { sequence, .. }) if sequence == stale.lock.sequence),
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
            .commit(handled("m-1", correlation, vec![event], None), &current.lock)
            .await
            .unwrap();
        assert_eq!(outcome, CommitStatus::Written);
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
            .commit(
                handled("m-1", correlation, vec![event.clone()], Some(write(0))),
                &received.lock,
            )
            .await;
        assert!(
            matches!(stale, Ok(CommitStatus::SagaConflict { found: 1, .. })),
            "{stale:?}"
        );
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
            .commit(handled("m-1", correlation, vec![event], Some(write(1))), &received.lock)
            .await
            .unwrap();
        assert_eq!(outcome, CommitStatus::Written);
        assert_eq!(store.load_saga("release", "r-1").await.unwrap().unwrap().version, 2);
        test.finish().await;
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
            .commit(handled("m-1", correlation, vec![lost], None), &received.lock)
            .await
            .unwrap();
        assert_eq!(outcome, CommitStatus::Written);
        assert_eq!(
            store.outbox_backlog().await.unwrap(),
            1,
            "left for the dispatcher to report"
        );
        test.finish().await;
    }
}
