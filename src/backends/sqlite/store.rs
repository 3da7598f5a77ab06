//! The SQLite store: `state.db` under the data directory.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::Destination;
use rusqlite::{OptionalExtension, Row, Transaction, TransactionBehavior, params};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::backends::sqlite::Database;
use crate::ports::store::{
    AccessStore, ApiKeyRecord, AttemptRecord, CommitOutcome, DeadLetterFilter, DeadLetterLookup, DeadLetterRecord,
    DeadLetterStatus, DeliveryRecord, HandledMessage, IdempotencyClaim, PendingOutbox, ReplayRecord, SagaHistoryEntry,
    SagaRecord, Store, StoreError, TimelineEntry, TimelineStatus,
};
use crate::ports::transport::{OutboundMessage, duration_ms, from_unix_ms, unix_ms};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS handled (
    consumer TEXT NOT NULL,
    message_id TEXT NOT NULL,
    handled_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, message_id)
);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source_consumer TEXT,
    source_message_id TEXT,
    destination TEXT NOT NULL,
    broker_message_id TEXT NOT NULL,
    message_type TEXT,
    correlation_id TEXT,
    body BLOB NOT NULL,
    scheduled_at INTEGER,
    created_at INTEGER NOT NULL,
    claimed_until INTEGER,
    dispatched_at INTEGER
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (dispatched_at, id);
CREATE TABLE IF NOT EXISTS sagas (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    version INTEGER NOT NULL,
    state TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    tenant_id TEXT,
    PRIMARY KEY (kind, key)
);
CREATE TABLE IF NOT EXISTS saga_history (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    version INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    message_type TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (kind, key, version)
);
CREATE TABLE IF NOT EXISTS attempts (
    consumer TEXT NOT NULL,
    received_broker_message_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    at INTEGER NOT NULL,
    error_chain TEXT NOT NULL,
    PRIMARY KEY (consumer, received_broker_message_id)
);
CREATE INDEX IF NOT EXISTS attempts_message ON attempts (consumer, message_id, at);
CREATE TABLE IF NOT EXISTS dead_letters (
    id TEXT PRIMARY KEY,
    consumer TEXT,
    entity TEXT NOT NULL,
    transport_sequence INTEGER,
    broker_message_id TEXT NOT NULL,
    message_id TEXT,
    message_type TEXT,
    correlation_id TEXT,
    tenant_id TEXT,
    body BLOB NOT NULL,
    reason TEXT NOT NULL,
    description TEXT NOT NULL,
    error_chain TEXT NOT NULL,
    attempts TEXT NOT NULL,
    dead_lettered_at INTEGER NOT NULL,
    origin TEXT NOT NULL,
    replays TEXT NOT NULL DEFAULT '[]'
);
CREATE UNIQUE INDEX IF NOT EXISTS dead_letters_transport ON dead_letters (entity, transport_sequence);
CREATE TABLE IF NOT EXISTS timeline (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    correlation_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    message_type TEXT NOT NULL,
    consumer TEXT,
    status TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    at INTEGER NOT NULL,
    detail TEXT
);
CREATE INDEX IF NOT EXISTS timeline_correlation ON timeline (correlation_id, id);
CREATE TABLE IF NOT EXISTS deliveries (
    correlation_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    started_by TEXT NOT NULL,
    message_type TEXT NOT NULL,
    message_id TEXT NOT NULL,
    started_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS deliveries_recent ON deliveries (started_at);
CREATE INDEX IF NOT EXISTS deliveries_tenant ON deliveries (tenant_id, started_at);
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    scopes TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    description TEXT,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE TABLE IF NOT EXISTS http_idempotency (
    tenant_id TEXT NOT NULL,
    key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    claim_id TEXT NOT NULL,
    claimed_at INTEGER NOT NULL,
    status INTEGER,
    response TEXT,
    completed_at INTEGER,
    PRIMARY KEY (tenant_id, key)
);
";

/// Columns added to tables after their first release: state.db files made by
/// an older bosun get them when opened (`CREATE TABLE IF NOT EXISTS` leaves
/// an existing table alone).
const ADDED_COLUMNS: &[(&str, &str, &str)] = &[("sagas", "tenant_id", "TEXT")];

/// Data migrations of `state.db`, numbered by `PRAGMA user_version` and
/// applied once each, in order, by [`SqliteStore::open`] (the same changes
/// as the PostgreSQL migrations of the same name).
const DATA_MIGRATIONS: &[(i64, &str, &str)] = &[(
    1,
    "tenant_keys",
    // The release saga is keyed by tenant and releaseId; see
    // migrations/postgres/0004_tenant_keys.sql.
    "UPDATE sagas SET tenant_id = (
         SELECT d.tenant_id FROM saga_history h
         JOIN timeline t ON t.message_id = h.message_id
         JOIN deliveries d ON d.correlation_id = t.correlation_id
         WHERE h.kind = sagas.kind AND h.key = sagas.key
         ORDER BY h.version LIMIT 1)
     WHERE tenant_id IS NULL;
     UPDATE saga_history SET key = (
         SELECT s.tenant_id || '/' || saga_history.key FROM sagas s
         WHERE s.kind = 'release' AND s.key = saga_history.key)
     WHERE kind = 'release' AND instr(key, '/') = 0 AND EXISTS (
         SELECT 1 FROM sagas s WHERE s.kind = 'release' AND s.key = saga_history.key AND s.tenant_id IS NOT NULL);
     UPDATE sagas SET key = tenant_id || '/' || key
     WHERE kind = 'release' AND tenant_id IS NOT NULL AND instr(key, '/') = 0;",
)];

/// The SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    database: Database,
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let database = Database::open(path, SCHEMA)?;
        upgrade(path)?;
        Ok(Self { database })
    }

    /// An in-memory store (tests).
    pub fn in_memory() -> Result<Self, StoreError> {
        Ok(Self {
            database: Database::open_in_memory(SCHEMA)?,
        })
    }
}

/// Adds the [`ADDED_COLUMNS`] a state.db made by an older bosun lacks and
/// applies the [`DATA_MIGRATIONS`] it has not had. In an immediate
/// transaction, so two processes opening the same old file do not both
/// upgrade it.
fn upgrade(path: &Path) -> Result<(), StoreError> {
    let mut conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(30))?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for (table, column, definition) in ADDED_COLUMNS {
        let present = {
            let mut statement = tx.prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))?;
            let names = statement
                .query_map([], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            names.iter().any(|name| name == column)
        };
        if !present {
            tracing::info!(table, column, "adding a column to the state database");
            tx.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {definition}"))?;
        }
    }
    let applied: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    for (version, name, sql) in DATA_MIGRATIONS.iter().filter(|(version, ..)| *version > applied) {
        tracing::info!(version, name, "migrating the state database");
        tx.execute_batch(sql)?;
        tx.execute_batch(&format!("PRAGMA user_version = {version}"))?;
    }
    tx.commit()?;
    Ok(())
}

fn now_ms() -> i64 {
    unix_ms(OffsetDateTime::now_utc())
}

fn insert_outbox(
    tx: &Transaction<'_>,
    consumer: Option<&str>,
    message_id: Option<&str>,
    message: &OutboundMessage,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO outbox (source_consumer, source_message_id, destination, broker_message_id, message_type,
                             correlation_id, body, scheduled_at, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            consumer,
            message_id,
            message.destination.path(),
            message.broker_message_id,
            message.message_type,
            message.correlation_id,
            message.body,
            message.scheduled_at.map(unix_ms),
            now_ms()
        ],
    )?;
    Ok(())
}

fn insert_timeline(tx: &Transaction<'_>, entries: &[TimelineEntry]) -> rusqlite::Result<()> {
    for entry in entries {
        tx.execute(
            "INSERT INTO timeline (correlation_id, message_id, message_type, consumer, status, attempt, at, detail)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                entry.correlation_id,
                entry.message_id,
                entry.message_type,
                entry.consumer,
                entry.status.as_str(),
                entry.attempt,
                unix_ms(entry.at),
                entry.detail
            ],
        )?;
    }
    Ok(())
}

const DEAD_LETTER_COLUMNS: &str =
    "id, consumer, entity, transport_sequence, broker_message_id, message_id, message_type,
    correlation_id, tenant_id, body, reason, description, error_chain, attempts, dead_lettered_at, origin, replays";

fn dead_letter_from_row(row: &Row<'_>) -> rusqlite::Result<DeadLetterRecord> {
    let id: String = row.get(0)?;
    let json = |index: usize| -> rusqlite::Result<String> { row.get(index) };
    let error_chain: Vec<String> = serde_json::from_str(&json(12)?).unwrap_or_default();
    let attempts: Vec<AttemptRecord> = serde_json::from_str(&json(13)?).unwrap_or_default();
    let replays: Vec<ReplayRecord> = serde_json::from_str(&json(16)?).unwrap_or_default();
    Ok(DeadLetterRecord {
        id: Uuid::parse_str(&id).unwrap_or_default(),
        consumer: row.get(1)?,
        entity: row.get(2)?,
        transport_sequence: row.get(3)?,
        broker_message_id: row.get(4)?,
        message_id: row.get(5)?,
        message_type: row.get(6)?,
        correlation_id: row.get(7)?,
        tenant_id: row.get(8)?,
        body: row.get(9)?,
        reason: row.get(10)?,
        description: row.get(11)?,
        error_chain,
        attempts,
        dead_lettered_at: from_unix_ms(row.get(14)?),
        origin: row.get(15)?,
        status: if replays.is_empty() {
            DeadLetterStatus::Dead
        } else {
            DeadLetterStatus::Replayed
        },
        replays,
    })
}

fn load_saga_tx(conn: &rusqlite::Connection, kind: &str, key: &str) -> Result<Option<SagaRecord>, StoreError> {
    let Some((version, state, created_at, updated_at, tenant_id)) = conn
        .query_row(
            "SELECT version, state, created_at, updated_at, tenant_id FROM sagas WHERE kind = ?1 AND key = ?2",
            params![kind, key],
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, i64>(3)?,
                    row.get::<_, Option<String>>(4)?,
                ))
            },
        )
        .optional()?
    else {
        return Ok(None);
    };
    let mut statement = conn.prepare_cached(
        "SELECT version, message_id, message_type, at FROM saga_history WHERE kind = ?1 AND key = ?2 ORDER BY version",
    )?;
    let history = statement
        .query_map(params![kind, key], |row| {
            Ok(SagaHistoryEntry {
                version: row.get(0)?,
                message_id: row.get(1)?,
                message_type: row.get(2)?,
                at: from_unix_ms(row.get(3)?),
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(SagaRecord {
        kind: kind.to_owned(),
        key: key.to_owned(),
        version,
        tenant_id,
        state: serde_json::from_str(&state)?,
        created_at: from_unix_ms(created_at),
        updated_at: from_unix_ms(updated_at),
        history,
    }))
}

const DELIVERY_COLUMNS: &str = "correlation_id, tenant_id, started_by, message_type, message_id, started_at";

fn delivery_from_row(row: &Row<'_>) -> rusqlite::Result<DeliveryRecord> {
    Ok(DeliveryRecord {
        correlation_id: row.get(0)?,
        tenant_id: row.get(1)?,
        started_by: row.get(2)?,
        message_type: row.get(3)?,
        message_id: row.get(4)?,
        started_at: from_unix_ms(row.get(5)?),
    })
}

const API_KEY_COLUMNS: &str = "id, tenant_id, scopes, secret_hash, description, created_by, created_at, revoked_at";

fn api_key_from_row(row: &Row<'_>) -> rusqlite::Result<ApiKeyRecord> {
    let scopes: String = row.get(2)?;
    Ok(ApiKeyRecord {
        id: row.get(0)?,
        tenant_id: row.get(1)?,
        scopes: serde_json::from_str(&scopes)
            .map_err(|err| rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Text, Box::new(err)))?,
        secret_hash: row.get(3)?,
        description: row.get(4)?,
        created_by: row.get(5)?,
        created_at: from_unix_ms(row.get(6)?),
        revoked_at: row.get::<_, Option<i64>>(7)?.map(from_unix_ms),
    })
}

/// An `http_idempotency` row as [`SqliteStore::claim_idempotency`] reads it.
struct IdempotencyRow {
    request_hash: String,
    claim_id: String,
    claimed_at: i64,
    status: Option<i64>,
    response: Option<String>,
}

#[async_trait]
impl Store for SqliteStore {
    async fn is_handled(&self, consumer: &str, message_id: &str) -> Result<bool, StoreError> {
        let (consumer, message_id) = (consumer.to_owned(), message_id.to_owned());
        self.database
            .call(move |conn| {
                Ok(conn
                    .query_row(
                        "SELECT 1 FROM handled WHERE consumer = ?1 AND message_id = ?2",
                        params![consumer, message_id],
                        |_| Ok(()),
                    )
                    .optional()?
                    .is_some())
            })
            .await
    }

    async fn commit_handled(&self, handled: HandledMessage) -> Result<CommitOutcome, StoreError> {
        self.database
            .call(move |conn| {
                let now = now_ms();
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let fresh = tx.execute(
                    "INSERT OR IGNORE INTO handled (consumer, message_id, handled_at) VALUES (?1, ?2, ?3)",
                    params![handled.consumer, handled.message_id, now],
                )?;
                if fresh == 0 {
                    return Ok(CommitOutcome::AlreadyHandled);
                }
                if let Some(saga) = &handled.saga {
                    let found: i64 = tx
                        .query_row(
                            "SELECT version FROM sagas WHERE kind = ?1 AND key = ?2",
                            params![saga.kind, saga.key],
                            |row| row.get(0),
                        )
                        .optional()?
                        .unwrap_or(0);
                    if found != saga.expected_version {
                        return Err(StoreError::SagaConflict {
                            kind: saga.kind.clone(),
                            key: saga.key.clone(),
                            expected: saga.expected_version,
                            found,
                        });
                    }
                    let version = found + 1;
                    let state = serde_json::to_string(&saga.state)?;
                    // The tenant is kept from the first save (one made before
                    // tenants were kept takes the next one's).
                    tx.execute(
                        "INSERT INTO sagas (kind, key, version, state, created_at, updated_at, tenant_id)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)
                         ON CONFLICT (kind, key) DO UPDATE SET version = excluded.version, state = excluded.state,
                            updated_at = excluded.updated_at, tenant_id = coalesce(sagas.tenant_id, excluded.tenant_id)",
                        params![saga.kind, saga.key, version, state, now, saga.tenant_id],
                    )?;
                    tx.execute(
                        "INSERT INTO saga_history (kind, key, version, message_id, message_type, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                        params![saga.kind, saga.key, version, handled.message_id, handled.message_type, now],
                    )?;
                }
                for message in &handled.outbox {
                    insert_outbox(&tx, Some(&handled.consumer), Some(&handled.message_id), message)?;
                }
                insert_timeline(&tx, &handled.timeline)?;
                tx.commit()?;
                Ok(CommitOutcome::Committed)
            })
            .await
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
        let (consumer, message_id) = (consumer.to_owned(), message_id.to_owned());
        let received = received_broker_message_id.to_owned();
        self.database
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let fresh = tx.execute(
                    "INSERT OR IGNORE INTO attempts (consumer, received_broker_message_id, message_id, attempt, at, error_chain)
                     VALUES (?1, ?6, ?2, ?3, ?4, ?5)",
                    params![
                        consumer,
                        message_id,
                        attempt.attempt,
                        unix_ms(attempt.at),
                        serde_json::to_string(&attempt.error_chain)?,
                        received
                    ],
                )?;
                // A redelivered attempt that was already recorded already has its retry in the outbox.
                if fresh > 0 {
                    insert_outbox(&tx, Some(&consumer), Some(&message_id), &retry)?;
                    insert_timeline(&tx, std::slice::from_ref(&timeline))?;
                }
                tx.commit()?;
                Ok(())
            })
            .await
    }

    async fn attempts(&self, consumer: &str, message_id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        let (consumer, message_id) = (consumer.to_owned(), message_id.to_owned());
        self.database
            .call(move |conn| {
                let mut statement = conn.prepare_cached(
                    "SELECT attempt, at, error_chain FROM attempts WHERE consumer = ?1 AND message_id = ?2 ORDER BY at, attempt",
                )?;
                let rows = statement.query_map(params![consumer, message_id], |row| {
                    Ok((row.get::<_, u32>(0)?, row.get::<_, i64>(1)?, row.get::<_, String>(2)?))
                })?;
                let mut attempts = Vec::new();
                for row in rows {
                    let (attempt, at, chain) = row?;
                    attempts.push(AttemptRecord {
                        attempt,
                        at: from_unix_ms(at),
                        error_chain: serde_json::from_str(&chain)?,
                    });
                }
                Ok(attempts)
            })
            .await
    }

    async fn record_dead_letter(
        &self,
        record: DeadLetterRecord,
        timeline: Option<TimelineEntry>,
    ) -> Result<(), StoreError> {
        self.database
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let inserted = tx.execute(
                    &format!(
                        "INSERT OR IGNORE INTO dead_letters ({DEAD_LETTER_COLUMNS})
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"
                    ),
                    params![
                        record.id.to_string(),
                        record.consumer,
                        record.entity,
                        record.transport_sequence,
                        record.broker_message_id,
                        record.message_id,
                        record.message_type,
                        record.correlation_id,
                        record.tenant_id,
                        record.body,
                        record.reason,
                        record.description,
                        serde_json::to_string(&record.error_chain)?,
                        serde_json::to_string(&record.attempts)?,
                        unix_ms(record.dead_lettered_at),
                        record.origin,
                        serde_json::to_string(&record.replays)?
                    ],
                )?;
                if let Some(entry) = timeline.as_ref().filter(|_| inserted > 0) {
                    insert_timeline(&tx, std::slice::from_ref(entry))?;
                }
                tx.commit()?;
                Ok(())
            })
            .await
    }

    async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetterRecord>, StoreError> {
        let filter = filter.clone();
        self.database
            .call(move |conn| {
                let mut statement = conn.prepare(&format!(
                    "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters
                     WHERE (?1 IS NULL OR consumer = ?1) AND (?2 IS NULL OR message_type = ?2)
                       AND (?3 IS NULL OR dead_lettered_at >= ?3) AND (?4 OR replays = '[]')
                       AND (?5 IS NULL OR tenant_id = ?5) AND (?6 IS NULL OR reason = ?6)
                     ORDER BY dead_lettered_at DESC, id DESC
                     LIMIT ?7"
                ))?;
                // LIMIT -1: no limit.
                let limit = filter
                    .limit
                    .map_or(-1, |limit| i64::try_from(limit).unwrap_or(i64::MAX));
                let rows = statement.query_map(
                    params![
                        filter.consumer,
                        filter.message_type,
                        filter.since.map(unix_ms),
                        filter.include_replayed,
                        filter.tenant_id,
                        filter.reason,
                        limit
                    ],
                    dead_letter_from_row,
                )?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .await
    }

    async fn dead_letter(&self, id: &str, tenant_id: Option<&str>) -> Result<DeadLetterRecord, StoreError> {
        let lookup = DeadLetterLookup::new(id);
        let Some(prefix) = lookup.prefix.clone() else {
            return Err(lookup.not_found());
        };
        let tenant_id = tenant_id.map(str::to_owned);
        let found: Vec<DeadLetterRecord> = self
            .database
            .call(move |conn| -> Result<_, StoreError> {
                // `substr` compares literally: no character is a wildcard.
                let mut statement = conn.prepare(&format!(
                    "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters
                     WHERE substr(id, 1, length(?1)) = ?1 AND (?2 IS NULL OR tenant_id = ?2)
                     ORDER BY id LIMIT ?3"
                ))?;
                let limit = i64::try_from(DeadLetterLookup::LIMIT).unwrap_or(i64::MAX);
                Ok(statement
                    .query_map(params![prefix, tenant_id, limit], dead_letter_from_row)?
                    .collect::<Result<Vec<_>, _>>()?)
            })
            .await?;
        lookup.pick(found)
    }

    async fn dead_letter_for(
        &self,
        entity: &Destination,
        sequence: i64,
    ) -> Result<Option<DeadLetterRecord>, StoreError> {
        let path = entity.path();
        self.database
            .call(move |conn| {
                Ok(conn
                    .query_row(
                        &format!(
                            "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters WHERE entity = ?1 AND transport_sequence = ?2"
                        ),
                        params![path, sequence],
                        dead_letter_from_row,
                    )
                    .optional()?)
            })
            .await
    }

    async fn record_replay(
        &self,
        id: Uuid,
        replay: ReplayRecord,
        timeline: Option<TimelineEntry>,
    ) -> Result<(), StoreError> {
        self.database
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let replays: Option<String> = tx
                    .query_row(
                        "SELECT replays FROM dead_letters WHERE id = ?1",
                        [id.to_string()],
                        |row| row.get(0),
                    )
                    .optional()?;
                let Some(replays) = replays else {
                    return Err(StoreError::NotFound {
                        what: "dead letter",
                        id: id.to_string(),
                    });
                };
                let mut replays: Vec<ReplayRecord> = serde_json::from_str(&replays)?;
                replays.push(replay);
                tx.execute(
                    "UPDATE dead_letters SET replays = ?1 WHERE id = ?2",
                    params![serde_json::to_string(&replays)?, id.to_string()],
                )?;
                if let Some(entry) = &timeline {
                    insert_timeline(&tx, std::slice::from_ref(entry))?;
                }
                tx.commit()?;
                Ok(())
            })
            .await
    }

    async fn purge_dead_letter(&self, id: Uuid) -> Result<(), StoreError> {
        self.database
            .call(move |conn| {
                let deleted = conn.execute("DELETE FROM dead_letters WHERE id = ?1", [id.to_string()])?;
                if deleted == 0 {
                    return Err(StoreError::NotFound {
                        what: "dead letter",
                        id: id.to_string(),
                    });
                }
                Ok(())
            })
            .await
    }

    async fn enqueue_outbox(
        &self,
        messages: Vec<OutboundMessage>,
        timeline: Vec<TimelineEntry>,
    ) -> Result<(), StoreError> {
        self.database
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                for message in &messages {
                    insert_outbox(&tx, None, None, message)?;
                }
                insert_timeline(&tx, &timeline)?;
                tx.commit()?;
                Ok(())
            })
            .await
    }

    async fn claim_outbox(&self, limit: usize, lease: Duration) -> Result<Vec<PendingOutbox>, StoreError> {
        self.database
            .call(move |conn| {
                let now = now_ms();
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let mut statement = tx.prepare_cached(
                    "UPDATE outbox SET claimed_until = ?1
                     WHERE id IN (SELECT id FROM outbox WHERE dispatched_at IS NULL
                                  AND (claimed_until IS NULL OR claimed_until <= ?2) ORDER BY id LIMIT ?3)
                     RETURNING id, destination, broker_message_id, message_type, correlation_id, body, scheduled_at,
                               source_message_id",
                )?;
                let mut pending = statement
                    .query_map(
                        params![now + duration_ms(lease), now, i64::try_from(limit).unwrap_or(i64::MAX)],
                        |row| {
                            Ok(PendingOutbox {
                                id: row.get(0)?,
                                message: OutboundMessage {
                                    destination: Destination::parse(&row.get::<_, String>(1)?),
                                    broker_message_id: row.get(2)?,
                                    message_type: row.get(3)?,
                                    correlation_id: row.get(4)?,
                                    body: row.get(5)?,
                                    scheduled_at: row.get::<_, Option<i64>>(6)?.map(from_unix_ms),
                                },
                                message_id: row.get(7)?,
                            })
                        },
                    )?
                    .collect::<Result<Vec<_>, _>>()?;
                drop(statement);
                tx.commit()?;
                pending.sort_by_key(|p| p.id);
                Ok(pending)
            })
            .await
    }

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError> {
        let ids = ids.to_vec();
        self.database
            .call(move |conn| {
                let now = now_ms();
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                for id in ids {
                    tx.execute("UPDATE outbox SET dispatched_at = ?1 WHERE id = ?2", params![now, id])?;
                }
                tx.commit()?;
                Ok(())
            })
            .await
    }

    async fn outbox_backlog(&self) -> Result<u64, StoreError> {
        self.database
            .call(|conn| {
                let count: i64 =
                    conn.query_row("SELECT COUNT(*) FROM outbox WHERE dispatched_at IS NULL", [], |row| {
                        row.get(0)
                    })?;
                Ok(u64::try_from(count).unwrap_or_default())
            })
            .await
    }

    async fn emitted(&self, correlation_id: &str) -> Result<Vec<Vec<u8>>, StoreError> {
        let correlation_id = correlation_id.to_owned();
        self.database
            .call(move |conn| {
                let mut statement = conn.prepare_cached(
                    "SELECT body FROM outbox WHERE correlation_id = ?1 AND broker_message_id NOT LIKE '%.retry-%'
                     ORDER BY id",
                )?;
                let rows = statement.query_map([correlation_id], |row| row.get::<_, Vec<u8>>(0))?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .await
    }

    async fn load_saga(&self, kind: &str, key: &str) -> Result<Option<SagaRecord>, StoreError> {
        let (kind, key) = (kind.to_owned(), key.to_owned());
        self.database.call(move |conn| load_saga_tx(conn, &kind, &key)).await
    }

    async fn list_sagas(&self, kind: Option<&str>) -> Result<Vec<SagaRecord>, StoreError> {
        let kind = kind.map(str::to_owned);
        self.database
            .call(move |conn| {
                let keys = {
                    let mut statement = conn.prepare(
                        "SELECT kind, key FROM sagas WHERE (?1 IS NULL OR kind = ?1) ORDER BY updated_at DESC",
                    )?;
                    statement
                        .query_map([&kind], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))?
                        .collect::<Result<Vec<_>, _>>()?
                };
                let mut sagas = Vec::new();
                for (kind, key) in keys {
                    if let Some(saga) = load_saga_tx(conn, &kind, &key)? {
                        sagas.push(saga);
                    }
                }
                Ok(sagas)
            })
            .await
    }

    async fn append_timeline(&self, entries: Vec<TimelineEntry>) -> Result<(), StoreError> {
        self.database
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                insert_timeline(&tx, &entries)?;
                tx.commit()?;
                Ok(())
            })
            .await
    }

    async fn timeline(&self, correlation_id: &str) -> Result<Vec<TimelineEntry>, StoreError> {
        let correlation_id = correlation_id.to_owned();
        self.database
            .call(move |conn| {
                let mut statement = conn.prepare_cached(
                    "SELECT correlation_id, message_id, message_type, consumer, status, attempt, at, detail
                     FROM timeline WHERE correlation_id = ?1 ORDER BY id",
                )?;
                let rows = statement.query_map([correlation_id], |row| {
                    Ok(TimelineEntry {
                        correlation_id: row.get(0)?,
                        message_id: row.get(1)?,
                        message_type: row.get(2)?,
                        consumer: row.get(3)?,
                        status: TimelineStatus::parse(&row.get::<_, String>(4)?),
                        attempt: row.get(5)?,
                        at: from_unix_ms(row.get(6)?),
                        detail: row.get(7)?,
                    })
                })?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .await
    }

    async fn record_delivery(&self, record: DeliveryRecord) -> Result<(), StoreError> {
        self.database
            .call(move |conn| {
                conn.execute(
                    &format!("INSERT OR IGNORE INTO deliveries ({DELIVERY_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
                    params![
                        record.correlation_id,
                        record.tenant_id,
                        record.started_by,
                        record.message_type,
                        record.message_id,
                        unix_ms(record.started_at)
                    ],
                )?;
                Ok(())
            })
            .await
    }

    async fn delivery_record(&self, correlation_id: &str) -> Result<Option<DeliveryRecord>, StoreError> {
        let correlation_id = correlation_id.to_owned();
        self.database
            .call(move |conn| {
                Ok(conn
                    .query_row(
                        &format!("SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE correlation_id = ?1"),
                        [correlation_id],
                        delivery_from_row,
                    )
                    .optional()?)
            })
            .await
    }

    async fn list_deliveries(&self, tenant_id: Option<&str>, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError> {
        let tenant_id = tenant_id.map(str::to_owned);
        self.database
            .call(move |conn| {
                let mut statement = conn.prepare_cached(&format!(
                    "SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE (?1 IS NULL OR tenant_id = ?1)
                     ORDER BY started_at DESC, rowid DESC LIMIT ?2"
                ))?;
                let rows = statement.query_map(
                    params![tenant_id, i64::try_from(limit).unwrap_or(i64::MAX)],
                    delivery_from_row,
                )?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .await
    }
}

#[async_trait]
impl AccessStore for SqliteStore {
    async fn insert_api_key(&self, key: ApiKeyRecord) -> Result<(), StoreError> {
        self.database
            .call(move |conn| {
                conn.execute(
                    &format!("INSERT INTO api_keys ({API_KEY_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
                    params![
                        key.id,
                        key.tenant_id,
                        serde_json::to_string(&key.scopes)?,
                        key.secret_hash,
                        key.description,
                        key.created_by,
                        unix_ms(key.created_at),
                        key.revoked_at.map(unix_ms)
                    ],
                )?;
                Ok(())
            })
            .await
    }

    async fn api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let id = id.to_owned();
        self.database
            .call(move |conn| {
                Ok(conn
                    .query_row(
                        &format!("SELECT {API_KEY_COLUMNS} FROM api_keys WHERE id = ?1"),
                        [id],
                        api_key_from_row,
                    )
                    .optional()?)
            })
            .await
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        self.database
            .call(move |conn| {
                let mut statement = conn.prepare_cached(&format!(
                    "SELECT {API_KEY_COLUMNS} FROM api_keys ORDER BY created_at, rowid"
                ))?;
                let rows = statement.query_map([], api_key_from_row)?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .await
    }

    async fn revoke_api_key(&self, id: &str, at: OffsetDateTime) -> Result<ApiKeyRecord, StoreError> {
        let id = id.to_owned();
        self.database
            .call(move |conn| {
                conn.query_row(
                    &format!(
                        "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?2) WHERE id = ?1
                         RETURNING {API_KEY_COLUMNS}"
                    ),
                    params![id, unix_ms(at)],
                    api_key_from_row,
                )
                .optional()?
                .ok_or(StoreError::NotFound { what: "API key", id })
            })
            .await
    }

    async fn claim_idempotency(
        &self,
        tenant_id: &str,
        key: &str,
        request_hash: &str,
        stale_after: Duration,
    ) -> Result<IdempotencyClaim, StoreError> {
        let (tenant_id, key, request_hash) = (tenant_id.to_owned(), key.to_owned(), request_hash.to_owned());
        self.database
            .call(move |conn| {
                // Immediate: the write lock is taken first, so another process
                // claiming the same key waits for this one's answer.
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let now = now_ms();
                let claim_id = Uuid::now_v7().to_string();
                let inserted = tx.execute(
                    "INSERT INTO http_idempotency (tenant_id, key, request_hash, claim_id, claimed_at)
                     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (tenant_id, key) DO NOTHING",
                    params![tenant_id, key, request_hash, claim_id, now],
                )?;
                if inserted > 0 {
                    tx.commit()?;
                    return Ok(IdempotencyClaim::Claimed);
                }
                let row = tx.query_row(
                    "SELECT request_hash, claim_id, claimed_at, status, response FROM http_idempotency
                     WHERE tenant_id = ?1 AND key = ?2",
                    params![tenant_id, key],
                    |row| {
                        Ok(IdempotencyRow {
                            request_hash: row.get(0)?,
                            claim_id: row.get(1)?,
                            claimed_at: row.get(2)?,
                            status: row.get(3)?,
                            response: row.get(4)?,
                        })
                    },
                )?;
                let claim = match row.status {
                    Some(status) => IdempotencyClaim::Completed {
                        request_hash: row.request_hash,
                        status: u16::try_from(status).unwrap_or_default(),
                        response: row.response.as_deref().map_or(Ok(Value::Null), serde_json::from_str)?,
                    },
                    None if row.claimed_at <= now.saturating_sub(duration_ms(stale_after)) => {
                        // Its process died: take it over, unless another taker did.
                        let taken = tx.execute(
                            "UPDATE http_idempotency SET request_hash = ?3, claim_id = ?4, claimed_at = ?5
                             WHERE tenant_id = ?1 AND key = ?2 AND status IS NULL AND claim_id = ?6",
                            params![tenant_id, key, request_hash, claim_id, now, row.claim_id],
                        )?;
                        if taken > 0 {
                            tracing::info!(tenant = %tenant_id, key = %key, "took over a stale idempotency claim");
                            IdempotencyClaim::Claimed
                        } else {
                            IdempotencyClaim::InProgress {
                                request_hash: row.request_hash,
                            }
                        }
                    }
                    None => IdempotencyClaim::InProgress {
                        request_hash: row.request_hash,
                    },
                };
                tx.commit()?;
                Ok(claim)
            })
            .await
    }

    async fn complete_idempotency(
        &self,
        tenant_id: &str,
        key: &str,
        status: u16,
        response: &Value,
    ) -> Result<(), StoreError> {
        let (tenant_id, key) = (tenant_id.to_owned(), key.to_owned());
        let response = serde_json::to_string(response)?;
        self.database
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let completed = tx.execute(
                    "UPDATE http_idempotency SET status = ?3, response = ?4, completed_at = ?5
                     WHERE tenant_id = ?1 AND key = ?2 AND status IS NULL",
                    params![tenant_id, key, status, response, now_ms()],
                )?;
                if completed == 0 {
                    // Already completed: the first answer stands.
                    let exists = tx
                        .query_row(
                            "SELECT 1 FROM http_idempotency WHERE tenant_id = ?1 AND key = ?2",
                            params![tenant_id, key],
                            |_| Ok(()),
                        )
                        .optional()?
                        .is_some();
                    if !exists {
                        return Err(StoreError::NotFound {
                            what: "idempotency key",
                            id: key,
                        });
                    }
                }
                tx.commit()?;
                Ok(())
            })
            .await
    }

    async fn release_idempotency(&self, tenant_id: &str, key: &str) -> Result<(), StoreError> {
        let (tenant_id, key) = (tenant_id.to_owned(), key.to_owned());
        self.database
            .call(move |conn| {
                conn.execute(
                    "DELETE FROM http_idempotency WHERE tenant_id = ?1 AND key = ?2 AND status IS NULL",
                    params![tenant_id, key],
                )?;
                Ok(())
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ports::store::SagaWrite;

    #[tokio::test]
    async fn sqlite_store_passes_the_behaviour_suite() {
        crate::ports::behaviour::store::run_all(|| async { SqliteStore::in_memory().unwrap() }).await;
    }

    /// The `sagas` table as bosun made it before sagas kept their tenant.
    const OLD_SAGAS: &str = "
        CREATE TABLE sagas (
            kind TEXT NOT NULL,
            key TEXT NOT NULL,
            version INTEGER NOT NULL,
            state TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            PRIMARY KEY (kind, key)
        );
        INSERT INTO sagas VALUES ('release', 'r-old', 1, '{\"step\": 1}', 1, 1);
    ";

    fn saga_columns(path: &Path) -> Vec<String> {
        let conn = rusqlite::Connection::open(path).unwrap();
        let mut statement = conn.prepare("SELECT name FROM pragma_table_info('sagas')").unwrap();
        statement
            .query_map([], |row| row.get::<_, String>(0))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
    }

    #[tokio::test]
    async fn an_old_state_db_gets_the_saga_tenant_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch(OLD_SAGAS)
            .unwrap();
        assert!(!saga_columns(&path).contains(&"tenant_id".to_owned()));

        // Several processes opening the old file at once: one adds the column.
        let opens: Vec<_> = (0..4)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || SqliteStore::open(&path).map(drop))
            })
            .collect();
        for open in opens {
            open.join().unwrap().unwrap();
        }
        let columns = saga_columns(&path);
        assert_eq!(
            columns.iter().filter(|name| *name == "tenant_id").count(),
            1,
            "{columns:?}"
        );

        let store = SqliteStore::open(&path).unwrap();
        let old = store.load_saga("release", "r-old").await.unwrap().unwrap();
        assert_eq!((old.version, old.tenant_id), (1, None));
        assert_eq!(old.state, json!({"step": 1}));
        let write = SagaWrite {
            kind: "release".into(),
            key: "r-old".into(),
            expected_version: 1,
            state: json!({"step": 2}),
            tenant_id: Some("contoso".into()),
        };
        let handled = HandledMessage {
            consumer: "release".into(),
            message_id: "m-2".into(),
            message_type: "CommitCreated".into(),
            saga: Some(write),
            outbox: vec![],
            timeline: vec![],
        };
        store.commit_handled(handled).await.unwrap();
        let saga = store.load_saga("release", "r-old").await.unwrap().unwrap();
        assert_eq!((saga.version, saga.tenant_id.as_deref()), (2, Some("contoso")));
    }

    #[tokio::test]
    async fn release_sagas_of_an_old_state_db_move_under_their_tenant() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        drop(SqliteStore::open(&path).unwrap());
        // Rows as a bosun before tenant keys wrote them.
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch(
                "INSERT INTO sagas VALUES ('release', 'rel-1', 1, '{}', 1, 1, 'contoso');
                 INSERT INTO saga_history VALUES ('release', 'rel-1', 1, 'm-1', 'BuildCompleted', 1);
                 INSERT INTO sagas VALUES ('release', 'rel-2', 1, '{}', 1, 1, NULL);
                 INSERT INTO saga_history VALUES ('release', 'rel-2', 1, 'm-2', 'BuildCompleted', 1);
                 INSERT INTO timeline (correlation_id, message_id, message_type, status, attempt, at)
                     VALUES ('c-2', 'm-2', 'BuildCompleted', 'completed', 0, 1);
                 INSERT INTO deliveries VALUES ('c-2', 'fabrikam', 'cli:test', 'ProvisionRepository', 'm-0', 1);
                 INSERT INTO sagas VALUES ('release', 'rel-3', 1, '{}', 1, 1, NULL);
                 INSERT INTO sagas VALUES ('gitops', 'contoso/prod', 1, '{}', 1, 1, 'contoso');
                 PRAGMA user_version = 0;",
            )
            .unwrap();
        let store = SqliteStore::open(&path).unwrap();
        let contoso = store.load_saga("release", "contoso/rel-1").await.unwrap().unwrap();
        assert_eq!(contoso.tenant_id.as_deref(), Some("contoso"));
        assert_eq!(contoso.history.len(), 1, "the history moves with the saga");
        let fabrikam = store.load_saga("release", "fabrikam/rel-2").await.unwrap().unwrap();
        assert_eq!(fabrikam.tenant_id.as_deref(), Some("fabrikam"));
        assert!(store.load_saga("release", "rel-1").await.unwrap().is_none());
        assert!(
            store.load_saga("release", "rel-3").await.unwrap().is_some(),
            "tenant unknown: kept"
        );
        assert!(store.load_saga("gitops", "contoso/prod").await.unwrap().is_some());
        // Opening again changes nothing.
        drop(store);
        let store = SqliteStore::open(&path).unwrap();
        assert!(store.load_saga("release", "contoso/rel-1").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn idempotency_claims_from_several_processes_have_one_winner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        // One store (one connection) per "process".
        let stores: Vec<SqliteStore> = (0..4).map(|_| SqliteStore::open(&path).unwrap()).collect();
        let start = std::sync::Arc::new(tokio::sync::Barrier::new(stores.len() * 2));
        let mut tasks = tokio::task::JoinSet::new();
        for (claimer, store) in stores.iter().cycle().take(stores.len() * 2).enumerate() {
            let (store, start) = (store.clone(), std::sync::Arc::clone(&start));
            tasks.spawn(async move {
                start.wait().await;
                store
                    .claim_idempotency("contoso", "k", &format!("h-{claimer}"), Duration::from_secs(600))
                    .await
                    .unwrap()
            });
        }
        let claims = tasks.join_all().await;
        let winners = claims
            .iter()
            .filter(|claim| **claim == IdempotencyClaim::Claimed)
            .count();
        assert_eq!(winners, 1, "{claims:?}");
        assert!(
            claims
                .iter()
                .all(|claim| matches!(claim, IdempotencyClaim::Claimed | IdempotencyClaim::InProgress { .. })),
            "{claims:?}"
        );
    }
}
