//! Reconcile requests: a scheduled retry counts only for the commit it was
//! scheduled for, a request naming another commit is ignored (a rollback
//! is a promotion), and an infrastructure change reconciles again.

use bosun_contracts::messages::{InfrastructureProvisioned, ReconcileEnvironment, ReconcileReason};

use super::{GitOpsPhase, GitOpsSaga, GitOpsState, HistoryEntry, HistoryEvent, Next, Work};

impl GitOpsSaga {
    pub(super) fn on_reconcile_request(next: &mut Next, request: &ReconcileEnvironment, queue: bool) {
        // The environment is free and a promotion waits: it goes now (the
        // saga sends itself this request when the one in flight is synced).
        if Self::dequeue(next, queue) && next.work.is_some() {
            return;
        }
        let state = &mut next.state;
        let ignored = |state: &mut GitOpsState, detail: String| {
            state.record(HistoryEntry {
                at: None,
                event: HistoryEvent::ReconcileIgnored,
                commit_sha: request.desired_commit_sha.clone(),
                release_id: None,
                detail: Some(detail),
            });
        };
        let Some(desired) = state.desired.clone() else {
            // Nothing desired yet: reconcile what was asked for (or the
            // branch head) and adopt what the environment then reports.
            next.work = Some(Work::Reconcile {
                repository: state.repository.clone(),
                commit_sha: request.desired_commit_sha.clone(),
                reason: request.reason,
            });
            state.record(HistoryEntry {
                at: None,
                event: HistoryEvent::ReconcileRequested,
                commit_sha: request.desired_commit_sha.clone(),
                release_id: None,
                detail: Some(format!("{:?}, nothing desired yet", request.reason)),
            });
            return;
        };
        match (&request.reason, &request.desired_commit_sha) {
            (ReconcileReason::Schedule, Some(commit)) => {
                if state
                    .pending_reconcile
                    .as_ref()
                    .is_some_and(|pending| &pending.commit_sha == commit)
                {
                    state.pending_reconcile = None;
                }
                if commit != &desired.commit_sha {
                    ignored(
                        state,
                        format!("timer for a superseded commit; desired is {}", desired.commit_sha),
                    );
                } else if state.phase == GitOpsPhase::Synced {
                    ignored(state, "already synced".to_owned());
                } else {
                    Self::request_reconcile(next, ReconcileReason::Schedule);
                }
            }
            (_, Some(commit)) if commit != &desired.commit_sha => {
                ignored(
                    state,
                    format!(
                        "not the desired commit {}; a rollback is a promotion",
                        desired.commit_sha
                    ),
                );
            }
            (reason, _) => Self::request_reconcile(next, *reason),
        }
    }

    pub(super) fn on_infrastructure(next: &mut Next, provisioned: &InfrastructureProvisioned) {
        let state = &mut next.state;
        if provisioned.preview_only || state.desired.is_none() {
            let detail = if provisioned.preview_only {
                "infrastructure preview only"
            } else {
                "infrastructure changed, nothing desired yet"
            };
            state.record(HistoryEntry {
                at: Some(provisioned.provisioned_at),
                event: HistoryEvent::ReconcileIgnored,
                commit_sha: None,
                release_id: provisioned.release_id.clone(),
                detail: Some(detail.to_owned()),
            });
            return;
        }
        Self::request_reconcile(next, ReconcileReason::Infrastructure);
    }

    pub(super) fn request_reconcile(next: &mut Next, reason: ReconcileReason) {
        let state = &mut next.state;
        let commit_sha = state.desired_commit().map(str::to_owned);
        state.record(HistoryEntry {
            at: None,
            event: HistoryEvent::ReconcileRequested,
            commit_sha: commit_sha.clone(),
            release_id: None,
            detail: Some(format!("{reason:?}")),
        });
        next.work = Some(Work::Reconcile {
            repository: state.repository.clone(),
            commit_sha,
            reason,
        });
    }
}
