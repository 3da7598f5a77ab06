//! The embedded adapter: ingestion over the blob store alone.
//!
//! The local pipeline runner stores a run's log (container `build-logs`)
//! and JUnit files (container `test-results`) and names them on
//! `PipelineRunCompleted`; this adapter reads the JUnit files, parses them
//! ([`super::junit`]), keeps the log's reference (claim check), passes the
//! run's artifacts on, and writes the test report and the ingestion record
//! ([`super::results`]). A run without a log gets a short note as its log.

use std::sync::Arc;

use async_trait::async_trait;
use bosun_contracts::messages::BuildCompleted;

use super::port::{BuildResults, IngestError, IngestRequest};
use super::results::{self, RunLog};
use crate::delivery::blob::BlobStore;

/// Ingests pipeline runs from the blob store.
#[derive(Clone)]
pub struct LocalBuildResults {
    blobs: Arc<dyn BlobStore>,
}

impl std::fmt::Debug for LocalBuildResults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBuildResults").finish_non_exhaustive()
    }
}

impl LocalBuildResults {
    /// Ingests runs whose logs and JUnit files are in `blobs` (the runtime
    /// passes its blob store, the one the pipeline runner writes to), and
    /// writes reports and records there.
    pub fn new(blobs: Arc<dyn BlobStore>) -> Self {
        Self { blobs }
    }
}

#[async_trait]
impl BuildResults for LocalBuildResults {
    async fn ingest(&self, request: &IngestRequest) -> Result<BuildCompleted, IngestError> {
        let tests = results::junit_results(self.blobs.as_ref(), request).await?;
        let log = match &request.run.log {
            Some(blob) => RunLog::Stored(blob.clone()),
            None => RunLog::Captured(results::missing_log_note(request)),
        };
        results::record_build(self.blobs.as_ref(), request, tests, log).await
    }
}
