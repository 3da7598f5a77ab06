//! The embedded adapter: pipeline files are committed into the local Git
//! host's bare repositories (through the delivery layer's
//! [`LocalCommitWriter`], so a real
//! commit, and the same file twice is a no-op), definitions and runs live
//! in the local pipeline runner ([`LocalPipelines`]), which executes the
//! queued run in the background.
//!
//! A definition's id is the module id. A run's id is derived from
//! (tenant, repository, commit, pipeline path), so queueing the same commit
//! again returns the same run; its URL is the `file://` address of its
//! record.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bosun_contracts::messages::GitIdentity;
use bosun_contracts::validate;

use super::port::{CommittedPipeline, DefinitionSpec, PipelineError, PipelineFile, PipelineHost, QueuedRun, RunSpec};
use crate::delivery::git::commit::{
    CommitSpec, CommitWriter, DEFAULT_AUTHOR_EMAIL, DEFAULT_AUTHOR_NAME, FileWrite, LocalCommitWriter,
};
use crate::delivery::git::{LocalGitError, LocalGitHost};
use crate::delivery::pipeline::{LocalPipelineError, LocalPipelines, PipelineDefinition, RunRequest};

/// Commits pipeline files to the local Git host and queues runs on the
/// local pipeline runner.
#[derive(Debug, Clone)]
pub struct LocalPipelineGenerator {
    host: Arc<LocalGitHost>,
    writer: LocalCommitWriter,
    pipelines: Arc<LocalPipelines>,
}

impl LocalPipelineGenerator {
    /// Commits into the repositories under `git_root` (the runtime passes
    /// `<data dir>/git`) and queues runs on `pipelines` (the runner the
    /// pipeline monitor's local adapter follows them on).
    pub fn new(git_root: impl Into<PathBuf>, pipelines: Arc<LocalPipelines>) -> Self {
        Self::with_host(Arc::new(LocalGitHost::new(git_root)), pipelines)
    }

    /// Shares a Git host with the other local adapters.
    pub fn with_host(host: Arc<LocalGitHost>, pipelines: Arc<LocalPipelines>) -> Self {
        Self {
            writer: LocalCommitWriter::with_host(Arc::clone(&host)),
            host,
            pipelines,
        }
    }

    /// The pipeline runner.
    pub fn pipelines(&self) -> &Arc<LocalPipelines> {
        &self.pipelines
    }
}

fn git_error(err: LocalGitError) -> PipelineError {
    if err.is_invalid_input() {
        PipelineError::Invalid(err.to_string())
    } else {
        PipelineError::Unavailable(Box::new(err))
    }
}

#[async_trait]
impl PipelineHost for LocalPipelineGenerator {
    async fn read_file(
        &self,
        tenant: &str,
        repository: &str,
        branch: &str,
        path: &str,
    ) -> Result<Option<Vec<u8>>, PipelineError> {
        validate::branch_name("branch", branch).map_err(|err| PipelineError::Invalid(err.reason))?;
        let Some(repository) = self.host.find(tenant, repository).await.map_err(git_error)? else {
            return Ok(None);
        };
        let git = repository.git();
        let Some(commit) = git
            .resolve_commit(&format!("refs/heads/{branch}"))
            .await
            .map_err(git_error)?
        else {
            return Ok(None);
        };
        git.read_file_at(&commit, path).await.map_err(git_error)
    }

    async fn commit_pipeline(&self, file: &PipelineFile) -> Result<CommittedPipeline, PipelineError> {
        let result = self
            .writer
            .commit(&CommitSpec {
                tenant: file.tenant.clone(),
                repository: file.repository.clone(),
                branch: file.branch.clone(),
                base_branch: None,
                message: file.message.clone(),
                author: GitIdentity {
                    name: DEFAULT_AUTHOR_NAME.to_owned(),
                    email: DEFAULT_AUTHOR_EMAIL.to_owned(),
                },
                date: file.date,
                files: vec![FileWrite {
                    path: file.path.clone(),
                    content: file.content.clone().into_bytes(),
                    executable: false,
                }],
                delete: Vec::new(),
            })
            .await?;
        Ok(CommittedPipeline {
            commit_sha: result.commit_sha,
            no_op: result.no_op,
        })
    }

    async fn ensure_pipeline(&self, definition: &DefinitionSpec) -> Result<String, PipelineError> {
        let pipeline_id = definition.name.clone();
        self.pipelines
            .ensure_definition(
                &definition.tenant,
                &PipelineDefinition {
                    pipeline_id: pipeline_id.clone(),
                    name: definition.name.clone(),
                    repository: definition.repository.clone(),
                    pipeline_path: definition.pipeline_path.clone(),
                },
            )
            .await?;
        Ok(pipeline_id)
    }

    async fn queue_run(&self, run: &RunSpec) -> Result<QueuedRun, PipelineError> {
        let record = self
            .pipelines
            .queue(&RunRequest {
                tenant: run.tenant.clone(),
                repository: run.repository.clone(),
                branch: run.branch.clone(),
                commit_sha: run.commit_sha.clone(),
                pipeline_path: run.pipeline_path.clone(),
                pipeline_id: run.pipeline_id.clone(),
            })
            .await?;
        Ok(QueuedRun {
            url: Some(self.pipelines.run_url(&record.tenant, &record.run_id)),
            run_id: record.run_id,
            queued_at: record.queued_at,
        })
    }
}

impl From<LocalPipelineError> for PipelineError {
    fn from(err: LocalPipelineError) -> Self {
        if err.is_retryable() {
            Self::Unavailable(Box::new(err))
        } else {
            Self::Invalid(err.to_string())
        }
    }
}
