//! Transports: how messages travel between bosun's consumers.
//!
//! One trait with peek-lock semantics, as Azure Service Bus has them: a
//! receiver takes a message under a time-limited lock, renews the lock while
//! it works, then completes, abandons or dead-letters it. Sends may be
//! scheduled for later. A message whose delivery count reaches the entity's
//! maximum moves to the dead-letter sub-queue by itself. What only an
//! operator asks of a transport (list and remove dead letters, count a
//! queue) is [`TransportAdmin`]; a [`Broker`] is both, as every backend is.
//!
//! The implementations live with their technology under
//! [`crate::backends`]: memory (unit tests), SQLite (durable across
//! restarts; the default), PostgreSQL (shared by several bosun processes,
//! woken by LISTEN/NOTIFY) and Azure Service Bus.
//!
//! Entities come from the contracts' routing table
//! ([`crate::ports::topology`]): a queue
//! per consumer for commands, one events topic with a subscription per
//! consumer filtered by message type.

use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::Destination;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::ports::error::{BoxError, NextStep};

pub use crate::ports::topology::Topology;

/// A message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundMessage {
    /// Queue, topic, or (for replay to one consumer) a subscription.
    pub destination: Destination,
    /// The broker-level id used for duplicate detection: the envelope's
    /// messageId on first send, suffixed for retries and replays
    /// (`<id>.retry-2`, `<id>.replay-<uuid>`) so those are not dropped as
    /// duplicates. Only a dedup key: what an outbox entry is for is stored
    /// with it ([`crate::ports::store::OutboxPurpose`]).
    pub broker_message_id: String,
    /// The message type (Service Bus `subject`); subscriptions filter on it.
    pub message_type: Option<String>,
    /// The delivery this message belongs to.
    pub correlation_id: Option<String>,
    /// The envelope bytes.
    pub body: Vec<u8>,
    /// Deliver no earlier than this (scheduled message).
    pub scheduled_at: Option<OffsetDateTime>,
}

/// A lock on one received message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockToken {
    /// Entity the message was received from.
    pub entity: Destination,
    /// The message's sequence number in that entity.
    pub sequence: i64,
    /// The token of this delivery.
    pub token: Uuid,
}

/// A message received under a peek-lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// The lock; pass it to complete, abandon, renew or dead-letter.
    pub lock: LockToken,
    /// Broker-level id.
    pub broker_message_id: String,
    /// Message type, when the sender set it.
    pub message_type: Option<String>,
    /// The envelope bytes, exactly as sent.
    pub body: Vec<u8>,
    /// How many times the message has been delivered, this delivery included.
    pub delivery_count: u32,
    /// When it was enqueued.
    pub enqueued_at: OffsetDateTime,
    /// When the lock expires unless renewed.
    pub locked_until: OffsetDateTime,
    /// Whether the store already records the message as handled by the
    /// entity's consumer, when the transport could tell in the same
    /// statement that claimed it (the PostgreSQL transport sharing the
    /// store's database); `None`: the host asks the store.
    pub handled: Option<HandledAtClaim>,
}

/// The idempotency record a transport looked up while it claimed a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandledAtClaim {
    /// The message id it looked up (the envelope's, taken from the broker
    /// id): the host uses the answer only when the envelope says the same.
    pub message_id: String,
    /// Whether a record was there.
    pub handled: bool,
}

/// A message in an entity's dead-letter sub-queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetteredMessage {
    /// Entity whose dead-letter sub-queue holds it.
    pub entity: Destination,
    /// Its sequence number.
    pub sequence: i64,
    /// Broker-level id.
    pub broker_message_id: String,
    /// Message type, when set.
    pub message_type: Option<String>,
    /// The original bytes.
    pub body: Vec<u8>,
    /// Deliveries before it was dead-lettered.
    pub delivery_count: u32,
    /// The dead-letter reason (e.g. `MaxDeliveryCountExceeded`).
    pub reason: String,
    /// The dead-letter description.
    pub description: String,
    /// When it was enqueued.
    pub enqueued_at: OffsetDateTime,
    /// When it was dead-lettered.
    pub dead_lettered_at: OffsetDateTime,
}

/// Transport failures. Each says what it means for the work that met it:
/// [`TransportError::next_step`].
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The lock expired or the message was settled by someone else.
    #[error("lock lost on {entity} message {sequence}")]
    LockLost {
        /// The entity.
        entity: String,
        /// The message's sequence number.
        sequence: i64,
    },
    /// The entity does not exist.
    #[error("entity `{0}` does not exist")]
    NoSuchEntity(String),
    /// A stored message that does not decode.
    #[error("corrupt {what} in the transport: {source}")]
    Corrupt {
        /// What could not be read.
        what: String,
        /// The decoding error.
        #[source]
        source: BoxError,
    },
    /// The transport cannot be used as configured (credentials refused, an
    /// operation the endpoint does not support).
    #[error("transport misconfigured ({doing}): {source}; fix the configuration and restart")]
    Misconfigured {
        /// What was being done.
        doing: String,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// Storage, connection or broker failure; try again.
    #[error("transport unavailable while {doing}: {source}")]
    Unavailable {
        /// What was being done (`sending 2 message(s) to `commit``).
        doing: String,
        /// The cause.
        #[source]
        source: BoxError,
    },
}

/// What a [`TransportError`] made by a plain conversion (`?` on a database
/// error) says it was doing until [`TransportError::doing`] names the
/// operation.
pub(crate) const SOME_TRANSPORT_OPERATION: &str = "using the transport";

impl TransportError {
    /// What the work that met this error should do next.
    pub fn next_step(&self) -> NextStep {
        match self {
            Self::LockLost { .. } | Self::Unavailable { .. } => NextStep::Retry,
            Self::Corrupt { .. } => NextStep::DeadLetter,
            Self::NoSuchEntity(_) | Self::Misconfigured { .. } => NextStep::Stop,
        }
    }

    /// The transport is unavailable while `doing`.
    pub fn unavailable(doing: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            doing: doing.into(),
            source: source.into(),
        }
    }

    /// The transport cannot do `doing` as configured.
    pub fn misconfigured(doing: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Misconfigured {
            doing: doing.into(),
            source: source.into(),
        }
    }

    /// Names the operation an error made by a plain conversion happened in;
    /// errors that already say more are left as they are.
    pub fn doing(self, operation: impl Into<String>) -> Self {
        match self {
            Self::Unavailable { doing, source } if doing == SOME_TRANSPORT_OPERATION => Self::Unavailable {
                doing: operation.into(),
                source,
            },
            Self::Misconfigured { doing, source } if doing == SOME_TRANSPORT_OPERATION => Self::Misconfigured {
                doing: operation.into(),
                source,
            },
            Self::Corrupt { what, source } if what == SOME_TRANSPORT_OPERATION => Self::Corrupt {
                what: format!("data read while {}", operation.into()),
                source,
            },
            other => other,
        }
    }
}

/// The peek-lock transport all runtimes build on.
#[async_trait]
pub trait Transport: Send + Sync {
    /// Creates the entities of `topology` that are missing.
    async fn ensure_topology(&self, topology: &Topology) -> Result<(), TransportError>;

    /// Sends messages (a batch is accepted or rejected as a whole). A message
    /// whose `broker_message_id` was already sent to the same destination is
    /// dropped (duplicate detection).
    async fn send(&self, messages: Vec<OutboundMessage>) -> Result<(), TransportError>;

    /// Receives up to `max` ready messages from a queue or subscription,
    /// locking each for `lock_duration`. Returns at once, possibly empty.
    async fn receive(
        &self,
        entity: &Destination,
        max: usize,
        lock_duration: Duration,
    ) -> Result<Vec<ReceivedMessage>, TransportError>;

    /// Waits until a message may be ready on `entity` or `timeout` passes.
    async fn wait_for_messages(&self, entity: &Destination, timeout: Duration);

    /// Extends a lock; returns the new expiry.
    async fn renew_lock(&self, lock: &LockToken, lock_duration: Duration) -> Result<OffsetDateTime, TransportError>;

    /// Whether `lock` still holds its message (not expired, not settled, not
    /// taken by another receiver). Changes nothing; the answer may be stale
    /// by the time the caller acts on it.
    async fn is_locked(&self, lock: &LockToken) -> Result<bool, TransportError>;

    /// Removes a handled message.
    async fn complete(&self, lock: &LockToken) -> Result<(), TransportError>;

    /// Releases the lock so the message is delivered again.
    async fn abandon(&self, lock: &LockToken) -> Result<(), TransportError>;

    /// Moves a message to its entity's dead-letter sub-queue.
    async fn dead_letter(&self, lock: &LockToken, reason: &str, description: &str) -> Result<(), TransportError>;

    /// Whether this process can use the transport now, answered from what
    /// it already holds or one cheap round trip (a `SELECT 1`, the state of
    /// the open connection), never a broker management call: readiness
    /// probes ask it every few seconds.
    async fn reachable(&self) -> Result<(), TransportError>;

    /// Deletes up to `limit` duplicate-detection records that fell out of
    /// the detection window by `now` (retention; see
    /// [`AdminStore::prune`](crate::ports::store::AdminStore::prune)) and says how
    /// many. Transports whose broker keeps its own window (Service Bus) or
    /// that keep nothing have nothing to do.
    async fn prune_duplicates(&self, _now: OffsetDateTime, _limit: usize) -> Result<u64, TransportError> {
        Ok(0)
    }

    /// Gives back what this process holds but will not handle (prefetched
    /// messages) and closes connections; called once the host has drained.
    /// Transports that hold nothing have nothing to do.
    async fn close(&self) {}
}

/// The transport's operator calls: what an operator reads and removes
/// (`bosun dead-letters`, replay, gauges), never what a host needs to
/// carry a message. Kept apart from [`Transport`] so the host and the
/// settle path hold only what they use.
#[async_trait]
pub trait TransportAdmin: Send + Sync {
    /// Lists an entity's dead-letter sub-queue (oldest first).
    async fn peek_dead_letters(
        &self,
        entity: &Destination,
        max: usize,
    ) -> Result<Vec<DeadLetteredMessage>, TransportError>;

    /// Deletes one message from an entity's dead-letter sub-queue. Returns
    /// whether it was there.
    async fn remove_dead_letter(&self, entity: &Destination, sequence: i64) -> Result<bool, TransportError>;

    /// Counts active (not dead-lettered) messages per entity, scheduled ones
    /// included.
    async fn depth(&self, entity: &Destination) -> Result<u64, TransportError>;
}

/// A transport with its operator calls: what wiring opens and the
/// operator holds. Every type that is both is one.
pub trait Broker: Transport + TransportAdmin {}

impl<T: Transport + TransportAdmin + ?Sized> Broker for T {}

pub(crate) fn unix_ms(at: OffsetDateTime) -> i64 {
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

pub(crate) fn from_unix_ms(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

pub(crate) fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
