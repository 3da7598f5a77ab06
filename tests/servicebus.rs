//! The whole delivery over Azure Service Bus, through the real binary:
//! against the namespace or emulator named by `BOSUN_TEST_SERVICEBUS` (a
//! namespace-level connection string whose entities exist: `bosun
//! topology apply`, or the emulator's config), else against the
//! in-process test broker (`bosun-servicebus-broker`) with the entities
//! `topology plan` creates.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;

use bosun::backends::servicebus::plan::{Description, TopologyOptions, desired_entities};
use bosun::ports::topology::Topology;
use bosun_servicebus_broker::{Broker, BrokerConfig, EntitySettings, RunningBroker};
use common::bosun;
use serde_json::Value;

/// The in-process test broker with the entities `topology plan` would
/// create for bosun's routing (the same as the transport suite's, in
/// `src/backends/servicebus/transport/tests.rs`).
async fn test_broker() -> RunningBroker {
    let broker = Broker::start(BrokerConfig::default())
        .await
        .expect("the test broker starts");
    let options = TopologyOptions::default();
    let settings = |options: &TopologyOptions| EntitySettings {
        lock_duration: options.lock_duration,
        max_delivery_count: options.max_delivery_count,
        duplicate_detection_window: Some(options.duplicate_detection_window),
        requires_session: false,
    };
    for spec in desired_entities(&Topology::from_routing(), &options) {
        let path = spec.path.as_str();
        let subscription = || path.split_once("/Subscriptions/").expect("a subscription path");
        let rule = || {
            let (subscription, rule) = path.rsplit_once("/Rules/").expect("a rule path");
            let (topic, subscription) = subscription.split_once("/Subscriptions/").expect("a subscription path");
            (topic, subscription, rule)
        };
        match &spec.description {
            Description::Queue(options) => broker.create_queue(path, settings(options)),
            Description::Topic(options) => broker.create_topic(path, settings(options)),
            Description::Subscription(options) => {
                let (topic, name) = subscription();
                broker.create_subscription(topic, name, settings(options))
            }
            Description::Rule { name, sql_filter } => {
                let (topic, subscription, _) = rule();
                broker.put_rule(topic, subscription, name, sql_filter)
            }
            Description::Absent => {
                let (topic, subscription, name) = rule();
                broker.remove_rule(topic, subscription, name).map(|_| ())
            }
        }
        .unwrap_or_else(|err| panic!("create `{path}` on the test broker: {err}"));
    }
    broker
}

#[test]
fn a_whole_delivery_travels_over_service_bus() {
    // The broker runs on this runtime's workers while the binary runs.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let external = std::env::var("BOSUN_TEST_SERVICEBUS")
        .ok()
        .filter(|text| !text.trim().is_empty());
    let broker = match external {
        Some(_) => None,
        None => Some(runtime.block_on(test_broker())),
    };
    let connection_string = match (&external, &broker) {
        (Some(text), _) => text.clone(),
        (None, broker) => broker.as_ref().expect("started above").connection_string(),
    };
    let data = tempfile::tempdir().unwrap();
    let output = bosun(data.path())
        .env("BOSUN_TRANSPORT", "servicebus")
        .env("BOSUN_SERVICEBUS_CONNECTION_STRING", &connection_string)
        .env("BOSUN_SERVICEBUS_VERIFY", "false")
        .args(["demo", "--json", "--timeout", "240", "--data-dir"])
        .arg(data.path())
        .stdin(Stdio::null())
        .output()
        .expect("bosun demo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|err| {
        panic!(
            "demo printed no JSON ({err}): {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert!(
        output.status.success() && report["completed"] == true,
        "the delivery did not complete over Service Bus: {report:#}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(report["goal"], "GitOpsSynced", "{report:#}");
}
