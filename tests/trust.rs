//! Trust that holds over time, end to end with the real binary
//! (`bosun serve --http`, `bosun keys`, `bosun mcp`):
//!
//! - a key that expires is refused from then on, and `/metrics` counts the
//!   refusal by its reason;
//! - a rotated key's successor works while the old key still does, and the
//!   old key stops after the grace period;
//! - a bulk replay job started by a key that is then revoked pauses before
//!   its next replay, saying why, and the approval it would have replayed
//!   is not sent;
//! - a `bosun mcp` session refuses its next call once its key is revoked,
//!   and a delivery's event stream ends with an `error` event;
//! - a correlation id of another tenant reads exactly as one that does not
//!   exist, over HTTP and MCP;
//! - `/mcp` answers bodies that are not JSON-RPC with JSON-RPC errors;
//! - at `RUST_LOG=trace`, a delivery whose every payload field carries a
//!   marker, sent over HTTP and MCP, leaves the content's marker in no log
//!   line, and the names it acts on (repository, branch) only as those
//!   identifier fields.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bosun_contracts::{Envelope, Message};
use common::{backends, block_on, eventually, run, run_json};
use serde_json::{Value, json};
use uuid::Uuid;

/// A request; its status, headers' content type and body bytes.
fn request(
    method: reqwest::Method,
    url: &str,
    key: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> (u16, Vec<u8>) {
    block_on(async {
        let mut request = reqwest::Client::new().request(method, url).bearer_auth(key);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body);
        }
        let response = request.send().await.expect("the API answers");
        let status = response.status().as_u16();
        (status, response.bytes().await.unwrap_or_default().to_vec())
    })
}

fn call(method: reqwest::Method, url: &str, key: &str, body: Option<Value>) -> (u16, Value) {
    let (status, bytes) = request(
        method,
        url,
        key,
        &[],
        body.map(|body| serde_json::to_vec(&body).unwrap()),
    );
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn create_key(data: &Path, tenant: &str, scopes: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec!["keys", "create", "--tenant", tenant, "--scopes", scopes];
    args.extend_from_slice(extra);
    let made = run_json(data, &args);
    (
        made["key"].as_str().unwrap().to_owned(),
        made["id"].as_str().unwrap().to_owned(),
    )
}

/// `/metrics`' count of refusals for `reason`.
fn refusals(url: &str, reason: &str) -> u64 {
    let text = block_on(async {
        reqwest::get(format!("{url}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    let prefix = format!("bosun_api_refusals_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in /metrics:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn an_expired_key_is_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let (_server, url) = common::serve_with_http(data, &[], Some("commit"));
    let (key, _) = create_key(data, "contoso", "deliveries:read", &["--expires-in", "3s"]);
    let made = Instant::now();
    let (status, body) = call(reqwest::Method::GET, &format!("{url}/v1/deliveries"), &key, None);
    assert_eq!(status, 200, "{body}");
    let before = refusals(&url, "expired");
    std::thread::sleep(Duration::from_secs(3).saturating_sub(made.elapsed()) + Duration::from_millis(500));
    let (status, body) = call(reqwest::Method::GET, &format!("{url}/v1/deliveries"), &key, None);
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");
    assert!(body["error"]["message"].as_str().unwrap().contains("expired"), "{body}");
    assert_eq!(refusals(&url, "expired"), before + 1);

    // A key longer than the deployment allows is not made.
    let output = common::bosun(data)
        .args([
            "keys",
            "create",
            "--tenant",
            "contoso",
            "--scopes",
            "admin",
            "--expires-in",
            "400d",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("BOSUN_KEY_MAX_LIFETIME_DAYS"));
}

#[test]
fn a_rotated_key_works_beside_its_successor_until_the_grace_period_ends() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let (_server, url) = common::serve_with_http(data, &[], Some("commit"));
    let (old_key, old_id) = create_key(data, "contoso", "deliveries:read", &["--description", "ci"]);
    let rotated = run_json(data, &["keys", "rotate", &old_id, "--grace", "3s"]);
    let rotated_at = Instant::now();
    let new_key = rotated["key"].as_str().unwrap().to_owned();
    assert_eq!(rotated["rotatedFrom"], old_id.as_str());
    assert_eq!(rotated["scopes"], json!(["deliveries:read"]));
    let deliveries = format!("{url}/v1/deliveries");
    for key in [&old_key, &new_key] {
        let (status, body) = call(reqwest::Method::GET, &deliveries, key, None);
        assert_eq!(status, 200, "both keys work during the grace period: {body}");
    }
    let listed = run_json(data, &["keys", "list"]);
    let old = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|key| key["id"] == old_id.as_str())
        .unwrap();
    assert_eq!(old["rotatedTo"], rotated["id"]);
    assert!(old["lastUsedAt"].is_string(), "the use was recorded: {old}");
    let table = run(data, &["keys", "list"]);
    assert!(
        table.contains(&format!("rotated to {}", rotated["id"].as_str().unwrap())),
        "{table}"
    );

    std::thread::sleep(Duration::from_secs(3).saturating_sub(rotated_at.elapsed()) + Duration::from_millis(500));
    let (status, body) = call(reqwest::Method::GET, &deliveries, &old_key, None);
    assert_eq!(status, 401, "the old key ends with its grace period: {body}");
    let (status, body) = call(reqwest::Method::GET, &deliveries, &new_key, None);
    assert_eq!(status, 200, "{body}");
    // An ended key is not rotated again.
    let output = common::bosun(data).args(["keys", "rotate", &old_id]).output().unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("expired"));
}

/// Dead-lettered approvals of tenant contoso for `environment`, as the
/// release consumer records them; their ids, oldest first.
fn record_approvals(data: &Path, count: usize, environment: &str) -> Vec<Uuid> {
    let backends = backends(data);
    let mut ids = Vec::new();
    block_on(async {
        for n in 0..count {
            let payload = json!({"releaseId": format!("rel-{n}"), "environment": environment});
            let message = Message::from_type_and_payload("ApproveRelease", &payload).unwrap();
            let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "test");
            let record = common::dead_letter(
                &envelope,
                "release-orchestration",
                "transient-exhausted",
                "the store did not answer",
                "host",
            );
            ids.push(record.id);
            backends.store.record_dead_letter(record, None).await.unwrap();
        }
    });
    ids
}

#[test]
fn a_revoked_keys_replay_job_pauses_before_its_next_replay() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    // No release consumer runs: a replayed approval stays on its queue.
    let (_server, url) = common::serve_with_http(data, &[], Some("commit"));
    let ids = record_approvals(data, 3, "prod");
    let (key, key_id) = create_key(
        data,
        "contoso",
        "dead-letters:replay,deliveries:read,releases:approve:prod",
        &[],
    );
    let (reader, _) = create_key(data, "contoso", "deliveries:read", &[]);
    // One replay, then one every 4 s: time enough to revoke the key.
    let (status, job) = call(
        reqwest::Method::POST,
        &format!("{url}/v1/dead-letters/replays"),
        &key,
        Some(json!({"ids": ids, "rate": 0.25})),
    );
    assert_eq!(status, 202, "{job}");
    let job_id = job["id"].as_str().unwrap().to_owned();
    let job_url = format!("{url}/v1/replays/{job_id}");
    eventually("the first approval is replayed", Duration::from_secs(30), || {
        let (_, job) = call(reqwest::Method::GET, &job_url, &reader, None);
        (job["done"] == 1).then_some(())
    });
    run(data, &["keys", "revoke", &key_id]);
    let job = eventually("the job pauses", Duration::from_secs(30), || {
        let (_, job) = call(reqwest::Method::GET, &job_url, &reader, None);
        (job["status"] == "paused").then_some(job)
    });
    assert_eq!(job["done"], 1, "nothing replayed after the revocation: {job}");
    let control = job["controls"].as_array().unwrap().last().cloned().unwrap();
    assert_eq!(control["action"], "pause");
    assert_eq!(control["by"], "bosun");
    assert!(
        control["reason"].as_str().unwrap().contains(&format!("key {key_id}"))
            && control["reason"].as_str().unwrap().contains("revoked"),
        "{control}"
    );
    // The approvals it did not get to are not decided again.
    for id in &ids[1..] {
        let (status, letter) = call(
            reqwest::Method::GET,
            &format!("{url}/v1/dead-letters/{id}"),
            &reader,
            None,
        );
        assert_eq!(status, 200, "{letter}");
        assert_eq!(letter["replays"], json!([]), "{letter}");
    }
    std::thread::sleep(Duration::from_secs(5));
    let (_, job) = call(reqwest::Method::GET, &job_url, &reader, None);
    assert_eq!(
        (job["status"].clone(), job["done"].clone()),
        (json!("paused"), json!(1)),
        "{job}"
    );
}

#[test]
fn a_revoked_keys_event_stream_ends_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    // Only commit runs: a ProvisionRepository stays in progress.
    let (_server, url) = common::serve_with_http(data, &[], Some("commit"));
    let (key, key_id) = create_key(data, "contoso", "commands:send,deliveries:read", &[]);
    let (status, sent) = call(
        reqwest::Method::POST,
        &format!("{url}/v1/commands/ProvisionRepository"),
        &key,
        Some(json!({"name": "payments-api"})),
    );
    assert_eq!(status, 202, "{sent}");
    let events = format!("{url}/v1/deliveries/{}/events", sent["correlationId"].as_str().unwrap());
    let text = block_on(async {
        let mut response = reqwest::Client::new()
            .get(&events)
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let mut text = String::new();
        let first = tokio::time::timeout(Duration::from_secs(10), response.chunk())
            .await
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&first.unwrap_or_default()));
        assert!(text.contains("event: timeline"), "{text}");
        let revoke = common::bosun(data).args(["keys", "revoke", &key_id]).output().unwrap();
        assert!(revoke.status.success());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, response.chunk()).await {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        text
    });
    assert!(
        text.contains("event: error"),
        "the stream ends with an error event: {text}"
    );
    assert!(text.contains("unauthorized") && text.contains("revoked"), "{text}");
}

/// A `bosun mcp` process and its output lines.
struct Stdio_ {
    child: Child,
    input: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Stdio_ {
    fn start(data: &Path, key: &str) -> Self {
        let mut child = common::bosun(data)
            .arg("mcp")
            .env("BOSUN_API_KEY", key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(output).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, input, lines }
    }

    fn call(&mut self, message: Value) -> Value {
        writeln!(self.input, "{message}").unwrap();
        self.input.flush().unwrap();
        let line = self.lines.recv_timeout(Duration::from_secs(30)).expect("an answer");
        serde_json::from_str(&line).unwrap()
    }
}

impl Drop for Stdio_ {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_stdio_mcp_session_refuses_its_next_call_after_revocation() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let (key, key_id) = create_key(data, "contoso", "deliveries:read", &[]);
    let mut session = Stdio_::start(data, &key);
    let init = session.call(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "trust", "version": "1"}}}));
    assert!(init["result"].is_object(), "{init}");
    writeln!(
        session.input,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_failures", "arguments": {}}});
    let answer = session.call(list.clone());
    assert!(answer["result"].is_object(), "{answer}");
    run(data, &["keys", "revoke", &key_id]);
    let mut again = list;
    again["id"] = json!(3);
    let answer = session.call(again);
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    assert!(
        answer["error"]["message"].as_str().unwrap().contains("revoked"),
        "{answer}"
    );
    assert_eq!(answer["error"]["data"]["error"]["code"], "unauthorized");
}

#[test]
fn another_tenants_correlation_id_reads_as_one_that_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let (_server, url) = common::serve_with_http(data, &[], Some("commit"));
    let (contoso, _) = create_key(data, "contoso", "commands:send", &[]);
    let (fabrikam, _) = create_key(data, "fabrikam", "commands:send", &[]);
    let payload = json!({"repository": "payments-api", "branch": "main", "message": "m",
                         "files": [{"path": "README.md", "content": "x"}]});
    let commands = format!("{url}/v1/commands/CreateCommit");
    let (status, sent) = call(reqwest::Method::POST, &commands, &contoso, Some(payload.clone()));
    assert_eq!(status, 202, "{sent}");
    let theirs = sent["correlationId"].as_str().unwrap().to_owned();
    let fresh = Uuid::now_v7().to_string();
    for body in [payload.clone(), json!({"repository": "payments-api"})] {
        let answer = |id: &str| {
            let (status, bytes) = request(
                reqwest::Method::POST,
                &commands,
                &fabrikam,
                &[("X-Correlation-Id", id)],
                Some(serde_json::to_vec(&body).unwrap()),
            );
            (status, String::from_utf8(bytes).unwrap())
        };
        let (their_status, their_body) = answer(&theirs);
        let (fresh_status, fresh_body) = answer(&fresh);
        assert_eq!(their_status, fresh_status);
        assert_eq!(
            their_body.replace(&theirs, "<id>"),
            fresh_body.replace(&fresh, "<id>"),
            "the same bytes but for the id"
        );
    }

    // The same through MCP's send_command.
    let mcp = |id: &str| {
        let (status, bytes) = request(
            reqwest::Method::POST,
            &format!("{url}/mcp"),
            &fabrikam,
            &[
                ("accept", "application/json, text/event-stream"),
                ("mcp-protocol-version", "2025-06-18"),
            ],
            Some(
                serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                    "name": "send_command",
                    "arguments": {"type": "CreateCommit", "payload": payload, "correlationId": id}}}))
                .unwrap(),
            ),
        );
        (status, String::from_utf8(bytes).unwrap())
    };
    let (their_status, their_body) = mcp(&theirs);
    let (fresh_status, fresh_body) = mcp(&fresh);
    assert_eq!(their_status, fresh_status);
    assert!(their_body.contains("not-found"), "{their_body}");
    assert_eq!(their_body.replace(&theirs, "<id>"), fresh_body.replace(&fresh, "<id>"));
}

#[test]
fn mcp_answers_bodies_that_are_not_json_rpc_with_json_rpc_errors() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let (_server, url) = common::serve_with_http(data, &[], Some("commit"));
    let (key, _) = create_key(data, "contoso", "deliveries:read", &[]);
    let headers = [("accept", "application/json, text/event-stream")];
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    for (body, status, code) in [
        ("{\"jsonrpc\": \"2.0\", ".to_owned(), 400, -32700),
        (deep, 400, -32700),
        ("{\"hello\": \"world\"}".to_owned(), 400, -32600),
        (
            "[{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}]".to_owned(),
            400,
            -32600,
        ),
    ] {
        let (got, bytes) = request(
            reqwest::Method::POST,
            &format!("{url}/mcp"),
            &key,
            &headers,
            Some(body.clone().into_bytes()),
        );
        let answer: Value =
            serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&bytes)));
        assert_eq!(got, status, "{answer}");
        assert_eq!(answer["jsonrpc"], "2.0");
        assert_eq!(answer["id"], Value::Null);
        assert_eq!(
            answer["error"]["code"],
            code,
            "{answer} for {}",
            &body[..body.len().min(40)]
        );
    }
    // A wrong Accept is refused in JSON-RPC too.
    let (got, bytes) = request(
        reqwest::Method::POST,
        &format!("{url}/mcp"),
        &key,
        &[("accept", "text/plain")],
        Some(b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}".to_vec()),
    );
    assert_eq!(got, 406);
    let answer: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
}

/// The marker every field of a payload's content carries (descriptions,
/// commit messages, authors, file paths and contents): lowercase letters
/// and digits, so it fits paths too.
const MARKER: &str = "qz7mark9x";

/// The marker of the names bosun acts on (the repository, the branch):
/// identifiers, which a log line may name as such (`repository=...`,
/// `branch=...`) and nowhere else.
const NAME: &str = "nm4tag";

/// `line` without the identifier fields that may name [`NAME`].
fn without_named_identifiers(line: &str) -> String {
    let mut rest = line.to_owned();
    for field in ["repository", "branch", "source", "target"] {
        for value in [format!("repo-{NAME}"), format!("b-{NAME}")] {
            for quoted in [format!("{field}={value}"), format!("{field}=\"{value}\"")] {
                rest = rest.replace(&quoted, &format!("{field}=<name>"));
            }
        }
    }
    rest
}

#[test]
fn no_payload_reaches_the_logs_at_trace_level() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let (mut server, url) = common::serve_with_http(data, &[("RUST_LOG", "trace")], None);
    let (key, _) = create_key(data, "contoso", "commands:send,deliveries:read", &[]);
    let repository = format!("repo-{NAME}");
    let send = |message_type: &str, payload: Value, correlation: Option<&str>| {
        let headers: Vec<(&str, &str)> = correlation.map(|id| ("X-Correlation-Id", id)).into_iter().collect();
        let (status, bytes) = request(
            reqwest::Method::POST,
            &format!("{url}/v1/commands/{message_type}"),
            &key,
            &headers,
            Some(serde_json::to_vec(&payload).unwrap()),
        );
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(status, 202, "{body}");
        body["correlationId"].as_str().unwrap().to_owned()
    };
    let status_of = |correlation: &str| {
        let (_, delivery) = call(
            reqwest::Method::GET,
            &format!("{url}/v1/deliveries/{correlation}"),
            &key,
            None,
        );
        delivery["status"].as_str().unwrap_or_default().to_owned()
    };
    let correlation = send(
        "ProvisionRepository",
        json!({"name": repository, "defaultBranch": format!("b-{NAME}"), "description": format!("secret {MARKER}")}),
        None,
    );
    eventually("the repository is provisioned", Duration::from_secs(120), || {
        (status_of(&correlation) != "in-progress").then_some(())
    });
    send(
        "CreateCommit",
        json!({"repository": repository, "branch": format!("b-{NAME}"),
               "message": format!("commit {MARKER}"),
               "author": {"name": format!("a {MARKER}"), "email": format!("{MARKER}@example.com")},
               "files": [{"path": format!("{MARKER}.md"), "content": format!("password={MARKER}")}]}),
        Some(&correlation),
    );
    // And one through MCP.
    let (status, bytes) = request(
        reqwest::Method::POST,
        &format!("{url}/mcp"),
        &key,
        &[
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2025-06-18"),
        ],
        Some(
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "send_command",
                "arguments": {"type": "CreateCommit", "correlationId": correlation, "payload": {
                    "repository": repository, "branch": format!("b-{NAME}"),
                    "message": format!("mcp {MARKER}"),
                    "files": [{"path": format!("mcp-{MARKER}.md"), "content": format!("token={MARKER}")}]}}}}))
            .unwrap(),
        ),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    let final_status = eventually("the delivery ends", Duration::from_secs(180), || {
        let status = status_of(&correlation);
        (status != "in-progress").then_some(status)
    });
    // The process logged at trace level throughout (its own lines and its
    // dependencies' up to their cap); collect what it wrote by now.
    server.collect_lines(Duration::from_secs(3));
    let lines = &server.seen;
    assert!(lines.len() > 50, "trace logging wrote only {} lines", lines.len());
    assert!(
        lines.iter().any(|line| line.contains("DEBUG")),
        "nothing below info was logged"
    );
    let leaked: Vec<&String> = lines
        .iter()
        .filter(|line| line.contains(MARKER) || without_named_identifiers(line).contains(NAME))
        .collect();
    assert!(
        leaked.is_empty(),
        "the delivery ({final_status}) left its payload in {} log lines:\n{}",
        leaked.len(),
        leaked.iter().map(|line| line.as_str()).collect::<Vec<_>>().join("\n")
    );
    assert!(
        lines
            .iter()
            .any(|line| line.contains(&format!("repository=repo-{NAME}"))),
        "the repository is named as an identifier (the check above removes those)"
    );
}
