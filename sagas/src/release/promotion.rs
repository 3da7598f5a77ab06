//! Promoting an approved environment: its infrastructure, the
//! `DeploymentPromoted` (only with a recorded approval) and the GitOps sync
//! that deploys it or blocks the release.

use bosun_contracts::messages::{
    DeploymentPromoted, GitOpsSynced, InfrastructureProvisioned, ReleaseDecision, ReleaseStep, ReleaseWindowCheck,
};

use super::apply::{Step, rfc3339};
use super::state::step;
use super::{
    Closure, InfrastructureRecord, PENDING_DESIRED_COMMIT, ReleasePhase, SyncRecord, WINDOW_RECHECK, WindowOverride,
    WindowWait,
};
use crate::{Action, SagaError};

impl Step<'_> {
    /// Emits the `DeploymentPromoted` of `environment`: only with a recorded
    /// approval whose `ReleaseApproved` was emitted.
    pub(super) fn promote(&mut self, environment: &str) -> Result<(), SagaError> {
        let approval = self.state.approvals.get(environment).cloned();
        let Some(approval) = approval.filter(|_| self.state.emitted.contains(&step::approved(environment))) else {
            return Err(self.refuse(format!(
                "release {} has no recorded approval for {environment}: not promoting",
                self.release_id
            )));
        };
        if self.state.plan.is_none() {
            return Err(self.refuse(format!("release {} is not planned: not promoting", self.release_id)));
        }
        if let Some(closure) = self.gate(environment) {
            return self.wait_for_window(environment, closure);
        }
        // A promotion a window held back keeps the time it was ready: the
        // GitOps saga orders releases of a module by `promotedAt`, and two
        // releases let through when a freeze ends (or a hotfix overridden
        // through it before them) must keep the order they were ready in.
        let mut ready_at = self.gate_at;
        if let Some(wait) = self
            .state
            .window_wait
            .take()
            .filter(|wait| wait.environment == environment)
        {
            ready_at = wait.since;
            self.note(format!("the promotion window of {environment} is open"));
        }
        let Some(plan) = self.state.plan.as_ref() else {
            return Err(self.refuse(format!("release {} is not planned: not promoting", self.release_id)));
        };
        let promoted = DeploymentPromoted {
            release_id: self.release_id.clone(),
            module_id: plan.module_id.clone(),
            environment: environment.to_owned(),
            image: plan.artifacts.image.clone(),
            package: plan.artifacts.package.clone(),
            environment_repository: self.policy.environment_repository.clone(),
            desired_commit_sha: PENDING_DESIRED_COMMIT.to_owned(),
            approved_by: approval.approver,
            promoted_at: ready_at,
        };
        self.note(format!("promoted to {environment}"));
        let mut decision = self.decision(ReleaseDecision::Promoted, Some(environment));
        decision.by = Some(promoted.approved_by.clone());
        if let Some(overriding) = self.state.overrides.get(environment) {
            decision.reason = Some(format!("windows and holds overridden by {}", overriding.by));
        }
        self.record(decision);
        self.send(step::promoted(environment), promoted.into());
        self.enter(ReleasePhase::Syncing)?;
        self.check_sync(environment)
    }

    /// What closes the promotion gate of `environment` now, unless this
    /// release has an override for it.
    pub(super) fn gate(&mut self, environment: &str) -> Option<Closure> {
        let closure = self.policy.approval.promotion_gate(environment, self.gate_at)?;
        if let Some(overriding) = self.state.overrides.get(environment).cloned() {
            // Checked again when used: a requester learnt since the
            // override was given cannot have let their own release through.
            let identities = overrider_identities(&overriding);
            if let Some(shared) = identities
                .iter()
                .find(|identity| self.state.requested_by.contains(identity))
            {
                self.note(format!(
                    "the override of {environment} by {} no longer counts: {shared} requested this release",
                    overriding.by
                ));
                self.state.overrides.remove(environment);
                return Some(closure);
            }
            let used = format!(
                "{} overridden by {} ({})",
                closure.rule, overriding.by, overriding.reason
            );
            self.note(used);
            return None;
        }
        Some(closure)
    }

    /// Records that the promotion of `environment` waits for `closure` to
    /// open, and schedules a look at it then (one at a time: a check still
    /// to come is not doubled).
    pub(super) fn wait_for_window(&mut self, environment: &str, closure: Closure) -> Result<(), SagaError> {
        let recheck = time::Duration::try_from(WINDOW_RECHECK).unwrap_or(time::Duration::MINUTE);
        let at = self.gate_at;
        let soon = at.checked_add(recheck).unwrap_or(at);
        let check_at = closure.until.map_or(soon, |until| {
            until
                .min(at.checked_add(time::Duration::days(366)).unwrap_or(until))
                .max(at.checked_add(time::Duration::SECOND).unwrap_or(at))
        });
        let pending = self
            .state
            .window_wait
            .as_ref()
            .filter(|wait| wait.environment == environment && wait.check_at > at)
            .map(|wait| (wait.check_at, wait.since));
        let since = self
            .state
            .window_wait
            .as_ref()
            .filter(|wait| wait.environment == environment)
            .map_or(self.now, |wait| wait.since);
        let wait = WindowWait {
            environment: environment.to_owned(),
            rule: closure.rule,
            window: closure.window,
            reason: closure.reason,
            until: closure.until,
            since,
            check_at: pending.map_or(check_at, |(pending, _)| pending),
            policy_version: self.policy.approval_version,
        };
        // Only the next look changed (a hold with no end, looked at again):
        // no note, no history entry.
        let same_but_when = self.state.window_wait.as_ref().is_some_and(|known| {
            WindowWait {
                check_at: wait.check_at,
                ..known.clone()
            } == wait
        });
        let changed = !same_but_when && self.state.window_wait.as_ref() != Some(&wait);
        self.quiet = same_but_when;
        if pending.is_none()
            && self
                .state
                .window_wait
                .as_ref()
                .is_none_or(|known| known.environment != environment)
        {
            let mut decision = self.decision(ReleaseDecision::WaitingForWindow, Some(environment));
            decision.by = Some("bosun".to_owned());
            decision.reason = Some(wait.reason.clone());
            decision.rule = Some(wait.rule.name().to_owned());
            decision.until = wait.until;
            self.record(decision);
        }
        if changed {
            self.note(format!(
                "promotion to {environment} waits: {} ({})",
                wait.reason,
                match wait.until {
                    Some(until) => format!("until {}", rfc3339(until)),
                    None => format!("no end known; looking again at {}", rfc3339(wait.check_at)),
                }
            ));
        }
        // One look pending at a time (`windowWait.checkAt`): a check that
        // is not it adds none.
        if pending.is_none() {
            let after = std::time::Duration::try_from(check_at - at).unwrap_or(WINDOW_RECHECK);
            if !same_but_when {
                self.emitted.push("ReleaseWindowCheck (scheduled)".to_owned());
            }
            self.actions.push(Action::Schedule {
                message: ReleaseWindowCheck {
                    release_id: self.release_id.clone(),
                    environment: environment.to_owned(),
                    check_at,
                }
                .into(),
                after,
            });
        }
        self.state.window_wait = Some(wait);
        Ok(())
    }

    /// Whether the current environment's promotion is due: approved,
    /// provisioned, not promoted yet.
    fn promotion_due(&self, environment: &str) -> bool {
        self.state.phase == ReleasePhase::Provisioning
            && self.is_current(environment)
            && self.state.infrastructure.contains_key(environment)
            && !self.state.emitted.contains(&step::promoted(environment))
    }

    /// The saga's own look at a window it waited for: promotes when the
    /// gate is open, else waits on.
    pub(super) fn on_window_check(&mut self, check: &ReleaseWindowCheck) -> Result<(), SagaError> {
        if self.promotion_due(&check.environment) {
            self.promote(&check.environment)?;
        } else if self.rollback_due(&check.environment) {
            self.roll_back(&check.environment)?;
        }
        Ok(())
    }

    /// An override of `environment`'s windows and holds: recorded (never
    /// by who requested the release), and used at once when the promotion
    /// waits there.
    pub(super) fn on_override(&mut self, environment: &str, overriding: WindowOverride) -> Result<(), SagaError> {
        if self.requires_approval(environment).is_none() {
            return Err(self.refuse(format!(
                "release {} does not go to {environment}: nothing to override",
                self.release_id
            )));
        }
        let rollback = self.rollback_due(environment);
        if !rollback
            && (self.state.phase.is_final() || self.state.deployed.iter().any(|deployed| deployed == environment))
        {
            return Err(self.refuse(format!(
                "release {} is {} ({environment} {}): nothing to override",
                self.release_id,
                self.state.phase,
                if self.state.deployed.iter().any(|deployed| deployed == environment) {
                    "deployed"
                } else {
                    "not deployed"
                }
            )));
        }
        let identities = overrider_identities(&overriding);
        if let Some(shared) = identities
            .iter()
            .find(|identity| self.state.requested_by.contains(identity))
        {
            return Err(self.refuse(format!(
                "refused by rule `requester-cannot-approve`: {shared} requested release {} (or sponsors the key \
                 that did) and cannot override its promotion windows",
                self.release_id
            )));
        }
        if self.state.overrides.contains_key(environment) {
            return Ok(());
        }
        self.note(format!(
            "{} overrode the promotion windows and holds of {environment}: {}",
            overriding.by, overriding.reason
        ));
        let mut decision = self.decision(ReleaseDecision::Overridden, Some(environment));
        decision.by = Some(overriding.by.clone());
        decision.identities = identities;
        decision.reason = Some(overriding.reason.clone());
        self.record(decision);
        self.state.overrides.insert(environment.to_owned(), overriding);
        if self.promotion_due(environment) {
            self.promote(environment)?;
        } else if rollback {
            self.roll_back(environment)?;
        }
        Ok(())
    }

    /// With a sync report for the current environment: a healthy one
    /// deploys it and moves on, an unhealthy one blocks (once).
    pub(super) fn check_sync(&mut self, environment: &str) -> Result<(), SagaError> {
        let Some(sync) = self.state.syncs.get(environment).cloned() else {
            return Ok(());
        };
        if !sync.healthy {
            let reason = format!(
                "{environment} reconciled to commit {} but not every resource reported ready",
                sync.commit_sha
            );
            self.block(ReleaseStep::Sync, reason, Some(environment));
            self.note(format!("{environment} synced unhealthy: waiting for a healthy sync"));
            return Ok(());
        }
        if self
            .state
            .blocked
            .as_ref()
            .is_some_and(|blocked| blocked.environment.as_deref() == Some(environment))
        {
            self.state.blocked = None;
        }
        self.state.deployed.push(environment.to_owned());
        let mut decision = self.decision(ReleaseDecision::Deployed, Some(environment));
        decision.by = Some("bosun".to_owned());
        decision.reason = Some(format!("synced healthy at commit {}", sync.commit_sha));
        self.record(decision);
        self.note(format!("{environment} deployed at commit {}", sync.commit_sha));
        self.verify(environment)
    }

    pub(super) fn on_infrastructure(&mut self, provisioned: &InfrastructureProvisioned) -> Result<(), SagaError> {
        let environment = provisioned.environment.as_str();
        if provisioned.preview_only
            || self.state.phase.is_final()
            || self.requires_approval(environment).is_none()
            || self.state.infrastructure.contains_key(environment)
        {
            return Ok(());
        }
        self.note(format!(
            "infrastructure of {environment} provisioned (stack {}, plan {})",
            provisioned.stack, provisioned.plan_id
        ));
        self.state.infrastructure.insert(
            environment.to_owned(),
            InfrastructureRecord {
                plan_id: provisioned.plan_id.clone(),
                stack: provisioned.stack.clone(),
                at: provisioned.provisioned_at,
            },
        );
        if self.state.phase == ReleasePhase::Provisioning && self.is_current(environment) {
            self.promote(environment)?;
        }
        Ok(())
    }

    pub(super) fn on_synced(&mut self, synced: &GitOpsSynced) -> Result<(), SagaError> {
        if self.redeployed(synced) {
            return self.on_redeployed(synced);
        }
        let environment = synced.environment.as_str();
        if self.state.phase.is_final()
            || self.requires_approval(environment).is_none()
            || self.state.deployed.iter().any(|deployed| deployed == environment)
        {
            return Ok(());
        }
        match self.state.syncs.get(environment) {
            // A healthy report stands; another unhealthy one adds nothing.
            Some(known) if known.healthy || !synced.healthy => return Ok(()),
            _ => {}
        }
        self.note(format!(
            "{environment} reported synced at commit {} ({})",
            synced.commit_sha,
            if synced.healthy { "healthy" } else { "unhealthy" }
        ));
        self.state.syncs.insert(
            environment.to_owned(),
            SyncRecord {
                commit_sha: synced.commit_sha.clone(),
                healthy: synced.healthy,
                at: synced.synced_at,
            },
        );
        if self.state.phase == ReleasePhase::Syncing && self.is_current(environment) {
            self.check_sync(environment)?;
        }
        Ok(())
    }
}

/// The identities an override answers to: those the front door stamped,
/// else the identity its author names.
fn overrider_identities(overriding: &WindowOverride) -> Vec<String> {
    if overriding.identities.is_empty() {
        vec![overriding.by.split(" (").next().unwrap_or(&overriding.by).to_owned()]
    } else {
        overriding.identities.clone()
    }
}
