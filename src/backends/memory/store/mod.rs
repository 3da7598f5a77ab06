//! The in-memory store: every concern of the store port kept in maps behind
//! one lock, for unit tests and for trying bosun without a disk. Nothing
//! survives the process.
//!
//! Its behaviour is the SQLite store's, read from that store's SQL: the
//! same keys (one idempotency record per consumer and message, one dead
//! letter per transport message, one delivery record per correlation id),
//! the same orders, the same tenant filters, times kept to the millisecond
//! where SQLite keeps them in integer columns, and the same batches when
//! pruning. Each write takes the lock once and checks everything it can
//! refuse before it changes anything, so a refused write (a saga conflict,
//! a duplicate id) leaves nothing behind, as a rolled-back transaction does.
//!
//! One file per concern, each holding that concern's tables and the port
//! trait it implements, as the SQLite store does: `handled`
//! ([`HandledStore`]: idempotency, the commit of a handled message,
//! retries), `sagas` ([`SagaStore`]), `outbox` ([`OutboxStore`]),
//! `dead_letters` ([`DeadLetterStore`]), `timeline` ([`TimelineStore`] and
//! [`DeliveryStore`]), `retention` ([`AdminStore`]), `access`
//! ([`AccessStore`]: API keys, HTTP idempotency), `jobs`
//! ([`ReplayJobStore`]), `policies` ([`PolicyStore`]: each tenant's
//! release policy, append-only) and `audit` ([`AuditStore`]: each tenant's
//! release audit log, append-only).
//!
//! What only a durable store can show, this one does not pretend to: there
//! is no schema to check ([`AdminStore::check_schema`] answers Ok), no
//! other process to share a saga's turn with (`saga_turn` is `None`; the
//! runtime's in-process turn and the version check are the guards), and a
//! replay job's lease outlives its runner only within the process. Every
//! timeline line is written here, so every one wakes its waits at once; the
//! fallback of a wait only bounds it, as the port asks of every store.
//!
//! [`HandledStore`]: crate::ports::store::HandledStore
//! [`SagaStore`]: crate::ports::store::SagaStore
//! [`OutboxStore`]: crate::ports::store::OutboxStore
//! [`DeadLetterStore`]: crate::ports::store::DeadLetterStore
//! [`TimelineStore`]: crate::ports::store::TimelineStore
//! [`DeliveryStore`]: crate::ports::store::DeliveryStore
//! [`AdminStore`]: crate::ports::store::AdminStore
//! [`AdminStore::check_schema`]: crate::ports::store::AdminStore::check_schema
//! [`AccessStore`]: crate::ports::store::AccessStore
//! [`ReplayJobStore`]: crate::ports::store::ReplayJobStore
//! [`PolicyStore`]: crate::ports::store::PolicyStore
//! [`AuditStore`]: crate::ports::store::AuditStore

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use time::{OffsetDateTime, PrimitiveDateTime};

use crate::ports::store::{DEFAULT_TIMELINE_FALLBACK, TimelineEntry, TimelineWatch};
use crate::ports::transport::{from_unix_ms, unix_ms};

mod access;
mod audit;
mod controls;
mod dead_letters;
mod handled;
mod jobs;
mod outbox;
mod policies;
mod retention;
mod sagas;
mod timeline;

/// The in-memory store. Clones share the same state.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    watch: Arc<TimelineWatch>,
}

/// Every table, each kept by the file of its concern.
#[derive(Debug, Default)]
struct State {
    handled: handled::Handled,
    sagas: sagas::Sagas,
    outbox: outbox::Outbox,
    dead_letters: dead_letters::DeadLetters,
    timeline: timeline::Timeline,
    deliveries: timeline::Deliveries,
    access: access::Access,
    jobs: jobs::Jobs,
    policies: policies::Policies,
    audit: audit::Audit,
    controls: controls::Controls,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A new, empty store.
    pub fn new() -> Self {
        Self {
            state: Arc::new(Mutex::new(State::default())),
            watch: TimelineWatch::new(DEFAULT_TIMELINE_FALLBACK),
        }
    }

    /// This store with timeline waits that end after `fallback` when no
    /// line woke them. Call it before the store is shared: waits made
    /// earlier keep the old fallback.
    pub fn with_timeline_fallback(mut self, fallback: Duration) -> Self {
        self.watch = TimelineWatch::new(fallback);
        self
    }

    /// Runs `f` on the state, under the one lock: everything `f` does is
    /// one transaction.
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.lock())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held may have left a write half done:
        // nothing read from this store could be trusted any more.
        self.state
            .lock()
            .expect("the memory store's lock is poisoned: a write panicked halfway and its state cannot be trusted")
    }

    /// The correlation ids of `lines` somebody waits on (none, without
    /// allocating, when nobody waits), to wake once they are written.
    fn waited_on<'a>(&self, lines: impl IntoIterator<Item = &'a TimelineEntry>) -> Vec<String> {
        if self.watch.waited_on() == 0 {
            return Vec::new();
        }
        lines.into_iter().map(|line| line.correlation_id.clone()).collect()
    }

    /// Wakes the timeline waits of `correlation_ids`, just written (called
    /// after the lock is let go, so a woken reader finds the lines).
    fn written(&self, correlation_ids: &[String]) {
        self.watch.notify_each(correlation_ids.iter().map(String::as_str));
    }
}

/// `at` as the durable stores keep it: whole milliseconds.
fn ms(at: OffsetDateTime) -> OffsetDateTime {
    from_unix_ms(unix_ms(at))
}

/// Now, in whole milliseconds.
fn now() -> OffsetDateTime {
    ms(OffsetDateTime::now_utc())
}

/// `lease` after `at`; the last representable time when that is further
/// than a time can reach (a lease that long never runs out).
fn after(at: OffsetDateTime, lease: Duration) -> OffsetDateTime {
    time::Duration::try_from(lease)
        .ok()
        .and_then(|lease| at.checked_add(lease))
        .unwrap_or_else(|| PrimitiveDateTime::MAX.assume_utc())
}

/// The first `batch` of `rows` by their time, oldest first (ties in the
/// order given): what a `ORDER BY <time> LIMIT <batch>` picks.
fn oldest<K>(mut rows: Vec<(OffsetDateTime, K)>, batch: usize) -> Vec<K> {
    rows.sort_by_key(|(at, _)| *at);
    rows.into_iter().take(batch).map(|(_, key)| key).collect()
}

/// How many rows `rows` is, as [`crate::ports::store::Pruned`] counts.
fn count<T>(rows: &[T]) -> u64 {
    u64::try_from(rows.len()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
