//! Verification after promotion: once an environment reports the release
//! synced and healthy, the policy's soak time and checks
//! ([`Verification`](super::Verification)) must pass before the release is
//! `verified` there and goes on; a failed verification blocks the release
//! (it is never promoted further) and, where the policy says so, rolls the
//! environment back to its last verified release (a `RollbackEnvironment`
//! the environment's GitOps saga carries out), obeying the environment's
//! promotion windows and holds unless overridden. The promotion graph: an
//! environment that requires verification in others first is entered only
//! once the release was verified there.

use bosun_contracts::messages::{
    DeploymentPromoted, GitOpsSynced, ReleaseDecision, ReleaseStep, ReleaseVerificationCheck, ReleaseVerified,
    RollbackEnvironment,
};

use super::apply::Step;
use super::state::step;
use super::{
    CheckOutcome, PENDING_DESIRED_COMMIT, ReleasePhase, SyncRecord, Verification, VerificationFailure, VerificationRun,
    VerifiedRecord,
};
use crate::{Action, SagaError};

/// Who asks for the rollback a failed verification starts.
pub const AUTO_ROLLBACK: &str = "policy:auto-rollback";

impl Step<'_> {
    /// `environment` is deployed (synced healthy): verify it as its policy
    /// says, or count the healthy sync as verification when it asks for
    /// nothing more.
    pub(super) fn verify(&mut self, environment: &str) -> Result<(), SagaError> {
        let verification = self.policy.approval.verification.get(environment).cloned();
        match verification.filter(Verification::waits) {
            Some(verification) => self.start_verification(environment, &verification),
            None => self.verified(environment, "healthy sync".to_owned()),
        }
    }

    fn start_verification(&mut self, environment: &str, verification: &Verification) -> Result<(), SagaError> {
        self.note(format!(
            "verifying {environment}: soak {}s, {} check{}",
            verification.soak_seconds,
            verification.checks.len(),
            if verification.checks.len() == 1 { "" } else { "s" }
        ));
        self.start_run(environment, verification, 1, false);
        Ok(())
    }

    /// Starts a run of `verification` in `environment` now, its first
    /// sample numbered `attempt`: at once, or at the end of the soak time
    /// when there is nothing but the soak time.
    fn start_run(&mut self, environment: &str, verification: &Verification, attempt: u32, rerun: bool) {
        let soak = time::Duration::seconds(i64::try_from(verification.soak_seconds).unwrap_or(i64::MAX));
        let started_at = self.gate_at;
        let run = VerificationRun {
            environment: environment.to_owned(),
            started_at,
            soak_until: started_at.checked_add(soak).unwrap_or(started_at),
            attempt,
            check_at: started_at,
            samples: 0,
            passes: Default::default(),
            failures: 0,
            last: Vec::new(),
            policy_version: self.policy.approval_version,
        };
        let first = if verification.checks.is_empty() {
            run.soak_until
        } else {
            started_at
        };
        self.schedule_sample(run, first, rerun);
    }

    /// Schedules sample `run.attempt` at `at` and keeps `run` (as the
    /// verification of a rollback to this release when `rerun`).
    fn schedule_sample(&mut self, mut run: VerificationRun, at: time::OffsetDateTime, rerun: bool) {
        run.check_at = at;
        let after = std::time::Duration::try_from(at - self.gate_at).unwrap_or_default();
        self.actions.push(Action::Schedule {
            message: ReleaseVerificationCheck {
                release_id: self.release_id.clone(),
                environment: run.environment.clone(),
                attempt: run.attempt,
                check_at: at,
            }
            .into(),
            after,
        });
        if rerun {
            self.state.reverifying = Some(run);
        } else {
            self.state.verifying = Some(run);
        }
    }

    /// One sample of `environment`'s checks, taken by the consumer: counted,
    /// then the release is verified, fails, or the next sample is scheduled.
    /// A sample the release does not wait for changes nothing.
    pub(super) fn on_samples(
        &mut self,
        check: &ReleaseVerificationCheck,
        outcomes: &[CheckOutcome],
    ) -> Result<(), SagaError> {
        let matches = |run: &Option<VerificationRun>| run.as_ref().is_some_and(|run| run.awaits(check));
        let rerun = if matches(&self.state.verifying) {
            if self.state.phase != ReleasePhase::Syncing || !self.is_current(&check.environment) {
                return Ok(());
            }
            false
        } else if matches(&self.state.reverifying) {
            true
        } else {
            return Ok(());
        };
        let Some(mut run) = (if rerun {
            self.state.reverifying.take()
        } else {
            self.state.verifying.take()
        }) else {
            return Ok(());
        };
        let environment = check.environment.as_str();
        // The policy in force now: one that no longer asks for anything
        // verifies at once.
        let Some(verification) = self
            .policy
            .approval
            .verification
            .get(environment)
            .cloned()
            .filter(Verification::waits)
        else {
            let summary = "healthy sync (the policy no longer asks for more)".to_owned();
            if rerun {
                self.reverified(environment, summary);
                return Ok(());
            }
            return self.verified(environment, summary);
        };
        run.samples += 1;
        let mut failed = Vec::new();
        for outcome in outcomes {
            if outcome.passed {
                *run.passes.entry(outcome.check.clone()).or_default() += 1;
            } else {
                failed.push(format!("{}: {}", outcome.check, outcome.detail));
            }
        }
        // A sample fails when any of its checks does, and counts once.
        if !failed.is_empty() {
            run.failures += 1;
        }
        run.last = outcomes.to_vec();
        if run.failures > verification.failure_limit {
            let reason = format!(
                "{} failed sample{} (the policy tolerates {}); last: {}",
                run.failures,
                if run.failures == 1 { "" } else { "s" },
                verification.failure_limit,
                failed.join("; ")
            );
            if rerun {
                return self.fail_reverification(environment, reason, outcomes.to_vec(), verification.roll_back);
            }
            return self.fail_verification(environment, reason, outcomes.to_vec(), verification.roll_back);
        }
        if !failed.is_empty() {
            self.note(format!("verification of {environment}: {}", failed.join("; ")));
        }
        let soaked = self.gate_at >= run.soak_until;
        let passed = verification
            .checks
            .iter()
            .all(|check| run.passes.get(check.name()).copied().unwrap_or(0) >= check.successes());
        if soaked && passed {
            let summary = format!(
                "soak {}s; {} check{}; {} sample{}, {} failed",
                verification.soak_seconds,
                verification.checks.len(),
                if verification.checks.len() == 1 { "" } else { "s" },
                run.samples,
                if run.samples == 1 { "" } else { "s" },
                run.failures
            );
            if rerun {
                self.reverified(environment, summary);
                return Ok(());
            }
            return self.verified(environment, summary);
        }
        // Nothing to say but that a sample passed: no history entry.
        self.quiet = failed.is_empty();
        let interval = time::Duration::seconds(i64::try_from(verification.interval_seconds).unwrap_or(i64::MAX));
        let mut next = self.gate_at.checked_add(interval).unwrap_or(self.gate_at);
        if passed || verification.checks.is_empty() {
            // Only the soak time is left: one last sample when it is over.
            next = next.max(run.soak_until);
        }
        run.attempt += 1;
        self.schedule_sample(run, next, rerun);
        Ok(())
    }

    /// Whether `synced` is this verified release deployed again in its
    /// environment at a new commit: a rollback to it.
    pub(super) fn redeployed(&self, synced: &GitOpsSynced) -> bool {
        self.state.verified.contains_key(&synced.environment)
            && self
                .state
                .syncs
                .get(&synced.environment)
                .is_some_and(|known| known.commit_sha != synced.commit_sha)
    }

    /// The environment was rolled back to this release: it is verified
    /// again as its policy says (unless `verifyRollbacks` is false), whatever
    /// the release's phase.
    pub(super) fn on_redeployed(&mut self, synced: &GitOpsSynced) -> Result<(), SagaError> {
        let environment = synced.environment.as_str();
        self.state.syncs.insert(
            environment.to_owned(),
            SyncRecord {
                commit_sha: synced.commit_sha.clone(),
                healthy: synced.healthy,
                at: synced.synced_at,
            },
        );
        self.note(format!(
            "{environment} runs this release again at commit {} (rolled back to it)",
            synced.commit_sha
        ));
        let verification = self.policy.approval.verification.get(environment).cloned();
        if !synced.healthy {
            // Reported once per commit: an unhealthy rollback is a failed one.
            let roll_back = verification.as_ref().is_none_or(|verification| verification.roll_back);
            let reason = format!(
                "{environment} reconciled to commit {} but not every resource reported ready",
                synced.commit_sha
            );
            return self.fail_reverification(environment, reason, Vec::new(), roll_back);
        }
        match verification.filter(Verification::waits) {
            Some(verification) if verification.verify_rollbacks => {
                // Numbered on from any earlier run, so a sample of that one
                // is never taken for this one's.
                let attempt = self.state.reverifying.as_ref().map_or(0, |run| run.attempt) + 1;
                self.note(format!("verifying {environment} again after the rollback"));
                self.start_run(environment, &verification, attempt, true);
            }
            Some(_) => self.note(format!(
                "not verified again in {environment}: its policy says verifyRollbacks false"
            )),
            None => self.reverified(environment, "healthy sync".to_owned()),
        }
        Ok(())
    }

    /// Verified again after a rollback to this release.
    fn reverified(&mut self, environment: &str, summary: String) {
        let summary = format!("verified again after a rollback: {summary}");
        self.state.verified.insert(
            environment.to_owned(),
            VerifiedRecord {
                at: self.gate_at,
                summary: summary.clone(),
            },
        );
        if self
            .state
            .verification_failed
            .as_ref()
            .is_some_and(|failure| failure.environment == environment && self.state.phase != ReleasePhase::Blocked)
        {
            self.state.verification_failed = None;
        }
        let mut decision = self.decision(ReleaseDecision::Verified, Some(environment));
        decision.by = Some("bosun".to_owned());
        decision.reason = Some(summary.clone());
        self.record(decision);
        self.note(format!("{environment} {summary}"));
    }

    /// A release rolled back to failed its verification there again: the
    /// environment is rolled back further (through the gate), and a release
    /// still on its way is blocked.
    fn fail_reverification(
        &mut self,
        environment: &str,
        reason: String,
        outcomes: Vec<CheckOutcome>,
        roll_back: bool,
    ) -> Result<(), SagaError> {
        self.record_failure(environment, &reason, true, outcomes, roll_back);
        if !self.state.phase.is_final() && self.state.phase != ReleasePhase::Blocked {
            // Never promoted further, as after a first failure.
            self.block(
                ReleaseStep::Sync,
                format!("verification of {environment} failed after a rollback to this release: {reason}"),
                Some(environment),
            );
            self.state.verifying = None;
            self.state.pending_timeout = None;
            self.state.waiting_for = None;
            self.enter(ReleasePhase::Blocked)?;
        }
        self.roll_back_or_keep(environment, roll_back)
    }

    /// `environment` is verified: recorded, `ReleaseVerified` sent (what a
    /// rollback goes back to), and the release goes on.
    fn verified(&mut self, environment: &str, summary: String) -> Result<(), SagaError> {
        let promotion = self.verified_promotion(environment)?;
        self.state.verified.insert(
            environment.to_owned(),
            VerifiedRecord {
                at: self.gate_at,
                summary: summary.clone(),
            },
        );
        let mut decision = self.decision(ReleaseDecision::Verified, Some(environment));
        decision.by = Some("bosun".to_owned());
        decision.reason = Some(summary.clone());
        self.record(decision);
        self.note(format!("{environment} verified ({summary})"));
        self.send(
            step::verified(environment),
            ReleaseVerified {
                release_id: self.release_id.clone(),
                environment: environment.to_owned(),
                promotion,
                summary,
                verified_at: self.gate_at,
            }
            .into(),
        );
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

    /// The promotion of `environment` as a rollback would write it again.
    fn verified_promotion(&self, environment: &str) -> Result<DeploymentPromoted, SagaError> {
        let plan = self
            .state
            .plan
            .as_ref()
            .ok_or_else(|| self.refuse(format!("release {} is not planned: nothing verified", self.release_id)))?;
        Ok(DeploymentPromoted {
            release_id: self.release_id.clone(),
            module_id: plan.module_id.clone(),
            environment: environment.to_owned(),
            image: plan.artifacts.image.clone(),
            package: plan.artifacts.package.clone(),
            environment_repository: self.policy.environment_repository.clone(),
            desired_commit_sha: PENDING_DESIRED_COMMIT.to_owned(),
            approved_by: self
                .state
                .approvals
                .get(environment)
                .map_or_else(|| "bosun".to_owned(), |approval| approval.approver.clone()),
            promoted_at: self.gate_at,
        })
    }

    fn fail_verification(
        &mut self,
        environment: &str,
        reason: String,
        outcomes: Vec<CheckOutcome>,
        roll_back: bool,
    ) -> Result<(), SagaError> {
        self.record_failure(environment, &reason, false, outcomes, roll_back);
        self.block(
            ReleaseStep::Sync,
            format!("verification of {environment} failed: {reason}"),
            Some(environment),
        );
        self.enter(ReleasePhase::Blocked)?;
        self.roll_back_or_keep(environment, roll_back)
    }

    /// Records a failed verification of `environment`: the
    /// `verification-failed` decision, a history note and the failure
    /// itself, which a rollback is asked for from.
    fn record_failure(
        &mut self,
        environment: &str,
        reason: &str,
        after_rollback: bool,
        outcomes: Vec<CheckOutcome>,
        roll_back: bool,
    ) {
        let mut decision = self.decision(ReleaseDecision::VerificationFailed, Some(environment));
        decision.by = Some("bosun".to_owned());
        decision.reason = Some(if after_rollback {
            format!("after a rollback to it: {reason}")
        } else {
            reason.to_owned()
        });
        self.record(decision);
        self.note(if after_rollback {
            format!("verification of {environment} failed again after a rollback to this release: {reason}")
        } else {
            format!("verification of {environment} failed: {reason}")
        });
        self.state.verification_failed = Some(VerificationFailure {
            environment: environment.to_owned(),
            reason: reason.to_owned(),
            at: self.gate_at,
            outcomes,
            roll_back,
            rollback_requested: false,
        });
    }

    /// After a failed verification: rolls `environment` back, or keeps
    /// this release there when its policy says not to roll back.
    fn roll_back_or_keep(&mut self, environment: &str, roll_back: bool) -> Result<(), SagaError> {
        if roll_back {
            self.roll_back(environment)
        } else {
            self.note(format!(
                "the policy of {environment} does not roll back: it keeps this release"
            ));
            Ok(())
        }
    }

    /// Whether a rollback of `environment` after a failed verification is
    /// still to be asked for.
    pub(super) fn rollback_due(&self, environment: &str) -> bool {
        self.state.verification_failed.as_ref().is_some_and(|failure| {
            failure.environment == environment && failure.roll_back && !failure.rollback_requested
        })
    }

    /// Asks `environment`'s GitOps saga to go back to its last verified
    /// release, once the promotion gate is open (or overridden).
    pub(super) fn roll_back(&mut self, environment: &str) -> Result<(), SagaError> {
        if let Some(closure) = self.gate(environment) {
            return self.wait_for_window(environment, closure);
        }
        if self
            .state
            .window_wait
            .take_if(|wait| wait.environment == environment)
            .is_some()
        {
            self.note(format!("the promotion window of {environment} is open"));
        }
        let Some(module_id) = self.state.plan.as_ref().map(|plan| plan.module_id.clone()) else {
            return Ok(());
        };
        let reason = self
            .state
            .verification_failed
            .as_ref()
            .map(|failure| failure.reason.clone())
            .unwrap_or_default();
        if let Some(failure) = self.state.verification_failed.as_mut() {
            failure.rollback_requested = true;
        }
        let commit = self
            .state
            .syncs
            .get(environment)
            .map(|sync| sync.commit_sha.clone())
            .unwrap_or_default();
        self.note(format!(
            "rollback of {environment} to its last verified release asked for"
        ));
        self.send(
            step::rollback(environment, &commit),
            RollbackEnvironment {
                environment: environment.to_owned(),
                module_id,
                to_release_id: None,
                failed_release_id: Some(self.release_id.clone()),
                reason: super::apply::clip(
                    format!("verification of {} in {environment} failed: {reason}", self.release_id),
                    bosun_contracts::messages::MAX_REASON_CHARS,
                ),
                override_reason: None,
                on_behalf_of: None,
                requested_by: Some(AUTO_ROLLBACK.to_owned()),
                requester_identities: Vec::new(),
                requested_at: self.gate_at,
            }
            .into(),
        );
        Ok(())
    }

    /// The environments `environment` requires this release to have been
    /// verified in and that it was not (empty: it may go there).
    pub(super) fn missing_evidence(&self, environment: &str) -> Vec<String> {
        self.policy
            .approval
            .verification
            .get(environment)
            .map(|verification| {
                verification
                    .requires_verified_in
                    .iter()
                    .filter(|upstream| !self.state.verified.contains_key(*upstream))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}
