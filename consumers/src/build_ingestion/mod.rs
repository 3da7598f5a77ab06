//! The build-ingestion consumer: `PipelineRunCompleted` in,
//! `BuildCompleted` out.
//!
//! Turns a finished pipeline run into a build record: tests counted from
//! the run's JUnit files ([`junit`]) into a `TestSummary` with the names of
//! the failing tests (the first 100; the stored test report has them all),
//! the log kept as a blob reference (claim check), the run's artifacts
//! passed on, and the result set — a run that succeeded but whose tests
//! failed is `failed`. Idempotent on the build id, `build-<pipelineRunId>`:
//! the same run ingested twice gives the same `BuildCompleted` and one
//! record ([`results`]). The tenant comes from the envelope: the build id
//! and every blob ingestion writes are under the tenant's keys
//! (`<tenant>/...`), so two tenants' runs of the same id are two builds,
//! and a run naming blobs that are not under its tenant's keys is refused
//! ([`crate::delivery::tenant::check_blob`]). Retried
//! exponentially, 5 times (DESIGN.md).
//!
//! - [`port`] — the [`BuildResults`] port and its [`IngestError`];
//! - [`junit`] — the JUnit XML parser;
//! - [`results`] — normalized results, the test report and the ingestion
//!   record, shared by the adapters;
//! - [`local`] — ingestion over the blob store
//!   ([`local::LocalBuildResults`]);
//! - [`azure`] — Azure DevOps test runs and build logs
//!   ([`azure::AzureBuildResults`]).

pub mod azure;
pub mod junit;
pub mod local;
pub mod port;
pub mod results;

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use bosun_contracts::messages::PipelineRunCompleted;
use bosun_contracts::validate::{self, Validate};
use bosun_contracts::{ConsumerName, Envelope, Message};

pub use port::{BuildResults, IngestError, IngestRequest};

use crate::{Consumer, HandlerError, Inbound, Outcome, RetryPolicy, UnexpectedMessage};

/// The consumer's name: its queue and subscription.
pub const NAME: ConsumerName = "build-ingestion";

/// The build id of a pipeline run: `build-<pipelineRunId>`.
pub fn build_id(pipeline_run_id: &str) -> String {
    format!("build-{pipeline_run_id}")
}

/// The build-ingestion consumer over a [`BuildResults`] port.
#[derive(Debug, Clone)]
pub struct BuildIngestion<P> {
    results: P,
}

impl<P: BuildResults> BuildIngestion<P> {
    /// The consumer over an ingestion port: [`local::LocalBuildResults`],
    /// [`azure::AzureBuildResults`] (or any other implementation of the port).
    pub fn new(results: P) -> Self {
        Self { results }
    }

    /// The port.
    pub fn results(&self) -> &P {
        &self.results
    }
}

/// Checks a run and turns it into the port's request.
pub fn ingest_request(envelope: &Envelope, run: &PipelineRunCompleted) -> Result<IngestRequest, IngestError> {
    let invalid = |field: &str, reason: &str| IngestError::Invalid(format!("{field}: {reason}"));
    validate::tenant_id("tenantId", &envelope.tenant_id).map_err(|err| invalid(&err.field, &err.reason))?;
    run.validate()
        .map_err(|err| invalid(&format!("payload.{}", err.field), &err.reason))?;
    let build_id = build_id(&run.pipeline_run_id);
    validate::identifier("buildId", &build_id).map_err(|err| invalid(&err.field, &err.reason))?;
    let blobs = run
        .log
        .iter()
        .chain(&run.test_results)
        .chain(run.artifacts.iter().map(|artifact| &artifact.blob));
    for blob in blobs {
        crate::delivery::tenant::check_blob(blob, &envelope.tenant_id)?;
    }
    Ok(IngestRequest {
        tenant: envelope.tenant_id.clone(),
        build_id,
        run: run.clone(),
    })
}

#[async_trait]
impl<P: BuildResults> Consumer for BuildIngestion<P> {
    fn name(&self) -> ConsumerName {
        NAME
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(5)
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        let Message::PipelineRunCompleted(run) = inbound.message else {
            return Err(UnexpectedMessage::handler_error(NAME, inbound.message));
        };
        let request = ingest_request(inbound.envelope, run)?;
        let build = self.results.ingest(&request).await.inspect_err(|err| {
            tracing::warn!(
                tenant = %request.tenant,
                build = %request.build_id,
                retryable = err.is_retryable(),
                error = %err,
                "build ingestion failed"
            );
        })?;
        let event = Message::from(build);
        event.validate().map_err(|err| {
            HandlerError::permanent(IngestError::Invalid(format!(
                "the ingestion makes an invalid BuildCompleted: {err}"
            )))
        })?;
        Ok(Outcome::send([event]))
    }
}
