//! Handler tests over an in-memory [`BuildResults`], and tests of the
//! local adapter (real JUnit parsing and blob writes in a temporary folder)
//! and of the Azure adapter (against a scripted local HTTP server).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{BlobRef, BuildCompleted, PipelineResult, PipelineRunCompleted, TestSummary};
use bosun_contracts::{Envelope, Message, samples};
use uuid::Uuid;

use super::azure::AzureBuildResults;
use super::local::LocalBuildResults;
use super::results::{LOG_CONTAINER, RECORD_CONTAINER, REPORT_CONTAINER};
use super::*;
use crate::delivery::azure::devops::{AzureDevOpsAuth, AzureDevOpsConfig};
use crate::delivery::azure::test_server::{MockAzure, Reply};
use crate::delivery::blob::{BlobError, BlobStore, FilesystemBlobStore};

/// A JUnit report written by `dotnet test --logger junit` with one failing
/// and one skipped test.
const DOTNET_JUNIT: &str = include_str!("testdata/Payments.Api.Tests.junit.xml");

const FAILING_TEST: &str = "Payments.Api.Tests.RetryPolicyTests.Gives_up_after_three_attempts";

const PASSING_JUNIT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="com.contoso.payments.RetryPolicyTest" tests="2" skipped="0" failures="0" errors="0" timestamp="2026-11-29T10:06:12" hostname="build-agent" time="0.031">
  <properties><property name="java.version" value="21.0.5"/></properties>
  <testcase name="retriesOnTimeout" classname="com.contoso.payments.RetryPolicyTest" time="0.021"/>
  <testcase name="doesNotRetryDeclines" classname="com.contoso.payments.RetryPolicyTest" time="0.01"/>
</testsuite>
"#;

fn envelope(message: &Message, tenant: &str) -> Envelope {
    Envelope::new(message, Uuid::now_v7(), tenant, "pipeline-monitor")
}

async fn handle<P: BuildResults>(consumer: &BuildIngestion<P>, message: Message) -> Result<Outcome, HandlerError> {
    let envelope = envelope(&message, "contoso");
    consumer.handle(Inbound::new(&envelope, &message)).await
}

fn completed(outcome: &Outcome) -> &BuildCompleted {
    assert_eq!(outcome.messages.len(), 1, "{outcome:?}");
    match &outcome.messages[0].message {
        Message::BuildCompleted(event) => event,
        other => panic!("expected BuildCompleted, got {other:?}"),
    }
}

/// An in-memory port: records requests, answers with the sample build or a
/// scripted error.
#[derive(Default)]
struct FakeResults {
    requests: Mutex<Vec<IngestRequest>>,
    fail_with: Option<fn() -> IngestError>,
}

#[async_trait]
impl BuildResults for FakeResults {
    async fn ingest(&self, request: &IngestRequest) -> Result<BuildCompleted, IngestError> {
        self.requests.lock().unwrap().push(request.clone());
        if let Some(fail) = self.fail_with {
            return Err(fail());
        }
        Ok(samples::build_completed())
    }
}

#[test]
fn name_and_retry_policy_follow_the_design() {
    let consumer = BuildIngestion::new(FakeResults::default());
    assert_eq!(consumer.name(), "build-ingestion");
    let route = bosun_contracts::routing::consumer(consumer.name()).unwrap();
    assert_eq!(route.events, ["PipelineRunCompleted"]);
    assert_eq!(consumer.retry_policy(), RetryPolicy::exponential(5));
}

#[tokio::test]
async fn handler_asks_for_the_run_under_its_build_id() {
    let consumer = BuildIngestion::new(FakeResults::default());
    let run = samples::pipeline_run_completed();
    let outcome = handle(&consumer, run.clone().into()).await.unwrap();
    assert_eq!(*completed(&outcome), samples::build_completed());
    let request = consumer.results().requests.lock().unwrap()[0].clone();
    assert_eq!(request.tenant, "contoso");
    assert_eq!(request.build_id, "build-4711");
    assert_eq!(request.run, run);
}

#[tokio::test]
async fn handler_refuses_bad_input_before_the_port() {
    let consumer = BuildIngestion::new(FakeResults::default());
    let message: Message = samples::pipeline_run_completed().into();
    let envelope = envelope(&message, "../escape");
    let err = consumer.handle(Inbound::new(&envelope, &message)).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");

    let mut run = samples::pipeline_run_completed();
    run.pipeline_run_id = "9".repeat(125);
    let err = handle(&consumer, run.into()).await.unwrap_err();
    assert!(err.to_string().contains("buildId"), "{err}");

    let err = handle(&consumer, samples::pipeline_run_started().into())
        .await
        .unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    assert!(consumer.results().requests.lock().unwrap().is_empty());
}

#[tokio::test]
async fn handler_maps_port_errors_to_retry_decisions() {
    type FailWith = fn() -> IngestError;
    let cases: [(FailWith, &str); 5] = [
        (
            || IngestError::Storage(BlobError::Unavailable("disk".into())),
            "transient",
        ),
        (|| IngestError::Unavailable("503".into()), "transient"),
        (
            || {
                IngestError::BlobUnreadable(BlobError::NotFound {
                    container: "test-results".into(),
                    key: "k".into(),
                })
            },
            "permanent",
        ),
        (|| IngestError::Rejected("401".into()), "permanent"),
        (
            || IngestError::Throttled {
                after: Duration::from_secs(3),
                source: "429".into(),
            },
            "retry-after",
        ),
    ];
    for (fail, expected) in cases {
        let consumer = BuildIngestion::new(FakeResults {
            fail_with: Some(fail),
            ..FakeResults::default()
        });
        let err = handle(&consumer, samples::pipeline_run_completed().into())
            .await
            .unwrap_err();
        let kind = match err {
            HandlerError::Transient(_) => "transient",
            HandlerError::Permanent(_) => "permanent",
            HandlerError::NeedsNewer(_) => "needs-newer",
            HandlerError::RetryAfter { after, .. } => {
                assert_eq!(after, Duration::from_secs(3));
                "retry-after"
            }
        };
        assert_eq!(kind, expected);
    }
}

// ---- local adapter ----

struct Fixture {
    dir: tempfile::TempDir,
    blobs: Arc<dyn BlobStore>,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let blobs: Arc<dyn BlobStore> = Arc::new(FilesystemBlobStore::new(dir.path().join("blobs")));
        Self { dir, blobs }
    }

    fn path(&self, blob: &BlobRef) -> std::path::PathBuf {
        self.dir.path().join("blobs").join(&blob.container).join(&blob.key)
    }

    /// A finished run as the local pipeline runner reports it: its log, the
    /// JUnit files and the artifacts in the blob store.
    async fn run(&self, result: PipelineResult, junit: &[&str]) -> PipelineRunCompleted {
        self.run_as("contoso", result, junit).await
    }

    /// A run of `tenant`, its blobs stored under the tenant's keys.
    async fn run_as(&self, tenant: &str, result: PipelineResult, junit: &[&str]) -> PipelineRunCompleted {
        let mut run = samples::pipeline_run_completed();
        run.result = result;
        let prefix = format!("{tenant}/{}/{}", run.repository, run.pipeline_run_id);
        run.log = Some(
            self.blobs
                .put(
                    "build-logs",
                    &format!("{prefix}/log.txt"),
                    b"##[section]Starting: test\nPassed!\n".to_vec(),
                    "text/plain; charset=utf-8",
                )
                .await
                .unwrap(),
        );
        run.test_results.clear();
        for (index, xml) in junit.iter().enumerate() {
            run.test_results.push(
                self.blobs
                    .put(
                        "test-results",
                        &format!("{prefix}/TestResults/results-{index}.xml"),
                        xml.as_bytes().to_vec(),
                        "application/xml",
                    )
                    .await
                    .unwrap(),
            );
        }
        run.artifacts.clear();
        let context = self
            .blobs
            .put(
                "artifacts",
                &format!("{prefix}/container-context.tar"),
                vec![0; 1024],
                "application/x-tar",
            )
            .await
            .unwrap();
        run.artifacts.push(bosun_contracts::messages::ArtifactRef {
            name: "container-context.tar".into(),
            kind: bosun_contracts::messages::ArtifactKind::ContainerContext,
            blob: context,
        });
        run
    }
}

fn request(run: PipelineRunCompleted) -> IngestRequest {
    IngestRequest {
        tenant: "contoso".into(),
        build_id: build_id(&run.pipeline_run_id),
        run,
    }
}

fn modified(path: &Path) -> std::time::SystemTime {
    std::fs::metadata(path).unwrap().modified().unwrap()
}

#[tokio::test]
async fn local_ingestion_counts_the_dotnet_report_and_fails_the_build() {
    let fixture = Fixture::new();
    let run = fixture
        .run(PipelineResult::Succeeded, &[DOTNET_JUNIT, PASSING_JUNIT])
        .await;
    let adapter = LocalBuildResults::new(Arc::clone(&fixture.blobs));
    let build = adapter.ingest(&request(run.clone())).await.unwrap();

    assert_eq!(build.build_id, "build-4711");
    assert_eq!(build.result, PipelineResult::Failed, "a failing test fails the build");
    assert_eq!(
        build.test_summary,
        TestSummary {
            total: 8,
            passed: 6,
            failed: 1,
            skipped: 1
        }
    );
    assert_eq!(build.failed_tests, vec![FAILING_TEST.to_owned()]);
    assert_eq!(Some(&build.log), run.log.as_ref(), "the log is kept by reference");
    assert_eq!(build.artifacts, run.artifacts);
    assert_eq!(build.module, run.module);
    assert_eq!(build.completed_at, run.finished_at);
    Message::from(build.clone()).validate().unwrap();

    // The normalized report is in the blob store, with every test.
    let report_ref = build.test_report.clone().unwrap();
    assert_eq!(report_ref.container, REPORT_CONTAINER);
    assert_eq!(report_ref.key, "contoso/payments-api/build-4711/tests.json");
    let report: serde_json::Value = serde_json::from_slice(&fixture.blobs.get(&report_ref).await.unwrap()).unwrap();
    assert_eq!(report["source"], "junit");
    assert_eq!(report["summary"]["failed"], 1);
    assert_eq!(report["tests"].as_array().unwrap().len(), 8);
    assert_eq!(report["files"][0]["suites"], 1);
    let failing = &report["tests"][2];
    assert_eq!(failing["outcome"], "failed");
    assert_eq!(failing["durationMs"], 34);
    assert!(
        failing["message"]
            .as_str()
            .unwrap()
            .starts_with("Assert.Equal() Failure: Values differ"),
        "{failing}"
    );

    // The ingestion is recorded under the build id.
    let record_path = fixture
        .dir
        .path()
        .join("blobs")
        .join(RECORD_CONTAINER)
        .join("contoso/build-4711.json");
    let recorded: BuildCompleted = serde_json::from_slice(&std::fs::read(&record_path).unwrap()).unwrap();
    assert_eq!(recorded, build);
}

#[tokio::test]
async fn local_ingesting_a_run_twice_returns_the_recorded_build_and_writes_nothing() {
    let fixture = Fixture::new();
    let run = fixture.run(PipelineResult::Succeeded, &[DOTNET_JUNIT]).await;
    let adapter = LocalBuildResults::new(Arc::clone(&fixture.blobs));
    let first = adapter.ingest(&request(run.clone())).await.unwrap();
    let report = fixture.path(first.test_report.as_ref().unwrap());
    let record = fixture
        .dir
        .path()
        .join("blobs")
        .join(RECORD_CONTAINER)
        .join("contoso/build-4711.json");
    let (report_time, record_time) = (modified(&report), modified(&record));
    tokio::time::sleep(Duration::from_millis(20)).await;

    let second = adapter.ingest(&request(run)).await.unwrap();
    assert_eq!(second, first);
    assert_eq!(modified(&report), report_time, "the report is not rewritten");
    assert_eq!(modified(&record), record_time, "the record is not rewritten");
}

#[tokio::test]
async fn local_passing_run_succeeds_and_a_run_without_tests_has_no_report() {
    let fixture = Fixture::new();
    let adapter = LocalBuildResults::new(Arc::clone(&fixture.blobs));
    let run = fixture.run(PipelineResult::Succeeded, &[PASSING_JUNIT]).await;
    let build = adapter.ingest(&request(run)).await.unwrap();
    assert_eq!(build.result, PipelineResult::Succeeded);
    assert_eq!(build.test_summary.passed, 2);
    assert!(build.failed_tests.is_empty());

    let mut run = fixture.run(PipelineResult::Succeeded, &[]).await;
    run.pipeline_run_id = "4712".into();
    let build = adapter.ingest(&request(run)).await.unwrap();
    assert_eq!(build.test_summary, TestSummary::default());
    assert_eq!(build.test_report, None);
    assert_eq!(build.result, PipelineResult::Succeeded);
}

#[tokio::test]
async fn local_canceled_run_without_a_log_gets_a_note_as_its_log() {
    let fixture = Fixture::new();
    let mut run = fixture.run(PipelineResult::Canceled, &[]).await;
    run.log = None;
    let build = LocalBuildResults::new(Arc::clone(&fixture.blobs))
        .ingest(&request(run))
        .await
        .unwrap();
    assert_eq!(build.result, PipelineResult::Canceled);
    assert_eq!(build.log.container, LOG_CONTAINER);
    assert_eq!(build.log.key, "contoso/payments-api/4711/log.txt");
    let note = String::from_utf8(fixture.blobs.get(&build.log).await.unwrap()).unwrap();
    assert!(note.contains("was canceled"), "{note}");
    Message::from(build).validate().unwrap();
}

#[tokio::test]
async fn local_unreadable_report_counts_as_a_failed_test() {
    let fixture = Fixture::new();
    let cut = &DOTNET_JUNIT[..DOTNET_JUNIT.len() / 2];
    let run = fixture.run(PipelineResult::Succeeded, &[PASSING_JUNIT, cut]).await;
    let build = LocalBuildResults::new(Arc::clone(&fixture.blobs))
        .ingest(&request(run))
        .await
        .unwrap();
    assert_eq!(build.result, PipelineResult::Failed);
    assert_eq!(
        build.test_summary,
        TestSummary {
            total: 3,
            passed: 2,
            failed: 1,
            skipped: 0
        }
    );
    assert!(
        build.failed_tests[0].contains("results-1.xml: unreadable JUnit report"),
        "{:?}",
        build.failed_tests
    );
}

#[tokio::test]
async fn local_missing_junit_blob_is_permanent() {
    let fixture = Fixture::new();
    let run = fixture.run(PipelineResult::Succeeded, &[PASSING_JUNIT]).await;
    std::fs::remove_file(fixture.path(&run.test_results[0])).unwrap();
    let err = LocalBuildResults::new(Arc::clone(&fixture.blobs))
        .ingest(&request(run))
        .await
        .unwrap_err();
    assert!(matches!(err, IngestError::BlobUnreadable(_)), "{err}");
    assert!(!HandlerError::from(err).is_retryable());
}

#[tokio::test]
async fn local_consumer_end_to_end_twice_is_one_build() {
    let fixture = Fixture::new();
    let run = fixture.run(PipelineResult::Succeeded, &[DOTNET_JUNIT]).await;
    let consumer = BuildIngestion::new(LocalBuildResults::new(Arc::clone(&fixture.blobs)));
    let first = handle(&consumer, run.clone().into()).await.unwrap();
    let second = handle(&consumer, run.into()).await.unwrap();
    assert_eq!(first, second);
    let build = completed(&first);
    assert_eq!(build.result, PipelineResult::Failed);
    let records: Vec<_> = std::fs::read_dir(fixture.dir.path().join("blobs").join(RECORD_CONTAINER).join("contoso"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(records, vec![std::ffi::OsString::from("build-4711.json")]);
}

// ---- Tenants: walls between them ----

#[tokio::test]
async fn two_tenants_runs_of_the_same_id_are_two_builds() {
    let fixture = Fixture::new();
    let consumer = BuildIngestion::new(LocalBuildResults::new(Arc::clone(&fixture.blobs)));
    let ours = fixture
        .run_as("contoso", PipelineResult::Succeeded, &[DOTNET_JUNIT])
        .await;
    let theirs = fixture
        .run_as("fabrikam", PipelineResult::Succeeded, &[PASSING_JUNIT])
        .await;
    assert_eq!(ours.pipeline_run_id, theirs.pipeline_run_id);
    let deliver = |tenant: &'static str, run: PipelineRunCompleted| {
        let consumer = &consumer;
        async move {
            let message = Message::from(run);
            let envelope = envelope(&message, tenant);
            consumer.handle(Inbound::new(&envelope, &message)).await.unwrap()
        }
    };
    let contoso = deliver("contoso", ours.clone()).await;
    let fabrikam = deliver("fabrikam", theirs).await;
    let (contoso, fabrikam) = (completed(&contoso), completed(&fabrikam));
    assert_eq!(contoso.build_id, fabrikam.build_id);
    assert_eq!(contoso.result, PipelineResult::Failed);
    assert_eq!(
        fabrikam.result,
        PipelineResult::Succeeded,
        "fabrikam's build is not contoso's replayed"
    );
    assert_eq!(
        fabrikam.test_report.as_ref().unwrap().key,
        "fabrikam/payments-api/build-4711/tests.json"
    );
    let records = fixture.dir.path().join("blobs").join(RECORD_CONTAINER);
    for tenant in ["contoso", "fabrikam"] {
        assert!(records.join(tenant).join("build-4711.json").is_file(), "{tenant}");
    }
    // contoso's again is still contoso's.
    let again = deliver("contoso", ours).await;
    assert_eq!(completed(&again), contoso);
}

#[tokio::test]
async fn a_run_naming_another_tenants_blobs_is_refused_naming_both() {
    let fixture = Fixture::new();
    let consumer = BuildIngestion::new(LocalBuildResults::new(Arc::clone(&fixture.blobs)));
    let contoso_run = fixture.run(PipelineResult::Succeeded, &[DOTNET_JUNIT]).await;
    let message = Message::from(contoso_run);
    let envelope = envelope(&message, "fabrikam");
    let err = consumer.handle(Inbound::new(&envelope, &message)).await.unwrap_err();
    let HandlerError::Permanent(source) = &err else {
        panic!("expected a permanent error, got {err}");
    };
    let text = source.to_string();
    assert!(text.contains("`fabrikam`") && text.contains("`contoso`"), "{text}");
    assert!(
        !fixture
            .dir
            .path()
            .join("blobs")
            .join(RECORD_CONTAINER)
            .join("fabrikam")
            .exists()
    );
}

// ---- Azure adapter ----

fn azure(server: &MockAzure, fixture: &Fixture) -> AzureBuildResults {
    AzureBuildResults::new(
        &AzureDevOpsConfig::new(
            server.url("/contoso"),
            "Delivery",
            AzureDevOpsAuth::Bearer("entra-token".into()),
        ),
        Arc::clone(&fixture.blobs),
    )
    .unwrap()
}

/// The build, its definition in contoso's folder.
fn build_reply() -> Reply {
    Reply::json(
        "GET",
        "/contoso/Delivery/_apis/build/builds/4711",
        200,
        r#"{"id":4711,"definition":{"id":42,"name":"payments-api","path":"\\bosun\\contoso"}}"#,
    )
}

const TEST_RUNS_JSON: &str = r#"{"count":2,"value":[
  {"id":31,"name":"Payments.Api.Tests (dotnet)","url":"https://dev.azure.com/contoso/Delivery/_apis/test/Runs/31",
   "build":{"id":"4711"},"isAutomated":true,"state":"Completed","totalTests":6,"passedTests":4,"unanalyzedTests":1,"incompleteTests":0,"notApplicableTests":0,
   "runStatistics":[{"state":"Completed","outcome":"Passed","count":4},{"state":"Completed","outcome":"Failed","count":1,"resolutionState":null},{"state":"Completed","outcome":"NotExecuted","count":1}]},
  {"id":32,"name":"Payments.Client.Tests","state":"Completed","totalTests":3,"passedTests":3,"unanalyzedTests":0}
]}"#;

const FAILED_RESULTS_JSON: &str = r#"{"count":1,"value":[
  {"id":100003,"outcome":"Failed","testCaseTitle":"Gives_up_after_three_attempts",
   "automatedTestName":"Payments.Api.Tests.RetryPolicyTests.Gives_up_after_three_attempts",
   "automatedTestStorage":"payments.api.tests.dll","durationInMs":34.1,
   "errorMessage":"Assert.Equal() Failure: Values differ\nExpected: 3\nActual:   4",
   "testRun":{"id":"31"}}
]}"#;

#[tokio::test]
async fn azure_ingests_test_runs_and_fetches_the_log() {
    let fixture = Fixture::new();
    let mut run = samples::pipeline_run_completed();
    run.log = None;
    let server = MockAzure::start(vec![
        build_reply(),
        Reply::json(
            "GET",
            "/contoso/Delivery/_apis/build/builds/4711/logs",
            200,
            r#"{"count":2,"value":[{"lineCount":2,"id":2,"type":"Container"},{"lineCount":1,"id":1,"type":"Container"}]}"#,
        ),
        Reply::json(
            "GET",
            "/contoso/Delivery/_apis/build/builds/4711/logs/1",
            200,
            r#"{"count":1,"value":["2026-11-29T10:02:01.1Z ##[section]Starting: Initialize job"]}"#,
        ),
        Reply::json(
            "GET",
            "/contoso/Delivery/_apis/build/builds/4711/logs/2",
            200,
            r#"{"count":2,"value":["2026-11-29T10:06:12.0Z Failed!  - Failed: 1, Passed: 4, Skipped: 1","2026-11-29T10:06:13.0Z ##[error]Process completed with exit code 1."]}"#,
        ),
        Reply::json("GET", "/contoso/Delivery/_apis/test/runs", 200, TEST_RUNS_JSON),
        Reply::json("GET", "/contoso/Delivery/_apis/test/Runs/31/results", 200, FAILED_RESULTS_JSON),
    ])
    .await;
    let build = azure(&server, &fixture).ingest(&request(run.clone())).await;
    let requests = server.finish().await;
    let build = build.unwrap();
    assert_eq!(
        build.test_summary,
        TestSummary {
            total: 9,
            passed: 7,
            failed: 1,
            skipped: 1
        }
    );
    assert_eq!(build.result, PipelineResult::Failed);
    assert_eq!(build.failed_tests, vec![FAILING_TEST.to_owned()]);
    assert_eq!(build.log.key, "contoso/payments-api/4711/log.txt");
    let log = String::from_utf8(fixture.blobs.get(&build.log).await.unwrap()).unwrap();
    assert_eq!(
        log,
        "##[bosun] log 1\n2026-11-29T10:02:01.1Z ##[section]Starting: Initialize job\n\
         ##[bosun] log 2\n2026-11-29T10:06:12.0Z Failed!  - Failed: 1, Passed: 4, Skipped: 1\n\
         2026-11-29T10:06:13.0Z ##[error]Process completed with exit code 1.\n"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&fixture.blobs.get(build.test_report.as_ref().unwrap()).await.unwrap()).unwrap();
    assert_eq!(report["source"], "azureTestRuns");
    assert_eq!(report["runs"][1]["summary"]["passed"], 3);
    assert_eq!(report["tests"][0]["message"], "Assert.Equal() Failure: Values differ");
    Message::from(build).validate().unwrap();

    let runs = &requests[4];
    assert_eq!(runs.query("buildUri"), Some("vstfs:///Build/Build/4711"));
    assert_eq!(runs.query("includeRunDetails"), Some("true"));
    assert_eq!(runs.query("api-version"), Some("7.1"));
    let results = &requests[5];
    assert_eq!(results.query("outcomes"), Some("Failed,Error,Timeout,Aborted"));
    assert_eq!(results.query("api-version"), Some("7.1-preview.6"));
    assert_eq!(results.query.iter().filter(|(key, _)| key == "api-version").count(), 1);
    for request in &requests {
        assert_eq!(request.header("authorization"), Some("Bearer entra-token"));
    }
}

#[tokio::test]
async fn azure_build_without_test_runs_reads_the_junit_files_and_keeps_the_log() {
    let fixture = Fixture::new();
    let run = fixture.run(PipelineResult::Succeeded, &[DOTNET_JUNIT]).await;
    let server = MockAzure::start(vec![
        build_reply(),
        Reply::json(
            "GET",
            "/contoso/Delivery/_apis/test/runs",
            200,
            r#"{"count":0,"value":[]}"#,
        ),
    ])
    .await;
    let adapter = azure(&server, &fixture);
    let build = adapter.ingest(&request(run.clone())).await.unwrap();
    server.finish().await;
    assert_eq!(build.test_summary.total, 6);
    assert_eq!(build.failed_tests, vec![FAILING_TEST.to_owned()]);
    assert_eq!(Some(build.log), run.log);
}

/// The replies for build 4711 of `tenant`'s pipeline in `project`: no logs
/// and no test runs.
fn bare_build_replies(project: &str, tenant: &str) -> Vec<Reply> {
    let api = |rest: &str| format!("/contoso/{project}/_apis{rest}");
    vec![
        Reply::json(
            "GET",
            &api("/build/builds/4711"),
            200,
            &format!(r#"{{"id":4711,"definition":{{"id":42,"name":"payments-api","path":"\\bosun\\{tenant}"}}}}"#),
        ),
        Reply::json("GET", &api("/build/builds/4711/logs"), 404, "{}"),
        Reply::json("GET", &api("/test/runs"), 200, r#"{"count":0,"value":[]}"#),
    ]
}

/// Ingests build 4711 (no log, no JUnit files on the message) as
/// `contoso`, then as `fabrikam`.
async fn ingest_as_both_tenants(adapter: &AzureBuildResults) {
    let mut run = samples::pipeline_run_completed();
    run.log = None;
    run.test_results = Vec::new();
    for tenant in ["contoso", "fabrikam"] {
        let mut request = request(run.clone());
        request.tenant = tenant.into();
        let build = adapter.ingest(&request).await.unwrap();
        assert!(build.log.key.starts_with(&format!("{tenant}/")), "{}", build.log.key);
    }
}

#[tokio::test]
async fn azure_project_template_gives_each_tenant_its_own_project() {
    let fixture = Fixture::new();
    let mut script = bare_build_replies("delivery-contoso", "contoso");
    script.extend(bare_build_replies("delivery-fabrikam", "fabrikam"));
    let server = MockAzure::start(script).await;
    let adapter = AzureBuildResults::new(
        &AzureDevOpsConfig::new(
            server.url("/contoso"),
            "delivery-{tenant}",
            AzureDevOpsAuth::Bearer("entra-token".into()),
        ),
        Arc::clone(&fixture.blobs),
    )
    .unwrap();
    ingest_as_both_tenants(&adapter).await;
    server.finish().await;

    // Without the template variable, both tenants' builds are in the one project
    // (told apart by their definition's folder).
    let fixture = Fixture::new();
    let mut script = bare_build_replies("Delivery", "contoso");
    script.extend(bare_build_replies("Delivery", "fabrikam"));
    let server = MockAzure::start(script).await;
    ingest_as_both_tenants(&azure(&server, &fixture)).await;
    server.finish().await;
}

#[tokio::test]
async fn azure_refuses_a_run_id_that_is_not_a_build_id() {
    let fixture = Fixture::new();
    let server = MockAzure::start(vec![]).await;
    let mut run = samples::pipeline_run_completed();
    run.pipeline_run_id = "local-7".into();
    let err = azure(&server, &fixture).ingest(&request(run)).await.unwrap_err();
    server.finish().await;
    assert!(matches!(err, IngestError::Invalid(_)), "{err}");
}

#[tokio::test]
async fn azure_throttling_is_retry_after() {
    let fixture = Fixture::new();
    let server = MockAzure::start(vec![
        build_reply(),
        Reply::json("GET", "/contoso/Delivery/_apis/test/runs", 429, "{}").header("Retry-After", "11"),
    ])
    .await;
    let err = azure(&server, &fixture)
        .ingest(&request(samples::pipeline_run_completed()))
        .await
        .unwrap_err();
    server.finish().await;
    assert!(
        matches!(HandlerError::from(err), HandlerError::RetryAfter { after, .. } if after == Duration::from_secs(11))
    );
}

#[tokio::test]
async fn azure_build_of_another_tenants_pipeline_is_refused_naming_both() {
    let fixture = Fixture::new();
    let server = MockAzure::start(vec![Reply::json(
        "GET",
        "/contoso/Delivery/_apis/build/builds/4711",
        200,
        r#"{"id":4711,"definition":{"id":9,"name":"payments-api","path":"\\bosun\\fabrikam"}}"#,
    )])
    .await;
    let err = azure(&server, &fixture)
        .ingest(&request(samples::pipeline_run_completed()))
        .await
        .unwrap_err();
    server.finish().await;
    let text = err.to_string();
    assert!(text.contains("`contoso`") && text.contains("`fabrikam`"), "{text}");
    assert!(!HandlerError::from(err).is_retryable());
}
