//! The SQL of the transport's queue rows that the PostgreSQL transport and
//! [`PostgresSettle`](super::commit::PostgresSettle) share: writing a
//! message into its queue or subscriptions (with duplicate detection) and
//! completing a locked message, each within the caller's transaction.

use std::collections::HashMap;

use bosun_contracts::Destination;
use sqlx_core::executor::Executor;
use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_postgres::{PgConnection, Postgres};

use crate::backends::postgres::notify::Wakes;
use crate::ports::transport::{LockToken, OutboundMessage};

/// What happened to one outgoing message in [`enqueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Enqueued {
    /// Written to its entity (or to every matching subscription).
    Sent,
    /// Dropped: this broker message id was already sent to this destination.
    Duplicate,
    /// The destination does not exist; nothing written.
    NoSuchEntity,
}

/// Which destinations exist, as looked up within one transaction (a batch
/// usually goes to few destinations).
#[derive(Debug, Default)]
pub(crate) struct KnownEntities(HashMap<String, bool>);

impl KnownEntities {
    async fn check(&mut self, conn: &mut PgConnection, destination: &Destination) -> Result<bool, sqlx_core::Error> {
        let path = destination.path();
        if let Some(known) = self.0.get(&path) {
            return Ok(*known);
        }
        let known = known_entity(conn, destination).await?;
        self.0.insert(path, known);
        Ok(known)
    }
}

/// Whether `destination` exists.
async fn known_entity(conn: &mut PgConnection, destination: &Destination) -> Result<bool, sqlx_core::Error> {
    let found = match destination {
        Destination::Queue(name) => {
            query("SELECT 1 FROM bosun_queues WHERE name = $1")
                .bind(name)
                .fetch_optional(&mut *conn)
                .await?
        }
        Destination::Topic(topic) => {
            query("SELECT 1 FROM bosun_subscriptions WHERE topic = $1 LIMIT 1")
                .bind(topic)
                .fetch_optional(&mut *conn)
                .await?
        }
        Destination::Subscription { topic, subscription } => {
            query("SELECT 1 FROM bosun_subscriptions WHERE topic = $1 AND name = $2")
                .bind(topic)
                .bind(subscription)
                .fetch_optional(&mut *conn)
                .await?
        }
    };
    Ok(found.is_some())
}

/// Writes one message within the caller's transaction: duplicate detection
/// on (destination, broker message id), then one row in the entity, or one
/// per matching subscription for the topic. Receivers are woken
/// through `wakes` once the caller's transaction commits.
pub(crate) async fn enqueue(
    conn: &mut PgConnection,
    known: &mut KnownEntities,
    message: &OutboundMessage,
    wakes: &mut Wakes,
) -> Result<Enqueued, sqlx_core::Error> {
    if !known.check(conn, &message.destination).await? {
        return Ok(Enqueued::NoSuchEntity);
    }
    let destination = message.destination.path();
    let fresh = query(
        "INSERT INTO bosun_duplicates (destination, broker_message_id, seen_at) VALUES ($1, $2, now())
         ON CONFLICT (destination, broker_message_id) DO UPDATE SET seen_at = excluded.seen_at
            WHERE bosun_duplicates.seen_at < now() - interval '7 days'",
    )
    .bind(&destination)
    .bind(&message.broker_message_id)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if fresh == 0 {
        return Ok(Enqueued::Duplicate);
    }
    let insert = match &message.destination {
        Destination::Topic(_) => query(
            "INSERT INTO bosun_messages (entity, broker_message_id, message_type, correlation_id, body, enqueued_at, visible_at)
             SELECT topic || '/subscriptions/' || name, $2, $3, $4, $5, now(), coalesce($6, now())
             FROM bosun_subscriptions WHERE topic = $1 AND $3 = ANY (event_types)
             ORDER BY name
             RETURNING entity, visible_at <= now()",
        ),
        Destination::Queue(_) | Destination::Subscription { .. } => query(
            "INSERT INTO bosun_messages (entity, broker_message_id, message_type, correlation_id, body, enqueued_at, visible_at)
             VALUES ($1, $2, $3, $4, $5, now(), coalesce($6, now()))
             RETURNING entity, visible_at <= now()",
        ),
    };
    let written = insert
        .bind(&destination)
        .bind(&message.broker_message_id)
        .bind(&message.message_type)
        .bind(&message.correlation_id)
        .bind(&message.body)
        .bind(message.scheduled_at)
        .fetch_all(&mut *conn)
        .await?;
    for row in &written {
        // Scheduled messages are found by the receivers' fallback poll.
        if row.try_get::<bool, _>(1)? {
            wakes.entity(row.try_get::<String, _>(0)?);
        }
    }
    Ok(Enqueued::Sent)
}

/// Deletes a message held under `lock` (complete). Returns whether the lock
/// was still held; within a transaction the row stays locked until it ends.
pub(crate) async fn complete_locked<'c, E>(executor: E, lock: &LockToken) -> Result<bool, sqlx_core::Error>
where
    E: Executor<'c, Database = Postgres>,
{
    let deleted = query(
        "DELETE FROM bosun_messages
         WHERE sequence = $1 AND lock_token = $2 AND locked_until > now() AND NOT dead_lettered",
    )
    .bind(lock.sequence)
    .bind(lock.token)
    .execute(executor)
    .await?
    .rows_affected();
    Ok(deleted > 0)
}

/// Dead-letters a message held under `lock`, with `reason` and
/// `description`. Returns whether the lock was still held.
pub(crate) async fn dead_letter_locked<'c, E>(
    executor: E,
    lock: &LockToken,
    reason: &str,
    description: &str,
) -> Result<bool, sqlx_core::Error>
where
    E: Executor<'c, Database = Postgres>,
{
    let changed = query(
        "UPDATE bosun_messages SET dead_lettered = true, dead_letter_reason = $3, dead_letter_description = $4,
            dead_lettered_at = now(), lock_token = NULL, locked_until = NULL
         WHERE sequence = $1 AND lock_token = $2 AND locked_until > now() AND NOT dead_lettered",
    )
    .bind(lock.sequence)
    .bind(lock.token)
    .bind(reason)
    .bind(description)
    .execute(executor)
    .await?
    .rows_affected();
    Ok(changed > 0)
}
