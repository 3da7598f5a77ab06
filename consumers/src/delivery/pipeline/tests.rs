//! Tests of the local pipeline runner: the parts (globs, macros, the YAML
//! reader, conditions, deterministic tars) and real runs of a tiny module
//! in a temporary folder (queue, background execution, logs, JUnit files,
//! artifacts, failures, restart after a crash, timeouts).

use std::time::Duration;

use bosun_contracts::messages::{ArtifactKind, PipelineResult};

use super::definition::{Condition, StepKind, parse_pipeline};
use super::glob::{find_files, glob_match};
use super::publish::tar_path;
use super::test_support::{Fixture, HELLO_PIPELINE, REPOSITORY, TENANT, module_files, quick_settings};
use super::variables::Variables;
use super::*;
use crate::delivery::git::commit::FileWrite;

fn pipeline_file(path: &str, yaml: &str) -> FileWrite {
    FileWrite {
        path: path.into(),
        content: yaml.as_bytes().to_vec(),
        executable: false,
    }
}

fn request(commit: &str, pipeline_path: &str) -> RunRequest {
    RunRequest {
        tenant: TENANT.into(),
        repository: REPOSITORY.into(),
        branch: "main".into(),
        commit_sha: commit.into(),
        pipeline_path: pipeline_path.into(),
        pipeline_id: "hello-api".into(),
    }
}

/// Commits the tiny module with its generated pipeline; returns the commit.
async fn commit_module(fixture: &Fixture, passing: bool) -> String {
    let mut files = module_files(passing);
    files.push(pipeline_file("services/hello/azure-pipelines.yml", HELLO_PIPELINE));
    fixture.commit("main", files).await
}

/// Commits a pipeline at the root and runs it to completion.
async fn run_yaml(fixture: &Fixture, yaml: &str) -> RunRecord {
    let commit = fixture
        .commit("main", vec![pipeline_file("azure-pipelines.yml", yaml)])
        .await;
    let queued = fixture
        .pipelines
        .queue(&request(&commit, "azure-pipelines.yml"))
        .await
        .unwrap();
    let record = fixture
        .pipelines
        .wait_for_completion(TENANT, &queued.run_id, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(record.is_finished(), "{record:?}");
    record
}

async fn log_text(fixture: &Fixture, record: &RunRecord) -> String {
    let blob = record.log.as_ref().expect("a log");
    String::from_utf8(fixture.blobs.get(blob).await.unwrap()).unwrap()
}

fn tar_listing(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tar");
    std::fs::write(&path, bytes).unwrap();
    let output = std::process::Command::new("tar")
        .args(["--list", "--verbose", "--numeric-owner", "--file"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap()
}

// ---- parts ----

#[test]
fn globs_match_like_azure_minimatch() {
    assert!(glob_match("TestResults/*.xml", "TestResults/hello.xml"));
    assert!(!glob_match("TestResults/*.xml", "TestResults/deep/hello.xml"));
    assert!(glob_match("**/TEST-*.xml", "a/b/TEST-one.xml"));
    assert!(glob_match("**/TEST-*.xml", "TEST-one.xml"));
    assert!(glob_match("**/*.xml", "x.xml"));
    assert!(glob_match("results/?.xml", "results/a.xml"));
    assert!(!glob_match("results/?.xml", "results/ab.xml"));
    assert!(glob_match("r/[a-c]*.xml", "r/beta.xml"));
    assert!(!glob_match("r/[!a-c]*.xml", "r/beta.xml"));
    assert!(!glob_match("*.xml", "notes.txt"));
}

#[tokio::test]
async fn find_files_applies_includes_and_exclusions() {
    let dir = tempfile::tempdir().unwrap();
    for path in [
        "TestResults/a.xml",
        "TestResults/b.xml",
        "TestResults/skip.xml",
        "other/c.xml",
    ] {
        let full = dir.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, "<x/>").unwrap();
    }
    let found = find_files(dir.path(), "TestResults/*.xml\n!**/skip.xml\n# comment\nother/*.xml")
        .await
        .unwrap();
    let names: Vec<&str> = found.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["TestResults/a.xml", "TestResults/b.xml", "other/c.xml"]);
    assert!(
        find_files(&dir.path().join("missing"), "*.xml")
            .await
            .unwrap()
            .is_empty()
    );
}

#[test]
fn macros_expand_known_variables_only() {
    let mut variables = Variables::default();
    variables.set("Build.SourcesDirectory", "/w/s".into());
    variables.set("name", "hello".into());
    assert_eq!(
        variables.expand("cd $(build.sourcesdirectory) && echo $(name) $(unknown) $(date +%s) $("),
        "cd /w/s && echo hello $(unknown) $(date +%s) $("
    );
    let environment: Vec<(String, &str)> = variables.environment().collect();
    assert!(environment.contains(&("BUILD_SOURCESDIRECTORY".to_owned(), "/w/s")));
    assert!(environment.contains(&("NAME".to_owned(), "hello")));
}

#[test]
fn conditions_follow_azure_pipelines() {
    assert!(Condition::parse("").allows(false));
    assert!(!Condition::parse("succeeded()").allows(true));
    assert!(Condition::parse("succeededOrFailed()").allows(true));
    assert!(Condition::parse(" always ( ) ").allows(true));
    assert!(Condition::parse("failed()").allows(true));
    assert!(!Condition::parse("failed()").allows(false));
    assert!(!Condition::parse("false").allows(false));
    let other = Condition::parse("eq(variables['Build.Reason'], 'PullRequest')");
    assert!(matches!(other, Condition::Other(_)));
    assert!(other.allows(false) && !other.allows(true));
}

#[test]
fn pipelines_parse_steps_jobs_stages_and_variables() {
    let pipeline = parse_pipeline(
        "variables:\n  a: 1\n  b: $(a)-x\nsteps:\n  - script: echo hi\n    displayName: Say hi\n    env:\n      X: y\n    timeoutInMinutes: 2\n  - bash: echo b\n    condition: always()\n  - checkout: self\n  - task: PublishTestResults@2\n    inputs:\n      testResultsFiles: '*.xml'\n  - publish: out\n    artifact: drop\n",
    )
    .unwrap();
    assert_eq!(
        pipeline.variables,
        [("a".into(), "1".into()), ("b".into(), "$(a)-x".into())]
    );
    let steps = &pipeline.jobs[0].steps;
    assert_eq!(steps.len(), 5);
    assert_eq!(steps[0].name, "Say hi");
    assert_eq!(steps[0].env, [("X".into(), "y".into())]);
    assert_eq!(steps[0].timeout, Some(Duration::from_secs(120)));
    assert_eq!(steps[1].name, "Bash");
    assert_eq!(steps[1].condition, Condition::Always);
    assert_eq!(steps[2].kind, StepKind::Checkout("self".into()));
    assert_eq!(steps[3].name, "PublishTestResults");
    assert_eq!(
        steps[4].kind,
        StepKind::Task {
            task: "PublishPipelineArtifact@1".into(),
            inputs: vec![("targetPath".into(), "out".into()), ("artifact".into(), "drop".into())],
        }
    );

    let staged = parse_pipeline(
        "variables:\n  - name: v\n    value: 1\nstages:\n  - stage: build\n    jobs:\n      - job: one\n        steps:\n          - script: a\n      - job: two\n        steps:\n          - script: b\n",
    )
    .unwrap();
    assert_eq!(staged.variables, [("v".into(), "1".into())]);
    let names: Vec<&str> = staged.jobs.iter().map(|job| job.name.as_str()).collect();
    assert_eq!(names, ["one", "two"]);

    for (yaml, expected) in [
        ("", "empty"),
        ("- a\n", "not a mapping"),
        ("trigger: none\n", "no `steps`"),
        ("steps:\n  - foo: bar\n", "steps[0]"),
        ("steps: [\n", "invalid YAML"),
        ("extends:\n  template: x.yml\n", "extends"),
        ("steps:\n  - template: t.yml\n", "templates"),
    ] {
        let err = parse_pipeline(yaml).unwrap_err().to_string();
        assert!(err.contains(expected), "{yaml:?}: {err}");
    }
}

#[test]
fn the_fixture_pipeline_parses() {
    let pipeline = parse_pipeline(HELLO_PIPELINE).unwrap();
    let names: Vec<&str> = pipeline.jobs[0].steps.iter().map(|step| step.name.as_str()).collect();
    assert!(names.contains(&"Build") && names.contains(&"Test"), "{names:?}");
    assert_eq!(pipeline.variables[0], ("BOSUN_MODULE_ID".into(), "hello-api".into()));
}

#[tokio::test]
async fn artifact_tars_are_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("ctx");
    std::fs::create_dir_all(source.join("b/nested")).unwrap();
    std::fs::write(source.join("Dockerfile"), "FROM scratch\n").unwrap();
    std::fs::write(source.join("b/nested/z.txt"), "z").unwrap();
    std::fs::write(source.join("a.txt"), "a").unwrap();
    tar_path(&source, &dir.path().join("one.tar")).await.unwrap();
    // Touch everything: times must not matter.
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::write(source.join("a.txt"), "a").unwrap();
    tar_path(&source, &dir.path().join("two.tar")).await.unwrap();
    let one = std::fs::read(dir.path().join("one.tar")).unwrap();
    let two = std::fs::read(dir.path().join("two.tar")).unwrap();
    assert_eq!(sha256_hex(&one), sha256_hex(&two));
    let listing = tar_listing(&one);
    let names: Vec<&str> = listing.lines().map(|line| line.rsplit(' ').next().unwrap()).collect();
    assert_eq!(names, ["Dockerfile", "a.txt", "b/", "b/nested/", "b/nested/z.txt"]);
    assert!(listing.lines().all(|line| line.contains(" 0/0 ")), "{listing}");
    assert!(listing.contains("1970-01-01"), "{listing}");

    // A single file is tarred under its own name.
    tar_path(&source.join("Dockerfile"), &dir.path().join("file.tar"))
        .await
        .unwrap();
    let listing = tar_listing(&std::fs::read(dir.path().join("file.tar")).unwrap());
    assert!(listing.trim_end().ends_with(" Dockerfile"), "{listing}");
}

// ---- real runs ----

#[tokio::test]
async fn a_passing_module_runs_in_the_background_and_publishes_everything() {
    let fixture = Fixture::new(quick_settings()).await;
    let commit = commit_module(&fixture, true).await;
    let pipeline_path = "services/hello/azure-pipelines.yml";

    let queued = fixture.pipelines.queue(&request(&commit, pipeline_path)).await.unwrap();
    assert!(!queued.is_finished(), "queue returns before the run ends");
    assert_eq!(queued.result, None);
    assert_eq!(
        queued.run_id,
        LocalPipelines::run_id(TENANT, REPOSITORY, &commit, pipeline_path)
    );
    let again = fixture.pipelines.queue(&request(&commit, pipeline_path)).await.unwrap();
    assert_eq!(again.run_id, queued.run_id, "queueing is idempotent");
    assert_eq!(again.queued_at, queued.queued_at);

    let record = fixture
        .pipelines
        .wait_for_completion(TENANT, &queued.run_id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(record.result, Some(PipelineResult::Succeeded), "{record:?}");
    assert_eq!(record.attempt, 1, "the second queue did not start a second execution");
    assert_eq!(record.failed_step, None);
    assert!(record.finished_at.unwrap() >= record.queued_at);
    let runs = fixture.run_records();
    assert_eq!(runs, 1, "one run record");
    assert!(
        !fixture
            .pipelines
            .root()
            .join("work")
            .join(TENANT)
            .join(&record.run_id)
            .exists(),
        "the workspace is removed"
    );

    let log = log_text(&fixture, &record).await;
    let log_blob = record.log.as_ref().unwrap();
    assert_eq!(log_blob.container, LOG_CONTAINER);
    assert_eq!(log_blob.key, format!("contoso/{}/log.txt", record.run_id));
    for expected in [
        "##[section]Starting: Checkout",
        "##[section]Starting: Build",
        &format!("built hello-api at {commit} (env {commit})"),
        "##[section]Starting: Test",
        "2 tests passed",
        "Published test results TestResults/hello.xml",
        "Published artifact container-context.tar",
        "Published artifact package-content.tar",
        "##[section]Finishing: Job — succeeded",
    ] {
        assert!(log.contains(expected), "missing {expected:?} in:\n{log}");
    }

    assert_eq!(record.test_results.len(), 1);
    let junit = &record.test_results[0];
    assert_eq!(junit.container, TEST_RESULTS_CONTAINER);
    assert_eq!(junit.key, format!("contoso/{}/TestResults/hello.xml", record.run_id));
    assert_eq!(junit.content_type, "application/xml");
    let xml = String::from_utf8(fixture.blobs.get(junit).await.unwrap()).unwrap();
    assert!(xml.contains("<testcase classname=\"hello\" name=\"greets\""), "{xml}");

    let names: Vec<(&str, ArtifactKind)> = record
        .artifacts
        .iter()
        .map(|artifact| (artifact.name.as_str(), artifact.kind))
        .collect();
    assert_eq!(
        names,
        [
            (CONTAINER_CONTEXT_ARTIFACT, ArtifactKind::ContainerContext),
            (PACKAGE_CONTENT_ARTIFACT, ArtifactKind::Archive),
        ]
    );
    let context = &record.artifacts[0].blob;
    assert_eq!(context.container, ARTIFACTS_CONTAINER);
    assert_eq!(context.key, format!("contoso/{}/container-context.tar", record.run_id));
    assert_eq!(context.content_type, "application/x-tar");
    let listing = tar_listing(&fixture.blobs.get(context).await.unwrap());
    for name in [
        " Dockerfile",
        " out/build.txt",
        " build.sh",
        " client/Hello.Client.nuspec",
    ] {
        assert!(listing.contains(name), "missing {name} in:\n{listing}");
    }
    let listing = tar_listing(&fixture.blobs.get(&record.artifacts[1].blob).await.unwrap());
    assert!(listing.contains(" Hello.Client.nuspec"), "{listing}");
    assert!(!listing.contains("Dockerfile"), "only the package folder: {listing}");

    // A finished run stays finished: polling and queueing again change nothing.
    assert_eq!(fixture.pipelines.poll(TENANT, &record.run_id).await.unwrap(), record);
    assert_eq!(
        fixture.pipelines.queue(&request(&commit, pipeline_path)).await.unwrap(),
        record
    );
}

#[tokio::test]
async fn a_failing_test_fails_the_run_but_still_publishes_its_results() {
    let fixture = Fixture::new(quick_settings()).await;
    let commit = commit_module(&fixture, false).await;
    let queued = fixture
        .pipelines
        .queue(&request(&commit, "services/hello/azure-pipelines.yml"))
        .await
        .unwrap();
    let record = fixture
        .pipelines
        .wait_for_completion(TENANT, &queued.run_id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(record.result, Some(PipelineResult::Failed), "{record:?}");
    assert_eq!(record.failed_step.as_deref(), Some("Test"));
    assert_eq!(record.error.as_deref(), Some("Script exited with code '1'."));
    assert_eq!(record.test_results.len(), 1, "succeededOrFailed() still publishes");
    let xml = String::from_utf8(fixture.blobs.get(&record.test_results[0]).await.unwrap()).unwrap();
    assert!(xml.contains("<failure message=\"expected hello, got bye\">"), "{xml}");
    assert!(record.artifacts.is_empty(), "later steps are skipped");
    let log = log_text(&fixture, &record).await;
    for expected in [
        "1 of 2 tests failed: hello.greets",
        "##[error]Script exited with code '1'.",
        "##[section]Skipping: Publish the container build context (condition succeeded() is false)",
        "##[section]Finishing: Job — failed",
    ] {
        assert!(log.contains(expected), "missing {expected:?} in:\n{log}");
    }
}

#[tokio::test]
async fn an_interrupted_run_is_started_again_on_the_next_poll() {
    let fixture = Fixture::new(quick_settings()).await;
    let commit = commit_module(&fixture, true).await;
    let pipeline_path = "services/hello/azure-pipelines.yml";
    let run_id = LocalPipelines::run_id(TENANT, REPOSITORY, &commit, pipeline_path);

    // What a killed process leaves behind: `running`, another executor, a
    // heartbeat that stopped, half a workspace.
    let now = now_seconds();
    let crashed = RunRecord {
        run_id: run_id.clone(),
        pipeline_id: "hello-api".into(),
        tenant: TENANT.into(),
        repository: REPOSITORY.into(),
        branch: "main".into(),
        commit_sha: commit.clone(),
        pipeline_path: pipeline_path.into(),
        status: RunStatus::Running,
        result: None,
        attempt: 1,
        queued_at: now - time::Duration::minutes(2),
        started_at: Some(now - time::Duration::minutes(2)),
        finished_at: None,
        heartbeat_at: Some(OffsetDateTime::now_utc()),
        executor: Some("bosun-local-killed".into()),
        current_step: Some("Test".into()),
        failed_step: None,
        error: None,
        log: None,
        test_results: Vec::new(),
        artifacts: Vec::new(),
    };
    let record_path = fixture
        .pipelines
        .root()
        .join("runs/contoso")
        .join(format!("{run_id}.json"));
    write_atomic(&record_path, &to_json(&crashed).unwrap()).await.unwrap();
    let leftover = fixture
        .pipelines
        .root()
        .join("work/contoso")
        .join(&run_id)
        .join("s/stale.txt");
    std::fs::create_dir_all(leftover.parent().unwrap()).unwrap();
    std::fs::write(&leftover, "half done").unwrap();

    // The service starts again: a new runner over the same folders. While
    // the heartbeat is fresh, the run is left alone.
    let mut settings = quick_settings();
    settings.stale_after = Duration::from_secs(2);
    let runner = fixture.restarted_runner(settings);
    let seen = runner.poll(TENANT, &run_id).await.unwrap();
    assert_eq!(seen.status, RunStatus::Running);
    assert_eq!(seen.executor.as_deref(), Some("bosun-local-killed"));
    assert!(!runner.is_live(TENANT, &run_id));

    // Once the heartbeat is stale, the next poll starts it again.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    let restarted = runner.poll(TENANT, &run_id).await.unwrap();
    assert_eq!(restarted.attempt, 2, "{restarted:?}");
    assert_ne!(restarted.executor.as_deref(), Some("bosun-local-killed"));
    let record = runner
        .wait_for_completion(TENANT, &run_id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(record.result, Some(PipelineResult::Succeeded), "{record:?}");
    assert_eq!(record.attempt, 2);
    assert_eq!(record.queued_at, crashed.queued_at);
    assert_eq!(record.artifacts.len(), 2);
    let log = log_text(&fixture, &record).await;
    assert!(log.contains("(attempt 2)"), "{log}");
    assert!(log.contains("previous attempt of this run was interrupted"), "{log}");
    assert!(!leftover.exists(), "the half-done workspace was replaced");
}

#[tokio::test]
async fn scripts_see_azure_variables_but_not_the_service_environment() {
    let fixture = Fixture::new(quick_settings()).await;
    let record = run_yaml(
        &fixture,
        "variables:\n  greeting: hello from $(Build.Repository.Name)\nsteps:\n  - script: |\n      echo \"id=$(Build.BuildId) env=$BUILD_BUILDID\"\n      echo \"greeting=$(greeting) env=$GREETING\"\n      echo \"cwd=$(pwd) sources=$BUILD_SOURCESDIRECTORY\"\n      echo \"step=$STEP_VALUE tf=$TF_BUILD\"\n      echo \"manifest=${CARGO_MANIFEST_DIR:-unset}\"\n      echo \"unknown=$(No.Such.Variable)\" 2>&1 || true\n    displayName: Show variables\n    env:\n      STEP_VALUE: $(Build.SourceBranchName)\n",
    )
    .await;
    assert_eq!(record.result, Some(PipelineResult::Succeeded), "{record:?}");
    let log = log_text(&fixture, &record).await;
    let id = &record.run_id;
    for expected in [
        format!("id={id} env={id}"),
        "greeting=hello from hello env=hello from hello".to_owned(),
        "step=main tf=True".to_owned(),
        "manifest=unset".to_owned(),
    ] {
        assert!(log.contains(&expected), "missing {expected:?} in:\n{log}");
    }
    let cwd_line = log.lines().find(|line| line.starts_with("cwd=")).unwrap();
    let (cwd, sources) = cwd_line["cwd=".len()..].split_once(" sources=").unwrap();
    assert_eq!(cwd, sources);
    assert!(cwd.ends_with(&format!("work/contoso/{id}/s")), "{cwd}");
}

#[tokio::test]
async fn unsupported_tasks_and_missing_pipelines_fail_the_run() {
    let fixture = Fixture::new(quick_settings()).await;
    let record = run_yaml(
        &fixture,
        "steps:\n  - task: UseDotNet@2\n  - task: Docker@2\n    displayName: Build image\n  - script: echo never\n",
    )
    .await;
    assert_eq!(record.result, Some(PipelineResult::Failed));
    assert_eq!(record.failed_step.as_deref(), Some("Build image"));
    let log = log_text(&fixture, &record).await;
    assert!(log.contains("UseDotNet@2 is not run by the local runner"), "{log}");
    assert!(
        log.contains("task Docker@2 is not supported by the local runner"),
        "{log}"
    );
    assert!(!log.contains("\nnever\n"), "{log}");

    let head = fixture.git_output(&["rev-parse", "main"]);
    let queued = fixture.pipelines.queue(&request(&head, "missing.yml")).await.unwrap();
    let record = fixture
        .pipelines
        .wait_for_completion(TENANT, &queued.run_id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(record.result, Some(PipelineResult::Failed));
    assert_eq!(record.failed_step.as_deref(), Some("Parse pipeline"));
    assert_eq!(
        record.error.as_deref(),
        Some("missing.yml: the pipeline file is not in the commit"),
        "the record names the file, then why"
    );
}

#[tokio::test]
async fn a_missing_artifact_path_is_recorded_with_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let err = tar_path(&dir.path().join("nowhere"), &dir.path().join("out.tar"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, super::step_error::StepError::ArtifactMissing { .. }),
        "{err}"
    );
    let report = err.report();
    assert!(report.starts_with("artifact path "), "{report}");
    assert!(
        report.contains("nowhere is not there: "),
        "the OS's reason follows: {report}"
    );
}

#[tokio::test]
async fn a_run_past_its_time_limit_is_stopped() {
    let mut settings = quick_settings();
    settings.job_timeout = Duration::from_secs(2);
    let fixture = Fixture::new(settings).await;
    let started = std::time::Instant::now();
    let record = run_yaml(&fixture, "steps:\n  - script: sleep 30\n    displayName: Hang\n").await;
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(record.result, Some(PipelineResult::Failed));
    assert_eq!(record.failed_step.as_deref(), Some("Hang"));
    assert!(record.error.as_deref().unwrap().contains("timed out"), "{record:?}");
}

#[tokio::test]
async fn bad_requests_and_unknown_runs_are_permanent_errors() {
    let fixture = Fixture::new(quick_settings()).await;
    let mut bad = request(&"a".repeat(40), "azure-pipelines.yml");
    bad.pipeline_path = "../escape.yml".into();
    let err = fixture.pipelines.queue(&bad).await.unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    let err = fixture.pipelines.poll(TENANT, "run-none").await.unwrap_err();
    assert!(matches!(err, LocalPipelineError::RunNotFound { .. }), "{err}");
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn opening_the_runner_removes_half_written_records_only() {
    let fixture = Fixture::new(quick_settings()).await;
    let runs = fixture.pipelines.root().join("runs").join(TENANT);
    let definitions = fixture.pipelines.root().join("definitions").join(TENANT);
    let mut killed = Vec::new();
    for folder in [&runs, &definitions] {
        std::fs::create_dir_all(folder).unwrap();
        let path = folder.join(format!("{}killed", crate::delivery::atomic_file::TEMPORARY_PREFIX));
        std::fs::write(&path, b"{\"runId\":").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - crate::delivery::atomic_file::LEFTOVER_AGE * 2)
            .unwrap();
        killed.push(path);
    }
    let writing = runs.join(format!("{}writing", crate::delivery::atomic_file::TEMPORARY_PREFIX));
    std::fs::write(&writing, b"{").unwrap();
    let record = runs.join("run-00000000000000000000.json");
    std::fs::write(&record, b"{}").unwrap();

    let _restarted = fixture.restarted_runner(quick_settings());
    for path in &killed {
        assert!(!path.exists(), "{} is a leftover", path.display());
    }
    assert!(
        writing.exists(),
        "a write that may still be running keeps its temporary"
    );
    assert!(record.exists());
    assert_eq!(fixture.run_records(), 1);
}
