//! A generated client against the real service: `bosun serve --http` on a
//! free loopback port with the probe and commit consumers, an admin key of
//! tenant contoso from `bosun keys create`; openapi-python-client (installed
//! by `scripts/openapi-client`) generates a Python client from the served
//! `/openapi.json`, Python compiles it, and `tests/openapi_client/exercise.py`
//! drives bosun through it with typed models only: a Probe followed to
//! completion, its saga and diagram, a commit for a repository that does
//! not exist followed to its dead letter, the failure group, a bulk replay
//! and its job, and typed errors (401, 404, 422 naming the field).
//!
//! Ignored by a plain `cargo test` (reported as ignored): it needs python3
//! and the generator from PyPI. scripts/test installs it and runs this
//! (`BOSUN_TEST_OPENAPI_CLIENT="$(scripts/openapi-client install)" cargo
//! test --test openapi_client -- --ignored`); run without it, it fails
//! saying what is missing.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Server, run_json};

/// The venv's bin directory `scripts/openapi-client install` printed.
fn generator_bin() -> PathBuf {
    let dir = std::env::var_os("BOSUN_TEST_OPENAPI_CLIENT").unwrap_or_else(|| {
        panic!(
            "BOSUN_TEST_OPENAPI_CLIENT is not set: run \
             BOSUN_TEST_OPENAPI_CLIENT=\"$(scripts/openapi-client install)\" \
             cargo test --test openapi_client -- --ignored (scripts/test does)"
        )
    });
    let dir = PathBuf::from(dir);
    assert!(
        dir.join("openapi-python-client").is_file(),
        "no openapi-python-client in {} (BOSUN_TEST_OPENAPI_CLIENT): run scripts/openapi-client install",
        dir.display()
    );
    dir
}

fn output_text(output: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn run(command: &mut Command, what: &str) -> String {
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("{what} does not start: {err}"));
    assert!(output.status.success(), "{what} failed: {}", output_text(&output));
    output_text(&output)
}

/// The Python of the venv, with nothing of the developer's Python path.
fn python(bin: &Path) -> Command {
    let mut command = Command::new(bin.join("python"));
    command.env_remove("PYTHONPATH").env_remove("PYTHONHOME");
    command
}

#[test]
#[ignore = "needs python3 and openapi-python-client from PyPI: run scripts/openapi-client install, \
            then cargo test --test openapi_client -- --ignored; scripts/test does both"]
fn a_generated_python_client_compiles_and_drives_the_api_with_typed_answers() {
    let bin = generator_bin();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let created = run_json(&data, &["keys", "create", "--tenant", "contoso", "--scopes", "admin"]);
    let key = created["key"].as_str().expect("keys create prints the key").to_owned();

    let mut server = Server::start(&data, &[], &["--http", "127.0.0.1:0", "--consumers", "probe,commit"]);
    let line = server.wait_for_line("HTTP API on http://", Duration::from_secs(60));
    let url = line[line.find("http://").unwrap()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    server.wait_for_line("receiving", Duration::from_secs(30));

    // Generate from what the server serves; no formatter runs on the output.
    let config = dir.path().join("generator.yaml");
    std::fs::write(&config, "post_hooks: []\n").unwrap();
    let package = dir.path().join("client").join("bosun_client");
    let generated = run(
        Command::new(bin.join("openapi-python-client"))
            .args(["generate", "--meta", "none", "--url"])
            .arg(format!("{url}/openapi.json"))
            .arg("--output-path")
            .arg(&package)
            .arg("--config")
            .arg(&config),
        "openapi-python-client generate",
    );
    // A document the generator reads only in part still "generates": it
    // says so with warnings, and every operation must be there.
    assert!(!generated.contains("Warning"), "the generator warned: {generated}");
    for operation in [
        "list_deliveries",
        "get_delivery",
        "list_dead_letters",
        "get_saga",
        "send_probe",
    ] {
        assert!(
            package.join("api/default").join(format!("{operation}.py")).is_file(),
            "no {operation} in the generated client: {generated}"
        );
    }
    run(
        python(&bin).args(["-m", "compileall", "-q"]).arg(&package),
        "python -m compileall (the generated client)",
    );

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openapi_client/exercise.py");
    let output = run(
        python(&bin)
            .arg(&script)
            .env("PYTHONPATH", package.parent().unwrap())
            .env("BOSUN_URL", &url)
            .env("BOSUN_API_KEY", &key),
        "tests/openapi_client/exercise.py",
    );
    println!("{output}");
    assert!(output.contains("the generated client works"), "{output}");
    server.terminate();
}
