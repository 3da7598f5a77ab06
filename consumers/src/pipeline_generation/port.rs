//! The port the pipeline-generation handler needs: a Git host and a
//! pipeline service that read a module's metadata file, commit a pipeline
//! file, make sure a pipeline definition runs it, and queue a run.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use time::OffsetDateTime;

use super::template::UnknownTemplateVersion;
use crate::delivery::git::commit::CommitError;
use crate::{BoxError, HandlerError};

/// A pipeline file to commit onto a branch.
#[derive(Clone, PartialEq, Eq)]
pub struct PipelineFile {
    /// Tenant owning the repository (from the envelope).
    pub tenant: String,
    /// Repository name.
    pub repository: String,
    /// Branch to commit to, without `refs/heads/`; created from the default
    /// branch when missing.
    pub branch: String,
    /// Path of the file in the repository.
    pub path: String,
    /// The rendered YAML.
    pub content: String,
    /// Commit message.
    pub message: String,
    /// Commit date (the envelope's `occurredAt`, so a retry writes the same
    /// commit).
    pub date: OffsetDateTime,
}

impl fmt::Debug for PipelineFile {
    /// Shows the size, never the content.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PipelineFile")
            .field("tenant", &self.tenant)
            .field("repository", &self.repository)
            .field("branch", &self.branch)
            .field("path", &self.path)
            .field("bytes", &self.content.len())
            .field("date", &self.date)
            .finish()
    }
}

/// The commit holding the pipeline file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedPipeline {
    /// The branch's head, which holds the file.
    pub commit_sha: String,
    /// `true` when the branch already held this exact file.
    pub no_op: bool,
}

/// The pipeline definition that runs a pipeline file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefinitionSpec {
    /// Tenant owning the repository.
    pub tenant: String,
    /// Repository name.
    pub repository: String,
    /// Path of the pipeline file in the repository.
    pub pipeline_path: String,
    /// Name of the definition (the module id).
    pub name: String,
}

/// A run to queue: one commit with one pipeline definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    /// Tenant owning the repository.
    pub tenant: String,
    /// Repository name.
    pub repository: String,
    /// Branch being built, without `refs/heads/`.
    pub branch: String,
    /// Commit to build.
    pub commit_sha: String,
    /// Path of the pipeline file.
    pub pipeline_path: String,
    /// The definition's id.
    pub pipeline_id: String,
}

/// A queued (or already existing) run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedRun {
    /// The run's id.
    pub run_id: String,
    /// When it was queued (the same for an existing run).
    pub queued_at: OffsetDateTime,
    /// Web address of the run, when the runner has one.
    pub url: Option<String>,
}

/// Where pipelines are committed and run. Implementations must be
/// idempotent: the same file on a branch is not committed twice
/// (`no_op: true`), an existing definition is reused, and queueing the
/// same commit of the same pipeline again returns the existing run.
#[async_trait]
pub trait PipelineHost: Send + Sync {
    /// The bytes of `path` at the head of `branch`; `None` when the
    /// repository, the branch or the file does not exist.
    async fn read_file(
        &self,
        tenant: &str,
        repository: &str,
        branch: &str,
        path: &str,
    ) -> Result<Option<Vec<u8>>, PipelineError>;

    /// Commits the pipeline file (a no-op when the branch already holds it).
    async fn commit_pipeline(&self, file: &PipelineFile) -> Result<CommittedPipeline, PipelineError>;

    /// Creates the pipeline definition when missing; returns its id.
    async fn ensure_pipeline(&self, definition: &DefinitionSpec) -> Result<String, PipelineError>;

    /// Queues a run of the commit, or finds the one already queued.
    async fn queue_run(&self, run: &RunSpec) -> Result<QueuedRun, PipelineError>;
}

/// Why generating or queueing a pipeline failed; each variant says whether
/// a retry can help.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The request cannot be carried out as given. Permanent.
    #[error("invalid pipeline request: {0}")]
    Invalid(String),
    /// The template version asked for does not exist. Permanent.
    #[error(transparent)]
    UnknownTemplateVersion(#[from] UnknownTemplateVersion),
    /// The repository's `bosun.module.json` is not valid module metadata.
    /// Permanent (until someone fixes the file and replays).
    #[error("{repository}: bosun.module.json is not valid module metadata: {reason}")]
    InvalidModuleFile {
        /// Repository name.
        repository: String,
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
    /// Committing the pipeline file failed (the commit error says whether
    /// a retry helps).
    #[error("committing the pipeline file failed: {0}")]
    Commit(#[source] CommitError),
    /// The Git host or pipeline service could not be reached or failed.
    /// Transient.
    #[error("pipeline service unavailable: {0}")]
    Unavailable(#[source] BoxError),
    /// The service is throttling; retry after the delay.
    #[error("pipeline service asks to retry after {after:?}: {source}")]
    Throttled {
        /// Earliest retry.
        after: Duration,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The service refused the request (authentication, permissions,
    /// validation). Permanent.
    #[error("pipeline service refused the request: {0}")]
    Rejected(#[source] BoxError),
}

impl PipelineError {
    /// Whether retrying may help.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Invalid(_) | Self::UnknownTemplateVersion(_) | Self::InvalidModuleFile { .. } | Self::Rejected(_) => {
                false
            }
            Self::Commit(err) => err.is_retryable(),
            Self::RepositoryNotFound { .. } | Self::Unavailable(_) | Self::Throttled { .. } => true,
        }
    }
}

impl From<PipelineError> for HandlerError {
    fn from(err: PipelineError) -> Self {
        match err {
            PipelineError::Throttled { after, .. } => HandlerError::RetryAfter {
                after,
                source: Box::new(err),
            },
            PipelineError::Commit(CommitError::Throttled { after, .. }) => HandlerError::RetryAfter {
                after,
                source: Box::new(err),
            },
            err if err.is_retryable() => HandlerError::Transient(Box::new(err)),
            err => HandlerError::Permanent(Box::new(err)),
        }
    }
}

impl From<CommitError> for PipelineError {
    fn from(err: CommitError) -> Self {
        match err {
            CommitError::RepositoryNotFound { repository } => Self::RepositoryNotFound { repository },
            err => Self::Commit(err),
        }
    }
}

port_error_conversions!(PipelineError, azure_devops_only);
