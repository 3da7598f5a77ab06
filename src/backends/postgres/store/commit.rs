//! The commit of a handled message in one statement (`bosun_commit`,
//! migration 7), shared by the store's own commit and the settle of the
//! PostgreSQL backends ([`crate::backends::postgres::settle`]).

use bosun_contracts::{Destination, Envelope};
use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_core::types::Json;
use sqlx_postgres::{PgConnection, PgDatabaseError};
use time::OffsetDateTime;

use crate::backends::postgres::notify::Wakes;
use crate::backends::postgres::store::timeline::TimelineColumns;
use crate::ports::settle::{SettleError, Settled};
use crate::ports::store::{HandledMessage, SagaWrite, StoreError, TimelineEntry, TimelineStatus};
use crate::ports::transport::{LockToken, OutboundMessage};

/// The SQLSTATE `bosun_commit` raises on a saga version mismatch (its
/// detail is the stored version).
pub(crate) const SAGA_CONFLICT: &str = "BS409";

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
pub(crate) fn written_wakes(
    wakes: &mut Wakes,
    woken: Vec<String>,
    timeline: &[TimelineEntry],
    sent: &[Option<String>],
) {
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
pub(crate) fn bind_outbox_and_lines<'q>(
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
pub(crate) fn saga_conflict_status(saga: &SagaWrite, found: i64) -> Settled {
    Settled::SagaConflict {
        kind: saga.kind.clone(),
        key: saga.key.clone(),
        expected: saga.expected_version,
        found,
    }
}

/// The stored version a `bosun_commit` saga conflict names, if `err` is one.
pub(crate) fn saga_conflict(err: &sqlx_core::Error) -> Option<i64> {
    let database = err.as_database_error()?;
    if database.code().as_deref() != Some(SAGA_CONFLICT) {
        return None;
    }
    let detail = database.try_downcast_ref::<PgDatabaseError>()?.detail()?;
    detail.parse().ok()
}

/// The outgoing messages of a commit as one array per column, with the
/// `sent` line of each (none for a body that is not an envelope).
pub(crate) struct OutboxColumns<'a> {
    pub(crate) paths: Vec<String>,
    pub(crate) kinds: Vec<&'static str>,
    pub(crate) names: Vec<&'a str>,
    pub(crate) subscriptions: Vec<Option<&'a str>>,
    pub(crate) broker_message_ids: Vec<&'a str>,
    pub(crate) message_types: Vec<Option<&'a str>>,
    pub(crate) correlation_ids: Vec<Option<&'a str>>,
    pub(crate) bodies: Vec<&'a [u8]>,
    pub(crate) scheduled_at: Vec<Option<OffsetDateTime>>,
    pub(crate) sent_correlation_ids: Vec<Option<String>>,
    pub(crate) sent_message_ids: Vec<Option<String>>,
    pub(crate) sent_message_types: Vec<Option<String>>,
    pub(crate) sent_attempts: Vec<Option<i64>>,
    pub(crate) sent_details: Vec<Option<String>>,
}

impl<'a> OutboxColumns<'a> {
    /// The columns of `messages`, in order (those of several commits, one
    /// after the other, for a batch).
    pub(crate) fn of(messages: impl IntoIterator<Item = &'a OutboundMessage>, now: OffsetDateTime) -> Self {
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
pub(crate) fn sent_line(message: &OutboundMessage, now: OffsetDateTime) -> Option<TimelineEntry> {
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
