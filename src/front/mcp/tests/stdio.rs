//! `bosun mcp`'s stdio transport.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::{call, contoso, fixture, probe};
use crate::front::access::{Caller, Scope};
use crate::front::mcp::{McpServer, tools};

/// A client on the other end of [`McpServer::serve_stdio`].
struct StdioClient {
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    read: tokio::io::BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl StdioClient {
    fn start(server: &McpServer, caller: Caller) -> Self {
        let (client, server_side) = tokio::io::duplex(256 * 1024);
        let (server_in, server_out) = tokio::io::split(server_side);
        let server = server.clone();
        let serving = tokio::spawn(async move { server.serve_stdio(caller, server_in, server_out).await });
        let (read, write) = tokio::io::split(client);
        Self {
            write,
            read: tokio::io::BufReader::new(read),
            serving,
        }
    }

    async fn send_line(&mut self, line: &str) {
        self.write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("written");
    }

    async fn send(&mut self, message: Value) {
        self.send_line(&message.to_string()).await;
    }

    /// The next message from the server.
    async fn receive(&mut self) -> Value {
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(10), self.read.read_line(&mut line))
            .await
            .expect("an answer in time")
            .expect("read");
        serde_json::from_str(&line).unwrap_or_else(|err| panic!("not one JSON message ({err}): {line}"))
    }

    async fn initialize(&mut self, version: &str) -> Value {
        let params =
            json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
        self.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}))
            .await;
        let answer = self.receive().await;
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        answer
    }
}

#[tokio::test]
async fn stdio_initializes_lists_and_calls_tools_as_its_key() {
    let f = fixture().await;
    let mut client = StdioClient::start(&f.server, f.stored_caller("contoso", &[Scope::CommandsSend]).await);
    let initialized = client.initialize("2025-03-26").await;
    assert_eq!(initialized["result"]["protocolVersion"], "2025-03-26", "{initialized}");
    assert_eq!(initialized["result"]["serverInfo"]["name"], "bosun");
    // Not JSON: ignored (nothing to answer), and the server goes on.
    client.send_line("{not json").await;
    client
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    let listed = client.receive().await;
    assert_eq!(listed["id"], 1, "{listed}");
    assert_eq!(
        listed["result"]["tools"].as_array().map(Vec::len),
        Some(tools::NAMES.len())
    );
    let arguments = json!({"type": "Probe", "payload": probe("stdio")});
    client
        .send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "send_command", "arguments": arguments}}))
        .await;
    let sent = client.receive().await;
    assert_eq!(sent["id"], 2);
    assert_eq!(sent["result"]["isError"], false, "{sent}");
    assert_eq!(sent["result"]["structuredContent"]["tenantId"], "contoso");
    // The key's scopes hold: it may send but not read.
    let correlation_id = sent["result"]["structuredContent"]["correlationId"].clone();
    client
        .send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "get_delivery", "arguments": {"correlationId": correlation_id}}}))
        .await;
    let refused = client.receive().await;
    assert_eq!(
        refused["result"]["structuredContent"]["error"]["code"], "forbidden",
        "{refused}"
    );
    client.write.shutdown().await.expect("closed");
    client.serving.await.expect("joined").expect("served");
}

#[tokio::test]
async fn stdio_drops_an_oversized_line_and_goes_on() {
    let f = fixture().await;
    let server = f.server.clone().with_max_message_bytes(1024);
    let mut client = StdioClient::start(&server, contoso());
    client.initialize("2025-06-18").await;
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(4000)}});
    client.send(big).await;
    client.send(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})).await;
    let answer = client.receive().await;
    assert_eq!(answer["id"], 2, "the oversized line is not answered: {answer}");
    assert_eq!(answer["result"], json!({}));
}

#[tokio::test]
async fn stdio_cancellation_stops_a_wait_and_other_requests_still_answer() {
    let f = fixture().await;
    let (_, sent) = call(
        &f.tools,
        &contoso(),
        "send_command",
        json!({"type": "Probe", "payload": probe("mcp")}),
    )
    .await;
    let mut client = StdioClient::start(&f.server, contoso());
    client.initialize("2025-11-25").await;
    let arguments = json!({"correlationId": sent["correlationId"], "timeoutSeconds": 600});
    client
        .send(json!({"jsonrpc": "2.0", "id": "w", "method": "tools/call", "params": {"name": "wait_for_delivery", "arguments": arguments}}))
        .await;
    client.send(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).await;
    let ping = client.receive().await;
    assert_eq!(ping["id"], 1, "ping answered while the wait runs: {ping}");
    client
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "w", "reason": "test"}}))
        .await;
    client.write.shutdown().await.expect("closed");
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(4), &mut client.serving)
        .await
        .expect("the cancelled wait does not hold the server")
        .expect("joined")
        .expect("served");
    assert!(started.elapsed() < Duration::from_secs(4));
    let mut rest = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut client.read, &mut rest)
        .await
        .expect("read");
    assert_eq!(rest, "", "a cancelled request is not answered");
}
