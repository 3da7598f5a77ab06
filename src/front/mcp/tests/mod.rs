//! The MCP server's tests: the tools as callers see them ([`tool_calls`]:
//! scopes, tenant walls, refusals naming the field), `/mcp` through the
//! API's real router and front door ([`http`]: version negotiation,
//! stateless answers, the key on every request, the generated tool list),
//! and [`stdio`]. This file holds their shared fixture.
//!
//! The JSON-RPC framing itself (batches, parse errors, invalid requests) is
//! the MCP SDK's and is not tested again here; `tests/mcp.rs` drives both
//! transports with the official TypeScript SDK client.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod environments;
mod fan_out;
mod http;
mod stdio;
mod tool_calls;

use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::McpServer;
use super::tools::Tools;
use crate::front::access::{self, Caller, Scope};
use crate::front::api::{ApiState, router};
use crate::front::gateway::Gateway;
use crate::runtime::config::Settings;
use crate::runtime::metrics::Metrics;
use crate::wiring::Backends;

/// What the Streamable HTTP transport asks a client to accept.
const ACCEPT: &str = "application/json, text/event-stream";

/// Tools, and the API serving `/mcp`, over the embedded transport and
/// SQLite store in a temporary directory (no consumers run: deliveries
/// stay in progress).
struct Fixture {
    tools: Tools,
    server: McpServer,
    backends: Backends,
    url: String,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    fixture_with(|_| {}).await
}

/// [`fixture`], with settings changed by `change`.
async fn fixture_with(change: impl FnOnce(&mut Settings)) -> Fixture {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut settings = Settings::with_data_dir(dir.path());
    change(&mut settings);
    let backends = Backends::open(&settings).await.expect("backends open");
    // The keys [`caller`] names, stored: work a caller starts (a replay
    // job) is checked against its key's record before each effect.
    for tenant in ["contoso", "fabrikam"] {
        let mut made =
            access::generate(tenant, &[Scope::Admin], "test", None, access::DEFAULT_MAX_KEY_LIFETIME).expect("a key");
        made.record.id = format!("{tenant}-key");
        backends.access.insert_api_key(made.record).await.expect("stored");
    }
    let gateway = Gateway::new(backends.clone(), CancellationToken::new());
    gateway.spawn_replay_runner(CancellationToken::new());
    let state = ApiState::new(gateway.clone(), Arc::new(Metrics::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, router(state, 64 * 1024)).await });
    Fixture {
        tools: Tools::new(gateway.clone()),
        server: McpServer::new(gateway),
        backends,
        url,
        client: reqwest::Client::new(),
        _dir: dir,
    }
}

impl Fixture {
    /// A new API key of `tenant` with `scopes`.
    async fn key(&self, tenant: &str, scopes: &[Scope]) -> String {
        let made = access::generate(tenant, scopes, "test", None, access::DEFAULT_MAX_KEY_LIFETIME).expect("a key");
        self.backends.access.insert_api_key(made.record).await.expect("stored");
        made.key
    }

    /// The caller of a new, stored key of `tenant` with `scopes` (a stdio
    /// session checks its key's record before every call).
    async fn stored_caller(&self, tenant: &str, scopes: &[Scope]) -> Caller {
        let key = self.key(tenant, scopes).await;
        f_authenticate(&self.tools, &key).await
    }

    /// POSTs one JSON-RPC message to `/mcp` as `key`.
    async fn post(&self, key: Option<&str>, message: &Value) -> reqwest::Response {
        let mut request = self
            .client
            .post(format!("{}/mcp", self.url))
            .header("accept", ACCEPT)
            .json(message);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send().await.expect("sent")
    }

    /// POSTs a request and returns its JSON-RPC answer (200, JSON, no session).
    async fn rpc(&self, key: &str, method: &str, params: Value) -> Value {
        let response = self
            .post(
                Some(key),
                &json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}),
            )
            .await;
        assert_eq!(response.status(), 200, "{method}");
        assert!(
            response.headers().get("mcp-session-id").is_none(),
            "stateless: no session"
        );
        let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(content_type.starts_with("application/json"), "{content_type}");
        let answer: Value = response.json().await.expect("JSON");
        assert_eq!(answer["id"], 7, "{answer}");
        answer
    }
}

async fn f_authenticate(tools: &Tools, key: &str) -> Caller {
    tools.gateway().authenticate(key).await.expect("a valid key")
}

fn caller(tenant: &str, scopes: &[Scope]) -> Caller {
    Caller::new(format!("{tenant}-key"), tenant, scopes.to_vec())
}

fn contoso() -> Caller {
    caller("contoso", &[Scope::Admin])
}

fn probe(group: &str) -> Value {
    json!({"group": group, "sequence": 1})
}

/// Calls a tool; returns (isError, structuredContent) after checking that
/// the text content holds the same JSON.
async fn call(tools: &Tools, caller: &Caller, tool: &str, arguments: Value) -> (bool, Value) {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object");
    };
    let result = tools
        .call(caller, None, tool, Some(arguments))
        .await
        .unwrap_or_else(|| panic!("{tool} is a tool"));
    let result = serde_json::to_value(result).expect("JSON");
    check_result(&result);
    (result["isError"] == json!(true), result["structuredContent"].clone())
}

/// A tool result's text is its structured content as JSON.
fn check_result(result: &Value) {
    assert_eq!(result["content"][0]["type"], "text", "{result}");
    let text = result["content"][0]["text"].as_str().expect("text content");
    let from_text: Value = serde_json::from_str(text).expect("the text is JSON");
    assert_eq!(
        from_text, result["structuredContent"],
        "text and structuredContent agree"
    );
}
