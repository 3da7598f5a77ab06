//! Retention: deleting, in small batches, what is past its retention
//! ([`RetentionPolicy`]). One short statement per kind, each on an indexed
//! column and each in its own call, so handlers of this process get the
//! connection between them.

use rusqlite::{TransactionBehavior, params};
use time::OffsetDateTime;

use super::SqliteStore;
use crate::backends::sqlite::Database;
use crate::ports::store::{AdminStore, doing};
use crate::ports::store::{FinishedSaga, Pruned, RetentionPolicy, StoreError, cutoff};
use crate::ports::transport::unix_ms;

/// Runs `sql` (parameters: the cutoff in Unix ms, the batch size) if the
/// kind has a retention; returns the rows deleted.
async fn delete_batch(
    database: &Database,
    sql: &'static str,
    before: Option<OffsetDateTime>,
    batch: usize,
) -> Result<u64, StoreError> {
    let Some(before) = before else {
        return Ok(0);
    };
    let limit = i64::try_from(batch).unwrap_or(i64::MAX);
    database
        .call(move |conn| {
            let deleted = conn.prepare_cached(sql)?.execute(params![unix_ms(before), limit])?;
            Ok(u64::try_from(deleted).unwrap_or(u64::MAX))
        })
        .await
}

/// Deletes a batch of history entries beyond each saga's last `entries`
/// versions.
async fn delete_beyond(database: &Database, entries: u64, batch: usize) -> Result<u64, StoreError> {
    let keep = i64::try_from(entries).unwrap_or(i64::MAX);
    let limit = i64::try_from(batch).unwrap_or(i64::MAX);
    database
        .call(move |conn| {
            let deleted = conn
                .prepare_cached(SAGA_HISTORY_BEYOND)?
                .execute(params![keep, limit])?;
            Ok(u64::try_from(deleted).unwrap_or(u64::MAX))
        })
        .await
}

const HANDLED: &str = "DELETE FROM handled WHERE rowid IN (
    SELECT rowid FROM handled WHERE handled_at < ?1 ORDER BY handled_at LIMIT ?2)";

const ATTEMPTS: &str = "DELETE FROM attempts WHERE rowid IN (
    SELECT rowid FROM attempts WHERE at < ?1 ORDER BY at LIMIT ?2)";

/// Sent entries only: `dispatched_at < ?1` is false for unsent ones (NULL).
const OUTBOX: &str = "DELETE FROM outbox WHERE id IN (
    SELECT id FROM outbox WHERE dispatched_at < ?1 ORDER BY dispatched_at LIMIT ?2)";

/// A delivery with a dead letter keeps its lines while the dead letter exists.
const TIMELINE: &str = "DELETE FROM timeline WHERE id IN (
    SELECT t.id FROM timeline t WHERE t.at < ?1
    AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.correlation_id = t.correlation_id)
    ORDER BY t.at LIMIT ?2)";

/// A delivery record goes once its timeline has.
const DELIVERIES: &str = "DELETE FROM deliveries WHERE rowid IN (
    SELECT rowid FROM deliveries d WHERE d.started_at < ?1
    AND NOT EXISTS (SELECT 1 FROM timeline t WHERE t.correlation_id = d.correlation_id)
    ORDER BY d.started_at LIMIT ?2)";

/// The front door's `Idempotency-Key` records, by when they were claimed.
const HTTP_IDEMPOTENCY: &str = "DELETE FROM http_idempotency WHERE rowid IN (
    SELECT rowid FROM http_idempotency WHERE claimed_at < ?1 ORDER BY claimed_at LIMIT ?2)";

/// Saga history entries by their time, whether the saga finishes or not.
const SAGA_HISTORY: &str = "DELETE FROM saga_history WHERE rowid IN (
    SELECT rowid FROM saga_history WHERE at < ?1 ORDER BY at LIMIT ?2)";

/// History entries beyond a saga's last `?1` versions, a batch of them.
const SAGA_HISTORY_BEYOND: &str = "DELETE FROM saga_history WHERE rowid IN (
    SELECT h.rowid FROM saga_history h JOIN sagas s ON s.kind = h.kind AND s.key = h.key
    WHERE s.version > ?1 AND h.version <= s.version - ?1 LIMIT ?2)";

/// Finished sagas of one kind last saved before `before`, with their history.
async fn prune_sagas(
    database: &Database,
    finished: &FinishedSaga,
    before: OffsetDateTime,
    batch: usize,
) -> Result<u64, StoreError> {
    let kind = finished.kind.clone();
    let path = format!("$.{}", finished.field);
    let values = serde_json::to_string(&finished.values)
        .map_err(|err| StoreError::unencodable("the finished phases of a saga kind", err))?;
    let limit = i64::try_from(batch).unwrap_or(i64::MAX);
    database
        .call(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let keys: Vec<String> = {
                let mut statement = tx.prepare_cached(
                    "SELECT key FROM sagas WHERE kind = ?1 AND updated_at < ?2
                     AND json_extract(state, ?3) IN (SELECT value FROM json_each(?4))
                     ORDER BY updated_at LIMIT ?5",
                )?;
                statement
                    .query_map(params![kind, unix_ms(before), path, values, limit], |row| row.get(0))?
                    .collect::<Result<_, _>>()?
            };
            for key in &keys {
                tx.execute(
                    "DELETE FROM saga_history WHERE kind = ?1 AND key = ?2",
                    params![kind, key],
                )?;
                tx.execute("DELETE FROM sagas WHERE kind = ?1 AND key = ?2", params![kind, key])?;
            }
            tx.commit()?;
            Ok(u64::try_from(keys.len()).unwrap_or(u64::MAX))
        })
        .await
}

/// Bulk replay jobs that ended before `before`, with their items.
async fn prune_replay_jobs(database: &Database, before: OffsetDateTime, batch: usize) -> Result<u64, StoreError> {
    let limit = i64::try_from(batch).unwrap_or(i64::MAX);
    database
        .call(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let ids: Vec<String> = {
                let mut statement = tx.prepare_cached(
                    "SELECT id FROM replay_jobs WHERE finished_at < ?1 AND status IN ('finished', 'cancelled')
                     ORDER BY finished_at LIMIT ?2",
                )?;
                statement
                    .query_map(params![unix_ms(before), limit], |row| row.get(0))?
                    .collect::<Result<_, _>>()?
            };
            for id in &ids {
                tx.execute("DELETE FROM replay_job_items WHERE job_id = ?1", [id])?;
                tx.execute("DELETE FROM replay_jobs WHERE id = ?1", [id])?;
            }
            tx.commit()?;
            Ok(u64::try_from(ids.len()).unwrap_or(u64::MAX))
        })
        .await
}

#[async_trait::async_trait]
impl AdminStore for SqliteStore {
    async fn prune(&self, policy: &RetentionPolicy, now: OffsetDateTime) -> Result<Pruned, StoreError> {
        let run = async {
            let database = &self.database;
            let batch = policy.batch.max(1);
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
            if let Some(before) = timeline_before {
                pruned.replay_jobs = prune_replay_jobs(database, before, batch).await?;
            }
            if let Some(before) = cutoff(now, policy.finished_sagas) {
                for finished in &policy.finished {
                    let left = batch.saturating_sub(usize::try_from(pruned.sagas).unwrap_or(usize::MAX));
                    if left == 0 {
                        break;
                    }
                    pruned.sagas += prune_sagas(database, finished, before, left).await?;
                }
            }
            pruned.saga_history = delete_batch(database, SAGA_HISTORY, timeline_before, batch).await?;
            if let Some(entries) = policy.saga_history_entries {
                pruned.saga_history += delete_beyond(database, entries, batch).await?;
            }
            Ok(pruned)
        };
        run.await.map_err(|err: StoreError| err.doing(doing::prune()))
    }
}
