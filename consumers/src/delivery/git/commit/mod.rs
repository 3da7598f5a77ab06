//! Writing files onto a branch as one commit, on either Git host: the
//! request ([`CommitSpec`], [`FileWrite`]), the [`CommitWriter`] trait, its
//! [`CommitError`], the identity commits are attributed to when a request
//! names none ([`DEFAULT_AUTHOR_NAME`], [`DEFAULT_AUTHOR_EMAIL`]), and both
//! writers:
//!
//! - [`local`] — commits into the local Git host's bare repositories
//!   ([`LocalCommitWriter`]);
//! - [`azure`] — pushes to Azure Repos ([`AzureCommitWriter`]).
//!
//! The commit consumer's port is this writer; gitops-sync writes desired
//! state and pipeline generation writes pipeline files with it too.

pub mod azure;
pub mod local;

pub use azure::AzureCommitWriter;
pub use local::LocalCommitWriter;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::GitIdentity;
use bosun_contracts::validate::FieldError;
use time::OffsetDateTime;

use crate::BoxError;

/// The identity commits are attributed to when a request names none.
pub const DEFAULT_AUTHOR_NAME: &str = "bosun";

/// The e-mail of [`DEFAULT_AUTHOR_NAME`].
pub const DEFAULT_AUTHOR_EMAIL: &str = "bosun@localhost";

/// One file to write, decoded.
#[derive(Clone, PartialEq, Eq)]
pub struct FileWrite {
    /// Path inside the repository, `/`-separated, already validated.
    pub path: String,
    /// The file's bytes.
    pub content: Vec<u8>,
    /// Whether the file is executable (Git mode 100755).
    pub executable: bool,
}

impl fmt::Debug for FileWrite {
    /// Shows the size, never the content.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileWrite")
            .field("path", &self.path)
            .field("bytes", &self.content.len())
            .field("executable", &self.executable)
            .finish()
    }
}

/// What to commit: the command's fields, decoded and checked, with the
/// envelope's tenant and time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitSpec {
    /// The tenant owning the repository (from the envelope).
    pub tenant: String,
    /// Repository name, as provisioned for the tenant.
    pub repository: String,
    /// Branch to commit to, without `refs/heads/`.
    pub branch: String,
    /// Branch a missing `branch` starts from, without `refs/heads/`; the
    /// repository's default branch when `None`.
    pub base_branch: Option<String>,
    /// Commit message.
    pub message: String,
    /// Author and committer.
    pub author: GitIdentity,
    /// Author and committer date: the envelope's `occurredAt`, so a retried
    /// command produces the same commit.
    pub date: OffsetDateTime,
    /// Files to add or replace; paths are unique and none is a folder of
    /// another.
    pub files: Vec<FileWrite>,
    /// Paths (files or folders) to delete; applied before `files`.
    pub delete: Vec<String>,
}

/// What the branch holds after the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitResult {
    /// Id of the repository on its Git host.
    pub repository_id: String,
    /// The commit at the branch's head holding the requested tree.
    pub commit_sha: String,
    /// That commit's tree.
    pub tree_sha: String,
    /// That commit's (first) parent; `None` for a root commit.
    pub parent_sha: Option<String>,
    /// Paths added, changed or deleted by the commit (0 for a no-op).
    pub files_changed: u32,
    /// `true` when the branch already held this tree and no commit was made.
    pub no_op: bool,
}

/// A Git host that writes commits. Implementations must make the same
/// request idempotent: when the branch already holds the resulting tree,
/// they return its head commit with `no_op: true` and write nothing.
#[async_trait]
pub trait CommitWriter: Send + Sync {
    /// Writes `spec.files`, deletes `spec.delete`, and commits onto the branch.
    async fn commit(&self, spec: &CommitSpec) -> Result<CommitResult, CommitError>;
}

/// Why a commit failed; each variant says whether a retry can help.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The request cannot be carried out as given (bad path, bad base64,
    /// conflicting paths). Permanent.
    #[error("invalid commit request: {0}")]
    Invalid(String),
    /// The tenant has no repository of this name. Transient: it may be
    /// provisioned later (an operator replays once it is).
    #[error("repository `{repository}` not found for this tenant")]
    RepositoryNotFound {
        /// Repository name.
        repository: String,
    },
    /// The branch to start from does not exist. Transient: it may be
    /// created later.
    #[error("base branch `{branch}` not found")]
    BaseBranchNotFound {
        /// The base branch.
        branch: String,
    },
    /// Other writers kept moving the branch. Transient.
    #[error("branch `{branch}` kept moving under concurrent writers; gave up after {attempts} attempts")]
    BranchContended {
        /// The branch.
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

impl CommitError {
    /// Whether retrying may help.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::Invalid(_) | Self::Rejected(_))
    }
}

impl From<FieldError> for CommitError {
    fn from(err: FieldError) -> Self {
        Self::Invalid(format!("{}: {}", err.field, err.reason))
    }
}

port_error_conversions!(CommitError);
