//! Crash safety: bosun is killed with SIGKILL after it committed a
//! message's state and outbox but before it dispatched the outbox or
//! acknowledged the message. After a restart the outgoing message is sent
//! exactly once and the command is not handled again.
//!
//! On PostgreSQL a retry and a dead letter are each one transaction with
//! the settlement of the message: bosun killed after their writes and
//! before the transaction ends leaves nothing half-done (no attempt, no
//! dead letter, the message still on its queue), and a restart settles
//! each once.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use bosun::ports::store::{DeadLetterFilter, TimelineStatus};
use bosun::ports::transport::OutboundMessage;
use bosun::runtime::config::{Secret, Settings, TransportKind};
use bosun::wiring::Backends;
use bosun_contracts::Destination;
use common::{PostgresSchema, Progress, Server, eventually, queue_depth, run, run_json, subscription_depth};

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

#[test]
fn on_postgres_a_kill_inside_a_retry_or_a_dead_letter_leaves_nothing_half_done() {
    let progress = Progress::start("crash_safety postgres");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let schema = runtime.block_on(PostgresSchema::create("bosun_crash"));
    let url = schema.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    run(data, &["migrate", "--database-url", &url]);
    let env = [
        ("BOSUN_DATABASE_URL", url.as_str()),
        ("BOSUN_TRANSPORT", "postgres"),
        ("BOSUN_LOCK_DURATION_MS", "1000"),
        // The retry is due long after the test ends: it stays scheduled.
        ("BOSUN_RETRY_BASE_DELAY_MS", "600000"),
    ];
    let halting = [
        env[0],
        env[1],
        env[2],
        env[3],
        ("BOSUN_FAILPOINT", "halt-in-failure-settle"),
    ];
    let args = ["--consumers", "commit"];
    let mut settings = Settings::with_data_dir(data);
    settings.database_url = Some(Secret::new(url.clone()));
    settings.transport = TransportKind::Postgres;
    let backends = runtime.block_on(Backends::open(&settings)).unwrap();
    let queue = Destination::Queue("commit".into());
    let depth = || runtime.block_on(backends.transport.depth(&queue)).unwrap();
    let dead_letters = || {
        runtime
            .block_on(backends.store.dead_letters(&DeadLetterFilter::default()))
            .unwrap()
    };

    // A dead letter: a message whose envelope cannot be read.
    runtime
        .block_on(backends.transport.send(vec![OutboundMessage {
            destination: queue.clone(),
            broker_message_id: "unreadable-1".into(),
            message_type: Some("CreateCommit".into()),
            correlation_id: None,
            body: b"{not json".to_vec(),
            scheduled_at: None,
        }]))
        .unwrap();
    let mut doomed = Server::start(data, &halting, &args);
    doomed.wait_for_line("FAILPOINT halt-in-failure-settle dead-letter", Duration::from_secs(60));
    doomed.kill();
    progress.phase("killed inside the dead letter's transaction");
    assert!(
        dead_letters().is_empty(),
        "a dead letter was recorded: {:?}",
        dead_letters()
    );
    assert!(
        runtime
            .block_on(backends.transport.peek_dead_letters(&queue, 10))
            .unwrap()
            .is_empty(),
        "the message was dead-lettered on the transport without its record"
    );
    assert_eq!(depth(), 1, "the message is still on its queue");
    let server = Server::start(data, &env, &args);
    eventually("the message is dead-lettered", Duration::from_secs(30), || {
        (depth() == 0).then_some(())
    });
    server.terminate();
    let recorded = dead_letters();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].broker_message_id, "unreadable-1");
    let native = runtime
        .block_on(backends.transport.peek_dead_letters(&queue, 10))
        .unwrap();
    assert_eq!(native.len(), 1, "dead-lettered once on the transport");
    progress.phase("restarted: one dead letter, recorded and on the transport");

    // A retry: a commit to a repository that does not exist.
    let payload = serde_json::json!({
        "repository": "nowhere", "branch": "main", "message": "m",
        "files": [{"path": "README.md", "content": "x"}]
    });
    let sent = runtime
        .block_on(
            backends
                .operator("cli:test")
                .send("CreateCommit", &payload, None, "contoso"),
        )
        .unwrap();
    let message_id = sent.message_id.to_string();
    let correlation = sent.correlation_id.to_string();
    let attempts = || {
        runtime
            .block_on(backends.store.attempts("commit", &message_id))
            .unwrap()
    };
    let retries_scheduled = || {
        runtime
            .block_on(backends.store.timeline(&correlation))
            .unwrap()
            .iter()
            .filter(|line| line.status == TimelineStatus::RetryScheduled)
            .count()
    };
    let mut doomed = Server::start(data, &halting, &args);
    doomed.wait_for_line("FAILPOINT halt-in-failure-settle retry", Duration::from_secs(60));
    doomed.kill();
    progress.phase("killed inside the retry's transaction");
    assert!(attempts().is_empty(), "an attempt was recorded: {:?}", attempts());
    assert_eq!(retries_scheduled(), 0, "a retry is on the timeline");
    assert_eq!(
        runtime.block_on(backends.store.outbox_backlog()).unwrap(),
        0,
        "a retry is in the outbox"
    );
    assert_eq!(depth(), 1, "the command is still on its queue, not completed");
    let server = Server::start(data, &env, &args);
    eventually("the retry is scheduled", Duration::from_secs(30), || {
        (retries_scheduled() == 1).then_some(())
    });
    // Give a second settle every chance to happen.
    std::thread::sleep(Duration::from_secs(2));
    server.terminate();
    assert_eq!(attempts().len(), 1, "{:?}", attempts());
    assert_eq!(retries_scheduled(), 1);
    assert_eq!(depth(), 1, "only the scheduled retry is on the queue");
    progress.phase("restarted: one attempt, one retry scheduled");
    drop(backends);
    runtime.block_on(schema.drop());
}
