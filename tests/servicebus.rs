//! The whole delivery over Azure Service Bus (a namespace or the local
//! emulator), through the real binary. Opt-in: runs only when
//! `BOSUN_TEST_SERVICEBUS` holds a namespace-level connection string whose
//! entities exist (`bosun topology apply`, or the emulator's config), since
//! no Service Bus is on a CI machine.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;

use common::bosun;
use serde_json::Value;

#[test]
fn a_whole_delivery_travels_over_service_bus() {
    let Ok(connection_string) = std::env::var("BOSUN_TEST_SERVICEBUS") else {
        eprintln!(
            "skipped: set BOSUN_TEST_SERVICEBUS to a Service Bus (or emulator) connection string to run this test"
        );
        return;
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
