//! The OpenAPI 3.1 document served at `/openapi.json`, built from the code:
//! the route table below (which a test checks against the router, route
//! by route) and the contracts' JSON Schemas, one `POST
//! /v1/commands/{Type}` operation per command with its exact payload
//! schema.

use bosun_contracts::messages::{CATALOGUE, payload_schemas};
use bosun_contracts::routing::command_handler;
use serde_json::{Map, Value, json};

/// One documented operation (besides the per-command ones).
#[derive(Debug, Clone, Copy)]
pub struct RouteDoc {
    /// `get`, `post`, `delete`.
    pub method: &'static str,
    /// Path template, `{name}` for parameters.
    pub path: &'static str,
    /// One line.
    pub summary: &'static str,
    /// The scope needed (`None`: no key needed).
    pub scope: Option<&'static str>,
    /// Query parameters: (name, description).
    pub query: &'static [(&'static str, &'static str)],
    /// Whether it takes a JSON body, and what it is.
    pub body: Option<&'static str>,
    /// The success status and what it returns.
    pub success: (u16, &'static str),
}

const DEAD_LETTER_QUERY: &[(&str, &str)] = &[
    ("consumer", "only this consumer's"),
    ("type", "only this message type"),
    ("reason", "only this failure cause"),
    ("since", "only dead-lettered at or after this RFC 3339 time"),
    ("includeReplayed", "`true` to include replayed ones"),
    ("limit", "at most this many, newest first"),
];

/// Every route of the API but the per-command ones.
pub const ROUTES: &[RouteDoc] = &[
    RouteDoc {
        method: "get",
        path: "/healthz",
        summary: "Liveness: the process answers.",
        scope: None,
        query: &[],
        body: None,
        success: (200, "`{\"status\":\"ok\"}`"),
    },
    RouteDoc {
        method: "get",
        path: "/readyz",
        summary: "Readiness: transport, store and schema version reachable and correct, not draining (503 otherwise).",
        scope: None,
        query: &[],
        body: None,
        success: (200, "`{\"ready\":true,\"checks\":{...}}`"),
    },
    RouteDoc {
        method: "get",
        path: "/metrics",
        summary: "Prometheus metrics (text exposition format).",
        scope: None,
        query: &[],
        body: None,
        success: (200, "Prometheus text"),
    },
    RouteDoc {
        method: "get",
        path: "/openapi.json",
        summary: "This document.",
        scope: None,
        query: &[],
        body: None,
        success: (200, "OpenAPI 3.1 document"),
    },
    RouteDoc {
        method: "get",
        path: "/console",
        summary: "The operator console (HTML).",
        scope: None,
        query: &[],
        body: None,
        success: (200, "HTML page"),
    },
    RouteDoc {
        method: "get",
        path: "/v1/deliveries",
        summary: "Recent deliveries of the key's tenant, newest first, with their status.",
        scope: Some("deliveries:read"),
        query: &[("limit", "1 to 500, default 50")],
        body: None,
        success: (
            200,
            "`{\"deliveries\":[{correlationId, tenantId, startedBy, messageType, startedAt, status}]}`",
        ),
    },
    RouteDoc {
        method: "get",
        path: "/v1/deliveries/{correlationId}",
        summary: "A delivery's timeline, by message, and its status (in-progress, completed, failed).",
        scope: Some("deliveries:read"),
        query: &[],
        body: None,
        success: (200, "Delivery"),
    },
    RouteDoc {
        method: "get",
        path: "/v1/deliveries/{correlationId}/events",
        summary: "Server-sent events: `timeline` per timeline line, then `end` with the final status; the stream closes when the delivery completes or fails.",
        scope: Some("deliveries:read"),
        query: &[],
        body: None,
        success: (200, "text/event-stream"),
    },
    RouteDoc {
        method: "get",
        path: "/v1/sagas",
        summary: "Sagas of the key's tenant.",
        scope: Some("deliveries:read"),
        query: &[("kind", "release, gitops or probe")],
        body: None,
        success: (200, "`{\"sagas\":[...]}`"),
    },
    RouteDoc {
        method: "get",
        path: "/v1/sagas/{kind}/{key}",
        summary: "One saga: state, version and history.",
        scope: Some("deliveries:read"),
        query: &[],
        body: None,
        success: (200, "Saga"),
    },
    RouteDoc {
        method: "get",
        path: "/v1/sagas/{kind}/{key}/diagram",
        summary: "A saga's state machine (states, transitions with the message types that take them), the state it is in, the states it has been in and how often each transition was taken, reconstructed from the message type of each save, and its last 50 saves.",
        scope: Some("deliveries:read"),
        query: &[],
        body: None,
        success: (
            200,
            "`{kind, key, machine: {stateField, initial, states: [{value, name, description, final}], transitions: [{from, to, label, triggers}]}, current, visited, taken: [{transition, count}], recent: [{version, messageType, at, from, to, transition?}], pathFound}`",
        ),
    },
    RouteDoc {
        method: "get",
        path: "/v1/dead-letters",
        summary: "Dead letters of the key's tenant, newest first.",
        scope: Some("deliveries:read or dead-letters:replay"),
        query: DEAD_LETTER_QUERY,
        body: None,
        success: (200, "`{\"deadLetters\":[...]}`"),
    },
    RouteDoc {
        method: "get",
        path: "/v1/dead-letters/groups",
        summary: "Dead letters not yet replayed, grouped by root cause (fingerprint: the error's kind and its message with ids, numbers, hashes, paths and timestamps masked, plus consumer and message type), largest group first.",
        scope: Some("deliveries:read or dead-letters:replay"),
        query: DEAD_LETTER_QUERY,
        body: None,
        success: (
            200,
            "`{\"groups\":[{fingerprint, reason, consumer, messageType, pattern, count, firstAt, lastAt, description, sample, ids, trend: {start, bucketSeconds, counts}}]}`",
        ),
    },
    RouteDoc {
        method: "get",
        path: "/v1/dead-letters/groups/{fingerprint}",
        summary: "One failure group of the key's tenant.",
        scope: Some("deliveries:read or dead-letters:replay"),
        query: &[],
        body: None,
        success: (200, "Failure group"),
    },
    RouteDoc {
        method: "delete",
        path: "/v1/dead-letters/groups/{fingerprint}",
        summary: "Purges every dead letter of a failure group.",
        scope: Some("admin"),
        query: &[],
        body: None,
        success: (200, "`{\"fingerprint\": ..., \"purged\": [ids]}`"),
    },
    RouteDoc {
        method: "post",
        path: "/v1/dead-letters/groups/{fingerprint}/replay",
        summary: "Replays every dead letter of a failure group as a bulk replay; follow it at the returned Location.",
        scope: Some("dead-letters:replay"),
        query: &[],
        body: Some("optional `{\"rate\": N}` replays per second"),
        success: (202, "Replay job"),
    },
    RouteDoc {
        method: "get",
        path: "/v1/dead-letters/{id}",
        summary: "One dead letter (full id or unique prefix) with its original envelope.",
        scope: Some("deliveries:read or dead-letters:replay"),
        query: &[],
        body: None,
        success: (200, "Dead letter"),
    },
    RouteDoc {
        method: "delete",
        path: "/v1/dead-letters/{id}",
        summary: "Purges a dead letter and the transport's copy.",
        scope: Some("admin"),
        query: &[],
        body: None,
        success: (200, "`{\"purged\": id}`"),
    },
    RouteDoc {
        method: "post",
        path: "/v1/dead-letters/{id}/replay",
        summary: "Replays a dead letter to the queue or subscription it came from; with `{\"payload\": ...}` the payload is replaced first (edit-and-replay, validated against the contract).",
        scope: Some("dead-letters:replay"),
        query: &[],
        body: Some("optional `{\"payload\": {...}}`"),
        success: (
            200,
            "`{replayId, by, at, destination, brokerMessageId, deadLetterId, edited}`",
        ),
    },
    RouteDoc {
        method: "post",
        path: "/v1/dead-letters/replays",
        summary: "Starts replaying many dead letters at a limited rate; follow it at the returned Location.",
        scope: Some("dead-letters:replay"),
        query: &[],
        body: Some("`{\"ids\": [...]}` or `{\"filter\": {consumer, type, reason}}`, and `\"rate\"` per second"),
        success: (202, "Replay job"),
    },
    RouteDoc {
        method: "get",
        path: "/v1/replays",
        summary: "Bulk replay jobs, newest first, with their counts: stored, so every replica shows the same.",
        scope: Some("deliveries:read or dead-letters:replay"),
        query: &[("limit", "at most this many (default 50, at most 200)")],
        body: None,
        success: (200, "`{\"jobs\":[...]}`"),
    },
    RouteDoc {
        method: "get",
        path: "/v1/replays/{id}",
        summary: "A bulk replay job's progress (stored, the same from every replica): status, total, done, replayed, failed, who started, paused, resumed or cancelled it.",
        scope: Some("deliveries:read or dead-letters:replay"),
        query: &[],
        body: None,
        success: (200, "Replay job"),
    },
    RouteDoc {
        method: "post",
        path: "/v1/replays/{id}/pause",
        summary: "Pauses a running bulk replay job after the replay in progress (409 when it is not running).",
        scope: Some("dead-letters:replay"),
        query: &[],
        body: None,
        success: (200, "Replay job"),
    },
    RouteDoc {
        method: "post",
        path: "/v1/replays/{id}/resume",
        summary: "Resumes a paused bulk replay job where it stopped (409 when it is not paused).",
        scope: Some("dead-letters:replay"),
        query: &[],
        body: None,
        success: (200, "Replay job"),
    },
    RouteDoc {
        method: "post",
        path: "/v1/replays/{id}/cancel",
        summary: "Cancels a running or paused bulk replay job; what it did not replay stays dead-lettered (409 when it has ended).",
        scope: Some("dead-letters:replay"),
        query: &[],
        body: None,
        success: (200, "Replay job"),
    },
    RouteDoc {
        method: "post",
        path: "/mcp",
        summary: "Model Context Protocol (Streamable HTTP): JSON-RPC 2.0 requests, JSON answers. Tools: send_command, describe_command, get_delivery, wait_for_delivery, list_failures, get_failure, replay_failure, replay_failure_group, purge_failure_group.",
        scope: Some("per tool"),
        query: &[],
        body: Some("a JSON-RPC 2.0 message"),
        success: (200, "a JSON-RPC 2.0 answer (202 for notifications)"),
    },
];

/// A response with the API's error body.
fn error(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

fn error_responses(scoped: bool) -> Map<String, Value> {
    let mut responses = Map::new();
    if scoped {
        responses.insert("401".into(), error("no valid API key"));
        responses.insert("403".into(), error("the key lacks the scope"));
        responses.insert("404".into(), error("not found (or another tenant's)"));
        let mut limited = error("over the key's request budget (BOSUN_HTTP_RATE_LIMIT_*): retry after `Retry-After`");
        if let Some(object) = limited.as_object_mut() {
            object.insert(
                "headers".into(),
                json!({"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer", "minimum": 1}}}),
            );
        }
        responses.insert("429".into(), limited);
    }
    responses.insert("503".into(), error("store or transport unavailable"));
    responses
}

/// Moves a schema's `$defs` into `components.schemas` and points its refs there.
fn hoist(mut schema: Value, components: &mut Map<String, Value>) -> Value {
    if let Some(defs) = schema.as_object_mut().and_then(|o| o.remove("$defs"))
        && let Value::Object(defs) = defs
    {
        for (name, def) in defs {
            components.insert(name, relink(def));
        }
    }
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
    }
    relink(schema)
}

fn relink(value: Value) -> Value {
    match value {
        Value::String(text) if text.starts_with("#/$defs/") => {
            Value::String(text.replacen("#/$defs/", "#/components/schemas/", 1))
        }
        Value::Array(items) => Value::Array(items.into_iter().map(relink).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, relink(v))).collect()),
        other => other,
    }
}

/// The whole document.
pub fn document() -> Value {
    let mut components = Map::new();
    components.insert(
        "Error".into(),
        json!({
            "type": "object",
            "required": ["error"],
            "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
                "code": {"type": "string", "examples": ["invalid-field"]},
                "message": {"type": "string"},
                "field": {"type": "string", "description": "the offending field, e.g. payload.branch"}
            }}}
        }),
    );
    components.insert(
        "CommandAccepted".into(),
        json!({
            "type": "object",
            "required": ["messageId", "correlationId", "messageType", "destination", "tenantId", "links"],
            "properties": {
                "messageId": {"type": "string", "format": "uuid"},
                "correlationId": {"type": "string", "format": "uuid"},
                "messageType": {"type": "string"},
                "destination": {"type": "string"},
                "tenantId": {"type": "string"},
                "links": {"type": "object", "properties": {"delivery": {"type": "string"}, "events": {"type": "string"}}}
            }
        }),
    );
    let mut paths = Map::new();
    for route in ROUTES {
        let mut operation = Map::new();
        operation.insert("summary".into(), json!(route.summary));
        if let Some(scope) = route.scope {
            operation.insert("description".into(), json!(format!("Scope: `{scope}`.")));
            operation.insert("security".into(), json!([{"apiKey": []}]));
        } else {
            operation.insert("security".into(), json!([]));
        }
        let mut parameters: Vec<Value> = path_parameters(route.path);
        for (name, description) in route.query {
            parameters.push(json!({"name": name, "in": "query", "required": false, "description": description, "schema": {"type": "string"}}));
        }
        if !parameters.is_empty() {
            operation.insert("parameters".into(), Value::Array(parameters));
        }
        if let Some(body) = route.body {
            operation.insert(
                "requestBody".into(),
                json!({"description": body, "content": {"application/json": {"schema": {"type": "object"}}}}),
            );
        }
        let mut responses = error_responses(route.scope.is_some());
        responses.insert(route.success.0.to_string(), json!({"description": route.success.1}));
        if route.body.is_some() {
            for status in ["400", "413", "422"] {
                responses.insert(status.into(), error("malformed JSON / invalid field"));
            }
        }
        operation.insert("responses".into(), Value::Object(responses));
        let entry = paths.entry(route.path.to_owned()).or_insert_with(|| json!({}));
        if let Some(entry) = entry.as_object_mut() {
            entry.insert(route.method.into(), Value::Object(operation));
        }
    }
    for (name, schema) in payload_schemas() {
        let Some(spec) = CATALOGUE.iter().find(|spec| spec.message_type == name) else {
            continue;
        };
        if !spec.is_sendable() {
            continue;
        }
        let schema = hoist(json!(schema), &mut components);
        components.insert(name.to_owned(), schema);
        let consumer = command_handler(name).map_or("nobody", |c| c.name);
        let mut responses = error_responses(true);
        for status in ["400", "409", "413", "422"] {
            responses.insert(status.into(), error("see the error's code and field"));
        }
        responses.insert(
            "202".into(),
            json!({"description": "accepted (with `Idempotent-Replayed: true` when answering a repeated Idempotency-Key)",
                   "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CommandAccepted"}}}}),
        );
        paths.insert(
            format!("/v1/commands/{name}"),
            json!({"post": {
                "summary": spec.description,
                "description": format!("Scope: `commands:send`. Handled by the `{consumer}` consumer. Schema version {}.", spec.schema_version),
                "operationId": format!("send{name}"),
                "security": [{"apiKey": []}],
                "parameters": [
                    {"name": "Idempotency-Key", "in": "header", "required": false, "schema": {"type": "string", "maxLength": 255},
                     "description": "a retried request with the same key and body gets the first answer; another body gets 422"},
                    {"name": "X-Correlation-Id", "in": "header", "required": false, "schema": {"type": "string", "format": "uuid"},
                     "description": "join this delivery instead of starting one"},
                    {"name": "X-Bosun-Tenant", "in": "header", "required": false, "schema": {"type": "string"},
                     "description": "the tenant, for platform keys (tenant `*`)"}
                ],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{name}")}}}},
                "responses": responses
            }}),
        );
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "bosun",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Saga orchestration for software delivery: fire delivery commands, follow deliveries, triage and replay failures. Authenticate with `Authorization: Bearer <key>` (keys from `bosun keys create`)."
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer", "description": "a bosun API key, bsn_<id>_<secret>"}}
        }
    })
}

fn path_parameters(path: &str) -> Vec<Value> {
    path.split('/')
        .filter_map(|segment| segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_an_operation_with_its_schema_and_refs_resolve() {
        let doc = document();
        let commands = CATALOGUE.iter().filter(|s| s.is_sendable()).count();
        let command_paths = doc["paths"]
            .as_object()
            .unwrap()
            .keys()
            .filter(|p| p.starts_with("/v1/commands/"))
            .count();
        assert_eq!(command_paths, commands);
        for internal in ["ReleaseApprovalTimeout", "PollPipelineRun"] {
            assert!(
                doc["paths"][format!("/v1/commands/{internal}")].is_null(),
                "{internal} is internal"
            );
            assert!(
                doc["components"]["schemas"][internal].is_null(),
                "{internal} is internal"
            );
        }
        let create = &doc["paths"]["/v1/commands/CreateCommit"]["post"];
        assert_eq!(create["operationId"], "sendCreateCommit");
        assert!(
            create["responses"]["429"]["headers"]["Retry-After"].is_object(),
            "{create}"
        );
        let schema = &doc["components"]["schemas"]["CreateCommit"];
        assert!(schema["properties"]["branch"].is_object(), "{schema}");
        // Every $ref points at a component that exists.
        let text = doc.to_string();
        for part in text.split("\"$ref\":\"").skip(1) {
            let target = part.split('"').next().unwrap();
            let name = target.strip_prefix("#/components/schemas/").expect(target);
            assert!(doc["components"]["schemas"][name].is_object(), "dangling {target}");
        }
    }
}
