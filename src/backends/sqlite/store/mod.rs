//! The SQLite store: `state.db` under the data directory.
//!
//! One file per concern, each holding the SQL of its tables and the port
//! trait it implements: `handled` ([`HandledStore`]: idempotency, the
//! commit of a handled message, retries), `sagas` ([`SagaStore`]),
//! `outbox` ([`OutboxStore`]), `dead_letters` ([`DeadLetterStore`]),
//! `timeline` ([`TimelineStore`] and [`DeliveryStore`]), `retention`
//! ([`AdminStore`]), `access` ([`AccessStore`]: API keys, HTTP idempotency)
//! and `jobs` ([`ReplayJobStore`]), `policies` ([`PolicyStore`]: each
//! tenant's release policy, append-only), `audit` ([`AuditStore`]: each
//! tenant's release audit log, append-only) and `schema` (tables and
//! upgrades of older files). Each method names what it was
//! doing in its errors with the port's words (`ports::store::doing`).
//!
//! [`HandledStore`]: crate::ports::store::HandledStore
//! [`SagaStore`]: crate::ports::store::SagaStore
//! [`OutboxStore`]: crate::ports::store::OutboxStore
//! [`DeadLetterStore`]: crate::ports::store::DeadLetterStore
//! [`TimelineStore`]: crate::ports::store::TimelineStore
//! [`DeliveryStore`]: crate::ports::store::DeliveryStore
//! [`AdminStore`]: crate::ports::store::AdminStore
//! [`AccessStore`]: crate::ports::store::AccessStore
//! [`ReplayJobStore`]: crate::ports::store::ReplayJobStore
//! [`PolicyStore`]: crate::ports::store::PolicyStore
//! [`AuditStore`]: crate::ports::store::AuditStore

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

use crate::backends::sqlite::Database;
use crate::ports::store::{DEFAULT_TIMELINE_FALLBACK, StoreError, TimelineEntry, TimelineWatch};
use crate::ports::transport::unix_ms;
use schema::{SCHEMA, upgrade};

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
mod schema;
mod timeline;

/// The SQLite store.
///
/// Its timeline waits ([`TimelineStore::watch_timeline`](crate::ports::store::TimelineStore::watch_timeline)) are woken by this
/// process's writes as their transaction commits; SQLite cannot tell of
/// other processes' writes, so the waits also look again after the
/// fallback ([`SqliteStore::with_timeline_fallback`], the poll interval).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    database: Database,
    watch: Arc<TimelineWatch>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let database = Database::open(path, SCHEMA)
            .map_err(|err| StoreError::from(err).doing(format!("opening {}", path.display())))?;
        upgrade(path).map_err(|err| err.doing(format!("upgrading {}", path.display())))?;
        Ok(Self::on(database))
    }

    /// An in-memory store (tests).
    pub fn in_memory() -> Result<Self, StoreError> {
        Ok(Self::on(Database::open_in_memory(SCHEMA).map_err(|err| {
            StoreError::from(err).doing("opening an in-memory store")
        })?))
    }

    fn on(database: Database) -> Self {
        Self {
            database,
            watch: TimelineWatch::new(DEFAULT_TIMELINE_FALLBACK),
        }
    }

    /// This store with timeline waits that look again after `fallback`
    /// when no write of this process woke them (writes of other processes
    /// are found then). Call it before the store is shared: waits made
    /// earlier keep the old fallback.
    pub fn with_timeline_fallback(mut self, fallback: Duration) -> Self {
        self.watch = TimelineWatch::new(fallback);
        self
    }

    /// The correlation ids of `lines` somebody waits on (none, without
    /// allocating, when nobody waits), to wake once they are written.
    fn waited_on<'a>(&self, lines: impl IntoIterator<Item = &'a TimelineEntry>) -> Vec<String> {
        if self.watch.waited_on() == 0 {
            return Vec::new();
        }
        lines.into_iter().map(|line| line.correlation_id.clone()).collect()
    }

    /// Wakes the timeline waits of `correlation_ids`, just written.
    fn written(&self, correlation_ids: &[String]) {
        self.watch.notify_each(correlation_ids.iter().map(String::as_str));
    }
}

/// `value` as JSON text to store; `what` names it in the error.
pub(super) fn to_json<T: serde::Serialize>(value: &T, what: &str) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|err| StoreError::unencodable(what, err))
}

pub(super) fn now_ms() -> i64 {
    unix_ms(OffsetDateTime::now_utc())
}

#[cfg(test)]
mod tests;
