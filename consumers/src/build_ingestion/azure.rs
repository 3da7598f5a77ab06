//! The Azure DevOps adapter: the run is an Azure Pipelines build (its
//! `pipelineRunId` is the build id), its tests are the Azure DevOps test
//! runs published for it, and its log comes from the Build Logs API when
//! the run message carries none. Everything derived is stored in the blob
//! store and recorded as the local adapter does ([`super::results`]).
//! `{project}` is the tenant's project
//! ([`AzureDevOpsClient::project_for`]).
//!
//! 0. `GET {project}/_apis/build/builds/{id}` (REST 7.1): build ids are
//!    project-wide, so the build's definition must be in the tenant's
//!    folder (`\bosun\<tenant>`), or in `\bosun` (made before tenant
//!    folders); another tenant's is refused
//!    ([`crate::delivery::azure::devops::check_pipeline_folder`]);
//! 1. without a log on the message: `GET {project}/_apis/build/builds/{id}/logs`
//!    (REST 7.1), then `GET .../logs/{logId}` for each (JSON, one string
//!    per line), joined in log order under a `##[bosun] log {logId}`
//!    header and stored as the run's log (cut at [`MAX_LOG_BYTES`]);
//! 2. `GET {project}/_apis/test/runs?buildUri=vstfs:///Build/Build/{id}&includeRunDetails=true`
//!    (REST 7.1): the counts come from each run's `runStatistics` by
//!    outcome (`Passed`; `Failed`, `Error`, `Timeout`, `Aborted` count as
//!    failed; any other outcome as skipped), or from `totalTests`,
//!    `passedTests` and `unanalyzedTests` when a run has no statistics;
//! 3. for runs with failures, `GET {project}/_apis/test/Runs/{runId}/results?outcomes=Failed,Error,Timeout,Aborted&$top=100`
//!    (REST 7.1-preview.6) for the failing tests' names and messages;
//! 4. a build with no test runs falls back to the JUnit files on the
//!    message, as the local adapter reads them.

use std::sync::Arc;

use async_trait::async_trait;
use bosun_contracts::messages::{BuildCompleted, MAX_FAILED_TESTS, TestSummary};
use reqwest::Url;
use serde::Deserialize;
use serde_json::Value;

use super::junit::{TestCase, TestOutcome};
use super::port::{BuildResults, IngestError, IngestRequest};
use super::results::{self, ReportRun, ReportSource, RunLog, TestReport, TestResults};
use crate::delivery::azure::devops::{AzureDevOpsClient, AzureDevOpsConfig, AzureDevOpsError, check_pipeline_folder};
use crate::delivery::blob::BlobStore;

/// API version of the test results API (a preview API).
pub const TEST_RESULTS_API_VERSION: &str = "7.1-preview.6";

/// Largest log stored; a longer one is cut with a note.
pub const MAX_LOG_BYTES: usize = 64 * 1024 * 1024;

/// Test outcomes that count as failed.
const FAILED_OUTCOMES: &str = "Failed,Error,Timeout,Aborted";

/// Ingests Azure Pipelines builds.
#[derive(Clone)]
pub struct AzureBuildResults {
    client: AzureDevOpsClient,
    blobs: Arc<dyn BlobStore>,
}

impl std::fmt::Debug for AzureBuildResults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureBuildResults")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl AzureBuildResults {
    /// An adapter for the configured organization and project, storing logs,
    /// reports and records in `blobs`.
    pub fn new(config: &AzureDevOpsConfig, blobs: Arc<dyn BlobStore>) -> Result<Self, AzureDevOpsError> {
        Ok(Self {
            client: AzureDevOpsClient::new(config)?,
            blobs,
        })
    }

    /// A URL in `tenant`'s project (see [`AzureDevOpsClient::project_for`]).
    fn project_url(&self, tenant: &str, rest: &[&str], query: &[(&str, &str)]) -> Url {
        self.client.project_url(tenant, rest, query)
    }

    /// The build's logs joined into one text.
    async fn fetch_log(&self, tenant: &str, build: &str) -> Result<Option<Vec<u8>>, IngestError> {
        let url = self.project_url(tenant, &["build", "builds", build, "logs"], &[]);
        let Some(mut logs) = self.client.get_json_opt::<List<BuildLog>>(url).await? else {
            return Ok(None);
        };
        if logs.value.is_empty() {
            return Ok(None);
        }
        logs.value.sort_by_key(|log| log.id);
        let mut content = Vec::new();
        for log in logs.value {
            let id = log.id.to_string();
            let url = self.project_url(tenant, &["build", "builds", build, "logs", &id], &[]);
            let lines: Value = self.client.get_json(url).await?;
            content.extend_from_slice(format!("##[bosun] log {id}\n").as_bytes());
            match &lines {
                Value::Object(object) => {
                    for line in object.get("value").and_then(Value::as_array).into_iter().flatten() {
                        content.extend_from_slice(line.as_str().unwrap_or_default().as_bytes());
                        content.push(b'\n');
                    }
                }
                Value::String(text) => {
                    content.extend_from_slice(text.as_bytes());
                    content.push(b'\n');
                }
                _ => {}
            }
            if content.len() > MAX_LOG_BYTES {
                content.truncate(MAX_LOG_BYTES);
                content.extend_from_slice(b"\n##[bosun] log cut: over the size limit\n");
                break;
            }
        }
        Ok(Some(content))
    }

    async fn test_runs(&self, tenant: &str, build: &str) -> Result<Vec<TestRun>, IngestError> {
        let build_uri = format!("vstfs:///Build/Build/{build}");
        let url = self.project_url(
            tenant,
            &["test", "runs"],
            &[("buildUri", &build_uri), ("includeRunDetails", "true")],
        );
        Ok(self.client.get_json::<List<TestRun>>(url).await?.value)
    }

    async fn failing_results(&self, tenant: &str, run: u64) -> Result<Vec<TestCaseResult>, IngestError> {
        let run = run.to_string();
        let top = MAX_FAILED_TESTS.to_string();
        let mut url = self.project_url(
            tenant,
            &["test", "Runs", &run, "results"],
            &[("outcomes", FAILED_OUTCOMES), ("$top", &top)],
        );
        set_api_version(&mut url, TEST_RESULTS_API_VERSION);
        Ok(self.client.get_json::<List<TestCaseResult>>(url).await?.value)
    }

    async fn results_of_runs(&self, request: &IngestRequest, runs: Vec<TestRun>) -> Result<TestResults, IngestError> {
        let mut summary = TestSummary::default();
        let mut report_runs = Vec::with_capacity(runs.len());
        let mut failures = Vec::new();
        for run in runs {
            let counts = run.summary();
            summary.total = summary.total.saturating_add(counts.total);
            summary.passed = summary.passed.saturating_add(counts.passed);
            summary.failed = summary.failed.saturating_add(counts.failed);
            summary.skipped = summary.skipped.saturating_add(counts.skipped);
            if counts.failed > 0 && failures.len() < MAX_FAILED_TESTS {
                for result in self.failing_results(&request.tenant, run.id).await? {
                    failures.push(result.into_case(&run.name));
                }
            }
            report_runs.push(ReportRun {
                id: run.id,
                name: run.name,
                summary: counts,
            });
        }
        Ok(TestResults {
            summary,
            failed_tests: failures.iter().map(TestCase::display_name).collect(),
            report: Some(TestReport {
                build_id: request.build_id.clone(),
                pipeline_run_id: request.run.pipeline_run_id.clone(),
                source: ReportSource::AzureTestRuns,
                summary,
                files: Vec::new(),
                runs: report_runs,
                tests: failures,
            }),
        })
    }
}

/// Replaces the `api-version` the client appended (for preview APIs).
fn set_api_version(url: &mut Url, version: &str) {
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(key, _)| key != "api-version")
        .map(|(key, value)| (key.into_owned(), value.into_owned()))
        .collect();
    url.query_pairs_mut()
        .clear()
        .extend_pairs(pairs)
        .append_pair("api-version", version);
}

#[async_trait]
impl BuildResults for AzureBuildResults {
    async fn ingest(&self, request: &IngestRequest) -> Result<BuildCompleted, IngestError> {
        let build = request.run.pipeline_run_id.as_str();
        if build.parse::<u64>().is_err() {
            return Err(IngestError::Invalid(format!(
                "pipelineRunId `{build}` is not an Azure Pipelines build id"
            )));
        }
        let url = self.project_url(&request.tenant, &["build", "builds", build], &[]);
        let Some(details) = self.client.get_json_opt::<Build>(url).await? else {
            return Err(IngestError::Invalid(format!("build {build} not found")));
        };
        let folder = details
            .definition
            .as_ref()
            .and_then(|definition| definition.path.as_deref());
        check_pipeline_folder(|| format!("build {build}"), folder, &request.tenant)?;
        let log = match &request.run.log {
            Some(blob) => RunLog::Stored(blob.clone()),
            None => RunLog::Captured(match self.fetch_log(&request.tenant, build).await? {
                Some(content) => content,
                None => results::missing_log_note(request),
            }),
        };
        let runs = self.test_runs(&request.tenant, build).await?;
        let tests = if runs.is_empty() {
            results::junit_results(self.blobs.as_ref(), request).await?
        } else {
            self.results_of_runs(request, runs).await?
        };
        results::record_build(self.blobs.as_ref(), request, tests, log).await
    }
}

/// A `{count, value}` list.
#[derive(Debug, Deserialize)]
struct List<T> {
    #[serde(default = "Vec::new")]
    value: Vec<T>,
}

/// `Build`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct Build {
    #[serde(default)]
    definition: Option<DefinitionReference>,
}

/// `DefinitionReference`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct DefinitionReference {
    /// The folder, e.g. `\bosun\contoso`.
    #[serde(default)]
    path: Option<String>,
}

/// `BuildLog`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct BuildLog {
    id: u64,
}

/// `TestRun`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TestRun {
    id: u64,
    #[serde(default)]
    name: String,
    #[serde(default)]
    total_tests: u32,
    #[serde(default)]
    passed_tests: u32,
    #[serde(default)]
    unanalyzed_tests: u32,
    #[serde(default)]
    run_statistics: Vec<RunStatistic>,
}

/// `RunStatistic`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct RunStatistic {
    #[serde(default)]
    outcome: String,
    #[serde(default)]
    count: u32,
}

impl TestRun {
    fn summary(&self) -> TestSummary {
        let mut summary = TestSummary::default();
        if self.run_statistics.is_empty() {
            let total = self.total_tests;
            let passed = self.passed_tests.min(total);
            let failed = self.unanalyzed_tests.min(total - passed);
            return TestSummary {
                total,
                passed,
                failed,
                skipped: total - passed - failed,
            };
        }
        for statistic in &self.run_statistics {
            let count = statistic.count;
            summary.total = summary.total.saturating_add(count);
            match statistic.outcome.as_str() {
                "Passed" => summary.passed = summary.passed.saturating_add(count),
                "Failed" | "Error" | "Timeout" | "Aborted" => summary.failed = summary.failed.saturating_add(count),
                _ => summary.skipped = summary.skipped.saturating_add(count),
            }
        }
        summary
    }
}

/// `TestCaseResult`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TestCaseResult {
    #[serde(default)]
    automated_test_name: Option<String>,
    #[serde(default)]
    test_case_title: Option<String>,
    #[serde(default)]
    outcome: String,
    #[serde(default)]
    error_message: Option<String>,
    #[serde(default)]
    duration_in_ms: Option<f64>,
}

impl TestCaseResult {
    fn into_case(self, run: &str) -> TestCase {
        let name = self
            .automated_test_name
            .filter(|name| !name.trim().is_empty())
            .or(self.test_case_title)
            .unwrap_or_default();
        let duration_ms = self.duration_in_ms.filter(|ms| ms.is_finite() && *ms >= 0.0).map(|ms| {
            // Whole milliseconds of a finite, non-negative duration.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let whole = ms.round() as u64;
            whole
        });
        TestCase {
            suite: run.to_owned(),
            classname: String::new(),
            name,
            outcome: if self.outcome == "Failed" {
                TestOutcome::Failed
            } else {
                TestOutcome::Errored
            },
            duration_ms,
            message: self
                .error_message
                .map(|message| message.lines().next().unwrap_or_default().trim().to_owned())
                .filter(|message| !message.is_empty()),
        }
    }
}
