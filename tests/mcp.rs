//! The MCP server with a real MCP client: `bosun serve --http` on a free
//! loopback port with the probe consumer, an admin key of tenant contoso
//! from `bosun keys create`, then `tests/mcp/client.mjs` drives bosun with
//! the official TypeScript SDK (installed by `scripts/mcp-sdk`) over stdio
//! (it spawns `bosun mcp`) and over Streamable HTTP (`POST /mcp`): it lists
//! the tools, sends a Probe, follows its delivery until it completes and
//! checks how refusals come back.
//!
//! Needs Node.js and npm: with CI=true a missing one fails the test,
//! otherwise the test says why it skipped.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, run_json};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true")
}

/// The NODE_PATH holding the MCP SDK, or why the client cannot run.
fn mcp_sdk() -> Result<String, String> {
    match Command::new("node").arg("--version").output() {
        Ok(output) if output.status.success() => {}
        Ok(output) => return Err(format!("`node --version` failed: {}", output.status)),
        Err(err) => return Err(format!("Node.js is not installed ({err}); apt-get install nodejs npm")),
    }
    let output = Command::new(Path::new(REPO).join("scripts/mcp-sdk"))
        .arg("node-path")
        .stdin(Stdio::null())
        .output()
        .map_err(|err| format!("scripts/mcp-sdk did not run: {err}"))?;
    if !output.status.success() {
        return Err(format!(
            "scripts/mcp-sdk node-path failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let node_path = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if node_path.is_empty() {
        return Err("scripts/mcp-sdk node-path printed nothing".into());
    }
    Ok(node_path)
}

/// Runs the client with a wall-clock limit; whether it passed, and its output.
fn run_client(env: &[(&str, &str)], log_dir: &Path) -> (bool, String) {
    let stdout_path = log_dir.join("mcp-client-stdout.log");
    let stderr_path = log_dir.join("mcp-client-stderr.log");
    let mut command = Command::new("node");
    command.arg(Path::new(REPO).join("tests/mcp/client.mjs"));
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
fn an_mcp_client_sends_and_follows_a_delivery_over_stdio_and_http() {
    let node_path = match mcp_sdk() {
        Ok(node_path) => node_path,
        Err(reason) if in_ci() => panic!("the MCP client test needs Node.js and the MCP SDK: {reason}"),
        Err(reason) => {
            eprintln!("skipped: the MCP client test needs Node.js and the MCP SDK: {reason}");
            return;
        }
    };

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let created = run_json(data, &["keys", "create", "--tenant", "contoso", "--scopes", "admin"]);
    let key = created["key"].as_str().expect("keys create prints the key").to_owned();

    let mut server = Server::start(data, &[], &["--http", "127.0.0.1:0", "--consumers", "probe"]);
    let line = server.wait_for_line("HTTP API on http://", Duration::from_secs(30));
    let url = line[line.find("http://").unwrap()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();

    let data_dir = data.to_str().expect("a UTF-8 temporary path");
    let (passed, output) = run_client(
        &[
            ("NODE_PATH", &node_path),
            ("BOSUN_BIN", env!("CARGO_BIN_EXE_bosun")),
            ("BOSUN_DATA_DIR", data_dir),
            ("BOSUN_API_KEY", &key),
            ("BOSUN_URL", &url),
            ("BOSUN_POLL_INTERVAL_MS", "50"),
            ("RUST_LOG", "info"),
        ],
        data,
    );
    if !passed {
        panic!(
            "the MCP client failed:\n{output}\n--- bosun serve stderr:\n{}",
            server.seen.join("\n")
        );
    }
    assert!(output.contains("mcp client: all checks passed"), "{output}");
    for check in [
        "stdio: wait_for_delivery returned completed",
        "http: wait_for_delivery returned completed",
        "http: a wrong key is refused",
    ] {
        assert!(output.contains(check), "missing `{check}` in:\n{output}");
    }
    eprintln!("{output}");
    server.terminate();
}
