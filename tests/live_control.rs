//! Live control of consumers on PostgreSQL, through the real binary: `bosun
//! consumers pause` stops every replica of a consumer from taking messages
//! within 5 s (each says so in its log, `/readyz` and `/metrics`), its
//! messages wait in the queue (none handled, none dead-lettered), and
//! `bosun consumers resume` has them all handled once, none lost.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bosun::runtime::config::{Secret, Settings, TransportKind};
use bosun::wiring::Backends;
use bosun_contracts::Message;
use bosun_contracts::messages::Probe;
use common::{PostgresSchema, Progress, Server, block_on, bosun, eventually, run};

const PROBES: u64 = 20;

fn get(address: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// `bosun ARGS` against the schema, as an operator named `ops`.
fn cli(data: &std::path::Path, url: &str, args: &[&str]) -> String {
    let output = bosun(data)
        .args(args)
        .env("BOSUN_DATABASE_URL", url)
        .env("BOSUN_TRANSPORT", "postgres")
        .env("BOSUN_OPERATOR", "ops")
        .stdin(Stdio::null())
        .output()
        .expect("bosun runs");
    assert!(
        output.status.success(),
        "bosun {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn a_paused_consumer_stops_on_every_replica_within_5_s_and_resumes_without_loss() {
    let progress = Progress::start("live_control");
    let schema = block_on(PostgresSchema::create("pause"));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    run(data, &["migrate", "--database-url", &schema.url]);
    let env = [
        ("BOSUN_DATABASE_URL", schema.url.as_str()),
        ("BOSUN_TRANSPORT", "postgres"),
    ];
    let args = ["--consumers", "probe", "--ops-addr", "127.0.0.1:0"];
    let mut replicas: Vec<(Server, String)> = (0..2)
        .map(|_| {
            let mut server = Server::start(data, &env, &args);
            let line = server.wait_for_line("bosun: ops port on http://", Duration::from_secs(60));
            let address = line.split("http://").nth(1).unwrap().trim().to_owned();
            server.wait_for_line("receiving", Duration::from_secs(60));
            (server, address)
        })
        .collect();
    progress.phase("2 replicas of probe receiving");

    let paused = cli(
        data,
        &schema.url,
        &[
            "consumers",
            "pause",
            "probe",
            "--reason",
            "INC-7: the canary's downstream is down",
        ],
    );
    assert!(paused.contains("probe paused"), "{paused}");
    let asked = Instant::now();
    for (server, _) in &mut replicas {
        server.wait_for_line("paused: taking no message", Duration::from_secs(5));
    }
    progress.phase(format!(
        "every replica paused {:.1} s after the pause",
        asked.elapsed().as_secs_f64()
    ));
    for (_, address) in &replicas {
        let (status, body) = get(address, "/readyz");
        assert_eq!(status, 200, "a pause is not an outage: {body}");
        let readiness: serde_json::Value = serde_json::from_str(&body).unwrap();
        let said = readiness["paused"][0].as_str().unwrap_or_default().to_owned();
        assert!(said.starts_with("probe: paused by cli:ops at "), "{readiness}");
        assert!(said.ends_with("INC-7: the canary's downstream is down"), "{readiness}");
        let (_, metrics) = get(address, "/metrics");
        assert!(
            metrics.contains("bosun_consumer_paused{consumer=\"probe\",entity=\"probe\"} 1"),
            "{metrics}"
        );
    }

    // Sent while paused: they wait in the queue.
    let mut settings = Settings::with_data_dir(data);
    settings.database_url = Some(Secret::new(schema.url.clone()));
    settings.transport = TransportKind::Postgres;
    // One runtime for everything over this pool.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backends = runtime.block_on(Backends::open(&settings)).expect("backends");
    let operator = backends.operator("test");
    runtime.block_on(async {
        for sequence in 0..PROBES {
            let probe = Message::Probe(Probe {
                group: "paused".into(),
                sequence,
                echo: true,
                work_ms: 0,
                relays: 0,
            });
            operator
                .send("Probe", &probe.to_payload(), None, "contoso")
                .await
                .expect("sent");
        }
    });
    std::thread::sleep(Duration::from_secs(3));
    let tally = || {
        runtime
            .block_on(backends.store.load_saga("probe", "contoso/paused"))
            .unwrap()
            .map(|saga| saga.state["count"].as_u64().unwrap_or(0))
    };
    assert_eq!(tally(), None, "no probe is handled while the consumer is paused");
    let dead = runtime
        .block_on(backends.store.dead_letters(&Default::default()))
        .unwrap();
    assert!(dead.is_empty(), "nothing is dead-lettered by a pause: {dead:?}");
    progress.phase(format!("{PROBES} probes waiting"));

    let resumed = cli(
        data,
        &schema.url,
        &["consumers", "resume", "probe", "--reason", "INC-7 resolved"],
    );
    assert!(resumed.contains("probe resumed"), "{resumed}");
    eventually("every waiting probe is counted once", Duration::from_secs(60), || {
        (tally() == Some(PROBES)).then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(tally(), Some(PROBES), "each probe counted exactly once");
    progress.phase(format!("{PROBES}/{PROBES} probes counted after the resume"));

    let log: serde_json::Value =
        serde_json::from_str(&cli(data, &schema.url, &["consumers", "log", "--json"])).unwrap();
    let actions: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, vec!["resume", "pause"], "{log}");
    assert_eq!(log[1]["by"], "cli:ops");
    for (server, _) in replicas {
        server.terminate();
    }
    block_on(schema.drop());
}
