//! The SQLite store: `state.db` under the data directory.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::Destination;
use rusqlite::{OptionalExtension, Row, Transaction, TransactionBehavior, params};
use time::OffsetDateTime;
use uuid::Uuid;

use super::{
    AttemptRecord, CommitOutcome, DeadLetterFilter, DeadLetterRecord, DeadLetterStatus, HandledMessage, PendingOutbox,
    ReplayRecord, SagaHistoryEntry, SagaRecord, Store, StoreError, TimelineEntry, TimelineStatus,
};
use crate::sqlite::Database;
use crate::transport::{OutboundMessage, duration_ms, from_unix_ms, unix_ms};

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
";

/// The SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    database: Database,
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Ok(Self {
            database: Database::open(path, SCHEMA)?,
        })
    }

    /// An in-memory store (tests).
    pub fn in_memory() -> Result<Self, StoreError> {
        Ok(Self {
            database: Database::open_in_memory(SCHEMA)?,
        })
    }
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
    let Some((version, state, created_at, updated_at)) = conn
        .query_row(
            "SELECT version, state, created_at, updated_at FROM sagas WHERE kind = ?1 AND key = ?2",
            params![kind, key],
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, i64>(3)?,
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
        state: serde_json::from_str(&state)?,
        created_at: from_unix_ms(created_at),
        updated_at: from_unix_ms(updated_at),
        history,
    }))
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
                    tx.execute(
                        "INSERT INTO sagas (kind, key, version, state, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?5)
                         ON CONFLICT (kind, key) DO UPDATE SET version = excluded.version, state = excluded.state,
                            updated_at = excluded.updated_at",
                        params![saga.kind, saga.key, version, state, now],
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
                     ORDER BY dead_lettered_at DESC, id DESC"
                ))?;
                let rows = statement.query_map(
                    params![
                        filter.consumer,
                        filter.message_type,
                        filter.since.map(unix_ms),
                        filter.include_replayed
                    ],
                    dead_letter_from_row,
                )?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .await
    }

    async fn dead_letter(&self, id: &str) -> Result<DeadLetterRecord, StoreError> {
        let id = id.to_owned();
        self.database
            .call(move |conn| {
                let mut statement = conn.prepare(&format!(
                    "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters WHERE id LIKE ?1 || '%' ORDER BY id LIMIT 2"
                ))?;
                let found = statement
                    .query_map([&id], dead_letter_from_row)?
                    .collect::<Result<Vec<_>, _>>()?;
                if let Some(exact) = found.iter().find(|record| record.id.to_string() == id) {
                    return Ok(exact.clone());
                }
                match found.as_slice() {
                    [only] if id.len() >= 4 => Ok(only.clone()),
                    _ => Err(StoreError::NotFound {
                        what: "dead letter (give the full id or a unique prefix of at least 4 characters)",
                        id,
                    }),
                }
            })
            .await
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sqlite_store_passes_the_behaviour_suite() {
        super::super::behaviour::run_all(|| async { SqliteStore::in_memory().unwrap() }).await;
    }
}
