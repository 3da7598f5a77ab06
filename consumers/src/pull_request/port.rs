//! The port the pull-request handler needs: a Git host that opens (or
//! finds) a pull request between two branches, evaluates its checks,
//! completes it when it may, and reads files at a commit (for the module
//! metadata).

use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::PullRequestStatus;
use bosun_contracts::validate::FieldError;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::BoxError;

/// What to open: the command's (or event's) fields, checked, with the
/// envelope's tenant and time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestSpec {
    /// The tenant owning the repository (from the envelope).
    pub tenant: String,
    /// Repository name, as provisioned for the tenant.
    pub repository: String,
    /// Branch with the changes, without `refs/heads/`.
    pub source_branch: String,
    /// Branch to merge into, without `refs/heads/`.
    pub target_branch: String,
    /// Title; `None` lets the host use the subject line of the source
    /// branch's head commit.
    pub title: Option<String>,
    /// Description in Markdown.
    pub description: Option<String>,
    /// Status checks (build validations) that must pass before completion.
    pub required_checks: Vec<String>,
    /// Complete (merge) the pull request once its checks pass.
    pub auto_complete: bool,
    /// Date of a merge commit made for this request: the envelope's
    /// `occurredAt`, so a retried request produces the same merge commit.
    pub date: OffsetDateTime,
}

/// The state of one check of a pull request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CheckStatus {
    /// The check passed (or does not apply).
    Passed,
    /// The check has not decided yet (waiting for a build or reviewers).
    Pending,
    /// The check failed; the pull request cannot complete.
    Failed,
}

/// One evaluated check of a pull request: a branch policy or a required
/// status check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyCheck {
    /// Name of the check, e.g. `mergeable`, `minimum-reviewers` or a build
    /// validation's name.
    pub name: String,
    /// Its state.
    pub status: CheckStatus,
    /// What the host said about it, for people.
    pub detail: String,
}

/// A pull request as the host reports it after opening (or finding) it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenedPullRequest {
    /// Number of the pull request on its host.
    pub pull_request_id: u64,
    /// Its title.
    pub title: String,
    /// The source branch's head commit (the pull request's head).
    pub head_commit: String,
    /// Active, or completed when it merged at once.
    pub status: PullRequestStatus,
    /// Web address (a `file://` URL of its record on the local host).
    pub url: String,
    /// `true` when opened by this call, `false` when it was already open
    /// (or had already completed at this head).
    pub created: bool,
    /// Status checks required before completion.
    pub required_checks: Vec<String>,
    /// Whether the pull request completes on its own once checks pass.
    pub auto_complete: bool,
    /// The merge commit on the target branch, when completed.
    pub merge_commit: Option<String>,
    /// The checks as evaluated now.
    pub checks: Vec<PolicyCheck>,
}

/// A Git host with pull requests. Implementations must be idempotent on
/// (repository, source, target): while a pull request between the two
/// branches is open, `open` returns it (with `created: false` and the
/// source's current head) instead of opening another; a request whose
/// head already merged through a completed pull request returns that one.
#[async_trait]
pub trait PullRequestHost: Send + Sync {
    /// Opens or finds the pull request, evaluates its checks, and completes
    /// it when `auto_complete` is set and the checks pass.
    async fn open(&self, spec: &PullRequestSpec) -> Result<OpenedPullRequest, PullRequestError>;

    /// The bytes of the file at `path` (`/`-separated, relative) in
    /// `commit`; `None` when there is no such file.
    async fn read_file(
        &self,
        tenant: &str,
        repository: &str,
        commit: &str,
        path: &str,
    ) -> Result<Option<Vec<u8>>, PullRequestError>;

    /// The paths of every file named `file_name` in `commit`'s tree, at any
    /// depth, sorted.
    async fn find_files(
        &self,
        tenant: &str,
        repository: &str,
        commit: &str,
        file_name: &str,
    ) -> Result<Vec<String>, PullRequestError>;
}

/// Why opening a pull request failed; each variant says whether a retry can
/// help.
#[derive(Debug, thiserror::Error)]
pub enum PullRequestError {
    /// The request cannot be carried out as given (bad branch, source equal
    /// to target). Permanent.
    #[error("invalid pull request: {0}")]
    Invalid(String),
    /// The module metadata file at the source head is not valid. Permanent:
    /// a new commit has to fix it.
    #[error("invalid module file `{path}`: field `{field}`: {reason}")]
    InvalidModuleFile {
        /// Path of the file in the repository.
        path: String,
        /// The offending field (`.` for the document itself).
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The tenant has no repository of this name. Transient: it may be
    /// provisioned later.
    #[error("repository `{repository}` not found for this tenant")]
    RepositoryNotFound {
        /// Repository name.
        repository: String,
    },
    /// A branch of the pull request does not exist. Transient: it may be
    /// pushed later.
    #[error("branch `{branch}` not found")]
    BranchNotFound {
        /// The branch.
        branch: String,
    },
    /// The target branch kept moving while the pull request was being
    /// merged. Transient.
    #[error("target branch `{branch}` kept moving while merging; gave up after {attempts} attempts")]
    TargetContended {
        /// The target branch.
        branch: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The Git host could not be reached or failed. Transient.
    #[error("Git host unavailable: {0}")]
    Unavailable(#[source] BoxError),
    /// The Git host is throttling; retry after the delay.
    #[error("Git host asks to retry after {after:?}: {source}")]
    Throttled {
        /// Earliest retry.
        after: Duration,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The Git host refused the request (authentication, permissions,
    /// validation). Permanent.
    #[error("Git host refused the request: {0}")]
    Rejected(#[source] BoxError),
}

impl PullRequestError {
    /// Whether retrying may help.
    pub fn is_retryable(&self) -> bool {
        !matches!(
            self,
            Self::Invalid(_) | Self::InvalidModuleFile { .. } | Self::Rejected(_)
        )
    }
}

impl From<FieldError> for PullRequestError {
    fn from(err: FieldError) -> Self {
        Self::Invalid(format!("{}: {}", err.field, err.reason))
    }
}

port_error_conversions!(PullRequestError);
