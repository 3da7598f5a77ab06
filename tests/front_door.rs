//! The front door under abuse, against the real `bosun serve --http`
//! binary:
//!
//! - run under a 1,024 file-descriptor limit (`ulimit -n 1024` in the shell
//!   that execs it), 2,000 hostile connections (1,000 that connect and send
//!   nothing, 1,000 that send half a request head, each reconnecting when
//!   bosun closes it) leave `/healthz` answering, an authenticated call
//!   working and a Probe command accepted and handled to completion, with
//!   no `Too many open files` and descriptors to spare;
//! - a burst over one key's budget (set by `BOSUN_HTTP_RATE_LIMIT_*`) gets
//!   429 with `Retry-After` while another key is unaffected, and `/metrics`
//!   counts the refusals;
//! - `/mcp` refuses an `Origin` not in `BOSUN_HTTP_ALLOWED_ORIGINS` with
//!   403 and answers an allowed or absent one.
//!
//! Linux only (it reads `/proc`); the test process needs about 2,600 file
//! descriptors and raises its own soft limit with `prlimit` when the hard
//! limit allows, or fails saying so.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use common::run_json;

/// Hostile connections kept open at once.
const IDLE: usize = 1_000;
const HALF_SENT: usize = 1_000;
/// The descriptor limit bosun runs under.
const BOSUN_NOFILE: u64 = 1_024;
/// What this test process needs: the hostile sockets plus its own.
const TEST_NOFILE: u64 = (IDLE + HALF_SENT) as u64 + 600;

/// `bosun serve` started through `sh -c 'ulimit -n N && exec bosun ...'`,
/// killed when dropped; its stderr lines are kept.
struct LimitedServer {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    url: String,
}

impl LimitedServer {
    fn start(data: &std::path::Path, nofile: u64, env: &[(&str, &str)]) -> Self {
        let template = common::bosun(data);
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
            .arg(template.get_program())
            .args(["serve", "--http", "127.0.0.1:0", "--consumers", "probe"]);
        for (key, value) in template.get_envs() {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        if let Some(dir) = template.get_current_dir() {
            command.current_dir(dir);
        }
        command.envs(env.iter().copied());
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sh starts bosun serve");
        let stderr = child.stderr.take().expect("stderr is piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        std::thread::spawn({
            let lines = Arc::clone(&lines);
            move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            }
        });
        let mut server = Self {
            child,
            lines,
            url: String::new(),
        };
        let line = server.wait_for_line("HTTP API on http://", Duration::from_secs(60));
        server.url = line[line.find("http://").unwrap()..]
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned();
        server
    }

    fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self.lines.lock().unwrap().iter().find(|l| l.contains(needle)) {
                return line.clone();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("bosun exited with {status}:\n{}", self.stderr());
            }
            assert!(
                Instant::now() < deadline,
                "no line with {needle:?} within {timeout:?}:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stderr(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then a clean exit within 30 s.
    fn terminate(mut self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                assert!(status.success(), "bosun serve exited with {status}:\n{}", self.stderr());
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("bosun serve did not stop within 30 s of SIGTERM:\n{}", self.stderr());
    }
}

impl Drop for LimitedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The soft and hard `Max open files` of a process, from `/proc/<pid>/limits`.
fn open_files_limits(pid: &str) -> (String, String) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("/proc/<pid>/limits (Linux)");
    let line = text
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .expect("a Max open files line");
    let mut fields = line.trim_start_matches("Max open files").split_whitespace();
    (fields.next().unwrap().to_owned(), fields.next().unwrap().to_owned())
}

/// Makes sure this process may open `needed` descriptors, raising its soft
/// limit with `prlimit` up to the hard limit; panics explaining otherwise.
fn ensure_own_descriptors(needed: u64) {
    let (soft, hard) = open_files_limits("self");
    let limit = |text: &str| {
        if text == "unlimited" {
            u64::MAX
        } else {
            text.parse().unwrap()
        }
    };
    if limit(&soft) >= needed {
        return;
    }
    let hard = limit(&hard);
    assert!(
        hard >= needed,
        "this test opens {needed} sockets, but the hard open-file limit is {hard}: run it where `ulimit -Hn` is at least {needed}"
    );
    let raised = Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={needed}:"))
        .status();
    let (soft, _) = open_files_limits("self");
    assert!(
        limit(&soft) >= needed,
        "this test opens {needed} sockets but the soft open-file limit is {soft}, and `prlimit` could not raise it ({raised:?}): run `ulimit -n {needed}` first"
    );
}

/// One hostile client: connects, sends nothing or half a request head,
/// holds the socket until bosun closes it, and comes back 100 ms later.
/// Once `stop` is set it comes back no more; it returns when bosun closes
/// its socket or when `release` is cancelled. (A connection bosun never
/// accepted because its listen backlog was full can look established to
/// the client and never be closed, even after bosun exits.)
async fn hostile(
    address: String,
    half_sent: bool,
    attempted: Arc<AtomicUsize>,
    connected: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    release: CancellationToken,
) {
    let mut counted = false;
    let mut tried = false;
    while !stop.load(Ordering::Relaxed) {
        let connecting = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(&address)).await;
        if !tried {
            attempted.fetch_add(1, Ordering::Relaxed);
            tried = true;
        }
        let Ok(Ok(mut stream)) = connecting else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if half_sent
            && stream
                .write_all(b"POST /v1/commands/Probe HTTP/1.1\r\nHost: bosun\r\n")
                .await
                .is_err()
        {
            continue;
        }
        if !counted {
            connected.fetch_add(1, Ordering::Relaxed);
            counted = true;
        }
        // Until bosun closes it (shed at the cap, or the header timeout).
        let mut buf = [0u8; 256];
        loop {
            tokio::select! {
                read = stream.read(&mut buf) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                },
                () = release.cancelled() => return,
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A client that opens a new connection per request, so a kept-alive one
/// shed at the cap is never reused.
fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// A counter's value in a Prometheus exposition.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|line| line.starts_with(name) && line[name.len()..].starts_with(' '))
        .and_then(|line| line[name.len()..].trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_idle_and_half_sent_connections_leave_healthz_and_handlers_working() {
    ensure_own_descriptors(TEST_NOFILE);
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let created = run_json(data, &["keys", "create", "--tenant", "contoso", "--scopes", "admin"]);
    let key = created["key"].as_str().expect("keys create prints the key").to_owned();
    let server = LimitedServer::start(data, BOSUN_NOFILE, &[]);
    let (soft, hard) = open_files_limits(&server.pid().to_string());
    assert_eq!(
        (soft.as_str(), hard.as_str()),
        ("1024", "1024"),
        "bosun runs under the 1,024 limit"
    );
    let client = fresh_client();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = client.get(format!("{}/readyz", server.url)).send().await;
        if ready.is_ok_and(|ready| ready.status() == 200) {
            break;
        }
        assert!(Instant::now() < deadline, "bosun not ready:\n{}", server.stderr());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The attack: 2,000 hostile connections, kept up.
    let address = server.url.trim_start_matches("http://").to_owned();
    let attempted = Arc::new(AtomicUsize::new(0));
    let connected = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let release = CancellationToken::new();
    let attackers: Vec<_> = (0..IDLE + HALF_SENT)
        .map(|n| {
            tokio::spawn(hostile(
                address.clone(),
                n >= IDLE,
                Arc::clone(&attempted),
                Arc::clone(&connected),
                Arc::clone(&stop),
                release.clone(),
            ))
        })
        .collect();
    // Every attacker has tried once (a connect gives up after 5 s).
    let deadline = Instant::now() + Duration::from_secs(120);
    while attempted.load(Ordering::Relaxed) < IDLE + HALF_SENT {
        assert!(Instant::now() < deadline, "the attackers did not start within 120 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let attack_up = started.elapsed();
    eprintln!(
        "front door: {} hostile connections tried, {} got in, after {attack_up:?}",
        IDLE + HALF_SENT,
        connected.load(Ordering::Relaxed)
    );
    let sampling = Arc::new(AtomicBool::new(true));
    let most_descriptors = Arc::new(AtomicUsize::new(0));
    let sampler = std::thread::spawn({
        let (pid, sampling, most) = (server.pid(), Arc::clone(&sampling), Arc::clone(&most_descriptors));
        move || {
            while sampling.load(Ordering::Relaxed) {
                let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
                    .map(|d| d.count())
                    .unwrap_or(0);
                most.fetch_max(open, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    });

    // Under attack: health, an authenticated call, a command handled.
    for n in 0..20 {
        let health = client
            .get(format!("{}/healthz", server.url))
            .send()
            .await
            .unwrap_or_else(|err| panic!("/healthz #{n} under attack: {err}"));
        assert_eq!(health.status(), 200);
        let body: Value = health.json().await.unwrap();
        assert_eq!(body["status"], "ok");
    }
    eprintln!(
        "front door: 20 /healthz answered under attack ({:?})",
        started.elapsed()
    );
    let listed = client
        .get(format!("{}/v1/deliveries", server.url))
        .bearer_auth(&key)
        .send()
        .await
        .expect("an authenticated call under attack");
    assert_eq!(listed.status(), 200);
    let accepted = client
        .post(format!("{}/v1/commands/Probe", server.url))
        .bearer_auth(&key)
        .json(&json!({"group": "front-door", "sequence": 1}))
        .send()
        .await
        .expect("a command under attack");
    assert_eq!(accepted.status(), 202);
    let accepted: Value = accepted.json().await.unwrap();
    let correlation = accepted["correlationId"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    let delivery = loop {
        let delivery: Value = client
            .get(format!("{}/v1/deliveries/{correlation}", server.url))
            .bearer_auth(&key)
            .send()
            .await
            .expect("following the delivery under attack")
            .json()
            .await
            .unwrap();
        if delivery["status"] == "completed" {
            break delivery;
        }
        assert!(Instant::now() < deadline, "the probe did not complete: {delivery:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let types: Vec<&str> = delivery["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["messageType"].as_str())
        .collect();
    assert!(types.contains(&"ProbeEchoed"), "{types:?}");
    eprintln!(
        "front door: the probe was handled under attack ({:?})",
        started.elapsed()
    );
    let ready = client.get(format!("{}/readyz", server.url)).send().await.unwrap();
    assert_eq!(ready.status(), 200, "the store and transport stay reachable");

    // The attack was real: the cap filled and hostile connections were shed.
    let metrics = client
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let open = metric(&metrics, "bosun_http_connections_open").expect("the open-connections gauge");
    let shed = metric(&metrics, "bosun_http_connections_shed_total").expect("the shed counter");
    assert!(open >= 256.0, "the cap (512) was not filled: {open} open");
    assert!(
        shed >= (IDLE + HALF_SENT - 512) as f64,
        "only {shed} connections were shed"
    );
    // Shedding made room: no attacker was left waiting in the backlog.
    assert_eq!(
        connected.load(Ordering::Relaxed),
        IDLE + HALF_SENT,
        "every hostile client got in"
    );
    assert!(
        server.stderr().contains("max_connections=512"),
        "the cap is half of 1,024:\n{}",
        server.stderr()
    );

    // Stop coming back, keep the sockets open: SIGTERM still stops bosun.
    stop.store(true, Ordering::Relaxed);
    sampling.store(false, Ordering::Relaxed);
    sampler.join().unwrap();
    let most = most_descriptors.load(Ordering::Relaxed);
    let stderr = server.stderr();
    assert!(!stderr.contains("Too many open files"), "{stderr}");
    assert!(
        most < (BOSUN_NOFILE as usize) - 200,
        "bosun held {most} descriptors of {BOSUN_NOFILE}: too little room for real work"
    );
    eprintln!(
        "front door: 2,000 hostile connections up after {attack_up:?}; {open} open at the cap, {shed} shed, \
         at most {most} descriptors in bosun; whole test {:?}",
        started.elapsed()
    );
    server.terminate();
    release.cancel();
    for attacker in attackers {
        attacker.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_budgets_and_mcp_origins_come_from_the_settings() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let key = |scopes: &str| {
        let created = run_json(data, &["keys", "create", "--tenant", "contoso", "--scopes", scopes]);
        (
            created["key"].as_str().unwrap().to_owned(),
            created["id"].as_str().unwrap().to_owned(),
        )
    };
    let (busy, busy_id) = key("deliveries:read");
    let (quiet, quiet_id) = key("deliveries:read");
    let (agent, _) = key("admin");
    let server = LimitedServer::start(
        data,
        4_096,
        &[
            ("BOSUN_HTTP_RATE_LIMIT_PER_SECOND", "1"),
            ("BOSUN_HTTP_RATE_LIMIT_BURST", "3"),
            ("BOSUN_HTTP_ALLOWED_ORIGINS", "https://console.example.com"),
        ],
    );
    let client = fresh_client();

    // A burst over one key's budget while another key sends too.
    let get = |key: &str| {
        client
            .get(format!("{}/v1/deliveries", server.url))
            .bearer_auth(key)
            .send()
    };
    let burst = futures_util::future::join_all((0..10).map(|_| get(&busy)));
    let others = futures_util::future::join_all((0..3).map(|_| get(&quiet)));
    let (burst, others) = tokio::join!(burst, others);
    let mut refused = 0;
    for response in burst {
        let response = response.unwrap();
        if response.status() == 429 {
            refused += 1;
            let retry_after: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
            assert!(retry_after >= 1);
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["code"], "rate-limited", "{body}");
        } else {
            assert_eq!(response.status(), 200);
        }
    }
    assert!(refused >= 1, "a burst of 10 over a budget of 3 was not refused");
    for response in others {
        assert_eq!(response.unwrap().status(), 200, "the other key is unaffected");
    }
    let metrics = client
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let counted = metric(&metrics, &format!("bosun_http_rate_limited_total{{key=\"{busy_id}\"}}"));
    assert_eq!(counted, Some(f64::from(refused)), "{metrics}");
    assert!(!metrics.contains(&format!("key=\"{quiet_id}\"")), "{metrics}");

    // MCP: the configured origin (which replaces the loopback default) and
    // no origin are answered; any other is refused.
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    for (origin, status) in [
        (Some("http://evil.example"), 403),
        (Some("http://localhost:3000"), 403),
        (Some("https://console.example.com"), 200),
        (None, 200),
    ] {
        let mut request = client
            .post(format!("{}/mcp", server.url))
            .bearer_auth(&agent)
            .header("accept", "application/json, text/event-stream")
            .json(&ping);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), status, "Origin {origin:?}");
        let body: Value = response.json().await.unwrap();
        if status == 403 {
            assert_eq!(body["error"]["code"], "origin-not-allowed", "{body}");
        } else {
            assert_eq!(body["result"], json!({}), "{body}");
        }
    }
    server.terminate();
}
