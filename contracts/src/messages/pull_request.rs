//! Pull requests: `OpenPullRequest` and `PullRequestOpened` (consumer
//! `pull-request`, which also opens a pull request for a `CommitCreated`
//! that asks for one).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::module::ModuleMetadata;
use crate::schema_rules as rule;
use crate::validate::{self, FieldError, Validate};

/// Longest pull request title (the Azure DevOps limit).
pub const MAX_TITLE_CHARS: usize = 400;
/// Longest pull request description (the Azure DevOps limit).
pub const MAX_DESCRIPTION_CHARS: usize = 4000;
/// Longest name of a required status check.
pub const MAX_CHECK_CHARS: usize = 256;

/// Open a pull request with policy and build checks. Idempotent on
/// (repository, sourceBranch, targetBranch): when a pull request between the
/// two branches is already open it is reported, not opened twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenPullRequest {
    /// Repository name.
    #[schemars(transform = rule::repository_name)]
    pub repository: String,
    /// Branch with the changes.
    #[schemars(transform = rule::branch_name)]
    pub source_branch: String,
    /// Branch to merge into.
    #[schemars(transform = rule::branch_name, transform = rule::also_checked("differs from `sourceBranch`, leaving out a `refs/heads/` prefix"))]
    pub target_branch: String,
    /// Title (at most 400 characters).
    #[schemars(transform = rule::text(MAX_TITLE_CHARS))]
    pub title: String,
    /// Description in Markdown (at most 4000 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::max_chars(MAX_DESCRIPTION_CHARS))]
    pub description: Option<String>,
    /// Names of the status checks (build validations) that must pass before
    /// the pull request can complete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = rule::each(rule::text(MAX_CHECK_CHARS)), transform = rule::unique)]
    pub required_checks: Vec<String>,
    /// Complete (merge) the pull request on its own once checks and
    /// reviewers pass.
    #[serde(default)]
    pub auto_complete: bool,
    /// Metadata of the module the change belongs to; passed on in
    /// `PullRequestOpened` so pipeline generation can act on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<ModuleMetadata>,
}

impl Validate for OpenPullRequest {
    fn validate(&self) -> Result<(), FieldError> {
        validate::repository_name("repository", &self.repository)?;
        validate_branches(&self.source_branch, &self.target_branch)?;
        validate::text("title", &self.title, MAX_TITLE_CHARS)?;
        if let Some(description) = &self.description {
            validate::max_chars("description", description, MAX_DESCRIPTION_CHARS)?;
        }
        validate_checks(&self.required_checks)?;
        if let Some(module) = &self.module {
            module.validate().map_err(|err| validate::nested("module", err))?;
        }
        Ok(())
    }
}

/// The state of a pull request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PullRequestStatus {
    /// Open, waiting for checks and reviewers.
    Active,
    /// Merged into the target branch.
    Completed,
    /// Closed without merging.
    Abandoned,
}

/// A pull request is open (opened now, or found already open).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = rule::merge_commit_when_completed)]
pub struct PullRequestOpened {
    /// Repository name.
    #[schemars(transform = rule::repository_name)]
    pub repository: String,
    /// Number of the pull request on its Git host (`!42` on Azure DevOps).
    #[schemars(transform = rule::positive)]
    pub pull_request_id: u64,
    /// Branch with the changes.
    #[schemars(transform = rule::branch_name)]
    pub source_branch: String,
    /// Branch to merge into.
    #[schemars(transform = rule::branch_name, transform = rule::also_checked("differs from `sourceBranch`, leaving out a `refs/heads/` prefix"))]
    pub target_branch: String,
    /// Title.
    #[schemars(transform = rule::text(MAX_TITLE_CHARS))]
    pub title: String,
    /// Head commit of the source branch when the pull request was opened.
    #[schemars(transform = rule::git_sha)]
    pub commit_sha: String,
    /// State of the pull request (`active` unless it completed at once).
    pub status: PullRequestStatus,
    /// Web address of the pull request.
    #[schemars(transform = rule::url)]
    pub url: String,
    /// `true` when opened now, `false` when it was already open.
    pub created: bool,
    /// Status checks required before completion.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = rule::each(rule::text(MAX_CHECK_CHARS)), transform = rule::unique)]
    pub required_checks: Vec<String>,
    /// Whether the pull request completes on its own once checks pass.
    #[serde(default)]
    pub auto_complete: bool,
    /// The merge commit on the target branch, when `status` is `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::git_sha)]
    pub merge_commit_sha: Option<String>,
    /// Metadata of the module the change belongs to, when the request gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<ModuleMetadata>,
}

impl Validate for PullRequestOpened {
    fn validate(&self) -> Result<(), FieldError> {
        validate::repository_name("repository", &self.repository)?;
        validate::positive("pullRequestId", self.pull_request_id)?;
        validate_branches(&self.source_branch, &self.target_branch)?;
        validate::text("title", &self.title, MAX_TITLE_CHARS)?;
        validate::git_sha("commitSha", &self.commit_sha)?;
        validate::url("url", &self.url)?;
        validate_checks(&self.required_checks)?;
        match (&self.merge_commit_sha, self.status) {
            (Some(sha), _) => validate::git_sha("mergeCommitSha", sha)?,
            (None, PullRequestStatus::Completed) => {
                return Err(FieldError::new(
                    "mergeCommitSha",
                    "is required when `status` is `completed`",
                ));
            }
            (None, _) => {}
        }
        if let Some(module) = &self.module {
            module.validate().map_err(|err| validate::nested("module", err))?;
        }
        Ok(())
    }
}

fn validate_branches(source: &str, target: &str) -> Result<(), FieldError> {
    validate::branch_name("sourceBranch", source)?;
    validate::branch_name("targetBranch", target)?;
    let short = |branch: &str| branch.strip_prefix("refs/heads/").unwrap_or(branch).to_owned();
    if short(source) == short(target) {
        return Err(FieldError::new("targetBranch", "must differ from `sourceBranch`"));
    }
    Ok(())
}

fn validate_checks(checks: &[String]) -> Result<(), FieldError> {
    for (index, check) in checks.iter().enumerate() {
        validate::text(&format!("requiredChecks[{index}]"), check, MAX_CHECK_CHARS)?;
    }
    validate::unique("requiredChecks", checks.iter().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;
    use crate::samples;

    #[test]
    fn samples_are_valid() {
        assert_eq!(samples::open_pull_request().validate(), Ok(()));
        assert_eq!(samples::pull_request_opened().validate(), Ok(()));
    }

    #[test]
    fn open_pull_request_bad_fields_are_named() {
        let mut command = samples::open_pull_request();
        command.target_branch = "refs/heads/feature/payments-retry".into();
        assert_eq!(command.validate().unwrap_err().field, "targetBranch");

        let mut command = samples::open_pull_request();
        command.title = "t".repeat(MAX_TITLE_CHARS + 1);
        assert_eq!(command.validate().unwrap_err().field, "title");

        let mut command = samples::open_pull_request();
        command.required_checks.push("build".into());
        command.required_checks.push("build".into());
        assert!(command.validate().unwrap_err().field.starts_with("requiredChecks["));

        let mut command = samples::open_pull_request();
        if let Some(module) = command.module.as_mut() {
            module.module_id = "bad id".into();
        }
        assert_eq!(command.validate().unwrap_err().field, "module.moduleId");
    }

    #[test]
    fn pull_request_opened_bad_fields_are_named() {
        let mut event = samples::pull_request_opened();
        event.pull_request_id = 0;
        assert_eq!(event.validate().unwrap_err().field, "pullRequestId");

        let mut event = samples::pull_request_opened();
        event.status = PullRequestStatus::Completed;
        event.merge_commit_sha = None;
        assert_eq!(event.validate().unwrap_err().field, "mergeCommitSha");

        let mut event = samples::pull_request_opened();
        event.url = "dev.azure.com/contoso".into();
        assert_eq!(event.validate().unwrap_err().field, "url");
    }

    #[test]
    fn decoding_names_the_payload_field() {
        let mut payload = Message::from(samples::open_pull_request()).to_payload();
        payload["sourceBranch"] = serde_json::json!("bad..branch");
        let err = Message::from_type_and_payload("OpenPullRequest", &payload).unwrap_err();
        assert_eq!(err.field(), Some("payload.sourceBranch"), "{err}");
    }

    #[test]
    fn optional_fields_default() {
        let command: OpenPullRequest = serde_json::from_value(serde_json::json!({
            "repository": "payments-api", "sourceBranch": "feature/x", "targetBranch": "main", "title": "x"
        }))
        .unwrap();
        assert!(!command.auto_complete);
        assert!(command.required_checks.is_empty());
        assert_eq!(command.validate(), Ok(()));
    }
}
