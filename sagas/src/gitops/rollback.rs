//! Releases verified in the environment, and rollbacks to them: a
//! `ReleaseVerified` is kept (per module, the newest [`VERIFIED_LIMIT`]),
//! and a `RollbackEnvironment` writes the promotion of one of them again,
//! stamped with when the rollback was asked for so it is the module's newest
//! promotion. The rollback goes before promotions queued behind the one in
//! flight; those, promoted before the rollback was asked for, are older
//! than it and are then ignored (a rollback is not undone by what it rolled
//! back from). Every rollback, and every refusal (nothing verified to go back
//! to, a failed release that is no longer the module's current one), is
//! recorded for the tenant's audit log (`ReleaseDecisionRecorded`, on the
//! release rolled back from).

use bosun_contracts::messages::{
    DecisionEntry, MAX_REASON_CHARS, ReleaseDecision, ReleaseDecisionRecorded, ReleaseVerified, RollbackEnvironment,
};

use super::{GitOpsSaga, GitOpsState, GitOpsTransition, HistoryEntry, HistoryEvent, Next, VerifiedRelease};
use crate::Action;

/// Verified releases kept per module (the newest).
pub const VERIFIED_LIMIT: usize = 10;

impl GitOpsSaga {
    /// A rollback asked for while the environment's promotion gate is
    /// closed (`closed` says by what and until when) and not overridden:
    /// refused and recorded, nothing written. The consumer reads the gate
    /// (the tenant's windows and holds); a rollback the release saga asked
    /// for went through the gate there.
    pub fn refuse_closed_rollback(
        &self,
        state: &GitOpsState,
        rollback: &RollbackEnvironment,
        closed: &str,
    ) -> GitOpsTransition {
        let mut next = Next {
            state: state.clone(),
            actions: Vec::new(),
            work: None,
        };
        if next.state.environment.is_empty() {
            next.state.environment = rollback.environment.clone();
        }
        let from = rollback.failed_release_id.clone().or_else(|| {
            next.state
                .apps
                .get(&rollback.module_id)
                .map(|app| app.release_id.clone())
        });
        let by = rollback.requested_by.clone().unwrap_or_else(|| "bosun".to_owned());
        let reason = format!(
            "{closed}; a rollback obeys the environment's promotion windows and holds unless given an override reason"
        );
        Self::refuse_rollback(&mut next, rollback, from, &by, reason);
        GitOpsTransition {
            state: next.state,
            actions: next.actions,
            work: None,
        }
    }

    pub(super) fn on_verified(next: &mut Next, verified: &ReleaseVerified) {
        let releases = next
            .state
            .verified
            .entry(verified.promotion.module_id.clone())
            .or_default();
        releases.retain(|known| known.release_id != verified.release_id);
        releases.push(VerifiedRelease {
            release_id: verified.release_id.clone(),
            promotion: verified.promotion.clone(),
            verified_at: verified.verified_at,
        });
        if releases.len() > VERIFIED_LIMIT {
            let excess = releases.len() - VERIFIED_LIMIT;
            releases.drain(..excess);
        }
    }

    pub(super) fn on_rollback(next: &mut Next, rollback: &RollbackEnvironment, queue: bool) {
        let module = rollback.module_id.as_str();
        let current = next.state.apps.get(module).cloned();
        let current_id = current.as_ref().map(|app| app.release_id.clone());
        let by = rollback.requested_by.clone().unwrap_or_else(|| "bosun".to_owned());
        // The release the environment goes back from, for the audit log.
        let from = rollback.failed_release_id.clone().or_else(|| current_id.clone());
        if let Some(failed) = &rollback.failed_release_id
            && current_id.as_deref() != Some(failed.as_str())
        {
            let reason = format!(
                "{failed} is no longer the current release of {module} in {} ({}): nothing to roll back",
                next.state.environment,
                current_id.as_deref().unwrap_or("none")
            );
            return Self::refuse_rollback(next, rollback, from, &by, reason);
        }
        let verified = next.state.verified.get(module).cloned().unwrap_or_default();
        let target = match &rollback.to_release_id {
            Some(wanted) => verified.iter().rev().find(|known| &known.release_id == wanted),
            None => before_current(&verified, current_id.as_deref())
                .iter()
                .rev()
                .find(|known| Some(&known.release_id) != rollback.failed_release_id.as_ref()),
        };
        if let Some(failed) = &rollback.failed_release_id
            && let Some(releases) = next.state.verified.get_mut(module)
        {
            // A release that failed here (again, after a rollback to it) is
            // never gone back to.
            releases.retain(|known| &known.release_id != failed);
        }
        let Some(target) = target.cloned() else {
            let reason = match &rollback.to_release_id {
                Some(wanted) => format!(
                    "{wanted} was not verified in {} (verified releases of {module}: {})",
                    next.state.environment,
                    names(&verified)
                ),
                None => format!(
                    "no release of {module} verified in {} to go back to (verified: {})",
                    next.state.environment,
                    names(&verified)
                ),
            };
            return Self::refuse_rollback(next, rollback, from, &by, reason);
        };
        if current_id.as_deref() == Some(target.release_id.as_str()) {
            let reason = format!(
                "{} is the current release of {module} in {} already",
                target.release_id, next.state.environment
            );
            return Self::refuse_rollback(next, rollback, from, &by, reason);
        }
        // The newest promotion of the module, so the environment takes it.
        let mut promoted = target.promotion.clone();
        promoted.promoted_at = match &current {
            Some(app) if app.promoted_at >= rollback.requested_at => app.promoted_at + time::Duration::SECOND,
            _ => rollback.requested_at,
        };
        promoted.approved_by = by.clone();
        promoted.desired_commit_sha = crate::release::PENDING_DESIRED_COMMIT.to_owned();
        let detail = format!(
            "rollback of {module} to {} (verified {}) from {} by {by}: {}",
            target.release_id,
            target
                .verified_at
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            from.as_deref().unwrap_or("nothing"),
            rollback.reason
        );
        next.state.record(HistoryEntry {
            at: Some(rollback.requested_at),
            event: HistoryEvent::PromotionAccepted,
            commit_sha: None,
            release_id: Some(target.release_id.clone()),
            detail: Some(detail),
        });
        Self::record_decision(
            next,
            rollback,
            from.unwrap_or_else(|| target.release_id.clone()),
            ReleaseDecision::RolledBack,
            &by,
            match &rollback.override_reason {
                Some(overriding) => format!(
                    "{} of {module} rolled back to {}: {} (promotion windows and holds overridden: {overriding})",
                    next.state.environment, target.release_id, rollback.reason
                ),
                None => format!(
                    "{} of {module} rolled back to {}: {}",
                    next.state.environment, target.release_id, rollback.reason
                ),
            },
        );
        if queue && next.state.in_flight().is_some() {
            // Ahead of the promotions waiting: it goes when the one in
            // flight is synced.
            next.state
                .queued
                .retain(|queued| queued.release_id != promoted.release_id);
            next.state.queued.insert(0, promoted);
            return;
        }
        Self::on_promoted(next, &promoted, queue);
    }

    fn refuse_rollback(
        next: &mut Next,
        rollback: &RollbackEnvironment,
        from: Option<String>,
        by: &str,
        reason: String,
    ) {
        next.state.record(HistoryEntry {
            at: Some(rollback.requested_at),
            event: HistoryEvent::PromotionIgnored,
            commit_sha: None,
            release_id: from.clone(),
            detail: Some(format!("rollback refused: {reason}")),
        });
        if let Some(release) = from.or_else(|| rollback.to_release_id.clone()) {
            Self::record_decision(next, rollback, release, ReleaseDecision::RollbackRefused, by, reason);
        }
    }

    fn record_decision(
        next: &mut Next,
        rollback: &RollbackEnvironment,
        release_id: String,
        decision: ReleaseDecision,
        by: &str,
        reason: String,
    ) {
        let mut reason = reason;
        if reason.chars().count() > MAX_REASON_CHARS {
            reason = reason.chars().take(MAX_REASON_CHARS).collect();
        }
        next.actions.push(Action::Send(
            ReleaseDecisionRecorded {
                release_id,
                door: None,
                decisions: vec![DecisionEntry {
                    decision,
                    environment: Some(next.state.environment.clone()),
                    by: Some(by.to_owned()),
                    identities: rollback.requester_identities.clone(),
                    reason: Some(reason),
                    rule: None,
                    policy_version: None,
                    until: None,
                    decided_at: rollback.requested_at,
                }],
            }
            .into(),
        ));
    }
}

/// The verified releases a rollback may go back to: those verified before
/// the module's current release when it is one of them (a rollback goes
/// back, never forward to what it rolled back from), else all of them.
pub fn before_current<'a>(verified: &'a [VerifiedRelease], current: Option<&str>) -> &'a [VerifiedRelease] {
    match current.and_then(|current| verified.iter().position(|known| known.release_id == current)) {
        Some(position) => &verified[..position],
        None => verified,
    }
}

fn names(verified: &[VerifiedRelease]) -> String {
    if verified.is_empty() {
        "none".to_owned()
    } else {
        verified
            .iter()
            .map(|known| known.release_id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}
