//! The Azure DevOps adapter: follows an Azure Pipelines run through REST
//! API 7.1 and, once it completed, copies its log and test results into
//! bosun's blob store. `{project}` is the tenant's project
//! ([`AzureDevOpsClient::project_for`]).
//!
//! 1. Pipelines - Runs - Get (`GET {org}/{project}/_apis/pipelines/{pipelineId}/runs/{runId}`):
//!    run ids are project-wide, so the run's `pipeline.folder` must be the
//!    tenant's (`\bosun\<tenant>`, where pipeline generation puts the
//!    tenant's definitions) or `\bosun` (definitions made before tenant
//!    folders, whose owner cannot be told; they stay readable by their run
//!    id); another tenant's folder, or a pipeline bosun did not make, is
//!    refused ([`MonitorError::ForeignTenant`]). `state` other than
//!    `completed` is in progress; `result` `succeeded`,
//!    `canceled`, or else failed (the contract reports Azure's
//!    `partiallySucceeded` as failed);
//! 2. the build timeline (`GET .../_apis/build/builds/{runId}/timeline`):
//!    the first failed `Task` record is the failed step, the earliest
//!    record start is when an agent picked the run up;
//! 3. the logs (`GET .../_apis/build/builds/{runId}/logs`, then each log's
//!    lines as JSON), joined in log order and uploaded to the
//!    `build-logs` container under `<tenant>/<runId>/log.txt`;
//! 4. the test runs of the build (`GET .../_apis/test/runs?buildUri=vstfs:///Build/Build/{runId}`)
//!    and their results (`GET .../_apis/test/Runs/{id}/results`, paged by
//!    1000), written as one JUnit XML file per test run and uploaded to the
//!    `test-results` container under `<tenant>/<runId>/azure-test-run-<id>.xml`.
//!
//! 5. the pipeline artifacts the consumers after the build read
//!    (`container-context.tar`, `package-content.tar`, `*.nupkg`),
//!    downloaded as zips and stored as tars in the `artifacts` container
//!    under `<tenant>/<runId>/<name>`, as the local runner stores them
//!    ([`artifacts`]).

use std::fmt::Write as _;
use std::sync::Arc;

use async_trait::async_trait;
use bosun_contracts::messages::{BlobRef, PipelineResult};
use serde::Deserialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::port::{FinishedRun, MonitorError, PipelineRunStatus, RunQuery, RunState};
use crate::delivery::azure::devops::{AzureDevOpsClient, AzureDevOpsConfig, AzureDevOpsError, check_pipeline_folder};
use crate::delivery::blob::BlobStore;
use crate::delivery::pipeline::{LOG_CONTAINER, TEST_RESULTS_CONTAINER};

pub mod artifacts;

/// Test results fetched per request.
const RESULTS_PAGE: usize = 1000;

/// Most test results copied from one test run.
const MAX_RESULTS: usize = 100_000;

/// Follows Azure Pipelines runs.
#[derive(Clone)]
pub struct AzureRunStatus {
    client: AzureDevOpsClient,
    blobs: Arc<dyn BlobStore>,
}

impl std::fmt::Debug for AzureRunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureRunStatus")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl AzureRunStatus {
    /// An adapter for the configured organization and project, uploading
    /// logs and test results to `blobs`.
    pub fn new(config: &AzureDevOpsConfig, blobs: Arc<dyn BlobStore>) -> Result<Self, AzureDevOpsError> {
        Ok(Self::from_client(AzureDevOpsClient::new(config)?, blobs))
    }

    /// An adapter sharing an existing client.
    pub fn from_client(client: AzureDevOpsClient, blobs: Arc<dyn BlobStore>) -> Self {
        Self { client, blobs }
    }

    /// A URL in `tenant`'s project (see [`AzureDevOpsClient::project_for`]).
    fn project_url(&self, tenant: &str, rest: &[&str], query: &[(&str, &str)]) -> reqwest::Url {
        self.client.project_url(tenant, rest, query)
    }

    /// The first failed task and the earliest start of the timeline.
    async fn timeline(
        &self,
        tenant: &str,
        run_id: &str,
    ) -> Result<(Option<String>, Option<OffsetDateTime>), MonitorError> {
        let url = self.project_url(tenant, &["build", "builds", run_id, "timeline"], &[]);
        let Some(timeline) = self.client.get_json_opt::<Timeline>(url).await? else {
            return Ok((None, None));
        };
        let mut records = timeline.records;
        records.sort_by_key(|record| (date(record.start_time.as_deref()), record.order.unwrap_or(i64::MAX)));
        let failed = records
            .iter()
            .find(|record| record.kind.as_deref() == Some("Task") && record.result.as_deref() == Some("failed"))
            .map(|record| record.name.clone());
        let started = records
            .iter()
            .filter_map(|record| date(record.start_time.as_deref()))
            .min();
        Ok((failed, started))
    }

    /// The run's logs joined into one blob.
    async fn log(&self, tenant: &str, run_id: &str) -> Result<Option<BlobRef>, MonitorError> {
        let url = self.project_url(tenant, &["build", "builds", run_id, "logs"], &[]);
        let Some(mut logs) = self.client.get_json_opt::<LogList>(url).await? else {
            return Ok(None);
        };
        logs.value.sort_by_key(|log| log.id);
        let mut text = String::new();
        for log in &logs.value {
            let id = log.id.to_string();
            let url = self.project_url(tenant, &["build", "builds", run_id, "logs", &id], &[]);
            let lines: LogLines = self.client.get_json(url).await?;
            let _ = writeln!(text, "##[section]Log {id}");
            for line in lines.value {
                text.push_str(&line);
                text.push('\n');
            }
        }
        let key = format!("{tenant}/{run_id}/log.txt");
        let blob = self
            .blobs
            .put(LOG_CONTAINER, &key, text.into_bytes(), "text/plain; charset=utf-8")
            .await?;
        Ok(Some(blob))
    }

    /// One JUnit file per test run of the build.
    async fn test_results(&self, tenant: &str, run_id: &str) -> Result<Vec<BlobRef>, MonitorError> {
        let build_uri = format!("vstfs:///Build/Build/{run_id}");
        let url = self.project_url(tenant, &["test", "runs"], &[("buildUri", &build_uri)]);
        let runs: TestRunList = self.client.get_json(url).await?;
        let mut blobs = Vec::new();
        for test_run in runs.value {
            let id = test_run.id.to_string();
            let mut results = Vec::new();
            loop {
                let skip = results.len().to_string();
                let top = RESULTS_PAGE.to_string();
                let url = self.project_url(
                    tenant,
                    &["test", "Runs", &id, "results"],
                    &[("$top", &top), ("$skip", &skip)],
                );
                let page: TestResultList = self.client.get_json(url).await?;
                let count = page.value.len();
                results.extend(page.value);
                if count < RESULTS_PAGE || results.len() >= MAX_RESULTS {
                    break;
                }
            }
            let name = test_run.name.unwrap_or_else(|| format!("test run {id}"));
            let xml = junit(&name, &results);
            let key = format!("{tenant}/{run_id}/azure-test-run-{id}.xml");
            blobs.push(
                self.blobs
                    .put(TEST_RESULTS_CONTAINER, &key, xml.into_bytes(), "application/xml")
                    .await?,
            );
        }
        Ok(blobs)
    }
}

fn date(value: Option<&str>) -> Option<OffsetDateTime> {
    value.and_then(|value| OffsetDateTime::parse(value, &Rfc3339).ok())
}

fn to_second(at: OffsetDateTime) -> OffsetDateTime {
    at.replace_nanosecond(0).unwrap_or(at)
}

#[async_trait]
impl PipelineRunStatus for AzureRunStatus {
    async fn run_status(&self, query: &RunQuery) -> Result<RunState, MonitorError> {
        let url = self.project_url(
            &query.tenant,
            &["pipelines", &query.pipeline_id, "runs", &query.pipeline_run_id],
            &[],
        );
        let Some(run) = self.client.get_json_opt::<Run>(url).await? else {
            return Err(MonitorError::RunNotFound {
                run_id: query.pipeline_run_id.clone(),
            });
        };
        let folder = run.pipeline.as_ref().and_then(|pipeline| pipeline.folder.as_deref());
        check_pipeline_folder(
            || format!("pipeline run `{}`", query.pipeline_run_id),
            folder,
            &query.tenant,
        )?;
        if run.state != "completed" {
            return Ok(RunState::InProgress { status: run.state });
        }
        let result = match run.result.as_deref() {
            Some("succeeded") => PipelineResult::Succeeded,
            Some("canceled") => PipelineResult::Canceled,
            _ => PipelineResult::Failed,
        };
        let (failed_step, started_at) = self.timeline(&query.tenant, &query.pipeline_run_id).await?;
        let log = self.log(&query.tenant, &query.pipeline_run_id).await?;
        let test_results = self.test_results(&query.tenant, &query.pipeline_run_id).await?;
        let artifacts = self.artifacts(&query.tenant, &query.pipeline_run_id).await?;
        let finished_at = date(run.finished_date.as_deref()).unwrap_or_else(OffsetDateTime::now_utc);
        Ok(RunState::Finished(Box::new(FinishedRun {
            result,
            started_at: started_at.map(to_second),
            finished_at: to_second(finished_at),
            failed_step,
            log,
            test_results,
            artifacts,
            url: run.links.and_then(|links| links.web).map(|web| web.href),
        })))
    }
}

/// Escapes text for an XML attribute or element.
fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() && !matches!(c, '\n' | '\r' | '\t') => {}
            c => out.push(c),
        }
    }
    out
}

/// Azure DevOps test results as a JUnit XML document (one test suite).
fn junit(suite: &str, results: &[TestResult]) -> String {
    let failed = |result: &TestResult| {
        matches!(
            result.outcome.as_deref(),
            Some("Failed" | "Error" | "Timeout" | "Aborted")
        )
    };
    let skipped = |result: &TestResult| !failed(result) && result.outcome.as_deref() != Some("Passed");
    let failures = results.iter().filter(|r| failed(r)).count();
    let skips = results.iter().filter(|r| skipped(r)).count();
    let seconds: f64 = results.iter().map(|r| r.duration_in_ms.unwrap_or(0.0)).sum::<f64>() / 1000.0;
    let suite = xml_escape(suite);
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        xml,
        "<testsuites name=\"{suite}\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skips}\" time=\"{seconds:.3}\">",
        results.len()
    );
    let _ = writeln!(
        xml,
        "  <testsuite name=\"{suite}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skips}\" time=\"{seconds:.3}\">",
        results.len()
    );
    for result in results {
        let name = result
            .automated_test_name
            .as_deref()
            .or(result.test_case_title.as_deref())
            .unwrap_or("unnamed");
        let class = result.automated_test_storage.as_deref().unwrap_or("");
        let time = result.duration_in_ms.unwrap_or(0.0) / 1000.0;
        let _ = write!(
            xml,
            "    <testcase classname=\"{}\" name=\"{}\" time=\"{time:.3}\"",
            xml_escape(class),
            xml_escape(name)
        );
        if failed(result) {
            let _ = writeln!(
                xml,
                ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                xml_escape(result.error_message.as_deref().unwrap_or("")),
                xml_escape(result.stack_trace.as_deref().unwrap_or(""))
            );
        } else if skipped(result) {
            let _ = writeln!(xml, ">\n      <skipped/>\n    </testcase>");
        } else {
            let _ = writeln!(xml, "/>");
        }
    }
    xml.push_str("  </testsuite>\n</testsuites>\n");
    xml
}

/// `Run`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Run {
    #[serde(default)]
    pipeline: Option<PipelineReference>,
    state: String,
    #[serde(default)]
    result: Option<String>,
    #[serde(default)]
    finished_date: Option<String>,
    #[serde(default, rename = "_links")]
    links: Option<Links>,
}

/// `PipelineReference`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct PipelineReference {
    #[serde(default)]
    folder: Option<String>,
}

/// `ReferenceLinks`, the web link.
#[derive(Debug, Deserialize)]
struct Links {
    #[serde(default)]
    web: Option<Link>,
}

#[derive(Debug, Deserialize)]
struct Link {
    href: String,
}

/// `Timeline`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct Timeline {
    #[serde(default)]
    records: Vec<TimelineRecord>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TimelineRecord {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    result: Option<String>,
    #[serde(default)]
    start_time: Option<String>,
    #[serde(default)]
    order: Option<i64>,
}

/// A list of `BuildLog`s.
#[derive(Debug, Deserialize)]
struct LogList {
    #[serde(default)]
    value: Vec<BuildLog>,
}

#[derive(Debug, Deserialize)]
struct BuildLog {
    id: u64,
}

/// The lines of one log.
#[derive(Debug, Deserialize)]
struct LogLines {
    #[serde(default)]
    value: Vec<String>,
}

/// A list of `TestRun`s.
#[derive(Debug, Deserialize)]
struct TestRunList {
    #[serde(default)]
    value: Vec<TestRun>,
}

#[derive(Debug, Deserialize)]
struct TestRun {
    id: u64,
    #[serde(default)]
    name: Option<String>,
}

/// A list of `TestCaseResult`s.
#[derive(Debug, Deserialize)]
struct TestResultList {
    #[serde(default)]
    value: Vec<TestResult>,
}

/// `TestCaseResult`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TestResult {
    #[serde(default)]
    automated_test_name: Option<String>,
    #[serde(default)]
    automated_test_storage: Option<String>,
    #[serde(default)]
    test_case_title: Option<String>,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    duration_in_ms: Option<f64>,
    #[serde(default)]
    error_message: Option<String>,
    #[serde(default)]
    stack_trace: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn junit_counts_and_escapes() {
        let result = |name: &str, outcome: &str, error: Option<&str>| TestResult {
            automated_test_name: Some(name.to_owned()),
            automated_test_storage: Some("Payments.Tests.dll".to_owned()),
            test_case_title: None,
            outcome: Some(outcome.to_owned()),
            duration_in_ms: Some(1500.0),
            error_message: error.map(str::to_owned),
            stack_trace: None,
        };
        let xml = junit(
            "Payments <unit>",
            &[
                result("Pays", "Passed", None),
                result("Refunds", "Failed", Some("expected 1 & got 2")),
                result("Later", "NotExecuted", None),
            ],
        );
        assert!(
            xml.contains(
                "<testsuites name=\"Payments &lt;unit&gt;\" tests=\"3\" failures=\"1\" skipped=\"1\" time=\"4.500\">"
            ),
            "{xml}"
        );
        assert!(
            xml.contains("<testcase classname=\"Payments.Tests.dll\" name=\"Pays\" time=\"1.500\"/>"),
            "{xml}"
        );
        assert!(
            xml.contains("<failure message=\"expected 1 &amp; got 2\"></failure>"),
            "{xml}"
        );
        assert!(xml.contains("<skipped/>"), "{xml}");
        assert!(testcases_are_closed(&xml));
    }

    /// A rough check that every opened element is closed.
    fn testcases_are_closed(xml: &str) -> bool {
        xml.matches("<testcase").count() == xml.matches("</testcase>").count() + xml.matches("\"/>").count()
    }
}
