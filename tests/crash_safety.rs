//! Crash safety: bosun is killed with SIGKILL after it committed a
//! message's state and outbox but before it dispatched the outbox or
//! acknowledged the message. After a restart the outgoing message is sent
//! exactly once and the command is not handled again.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Progress, Server, eventually, queue_depth, run_json, subscription_depth};

#[test]
fn a_kill_between_state_commit_and_dispatch_loses_nothing_and_duplicates_nothing() {
    let progress = Progress::start("crash_safety");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let env = [("BOSUN_LOCK_DURATION_MS", "1000")];

    let mut doomed = Server::start(
        data,
        &[env[0], ("BOSUN_FAILPOINT", "halt-after-state-commit")],
        &["--consumers", "repository-provisioning"],
    );
    doomed.wait_for_line("receiving", Duration::from_secs(30));
    let sent = run_json(
        data,
        &[
            "send",
            "ProvisionRepository",
            "--payload",
            r#"{"name": "ledger"}"#,
            "--tenant",
            "contoso",
        ],
    );
    let correlation = sent["correlationId"].as_str().unwrap().to_owned();
    doomed.wait_for_line("FAILPOINT halt-after-state-commit", Duration::from_secs(30));
    doomed.kill();
    progress.phase("halted after the state commit, killed with SIGKILL");

    // State is committed, nothing dispatched, the command still on its queue.
    assert_eq!(
        subscription_depth(data, "pipeline-generation"),
        0,
        "dispatched before the kill"
    );
    assert_eq!(
        queue_depth(data, "repository-provisioning"),
        1,
        "the command was acknowledged before the kill"
    );

    let server = Server::start(data, &env, &["--consumers", "repository-provisioning"]);
    progress.phase("1 command committed, 0 dispatched; restarted");
    eventually("the outbox is dispatched", Duration::from_secs(30), || {
        (subscription_depth(data, "pipeline-generation") >= 1).then_some(())
    });
    eventually(
        "the redelivered command is acknowledged",
        Duration::from_secs(30),
        || (queue_depth(data, "repository-provisioning") == 0).then_some(()),
    );
    progress.phase("the outbox is dispatched and the redelivered command acknowledged");
    // Give a second dispatch or handling every chance to happen.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        subscription_depth(data, "pipeline-generation"),
        1,
        "RepositoryProvisioned sent once"
    );

    let delivery = run_json(data, &["deliveries", "show", &correlation]);
    let messages = delivery["messages"].as_array().unwrap();
    let command = messages
        .iter()
        .find(|m| m["messageType"] == "ProvisionRepository")
        .unwrap();
    let statuses: Vec<&str> = command["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == "completed").count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses.contains(&"duplicate"),
        "the redelivery was recognised: {statuses:?}"
    );
    let events: Vec<_> = messages
        .iter()
        .filter(|m| m["messageType"] == "RepositoryProvisioned")
        .collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["status"], "sent");
    server.terminate();
    progress.phase("checked: sent once, handled once, the redelivery recognised");
}
