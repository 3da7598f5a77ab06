//! The whole delivery over Azure Service Bus (a namespace or the local
//! emulator), through the real binary. Ignored (`cargo test` reports it as
//! ignored, not as passed), since no Service Bus is on a CI machine: it
//! needs `BOSUN_TEST_SERVICEBUS` to hold a namespace-level connection
//! string whose entities exist (`bosun topology apply`, or the emulator's
//! config). With it set, scripts/test runs it (`cargo test --test
//! servicebus -- --ignored`); run explicitly without it, it fails saying so.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;

use common::bosun;
use serde_json::Value;

#[test]
#[ignore = "needs Azure Service Bus: set BOSUN_TEST_SERVICEBUS to a namespace or emulator connection string \
            whose entities exist (bosun topology apply), then scripts/test runs it"]
fn a_whole_delivery_travels_over_service_bus() {
    let connection_string = std::env::var("BOSUN_TEST_SERVICEBUS")
        .ok()
        .filter(|text| !text.trim().is_empty())
        .unwrap_or_else(|| {
            panic!(
                "BOSUN_TEST_SERVICEBUS is not set: this test needs a Service Bus namespace or emulator; set it to a \
                 namespace-level connection string whose entities exist (bosun topology apply)"
            )
        });
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
