//! The release saga, keyed by `releaseId`: collect a release's build and
//! artifacts, plan it, get it approved environment by environment, wait for
//! its infrastructure, promote it and wait until GitOps reports it synced.
//!
//! [`ReleaseSaga`] is a pure state machine over [`ReleaseState`]: it is given
//! one message and returns the new state and the [`Action`]s to carry out.
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
//!   `InfrastructureProvisioned` of that release and environment, then emits
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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use bosun_contracts::Message;
use bosun_contracts::messages::{
    BuildArtifact, BuildCompleted, ContainerImageBuilt, DeploymentPromoted, GitOpsSynced, ImageArtifact,
    InfrastructureProvisioned, MAX_REASON_CHARS, PackageArtifact, PackagePublished, PipelineResult, PlannedEnvironment,
    ReleaseApprovalTimeout, ReleaseApproved, ReleaseArtifacts, ReleaseBlocked, ReleasePlanned, ReleaseRejected,
    ReleaseStep,
};
use bosun_contracts::validate;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::{Action, SagaError, SagaKind, StateMachine, Transition};

/// The `approver` of the `ReleaseApproved` the saga emits for an
/// environment its policy auto-approves.
pub const AUTO_APPROVER: &str = "policy:auto-approve";

/// The `desiredCommitSha` of a `DeploymentPromoted` as the saga emits it:
/// Git's null object id, meaning "the desired state is not written yet".
/// The consumer that writes the environment repository replaces it.
pub const PENDING_DESIRED_COMMIT: &str = "0000000000000000000000000000000000000000";

/// The environment repository of [`ReleasePolicy::default`].
pub const DEFAULT_ENVIRONMENT_REPOSITORY: &str = "environments";

/// The approval timeout of [`ReleasePolicy::default`]: 24 hours.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// Failing test names quoted in the reason of a blocked build.
const QUOTED_FAILED_TESTS: usize = 10;

/// Whether a promotion still carries [`PENDING_DESIRED_COMMIT`], i.e. its
/// desired state has not been written to the environment repository yet.
pub fn desired_commit_pending(promoted: &DeploymentPromoted) -> bool {
    promoted.desired_commit_sha == PENDING_DESIRED_COMMIT
}

/// How releases are promoted: the path, what approves on its own, how long
/// a person has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleasePolicy {
    /// The environments a release is promoted through, in order (default
    /// `["dev"]`).
    pub environments: Vec<String>,
    /// The environments approved without a person (default `["dev"]`).
    pub auto_approve: Vec<String>,
    /// How long a person has to approve an environment before the release
    /// is rejected as timed out (default 24 hours).
    pub approval_timeout: Duration,
    /// The repository holding the environments' desired state, named on
    /// `DeploymentPromoted` (default [`DEFAULT_ENVIRONMENT_REPOSITORY`]).
    pub environment_repository: String,
}

impl Default for ReleasePolicy {
    fn default() -> Self {
        Self {
            environments: vec!["dev".to_owned()],
            auto_approve: vec!["dev".to_owned()],
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            environment_repository: DEFAULT_ENVIRONMENT_REPOSITORY.to_owned(),
        }
    }
}

impl ReleasePolicy {
    /// Whether the policy approves `environment` without a person.
    pub fn auto_approves(&self, environment: &str) -> bool {
        self.auto_approve.iter().any(|name| name == environment)
    }

    /// Checks the policy: at least one environment, valid and unique names,
    /// auto-approval only for environments on the path, a valid repository
    /// name and a non-zero timeout. The saga refuses to plan a release under
    /// an invalid policy ([`SagaError::Rejected`]).
    pub fn validate(&self) -> Result<(), ReleasePolicyError> {
        if self.environments.is_empty() {
            return Err(ReleasePolicyError::NoEnvironments);
        }
        let mut seen = BTreeSet::new();
        for environment in &self.environments {
            validate::environment_name("environments", environment).map_err(|err| {
                ReleasePolicyError::InvalidEnvironment {
                    environment: environment.clone(),
                    reason: err.reason,
                }
            })?;
            if !seen.insert(environment.as_str()) {
                return Err(ReleasePolicyError::DuplicateEnvironment(environment.clone()));
            }
        }
        if let Some(unknown) = self.auto_approve.iter().find(|name| !seen.contains(name.as_str())) {
            return Err(ReleasePolicyError::UnknownAutoApprove(unknown.clone()));
        }
        validate::repository_name("environmentRepository", &self.environment_repository).map_err(|err| {
            ReleasePolicyError::InvalidEnvironmentRepository {
                name: self.environment_repository.clone(),
                reason: err.reason,
            }
        })?;
        if self.approval_timeout.is_zero() {
            return Err(ReleasePolicyError::ZeroApprovalTimeout);
        }
        Ok(())
    }

    fn planned_environments(&self) -> Vec<PlannedEnvironment> {
        self.environments
            .iter()
            .map(|environment| PlannedEnvironment {
                environment: environment.clone(),
                requires_approval: !self.auto_approves(environment),
            })
            .collect()
    }
}

/// What is wrong with a [`ReleasePolicy`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReleasePolicyError {
    /// The promotion path is empty.
    #[error("the release policy names no environment")]
    NoEnvironments,
    /// An environment name is not valid.
    #[error("release policy environment `{environment}`: {reason}")]
    InvalidEnvironment {
        /// The name.
        environment: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An environment is on the path twice.
    #[error("the release policy names environment `{0}` twice")]
    DuplicateEnvironment(String),
    /// An auto-approved environment is not on the path (a typo, most likely).
    #[error("the release policy auto-approves `{0}`, which is not one of its environments")]
    UnknownAutoApprove(String),
    /// The environment repository name is not valid.
    #[error("release policy environment repository `{name}`: {reason}")]
    InvalidEnvironmentRepository {
        /// The name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A zero timeout would reject every release that needs a person.
    #[error("the release policy's approval timeout is zero")]
    ZeroApprovalTimeout,
}

/// Where a release is. [`ReleasePhase::ALL`] and [`TRANSITIONS`] are the
/// state machine; the saga refuses (and so never takes) a phase change that
/// is not in [`TRANSITIONS`], and the diagram is drawn from them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReleasePhase {
    /// Waiting for the build and the artifacts its module requires.
    #[default]
    Collecting,
    /// Planned; waiting for a person to approve the current environment.
    AwaitingApproval,
    /// The current environment is approved; waiting for its infrastructure.
    Provisioning,
    /// Promoted to the current environment; waiting for GitOps to sync it.
    Syncing,
    /// Every environment on the path is deployed.
    Completed,
    /// Rejected by a person, or the approval timed out. Final.
    Rejected,
    /// The build failed (or there is nothing to deploy); waiting for someone
    /// to act: a successful re-run continues, a rejection ends it.
    Blocked,
}

impl ReleasePhase {
    /// Every phase, in the order of the diagram.
    pub const ALL: [ReleasePhase; 7] = [
        Self::Collecting,
        Self::AwaitingApproval,
        Self::Provisioning,
        Self::Syncing,
        Self::Completed,
        Self::Rejected,
        Self::Blocked,
    ];

    /// The name, as in the diagram (`AwaitingApproval`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Collecting => "Collecting",
            Self::AwaitingApproval => "AwaitingApproval",
            Self::Provisioning => "Provisioning",
            Self::Syncing => "Syncing",
            Self::Completed => "Completed",
            Self::Rejected => "Rejected",
            Self::Blocked => "Blocked",
        }
    }

    /// One line saying what the release waits for in this phase.
    pub fn description(self) -> &'static str {
        match self {
            Self::Collecting => "waiting for the build and its required image and package",
            Self::AwaitingApproval => "waiting for a person to approve the current environment",
            Self::Provisioning => "approved, waiting for the environment's infrastructure",
            Self::Syncing => "promoted, waiting for GitOps to sync the environment",
            Self::Completed => "deployed to every environment",
            Self::Rejected => "rejected or approval timed out, stopped",
            Self::Blocked => "build failed, waiting for a successful re-run or a rejection",
        }
    }

    /// Whether the release is over (completed or rejected): nothing moves it
    /// any more.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::Rejected)
    }
}

impl std::fmt::Display for ReleasePhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One edge of the release state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseTransition {
    /// The phase left.
    pub from: ReleasePhase,
    /// The phase entered (the same for a step that stays).
    pub to: ReleasePhase,
    /// What triggers it and what the saga emits (`trigger / emitted`).
    pub trigger: &'static str,
}

const fn edge(from: ReleasePhase, to: ReleasePhase, trigger: &'static str) -> PhaseTransition {
    PhaseTransition { from, to, trigger }
}

/// Every phase change the release saga can make.
pub const TRANSITIONS: &[PhaseTransition] = {
    use ReleasePhase::*;
    &[
        edge(
            Collecting,
            Collecting,
            "BuildCompleted, ContainerImageBuilt, PackagePublished (collected)",
        ),
        edge(
            Collecting,
            AwaitingApproval,
            "build and artifacts in / ReleasePlanned, schedule ReleaseApprovalTimeout",
        ),
        edge(
            Collecting,
            Provisioning,
            "build and artifacts in, first environment auto- or pre-approved / ReleasePlanned, ReleaseApproved",
        ),
        edge(
            Collecting,
            Blocked,
            "BuildCompleted failed, canceled, tests failed or nothing to deploy / ReleaseBlocked",
        ),
        edge(Blocked, Collecting, "BuildCompleted of a successful re-run"),
        edge(AwaitingApproval, Provisioning, "ApproveRelease / ReleaseApproved"),
        edge(Provisioning, Syncing, "InfrastructureProvisioned / DeploymentPromoted"),
        edge(Syncing, Syncing, "GitOpsSynced unhealthy / ReleaseBlocked (sync)"),
        edge(
            Syncing,
            Provisioning,
            "GitOpsSynced, next environment auto- or pre-approved / ReleaseApproved",
        ),
        edge(
            Syncing,
            AwaitingApproval,
            "GitOpsSynced, next environment needs a person / schedule ReleaseApprovalTimeout",
        ),
        edge(Syncing, Completed, "GitOpsSynced of the last environment"),
        edge(
            AwaitingApproval,
            Rejected,
            "RejectRelease or ReleaseApprovalTimeout / ReleaseRejected",
        ),
        edge(Collecting, Rejected, "RejectRelease / ReleaseRejected"),
        edge(Provisioning, Rejected, "RejectRelease / ReleaseRejected"),
        edge(Syncing, Rejected, "RejectRelease / ReleaseRejected"),
        edge(Blocked, Rejected, "RejectRelease / ReleaseRejected"),
    ]
};

/// Whether [`TRANSITIONS`] has an edge `from -> to`.
fn is_transition(from: ReleasePhase, to: ReleasePhase) -> bool {
    TRANSITIONS.iter().any(|edge| edge.from == from && edge.to == to)
}

/// The successful build a release ships, and what its module requires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildRecord {
    /// The build record's id.
    pub build_id: String,
    /// The pipeline run built.
    pub pipeline_run_id: String,
    /// Repository name.
    pub repository: String,
    /// Commit built.
    pub commit_sha: String,
    /// The module.
    pub module_id: String,
    /// The module version (semantic version).
    pub version: String,
    /// Whether the module builds a container image (`module.container`).
    pub needs_image: bool,
    /// Whether the module publishes a package (`module.package`).
    pub needs_package: bool,
    /// When ingestion finished.
    #[serde(with = "time::serde::rfc3339")]
    pub completed_at: OffsetDateTime,
}

impl BuildRecord {
    fn of(build: &BuildCompleted) -> Self {
        Self {
            build_id: build.build_id.clone(),
            pipeline_run_id: build.pipeline_run_id.clone(),
            repository: build.repository.clone(),
            commit_sha: build.commit_sha.clone(),
            module_id: build.module.module_id.clone(),
            version: build.module.version.clone(),
            needs_image: build.module.container.is_some(),
            needs_package: build.module.package.is_some(),
            completed_at: build.completed_at,
        }
    }

    fn artifact(&self) -> BuildArtifact {
        BuildArtifact {
            build_id: self.build_id.clone(),
            pipeline_run_id: self.pipeline_run_id.clone(),
            repository: self.repository.clone(),
            commit_sha: self.commit_sha.clone(),
        }
    }
}

/// An approval of one environment: a person's (`ApproveRelease`) or the
/// policy's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRecord {
    /// Who approved: the authenticated caller (`approvedBy`), or
    /// [`AUTO_APPROVER`] for the policy.
    pub approver: String,
    /// The free-text name the sender gave (`approver` of the command), kept
    /// as a note when it says something the authenticated identity does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The approver's comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// Whether the policy approved on its own.
    pub auto: bool,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// Infrastructure provisioned for one environment of the release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InfrastructureRecord {
    /// The change applied.
    pub plan_id: String,
    /// The stack.
    pub stack: String,
    /// When it was applied.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// GitOps reporting one environment synced with the release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncRecord {
    /// The commit of the environment repository applied.
    pub commit_sha: String,
    /// Whether every resource reported ready.
    pub healthy: bool,
    /// When the reconcile finished.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// The approval timeout the saga scheduled and waits on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingTimeout {
    /// The scheduled message.
    pub message: ReleaseApprovalTimeout,
    /// When it is due.
    #[serde(with = "time::serde::rfc3339")]
    pub due: OffsetDateTime,
}

/// One step of the saga, for `bosun sagas show`: a message that changed
/// the state, what it did and what was emitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// When the message occurred.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// The type of the message received.
    pub message_type: String,
    /// The phase after it.
    pub phase: ReleasePhase,
    /// What happened, for a person.
    pub note: String,
    /// The messages sent or scheduled, by type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub emitted: Vec<String>,
}

/// The persisted state of one release saga. `Default` is the state before
/// the first message. Written only by the saga; read it (or its JSON) to
/// show a release.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReleaseState {
    /// The release (the saga key); `None` before the first message that
    /// changed anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release_id: Option<String>,
    /// Where the release is.
    pub phase: ReleasePhase,
    /// The successful build the release ships.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildRecord>,
    /// Container images reported, by the `buildId` they were built from.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub images: BTreeMap<String, ImageArtifact>,
    /// Packages reported, by the `buildId` they were packed from.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub packages: BTreeMap<String, PackageArtifact>,
    /// The plan, as emitted (`ReleasePlanned`): the promotion path and the
    /// artifacts, fixed for the rest of the release.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<ReleasePlanned>,
    /// The environment the release is being promoted to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_environment: Option<String>,
    /// Approvals by environment: the policy's and people's, including those
    /// given ahead of time.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub approvals: BTreeMap<String, ApprovalRecord>,
    /// Infrastructure provisioned, by environment.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub infrastructure: BTreeMap<String, InfrastructureRecord>,
    /// GitOps sync reports, by environment.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub syncs: BTreeMap<String, SyncRecord>,
    /// Environments deployed, in promotion order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deployed: Vec<String>,
    /// The approval timeout scheduled and not yet resolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_timeout: Option<PendingTimeout>,
    /// The block in force (`ReleaseBlocked` as emitted), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked: Option<ReleaseBlocked>,
    /// The rejection (`ReleaseRejected` as emitted), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected: Option<ReleaseRejected>,
    /// Every step emitted, e.g. `ReleasePlanned`, `ReleaseApproved/dev`,
    /// `DeploymentPromoted/dev`: a step is never emitted twice.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub emitted: BTreeSet<String>,
    /// What happened, in order of arrival.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistoryEntry>,
}

impl ReleaseState {
    /// Whether the release is over (completed or rejected).
    pub fn is_finished(&self) -> bool {
        self.phase.is_final()
    }

    /// The time of the saga's last step, if it has one.
    pub fn last_step_at(&self) -> Option<OffsetDateTime> {
        self.history.last().map(|entry| entry.at)
    }

    /// The environments of the promotion path with whether each needs a
    /// person: the plan's once planned, else the policy's.
    fn path(&self, policy: &ReleasePolicy) -> Vec<PlannedEnvironment> {
        match &self.plan {
            Some(plan) => plan.environments.clone(),
            None => policy.planned_environments(),
        }
    }
}

/// The step keys of [`ReleaseState::emitted`].
mod step {
    use bosun_contracts::messages::ReleaseStep;

    pub fn planned() -> String {
        "ReleasePlanned".to_owned()
    }

    pub fn approved(environment: &str) -> String {
        format!("ReleaseApproved/{environment}")
    }

    pub fn promoted(environment: &str) -> String {
        format!("DeploymentPromoted/{environment}")
    }

    pub fn rejected() -> String {
        "ReleaseRejected".to_owned()
    }

    pub fn blocked(failing: ReleaseStep, environment: Option<&str>) -> String {
        let name = match failing {
            ReleaseStep::Build => "build",
            ReleaseStep::ContainerImage => "containerImage",
            ReleaseStep::Package => "package",
            ReleaseStep::Infrastructure => "infrastructure",
            ReleaseStep::Promotion => "promotion",
            ReleaseStep::Sync => "sync",
        };
        match environment {
            Some(environment) => format!("ReleaseBlocked/{name}/{environment}"),
            None => format!("ReleaseBlocked/{name}"),
        }
    }
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
        let mut step = Step {
            policy: &self.policy,
            release_id,
            message_type: message.message_type(),
            now,
            state: state.clone(),
            actions: Vec::new(),
            emitted: Vec::new(),
            notes: Vec::new(),
        };
        match message {
            Message::BuildCompleted(build) => step.on_build_completed(build)?,
            Message::ContainerImageBuilt(image) => step.on_image(image)?,
            Message::PackagePublished(package) => step.on_package(package)?,
            Message::ApproveRelease(approve) => {
                let approver = step.authenticated(approve.approved_by.as_deref(), "approvedBy")?;
                step.on_approve(
                    &approve.environment,
                    ApprovalRecord {
                        note: claimed_name(approve.approver.as_deref(), &approver),
                        approver,
                        comment: approve.comment.clone(),
                        auto: false,
                        at: now,
                    },
                )?
            }
            Message::RejectRelease(reject) => {
                let rejected_by = step.authenticated(reject.rejected_by.as_deref(), "rejectedBy")?;
                let claimed = claimed_name(reject.approver.as_deref(), &rejected_by);
                step.on_reject(reject.environment.clone(), &rejected_by, claimed, &reject.reason)?
            }
            Message::ReleaseApprovalTimeout(timeout) => step.on_timeout(timeout)?,
            Message::InfrastructureProvisioned(provisioned) => step.on_infrastructure(provisioned)?,
            Message::GitOpsSynced(synced) => step.on_synced(synced)?,
            _ => {}
        }
        Ok(step.finish(state))
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
            Message::InfrastructureProvisioned(m) => m.provisioned_at,
            Message::GitOpsSynced(m) => m.synced_at,
            _ => state.last_step_at().unwrap_or(OffsetDateTime::UNIX_EPOCH),
        }
    }
}

impl StateMachine for ReleaseSaga {
    type State = ReleaseState;

    const KIND: SagaKind = SagaKind::Release;

    fn key_of(&self, message: &Message) -> Option<String> {
        match message {
            Message::BuildCompleted(m) => Some(m.release_id.clone()),
            Message::ContainerImageBuilt(m) => Some(m.release_id.clone()),
            Message::PackagePublished(m) => Some(m.release_id.clone()),
            Message::ApproveRelease(m) => Some(m.release_id.clone()),
            Message::RejectRelease(m) => Some(m.release_id.clone()),
            Message::ReleaseApprovalTimeout(m) => Some(m.release_id.clone()),
            Message::InfrastructureProvisioned(m) if !m.preview_only => m.release_id.clone(),
            Message::GitOpsSynced(m) => m.release_id.clone(),
            _ => None,
        }
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

/// One message being applied: the state being changed and what it emits.
struct Step<'a> {
    policy: &'a ReleasePolicy,
    release_id: String,
    message_type: &'static str,
    now: OffsetDateTime,
    state: ReleaseState,
    actions: Vec<Action>,
    emitted: Vec<String>,
    notes: Vec<String>,
}

impl Step<'_> {
    /// The authenticated caller of an approval or rejection: a decision
    /// that names no one bosun authenticated is refused, whatever name it
    /// claims.
    fn authenticated(&self, by: Option<&str>, field: &str) -> Result<String, SagaError> {
        match by.map(str::trim) {
            Some(by) if !by.is_empty() => Ok(by.to_owned()),
            _ => Err(self.refuse(format!(
                "a decision on release {} names no authenticated caller (`{field}` is missing): \
                 approvals and rejections are accepted only through bosun's front door",
                self.release_id
            ))),
        }
    }

    fn refuse(&self, reason: impl Into<String>) -> SagaError {
        SagaError::Rejected {
            message_type: self.message_type.to_owned(),
            reason: reason.into(),
        }
    }

    fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// Moves to `to` along an edge of [`TRANSITIONS`]; any other change is
    /// refused, so the saga never does what its diagram does not show.
    fn enter(&mut self, to: ReleasePhase) -> Result<(), SagaError> {
        let from = self.state.phase;
        if from != to && !is_transition(from, to) {
            return Err(self.refuse(format!(
                "release {}: no transition from {from} to {to} in the release state machine",
                self.release_id
            )));
        }
        self.state.phase = to;
        Ok(())
    }

    /// Sends `message` unless the step `key` was emitted before.
    fn send(&mut self, key: String, message: Message) {
        if self.state.emitted.insert(key) {
            self.emitted.push(message.message_type().to_owned());
            self.actions.push(Action::Send(message));
        }
    }

    fn finish(mut self, before: &ReleaseState) -> Transition<ReleaseState> {
        if self.state == *before {
            return Transition {
                state: before.clone(),
                actions: Vec::new(),
            };
        }
        self.state.release_id = Some(self.release_id);
        self.state.history.push(HistoryEntry {
            at: self.now,
            message_type: self.message_type.to_owned(),
            phase: self.state.phase,
            note: self.notes.join("; "),
            emitted: self.emitted,
        });
        Transition {
            state: self.state,
            actions: self.actions,
        }
    }

    /// Whether `environment` needs a person, or `None` when it is not on
    /// the release's promotion path.
    fn requires_approval(&self, environment: &str) -> Option<bool> {
        self.state
            .path(self.policy)
            .into_iter()
            .find(|planned| planned.environment == environment)
            .map(|planned| planned.requires_approval)
    }

    fn is_current(&self, environment: &str) -> bool {
        self.state.current_environment.as_deref() == Some(environment)
    }

    fn on_build_completed(&mut self, build: &BuildCompleted) -> Result<(), SagaError> {
        if self.state.phase.is_final() || self.state.build.is_some() {
            // The first successful build is the one the release ships.
            return Ok(());
        }
        let blocked = self.state.phase == ReleasePhase::Blocked;
        if !build.result.is_success() || !build.test_summary.all_passed() {
            if !blocked {
                self.block(ReleaseStep::Build, build_failure(build), None);
                self.note(format!("build {} failed: the release is blocked", build.build_id));
                self.enter(ReleasePhase::Blocked)?;
            }
            return Ok(());
        }
        if build.module.container.is_none() && build.module.package.is_none() {
            if !blocked {
                let reason = format!(
                    "module `{}` declares neither a container image nor a package: there is nothing to promote",
                    build.module.module_id
                );
                self.block(ReleaseStep::Promotion, reason, None);
                self.note(format!(
                    "build {} has nothing to deploy: the release is blocked",
                    build.build_id
                ));
                self.enter(ReleasePhase::Blocked)?;
            }
            return Ok(());
        }
        let record = BuildRecord::of(build);
        self.note(format!(
            "build {} of commit {} recorded (image {}, package {})",
            record.build_id,
            record.commit_sha,
            if record.needs_image { "required" } else { "not required" },
            if record.needs_package {
                "required"
            } else {
                "not required"
            },
        ));
        self.state.build = Some(record);
        if blocked {
            self.state.blocked = None;
            self.note("a successful re-run unblocks the release");
            self.enter(ReleasePhase::Collecting)?;
        }
        self.try_plan()
    }

    fn on_image(&mut self, image: &ContainerImageBuilt) -> Result<(), SagaError> {
        if self.state.phase.is_final() || self.state.plan.is_some() || self.state.images.contains_key(&image.build_id) {
            return Ok(());
        }
        let artifact = image.artifact();
        self.note(format!(
            "image {} of build {} recorded",
            artifact.reference(),
            image.build_id
        ));
        self.state.images.insert(image.build_id.clone(), artifact);
        self.try_plan()
    }

    fn on_package(&mut self, package: &PackagePublished) -> Result<(), SagaError> {
        if self.state.phase.is_final()
            || self.state.plan.is_some()
            || self.state.packages.contains_key(&package.build_id)
        {
            return Ok(());
        }
        self.note(format!(
            "package {} {} of build {} recorded",
            package.package_id, package.version, package.build_id
        ));
        self.state.packages.insert(package.build_id.clone(), package.artifact());
        self.try_plan()
    }

    /// Plans the release once the build and its required artifacts are in.
    fn try_plan(&mut self) -> Result<(), SagaError> {
        if self.state.phase != ReleasePhase::Collecting || self.state.plan.is_some() {
            return Ok(());
        }
        let Some(build) = self.state.build.clone() else {
            return Ok(());
        };
        let image = match (build.needs_image, self.state.images.get(&build.build_id)) {
            (false, _) => None,
            (true, Some(image)) => Some(image.clone()),
            (true, None) => return Ok(()),
        };
        let package = match (build.needs_package, self.state.packages.get(&build.build_id)) {
            (false, _) => None,
            (true, Some(package)) => Some(package.clone()),
            (true, None) => return Ok(()),
        };
        self.policy
            .validate()
            .map_err(|err| self.refuse(format!("cannot plan release {}: {err}", self.release_id)))?;
        let plan = ReleasePlanned {
            release_id: self.release_id.clone(),
            module_id: build.module_id.clone(),
            version: build.version.clone(),
            environments: self.policy.planned_environments(),
            artifacts: ReleaseArtifacts {
                build: build.artifact(),
                image,
                package,
            },
            planned_at: self.now,
        };
        self.note(format!(
            "planned: {}",
            plan.environments
                .iter()
                .map(|planned| planned.environment.as_str())
                .collect::<Vec<_>>()
                .join(" then ")
        ));
        self.send(step::planned(), plan.clone().into());
        self.state.plan = Some(plan);
        self.enter_environment(0)
    }

    /// Starts the environment at `index` of the plan, or completes the
    /// release after the last.
    fn enter_environment(&mut self, index: usize) -> Result<(), SagaError> {
        let planned = self
            .state
            .plan
            .as_ref()
            .and_then(|plan| plan.environments.get(index))
            .cloned();
        let Some(planned) = planned else {
            self.state.current_environment = None;
            self.note("every environment is deployed: the release is complete");
            return self.enter(ReleasePhase::Completed);
        };
        let environment = planned.environment;
        self.state.current_environment = Some(environment.clone());
        if !planned.requires_approval {
            let record = ApprovalRecord {
                approver: AUTO_APPROVER.to_owned(),
                note: None,
                comment: None,
                auto: true,
                at: self.now,
            };
            return self.approve(&environment, record);
        }
        if let Some(record) = self.state.approvals.get(&environment).cloned() {
            return self.approve(&environment, record);
        }
        self.enter(ReleasePhase::AwaitingApproval)?;
        self.schedule_timeout(&environment)
    }

    fn schedule_timeout(&mut self, environment: &str) -> Result<(), SagaError> {
        let after = self.policy.approval_timeout;
        let due = time::Duration::try_from(after)
            .ok()
            .and_then(|timeout| self.now.checked_add(timeout))
            .ok_or_else(|| self.refuse(format!("approval timeout of {}s is out of range", after.as_secs())))?;
        let message = ReleaseApprovalTimeout {
            release_id: self.release_id.clone(),
            environment: environment.to_owned(),
            deadline: due,
        };
        self.note(format!(
            "waiting for a person to approve {environment} until {}",
            rfc3339(due)
        ));
        self.emitted.push("ReleaseApprovalTimeout (scheduled)".to_owned());
        self.actions.push(Action::Schedule {
            message: message.clone().into(),
            after,
        });
        self.state.pending_timeout = Some(PendingTimeout { message, due });
        Ok(())
    }

    /// Records the approval of `environment`, emits its `ReleaseApproved`
    /// and goes on to its infrastructure.
    fn approve(&mut self, environment: &str, record: ApprovalRecord) -> Result<(), SagaError> {
        let module_id = self
            .state
            .plan
            .as_ref()
            .map(|plan| plan.module_id.clone())
            .ok_or_else(|| self.refuse(format!("release {} is approved before it is planned", self.release_id)))?;
        let approved = ReleaseApproved {
            release_id: self.release_id.clone(),
            module_id,
            environment: environment.to_owned(),
            approver: record.approver.clone(),
            approved_at: record.at,
            auto: record.auto,
            comment: record.comment.clone(),
        };
        match &record.note {
            Some(note) => self.note(format!("{environment} approved by {} (as \"{note}\")", record.approver)),
            None => self.note(format!("{environment} approved by {}", record.approver)),
        }
        self.state.approvals.insert(environment.to_owned(), record);
        self.send(step::approved(environment), approved.into());
        if self
            .state
            .pending_timeout
            .as_ref()
            .is_some_and(|pending| pending.message.environment == environment)
        {
            self.state.pending_timeout = None;
        }
        self.enter(ReleasePhase::Provisioning)?;
        if self.state.infrastructure.contains_key(environment) {
            self.promote(environment)?;
        }
        Ok(())
    }

    /// Emits the `DeploymentPromoted` of `environment`: only with a recorded
    /// approval whose `ReleaseApproved` was emitted.
    fn promote(&mut self, environment: &str) -> Result<(), SagaError> {
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
    fn check_sync(&mut self, environment: &str) -> Result<(), SagaError> {
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

    /// Emits `ReleaseBlocked` (once per step and environment) and keeps it
    /// as the block in force. The caller decides the phase.
    fn block(&mut self, failing_step: ReleaseStep, reason: String, environment: Option<&str>) {
        let blocked = ReleaseBlocked {
            release_id: self.release_id.clone(),
            failing_step,
            reason: clip(reason, MAX_REASON_CHARS),
            environment: environment.map(str::to_owned),
            blocked_at: self.now,
        };
        self.send(step::blocked(failing_step, environment), blocked.clone().into());
        self.state.blocked = Some(blocked);
    }

    fn on_approve(&mut self, environment: &str, record: ApprovalRecord) -> Result<(), SagaError> {
        let Some(requires_approval) = self.requires_approval(environment) else {
            let path: Vec<String> = self
                .state
                .path(self.policy)
                .into_iter()
                .map(|planned| planned.environment)
                .collect();
            return Err(self.refuse(format!(
                "environment `{environment}` is not on the promotion path of release {} ({})",
                self.release_id,
                path.join(", ")
            )));
        };
        match self.state.phase {
            ReleasePhase::Rejected => {
                return Err(self.refuse(format!(
                    "release {} was rejected: an approval no longer applies",
                    self.release_id
                )));
            }
            ReleasePhase::Completed => return Ok(()),
            _ => {}
        }
        if !requires_approval || self.state.approvals.contains_key(environment) {
            // Auto-approved by the policy, or already approved: nothing to add.
            return Ok(());
        }
        if self.state.phase == ReleasePhase::AwaitingApproval && self.is_current(environment) {
            return self.approve(environment, record);
        }
        self.note(format!(
            "approval of {environment} by {} recorded: it applies when the release reaches {environment}",
            record.approver
        ));
        self.state.approvals.insert(environment.to_owned(), record);
        Ok(())
    }

    fn on_reject(
        &mut self,
        environment: Option<String>,
        approver: &str,
        claimed: Option<String>,
        reason: &str,
    ) -> Result<(), SagaError> {
        match self.state.phase {
            ReleasePhase::Rejected => Ok(()),
            ReleasePhase::Completed => Err(self.refuse(format!(
                "release {} is already completed: there is nothing to reject",
                self.release_id
            ))),
            _ => {
                // A rejection about one environment is a decision on that
                // environment's approval: it stops the release only while
                // that approval is still to be given.
                if let Some(environment) = environment.as_deref() {
                    match self.requires_approval(environment) {
                        None => {
                            return Err(self.refuse(format!(
                                "environment `{environment}` is not on the promotion path of release {}",
                                self.release_id
                            )));
                        }
                        Some(false) => {
                            return Err(self.refuse(format!(
                                "{environment} is approved by policy for release {}: there is no approval to refuse",
                                self.release_id
                            )));
                        }
                        Some(true) if self.state.approvals.contains_key(environment) => {
                            return Err(self.refuse(format!(
                                "{environment} is already approved for release {}: a rejection of it no longer applies",
                                self.release_id
                            )));
                        }
                        Some(true) => {}
                    }
                }
                match claimed {
                    Some(name) => self.note(format!("rejected by {approver} (as \"{name}\")")),
                    None => self.note(format!("rejected by {approver}")),
                }
                self.reject(environment, Some(approver.to_owned()), reason.to_owned(), false)
            }
        }
    }

    /// A timeout counts only when it is the one the saga scheduled and
    /// still waits on (same environment and deadline); any other one (a
    /// decision came first, or it is not the saga's) changes nothing.
    fn on_timeout(&mut self, timeout: &ReleaseApprovalTimeout) -> Result<(), SagaError> {
        let waiting = self.state.phase == ReleasePhase::AwaitingApproval
            && self.is_current(&timeout.environment)
            && self
                .state
                .pending_timeout
                .as_ref()
                .is_some_and(|pending| pending.message == *timeout);
        if !waiting {
            return Ok(());
        }
        let reason = format!(
            "no decision on {} before the deadline {}",
            timeout.environment,
            rfc3339(timeout.deadline)
        );
        self.note(format!("approval of {} timed out", timeout.environment));
        self.reject(Some(timeout.environment.clone()), None, reason, true)
    }

    fn reject(
        &mut self,
        environment: Option<String>,
        approver: Option<String>,
        reason: String,
        timed_out: bool,
    ) -> Result<(), SagaError> {
        let rejected = ReleaseRejected {
            release_id: self.release_id.clone(),
            environment,
            approver,
            reason: clip(reason, MAX_REASON_CHARS),
            timed_out,
            rejected_at: self.now,
        };
        self.send(step::rejected(), rejected.clone().into());
        self.state.rejected = Some(rejected);
        self.state.pending_timeout = None;
        self.enter(ReleasePhase::Rejected)
    }

    fn on_infrastructure(&mut self, provisioned: &InfrastructureProvisioned) -> Result<(), SagaError> {
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

    fn on_synced(&mut self, synced: &GitOpsSynced) -> Result<(), SagaError> {
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

/// The reason of a blocked build: what failed, and which tests.
fn build_failure(build: &BuildCompleted) -> String {
    let outcome = match build.result {
        PipelineResult::Succeeded => "succeeded",
        PipelineResult::Failed => "failed",
        PipelineResult::Canceled => "was canceled",
    };
    let short_sha: String = build.commit_sha.chars().take(12).collect();
    let mut reason = format!(
        "build {} (pipeline run {}, commit {short_sha}) {outcome}",
        build.build_id, build.pipeline_run_id
    );
    let summary = build.test_summary;
    if summary.failed > 0 {
        let _ = write!(reason, "; {} of {} tests failed", summary.failed, summary.total);
        if !build.failed_tests.is_empty() {
            let quoted: Vec<&str> = build
                .failed_tests
                .iter()
                .take(QUOTED_FAILED_TESTS)
                .map(String::as_str)
                .collect();
            let _ = write!(reason, ": {}", quoted.join(", "));
            let more = build.failed_tests.len().saturating_sub(QUOTED_FAILED_TESTS);
            if more > 0 {
                let _ = write!(reason, " and {more} more");
            }
        }
    }
    reason
}

/// `text` cut to at most `max` characters.
/// The free-text name a sender gave, when it adds something to the
/// authenticated identity.
fn claimed_name(claimed: Option<&str>, authenticated: &str) -> Option<String> {
    claimed
        .map(str::trim)
        .filter(|name| !name.is_empty() && *name != authenticated)
        .map(str::to_owned)
}

fn clip(text: String, max: usize) -> String {
    if text.chars().count() <= max {
        text
    } else {
        text.chars().take(max).collect()
    }
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_else(|_| at.to_string())
}

#[cfg(test)]
mod tests {
    use bosun_contracts::messages::{ApproveRelease, RejectRelease};
    use bosun_contracts::samples::{self, RELEASE_ID};
    use proptest::prelude::*;
    use time::macros::datetime;

    use super::*;

    const NOW: OffsetDateTime = datetime!(2026-11-29 12:00:00 UTC);
    const OTHER_RELEASE: &str = "payments-api-1.5.0-0aa11bb";

    fn policy(environments: &[&str], auto_approve: &[&str]) -> ReleasePolicy {
        ReleasePolicy {
            environments: environments.iter().map(|name| (*name).to_owned()).collect(),
            auto_approve: auto_approve.iter().map(|name| (*name).to_owned()).collect(),
            ..ReleasePolicy::default()
        }
    }

    /// dev approves on its own; staging and prod need a person.
    fn three_environments() -> ReleaseSaga {
        ReleaseSaga::new(policy(&["dev", "staging", "prod"], &["dev"]))
    }

    fn build() -> Message {
        samples::build_completed().into()
    }

    fn failed_build(build_id: &str) -> Message {
        let mut build = samples::build_completed();
        build.build_id = build_id.to_owned();
        build.result = PipelineResult::Failed;
        build.test_summary.passed -= 2;
        build.test_summary.failed = 2;
        build.failed_tests = vec![
            "Payments.Api.Tests.RetryPolicyTests.GivesUpAfterThreeAttempts".to_owned(),
            "Payments.Api.Tests.RetryPolicyTests.WaitsWithJitter".to_owned(),
        ];
        build.into()
    }

    fn image() -> Message {
        samples::container_image_built().into()
    }

    fn package() -> Message {
        samples::package_published().into()
    }

    fn approve(environment: &str) -> Message {
        ApproveRelease {
            environment: environment.to_owned(),
            ..samples::approve_release()
        }
        .into()
    }

    fn reject() -> Message {
        samples::reject_release().into()
    }

    fn timeout(environment: &str) -> Message {
        ReleaseApprovalTimeout {
            environment: environment.to_owned(),
            ..samples::release_approval_timeout()
        }
        .into()
    }

    /// The timeout the saga scheduled and waits on.
    fn pending_timeout(state: &ReleaseState) -> Message {
        let pending = state.pending_timeout.as_ref().expect("the saga waits on a timeout");
        pending.message.clone().into()
    }

    fn provisioned(environment: &str) -> Message {
        InfrastructureProvisioned {
            plan_id: format!("{RELEASE_ID}-{environment}"),
            stack: format!("payments/{environment}"),
            environment: environment.to_owned(),
            ..samples::infrastructure_provisioned()
        }
        .into()
    }

    fn synced(environment: &str) -> Message {
        GitOpsSynced {
            environment: environment.to_owned(),
            ..samples::gitops_synced()
        }
        .into()
    }

    /// Applies `messages` at [`NOW`], each on the state the previous one
    /// left, and returns the final state and every action in order.
    fn run(saga: &ReleaseSaga, state: ReleaseState, messages: &[Message]) -> (ReleaseState, Vec<Action>) {
        let mut state = state;
        let mut actions = Vec::new();
        for message in messages {
            let transition = saga.apply_at(&state, message, NOW).unwrap();
            state = transition.state;
            actions.extend(transition.actions);
        }
        (state, actions)
    }

    fn sends(actions: &[Action]) -> Vec<Message> {
        actions
            .iter()
            .filter_map(|action| match action {
                Action::Send(message) => Some(message.clone()),
                Action::Schedule { .. } => None,
            })
            .collect()
    }

    fn types(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .map(|action| match action {
                Action::Send(message) => message.message_type().to_owned(),
                Action::Schedule { message, .. } => format!("schedule {}", message.message_type()),
            })
            .collect()
    }

    fn expected_plan(saga: &ReleaseSaga) -> ReleasePlanned {
        ReleasePlanned {
            environments: saga.policy().planned_environments(),
            planned_at: NOW,
            ..samples::release_planned()
        }
    }

    fn auto_approved(environment: &str) -> Message {
        ReleaseApproved {
            release_id: RELEASE_ID.to_owned(),
            module_id: "payments-api".to_owned(),
            environment: environment.to_owned(),
            approver: AUTO_APPROVER.to_owned(),
            approved_at: NOW,
            auto: true,
            comment: None,
        }
        .into()
    }

    /// The `approvedBy` of the sample approval: the authenticated caller.
    fn approving_key() -> String {
        samples::approve_release().approved_by.unwrap_or_default()
    }

    fn approved_by_alice(environment: &str) -> Message {
        ReleaseApproved {
            environment: environment.to_owned(),
            approved_at: NOW,
            approver: approving_key(),
            ..samples::release_approved()
        }
        .into()
    }

    fn promoted(environment: &str, approved_by: &str) -> Message {
        DeploymentPromoted {
            environment: environment.to_owned(),
            environment_repository: DEFAULT_ENVIRONMENT_REPOSITORY.to_owned(),
            desired_commit_sha: PENDING_DESIRED_COMMIT.to_owned(),
            approved_by: approved_by.to_owned(),
            promoted_at: NOW,
            ..samples::deployment_promoted()
        }
        .into()
    }

    fn approval_timeout_of(environment: &str, after: Duration) -> Action {
        let deadline = NOW + time::Duration::try_from(after).unwrap();
        Action::Schedule {
            message: ReleaseApprovalTimeout {
                release_id: RELEASE_ID.to_owned(),
                environment: environment.to_owned(),
                deadline,
            }
            .into(),
            after,
        }
    }

    /// The state after the build and its artifacts under `saga`.
    fn planned(saga: &ReleaseSaga) -> ReleaseState {
        run(saga, ReleaseState::default(), &[build(), image(), package()]).0
    }

    // --- keys ---------------------------------------------------------

    #[test]
    fn messages_are_keyed_by_release_id() {
        let saga = ReleaseSaga::default();
        for message in [
            build(),
            image(),
            package(),
            approve("prod"),
            reject(),
            timeout("prod"),
            provisioned("prod"),
            synced("prod"),
        ] {
            assert_eq!(
                saga.key_of(&message).as_deref(),
                Some(RELEASE_ID),
                "{}",
                message.message_type()
            );
        }
        let preview = InfrastructureProvisioned {
            preview_only: true,
            ..samples::infrastructure_provisioned()
        };
        let unattributed = GitOpsSynced {
            release_id: None,
            ..samples::gitops_synced()
        };
        for message in [
            Message::from(preview),
            unattributed.into(),
            samples::release_planned().into(),
            samples::release_approved().into(),
            samples::deployment_promoted().into(),
            samples::commit_created().into(),
        ] {
            assert_eq!(saga.key_of(&message), None, "{}", message.message_type());
        }
    }

    // --- collecting and planning --------------------------------------

    #[test]
    fn the_build_alone_plans_nothing_while_required_artifacts_are_missing() {
        let saga = ReleaseSaga::default();
        let (state, actions) = run(&saga, ReleaseState::default(), &[build(), image()]);
        assert_eq!(actions, []);
        assert_eq!(state.phase, ReleasePhase::Collecting);
        assert_eq!(state.release_id.as_deref(), Some(RELEASE_ID));
    }

    #[test]
    fn build_and_artifacts_plan_and_auto_approve_dev() {
        let saga = ReleaseSaga::default();
        let (_, actions) = run(&saga, ReleaseState::default(), &[build(), image(), package()]);
        assert_eq!(
            actions,
            [
                Action::Send(expected_plan(&saga).into()),
                Action::Send(auto_approved("dev")),
            ]
        );
    }

    #[test]
    fn artifacts_may_arrive_before_the_build_and_twice() {
        let saga = ReleaseSaga::default();
        let (state, actions) = run(
            &saga,
            ReleaseState::default(),
            &[package(), image(), package(), image()],
        );
        assert_eq!(actions, []);
        let (_, actions) = run(&saga, state, &[build(), build(), image()]);
        assert_eq!(types(&actions), ["ReleasePlanned", "ReleaseApproved"]);
    }

    #[test]
    fn only_the_artifacts_the_module_declares_are_awaited() {
        let saga = ReleaseSaga::default();
        let mut without_package = samples::build_completed();
        without_package.module.package = None;
        let (_, actions) = run(&saga, ReleaseState::default(), &[without_package.into(), image()]);
        let sent = sends(&actions);
        let Message::ReleasePlanned(plan) = &sent[0] else {
            panic!("expected a plan, got {sent:?}");
        };
        assert_eq!(plan.artifacts.package, None);
        assert!(plan.artifacts.image.is_some());

        let mut without_image = samples::build_completed();
        without_image.module.container = None;
        let (_, actions) = run(&saga, ReleaseState::default(), &[without_image.into(), package()]);
        assert_eq!(types(&actions), ["ReleasePlanned", "ReleaseApproved"]);
    }

    #[test]
    fn artifacts_of_another_build_do_not_complete_the_release() {
        let saga = ReleaseSaga::default();
        let mut other_image = samples::container_image_built();
        other_image.build_id = "build-4712".to_owned();
        let (_, actions) = run(
            &saga,
            ReleaseState::default(),
            &[build(), other_image.into(), package()],
        );
        assert_eq!(actions, []);
    }

    #[test]
    fn a_failed_build_blocks_the_release_with_its_failing_tests() {
        let saga = ReleaseSaga::default();
        let (state, actions) = run(&saga, ReleaseState::default(), &[failed_build(samples::BUILD_ID)]);
        let sent = sends(&actions);
        assert_eq!(sent.len(), 1);
        let Message::ReleaseBlocked(blocked) = &sent[0] else {
            panic!("expected ReleaseBlocked, got {sent:?}");
        };
        assert_eq!(blocked.failing_step, ReleaseStep::Build);
        assert_eq!(blocked.environment, None);
        assert_eq!(blocked.blocked_at, NOW);
        assert!(blocked.reason.contains("build-4711"), "{}", blocked.reason);
        assert!(blocked.reason.contains("2 of 214 tests failed"), "{}", blocked.reason);
        assert!(
            blocked.reason.contains("GivesUpAfterThreeAttempts"),
            "{}",
            blocked.reason
        );
        assert_eq!(Message::from(blocked.clone()).validate(), Ok(()));

        // Its artifacts, the same failure again, approvals: nothing is promoted.
        let (state, actions) = run(
            &saga,
            state,
            &[image(), package(), failed_build(samples::BUILD_ID), provisioned("dev")],
        );
        assert_eq!(actions, []);
        assert_eq!(state.phase, ReleasePhase::Blocked);
    }

    #[test]
    fn a_canceled_build_or_failing_tests_block_too() {
        let saga = ReleaseSaga::default();
        let mut canceled = samples::build_completed();
        canceled.result = PipelineResult::Canceled;
        let (_, actions) = run(&saga, ReleaseState::default(), &[canceled.into()]);
        assert_eq!(types(&actions), ["ReleaseBlocked"]);

        let mut red_tests = samples::build_completed();
        red_tests.test_summary.passed -= 1;
        red_tests.test_summary.failed = 1;
        let (_, actions) = run(&saga, ReleaseState::default(), &[red_tests.into(), image(), package()]);
        assert_eq!(types(&actions), ["ReleaseBlocked"]);
    }

    #[test]
    fn a_successful_re_run_unblocks_the_release() {
        let saga = ReleaseSaga::default();
        let (state, _) = run(&saga, ReleaseState::default(), &[failed_build("build-4710"), image()]);
        let (state, actions) = run(&saga, state, &[build(), package()]);
        assert_eq!(types(&actions), ["ReleasePlanned", "ReleaseApproved"]);
        assert_eq!(state.blocked, None);
        // A failure reported after the good build changes nothing.
        let (_, actions) = run(&saga, state, &[failed_build("build-4712")]);
        assert_eq!(actions, []);
    }

    #[test]
    fn a_module_with_nothing_to_deploy_is_blocked() {
        let saga = ReleaseSaga::default();
        let mut bare = samples::build_completed();
        bare.module.container = None;
        bare.module.package = None;
        let (state, actions) = run(&saga, ReleaseState::default(), &[bare.clone().into()]);
        let sent = sends(&actions);
        assert!(
            matches!(&sent[..], [Message::ReleaseBlocked(blocked)] if blocked.failing_step == ReleaseStep::Promotion),
            "{sent:?}"
        );
        let (_, actions) = run(&saga, state, &[bare.into()]);
        assert_eq!(actions, []);
    }

    #[test]
    fn an_invalid_policy_refuses_to_plan() {
        let saga = ReleaseSaga::new(policy(&[], &[]));
        let (state, _) = run(&saga, ReleaseState::default(), &[build(), image()]);
        let err = saga.apply_at(&state, &package(), NOW).unwrap_err();
        assert!(
            matches!(&err, SagaError::Rejected { message_type, reason }
                if message_type == "PackagePublished" && reason.contains("no environment")),
            "{err}"
        );
    }

    #[test]
    fn policies_are_validated() {
        assert_eq!(ReleasePolicy::default().validate(), Ok(()));
        assert_eq!(policy(&[], &[]).validate(), Err(ReleasePolicyError::NoEnvironments));
        assert_eq!(
            policy(&["dev", "dev"], &[]).validate(),
            Err(ReleasePolicyError::DuplicateEnvironment("dev".into()))
        );
        assert_eq!(
            policy(&["dev", "prod"], &["qa"]).validate(),
            Err(ReleasePolicyError::UnknownAutoApprove("qa".into()))
        );
        assert!(matches!(
            policy(&["Prod"], &[]).validate(),
            Err(ReleasePolicyError::InvalidEnvironment { environment, .. }) if environment == "Prod"
        ));
        let zero = ReleasePolicy {
            approval_timeout: Duration::ZERO,
            ..ReleasePolicy::default()
        };
        assert_eq!(zero.validate(), Err(ReleasePolicyError::ZeroApprovalTimeout));
        let bad_repository = ReleasePolicy {
            environment_repository: "env/repo".into(),
            ..ReleasePolicy::default()
        };
        assert!(matches!(
            bad_repository.validate(),
            Err(ReleasePolicyError::InvalidEnvironmentRepository { .. })
        ));
    }

    // --- approval -----------------------------------------------------

    #[test]
    fn an_environment_needing_a_person_schedules_the_approval_timeout() {
        let saga = ReleaseSaga::new(policy(&["prod"], &[]));
        let (state, actions) = run(&saga, ReleaseState::default(), &[build(), image(), package()]);
        assert_eq!(
            actions,
            [
                Action::Send(expected_plan(&saga).into()),
                approval_timeout_of("prod", DEFAULT_APPROVAL_TIMEOUT),
            ]
        );
        let pending = state.pending_timeout.as_ref().unwrap();
        assert_eq!(pending.due, datetime!(2026-11-30 12:00:00 UTC));
        assert_eq!(pending.message.environment, "prod");
    }

    #[test]
    fn the_approval_timeout_follows_the_policy() {
        let saga = ReleaseSaga::new(ReleasePolicy {
            approval_timeout: Duration::from_secs(30 * 60),
            ..policy(&["prod"], &[])
        });
        let (_, actions) = run(&saga, ReleaseState::default(), &[build(), image(), package()]);
        assert_eq!(actions[1], approval_timeout_of("prod", Duration::from_secs(30 * 60)));
    }

    #[test]
    fn approve_release_emits_release_approved_once() {
        let saga = ReleaseSaga::new(policy(&["prod"], &[]));
        let state = planned(&saga);
        let (state, actions) = run(&saga, state, &[approve("prod")]);
        assert_eq!(actions, [Action::Send(approved_by_alice("prod"))]);
        assert_eq!(state.pending_timeout, None);

        let mut bob = samples::approve_release();
        bob.approved_by = Some("cli:bob".to_owned());
        let (_, actions) = run(&saga, state, &[approve("prod"), bob.into()]);
        assert_eq!(actions, []);
    }

    #[test]
    fn a_timeout_while_waiting_rejects_the_release() {
        let saga = ReleaseSaga::new(policy(&["prod"], &[]));
        let state = planned(&saga);
        let (state, actions) = run(&saga, state.clone(), &[pending_timeout(&state)]);
        let sent = sends(&actions);
        let [Message::ReleaseRejected(rejected)] = &sent[..] else {
            panic!("expected ReleaseRejected, got {sent:?}");
        };
        assert!(rejected.timed_out);
        assert_eq!(rejected.approver, None);
        assert_eq!(rejected.environment.as_deref(), Some("prod"));
        assert_eq!(Message::from(rejected.clone()).validate(), Ok(()));
        assert_eq!(state.phase, ReleasePhase::Rejected);
        assert_eq!(state.pending_timeout, None);

        // Late approval of a rejected release: the operator hears of it.
        let err = saga.apply_at(&state, &approve("prod"), NOW).unwrap_err();
        assert!(matches!(err, SagaError::Rejected { .. }), "{err}");
        // The same timeout again, infrastructure: nothing.
        let (_, actions) = run(&saga, state, &[timeout("prod"), provisioned("prod")]);
        assert_eq!(actions, []);
    }

    #[test]
    fn a_rejection_of_one_environment_applies_only_while_its_approval_is_pending() {
        let saga = three_environments();
        let reject_of = |environment: &str| -> Message {
            RejectRelease {
                environment: Some(environment.to_owned()),
                ..samples::reject_release()
            }
            .into()
        };
        // dev is approved by policy, qa is not on the path.
        for environment in ["dev", "qa"] {
            assert!(
                saga.apply_at(&planned(&saga), &reject_of(environment), NOW).is_err(),
                "{environment}"
            );
        }
        // staging approved: a staging-only approver cannot stop the release
        // on its way to prod any more; prod's approver still can.
        let (state, _) = run(&saga, planned(&saga), &[approve("staging")]);
        assert!(saga.apply_at(&state, &reject_of("staging"), NOW).is_err());
        let (state, actions) = run(&saga, state, &[reject_of("prod")]);
        assert_eq!(types(&actions), ["ReleaseRejected"]);
        assert_eq!(state.phase, ReleasePhase::Rejected);
    }

    #[test]
    fn only_the_timeout_the_saga_waits_on_counts() {
        let saga = ReleaseSaga::new(policy(&["prod"], &[]));
        let state = planned(&saga);
        let Message::ReleaseApprovalTimeout(real) = pending_timeout(&state) else {
            unreachable!()
        };
        // A forged timeout: the right release and environment, a deadline in
        // the past instead of the one scheduled.
        let forged = ReleaseApprovalTimeout {
            deadline: real.deadline - time::Duration::days(2),
            ..real.clone()
        };
        let (after, actions) = run(&saga, state.clone(), &[forged.into()]);
        assert_eq!(actions, []);
        assert_eq!(after, state, "a forged timeout changes nothing");
        assert_eq!(after.phase, ReleasePhase::AwaitingApproval);

        let (after, actions) = run(&saga, after, &[real.into()]);
        assert_eq!(types(&actions), ["ReleaseRejected"]);
        assert_eq!(after.phase, ReleasePhase::Rejected);
    }

    #[test]
    fn the_approver_recorded_is_the_authenticated_caller() {
        let saga = ReleaseSaga::new(policy(&["prod"], &[]));
        let mallory = ApproveRelease {
            approver: Some("mallory".to_owned()),
            approved_by: None,
            ..samples::approve_release()
        };
        let err = saga
            .apply_at(&planned(&saga), &mallory.clone().into(), NOW)
            .unwrap_err();
        assert!(err.to_string().contains("approvedBy"), "{err}");

        let signed = ApproveRelease {
            approved_by: Some("key:0123456789ab (release board)".to_owned()),
            ..mallory
        };
        let (state, actions) = run(&saga, planned(&saga), &[signed.into()]);
        let sent = sends(&actions);
        let Message::ReleaseApproved(approved) = &sent[0] else {
            panic!("expected ReleaseApproved, got {sent:?}");
        };
        assert_eq!(approved.approver, "key:0123456789ab (release board)");
        let record = &state.approvals["prod"];
        assert_eq!(record.approver, "key:0123456789ab (release board)");
        assert_eq!(record.note.as_deref(), Some("mallory"));
        assert!(
            state.history.iter().any(|entry| entry
                .note
                .contains("approved by key:0123456789ab (release board) (as \"mallory\")")),
            "{:?}",
            state.history
        );

        let unsigned = RejectRelease {
            rejected_by: None,
            ..samples::reject_release()
        };
        assert!(saga.apply_at(&planned(&saga), &unsigned.into(), NOW).is_err());
    }

    #[test]
    fn a_timeout_after_the_approval_is_ignored() {
        let saga = ReleaseSaga::new(policy(&["prod"], &[]));
        let (state, _) = run(&saga, planned(&saga), &[approve("prod")]);
        let transition = saga.apply_at(&state, &timeout("prod"), NOW).unwrap();
        assert_eq!(transition.actions, []);
        assert_eq!(transition.state, state);
    }

    #[test]
    fn a_timeout_for_an_environment_not_waited_on_is_ignored() {
        let saga = three_environments();
        let state = planned(&saga);
        let (_, actions) = run(&saga, state, &[timeout("staging"), timeout("prod")]);
        assert_eq!(actions, []);
    }

    #[test]
    fn reject_release_stops_the_release() {
        let saga = ReleaseSaga::new(policy(&["prod"], &[]));
        let (state, actions) = run(&saga, planned(&saga), &[reject()]);
        let expected = ReleaseRejected {
            rejected_at: NOW,
            ..samples::release_rejected()
        };
        assert_eq!(actions, [Action::Send(expected.into())]);
        assert_eq!(state.phase, ReleasePhase::Rejected);
        let (_, actions) = run(&saga, state, &[reject(), timeout("prod"), synced("prod")]);
        assert_eq!(actions, []);
    }

    #[test]
    fn a_release_can_be_rejected_before_it_is_planned_or_while_blocked() {
        let saga = ReleaseSaga::default();
        // A rejection of the whole release (no environment).
        let reject = || -> Message {
            RejectRelease {
                environment: None,
                ..samples::reject_release()
            }
            .into()
        };
        let (state, actions) = run(&saga, ReleaseState::default(), &[reject()]);
        assert_eq!(types(&actions), ["ReleaseRejected"]);
        let (_, actions) = run(&saga, state, &[build(), image(), package()]);
        assert_eq!(actions, []);

        let (state, _) = run(&saga, ReleaseState::default(), &[failed_build("build-1")]);
        let (state, actions) = run(&saga, state, &[reject()]);
        assert_eq!(types(&actions), ["ReleaseRejected"]);
        assert_eq!(state.phase, ReleasePhase::Rejected);
    }

    #[test]
    fn an_approval_before_the_plan_is_used_when_the_plan_is_ready() {
        let saga = ReleaseSaga::new(policy(&["prod"], &[]));
        let (state, actions) = run(&saga, ReleaseState::default(), &[approve("prod")]);
        assert_eq!(actions, []);
        assert!(state.approvals.contains_key("prod"));
        let (_, actions) = run(&saga, state, &[build(), image(), package()]);
        assert_eq!(
            actions,
            [
                Action::Send(expected_plan(&saga).into()),
                Action::Send(approved_by_alice("prod")),
            ]
        );
    }

    #[test]
    fn an_approval_for_an_environment_off_the_path_is_refused() {
        let saga = three_environments();
        let err = saga
            .apply_at(&ReleaseState::default(), &approve("prdo"), NOW)
            .unwrap_err();
        assert!(
            matches!(&err, SagaError::Rejected { message_type, reason }
                if message_type == "ApproveRelease" && reason.contains("prdo") && reason.contains("dev, staging, prod")),
            "{err}"
        );
    }

    #[test]
    fn a_persons_approval_of_an_auto_approved_environment_adds_nothing() {
        let saga = ReleaseSaga::default();
        let (state, actions) = run(&saga, ReleaseState::default(), &[approve("dev")]);
        assert_eq!(actions, []);
        assert_eq!(state, ReleaseState::default());
        let (_, actions) = run(&saga, state, &[build(), image(), package()]);
        assert_eq!(actions[1], Action::Send(auto_approved("dev")));
    }

    // --- promotion and sync -------------------------------------------

    #[test]
    fn infrastructure_after_the_approval_promotes_once() {
        let saga = ReleaseSaga::default();
        let (state, actions) = run(&saga, planned(&saga), &[provisioned("dev")]);
        assert_eq!(actions, [Action::Send(promoted("dev", AUTO_APPROVER))]);
        let sent = sends(&actions);
        assert_eq!(sent[0].validate(), Ok(()));
        let Message::DeploymentPromoted(promotion) = &sent[0] else {
            panic!("expected DeploymentPromoted");
        };
        assert!(desired_commit_pending(promotion));
        let (_, actions) = run(&saga, state, &[provisioned("dev"), image(), approve("dev")]);
        assert_eq!(actions, []);
    }

    #[test]
    fn a_preview_or_another_releases_infrastructure_does_not_promote() {
        let saga = ReleaseSaga::default();
        let preview = InfrastructureProvisioned {
            preview_only: true,
            environment: "dev".to_owned(),
            ..samples::infrastructure_provisioned()
        };
        let other = InfrastructureProvisioned {
            release_id: Some(OTHER_RELEASE.to_owned()),
            environment: "dev".to_owned(),
            ..samples::infrastructure_provisioned()
        };
        let state = planned(&saga);
        let (after, actions) = run(&saga, state.clone(), &[preview.into(), other.into()]);
        assert_eq!(actions, []);
        assert_eq!(after, state);
    }

    #[test]
    fn infrastructure_before_the_approval_promotes_right_after_it() {
        let saga = ReleaseSaga::new(policy(&["prod"], &[]));
        let (state, actions) = run(&saga, planned(&saga), &[provisioned("prod")]);
        assert_eq!(actions, []);
        let (_, actions) = run(&saga, state, &[approve("prod")]);
        assert_eq!(
            actions,
            [
                Action::Send(approved_by_alice("prod")),
                Action::Send(promoted("prod", &approving_key())),
            ]
        );
    }

    #[test]
    fn a_healthy_sync_completes_a_single_environment_release() {
        let saga = ReleaseSaga::default();
        let (state, _) = run(&saga, planned(&saga), &[provisioned("dev")]);
        let (state, actions) = run(&saga, state, &[synced("dev")]);
        assert_eq!(actions, []);
        assert_eq!(state.phase, ReleasePhase::Completed);
        assert!(state.is_finished());
        assert_eq!(state.deployed, ["dev"]);
        assert_eq!(state.current_environment, None);

        // A rejection of a completed release is refused; the rest is ignored.
        let err = saga.apply_at(&state, &reject(), NOW).unwrap_err();
        assert!(err.to_string().contains("already completed"), "{err}");
        let (_, actions) = run(&saga, state, &[synced("dev"), provisioned("dev"), build()]);
        assert_eq!(actions, []);
    }

    #[test]
    fn a_sync_of_the_next_environment_moves_on_along_the_path() {
        let saga = three_environments();
        let (state, actions) = run(&saga, planned(&saga), &[provisioned("dev"), synced("dev")]);
        assert_eq!(
            actions[1..],
            [approval_timeout_of("staging", DEFAULT_APPROVAL_TIMEOUT)],
            "{:?}",
            types(&actions)
        );
        assert_eq!(state.phase, ReleasePhase::AwaitingApproval);
        assert_eq!(state.current_environment.as_deref(), Some("staging"));

        let auto_staging = ReleaseSaga::new(policy(&["dev", "staging"], &["dev", "staging"]));
        let (_, actions) = run(
            &auto_staging,
            planned(&auto_staging),
            &[provisioned("dev"), synced("dev")],
        );
        assert_eq!(actions[1], Action::Send(auto_approved("staging")));
    }

    #[test]
    fn a_sync_reported_early_counts_once_promoted() {
        let saga = ReleaseSaga::default();
        let (state, actions) = run(&saga, planned(&saga), &[synced("dev")]);
        assert_eq!(actions, []);
        assert_eq!(state.phase, ReleasePhase::Provisioning);
        let (state, actions) = run(&saga, state, &[provisioned("dev")]);
        assert_eq!(types(&actions), ["DeploymentPromoted"]);
        assert_eq!(state.phase, ReleasePhase::Completed);
    }

    #[test]
    fn an_unhealthy_sync_blocks_once_until_a_healthy_one() {
        let saga = ReleaseSaga::default();
        let unhealthy = GitOpsSynced {
            healthy: false,
            environment: "dev".to_owned(),
            ..samples::gitops_synced()
        };
        let (state, actions) = run(
            &saga,
            planned(&saga),
            &[provisioned("dev"), unhealthy.clone().into(), unhealthy.into()],
        );
        let sent = sends(&actions);
        assert!(
            matches!(&sent[1..], [Message::ReleaseBlocked(blocked)]
                if blocked.failing_step == ReleaseStep::Sync && blocked.environment.as_deref() == Some("dev")),
            "{sent:?}"
        );
        assert_eq!(state.phase, ReleasePhase::Syncing);
        let (state, actions) = run(&saga, state, &[synced("dev")]);
        assert_eq!(actions, []);
        assert_eq!(state.phase, ReleasePhase::Completed);
        assert_eq!(state.blocked, None);
    }

    #[test]
    fn messages_of_another_release_change_nothing() {
        let saga = ReleaseSaga::default();
        let state = planned(&saga);
        let other_build = BuildCompleted {
            release_id: OTHER_RELEASE.to_owned(),
            ..samples::build_completed()
        };
        let other_approval = ApproveRelease {
            release_id: OTHER_RELEASE.to_owned(),
            ..samples::approve_release()
        };
        let other_reject = RejectRelease {
            release_id: OTHER_RELEASE.to_owned(),
            ..samples::reject_release()
        };
        let other_sync = GitOpsSynced {
            release_id: Some(OTHER_RELEASE.to_owned()),
            environment: "dev".to_owned(),
            ..samples::gitops_synced()
        };
        for message in [
            Message::from(other_build),
            other_approval.into(),
            other_reject.into(),
            other_sync.into(),
            samples::commit_created().into(),
        ] {
            let transition = saga.apply_at(&state, &message, NOW).unwrap();
            assert_eq!(transition.actions, [], "{}", message.message_type());
            assert_eq!(transition.state, state, "{}", message.message_type());
        }
    }

    #[test]
    fn the_whole_path_through_three_environments() {
        let saga = three_environments();
        let (state, actions) = run(
            &saga,
            ReleaseState::default(),
            &[
                build(),
                image(),
                package(),
                provisioned("dev"),
                synced("dev"),
                approve("staging"),
                provisioned("staging"),
                synced("staging"),
                approve("prod"),
                provisioned("prod"),
                synced("prod"),
            ],
        );
        assert_eq!(
            types(&actions),
            [
                "ReleasePlanned",
                "ReleaseApproved",
                "DeploymentPromoted",
                "schedule ReleaseApprovalTimeout",
                "ReleaseApproved",
                "DeploymentPromoted",
                "schedule ReleaseApprovalTimeout",
                "ReleaseApproved",
                "DeploymentPromoted",
            ]
        );
        for message in sends(&actions) {
            assert_eq!(message.validate(), Ok(()), "{}", message.message_type());
        }
        assert_eq!(state.phase, ReleasePhase::Completed);
        assert_eq!(state.deployed, ["dev", "staging", "prod"]);
        assert_eq!(state.pending_timeout, None);
        let steps: Vec<_> = state.emitted.iter().map(String::as_str).collect();
        assert_eq!(
            steps,
            [
                "DeploymentPromoted/dev",
                "DeploymentPromoted/prod",
                "DeploymentPromoted/staging",
                "ReleaseApproved/dev",
                "ReleaseApproved/prod",
                "ReleaseApproved/staging",
                "ReleasePlanned",
            ]
        );
        assert_eq!(state.history.len(), 11);
        assert!(state.history.iter().all(|entry| entry.at == NOW));
        assert_eq!(state.history[2].emitted, ["ReleasePlanned", "ReleaseApproved"]);
    }

    // --- time, persistence, diagram -----------------------------------

    #[test]
    fn apply_stamps_messages_with_the_time_they_carry() {
        let saga = ReleaseSaga::new(policy(&["prod"], &[]));
        let mut state = ReleaseState::default();
        let mut actions = Vec::new();
        for message in [build(), package(), image(), approve("prod")] {
            let transition = saga.apply(&state, &message).unwrap();
            state = transition.state;
            actions.extend(transition.actions);
        }
        let pushed_at = samples::container_image_built().pushed_at;
        let sent = sends(&actions);
        let [Message::ReleasePlanned(plan), Message::ReleaseApproved(approved)] = &sent[..] else {
            panic!("unexpected {sent:?}");
        };
        assert_eq!(plan.planned_at, pushed_at);
        // ApproveRelease carries no time: the last step's time stands in.
        assert_eq!(approved.approved_at, pushed_at);
        assert_eq!(
            ReleaseSaga::time_of(&ReleaseState::default(), &reject()),
            OffsetDateTime::UNIX_EPOCH
        );
    }

    #[test]
    fn the_state_round_trips_through_json() {
        let saga = three_environments();
        let (state, _) = run(
            &saga,
            ReleaseState::default(),
            &[build(), image(), package(), provisioned("dev")],
        );
        let json = serde_json::to_value(&state).unwrap();
        assert_eq!(json["phase"], "syncing");
        assert_eq!(json["releaseId"], RELEASE_ID);
        assert_eq!(json["history"][0]["messageType"], "BuildCompleted");
        let back: ReleaseState = serde_json::from_value(json).unwrap();
        assert_eq!(back, state);
        let empty: ReleaseState = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(empty, ReleaseState::default());
    }

    #[test]
    fn the_diagram_is_drawn_from_the_transitions() {
        let saga = three_environments();
        let diagram = saga.diagram();
        assert!(diagram.starts_with("stateDiagram-v2\n"), "{diagram}");
        assert!(diagram.contains("    [*] --> Collecting\n"), "{diagram}");
        for phase in ReleasePhase::ALL {
            assert!(diagram.contains(&format!("    {} : ", phase.name())), "{phase}");
        }
        for edge in TRANSITIONS {
            let line = format!("    {} --> {} : {}\n", edge.from.name(), edge.to.name(), edge.trigger);
            assert!(diagram.contains(&line), "{line}");
            assert!(
                !edge.trigger.contains(':') && !edge.trigger.contains(';'),
                "{}",
                edge.trigger
            );
        }
        assert!(diagram.contains("    Completed --> [*]\n"));
        assert!(diagram.contains("    Rejected --> [*]\n"));
        assert!(diagram.contains("promotion path dev then staging then prod"));
    }

    #[test]
    fn every_phase_is_reachable_and_only_final_phases_are_dead_ends() {
        let mut reached = BTreeSet::from([ReleasePhase::Collecting]);
        loop {
            let before = reached.len();
            for edge in TRANSITIONS {
                if reached.contains(&edge.from) {
                    reached.insert(edge.to);
                }
            }
            if reached.len() == before {
                break;
            }
        }
        assert_eq!(reached.len(), ReleasePhase::ALL.len());
        for phase in ReleasePhase::ALL {
            let leaves = TRANSITIONS.iter().any(|edge| edge.from == phase && edge.to != phase);
            assert_eq!(leaves, !phase.is_final(), "{phase}");
        }
    }

    // --- properties ---------------------------------------------------

    /// What one action sends for which step: a step must never repeat.
    fn step_of(action: &Action) -> String {
        let (prefix, message) = match action {
            Action::Send(message) => ("send", message),
            Action::Schedule { message, .. } => ("schedule", message),
        };
        let environment = match message {
            Message::ReleaseApproved(m) => m.environment.clone(),
            Message::DeploymentPromoted(m) => m.environment.clone(),
            Message::ReleaseApprovalTimeout(m) => m.environment.clone(),
            Message::ReleaseBlocked(m) => format!("{:?}/{:?}", m.failing_step, m.environment),
            _ => String::new(),
        };
        format!("{prefix} {} {environment}", message.message_type())
    }

    /// Governance and no-duplicate checks over every action of a run.
    fn assert_safe(actions: &[Action]) {
        let mut approved = BTreeSet::new();
        let mut steps = BTreeSet::new();
        let mut stopped = false;
        for action in actions {
            assert!(steps.insert(step_of(action)), "emitted twice: {}", step_of(action));
            if let Action::Send(message) = action {
                assert!(!stopped, "{} sent after the release stopped", message.message_type());
                match message {
                    Message::ReleaseApproved(m) => {
                        approved.insert(m.environment.clone());
                    }
                    Message::DeploymentPromoted(m) => {
                        assert!(
                            approved.contains(&m.environment),
                            "promoted {} unapproved",
                            m.environment
                        );
                    }
                    Message::ReleaseRejected(_) => stopped = true,
                    _ => {}
                }
                assert_eq!(message.validate(), Ok(()), "{}", message.message_type());
            }
        }
    }

    /// Applies messages as the runtime would to the saga of [`RELEASE_ID`]:
    /// messages keyed to another saga go there, the state is persisted as
    /// JSON between messages, and a refused message leaves it as it was.
    fn run_persisted(saga: &ReleaseSaga, messages: &[Message]) -> (ReleaseState, Vec<Action>) {
        let mut stored = serde_json::to_value(ReleaseState::default()).unwrap();
        let mut actions = Vec::new();
        for message in messages {
            if saga.key_of(message).as_deref() != Some(RELEASE_ID) {
                continue;
            }
            let state: ReleaseState = serde_json::from_value(stored.clone()).unwrap();
            match saga.apply_at(&state, message, NOW) {
                Ok(transition) => {
                    stored = serde_json::to_value(&transition.state).unwrap();
                    actions.extend(transition.actions);
                }
                Err(SagaError::Rejected { message_type, .. }) => {
                    assert!(
                        matches!(message_type.as_str(), "ApproveRelease" | "RejectRelease"),
                        "{message_type} refused"
                    );
                }
                Err(err) => panic!("{err}"),
            }
        }
        (serde_json::from_value(stored).unwrap(), actions)
    }

    /// Everything of a state but its history (the order of arrival).
    fn without_history(state: &ReleaseState) -> ReleaseState {
        ReleaseState {
            history: Vec::new(),
            ..state.clone()
        }
    }

    fn happy_inputs() -> Vec<Message> {
        vec![
            build(),
            image(),
            package(),
            approve("staging"),
            approve("prod"),
            provisioned("dev"),
            provisioned("staging"),
            provisioned("prod"),
            synced("dev"),
            synced("staging"),
            synced("prod"),
        ]
    }

    fn disruptive_inputs() -> Vec<Message> {
        let mut inputs = happy_inputs();
        inputs.extend([
            failed_build("build-4710"),
            timeout("staging"),
            timeout("prod"),
            reject(),
            approve("prdo"),
            GitOpsSynced {
                healthy: false,
                environment: "staging".to_owned(),
                ..samples::gitops_synced()
            }
            .into(),
            BuildCompleted {
                release_id: OTHER_RELEASE.to_owned(),
                ..samples::build_completed()
            }
            .into(),
            samples::release_approved().into(),
        ]);
        inputs
    }

    /// Every input at least once, some more than once, in any order.
    fn deliveries(count: usize) -> impl Strategy<Value = Vec<usize>> {
        prop::collection::vec(0..count, 0..count * 2).prop_flat_map(move |extra| {
            let mut all: Vec<usize> = (0..count).collect();
            all.extend(extra);
            Just(all).prop_shuffle()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn any_order_and_duplication_reach_the_same_completed_release(order in deliveries(happy_inputs().len())) {
            let saga = three_environments();
            let inputs = happy_inputs();
            let (expected, _) = run_persisted(&saga, &inputs);
            prop_assert_eq!(expected.phase, ReleasePhase::Completed);

            let delivered: Vec<Message> = order.iter().map(|&index| inputs[index].clone()).collect();
            let (state, actions) = run_persisted(&saga, &delivered);
            assert_safe(&actions);
            prop_assert_eq!(without_history(&state), without_history(&expected));
            let promotions = sends(&actions)
                .iter()
                .filter(|message| matches!(message, Message::DeploymentPromoted(_)))
                .count();
            prop_assert_eq!(promotions, 3);
        }

        #[test]
        fn rejections_failures_and_timeouts_never_break_governance(order in deliveries(disruptive_inputs().len())) {
            let saga = three_environments();
            let inputs = disruptive_inputs();
            let delivered: Vec<Message> = order.iter().map(|&index| inputs[index].clone()).collect();
            let (state, actions) = run_persisted(&saga, &delivered);
            assert_safe(&actions);
            // The rejection is always delivered, and only a completed release
            // refuses it.
            prop_assert!(matches!(state.phase, ReleasePhase::Rejected | ReleasePhase::Completed), "{:?}", state.phase);
            for environment in &state.deployed {
                prop_assert!(state.approvals.contains_key(environment));
            }
        }
    }
}
