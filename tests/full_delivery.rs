//! The whole delivery on the embedded default: from a command to a synced
//! environment, done for real; a failing unit test stops the release before
//! promotion; a SIGKILL in the middle of a delivery loses and repeats
//! nothing.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{Progress, Server, bosun, demo_output_with_progress, eventually, git, run_json};
use serde_json::Value;

/// `bosun demo --json`, its progress shown with `progress`.
fn demo(data: &Path, extra: &[&str], progress: &Progress) -> (bool, Value) {
    progress.phase("bosun demo starts");
    let output = demo_output_with_progress(
        bosun(data)
            .args(["demo", "--json", "--timeout", "240", "--data-dir"])
            .arg(data)
            .args(extra)
            .stdin(Stdio::null()),
        progress,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|err| {
        panic!(
            "demo printed no JSON ({err}): {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.success(), report)
}

fn result<'a>(report: &'a Value, label: &str) -> Option<&'a str> {
    report["results"]
        .as_array()?
        .iter()
        .find(|pair| pair[0] == label)
        .and_then(|pair| pair[1].as_str())
}

fn hop_types(report: &Value) -> Vec<String> {
    report["hops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hop| hop["messageType"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_whole_delivery_reaches_a_synced_environment() {
    let progress = Progress::start("full_delivery (a whole delivery)");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let (ok, report) = demo(data, &[], &progress);
    assert!(ok, "the demo failed: {report:#}");
    assert_eq!(report["completed"], true);
    assert_eq!(report["goal"], "GitOpsSynced");
    let hops = hop_types(&report);
    for expected in [
        "RepositoryProvisioned",
        "CommitCreated",
        "PullRequestOpened",
        "PipelineGenerated",
        "PipelineRunStarted",
        "PipelineRunCompleted",
        "BuildCompleted",
        "ContainerImageBuilt",
        "PackagePublished",
        "ReleasePlanned",
        "ReleaseApproved",
        "InfrastructureProvisioned",
        "DeploymentPromoted",
        "GitOpsSynced",
    ] {
        assert!(hops.iter().any(|h| h == expected), "no {expected} hop in {hops:?}");
    }
    for once in [
        "ReleasePlanned",
        "ReleaseApproved",
        "DeploymentPromoted",
        "ContainerImageBuilt",
        "PackagePublished",
    ] {
        assert_eq!(
            hops.iter().filter(|h| *h == once).count(),
            1,
            "{once} emitted more than once: {hops:?}"
        );
    }
    assert!(!hops.iter().any(|h| h == "ReleaseBlocked"));
    let tests = result(&report, "tests").expect("test counts in the summary");
    assert!(tests.starts_with("3 passed, 0 failed"), "{tests}");
    let image = result(&report, "image").expect("image in the summary");
    assert!(image.contains("@sha256:"), "{image}");

    // The work is on disk, for real.
    let repository = data.join("git/demo/demo/payments-api.git");
    let log = git(&repository, &["log", "--format=%s", "feature/payments-api"]);
    assert!(log.contains("Add the payments service"), "{log}");
    assert!(
        git(&repository, &["ls-tree", "-r", "--name-only", "feature/payments-api"]).contains("azure-pipelines.yml"),
        "the generated pipeline is committed to the pull request's branch"
    );
    assert!(
        !git(&repository, &["for-each-ref", "refs/pull"]).is_empty(),
        "the pull request exists"
    );
    // buildah pushes to the demo's registry; the built-in builder writes a layout.
    let builder = result(&report, "image builder").expect("the image builder in the summary");
    if builder.starts_with("buildah") {
        assert!(
            image.starts_with("127.0.0.1:"),
            "pushed to the demo's registry: {image}"
        );
    } else {
        assert!(builder.starts_with("built-in"), "{builder}");
        let layouts: Vec<_> = walk(&data.join("oci"))
            .into_iter()
            .filter(|p| p.ends_with("index.json"))
            .collect();
        assert!(!layouts.is_empty(), "an OCI layout exists");
    }
    let packages: Vec<_> = walk(&data.join("nuget"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "nupkg"))
        .collect();
    assert_eq!(packages.len(), 1, "{packages:?}");
    let synced: Vec<_> = walk(&data.join("environments"))
        .into_iter()
        .filter(|p| p.ends_with(".bosun-synced-commit"))
        .collect();
    assert_eq!(
        synced.len(),
        1,
        "the dev environment reports its synced commit: {synced:?}"
    );

    let release = result(&report, "release").expect("a release");
    let saga = run_json(data, &["sagas", "show", "release", release]);
    assert_eq!(saga["kind"], "release");
    let sagas = run_json(data, &["sagas", "list", "--kind", "gitops"]);
    assert_eq!(sagas.as_array().unwrap().len(), 1);
    progress.phase(format!("checked {} hops and the work on disk", hops.len()));
}

/// The routing table's consumers of `message_type` (its command's handler,
/// or its event's subscribers).
fn routed_to(message_type: &str) -> Vec<&'static str> {
    match bosun_contracts::MessageSpec::find(message_type).map(|spec| spec.kind) {
        Some(bosun_contracts::MessageKind::Command) => bosun_contracts::routing::command_handler(message_type)
            .map(|route| route.name)
            .into_iter()
            .collect(),
        Some(bosun_contracts::MessageKind::Event) => bosun_contracts::routing::event_subscribers(message_type)
            .map(|route| route.name)
            .collect(),
        None => Vec::new(),
    }
}

/// The dispatcher (and `send`) write a message's `sent` line after sending
/// it, so its consumer's `completed` line is often written first; the
/// status must not care.
#[test]
fn fifty_demo_runs_never_show_a_handled_hop_as_sent() {
    const RUNS: usize = 50;
    let progress = Progress::start("full_delivery (50 demo runs)");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let mut reordered = 0;
    for run in 0..RUNS {
        let tenant = format!("t{run:02}");
        let output = bosun(data)
            .args(["demo", "--json", "--timeout", "240", "--tenant", &tenant, "--data-dir"])
            .arg(data)
            .stdin(Stdio::null())
            .output()
            .expect("bosun demo runs");
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
            panic!(
                "run {run}: demo printed no JSON ({err}): {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
        assert!(output.status.success(), "run {run}: {report:#}");
        let correlation = report["correlationId"].as_str().unwrap();
        let delivery = run_json(data, &["deliveries", "show", correlation]);
        let messages = delivery["messages"].as_array().unwrap();
        for (message, hop) in messages.iter().zip(report["hops"].as_array().unwrap()) {
            let events = message["events"].as_array().unwrap();
            let message_type = message["messageType"].as_str().unwrap();
            let consumers = routed_to(message_type);
            // Handled, read straight from the lines: every consumer it is
            // routed to wrote `completed` (or `duplicate`).
            let handled = !consumers.is_empty()
                && consumers.iter().all(|consumer| {
                    events.iter().any(|e| {
                        e["consumer"] == *consumer && (e["status"] == "completed" || e["status"] == "duplicate")
                    })
                });
            if handled {
                assert_eq!(message["status"], "completed", "run {run}: {message:#}");
                assert_eq!(hop["status"], "completed", "run {run}: {hop:#} of {message:#}");
            }
            let first_completed = events.iter().position(|e| e["status"] == "completed");
            let last_sent = events.iter().rposition(|e| e["status"] == "sent");
            if let (Some(completed), Some(sent)) = (first_completed, last_sent)
                && sent > completed
            {
                reordered += 1;
            }
        }
        progress.tick(|| format!("{} of {RUNS} runs checked", run + 1));
    }
    progress.phase(format!(
        "{RUNS} runs checked; {reordered} hops had their `sent` line written after `completed`"
    ));
}

#[test]
fn a_failing_unit_test_stops_the_release_before_promotion() {
    let progress = Progress::start("full_delivery (a failing unit test)");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let (ok, report) = demo(data, &["--failing-test"], &progress);
    assert!(!ok, "the demo must fail: {report:#}");
    let failure = report["failure"].as_str().unwrap();
    assert!(failure.contains("ReleaseBlocked"), "{failure}");
    let hops = hop_types(&report);
    assert!(hops.iter().any(|h| h == "ReleaseBlocked"), "{hops:?}");
    for never in ["ReleaseApproved", "DeploymentPromoted", "GitOpsSynced"] {
        assert!(
            !hops.iter().any(|h| h == never),
            "{never} despite a failing test: {hops:?}"
        );
    }
    let correlation = report["correlationId"].as_str().unwrap();
    let delivery = run_json(data, &["deliveries", "show", correlation]);
    assert_eq!(delivery["status"], "failed");
    let summary_of = |message_type: &str| -> String {
        delivery["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["messageType"] == message_type)
            .and_then(|m| m["summary"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    assert!(summary_of("PipelineRunCompleted").contains("failed"), "{delivery:#}");
    assert!(
        summary_of("BuildCompleted").contains("add_two_and_three"),
        "{delivery:#}"
    );
    assert!(summary_of("ReleaseBlocked").contains("stopped"), "{delivery:#}");
    // What ended it, first: the hop, the consumer, the failing test, and
    // the release saga to open.
    let outcome = &delivery["outcome"];
    assert_eq!(outcome["state"], "failed", "{outcome:#}");
    assert_eq!(outcome["cause"], "release-blocked", "{outcome:#}");
    assert_eq!(outcome["messageType"], "ReleaseBlocked", "{outcome:#}");
    assert_eq!(outcome["consumer"], "release-orchestration", "{outcome:#}");
    assert!(
        outcome["error"].as_str().unwrap().contains("add_two_and_three"),
        "{outcome:#}"
    );
    assert_eq!(outcome["actions"][0]["kind"], "open-release", "{outcome:#}");
    // No consumer receives ReleaseBlocked: published, not waiting.
    let blocked = delivery["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["messageType"] == "ReleaseBlocked")
        .unwrap();
    assert_eq!(blocked["status"], "published", "{blocked:#}");
    let text = common::run(data, &["deliveries", "show", correlation]);
    assert!(text.contains("add_two_and_three"), "{text}");
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("Failed: ReleaseBlocked from release-orchestration: release ")
            && first.contains("add_two_and_three")
            && first == outcome["sentence"],
        "{text}"
    );
    progress.phase(format!(
        "checked {} hops: the release stopped before promotion",
        hops.len()
    ));
}

#[test]
fn a_sigkill_mid_delivery_then_a_restart_completes_it_with_no_step_done_twice() {
    let progress = Progress::start("full_delivery (a SIGKILL mid-delivery)");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let env = [
        ("BOSUN_LOCK_DURATION_MS", "2000"),
        ("BOSUN_PIPELINE_POLL_MS", "100"),
        ("BOSUN_PIPELINE_POLL_MAX_MS", "500"),
        ("BOSUN_RECONCILE_MS", "100"),
        ("BOSUN_RECONCILE_MAX_MS", "500"),
    ];
    let mut server = Server::start(data, &env, &[]);
    server.wait_for_line("receiving", Duration::from_secs(30));
    progress.phase("bosun serve is receiving");
    let sent = run_json(
        data,
        &[
            "send",
            "ProvisionRepository",
            "--tenant",
            "demo",
            "--payload",
            r#"{"name": "payments-api"}"#,
        ],
    );
    let correlation = sent["correlationId"].as_str().unwrap().to_owned();
    let completed = |message_type: &str| {
        let delivery = run_json(data, &["deliveries", "show", &correlation]);
        delivery["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["messageType"] == message_type && (m["status"] == "completed" || m["status"] == "sent"))
    };
    eventually("the repository is provisioned", Duration::from_secs(30), || {
        completed("RepositoryProvisioned").then_some(())
    });
    progress.phase("the repository is provisioned");
    run_json(
        data,
        &[
            "send",
            "CreateCommit",
            "--tenant",
            "demo",
            "--correlation-id",
            &correlation,
            "--payload",
            r##"{"repository": "payments-api", "branch": "main", "message": "Initial commit",
                "files": [{"path": "README.md", "content": "# payments-api\n"}]}"##,
        ],
    );
    eventually("main exists", Duration::from_secs(30), || {
        let delivery = run_json(data, &["deliveries", "show", &correlation]);
        (delivery["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["messageType"] == "CommitCreated")
            .count()
            == 1)
            .then_some(())
    });
    let files = sample_files();
    let payload = serde_json::json!({
        "repository": "payments-api", "branch": "feature/payments-api", "baseBranch": "main",
        "message": "Add the payments service", "files": files, "pullRequestTarget": "main"
    })
    .to_string();
    run_json(
        data,
        &[
            "send",
            "CreateCommit",
            "--tenant",
            "demo",
            "--correlation-id",
            &correlation,
            "--payload",
            &payload,
        ],
    );

    // Kill it in the middle: once the pipeline is running.
    eventually("the pipeline run starts", Duration::from_secs(60), || {
        completed("PipelineRunStarted").then_some(())
    });
    server.kill();
    progress.phase("the pipeline run started; bosun serve killed with SIGKILL and restarted");
    let server = Server::start(data, &env, &[]);
    eventually(
        "the environment is synced after the restart",
        Duration::from_secs(240),
        || {
            progress.tick(|| {
                let delivery = run_json(data, &["deliveries", "show", &correlation]);
                let messages = delivery["messages"].as_array().map_or(0, Vec::len);
                format!("{messages} messages in the delivery, waiting for GitOpsSynced")
            });
            completed("GitOpsSynced").then_some(())
        },
    );
    progress.phase("the environment is synced after the restart");
    std::thread::sleep(Duration::from_secs(2));
    server.terminate();

    let delivery = run_json(data, &["deliveries", "show", &correlation]);
    let messages = delivery["messages"].as_array().unwrap();
    let count = |message_type: &str| messages.iter().filter(|m| m["messageType"] == message_type).count();
    for once in [
        "PullRequestOpened",
        "PipelineGenerated",
        "PipelineRunStarted",
        "BuildCompleted",
        "ContainerImageBuilt",
        "PackagePublished",
        "ReleasePlanned",
        "ReleaseApproved",
        "InfrastructureProvisioned",
        "DeploymentPromoted",
        "GitOpsSynced",
    ] {
        assert_eq!(count(once), 1, "{once} happened {} times", count(once));
    }
    // Every message that was handled was handled once.
    for message in messages {
        let completions = message["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["status"] == "completed")
            .count();
        assert!(
            completions <= message["consumers"].as_array().unwrap().len().max(1),
            "{message:#}"
        );
    }
    let repository = data.join("git/demo/demo/payments-api.git");
    let pipeline_commits = git(&repository, &["log", "--format=%s", "--all"])
        .lines()
        .filter(|subject| subject.to_lowercase().contains("pipeline"))
        .count();
    assert_eq!(pipeline_commits, 1, "the pipeline was committed once");
    progress.phase(format!("checked {} messages: no step done twice", messages.len()));
}

fn sample_files() -> Vec<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/tools/demo/sample");
    walk(&root)
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
            let content = std::fs::read_to_string(&path).unwrap();
            let executable = relative.ends_with(".sh") && !relative.starts_with("src/");
            serde_json::json!({"path": relative, "content": content, "executable": executable})
        })
        .collect()
}

fn walk(root: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}
