//! The port the build-ingestion handler needs: somewhere that turns a
//! finished pipeline run into a build record (`BuildCompleted`), storing
//! what it derives (the test report, a missing log) in the blob store and
//! recording the ingestion under the build's id.

use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{BuildCompleted, PipelineRunCompleted};

use crate::BoxError;
use crate::delivery::blob::BlobError;
use crate::delivery::tenant::ForeignTenant;

/// What to ingest: the run, with the envelope's tenant and the build id
/// derived from the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestRequest {
    /// The tenant the run belongs to (from the envelope).
    pub tenant: String,
    /// `build-<pipelineRunId>`: the same run always gets the same id.
    pub build_id: String,
    /// The finished run.
    pub run: PipelineRunCompleted,
}

/// Ingests pipeline runs. Implementations must be idempotent on
/// `build_id`: ingesting the same run again returns the same
/// `BuildCompleted` and stores nothing new.
#[async_trait]
pub trait BuildResults: Send + Sync {
    /// Counts the run's tests, keeps its log and artifacts, and records the
    /// build.
    async fn ingest(&self, request: &IngestRequest) -> Result<BuildCompleted, IngestError>;
}

/// Why an ingestion failed; each variant says whether a retry can help.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The run cannot be ingested as given (bad ids, a run id the service
    /// does not know). Permanent.
    #[error("invalid ingestion request: {0}")]
    Invalid(String),
    /// A blob the run refers to is gone or does not match its reference.
    /// Permanent: retrying cannot bring it back.
    #[error("a blob of the run cannot be read: {0}")]
    BlobUnreadable(#[source] BlobError),
    /// The blob store failed. Transient.
    #[error("blob store unavailable: {0}")]
    Storage(#[source] BlobError),
    /// The build service could not be reached or failed. Transient.
    #[error("build service unavailable: {0}")]
    Unavailable(#[source] BoxError),
    /// The build service is throttling; retry after the delay.
    #[error("build service asks to retry after {after:?}: {source}")]
    Throttled {
        /// Earliest retry.
        after: Duration,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The build service refused the request (authentication, permissions).
    /// Permanent.
    #[error("build service refused the request: {0}")]
    Rejected(#[source] BoxError),
    /// The run names blobs or a build of another tenant. Permanent.
    #[error(transparent)]
    ForeignTenant(#[from] ForeignTenant),
}

impl IngestError {
    /// Whether retrying may help.
    pub fn is_retryable(&self) -> bool {
        !matches!(
            self,
            Self::Invalid(_) | Self::BlobUnreadable(_) | Self::Rejected(_) | Self::ForeignTenant(_)
        )
    }
}

impl From<BlobError> for IngestError {
    fn from(err: BlobError) -> Self {
        match err {
            BlobError::InvalidName(reason) => Self::Invalid(reason),
            err if err.is_transient() => Self::Storage(err),
            err => Self::BlobUnreadable(err),
        }
    }
}

port_error_conversions!(IngestError);
