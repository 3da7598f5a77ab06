//! `/mcp` over HTTP, through the API's router and front door.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bosun_contracts::CATALOGUE;
use serde_json::{Value, json};

use super::{ACCEPT, check_result, fixture, probe};
use crate::front::access::Scope;
use crate::front::mcp::tools;

#[tokio::test]
async fn initialize_answers_the_requested_version_when_known_else_the_newest_and_keeps_no_session() {
    let f = fixture().await;
    let key = f.key("contoso", &[Scope::Admin]).await;
    for (requested, expected) in [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2024-11-05", "2024-11-05"),
        ("2099-01-01", "2025-11-25"),
    ] {
        let params =
            json!({"protocolVersion": requested, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
        let answer = f.rpc(&key, "initialize", params).await;
        let result = &answer["result"];
        assert_eq!(result["protocolVersion"], expected, "{requested}: {answer}");
        assert!(result["capabilities"]["tools"].is_object(), "{answer}");
        assert_eq!(result["serverInfo"]["name"], "bosun");
        assert_eq!(result["serverInfo"]["version"], env!("CARGO_PKG_VERSION"));
        assert!(
            result["instructions"]
                .as_str()
                .is_some_and(|text| text.contains("send_command"))
        );
    }
    // Stateless: any request is answered without a handshake before it, on
    // any replica; a notification is accepted.
    let ping = f.rpc(&key, "ping", json!({})).await;
    assert_eq!(ping["result"], json!({}), "{ping}");
    let initialized = f
        .post(
            Some(&key),
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await;
    assert_eq!(initialized.status(), 202);
    // No server-initiated stream.
    let get = f
        .client
        .get(format!("{}/mcp", f.url))
        .bearer_auth(&key)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 405);
}

#[tokio::test]
async fn every_http_request_needs_a_key_and_acts_as_its_caller() {
    let f = fixture().await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let wrong = format!("bsn_{}_{}", "0".repeat(12), "0".repeat(64));
    for key in [None, Some(wrong.as_str())] {
        let response = f.post(key, &ping).await;
        assert_eq!(response.status(), 401, "{key:?}");
        assert!(response.headers().contains_key("www-authenticate"));
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unauthorized", "{body}");
    }

    let contoso = f.key("contoso", &[Scope::Admin]).await;
    // The API's body limit (64 KiB here) holds for /mcp too.
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(70_000)}});
    assert_eq!(f.post(Some(&contoso), &big).await.status(), 413);

    let arguments = json!({"type": "Probe", "payload": probe("http")});
    let answer = f
        .rpc(
            &contoso,
            "tools/call",
            json!({"name": "send_command", "arguments": arguments}),
        )
        .await;
    let result = &answer["result"];
    check_result(result);
    assert_eq!(result["isError"], false, "{answer}");
    assert_eq!(result["structuredContent"]["tenantId"], "contoso", "{answer}");
    let correlation_id = result["structuredContent"]["correlationId"].clone();

    // Another tenant's key does not see it; a reader may not send.
    let fabrikam = f.key("fabrikam", &[Scope::Admin]).await;
    let answer = f
        .rpc(
            &fabrikam,
            "tools/call",
            json!({"name": "get_delivery", "arguments": {"correlationId": correlation_id}}),
        )
        .await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(answer["result"]["structuredContent"]["error"]["code"], "not-found");
    let reader = f.key("contoso", &[Scope::DeliveriesRead]).await;
    let answer = f
        .rpc(
            &reader,
            "tools/call",
            json!({"name": "send_command", "arguments": arguments}),
        )
        .await;
    assert_eq!(
        answer["result"]["structuredContent"]["error"]["code"], "forbidden",
        "{answer}"
    );
    let answer = f
        .rpc(
            &reader,
            "tools/call",
            json!({"name": "get_delivery", "arguments": {"correlationId": correlation_id}}),
        )
        .await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
}

#[tokio::test]
async fn an_unknown_tool_is_a_json_rpc_error_naming_the_tools() {
    let f = fixture().await;
    let key = f.key("contoso", &[Scope::Admin]).await;
    let answer = f
        .rpc(&key, "tools/call", json!({"name": "format_disk", "arguments": {}}))
        .await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("format_disk") && message.contains("send_command"),
        "{message}"
    );
    assert!(answer.get("result").is_none());
}

#[tokio::test]
async fn a_client_of_the_handshakeless_revision_calls_tools_per_request() {
    // 2026-07-28 has no `initialize`: each request names its version and
    // the client in `_meta` (and in headers); the key still decides who it is.
    let f = fixture().await;
    let key = f.key("contoso", &[Scope::Admin]).await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let arguments = json!({"type": "Probe", "payload": probe("2026")});
    let message = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"_meta": meta, "name": "send_command", "arguments": arguments}
    });
    let response = f
        .client
        .post(format!("{}/mcp", f.url))
        .bearer_auth(&key)
        .header("accept", ACCEPT)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "send_command")
        .json(&message)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("a JSON answer");
    let result = &answer["result"];
    check_result(result);
    assert_eq!(result["structuredContent"]["tenantId"], "contoso", "{answer}");
}

#[tokio::test]
async fn tools_list_is_generated_from_the_argument_types_and_the_contracts() {
    let f = fixture().await;
    let key = f.key("contoso", &[Scope::DeliveriesRead]).await;
    let answer = f.rpc(&key, "tools/list", json!({})).await;
    let listed = answer["result"]["tools"].as_array().expect("tools");
    let names: Vec<&str> = listed.iter().filter_map(|tool| tool["name"].as_str()).collect();
    assert_eq!(names, tools::NAMES, "every tool, in catalogue order");
    for tool in listed {
        let schema = &tool["inputSchema"];
        assert_eq!(schema["type"], "object", "{tool}");
        assert_eq!(
            schema["additionalProperties"], false,
            "unknown arguments are refused: {tool}"
        );
        assert!(tool["description"].as_str().is_some_and(|d| d.len() > 80), "{tool}");
        // Only a purge deletes what cannot be had back.
        let destructive = tool["name"] == "purge_failure_group";
        assert_eq!(tool["annotations"]["destructiveHint"], destructive, "{tool}");
        assert_refs_resolve(schema, schema);
    }
    let tool = |name: &str| listed.iter().find(|tool| tool["name"] == name).expect(name);

    // send_command: the command names and payload schemas of the sendable
    // commands, as the contracts generate them; internal ones are absent.
    let send = tool("send_command");
    assert_eq!(send["annotations"]["readOnlyHint"], false);
    let schema = &send["inputSchema"];
    let mut required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    required.sort_unstable();
    assert_eq!(required, ["payload", "type"]);
    let sendable: Vec<&str> = CATALOGUE
        .iter()
        .filter(|spec| spec.is_sendable())
        .map(|spec| spec.message_type)
        .collect();
    assert!(sendable.contains(&"CreateCommit") && sendable.contains(&"Probe"));
    assert_eq!(schema["properties"]["type"]["enum"], json!(sendable), "{schema}");
    let payload_refs: Vec<&str> = schema["properties"]["payload"]["anyOf"]
        .as_array()
        .expect("payload is one of the command payloads")
        .iter()
        .filter_map(|variant| variant["$ref"].as_str())
        .collect();
    let expected_refs: Vec<String> = sendable.iter().map(|name| format!("#/$defs/{name}")).collect();
    assert_eq!(payload_refs, expected_refs);
    for (name, contract) in bosun_contracts::messages::payload_schemas() {
        let defined = &schema["$defs"][name];
        let spec = CATALOGUE.iter().find(|spec| spec.message_type == name).unwrap();
        if !spec.is_sendable() {
            assert!(defined.is_null(), "{name} is not offered");
            continue;
        }
        let mut contract = contract.to_value();
        let contract = contract.as_object_mut().unwrap();
        contract.remove("$schema");
        contract.remove("$defs");
        assert_eq!(
            defined,
            &Value::Object(contract.clone()),
            "{name}: the contract's schema"
        );
    }
    assert!(schema["$defs"]["ReleaseApprovalTimeout"].is_null());
    let description = send["description"].as_str().unwrap();
    for spec in CATALOGUE {
        let listed = description.contains(&format!("- {}:", spec.message_type));
        assert_eq!(listed, spec.is_sendable(), "{}", spec.message_type);
    }
    assert_eq!(schema["properties"]["correlationId"]["format"], "uuid");
    assert_eq!(schema["properties"]["idempotencyKey"]["maxLength"], 255);

    // The others' arguments come from their types, with their doc comments.
    let wait = &tool("wait_for_delivery")["inputSchema"];
    assert_eq!(wait["required"], json!(["correlationId"]));
    assert_eq!(wait["properties"]["correlationId"]["format"], "uuid");
    assert_eq!(wait["properties"]["timeoutSeconds"]["maximum"], 600);
    assert_eq!(wait["properties"]["timeoutSeconds"]["default"], 30.0);
    assert!(
        wait["properties"]["timeoutSeconds"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("seconds"))
    );
    let failures = &tool("list_failures")["inputSchema"];
    assert_eq!(failures["properties"]["limit"]["maximum"], 500);
    assert!(failures.get("required").is_none_or(|r| r == &json!([])), "{failures}");
    assert_eq!(tool("get_delivery")["annotations"]["readOnlyHint"], true);
    assert_eq!(tool("replay_failure")["inputSchema"]["required"], json!(["id"]));
}

/// Every `$ref` in `value` points into `root`'s `$defs`.
fn assert_refs_resolve(root: &Value, value: &Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref") {
                let name = reference.strip_prefix("#/$defs/").expect("a local ref");
                assert!(root["$defs"][name].is_object(), "{reference} does not resolve");
            }
            map.values().for_each(|inner| assert_refs_resolve(root, inner));
        }
        Value::Array(items) => items.iter().for_each(|inner| assert_refs_resolve(root, inner)),
        _ => {}
    }
}
