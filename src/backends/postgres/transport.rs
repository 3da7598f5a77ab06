//! The PostgreSQL transport: queues, the events topic and its subscriptions
//! in PostgreSQL, for teams that run several bosun replicas without Service
//! Bus. The same peek-lock semantics as the [embedded](crate::backends::sqlite::transport)
//! transport, on the tables of migration 2 (`migrations/postgres/`).
//!
//! - Each row of `bosun_messages` is one message in one entity (a queue or a
//!   subscription); a send to the topic writes one row per subscription
//!   whose filter lets the message type through.
//! - A receive claims ready rows in one statement (`bosun_claim`, migrations
//!   10 and 11): a materialized CTE picks them `FOR UPDATE SKIP LOCKED`, so
//!   competing receivers (threads or processes) never claim the same row and
//!   never wait for each other, and the update gives them a lock token, a
//!   lock expiry and one more delivery. Rows come in the order they became
//!   visible, then by sequence: the order of `bosun_messages_claim`, which
//!   the claim walks and stops at its limit whatever the table's statistics
//!   (sorting is off in the function), so its cost is that of the claimed
//!   rows, whatever the backlog of the entity or of any other. It is planned
//!   once per connection (one plan for any values, with the nodes that read
//!   a whole table or hash disabled), not on every call.
//!   An expired lock makes the row receivable again. A row already delivered
//!   the maximum number of times moves to the dead-letter sub-queue
//!   (`MaxDeliveryCountExceeded`) instead, in the same statement.
//! - Scheduled messages wait in the table until `visible_at`.
//! - `bosun_duplicates` remembers broker message ids per destination for
//!   seven days (duplicate detection); records past the window are deleted
//!   in batches by retention ([`Transport::prune_duplicates`]).
//! - Wake-ups: `NOTIFY bosun_messages, '<entity>'` is sent (batched, after
//!   commit, by the database's notifier: see `notify`) for every entity a
//!   committed transaction gave a message it can deliver now, and by
//!   `abandon`. Each transport instance runs one task that `LISTEN`s on
//!   a dedicated connection and wakes the receivers waiting on that entity;
//!   `wait_for_messages` still returns after its timeout, which finds
//!   scheduled messages, expired locks and notifications lost to a dropped
//!   connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::Destination;
use sqlx_core::query::query;
use sqlx_core::query_scalar::query_scalar;
use sqlx_core::row::Row;
use sqlx_postgres::PgPool;
use time::OffsetDateTime;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::backends::postgres::listen::{Listener, listen};
use crate::backends::postgres::notify::Wakes;
use crate::backends::postgres::queue::{Enqueued, KnownEntities, complete_locked, dead_letter_locked, enqueue};
use crate::backends::postgres::{MigrationReport, PoolSettings, PostgresDatabase};
use crate::ports::transport::{
    DeadLetteredMessage, HandledAtClaim, LockToken, OutboundMessage, ReceivedMessage, Topology, Transport,
    TransportAdmin, TransportError, duration_ms,
};

/// The channel sends and `abandon` notify on; the payload is the entity
/// path.
pub const NOTIFY_CHANNEL: &str = super::notify::MESSAGES_CHANNEL;

/// How long a broker message id is remembered for duplicate detection (the
/// `interval '7 days'` of the enqueue statement in `queue.rs`); records past
/// it count as not seen and are deleted in batches by retention
/// ([`Transport::prune_duplicates`]).
const DUPLICATE_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// The PostgreSQL transport.
#[derive(Debug, Clone)]
pub struct PostgresTransport {
    database: PostgresDatabase,
    max_delivery_count: u32,
    wakeups: Arc<Wakeups>,
    /// Whether the claim also looks up each message's idempotency record
    /// (the store shares this database).
    handled_in_claim: bool,
}

impl PostgresTransport {
    /// A transport on `database`, dead-lettering messages delivered
    /// `max_delivery_count` times.
    pub fn new(database: PostgresDatabase, max_delivery_count: u32) -> Self {
        Self {
            database,
            max_delivery_count,
            wakeups: Arc::new(Wakeups::default()),
            handled_in_claim: false,
        }
    }

    /// Makes each receive also say whether the store records the claimed
    /// message as handled by the entity's consumer (its queue's or
    /// subscription's name), in the same statement: the host then needs no
    /// second round trip before a handler without a saga runs. Only for a
    /// transport whose database is also the store's (`bosun_handled` here is
    /// the store's table; in another database it would say "not handled" of
    /// everything).
    pub fn checking_handled_in_claim(mut self) -> Self {
        self.handled_in_claim = true;
        self
    }

    /// Connects to `url` with the default pool settings.
    pub async fn connect(url: &str, max_delivery_count: u32) -> Result<Self, TransportError> {
        Ok(Self::new(PostgresDatabase::connect(url).await?, max_delivery_count))
    }

    /// Connects to `url` with `pool` settings.
    pub async fn connect_with(url: &str, max_delivery_count: u32, pool: PoolSettings) -> Result<Self, TransportError> {
        Ok(Self::new(
            PostgresDatabase::connect_with(url, pool).await?,
            max_delivery_count,
        ))
    }

    /// The database, to share with a [`PostgresStore`](crate::backends::postgres::store::PostgresStore).
    pub fn database(&self) -> &PostgresDatabase {
        &self.database
    }

    /// Applies missing migrations (see [`PostgresDatabase::migrate`]).
    pub async fn migrate(&self) -> Result<MigrationReport, TransportError> {
        Ok(self.database.migrate().await?)
    }

    /// Fails unless the database is at this bosun's schema version.
    pub async fn check_schema(&self) -> Result<(), TransportError> {
        Ok(self.database.check_schema().await?)
    }

    /// Starts the LISTEN task (done by the first
    /// [`wait_for_messages`](Transport::wait_for_messages) otherwise) and
    /// waits until it listens. From then on a waiting receiver is woken by
    /// every send that makes a message ready on its entity.
    pub async fn start_listening(&self) -> Result<(), TransportError> {
        let mut state = self.wakeups.start(self.database.pool());
        loop {
            match &*state.borrow_and_update() {
                ListenerState::Listening => return Ok(()),
                ListenerState::Failed(reason) => {
                    return Err(TransportError::unavailable(
                        format!("listening on `{NOTIFY_CHANNEL}`"),
                        reason.clone(),
                    ));
                }
                ListenerState::Connecting => {}
            }
            if state.changed().await.is_err() {
                return Err(TransportError::unavailable(
                    format!("listening on `{NOTIFY_CHANNEL}`"),
                    "the LISTEN task stopped",
                ));
            }
        }
    }
}

fn lock_lost(lock: &LockToken) -> TransportError {
    TransportError::LockLost {
        entity: lock.entity.path(),
        sequence: lock.sequence,
    }
}

fn count(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

fn limit(max: usize) -> i64 {
    i64::try_from(max).unwrap_or(i64::MAX)
}

#[async_trait]
impl Transport for PostgresTransport {
    async fn ensure_topology(&self, topology: &Topology) -> Result<(), TransportError> {
        self.ensure_topology_rows(topology)
            .await
            .map_err(|err| err.doing("creating the topology".to_owned()))
    }

    async fn send(&self, messages: Vec<OutboundMessage>) -> Result<(), TransportError> {
        let doing = format!("sending {} message(s)", messages.len());
        self.send_rows(messages).await.map_err(|err| err.doing(doing))
    }

    async fn receive(
        &self,
        entity: &Destination,
        max: usize,
        lock_duration: Duration,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        self.receive_rows(entity, max, lock_duration)
            .await
            .map_err(|err| err.doing(format!("receiving from {entity}")))
    }

    async fn wait_for_messages(&self, entity: &Destination, timeout: Duration) {
        let _ = self.wakeups.start(self.database.pool());
        let signal = self.wakeups.signal(&entity.path());
        let notified = signal.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        // Woken since the last receive began: that receive may have missed it.
        if signal.has_news() {
            return;
        }
        let _ = tokio::time::timeout(timeout, notified).await;
    }

    async fn renew_lock(&self, lock: &LockToken, lock_duration: Duration) -> Result<OffsetDateTime, TransportError> {
        self.renew_lock_rows(lock, lock_duration).await.map_err(|err| {
            err.doing(format!(
                "renewing the lock on {} message {}",
                lock.entity, lock.sequence
            ))
        })
    }

    async fn is_locked(&self, lock: &LockToken) -> Result<bool, TransportError> {
        let found = query(
            "SELECT 1 FROM bosun_messages
             WHERE sequence = $1 AND lock_token = $2 AND locked_until > now() AND NOT dead_lettered",
        )
        .bind(lock.sequence)
        .bind(lock.token)
        .fetch_optional(self.database.pool())
        .await
        .map_err(|err| {
            TransportError::from(err).doing(format!(
                "checking the lock on {} message {}",
                lock.entity, lock.sequence
            ))
        })?;
        Ok(found.is_some())
    }

    async fn complete(&self, lock: &LockToken) -> Result<(), TransportError> {
        self.complete_rows(lock)
            .await
            .map_err(|err| err.doing(format!("completing {} message {}", lock.entity, lock.sequence)))
    }

    async fn abandon(&self, lock: &LockToken) -> Result<(), TransportError> {
        self.abandon_rows(lock)
            .await
            .map_err(|err| err.doing(format!("abandoning {} message {}", lock.entity, lock.sequence)))
    }

    async fn dead_letter(&self, lock: &LockToken, reason: &str, description: &str) -> Result<(), TransportError> {
        self.dead_letter_rows(lock, reason, description)
            .await
            .map_err(|err| err.doing(format!("dead-lettering {} message {}", lock.entity, lock.sequence)))
    }

    async fn reachable(&self) -> Result<(), TransportError> {
        query("SELECT 1")
            .execute(self.database.pool())
            .await
            .map(|_| ())
            .map_err(|err| TransportError::from(err).doing("checking the PostgreSQL transport's database"))
    }

    async fn prune_duplicates(&self, now: OffsetDateTime, limit: usize) -> Result<u64, TransportError> {
        let deleted = query(
            "DELETE FROM bosun_duplicates WHERE seen_at < $1 AND (destination, broker_message_id) IN (
                 SELECT destination, broker_message_id FROM bosun_duplicates WHERE seen_at < $1
                 ORDER BY seen_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
        )
        .bind(now - DUPLICATE_WINDOW)
        .bind(self::limit(limit))
        .execute(self.database.pool())
        .await
        .map_err(|err| TransportError::from(err).doing("pruning duplicate-detection records"))?
        .rows_affected();
        Ok(deleted)
    }
}

#[async_trait]
impl TransportAdmin for PostgresTransport {
    async fn peek_dead_letters(
        &self,
        entity: &Destination,
        max: usize,
    ) -> Result<Vec<DeadLetteredMessage>, TransportError> {
        self.peek_dead_letters_rows(entity, max)
            .await
            .map_err(|err| err.doing(format!("listing the dead letters of {entity}")))
    }

    async fn remove_dead_letter(&self, entity: &Destination, sequence: i64) -> Result<bool, TransportError> {
        self.remove_dead_letter_rows(entity, sequence)
            .await
            .map_err(|err| err.doing(format!("removing dead letter {sequence} of {entity}")))
    }

    async fn depth(&self, entity: &Destination) -> Result<u64, TransportError> {
        self.depth_rows(entity)
            .await
            .map_err(|err| err.doing(format!("counting the messages of {entity}")))
    }
}

/// The consumer that receives from `entity`: a queue and a subscription are
/// named after their consumer (`bosun_contracts::routing`).
fn consumer_of(entity: &Destination) -> &str {
    match entity {
        Destination::Queue(name) | Destination::Topic(name) => name,
        Destination::Subscription { subscription, .. } => subscription,
    }
}

/// The statements behind each [`Transport`] operation; the trait methods
/// name the operation in their errors.
impl PostgresTransport {
    async fn ensure_topology_rows(&self, topology: &Topology) -> Result<(), TransportError> {
        let mut tx = self.database.pool().begin().await?;
        for queue in &topology.queues {
            query("INSERT INTO bosun_queues (name) VALUES ($1) ON CONFLICT DO NOTHING")
                .bind(queue)
                .execute(&mut *tx)
                .await?;
        }
        for subscription in &topology.subscriptions {
            query(
                "INSERT INTO bosun_subscriptions (topic, name, event_types) VALUES ($1, $2, $3)
                 ON CONFLICT (topic, name) DO UPDATE SET event_types = excluded.event_types
                    WHERE bosun_subscriptions.event_types IS DISTINCT FROM excluded.event_types",
            )
            .bind(&topology.topic)
            .bind(&subscription.name)
            .bind(&subscription.event_types)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn send_rows(&self, messages: Vec<OutboundMessage>) -> Result<(), TransportError> {
        if messages.is_empty() {
            return Ok(());
        }
        let mut tx = self.database.pool().begin().await?;
        let mut known = KnownEntities::default();
        let mut wakes = Wakes::default();
        for message in &messages {
            if enqueue(&mut tx, &mut known, message, &mut wakes).await? == Enqueued::NoSuchEntity {
                // Dropping the transaction rolls the whole batch back.
                return Err(TransportError::NoSuchEntity(message.destination.path()));
            }
        }
        tx.commit().await?;
        self.database.wake(wakes);
        Ok(())
    }

    async fn receive_rows(
        &self,
        entity: &Destination,
        max: usize,
        lock_duration: Duration,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        let path = entity.path();
        self.wakeups.signal(&path).mark_seen();
        let token = Uuid::now_v7();
        // `bosun_claim` (migrations 10 and 11): the first `$3` ready rows in
        // delivery order, claimed at once by walking one index whatever the
        // table's statistics; those delivered the maximum number of times
        // go to the dead-letter sub-queue, the rest are locked. The cost is
        // that of the claimed rows, whatever the backlog of this entity or
        // any other. The claim does not wait for its WAL flush (a claim lost
        // to a crash is only a redelivery). Planned once per connection.
        let rows = query("SELECT * FROM bosun_claim($1, $2, $3, $4, $5, $6)")
            .bind(&path)
            .bind(i32::try_from(self.max_delivery_count).unwrap_or(i32::MAX))
            .bind(limit(max))
            .bind(token)
            .bind(duration_ms(lock_duration))
            .bind(self.handled_in_claim.then(|| consumer_of(entity)))
            .fetch_all(self.database.pool())
            .await?;
        let received = rows
            .iter()
            .map(|row| {
                Ok(ReceivedMessage {
                    lock: LockToken {
                        entity: entity.clone(),
                        sequence: row.try_get(0)?,
                        token,
                    },
                    broker_message_id: row.try_get(1)?,
                    message_type: row.try_get(2)?,
                    body: row.try_get(3)?,
                    delivery_count: count(i64::from(row.try_get::<i32, _>(4)?)),
                    enqueued_at: row.try_get(5)?,
                    locked_until: row.try_get(6)?,
                    handled: match row.try_get::<Option<bool>, _>(7)? {
                        Some(handled) => Some(HandledAtClaim {
                            message_id: row
                                .try_get::<String, _>(1)?
                                .split('.')
                                .next()
                                .unwrap_or_default()
                                .to_owned(),
                            handled,
                        }),
                        None => None,
                    },
                })
            })
            .collect::<Result<Vec<_>, sqlx_core::Error>>()?;
        Ok(received)
    }

    async fn renew_lock_rows(
        &self,
        lock: &LockToken,
        lock_duration: Duration,
    ) -> Result<OffsetDateTime, TransportError> {
        let row = query(
            "UPDATE bosun_messages SET locked_until = now() + $3::bigint * interval '1 millisecond'
             WHERE sequence = $1 AND lock_token = $2 AND locked_until > now() AND NOT dead_lettered
             RETURNING locked_until",
        )
        .bind(lock.sequence)
        .bind(lock.token)
        .bind(duration_ms(lock_duration))
        .fetch_optional(self.database.pool())
        .await?;
        match row {
            Some(row) => Ok(row.try_get(0)?),
            None => Err(lock_lost(lock)),
        }
    }

    async fn complete_rows(&self, lock: &LockToken) -> Result<(), TransportError> {
        if complete_locked(self.database.pool(), lock).await? {
            Ok(())
        } else {
            Err(lock_lost(lock))
        }
    }

    async fn abandon_rows(&self, lock: &LockToken) -> Result<(), TransportError> {
        // Unlock, then wake the entity's receivers.
        let released: Option<String> = query_scalar(
            "UPDATE bosun_messages SET lock_token = NULL, locked_until = NULL
             WHERE sequence = $1 AND lock_token = $2 AND NOT dead_lettered
             RETURNING entity",
        )
        .bind(lock.sequence)
        .bind(lock.token)
        .fetch_optional(self.database.pool())
        .await?;
        let Some(entity) = released else {
            return Err(lock_lost(lock));
        };
        let mut wakes = Wakes::default();
        wakes.entity(entity);
        self.database.wake(wakes);
        Ok(())
    }

    async fn dead_letter_rows(&self, lock: &LockToken, reason: &str, description: &str) -> Result<(), TransportError> {
        if dead_letter_locked(self.database.pool(), lock, reason, description).await? {
            Ok(())
        } else {
            Err(lock_lost(lock))
        }
    }

    async fn peek_dead_letters_rows(
        &self,
        entity: &Destination,
        max: usize,
    ) -> Result<Vec<DeadLetteredMessage>, TransportError> {
        let rows = query(
            "SELECT sequence, broker_message_id, message_type, body, delivery_count, dead_letter_reason,
                    dead_letter_description, enqueued_at, dead_lettered_at
             FROM bosun_messages WHERE entity = $1 AND dead_lettered ORDER BY sequence LIMIT $2",
        )
        .bind(entity.path())
        .bind(limit(max))
        .fetch_all(self.database.pool())
        .await?;
        let dead = rows
            .iter()
            .map(|row| {
                Ok(DeadLetteredMessage {
                    entity: entity.clone(),
                    sequence: row.try_get(0)?,
                    broker_message_id: row.try_get(1)?,
                    message_type: row.try_get(2)?,
                    body: row.try_get(3)?,
                    delivery_count: count(i64::from(row.try_get::<i32, _>(4)?)),
                    reason: row.try_get::<Option<String>, _>(5)?.unwrap_or_default(),
                    description: row.try_get::<Option<String>, _>(6)?.unwrap_or_default(),
                    enqueued_at: row.try_get(7)?,
                    dead_lettered_at: row
                        .try_get::<Option<OffsetDateTime>, _>(8)?
                        .unwrap_or(OffsetDateTime::UNIX_EPOCH),
                })
            })
            .collect::<Result<Vec<_>, sqlx_core::Error>>()?;
        Ok(dead)
    }

    async fn remove_dead_letter_rows(&self, entity: &Destination, sequence: i64) -> Result<bool, TransportError> {
        let deleted = query("DELETE FROM bosun_messages WHERE entity = $1 AND sequence = $2 AND dead_lettered")
            .bind(entity.path())
            .bind(sequence)
            .execute(self.database.pool())
            .await?
            .rows_affected();
        Ok(deleted > 0)
    }

    async fn depth_rows(&self, entity: &Destination) -> Result<u64, TransportError> {
        let depth: i64 = sqlx_core::query_scalar::query_scalar(
            "SELECT count(*) FROM bosun_messages WHERE entity = $1 AND NOT dead_lettered",
        )
        .bind(entity.path())
        .fetch_one(self.database.pool())
        .await?;
        Ok(u64::try_from(depth).unwrap_or_default())
    }
}

// -- wake-ups ---------------------------------------------------------------

/// Where the LISTEN task stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ListenerState {
    /// Not listening yet (or reconnecting).
    Connecting,
    /// Listening on [`NOTIFY_CHANNEL`].
    Listening,
    /// The last attempt to listen failed; retried with backoff.
    Failed(String),
}

/// Wake-ups of one entity's waiting receivers.
#[derive(Debug, Default)]
struct EntitySignal {
    /// Notifications received for the entity (or wake-alls).
    arrivals: AtomicU64,
    /// `arrivals` when the last receive on the entity began.
    seen: AtomicU64,
    notify: Notify,
}

impl EntitySignal {
    fn wake(&self) {
        self.arrivals.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    fn mark_seen(&self) {
        self.seen.store(self.arrivals.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    fn has_news(&self) -> bool {
        self.arrivals.load(Ordering::SeqCst) != self.seen.load(Ordering::SeqCst)
    }
}

/// The wake-up state shared by the clones of one transport and its LISTEN
/// task (which holds it weakly and stops when the last clone is dropped).
#[derive(Debug)]
struct Wakeups {
    entities: Mutex<HashMap<String, Arc<EntitySignal>>>,
    state: watch::Sender<ListenerState>,
    stop: Mutex<Option<CancellationToken>>,
}

impl Default for Wakeups {
    fn default() -> Self {
        Self {
            entities: Mutex::new(HashMap::new()),
            state: watch::Sender::new(ListenerState::Connecting),
            stop: Mutex::new(None),
        }
    }
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        if let Some(stop) = self
            .stop
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            stop.cancel();
        }
    }
}

impl Wakeups {
    fn signal(&self, entity: &str) -> Arc<EntitySignal> {
        let mut entities = self.entities.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(entities.entry(entity.to_owned()).or_default())
    }

    fn wake(&self, entity: &str) {
        self.signal(entity).wake();
    }

    fn wake_all(&self) {
        let entities = self.entities.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for signal in entities.values() {
            signal.wake();
        }
    }

    /// Starts the LISTEN task unless it runs; returns its state.
    fn start(self: &Arc<Self>, pool: &PgPool) -> watch::Receiver<ListenerState> {
        let mut stop = self.stop.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if stop.is_none() {
            let token = CancellationToken::new();
            tokio::spawn(listen(
                pool.clone(),
                NOTIFY_CHANNEL,
                Arc::downgrade(self),
                token.clone(),
            ));
            *stop = Some(token);
        }
        self.state.subscribe()
    }
}

/// The LISTEN task's side: wakes the receivers of each notified entity,
/// and every receiver after a (re)connection, since notifications sent
/// while it was not listening are lost.
impl Listener for Wakeups {
    const CANNOT_LISTEN: &'static str = "cannot LISTEN for new messages; receivers poll meanwhile";
    const CONNECTION_FAILED: &'static str = "LISTEN connection failed; reconnecting";

    fn listening(&self) {
        self.state.send_replace(ListenerState::Listening);
    }

    fn failed(&self, why: String) {
        self.state.send_replace(ListenerState::Failed(why));
    }

    fn connecting(&self) {
        self.state.send_replace(ListenerState::Connecting);
    }

    fn notified(&self, payload: &str) {
        self.wake(payload);
    }

    fn missed(&self) {
        self.wake_all();
    }
}

#[cfg(test)]
mod tests;
