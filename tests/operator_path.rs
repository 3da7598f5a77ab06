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

/// Failures of one cause are one group on the CLI: replayed or purged whole.
#[test]
fn a_failure_group_is_listed_replayed_and_purged_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let mut server = Server::start(data, &[], &["--consumers", "commit"]);
    server.wait_for_line("receiving", Duration::from_secs(30));
    let commit = |branch: &str| {
        serde_json::json!({
            "repository": "nowhere", "branch": branch, "message": "m",
            "files": [{"path": "README.md", "content": "# x\n"}]
        })
        .to_string()
    };
    for branch in ["main", "develop"] {
        run_json(
            data,
            &[
                "send",
                "CreateCommit",
                "--tenant",
                "contoso",
                "--payload",
                &commit(branch),
            ],
        );
    }
    let groups = eventually("both commits are dead-lettered", Duration::from_secs(60), || {
        let groups = run_json(data, &["dead-letters", "groups"]);
        (groups.as_array()?.first()?["count"] == 2).then_some(groups)
    });
    assert_eq!(groups.as_array().unwrap().len(), 1, "one cause, one group: {groups:#}");
    let group = &groups[0];
    assert_eq!(group["consumer"], "commit");
    assert_eq!(group["reason"], "retries-exhausted");
    let fingerprint = group["fingerprint"].as_str().unwrap().to_owned();
    let text = run(data, &["dead-letters", "groups"]);
    assert!(
        text.contains(&format!("group {fingerprint}  2 dead letter(s)")),
        "{text}"
    );
    assert!(text.contains("last 24h [") && text.contains("sample"), "{text}");

    let replayed = run(data, &["dead-letters", "replay", "--group", &fingerprint]);
    assert!(replayed.contains("replayed 2 of 2"), "{replayed}");
    // Still no repository: both fail again, as the same cause.
    let again = eventually("the replayed commits fail again", Duration::from_secs(60), || {
        let groups = run_json(data, &["dead-letters", "groups"]);
        (groups.as_array()?.first()?["count"] == 2).then_some(groups)
    });
    assert_eq!(
        again[0]["fingerprint"],
        fingerprint.as_str(),
        "the same cause, the same group"
    );
    let all = run_json(data, &["dead-letters", "list", "--include-replayed"]);
    assert!(
        all.as_array()
            .unwrap()
            .iter()
            .filter(|d| d["status"] == "replayed")
            .all(|d| d["replays"][0]["by"] == "test-operator"),
        "who replayed them is recorded: {all:#}"
    );

    let purged = run_json(data, &["dead-letters", "purge", "--group", &fingerprint, "--yes"]);
    assert_eq!(purged["purged"].as_array().unwrap().len(), 2, "{purged:#}");
    assert_eq!(run_json(data, &["dead-letters", "groups"]), serde_json::json!([]));
    server.terminate();
}

/// An edited replay is audited: the original, the edited copy, who and
/// when, and a field-by-field diff, shown by `show`; the dead letter's own
/// bytes are unchanged; an edit the contract refuses sends nothing.
#[test]
fn an_edited_replay_records_the_diff_and_keeps_the_original_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let mut server = Server::start(data, &[], &["--consumers", "commit"]);
    server.wait_for_line("receiving", Duration::from_secs(30));
    let commit = serde_json::json!({
        "repository": "nowhere", "branch": "main", "message": "m",
        "files": [{"path": "README.md", "content": "# x\n"}]
    })
    .to_string();
    run_json(
        data,
        &["send", "CreateCommit", "--tenant", "contoso", "--payload", &commit],
    );
    let dead = eventually("the commit is dead-lettered", Duration::from_secs(60), || {
        let list = run_json(data, &["dead-letters", "list"]);
        list.as_array().and_then(|items| items.first().cloned())
    });
    let id = dead["id"].as_str().unwrap().to_owned();
    let before = run_json(data, &["dead-letters", "show", &id]);

    // An editor that breaks the contract: refused, naming the field; nothing sent.
    let refused = common::bosun(data)
        .env("EDITOR", r#"sed -i 's/"branch": "main"/"branch": ""/'"#)
        .args(["dead-letters", "replay", &id, "--edit"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("branch"), "{stderr}");
    assert_eq!(
        run_json(data, &["dead-letters", "show", &id])["replays"],
        serde_json::json!([])
    );

    // An editor that saves nothing new: nothing replayed.
    let unchanged = common::bosun(data)
        .env("EDITOR", "true")
        .args(["dead-letters", "replay", &id, "--edit"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(unchanged.status.success());
    assert!(String::from_utf8_lossy(&unchanged.stdout).contains("not changed"));
    assert_eq!(
        run_json(data, &["dead-letters", "show", &id])["replays"],
        serde_json::json!([])
    );

    // The editor changes the branch.
    let edited = common::bosun(data)
        .env("EDITOR", r#"sed -i 's/"branch": "main"/"branch": "hotfix"/'"#)
        .args(["dead-letters", "replay", &id, "--edit"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(edited.status.success(), "{}", String::from_utf8_lossy(&edited.stderr));
    let said = String::from_utf8_lossy(&edited.stdout);
    assert!(said.contains(r#"/branch: "main" -> "hotfix""#), "{said}");

    let shown = run_json(data, &["dead-letters", "show", &id]);
    let replay = &shown["replays"][0];
    assert_eq!(replay["by"], "test-operator");
    assert!(replay["at"].is_string());
    assert_eq!(
        replay["edit"]["diff"],
        serde_json::json!([{"path": "/branch", "before": "main", "after": "hotfix"}])
    );
    assert_eq!(replay["edit"]["originalPayload"]["branch"], "main");
    assert_eq!(replay["edit"]["editedPayload"]["branch"], "hotfix");
    assert_eq!(shown["body"], before["body"], "the original bytes are unchanged");
    assert_eq!(shown["original"]["payload"]["branch"], "main");
    let text = run(data, &["dead-letters", "show", &id]);
    assert!(
        text.contains("by test-operator") && text.contains("payload edited"),
        "{text}"
    );
    assert!(text.contains(r#"/branch: "main" -> "hotfix""#), "{text}");

    // The edited copy went to the consumer: it fails on its own branch.
    eventually("the edited copy is handled", Duration::from_secs(60), || {
        let list = run_json(data, &["dead-letters", "list"]);
        list.as_array()?
            .iter()
            .any(|d| d["original"]["payload"]["branch"] == "hotfix")
            .then_some(())
    });

    // --payload: the same audit, from a file.
    let file = data.join("fix.json");
    std::fs::write(
        &file,
        serde_json::json!({
            "repository": "nowhere", "branch": "release", "message": "m",
            "files": [{"path": "README.md", "content": "# x\n"}]
        })
        .to_string(),
    )
    .unwrap();
    let second = run_json(data, &["dead-letters", "list"])[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let replayed = run_json(
        data,
        &[
            "dead-letters",
            "replay",
            &second,
            "--payload",
            &format!("@{}", file.display()),
        ],
    );
    assert_eq!(
        replayed["edit"]["diff"],
        serde_json::json!([{"path": "/branch", "before": "hotfix", "after": "release"}])
    );
    server.terminate();
}
