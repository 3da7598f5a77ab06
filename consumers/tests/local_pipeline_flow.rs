//! Two consumers in a row over the embedded adapters, as the runtime would
//! run them on one machine: a pull request of a tiny module is opened,
//! pipeline generation commits its pipeline and queues a run on the local
//! runner, and the pipeline monitor follows that run to its completion.
//!
//! The consumers' own tests stay within their folder (they build fixtures
//! on the delivery layer); this is where their hand-over is checked.

use std::sync::Arc;
use std::time::Duration;

use bosun_consumers::delivery::blob::{BlobStore, FilesystemBlobStore};
use bosun_consumers::delivery::git::commit::{CommitSpec, CommitWriter, FileWrite, LocalCommitWriter};
use bosun_consumers::delivery::git::{LocalGitHost, NewRepository};
use bosun_consumers::delivery::pipeline::{LocalPipelines, RunnerSettings};
use bosun_consumers::pipeline_generation::PipelineGeneration;
use bosun_consumers::pipeline_generation::local::LocalPipelineGenerator;
use bosun_consumers::pipeline_monitor::PipelineMonitor;
use bosun_consumers::pipeline_monitor::local::LocalRunStatus;
use bosun_consumers::{Consumer, Inbound, Outgoing};
use bosun_contracts::messages::{GitIdentity, ModuleLanguage, ModuleMetadata, PipelineResult, PullRequestOpened};
use bosun_contracts::{Envelope, Message, samples};
use time::macros::datetime;
use uuid::Uuid;

const TENANT: &str = "contoso";
const REPOSITORY: &str = "hello";
const BRANCH: &str = "feature/hello";

const BUILD_SH: &str = "set -e\nmkdir -p out\necho built > out/build.txt\n";

const TEST_SH: &str = r#"set -e
mkdir -p TestResults
test -f out/build.txt
cat > TestResults/hello.xml <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="1" failures="0">
  <testsuite name="hello" tests="1" failures="0" errors="0" skipped="0">
    <testcase classname="hello" name="builds" time="0.01"/>
  </testsuite>
</testsuites>
XML
"#;

fn module() -> ModuleMetadata {
    ModuleMetadata {
        module_id: "hello-api".into(),
        name: "Hello API".into(),
        language: ModuleLanguage::Other,
        version: "1.0.0".into(),
        path: Some("services/hello".into()),
        build_command: "sh build.sh".into(),
        test_command: Some("sh test.sh".into()),
        test_results: Some("TestResults/*.xml".into()),
        package: None,
        container: None,
    }
}

fn file(path: &str, content: &str) -> FileWrite {
    FileWrite {
        path: path.into(),
        content: content.as_bytes().to_vec(),
        executable: false,
    }
}

fn envelope(message: &Message) -> Envelope {
    Envelope::new(message, Uuid::now_v7(), TENANT, "agent:test")
}

#[tokio::test]
async fn a_generated_pipeline_runs_locally_and_the_monitor_reports_its_completion() {
    let dir = tempfile::tempdir().unwrap();
    let git = Arc::new(LocalGitHost::new(dir.path().join("git")));
    git.find_or_create(NewRepository {
        tenant: TENANT,
        project: TENANT,
        name: REPOSITORY,
        default_branch: "main",
        description: None,
        minimum_reviewers: 0,
    })
    .await
    .unwrap();
    LocalCommitWriter::with_host(Arc::clone(&git))
        .commit(&CommitSpec {
            tenant: TENANT.into(),
            repository: REPOSITORY.into(),
            branch: BRANCH.into(),
            base_branch: None,
            message: "Add the hello module".into(),
            author: GitIdentity {
                name: "Test".into(),
                email: "test@example.com".into(),
            },
            date: datetime!(2026-11-29 10:00:00 UTC),
            files: vec![
                file("services/hello/build.sh", BUILD_SH),
                file("services/hello/test.sh", TEST_SH),
            ],
            delete: Vec::new(),
        })
        .await
        .unwrap();
    let blobs = Arc::new(FilesystemBlobStore::new(dir.path().join("blobs")));
    let pipelines = Arc::new(LocalPipelines::with_host(
        dir.path().join("pipelines"),
        Arc::clone(&git),
        Arc::clone(&blobs) as Arc<dyn BlobStore>,
        RunnerSettings {
            heartbeat_interval: Duration::from_millis(100),
            stale_after: Duration::from_millis(500),
            job_timeout: Duration::from_secs(60),
        },
    ));

    // The pull request is opened: pipeline generation commits the pipeline
    // and queues its run.
    let generation = PipelineGeneration::new(LocalPipelineGenerator::with_host(
        Arc::clone(&git),
        Arc::clone(&pipelines),
    ));
    let mut opened: PullRequestOpened = samples::pull_request_opened();
    opened.repository = REPOSITORY.into();
    opened.source_branch = BRANCH.into();
    opened.module = Some(module());
    let message = Message::from(opened);
    let outcome = generation
        .handle(Inbound::new(&envelope(&message), &message))
        .await
        .unwrap();
    let started = outcome
        .messages
        .iter()
        .find_map(|outgoing| match &outgoing.message {
            Message::PipelineRunStarted(started) => Some(started.clone()),
            _ => None,
        })
        .expect("a PipelineRunStarted");

    // The monitor follows the run, delivered its own scheduled polls.
    let monitor = PipelineMonitor::new(
        LocalRunStatus::new(Arc::clone(&pipelines)),
        Duration::from_millis(10),
        Duration::from_millis(80),
        2000,
    );
    let mut message = Message::from(started.clone());
    let completed = loop {
        let outcome = monitor
            .handle(Inbound::new(&envelope(&message), &message))
            .await
            .unwrap();
        match &outcome.messages[0] {
            Outgoing {
                message: Message::PipelineRunCompleted(completed),
                ..
            } => break completed.clone(),
            Outgoing {
                message: next @ Message::PollPipelineRun(_),
                delay: Some(_),
            } => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                message = next.clone();
            }
            other => panic!("{other:?}"),
        }
    };

    assert_eq!(completed.result, PipelineResult::Succeeded, "{completed:?}");
    assert_eq!(completed.pipeline_run_id, started.pipeline_run_id);
    assert_eq!(completed.commit_sha, started.commit_sha);
    assert_eq!(completed.release_id, started.release_id);
    assert_eq!(completed.test_results.len(), 1);
    let junit = String::from_utf8(blobs.get(&completed.test_results[0]).await.unwrap()).unwrap();
    assert!(junit.contains("tests=\"1\" failures=\"0\""), "{junit}");
    let log = String::from_utf8(blobs.get(completed.log.as_ref().unwrap()).await.unwrap()).unwrap();
    assert!(log.contains("##[section]Finishing: Job — succeeded"), "{log}");
}
