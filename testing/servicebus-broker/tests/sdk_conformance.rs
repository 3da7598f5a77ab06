//! The broker driven by Microsoft's own Python SDK (`azure-servicebus`,
//! pinned in scripts/servicebus-sdk): conformance/conformance.py sends and
//! receives (receive-and-delete), schedules (and cancels), peeks, settles
//! peek-locked messages (complete, abandon, dead-letter and the dead-letter
//! queue, defer and receive by sequence number), renews a lock, routes by
//! rule through a topic, and uses sessions (a named session, the next
//! available one, session state, session lock renewal), printing a line per
//! check. Ignored unless the SDK is installed; scripts/test installs it and
//! runs this with --ignored.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use bosun_servicebus_broker::{Broker, BrokerConfig, EntitySettings};

const PYTHON_VAR: &str = "BOSUN_TEST_SERVICEBUS_SDK_PYTHON";
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
const QUEUE_PREFIX: &str = "conformance";
const QUEUES: [&str; 9] = [
    "send",
    "schedule",
    "peek",
    "complete",
    "abandon",
    "dead-letter",
    "renew",
    "schedule-cancel",
    "defer",
];
/// The session-enabled queues (`requires_session`).
const SESSION_QUEUES: [&str; 3] = ["sessions", "session-state", "next-session"];
const TOPIC: &str = "conformance-topic";
const SUBSCRIPTION: &str = "routed";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Microsoft's Python SDK: scripts/servicebus-sdk install (scripts/test runs it)"]
async fn microsofts_python_sdk_conforms() {
    let python = std::env::var(PYTHON_VAR).unwrap_or_else(|_| {
        panic!(
            "{PYTHON_VAR} is not set: set it to the python that has azure-servicebus, \
             {PYTHON_VAR}=\"$(scripts/servicebus-sdk install)\" (scripts/test does this)"
        )
    });
    let broker = Broker::start(BrokerConfig::default()).await.unwrap();
    let settings = EntitySettings {
        lock_duration: Duration::from_secs(10),
        ..EntitySettings::default()
    };
    for queue in QUEUES {
        broker
            .create_queue(&format!("{QUEUE_PREFIX}-{queue}"), settings)
            .unwrap();
    }
    let sessions = EntitySettings {
        requires_session: true,
        ..settings
    };
    for queue in SESSION_QUEUES {
        broker
            .create_queue(&format!("{QUEUE_PREFIX}-{queue}"), sessions)
            .unwrap();
    }
    broker.create_topic(TOPIC, settings).unwrap();
    broker.create_subscription(TOPIC, SUBSCRIPTION, settings).unwrap();
    broker.remove_rule(TOPIC, SUBSCRIPTION, "$Default").unwrap();
    broker
        .put_rule(TOPIC, SUBSCRIPTION, "by-label", "sys.Label = 'routed'")
        .unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance/conformance.py");
    let mut child = tokio::process::Command::new(&python)
        .arg(&script)
        .arg("-")
        .args([QUEUE_PREFIX, TOPIC, SUBSCRIPTION])
        .env("SERVICEBUS_CONNECTION_STRING", broker.connection_string())
        .env("PYTHONUNBUFFERED", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run {python} ({PYTHON_VAR}): {error}"));
    // Each line is printed as it comes, so a hung check still shows the
    // ones before it.
    let stdout = tokio::spawn(lines(child.stdout.take().unwrap(), "conformance.py"));
    let stderr = tokio::spawn(lines(child.stderr.take().unwrap(), "conformance.py stderr"));
    let status = tokio::time::timeout(SCRIPT_TIMEOUT, child.wait()).await;
    if status.is_err() {
        child.kill().await.unwrap();
    }
    let stdout = stdout.await.unwrap();
    let stderr = stderr.await.unwrap();
    let status = status
        .unwrap_or_else(|_| panic!("conformance.py did not finish within {SCRIPT_TIMEOUT:?}:\n{stdout}\n{stderr}"))
        .unwrap();
    let output = Output { status, stdout, stderr };
    let (stdout, stderr) = (&output.stdout, &output.stderr);
    assert!(
        output.status.success(),
        "conformance.py failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(!stdout.contains("FAIL"), "a check failed:\n{stdout}");
    // A check per queue and the topic's; `pending` ones wait for
    // peek-lock settlement (see conformance.py).
    assert_eq!(
        stdout
            .lines()
            .filter(|line| line.starts_with("ok ") || line.starts_with("pending "))
            .count(),
        QUEUES.len() + SESSION_QUEUES.len() + 1,
        "expected an `ok` or `pending` line per check:\n{stdout}"
    );
}

struct Output {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
}

/// Prints each line of `stream` as it comes and returns them all.
async fn lines(stream: impl AsyncRead + Unpin, name: &str) -> String {
    let mut lines = BufReader::new(stream).lines();
    let mut all = String::new();
    while let Ok(Some(line)) = lines.next_line().await {
        println!("{name}: {line}");
        all.push_str(&line);
        all.push('\n');
    }
    all
}
