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

/// A TCP proxy on loopback in front of `target` that can be cut: the
/// listener closes (a new connection is refused) and every connection it
/// carried is shut down.
struct CuttableProxy {
    address: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    streams: std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl CuttableProxy {
    /// A proxy on `bind` (`127.0.0.1:0` for a free port).
    fn start(bind: &str, target: String) -> Self {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind(bind).unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let streams = std::sync::Arc::new(std::sync::Mutex::new(Vec::<TcpStream>::new()));
        let accept = std::thread::spawn({
            let (stop, streams) = (stop.clone(), streams.clone());
            move || {
                while !stop.load(Ordering::SeqCst) {
                    let inbound = match listener.accept() {
                        Ok((inbound, _)) => inbound,
                        Err(_) => {
                            std::thread::sleep(Duration::from_millis(10));
                            continue;
                        }
                    };
                    inbound.set_nonblocking(false).unwrap();
                    let Ok(outbound) = TcpStream::connect(&target) else {
                        continue;
                    };
                    let mut held = streams.lock().unwrap();
                    for (mut from, mut to) in [
                        (inbound.try_clone().unwrap(), outbound.try_clone().unwrap()),
                        (outbound.try_clone().unwrap(), inbound.try_clone().unwrap()),
                    ] {
                        std::thread::spawn(move || {
                            let _ = std::io::copy(&mut from, &mut to);
                            let _ = to.shutdown(std::net::Shutdown::Both);
                        });
                    }
                    held.extend([inbound, outbound]);
                }
                // The listener is dropped here: connecting is refused.
            }
        });
        Self {
            address,
            stop,
            streams,
            accept: Some(accept),
        }
    }

    /// Refuses new connections and shuts the open ones down.
    fn cut(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(accept) = self.accept.take() {
            accept.join().unwrap();
        }
        for stream in self.streams.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// `/readyz` and `/metrics` answer within their deadline while the
/// database refuses connections (a pool would wait 30 s for one), naming
/// what is unreachable; readiness comes back with the database.
#[test]
fn readiness_and_metrics_answer_within_a_second_while_the_database_refuses_connections() {
    let schema = block_on(PostgresSchema::create("ops_down"));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    run(data, &["migrate", "--database-url", &schema.url]);
    // The database's host:port in the URL, and the same URL through a proxy.
    let authority = schema
        .url
        .split_once('@')
        .and_then(|(_, rest)| rest.split('/').next())
        .expect("the database URL names host:port after `@`")
        .to_owned();
    let mut proxy = CuttableProxy::start("127.0.0.1:0", authority.clone());
    let url = schema.url.replacen(&authority, &proxy.address, 1);
    let env = [("BOSUN_DATABASE_URL", url.as_str()), ("BOSUN_TRANSPORT", "postgres")];
    let mut server = Server::start(data, &env, &["--consumers", "probe", "--ops-addr", "127.0.0.1:0"]);
    let line = server.wait_for_line("bosun: ops port on http://", Duration::from_secs(60));
    let address = line
        .split("http://")
        .nth(1)
        .expect("the line names the address")
        .trim()
        .to_owned();
    eventually("ready through the proxy", Duration::from_secs(60), || {
        get(&address, "/readyz").ok().filter(|(status, _)| *status == 200)
    });

    proxy.cut();
    // The deadline is 0.8 s; the bound leaves room for a loaded machine and
    // still fails for a check that waits on the pool (30 s). While a check
    // is slow, its last answer (ok) stands, with its age, until the check
    // times out (5 s): then the store is named, and not ready.
    let bound = Duration::from_millis(2500);
    let mut slowest = Duration::ZERO;
    let mut last = String::new();
    let mut unready_since: Option<std::time::Instant> = None;
    let cut_at = std::time::Instant::now();
    while cut_at.elapsed() < Duration::from_secs(20) {
        for path in ["/readyz", "/metrics"] {
            let started = std::time::Instant::now();
            let (status, body) = get(&address, path).unwrap();
            let took = started.elapsed();
            slowest = slowest.max(took);
            assert!(
                took < bound,
                "{path} took {took:?}, {:?} after the cut, with the database refusing connections",
                cut_at.elapsed()
            );
            if path == "/readyz" {
                match (status, unready_since) {
                    (503, None) => unready_since = Some(std::time::Instant::now()),
                    (200, Some(since)) => panic!("ready again {:?} after it said not ready: {body}", since.elapsed()),
                    _ => {}
                }
                last = body;
            } else {
                assert_eq!(status, 200, "{body}");
                assert!(body.contains("bosun_ready "), "{body}");
            }
        }
        if unready_since.is_some_and(|since| since.elapsed() > Duration::from_secs(2)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let unready_after = unready_since.map(|since| since - cut_at);
    eprintln!("ops_port: not ready {unready_after:?} after the database went away");
    assert!(unready_after.is_some(), "never said not ready in 20 s: {last}");
    eprintln!("ops_port: slowest answer with the database refusing connections: {slowest:?}");
    let readiness: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(readiness["ready"], false, "{readiness}");
    assert!(
        ["store", "transport", "schema"]
            .iter()
            .any(|check| readiness["checks"][check] != "ok"),
        "what is unreachable is named: {readiness}"
    );
    assert!(readiness["observed"]["store"].is_object(), "{readiness}");
    let (_, metrics) = get(&address, "/metrics").unwrap();
    assert!(metrics.contains("bosun_ready 0"), "{metrics}");
    assert!(metrics.contains("bosun_health_check_up{check="), "{metrics}");
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with("bosun_health_check_up{") && line.ends_with(" 0")),
        "{metrics}"
    );

    // The database comes back on the same address: ready again.
    let _back = CuttableProxy::start(&proxy.address, authority);
    let (status, body) = eventually("ready again with the database", Duration::from_secs(60), || {
        get(&address, "/readyz").ok().filter(|(status, _)| *status == 200)
    });
    assert_eq!(status, 200, "{body}");
    server.terminate();
    block_on(schema.drop());
}
