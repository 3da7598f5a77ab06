//! [`PostgresSettle`]: the [`Settle`] of a store and a transport in one
//! PostgreSQL database, each settlement in one transaction.

use async_trait::async_trait;
use bosun_contracts::Envelope;
use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_postgres::PgConnection;
use time::OffsetDateTime;

use bosun_contracts::Destination;
use sqlx_core::types::Json;
use sqlx_postgres::PgDatabaseError;

use crate::backends::postgres::PostgresDatabase;
use crate::backends::postgres::notify::Wakes;
use crate::backends::postgres::queue::{complete_locked, dead_letter_locked};
use crate::backends::postgres::store::dead_letters::record_dead_letter_in;
use crate::backends::postgres::store::handled::record_retry_in;
use crate::backends::postgres::store::timeline::{TimelineColumns, insert_timeline};
use crate::backends::postgres::transport::PostgresTransport;
use crate::ports::settle::{Halts, Settle, SettleError, Settled, Settlement, transport_description};
use crate::ports::store::{HandledMessage, SagaWrite, StoreError, TimelineEntry, TimelineStatus, doing};
use crate::ports::transport::{LockToken, OutboundMessage, Transport};

mod batch;

/// The settle for the PostgreSQL store with the PostgreSQL transport on the
/// same database: every settlement is one transaction.
///
/// - **A handling** ([`Settlement::Handled`]) completes the received
///   message (deletes it, if its lock is still held; the row lock keeps
///   competing receivers away until the end), writes the idempotency
///   record, the saga (version checked), the outgoing messages straight
///   into their queues or subscriptions (with duplicate detection; recorded
///   in the outbox as already dispatched, with their `sent` timeline lines)
///   and the timeline.
/// - **A retry** completes the received message and writes the attempt,
///   the retry (in the outbox, for the dispatcher) and its timeline line.
/// - **A dead letter** marks the received message dead-lettered and writes
///   the dead letter and its timeline line.
/// - **A duplicate** completes the message and writes its timeline line.
///
/// **Guarantee: exactly once per delivery.** Either all of it is written
/// and the message is settled, or nothing is: [`SettleError::LockLost`]
/// (the lock expired or another receiver took it; the message will be
/// delivered again), [`Settled::SagaConflict`] (the message stays
/// locked), [`SettleError::Store`]. An outgoing message to an entity the
/// transport does not have is left in the outbox for the dispatcher, which
/// reports it.
///
/// **Commits of handlings that meet are batched.** A commit goes to the
/// database at once while fewer than [`batch::IN_FLIGHT`] calls are on
/// their way; commits that arrive meanwhile wait and go together in the
/// next call (`bosun_commit_many`, migration 12: one round trip, one
/// transaction, one WAL flush for all of them), each written as its own
/// call would have been, a saga conflict undoing only its own message. So
/// one handler's commits cost what they did, and under load the server
/// stops paying a round trip, a parameter bind and a transaction per
/// message. Failures (retries, dead letters) are rare and go alone.
#[derive(Debug, Clone)]
pub struct PostgresSettle {
    transport: PostgresTransport,
    batches: std::sync::Arc<batch::Batches>,
    halts: Halts,
}

impl PostgresSettle {
    /// The settle over `transport`'s database, which the store must use
    /// too (the store's tables and the transport's are written in one
    /// transaction).
    pub fn new(transport: &PostgresTransport) -> Self {
        Self {
            transport: transport.clone(),
            batches: std::sync::Arc::default(),
            halts: Halts::default(),
        }
    }

    /// Stops at `halts` (crash tests).
    pub fn halting(mut self, halts: Halts) -> Self {
        self.halts = halts;
        self
    }

    fn database(&self) -> &PostgresDatabase {
        self.transport.database()
    }

    /// A retry, a dead letter or a duplicate: the message settled and the
    /// settlement's rows written, in one transaction.
    async fn settle_alone(&self, settlement: &Settlement, lock: &LockToken) -> Result<Settled, SettleError> {
        let database = self.database();
        let doing = || {
            format!(
                "settling ({}) {} message {}",
                settlement.kind(),
                lock.entity,
                lock.sequence
            )
        };
        let store = |err: sqlx_core::Error| SettleError::Store(StoreError::from(err).doing(doing()));
        let mut tx = database.pool().begin().await.map_err(store)?;
        let mut wakes = Wakes::default();
        let settled = match settlement {
            Settlement::DeadLetter { record, .. } => {
                dead_letter_locked(&mut *tx, lock, &record.reason, transport_description(record)).await
            }
            _ => complete_locked(&mut *tx, lock).await,
        }
        .map_err(store)?;
        if !settled {
            // Nothing written: the transaction rolls back when dropped.
            return Err(SettleError::lock_lost(lock));
        }
        let written = match settlement {
            Settlement::Retry(retry) => record_retry_in(&mut tx, retry, &mut wakes).await,
            Settlement::DeadLetter { record, timeline } => {
                record_dead_letter_in(&mut tx, record, timeline.as_ref(), &mut wakes).await
            }
            Settlement::Duplicate(line) => insert_timeline(&mut tx, std::slice::from_ref(line), &mut wakes)
                .await
                .map_err(StoreError::from),
            Settlement::Handled(_) | Settlement::Abandon => Ok(()),
        };
        written.map_err(|err| SettleError::Store(err.doing(doing())))?;
        self.halts.after_store_writes(settlement).await;
        tx.commit().await.map_err(store)?;
        database.wake(wakes);
        Ok(match settlement {
            Settlement::Duplicate(_) => Settled::AlreadyHandled,
            _ => Settled::Written,
        })
    }
}

#[async_trait]
impl Settle for PostgresSettle {
    async fn settle(&self, settlement: Settlement, lock: &LockToken) -> Result<Settled, SettleError> {
        match settlement {
            Settlement::Handled(handled) => {
                let message_id = self.halts.after_state_commit.then(|| handled.message_id.clone());
                let status = batch::commit(self.database(), &self.batches, handled, lock.clone()).await?;
                if let Some(message_id) = message_id.filter(|_| status == Settled::Written) {
                    self.halts.after_handling_written(&message_id).await;
                }
                Ok(status)
            }
            Settlement::Abandon => {
                self.transport.abandon(lock).await?;
                Ok(Settled::Written)
            }
            other => self.settle_alone(&other, lock).await,
        }
    }
}

/// One commit alone: one `bosun_commit` call on a connection of its own,
/// and its wake-ups sent after it.
async fn commit_alone(
    database: &PostgresDatabase,
    handled: &HandledMessage,
    lock: &LockToken,
) -> Result<Settled, SettleError> {
    let doing = || doing::commit_handled(handled);
    let mut conn = database
        .pool()
        .acquire()
        .await
        .map_err(|err| StoreError::from(err).doing(doing()))?;
    let (status, wakes) = commit_in_one_statement(&mut conn, handled, Some(lock))
        .await
        .map_err(|err| match err {
            SettleError::Store(err) => SettleError::Store(err.doing(doing())),
            other => other,
        })?;
    drop(conn);
    database.wake(wakes);
    Ok(status)
}

/// The SQLSTATE `bosun_commit` raises on a saga version mismatch (its
/// detail is the stored version).
const SAGA_CONFLICT: &str = "BS409";

/// One call of `bosun_commit` (migration 7): the whole commit in one
/// statement, so one round trip, one transaction and one WAL flush. With
/// `settle` (the PostgreSQL transport's lock on the received message), the
/// message is deleted and the outgoing messages written into their queues
/// in the same statement; without it (another transport) they are left in
/// the outbox for the dispatcher. Returns the status and what the commit
/// woke (sent by the caller: after the statement, the commit is done).
pub(crate) async fn commit_in_one_statement(
    conn: &mut PgConnection,
    handled: &HandledMessage,
    settle: Option<&LockToken>,
) -> Result<(Settled, Wakes), SettleError> {
    let now = OffsetDateTime::now_utc();
    let outbox = OutboxColumns::of(&handled.outbox, now);
    let lines = TimelineColumns::of(&handled.timeline);
    let saga = handled.saga.as_ref();
    let result = bind_outbox_and_lines(
        query(
            "SELECT outcome, woken FROM bosun_commit(
            $1, $2, $3, $4, $5, $6,
            $7, $8, $9, $10, $11,
            $12, $13, $14, $15, $16, $17, $18, $19, $20,
            $21, $22, $23, $24, $25, $26,
            $27, $28, $29, $30, $31, $32, $33, $34)",
        )
        .bind(settle.map(|lock| lock.sequence))
        .bind(settle.map(|lock| lock.token))
        .bind(settle.is_some())
        .bind(&handled.consumer)
        .bind(&handled.message_id)
        .bind(&handled.message_type)
        .bind(saga.map(|saga| saga.kind.as_str()))
        .bind(saga.map(|saga| saga.key.as_str()))
        .bind(saga.map(|saga| saga.expected_version))
        .bind(saga.map(|saga| Json(&saga.state)))
        .bind(saga.and_then(|saga| saga.tenant_id.as_deref())),
        &outbox,
        now,
        &lines,
    )
    .fetch_one(&mut *conn)
    .await;
    let row = match result {
        Ok(row) => row,
        Err(err) => {
            if let Some(found) = saga_conflict(&err)
                && let Some(saga) = saga
            {
                return Ok((saga_conflict_status(saga, found), Wakes::default()));
            }
            return Err(StoreError::from(err).into());
        }
    };
    let outcome: String = row.try_get(0).map_err(StoreError::from)?;
    let woken: Vec<String> = row.try_get(1).map_err(StoreError::from)?;
    let mut wakes = Wakes::default();
    let status = match outcome.as_str() {
        "lock_lost" => {
            let (entity, sequence) = settle.map_or((String::new(), 0), |lock| (lock.entity.path(), lock.sequence));
            return Err(SettleError::LockLost { entity, sequence });
        }
        "already_handled" => Settled::AlreadyHandled,
        _ => {
            written_wakes(&mut wakes, woken, &handled.timeline, &outbox.sent_correlation_ids);
            Settled::Written
        }
    };
    Ok((status, wakes))
}

/// What a written commit woke: the entities `bosun_commit` wrote a message
/// visible now into, and the deliveries that got a timeline line (its own
/// lines, and the `sent` lines of what it sent).
fn written_wakes(wakes: &mut Wakes, woken: Vec<String>, timeline: &[TimelineEntry], sent: &[Option<String>]) {
    for entity in woken {
        wakes.entity(entity);
    }
    for line in timeline {
        wakes.timeline(line.correlation_id.as_str());
    }
    for correlation_id in sent.iter().flatten() {
        wakes.timeline(correlation_id.as_str());
    }
}

/// A statement on the PostgreSQL connection, with its arguments.
type PgQuery<'q> = sqlx_core::query::Query<'q, sqlx_postgres::Postgres, sqlx_postgres::PgArguments>;

/// Binds what `bosun_commit` and `bosun_commit_many` both end with: the
/// outgoing messages' columns, the time of their `sent` lines, and the
/// timeline lines' columns.
fn bind_outbox_and_lines<'q>(
    query: PgQuery<'q>,
    outbox: &OutboxColumns<'_>,
    now: OffsetDateTime,
    lines: &TimelineColumns<'_>,
) -> PgQuery<'q> {
    query
        .bind(&outbox.paths)
        .bind(&outbox.kinds)
        .bind(&outbox.names)
        .bind(&outbox.subscriptions)
        .bind(&outbox.broker_message_ids)
        .bind(&outbox.message_types)
        .bind(&outbox.correlation_ids)
        .bind(&outbox.bodies)
        .bind(&outbox.scheduled_at)
        .bind(&outbox.sent_correlation_ids)
        .bind(&outbox.sent_message_ids)
        .bind(&outbox.sent_message_types)
        .bind(&outbox.sent_attempts)
        .bind(&outbox.sent_details)
        .bind(now)
        .bind(&lines.correlation_ids)
        .bind(&lines.message_ids)
        .bind(&lines.message_types)
        .bind(&lines.consumers)
        .bind(&lines.statuses)
        .bind(&lines.attempts)
        .bind(&lines.at)
        .bind(&lines.details)
}

/// The answer to a commit whose saga write found the saga at `found`.
fn saga_conflict_status(saga: &SagaWrite, found: i64) -> Settled {
    Settled::SagaConflict {
        kind: saga.kind.clone(),
        key: saga.key.clone(),
        expected: saga.expected_version,
        found,
    }
}

/// The stored version a `bosun_commit` saga conflict names, if `err` is one.
fn saga_conflict(err: &sqlx_core::Error) -> Option<i64> {
    let database = err.as_database_error()?;
    if database.code().as_deref() != Some(SAGA_CONFLICT) {
        return None;
    }
    let detail = database.try_downcast_ref::<PgDatabaseError>()?.detail()?;
    detail.parse().ok()
}

/// The outgoing messages of a commit as one array per column, with the
/// `sent` line of each (none for a body that is not an envelope).
struct OutboxColumns<'a> {
    paths: Vec<String>,
    kinds: Vec<&'static str>,
    names: Vec<&'a str>,
    subscriptions: Vec<Option<&'a str>>,
    broker_message_ids: Vec<&'a str>,
    message_types: Vec<Option<&'a str>>,
    correlation_ids: Vec<Option<&'a str>>,
    bodies: Vec<&'a [u8]>,
    scheduled_at: Vec<Option<OffsetDateTime>>,
    sent_correlation_ids: Vec<Option<String>>,
    sent_message_ids: Vec<Option<String>>,
    sent_message_types: Vec<Option<String>>,
    sent_attempts: Vec<Option<i64>>,
    sent_details: Vec<Option<String>>,
}

impl<'a> OutboxColumns<'a> {
    /// The columns of `messages`, in order (those of several commits, one
    /// after the other, for a batch).
    fn of(messages: impl IntoIterator<Item = &'a OutboundMessage>, now: OffsetDateTime) -> Self {
        let messages = messages.into_iter();
        let count = messages.size_hint().0;
        let mut columns = Self {
            paths: Vec::with_capacity(count),
            kinds: Vec::with_capacity(count),
            names: Vec::with_capacity(count),
            subscriptions: Vec::with_capacity(count),
            broker_message_ids: Vec::with_capacity(count),
            message_types: Vec::with_capacity(count),
            correlation_ids: Vec::with_capacity(count),
            bodies: Vec::with_capacity(count),
            scheduled_at: Vec::with_capacity(count),
            sent_correlation_ids: Vec::with_capacity(count),
            sent_message_ids: Vec::with_capacity(count),
            sent_message_types: Vec::with_capacity(count),
            sent_attempts: Vec::with_capacity(count),
            sent_details: Vec::with_capacity(count),
        };
        for message in messages {
            let (kind, name, subscription) = match &message.destination {
                Destination::Queue(name) => ("queue", name.as_str(), None),
                Destination::Topic(topic) => ("topic", topic.as_str(), None),
                Destination::Subscription { topic, subscription } => {
                    ("subscription", topic.as_str(), Some(subscription.as_str()))
                }
            };
            columns.paths.push(message.destination.path());
            columns.kinds.push(kind);
            columns.names.push(name);
            columns.subscriptions.push(subscription);
            columns.broker_message_ids.push(&message.broker_message_id);
            columns.message_types.push(message.message_type.as_deref());
            columns.correlation_ids.push(message.correlation_id.as_deref());
            columns.bodies.push(&message.body);
            columns.scheduled_at.push(message.scheduled_at);
            let sent = sent_line(message, now);
            columns
                .sent_correlation_ids
                .push(sent.as_ref().map(|line| line.correlation_id.clone()));
            columns
                .sent_message_ids
                .push(sent.as_ref().map(|line| line.message_id.clone()));
            columns
                .sent_message_types
                .push(sent.as_ref().map(|line| line.message_type.clone()));
            columns
                .sent_attempts
                .push(sent.as_ref().map(|line| i64::from(line.attempt)));
            columns.sent_details.push(sent.and_then(|line| line.detail));
        }
        columns
    }
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
    use crate::ports::behaviour::settle::{Pairing, run_all};
    use crate::ports::settle::StoreThenSettle;
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
                let transport: Arc<dyn Transport> = Arc::new(EmbeddedTransport::open(&messages, 10).unwrap());
                schemas.lock().unwrap().push(test);
                Pairing {
                    settle: Arc::new(StoreThenSettle::new(Arc::clone(&store), Arc::clone(&transport))),
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
}
