//! Retention: deleting, in batches, what is past its retention
//! ([`RetentionPolicy`]), with the SQLite store's rules: each kind by its
//! own time, oldest first, at most a batch of each per call.

use std::collections::BTreeMap;

use serde_json::Value;
use time::OffsetDateTime;

use super::{MemoryStore, State, count, ms, oldest};
use crate::ports::store::AdminStore;
use crate::ports::store::{FinishedSaga, Pruned, RetentionPolicy, StoreError, cutoff};

/// Deletes from `rows` at most `batch` of those whose time (`time_of`;
/// `None`: kept whatever its age) is before `before` (`None`: the kind is
/// kept forever), oldest first; returns how many.
fn prune_rows<K: Ord + Clone, V>(
    rows: &mut BTreeMap<K, V>,
    before: Option<OffsetDateTime>,
    batch: usize,
    time_of: impl Fn(&K, &V) -> Option<OffsetDateTime>,
) -> u64 {
    let Some(before) = before.map(ms) else {
        return 0;
    };
    let past: Vec<(OffsetDateTime, K)> = rows
        .iter()
        .filter_map(|(key, row)| time_of(key, row).filter(|at| *at < before).map(|at| (at, key.clone())))
        .collect();
    let gone = oldest(past, batch);
    for key in &gone {
        rows.remove(key);
    }
    count(&gone)
}

/// Whether a saga's `state` says it is over, as `finished` reads it: its
/// top-level field holds one of the finished values (as a string).
fn is_finished(state: &Value, finished: &FinishedSaga) -> bool {
    state
        .get(&finished.field)
        .and_then(Value::as_str)
        .is_some_and(|value| finished.values.iter().any(|done| done == value))
}

/// One batch of each kind; what [`AdminStore::prune`] does under the lock.
fn prune(state: &mut State, policy: &RetentionPolicy, now: OffsetDateTime) -> Pruned {
    let State {
        handled,
        sagas,
        outbox,
        dead_letters,
        timeline,
        deliveries,
        jobs,
        access,
        ..
    } = state;
    let batch = policy.batch.max(1);
    let handled_before = cutoff(now, policy.handled);
    let timeline_before = cutoff(now, policy.timeline);
    let mut pruned = Pruned {
        handled: prune_rows(&mut handled.records, handled_before, batch, |_, at| Some(*at)),
        attempts: prune_rows(&mut handled.attempts, handled_before, batch, |_, attempt| {
            Some(attempt.record.at)
        }),
        // Sent entries only: unsent ones have no time to be past.
        outbox: prune_rows(
            &mut outbox.entries,
            cutoff(now, policy.outbox_sent),
            batch,
            |_, entry| entry.dispatched_at,
        ),
        // A delivery with a dead letter keeps its lines while the dead letter exists.
        timeline: prune_rows(&mut timeline.lines, timeline_before, batch, |_, line| {
            (!dead_letters.of_delivery(&line.correlation_id)).then_some(line.at)
        }),
        http_idempotency: prune_rows(&mut access.claims, handled_before, batch, |_, claim| {
            Some(claim.claimed_at)
        }),
        ..Pruned::default()
    };
    // A delivery record goes once its timeline has.
    pruned.deliveries = prune_rows(&mut deliveries.records, timeline_before, batch, |id, (_, record)| {
        (!timeline.has_lines(id)).then_some(record.started_at)
    });
    // Bulk replay jobs that ended, with their items.
    pruned.replay_jobs = prune_rows(&mut jobs.jobs, timeline_before, batch, |_, job| {
        job.record
            .status
            .is_terminal()
            .then_some(job.record.finished_at)
            .flatten()
    });
    // Finished sagas (with their history), one batch across every kind.
    for finished in &policy.finished {
        let left = batch.saturating_sub(usize::try_from(pruned.sagas).unwrap_or(usize::MAX));
        if left == 0 {
            break;
        }
        pruned.sagas += prune_rows(
            &mut sagas.rows,
            cutoff(now, policy.finished_sagas),
            left,
            |(kind, _), saga| (*kind == finished.kind && is_finished(&saga.state, finished)).then_some(saga.updated_at),
        );
    }
    pruned.saga_history = prune_history(sagas, timeline_before, batch);
    if let Some(entries) = policy.saga_history_entries {
        pruned.saga_history += prune_beyond(sagas, entries, batch);
    }
    pruned
}

/// Deletes at most `batch` history entries beyond each saga's last
/// `entries` versions.
fn prune_beyond(sagas: &mut super::sagas::Sagas, entries: u64, batch: usize) -> u64 {
    let keep = i64::try_from(entries).unwrap_or(i64::MAX);
    let mut left = batch;
    let mut deleted = 0u64;
    for saga in sagas.rows.values_mut() {
        if left == 0 {
            break;
        }
        let oldest_kept = saga.version.saturating_sub(keep);
        let before = saga.history.len();
        let mut taken = 0;
        saga.history.retain(|entry| {
            let beyond = entry.version <= oldest_kept && taken < left;
            taken += usize::from(beyond);
            !beyond
        });
        let gone = before - saga.history.len();
        left -= gone;
        deleted += u64::try_from(gone).unwrap_or(u64::MAX);
    }
    deleted
}

/// One history entry: its saga's (kind, key) and its index in the history.
type HistoryEntryAt = ((String, String), usize);

/// Deletes at most `batch` saga history entries older than `before`, the
/// oldest first, whatever the saga's phase (its state stays).
fn prune_history(sagas: &mut super::sagas::Sagas, before: Option<OffsetDateTime>, batch: usize) -> u64 {
    let Some(before) = before.map(ms) else {
        return 0;
    };
    let past: Vec<(OffsetDateTime, HistoryEntryAt)> = sagas
        .rows
        .iter()
        .flat_map(|(key, saga)| {
            saga.history
                .iter()
                .enumerate()
                .filter(|(_, entry)| entry.at < before)
                .map(|(index, entry)| (entry.at, (key.clone(), index)))
                .collect::<Vec<_>>()
        })
        .collect();
    let gone = oldest(past, batch);
    let mut by_saga: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (key, index) in &gone {
        by_saga.entry(key.clone()).or_default().push(*index);
    }
    for (key, indexes) in by_saga {
        if let Some(saga) = sagas.rows.get_mut(&key) {
            let mut position = 0;
            saga.history.retain(|_| {
                let keep = !indexes.contains(&position);
                position += 1;
                keep
            });
        }
    }
    count(&gone)
}

#[async_trait::async_trait]
impl AdminStore for MemoryStore {
    /// Nothing persisted, no schema to check.
    async fn check_schema(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn prune(&self, policy: &RetentionPolicy, now: OffsetDateTime) -> Result<Pruned, StoreError> {
        Ok(self.with(|state| prune(state, policy, now)))
    }
}
