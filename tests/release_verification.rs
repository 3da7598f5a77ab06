//! Release verification through the real binary: a local health endpoint
//! the test makes answer 500 once is the only check of dev. The first
//! release passes it and is verified (kept by dev's GitOps saga as a
//! rollback target); the second fails it, is blocked, and dev is rolled
//! back to the first on its own (the environment repository names the
//! first again), which is verified there again; the third passes; a
//! person's `bosun releases rollback` then takes dev back to the verified
//! release before it, the first (the second was never verified), verified
//! again too. The audit log lists every decision in order; a key without
//! `releases:rollback` cannot roll back over HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::{
    api_accepted, api_command, api_key, bosun, eventually, find_repository, git, run, run_json, serve_with_http,
};

const TENANT: &str = "acme";
const MODULE: &str = "payments-api";
const WAIT: Duration = Duration::from_secs(120);

/// A health endpoint answering 200, or 500 to the next `failing` requests.
struct Health {
    failing: Arc<AtomicU64>,
    hits: Arc<AtomicU64>,
    url: String,
}

impl Health {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/healthz", listener.local_addr().unwrap());
        let failing = Arc::new(AtomicU64::new(0));
        let hits = Arc::new(AtomicU64::new(0));
        let (count, fail) = (Arc::clone(&hits), Arc::clone(&failing));
        std::thread::spawn(move || {
            for mut stream in listener.incoming().map_while(Result::ok) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut request = Vec::new();
                let mut buffer = [0u8; 1024];
                while !request.windows(4).any(|window| window == b"\r\n\r\n") {
                    match stream.read(&mut buffer) {
                        Ok(0) | Err(_) => break,
                        Ok(read) => request.extend_from_slice(&buffer[..read]),
                    }
                }
                count.fetch_add(1, Ordering::SeqCst);
                let failed = fail
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| left.checked_sub(1))
                    .is_ok();
                let code = if failed { 500 } else { 200 };
                let text = if code == 200 { "OK" } else { "Internal Server Error" };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {code} {text}\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                );
                let _ = stream.flush();
            }
        });
        Self { failing, hits, url }
    }

    /// The next `requests` requests get 500, then 200 again.
    fn fail_next(&self, requests: u64) {
        self.failing.store(requests, Ordering::SeqCst);
    }

    fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }
}

fn release(data: &Path, release_id: &str) -> Value {
    run_json(data, &["releases", "show", release_id, "--tenant", TENANT])
}

fn gitops(data: &Path) -> Value {
    run_json(data, &["sagas", "show", "gitops", &format!("{TENANT}/dev")])["state"].clone()
}

/// The release dev's GitOps saga says the module runs.
fn current(gitops: &Value) -> Option<String> {
    gitops["apps"][MODULE]["releaseId"].as_str().map(str::to_owned)
}

/// The releases dev's GitOps saga keeps as verified, oldest first.
fn verified(gitops: &Value) -> Vec<String> {
    gitops["verified"][MODULE]
        .as_array()
        .into_iter()
        .flatten()
        .map(|known| known["releaseId"].as_str().unwrap().to_owned())
        .collect()
}

/// The release the environment repository's desired state of dev names.
fn desired(data: &Path) -> String {
    let repository = find_repository(data, TENANT, "environments").expect("the environment repository");
    let manifest = git(&repository, &["show", &format!("main:dev/apps/{MODULE}/release.json")]);
    let manifest: Value = serde_json::from_str(&manifest).unwrap();
    manifest["releaseId"].as_str().unwrap().to_owned()
}

/// The release dev's directory runs (what the local reconciler applied).
fn applied(data: &Path) -> Option<String> {
    let path = data
        .join("environments")
        .join(TENANT)
        .join("dev/apps")
        .join(MODULE)
        .join("release.json");
    let manifest: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    manifest["releaseId"].as_str().map(str::to_owned)
}

/// The sample module at `version` (so each release publishes its own
/// package version and builds its own commit).
fn module_files(version: &str) -> Vec<Value> {
    let mut files = bosun::tools::demo::sample_files(false);
    for file in &mut files {
        if file["path"] == "bosun.module.json" {
            let text = file["content"]
                .as_str()
                .unwrap()
                .replace("\"1.0.0\"", &format!("\"{version}\""));
            file["content"] = Value::String(text);
        }
    }
    files
}

/// A delivery of the module on its own feature branch (a pull request into
/// `main`), then the release it makes: one not among `known`.
fn deliver(data: &Path, url: &str, agent: &str, version: &str, known: &BTreeSet<String>) -> String {
    let branch = format!("feature/{MODULE}-{version}");
    api_accepted(
        url,
        agent,
        "CreateCommit",
        &json!({"repository": MODULE, "branch": branch, "baseBranch": "main",
                "message": format!("The payments service {version}"), "files": module_files(version),
                "pullRequestTarget": "main"}),
        None,
    );
    eventually(&format!("the release of {version} starts"), WAIT, || {
        let sagas = run_json(data, &["sagas", "list", "--kind", "release"]);
        sagas.as_array()?.iter().find_map(|saga| {
            let id = saga["state"]["releaseId"].as_str()?;
            (!known.contains(id)).then(|| id.to_owned())
        })
    })
}

fn cli(data: &Path, operator: &str, args: &[&str]) -> std::process::Output {
    bosun(data)
        .env("BOSUN_OPERATOR", operator)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_failed_verification_rolls_dev_back_and_a_person_rolls_back_to_the_verified_release_before() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let health = Health::start();
    let env = [("BOSUN_RELEASE_ENVIRONMENTS", "dev"), ("BOSUN_AUTO_APPROVE", "dev")];
    let (agent, _) = api_key(data, TENANT, "commands:send,deliveries:read", "release agent", None);
    let (sender, _) = api_key(data, TENANT, "commands:send", "a sender", None);

    let policy = json!({"verification": {"dev": {
        "soakSeconds": 2, "intervalSeconds": 1,
        "checks": [{"kind": "http", "name": "health", "url": health.url, "successes": 2, "timeoutSeconds": 5}]
    }}});
    let set = run_json(
        data,
        &[
            "releases",
            "policy",
            "set",
            "--tenant",
            TENANT,
            "--document",
            &policy.to_string(),
            "--reason",
            "verify dev",
        ],
    );
    assert_eq!(set["version"], 1, "{set:#}");

    let (server, url) = serve_with_http(data, &env, None);
    let first = api_accepted(
        &url,
        &agent,
        "ProvisionRepository",
        &json!({"name": MODULE, "description": "verification"}),
        None,
    );
    let correlation = first["correlationId"].as_str().unwrap().to_owned();
    api_accepted(
        &url,
        &agent,
        "CreateCommit",
        &json!({"repository": MODULE, "branch": "main", "message": "Initial commit",
                "files": [{"path": "README.md", "content": "# payments-api\n"}]}),
        Some(&correlation),
    );
    // A branch needs its base.
    eventually("the first commit is in", WAIT, || {
        let shown = run_json(data, &["deliveries", "show", &correlation]);
        shown["messages"]
            .as_array()?
            .iter()
            .any(|m| m["messageType"] == "CommitCreated")
            .then_some(())
    });

    // R1: healthy, verified in dev, kept by dev's GitOps saga.
    let mut known = BTreeSet::new();
    let r1 = deliver(data, &url, &agent, "1.0.0", &known);
    known.insert(r1.clone());
    let saga = eventually("R1 completes", WAIT, || {
        let saga = release(data, &r1);
        (saga["state"]["phase"] == "completed").then_some(saga)
    });
    let record = &saga["state"]["verified"]["dev"];
    assert!(record["summary"].as_str().unwrap().contains("1 check"), "{saga:#}");
    assert!(saga["state"]["verificationFailed"].is_null(), "{saga:#}");
    assert!(health.hits() >= 2, "the check was sampled {} times", health.hits());
    let shown = run(data, &["releases", "show", &r1, "--tenant", TENANT]);
    assert!(shown.contains("verified:"), "{shown}");
    let state = eventually("dev keeps R1 as verified", WAIT, || {
        let state = gitops(data);
        (verified(&state) == [r1.as_str()]).then_some(state)
    });
    assert_eq!(current(&state).as_deref(), Some(r1.as_str()), "{state:#}");
    assert_eq!(desired(data), r1);
    eprintln!("R1 {r1} verified, {:.1} s", started.elapsed().as_secs_f64());

    // R2: its first sample fails; R2 is blocked and dev goes back to R1,
    // which is verified there again (the endpoint is healthy again).
    health.fail_next(1);
    let r2 = deliver(data, &url, &agent, "1.0.1", &known);
    known.insert(r2.clone());
    let saga = eventually("R2's verification fails", WAIT, || {
        let saga = release(data, &r2);
        saga["state"]["verificationFailed"].is_object().then_some(saga)
    });
    assert_eq!(saga["state"]["phase"], "blocked", "{saga:#}");
    let failure = &saga["state"]["verificationFailed"];
    assert_eq!(failure["environment"], "dev");
    let reason = failure["reason"].as_str().unwrap();
    assert!(reason.contains("500") && reason.contains("/healthz"), "{reason}");
    assert!(saga["state"]["verified"].get("dev").is_none(), "{saga:#}");
    let shown = run(data, &["releases", "show", &r2, "--tenant", TENANT]);
    assert!(shown.contains("verification FAILED in dev"), "{shown}");
    let state = eventually("dev is rolled back to R1", WAIT, || {
        let state = gitops(data);
        (current(&state).as_deref() == Some(r1.as_str()) && state["phase"] == "synced").then_some(state)
    });
    assert_eq!(verified(&state), [r1.as_str()], "R2 is never kept: {state:#}");
    assert_eq!(desired(data), r1, "the environment repository names R1 again");
    eventually("dev runs R1 again", WAIT, || (applied(data)? == r1).then_some(()));
    let saga = eventually("R1 is verified again in dev", WAIT, || {
        let saga = release(data, &r1);
        saga["state"]["verified"]["dev"]["summary"]
            .as_str()?
            .contains("verified again after a rollback")
            .then_some(saga)
    });
    assert_eq!(saga["state"]["phase"], "completed", "{saga:#}");
    eprintln!("R2 {r2} rolled back, {:.1} s", started.elapsed().as_secs_f64());

    // R3: healthy, verified.
    let r3 = deliver(data, &url, &agent, "1.0.2", &known);
    let saga = eventually("R3 completes", WAIT, || {
        let saga = release(data, &r3);
        (saga["state"]["phase"] == "completed").then_some(saga)
    });
    assert!(saga["state"]["verified"]["dev"].is_object(), "{saga:#}");
    let state = eventually("dev keeps R3 as verified", WAIT, || {
        let state = gitops(data);
        (verified(&state) == [r1.as_str(), r3.as_str()] && state["phase"] == "synced").then_some(state)
    });
    assert_eq!(current(&state).as_deref(), Some(r3.as_str()), "{state:#}");
    assert_eq!(desired(data), r3);
    eprintln!("R3 {r3} verified, {:.1} s", started.elapsed().as_secs_f64());

    // Rolling back is its own right over HTTP.
    let rollback = json!({"environment": "dev", "moduleId": MODULE, "reason": "INC-9"});
    let (status, body) = api_command(&url, &sender, "RollbackEnvironment", &rollback, None);
    assert_eq!(status, 403, "{body}");
    assert!(body.to_string().contains("releases:rollback"), "{body}");
    assert_eq!(current(&gitops(data)).as_deref(), Some(r3.as_str()));

    // A person rolls dev back: to the verified release before R3, R1.
    let output = cli(
        data,
        "ops",
        &[
            "releases",
            "rollback",
            "dev",
            "--reason",
            "INC-9: errors",
            "--tenant",
            TENANT,
        ],
    );
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains(&format!("from {r3} to {r1}")), "{said}");
    assert!(!said.contains("  "), "one line, single-spaced: {said}");
    let state = eventually("dev is rolled back to R1 by hand", WAIT, || {
        let state = gitops(data);
        (current(&state).as_deref() == Some(r1.as_str()) && state["phase"] == "synced").then_some(state)
    });
    assert_eq!(verified(&state), [r1.as_str(), r3.as_str()], "{state:#}");
    assert_eq!(desired(data), r1);
    eventually("dev runs R1 again", WAIT, || (applied(data)? == r1).then_some(()));

    // The audit log: every decision of the three releases, in order.
    let name = |id: &str| {
        [(&r1, "R1"), (&r2, "R2"), (&r3, "R3")]
            .iter()
            .find(|(release, _)| release.as_str() == id)
            .map_or("-", |(_, name)| *name)
    };
    let exported = eventually("R1 is verified again after the manual rollback", WAIT, || {
        let exported = run(data, &["audit", "export", "--tenant", TENANT]);
        let entries: Vec<Value> = exported
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        entries
            .iter()
            .filter(|entry| entry["action"] == "verified" && entry["releaseId"] == r1.as_str())
            .count()
            .eq(&3)
            .then_some(entries)
    });
    let decisions: Vec<(String, String, String)> = exported
        .iter()
        .map(|entry| {
            (
                name(entry["releaseId"].as_str().unwrap_or("-")).to_owned(),
                entry["action"].as_str().unwrap().to_owned(),
                entry["environment"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    let expected = [
        ("-", "policy-changed", "-"),
        ("R1", "requested", "-"),
        ("R1", "approved", "dev"),
        ("R1", "promoted", "dev"),
        ("R1", "deployed", "dev"),
        ("R1", "verified", "dev"),
        ("R1", "completed", "-"),
        ("R2", "requested", "-"),
        ("R2", "approved", "dev"),
        ("R2", "promoted", "dev"),
        ("R2", "deployed", "dev"),
        ("R2", "verification-failed", "dev"),
        ("R2", "blocked", "dev"),
        ("R2", "rolled-back", "dev"),
        ("R1", "verified", "dev"),
        ("R3", "requested", "-"),
        ("R3", "approved", "dev"),
        ("R3", "promoted", "dev"),
        ("R3", "deployed", "dev"),
        ("R3", "verified", "dev"),
        ("R3", "completed", "-"),
        ("R3", "rolled-back", "dev"),
        ("R1", "verified", "dev"),
    ]
    .map(|(release, action, environment)| (release.to_owned(), action.to_owned(), environment.to_owned()));
    let printed = exported.iter().map(Value::to_string).collect::<Vec<_>>().join("\n");
    assert_eq!(decisions, expected, "{printed}");
    let entry = |release: &str, action: &str| {
        exported
            .iter()
            .find(|entry| entry["releaseId"] == release && entry["action"] == action)
            .unwrap()
    };
    assert_eq!(entry(&r1, "verified")["by"], "bosun");
    assert!(
        entry(&r2, "verification-failed")["reason"]
            .as_str()
            .unwrap()
            .contains("500"),
        "{printed}"
    );
    let automatic = entry(&r2, "rolled-back");
    assert_eq!(automatic["by"], "policy:auto-rollback", "{printed}");
    assert!(
        automatic["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("rolled back to {r1}")),
        "{printed}"
    );
    let manual = entry(&r3, "rolled-back");
    assert_eq!(manual["by"], "cli:ops", "{printed}");
    assert_eq!(manual["door"], "cli:ops", "{printed}");
    assert_eq!(manual["detail"]["identities"], json!(["cli:ops"]), "{printed}");
    let reason = manual["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("rolled back to {r1}")) && reason.contains("INC-9: errors"),
        "{printed}"
    );
    let sequences: Vec<u64> = exported
        .iter()
        .map(|entry| entry["sequence"].as_u64().unwrap())
        .collect();
    assert!(sequences.windows(2).all(|pair| pair[0] < pair[1]), "{sequences:?}");
    // The environment repository's history says who rolled back, and why.
    let repository = find_repository(data, TENANT, "environments").unwrap();
    let log = git(&repository, &["log", "--format=%s", "main"]);
    let subjects: Vec<&str> = log.lines().collect();
    assert!(
        subjects[0].starts_with(&format!("Roll {MODULE} in dev back to {r1}: INC-9: errors")),
        "{log}"
    );
    let automatic = format!("Roll {MODULE} in dev back to {r1}: verification of {r2} in dev failed");
    assert!(subjects.iter().any(|subject| subject.starts_with(&automatic)), "{log}");
    eprintln!("done, {:.1} s", started.elapsed().as_secs_f64());
    server.terminate();
}
