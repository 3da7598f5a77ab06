//! The operator's path through a failure: a commit for a repository that
//! does not exist yet is retried, then dead-lettered; once the repository is
//! provisioned, replaying the dead letter makes the commit happen, and the
//! dead letter shows who replayed it.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Server, eventually, find_repository, git, run, run_json};

#[test]
fn a_dead_lettered_commit_succeeds_when_replayed_after_its_repository_exists() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let mut server = Server::start(data, &[], &["--consumers", "repository-provisioning,commit"]);
    server.wait_for_line("receiving", Duration::from_secs(30));

    let commit = serde_json::json!({
        "repository": "payments-api",
        "branch": "main",
        "message": "Add the service skeleton",
        "files": [
            {"path": "README.md", "content": "# payments-api\n"},
            {"path": "src/run.sh", "content": "#!/bin/sh\necho ok\n", "executable": true}
        ]
    })
    .to_string();
    let sent = run_json(
        data,
        &["send", "CreateCommit", "--payload", &commit, "--tenant", "contoso"],
    );
    let correlation = sent["correlationId"].as_str().unwrap().to_owned();

    // Five retries (DESIGN.md), then the dead letter.
    let dead = eventually("the commit is dead-lettered", Duration::from_secs(60), || {
        let list = run_json(data, &["dead-letters", "list", "--consumer", "commit"]);
        list.as_array().and_then(|items| items.first().cloned())
    });
    assert_eq!(dead["reason"], "retries-exhausted");
    assert_eq!(dead["attempts"].as_array().unwrap().len(), 6, "{dead:#}");
    assert!(
        dead["description"].as_str().unwrap().contains("payments-api"),
        "the error names the missing repository: {dead:#}"
    );
    let dead_id = dead["id"].as_str().unwrap().to_owned();
    let timeline = run_json(data, &["deliveries", "show", &correlation]);
    assert_eq!(timeline["status"], "failed");

    // The operator provisions the repository, then replays the commit.
    let provision = serde_json::json!({"name": "payments-api"}).to_string();
    run_json(
        data,
        &[
            "send",
            "ProvisionRepository",
            "--payload",
            &provision,
            "--tenant",
            "contoso",
            "--correlation-id",
            &correlation,
        ],
    );
    let repository = eventually("the repository exists", Duration::from_secs(30), || {
        find_repository(data, "contoso", "payments-api")
    });
    eventually("the provisioning completed", Duration::from_secs(30), || {
        let delivery = run_json(data, &["deliveries", "show", &correlation]);
        delivery["messages"]
            .as_array()?
            .iter()
            .any(|m| m["messageType"] == "ProvisionRepository" && m["status"] == "completed")
            .then_some(())
    });

    let replay_output = run(data, &["dead-letters", "replay", &dead_id]);
    assert!(replay_output.contains("replayed 1 of 1"), "{replay_output}");

    let head = eventually("the commit lands on main", Duration::from_secs(30), || {
        let output = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(&repository)
            .args(["rev-parse", "--verify", "--quiet", "refs/heads/main"])
            .output()
            .ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    });
    assert_eq!(git(&repository, &["show", "main:README.md"]), "# payments-api\n");
    assert!(
        git(&repository, &["ls-tree", "-r", "main"]).contains("100755 blob"),
        "the script is executable"
    );
    assert_eq!(
        git(&repository, &["log", "--format=%s", "main"]).trim(),
        "Add the service skeleton"
    );

    let shown = run_json(data, &["dead-letters", "show", &dead_id]);
    assert_eq!(shown["status"], "replayed");
    assert_eq!(shown["replays"][0]["by"], "test-operator");
    assert_eq!(shown["original"]["payload"]["repository"], "payments-api");
    let text = run(data, &["dead-letters", "show", &dead_id]);
    assert!(text.contains("by test-operator"), "{text}");
    assert!(run_json(data, &["dead-letters", "list"]).as_array().unwrap().is_empty());

    let delivery = eventually(
        "the delivery shows the commit completed",
        Duration::from_secs(30),
        || {
            let delivery = run_json(data, &["deliveries", "show", &correlation]);
            let commit = delivery["messages"]
                .as_array()?
                .iter()
                .find(|m| m["messageType"] == "CreateCommit")?
                .clone();
            (commit["status"] == "completed").then_some(delivery)
        },
    );
    let created = delivery["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["messageType"] == "CommitCreated")
        .expect("CommitCreated is on the timeline");
    assert_eq!(created["status"], "sent");
    assert!(!head.is_empty());
    server.terminate();
}
