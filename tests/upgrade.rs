//! The rolling upgrade, forward and back, with the real binaries of two
//! releases on one PostgreSQL schema (store and transport):
//!
//! - the previous release (`BOSUN_TEST_PREVIOUS_BIN`, built by
//!   `scripts/previous-release` from the commit `.ci/previous-release`
//!   names) migrates and runs two `serve` and two `api` processes; its
//!   deliveries leave a release waiting for its prod approval (its approval
//!   timeout pending) and a pipeline run being polled;
//! - this checkout's `bosun` migrates (`--compatible-only`, as each pod's
//!   init container) and replaces the processes one at a time (stop one,
//!   start its successor, wait for its `/readyz`), with
//!   `BOSUN_COMPAT_VERSION=1`, while probes flow through the APIs and a
//!   poller reads both APIs' `/readyz` every 50 ms; a delivery starts
//!   mid-roll; the releases are approved through the new API;
//! - then back: the previous release replaces the new processes one at a
//!   time on the migrated schema, with another release waiting for its
//!   approval across the rollback.
//!
//! Each way: every delivery's release completes, no message is
//! dead-lettered, the probe tally equals the probes the APIs accepted, and
//! at every poll at least one API answered `/readyz` with 200.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use bosun::ports::store::SagaStore;
use common::{PostgresSchema, Progress};
use serde_json::{Value, json};

/// The two releases under test.
#[derive(Clone)]
struct Release {
    /// `previous` or `new`, in progress lines.
    name: &'static str,
    binary: PathBuf,
    /// Whether its processes run with `BOSUN_COMPAT_VERSION=1`.
    compat: bool,
}

/// What a process is.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    /// `bosun serve`: every consumer, its ops port for `/readyz`.
    Serve,
    /// `bosun api`: the HTTP API, which answers `/readyz` itself.
    Api,
}

/// The settings every process gets: short polls and backoffs, a release
/// path with an approval to wait for, a long approval timeout (pending
/// across the roll).
fn settings(url: &str) -> Vec<(&'static str, String)> {
    [
        ("BOSUN_DATABASE_URL", url),
        ("BOSUN_RELEASE_ENVIRONMENTS", "dev,prod"),
        ("BOSUN_AUTO_APPROVE", "dev"),
        ("BOSUN_APPROVAL_TIMEOUT_MS", "600000"),
        ("BOSUN_PIPELINE_POLL_MS", "200"),
        ("BOSUN_PIPELINE_POLL_MAX_MS", "1000"),
        ("BOSUN_RECONCILE_MS", "200"),
        ("BOSUN_RECONCILE_MAX_MS", "1000"),
        ("BOSUN_LOCK_DURATION_MS", "5000"),
        ("BOSUN_SHUTDOWN_GRACE_MS", "20000"),
    ]
    .into_iter()
    .map(|(key, value)| (key, value.to_owned()))
    .collect()
}

/// `release`'s bosun with the test environment of [`common::bosun`] and
/// `env`.
fn command(release: &Release, data: &Path, env: &[(&'static str, String)]) -> Command {
    let template = common::bosun(data);
    let mut command = Command::new(&release.binary);
    for (key, value) in template.get_envs() {
        match value {
            Some(value) => command.env(key, value),
            None => command.env_remove(key),
        };
    }
    command.current_dir(data);
    for (key, value) in env {
        command.env(key, value);
    }
    if release.compat {
        command.env("BOSUN_COMPAT_VERSION", "1");
    }
    command
}

/// Runs a CLI command of `release` to completion: its stdout.
fn run(release: &Release, data: &Path, env: &[(&'static str, String)], args: &[&str]) -> String {
    let output = command(release, data, env)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("bosun runs");
    assert!(
        output.status.success(),
        "{} bosun {args:?} failed: {}\n{}",
        release.name,
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A `serve` or `api` process, killed when dropped (on a failure too).
struct Process {
    role: Role,
    release: &'static str,
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    /// `http://host:port` of `/readyz`: the ops port of a `serve`, the API
    /// of an `api`.
    url: String,
}

impl Process {
    fn start(role: Role, release: &Release, data: &Path, env: &[(&'static str, String)]) -> Self {
        let mut command = command(release, data, env);
        match role {
            Role::Serve => command.args(["serve", "--ops-addr", "127.0.0.1:0"]),
            Role::Api => command.args(["api", "--http", "127.0.0.1:0"]),
        };
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("bosun starts");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut process = Self {
            role,
            release: release.name,
            child,
            lines,
            seen: Vec::new(),
            url: String::new(),
        };
        let needle = match role {
            Role::Serve => "bosun: ops port on http://",
            Role::Api => "bosun: HTTP API on http://",
        };
        let line = process.wait_for_line(needle, Duration::from_secs(60));
        let start = line.find("http://").expect("the line names the URL");
        process.url = line[start..].split_whitespace().next().unwrap_or_default().to_owned();
        process
    }

    fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> String {
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
            "{}: no line with {needle:?} within {timeout:?}; saw:\n{}",
            self.describe(),
            self.tail()
        );
    }

    fn describe(&self) -> String {
        let role = match self.role {
            Role::Serve => "serve",
            Role::Api => "api",
        };
        format!("{} {role} (pid {})", self.release, self.child.id())
    }

    fn tail(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        let skip = self.seen.len().saturating_sub(40);
        self.seen[skip..].join("\n")
    }

    /// Waits until its `/readyz` answers 200.
    fn wait_ready(&mut self, runtime: &tokio::runtime::Runtime, client: &reqwest::Client) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if runtime.block_on(ready(client, &self.url)) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited ({status}) before it was ready:\n{}",
                    self.describe(),
                    self.tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready within 60 s:\n{}",
                self.describe(),
                self.tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM, then a clean exit within 40 s (the drain's grace is 20 s).
    fn terminate(mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(40);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                assert!(
                    status.success(),
                    "{} exited with {status}:\n{}",
                    self.describe(),
                    self.tail()
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "{} did not stop within 40 s of SIGTERM:\n{}",
            self.describe(),
            self.tail()
        );
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `url`'s `/readyz` answers 200 within a second.
async fn ready(client: &reqwest::Client, url: &str) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(1), client.get(format!("{url}/readyz")).send()).await,
        Ok(Ok(response)) if response.status() == 200
    )
}

/// The two APIs' URLs the pollers and the prober use: a slot changes to
/// the successor once it is ready.
type ApiUrls = Arc<Mutex<[String; 2]>>;

/// What the background readiness poller and prober counted.
#[derive(Default)]
struct Counters {
    polls: AtomicU64,
    /// Polls at which neither API answered `/readyz` with 200.
    gaps: AtomicU64,
    /// Probes an API accepted (202).
    probes_sent: AtomicU64,
    /// Probes refused by one API (sent again to the other).
    probes_refused: AtomicU64,
    /// Requests whose outcome is unknown (sent, no answer): the tally could
    /// count them without the sender knowing, so there must be none.
    probes_unknown: AtomicU64,
    stop: AtomicBool,
}

/// Polls both APIs' `/readyz` every 50 ms until stopped.
async fn poll_readiness(client: reqwest::Client, urls: ApiUrls, counters: Arc<Counters>, progress_name: &'static str) {
    let started = Instant::now();
    while !counters.stop.load(Ordering::SeqCst) {
        let [first, second] = urls.lock().unwrap().clone();
        let (a, b) = tokio::join!(ready(&client, &first), ready(&client, &second));
        counters.polls.fetch_add(1, Ordering::SeqCst);
        if !a && !b {
            counters.gaps.fetch_add(1, Ordering::SeqCst);
            eprintln!(
                "{progress_name}: readiness gap: neither {first} nor {second} answered /readyz with 200, {:.1} s into the phase",
                started.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends a probe of `group` every 25 ms through the APIs, alternating, the
/// other API when one refuses, until stopped.
async fn send_probes(client: reqwest::Client, urls: ApiUrls, key: String, group: String, counters: Arc<Counters>) {
    let mut sequence = 0u64;
    while !counters.stop.load(Ordering::SeqCst) {
        let pair = urls.lock().unwrap().clone();
        let first = (sequence % 2) as usize;
        // One Idempotency-Key per probe: a request whose answer was lost
        // (an API stopping mid-request) is sent again to the other API,
        // which answers with the first's outcome if it was accepted.
        let idempotency_key = format!("{group}-{sequence}");
        for (tried, url) in [&pair[first], &pair[1 - first]].into_iter().enumerate() {
            let sent = client
                .post(format!("{url}/v1/commands/Probe"))
                .bearer_auth(&key)
                .header("X-Bosun-Tenant", "upgrade")
                .header("Idempotency-Key", &idempotency_key)
                .timeout(Duration::from_secs(10))
                .json(&json!({"group": group, "sequence": sequence}))
                .send()
                .await;
            match sent {
                Ok(response) if response.status() == 202 => {
                    counters.probes_sent.fetch_add(1, Ordering::SeqCst);
                    break;
                }
                // Refused: an answer that is not 202 sent nothing; nor did
                // a connection that never opened.
                Ok(_) => counters.probes_refused.fetch_add(1, Ordering::SeqCst),
                Err(err) if err.is_connect() => counters.probes_refused.fetch_add(1, Ordering::SeqCst),
                Err(err) if tried == 0 => {
                    eprintln!("upgrade: a probe request to {url} has no answer ({err}); sent again to the other API");
                    0
                }
                Err(err) => {
                    eprintln!("upgrade: a probe request to {url} has no answer: {err}");
                    counters.probes_unknown.fetch_add(1, Ordering::SeqCst)
                }
            };
        }
        sequence += 1;
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The test's view of the deployment: the processes, the API key, the
/// HTTP client and the library's PostgreSQL store for reading sagas
/// (opened without the schema check: it reads the sagas table, which
/// every schema of the window has, before and after the migration).
struct Deployment {
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
    data: PathBuf,
    env: Vec<(&'static str, String)>,
    key: String,
    /// The release board's key: approvals are never given by the key that
    /// fired the delivery (the approval policy refuses the requester).
    approver: String,
    serves: Vec<Process>,
    apis: Vec<Process>,
    urls: ApiUrls,
    store: bosun::backends::postgres::store::PostgresStore,
}

impl Deployment {
    /// An API call through `slot`'s API as `tenant`: status and JSON body.
    fn call(
        &self,
        slot: usize,
        method: reqwest::Method,
        path: &str,
        tenant: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        self.call_as(&self.key, slot, method, path, tenant, body)
    }

    /// [`Deployment::call`] with `key`.
    fn call_as(
        &self,
        key: &str,
        slot: usize,
        method: reqwest::Method,
        path: &str,
        tenant: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let url = self.urls.lock().unwrap()[slot].clone();
        self.runtime.block_on(async {
            let mut request = self
                .client
                .request(method, format!("{url}{path}"))
                .bearer_auth(key)
                .header("X-Bosun-Tenant", tenant)
                .timeout(Duration::from_secs(30));
            if let Some(body) = body {
                request = request.json(&body);
            }
            let response = request.send().await.expect("the API answers");
            let status = response.status().as_u16();
            (status, response.json().await.unwrap_or(Value::Null))
        })
    }

    /// Sends a command of `tenant` through `slot`'s API (joining
    /// `correlation` when given): the delivery's correlation id.
    fn send(&self, slot: usize, tenant: &str, message_type: &str, payload: Value, correlation: Option<&str>) -> String {
        let url = self.urls.lock().unwrap()[slot].clone();
        let (status, body) = self.runtime.block_on(async {
            let mut request = self
                .client
                .post(format!("{url}/v1/commands/{message_type}"))
                .bearer_auth(&self.key)
                .header("X-Bosun-Tenant", tenant)
                .timeout(Duration::from_secs(30))
                .json(&payload);
            if let Some(correlation) = correlation {
                request = request.header("X-Correlation-Id", correlation);
            }
            let response = request.send().await.expect("the API answers");
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap_or(Value::Null))
        });
        assert_eq!(status, 202, "{message_type} of {tenant}: {body}");
        body["correlationId"].as_str().expect("a correlation id").to_owned()
    }

    /// The message types of a delivery, as the API reports them.
    fn delivery_messages(&self, tenant: &str, correlation: &str) -> Vec<String> {
        let (status, delivery) = self.call(
            0,
            reqwest::Method::GET,
            &format!("/v1/deliveries/{correlation}"),
            tenant,
            None,
        );
        if status != 200 {
            return Vec::new();
        }
        delivery["messages"]
            .as_array()
            .map(|messages| {
                messages
                    .iter()
                    .filter_map(|message| message["messageType"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Starts a delivery of the demo's sample module in `tenant`, as the
    /// demo does (repository, main, the feature branch with the module and
    /// its pull request), through `slot`'s API; `build_sleep` seconds of
    /// `sleep` in the module's build keep its pipeline run (and its polls)
    /// going.
    fn start_delivery(&self, slot: usize, tenant: &str, build_sleep: u32) -> String {
        let correlation = self.send(
            slot,
            tenant,
            "ProvisionRepository",
            json!({"name": "payments-api"}),
            None,
        );
        self.wait_for_message(tenant, &correlation, "RepositoryProvisioned");
        self.send(
            slot,
            tenant,
            "CreateCommit",
            json!({"repository": "payments-api", "branch": "main", "message": "Initial commit",
                   "files": [{"path": "README.md", "content": "# payments-api\n"}]}),
            Some(&correlation),
        );
        self.wait_for_message(tenant, &correlation, "CommitCreated");
        let files = sample_files(build_sleep);
        self.send(
            slot,
            tenant,
            "CreateCommit",
            json!({"repository": "payments-api", "branch": "feature/payments-api", "baseBranch": "main",
                   "message": "Add the payments service", "files": files, "pullRequestTarget": "main"}),
            Some(&correlation),
        );
        correlation
    }

    fn wait_for_message(&self, tenant: &str, correlation: &str, message_type: &str) {
        common::eventually(
            &format!("{tenant}'s delivery has {message_type}"),
            Duration::from_secs(60),
            || {
                self.delivery_messages(tenant, correlation)
                    .iter()
                    .any(|m| m == message_type)
                    .then_some(())
            },
        );
    }

    /// The release saga of `tenant` (one per tenant here), if planned.
    fn release(&self, tenant: &str) -> Option<Value> {
        let sagas = self.runtime.block_on(self.store.list_sagas(Some("release"))).unwrap();
        sagas
            .into_iter()
            .find(|saga| saga.key.starts_with(&format!("{tenant}/")))
            .map(|saga| saga.state)
    }

    /// Waits (up to `timeout`) until `tenant`'s release is in `phase`.
    fn wait_for_phase(&self, tenant: &str, phase: &str, timeout: Duration, progress: &Progress) -> Value {
        common::eventually(&format!("{tenant}'s release is {phase}"), timeout, || {
            let state = self.release(tenant);
            progress.tick(|| {
                format!(
                    "waiting for {tenant}'s release to be {phase}: {}",
                    state
                        .as_ref()
                        .map_or("not planned yet".into(), |s| s["phase"].to_string())
                )
            });
            state.filter(|state| state["phase"] == phase)
        })
    }

    /// Approves `tenant`'s release for prod through `slot`'s API.
    fn approve(&self, slot: usize, tenant: &str) {
        let state = self.release(tenant).expect("a release to approve");
        let release_id = state["releaseId"].as_str().expect("a release id");
        let (status, body) = self.call_as(
            &self.approver,
            slot,
            reqwest::Method::POST,
            "/v1/commands/ApproveRelease",
            tenant,
            Some(json!({"releaseId": release_id, "environment": "prod", "comment": "CHG-upgrade"})),
        );
        assert_eq!(status, 202, "approving {release_id}: {body}");
    }

    /// Replaces every process, one at a time, by `release`'s: stop one,
    /// start its successor, wait until its `/readyz` answers 200. Calls
    /// `midway` once half of them are replaced.
    fn roll(&mut self, release: &Release, progress: &Progress, mut midway: impl FnMut(&Self)) {
        for index in 0..4 {
            let (role, slot) = if index < 2 {
                (Role::Serve, index)
            } else {
                (Role::Api, index - 2)
            };
            let old = match role {
                Role::Serve => self.serves.remove(0),
                Role::Api => self.apis.remove(0),
            };
            let was = old.describe();
            old.terminate();
            let mut successor = Process::start(role, release, &self.data, &self.env);
            successor.wait_ready(&self.runtime, &self.client);
            progress.phase(format!("replaced {was} by {}, ready", successor.describe()));
            match role {
                Role::Serve => self.serves.push(successor),
                Role::Api => {
                    self.urls.lock().unwrap()[slot] = successor.url.clone();
                    self.apis.push(successor);
                }
            }
            if index == 1 {
                midway(self);
            }
        }
    }

    /// The probes of `group` the probe sagas counted.
    fn counted(&self, group: &str) -> u64 {
        self.runtime
            .block_on(self.store.list_sagas(Some("probe")))
            .unwrap()
            .iter()
            .filter(|saga| saga.key.ends_with(group))
            .map(|saga| saga.state["count"].as_u64().unwrap_or(0))
            .sum()
    }

    /// Every dead letter, the transport's own included, as `release`'s
    /// The processes `bosun fleet --json` of `release` lists.
    fn fleet(&self, release: &Release) -> Vec<Value> {
        let text = run(release, &self.data, &self.env, &["fleet", "--json"]);
        let listed: Value = serde_json::from_str(&text).unwrap_or_else(|err| panic!("fleet --json: {err}: {text}"));
        assert_eq!(listed["keptByStore"], true, "{listed}");
        listed["processes"].as_array().cloned().unwrap_or_default()
    }

    /// `bosun dead-letters list --json` reports them.
    fn dead_letters(&self, release: &Release) -> Vec<Value> {
        let text = run(release, &self.data, &self.env, &["dead-letters", "list", "--json"]);
        let listed: Value = serde_json::from_str(&text).unwrap_or_else(|err| panic!("no JSON ({err}): {text}"));
        listed
            .as_array()
            .cloned()
            .unwrap_or_else(|| panic!("dead-letters list --json printed no list: {listed}"))
    }
}

/// A way of the roll: what flows while it happens, and what it counted.
struct Traffic {
    counters: Arc<Counters>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    group: String,
}

impl Traffic {
    fn start(deployment: &Deployment, group: &str, name: &'static str) -> Self {
        let counters = Arc::new(Counters::default());
        let tasks = vec![
            deployment.runtime.spawn(poll_readiness(
                deployment.client.clone(),
                deployment.urls.clone(),
                counters.clone(),
                name,
            )),
            deployment.runtime.spawn(send_probes(
                deployment.client.clone(),
                deployment.urls.clone(),
                deployment.key.clone(),
                group.to_owned(),
                counters.clone(),
            )),
        ];
        Self {
            counters,
            tasks,
            group: group.to_owned(),
        }
    }

    fn sent(&self) -> u64 {
        self.counters.probes_sent.load(Ordering::SeqCst)
    }

    /// Stops the probes and the poller; waits until the tally has every
    /// probe sent and checks it is exact: (sent, counted, gaps, polls).
    fn finish(mut self, deployment: &Deployment, progress: &Progress) -> (u64, u64, u64, u64) {
        self.counters.stop.store(true, Ordering::SeqCst);
        for task in std::mem::take(&mut self.tasks) {
            deployment.runtime.block_on(task).unwrap();
        }
        let sent = self.sent();
        let unknown = self.counters.probes_unknown.load(Ordering::SeqCst);
        assert_eq!(
            unknown, 0,
            "probe requests without an answer: the tally cannot be checked exactly"
        );
        common::eventually("every probe sent is counted", Duration::from_secs(60), || {
            let counted = deployment.counted(&self.group);
            progress.tick(|| format!("{counted}/{sent} probes counted"));
            (counted >= sent).then_some(())
        });
        // Anything still in flight would show as a later, larger count.
        std::thread::sleep(Duration::from_secs(1));
        let counted = deployment.counted(&self.group);
        assert_eq!(
            counted, sent,
            "probes of {}: counted {counted}, sent {sent}",
            self.group
        );
        let gaps = self.counters.gaps.load(Ordering::SeqCst);
        let polls = self.counters.polls.load(Ordering::SeqCst);
        progress.phase(format!(
            "{counted}/{sent} probes counted ({} refusals retried on the other API); {gaps} readiness gaps in {polls} polls",
            self.counters.probes_refused.load(Ordering::SeqCst)
        ));
        (sent, counted, gaps, polls)
    }
}

#[test]
#[ignore = "needs the previous release's binary: scripts/test builds it and sets BOSUN_TEST_PREVIOUS_BIN"]
fn a_rolling_upgrade_and_a_rollback_keep_deliveries_probes_and_readiness() {
    let previous_binary = std::env::var_os("BOSUN_TEST_PREVIOUS_BIN")
        .map(PathBuf::from)
        .expect("BOSUN_TEST_PREVIOUS_BIN names the previous release's bosun (scripts/previous-release build)");
    assert!(previous_binary.is_file(), "{} is not a file", previous_binary.display());
    let previous = Release {
        name: "previous",
        binary: previous_binary,
        compat: false,
    };
    let new = Release {
        name: "new",
        binary: PathBuf::from(env!("CARGO_BIN_EXE_bosun")),
        compat: true,
    };
    assert_ne!(
        std::fs::read(&previous.binary).unwrap(),
        std::fs::read(&new.binary).unwrap(),
        "{} is this checkout's bosun, not the previous release's",
        previous.binary.display()
    );
    let progress = Progress::start("upgrade");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let schema = runtime.block_on(PostgresSchema::create("bosun_upgrade"));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let env = settings(&schema.url);

    // The previous release: its schema, a key, its processes.
    let migrated = run(&previous, &data, &env, &["migrate", "--compatible-only"]);
    progress.phase(format!("previous release migrated: {}", migrated.trim()));
    let key: Value = serde_json::from_str(&run(
        &previous,
        &data,
        &env,
        &[
            "keys",
            "create",
            "--tenant",
            "*",
            "--scopes",
            "commands:send,deliveries:read,releases:approve",
            "--description",
            "upgrade test",
            "--json",
        ],
    ))
    .unwrap();
    let approver: Value = serde_json::from_str(&run(
        &previous,
        &data,
        &env,
        &[
            "keys",
            "create",
            "--tenant",
            "*",
            "--scopes",
            "releases:approve,deliveries:read",
            "--description",
            "release board",
            "--json",
        ],
    ))
    .unwrap();
    let client = reqwest::Client::new();
    let mut serves: Vec<Process> = (0..2)
        .map(|_| Process::start(Role::Serve, &previous, &data, &env))
        .collect();
    let mut apis: Vec<Process> = (0..2)
        .map(|_| Process::start(Role::Api, &previous, &data, &env))
        .collect();
    for process in serves.iter_mut().chain(apis.iter_mut()) {
        process.wait_ready(&runtime, &client);
    }
    let urls: ApiUrls = Arc::new(Mutex::new([apis[0].url.clone(), apis[1].url.clone()]));
    let store = bosun::backends::postgres::store::PostgresStore::new(
        runtime
            .block_on(bosun::backends::postgres::PostgresDatabase::connect(&schema.url))
            .expect("the test's connection to PostgreSQL"),
    );
    let mut deployment = Deployment {
        runtime,
        client,
        data,
        env,
        key: key["key"].as_str().expect("a key").to_owned(),
        approver: approver["key"].as_str().expect("a key").to_owned(),
        serves,
        apis,
        urls,
        store,
    };
    progress.phase("previous release: 2 serve and 2 api processes ready on PostgreSQL");

    // ---- forward ----------------------------------------------------------
    let forward_started = Instant::now();
    let traffic = Traffic::start(&deployment, "upgrade-forward", "upgrade (forward)");
    deployment.start_delivery(0, "fwd-approve", 0);
    let polled = deployment.start_delivery(1, "fwd-polled", 10);
    let waiting = deployment.wait_for_phase("fwd-approve", "awaitingApproval", Duration::from_secs(120), &progress);
    assert_eq!(waiting["currentEnvironment"], "prod", "{waiting}");
    assert!(
        !waiting["pendingTimeout"].is_null(),
        "the approval timeout is pending: {waiting}"
    );
    let polled_messages = deployment.delivery_messages("fwd-polled", &polled);
    assert!(
        polled_messages.iter().any(|m| m == "PipelineRunStarted")
            && !polled_messages.iter().any(|m| m == "PipelineRunCompleted"),
        "fwd-polled's pipeline run is started and polled, not finished: {polled_messages:?}"
    );
    progress.phase(format!(
        "previous release: fwd-approve waits for its prod approval (timeout pending: {}), fwd-polled's pipeline run is being polled; {} probes sent",
        waiting["pendingTimeout"],
        traffic.sent()
    ));

    let migrated = run(
        &new,
        &deployment.data,
        &deployment.env,
        &["migrate", "--compatible-only"],
    );
    progress.phase(format!("new release migrated: {}", migrated.trim()));
    assert!(
        migrated.contains("applied migrations [14, 15, 16, 17, 18]"),
        "the new release applies its compatible migrations (the fleet, release policies, the release audit, the retention indexes) while the previous one serves: {migrated}"
    );
    deployment.roll(&new, &progress, |deployment| {
        deployment.start_delivery(1, "fwd-midway", 0);
        progress.phase("fwd-midway's delivery started on the half-rolled deployment");
    });
    progress.phase(format!("rolled forward; {} probes sent so far", traffic.sent()));
    // Migration 14 in use: every new process says it runs, writing wire 1
    // (BOSUN_COMPAT_VERSION) while reading wire 2.
    let fleet = deployment.fleet(&new);
    assert_eq!(
        fleet.len(),
        4,
        "2 serve and 2 api processes of the new release: {fleet:#?}"
    );
    for process in &fleet {
        assert_eq!(
            (process["writesWire"].as_u64(), process["readsWireTo"].as_u64()),
            (Some(1), Some(2)),
            "{process}"
        );
    }
    progress.phase("the fleet lists the 4 new processes, each writing wire 1 and reading wire 2");
    deployment.approve(0, "fwd-approve");
    progress.phase("fwd-approve approved for prod through the new API");
    for tenant in ["fwd-polled", "fwd-midway"] {
        deployment.wait_for_phase(tenant, "awaitingApproval", Duration::from_secs(120), &progress);
        deployment.approve(1, tenant);
        progress.phase(format!("{tenant} approved for prod through the new API"));
    }
    for tenant in ["fwd-approve", "fwd-polled", "fwd-midway"] {
        let done = deployment.wait_for_phase(tenant, "completed", Duration::from_secs(120), &progress);
        assert!(
            done["pendingTimeout"].is_null(),
            "{tenant}: no timeout left pending: {done}"
        );
    }
    progress.phase(format!(
        "3 releases completed; fwd-polled's pipeline run finished on attempt {} (a run whose process stopped restarts once its heartbeat is 30 s stale)",
        run_attempt(&deployment.data, "fwd-polled")
    ));
    let (sent, counted, gaps, _) = traffic.finish(&deployment, &progress);
    let dead = deployment.dead_letters(&new);
    assert!(dead.is_empty(), "dead letters after the roll forward: {dead:#?}");
    assert_eq!(gaps, 0, "moments when no API was ready");
    let forward = format!(
        "forward: 3 deliveries completed, {sent} probes sent/{counted} counted, dead letters {}, readiness gaps {gaps}, {:.1} s",
        dead.len(),
        forward_started.elapsed().as_secs_f64()
    );
    progress.phase(&forward);

    // ---- back -------------------------------------------------------------
    let back_started = Instant::now();
    let traffic = Traffic::start(&deployment, "upgrade-back", "upgrade (back)");
    deployment.start_delivery(0, "back-approve", 0);
    let waiting = deployment.wait_for_phase("back-approve", "awaitingApproval", Duration::from_secs(120), &progress);
    assert!(!waiting["pendingTimeout"].is_null(), "{waiting}");
    progress.phase("new release: back-approve waits for its prod approval, its timeout pending");
    let again = run(
        &previous,
        &deployment.data,
        &deployment.env,
        &["migrate", "--compatible-only"],
    );
    progress.phase(format!(
        "previous release's migrate on the migrated schema: {}",
        again.trim()
    ));
    deployment.roll(&previous, &progress, |deployment| {
        deployment.start_delivery(1, "back-midway", 0);
        progress.phase("back-midway's delivery started on the half-rolled-back deployment");
    });
    progress.phase(format!("rolled back; {} probes sent so far", traffic.sent()));
    // The new processes left the fleet as they stopped; the previous
    // release does not say it runs.
    let fleet = deployment.fleet(&new);
    assert!(fleet.is_empty(), "the new processes left the fleet: {fleet:#?}");
    deployment.approve(0, "back-approve");
    deployment.wait_for_phase("back-midway", "awaitingApproval", Duration::from_secs(120), &progress);
    deployment.approve(1, "back-midway");
    progress.phase("back-approve and back-midway approved for prod through the previous release's API");
    for tenant in ["back-approve", "back-midway"] {
        deployment.wait_for_phase(tenant, "completed", Duration::from_secs(120), &progress);
    }
    let (sent, counted, gaps, _) = traffic.finish(&deployment, &progress);
    let dead = deployment.dead_letters(&previous);
    assert!(dead.is_empty(), "dead letters after the rollback: {dead:#?}");
    assert_eq!(gaps, 0, "moments when no API was ready");
    let back = format!(
        "back: 2 deliveries completed, {sent} probes sent/{counted} counted, dead letters {}, readiness gaps {gaps}, {:.1} s",
        dead.len(),
        back_started.elapsed().as_secs_f64()
    );
    progress.phase(&back);

    for process in deployment.serves.drain(..).chain(deployment.apis.drain(..)) {
        process.terminate();
    }
    eprintln!("upgrade: {forward}");
    eprintln!("upgrade: {back}");
    deployment.runtime.block_on(schema.drop());
}

/// The demo's sample module, its build sleeping `build_sleep` seconds first.
fn sample_files(build_sleep: u32) -> Vec<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/tools/demo/sample");
    let mut files = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let relative = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
            let mut content = std::fs::read_to_string(&path).unwrap();
            if relative == "build.sh" && build_sleep > 0 {
                content = content.replacen("set -eu\n", &format!("set -eu\nsleep {build_sleep}\n"), 1);
            }
            let executable = relative.ends_with(".sh") && !relative.starts_with("src/");
            files.push(json!({"path": relative, "content": content, "executable": executable}));
        }
    }
    files.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    files
}

/// The `attempt` of `tenant`'s one local pipeline run (its record under
/// the data directory's `runs/<tenant>/`).
fn run_attempt(data: &Path, tenant: &str) -> u64 {
    let mut stack = vec![data.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "json")
                && path
                    .parent()
                    .is_some_and(|p| p.ends_with(Path::new("runs").join(tenant)))
            {
                let record: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
                return record["attempt"].as_u64().expect("a run record has its attempt");
            }
        }
    }
    panic!("no pipeline run record of {tenant} under {}", data.display())
}
