//! Helpers for the end-to-end tests: run the real `bosun` binary against a
//! temporary data directory and read its state through the library.

#![allow(dead_code)]

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bosun::backends::servicebus::connection::ServiceBusEndpoint;
use bosun::backends::servicebus::credential::TokenSource;
use bosun::backends::servicebus::management::ManagementClient;
use bosun::backends::servicebus::plan::TopologyOptions;
use bosun::ports::store::{DeadLetterRecord, DeadLetterStatus};
use bosun::runtime::config::Settings;
use bosun::wiring::Backends;
use bosun_contracts::routing::EVENTS_TOPIC;
use bosun_contracts::{Destination, Envelope};
use bosun_servicebus_broker::{Broker, BrokerConfig, RunningBroker};

/// The `bosun` binary with a clean environment (no `BOSUN_*`, `OTEL_*`,
/// `TRACEPARENT`) pointing at `data_dir`.
pub fn bosun(data_dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bosun"));
    for (key, _) in std::env::vars() {
        // bosun's settings, and the OpenTelemetry ones a developer's shell
        // may carry: a test sets what it needs.
        if key.starts_with("BOSUN_") || key.starts_with("OTEL_") || key == "TRACEPARENT" || key == "TRACESTATE" {
            command.env_remove(key);
        }
    }
    command
        .env("BOSUN_DATA_DIR", data_dir)
        .env("BOSUN_RETRY_BASE_DELAY_MS", "5")
        .env("BOSUN_POLL_INTERVAL_MS", "50")
        .env("BOSUN_OPERATOR", "test-operator")
        .env("RUST_LOG", "info")
        .current_dir(data_dir);
    command
}

/// Runs a CLI command to completion and returns its stdout; panics with
/// stderr when it fails.
pub fn run(data_dir: &Path, args: &[&str]) -> String {
    let output = bosun(data_dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("bosun runs");
    assert!(
        output.status.success(),
        "bosun {args:?} failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs a CLI command with `--json` and parses its output.
pub fn run_json(data_dir: &Path, args: &[&str]) -> serde_json::Value {
    let mut args = args.to_vec();
    args.push("--json");
    let stdout = run(data_dir, &args);
    serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("bosun {args:?} printed no JSON ({err}): {stdout}"))
}

/// A `bosun serve` process, killed when dropped. Its stderr lines are
/// collected in the background.
pub struct Server {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Server {
    pub fn start(data_dir: &Path, extra_env: &[(&str, &str)], args: &[&str]) -> Self {
        let mut command = bosun(data_dir);
        command.arg("serve").args(args);
        for (key, value) in extra_env {
            command.env(key, value);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("bosun serve starts");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a stderr line containing `needle`.
    pub fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        panic!(
            "no line with {needle:?} within {timeout:?}; saw:\n{}",
            self.seen.join("\n")
        );
    }

    /// Keeps the stderr lines that come within `duration` (in `seen`).
    pub fn collect_lines(&mut self, duration: Duration) {
        let deadline = Instant::now() + duration;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(line) => self.seen.push(line),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
    }

    /// SIGKILL.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn terminate(mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                assert!(status.success(), "bosun serve exited with {status}");
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("bosun serve did not stop within 30 s of SIGTERM");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `bosun serve --http` on a free port (with only `consumers`, when
/// given, and `env`), once it receives: the server and the API's URL.
pub fn serve_with_http(data: &Path, env: &[(&str, &str)], consumers: Option<&str>) -> (Server, String) {
    let mut args = vec!["--http", "127.0.0.1:0"];
    if let Some(consumers) = consumers {
        args.extend(["--consumers", consumers]);
    }
    let mut server = Server::start(data, env, &args);
    let line = server.wait_for_line("HTTP API on http://", Duration::from_secs(60));
    let start = line.find("http://").expect("the line names the URL");
    let url = line[start..].split_whitespace().next().unwrap_or_default().to_owned();
    server.wait_for_line("receiving", Duration::from_secs(30));
    (server, url)
}

/// The dead letter of `envelope` as `consumer` records one after giving up
/// (`origin`: `host` or `transport`) for `reason`, saying `description`:
/// dead, never replayed, its type, tenant and ids the envelope's.
pub fn dead_letter(
    envelope: &Envelope,
    consumer: &str,
    reason: &str,
    description: &str,
    origin: &str,
) -> DeadLetterRecord {
    DeadLetterRecord {
        id: uuid::Uuid::now_v7(),
        consumer: Some(consumer.into()),
        entity: consumer.into(),
        transport_sequence: None,
        broker_message_id: envelope.message_id.to_string(),
        message_id: Some(envelope.message_id.to_string()),
        message_type: Some(envelope.message_type.clone()),
        correlation_id: Some(envelope.correlation_id.to_string()),
        tenant_id: Some(envelope.tenant_id.clone()),
        body: envelope.to_vec(),
        reason: reason.into(),
        description: description.into(),
        error_chain: vec![description.into()],
        attempts: vec![],
        dead_lettered_at: time::OffsetDateTime::now_utc(),
        origin: origin.into(),
        status: DeadLetterStatus::Dead,
        replays: vec![],
    }
}

/// Polls `check` every 100 ms until it returns `Some`, or panics.
pub fn eventually<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The library's view of a data directory.
pub fn backends(data_dir: &Path) -> Backends {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime
        .block_on(Backends::open(&Settings::with_data_dir(data_dir)))
        .expect("backends open")
}

/// `bosun keys create` for `tenant` with `scopes` (and `sponsor`, who the
/// key acts for): (key, id).
pub fn api_key(data: &Path, tenant: &str, scopes: &str, description: &str, sponsor: Option<&str>) -> (String, String) {
    let mut args = vec![
        "keys",
        "create",
        "--tenant",
        tenant,
        "--scopes",
        scopes,
        "--description",
        description,
    ];
    if let Some(sponsor) = sponsor {
        args.extend(["--sponsor", sponsor]);
    }
    let made = run_json(data, &args);
    (
        made["key"].as_str().expect("a key").to_owned(),
        made["id"].as_str().expect("an id").to_owned(),
    )
}

/// An HTTP API request as `key`, joining delivery `correlation` when
/// given: (status, body; `null` when the body is not JSON).
pub fn api_request(
    url: &str,
    key: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<&serde_json::Value>,
    correlation: Option<&str>,
) -> (u16, serde_json::Value) {
    block_on(async {
        let mut request = reqwest::Client::new()
            .request(method, format!("{url}{path}"))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(correlation) = correlation {
            request = request.header("X-Correlation-Id", correlation);
        }
        let response = request.send().await.expect("the API answers");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(serde_json::Value::Null))
    })
}

/// `POST /v1/commands/{message_type}` as `key`, joining delivery
/// `correlation` when given: (status, body).
pub fn api_command(
    url: &str,
    key: &str,
    message_type: &str,
    payload: &serde_json::Value,
    correlation: Option<&str>,
) -> (u16, serde_json::Value) {
    api_request(
        url,
        key,
        reqwest::Method::POST,
        &format!("/v1/commands/{message_type}"),
        Some(payload),
        correlation,
    )
}

/// [`api_command`], which must be accepted (202): its body.
pub fn api_accepted(
    url: &str,
    key: &str,
    message_type: &str,
    payload: &serde_json::Value,
    correlation: Option<&str>,
) -> serde_json::Value {
    let (status, body) = api_command(url, key, message_type, payload, correlation);
    assert_eq!(status, 202, "{message_type}: {body}");
    body
}

/// Runs a future to completion on a fresh runtime.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

/// Messages waiting on a consumer's subscription of the events topic.
pub fn subscription_depth(data_dir: &Path, subscription: &str) -> u64 {
    let backends = backends(data_dir);
    block_on(backends.transport.depth(&Destination::Subscription {
        topic: EVENTS_TOPIC.into(),
        subscription: subscription.into(),
    }))
    .expect("depth")
}

/// Messages waiting on a consumer's queue.
pub fn queue_depth(data_dir: &Path, queue: &str) -> u64 {
    let backends = backends(data_dir);
    block_on(backends.transport.depth(&Destination::Queue(queue.into()))).expect("depth")
}

/// The bare repository of `tenant`/`name` under the data directory's Git
/// root, if it exists.
pub fn find_repository(data_dir: &Path, tenant: &str, name: &str) -> Option<PathBuf> {
    let tenant_dir = data_dir.join("git").join(tenant);
    for project in std::fs::read_dir(&tenant_dir).ok()?.flatten() {
        let candidate = project.path().join(format!("{name}.git"));
        if candidate.is_dir() {
            return Some(candidate);
        }
    }
    None
}

/// Runs git against a bare repository and returns stdout.
pub fn git(repository: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("--git-dir")
        .arg(repository)
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// This checkout.
pub const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The NODE_PATH printed by `scripts/<tool> node-path` (which installs the
/// tool when missing), or why the Node.js test cannot run.
pub fn node_tools(tool: &str) -> Result<String, String> {
    match Command::new("node").arg("--version").output() {
        Ok(output) if output.status.success() => {}
        Ok(output) => return Err(format!("`node --version` failed: {}", output.status)),
        Err(err) => return Err(format!("Node.js is not installed ({err}); apt-get install nodejs npm")),
    }
    let output = Command::new(Path::new(REPO).join("scripts").join(tool))
        .arg("node-path")
        .stdin(Stdio::null())
        .output()
        .map_err(|err| format!("scripts/{tool} did not run: {err}"))?;
    if !output.status.success() {
        return Err(format!(
            "scripts/{tool} node-path failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let node_path = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if node_path.is_empty() {
        return Err(format!("scripts/{tool} node-path printed nothing"));
    }
    Ok(node_path)
}

/// Runs `node <script>` (relative to the checkout) with `env` and no other
/// BOSUN_ variables, for at most 240 s; whether it passed, and its output
/// (also kept in `<log_dir>/<name>-stdout.log` and `-stderr.log`).
pub fn run_node_script(script: &str, env: &[(&str, &str)], log_dir: &Path, name: &str) -> (bool, String) {
    let stdout_path = log_dir.join(format!("{name}-stdout.log"));
    let stderr_path = log_dir.join(format!("{name}-stderr.log"));
    let mut command = Command::new("node");
    command.arg(Path::new(REPO).join(script));
    for (key, _) in std::env::vars() {
        if key.starts_with("BOSUN_") {
            command.env_remove(key);
        }
    }
    let mut child = command
        .envs(env.iter().copied())
        .current_dir(REPO)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).expect("log file"))
        .stderr(std::fs::File::create(&stderr_path).expect("log file"))
        .spawn()
        .expect("node starts");
    let deadline = Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for node") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = format!(
        "{}{}",
        std::fs::read_to_string(&stdout_path).unwrap_or_default(),
        std::fs::read_to_string(&stderr_path).unwrap_or_default()
    );
    match status {
        Some(status) => (status.success(), format!("exit {status}\n{output}")),
        None => (false, format!("killed after 240 s\n{output}")),
    }
}

/// The PostgreSQL server the suite uses (`BOSUN_TEST_DATABASE_URL`, else
/// 127.0.0.1:5432, database `test`). A test that needs it fails when it is
/// not there, saying so: it never reports `ok` without having run.
pub fn postgres_url() -> String {
    let url = std::env::var("BOSUN_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let reachable =
        std::net::TcpStream::connect_timeout(&"127.0.0.1:5432".parse().unwrap(), Duration::from_secs(2)).is_ok();
    assert!(
        reachable || std::env::var_os("BOSUN_TEST_DATABASE_URL").is_some(),
        "PostgreSQL is not reachable on 127.0.0.1:5432: start it (trust auth, user postgres, database test) \
         or point BOSUN_TEST_DATABASE_URL at one"
    );
    url
}

/// A fresh schema on the suite's PostgreSQL server ([`postgres_url`]), and
/// the URL that uses it (the schema as the connections' search path).
pub struct PostgresSchema {
    /// The server's URL.
    pub base_url: String,
    /// The schema's name: `<prefix>_<uuid>`.
    pub name: String,
    /// The URL whose connections use the schema.
    pub url: String,
}

impl PostgresSchema {
    /// Creates `<prefix>_<uuid>`.
    pub async fn create(prefix: &str) -> Self {
        let base_url = postgres_url();
        let name = format!("{prefix}_{}", uuid::Uuid::now_v7().simple());
        let separator = if base_url.contains('?') { '&' } else { '?' };
        let url = format!("{base_url}{separator}options=-c%20search_path%3D{name}");
        bosun::backends::postgres::create_schema(&base_url, &name)
            .await
            .expect("create a fresh schema");
        Self { base_url, name, url }
    }

    /// Drops it.
    pub async fn drop(self) {
        bosun::backends::postgres::drop_schema(&self.base_url, &self.name)
            .await
            .expect("drop the schema");
    }
}

/// How often [`Progress::tick`] prints.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Progress lines of a long test, on stderr with `eprintln!`: captured by
/// the test harness like any output, shown with `--nocapture` (which
/// scripts/test passes to the long tests). Each line reads
/// `<name>: <what>, <seconds since the start> s`.
pub struct Progress {
    name: &'static str,
    started: Instant,
    last: Cell<Instant>,
}

impl Progress {
    /// Starts the clock of `name` (the test file, or file and test).
    pub fn start(name: &'static str) -> Self {
        let started = Instant::now();
        let progress = Self {
            name,
            started,
            last: Cell::new(started),
        };
        progress.phase("started");
        progress
    }

    /// A line now: a phase begins or ends.
    pub fn phase(&self, what: impl std::fmt::Display) {
        self.last.set(Instant::now());
        eprintln!("{}: {what}, {:.1} s", self.name, self.started.elapsed().as_secs_f64());
    }

    /// A line when the last one is a few seconds old: for counts polled
    /// in a loop.
    pub fn tick(&self, what: impl FnOnce() -> String) {
        if self.last.get().elapsed() >= PROGRESS_EVERY {
            self.phase(what());
        }
    }
}

/// `12345` as `12,345`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// `Command::output`, printing with `progress` every few seconds how many
/// stderr lines of `bosun demo` (one per timeline line: `[  1.23s] ok
/// MessageType ...`) came so far, and the last one.
pub fn demo_output_with_progress(command: &mut Command, progress: &Progress) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let stdout = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let stderr = child.stderr.take().expect("stderr is piped");
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut hops = 0;
    let mut last = String::new();
    loop {
        match lines.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                if let Some((_, rest)) = line.split_once("s] ").filter(|_| line.starts_with('[')) {
                    hops += 1;
                    last = rest.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
                }
                seen.push(line);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        progress.tick(|| format!("{hops} timeline lines so far, the last {last}"));
    }
    let status = child.wait().expect("wait for the command");
    progress.phase(format!("the demo exited ({status}) after {hops} timeline lines"));
    Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: seen.join("\n").into_bytes(),
    }
}

/// The in-process test broker with bosun's topology applied to it the way
/// `bosun topology apply` does (the management client over the broker's
/// REST API; the test below does it through the binary).
pub async fn servicebus_test_broker() -> RunningBroker {
    let broker = Broker::start(BrokerConfig::default())
        .await
        .expect("the test broker starts");
    let endpoint =
        ServiceBusEndpoint::from_connection_string(&broker.connection_string()).expect("its connection string");
    let tokens = TokenSource::for_endpoint(&endpoint).expect("its tokens");
    let management = ManagementClient::new(&endpoint, tokens)
        .expect("a management client")
        .with_base_url(format!("http://127.0.0.1:{}", broker.port()));
    let plan = management
        .plan(&bosun::runtime::registry::topology(), &TopologyOptions::default())
        .await
        .expect("the topology planned on the test broker");
    management
        .apply(&plan)
        .await
        .expect("the topology applied to the test broker");
    broker
}
