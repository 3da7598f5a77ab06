//! The PostgreSQL store: idempotency records, sagas, the outbox, attempts,
//! dead letters and the delivery timeline in PostgreSQL, shared by every
//! bosun replica (tables of migration 1, `migrations/postgres/`); with
//! migration 3, deliveries, API keys and HTTP idempotency keys
//! ([`AccessStore`](crate::ports::store::AccessStore)).
//!
//! [`Store::commit_handled`] writes the idempotency record, the saga (with
//! its optimistic version check: `INSERT ... ON CONFLICT DO NOTHING` for a
//! new saga, `UPDATE ... WHERE version = expected` for an existing one), the
//! outbox and the timeline in one transaction.
//!
//! With the [PostgreSQL transport](crate::backends::postgres::transport) on
//! the same database, receiving, handling and sending are one transaction:
//! [`PostgresSettle`](crate::backends::postgres::settle::PostgresSettle)
//! writes what this store writes and also settles the received message.
//!
//! One file per concern, each holding the SQL of its tables: `handled`
//! (idempotency, the commit of a handled message, retries), `sagas`,
//! `outbox`, `dead_letters`, `timeline` (and deliveries) and
//! `access` (API keys, HTTP idempotency). [`PostgresStore`]'s [`Store`]
//! methods call those and name what they were doing in their errors with
//! the port's words (`ports::store::doing`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::Destination;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::backends::postgres::transport::PostgresTransport;
use crate::backends::postgres::{MigrationReport, PoolSettings, PostgresDatabase};
use crate::ports::store::{
    AcceptedCommand, AttemptRecord, CommitOutcome, DeadLetterFilter, DeadLetterRecord, DeliveryRecord, HandledMessage,
    PendingOutbox, Pruned, ReplayRecord, RetentionPolicy, RetryWrite, SagaRecord, SagaState, SagaTurn, Store,
    StoreError, TimelineEntry, TimelineWait, doing,
};

pub use crate::backends::postgres::SCHEMA_VERSION;
pub use listen::{LISTENING_FALLBACK, TIMELINE_CHANNEL};

mod access;
pub(crate) mod commit;
pub(crate) mod dead_letters;
pub(crate) mod handled;
mod jobs;
mod listen;
pub(crate) mod outbox;
mod retention;
mod sagas;
pub(crate) mod timeline;
pub(crate) mod turns;

/// The PostgreSQL store.
///
/// Its timeline waits ([`Store::watch_timeline`]) are woken by
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
    /// [`Store::watch_timeline`] otherwise) and waits until it listens.
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

#[async_trait]
impl Store for PostgresStore {
    async fn is_handled(&self, consumer: &str, message_id: &str) -> Result<bool, StoreError> {
        handled::is_handled(&self.database, consumer, message_id)
            .await
            .map_err(|err| err.doing(doing::is_handled(consumer, message_id)))
    }

    async fn handled_and_saga(
        &self,
        consumer: &str,
        message_id: &str,
        saga: Option<(&str, &str)>,
    ) -> Result<(bool, Option<SagaState>), StoreError> {
        handled::handled_and_saga(&self.database, consumer, message_id, saga)
            .await
            .map_err(|err| err.doing(doing::is_handled(consumer, message_id)))
    }

    async fn saga_turn(&self, kind: &str, key: &str) -> Result<Option<SagaTurn>, StoreError> {
        turns::saga_turn(&self.database, kind, key)
            .await
            .map(Some)
            .map_err(|err| err.doing(format!("waiting for the turn of saga {kind}/{key}")))
    }

    async fn commit_handled(&self, handled: HandledMessage) -> Result<CommitOutcome, StoreError> {
        let doing = doing::commit_handled(&handled);
        handled::commit_handled(&self.database, handled)
            .await
            .map_err(|err| err.doing(doing))
    }

    async fn record_retry(&self, retry: RetryWrite) -> Result<(), StoreError> {
        let doing = doing::record_retry(&retry.consumer, &retry.message_id);
        handled::record_retry(&self.database, retry)
            .await
            .map_err(|err| err.doing(doing))
    }

    async fn attempts(&self, consumer: &str, message_id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        handled::attempts(&self.database, consumer, message_id)
            .await
            .map_err(|err| err.doing(doing::attempts(consumer, message_id)))
    }

    async fn record_dead_letter(
        &self,
        record: DeadLetterRecord,
        timeline: Option<TimelineEntry>,
    ) -> Result<(), StoreError> {
        let doing = doing::record_dead_letter(&record);
        dead_letters::record_dead_letter(&self.database, record, timeline)
            .await
            .map_err(|err| err.doing(doing))
    }

    async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetterRecord>, StoreError> {
        dead_letters::dead_letters(&self.database, filter)
            .await
            .map_err(|err| err.doing(doing::dead_letters()))
    }

    async fn dead_letter(&self, id: &str, tenant_id: Option<&str>) -> Result<DeadLetterRecord, StoreError> {
        dead_letters::dead_letter(&self.database, id, tenant_id)
            .await
            .map_err(|err| err.doing(doing::dead_letter(id)))
    }

    async fn dead_letter_for(
        &self,
        entity: &Destination,
        sequence: i64,
    ) -> Result<Option<DeadLetterRecord>, StoreError> {
        dead_letters::dead_letter_for(&self.database, entity, sequence)
            .await
            .map_err(|err| err.doing(doing::dead_letter_for(entity, sequence)))
    }

    async fn record_replay(
        &self,
        id: Uuid,
        replay: ReplayRecord,
        timeline: Option<TimelineEntry>,
    ) -> Result<(), StoreError> {
        dead_letters::record_replay(&self.database, id, replay, timeline)
            .await
            .map_err(|err| err.doing(doing::record_replay(id)))
    }

    async fn purge_dead_letter(&self, id: Uuid) -> Result<(), StoreError> {
        dead_letters::purge_dead_letter(&self.database, id)
            .await
            .map_err(|err| err.doing(doing::purge_dead_letter(id)))
    }

    async fn accept_command(&self, accepted: AcceptedCommand, lease: Duration) -> Result<i64, StoreError> {
        let doing = doing::accept_command(&accepted);
        outbox::accept_command(&self.database, accepted, lease)
            .await
            .map_err(|err| err.doing(doing))
    }

    async fn claim_outbox(&self, limit: usize, lease: Duration) -> Result<Vec<PendingOutbox>, StoreError> {
        outbox::claim_outbox(&self.database, limit, lease)
            .await
            .map_err(|err| err.doing(doing::claim_outbox()))
    }

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError> {
        outbox::mark_dispatched(&self.database, ids)
            .await
            .map_err(|err| err.doing(doing::mark_dispatched(ids)))
    }

    async fn outbox_backlog(&self) -> Result<u64, StoreError> {
        outbox::outbox_backlog(&self.database)
            .await
            .map_err(|err| err.doing(doing::outbox_backlog()))
    }

    async fn emitted(&self, correlation_id: &str) -> Result<Vec<Vec<u8>>, StoreError> {
        outbox::emitted(&self.database, correlation_id)
            .await
            .map_err(|err| err.doing(doing::emitted(correlation_id)))
    }

    async fn load_saga(&self, kind: &str, key: &str) -> Result<Option<SagaRecord>, StoreError> {
        sagas::load_saga(&self.database, kind, key)
            .await
            .map_err(|err| err.doing(doing::load_saga(kind, key)))
    }

    async fn load_saga_state(&self, kind: &str, key: &str) -> Result<Option<SagaState>, StoreError> {
        sagas::load_saga_state(&self.database, kind, key)
            .await
            .map_err(|err| err.doing(doing::load_saga(kind, key)))
    }

    async fn list_sagas(&self, kind: Option<&str>) -> Result<Vec<SagaRecord>, StoreError> {
        sagas::list_sagas(&self.database, kind)
            .await
            .map_err(|err| err.doing(doing::list_sagas()))
    }

    async fn append_timeline(&self, entries: Vec<TimelineEntry>) -> Result<(), StoreError> {
        timeline::append_timeline(&self.database, entries)
            .await
            .map_err(|err| err.doing(doing::append_timeline()))
    }

    async fn timeline(&self, correlation_id: &str) -> Result<Vec<TimelineEntry>, StoreError> {
        timeline::timeline(&self.database, correlation_id)
            .await
            .map_err(|err| err.doing(doing::timeline(correlation_id)))
    }

    fn watch_timeline(&self, correlation_id: &str) -> TimelineWait {
        self.timeline.start(self.database.pool());
        self.timeline.watch.subscribe(correlation_id)
    }

    async fn check_schema(&self) -> Result<(), StoreError> {
        Ok(self.database.check_schema().await?)
    }

    async fn record_delivery(&self, record: DeliveryRecord) -> Result<(), StoreError> {
        let doing = doing::record_delivery(&record);
        timeline::record_delivery(&self.database, record)
            .await
            .map_err(|err| err.doing(doing))
    }

    async fn delivery_record(&self, correlation_id: &str) -> Result<Option<DeliveryRecord>, StoreError> {
        timeline::delivery_record(&self.database, correlation_id)
            .await
            .map_err(|err| err.doing(doing::delivery_record(correlation_id)))
    }

    async fn list_deliveries(&self, tenant_id: Option<&str>, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError> {
        timeline::list_deliveries(&self.database, tenant_id, limit)
            .await
            .map_err(|err| err.doing(doing::list_deliveries()))
    }

    async fn prune(&self, policy: &RetentionPolicy, now: OffsetDateTime) -> Result<Pruned, StoreError> {
        retention::prune(&self.database, policy, now)
            .await
            .map_err(|err| err.doing(doing::prune()))
    }
}

#[cfg(test)]
mod tests;
