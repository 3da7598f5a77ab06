//! The port the gitops-sync handler needs: the environment repository
//! (where promotions are committed) and the environment itself (which is
//! reconciled with a commit of that repository and reports what it runs).

use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::validate::FieldError;
pub use bosun_sagas::gitops::EnvironmentReport;
use time::OffsetDateTime;

use crate::delivery::git::commit::CommitError;
use crate::delivery::tenant::ForeignTenant;
use crate::{BoxError, HandlerError};

/// A promotion's desired state to commit into the environment repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredStateWrite {
    /// The tenant owning the repository (from the envelope).
    pub tenant: String,
    /// The environment.
    pub environment: String,
    /// The environment repository.
    pub repository: String,
    /// The module promoted.
    pub module_id: String,
    /// The release promoted.
    pub release_id: String,
    /// Path of the manifest in the repository,
    /// `<environment>/apps/<moduleId>/release.json`.
    pub path: String,
    /// The manifest (deterministic JSON: the same promotion gives the same
    /// bytes).
    pub manifest: Vec<u8>,
    /// Commit message.
    pub message: String,
    /// Commit date: the promotion's time, so the same promotion on the same
    /// head gives the same commit.
    pub date: OffsetDateTime,
}

/// The repository after the write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredStateCommit {
    /// The branch head holding the manifest.
    pub commit_sha: String,
    /// `true` when the branch already held it and nothing was committed.
    pub no_op: bool,
}

/// Reconcile an environment with a commit of its repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileRequest {
    /// The tenant (from the envelope).
    pub tenant: String,
    /// The environment.
    pub environment: String,
    /// The environment repository.
    pub repository: String,
    /// The commit; `None` for the repository's branch head.
    pub commit_sha: Option<String>,
}

/// Where an environment's desired state is written and applied.
/// Implementations must make both calls idempotent: writing the same
/// manifest again changes nothing (`no_op`), and reconciling the commit
/// the environment already runs reports everything unchanged.
#[async_trait]
pub trait Environments: Send + Sync {
    /// Commits a promotion's manifest onto the repository's branch.
    async fn write_desired_state(&self, write: &DesiredStateWrite) -> Result<DesiredStateCommit, GitOpsError>;

    /// Asks the environment to run a commit and reports what it runs now
    /// (which may still be an older commit when the environment applies
    /// asynchronously).
    async fn reconcile(&self, request: &ReconcileRequest) -> Result<EnvironmentReport, GitOpsError>;
}

/// Why a write or a reconcile failed; each variant says whether a retry
/// can help.
#[derive(Debug, thiserror::Error)]
pub enum GitOpsError {
    /// The request cannot be carried out as given. Permanent.
    #[error("invalid GitOps request: {0}")]
    Invalid(String),
    /// The environment repository does not exist (Azure mode: it must be
    /// provisioned). Transient: it may be provisioned later.
    #[error("environment repository `{repository}` not found")]
    RepositoryNotFound {
        /// The repository.
        repository: String,
    },
    /// The commit to reconcile is not in the repository (yet). Transient.
    #[error("commit {commit} not found in the environment repository")]
    CommitNotFound {
        /// The commit.
        commit: String,
    },
    /// The Git host or the environment could not be reached or failed.
    /// Transient.
    #[error("environment unavailable: {0}")]
    Unavailable(#[source] BoxError),
    /// A local file or `git` process failed: the environment directory,
    /// or `git cat-file` on the local Git host. Transient.
    #[error("environment unavailable: {context}: {source}")]
    Io {
        /// What was being done (`reading <path>`, `starting `git
        /// cat-file``).
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The service asks to retry after a delay.
    #[error("environment asks to retry after {after:?}: {source}")]
    Throttled {
        /// Earliest retry.
        after: Duration,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The service refused the request (authentication, permissions, an
    /// application that does not exist). Permanent.
    #[error("environment refused the request: {0}")]
    Rejected(#[source] BoxError),
    /// The environment is another tenant's. Permanent.
    #[error(transparent)]
    ForeignTenant(#[from] ForeignTenant),
}

impl GitOpsError {
    /// Whether retrying may help.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::Invalid(_) | Self::Rejected(_) | Self::ForeignTenant(_))
    }
}

impl From<GitOpsError> for HandlerError {
    fn from(err: GitOpsError) -> Self {
        match err {
            GitOpsError::Throttled { after, .. } => HandlerError::RetryAfter {
                after,
                source: Box::new(err),
            },
            err if err.is_retryable() => HandlerError::Transient(Box::new(err)),
            err => HandlerError::Permanent(Box::new(err)),
        }
    }
}

impl From<FieldError> for GitOpsError {
    fn from(err: FieldError) -> Self {
        Self::Invalid(format!("{}: {}", err.field, err.reason))
    }
}

impl From<CommitError> for GitOpsError {
    fn from(err: CommitError) -> Self {
        match err {
            CommitError::Invalid(reason) => Self::Invalid(reason),
            CommitError::RepositoryNotFound { repository } => Self::RepositoryNotFound { repository },
            CommitError::Throttled { after, source } => Self::Throttled { after, source },
            CommitError::Rejected(source) => Self::Rejected(source),
            other => Self::Unavailable(Box::new(other)),
        }
    }
}
