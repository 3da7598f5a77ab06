//! Two `bosun serve` processes on one data directory compete for one queue
//! of 1,000 commands: every command is handled once and none is lost.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;
use std::time::Duration;

use bosun_contracts::routing::EVENTS_TOPIC;
use bosun_contracts::{Destination, Envelope, Message};
use common::{Progress, Server, backends, block_on, eventually, queue_depth, subscription_depth, thousands};

const COMMANDS: usize = 1_000;

#[test]
fn two_hosts_handle_every_message_of_a_shared_queue_once() {
    let progress = Progress::start("competing_hosts");
    let total = thousands(COMMANDS as u64);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let args = ["--consumers", "repository-provisioning"];
    let env = [("BOSUN_CONCURRENCY", "8")];
    let mut first = Server::start(data, &env, &args);
    let mut second = Server::start(data, &env, &args);
    first.wait_for_line("receiving", Duration::from_secs(30));
    second.wait_for_line("receiving", Duration::from_secs(30));
    progress.phase("2 hosts receiving");

    let operator = backends(data).operator("test");
    let mut sent = HashSet::new();
    block_on(async {
        for index in 0..COMMANDS {
            let payload = serde_json::json!({ "name": format!("service-{index:04}") });
            let message = operator
                .send("ProvisionRepository", &payload, None, "contoso")
                .await
                .expect("send");
            sent.insert(message.message_id);
            progress.tick(|| format!("{}/{total} commands sent", thousands(index as u64 + 1)));
        }
    });

    progress.phase(format!("{total}/{total} commands sent"));
    eventually("every command is handled", Duration::from_secs(300), || {
        let handled = subscription_depth(data, "pipeline-generation");
        progress.tick(|| format!("{}/{total} commands handled", thousands(handled)));
        (handled as usize >= COMMANDS && queue_depth(data, "repository-provisioning") == 0).then_some(())
    });
    progress.phase(format!("{total}/{total} commands handled"));
    std::thread::sleep(Duration::from_secs(1));
    first.terminate();
    second.terminate();

    let backends = backends(data);
    let events = block_on(backends.transport.receive(
        &Destination::Subscription {
            topic: EVENTS_TOPIC.into(),
            subscription: "pipeline-generation".into(),
        },
        COMMANDS * 2,
        Duration::from_secs(60),
    ))
    .unwrap();
    assert_eq!(events.len(), COMMANDS, "one RepositoryProvisioned per command");
    let mut causes = HashSet::new();
    let mut names = HashSet::new();
    for event in &events {
        let (envelope, message) = Envelope::parse(&event.body).unwrap();
        let Message::RepositoryProvisioned(provisioned) = message else {
            panic!("unexpected {}", envelope.message_type);
        };
        assert!(
            provisioned.created,
            "{} was reported as created twice",
            provisioned.repository.name
        );
        causes.insert(envelope.causation_id.unwrap());
        names.insert(provisioned.repository.name);
    }
    assert_eq!(causes.len(), COMMANDS);
    assert_eq!(causes, sent, "every sent command caused exactly one event");
    assert_eq!(names.len(), COMMANDS);
    assert_eq!(
        block_on(backends.store.outbox_backlog()).unwrap(),
        0,
        "nothing left in the outbox"
    );

    // Both hosts did part of the work.
    let mut pids = HashSet::new();
    block_on(async {
        for event in &events {
            let envelope = Envelope::from_slice(&event.body).unwrap();
            let timeline = backends
                .store
                .timeline(&envelope.correlation_id.to_string())
                .await
                .unwrap();
            for line in timeline
                .iter()
                .filter(|l| l.status == bosun::ports::store::TimelineStatus::Completed)
            {
                if let Some(pid) = line.detail.as_deref().and_then(|d| d.split("pid ").nth(1)) {
                    pids.insert(pid.to_owned());
                }
            }
        }
    });
    assert_eq!(pids.len(), 2, "both hosts handled messages: {pids:?}");
    progress.phase(format!(
        "checked {total} events: each command handled once, by both hosts"
    ));
}
