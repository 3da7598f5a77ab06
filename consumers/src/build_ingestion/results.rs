//! What both adapters share: reading a run's JUnit files into normalized
//! test results, the test report they write, and the ingestion record that
//! makes ingestion idempotent on the build id.
//!
//! Blobs written (container / key):
//!
//! - [`REPORT_CONTAINER`] / `<tenant>/<repository>/<buildId>/tests.json` —
//!   the normalized test report ([`TestReport`]), when the run had tests;
//! - [`LOG_CONTAINER`] / `<tenant>/<repository>/<pipelineRunId>/log.txt` —
//!   the run's log, only when the run message carried none (fetched from
//!   the build service, or a note saying there is none);
//! - [`RECORD_CONTAINER`] / `<tenant>/<buildId>.json` — the ingestion
//!   record: the `BuildCompleted` payload.
//!
//! Everything written is derived from the run alone (the build's
//! `completedAt` is the run's `finishedAt`), so ingesting a run again
//! produces the same bytes: when the record is already there with that
//! content, nothing is written and the recorded build is returned. (The
//! blob store port reads a blob only through a reference carrying its
//! sha256, so the record is checked against the recomputed one rather than
//! read blind.)

use bosun_contracts::messages::{BlobRef, BuildCompleted, MAX_FAILED_TESTS, PipelineResult, TestSummary};
use serde::Serialize;

use super::junit::{self, TestCase};
use super::port::{IngestError, IngestRequest};
use crate::delivery::blob::{BlobError, BlobStore, sha256_hex};

/// Container of build logs (the runner's, and those fetched here).
pub const LOG_CONTAINER: &str = "build-logs";

/// Container of normalized test reports.
pub const REPORT_CONTAINER: &str = "build-reports";

/// Container of ingestion records.
pub const RECORD_CONTAINER: &str = "build-results";

/// Longest failing-test name kept on the message (the contract's limit).
pub const MAX_TEST_NAME_CHARS: usize = 1024;

/// Where a report's tests came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ReportSource {
    /// The run's JUnit XML files.
    Junit,
    /// Azure DevOps test runs of the build.
    AzureTestRuns,
}

/// One JUnit file of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportFile {
    /// Blob container of the file.
    pub container: String,
    /// Blob key of the file.
    pub key: String,
    /// `<testsuite>` elements in it.
    pub suites: u32,
    /// Its counts.
    pub summary: TestSummary,
    /// Why it could not be read, when it could not (it then counts as one
    /// failed test).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One Azure DevOps test run of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportRun {
    /// Test run id.
    pub id: u64,
    /// Test run name.
    pub name: String,
    /// Its counts.
    pub summary: TestSummary,
}

/// The normalized test report stored next to a build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TestReport {
    /// The build.
    pub build_id: String,
    /// The pipeline run.
    pub pipeline_run_id: String,
    /// Where the tests came from.
    pub source: ReportSource,
    /// The counts.
    pub summary: TestSummary,
    /// The JUnit files read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<ReportFile>,
    /// The Azure DevOps test runs read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<ReportRun>,
    /// The tests: every test case of the JUnit files, or the failing ones
    /// of the test runs.
    pub tests: Vec<TestCase>,
}

/// A run's test results, normalized.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestResults {
    /// The counts.
    pub summary: TestSummary,
    /// Names of every failing test.
    pub failed_tests: Vec<String>,
    /// The report to store; `None` when the run had no tests at all.
    pub report: Option<TestReport>,
}

/// The run's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunLog {
    /// Already in the blob store (the run message's reference).
    Stored(BlobRef),
    /// To be stored now.
    Captured(Vec<u8>),
}

/// The note stored as the log of a run that left none.
pub fn missing_log_note(request: &IngestRequest) -> Vec<u8> {
    let result = match request.run.result {
        PipelineResult::Succeeded => "succeeded",
        PipelineResult::Failed => "failed",
        PipelineResult::Canceled => "was canceled",
    };
    format!(
        "No log was captured for pipeline run {}: the run {result} without writing one.\n",
        request.run.pipeline_run_id
    )
    .into_bytes()
}

/// The reference a blob store gives `content` stored at `container`/`key`.
fn reference(container: &str, key: &str, content: &[u8], content_type: &str) -> BlobRef {
    BlobRef {
        container: container.to_owned(),
        key: key.to_owned(),
        size_bytes: content.len() as u64,
        sha256: sha256_hex(content),
        content_type: content_type.to_owned(),
    }
}

/// A document as pretty JSON (deterministic: fields in declaration order).
fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>, IngestError> {
    serde_json::to_vec_pretty(value)
        .map_err(|err| IngestError::Invalid(format!("could not encode a build document: {err}")))
}

fn clip(name: &str) -> String {
    name.chars().take(MAX_TEST_NAME_CHARS).collect()
}

fn add(total: &mut TestSummary, part: &TestSummary) {
    total.total = total.total.saturating_add(part.total);
    total.passed = total.passed.saturating_add(part.passed);
    total.failed = total.failed.saturating_add(part.failed);
    total.skipped = total.skipped.saturating_add(part.skipped);
}

/// Reads and parses the run's JUnit files. A file that is not a readable
/// JUnit report counts as one failed test named after it, so a test
/// process that died mid-report fails the build instead of shrinking it.
pub async fn junit_results(blobs: &dyn BlobStore, request: &IngestRequest) -> Result<TestResults, IngestError> {
    let run = &request.run;
    if run.test_results.is_empty() {
        return Ok(TestResults::default());
    }
    let mut results = TestResults::default();
    let mut files = Vec::with_capacity(run.test_results.len());
    let mut tests = Vec::new();
    for blob in &run.test_results {
        let bytes = blobs.get(blob).await?;
        match junit::parse(&bytes) {
            Ok(parsed) => {
                add(&mut results.summary, &parsed.summary);
                results.failed_tests.extend(
                    parsed
                        .cases
                        .iter()
                        .filter(|case| case.outcome.is_failure())
                        .map(TestCase::display_name),
                );
                files.push(ReportFile {
                    container: blob.container.clone(),
                    key: blob.key.clone(),
                    suites: parsed.suites,
                    summary: parsed.summary,
                    error: None,
                });
                tests.extend(parsed.cases);
            }
            Err(err) => {
                tracing::warn!(
                    pipeline_run = %run.pipeline_run_id,
                    container = %blob.container,
                    key = %blob.key,
                    error = %err,
                    "unreadable JUnit report counted as a failed test"
                );
                let unreadable = TestSummary {
                    total: 1,
                    passed: 0,
                    failed: 1,
                    skipped: 0,
                };
                add(&mut results.summary, &unreadable);
                results
                    .failed_tests
                    .push(format!("{}: unreadable JUnit report: {err}", blob.key));
                files.push(ReportFile {
                    container: blob.container.clone(),
                    key: blob.key.clone(),
                    suites: 0,
                    summary: unreadable,
                    error: Some(err.to_string()),
                });
            }
        }
    }
    results.report = Some(TestReport {
        build_id: request.build_id.clone(),
        pipeline_run_id: run.pipeline_run_id.clone(),
        source: ReportSource::Junit,
        summary: results.summary,
        files,
        runs: Vec::new(),
        tests,
    });
    Ok(results)
}

/// Assembles the build from the run, its test results and its log; stores
/// the report, the log (when captured now) and the ingestion record —
/// unless the same ingestion is already recorded, in which case nothing is
/// written.
pub async fn record_build(
    blobs: &dyn BlobStore,
    request: &IngestRequest,
    results: TestResults,
    log: RunLog,
) -> Result<BuildCompleted, IngestError> {
    let run = &request.run;
    let report = match &results.report {
        Some(report) => {
            let key = format!("{}/{}/{}/tests.json", request.tenant, run.repository, request.build_id);
            let bytes = to_json(report)?;
            Some((reference(REPORT_CONTAINER, &key, &bytes, "application/json"), bytes))
        }
        None => None,
    };
    let (log_ref, log_bytes) = match log {
        RunLog::Stored(blob) => (blob, None),
        RunLog::Captured(bytes) => {
            let key = format!("{}/{}/{}/log.txt", request.tenant, run.repository, run.pipeline_run_id);
            (
                reference(LOG_CONTAINER, &key, &bytes, "text/plain; charset=utf-8"),
                Some(bytes),
            )
        }
    };
    let result = match run.result {
        PipelineResult::Succeeded if results.summary.failed > 0 => PipelineResult::Failed,
        result => result,
    };
    let build = BuildCompleted {
        build_id: request.build_id.clone(),
        pipeline_run_id: run.pipeline_run_id.clone(),
        release_id: run.release_id.clone(),
        repository: run.repository.clone(),
        branch: run.branch.clone(),
        commit_sha: run.commit_sha.clone(),
        result,
        test_summary: results.summary,
        failed_tests: results
            .failed_tests
            .iter()
            .take(MAX_FAILED_TESTS)
            .map(|name| clip(name))
            .collect(),
        log: log_ref.clone(),
        test_report: report.as_ref().map(|(blob, _)| blob.clone()),
        artifacts: run.artifacts.clone(),
        module: run.module.clone(),
        completed_at: run.finished_at,
    };

    let record_key = format!("{}/{}.json", request.tenant, request.build_id);
    let record_bytes = to_json(&build)?;
    let record = reference(RECORD_CONTAINER, &record_key, &record_bytes, "application/json");
    if blobs.exists(RECORD_CONTAINER, &record_key).await? {
        match blobs.get(&record).await {
            Ok(_) => {
                tracing::info!(
                    build = %request.build_id,
                    "build already ingested; returning the recorded build"
                );
                return Ok(build);
            }
            Err(BlobError::Corrupt { reason, .. }) => tracing::warn!(
                build = %request.build_id,
                reason,
                "the recorded ingestion differs from this one (its inputs changed); recording this one"
            ),
            Err(BlobError::NotFound { .. }) => {}
            Err(err) => return Err(err.into()),
        }
    }
    if let Some((blob, bytes)) = report {
        blobs.put(&blob.container, &blob.key, bytes, &blob.content_type).await?;
    }
    if let Some(bytes) = log_bytes {
        blobs
            .put(&log_ref.container, &log_ref.key, bytes, &log_ref.content_type)
            .await?;
    }
    blobs
        .put(RECORD_CONTAINER, &record_key, record_bytes, &record.content_type)
        .await?;
    tracing::info!(
        build = %request.build_id,
        result = ?build.result,
        total = build.test_summary.total,
        failed = build.test_summary.failed,
        "build ingested"
    );
    Ok(build)
}
