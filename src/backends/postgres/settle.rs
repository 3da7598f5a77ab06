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
mod tests;
