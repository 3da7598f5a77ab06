//! Tenants are walls, and approving is an authority, against the real
//! binary on the embedded default and on PostgreSQL.
//!
//! A demo delivery of tenant `demo` waits for its `prod` approval. Then:
//! tenant `evil` approves and rejects it (CLI, and the API with a key that
//! holds `releases:approve`): both are dead-lettered with a reason naming
//! the tenant, and nothing happens to the demo's release nor in `evil`'s
//! environments; a `commands:send` key without `releases:approve` gets 403;
//! the internal `ReleaseApprovalTimeout` cannot be sent and is not in the
//! OpenAPI document; a forged timeout put straight on the queue changes
//! nothing; the rightful approval then completes the release, with the
//! approving key recorded as the approver.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use bosun::runtime::config::{Secret, Settings, TransportKind};
use bosun::wiring::Backends;
use bosun_contracts::messages::ReleaseApprovalTimeout;
use bosun_contracts::routing::destination_of;
use bosun_contracts::{Envelope, Message};
use common::{Server, bosun, eventually, run};
use serde_json::{Value, json};
use uuid::Uuid;

/// Where the scenario runs: the embedded default, or PostgreSQL.
struct Backend {
    env: Vec<(String, String)>,
    database_url: Option<String>,
}

impl Backend {
    fn embedded() -> Self {
        Self {
            env: Vec::new(),
            database_url: None,
        }
    }

    fn settings(&self, data: &Path) -> Settings {
        let mut settings = Settings::with_data_dir(data);
        if let Some(url) = &self.database_url {
            settings.database_url = Some(Secret::new(url.clone()));
            settings.transport = TransportKind::Postgres;
        }
        settings
    }

    fn env(&self) -> Vec<(&str, &str)> {
        self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }
}

/// Waits until the server's `/healthz` answers.
fn wait_for_http(port: u16) {
    eventually("the HTTP API answers", Duration::from_secs(60), || {
        common::block_on(async { reqwest::get(format!("http://127.0.0.1:{port}/healthz")).await.ok() })
            .filter(|response| response.status().is_success())
            .map(drop)
    });
}

/// A free loopback port (bound, then released for the server to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn key(data: &Path, backend: &Backend, tenant: &str, scopes: &str, description: &str) -> (String, String) {
    let made = cli_json(
        data,
        backend,
        &[
            "keys",
            "create",
            "--tenant",
            tenant,
            "--scopes",
            scopes,
            "--description",
            description,
        ],
    );
    (
        made["key"].as_str().unwrap().to_owned(),
        made["id"].as_str().unwrap().to_owned(),
    )
}

/// `bosun ARGS` with the backend's environment: (success, stdout, stderr).
fn cli(data: &Path, backend: &Backend, args: &[&str]) -> (bool, String, String) {
    let mut command = bosun(data);
    command.args(args);
    for (k, v) in backend.env() {
        command.env(k, v);
    }
    let output = command.stdin(Stdio::null()).output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn cli_json(data: &Path, backend: &Backend, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let (ok, stdout, stderr) = cli(data, backend, &args);
    assert!(ok, "bosun {args:?} failed: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("no JSON from {args:?} ({err}): {stdout}"))
}

/// A request as `key` with an optional JSON body: (status, body).
fn request(port: u16, key: &str, method: reqwest::Method, path: &str, body: Option<&Value>) -> (u16, Value) {
    common::block_on(async {
        let mut request = reqwest::Client::new()
            .request(method, format!("http://127.0.0.1:{port}{path}"))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    })
}

/// POSTs a command as `key`: (status, body).
fn post_command(port: u16, key: &str, message_type: &str, payload: &Value) -> (u16, Value) {
    let path = format!("/v1/commands/{message_type}");
    request(port, key, reqwest::Method::POST, &path, Some(payload))
}

fn get(port: u16, path: &str) -> Value {
    common::block_on(async {
        reqwest::get(format!("http://127.0.0.1:{port}{path}"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    })
}

fn release_saga(data: &Path, backend: &Backend) -> Value {
    let sagas = cli_json(data, backend, &["sagas", "list", "--kind", "release"]);
    let sagas = sagas.as_array().unwrap();
    assert_eq!(sagas.len(), 1, "{sagas:#?}");
    sagas[0].clone()
}

fn dead_letter_saying(data: &Path, backend: &Backend, what: &str, needle: &str) -> Value {
    eventually(what, Duration::from_secs(60), || {
        let list = cli_json(
            data,
            backend,
            &["dead-letters", "list", "--consumer", "release-orchestration"],
        );
        list.as_array()?
            .iter()
            .find(|dead| dead["description"].as_str().is_some_and(|d| d.contains(needle)))
            .cloned()
    })
}

/// Every path under `data` named after `tenant`.
fn paths_of(data: &Path, tenant: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![data.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.file_name().is_some_and(|name| name == tenant) {
                found.push(path.display().to_string());
            }
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    found
}

fn scenario(backend: &Backend) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let mut env = backend.env();
    env.extend([
        ("BOSUN_RELEASE_ENVIRONMENTS", "dev,prod"),
        ("BOSUN_AUTO_APPROVE", "dev"),
    ]);

    // The demo tenant's delivery: synced in dev, waiting for prod.
    let mut demo = bosun(data);
    demo.args(["demo", "--json", "--keep", "--timeout", "240", "--data-dir"])
        .arg(data);
    for (k, v) in &env {
        demo.env(k, v);
    }
    let output = demo.stdin(Stdio::null()).output().unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "demo printed no JSON ({err}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert_eq!(report["completed"], true, "{report:#}");
    let saga = release_saga(data, backend);
    let release_id = saga["state"]["releaseId"].as_str().unwrap().to_owned();
    assert_eq!(saga["key"], format!("demo/{release_id}"), "keyed by tenant");
    assert_eq!(saga["tenantId"], "demo");

    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let mut server = Server::start(data, &env, &["--http", &address]);
    server.wait_for_line("receiving", Duration::from_secs(60));
    wait_for_http(port);
    // The demo ends when dev's GitOpsSynced is sent; the release saga takes
    // it (and then waits for prod) once a release consumer runs again.
    eventually("the release waits for prod's approval", Duration::from_secs(60), || {
        let saga = release_saga(data, backend);
        (saga["state"]["phase"] == "awaitingApproval").then_some(())
    });

    let (evil_sender, _) = key(data, backend, "evil", "commands:send", "evil sender");
    let (evil_approver, _) = key(data, backend, "evil", "releases:approve", "evil approver");
    let (demo_sender, _) = key(data, backend, "demo", "commands:send", "demo sender");
    let (demo_approver, demo_approver_id) = key(data, backend, "demo", "releases:approve:prod", "release board");

    let approve = json!({"releaseId": release_id, "environment": "prod", "onBehalfOf": "mallory"});
    let reject = json!({"releaseId": release_id, "environment": "prod", "reason": "sabotage"});

    // 2. Sending commands is not approving.
    for sender in [&evil_sender, &demo_sender] {
        let (status, body) = post_command(port, sender, "ApproveRelease", &approve);
        assert_eq!(status, 403, "{body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains("releases:approve"),
            "{body}"
        );
        let (status, _) = post_command(port, sender, "RejectRelease", &reject);
        assert_eq!(status, 403);
    }

    // 1. Another tenant's approval and rejection are dead-lettered.
    let approve_text = approve.to_string();
    let sent = cli_json(
        data,
        backend,
        &["send", "ApproveRelease", "--tenant", "evil", "--payload", &approve_text],
    );
    assert!(sent["messageId"].is_string());
    let (status, body) = post_command(port, &evil_approver, "RejectRelease", &reject);
    assert_eq!(status, 202, "{body}");
    let approval = dead_letter_saying(
        data,
        backend,
        "the foreign approval is dead-lettered",
        &format!("ApproveRelease refused: tenant `evil` has no release `{release_id}`"),
    );
    assert_eq!(approval["tenantId"], "evil");
    let rejection = dead_letter_saying(
        data,
        backend,
        "the foreign rejection is dead-lettered",
        &format!("RejectRelease refused: tenant `evil` has no release `{release_id}`"),
    );
    assert_eq!(rejection["tenantId"], "evil");
    // Replaying a decision is deciding again: `dead-letters:replay` alone
    // may not, edited or not.
    let (evil_replayer, _) = key(data, backend, "evil", "dead-letters:replay", "evil replayer");
    for dead in [&approval, &rejection] {
        let path = format!("/v1/dead-letters/{}/replay", dead["id"].as_str().unwrap());
        let (status, body) = request(port, &evil_replayer, reqwest::Method::POST, &path, Some(&json!({})));
        assert_eq!(status, 403, "{body}");
        let edited = json!({"payload": {"releaseId": release_id, "environment": "prod", "reason": "edited"}});
        let (status, body) = request(port, &evil_replayer, reqwest::Method::POST, &path, Some(&edited));
        assert_eq!(status, 403, "{body}");
    }
    let bulk = json!({"filter": {"consumer": "release-orchestration"}});
    let (status, body) = request(
        port,
        &evil_replayer,
        reqwest::Method::POST,
        "/v1/dead-letters/replays",
        Some(&bulk),
    );
    assert_eq!(status, 403, "{body}");

    // 3. Internal messages stay internal.
    let forged = json!({
        "releaseId": release_id,
        "environment": "prod",
        "deadline": "2020-01-01T00:00:00Z",
    });
    let (ok, _, stderr) = cli(
        data,
        backend,
        &[
            "send",
            "ReleaseApprovalTimeout",
            "--tenant",
            "demo",
            "--payload",
            &forged.to_string(),
        ],
    );
    assert!(!ok, "bosun send accepted an internal message");
    assert!(stderr.contains("scheduled by bosun itself"), "{stderr}");
    let (status, body) = post_command(port, &demo_approver, "ReleaseApprovalTimeout", &forged);
    assert_eq!(status, 404, "{body}");
    let openapi = get(port, "/openapi.json");
    assert!(openapi["paths"]["/v1/commands/ReleaseApprovalTimeout"].is_null());
    assert!(openapi["paths"]["/v1/commands/PollPipelineRun"].is_null());
    assert!(openapi["paths"]["/v1/commands/PollContainerBuild"].is_null());
    assert!(openapi["paths"]["/v1/commands/ApproveRelease"].is_object());

    // A forged timeout put straight on the queue (as only someone with
    // the broker's keys could) is not the one the saga waits on.
    let message = Message::ReleaseApprovalTimeout(ReleaseApprovalTimeout {
        release_id: release_id.clone(),
        environment: "prod".into(),
        deadline: time::OffsetDateTime::now_utc() - time::Duration::days(1),
    });
    let envelope = Envelope::new(&message, Uuid::now_v7(), "demo", "forger");
    let forged_id = envelope.message_id.to_string();
    common::block_on(async {
        let backends = Backends::open(&backend.settings(data)).await.unwrap();
        backends
            .transport
            .send(vec![bosun::ports::transport::OutboundMessage {
                destination: destination_of("ReleaseApprovalTimeout").unwrap(),
                broker_message_id: forged_id.clone(),
                message_type: Some(envelope.message_type.clone()),
                correlation_id: Some(envelope.correlation_id.to_string()),
                body: envelope.to_vec(),
                scheduled_at: None,
            }])
            .await
            .unwrap();
    });
    eventually("the forged timeout is handled", Duration::from_secs(60), || {
        // No delivery until the first timeline line: the forger recorded none.
        let (ok, stdout, _) = cli(
            data,
            backend,
            &["deliveries", "show", &envelope.correlation_id.to_string(), "--json"],
        );
        let shown: Value = serde_json::from_str(&stdout).ok().filter(|_| ok)?;
        (shown["messages"][0]["status"] == "completed").then_some(())
    });

    let saga = release_saga(data, backend);
    assert_eq!(saga["state"]["phase"], "awaitingApproval", "{saga:#}");
    assert!(saga["state"]["approvals"]["prod"].is_null(), "{saga:#}");
    assert!(saga["state"]["rejected"].is_null(), "{saga:#}");
    assert_eq!(
        paths_of(data, "evil"),
        Vec::<String>::new(),
        "nothing in evil's environments"
    );

    // The rightful approval completes the release, recorded as the key.
    let (status, body) = post_command(port, &demo_approver, "ApproveRelease", &approve);
    assert_eq!(status, 202, "{body}");
    let saga = eventually("the release completes", Duration::from_secs(120), || {
        let saga = release_saga(data, backend);
        (saga["state"]["phase"] == "completed").then_some(saga)
    });
    let principal = format!("key:{demo_approver_id} (release board)");
    let record = &saga["state"]["approvals"]["prod"];
    assert_eq!(record["approver"], principal.as_str(), "{saga:#}");
    assert_eq!(record["note"], "mallory", "the free-text name is only a note");
    let history = saga["state"]["history"].to_string();
    assert!(history.contains(&format!("prod approved by {principal}")), "{history}");
    assert_eq!(paths_of(data, "evil"), Vec::<String>::new());
    server.terminate();
}

#[test]
fn a_tenant_cannot_decide_on_another_tenants_release_embedded() {
    scenario(&Backend::embedded());
}

#[test]
fn a_tenant_cannot_decide_on_another_tenants_release_on_postgres() {
    let schema = common::block_on(common::PostgresSchema::create("bosun_walls"));
    let url = schema.url.clone();
    let dir = tempfile::tempdir().unwrap();
    run(dir.path(), &["migrate", "--database-url", &url]);
    let backend = Backend {
        env: vec![
            ("BOSUN_DATABASE_URL".into(), url.clone()),
            ("BOSUN_TRANSPORT".into(), "postgres".into()),
        ],
        database_url: Some(url),
    };
    scenario(&backend);
    common::block_on(schema.drop());
}

/// `bosun demo --tenant TENANT` on `data`, as a running child.
fn spawn_demo(data: &Path, tenant: &str) -> std::process::Child {
    bosun(data)
        .args(["demo", "--json", "--timeout", "300", "--tenant", tenant, "--data-dir"])
        .arg(data)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for the demos and returns their reports; when one failed, panics
/// with every demo's report and last log lines (one demo's consumers
/// handle the other's messages too, so where one waited is often in the
/// other's log).
fn finish_demos<const N: usize>(children: [(&str, std::process::Child); N]) -> [Value; N] {
    let outputs = children.map(|(tenant, child)| (tenant.to_owned(), child.wait_with_output().unwrap()));
    let mut failed = false;
    let mut story = String::new();
    for (tenant, output) in &outputs {
        failed |= !output.status.success();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        let tail = lines[lines.len().saturating_sub(80)..].join("\n");
        story.push_str(&format!(
            "=== demo of {tenant}: {}\n{}\n--- its last log lines ---\n{tail}\n",
            output.status,
            String::from_utf8_lossy(&output.stdout)
        ));
    }
    assert!(!failed, "{story}");
    outputs.map(|(tenant, output)| {
        serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|err| panic!("the demo of {tenant} printed no JSON ({err})\n{story}"))
    })
}

fn result(report: &Value, label: &str) -> String {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|pair| pair[0] == label)
        .and_then(|pair| pair[1].as_str())
        .unwrap_or_else(|| panic!("no {label} in {report:#}"))
        .to_owned()
}

/// GET as `key`: (status, body).
fn get_as(port: u16, key: &str, path: &str) -> (u16, Value) {
    request(port, key, reqwest::Method::GET, path, None)
}

/// POST `{}` as `key`: (status, body).
fn post_as(port: u16, key: &str, path: &str) -> (u16, Value) {
    request(port, key, reqwest::Method::POST, path, Some(&json!({})))
}

/// The error of a 404 with the looked-up id replaced, to compare answers.
fn not_found_text(body: &Value, id: &str) -> String {
    body["error"]["message"].as_str().unwrap_or_default().replace(id, "ID")
}

#[test]
fn two_tenants_run_the_same_module_side_by_side_and_see_nothing_of_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let backend = Backend::embedded();
    // Same repository, module id, version, package id, image name and
    // environments; both at once on one data directory.
    let contoso = spawn_demo(data, "contoso");
    let fabrikam = spawn_demo(data, "fabrikam");
    let [contoso, fabrikam] = finish_demos([("contoso", contoso), ("fabrikam", fabrikam)]);
    for (report, tenant) in [(&contoso, "contoso"), (&fabrikam, "fabrikam")] {
        assert_eq!(report["completed"], true, "{report:#}");
        assert!(
            result(report, "repository").contains(&format!("/git/{tenant}/")),
            "{report:#}"
        );
        assert!(
            result(report, "environment dev").starts_with("synced to "),
            "{report:#}"
        );
    }
    assert_eq!(
        result(&contoso, "package").split(' ').take(2).collect::<Vec<_>>(),
        result(&fabrikam, "package").split(' ').take(2).collect::<Vec<_>>(),
        "the same package id and version"
    );
    let repositories = [result(&contoso, "repository"), result(&fabrikam, "repository")];
    assert_ne!(repositories[0], repositories[1], "each tenant has its own repository");
    for repository in &repositories {
        assert!(Path::new(repository).is_dir(), "{repository}");
    }
    let dead = cli_json(data, &backend, &["dead-letters", "list"]);
    assert_eq!(dead, json!([]), "neither blocked the other");

    // A dead letter of fabrikam's: a commit to a repository it does not have.
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let mut server = Server::start(data, &[], &["--http", &address, "--consumers", "commit"]);
    server.wait_for_line("receiving", Duration::from_secs(60));
    wait_for_http(port);
    let commit = json!({
        "repository": "nowhere",
        "branch": "main",
        "message": "x",
        "files": [{"path": "README.md", "content": "x"}]
    })
    .to_string();
    cli_json(
        data,
        &backend,
        &["send", "CreateCommit", "--tenant", "fabrikam", "--payload", &commit],
    );
    let dead = eventually("fabrikam's commit is dead-lettered", Duration::from_secs(60), || {
        let list = cli_json(data, &backend, &["dead-letters", "list", "--consumer", "commit"]);
        list.as_array()?.first().cloned()
    });
    let dead_id = dead["id"].as_str().unwrap().to_owned();
    assert_eq!(dead["tenantId"], "fabrikam");

    let (reader, _) = key(
        data,
        &backend,
        "contoso",
        "deliveries:read,dead-letters:replay",
        "contoso ops",
    );
    let (theirs, _) = key(data, &backend, "fabrikam", "deliveries:read", "fabrikam ops");
    let absent = Uuid::now_v7().to_string();

    // Deliveries: another tenant's reads exactly as one that does not exist.
    let fabrikam_delivery = fabrikam["correlationId"].as_str().unwrap();
    let (status, foreign) = get_as(port, &reader, &format!("/v1/deliveries/{fabrikam_delivery}"));
    let (absent_status, missing) = get_as(port, &reader, &format!("/v1/deliveries/{absent}"));
    assert_eq!((status, absent_status), (404, 404));
    assert_eq!(
        not_found_text(&foreign, fabrikam_delivery),
        not_found_text(&missing, &absent)
    );
    let (_, listed) = get_as(port, &reader, "/v1/deliveries");
    assert!(listed["deliveries"].is_array(), "{listed}");
    assert!(!listed.to_string().contains(fabrikam_delivery), "{listed}");
    let (status, own) = get_as(port, &theirs, &format!("/v1/deliveries/{fabrikam_delivery}"));
    assert_eq!(status, 200, "{own}");

    // Sagas: each sees its own release and environments only.
    let (_, sagas) = get_as(port, &reader, "/v1/sagas");
    let sagas = sagas["sagas"].as_array().unwrap().clone();
    assert!(!sagas.is_empty());
    assert!(sagas.iter().all(|saga| saga["tenantId"] == "contoso"), "{sagas:#?}");
    // fabrikam's release id names, for contoso, contoso's own release when
    // both commits got the same id (same content in the same second), and
    // nothing otherwise.
    let fabrikam_release = result(&fabrikam, "release");
    let (status, seen) = get_as(port, &reader, &format!("/v1/sagas/release/{fabrikam_release}"));
    if result(&contoso, "release") == fabrikam_release {
        assert_eq!((status, seen["tenantId"].as_str()), (200, Some("contoso")), "{seen}");
        assert_eq!(seen["key"], format!("contoso/{fabrikam_release}"));
    } else {
        let (_, missing) = get_as(port, &reader, &format!("/v1/sagas/release/{absent}"));
        assert_eq!(status, 404, "{seen}");
        assert_eq!(
            not_found_text(&seen, &fabrikam_release),
            not_found_text(&missing, &absent)
        );
    }
    let (status, _) = get_as(
        port,
        &reader,
        &format!("/v1/sagas/release/fabrikam%2F{fabrikam_release}"),
    );
    assert_eq!(status, 404);
    let (status, _) = get_as(port, &theirs, &format!("/v1/sagas/release/{fabrikam_release}"));
    assert_eq!(status, 200);

    // Dead letters: not listed, not found (by id or prefix), not replayable.
    let (_, list) = get_as(port, &reader, "/v1/dead-letters");
    assert_eq!(list["deadLetters"].as_array().map(Vec::len), Some(0), "{list}");
    for id in [dead_id.as_str(), &dead_id[..8]] {
        let (status, foreign) = get_as(port, &reader, &format!("/v1/dead-letters/{id}"));
        let fake = absent[..id.len()].to_owned();
        let (_, missing) = get_as(port, &reader, &format!("/v1/dead-letters/{fake}"));
        assert_eq!(status, 404, "{foreign}");
        assert_eq!(not_found_text(&foreign, id), not_found_text(&missing, &fake));
        let (status, _) = post_as(port, &reader, &format!("/v1/dead-letters/{id}/replay"));
        assert_eq!(status, 404);
    }
    let (status, _) = get_as(port, &theirs, &format!("/v1/dead-letters/{dead_id}"));
    assert_eq!(status, 200);
    server.terminate();
}
