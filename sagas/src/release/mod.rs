//! The release saga, keyed by `releaseId`: collect a release's build and
//! artifacts, plan it, get it approved environment by environment, wait for
//! its infrastructure, promote it and wait until GitOps reports it synced.
//!
//! [`ReleaseSaga`] is a pure state machine over [`ReleaseState`]: it is given
//! one message and returns the new state and the [`Action`](crate::Action)s to carry out.
//! Its [`ReleasePolicy`] says the promotion path, which environments approve
//! on their own and how long a person has to approve the others.
//!
//! ## The phases ([`ReleasePhase`], [`TRANSITIONS`], [`ReleaseSaga::diagram`])
//!
//! - `Collecting`: `BuildCompleted`, `ContainerImageBuilt` and
//!   `PackagePublished` arrive in any order. The build's module metadata
//!   says which artifacts are required (an image iff `module.container`, a
//!   package iff `module.package`). When the build and its required
//!   artifacts are in, the saga emits `ReleasePlanned` and enters the first
//!   environment. A failed or canceled build, or one with failing tests,
//!   emits `ReleaseBlocked` (step `build`) and the release never promotes
//!   that build (`Blocked`); a successful re-run of the pipeline for the
//!   same release (another `buildId`) takes it back to `Collecting`.
//! - Entering an environment: an environment the policy auto-approves gets a
//!   `ReleaseApproved` (`auto`, approver [`AUTO_APPROVER`]); one a person
//!   approved ahead of time gets that person's `ReleaseApproved`; any other
//!   schedules a `ReleaseApprovalTimeout` after the policy's
//!   `approval_timeout` and waits (`AwaitingApproval`).
//! - `ApproveRelease` for the waiting environment emits `ReleaseApproved`;
//!   `RejectRelease` (in any phase before the end), or the timeout while
//!   still waiting, emits `ReleaseRejected` and the release stops
//!   (`Rejected`). A timeout after the decision is ignored.
//! - `Provisioning`: after the approval the saga waits for
//!   `InfrastructureProvisioned` of that release and environment, then for
//!   the tenant's promotion windows and holds ([`ApprovalPolicy::promotion_gate`]):
//!   a closed gate is recorded ([`ReleaseState::window_wait`]: what closes
//!   it, until when) and a `ReleaseWindowCheck` scheduled for when it opens
//!   (every [`WINDOW_RECHECK`] when nothing says); an `OverrideReleaseWindow`
//!   by someone who did not request the release lets it through. Then it emits
//!   `DeploymentPromoted` (`Syncing`) and waits for `GitOpsSynced` of that
//!   release and environment. A healthy sync marks the environment deployed
//!   and the saga enters the next environment, or `Completed` after the
//!   last. An unhealthy sync emits `ReleaseBlocked` (step `sync`) once and
//!   the saga keeps waiting for a healthy one.
//!
//! Approvals given before the release reaches an environment are recorded
//! and used when it gets there (the `ReleaseApproved` is emitted then, and
//! always before the `DeploymentPromoted` of that environment: the saga
//! never promotes without a recorded approval). Infrastructure and sync
//! reports that arrive early are recorded too, so the outcome does not
//! depend on delivery order. Every emitted step is remembered
//! ([`ReleaseState::emitted`]): nothing is emitted twice. Messages of
//! another release, duplicates and messages with nothing to do in the
//! current phase leave the state as it was and emit nothing. The saga
//! returns [`SagaError::Rejected`] only where an operator needs to hear it:
//! an approval for an environment that is not on the promotion path, an
//! approval of a rejected release, a rejection of a completed release, an
//! invalid policy.
//!
//! ## Time
//!
//! The saga reads no clock. [`ReleaseSaga::apply_at`] takes the time the
//! message occurred (the envelope's `occurredAt`) and stamps the emitted
//! messages, the history and the approval deadline with it; the
//! [`StateMachine::apply`] of the trait uses the time the message itself
//! carries (`completedAt`, `pushedAt`, `deadline` ...) and, for the approval
//! commands that carry none, the time of the saga's last step.
//!
//! ## The environment repository
//!
//! `DeploymentPromoted` names a commit of the environment repository, which
//! a pure state machine cannot write. The saga emits it with
//! `environmentRepository` from the policy and `desiredCommitSha` set to
//! [`PENDING_DESIRED_COMMIT`] (Git's null object id). The consumer that
//! writes the desired state replaces it with the commit it wrote
//! ([`desired_commit_pending`] tells whether it still has to).
//!
//! ## The files
//!
//! - `policy.rs`: [`ReleasePolicy`] and what can be wrong with it;
//! - `phase.rs`: [`ReleasePhase`] and [`TRANSITIONS`], the state machine
//!   the diagram is drawn from;
//! - `state.rs`: [`ReleaseState`], the records it keeps and the keys of
//!   the steps it emitted;
//! - `apply.rs`: one message being applied (the phase change along an
//!   edge, sending a step once, the history entry);
//! - `plan.rs`: collecting the build and its artifacts, blocking a failed
//!   build, planning;
//! - `approval.rs`: entering an environment, approvals, rejections and the
//!   approval timeout;
//! - `promotion.rs`: infrastructure, promotion and the GitOps sync.

mod apply;
mod approval;
mod phase;
mod plan;
mod policy;
mod promotion;
mod rules;
#[cfg(test)]
mod rules_tests;
mod state;
#[cfg(test)]
mod tests;
mod verification;
mod verify;
#[cfg(test)]
mod verify_tests;
mod windows;
#[cfg(test)]
mod windows_tests;

use std::fmt::Write as _;
use std::time::Duration;

use bosun_contracts::Message;
use bosun_contracts::messages::DeploymentPromoted;
use time::OffsetDateTime;

use self::apply::{Step, claimed_name};
pub use self::phase::{PhaseTransition, ReleasePhase, TRANSITIONS, machine};
pub use self::policy::{ReleasePolicy, ReleasePolicyError};
pub use self::rules::{
    ApprovalPolicy, ApprovalRefused, ApprovalRule, MAX_EXPIRY_SECONDS, MAX_GROUP_MEMBERS, MAX_PATTERN_CHARS,
    MAX_REQUIRED_APPROVALS, Rule,
};
pub use self::state::{
    ApprovalProgress, ApprovalRecord, BuildRecord, HistoryEntry, InfrastructureRecord, PendingTimeout, RefusedApproval,
    ReleaseState, SyncRecord, VerificationFailure, VerificationRun, VerifiedRecord, WindowOverride, WindowWait,
};
pub use self::verification::{
    AzureMonitorCheck, CheckOutcome, DEFAULT_INTERVAL_SECONDS, HttpCheck, MAX_CHECKS, MAX_SOAK_SECONDS,
    PrometheusCheck, Verification, VerificationCheck,
};
pub use self::verify::AUTO_ROLLBACK;
pub use self::windows::{Closure, Hold, MAX_WINDOW_SECONDS, MAX_WINDOWS, PromotionWindow, WindowKind, WindowRule};
use crate::{SagaError, SagaKind, StateMachine, Transition};

/// The `approver` of the `ReleaseApproved` the saga emits for an
/// environment its policy auto-approves.
pub const AUTO_APPROVER: &str = "policy:auto-approve";

/// The `desiredCommitSha` of a `DeploymentPromoted` as the saga emits it:
/// Git's null object id, meaning "the desired state is not written yet".
/// The consumer that writes the environment repository replaces it.
pub const PENDING_DESIRED_COMMIT: &str = "0000000000000000000000000000000000000000";

/// The environment repository of [`ReleasePolicy::default`].
pub const DEFAULT_ENVIRONMENT_REPOSITORY: &str = "environments";

/// The most refused approvals a release keeps ([`ReleaseState::refused_approvals`]);
/// older ones are dropped (the audit trail keeps them).
pub const MAX_REFUSALS_KEPT: usize = 64;

/// How often a promotion waiting on a gate with no known opening (a hold
/// with no end) looks again: 5 minutes.
pub const WINDOW_RECHECK: Duration = Duration::from_secs(5 * 60);

/// The approval timeout of [`ReleasePolicy::default`]: 24 hours.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// Whether a promotion still carries [`PENDING_DESIRED_COMMIT`], i.e. its
/// desired state has not been written to the environment repository yet.
pub fn desired_commit_pending(promoted: &DeploymentPromoted) -> bool {
    promoted.desired_commit_sha == PENDING_DESIRED_COMMIT
}

/// The release saga. Holds its policy and nothing else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleaseSaga {
    policy: ReleasePolicy,
}

impl ReleaseSaga {
    /// A release saga under `policy` (check it first with
    /// [`ReleasePolicy::validate`]; the saga refuses to plan under an
    /// invalid one).
    pub fn new(policy: ReleasePolicy) -> Self {
        Self { policy }
    }

    /// The policy.
    pub fn policy(&self) -> &ReleasePolicy {
        &self.policy
    }

    /// This saga under a tenant's stored approval policy (`version` of
    /// it), the rest of the policy unchanged.
    pub fn with_approval(&self, version: u64, approval: ApprovalPolicy) -> Self {
        let mut policy = self.policy.clone();
        policy.approval = approval;
        policy.approval_version = Some(version);
        Self { policy }
    }

    /// Applies one message that occurred at `now` (the envelope's
    /// `occurredAt`): the emitted messages, the history and the approval
    /// deadline are stamped with it. Pure: the same inputs give the same
    /// transition.
    pub fn apply_at(
        &self,
        state: &ReleaseState,
        message: &Message,
        now: OffsetDateTime,
    ) -> Result<Transition<ReleaseState>, SagaError> {
        self.apply_with(state, message, now, &[])
    }

    /// [`ReleaseSaga::apply_at`], knowing who requested the release
    /// (`requested_by`: the identities of the principal that fired the
    /// delivery `message` belongs to and of its key's sponsor; empty when
    /// unknown). They are added to the release's
    /// ([`ReleaseState::requested_by`]); none of them may approve.
    pub fn apply_with(
        &self,
        state: &ReleaseState,
        message: &Message,
        now: OffsetDateTime,
        requested_by: &[String],
    ) -> Result<Transition<ReleaseState>, SagaError> {
        self.apply_observed(state, message, now, None, requested_by)
    }

    /// [`ReleaseSaga::apply_with`], handled at `observed_at` (the handling
    /// host's clock): the promotion gate is read at the later of it and the
    /// message's time, so a message handled late (a backlog, a replay)
    /// never promotes into a window that opened meanwhile, and a window
    /// check handled early does not promote before its time. Without it
    /// (`None`), the gate is read at the message's time (a check's
    /// `checkAt`).
    pub fn apply_observed(
        &self,
        state: &ReleaseState,
        message: &Message,
        now: OffsetDateTime,
        observed_at: Option<OffsetDateTime>,
        requested_by: &[String],
    ) -> Result<Transition<ReleaseState>, SagaError> {
        let unchanged = || Transition {
            state: state.clone(),
            actions: Vec::new(),
        };
        let Some(release_id) = self.key_of(message) else {
            return Ok(unchanged());
        };
        if state.release_id.as_ref().is_some_and(|known| *known != release_id) {
            return Ok(unchanged());
        }
        // A window check looks at the gate no earlier than it was due,
        // whenever its envelope says it was written.
        let gate_at = observed_at.map(|observed| observed.max(now));
        let now = match message {
            Message::ReleaseWindowCheck(check) => now.max(check.check_at),
            _ => now,
        };
        let mut step = self.step(state, release_id, message.message_type(), now, gate_at.unwrap_or(now));
        if !is_decision(message) {
            // Every delivery that brings the release something adds who
            // requested it: a re-run fired by someone else is theirs too.
            for requester in requested_by {
                if !step.state.requested_by.contains(requester) {
                    step.state.requested_by.push(requester.clone());
                }
            }
        }
        match message {
            Message::BuildCompleted(build) => step.on_build_completed(build)?,
            Message::ContainerImageBuilt(image) => step.on_image(image)?,
            Message::PackagePublished(package) => step.on_package(package)?,
            Message::ApproveRelease(approve) => {
                let approver = step.authenticated(approve.approved_by.as_deref(), "approvedBy")?;
                step.on_approve(
                    &approve.environment,
                    ApprovalRecord {
                        note: claimed_name(approve.on_behalf_of.as_deref(), &approver),
                        approver,
                        comment: approve.comment.clone(),
                        auto: false,
                        at: now,
                        identities: approve.approver_identities.clone(),
                        approvers: Vec::new(),
                    },
                )?
            }
            Message::RejectRelease(reject) => {
                let rejected_by = step.authenticated(reject.rejected_by.as_deref(), "rejectedBy")?;
                let claimed = claimed_name(reject.on_behalf_of.as_deref(), &rejected_by);
                step.on_reject(reject.environment.clone(), &rejected_by, claimed, &reject.reason)?
            }
            Message::ReleaseApprovalTimeout(timeout) => step.on_timeout(timeout)?,
            Message::ReleaseWindowCheck(check) => step.on_window_check(check)?,
            Message::OverrideReleaseWindow(overriding) => {
                let by = step.authenticated(overriding.overridden_by.as_deref(), "overriddenBy")?;
                step.on_override(
                    &overriding.environment,
                    WindowOverride {
                        note: claimed_name(overriding.on_behalf_of.as_deref(), &by),
                        by,
                        identities: overriding.overrider_identities.clone(),
                        reason: overriding.reason.clone(),
                        at: now,
                    },
                )?
            }
            Message::InfrastructureProvisioned(provisioned) => step.on_infrastructure(provisioned)?,
            Message::GitOpsSynced(synced) => step.on_synced(synced)?,
            _ => {}
        }
        Ok(step.finish(state))
    }

    /// One sample of a verification's checks, taken by the consumer at
    /// `sampled_at` (its clock) for `check` (the saga's scheduled
    /// `ReleaseVerificationCheck`): counted, and the release is verified,
    /// fails verification (blocked, and rolled back where the policy says
    /// so) or waits for the next sample. A sample the release does not wait
    /// for (another environment or attempt, a release that moved on)
    /// changes nothing. Pure, as [`ReleaseSaga::apply_at`].
    pub fn apply_samples(
        &self,
        state: &ReleaseState,
        check: &bosun_contracts::messages::ReleaseVerificationCheck,
        outcomes: &[CheckOutcome],
        sampled_at: OffsetDateTime,
    ) -> Result<Transition<ReleaseState>, SagaError> {
        if state
            .release_id
            .as_ref()
            .is_some_and(|known| *known != check.release_id)
        {
            return Ok(Transition {
                state: state.clone(),
                actions: Vec::new(),
            });
        }
        let now = sampled_at.max(check.check_at);
        let mut step = self.step(state, check.release_id.clone(), "ReleaseVerificationCheck", now, now);
        step.on_samples(check, outcomes)?;
        Ok(step.finish(state))
    }

    /// The verification the release waits on, with the policy's checks for
    /// it: what the consumer samples for `check` (none: nothing to sample,
    /// the check changes nothing).
    pub fn checks_due(
        &self,
        state: &ReleaseState,
        check: &bosun_contracts::messages::ReleaseVerificationCheck,
    ) -> Option<Vec<VerificationCheck>> {
        let matches = |run: &&VerificationRun| run.awaits(check);
        let first = state
            .verifying
            .as_ref()
            .filter(matches)
            .filter(|_| state.phase == ReleasePhase::Syncing);
        first.or(state.reverifying.as_ref().filter(matches))?;
        Some(
            self.policy
                .approval
                .verification
                .get(&check.environment)
                .map(|verification| verification.checks.clone())
                .unwrap_or_default(),
        )
    }

    fn step(
        &self,
        state: &ReleaseState,
        release_id: String,
        message_type: &'static str,
        now: OffsetDateTime,
        gate_at: OffsetDateTime,
    ) -> Step<'_> {
        Step {
            policy: &self.policy,
            release_id,
            message_type,
            now,
            gate_at,
            quiet: false,
            state: state.clone(),
            actions: Vec::new(),
            emitted: Vec::new(),
            notes: Vec::new(),
            decisions: Vec::new(),
        }
    }

    /// The time [`StateMachine::apply`] stamps a message with: the time the
    /// message carries, else the time of the saga's last step, else the
    /// Unix epoch.
    pub fn time_of(state: &ReleaseState, message: &Message) -> OffsetDateTime {
        match message {
            Message::BuildCompleted(m) => m.completed_at,
            Message::ContainerImageBuilt(m) => m.pushed_at,
            Message::PackagePublished(m) => m.published_at,
            Message::ReleaseApprovalTimeout(m) => m.deadline,
            Message::ReleaseWindowCheck(m) => m.check_at,
            Message::ReleaseVerificationCheck(m) => m.check_at,
            Message::InfrastructureProvisioned(m) => m.provisioned_at,
            Message::GitOpsSynced(m) => m.synced_at,
            _ => state.last_step_at().unwrap_or(OffsetDateTime::UNIX_EPOCH),
        }
    }
}

/// Whether `message` is a decision or its timeout: sent with a
/// correlation of its own, so who requested the delivery it came in is not
/// who requested the release.
fn is_decision(message: &Message) -> bool {
    matches!(
        message,
        Message::ApproveRelease(_)
            | Message::RejectRelease(_)
            | Message::ReleaseApprovalTimeout(_)
            | Message::ReleaseWindowCheck(_)
            | Message::OverrideReleaseWindow(_)
            | Message::ReleaseDecisionRecorded(_)
    )
}

/// The release a message belongs to (the release saga's key within its
/// tenant), whatever the policy: a pure function of the message, so a
/// sender that does not run the saga (a Service Bus session id) computes
/// the same key as [`StateMachine::key_of`], which calls it.
pub fn release_of(message: &Message) -> Option<String> {
    match message {
        Message::BuildCompleted(m) => Some(m.release_id.clone()),
        Message::ContainerImageBuilt(m) => Some(m.release_id.clone()),
        Message::PackagePublished(m) => Some(m.release_id.clone()),
        Message::ApproveRelease(m) => Some(m.release_id.clone()),
        Message::RejectRelease(m) => Some(m.release_id.clone()),
        Message::ReleaseApprovalTimeout(m) => Some(m.release_id.clone()),
        Message::ReleaseWindowCheck(m) => Some(m.release_id.clone()),
        Message::OverrideReleaseWindow(m) => Some(m.release_id.clone()),
        Message::ReleaseVerificationCheck(m) => Some(m.release_id.clone()),
        // Not applied to the saga: keyed by it so that a release's
        // decisions reach its audit log in the order they were taken (its
        // turn, its Service Bus session).
        Message::ReleaseDecisionRecorded(m) => Some(m.release_id.clone()),
        Message::InfrastructureProvisioned(m) if !m.preview_only => m.release_id.clone(),
        Message::GitOpsSynced(m) => m.release_id.clone(),
        _ => None,
    }
}

impl StateMachine for ReleaseSaga {
    type State = ReleaseState;

    const KIND: SagaKind = SagaKind::Release;

    fn key_of(&self, message: &Message) -> Option<String> {
        release_of(message)
    }

    fn apply(&self, state: &ReleaseState, message: &Message) -> Result<Transition<ReleaseState>, SagaError> {
        self.apply_at(state, message, Self::time_of(state, message))
    }

    fn diagram(&self) -> String {
        let mut out = String::from("stateDiagram-v2\n");
        for phase in ReleasePhase::ALL {
            let _ = writeln!(out, "    {} : {}", phase.name(), phase.description());
        }
        let _ = writeln!(out, "    [*] --> {}", ReleasePhase::default().name());
        for edge in TRANSITIONS {
            let _ = writeln!(
                out,
                "    {} --> {} : {}",
                edge.from.name(),
                edge.to.name(),
                edge.trigger
            );
        }
        for phase in ReleasePhase::ALL.into_iter().filter(|phase| phase.is_final()) {
            let _ = writeln!(out, "    {} --> [*]", phase.name());
        }
        let auto = if self.policy.auto_approve.is_empty() {
            "none".to_owned()
        } else {
            self.policy.auto_approve.join(", ")
        };
        let _ = writeln!(out, "    note right of {}", ReleasePhase::AwaitingApproval.name());
        let _ = writeln!(
            out,
            "        promotion path {}",
            self.policy.environments.join(" then ")
        );
        let _ = writeln!(out, "        auto-approved {auto}");
        let _ = writeln!(
            out,
            "        approval timeout {}s",
            self.policy.approval_timeout.as_secs()
        );
        let _ = writeln!(out, "    end note");
        out
    }
}
