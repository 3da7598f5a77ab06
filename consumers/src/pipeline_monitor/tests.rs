//! Handler tests over a scripted in-memory [`PipelineRunStatus`] (backoff,
//! completion, reconciliation, giving up, error mapping); end-to-end tests
//! of the local adapter over the delivery layer's pipeline runner (a tiny
//! module with a passing and a failing unit test, queued, polled to
//! completion; an interrupted run restarted); and tests of the Azure
//! adapter against a scripted local HTTP server. Generation and monitoring
//! together are `consumers/tests/local_pipeline_flow.rs`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{ArtifactKind, BlobRef, PipelineResult};
use bosun_contracts::{Envelope, Message, samples};
use time::OffsetDateTime;
use time::macros::datetime;
use uuid::Uuid;

use super::azure::AzureRunStatus;
use super::local::LocalRunStatus;
use super::*;
use crate::delivery::azure::devops::{AzureDevOpsAuth, AzureDevOpsConfig};
use crate::delivery::azure::test_server::{MockAzure, Reply};
use crate::delivery::blob::{BlobStore, FilesystemBlobStore};
use crate::delivery::git::commit::FileWrite;
use crate::delivery::pipeline::test_support::{
    Fixture, HELLO_PIPELINE, REPOSITORY, TENANT, module, module_files, quick_settings,
};
use crate::delivery::pipeline::{LocalPipelines, RunRecord, RunRequest, RunStatus as LocalStatus};

fn envelope(message: &Message) -> Envelope {
    Envelope::new(message, Uuid::now_v7(), "contoso", "agent:test")
}

async fn handle<P: PipelineRunStatus>(
    consumer: &PipelineMonitor<P>,
    message: Message,
) -> Result<Outcome, HandlerError> {
    let envelope = envelope(&message);
    consumer.handle(Inbound::new(&envelope, &message)).await
}

fn monitor<P: PipelineRunStatus>(port: P) -> PipelineMonitor<P> {
    PipelineMonitor::new(port, Duration::from_secs(1), Duration::from_secs(30), 5)
}

fn scheduled_poll(outcome: &Outcome) -> (PollPipelineRun, Duration) {
    assert_eq!(outcome.messages.len(), 1, "{outcome:?}");
    match &outcome.messages[0] {
        Outgoing {
            message: Message::PollPipelineRun(poll),
            delay: Some(delay),
        } => (poll.clone(), *delay),
        other => panic!("expected a scheduled PollPipelineRun, got {other:?}"),
    }
}

fn completion(outcome: &Outcome) -> PipelineRunCompleted {
    assert_eq!(outcome.messages.len(), 1, "{outcome:?}");
    assert_eq!(outcome.messages[0].delay, None);
    outcome.messages[0].message.validate().unwrap();
    match &outcome.messages[0].message {
        Message::PipelineRunCompleted(event) => event.clone(),
        other => panic!("expected PipelineRunCompleted, got {other:?}"),
    }
}

fn log_blob() -> BlobRef {
    BlobRef {
        container: "build-logs".into(),
        key: "contoso/4711/log.txt".into(),
        size_bytes: 12,
        sha256: "a".repeat(64),
        content_type: "text/plain; charset=utf-8".into(),
    }
}

fn finished(result: PipelineResult, failed_step: Option<&str>) -> RunState {
    let started = samples::pipeline_run_started().started_at;
    RunState::Finished(Box::new(FinishedRun {
        result,
        started_at: Some(started + time::Duration::seconds(12)),
        finished_at: started + time::Duration::minutes(5),
        failed_step: failed_step.map(str::to_owned),
        log: Some(log_blob()),
        test_results: Vec::new(),
        artifacts: samples::build_completed().artifacts,
        url: None,
    }))
}

/// A port answering from a script, recording the queries.
#[derive(Default)]
struct ScriptedPort {
    answers: Mutex<VecDeque<Result<RunState, MonitorError>>>,
    queries: Mutex<Vec<RunQuery>>,
}

impl ScriptedPort {
    fn new(answers: Vec<Result<RunState, MonitorError>>) -> Self {
        Self {
            answers: Mutex::new(answers.into()),
            queries: Mutex::default(),
        }
    }
}

#[async_trait]
impl PipelineRunStatus for ScriptedPort {
    async fn run_status(&self, query: &RunQuery) -> Result<RunState, MonitorError> {
        self.queries.lock().unwrap().push(query.clone());
        self.answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| panic!("unexpected query {query:?}"))
    }
}

fn running() -> Result<RunState, MonitorError> {
    Ok(RunState::InProgress {
        status: "running".into(),
    })
}

// ---- handler ----

#[test]
fn name_and_retry_policy_follow_the_design() {
    let consumer = monitor(ScriptedPort::default());
    assert_eq!(consumer.name(), "pipeline-monitor");
    let route = bosun_contracts::routing::consumer(consumer.name()).unwrap();
    assert_eq!(route.commands, ["PollPipelineRun"]);
    assert_eq!(route.events, ["PipelineRunStarted"]);
    assert_eq!(consumer.retry_policy(), RetryPolicy::exponential(5));
}

#[test]
fn poll_delays_grow_exponentially_up_to_the_cap() {
    let consumer = PipelineMonitor::new(
        ScriptedPort::default(),
        Duration::from_secs(1),
        Duration::from_secs(30),
        10,
    );
    let delays: Vec<u64> = (1..=8).map(|poll| consumer.poll_delay(poll).as_secs()).collect();
    assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
    assert_eq!(consumer.poll_delay(u32::MAX), Duration::from_secs(30));
    let scaled = PipelineMonitor::new(
        ScriptedPort::default(),
        Duration::from_millis(10),
        Duration::from_millis(50),
        0,
    );
    assert_eq!(scaled.poll_delay(1), Duration::from_millis(10));
    assert_eq!(scaled.poll_delay(4), Duration::from_millis(50));
    assert_eq!(scaled.max_polls(), 1, "at least one poll");
}

#[tokio::test]
async fn a_started_run_still_going_schedules_the_first_poll() {
    let consumer = monitor(ScriptedPort::new(vec![running()]));
    let started = samples::pipeline_run_started();
    let outcome = handle(&consumer, started.clone().into()).await.unwrap();
    let (poll, delay) = scheduled_poll(&outcome);
    assert_eq!(poll, PollPipelineRun::first(&started));
    assert_eq!(delay, Duration::from_secs(1));
    let queries = consumer.port().queries.lock().unwrap().clone();
    assert_eq!(
        queries,
        [RunQuery {
            tenant: "contoso".into(),
            pipeline_run_id: "4711".into(),
            pipeline_id: "42".into(),
            repository: "payments-api".into(),
            commit_sha: samples::COMMIT_SHA.into(),
        }]
    );
}

#[tokio::test]
async fn each_poll_schedules_the_next_with_a_longer_delay() {
    let consumer = monitor(ScriptedPort::new(vec![running(), running(), running()]));
    let mut poll = PollPipelineRun::first(&samples::pipeline_run_started());
    let mut delays = Vec::new();
    for expected in 2..=4 {
        let (next, delay) = scheduled_poll(&handle(&consumer, poll.clone().into()).await.unwrap());
        assert_eq!(next.poll, expected);
        assert_eq!(next.pipeline_run_id, poll.pipeline_run_id);
        delays.push(delay.as_secs());
        poll = next;
    }
    assert_eq!(delays, [2, 4, 8]);
}

#[tokio::test]
async fn a_finished_run_is_reported_with_its_timings_and_blobs() {
    let consumer = monitor(ScriptedPort::new(vec![
        Ok(finished(PipelineResult::Failed, Some("Test"))),
        Ok(finished(PipelineResult::Failed, Some("Test"))),
    ]));
    let poll = samples::poll_pipeline_run();
    let first = completion(&handle(&consumer, poll.clone().into()).await.unwrap());
    let started = samples::pipeline_run_started();
    assert_eq!(first.pipeline_run_id, "4711");
    assert_eq!(first.release_id, started.release_id);
    assert_eq!(first.module, started.module);
    assert_eq!(first.result, PipelineResult::Failed);
    assert_eq!(first.failed_step.as_deref(), Some("Test"));
    assert_eq!(first.started_at, started.started_at);
    assert_eq!(first.finished_at, started.started_at + time::Duration::minutes(5));
    assert_eq!(first.queued_ms, 12_000);
    assert_eq!(first.duration_ms, 288_000);
    assert_eq!(first.log, Some(log_blob()));
    assert_eq!(first.artifacts, samples::build_completed().artifacts);
    assert_eq!(first.url, started.url, "the run's own address is kept");

    // Reconciled on the run id: asking again reports the same completion.
    let second = completion(&handle(&consumer, poll.into()).await.unwrap());
    assert_eq!(first, second);
}

#[tokio::test]
async fn odd_service_timings_still_give_a_valid_event() {
    let started = samples::pipeline_run_started();
    let consumer = monitor(ScriptedPort::new(vec![Ok(RunState::Finished(Box::new(FinishedRun {
        result: PipelineResult::Succeeded,
        started_at: Some(started.started_at - time::Duration::hours(1)),
        finished_at: started.started_at - time::Duration::minutes(1),
        failed_step: Some("ignored when succeeded".into()),
        log: None,
        test_results: Vec::new(),
        artifacts: Vec::new(),
        url: Some("https://example.com/run".into()),
    })))]));
    let event = completion(&handle(&consumer, started.clone().into()).await.unwrap());
    assert_eq!(event.finished_at, started.started_at);
    assert_eq!((event.queued_ms, event.duration_ms), (0, 0));
    assert_eq!(event.failed_step, None);
    assert_eq!(event.url.as_deref(), Some("https://example.com/run"));
}

#[tokio::test]
async fn the_monitor_gives_up_after_its_last_poll() {
    let consumer = monitor(ScriptedPort::new(vec![running(), running()]));
    let mut poll = PollPipelineRun::first(&samples::pipeline_run_started());
    poll.poll = 4;
    let (next, _) = scheduled_poll(&handle(&consumer, poll.clone().into()).await.unwrap());
    assert_eq!(next.poll, 5);
    let err = handle(&consumer, next.into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    assert!(err.to_string().contains("after 5 polls"), "{err}");
}

#[tokio::test]
async fn port_errors_map_to_retry_decisions() {
    let consumer = monitor(ScriptedPort::new(vec![
        Err(MonitorError::Unavailable("down".into())),
        Err(MonitorError::RunNotFound { run_id: "4711".into() }),
        Err(MonitorError::Throttled {
            after: Duration::from_secs(7),
            source: "429".into(),
        }),
    ]));
    let poll: Message = samples::poll_pipeline_run().into();
    assert!(matches!(
        handle(&consumer, poll.clone()).await,
        Err(HandlerError::Transient(_))
    ));
    assert!(matches!(
        handle(&consumer, poll.clone()).await,
        Err(HandlerError::Permanent(_))
    ));
    match handle(&consumer, poll).await {
        Err(HandlerError::RetryAfter { after, .. }) => assert_eq!(after, Duration::from_secs(7)),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn other_messages_and_invalid_polls_are_refused() {
    let consumer = monitor(ScriptedPort::default());
    let err = handle(&consumer, samples::pipeline_generated().into())
        .await
        .unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    let mut poll = samples::poll_pipeline_run();
    poll.poll = 0;
    let err = handle(&consumer, poll.into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    assert!(consumer.port().queries.lock().unwrap().is_empty());
}

// ---- local adapters, end to end ----

/// Where the tiny module's pipeline lives.
const PIPELINE_PATH: &str = "services/hello/azure-pipelines.yml";

/// The module's files with its pipeline (what pipeline generation commits
/// on a pull request branch).
fn module_with_pipeline(passing: bool) -> Vec<FileWrite> {
    let mut files = module_files(passing);
    files.push(FileWrite {
        path: PIPELINE_PATH.into(),
        content: HELLO_PIPELINE.as_bytes().to_vec(),
        executable: false,
    });
    files
}

/// A release id of the shape pipeline generation gives a run:
/// `<moduleId>-<first 12 hex of the commit>`.
fn release_id(commit: &str) -> String {
    format!("hello-api-{}", &commit[..12])
}

/// Commits the tiny module and its pipeline on its pull request branch,
/// queues the run on the local runner as pipeline generation does, and
/// returns the `PipelineRunStarted` that announces it.
async fn start_run(fixture: &Fixture, passing: bool) -> PipelineRunStarted {
    let branch = "feature/hello";
    let head = fixture.commit(branch, module_with_pipeline(passing)).await;
    let record = fixture
        .pipelines
        .queue(&RunRequest {
            tenant: TENANT.into(),
            repository: REPOSITORY.into(),
            branch: branch.into(),
            commit_sha: head.clone(),
            pipeline_path: PIPELINE_PATH.into(),
            pipeline_id: "hello-api".into(),
        })
        .await
        .unwrap();
    PipelineRunStarted {
        url: Some(fixture.pipelines.run_url(TENANT, &record.run_id)),
        pipeline_run_id: record.run_id,
        pipeline_id: "hello-api".into(),
        repository: REPOSITORY.into(),
        branch: branch.into(),
        release_id: release_id(&head),
        commit_sha: head,
        module: module(),
        started_at: record.queued_at,
    }
}

/// Runs the monitor as the runtime would, delivering each scheduled poll
/// (without sleeping its whole delay), until the run completes; returns the
/// completion and the delays asked for.
async fn follow<P: PipelineRunStatus>(
    consumer: &PipelineMonitor<P>,
    started: &PipelineRunStarted,
) -> (PipelineRunCompleted, Vec<Duration>) {
    let mut message = Message::from(started.clone());
    let mut delays = Vec::new();
    loop {
        let outcome = handle(consumer, message).await.unwrap();
        match &outcome.messages[0] {
            Outgoing {
                message: Message::PipelineRunCompleted(event),
                ..
            } => {
                outcome.messages[0].message.validate().unwrap();
                return (event.clone(), delays);
            }
            Outgoing {
                message: next @ Message::PollPipelineRun(_),
                delay: Some(delay),
            } => {
                delays.push(*delay);
                tokio::time::sleep(Duration::from_millis(50)).await;
                message = next.clone();
            }
            other => panic!("{other:?}"),
        }
    }
}

fn local_monitor(pipelines: &Arc<LocalPipelines>) -> PipelineMonitor<LocalRunStatus> {
    PipelineMonitor::new(
        LocalRunStatus::new(Arc::clone(pipelines)),
        Duration::from_millis(10),
        Duration::from_millis(80),
        2000,
    )
}

#[tokio::test]
async fn local_passing_module_completes_with_log_junit_and_artifacts() {
    let fixture = Fixture::new(quick_settings()).await;
    let started = start_run(&fixture, true).await;
    let (event, delays) = follow(&local_monitor(&fixture.pipelines), &started).await;

    assert_eq!(event.result, PipelineResult::Succeeded, "{event:?}");
    assert_eq!(event.pipeline_run_id, started.pipeline_run_id);
    assert_eq!(event.release_id, started.release_id);
    assert_eq!(event.commit_sha, started.commit_sha);
    assert_eq!(event.failed_step, None);
    assert!(event.url.as_deref().unwrap().starts_with("file://"));
    assert!(!delays.is_empty(), "the run was still going at first");
    assert!(delays.windows(2).all(|pair| pair[0] <= pair[1]), "{delays:?}");
    assert!(delays.iter().all(|delay| *delay <= Duration::from_millis(80)));

    let log = fixture.blobs.get(event.log.as_ref().unwrap()).await.unwrap();
    let log = String::from_utf8(log).unwrap();
    assert!(log.contains("2 tests passed"), "{log}");
    assert_eq!(event.test_results.len(), 1);
    let junit = String::from_utf8(fixture.blobs.get(&event.test_results[0]).await.unwrap()).unwrap();
    assert!(junit.contains("tests=\"2\" failures=\"0\""), "{junit}");
    let kinds: Vec<(String, ArtifactKind)> = event
        .artifacts
        .iter()
        .map(|artifact| (artifact.name.clone(), artifact.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("container-context.tar".to_owned(), ArtifactKind::ContainerContext),
            ("package-content.tar".to_owned(), ArtifactKind::Archive),
        ]
    );
    for artifact in &event.artifacts {
        assert_eq!(
            artifact.blob.key,
            format!("contoso/{}/{}", event.pipeline_run_id, artifact.name)
        );
        fixture.blobs.get(&artifact.blob).await.unwrap();
    }

    // A late duplicate poll reports the same completion.
    let mut late = PollPipelineRun::first(&started);
    late.poll = 3;
    let again = completion(&handle(&local_monitor(&fixture.pipelines), late.into()).await.unwrap());
    assert_eq!(again, event);
}

#[tokio::test]
async fn local_failing_unit_test_fails_the_run() {
    let fixture = Fixture::new(quick_settings()).await;
    let started = start_run(&fixture, false).await;
    let (event, _) = follow(&local_monitor(&fixture.pipelines), &started).await;
    assert_eq!(event.result, PipelineResult::Failed);
    assert_eq!(event.failed_step.as_deref(), Some("Test"));
    assert_eq!(event.test_results.len(), 1, "failing tests are still published");
    let junit = String::from_utf8(fixture.blobs.get(&event.test_results[0]).await.unwrap()).unwrap();
    assert!(
        junit.contains("<failure message=\"expected hello, got bye\">"),
        "{junit}"
    );
    assert!(event.artifacts.is_empty());
    let log = String::from_utf8(fixture.blobs.get(event.log.as_ref().unwrap()).await.unwrap()).unwrap();
    assert!(log.contains("##[error]Script exited with code '1'."), "{log}");
}

#[tokio::test]
async fn local_run_interrupted_by_a_crash_is_finished_after_a_restart() {
    let fixture = Fixture::new(quick_settings()).await;
    let head = fixture.commit("main", module_with_pipeline(true)).await;
    let pipeline_path = PIPELINE_PATH;
    let run_id = LocalPipelines::run_id(TENANT, REPOSITORY, &head, pipeline_path);
    // The process that ran it was killed mid-run: its record says running,
    // and its heartbeat stopped a while ago.
    let queued_at = OffsetDateTime::now_utc().replace_nanosecond(0).unwrap() - time::Duration::minutes(1);
    let record = RunRecord {
        run_id: run_id.clone(),
        pipeline_id: "hello-api".into(),
        tenant: TENANT.into(),
        repository: REPOSITORY.into(),
        branch: "main".into(),
        commit_sha: head.clone(),
        pipeline_path: pipeline_path.into(),
        status: LocalStatus::Running,
        result: None,
        attempt: 1,
        queued_at,
        started_at: Some(queued_at),
        finished_at: None,
        heartbeat_at: Some(queued_at + time::Duration::seconds(5)),
        executor: Some("bosun-local-killed".into()),
        current_step: Some("Build".into()),
        failed_step: None,
        error: None,
        log: None,
        test_results: Vec::new(),
        artifacts: Vec::new(),
    };
    let path = fixture
        .dir
        .path()
        .join("pipelines/runs/contoso")
        .join(format!("{run_id}.json"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();

    // The restarted service gets the poll that was scheduled before the crash.
    let runner = fixture.restarted_runner(quick_settings());
    let mut started = samples::pipeline_run_started();
    started.pipeline_run_id = run_id.clone();
    started.pipeline_id = "hello-api".into();
    started.repository = REPOSITORY.into();
    started.branch = "main".into();
    started.commit_sha = head.clone();
    started.release_id = release_id(&head);
    started.module = module();
    started.started_at = queued_at;
    started.url = None;
    let (event, _) = follow(&local_monitor(&runner), &started).await;
    assert_eq!(event.result, PipelineResult::Succeeded, "{event:?}");
    let record = runner.get(TENANT, &run_id).await.unwrap();
    assert_eq!(record.attempt, 2, "started again exactly once");
    assert_eq!(event.test_results.len(), 1);
    assert_eq!(event.artifacts.len(), 2);
}

#[tokio::test]
async fn local_run_of_another_tenant_reads_as_not_found() {
    let fixture = Fixture::new(quick_settings()).await;
    let started = start_run(&fixture, true).await;
    let monitor = local_monitor(&fixture.pipelines);
    follow(&monitor, &started).await;

    // Fabrikam naming contoso's run id gets what any unknown id gets.
    let ask = |run_id: &str| {
        let mut poll = PollPipelineRun::first(&started);
        poll.pipeline_run_id = run_id.to_owned();
        Message::from(poll)
    };
    let as_fabrikam = |message: Message| {
        let monitor = &monitor;
        async move {
            let envelope = Envelope::new(&message, Uuid::now_v7(), "fabrikam", "agent:test");
            monitor.handle(Inbound::new(&envelope, &message)).await.unwrap_err()
        }
    };
    let theirs = as_fabrikam(ask(&started.pipeline_run_id)).await;
    let unknown = as_fabrikam(ask("run-00000000000000000000")).await;
    assert!(matches!(theirs, HandlerError::Permanent(_)), "{theirs}");
    assert_eq!(
        theirs.to_string().replace(&started.pipeline_run_id, "<id>"),
        unknown.to_string().replace("run-00000000000000000000", "<id>"),
        "not found reads the same whether or not another tenant has the run"
    );
    assert!(
        fixture
            .pipelines
            .get("fabrikam", &started.pipeline_run_id)
            .await
            .is_err(),
        "nor does the runner find it for fabrikam"
    );
}

// ---- Azure adapter ----

fn api(rest: &str) -> String {
    format!("/contoso/Delivery/_apis{rest}")
}

fn azure_port(server: &MockAzure, blobs: &Arc<FilesystemBlobStore>) -> AzureRunStatus {
    AzureRunStatus::new(
        &AzureDevOpsConfig::new(
            server.url("/contoso"),
            "Delivery",
            AzureDevOpsAuth::Pat("my-pat".into()),
        ),
        Arc::clone(blobs) as Arc<dyn BlobStore>,
    )
    .unwrap()
}

#[tokio::test]
async fn azure_run_is_polled_then_its_log_and_tests_are_copied() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = Arc::new(FilesystemBlobStore::new(dir.path()));
    let run_path = api("/pipelines/42/runs/4711");
    let server = MockAzure::start(vec![
        Reply::json("GET", &run_path, 200, r#"{"id":4711,"pipeline":{"id":42,"folder":"\\bosun\\contoso"},"state":"inProgress","createdDate":"2026-11-29T10:02:00Z"}"#),
        Reply::json(
            "GET",
            &run_path,
            200,
            r#"{"id":4711,"pipeline":{"id":42,"folder":"\\bosun\\contoso"},"state":"completed","result":"failed","createdDate":"2026-11-29T10:02:00Z","finishedDate":"2026-11-29T10:09:30.5Z","_links":{"web":{"href":"https://dev.azure.com/contoso/Delivery/_build/results?buildId=4711"}}}"#,
        ),
        Reply::json(
            "GET",
            &api("/build/builds/4711/timeline"),
            200,
            r#"{"records":[
                {"type":"Stage","name":"__default","result":"failed","startTime":"2026-11-29T10:02:12Z","order":1},
                {"type":"Task","name":"Publish test results","result":"succeeded","startTime":"2026-11-29T10:08:00Z","order":5},
                {"type":"Task","name":"Test","result":"failed","startTime":"2026-11-29T10:05:00Z","order":4},
                {"type":"Task","name":"Build","result":"succeeded","startTime":"2026-11-29T10:03:00Z","order":3}
            ]}"#,
        ),
        Reply::json("GET", &api("/build/builds/4711/logs"), 200, r#"{"count":2,"value":[{"id":2,"lineCount":1},{"id":1,"lineCount":2}]}"#),
        Reply::json("GET", &api("/build/builds/4711/logs/1"), 200, r#"{"count":2,"value":["Starting: Build","done"]}"#),
        Reply::json("GET", &api("/build/builds/4711/logs/2"), 200, r###"{"count":1,"value":["##[error]1 test failed"]}"###),
        Reply::json("GET", &api("/test/runs"), 200, r#"{"count":1,"value":[{"id":99,"name":"Payments unit tests"}]}"#),
        Reply::json(
            "GET",
            &api("/test/Runs/99/results"),
            200,
            r#"{"count":2,"value":[
                {"automatedTestName":"Payments.Tests.Pays","automatedTestStorage":"Payments.Tests.dll","outcome":"Passed","durationInMs":12.0},
                {"automatedTestName":"Payments.Tests.Refunds","automatedTestStorage":"Payments.Tests.dll","outcome":"Failed","durationInMs":30.5,"errorMessage":"expected 1 but was 2","stackTrace":"at Refunds()"}
            ]}"#,
        ),
        Reply::json("GET", &api("/build/builds/4711/artifacts"), 200, r#"{"count":0,"value":[]}"#),
    ])
    .await;
    let consumer = monitor(azure_port(&server, &blobs));
    let started = samples::pipeline_run_started();
    let (poll, _) = scheduled_poll(&handle(&consumer, started.clone().into()).await.unwrap());
    let event = completion(&handle(&consumer, poll.into()).await.unwrap());
    assert_eq!(event.result, PipelineResult::Failed);
    assert_eq!(event.failed_step.as_deref(), Some("Test"));
    assert_eq!(event.finished_at, datetime!(2026-11-29 10:09:30 UTC));
    assert_eq!(event.queued_ms, 12_000);
    assert_eq!(
        event.url.as_deref(),
        Some("https://dev.azure.com/contoso/Delivery/_build/results?buildId=4711")
    );

    let log = event.log.as_ref().unwrap();
    assert_eq!(
        (log.container.as_str(), log.key.as_str()),
        ("build-logs", "contoso/4711/log.txt")
    );
    let text = String::from_utf8(blobs.get(log).await.unwrap()).unwrap();
    assert_eq!(
        text,
        "##[section]Log 1\nStarting: Build\ndone\n##[section]Log 2\n##[error]1 test failed\n"
    );
    assert_eq!(event.test_results.len(), 1);
    let junit = &event.test_results[0];
    assert_eq!(junit.container, "test-results");
    assert_eq!(junit.key, "contoso/4711/azure-test-run-99.xml");
    let xml = String::from_utf8(blobs.get(junit).await.unwrap()).unwrap();
    assert!(xml.contains("tests=\"2\" failures=\"1\""), "{xml}");
    assert!(
        xml.contains("<failure message=\"expected 1 but was 2\">at Refunds()</failure>"),
        "{xml}"
    );

    let requests = server.finish().await;
    assert!(requests.iter().all(|r| r.query("api-version") == Some("7.1")));
    let test_runs = requests.iter().find(|r| r.path.ends_with("/test/runs")).unwrap();
    assert_eq!(test_runs.query("buildUri"), Some("vstfs:///Build/Build/4711"));
    let results = requests.iter().find(|r| r.path.ends_with("/results")).unwrap();
    assert_eq!(
        (results.query("$top"), results.query("$skip")),
        (Some("1000"), Some("0"))
    );
}

/// The replies of a finished run of `tenant`'s pipeline in `project`, with
/// no timeline, no logs and no test runs.
fn finished_run_replies(project: &str, tenant: &str) -> Vec<Reply> {
    let api = |rest: &str| format!("/contoso/{project}/_apis{rest}");
    vec![
        Reply::json(
            "GET",
            &api("/pipelines/42/runs/4711"),
            200,
            &format!(
                r#"{{"id":4711,"pipeline":{{"id":42,"folder":"\\bosun\\{tenant}"}},"state":"completed","result":"succeeded","finishedDate":"2026-11-29T10:09:30Z"}}"#
            ),
        ),
        Reply::json("GET", &api("/build/builds/4711/timeline"), 404, "{}"),
        Reply::json("GET", &api("/build/builds/4711/logs"), 404, "{}"),
        Reply::json("GET", &api("/test/runs"), 200, r#"{"value":[],"count":0}"#),
        Reply::json("GET", &api("/build/builds/4711/artifacts"), 404, "{}"),
    ]
}

/// Asks for run 4711 of pipeline 42 as `contoso`, then as `fabrikam`.
async fn poll_as_both_tenants(port: &AzureRunStatus) {
    for tenant in ["contoso", "fabrikam"] {
        let state = port
            .run_status(&RunQuery {
                tenant: tenant.into(),
                pipeline_run_id: "4711".into(),
                pipeline_id: "42".into(),
                repository: "payments-api".into(),
                commit_sha: "0123456789abcdef0123456789abcdef01234567".into(),
            })
            .await
            .unwrap();
        assert!(matches!(state, RunState::Finished(_)), "{state:?}");
    }
}

#[tokio::test]
async fn azure_project_template_gives_each_tenant_its_own_project() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = Arc::new(FilesystemBlobStore::new(dir.path()));
    let mut script = finished_run_replies("delivery-contoso", "contoso");
    script.extend(finished_run_replies("delivery-fabrikam", "fabrikam"));
    let server = MockAzure::start(script).await;
    let port = AzureRunStatus::new(
        &AzureDevOpsConfig::new(
            server.url("/contoso"),
            "delivery-{tenant}",
            AzureDevOpsAuth::Pat("my-pat".into()),
        ),
        Arc::clone(&blobs) as Arc<dyn BlobStore>,
    )
    .unwrap();
    poll_as_both_tenants(&port).await;
    server.finish().await;

    // Without the template variable, both tenants' runs are in the one project
    // (told apart by their pipeline's folder).
    let mut script = finished_run_replies("Delivery", "contoso");
    script.extend(finished_run_replies("Delivery", "fabrikam"));
    let server = MockAzure::start(script).await;
    poll_as_both_tenants(&azure_port(&server, &blobs)).await;
    server.finish().await;
}

#[tokio::test]
async fn azure_artifact_download_outside_azure_devops_is_refused_without_sending_the_credential() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = Arc::new(FilesystemBlobStore::new(dir.path()));
    let mut script = finished_run_replies("Delivery", "contoso");
    script.pop();
    script.push(Reply::json(
        "GET",
        &api("/build/builds/4711/artifacts"),
        200,
        r#"{"count":1,"value":[{"id":1,"name":"package-content.tar","resource":{"type":"PipelineArtifact","downloadUrl":"https://artifacts.example.net/steal?format=zip"}}]}"#,
    ));
    let server = MockAzure::start(script).await;
    let err = azure_port(&server, &blobs)
        .run_status(&RunQuery {
            tenant: "contoso".into(),
            pipeline_run_id: "4711".into(),
            pipeline_id: "42".into(),
            repository: "payments-api".into(),
            commit_sha: "0123456789abcdef0123456789abcdef01234567".into(),
        })
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains("artifacts.example.net"), "{err}");
    server.finish().await;
}

#[tokio::test]
async fn azure_missing_run_is_permanent_and_outages_transient() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = Arc::new(FilesystemBlobStore::new(dir.path()));
    let run_path = api("/pipelines/42/runs/4711");
    let server = MockAzure::start(vec![
        Reply::json("GET", &run_path, 404, r#"{"message":"Run 4711 not found"}"#),
        Reply::json("GET", &run_path, 503, r#"{"message":"busy"}"#),
    ])
    .await;
    let consumer = monitor(azure_port(&server, &blobs));
    let poll: Message = samples::poll_pipeline_run().into();
    let err = handle(&consumer, poll.clone()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    assert!(err.to_string().contains("not found"), "{err}");
    let err = handle(&consumer, poll).await.unwrap_err();
    assert!(matches!(err, HandlerError::Transient(_)), "{err}");
    server.finish().await;
}

#[tokio::test]
async fn azure_run_of_another_tenants_pipeline_is_refused_and_one_from_before_tenant_folders_followed() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = Arc::new(FilesystemBlobStore::new(dir.path()));
    let run_path = api("/pipelines/42/runs/4711");
    let run = |folder: &str| format!(r#"{{"id":4711,"pipeline":{{"id":42,"folder":{folder}}},"state":"inProgress"}}"#);
    let server = MockAzure::start(vec![
        Reply::json("GET", &run_path, 200, &run(r#""\\bosun\\fabrikam""#)),
        Reply::json("GET", &run_path, 200, &run(r#""\\Team builds""#)),
        Reply::json("GET", &run_path, 200, &run(r#""\\bosun""#)),
    ])
    .await;
    let consumer = monitor(azure_port(&server, &blobs));
    let poll: Message = samples::poll_pipeline_run().into();
    let err = handle(&consumer, poll.clone()).await.unwrap_err();
    let HandlerError::Permanent(source) = &err else {
        panic!("expected a permanent error, got {err}");
    };
    let text = source.to_string();
    assert!(text.contains("`contoso`") && text.contains("`fabrikam`"), "{text}");
    let err = handle(&consumer, poll.clone()).await.unwrap_err();
    assert!(
        matches!(err, HandlerError::Permanent(_)),
        "a pipeline bosun did not make: {err}"
    );
    let outcome = handle(&consumer, poll).await.unwrap();
    assert_eq!(
        outcome.messages.len(),
        1,
        "the run from before tenant folders is still followed"
    );
    server.finish().await;
}
