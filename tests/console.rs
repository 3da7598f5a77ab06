//! The operator console in a real browser: `bosun serve --http` on a free
//! loopback port with the repository-provisioning, commit and probe
//! consumers, an admin key from `bosun keys create`, one delivery and two
//! commits for a repository that does not exist (dead-lettered with the same
//! reason), then `tests/console/console.mjs` drives Debian's Chromium through
//! the console with playwright-core (installed by `scripts/browser`): the
//! timeline, a probe followed live, sagas, dead letters and their groups, an
//! edit-and-replay the contract rejects, and a group replayed at a rate.
//! Before it, `bosun demo` runs one whole delivery on the same data
//! directory, whose waterfall and release saga's state machine the script
//! checks in the page and in screenshots (their pixels of the completed,
//! failure and highlight colours), and `bosun demo --failing-test` (tenant
//! fabrikam, with a key of its own) one whose release a failing unit test
//! stops: its page opens with the red banner saying what ended it, the
//! ReleaseBlocked hop red; and nothing the page loads comes from another
//! origin.
//!
//! Ignored by a plain `cargo test` (reported as ignored): it needs Node.js
//! 20+, Debian's Chromium and playwright-core, which `scripts/browser`
//! installs (Chromium with apt-get, as root). scripts/test installs them and
//! runs it (`cargo test --test console -- --ignored`); run explicitly
//! without them, it fails saying what is missing. Set
//! BOSUN_TEST_CONSOLE_SCREENSHOT to a PNG path to keep a screenshot of the
//! console; the pictures' and the failed delivery page's screenshots
//! (`delivery-failed.png`) are kept beside it.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{Server, eventually, node_tools, run_json, run_node_script};
use serde_json::{Value, json};

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

#[test]
#[ignore = "needs Node.js 20+, Chromium and playwright-core: run scripts/browser install (as root for \
            apt-get install chromium), then cargo test --test console -- --ignored; scripts/test does both"]
fn the_console_shows_deliveries_and_replays_a_dead_letter_group_in_a_browser() {
    let node_path = node_tools("browser").unwrap_or_else(|reason| {
        panic!(
            "the console browser test needs Node.js 20+, /usr/bin/chromium and playwright-core \
             (`scripts/browser install`, as root for apt-get install chromium): {reason}"
        )
    });

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    // A whole delivery through all eleven consumers, with its release and
    // GitOps sagas, for the pictures: the demo, on the same data directory.
    let demo = common::bosun(data)
        .args(["demo", "--tenant", "contoso", "--json", "--data-dir"])
        .arg(data)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(demo.status.success(), "{}", String::from_utf8_lossy(&demo.stderr));
    let demo: Value = serde_json::from_slice(&demo.stdout).unwrap();
    assert_eq!(demo["completed"], true, "{demo:#}");
    let demo_delivery = demo["correlationId"].as_str().unwrap().to_owned();
    // And one whose unit test fails, as `bosun demo --failing-test` runs
    // it (another tenant: a second demo of one tenant is refused): the
    // release stops with ReleaseBlocked, which the console opens with.
    let failing = common::bosun(data)
        .args(["demo", "--failing-test", "--tenant", "fabrikam", "--json", "--data-dir"])
        .arg(data)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let failing_report: Value = serde_json::from_slice(&failing.stdout).unwrap_or_else(|err| {
        panic!(
            "demo --failing-test printed no JSON ({err}): {}",
            String::from_utf8_lossy(&failing.stderr)
        )
    });
    assert!(
        !failing.status.success(),
        "the failing demo must fail: {failing_report:#}"
    );
    assert!(
        failing_report["failure"]
            .as_str()
            .unwrap_or_default()
            .contains("ReleaseBlocked"),
        "{failing_report:#}"
    );
    let failed_delivery = failing_report["correlationId"].as_str().unwrap().to_owned();
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
    let created = run_json(data, &["keys", "create", "--tenant", "fabrikam", "--scopes", "admin"]);
    let failed_key = created["key"].as_str().expect("keys create prints the key").to_owned();
    let created = run_json(
        data,
        &[
            "keys",
            "create",
            "--tenant",
            "*",
            "--scopes",
            "consumers:pause,deliveries:read",
        ],
    );
    let platform_key = created["key"].as_str().expect("keys create prints the key").to_owned();

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
    let pictures = screenshot.parent().unwrap_or(data).to_string_lossy().into_owned();
    let started = Instant::now();
    let (passed, output) = run_node_script(
        "tests/console/console.mjs",
        &[
            ("NODE_PATH", node_path.as_str()),
            ("BOSUN_URL", url.as_str()),
            ("BOSUN_KEY", key.as_str()),
            ("BOSUN_DELIVERY", delivery.as_str()),
            ("BOSUN_DEAD_LETTER_GROUP_REASON", reason),
            ("BOSUN_DEMO_DELIVERY", demo_delivery.as_str()),
            ("BOSUN_FAILED_DELIVERY", failed_delivery.as_str()),
            ("BOSUN_FAILED_KEY", failed_key.as_str()),
            ("BOSUN_PLATFORM_KEY", platform_key.as_str()),
            ("BOSUN_PICTURES_DIR", pictures.as_str()),
            ("BOSUN_LIVE_PROBE", "1"),
            ("BOSUN_SCREENSHOT", screenshot_text.as_str()),
        ],
        data,
        "console",
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

    // What the browser did, seen from the API: both dead letters replayed
    // with the group, and one of them replayed once more, edited, with its
    // diff recorded.
    let mut edited = 0;
    for id in &dead_ids {
        let (status, record) = api(port, "GET", &format!("/v1/dead-letters/{id}"), &key, None);
        assert_eq!(status, 200, "{record:#}");
        assert_eq!(record["status"], "replayed", "{record:#}");
        let replays = record["replays"].as_array().expect("replays");
        assert!(
            replays[0]["edit"].is_null(),
            "the group replay is not an edit: {record:#}"
        );
        if let Some(again) = replays.get(1) {
            assert_eq!(replays.len(), 2, "{record:#}");
            assert_eq!(again["edit"]["diff"].as_array().map(Vec::len), Some(1), "{record:#}");
            edited += 1;
        }
    }
    assert_eq!(edited, 1, "one dead letter was replayed again, edited");
    server.terminate();
}
