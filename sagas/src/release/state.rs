//! What a release saga keeps: [`ReleaseState`] and its records, and the
//! keys of the steps it emitted.

use std::collections::{BTreeMap, BTreeSet};

use bosun_contracts::messages::{
    BuildArtifact, BuildCompleted, ImageArtifact, PackageArtifact, PlannedEnvironment, ReleaseApprovalTimeout,
    ReleaseBlocked, ReleasePlanned, ReleaseRejected, ReleaseVerificationCheck,
};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::{CheckOutcome, ReleasePhase, ReleasePolicy, Rule, WindowRule};

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
    pub(super) fn of(build: &BuildCompleted) -> Self {
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

    pub(super) fn artifact(&self) -> BuildArtifact {
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
    /// [`AUTO_APPROVER`](super::AUTO_APPROVER) for the policy.
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
    /// The identities the approver answers to (`approverIdentities` of
    /// the command: the key and its sponsor); empty in records written
    /// before they were kept, where `approver` alone names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub identities: Vec<String>,
    /// Everyone whose approval counted, in order, where the policy required
    /// more than one (kept on the record that completed the approval).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
}

impl ApprovalRecord {
    /// The identities this approval answers to: its `identities`, else the
    /// identity its approver names (`key:<id>` of `key:<id> (<description>)`).
    pub fn who(&self) -> Vec<String> {
        if self.identities.is_empty() {
            let identity = self.approver.split(" (").next().unwrap_or(&self.approver);
            vec![identity.to_owned()]
        } else {
            self.identities.clone()
        }
    }

    /// Whether this approval and `other` are one person's (they share an
    /// identity).
    pub fn same_person(&self, other: &ApprovalRecord) -> bool {
        let theirs = other.who();
        self.who().iter().any(|identity| theirs.contains(identity))
    }
}

/// An approval the policy refused: who, which rule, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RefusedApproval {
    /// The environment it was for.
    pub environment: String,
    /// Who sent it (the authenticated caller).
    pub approver: String,
    /// The rule not satisfied.
    pub rule: Rule,
    /// What the rule found.
    pub reason: String,
    /// The approval policy version in force, if a stored one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u64>,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// The approval an environment waits for: how many are required, who
/// approved so far and how many more are needed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalProgress {
    /// The environment.
    pub environment: String,
    /// Distinct approvals required.
    pub required: u32,
    /// Who approved so far (counted approvals, in order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approved_by: Vec<String>,
    /// How many more approvals are needed.
    pub still_needed: u32,
    /// The groups an approver must belong to (empty: anyone with the right).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approver_groups: Vec<String>,
    /// The pattern the approval's comment must match, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment_pattern: Option<String>,
    /// Who may not approve: the release's requester identities.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<String>,
    /// The approval policy version in force, if a stored one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u64>,
}

/// A promotion waiting for a promotion window to open or a hold to be
/// lifted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowWait {
    /// The environment whose promotion waits.
    pub environment: String,
    /// What keeps it waiting.
    pub rule: WindowRule,
    /// The window that does (none for a hold).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// For a person: what keeps it waiting and until when.
    pub reason: String,
    /// When the gate opens, as far as the policy says (none: a hold with no
    /// end, or no opening within 400 days).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub until: Option<OffsetDateTime>,
    /// Since when it waits.
    #[serde(with = "time::serde::rfc3339")]
    pub since: OffsetDateTime,
    /// When the saga looks again (its `ReleaseWindowCheck` is due).
    #[serde(with = "time::serde::rfc3339")]
    pub check_at: OffsetDateTime,
    /// The policy version in force, if a stored one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u64>,
}

/// An override of one environment's promotion windows and holds for this
/// release: who, why, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowOverride {
    /// Who overrode (the authenticated caller).
    pub by: String,
    /// The identities they answer to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub identities: Vec<String>,
    /// The free-text name the sender gave, when it adds something.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Why.
    pub reason: String,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// A verification running in one environment: samples taken, passes per
/// check, failures, and the sample the saga waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerificationRun {
    /// The environment.
    pub environment: String,
    /// When it started (the healthy sync).
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When the soak time is over.
    #[serde(with = "time::serde::rfc3339")]
    pub soak_until: OffsetDateTime,
    /// The sample the saga waits for (its `ReleaseVerificationCheck`).
    pub attempt: u32,
    /// When that sample is due.
    #[serde(with = "time::serde::rfc3339")]
    pub check_at: OffsetDateTime,
    /// Samples taken so far.
    pub samples: u32,
    /// Passing samples, by check.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub passes: BTreeMap<String, u32>,
    /// Failed samples so far (of any check).
    pub failures: u32,
    /// The outcomes of the last sample.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last: Vec<CheckOutcome>,
    /// The policy version in force when it started, if a stored one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u64>,
}

/// A release verified in one environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifiedRecord {
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// What was verified (`healthy sync`, `soak 600s; 3 checks; 20 samples`).
    pub summary: String,
}

/// A verification that failed, and what became of the rollback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerificationFailure {
    /// The environment.
    pub environment: String,
    /// What failed.
    pub reason: String,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// The outcomes of the sample that failed it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outcomes: Vec<CheckOutcome>,
    /// Whether the policy rolls the environment back.
    pub roll_back: bool,
    /// Whether the rollback was asked of the environment (false while it
    /// waits for a promotion window, or when the policy does not roll back).
    #[serde(default)]
    pub rollback_requested: bool,
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
    /// Approvals by environment: the policy's and people's, each the record
    /// that completed the environment's approval (with every counted
    /// approver in `approvers` where the policy required more than one).
    /// States written before approval policies may also hold one given
    /// ahead of time here; it is used when the release gets there.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub approvals: BTreeMap<String, ApprovalRecord>,
    /// Who requested the release: the identities of the principals that
    /// fired the deliveries that brought it its build and artifacts (a
    /// re-run too), and of their keys' sponsors, none of whom may approve
    /// it. Empty when not known (a release planned before bosun recorded
    /// requesters).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requested_by: Vec<String>,
    /// Approvals that satisfied the policy and count towards an
    /// environment not approved yet (given ahead of time, or fewer than it
    /// requires), by environment.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub approvals_given: BTreeMap<String, Vec<ApprovalRecord>>,
    /// Approvals the policy refused, oldest first (the last
    /// [`MAX_REFUSALS_KEPT`](super::MAX_REFUSALS_KEPT)).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused_approvals: Vec<RefusedApproval>,
    /// While the release waits for a person: what it waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<ApprovalProgress>,
    /// Infrastructure provisioned, by environment.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub infrastructure: BTreeMap<String, InfrastructureRecord>,
    /// While the promotion of the current environment waits for a window
    /// or a hold: what it waits for and until when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_wait: Option<WindowWait>,
    /// Overrides of promotion windows and holds, by environment.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, WindowOverride>,
    /// GitOps sync reports, by environment.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub syncs: BTreeMap<String, SyncRecord>,
    /// While the release verifies in the current environment (synced
    /// healthy, its soak time and checks running): how far it got.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verifying: Option<VerificationRun>,
    /// While the release verifies again in an environment rolled back to
    /// it (whatever its phase): how far it got.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverifying: Option<VerificationRun>,
    /// Environments the release passed verification in.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub verified: BTreeMap<String, VerifiedRecord>,
    /// The verification that failed, if one did: the release is blocked
    /// and never promoted further.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification_failed: Option<VerificationFailure>,
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

/// Version 1: the state as it was when states were first versioned (and as
/// states saved before then read). See [`crate::versioned`] for when to
/// bump it.
impl crate::versioned::VersionedState for ReleaseState {
    const KIND: crate::SagaKind = crate::SagaKind::Release;
    const VERSION: u32 = 1;
    const UPCASTS: &'static [crate::versioned::Upcast] = &[];
}

impl VerificationRun {
    /// Whether `check` is the sample this run waits for: its environment
    /// and attempt, scheduled no earlier than the run started (a late
    /// sample of an earlier run never counts for a later one).
    pub fn awaits(&self, check: &ReleaseVerificationCheck) -> bool {
        self.environment == check.environment && self.attempt == check.attempt && check.check_at >= self.started_at
    }
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
    pub(super) fn path(&self, policy: &ReleasePolicy) -> Vec<PlannedEnvironment> {
        match &self.plan {
            Some(plan) => plan.environments.clone(),
            None => policy.planned_environments(),
        }
    }
}

/// The step keys of [`ReleaseState::emitted`].
pub(super) mod step {
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

    pub fn verified(environment: &str) -> String {
        format!("ReleaseVerified/{environment}")
    }

    pub fn rollback(environment: &str, commit: &str) -> String {
        format!("RollbackEnvironment/{environment}/{commit}")
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
