//! The PostgreSQL store: idempotency records, sagas, the outbox, attempts,
//! dead letters and the delivery timeline in PostgreSQL, shared by every
//! bosun replica (tables of migration 1, `migrations/postgres/`); with
//! migration 3, deliveries, API keys and HTTP idempotency keys
//! ([`AccessStore`]).
//!
//! [`Store::commit_handled`] writes the idempotency record, the saga (with
//! its optimistic version check: `INSERT ... ON CONFLICT DO NOTHING` for a
//! new saga, `UPDATE ... WHERE version = expected` for an existing one), the
//! outbox and the timeline in one transaction.
//!
//! With the [PostgreSQL transport](crate::backends::postgres::transport) on the same
//! database ([`PostgresStore::with_transport`]), receiving, handling and
//! sending are one transaction: [`PostgresStore::commit_and_settle`] also
//! deletes the received message (checking its lock) and writes the outgoing
//! messages straight into the transport's tables, so there is nothing left
//! for the outbox dispatcher to send.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::{Destination, Envelope};
use serde_json::Value;
use sqlx_core::query::query;
use sqlx_core::query_scalar::query_scalar;
use sqlx_core::row::Row;
use sqlx_core::types::Json;
use sqlx_postgres::{PgConnection, PgRow};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::backends::postgres::transport::{Enqueued, KnownEntities, PostgresTransport, complete_locked, enqueue};
use crate::backends::postgres::{MigrationReport, PostgresDatabase};
use crate::ports::store::{
    AccessStore, ApiKeyRecord, AttemptRecord, CommitOutcome, DeadLetterFilter, DeadLetterLookup, DeadLetterRecord,
    DeadLetterStatus, DeliveryRecord, HandledMessage, IdempotencyClaim, PendingOutbox, ReplayRecord, SagaHistoryEntry,
    SagaRecord, Store, StoreError, TimelineEntry, TimelineStatus,
};
use crate::ports::transport::{LockToken, OutboundMessage, duration_ms};

pub use crate::backends::postgres::SCHEMA_VERSION;

/// The PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    database: PostgresDatabase,
    /// Whether received messages come from the PostgreSQL transport on this
    /// same database, so [`Store::commit_handled_and_complete`] may settle them.
    settles_transport: bool,
}

impl PostgresStore {
    /// A store on `database`. It does not settle transport messages: use
    /// [`PostgresStore::with_transport`] for that.
    pub fn new(database: PostgresDatabase) -> Self {
        Self {
            database,
            settles_transport: false,
        }
    }

    /// Connects to `url` (`postgres://user:password@host:5432/db?sslmode=require`)
    /// with the default pool settings.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(Self::new(PostgresDatabase::connect(url).await?))
    }

    /// A store on the database of `transport`, sharing its connection pool,
    /// that commits a handled message and settles it on the transport in one
    /// transaction ([`Store::commit_handled_and_complete`]).
    pub fn with_transport(transport: &PostgresTransport) -> Self {
        Self {
            database: transport.database().clone(),
            settles_transport: true,
        }
    }

    /// The database.
    pub fn database(&self) -> &PostgresDatabase {
        &self.database
    }

    /// Applies missing migrations (`bosun migrate`); see
    /// [`PostgresDatabase::migrate`].
    pub async fn migrate(&self) -> Result<MigrationReport, StoreError> {
        Ok(self.database.migrate().await?)
    }

    /// Fails with [`StoreError::SchemaMismatch`] unless the database is at
    /// [`SCHEMA_VERSION`] (`serve` checks this before it takes work).
    pub async fn check_schema(&self) -> Result<(), StoreError> {
        Ok(self.database.check_schema().await?)
    }

    /// In one transaction: completes the message received under `lock` from
    /// the PostgreSQL transport on this database (deletes it, if the lock is
    /// still held), writes the idempotency record, the saga (version
    /// checked), the outgoing messages straight into their queues or
    /// subscriptions (with duplicate detection; recorded in the outbox as
    /// already dispatched, with their `sent` timeline lines) and the
    /// timeline.
    ///
    /// - `Ok(Committed)`: all written, the message is gone.
    /// - `Ok(AlreadyHandled)`: this consumer handled this message before;
    ///   nothing written but the message is completed.
    /// - `Err(LockLost)`: the lock expired or was taken by another receiver;
    ///   everything was rolled back and the message will be delivered again.
    /// - `Err(SagaConflict)`: rolled back; the message stays locked; reload
    ///   the saga and handle it again.
    ///
    /// An outgoing message to an entity the transport does not have is left
    /// in the outbox for the dispatcher, which reports it.
    pub async fn commit_and_settle(
        &self,
        handled: &HandledMessage,
        lock: &LockToken,
    ) -> Result<CommitOutcome, StoreError> {
        let mut tx = self.database.pool().begin().await?;
        match settle_in(&mut tx, handled, lock).await {
            Ok(outcome) => {
                tx.commit().await?;
                Ok(outcome)
            }
            Err(err) => {
                // Release the message row and the saga at once.
                let _ = tx.rollback().await;
                Err(err)
            }
        }
    }
}

/// The body of [`PostgresStore::commit_and_settle`], inside its transaction.
async fn settle_in(
    conn: &mut PgConnection,
    handled: &HandledMessage,
    lock: &LockToken,
) -> Result<CommitOutcome, StoreError> {
    // First: this row lock keeps competing receivers away until commit.
    if !complete_locked(&mut *conn, lock).await? {
        return Err(StoreError::LockLost {
            entity: lock.entity.path(),
            sequence: lock.sequence,
        });
    }
    if !insert_handled(conn, handled).await? {
        return Ok(CommitOutcome::AlreadyHandled);
    }
    write_saga(conn, handled).await?;
    let now = OffsetDateTime::now_utc();
    let mut sent_lines = Vec::new();
    let mut known = KnownEntities::default();
    for message in &handled.outbox {
        let dispatched = match enqueue(conn, &mut known, message).await? {
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
            message,
            dispatched,
        )
        .await?;
    }
    insert_timeline(conn, &handled.timeline).await?;
    insert_timeline(conn, &sent_lines).await?;
    Ok(CommitOutcome::Committed)
}

/// The body of [`Store::commit_handled`], inside its transaction.
async fn commit_in(conn: &mut PgConnection, handled: &HandledMessage) -> Result<CommitOutcome, StoreError> {
    if !insert_handled(conn, handled).await? {
        return Ok(CommitOutcome::AlreadyHandled);
    }
    write_saga(conn, handled).await?;
    for message in &handled.outbox {
        insert_outbox(conn, Some(&handled.consumer), Some(&handled.message_id), message, false).await?;
    }
    insert_timeline(conn, &handled.timeline).await?;
    Ok(CommitOutcome::Committed)
}

/// The `sent` line the outbox dispatcher would have written for `message`.
fn sent_line(message: &OutboundMessage, now: OffsetDateTime) -> Option<TimelineEntry> {
    // Retries are already on the timeline as `retry-scheduled`.
    if message.broker_message_id.contains(".retry-") {
        return None;
    }
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

/// Writes the idempotency record; false when it was already there.
async fn insert_handled(conn: &mut PgConnection, handled: &HandledMessage) -> Result<bool, sqlx_core::Error> {
    let inserted = query(
        "INSERT INTO bosun_handled (consumer, message_id, handled_at) VALUES ($1, $2, now())
         ON CONFLICT DO NOTHING",
    )
    .bind(&handled.consumer)
    .bind(&handled.message_id)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    Ok(inserted > 0)
}

/// Saves the saga if it is still at the expected version.
async fn write_saga(conn: &mut PgConnection, handled: &HandledMessage) -> Result<(), StoreError> {
    let Some(saga) = &handled.saga else {
        return Ok(());
    };
    let version = saga.expected_version + 1;
    let written = if saga.expected_version == 0 {
        query(
            "INSERT INTO bosun_sagas (kind, key, version, state, created_at, updated_at, tenant_id)
             VALUES ($1, $2, $3, $4, now(), now(), $5) ON CONFLICT DO NOTHING",
        )
        .bind(&saga.kind)
        .bind(&saga.key)
        .bind(version)
        .bind(Json(&saga.state))
        .bind(&saga.tenant_id)
        .execute(&mut *conn)
        .await?
    } else {
        // The tenant is kept from the first save (one made before tenants
        // were kept takes the next one's).
        query(
            "UPDATE bosun_sagas SET version = $3, state = $4, updated_at = now(),
                tenant_id = coalesce(tenant_id, $6)
             WHERE kind = $1 AND key = $2 AND version = $5",
        )
        .bind(&saga.kind)
        .bind(&saga.key)
        .bind(version)
        .bind(Json(&saga.state))
        .bind(saga.expected_version)
        .bind(&saga.tenant_id)
        .execute(&mut *conn)
        .await?
    };
    if written.rows_affected() == 0 {
        let found: Option<i64> = query_scalar("SELECT version FROM bosun_sagas WHERE kind = $1 AND key = $2")
            .bind(&saga.kind)
            .bind(&saga.key)
            .fetch_optional(&mut *conn)
            .await?;
        return Err(StoreError::SagaConflict {
            kind: saga.kind.clone(),
            key: saga.key.clone(),
            expected: saga.expected_version,
            found: found.unwrap_or(0),
        });
    }
    query(
        "INSERT INTO bosun_saga_history (kind, key, version, message_id, message_type, at)
         VALUES ($1, $2, $3, $4, $5, now())",
    )
    .bind(&saga.kind)
    .bind(&saga.key)
    .bind(version)
    .bind(&handled.message_id)
    .bind(&handled.message_type)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn insert_outbox(
    conn: &mut PgConnection,
    consumer: Option<&str>,
    message_id: Option<&str>,
    message: &OutboundMessage,
    dispatched: bool,
) -> Result<(), sqlx_core::Error> {
    query(
        "INSERT INTO bosun_outbox (source_consumer, source_message_id, destination, broker_message_id, message_type,
                                   correlation_id, body, scheduled_at, dispatched_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $9 THEN now() END)",
    )
    .bind(consumer)
    .bind(message_id)
    .bind(message.destination.path())
    .bind(&message.broker_message_id)
    .bind(&message.message_type)
    .bind(&message.correlation_id)
    .bind(&message.body)
    .bind(message.scheduled_at)
    .bind(dispatched)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn insert_timeline(conn: &mut PgConnection, entries: &[TimelineEntry]) -> Result<(), sqlx_core::Error> {
    for entry in entries {
        query(
            "INSERT INTO bosun_timeline (correlation_id, message_id, message_type, consumer, status, attempt, at, detail)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&entry.correlation_id)
        .bind(&entry.message_id)
        .bind(&entry.message_type)
        .bind(&entry.consumer)
        .bind(entry.status.as_str())
        .bind(i64::from(entry.attempt))
        .bind(entry.at)
        .bind(&entry.detail)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

fn attempt_number(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

const DEAD_LETTER_COLUMNS: &str =
    "id, consumer, entity, transport_sequence, broker_message_id, message_id, message_type,
    correlation_id, tenant_id, body, reason, description, error_chain, attempts, dead_lettered_at, origin, replays";

fn dead_letter_from_row(row: &PgRow) -> Result<DeadLetterRecord, StoreError> {
    let Json(error_chain): Json<Vec<String>> = row.try_get(12)?;
    let Json(attempts): Json<Vec<AttemptRecord>> = row.try_get(13)?;
    let Json(replays): Json<Vec<ReplayRecord>> = row.try_get(16)?;
    Ok(DeadLetterRecord {
        id: row.try_get(0)?,
        consumer: row.try_get(1)?,
        entity: row.try_get(2)?,
        transport_sequence: row.try_get(3)?,
        broker_message_id: row.try_get(4)?,
        message_id: row.try_get(5)?,
        message_type: row.try_get(6)?,
        correlation_id: row.try_get(7)?,
        tenant_id: row.try_get(8)?,
        body: row.try_get(9)?,
        reason: row.try_get(10)?,
        description: row.try_get(11)?,
        error_chain,
        attempts,
        dead_lettered_at: row.try_get(14)?,
        origin: row.try_get(15)?,
        status: if replays.is_empty() {
            DeadLetterStatus::Dead
        } else {
            DeadLetterStatus::Replayed
        },
        replays,
    })
}

fn timeline_from_row(row: &PgRow) -> Result<TimelineEntry, StoreError> {
    Ok(TimelineEntry {
        correlation_id: row.try_get(0)?,
        message_id: row.try_get(1)?,
        message_type: row.try_get(2)?,
        consumer: row.try_get(3)?,
        status: TimelineStatus::parse(&row.try_get::<String, _>(4)?),
        attempt: attempt_number(row.try_get(5)?),
        at: row.try_get(6)?,
        detail: row.try_get(7)?,
    })
}

#[async_trait]
impl Store for PostgresStore {
    async fn is_handled(&self, consumer: &str, message_id: &str) -> Result<bool, StoreError> {
        let found = query("SELECT 1 FROM bosun_handled WHERE consumer = $1 AND message_id = $2")
            .bind(consumer)
            .bind(message_id)
            .fetch_optional(self.database.pool())
            .await?;
        Ok(found.is_some())
    }

    async fn commit_handled(&self, handled: HandledMessage) -> Result<CommitOutcome, StoreError> {
        let mut tx = self.database.pool().begin().await?;
        match commit_in(&mut tx, &handled).await {
            Ok(outcome) => {
                tx.commit().await?;
                Ok(outcome)
            }
            Err(err) => {
                let _ = tx.rollback().await;
                Err(err)
            }
        }
    }

    async fn commit_handled_and_complete(
        &self,
        handled: &HandledMessage,
        lock: &LockToken,
    ) -> Result<Option<CommitOutcome>, StoreError> {
        if !self.settles_transport {
            return Ok(None);
        }
        self.commit_and_settle(handled, lock).await.map(Some)
    }

    async fn record_retry(
        &self,
        consumer: &str,
        message_id: &str,
        received_broker_message_id: &str,
        attempt: AttemptRecord,
        retry: OutboundMessage,
        timeline: TimelineEntry,
    ) -> Result<(), StoreError> {
        let mut tx = self.database.pool().begin().await?;
        let fresh = query(
            "INSERT INTO bosun_attempts (consumer, received_broker_message_id, message_id, attempt, at, error_chain)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(consumer)
        .bind(received_broker_message_id)
        .bind(message_id)
        .bind(i64::from(attempt.attempt))
        .bind(attempt.at)
        .bind(Json(&attempt.error_chain))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        // A redelivered attempt that was already recorded already has its retry in the outbox.
        if fresh > 0 {
            insert_outbox(&mut tx, Some(consumer), Some(message_id), &retry, false).await?;
            insert_timeline(&mut tx, std::slice::from_ref(&timeline)).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn attempts(&self, consumer: &str, message_id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        let rows = query(
            "SELECT attempt, at, error_chain FROM bosun_attempts WHERE consumer = $1 AND message_id = $2
             ORDER BY at, attempt",
        )
        .bind(consumer)
        .bind(message_id)
        .fetch_all(self.database.pool())
        .await?;
        rows.iter()
            .map(|row| {
                let Json(error_chain): Json<Vec<String>> = row.try_get(2)?;
                Ok(AttemptRecord {
                    attempt: attempt_number(row.try_get(0)?),
                    at: row.try_get(1)?,
                    error_chain,
                })
            })
            .collect()
    }

    async fn record_dead_letter(
        &self,
        record: DeadLetterRecord,
        timeline: Option<TimelineEntry>,
    ) -> Result<(), StoreError> {
        let mut tx = self.database.pool().begin().await?;
        let inserted = query(
            "INSERT INTO bosun_dead_letters (id, consumer, entity, transport_sequence, broker_message_id, message_id,
                message_type, correlation_id, tenant_id, body, reason, description, error_chain, attempts,
                dead_lettered_at, origin, replays)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
             ON CONFLICT DO NOTHING",
        )
        .bind(record.id)
        .bind(&record.consumer)
        .bind(&record.entity)
        .bind(record.transport_sequence)
        .bind(&record.broker_message_id)
        .bind(&record.message_id)
        .bind(&record.message_type)
        .bind(&record.correlation_id)
        .bind(&record.tenant_id)
        .bind(&record.body)
        .bind(&record.reason)
        .bind(&record.description)
        .bind(Json(&record.error_chain))
        .bind(Json(&record.attempts))
        .bind(record.dead_lettered_at)
        .bind(&record.origin)
        .bind(Json(&record.replays))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if let Some(entry) = timeline.as_ref().filter(|_| inserted > 0) {
            insert_timeline(&mut tx, std::slice::from_ref(entry)).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetterRecord>, StoreError> {
        let rows = query(sqlx_core::sql_str::AssertSqlSafe(format!(
            "SELECT {DEAD_LETTER_COLUMNS} FROM bosun_dead_letters
             WHERE ($1::text IS NULL OR consumer = $1) AND ($2::text IS NULL OR message_type = $2)
               AND ($3::timestamptz IS NULL OR dead_lettered_at >= $3) AND ($4 OR replays = '[]'::jsonb)
               AND ($5::text IS NULL OR tenant_id = $5) AND ($6::text IS NULL OR reason = $6)
             ORDER BY dead_lettered_at DESC, id DESC
             LIMIT $7"
        )))
        .bind(&filter.consumer)
        .bind(&filter.message_type)
        .bind(filter.since)
        .bind(filter.include_replayed)
        .bind(&filter.tenant_id)
        .bind(&filter.reason)
        // NULL: no limit.
        .bind(filter.limit.map(|limit| i64::try_from(limit).unwrap_or(i64::MAX)))
        .fetch_all(self.database.pool())
        .await?;
        rows.iter().map(dead_letter_from_row).collect()
    }

    async fn dead_letter(&self, id: &str, tenant_id: Option<&str>) -> Result<DeadLetterRecord, StoreError> {
        let lookup = DeadLetterLookup::new(id);
        let Some(prefix) = lookup.prefix.as_deref() else {
            return Err(lookup.not_found());
        };
        // `starts_with` compares literally: no character is a wildcard.
        let rows = query(sqlx_core::sql_str::AssertSqlSafe(format!(
            "SELECT {DEAD_LETTER_COLUMNS} FROM bosun_dead_letters
             WHERE starts_with(id::text, $1) AND ($2::text IS NULL OR tenant_id = $2)
             ORDER BY id LIMIT $3"
        )))
        .bind(prefix)
        .bind(tenant_id)
        .bind(i64::try_from(DeadLetterLookup::LIMIT).unwrap_or(i64::MAX))
        .fetch_all(self.database.pool())
        .await?;
        let found = rows.iter().map(dead_letter_from_row).collect::<Result<Vec<_>, _>>()?;
        lookup.pick(found)
    }

    async fn dead_letter_for(
        &self,
        entity: &Destination,
        sequence: i64,
    ) -> Result<Option<DeadLetterRecord>, StoreError> {
        let row = query(sqlx_core::sql_str::AssertSqlSafe(format!(
            "SELECT {DEAD_LETTER_COLUMNS} FROM bosun_dead_letters WHERE entity = $1 AND transport_sequence = $2"
        )))
        .bind(entity.path())
        .bind(sequence)
        .fetch_optional(self.database.pool())
        .await?;
        row.as_ref().map(dead_letter_from_row).transpose()
    }

    async fn record_replay(
        &self,
        id: Uuid,
        replay: ReplayRecord,
        timeline: Option<TimelineEntry>,
    ) -> Result<(), StoreError> {
        let mut tx = self.database.pool().begin().await?;
        let updated =
            query("UPDATE bosun_dead_letters SET replays = replays || jsonb_build_array($2::jsonb) WHERE id = $1")
                .bind(id)
                .bind(Json(&replay))
                .execute(&mut *tx)
                .await?
                .rows_affected();
        if updated == 0 {
            return Err(StoreError::NotFound {
                what: "dead letter",
                id: id.to_string(),
            });
        }
        if let Some(entry) = &timeline {
            insert_timeline(&mut tx, std::slice::from_ref(entry)).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn purge_dead_letter(&self, id: Uuid) -> Result<(), StoreError> {
        let deleted = query("DELETE FROM bosun_dead_letters WHERE id = $1")
            .bind(id)
            .execute(self.database.pool())
            .await?
            .rows_affected();
        if deleted == 0 {
            return Err(StoreError::NotFound {
                what: "dead letter",
                id: id.to_string(),
            });
        }
        Ok(())
    }

    async fn enqueue_outbox(
        &self,
        messages: Vec<OutboundMessage>,
        timeline: Vec<TimelineEntry>,
    ) -> Result<(), StoreError> {
        let mut tx = self.database.pool().begin().await?;
        for message in &messages {
            insert_outbox(&mut tx, None, None, message, false).await?;
        }
        insert_timeline(&mut tx, &timeline).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn claim_outbox(&self, limit: usize, lease: Duration) -> Result<Vec<PendingOutbox>, StoreError> {
        let rows = query(
            "WITH candidates AS MATERIALIZED (
                SELECT id FROM bosun_outbox
                WHERE dispatched_at IS NULL AND (claimed_until IS NULL OR claimed_until <= now())
                ORDER BY id
                LIMIT $1
                FOR UPDATE SKIP LOCKED
             )
             UPDATE bosun_outbox AS o SET claimed_until = now() + $2::bigint * interval '1 millisecond'
             FROM candidates
             WHERE o.id = candidates.id
             RETURNING o.id, o.destination, o.broker_message_id, o.message_type, o.correlation_id, o.body,
                       o.scheduled_at, o.source_message_id",
        )
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(duration_ms(lease))
        .fetch_all(self.database.pool())
        .await?;
        let mut pending = rows
            .iter()
            .map(|row| {
                Ok(PendingOutbox {
                    id: row.try_get(0)?,
                    message: OutboundMessage {
                        destination: Destination::parse(&row.try_get::<String, _>(1)?),
                        broker_message_id: row.try_get(2)?,
                        message_type: row.try_get(3)?,
                        correlation_id: row.try_get(4)?,
                        body: row.try_get(5)?,
                        scheduled_at: row.try_get(6)?,
                    },
                    message_id: row.try_get(7)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        pending.sort_by_key(|p| p.id);
        Ok(pending)
    }

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError> {
        query("UPDATE bosun_outbox SET dispatched_at = now() WHERE id = ANY ($1)")
            .bind(ids)
            .execute(self.database.pool())
            .await?;
        Ok(())
    }

    async fn outbox_backlog(&self) -> Result<u64, StoreError> {
        let count: i64 = query_scalar("SELECT count(*) FROM bosun_outbox WHERE dispatched_at IS NULL")
            .fetch_one(self.database.pool())
            .await?;
        Ok(u64::try_from(count).unwrap_or_default())
    }

    async fn emitted(&self, correlation_id: &str) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(query_scalar(
            "SELECT body FROM bosun_outbox WHERE correlation_id = $1 AND broker_message_id NOT LIKE '%.retry-%'
             ORDER BY id",
        )
        .bind(correlation_id)
        .fetch_all(self.database.pool())
        .await?)
    }

    async fn load_saga(&self, kind: &str, key: &str) -> Result<Option<SagaRecord>, StoreError> {
        let mut sagas = self.sagas(Some(kind), Some(key)).await?;
        Ok(sagas.pop())
    }

    async fn list_sagas(&self, kind: Option<&str>) -> Result<Vec<SagaRecord>, StoreError> {
        self.sagas(kind, None).await
    }

    async fn append_timeline(&self, entries: Vec<TimelineEntry>) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut tx = self.database.pool().begin().await?;
        insert_timeline(&mut tx, &entries).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn timeline(&self, correlation_id: &str) -> Result<Vec<TimelineEntry>, StoreError> {
        let rows = query(
            "SELECT correlation_id, message_id, message_type, consumer, status, attempt, at, detail
             FROM bosun_timeline WHERE correlation_id = $1 ORDER BY id",
        )
        .bind(correlation_id)
        .fetch_all(self.database.pool())
        .await?;
        rows.iter().map(timeline_from_row).collect()
    }

    async fn check_schema(&self) -> Result<(), StoreError> {
        Ok(self.database.check_schema().await?)
    }

    async fn record_delivery(&self, record: DeliveryRecord) -> Result<(), StoreError> {
        query(
            "INSERT INTO bosun_deliveries (correlation_id, tenant_id, started_by, message_type, message_id, started_at)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(&record.correlation_id)
        .bind(&record.tenant_id)
        .bind(&record.started_by)
        .bind(&record.message_type)
        .bind(&record.message_id)
        .bind(record.started_at)
        .execute(self.database.pool())
        .await?;
        Ok(())
    }

    async fn delivery_record(&self, correlation_id: &str) -> Result<Option<DeliveryRecord>, StoreError> {
        let row = query(sqlx_core::sql_str::AssertSqlSafe(format!(
            "SELECT {DELIVERY_COLUMNS} FROM bosun_deliveries WHERE correlation_id = $1"
        )))
        .bind(correlation_id)
        .fetch_optional(self.database.pool())
        .await?;
        row.as_ref().map(delivery_from_row).transpose()
    }

    async fn list_deliveries(&self, tenant_id: Option<&str>, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError> {
        let rows = query(sqlx_core::sql_str::AssertSqlSafe(format!(
            "SELECT {DELIVERY_COLUMNS} FROM bosun_deliveries WHERE ($1::text IS NULL OR tenant_id = $1)
             ORDER BY started_at DESC, seq DESC LIMIT $2"
        )))
        .bind(tenant_id)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(self.database.pool())
        .await?;
        rows.iter().map(delivery_from_row).collect()
    }
}

const DELIVERY_COLUMNS: &str = "correlation_id, tenant_id, started_by, message_type, message_id, started_at";

fn delivery_from_row(row: &PgRow) -> Result<DeliveryRecord, StoreError> {
    Ok(DeliveryRecord {
        correlation_id: row.try_get(0)?,
        tenant_id: row.try_get(1)?,
        started_by: row.try_get(2)?,
        message_type: row.try_get(3)?,
        message_id: row.try_get(4)?,
        started_at: row.try_get(5)?,
    })
}

const API_KEY_COLUMNS: &str = "id, tenant_id, scopes, secret_hash, description, created_by, created_at, revoked_at";

fn api_key_from_row(row: &PgRow) -> Result<ApiKeyRecord, StoreError> {
    let Json(scopes): Json<Vec<String>> = row.try_get(2)?;
    Ok(ApiKeyRecord {
        id: row.try_get(0)?,
        tenant_id: row.try_get(1)?,
        scopes,
        secret_hash: row.try_get(3)?,
        description: row.try_get(4)?,
        created_by: row.try_get(5)?,
        created_at: row.try_get(6)?,
        revoked_at: row.try_get(7)?,
    })
}

/// How often [`PostgresStore::claim_idempotency`] starts over when the row
/// it looked at changed under it (released, or taken over by another).
const CLAIM_ROUNDS: usize = 8;

#[async_trait]
impl AccessStore for PostgresStore {
    async fn insert_api_key(&self, key: ApiKeyRecord) -> Result<(), StoreError> {
        query(sqlx_core::sql_str::AssertSqlSafe(format!(
            "INSERT INTO bosun_api_keys ({API_KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        )))
        .bind(&key.id)
        .bind(&key.tenant_id)
        .bind(Json(&key.scopes))
        .bind(&key.secret_hash)
        .bind(&key.description)
        .bind(&key.created_by)
        .bind(key.created_at)
        .bind(key.revoked_at)
        .execute(self.database.pool())
        .await?;
        Ok(())
    }

    async fn api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let row = query(sqlx_core::sql_str::AssertSqlSafe(format!(
            "SELECT {API_KEY_COLUMNS} FROM bosun_api_keys WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(self.database.pool())
        .await?;
        row.as_ref().map(api_key_from_row).transpose()
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let rows = query(sqlx_core::sql_str::AssertSqlSafe(format!(
            "SELECT {API_KEY_COLUMNS} FROM bosun_api_keys ORDER BY created_at, seq"
        )))
        .fetch_all(self.database.pool())
        .await?;
        rows.iter().map(api_key_from_row).collect()
    }

    async fn revoke_api_key(&self, id: &str, at: OffsetDateTime) -> Result<ApiKeyRecord, StoreError> {
        let row = query(sqlx_core::sql_str::AssertSqlSafe(format!(
            "UPDATE bosun_api_keys SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1 RETURNING {API_KEY_COLUMNS}"
        )))
        .bind(id)
        .bind(at)
        .fetch_optional(self.database.pool())
        .await?;
        match row {
            Some(row) => api_key_from_row(&row),
            None => Err(StoreError::NotFound {
                what: "API key",
                id: id.to_owned(),
            }),
        }
    }

    async fn claim_idempotency(
        &self,
        tenant_id: &str,
        key: &str,
        request_hash: &str,
        stale_after: Duration,
    ) -> Result<IdempotencyClaim, StoreError> {
        let pool = self.database.pool();
        for _ in 0..CLAIM_ROUNDS {
            let claim_id = Uuid::now_v7();
            let inserted = query(
                "INSERT INTO bosun_http_idempotency (tenant_id, key, request_hash, claim_id, claimed_at)
                 VALUES ($1, $2, $3, $4, now()) ON CONFLICT DO NOTHING",
            )
            .bind(tenant_id)
            .bind(key)
            .bind(request_hash)
            .bind(claim_id)
            .execute(pool)
            .await?
            .rows_affected();
            if inserted > 0 {
                return Ok(IdempotencyClaim::Claimed);
            }
            let Some(row) = query(
                "SELECT request_hash, claim_id, status, response,
                        claimed_at <= now() - $3::bigint * interval '1 millisecond' AS stale
                 FROM bosun_http_idempotency WHERE tenant_id = $1 AND key = $2",
            )
            .bind(tenant_id)
            .bind(key)
            .bind(duration_ms(stale_after))
            .fetch_optional(pool)
            .await?
            else {
                // Released meanwhile: claim it afresh.
                continue;
            };
            let request_hash_found: String = row.try_get(0)?;
            let status: Option<i32> = row.try_get(2)?;
            if let Some(status) = status {
                let response: Option<Json<Value>> = row.try_get(3)?;
                return Ok(IdempotencyClaim::Completed {
                    request_hash: request_hash_found,
                    status: u16::try_from(status).unwrap_or_default(),
                    response: response.map_or(Value::Null, |Json(value)| value),
                });
            }
            let stale: bool = row.try_get(4)?;
            if !stale {
                return Ok(IdempotencyClaim::InProgress {
                    request_hash: request_hash_found,
                });
            }
            // Its process died: take it over, unless another taker did first.
            let previous: Uuid = row.try_get(1)?;
            let taken = query(
                "UPDATE bosun_http_idempotency SET request_hash = $3, claim_id = $4, claimed_at = now()
                 WHERE tenant_id = $1 AND key = $2 AND status IS NULL AND claim_id = $5",
            )
            .bind(tenant_id)
            .bind(key)
            .bind(request_hash)
            .bind(claim_id)
            .bind(previous)
            .execute(pool)
            .await?
            .rows_affected();
            if taken > 0 {
                tracing::info!(tenant = %tenant_id, key = %key, "took over a stale idempotency claim");
                return Ok(IdempotencyClaim::Claimed);
            }
        }
        Err(StoreError::Unavailable(format!(
            "idempotency key `{key}` kept changing while it was claimed"
        )))
    }

    async fn complete_idempotency(
        &self,
        tenant_id: &str,
        key: &str,
        status: u16,
        response: &Value,
    ) -> Result<(), StoreError> {
        // Already completed: the first answer stands.
        let found: Option<bool> = query_scalar(
            "WITH completed AS (
                UPDATE bosun_http_idempotency SET status = $3, response = $4, completed_at = now()
                WHERE tenant_id = $1 AND key = $2 AND status IS NULL
                RETURNING 1
             )
             SELECT true FROM completed
             UNION ALL
             SELECT true FROM bosun_http_idempotency WHERE tenant_id = $1 AND key = $2
             LIMIT 1",
        )
        .bind(tenant_id)
        .bind(key)
        .bind(i32::from(status))
        .bind(Json(response))
        .fetch_optional(self.database.pool())
        .await?;
        match found {
            Some(_) => Ok(()),
            None => Err(StoreError::NotFound {
                what: "idempotency key",
                id: key.to_owned(),
            }),
        }
    }

    async fn release_idempotency(&self, tenant_id: &str, key: &str) -> Result<(), StoreError> {
        query("DELETE FROM bosun_http_idempotency WHERE tenant_id = $1 AND key = $2 AND status IS NULL")
            .bind(tenant_id)
            .bind(key)
            .execute(self.database.pool())
            .await?;
        Ok(())
    }
}

impl PostgresStore {
    /// Sagas (of one kind, one key), most recently updated first, each with
    /// its history, read in one snapshot.
    async fn sagas(&self, kind: Option<&str>, key: Option<&str>) -> Result<Vec<SagaRecord>, StoreError> {
        let mut tx = self.database.pool().begin().await?;
        sqlx_core::executor::Executor::execute(&mut *tx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .await?;
        let rows = query(
            "SELECT kind, key, version, state, created_at, updated_at, tenant_id FROM bosun_sagas
             WHERE ($1::text IS NULL OR kind = $1) AND ($2::text IS NULL OR key = $2)
             ORDER BY updated_at DESC, kind, key",
        )
        .bind(kind)
        .bind(key)
        .fetch_all(&mut *tx)
        .await?;
        let history_rows = query(
            "SELECT kind, key, version, message_id, message_type, at FROM bosun_saga_history
             WHERE ($1::text IS NULL OR kind = $1) AND ($2::text IS NULL OR key = $2)
             ORDER BY kind, key, version",
        )
        .bind(kind)
        .bind(key)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let mut histories: HashMap<(String, String), Vec<SagaHistoryEntry>> = HashMap::new();
        for row in &history_rows {
            histories
                .entry((row.try_get(0)?, row.try_get(1)?))
                .or_default()
                .push(SagaHistoryEntry {
                    version: row.try_get(2)?,
                    message_id: row.try_get(3)?,
                    message_type: row.try_get(4)?,
                    at: row.try_get(5)?,
                });
        }
        rows.iter()
            .map(|row| {
                let kind: String = row.try_get(0)?;
                let key: String = row.try_get(1)?;
                let Json(state) = row.try_get(3)?;
                Ok(SagaRecord {
                    history: histories.remove(&(kind.clone(), key.clone())).unwrap_or_default(),
                    kind,
                    key,
                    version: row.try_get(2)?,
                    tenant_id: row.try_get(6)?,
                    state,
                    created_at: row.try_get(4)?,
                    updated_at: row.try_get(5)?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use bosun_contracts::routing::EVENTS_TOPIC;
    use serde_json::json;

    use super::*;
    use crate::backends::postgres::testing::{self, TestDatabase};
    use crate::ports::store::SagaWrite;
    use crate::ports::transport::{Topology, Transport};

    const LOCK: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn postgres_store_passes_the_behaviour_suite() {
        let first = testing::migrated().await;
        let schemas = Arc::new(Mutex::new(vec![first]));
        let used = std::sync::atomic::AtomicUsize::new(0);
        crate::ports::behaviour::store::run_all(|| {
            let schemas = Arc::clone(&schemas);
            let reuse = used.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
            async move {
                if reuse {
                    return PostgresStore::new(schemas.lock().unwrap()[0].database.clone());
                }
                let test = testing::migrated().await;
                let store = PostgresStore::new(test.database.clone());
                schemas.lock().unwrap().push(test);
                store
            }
        })
        .await;
        let schemas = std::mem::take(&mut *schemas.lock().unwrap());
        for test in schemas {
            test.finish().await;
        }
    }

    /// A store and a transport sharing one migrated schema.
    async fn paired(test: &TestDatabase) -> (PostgresStore, PostgresTransport) {
        let transport = PostgresTransport::new(test.database.clone(), 10);
        transport.ensure_topology(&Topology::from_routing()).await.unwrap();
        (PostgresStore::with_transport(&transport), transport)
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
    async fn commit_and_settle_writes_handling_and_sends_in_one_transaction() {
        let test = testing::migrated().await;
        let (store, transport) = paired(&test).await;
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
        let outcome = store
            .commit_handled_and_complete(
                &handled("m-1", correlation, vec![event.clone()], Some(saga)),
                &received.lock,
            )
            .await
            .unwrap();
        assert_eq!(outcome, Some(CommitOutcome::Committed));

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
        let outcome = store
            .commit_handled_and_complete(&handled("m-1", correlation, vec![event], None), &again.lock)
            .await
            .unwrap();
        assert_eq!(outcome, Some(CommitOutcome::AlreadyHandled));
        assert_eq!(transport.depth(&commit_queue()).await.unwrap(), 0, "completed");
        assert_eq!(transport.depth(&pull_request).await.unwrap(), 1, "not sent twice");
        test.finish().await;
    }

    #[tokio::test]
    async fn a_lost_lock_rolls_back_the_idempotency_record_and_the_outbox() {
        let test = testing::migrated().await;
        let (store, transport) = paired(&test).await;
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
        let result = store
            .commit_handled_and_complete(
                &handled("m-1", correlation, vec![event.clone()], Some(saga)),
                &stale.lock,
            )
            .await;
        assert!(
            matches!(result, Err(StoreError::LockLost { sequence, .. }) if sequence == stale.lock.sequence),
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
        let outcome = store
            .commit_handled_and_complete(&handled("m-1", correlation, vec![event], None), &current.lock)
            .await
            .unwrap();
        assert_eq!(outcome, Some(CommitOutcome::Committed));
        assert_eq!(transport.depth(&commit_queue()).await.unwrap(), 0);
        assert_eq!(transport.depth(&pull_request).await.unwrap(), 1);
        test.finish().await;
    }

    #[tokio::test]
    async fn a_saga_conflict_leaves_the_message_locked_and_nothing_written() {
        let test = testing::migrated().await;
        let (store, transport) = paired(&test).await;
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
        let stale = store
            .commit_handled_and_complete(
                &handled("m-1", correlation, vec![event.clone()], Some(write(0))),
                &received.lock,
            )
            .await;
        assert!(
            matches!(stale, Err(StoreError::SagaConflict { found: 1, .. })),
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
        let outcome = store
            .commit_handled_and_complete(
                &handled("m-1", correlation, vec![event], Some(write(1))),
                &received.lock,
            )
            .await
            .unwrap();
        assert_eq!(outcome, Some(CommitOutcome::Committed));
        assert_eq!(store.load_saga("release", "r-1").await.unwrap().unwrap().version, 2);
        test.finish().await;
    }

    #[tokio::test]
    async fn a_store_without_its_transport_does_not_settle() {
        let test = testing::migrated().await;
        let store = PostgresStore::new(test.database.clone());
        let lock = LockToken {
            entity: commit_queue(),
            sequence: 1,
            token: Uuid::now_v7(),
        };
        let outcome = store
            .commit_handled_and_complete(&handled("m-1", Uuid::now_v7(), vec![], None), &lock)
            .await
            .unwrap();
        assert_eq!(outcome, None);
        assert!(!store.is_handled("commit", "m-1").await.unwrap(), "nothing written");
        test.finish().await;
    }

    #[tokio::test]
    async fn unknown_destinations_stay_in_the_outbox() {
        let test = testing::migrated().await;
        let (store, transport) = paired(&test).await;
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
        let outcome = store
            .commit_handled_and_complete(&handled("m-1", correlation, vec![lost], None), &received.lock)
            .await
            .unwrap();
        assert_eq!(outcome, Some(CommitOutcome::Committed));
        assert_eq!(
            store.outbox_backlog().await.unwrap(),
            1,
            "left for the dispatcher to report"
        );
        test.finish().await;
    }

    #[tokio::test]
    async fn migration_3_keeps_existing_sagas_without_a_tenant() {
        let test = testing::fresh().await;
        test.database.migrate_to(2).await.unwrap();
        query(
            "INSERT INTO bosun_sagas (kind, key, version, state, created_at, updated_at)
             VALUES ('release', 'r-old', 1, '{\"step\": 1}', now(), now())",
        )
        .execute(test.database.pool())
        .await
        .unwrap();
        assert_eq!(test.database.migrate().await.unwrap().applied, vec![3, 4]);
        let store = PostgresStore::new(test.database.clone());
        store.check_schema().await.unwrap();
        let old = store.load_saga("release", "r-old").await.unwrap().unwrap();
        assert_eq!((old.version, old.tenant_id), (1, None));
        store
            .commit_handled(handled(
                "m-2",
                Uuid::now_v7(),
                vec![],
                Some(SagaWrite {
                    kind: "release".into(),
                    key: "r-old".into(),
                    expected_version: 1,
                    state: json!({"step": 2}),
                    tenant_id: Some("contoso".into()),
                }),
            ))
            .await
            .unwrap();
        let saga = store.load_saga("release", "r-old").await.unwrap().unwrap();
        assert_eq!((saga.version, saga.tenant_id.as_deref()), (2, Some("contoso")));
        test.finish().await;
    }

    #[tokio::test]
    async fn sagas_list_newest_first_with_their_history() {
        let test = testing::migrated().await;
        let store = PostgresStore::new(test.database.clone());
        let correlation = Uuid::now_v7();
        for (message, key, version) in [("m-1", "a", 0), ("m-2", "b", 0), ("m-3", "a", 1)] {
            store
                .commit_handled(handled(
                    message,
                    correlation,
                    vec![],
                    Some(SagaWrite {
                        kind: "release".into(),
                        key: key.into(),
                        expected_version: version,
                        state: json!({"last": message, "nested": {"z": 1, "a": [1, 2]}}),
                        tenant_id: None,
                    }),
                ))
                .await
                .unwrap();
        }
        let sagas = store.list_sagas(None).await.unwrap();
        assert_eq!(sagas.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(
            sagas[0]
                .history
                .iter()
                .map(|h| h.message_id.as_str())
                .collect::<Vec<_>>(),
            ["m-1", "m-3"]
        );
        assert_eq!(sagas[0].state, json!({"last": "m-3", "nested": {"z": 1, "a": [1, 2]}}));
        test.finish().await;
    }
}
