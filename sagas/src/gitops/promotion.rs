//! Promotions: one release at a time (a promotion that arrives while
//! another is in flight is queued, and goes once that one is synced), the
//! newest promotion of each module is written (a late one never rolls the
//! environment back), and the commit written becomes the desired commit.

use bosun_contracts::messages::{DeploymentPromoted, ReconcileReason};

use super::{
    AppRelease, DesiredCommit, DesiredStateWritten, GitOpsPhase, GitOpsSaga, HistoryEntry, HistoryEvent, Next,
    QUEUE_LIMIT, SUPERSEDED_LIMIT, Work,
};

impl GitOpsSaga {
    pub(super) fn on_promoted(next: &mut Next, promoted: &DeploymentPromoted, queue: bool) {
        let state = &mut next.state;
        state.repository = Some(promoted.environment_repository.clone());
        let entry = |event, detail: Option<String>| HistoryEntry {
            at: Some(promoted.promoted_at),
            event,
            commit_sha: None,
            release_id: Some(promoted.release_id.clone()),
            detail,
        };
        if let Some(current) = state.apps.get(&promoted.module_id).cloned() {
            if current.release_id == promoted.release_id {
                let detail = current
                    .commit_sha
                    .as_ref()
                    .map(|commit| format!("already written as {commit}"));
                state.record(entry(HistoryEvent::PromotionRepeated, detail));
                if current.commit_sha.is_some() && state.phase == GitOpsPhase::Reconciling {
                    Self::request_reconcile(next, ReconcileReason::Promotion);
                }
                return;
            }
            if (current.promoted_at, current.release_id.as_str()) > (promoted.promoted_at, promoted.release_id.as_str())
            {
                let detail = format!("older than {}, the module's current release", current.release_id);
                state.record(entry(HistoryEvent::PromotionIgnored, Some(detail)));
                return;
            }
        }
        if let Some(position) = state
            .queued
            .iter()
            .position(|queued| queued.release_id == promoted.release_id)
        {
            let detail = format!("queued already (position {})", position + 1);
            state.record(entry(HistoryEvent::PromotionRepeated, Some(detail)));
            return;
        }
        if queue && let Some(in_flight) = state.in_flight().map(str::to_owned) {
            // One release at a time: this one waits for the one in flight.
            if state.queued.len() >= QUEUE_LIMIT {
                let detail = format!("{QUEUE_LIMIT} promotions are queued already: not queued");
                state.record(entry(HistoryEvent::PromotionIgnored, Some(detail)));
                return;
            }
            state.queued.push(promoted.clone());
            let detail = format!("queued behind {in_flight} (position {})", state.queued.len());
            state.record(entry(HistoryEvent::PromotionAccepted, Some(detail)));
            return;
        }
        state.record(entry(HistoryEvent::PromotionAccepted, None));
        next.work = Some(Work::WriteDesiredState(Box::new(promoted.clone())));
    }

    /// With nothing in flight, the oldest queued promotion goes next; one
    /// that no longer applies (older than its module's release written
    /// since, or that very release) is recorded and the next one goes.
    /// Returns whether any was taken from the queue.
    pub(super) fn dequeue(next: &mut Next, queue: bool) -> bool {
        let mut taken = false;
        while next.state.in_flight().is_none() && next.work.is_none() && !next.state.queued.is_empty() {
            let promoted = next.state.queued.remove(0);
            Self::on_promoted(next, &promoted, queue);
            taken = true;
        }
        taken
    }

    pub(super) fn on_written(next: &mut Next, written: &DesiredStateWritten) {
        let state = &mut next.state;
        state.repository = Some(written.repository.clone());
        if let Some(current) = state.apps.get(&written.module_id)
            && current.release_id != written.release_id
            && (current.promoted_at, current.release_id.as_str()) > (written.promoted_at, written.release_id.as_str())
        {
            // Cannot happen when the consumer follows the saga; recorded,
            // never applied.
            state.record(HistoryEntry {
                at: Some(written.promoted_at),
                event: HistoryEvent::PromotionIgnored,
                commit_sha: Some(written.commit_sha.clone()),
                release_id: Some(written.release_id.clone()),
                detail: Some(format!("written after the newer {}", current.release_id)),
            });
            return;
        }
        state.apps.insert(
            written.module_id.clone(),
            AppRelease {
                release_id: written.release_id.clone(),
                promoted_at: written.promoted_at,
                commit_sha: Some(written.commit_sha.clone()),
            },
        );
        if state.desired_commit() != Some(written.commit_sha.as_str()) {
            let generation = state.desired.as_ref().map_or(0, |desired| desired.generation) + 1;
            let previous = state.desired.replace(DesiredCommit {
                commit_sha: written.commit_sha.clone(),
                generation,
                release_id: Some(written.release_id.clone()),
                module_id: Some(written.module_id.clone()),
                reconcile_attempts: 0,
            });
            if let Some(previous) = previous
                && !state.was_reported(&previous.commit_sha)
            {
                state.record(HistoryEntry {
                    at: Some(written.promoted_at),
                    event: HistoryEvent::Superseded,
                    commit_sha: Some(previous.commit_sha.clone()),
                    release_id: previous.release_id.clone(),
                    detail: Some(format!("by {}", written.commit_sha)),
                });
                state.superseded.push(previous);
                if state.superseded.len() > SUPERSEDED_LIMIT {
                    let excess = state.superseded.len() - SUPERSEDED_LIMIT;
                    state.superseded.drain(..excess);
                }
            }
            // A timer scheduled for the old commit is now stale.
            state.pending_reconcile = None;
            state.phase = if state.was_reported(&written.commit_sha) {
                GitOpsPhase::Synced
            } else {
                GitOpsPhase::Reconciling
            };
            state.record(HistoryEntry {
                at: Some(written.promoted_at),
                event: HistoryEvent::DesiredCommitSet,
                commit_sha: Some(written.commit_sha.clone()),
                release_id: Some(written.release_id.clone()),
                detail: Some(format!("generation {generation}")),
            });
        }
        Self::request_reconcile(next, ReconcileReason::Promotion);
    }
}
