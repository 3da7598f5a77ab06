//! The PostgreSQL store: idempotency records, sagas, the outbox, attempts,
//! dead letters and the delivery timeline in PostgreSQL, shared by every
//! bosun replica (tables of migration 1, `migrations/postgres/`); with
//! migration 3, deliveries, API keys and HTTP idempotency keys
//! ([`AccessStore`](crate::ports::store::AccessStore)).
//!
//! [`HandledStore::commit_handled`](crate::ports::store::HandledStore::commit_handled) writes the idempotency record, the saga (with
//! its optimistic version check: `INSERT ... ON CONFLICT DO NOTHING` for a
//! new saga, `UPDATE ... WHERE version = expected` for an existing one), the
//! outbox and the timeline in one transaction.
//!
//! With the [PostgreSQL transport](crate::backends::postgres::transport) on
//! the same database, receiving, handling and sending are one transaction:
//! [`PostgresSettle`](crate::backends::postgres::settle::PostgresSettle)
//! writes what this store writes and also settles the received message.
//!
//! One file per concern, each holding the SQL of its tables and the port
//! trait it implements: `handled` ([`HandledStore`]: idempotency, the
//! commit of a handled message, retries), `sagas` ([`SagaStore`]),
//! `outbox` ([`OutboxStore`]), `dead_letters` ([`DeadLetterStore`]),
//! `timeline` ([`TimelineStore`] and [`DeliveryStore`]), `retention`
//! ([`AdminStore`]), `access` ([`AccessStore`]: API keys, HTTP idempotency),
//! `jobs` ([`ReplayJobStore`]), `policies` ([`PolicyStore`]: each
//! tenant's release policy, append-only; migration 15) and `audit`
//! ([`AuditStore`]: each tenant's release audit log, append-only; migration
//! 16). Each method names what it was
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

use std::sync::Arc;
use std::time::Duration;

use crate::backends::postgres::transport::PostgresTransport;
use crate::backends::postgres::{MigrationReport, PoolSettings, PostgresDatabase};
use crate::ports::store::StoreError;

pub use crate::backends::postgres::SCHEMA_VERSION;
pub use listen::{LISTENING_FALLBACK, TIMELINE_CHANNEL};

mod access;
mod audit;
pub(crate) mod commit;
mod controls;
pub(crate) mod dead_letters;
mod fleet;
pub(crate) mod handled;
mod jobs;
mod listen;
pub(crate) mod outbox;
mod policies;
mod retention;
mod sagas;
pub(crate) mod timeline;
pub(crate) mod turns;

/// The PostgreSQL store.
///
/// Its timeline waits ([`TimelineStore::watch_timeline`](crate::ports::store::TimelineStore::watch_timeline)) are woken by
/// `NOTIFY bosun_timeline` from the transaction that wrote the lines, in
/// whatever process (`listen`); the fallback ([`LISTENING_FALLBACK`]
/// unless [`PostgresStore::with_timeline_fallback`]) bounds a lost one.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    database: PostgresDatabase,
    timeline: Arc<listen::TimelineListener>,
}

impl PostgresStore {
    /// A store on `database`.
    pub fn new(database: PostgresDatabase) -> Self {
        Self {
            database,
            timeline: listen::TimelineListener::new(LISTENING_FALLBACK),
        }
    }

    /// This store with timeline waits that look again after `fallback`
    /// when no notification woke them. Call it before the store is shared.
    pub fn with_timeline_fallback(mut self, fallback: Duration) -> Self {
        self.timeline = listen::TimelineListener::new(fallback);
        self
    }

    /// Starts listening for timeline notifications (done by the first
    /// [`TimelineStore::watch_timeline`](crate::ports::store::TimelineStore::watch_timeline) otherwise) and waits until it listens.
    pub async fn listen_for_timeline(&self) -> Result<(), StoreError> {
        self.timeline.listening(self.database.pool()).await
    }

    /// Connects to `url` (`postgres://user:password@host:5432/db?sslmode=require`)
    /// with the default pool settings.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(Self::new(PostgresDatabase::connect(url).await?))
    }

    /// Connects to `url` with `pool` settings.
    pub async fn connect_with(url: &str, pool: PoolSettings) -> Result<Self, StoreError> {
        Ok(Self::new(PostgresDatabase::connect_with(url, pool).await?))
    }

    /// A store on the database of `transport`, sharing its connection pool.
    pub fn with_transport(transport: &PostgresTransport) -> Self {
        Self::new(transport.database().clone())
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
}

pub(super) fn attempt_number(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
