//! What the environment reports after a reconcile: the desired commit is
//! synced (`GitOpsSynced` once per commit, for superseded commits it
//! contains too), or another commit runs and a retry is scheduled with
//! backoff (one timer at a time).

use bosun_contracts::Message;
use bosun_contracts::messages::{GitOpsSynced, ReconcileEnvironment, ReconcileReason};

use super::{
    DesiredCommit, EnvironmentReport, GitOpsPhase, GitOpsSaga, HistoryEntry, HistoryEvent, Next, ObservedCommit,
    PendingReconcile,
};
use crate::Action;

impl GitOpsSaga {
    pub(super) fn on_report(&self, next: &mut Next, report: &EnvironmentReport) {
        let state = &mut next.state;
        state.observed = Some(ObservedCommit {
            commit_sha: report.commit_sha.clone(),
            healthy: report.healthy,
            observed_at: report.observed_at,
        });
        if state.desired.is_none()
            && let Some(commit) = &report.commit_sha
        {
            // Adopt the repository's commit the environment now runs.
            state.desired = Some(DesiredCommit {
                commit_sha: commit.clone(),
                generation: 1,
                release_id: None,
                module_id: None,
                reconcile_attempts: 0,
            });
            state.record(HistoryEntry {
                at: Some(report.observed_at),
                event: HistoryEvent::DesiredCommitSet,
                commit_sha: Some(commit.clone()),
                release_id: None,
                detail: Some("adopted from the repository".to_owned()),
            });
        }
        let Some(desired) = state.desired.clone() else {
            state.record(HistoryEntry {
                at: Some(report.observed_at),
                event: HistoryEvent::Observed,
                commit_sha: None,
                release_id: None,
                detail: Some("nothing desired, nothing running".to_owned()),
            });
            return;
        };

        if report.commit_sha.as_deref() == Some(desired.commit_sha.as_str()) {
            state.phase = GitOpsPhase::Synced;
            // A retry still in flight stays recorded: when it arrives it
            // finds the environment synced and does nothing.
            if let Some(current) = state.desired.as_mut() {
                current.reconcile_attempts = 0;
            }
            state.record(HistoryEntry {
                at: Some(report.observed_at),
                event: HistoryEvent::Synced,
                commit_sha: Some(desired.commit_sha.clone()),
                release_id: desired.release_id.clone(),
                detail: (!report.healthy).then(|| "not healthy".to_owned()),
            });
            let mut to_report = vec![desired.clone()];
            let superseded = std::mem::take(&mut state.superseded);
            for old in superseded {
                let still_current = match (&old.module_id, &old.release_id) {
                    (Some(module), Some(release)) => {
                        state.apps.get(module).is_some_and(|app| &app.release_id == release)
                    }
                    _ => false,
                };
                if still_current && old.commit_sha != desired.commit_sha {
                    to_report.push(old);
                }
            }
            for commit in to_report {
                if state.was_reported(&commit.commit_sha) {
                    continue;
                }
                state.mark_reported(&commit.commit_sha);
                state.record(HistoryEntry {
                    at: Some(report.observed_at),
                    event: HistoryEvent::Reported,
                    commit_sha: Some(commit.commit_sha.clone()),
                    release_id: commit.release_id.clone(),
                    detail: (commit.commit_sha != desired.commit_sha)
                        .then(|| format!("contained in {}", desired.commit_sha)),
                });
                next.actions.push(Action::Send(Message::GitOpsSynced(GitOpsSynced {
                    environment: state.environment.clone(),
                    commit_sha: commit.commit_sha,
                    release_id: commit.release_id,
                    applied: report.applied.clone(),
                    healthy: report.healthy,
                    synced_at: report.observed_at,
                })));
            }
            if !state.queued.is_empty() {
                // The next promotion goes in a turn of its own.
                next.actions
                    .push(Action::Send(Message::ReconcileEnvironment(ReconcileEnvironment {
                        environment: state.environment.clone(),
                        desired_commit_sha: None,
                        reason: ReconcileReason::Promotion,
                        requested_by: None,
                    })));
            }
            return;
        }

        state.phase = GitOpsPhase::Reconciling;
        state.record(HistoryEntry {
            at: Some(report.observed_at),
            event: HistoryEvent::Observed,
            commit_sha: report.commit_sha.clone(),
            release_id: None,
            detail: Some(format!("desired is {}", desired.commit_sha)),
        });
        let timer_pending = state
            .pending_reconcile
            .as_ref()
            .is_some_and(|pending| pending.commit_sha == desired.commit_sha);
        if timer_pending {
            return;
        }
        let attempt = desired.reconcile_attempts.saturating_add(1);
        let delay = self.reconcile_delay(attempt);
        if let Some(current) = state.desired.as_mut() {
            current.reconcile_attempts = attempt;
        }
        state.pending_reconcile = Some(PendingReconcile {
            commit_sha: desired.commit_sha.clone(),
            attempt,
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        });
        state.record(HistoryEntry {
            at: Some(report.observed_at),
            event: HistoryEvent::ReconcileScheduled,
            commit_sha: Some(desired.commit_sha.clone()),
            release_id: None,
            detail: Some(format!("retry {attempt} in {delay:?}")),
        });
        next.actions.push(Action::Schedule {
            message: Message::ReconcileEnvironment(ReconcileEnvironment {
                environment: state.environment.clone(),
                desired_commit_sha: Some(desired.commit_sha),
                reason: ReconcileReason::Schedule,
                requested_by: None,
            }),
            after: delay,
        });
    }
}
