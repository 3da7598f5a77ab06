//! The embedded adapter: asks the local pipeline runner
//! ([`LocalPipelines`]) about a run. Polling also starts a run that is
//! queued, or whose executor died with a crashed process (stale
//! heartbeat), so a restarted service finishes what it had started; it
//! never waits for the run. The log, JUnit files and artifacts are already
//! in the blob store: the runner uploaded them.

use std::sync::Arc;

use async_trait::async_trait;

use super::port::{FinishedRun, MonitorError, PipelineRunStatus, RunQuery, RunState};
use crate::delivery::pipeline::{LocalPipelineError, LocalPipelines, RunStatus};

/// Reports on the local pipeline runner's runs.
#[derive(Debug, Clone)]
pub struct LocalRunStatus {
    pipelines: Arc<LocalPipelines>,
}

impl LocalRunStatus {
    /// Reports on `pipelines`' runs (the runner shared with the local
    /// pipeline generator).
    pub fn new(pipelines: Arc<LocalPipelines>) -> Self {
        Self { pipelines }
    }

    /// The pipeline runner.
    pub fn pipelines(&self) -> &Arc<LocalPipelines> {
        &self.pipelines
    }
}

#[async_trait]
impl PipelineRunStatus for LocalRunStatus {
    async fn run_status(&self, query: &RunQuery) -> Result<RunState, MonitorError> {
        let record = self.pipelines.poll(&query.tenant, &query.pipeline_run_id).await?;
        if record.repository != query.repository || record.commit_sha != query.commit_sha {
            return Err(MonitorError::Invalid(format!(
                "run `{}` builds {}@{}, not {}@{}",
                record.run_id, record.repository, record.commit_sha, query.repository, query.commit_sha
            )));
        }
        let status = match record.status {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Completed => {
                let (Some(result), Some(finished_at)) = (record.result, record.finished_at) else {
                    return Err(MonitorError::Invalid(format!(
                        "run `{}` is completed without a result",
                        record.run_id
                    )));
                };
                return Ok(RunState::Finished(Box::new(FinishedRun {
                    result,
                    started_at: record.started_at,
                    finished_at,
                    failed_step: record.failed_step,
                    log: record.log,
                    test_results: record.test_results,
                    artifacts: record.artifacts,
                    url: Some(self.pipelines.run_url(&record.tenant, &record.run_id)),
                })));
            }
        };
        Ok(RunState::InProgress {
            status: status.to_owned(),
        })
    }
}

impl From<LocalPipelineError> for MonitorError {
    fn from(err: LocalPipelineError) -> Self {
        match err {
            LocalPipelineError::RunNotFound { run_id } => Self::RunNotFound { run_id },
            LocalPipelineError::ForeignTenant(err) => Self::ForeignTenant(err),
            err if err.is_retryable() => Self::Unavailable(Box::new(err)),
            err => Self::Invalid(err.to_string()),
        }
    }
}
