//! The OpenAPI document against the live service, by a tester that
//! generates the requests itself: `bosun serve --http` on a free loopback
//! port (the embedded SQLite default in a temporary data directory, the
//! probe consumer, no request budget), an admin key of tenant contoso from
//! `bosun keys create`, a few dead letters recorded beforehand, and
//! schemathesis (installed by `scripts/schemathesis`) run against the served
//! `/openapi.json` with every check on (`--checks all`: no server error,
//! status codes, content types, headers and bodies as documented, invalid
//! requests refused, valid ones accepted, authentication enforced, ...),
//! each operation at most `MAX_EXAMPLES` generated cases per phase.
//! `tests/schemathesis/schemathesis.toml` gives the key and says, with why,
//! what the document cannot state in JSON Schema; `tests/schemathesis/hooks.py`
//! checks that each refusal of a valid command is one the document announces.
//! Any failure fails the test, which prints schemathesis's report (its seed
//! reproduces the run).
//!
//! Ignored by a plain `cargo test` (reported as ignored): it needs python3
//! and schemathesis from PyPI. scripts/test installs it and runs this
//! (`BOSUN_TEST_SCHEMATHESIS="$(scripts/schemathesis install)" cargo test
//! --test schemathesis -- --ignored`); run without it, it fails saying what
//! is missing.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use bosun_contracts::Envelope;
use common::{Server, backends, block_on, run_json};
use uuid::Uuid;

/// Generated cases per operation and phase: every operation is covered,
/// and the run stays within a few minutes on two cores.
const MAX_EXAMPLES: &str = "20";

/// The venv's bin directory `scripts/schemathesis install` printed.
fn schemathesis_bin() -> PathBuf {
    let dir = std::env::var_os("BOSUN_TEST_SCHEMATHESIS").unwrap_or_else(|| {
        panic!(
            "BOSUN_TEST_SCHEMATHESIS is not set: run \
             BOSUN_TEST_SCHEMATHESIS=\"$(scripts/schemathesis install)\" \
             cargo test --test schemathesis -- --ignored (scripts/test does)"
        )
    });
    let dir = PathBuf::from(dir);
    assert!(
        dir.join("schemathesis").is_file(),
        "no schemathesis in {} (BOSUN_TEST_SCHEMATHESIS): run scripts/schemathesis install",
        dir.display()
    );
    dir
}

/// Records dead letters of contoso's commit commands, as the host would,
/// so the dead-letter operations have something to list and group.
fn record_dead_letters(data: &Path, count: usize) {
    let backends = backends(data);
    for index in 0..count {
        let payload = serde_json::json!({"repository": format!("missing-{index}"), "branch": "main",
            "message": "m", "files": [{"path": "README.md", "content": "x"}]});
        let message = bosun_contracts::Message::from_type_and_payload("CreateCommit", &payload).unwrap();
        let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "schemathesis");
        let mut record = common::dead_letter(
            &envelope,
            "commit",
            "repository-missing",
            &format!("repository-missing: missing-{index} does not exist"),
            "host",
        );
        record.error_chain = vec!["repository-missing".into()];
        block_on(backends.store.record_dead_letter(record, None)).unwrap();
    }
}

#[test]
#[ignore = "needs schemathesis (scripts/schemathesis): run scripts/schemathesis install, \
            then cargo test --test schemathesis -- --ignored; scripts/test does both"]
fn schemathesis_finds_nothing_the_openapi_document_does_not_say() {
    let bin = schemathesis_bin();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let created = run_json(&data, &["keys", "create", "--tenant", "contoso", "--scopes", "admin"]);
    let key = created["key"].as_str().expect("keys create prints the key").to_owned();
    record_dead_letters(&data, 3);

    // No request budget: schemathesis sends thousands of requests with one key.
    let mut server = Server::start(
        &data,
        &[("BOSUN_HTTP_RATE_LIMIT_PER_SECOND", "0")],
        &["--http", "127.0.0.1:0", "--consumers", "probe"],
    );
    let line = server.wait_for_line("HTTP API on http://", Duration::from_secs(60));
    let url = line[line.find("http://").unwrap()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();

    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis");
    let output = Command::new(bin.join("schemathesis"))
        .arg("--no-color")
        .arg("--config-file")
        .arg(config.join("schemathesis.toml"))
        .args(["run", &format!("{url}/openapi.json"), "--checks", "all"])
        .args(["--max-examples", MAX_EXAMPLES, "--workers", "2"])
        .env("BOSUN_SCHEMATHESIS_KEY", &key)
        .env("SCHEMATHESIS_HOOKS", config.join("hooks.py"))
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("schemathesis does not start: {err}"));
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{report}");
    let generated = report
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with(|c: char| c.is_ascii_digit()) && line.contains(" generated"))
        .unwrap_or_else(|| panic!("schemathesis printed no count of generated cases: {report}"));
    println!("schemathesis: {generated}");
    assert!(
        output.status.success(),
        "schemathesis failed ({}): {report}",
        output.status
    );
    assert!(
        !report.contains("Failures:"),
        "schemathesis reported failures: {report}"
    );
    // Every operation of the document was tested.
    let after = |label: &str| {
        report
            .lines()
            .map(str::trim)
            .find_map(|line| line.strip_prefix(label))
            .map(|rest| rest.trim().to_owned())
            .unwrap_or_else(|| panic!("no `{label}` in the report: {report}"))
    };
    let selected = after("Selected:");
    let total = selected.split('/').nth(1).unwrap_or_default().to_owned();
    assert_eq!(
        (selected.clone(), after("Tested:")),
        (format!("{total}/{total}"), total),
        "not every operation was tested: {report}"
    );
    server.terminate();
}
