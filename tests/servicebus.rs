//! The whole delivery over Azure Service Bus, through the real binary:
//! against the namespace or emulator named by `BOSUN_TEST_SERVICEBUS` (a
//! namespace-level connection string whose entities exist: `bosun
//! topology apply`, or the emulator's config), else against the
//! in-process test broker (`bosun-servicebus-broker`) with the entities
//! `topology plan` creates; and the operator's path from an empty
//! namespace: `bosun topology apply`, `bosun topology plan` with nothing
//! left to do, then the delivery with the start-up check on (the
//! management API: a real namespace with Manage rights, or the test
//! broker's; the emulator has none, and that test fails saying so).

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Output, Stdio};

use bosun::backends::servicebus::plan::{Description, TopologyOptions, desired_entities};
use bosun::runtime::registry;
use bosun_servicebus_broker::{Broker, BrokerConfig};
use common::bosun;
use serde_json::Value;

/// The connection string in `BOSUN_TEST_SERVICEBUS`, if one is set.
fn external_service_bus() -> Option<String> {
    std::env::var("BOSUN_TEST_SERVICEBUS")
        .ok()
        .filter(|text| !text.trim().is_empty())
}

#[test]
fn a_whole_delivery_travels_over_service_bus() {
    // The broker runs on this runtime's workers while the binary runs.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let external = external_service_bus();
    let broker = match external {
        Some(_) => None,
        None => Some(runtime.block_on(common::servicebus_test_broker())),
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

/// `bosun` on Service Bus at `connection_string` (its management API at
/// `management_url` when given), to completion.
fn bosun_on(data_dir: &Path, connection_string: &str, management_url: Option<&str>, args: &[&str]) -> Output {
    let mut command = bosun(data_dir);
    command
        .env("BOSUN_TRANSPORT", "servicebus")
        .env("BOSUN_SERVICEBUS_CONNECTION_STRING", connection_string);
    if let Some(url) = management_url {
        command.env("BOSUN_SERVICEBUS_MANAGEMENT_URL", url);
    }
    command
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("bosun {args:?} runs: {err}"))
}

/// The JSON a successful `bosun ... --json` printed.
fn json_of(output: &Output, what: &str) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{what} failed: {}\n{stdout}\n{stderr}",
        output.status
    );
    serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("{what} printed no JSON ({err}): {stdout}\n{stderr}"))
}

fn entries(report: &Value, field: &str) -> Vec<String> {
    report[field]
        .as_array()
        .unwrap_or_else(|| panic!("no `{field}` in {report:#}"))
        .iter()
        .map(|entry| entry.as_str().expect("an entry is text").to_owned())
        .collect()
}

#[test]
fn topology_apply_readies_an_empty_namespace_for_a_verified_delivery() {
    // The broker runs on this runtime's workers while the binary runs.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let external = external_service_bus();
    // An empty broker: every entity comes from `bosun topology apply`,
    // through the broker's management API on its AMQP port.
    let broker = match external {
        Some(_) => None,
        None => Some(
            runtime
                .block_on(Broker::start(BrokerConfig::default()))
                .expect("the test broker starts"),
        ),
    };
    let connection_string = match (&external, &broker) {
        (Some(text), _) => text.clone(),
        (None, broker) => broker.as_ref().expect("started above").connection_string(),
    };
    // The broker serves the management API on its AMQP port; an external
    // namespace at its own URL.
    let management_url = broker
        .as_ref()
        .map(|broker| format!("http://127.0.0.1:{}", broker.port()));
    let management_url = management_url.as_deref();
    let data = tempfile::tempdir().unwrap();
    let specs = desired_entities(&registry::topology(), &TopologyOptions::default());
    let created: Vec<&str> = specs
        .iter()
        .filter(|spec| spec.description != Description::Absent)
        .map(|spec| spec.path.as_str())
        .collect();
    let defaults: Vec<&str> = specs
        .iter()
        .filter(|spec| spec.description == Description::Absent)
        .map(|spec| spec.path.as_str())
        .collect();

    let applied = bosun_on(
        data.path(),
        &connection_string,
        management_url,
        &["topology", "apply", "--json"],
    );
    let report = json_of(&applied, "bosun topology apply");
    assert!(entries(&report, "refused").is_empty(), "{report:#}");
    if let Some(broker) = &broker {
        let made = entries(&report, "created");
        assert_eq!(made.len(), created.len(), "everything is made: {report:#}");
        for path in &created {
            assert!(
                made.iter().any(|entry| entry.ends_with(&format!(" {path}"))),
                "{path}: {report:#}"
            );
        }
        let deleted = entries(&report, "deleted");
        assert_eq!(deleted.len(), defaults.len(), "each $Default goes: {report:#}");
        assert!(entries(&report, "left_differing").is_empty(), "{report:#}");
        for queue in &registry::topology().queues {
            assert_eq!(
                broker.message_count(queue),
                Some(0),
                "queue {queue} exists on the broker"
            );
        }
    }

    let planned = bosun_on(
        data.path(),
        &connection_string,
        management_url,
        &["topology", "plan", "--json"],
    );
    let plan = json_of(&planned, "bosun topology plan");
    let items = plan["items"].as_array().unwrap_or_else(|| panic!("no items: {plan:#}"));
    for item in items {
        let action = item["action"].as_str().unwrap_or_default();
        let changes =
            action == "create" || action == "delete" || (action == "differs" && item["fixed_by_apply"] == true);
        assert!(!changes, "after apply, the plan has nothing to do: {plan:#}");
        if broker.is_some() {
            assert_eq!(action, "exists", "the broker keeps what apply sent: {plan:#}");
        }
    }
    if broker.is_some() {
        assert_eq!(items.len(), created.len(), "{plan:#}");
    }

    // `demo` starts as `serve` does: the topology is verified first.
    let output = bosun_on(
        data.path(),
        &connection_string,
        management_url,
        &[
            "demo",
            "--json",
            "--timeout",
            "240",
            "--data-dir",
            &data.path().display().to_string(),
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report = json_of(&output, "bosun demo");
    assert!(
        report["completed"] == true,
        "the delivery did not complete over Service Bus: {report:#}\n{stderr}"
    );
    assert_eq!(report["goal"], "GitOpsSynced", "{report:#}");
    assert!(
        stderr.contains("Service Bus topology verified"),
        "the start-up check ran and passed: {stderr}"
    );
    assert!(!stderr.contains("cannot verify the Service Bus topology"), "{stderr}");
}
