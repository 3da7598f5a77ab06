//! Promoting an approved environment: its infrastructure, the
//! `DeploymentPromoted` (only with a recorded approval) and the GitOps sync
//! that deploys it or blocks the release.

use bosun_contracts::messages::{DeploymentPromoted, GitOpsSynced, InfrastructureProvisioned, ReleaseStep};

use super::apply::Step;
use super::state::step;
use super::{InfrastructureRecord, PENDING_DESIRED_COMMIT, ReleasePhase, SyncRecord};
use crate::SagaError;

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
            promoted_at: self.now,
        };
        self.note(format!("promoted to {environment}"));
        self.send(step::promoted(environment), promoted.into());
        self.enter(ReleasePhase::Syncing)?;
        self.check_sync(environment)
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
        self.note(format!("{environment} deployed at commit {}", sync.commit_sha));
        let next = self
            .state
            .plan
            .as_ref()
            .and_then(|plan| {
                plan.environments
                    .iter()
                    .position(|planned| planned.environment == environment)
            })
            .map_or(usize::MAX, |index| index + 1);
        self.enter_environment(next)
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
