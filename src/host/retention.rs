//! Retention: the background task that keeps the database bounded in a
//! long run, and the one pass `bosun prune` runs.
//!
//! Every interval it prunes a batch of each kind past its retention
//! ([`AdminStore::prune`], [`Transport::prune_duplicates`]), and goes on with the
//! next batch, yielding between them, while some kind came back full. Each
//! batch is a few short statements on indexed columns, so handlers are
//! never held up for long; a failure is logged and tried at the next
//! interval. It stops with the host.
//!
//! Which sagas are finished (and may go) is not the host's to know: each
//! consumer's registration declares it, and [`policy`] takes the rules from
//! the registry ([`registry::finished_sagas`]).

use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::ports::store::{AdminStore, Pruned, RetentionPolicy, StoreError};
use crate::ports::transport::{Transport, TransportError};
use crate::runtime::config::RetentionSettings;
use crate::runtime::registry;

/// A pass stops after this many batches (a runaway backlog is left for
/// the next interval rather than pruned in one go).
const MAX_BATCHES_PER_PASS: usize = 10_000;

/// The policy of `settings`, with the finished sagas of every registered
/// consumer's saga kind ([`registry::finished_sagas`]).
pub fn policy(settings: &RetentionSettings) -> RetentionPolicy {
    RetentionPolicy {
        handled: settings.handled,
        outbox_sent: settings.outbox_sent,
        timeline: settings.timeline,
        finished_sagas: settings.completed_sagas,
        saga_history_entries: settings.saga_history_entries,
        finished: registry::finished_sagas(),
        batch: settings.batch,
    }
}

/// Why a prune batch failed.
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    /// The store's batch failed.
    #[error("could not prune the store")]
    Store(#[source] StoreError),
    /// The transport's batch failed.
    #[error("could not prune the transport's duplicate-detection records")]
    Transport(#[source] TransportError),
}

/// Prunes one batch of each kind at `now`.
pub async fn prune_batch(
    store: &dyn AdminStore,
    transport: &dyn Transport,
    policy: &RetentionPolicy,
    now: OffsetDateTime,
) -> Result<Pruned, PruneError> {
    let mut pruned = store.prune(policy, now).await.map_err(PruneError::Store)?;
    pruned.duplicates = transport
        .prune_duplicates(now, policy.batch.max(1))
        .await
        .map_err(PruneError::Transport)?;
    Ok(pruned)
}

/// Prunes batch after batch until none comes back full (or `stop`, or
/// `MAX_BATCHES_PER_PASS`), yielding between batches; calls `progress`
/// with each batch's counts. Returns the totals.
pub async fn prune_all(
    store: &dyn AdminStore,
    transport: &dyn Transport,
    policy: &RetentionPolicy,
    stop: &CancellationToken,
    mut progress: impl FnMut(&Pruned),
) -> Result<Pruned, PruneError> {
    let mut total = Pruned::default();
    for _ in 0..MAX_BATCHES_PER_PASS {
        let batch = prune_batch(store, transport, policy, OffsetDateTime::now_utc()).await?;
        total.add(&batch);
        progress(&batch);
        if !batch.any_full(policy.batch.max(1)) || stop.is_cancelled() {
            break;
        }
        tokio::task::yield_now().await;
    }
    Ok(total)
}

/// Runs a pass every `interval` until `stop`.
pub(crate) async fn run(
    store: Arc<dyn AdminStore>,
    transport: Arc<dyn Transport>,
    policy: RetentionPolicy,
    interval: Duration,
    stop: CancellationToken,
) {
    loop {
        // The first pass waits an interval too: starting replicas do not
        // all prune at once, and start-up is not slowed.
        tokio::select! {
            () = tokio::time::sleep(interval) => {},
            () = stop.cancelled() => return,
        }
        let pass = prune_all(store.as_ref(), transport.as_ref(), &policy, &stop, |_| {});
        let result = tokio::select! {
            result = pass => result,
            () = stop.cancelled() => return,
        };
        match result {
            Ok(pruned) if pruned.total() > 0 => tracing::info!(
                handled = pruned.handled,
                attempts = pruned.attempts,
                outbox = pruned.outbox,
                timeline = pruned.timeline,
                deliveries = pruned.deliveries,
                sagas = pruned.sagas,
                duplicates = pruned.duplicates,
                replay_jobs = pruned.replay_jobs,
                idempotency_keys = pruned.http_idempotency,
                saga_history = pruned.saga_history,
                "pruned rows past their retention"
            ),
            Ok(_) => tracing::debug!("nothing past its retention"),
            Err(err) => tracing::warn!(
                error = %crate::host::error_chain(&err).join(": "),
                "pruning failed; tried again at the next interval"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_final_release_phases_count_as_finished() {
        let finished = policy(&RetentionSettings::default()).finished;
        assert_eq!(finished.len(), 1);
        assert_eq!(finished[0].kind, "release");
        assert_eq!(finished[0].field, "phase");
        assert_eq!(finished[0].values, ["completed", "rejected"]);
    }
}
