//! Releases (consumer `release-orchestration`, the release saga keyed by
//! `releaseId`): the plan, the approval commands and their outcomes, a
//! blocked release, and the promotion of a release into an environment.
//!
//! Governance: the saga never emits `DeploymentPromoted` for an environment
//! without a recorded `ReleaseApproved` for it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::artifacts::{ImageArtifact, PackageArtifact};
use crate::schema_rules as rule;
use crate::validate::{self, FieldError, Validate};

/// Longest approval comment, rejection or block reason.
pub const MAX_REASON_CHARS: usize = 4000;
/// Longest approver identity.
pub const MAX_APPROVER_CHARS: usize = 256;

/// The build a release ships.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildArtifact {
    /// Id of the build record.
    #[schemars(transform = rule::identifier)]
    pub build_id: String,
    /// The pipeline run it came from.
    #[schemars(transform = rule::identifier)]
    pub pipeline_run_id: String,
    /// Repository name.
    #[schemars(transform = rule::repository_name)]
    pub repository: String,
    /// Commit built.
    #[schemars(transform = rule::git_sha)]
    pub commit_sha: String,
}

impl Validate for BuildArtifact {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("buildId", &self.build_id)?;
        validate::identifier("pipelineRunId", &self.pipeline_run_id)?;
        validate::repository_name("repository", &self.repository)?;
        validate::git_sha("commitSha", &self.commit_sha)
    }
}

/// Everything a release ships: the build, and the image and package made
/// from it when the module has them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseArtifacts {
    /// The build.
    pub build: BuildArtifact,
    /// The container image, pinned by digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageArtifact>,
    /// The NuGet package.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<PackageArtifact>,
}

impl Validate for ReleaseArtifacts {
    fn validate(&self) -> Result<(), FieldError> {
        self.build.validate().map_err(|err| validate::nested("build", err))?;
        if let Some(image) = &self.image {
            image.validate().map_err(|err| validate::nested("image", err))?;
        }
        if let Some(package) = &self.package {
            package.validate().map_err(|err| validate::nested("package", err))?;
        }
        Ok(())
    }
}

/// One environment on a release's promotion path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlannedEnvironment {
    /// Environment name, e.g. `staging`.
    #[schemars(transform = rule::environment_name)]
    pub environment: String,
    /// Whether a person must approve (`ApproveRelease`); otherwise the saga
    /// approves on its own (`ReleaseApproved` with `auto`).
    pub requires_approval: bool,
}

/// A release is planned: its artifacts are ready and its promotion path is
/// set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleasePlanned {
    /// The release (the saga's key).
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The module released.
    #[schemars(transform = rule::identifier)]
    pub module_id: String,
    /// The module version released (semantic version).
    #[schemars(transform = rule::semantic_version)]
    pub version: String,
    /// Environments to promote through, in order.
    #[schemars(transform = rule::non_empty_list, transform = rule::also_checked("each `environment` at most once"))]
    pub environments: Vec<PlannedEnvironment>,
    /// What the release ships.
    pub artifacts: ReleaseArtifacts,
    /// When the plan was made.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub planned_at: OffsetDateTime,
}

impl Validate for ReleasePlanned {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("releaseId", &self.release_id)?;
        validate::identifier("moduleId", &self.module_id)?;
        validate::semantic_version("version", &self.version)?;
        validate::non_empty_list("environments", &self.environments)?;
        for (index, planned) in self.environments.iter().enumerate() {
            validate::environment_name(&format!("environments[{index}].environment"), &planned.environment)?;
        }
        validate::unique("environments", self.environments.iter().map(|e| e.environment.as_str()))?;
        self.artifacts
            .validate()
            .map_err(|err| validate::nested("artifacts", err))
    }
}

/// A person approves a release for one environment.
///
/// Approving is an authority (scope `releases:approve`): the approver the
/// release records is `approvedBy`, which bosun's front door (HTTP API, MCP,
/// `bosun send`) sets to the authenticated caller, replacing whatever the
/// sender wrote there. `onBehalfOf` is free text the sender may add (the
/// person an agent acts for, a ticket), kept only as a note.
///
/// Version 2 renamed version 1's `approver` to `onBehalfOf`; a version 1
/// payload is read through [`crate::versions`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApproveRelease {
    /// The release.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The environment approved.
    #[schemars(transform = rule::environment_name)]
    pub environment: String,
    /// The person the sender acts for, as the sender names them (kept as a
    /// note, never as the approver). `approver` in version 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_APPROVER_CHARS))]
    pub on_behalf_of: Option<String>,
    /// Why, or any note for the audit trail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::max_chars(MAX_REASON_CHARS))]
    pub comment: Option<String>,
    /// The authenticated caller (`key:<id> (<description>)` or
    /// `cli:<operator>`), set by bosun's front door.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_APPROVER_CHARS))]
    pub approved_by: Option<String>,
    /// The identities the authenticated caller answers to, set by bosun's
    /// front door with `approvedBy`: `key:<id>` and the key's sponsor (who
    /// made the key, e.g. `cli:alice`) for an API key, `cli:<operator>`
    /// for the command line. An approval policy matches them against its
    /// groups and against who requested the release. Absent in approvals
    /// written before they were carried (then `approvedBy` alone counts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = rule::each(rule::text(MAX_APPROVER_CHARS)), transform = rule::unique)]
    pub approver_identities: Vec<String>,
}

/// The most identities an approval carries (`approverIdentities`) or a
/// `ReleaseApproved` names (`approvers`).
pub const MAX_APPROVERS: usize = 32;

/// Checks a list of identities: each a short text, none twice, at most
/// [`MAX_APPROVERS`].
pub(super) fn validate_identities(field: &str, identities: &[String]) -> Result<(), FieldError> {
    if identities.len() > MAX_APPROVERS {
        return Err(FieldError::new(
            field,
            format!(
                "names {} identities; at most {MAX_APPROVERS} are allowed",
                identities.len()
            ),
        ));
    }
    for (index, identity) in identities.iter().enumerate() {
        validate::text(&format!("{field}[{index}]"), identity, MAX_APPROVER_CHARS)?;
    }
    validate::unique(field, identities.iter().map(String::as_str))
}

impl Validate for ApproveRelease {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("releaseId", &self.release_id)?;
        validate::environment_name("environment", &self.environment)?;
        if let Some(on_behalf_of) = &self.on_behalf_of {
            validate::text("onBehalfOf", on_behalf_of, MAX_APPROVER_CHARS)?;
        }
        if let Some(comment) = &self.comment {
            validate::max_chars("comment", comment, MAX_REASON_CHARS)?;
        }
        if let Some(approved_by) = &self.approved_by {
            validate::text("approvedBy", approved_by, MAX_APPROVER_CHARS)?;
        }
        validate_identities("approverIdentities", &self.approver_identities)
    }
}

/// A person rejects a release; the release stops.
///
/// Rejecting is the same authority as approving (scope
/// `releases:approve`); `rejectedBy` is set by the front door as
/// `approvedBy` is on [`ApproveRelease`]. Version 2 renamed version 1's
/// `approver` to `onBehalfOf`, as on [`ApproveRelease`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RejectRelease {
    /// The release.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The environment whose approval is refused, when the rejection is
    /// about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::environment_name)]
    pub environment: Option<String>,
    /// The person the sender acts for, as the sender names them (kept as a
    /// note, never as who rejected). `approver` in version 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_APPROVER_CHARS))]
    pub on_behalf_of: Option<String>,
    /// Why.
    #[schemars(transform = rule::text(MAX_REASON_CHARS))]
    pub reason: String,
    /// The authenticated caller, set by bosun's front door.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_APPROVER_CHARS))]
    pub rejected_by: Option<String>,
}

impl Validate for RejectRelease {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("releaseId", &self.release_id)?;
        if let Some(environment) = &self.environment {
            validate::environment_name("environment", environment)?;
        }
        if let Some(on_behalf_of) = &self.on_behalf_of {
            validate::text("onBehalfOf", on_behalf_of, MAX_APPROVER_CHARS)?;
        }
        if let Some(rejected_by) = &self.rejected_by {
            validate::text("rejectedBy", rejected_by, MAX_APPROVER_CHARS)?;
        }
        validate::text("reason", &self.reason, MAX_REASON_CHARS)
    }
}

/// The release saga's own scheduled reminder: the approval of an
/// environment was not given by `deadline`. Ignored when a decision was
/// recorded meanwhile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseApprovalTimeout {
    /// The release.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The environment awaiting approval.
    #[schemars(transform = rule::environment_name)]
    pub environment: String,
    /// When the approval was due.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub deadline: OffsetDateTime,
}

impl Validate for ReleaseApprovalTimeout {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("releaseId", &self.release_id)?;
        validate::environment_name("environment", &self.environment)
    }
}

/// The release saga's own scheduled look at a promotion window or hold:
/// the promotion of `environment` waited for it, and it may be open by
/// `checkAt`. Ignored when the release is no longer waiting there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseWindowCheck {
    /// The release.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The environment whose promotion waits.
    #[schemars(transform = rule::environment_name)]
    pub environment: String,
    /// When the gate was expected to open (or to be looked at again).
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub check_at: OffsetDateTime,
}

impl Validate for ReleaseWindowCheck {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("releaseId", &self.release_id)?;
        validate::environment_name("environment", &self.environment)
    }
}

/// Someone holding `releases:override` lets one release be promoted to
/// one environment through a closed promotion window or a hold, with a
/// reason; recorded on the release.
///
/// `overriddenBy` and `overriderIdentities` are set by bosun's front door,
/// as `approvedBy` is on [`ApproveRelease`]; who requested the release
/// cannot override its windows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverrideReleaseWindow {
    /// The release.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The environment it may be promoted to now.
    #[schemars(transform = rule::environment_name)]
    pub environment: String,
    /// Why (an incident, a change ticket).
    #[schemars(transform = rule::text(MAX_REASON_CHARS))]
    pub reason: String,
    /// The person the sender acts for, as the sender names them (kept as a
    /// note, never as who overrode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_APPROVER_CHARS))]
    pub on_behalf_of: Option<String>,
    /// The authenticated caller, set by bosun's front door.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_APPROVER_CHARS))]
    pub overridden_by: Option<String>,
    /// The identities the caller answers to, set by bosun's front door
    /// with `overriddenBy`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = rule::each(rule::text(MAX_APPROVER_CHARS)), transform = rule::unique)]
    pub overrider_identities: Vec<String>,
}

impl Validate for OverrideReleaseWindow {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("releaseId", &self.release_id)?;
        validate::environment_name("environment", &self.environment)?;
        validate::text("reason", &self.reason, MAX_REASON_CHARS)?;
        if let Some(on_behalf_of) = &self.on_behalf_of {
            validate::text("onBehalfOf", on_behalf_of, MAX_APPROVER_CHARS)?;
        }
        if let Some(overridden_by) = &self.overridden_by {
            validate::text("overriddenBy", overridden_by, MAX_APPROVER_CHARS)?;
        }
        validate_identities("overriderIdentities", &self.overrider_identities)
    }
}

/// A release is approved for one environment (the governance record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseApproved {
    /// The release.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The module released (infrastructure provisioning picks its stack by
    /// module and environment).
    #[schemars(transform = rule::identifier)]
    pub module_id: String,
    /// The environment approved.
    #[schemars(transform = rule::environment_name)]
    pub environment: String,
    /// Who approved; `bosun` for automatic approvals.
    #[schemars(transform = rule::text(MAX_APPROVER_CHARS))]
    pub approver: String,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub approved_at: OffsetDateTime,
    /// `true` when the environment needs no manual approval and the saga
    /// approved on its own.
    #[serde(default)]
    pub auto: bool,
    /// The approver's comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::max_chars(MAX_REASON_CHARS))]
    pub comment: Option<String>,
    /// The repository the release was built from (the plan's
    /// `artifacts.build.repository`): infrastructure provisioning takes
    /// the module's Pulumi program from it. Absent in approvals written
    /// before it was carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::repository_name)]
    pub repository: Option<String>,
    /// The commit the release was built from (the plan's
    /// `artifacts.build.commitSha`): the Pulumi program is taken at this
    /// commit. Absent in approvals written before it was carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::git_sha)]
    pub commit_sha: Option<String>,
    /// Everyone whose approval counted, in the order given, when the
    /// environment's policy required more than one (`approver` is the
    /// last of them). Empty for a single approval.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = rule::each(rule::text(MAX_APPROVER_CHARS)), transform = rule::unique)]
    pub approvers: Vec<String>,
}

impl Validate for ReleaseApproved {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("releaseId", &self.release_id)?;
        validate::identifier("moduleId", &self.module_id)?;
        validate::environment_name("environment", &self.environment)?;
        validate::text("approver", &self.approver, MAX_APPROVER_CHARS)?;
        if let Some(comment) = &self.comment {
            validate::max_chars("comment", comment, MAX_REASON_CHARS)?;
        }
        if let Some(repository) = &self.repository {
            validate::repository_name("repository", repository)?;
        }
        if let Some(commit_sha) = &self.commit_sha {
            validate::git_sha("commitSha", commit_sha)?;
        }
        validate_identities("approvers", &self.approvers)
    }
}

/// A release was rejected by a person, or its approval timed out. The
/// release stops.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = rule::approver_unless_timed_out)]
pub struct ReleaseRejected {
    /// The release.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The environment whose approval was refused or timed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::environment_name)]
    pub environment: Option<String>,
    /// Who rejected; absent when the approval timed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_APPROVER_CHARS))]
    pub approver: Option<String>,
    /// Why.
    #[schemars(transform = rule::text(MAX_REASON_CHARS))]
    pub reason: String,
    /// `true` when no decision came before the deadline.
    #[serde(default)]
    pub timed_out: bool,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub rejected_at: OffsetDateTime,
}

impl Validate for ReleaseRejected {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("releaseId", &self.release_id)?;
        if let Some(environment) = &self.environment {
            validate::environment_name("environment", environment)?;
        }
        match &self.approver {
            Some(approver) => validate::text("approver", approver, MAX_APPROVER_CHARS)?,
            None if !self.timed_out => {
                return Err(FieldError::new("approver", "is required unless `timedOut` is true"));
            }
            None => {}
        }
        validate::text("reason", &self.reason, MAX_REASON_CHARS)
    }
}

/// The step of a release that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ReleaseStep {
    /// The pipeline run or its tests.
    Build,
    /// Building or pushing the container image.
    ContainerImage,
    /// Publishing the package.
    Package,
    /// Provisioning the environment's infrastructure.
    Infrastructure,
    /// Writing the desired state into the environment repository.
    Promotion,
    /// Reconciling the environment (GitOps).
    Sync,
}

/// A release cannot go on until someone acts: a step failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseBlocked {
    /// The release.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The step that failed.
    pub failing_step: ReleaseStep,
    /// What went wrong, for the operator.
    #[schemars(transform = rule::text(MAX_REASON_CHARS))]
    pub reason: String,
    /// The environment concerned, for environment steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::environment_name)]
    pub environment: Option<String>,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub blocked_at: OffsetDateTime,
}

impl Validate for ReleaseBlocked {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("releaseId", &self.release_id)?;
        validate::text("reason", &self.reason, MAX_REASON_CHARS)?;
        if let Some(environment) = &self.environment {
            validate::environment_name("environment", environment)?;
        }
        Ok(())
    }
}

/// A release's artifacts are written as the desired state of an
/// environment (a commit in the environment repository), after an approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = rule::image_or_package)]
pub struct DeploymentPromoted {
    /// The release.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The module.
    #[schemars(transform = rule::identifier)]
    pub module_id: String,
    /// The environment promoted to.
    #[schemars(transform = rule::environment_name)]
    pub environment: String,
    /// The image deployed, pinned by digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageArtifact>,
    /// The package version deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<PackageArtifact>,
    /// The repository holding the environments' desired state.
    #[schemars(transform = rule::repository_name)]
    pub environment_repository: String,
    /// The commit in that repository with the new desired state.
    #[schemars(transform = rule::git_sha)]
    pub desired_commit_sha: String,
    /// Who approved the promotion (from the recorded `ReleaseApproved`).
    #[schemars(transform = rule::text(MAX_APPROVER_CHARS))]
    pub approved_by: String,
    /// When the release was ready to be promoted there (approved and
    /// provisioned): when it was promoted, or, for a promotion a window or
    /// hold held back, when it started waiting, so the environment orders a
    /// module's releases by readiness, not by when a window let them through.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub promoted_at: OffsetDateTime,
}

impl Validate for DeploymentPromoted {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("releaseId", &self.release_id)?;
        validate::identifier("moduleId", &self.module_id)?;
        validate::environment_name("environment", &self.environment)?;
        if self.image.is_none() && self.package.is_none() {
            return Err(FieldError::new("image", "`image` or `package` is required"));
        }
        if let Some(image) = &self.image {
            image.validate().map_err(|err| validate::nested("image", err))?;
        }
        if let Some(package) = &self.package {
            package.validate().map_err(|err| validate::nested("package", err))?;
        }
        validate::repository_name("environmentRepository", &self.environment_repository)?;
        validate::git_sha("desiredCommitSha", &self.desired_commit_sha)?;
        validate::text("approvedBy", &self.approved_by, MAX_APPROVER_CHARS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;
    use crate::samples;

    #[test]
    fn samples_are_valid() {
        assert_eq!(samples::release_planned().validate(), Ok(()));
        assert_eq!(samples::approve_release().validate(), Ok(()));
        assert_eq!(samples::reject_release().validate(), Ok(()));
        assert_eq!(samples::release_approval_timeout().validate(), Ok(()));
        assert_eq!(samples::release_approved().validate(), Ok(()));
        assert_eq!(samples::release_rejected().validate(), Ok(()));
        assert_eq!(samples::release_blocked().validate(), Ok(()));
        assert_eq!(samples::deployment_promoted().validate(), Ok(()));
    }

    #[test]
    fn plan_bad_fields_are_named() {
        let mut plan = samples::release_planned();
        plan.environments.clear();
        assert_eq!(plan.validate().unwrap_err().field, "environments");

        let mut plan = samples::release_planned();
        plan.environments[1].environment = "Staging".into();
        assert_eq!(plan.validate().unwrap_err().field, "environments[1].environment");

        let mut plan = samples::release_planned();
        let first = plan.environments[0].clone();
        plan.environments.push(first);
        assert!(plan.validate().unwrap_err().field.starts_with("environments["));

        let mut plan = samples::release_planned();
        if let Some(image) = plan.artifacts.image.as_mut() {
            image.digest = "latest".into();
        }
        assert_eq!(plan.validate().unwrap_err().field, "artifacts.image.digest");
    }

    #[test]
    fn approval_bad_fields_are_named() {
        let mut approve = samples::approve_release();
        approve.on_behalf_of = Some(" ".into());
        assert_eq!(approve.validate().unwrap_err().field, "onBehalfOf");

        let mut approve = samples::approve_release();
        approve.approved_by = Some(String::new());
        assert_eq!(approve.validate().unwrap_err().field, "approvedBy");

        let mut reject = samples::reject_release();
        reject.rejected_by = Some("  ".into());
        assert_eq!(reject.validate().unwrap_err().field, "rejectedBy");
        let mut reject = samples::reject_release();
        reject.reason = String::new();
        assert_eq!(reject.validate().unwrap_err().field, "reason");

        let mut timeout = samples::release_approval_timeout();
        timeout.environment = "prod!".into();
        assert_eq!(timeout.validate().unwrap_err().field, "environment");

        let mut rejected = samples::release_rejected();
        rejected.approver = None;
        rejected.timed_out = false;
        assert_eq!(rejected.validate().unwrap_err().field, "approver");
        rejected.timed_out = true;
        assert_eq!(rejected.validate(), Ok(()));
    }

    #[test]
    fn promotion_needs_an_artifact() {
        let mut promoted = samples::deployment_promoted();
        promoted.image = None;
        promoted.package = None;
        assert_eq!(promoted.validate().unwrap_err().field, "image");

        let mut promoted = samples::deployment_promoted();
        promoted.desired_commit_sha = "abc".into();
        assert_eq!(promoted.validate().unwrap_err().field, "desiredCommitSha");
    }

    #[test]
    fn failing_step_is_camel_case_on_the_wire() {
        let payload = Message::from(samples::release_blocked()).to_payload();
        assert_eq!(payload["failingStep"], "containerImage");
    }
}

/// What a release decision was, as its audit log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReleaseDecision {
    /// The release was planned for the build and artifacts its requesters brought.
    Requested,
    /// A person's approval counted towards an environment.
    ApprovalGiven,
    /// An approval was refused by the approval policy (the rule named).
    ApprovalRefused,
    /// An environment is approved (by the policy or by enough people).
    Approved,
    /// The release was rejected, or its approval timed out.
    Rejected,
    /// Someone let the release through an environment's windows and holds.
    Overridden,
    /// A promotion waits for a window to open or a hold to be lifted.
    WaitingForWindow,
    /// The release was promoted to an environment.
    Promoted,
    /// GitOps reported the environment synced and healthy with the release.
    Deployed,
    /// A step failed; the release waits for someone to act.
    Blocked,
    /// Every environment is deployed.
    Completed,
    /// The release passed verification in an environment (soak time and
    /// checks, or a healthy sync where the policy asks for none).
    Verified,
    /// The release failed verification in an environment; it is not
    /// promoted further.
    VerificationFailed,
    /// An environment was rolled back to a release verified there.
    RolledBack,
    /// A rollback was refused or could not be done (no verified release to
    /// go back to, a closed promotion window).
    RollbackRefused,
}

impl ReleaseDecision {
    /// As written in the audit log (`approval-refused`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::ApprovalGiven => "approval-given",
            Self::ApprovalRefused => "approval-refused",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Overridden => "overridden",
            Self::WaitingForWindow => "waiting-for-window",
            Self::Promoted => "promoted",
            Self::Deployed => "deployed",
            Self::Blocked => "blocked",
            Self::Completed => "completed",
            Self::Verified => "verified",
            Self::VerificationFailed => "verification-failed",
            Self::RolledBack => "rolled-back",
            Self::RollbackRefused => "rollback-refused",
        }
    }
}

/// The most decisions one `ReleaseDecisionRecorded` carries.
pub const MAX_DECISIONS: usize = 32;

/// The decisions one message made the release saga take, in the order it
/// took them, for the tenant's audit log. The saga emits one per message
/// that made it decide anything, through its outbox (so exactly the
/// decisions it committed are recorded, once), and the
/// release-orchestration consumer appends them to the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseDecisionRecorded {
    /// The release.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// Through which door the message that made them came: the source of
    /// the command (`cli:<operator>`, `api:<key id>`), or `bosun` for the
    /// saga's own reaction to an event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_APPROVER_CHARS))]
    pub door: Option<String>,
    /// The decisions, in the order they were taken (1 to 32).
    #[schemars(length(min = 1, max = 32))]
    pub decisions: Vec<DecisionEntry>,
}

/// One decision of a release: what, about which environment, by whom and
/// why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionEntry {
    /// What was decided.
    pub decision: ReleaseDecision,
    /// The environment, for a decision about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::environment_name)]
    pub environment: Option<String>,
    /// Who decided (the authenticated caller, the policy, or `bosun`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_APPROVER_CHARS))]
    pub by: Option<String>,
    /// The identities concerned (who approved, who requested).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = rule::each(rule::text(MAX_APPROVER_CHARS)), transform = rule::unique)]
    pub identities: Vec<String>,
    /// Why: the comment, the reason, what the rule found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::max_chars(MAX_REASON_CHARS))]
    pub reason: Option<String>,
    /// The policy rule named (`requester-cannot-approve`, `deny-window` ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_APPROVER_CHARS))]
    pub rule: Option<String>,
    /// The tenant's policy version in force, when a stored one decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u64>,
    /// Until when a promotion waits, when known.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    pub until: Option<OffsetDateTime>,
    /// When it was decided.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub decided_at: OffsetDateTime,
}

impl Validate for ReleaseDecisionRecorded {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("releaseId", &self.release_id)?;
        if let Some(door) = &self.door {
            validate::text("door", door, MAX_APPROVER_CHARS)?;
        }
        if self.decisions.is_empty() || self.decisions.len() > MAX_DECISIONS {
            return Err(FieldError::new(
                "decisions",
                format!(
                    "has {} decisions; 1 to {MAX_DECISIONS} are allowed",
                    self.decisions.len()
                ),
            ));
        }
        for (index, entry) in self.decisions.iter().enumerate() {
            let field = |name: &str| format!("decisions[{index}].{name}");
            if let Some(environment) = &entry.environment {
                validate::environment_name(&field("environment"), environment)?;
            }
            if let Some(by) = &entry.by {
                validate::text(&field("by"), by, MAX_APPROVER_CHARS)?;
            }
            validate_identities(&field("identities"), &entry.identities)?;
            if let Some(reason) = &entry.reason {
                validate::max_chars(&field("reason"), reason, MAX_REASON_CHARS)?;
            }
            if let Some(rule) = &entry.rule {
                validate::text(&field("rule"), rule, MAX_APPROVER_CHARS)?;
            }
        }
        Ok(())
    }
}
