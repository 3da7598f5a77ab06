//! Stores: what bosun remembers about messages, sagas and failures.
//!
//! One trait per thing kept: [`HandledStore`] (which consumer handled which
//! message, its attempts and retries), [`SagaStore`] (state with optimistic
//! concurrency), [`OutboxStore`] (messages to send, written atomically with
//! the first two), [`DeadLetterStore`] (every failure given up on, with the
//! original bytes), [`TimelineStore`] (what happened to each message of a
//! correlation id), [`DeliveryStore`] (how each delivery started),
//! [`AdminStore`] (the schema check, retention and the fleet of processes), and beside them
//! [`AccessStore`] (API keys, HTTP idempotency), [`ReplayJobStore`]
//! (bulk replay jobs), [`PolicyStore`] (each tenant's release policy,
//! versioned and append-only) and [`AuditStore`] (each tenant's log of
//! release decisions, append-only). [`Store`] is all of the first seven; a part of
//! bosun takes the traits it uses. A backend implements each trait in the
//! file that holds that concern's SQL.
//!
//! The atomic unit is [`HandledStore::commit_handled`]: the idempotency record, the
//! saga state and the outbox entries of one message are written in one
//! transaction, or not at all. The host does not call it directly: it
//! settles through [`crate::ports::settle::Settle`], which also settles the
//! received message.
//!
//! What the trait reads and writes is declared beside it, one file per
//! kind of record: `writes.rs` (what a settlement or an accepted command
//! writes), `sagas.rs`, `timeline.rs`, `dead_letters.rs`, `access.rs` (with
//! [`AccessStore`]), `retention.rs`, `jobs.rs` (with [`ReplayJobStore`]),
//! `policies.rs` (with [`PolicyStore`]), `audit.rs` (with [`AuditStore`]).
//!
//! The implementations live with their technology under
//! [`crate::backends`]: SQLite (the default, a file under the data
//! directory) and PostgreSQL (shared by every replica).

use async_trait::async_trait;
use bosun_contracts::Destination;
use time::OffsetDateTime;
use uuid::Uuid;

pub(crate) mod doing;
mod error;
mod jobs;
mod watch;

pub use error::StoreError;
pub(crate) use error::{SOME_STORE_OPERATION, schema_mismatch_message, schema_too_new_message};
pub use jobs::{
    ControlOutcome, ReplayItemOutcome, ReplayJobAction, ReplayJobControl, ReplayJobItem, ReplayJobRecord,
    ReplayJobStatus, ReplayJobStore,
};
pub(crate) use jobs::{controls_from_json, controls_to_json, outcome_columns, outcome_from_columns, status_from_str};
pub use watch::{TimelineWait, TimelineWatch, Woken};

mod access;
mod audit;
mod controls;
mod dead_letters;
mod fleet;
mod lookup;
mod policies;
mod retention;
mod sagas;
mod timeline;
mod writes;

pub use access::*;
pub use audit::*;
pub use controls::*;
pub use dead_letters::*;
pub use fleet::*;
pub use lookup::*;
pub use policies::*;
pub use retention::*;
pub use sagas::*;
pub use timeline::*;
pub use writes::*;

/// How long a timeline wait lasts when nothing wakes it, unless the store
/// is told otherwise (the default `BOSUN_POLL_INTERVAL_MS`).
pub const DEFAULT_TIMELINE_FALLBACK: std::time::Duration = std::time::Duration::from_millis(250);

/// Everything bosun persists besides the transport's messages: every
/// concern's trait. Implemented by whatever implements them all; a part of
/// bosun that needs one concern takes that trait, not this one.
pub trait Store:
    HandledStore + SagaStore + OutboxStore + DeadLetterStore + TimelineStore + DeliveryStore + AdminStore
{
}

impl<T> Store for T where
    T: HandledStore + SagaStore + OutboxStore + DeadLetterStore + TimelineStore + DeliveryStore + AdminStore
{
}

/// What a consumer handled: idempotency records, the atomic commit of a
/// handled message, failed attempts and the retries they schedule (the
/// host's reads before a handler runs and the settle's writes).
#[async_trait]
pub trait HandledStore: Send + Sync {
    /// Whether `consumer` already handled `message_id`.
    async fn is_handled(&self, consumer: &str, message_id: &str) -> Result<bool, StoreError>;

    /// What the runtime reads before running a handler, in one read:
    /// whether `consumer` already handled `message_id`, and (for a saga
    /// message, `saga` = kind and key, when not handled) the saga's state
    /// as [`SagaStore::load_saga_state`] gives it.
    async fn handled_and_saga(
        &self,
        consumer: &str,
        message_id: &str,
        saga: Option<(&str, &str)>,
    ) -> Result<(bool, Option<SagaState>), StoreError>;

    /// Waits for saga `kind`/`key`'s turn across processes, where the store
    /// is shared by several (`None`: it has no such lock, and the version
    /// check at commit is the only guard across processes). The runtime
    /// takes it after the in-process turn and keeps it until the commit.
    async fn saga_turn(&self, kind: &str, key: &str) -> Result<Option<SagaTurn>, StoreError> {
        let _ = (kind, key);
        Ok(None)
    }

    /// Writes the idempotency record, the saga state (with its version
    /// check) and the outbox entries of one message in one transaction.
    async fn commit_handled(&self, handled: HandledMessage) -> Result<CommitOutcome, StoreError>;

    /// Records a failed attempt and, atomically, the retry to send and its
    /// timeline line. Keyed by the delivery that failed
    /// ([`RetryWrite::received_broker_message_id`]), so a redelivery of the
    /// same failed copy does not schedule a second retry.
    async fn record_retry(&self, retry: RetryWrite) -> Result<(), StoreError>;

    /// Every failed attempt of a message at a consumer, oldest first (replays
    /// included).
    async fn attempts(&self, consumer: &str, message_id: &str) -> Result<Vec<AttemptRecord>, StoreError>;
}

/// Sagas: state with optimistic concurrency and its history.
#[async_trait]
pub trait SagaStore: Send + Sync {
    /// Loads a saga with its whole history (for people: `bosun sagas`, the
    /// API and the console).
    async fn load_saga(&self, kind: &str, key: &str) -> Result<Option<SagaRecord>, StoreError>;

    /// Loads what a handler needs of a saga, one indexed row whatever the
    /// length of its history (the runtime's hot path).
    async fn load_saga_state(&self, kind: &str, key: &str) -> Result<Option<SagaState>, StoreError>;

    /// Lists sagas, optionally of one kind.
    async fn list_sagas(&self, kind: Option<&str>) -> Result<Vec<SagaRecord>, StoreError>;
}

/// The outbox: messages to send, written with what produced them and sent
/// by the dispatcher.
#[async_trait]
pub trait OutboxStore: Send + Sync {
    /// Accepts a command at the front door (the API, MCP, `bosun send`) in
    /// one transaction: its delivery (kept as it is when the command joins
    /// one), its outbox entry (purpose [`OutboxPurpose::Sent`], claimed for
    /// `lease` so the caller can send it at once while other dispatchers
    /// leave it alone) and its `sent` timeline line. Returns the outbox
    /// entry's id, for [`OutboxStore::mark_dispatched`].
    async fn accept_command(&self, accepted: AcceptedCommand, lease: std::time::Duration) -> Result<i64, StoreError>;

    /// Claims up to `limit` undispatched entries for `lease` so other
    /// processes leave them alone meanwhile.
    async fn claim_outbox(&self, limit: usize, lease: std::time::Duration) -> Result<Vec<PendingOutbox>, StoreError>;

    /// Marks entries as sent.
    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError>;

    /// Number of entries not yet sent.
    async fn outbox_backlog(&self) -> Result<u64, StoreError>;

    /// The envelopes sent or emitted for a delivery (outbox entries with
    /// this correlation id whose purpose is not [`OutboxPurpose::Retry`]),
    /// oldest first.
    async fn emitted(&self, correlation_id: &str) -> Result<Vec<Vec<u8>>, StoreError>;
}

/// Dead letters: every message given up on, with its original bytes, its
/// attempts and what operators did with it.
#[async_trait]
pub trait DeadLetterStore: Send + Sync {
    /// Stores a dead letter (attempts included) and its timeline line.
    async fn record_dead_letter(
        &self,
        record: DeadLetterRecord,
        timeline: Option<TimelineEntry>,
    ) -> Result<(), StoreError>;

    /// Lists dead letters, newest first.
    async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetterRecord>, StoreError>;

    /// One dead letter by id, of `tenant_id` only when given (a unique
    /// prefix of at least 4 characters is accepted, matched literally; see
    /// [`IdLookup`]).
    async fn dead_letter(&self, id: &str, tenant_id: Option<&str>) -> Result<DeadLetterRecord, StoreError>;

    /// The dead letter recorded for a transport message, if any.
    async fn dead_letter_for(
        &self,
        entity: &Destination,
        sequence: i64,
    ) -> Result<Option<DeadLetterRecord>, StoreError>;

    /// Records a replay of a dead letter, with its timeline line.
    async fn record_replay(
        &self,
        id: Uuid,
        replay: ReplayRecord,
        timeline: Option<TimelineEntry>,
    ) -> Result<(), StoreError>;

    /// Deletes a dead letter.
    async fn purge_dead_letter(&self, id: Uuid) -> Result<(), StoreError>;
}

/// The delivery timeline: what happened to each message of a correlation
/// id, and waits for its next line.
#[async_trait]
pub trait TimelineStore: Send + Sync {
    /// Appends timeline lines.
    async fn append_timeline(&self, entries: Vec<TimelineEntry>) -> Result<(), StoreError>;

    /// Every line of a delivery, oldest first.
    async fn timeline(&self, correlation_id: &str) -> Result<Vec<TimelineEntry>, StoreError>;

    /// Starts waiting for new lines of `correlation_id`'s timeline: make the
    /// wait, then read [`TimelineStore::timeline`], then
    /// [`TimelineWait::changed`] (a line written after the wait was made
    /// wakes it, even one written before `changed` is called). Every
    /// store's wait also ends after a fallback timeout; a store that cannot
    /// signal waits only that ([`DEFAULT_TIMELINE_FALLBACK`]).
    fn watch_timeline(&self, correlation_id: &str) -> TimelineWait {
        let _ = correlation_id;
        TimelineWait::poll_only(DEFAULT_TIMELINE_FALLBACK)
    }
}

/// Deliveries: how each one started, by whom, for which tenant.
#[async_trait]
pub trait DeliveryStore: Send + Sync {
    /// Records how a delivery started; the first record of a correlation id
    /// wins (later calls change nothing).
    async fn record_delivery(&self, record: DeliveryRecord) -> Result<(), StoreError>;

    /// How a delivery started, if it was recorded.
    async fn delivery_record(&self, correlation_id: &str) -> Result<Option<DeliveryRecord>, StoreError>;

    /// Deliveries, newest first, optionally of one tenant.
    async fn list_deliveries(&self, tenant_id: Option<&str>, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError>;

    /// Deliveries whose correlation id begins with `prefix` (compared
    /// literally: no character is a wildcard), of `tenant_id` only when
    /// given, in correlation id order, at most `limit`; for an operator's
    /// [`IdLookup::delivery`].
    async fn deliveries_by_prefix(
        &self,
        prefix: &str,
        tenant_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<DeliveryRecord>, StoreError>;
}

/// What an administrator's jobs call: the schema check before work is
/// taken, and retention.
#[async_trait]
pub trait AdminStore: Send + Sync {
    /// Whether the database's schema is the version this bosun needs
    /// (stores that create their own schema have nothing to check).
    async fn check_schema(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Deletes one batch per kind of what `policy` says is older than its
    /// retention at `now` (at most `policy.batch` rows each, in short
    /// statements on indexed columns, so the hot path is not held up), and
    /// says how many of each. Call again while [`Pruned::any_full`].
    async fn prune(&self, policy: &RetentionPolicy, now: OffsetDateTime) -> Result<Pruned, StoreError>;

    /// Records that `process` runs on this store, as of now (its first
    /// call when it starts, then with every schema check). A store one
    /// process owns (SQLite, in memory) keeps no fleet: nothing to record.
    async fn heartbeat(&self, _process: &ProcessRecord) -> Result<(), StoreError> {
        Ok(())
    }

    /// Removes process `id` from the fleet (it stops).
    async fn leave_fleet(&self, _id: Uuid) -> Result<(), StoreError> {
        Ok(())
    }

    /// The processes seen within `within` of now (by the store's clock),
    /// oldest start first; `None` when this store keeps no fleet (one
    /// process owns it).
    async fn fleet(&self, _within: std::time::Duration) -> Result<Option<Vec<ProcessRecord>>, StoreError> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests;
