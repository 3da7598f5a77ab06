//! The embedded transport: queues, the events topic and its subscriptions in
//! a SQLite file under the data directory, durable across restarts and
//! shared safely by several processes.
//!
//! Each row of `messages` is one message in one entity (a queue or a
//! subscription; sending to the topic writes one row per matching
//! subscription). A receive claims ready rows in one `IMMEDIATE` transaction
//! by giving them a lock token and a lock expiry; an expired lock makes the
//! row receivable again. A row whose delivery count has reached the maximum
//! is moved to the dead-letter state (`MaxDeliveryCountExceeded`) instead of
//! being delivered again, as Service Bus does. `duplicates` remembers broker
//! message ids per destination for duplicate detection, for seven days
//! (records past the window are deleted in batches by retention).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::Destination;
use rusqlite::{OptionalExtension, TransactionBehavior, params};
use time::OffsetDateTime;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::backends::sqlite::Database;
use crate::ports::transport::{
    DeadLetteredMessage, LockToken, OutboundMessage, ReceivedMessage, Topology, Transport, TransportAdmin,
    TransportError, duration_ms, from_unix_ms, unix_ms,
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS messages (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    entity TEXT NOT NULL,
    broker_message_id TEXT NOT NULL,
    message_type TEXT,
    correlation_id TEXT,
    body BLOB NOT NULL,
    enqueued_at INTEGER NOT NULL,
    visible_at INTEGER NOT NULL,
    delivery_count INTEGER NOT NULL DEFAULT 0,
    lock_token TEXT,
    locked_until INTEGER,
    dead_lettered INTEGER NOT NULL DEFAULT 0,
    dead_letter_reason TEXT,
    dead_letter_description TEXT,
    dead_lettered_at INTEGER
);
-- Receives walk an entity's live rows in sequence order and stop at their
-- limit (no sort of every ready row); the earlier (.., visible_at, sequence)
-- index made each receive sort the whole ready backlog.
DROP INDEX IF EXISTS messages_ready;
CREATE INDEX IF NOT EXISTS messages_by_sequence ON messages (entity, dead_lettered, sequence);
CREATE TABLE IF NOT EXISTS duplicates (
    destination TEXT NOT NULL,
    broker_message_id TEXT NOT NULL,
    seen_at INTEGER NOT NULL,
    PRIMARY KEY (destination, broker_message_id)
);
-- Retention deletes records past the window by age (prune_duplicates).
CREATE INDEX IF NOT EXISTS duplicates_age ON duplicates (seen_at);
CREATE TABLE IF NOT EXISTS subscriptions (
    topic TEXT NOT NULL,
    name TEXT NOT NULL,
    event_types TEXT NOT NULL,
    PRIMARY KEY (topic, name)
);
CREATE TABLE IF NOT EXISTS queues (name TEXT PRIMARY KEY);
";

/// How long a broker message id is remembered for duplicate detection.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// The SQLite transport.
#[derive(Debug, Clone)]
pub struct EmbeddedTransport {
    database: Database,
    max_delivery_count: u32,
    arrivals: Arc<Arrivals>,
}

/// Wakes this process's receivers when it sends, without losing a send
/// that comes between a receive that found nothing and the wait after it
/// (`Notify::notify_waiters` keeps no permit): every send bumps a
/// generation, a receive notes the generation it started at per entity,
/// and a wait whose entity has seen a newer one returns at once.
///
/// Other processes' writes are seen by one watcher per transport, which
/// asks SQLite every poll interval whether another connection committed
/// to the file (`PRAGMA data_version`, one statement, no transaction) and
/// wakes every receiver when one did. A receive that finds nothing notes
/// when the entity's next message becomes receivable (scheduled, or its
/// lock runs out); its wait lasts until then, a wake, or
/// [`IDLE_RECHECK`], whichever is first. So an idle process costs one
/// statement per poll interval, not a write transaction per entity.
#[derive(Debug, Default)]
struct Arrivals {
    notify: Notify,
    generation: AtomicU64,
    seen: std::sync::Mutex<HashMap<String, u64>>,
    /// Per entity, when (Unix ms) its next message becomes receivable, as
    /// its last empty receive found (`i64::MAX`: none there).
    due: std::sync::Mutex<HashMap<String, i64>>,
    /// Whether the watcher of other processes' writes runs.
    watching: std::sync::OnceLock<()>,
}

/// The longest an idle receiver waits without looking again, whatever
/// it was told: a safety net under the wakes and due times.
const IDLE_RECHECK: Duration = Duration::from_secs(5);

impl Arrivals {
    fn arrived(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Called as a receive of `entity` starts.
    fn receiving(&self, entity: &str) {
        let now = self.generation.load(Ordering::SeqCst);
        if let Ok(mut seen) = self.seen.lock() {
            seen.insert(entity.to_owned(), now);
        }
    }

    /// Notes when `entity`'s next message becomes receivable (Unix ms).
    fn due(&self, entity: &str, at: i64) {
        if let Ok(mut due) = self.due.lock() {
            due.insert(entity.to_owned(), at);
        }
    }

    async fn wait(&self, entity: &str, timeout: Duration) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let seen = self.seen.lock().ok().and_then(|seen| seen.get(entity).copied());
        if seen.is_some_and(|seen| seen != self.generation.load(Ordering::SeqCst)) {
            return;
        }
        let due = self.due.lock().ok().and_then(|due| due.get(entity).copied());
        let wait = match due {
            // Watched: until the next message is due, a wake, or the recheck.
            Some(at) if self.watching.get().is_some() => {
                let now = unix_ms(OffsetDateTime::now_utc());
                let until = u64::try_from(at.saturating_sub(now)).unwrap_or(0);
                Duration::from_millis(until).min(IDLE_RECHECK).max(timeout)
            }
            _ => timeout,
        };
        let _ = tokio::time::timeout(wait, notified).await;
    }
}

/// Wakes `arrivals`' receivers whenever another connection commits to the
/// database, looking every `interval`, until the transport is dropped.
async fn watch_other_writers(
    database: std::sync::Weak<crate::backends::sqlite::Shared>,
    arrivals: std::sync::Weak<Arrivals>,
    interval: Duration,
) {
    let mut last: Option<i64> = None;
    loop {
        tokio::time::sleep(interval).await;
        let (Some(connection), Some(arrivals)) = (database.upgrade(), arrivals.upgrade()) else {
            return;
        };
        let version = Database::from_shared(connection)
            .call(|conn| {
                conn.prepare_cached("PRAGMA data_version")?
                    .query_row([], |row| row.get::<_, i64>(0))
            })
            .await;
        match version {
            Ok(version) => {
                if last.is_some_and(|last| last != version) {
                    arrivals.arrived();
                }
                last = Some(version);
            }
            // Cannot tell: wake everyone, as a plain poll would have.
            Err(err) => {
                tracing::debug!(error = %err, "cannot read the transport's data_version; waking receivers");
                arrivals.arrived();
            }
        }
    }
}

impl EmbeddedTransport {
    /// Opens the transport database at `path`.
    pub fn open(path: &Path, max_delivery_count: u32) -> Result<Self, TransportError> {
        Ok(Self {
            database: Database::open(path, SCHEMA)
                .map_err(|err| TransportError::from(err).doing(format!("opening {}", path.display())))?,
            max_delivery_count,
            arrivals: Arc::default(),
        })
    }

    /// An in-memory instance (tests).
    pub fn in_memory(max_delivery_count: u32) -> Result<Self, TransportError> {
        Ok(Self {
            database: Database::open_in_memory(SCHEMA)?,
            max_delivery_count,
            arrivals: Arc::default(),
        })
    }
}

fn known_entity(tx: &rusqlite::Transaction<'_>, destination: &Destination) -> Result<bool, rusqlite::Error> {
    match destination {
        Destination::Queue(name) => tx
            .prepare_cached("SELECT 1 FROM queues WHERE name = ?1")?
            .query_row([name], |_| Ok(()))
            .optional()
            .map(|found| found.is_some()),
        Destination::Topic(topic) => tx
            .prepare_cached("SELECT 1 FROM subscriptions WHERE topic = ?1 LIMIT 1")?
            .query_row([topic], |_| Ok(()))
            .optional()
            .map(|found| found.is_some()),
        Destination::Subscription { topic, subscription } => tx
            .prepare_cached("SELECT 1 FROM subscriptions WHERE topic = ?1 AND name = ?2")?
            .query_row([topic, subscription], |_| Ok(()))
            .optional()
            .map(|found| found.is_some()),
    }
}

#[async_trait]
impl Transport for EmbeddedTransport {
    async fn ensure_topology(&self, topology: &Topology) -> Result<(), TransportError> {
        let topology = topology.clone();
        self.database
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                for queue in &topology.queues {
                    tx.prepare_cached("INSERT OR IGNORE INTO queues (name) VALUES (?1)")?
                        .execute([queue])?;
                }
                for subscription in &topology.subscriptions {
                    tx.prepare_cached(
                        "INSERT INTO subscriptions (topic, name, event_types) VALUES (?1, ?2, ?3)
                         ON CONFLICT (topic, name) DO UPDATE SET event_types = excluded.event_types",
                    )?
                    .execute(params![
                        topology.topic,
                        subscription.name,
                        subscription.event_types.join(",")
                    ])?;
                }
                tx.commit()?;
                Ok::<_, TransportError>(())
            })
            .await
            .map_err(|err| err.doing("creating the topology"))
    }

    async fn send(&self, messages: Vec<OutboundMessage>) -> Result<(), TransportError> {
        if messages.is_empty() {
            return Ok(());
        }
        let count = messages.len();
        self.database
            .call(move |conn| {
                let now = unix_ms(OffsetDateTime::now_utc());
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                // A record past the window counts as not seen (retention
                // deletes it later, in batches, off the send path).
                let window_start = now - duration_ms(DUPLICATE_WINDOW);
                for message in &messages {
                    if !known_entity(&tx, &message.destination)? {
                        return Err(TransportError::NoSuchEntity(message.destination.path()));
                    }
                    let fresh = tx.prepare_cached("INSERT INTO duplicates (destination, broker_message_id, seen_at) VALUES (?1, ?2, ?3)
                         ON CONFLICT (destination, broker_message_id) DO UPDATE SET seen_at = excluded.seen_at
                            WHERE duplicates.seen_at < ?4")?.execute(params![message.destination.path(), message.broker_message_id, now, window_start])?;
                    if fresh == 0 {
                        continue;
                    }
                    let entities: Vec<String> = match &message.destination {
                        Destination::Topic(topic) => {
                            let mut statement =
                                tx.prepare_cached("SELECT name, event_types FROM subscriptions WHERE topic = ?1")?;
                            let rows = statement.query_map([topic], |row| {
                                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
                            })?;
                            let mut matching = Vec::new();
                            for row in rows {
                                let (name, types) = row?;
                                if message
                                    .message_type
                                    .as_deref()
                                    .is_some_and(|t| types.split(',').any(|e| e == t))
                                {
                                    matching.push(format!("{topic}/subscriptions/{name}"));
                                }
                            }
                            matching
                        }
                        other => vec![other.path()],
                    };
                    let visible_at = message.scheduled_at.map_or(now, unix_ms);
                    for entity in entities {
                        tx.prepare_cached("INSERT INTO messages (entity, broker_message_id, message_type, correlation_id, body, enqueued_at, visible_at)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")?.execute(params![
                                entity,
                                message.broker_message_id,
                                message.message_type,
                                message.correlation_id,
                                message.body,
                                now,
                                visible_at
                            ])?;
                    }
                }
                tx.commit()?;
                Ok(())
            })
            .await
            .map_err(|err| err.doing(format!("sending {count} message(s)")))?;
        self.arrivals.arrived();
        Ok(())
    }

    async fn receive(
        &self,
        entity: &Destination,
        max: usize,
        lock_duration: Duration,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        let doing = format!("receiving from {entity}");
        let entity_path = entity.path();
        self.arrivals.receiving(&entity_path);
        let arrivals = Arc::clone(&self.arrivals);
        let entity = entity.clone();
        let max_delivery_count = self.max_delivery_count;
        self.database
            .call(move |conn| {
                let now = unix_ms(OffsetDateTime::now_utc());
                let path = entity.path();
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                // The first `max` available rows by sequence; those already
                // delivered the maximum number of times go to the
                // dead-letter sub-queue, the rest are locked. The cost is
                // that of the rows claimed, whatever the backlog.
                let candidates: Vec<(i64, u32)> = tx
                    .prepare_cached(
                        "SELECT sequence, delivery_count FROM messages
                         WHERE entity = ?1 AND dead_lettered = 0 AND visible_at <= ?2
                           AND (locked_until IS NULL OR locked_until <= ?2)
                         ORDER BY sequence LIMIT ?3",
                    )?
                    .query_map(params![path, now, i64::try_from(max).unwrap_or(i64::MAX)], |row| {
                        Ok((row.get(0)?, row.get(1)?))
                    })?
                    .collect::<Result<_, _>>()?;
                let token = Uuid::now_v7();
                let locked_until = now + duration_ms(lock_duration);
                let mut exhaust = tx.prepare_cached(
                    "UPDATE messages SET dead_lettered = 1, dead_letter_reason = 'MaxDeliveryCountExceeded',
                        dead_letter_description = 'message was delivered ' || delivery_count || ' times without being completed',
                        dead_lettered_at = ?1, lock_token = NULL, locked_until = NULL
                     WHERE sequence = ?2",
                )?;
                let mut lock = tx.prepare_cached(
                    "UPDATE messages SET delivery_count = delivery_count + 1, lock_token = ?1, locked_until = ?2
                     WHERE sequence = ?3
                     RETURNING sequence, broker_message_id, message_type, body, delivery_count, enqueued_at",
                )?;
                let mut received = Vec::with_capacity(candidates.len());
                for (sequence, delivery_count) in candidates {
                    if delivery_count >= max_delivery_count {
                        exhaust.execute(params![now, sequence])?;
                        continue;
                    }
                    received.push(lock.query_row(params![token.to_string(), locked_until, sequence], |row| {
                        Ok(ReceivedMessage {
                            lock: LockToken {
                                entity: entity.clone(),
                                sequence: row.get(0)?,
                                token,
                            },
                            broker_message_id: row.get(1)?,
                            message_type: row.get(2)?,
                            body: row.get(3)?,
                            delivery_count: row.get(4)?,
                            enqueued_at: from_unix_ms(row.get(5)?),
                            locked_until: from_unix_ms(locked_until),
                            handled: None,
                        })
                    })?);
                }
                drop((exhaust, lock));
                // Nothing to hand out: when is the next message receivable?
                // (Its wait lasts until then, unless something wakes it.)
                let due = if received.is_empty() {
                    Some(
                        tx.prepare_cached(
                            "SELECT min(max(visible_at, coalesce(locked_until, 0))) FROM messages
                             WHERE entity = ?1 AND dead_lettered = 0",
                        )?
                        .query_row([&path], |row| row.get::<_, Option<i64>>(0))?
                        .unwrap_or(i64::MAX),
                    )
                } else {
                    None
                };
                tx.commit()?;
                Ok((received, due))
            })
            .await
            .map(|(received, due)| {
                if let Some(due) = due {
                    arrivals.due(&entity_path, due);
                }
                received
            })
            .map_err(|err: TransportError| err.doing(doing))
    }

    async fn wait_for_messages(&self, entity: &Destination, timeout: Duration) {
        // Same-process sends wake us at once (also one made since the last
        // receive began); other processes' writes by the watcher, within
        // a poll interval.
        if self.arrivals.watching.set(()).is_ok() {
            tokio::spawn(watch_other_writers(
                self.database.downgrade(),
                Arc::downgrade(&self.arrivals),
                timeout,
            ));
        }
        self.arrivals.wait(&entity.path(), timeout).await;
    }

    async fn renew_lock(&self, lock: &LockToken, lock_duration: Duration) -> Result<OffsetDateTime, TransportError> {
        let doing = format!("renewing the lock on {} message {}", lock.entity, lock.sequence);
        let lock = lock.clone();
        self.database
            .call(move |conn| {
                let now = unix_ms(OffsetDateTime::now_utc());
                let until = now + duration_ms(lock_duration);
                let changed = conn
                    .prepare_cached(
                        "UPDATE messages SET locked_until = ?1
                     WHERE sequence = ?2 AND lock_token = ?3 AND locked_until > ?4 AND dead_lettered = 0",
                    )?
                    .execute(params![until, lock.sequence, lock.token.to_string(), now])?;
                if changed == 0 {
                    return Err(lock_lost(&lock));
                }
                Ok(from_unix_ms(until))
            })
            .await
            .map_err(|err| err.doing(doing))
    }

    async fn is_locked(&self, lock: &LockToken) -> Result<bool, TransportError> {
        let doing = format!("checking the lock on {} message {}", lock.entity, lock.sequence);
        let lock = lock.clone();
        self.database
            .read(move |conn| {
                let now = unix_ms(OffsetDateTime::now_utc());
                Ok(conn
                    .prepare_cached(
                        "SELECT 1 FROM messages
                         WHERE sequence = ?1 AND lock_token = ?2 AND locked_until > ?3 AND dead_lettered = 0",
                    )?
                    .query_row(params![lock.sequence, lock.token.to_string(), now], |_| Ok(()))
                    .optional()?
                    .is_some())
            })
            .await
            .map_err(|err: TransportError| err.doing(doing))
    }

    async fn complete(&self, lock: &LockToken) -> Result<(), TransportError> {
        let doing = format!("completing {} message {}", lock.entity, lock.sequence);
        let lock = lock.clone();
        // Completions at the same moment share one transaction.
        self.database
            .write(move |conn| {
                let now = unix_ms(OffsetDateTime::now_utc());
                let changed = conn.prepare_cached("DELETE FROM messages WHERE sequence = ?1 AND lock_token = ?2 AND locked_until > ?3 AND dead_lettered = 0")?.execute(params![lock.sequence, lock.token.to_string(), now])?;
                if changed == 0 {
                    return Err(lock_lost(&lock));
                }
                Ok(())
            })
            .await
            .map_err(|err| err.doing(doing))
    }

    async fn abandon(&self, lock: &LockToken) -> Result<(), TransportError> {
        let doing = format!("abandoning {} message {}", lock.entity, lock.sequence);
        let lock = lock.clone();
        self.database
            .call(move |conn| {
                let changed = conn
                    .prepare_cached(
                        "UPDATE messages SET lock_token = NULL, locked_until = NULL
                     WHERE sequence = ?1 AND lock_token = ?2 AND dead_lettered = 0",
                    )?
                    .execute(params![lock.sequence, lock.token.to_string()])?;
                if changed == 0 {
                    return Err(lock_lost(&lock));
                }
                Ok(())
            })
            .await
            .map_err(|err| err.doing(doing))?;
        self.arrivals.arrived();
        Ok(())
    }

    async fn dead_letter(&self, lock: &LockToken, reason: &str, description: &str) -> Result<(), TransportError> {
        let doing = format!("dead-lettering {} message {}", lock.entity, lock.sequence);
        let lock = lock.clone();
        let reason = reason.to_owned();
        let description = description.to_owned();
        self.database
            .call(move |conn| {
                let now = unix_ms(OffsetDateTime::now_utc());
                let changed = conn
                    .prepare_cached(
                        "UPDATE messages SET dead_lettered = 1, dead_letter_reason = ?1, dead_letter_description = ?2,
                        dead_lettered_at = ?3, lock_token = NULL, locked_until = NULL
                     WHERE sequence = ?4 AND lock_token = ?5 AND locked_until > ?3 AND dead_lettered = 0",
                    )?
                    .execute(params![reason, description, now, lock.sequence, lock.token.to_string()])?;
                if changed == 0 {
                    return Err(lock_lost(&lock));
                }
                Ok(())
            })
            .await
            .map_err(|err| err.doing(doing))
    }

    async fn reachable(&self) -> Result<(), TransportError> {
        self.database
            .call(|conn| {
                conn.prepare_cached("SELECT 1")?.query_row([], |_| Ok(()))?;
                Ok(())
            })
            .await
            .map_err(|err: TransportError| err.doing("checking the embedded transport's database"))
    }

    async fn prune_duplicates(&self, now: OffsetDateTime, limit: usize) -> Result<u64, TransportError> {
        let before = unix_ms(now) - duration_ms(DUPLICATE_WINDOW);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.database
            .call(move |conn| {
                let deleted = conn
                    .prepare_cached(
                        "DELETE FROM duplicates WHERE rowid IN (
                             SELECT rowid FROM duplicates WHERE seen_at < ?1 ORDER BY seen_at LIMIT ?2)",
                    )?
                    .execute(params![before, limit])?;
                Ok(u64::try_from(deleted).unwrap_or(u64::MAX))
            })
            .await
            .map_err(|err: TransportError| err.doing("pruning duplicate-detection records"))
    }
}

#[async_trait]
impl TransportAdmin for EmbeddedTransport {
    async fn peek_dead_letters(
        &self,
        entity: &Destination,
        max: usize,
    ) -> Result<Vec<DeadLetteredMessage>, TransportError> {
        let doing = format!("listing the dead letters of {entity}");
        let entity = entity.clone();
        self.database
            .call(move |conn| {
                let mut statement = conn.prepare_cached(
                    "SELECT sequence, broker_message_id, message_type, body, delivery_count, dead_letter_reason,
                            dead_letter_description, enqueued_at, dead_lettered_at
                     FROM messages WHERE entity = ?1 AND dead_lettered = 1 ORDER BY sequence LIMIT ?2",
                )?;
                let rows =
                    statement.query_map(params![entity.path(), i64::try_from(max).unwrap_or(i64::MAX)], |row| {
                        Ok(DeadLetteredMessage {
                            entity: entity.clone(),
                            sequence: row.get(0)?,
                            broker_message_id: row.get(1)?,
                            message_type: row.get(2)?,
                            body: row.get(3)?,
                            delivery_count: row.get(4)?,
                            reason: row.get::<_, Option<String>>(5)?.unwrap_or_default(),
                            description: row.get::<_, Option<String>>(6)?.unwrap_or_default(),
                            enqueued_at: from_unix_ms(row.get(7)?),
                            dead_lettered_at: from_unix_ms(row.get::<_, Option<i64>>(8)?.unwrap_or_default()),
                        })
                    })?;
                Ok(rows.collect::<Result<_, _>>()?)
            })
            .await
            .map_err(|err: TransportError| err.doing(doing))
    }

    async fn remove_dead_letter(&self, entity: &Destination, sequence: i64) -> Result<bool, TransportError> {
        let path = entity.path();
        self.database
            .call(move |conn| {
                let changed = conn
                    .prepare_cached("DELETE FROM messages WHERE entity = ?1 AND sequence = ?2 AND dead_lettered = 1")?
                    .execute(params![path, sequence])?;
                Ok(changed > 0)
            })
            .await
            .map_err(|err: TransportError| err.doing(format!("removing dead letter {sequence} of {entity}")))
    }

    async fn depth(&self, entity: &Destination) -> Result<u64, TransportError> {
        let path = entity.path();
        self.database
            .call(move |conn| {
                let count: i64 = conn
                    .prepare_cached("SELECT COUNT(*) FROM messages WHERE entity = ?1 AND dead_lettered = 0")?
                    .query_row([path], |row| row.get(0))?;
                Ok(u64::try_from(count).unwrap_or_default())
            })
            .await
            .map_err(|err: TransportError| err.doing(format!("counting the messages of {entity}")))
    }
}

fn lock_lost(lock: &LockToken) -> TransportError {
    TransportError::LockLost {
        entity: lock.entity.path(),
        sequence: lock.sequence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn embedded_transport_passes_the_behaviour_suite() {
        crate::ports::behaviour::transport::run_all(|max| async move { EmbeddedTransport::in_memory(max).unwrap() })
            .await;
    }

    #[tokio::test]
    async fn embedded_transport_prunes_duplicate_records_in_batches() {
        let transport = EmbeddedTransport::in_memory(10).unwrap();
        transport.ensure_topology(&Topology::from_routing()).await.unwrap();
        crate::ports::behaviour::transport::duplicate_records_are_pruned_in_batches(&transport).await;
    }

    #[tokio::test]
    async fn messages_survive_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("transport.db");
        {
            let transport = EmbeddedTransport::open(&path, 10).unwrap();
            transport.ensure_topology(&Topology::from_routing()).await.unwrap();
            transport
                .send(vec![crate::ports::behaviour::transport::outbound(
                    Destination::Queue("commit".into()),
                    "m-1",
                    "CreateCommit",
                )])
                .await
                .unwrap();
        }
        let reopened = EmbeddedTransport::open(&path, 10).unwrap();
        let received = reopened
            .receive(&Destination::Queue("commit".into()), 10, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(received.len(), 1);
        assert_eq!(received[0].broker_message_id, "m-1");
    }

    #[tokio::test]
    async fn a_send_between_an_empty_receive_and_the_wait_is_not_missed() {
        let transport = EmbeddedTransport::in_memory(10).unwrap();
        transport.ensure_topology(&Topology::from_routing()).await.unwrap();
        let commit = Destination::Queue("commit".into());
        let lock = Duration::from_secs(30);
        assert!(transport.receive(&commit, 10, lock).await.unwrap().is_empty());
        // Sent after the receive found nothing, before the receiver waits.
        transport
            .send(vec![crate::ports::behaviour::transport::outbound(
                commit.clone(),
                "m-1",
                "CreateCommit",
            )])
            .await
            .unwrap();
        // A 60 s wait: only noticing the send can end it before the timeout.
        tokio::time::timeout(
            Duration::from_secs(10),
            transport.wait_for_messages(&commit, Duration::from_secs(60)),
        )
        .await
        .expect("the wait saw the send made since the last receive");
        assert_eq!(transport.receive(&commit, 10, lock).await.unwrap().len(), 1);
        // With nothing new since this receive, a wait does wait.
        assert!(
            tokio::time::timeout(
                Duration::from_millis(100),
                transport.wait_for_messages(&commit, Duration::from_secs(60))
            )
            .await
            .is_err(),
            "a wait with nothing new returned at once"
        );
    }
}
