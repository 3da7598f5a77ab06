//! The ops port of the real binary: `bosun serve --ops-addr` answers
//! `/healthz`, `/readyz` and `/metrics` while the API is off, and readiness
//! turns false on SIGTERM while the consumers are still draining.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::{PostgresSchema, Server, block_on, eventually, run, run_json};

/// `GET path` on `address`: the status and the body.
fn get(address: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

#[test]
fn the_ops_port_answers_without_the_api_and_turns_unready_on_sigterm_before_the_drain_ends() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let mut server = Server::start(
        data,
        &[("BOSUN_SHUTDOWN_GRACE_MS", "120000")],
        &["--consumers", "probe", "--ops-addr", "127.0.0.1:0"],
    );
    let line = server.wait_for_line("bosun: ops port on http://", Duration::from_secs(60));
    let address = line
        .split("http://")
        .nth(1)
        .expect("the line names the address")
        .trim()
        .to_owned();
    server.wait_for_line("receiving", Duration::from_secs(30));
    assert!(
        !server.seen.iter().any(|line| line.contains("HTTP API on")),
        "no API without --http"
    );

    assert_eq!(get(&address, "/healthz").unwrap().0, 200);
    let (status, body) = eventually("the ops port says ready", Duration::from_secs(30), || {
        get(&address, "/readyz").ok().filter(|(status, _)| *status == 200)
    });
    assert_eq!(status, 200, "{body}");
    let (status, metrics) = get(&address, "/metrics").unwrap();
    assert_eq!(status, 200);
    assert!(metrics.contains("bosun_outbox_backlog"), "{metrics}");
    for path in ["/console", "/openapi.json", "/v1/deliveries", "/mcp"] {
        assert_eq!(get(&address, path).unwrap().0, 404, "{path} is not on the ops port");
    }

    // A probe that works for a minute keeps the drain going.
    run_json(
        data,
        &[
            "send",
            "Probe",
            "--tenant",
            "contoso",
            "--payload",
            r#"{"group": "drain", "workMs": 60000}"#,
        ],
    );
    server.wait_for_line("started", Duration::from_secs(30));
    Command::new("kill")
        .arg("-TERM")
        .arg(server.child.id().to_string())
        .status()
        .expect("kill runs");
    server.wait_for_line("shutting down", Duration::from_secs(30));
    let (status, body) = get(&address, "/readyz").expect("the ops port still answers while draining");
    assert_eq!(status, 503, "{body}");
    let readiness: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(readiness["checks"]["draining"], true);
    assert_eq!(get(&address, "/healthz").unwrap().0, 200, "alive while draining");
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "bosun is still draining the probe"
    );
}

#[test]
fn a_process_on_a_schema_behind_it_waits_unready_then_serves_once_migrated() {
    let schema = block_on(PostgresSchema::create("ops_wait"));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let env = [
        ("BOSUN_DATABASE_URL", schema.url.as_str()),
        ("BOSUN_TRANSPORT", "postgres"),
    ];
    let mut server = Server::start(data, &env, &["--consumers", "probe", "--ops-addr", "127.0.0.1:0"]);
    let line = server.wait_for_line("bosun: ops port on http://", Duration::from_secs(60));
    let address = line
        .split("http://")
        .nth(1)
        .expect("the line names the address")
        .trim()
        .to_owned();

    // Alive, not ready, saying why; and still running, not crash-looping.
    assert_eq!(get(&address, "/healthz").unwrap().0, 200);
    let (status, body) = eventually(
        "unready, saying it waits for the schema",
        Duration::from_secs(30),
        || {
            get(&address, "/readyz")
                .ok()
                .filter(|(_, body)| body.contains("waiting for the database schema"))
        },
    );
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("run `bosun migrate`"), "{body}");
    server.wait_for_line("waiting for the database schema", Duration::from_secs(30));
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the process waits, it does not exit"
    );

    run(data, &["migrate", "--database-url", &schema.url]);
    let (status, body) = eventually("ready once migrated", Duration::from_secs(60), || {
        get(&address, "/readyz").ok().filter(|(status, _)| *status == 200)
    });
    assert_eq!(status, 200, "{body}");
    server.wait_for_line("receiving", Duration::from_secs(30));
    server.terminate();
    block_on(schema.drop());
}
