//! The operator console in a real browser: `bosun serve --http` on a free
//! loopback port with the repository-provisioning, commit and probe
//! consumers, an admin key from `bosun keys create`, one delivery and two
//! commits for a repository that does not exist (dead-lettered with the same
//! reason), then `tests/console/console.mjs` drives Debian's Chromium through
//! the console with playwright-core (installed by `scripts/browser`): the
//! timeline, a probe followed live, sagas, dead letters and their groups, an
//! edit-and-replay the contract rejects, and a group replayed at a rate.
//!
//! Needs Node.js and Chromium: with CI=true a missing one fails the test,
//! otherwise the test says why it skipped. Set BOSUN_TEST_CONSOLE_SCREENSHOT
//! to a PNG path to keep a screenshot of the console.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, eventually, run_json};
use serde_json::{Value, json};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true")
}

/// The NODE_PATH holding playwright-core, or why the browser test cannot run.
fn browser_tools() -> Result<String, String> {
    let node = Command::new("node").arg("--version").output();
    match node {
        Ok(output) if output.status.success() => {}
        Ok(output) => return Err(format!("`node --version` failed: {}", output.status)),
        Err(err) => return Err(format!("Node.js is not installed ({err}); apt-get install nodejs npm")),
    }
    // Installs Chromium (as root, with apt-get) and playwright-core when missing.
    let output = Command::new(Path::new(REPO).join("scripts/browser"))
        .arg("node-path")
        .stdin(Stdio::null())
        .output()
        .map_err(|err| format!("scripts/browser did not run: {err}"))?;
    if !output.status.success() {
        return Err(format!(
            "scripts/browser node-path failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let node_path = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if node_path.is_empty() {
        return Err("scripts/browser node-path printed nothing".into());
    }
    Ok(node_path)
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("local address").port()
}

/// One HTTP/1.1 request on a fresh connection; the status and the body.
fn http(port: u16, method: &str, path: &str, key: Option<&str>, body: Option<&Value>) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    if let Some(key) = key {
        request.push_str(&format!("Authorization: Bearer {key}\r\n"));
    }
    if !body.is_empty() {
        request.push_str("Content-Type: application/json\r\n");
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

fn api(port: u16, method: &str, path: &str, key: &str, body: Option<&Value>) -> (u16, Value) {
    let (status, text) =
        http(port, method, path, Some(key), body).unwrap_or_else(|| panic!("{method} {path}: no answer"));
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|err| panic!("{method} {path} ({status}): not JSON ({err}): {text}"));
    (status, value)
}

/// Runs the browser script with a wall-clock limit; its exit status and output.
fn run_console_script(env: &[(&str, &str)], log_dir: &Path) -> (bool, String) {
    let stdout_path = log_dir.join("console-stdout.log");
    let stderr_path = log_dir.join("console-stderr.log");
    let mut command = Command::new("node");
    command.arg(Path::new(REPO).join("tests/console/console.mjs"));
    for (key, _) in std::env::vars() {
        if key.starts_with("BOSUN_") {
            command.env_remove(key);
        }
    }
    let mut child = command
        .envs(env.iter().copied())
        .current_dir(REPO)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
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

#[test]
fn the_console_shows_deliveries_and_replays_a_dead_letter_group_in_a_browser() {
    let node_path = match browser_tools() {
        Ok(node_path) => node_path,
        Err(reason) if in_ci() => panic!("the console browser test needs Node.js and Chromium: {reason}"),
        Err(reason) => {
            eprintln!("skipped: the console browser test needs Node.js and Chromium: {reason}");
            return;
        }
    };

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut server = Server::start(
        data,
        &[],
        &["--http", &listen, "--consumers", "repository-provisioning,commit,probe"],
    );
    server.wait_for_line("receiving", Duration::from_secs(30));
    eventually("bosun answers /readyz", Duration::from_secs(30), || {
        http(port, "GET", "/readyz", None, None).and_then(|(status, _)| (status == 200).then_some(()))
    });

    let created = run_json(data, &["keys", "create", "--tenant", "contoso", "--scopes", "admin"]);
    let key = created["key"].as_str().expect("keys create prints the key").to_owned();

    // A delivery that completes.
    let (status, accepted) = api(
        port,
        "POST",
        "/v1/commands/ProvisionRepository",
        &key,
        Some(&json!({"name": "storefront"})),
    );
    assert_eq!(status, 202, "{accepted:#}");
    let delivery = accepted["correlationId"].as_str().unwrap().to_owned();
    // It stays in progress: RepositoryProvisioned's subscribers do not run here.
    eventually("the repository is provisioned", Duration::from_secs(30), || {
        let (_, body) = api(port, "GET", &format!("/v1/deliveries/{delivery}"), &key, None);
        body["messages"]
            .as_array()?
            .iter()
            .any(|m| m["messageType"] == "ProvisionRepository" && m["status"] == "completed")
            .then_some(())
    });

    // Two commits for a repository that does not exist: retried, then
    // dead-lettered with the same reason.
    let reason = "retries-exhausted";
    for message in ["First page", "Second page"] {
        let commit = json!({
            "repository": "no-such-repository",
            "branch": "main",
            "message": message,
            "files": [{"path": "index.html", "content": "<h1>hello</h1>\n"}]
        });
        let (status, body) = api(port, "POST", "/v1/commands/CreateCommit", &key, Some(&commit));
        assert_eq!(status, 202, "{body:#}");
    }
    let dead_ids: Vec<String> = eventually("both commits are dead-lettered", Duration::from_secs(60), || {
        let (_, body) = api(port, "GET", &format!("/v1/dead-letters?reason={reason}"), &key, None);
        let ids: Vec<String> = body["deadLetters"]
            .as_array()?
            .iter()
            .filter_map(|record| record["id"].as_str().map(str::to_owned))
            .collect();
        (ids.len() == 2).then_some(ids)
    });

    let screenshot = std::env::var("BOSUN_TEST_CONSOLE_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| data.join("console.png"));
    let url = format!("http://{listen}");
    let screenshot_text = screenshot.to_string_lossy().into_owned();
    let started = Instant::now();
    let (passed, output) = run_console_script(
        &[
            ("NODE_PATH", node_path.as_str()),
            ("BOSUN_URL", url.as_str()),
            ("BOSUN_KEY", key.as_str()),
            ("BOSUN_DELIVERY", delivery.as_str()),
            ("BOSUN_DEAD_LETTER_GROUP_REASON", reason),
            ("BOSUN_LIVE_PROBE", "1"),
            ("BOSUN_SCREENSHOT", screenshot_text.as_str()),
        ],
        data,
    );
    println!(
        "tests/console/console.mjs ({:.1} s):\n{output}",
        started.elapsed().as_secs_f64()
    );
    if !passed {
        let kept = dir.keep();
        panic!(
            "the console browser test failed ({}); data, logs and screenshot kept in {}",
            output.trim(),
            kept.display()
        );
    }

    // What the browser did, seen from the API: both dead letters replayed.
    for id in &dead_ids {
        let (status, record) = api(port, "GET", &format!("/v1/dead-letters/{id}"), &key, None);
        assert_eq!(status, 200, "{record:#}");
        assert_eq!(record["status"], "replayed", "{record:#}");
        assert_eq!(record["replays"].as_array().map(Vec::len), Some(1), "{record:#}");
    }
    server.terminate();
}
