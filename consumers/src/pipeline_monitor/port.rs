//! The port the pipeline-monitor handler needs: a pipeline service that
//! says where a run is, and — once it finished — how it ended and where
//! its log, JUnit files and artifacts are in the blob store.

use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{ArtifactRef, BlobRef, PipelineResult};
use time::OffsetDateTime;

use crate::BoxError;
use crate::delivery::blob::BlobError;
use crate::delivery::tenant::ForeignTenant;

/// The run to look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunQuery {
    /// Tenant (from the envelope): the run is looked up among the
    /// tenant's runs only, and names the blob keys.
    pub tenant: String,
    /// The run's id.
    pub pipeline_run_id: String,
    /// The pipeline definition's id.
    pub pipeline_id: String,
    /// Repository name.
    pub repository: String,
    /// Commit being built.
    pub commit_sha: String,
}

/// Where a run is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    /// Queued or running; `status` is the service's word for it
    /// (`queued`, `running`, `inProgress`, `canceling`).
    InProgress {
        /// The service's status.
        status: String,
    },
    /// Finished (boxed: it is much larger than the other variant).
    Finished(Box<FinishedRun>),
}

/// A finished run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedRun {
    /// How it ended.
    pub result: PipelineResult,
    /// When an agent started it (after waiting in the queue), when known.
    pub started_at: Option<OffsetDateTime>,
    /// When it finished.
    pub finished_at: OffsetDateTime,
    /// The first step that failed.
    pub failed_step: Option<String>,
    /// The log, in the blob store.
    pub log: Option<BlobRef>,
    /// JUnit files, in the blob store.
    pub test_results: Vec<BlobRef>,
    /// Published artifacts, in the blob store.
    pub artifacts: Vec<ArtifactRef>,
    /// Web address of the run, when the service has one.
    pub url: Option<String>,
}

/// A pipeline service that reports on runs. Asking about a finished run
/// again must report the same result (the monitor is reconciled on the
/// run id). Implementations never wait for a run to finish.
#[async_trait]
pub trait PipelineRunStatus: Send + Sync {
    /// Where the run is now.
    async fn run_status(&self, query: &RunQuery) -> Result<RunState, MonitorError>;
}

/// Why following a run failed; each variant says whether a retry can help.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    /// The message cannot be acted on (bad ids, a run of another commit).
    /// Permanent.
    #[error("invalid pipeline run request: {0}")]
    Invalid(String),
    /// The service has no such run. Permanent.
    #[error("pipeline run `{run_id}` not found")]
    RunNotFound {
        /// The run id.
        run_id: String,
    },
    /// The run did not finish within the monitor's polls. Permanent: an
    /// operator looks at the run and replays the last poll.
    #[error("pipeline run `{run_id}` still not finished after {polls} polls; giving up")]
    GaveUp {
        /// The run id.
        run_id: String,
        /// Polls made.
        polls: u32,
    },
    /// The service or the blob store could not be reached or failed.
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
    /// The service refused the request (authentication, permissions).
    /// Permanent.
    #[error("pipeline service refused the request: {0}")]
    Rejected(#[source] BoxError),
    /// The run is another tenant's. Permanent.
    #[error(transparent)]
    ForeignTenant(#[from] ForeignTenant),
    /// A pipeline artifact of the run cannot be copied (too large, not a
    /// readable zip, an unsafe path). Permanent: the run gives the same
    /// bytes again; fix the pipeline's artifact and run it again.
    #[error("pipeline artifact `{name}` of run `{run_id}` cannot be copied: {reason}")]
    Artifact {
        /// The run.
        run_id: String,
        /// The artifact.
        name: String,
        /// Why.
        reason: String,
    },
}

impl MonitorError {
    /// Whether retrying may help.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Throttled { .. })
    }
}

port_error_conversions!(MonitorError);

impl From<BlobError> for MonitorError {
    fn from(err: BlobError) -> Self {
        if err.is_transient() {
            Self::Unavailable(Box::new(err))
        } else {
            Self::Rejected(Box::new(err))
        }
    }
}
