//! The SQLite store: `state.db` under the data directory.
//!
//! One file per concern, each holding the SQL of its tables: `handled`
//! (idempotency, the atomic commit of a handled message, retries),
//! `sagas`, `outbox`, `dead_letters`, `timeline` (and deliveries),
//! `access` (API keys, HTTP idempotency), `jobs` (bulk replay jobs) and `schema` (tables and
//! upgrades of older files). [`SqliteStore`]'s [`Store`] methods call
//! those and name what they were doing in their errors with the port's
//! words (`ports::store::doing`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::Destination;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::backends::sqlite::Database;
use crate::ports::store::{
    AcceptedCommand, AttemptRecord, CommitOutcome, DEFAULT_TIMELINE_FALLBACK, DeadLetterFilter, DeadLetterRecord,
    DeliveryRecord, HandledMessage, PendingOutbox, Pruned, ReplayRecord, RetentionPolicy, RetryWrite, SagaRecord,
    SagaState, Store, StoreError, TimelineEntry, TimelineWait, TimelineWatch, doing,
};
use crate::ports::transport::unix_ms;
use schema::{SCHEMA, upgrade};

mod access;
mod dead_letters;
mod handled;
mod jobs;
mod outbox;
mod retention;
mod sagas;
mod schema;
mod timeline;

/// The SQLite store.
///
/// Its timeline waits ([`Store::watch_timeline`]) are woken by this
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

#[async_trait]
impl Store for SqliteStore {
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

    async fn commit_handled(&self, handled: HandledMessage) -> Result<CommitOutcome, StoreError> {
        let doing = doing::commit_handled(&handled);
        let lines = self.waited_on(&handled.timeline);
        let outcome = handled::commit_handled(&self.database, handled)
            .await
            .map_err(|err| err.doing(doing))?;
        self.written(&lines);
        Ok(outcome)
    }

    async fn record_retry(&self, retry: RetryWrite) -> Result<(), StoreError> {
        let doing = doing::record_retry(&retry.consumer, &retry.message_id);
        let line = self.waited_on([&retry.timeline]);
        handled::record_retry(&self.database, retry)
            .await
            .map_err(|err| err.doing(doing))?;
        self.written(&line);
        Ok(())
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
        let line = self.waited_on(&timeline);
        dead_letters::record_dead_letter(&self.database, record, timeline)
            .await
            .map_err(|err| err.doing(doing))?;
        self.written(&line);
        Ok(())
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
        let line = self.waited_on(&timeline);
        dead_letters::record_replay(&self.database, id, replay, timeline)
            .await
            .map_err(|err| err.doing(doing::record_replay(id)))?;
        self.written(&line);
        Ok(())
    }

    async fn purge_dead_letter(&self, id: Uuid) -> Result<(), StoreError> {
        dead_letters::purge_dead_letter(&self.database, id)
            .await
            .map_err(|err| err.doing(doing::purge_dead_letter(id)))
    }

    async fn accept_command(&self, accepted: AcceptedCommand, lease: Duration) -> Result<i64, StoreError> {
        let doing = doing::accept_command(&accepted);
        let lines = self.waited_on([&accepted.timeline]);
        let id = outbox::accept_command(&self.database, accepted, lease)
            .await
            .map_err(|err| err.doing(doing))?;
        self.written(&lines);
        Ok(id)
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
        let lines = self.waited_on(&entries);
        timeline::append_timeline(&self.database, entries)
            .await
            .map_err(|err| err.doing(doing::append_timeline()))?;
        self.written(&lines);
        Ok(())
    }

    async fn timeline(&self, correlation_id: &str) -> Result<Vec<TimelineEntry>, StoreError> {
        timeline::timeline(&self.database, correlation_id)
            .await
            .map_err(|err| err.doing(doing::timeline(correlation_id)))
    }

    fn watch_timeline(&self, correlation_id: &str) -> TimelineWait {
        self.watch.subscribe(correlation_id)
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
