//! The MCP server with a real MCP client: `bosun serve --http` on a free
//! loopback port with the probe consumer, an admin key of tenant contoso
//! from `bosun keys create`, then `tests/mcp/client.mjs` drives bosun with
//! the official TypeScript SDK (installed by `scripts/mcp-sdk`) over stdio
//! (it spawns `bosun mcp`) and over Streamable HTTP (`POST /mcp`): it lists
//! the tools, sends a Probe, follows its delivery until it completes and
//! checks how refusals come back; over HTTP, that the client's newest
//! protocol version is spoken and that `/mcp` keeps no session.
//!
//! Ignored by a plain `cargo test` (reported as ignored): it needs Node.js
//! 18+ and npm, and installs the SDK with `scripts/mcp-sdk` when missing.
//! scripts/test installs the SDK and runs it (`cargo test --test mcp --
//! --ignored`); run explicitly without Node.js or the SDK, it fails saying
//! what is missing.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Server, node_tools, run_json, run_node_script};

#[test]
#[ignore = "needs Node.js 18+ and the MCP TypeScript SDK: run scripts/mcp-sdk install (npm), \
            then cargo test --test mcp -- --ignored; scripts/test does both"]
fn an_mcp_client_sends_and_follows_a_delivery_over_stdio_and_http() {
    let node_path = node_tools("mcp-sdk").unwrap_or_else(|reason| {
        panic!("the MCP client test needs Node.js 18+ and the MCP SDK (`scripts/mcp-sdk install`): {reason}")
    });

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
    let (passed, output) = run_node_script(
        "tests/mcp/client.mjs",
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
        "mcp-client",
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
        "stateless (no Mcp-Session-Id)",
        "http: a wrong key is refused",
    ] {
        assert!(output.contains(check), "missing `{check}` in:\n{output}");
    }
    eprintln!("{output}");
    server.terminate();
}
