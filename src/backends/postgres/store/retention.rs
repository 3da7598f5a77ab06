//! Retention: deleting, in small batches, what is past its retention
//! ([`RetentionPolicy`]). One short statement per kind on the indexes of
//! migration 6; each picks its rows `FOR UPDATE SKIP LOCKED`, so it never
//! waits for a handler's transaction (nor a handler for it), and re-checks
//! its condition on the rows it deletes.

use sqlx_core::query::query;
use sqlx_core::query_scalar::query_scalar;
use time::OffsetDateTime;

use super::PostgresStore;
use crate::backends::postgres::PostgresDatabase;
use crate::ports::store::{AdminStore, doing};
use crate::ports::store::{FinishedSaga, ProcessRecord, Pruned, RetentionPolicy, StoreError, cutoff};
use uuid::Uuid;

/// Runs `sql` (parameters: the cutoff, the batch size) if the kind has a
/// retention; returns the rows deleted.
async fn delete_batch(
    database: &PostgresDatabase,
    sql: &'static str,
    before: Option<OffsetDateTime>,
    batch: i64,
) -> Result<u64, StoreError> {
    let Some(before) = before else {
        return Ok(0);
    };
    Ok(query(sql)
        .bind(before)
        .bind(batch)
        .execute(database.pool())
        .await?
        .rows_affected())
}

/// Bulk replay jobs that ended before the cutoff; their items go by the
/// foreign key's cascade.
const REPLAY_JOBS: &str = "DELETE FROM bosun_replay_jobs WHERE finished_at < $1
    AND status IN ('finished', 'cancelled') AND id IN (
    SELECT id FROM bosun_replay_jobs WHERE finished_at < $1 AND status IN ('finished', 'cancelled')
    ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED)";

const HANDLED: &str = "DELETE FROM bosun_handled WHERE handled_at < $1 AND (consumer, message_id) IN (
    SELECT consumer, message_id FROM bosun_handled WHERE handled_at < $1
    ORDER BY handled_at LIMIT $2 FOR UPDATE SKIP LOCKED)";

const ATTEMPTS: &str = "DELETE FROM bosun_attempts WHERE at < $1 AND (consumer, received_broker_message_id) IN (
    SELECT consumer, received_broker_message_id FROM bosun_attempts WHERE at < $1
    ORDER BY at LIMIT $2 FOR UPDATE SKIP LOCKED)";

/// Sent entries only: `dispatched_at < $1` is false for unsent ones (NULL).
const OUTBOX: &str = "DELETE FROM bosun_outbox WHERE dispatched_at < $1 AND id IN (
    SELECT id FROM bosun_outbox WHERE dispatched_at IS NOT NULL AND dispatched_at < $1
    ORDER BY dispatched_at LIMIT $2 FOR UPDATE SKIP LOCKED)";

/// A delivery with a dead letter keeps its lines while the dead letter exists.
const TIMELINE: &str = "DELETE FROM bosun_timeline WHERE at < $1 AND id IN (
    SELECT t.id FROM bosun_timeline t WHERE t.at < $1
    AND NOT EXISTS (SELECT 1 FROM bosun_dead_letters d WHERE d.correlation_id = t.correlation_id)
    ORDER BY t.at LIMIT $2 FOR UPDATE SKIP LOCKED)";

/// A delivery record goes once its timeline has.
const DELIVERIES: &str = "DELETE FROM bosun_deliveries WHERE started_at < $1 AND correlation_id IN (
    SELECT d.correlation_id FROM bosun_deliveries d WHERE d.started_at < $1
    AND NOT EXISTS (SELECT 1 FROM bosun_timeline t WHERE t.correlation_id = d.correlation_id)
    ORDER BY d.started_at LIMIT $2 FOR UPDATE SKIP LOCKED)";

/// The front door's `Idempotency-Key` records, by when they were claimed
/// (index of migration 17).
const HTTP_IDEMPOTENCY: &str = "DELETE FROM bosun_http_idempotency WHERE claimed_at < $1 AND (tenant_id, key) IN (
    SELECT tenant_id, key FROM bosun_http_idempotency WHERE claimed_at < $1
    ORDER BY claimed_at LIMIT $2 FOR UPDATE SKIP LOCKED)";

/// Saga history entries by their time, whether the saga finishes or not
/// (index of migration 17).
const SAGA_HISTORY: &str = "DELETE FROM bosun_saga_history WHERE at < $1 AND (kind, key, version) IN (
    SELECT kind, key, version FROM bosun_saga_history WHERE at < $1
    ORDER BY at LIMIT $2 FOR UPDATE SKIP LOCKED)";

/// History entries beyond a saga's last `$1` versions, a batch of them
/// (over the primary keys of both tables).
const SAGA_HISTORY_BEYOND: &str = "DELETE FROM bosun_saga_history WHERE (kind, key, version) IN (
    SELECT h.kind, h.key, h.version FROM bosun_saga_history h
    JOIN bosun_sagas s ON s.kind = h.kind AND s.key = h.key
    WHERE s.version > $1 AND h.version <= s.version - $1
    LIMIT $2 FOR UPDATE OF h SKIP LOCKED)";

/// Finished sagas of one kind last saved before the cutoff, with their
/// history. The outer conditions are checked again on the row deleted, so a
/// saga saved meanwhile (a late message) stays.
const SAGAS: &str = "WITH gone AS (
        DELETE FROM bosun_sagas s
        WHERE s.kind = $1 AND s.updated_at < $2 AND s.state ->> $3 = ANY ($4)
          AND (s.kind, s.key) IN (
            SELECT kind, key FROM bosun_sagas
            WHERE kind = $1 AND updated_at < $2 AND state ->> $3 = ANY ($4)
            ORDER BY updated_at LIMIT $5 FOR UPDATE SKIP LOCKED)
        RETURNING s.kind, s.key),
    history AS (
        DELETE FROM bosun_saga_history h USING gone WHERE h.kind = gone.kind AND h.key = gone.key)
    SELECT count(*) FROM gone";

async fn prune_sagas(
    database: &PostgresDatabase,
    finished: &FinishedSaga,
    before: OffsetDateTime,
    batch: i64,
) -> Result<u64, StoreError> {
    let count: i64 = query_scalar(SAGAS)
        .bind(&finished.kind)
        .bind(before)
        .bind(&finished.field)
        .bind(&finished.values)
        .bind(batch)
        .fetch_one(database.pool())
        .await?;
    Ok(u64::try_from(count).unwrap_or_default())
}

#[async_trait::async_trait]
impl AdminStore for PostgresStore {
    async fn check_schema(&self) -> Result<(), StoreError> {
        Ok(self.database.check_schema().await?)
    }

    async fn heartbeat(&self, process: &ProcessRecord) -> Result<(), StoreError> {
        self.record_heartbeat(process).await
    }

    async fn leave_fleet(&self, id: Uuid) -> Result<(), StoreError> {
        self.remove_process(id).await
    }

    async fn fleet(&self, within: std::time::Duration) -> Result<Option<Vec<ProcessRecord>>, StoreError> {
        self.list_fleet(within).await.map(Some)
    }

    async fn prune(&self, policy: &RetentionPolicy, now: OffsetDateTime) -> Result<Pruned, StoreError> {
        let run = async {
            let database = &self.database;
            let batch = i64::try_from(policy.batch.max(1)).unwrap_or(i64::MAX);
            let handled_before = cutoff(now, policy.handled);
            let timeline_before = cutoff(now, policy.timeline);
            let mut pruned = Pruned {
                handled: delete_batch(database, HANDLED, handled_before, batch).await?,
                attempts: delete_batch(database, ATTEMPTS, handled_before, batch).await?,
                outbox: delete_batch(database, OUTBOX, cutoff(now, policy.outbox_sent), batch).await?,
                timeline: delete_batch(database, TIMELINE, timeline_before, batch).await?,
                deliveries: delete_batch(database, DELIVERIES, timeline_before, batch).await?,
                http_idempotency: delete_batch(database, HTTP_IDEMPOTENCY, handled_before, batch).await?,
                ..Pruned::default()
            };
            pruned.replay_jobs = delete_batch(database, REPLAY_JOBS, timeline_before, batch).await?;
            if let Some(before) = cutoff(now, policy.finished_sagas) {
                for finished in &policy.finished {
                    let left = batch.saturating_sub(i64::try_from(pruned.sagas).unwrap_or(i64::MAX));
                    if left <= 0 {
                        break;
                    }
                    pruned.sagas += prune_sagas(database, finished, before, left).await?;
                }
            }
            pruned.saga_history = delete_batch(database, SAGA_HISTORY, timeline_before, batch).await?;
            if let Some(entries) = policy.saga_history_entries {
                let deleted = query(SAGA_HISTORY_BEYOND)
                    .bind(i64::try_from(entries).unwrap_or(i64::MAX))
                    .bind(batch)
                    .execute(database.pool())
                    .await?;
                pruned.saga_history += deleted.rows_affected();
            }
            Ok(pruned)
        };
        run.await.map_err(|err: StoreError| err.doing(doing::prune()))
    }
}
