//! The OpenAPI 3.1 document served at `/openapi.json`, built from the code:
//! the route table below (which the API's conformance test checks against
//! the router, route by route, and exercises), the `JsonSchema` of every
//! type the handlers write or read (`components/schemas`, by `$ref`), and
//! the contracts' JSON Schemas, one `POST /v1/commands/{Type}` operation per
//! command with its exact payload schema.
//!
//! Every operation has an `operationId`, its success and error responses
//! with their schemas (errors are always the `Error` schema) and, for JSON
//! bodies, a typed `requestBody` (`additionalProperties: false`: the
//! handlers read the same types and refuse what they do not list); the
//! routes that do not answer JSON say their media type. The handlers read
//! query strings by the same [`QueryDoc`] tables ([`super::query`]), so a
//! parameter's documented type is the one the server takes. A new route is
//! one more [`RouteDoc`] here (and one more case in the conformance test,
//! which fails without it); `tests/schemathesis.rs` sends generated
//! requests to a live server and fails on any answer the document does
//! not describe.
//!
//! Over 800 lines on purpose: the route table and the schema functions it
//! names, one entry per operation; it grows with the API.

use bosun_contracts::messages::{CATALOGUE, payload_schemas};
use bosun_contracts::routing::command_handler;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value, json};

use super::bodies::{
    BulkReplayBody, DeadLetterList, DeliveryList, FailureGroupList, GroupPurged, GroupReplayBody, Health, Purged,
    ReplayBody, SagaList,
};
use crate::front::gateway::jobs::MAX_JOBS_LISTED;
use crate::front::gateway::{
    AcceptedCommand, DeadLetterDetail, ErrorBody, FailureGroup, ReplayDone, ReplayJob, ReplayJobs, SagaDiagram,
};
use crate::front::ops::Readiness;
use crate::operator::Delivery;
use crate::ports::store::{SagaRecord, TimelineEntry};

/// The schema of a body: a `$ref` to its component, which the generator
/// keeps.
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// What a body is.
#[derive(Debug, Clone, Copy)]
pub enum Content {
    /// JSON of this schema.
    Json(SchemaFn),
    /// A JSON object the document does not describe further (a JSON-RPC
    /// message, this document).
    AnyJson,
    /// Not JSON: this media type (`text/html`), with no schema.
    Media(&'static str),
    /// Server-sent events (`text/event-stream`), each event as this
    /// schema describes it (`{event, data}`, `data` as JSON by
    /// `contentSchema`).
    Events(SchemaFn),
    /// No body.
    Empty,
}

/// One answer of an operation besides its errors.
#[derive(Debug, Clone, Copy)]
pub struct Reply {
    /// The status.
    pub status: u16,
    /// What it means.
    pub description: &'static str,
    /// Its body.
    pub content: Content,
    /// Headers it carries: (name, description).
    pub headers: &'static [(&'static str, &'static str)],
}

/// A query parameter's type: what the document says and what the
/// handlers take ([`super::query`] reads a query string by it).
#[derive(Debug, Clone, Copy)]
pub enum QueryType {
    /// A text, not empty.
    Text,
    /// One of these words, the document's component of this name.
    Enum(&'static str, &'static [&'static str]),
    /// A whole number from `minimum` (to `maximum`).
    Integer {
        /// The least.
        minimum: u64,
        /// The most, if any.
        maximum: Option<u64>,
    },
    /// `true` or `false`.
    Boolean,
    /// An RFC 3339 time.
    DateTime,
}

/// One query parameter.
#[derive(Debug, Clone, Copy)]
pub struct QueryDoc {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub kind: QueryType,
    /// What it does.
    pub description: &'static str,
}

/// A request body.
#[derive(Debug, Clone, Copy)]
pub struct Body {
    /// What it is.
    pub description: &'static str,
    /// Whether it may be left out (an empty body).
    pub required: bool,
    /// Its schema.
    pub content: Content,
}

/// One documented operation (besides the per-command ones).
#[derive(Debug, Clone, Copy)]
pub struct RouteDoc {
    /// `get`, `post`, `delete`.
    pub method: &'static str,
    /// Path template, `{name}` for parameters.
    pub path: &'static str,
    /// The operation's id, a camelCase verb (`listDeliveries`).
    pub operation_id: &'static str,
    /// One line.
    pub summary: &'static str,
    /// The scope needed (`None`: no key needed).
    pub scope: Option<&'static str>,
    /// Query parameters.
    pub query: &'static [QueryDoc],
    /// Its JSON body, if it takes one.
    pub body: Option<Body>,
    /// Its answers besides errors.
    pub replies: &'static [Reply],
    /// The error statuses it answers, each with the `Error` body.
    pub errors: &'static [u16],
}

const fn json_reply(status: u16, description: &'static str, schema: SchemaFn) -> Reply {
    Reply {
        status,
        description,
        content: Content::Json(schema),
        headers: &[],
    }
}

const fn query(name: &'static str, kind: QueryType, description: &'static str) -> QueryDoc {
    QueryDoc {
        name,
        kind,
        description,
    }
}

/// The kinds of saga (`bosun_sagas::SagaKind::ALL`).
pub const SAGA_KINDS: &[&str] = &["release", "gitops", "probe"];

/// The most a list of deliveries or dead letters shows at once.
pub const MAX_LISTED: u64 = 500;

/// `GET /v1/dead-letters` and `GET /v1/dead-letters/groups`.
pub const DEAD_LETTER_QUERY: &[QueryDoc] = &[
    query("consumer", QueryType::Text, "only this consumer's"),
    query("type", QueryType::Text, "only this message type"),
    query("reason", QueryType::Text, "only this failure cause"),
    query(
        "since",
        QueryType::DateTime,
        "only dead-lettered at or after this RFC 3339 time",
    ),
    query("includeReplayed", QueryType::Boolean, "`true` to include replayed ones"),
    query(
        "limit",
        QueryType::Integer {
            minimum: 1,
            maximum: Some(MAX_LISTED),
        },
        "at most this many, newest first",
    ),
];

/// `GET /v1/deliveries`.
pub const DELIVERIES_QUERY: &[QueryDoc] = &[query(
    "limit",
    QueryType::Integer {
        minimum: 1,
        maximum: Some(MAX_LISTED),
    },
    "at most this many (default 50)",
)];

/// `GET /v1/sagas`.
pub const SAGAS_QUERY: &[QueryDoc] = &[query(
    "kind",
    QueryType::Enum("SagaKind", SAGA_KINDS),
    "only sagas of this kind",
)];

/// `GET /v1/replays`.
pub const REPLAY_JOBS_QUERY: &[QueryDoc] = &[query(
    "limit",
    QueryType::Integer {
        minimum: 1,
        maximum: Some(MAX_JOBS_LISTED as u64),
    },
    "at most this many (default 50)",
)];

/// The errors of a read by id: no key, no scope, not found, a query
/// parameter (it takes none), over budget, store down.
const READ_ONE: &[u16] = &[401, 403, 404, 422, 429, 503];
/// The errors of a list with validated query parameters.
const READ_LIST: &[u16] = &[401, 403, 422, 429, 503];
/// The 202 of a bulk replay job, with where to follow it.
const JOB_ACCEPTED: &[Reply] = &[Reply {
    status: 202,
    description: "the replay job, started; follow it at `Location`",
    content: Content::Json(schema::<ReplayJob>),
    headers: &[("Location", "`/v1/replays/{id}`")],
}];

/// Every route of the API but the per-command ones.
pub const ROUTES: &[RouteDoc] = &[
    RouteDoc {
        method: "get",
        path: "/healthz",
        operation_id: "getHealth",
        summary: "Liveness: the process answers.",
        scope: None,
        query: &[],
        body: None,
        replies: &[json_reply(200, "the process answers", schema::<Health>)],
        errors: &[],
    },
    RouteDoc {
        method: "get",
        path: "/readyz",
        operation_id: "getReadiness",
        summary: "Readiness: transport, store and schema version reachable and correct, not draining (503 otherwise).",
        scope: None,
        query: &[],
        body: None,
        replies: &[
            json_reply(200, "ready", schema::<Readiness>),
            json_reply(503, "not ready: the failing checks say why", schema::<Readiness>),
        ],
        errors: &[],
    },
    RouteDoc {
        method: "get",
        path: "/metrics",
        operation_id: "getMetrics",
        summary: "Prometheus metrics (text exposition format 0.0.4).",
        scope: None,
        query: &[],
        body: None,
        replies: &[Reply {
            status: 200,
            description: "Prometheus text",
            content: Content::Media("text/plain"),
            headers: &[],
        }],
        errors: &[],
    },
    RouteDoc {
        method: "get",
        path: "/openapi.json",
        operation_id: "getOpenApiDocument",
        summary: "This document.",
        scope: None,
        query: &[],
        body: None,
        replies: &[Reply {
            status: 200,
            description: "OpenAPI 3.1 document",
            content: Content::AnyJson,
            headers: &[],
        }],
        errors: &[],
    },
    RouteDoc {
        method: "get",
        path: "/console",
        operation_id: "getConsole",
        summary: "The operator console (HTML).",
        scope: None,
        query: &[],
        body: None,
        replies: &[Reply {
            status: 200,
            description: "HTML page",
            content: Content::Media("text/html"),
            headers: &[],
        }],
        errors: &[],
    },
    RouteDoc {
        method: "get",
        path: "/v1/deliveries",
        operation_id: "listDeliveries",
        summary: "Recent deliveries of the key's tenant, newest first, with their status.",
        scope: Some("deliveries:read"),
        query: DELIVERIES_QUERY,
        body: None,
        replies: &[json_reply(200, "the deliveries", schema::<DeliveryList>)],
        errors: READ_LIST,
    },
    RouteDoc {
        method: "get",
        path: "/v1/deliveries/{correlationId}",
        operation_id: "getDelivery",
        summary: "A delivery's timeline, by message, and its status (in-progress, completed, failed).",
        scope: Some("deliveries:read"),
        query: &[],
        body: None,
        replies: &[json_reply(200, "the delivery", schema::<Delivery>)],
        errors: READ_ONE,
    },
    RouteDoc {
        method: "get",
        path: "/v1/deliveries/{correlationId}/events",
        operation_id: "streamDeliveryEvents",
        summary: "Server-sent events: `timeline` per timeline line (a TimelineEntry), then `end` with the final status (`{\"status\"}`); the stream closes when the delivery completes or fails.",
        scope: Some("deliveries:read"),
        query: &[],
        body: None,
        replies: &[Reply {
            status: 200,
            description: "an event stream; each event is one of `DeliveryEvent`",
            content: Content::Events(delivery_event),
            headers: &[],
        }],
        errors: READ_ONE,
    },
    RouteDoc {
        method: "get",
        path: "/v1/sagas",
        operation_id: "listSagas",
        summary: "Sagas of the key's tenant.",
        scope: Some("deliveries:read"),
        query: SAGAS_QUERY,
        body: None,
        replies: &[json_reply(200, "the sagas", schema::<SagaList>)],
        errors: READ_LIST,
    },
    RouteDoc {
        method: "get",
        path: "/v1/sagas/{kind}/{key}",
        operation_id: "getSaga",
        summary: "One saga: state, version and history.",
        scope: Some("deliveries:read"),
        query: &[],
        body: None,
        replies: &[json_reply(200, "the saga", schema::<SagaRecord>)],
        errors: READ_ONE,
    },
    RouteDoc {
        method: "get",
        path: "/v1/sagas/{kind}/{key}/diagram",
        operation_id: "getSagaDiagram",
        summary: "A saga's state machine (states, transitions with the message types that take them), the state it is in, the states it has been in and how often each transition was taken, reconstructed from the message type of each save, and its last 50 saves.",
        scope: Some("deliveries:read"),
        query: &[],
        body: None,
        replies: &[json_reply(200, "the diagram", schema::<SagaDiagram>)],
        errors: &[401, 403, 404, 422, 429, 503],
    },
    RouteDoc {
        method: "get",
        path: "/v1/dead-letters",
        operation_id: "listDeadLetters",
        summary: "Dead letters of the key's tenant, newest first.",
        scope: Some("deliveries:read or dead-letters:replay"),
        query: DEAD_LETTER_QUERY,
        body: None,
        replies: &[json_reply(200, "the dead letters", schema::<DeadLetterList>)],
        errors: READ_LIST,
    },
    RouteDoc {
        method: "get",
        path: "/v1/dead-letters/groups",
        operation_id: "listFailureGroups",
        summary: "Dead letters not yet replayed, grouped by root cause (fingerprint: the error's kind and its message with ids, numbers, hashes, paths and timestamps masked, plus consumer and message type), largest group first.",
        scope: Some("deliveries:read or dead-letters:replay"),
        query: DEAD_LETTER_QUERY,
        body: None,
        replies: &[json_reply(200, "the groups", schema::<FailureGroupList>)],
        errors: READ_LIST,
    },
    RouteDoc {
        method: "get",
        path: "/v1/dead-letters/groups/{fingerprint}",
        operation_id: "getFailureGroup",
        summary: "One failure group of the key's tenant.",
        scope: Some("deliveries:read or dead-letters:replay"),
        query: &[],
        body: None,
        replies: &[json_reply(200, "the group", schema::<FailureGroup>)],
        errors: READ_ONE,
    },
    RouteDoc {
        method: "delete",
        path: "/v1/dead-letters/groups/{fingerprint}",
        operation_id: "purgeFailureGroup",
        summary: "Purges every dead letter of a failure group.",
        scope: Some("admin"),
        query: &[],
        body: None,
        replies: &[json_reply(200, "the dead letters purged", schema::<GroupPurged>)],
        errors: READ_ONE,
    },
    RouteDoc {
        method: "post",
        path: "/v1/dead-letters/groups/{fingerprint}/replay",
        operation_id: "replayFailureGroup",
        summary: "Replays every dead letter of a failure group as a bulk replay; follow it at the returned Location.",
        scope: Some("dead-letters:replay"),
        query: &[],
        body: Some(Body {
            description: "optional: `{\"rate\": N}` replays per second",
            required: false,
            content: Content::Json(schema::<GroupReplayBody>),
        }),
        replies: JOB_ACCEPTED,
        errors: &[400, 401, 403, 404, 413, 422, 429, 503],
    },
    RouteDoc {
        method: "get",
        path: "/v1/dead-letters/{id}",
        operation_id: "getDeadLetter",
        summary: "One dead letter (full id or unique prefix) with its original envelope.",
        scope: Some("deliveries:read or dead-letters:replay"),
        query: &[],
        body: None,
        replies: &[json_reply(200, "the dead letter", schema::<DeadLetterDetail>)],
        errors: &[401, 403, 404, 409, 422, 429, 503],
    },
    RouteDoc {
        method: "delete",
        path: "/v1/dead-letters/{id}",
        operation_id: "purgeDeadLetter",
        summary: "Purges a dead letter and the transport's copy.",
        scope: Some("admin"),
        query: &[],
        body: None,
        replies: &[json_reply(200, "the dead letter purged", schema::<Purged>)],
        errors: &[401, 403, 404, 409, 422, 429, 503],
    },
    RouteDoc {
        method: "post",
        path: "/v1/dead-letters/{id}/replay",
        operation_id: "replayDeadLetter",
        summary: "Replays a dead letter to the queue or subscription it came from; with `{\"payload\": ...}` the payload is replaced first (edit-and-replay, validated against the contract).",
        scope: Some("dead-letters:replay"),
        query: &[],
        body: Some(Body {
            description: "optional: `{\"payload\": {...}}`, the edited payload",
            required: false,
            content: Content::Json(schema::<ReplayBody>),
        }),
        replies: &[json_reply(200, "the replay", schema::<ReplayDone>)],
        errors: &[400, 401, 403, 404, 409, 413, 422, 429, 503],
    },
    RouteDoc {
        method: "post",
        path: "/v1/dead-letters/replays",
        operation_id: "startBulkReplay",
        summary: "Starts replaying many dead letters at a limited rate; follow it at the returned Location.",
        scope: Some("dead-letters:replay"),
        query: &[],
        body: Some(Body {
            description: "`{\"ids\": [...]}` or `{\"filter\": {consumer, type, reason, since}}`, and `\"rate\"` per second",
            required: true,
            content: Content::Json(schema::<BulkReplayBody>),
        }),
        replies: JOB_ACCEPTED,
        errors: &[400, 401, 403, 404, 413, 422, 429, 503],
    },
    RouteDoc {
        method: "get",
        path: "/v1/replays",
        operation_id: "listReplayJobs",
        summary: "Bulk replay jobs, newest first, with their counts: stored, so every replica shows the same.",
        scope: Some("deliveries:read or dead-letters:replay"),
        query: REPLAY_JOBS_QUERY,
        body: None,
        replies: &[json_reply(200, "the jobs, newest first", schema::<ReplayJobs>)],
        errors: &[401, 403, 422, 429, 503],
    },
    RouteDoc {
        method: "get",
        path: "/v1/replays/{id}",
        operation_id: "getReplayJob",
        summary: "A bulk replay job's progress (stored, the same from every replica): status, total, done, replayed, failed, who started, paused, resumed or cancelled it.",
        scope: Some("deliveries:read or dead-letters:replay"),
        query: &[],
        body: None,
        replies: &[json_reply(200, "the replay job", schema::<ReplayJob>)],
        errors: READ_ONE,
    },
    RouteDoc {
        method: "post",
        path: "/v1/replays/{id}/pause",
        operation_id: "pauseReplayJob",
        summary: "Pauses a running bulk replay job after the replay in progress (409 when it is not running).",
        scope: Some("dead-letters:replay"),
        query: &[],
        body: None,
        replies: &[json_reply(200, "the paused job", schema::<ReplayJob>)],
        errors: &[401, 403, 404, 409, 422, 429, 503],
    },
    RouteDoc {
        method: "post",
        path: "/v1/replays/{id}/resume",
        operation_id: "resumeReplayJob",
        summary: "Resumes a paused bulk replay job where it stopped (409 when it is not paused).",
        scope: Some("dead-letters:replay"),
        query: &[],
        body: None,
        replies: &[json_reply(200, "the resumed job", schema::<ReplayJob>)],
        errors: &[401, 403, 404, 409, 422, 429, 503],
    },
    RouteDoc {
        method: "post",
        path: "/v1/replays/{id}/cancel",
        operation_id: "cancelReplayJob",
        summary: "Cancels a running or paused bulk replay job; what it did not replay stays dead-lettered (409 when it has ended).",
        scope: Some("dead-letters:replay"),
        query: &[],
        body: None,
        replies: &[json_reply(200, "the cancelled job", schema::<ReplayJob>)],
        errors: &[401, 403, 404, 409, 422, 429, 503],
    },
    RouteDoc {
        method: "post",
        path: "/mcp",
        operation_id: "callMcp",
        summary: "Model Context Protocol (Streamable HTTP): JSON-RPC 2.0 requests, JSON answers. Tools: send_command, describe_command, get_delivery, wait_for_delivery, list_failures, get_failure, replay_failure, replay_failure_group, purge_failure_group.",
        scope: Some("per tool"),
        query: &[],
        body: Some(Body {
            description: "a JSON-RPC 2.0 message (send `Accept: application/json, text/event-stream` and `Content-Type: application/json`, as the MCP specification asks)",
            required: true,
            content: Content::Json(json_rpc_message),
        }),
        replies: &[
            Reply {
                status: 200,
                description: "a JSON-RPC 2.0 answer",
                content: Content::AnyJson,
                headers: &[],
            },
            Reply {
                status: 202,
                description: "a notification, accepted",
                content: Content::Empty,
                headers: &[],
            },
            Reply {
                status: 400,
                description: "the body is not one JSON-RPC 2.0 message: -32700 (not JSON, or nested deeper than 128 levels) or -32600 (not a request, notification or response; a batch), as a JSON-RPC error",
                content: Content::Json(schema::<crate::front::mcp::jsonrpc::ErrorResponse>),
                headers: &[],
            },
            Reply {
                status: 406,
                description: "the request's `Accept` does not list both application/json and text/event-stream (-32600, as a JSON-RPC error)",
                content: Content::Json(schema::<crate::front::mcp::jsonrpc::ErrorResponse>),
                headers: &[],
            },
            Reply {
                status: 413,
                description: "the body is over BOSUN_HTTP_MAX_BODY_BYTES (-32600, as a JSON-RPC error)",
                content: Content::Json(schema::<crate::front::mcp::jsonrpc::ErrorResponse>),
                headers: &[],
            },
            Reply {
                status: 415,
                description: "the request's `Content-Type` is not application/json (-32600, as a JSON-RPC error)",
                content: Content::Json(schema::<crate::front::mcp::jsonrpc::ErrorResponse>),
                headers: &[],
            },
        ],
        errors: &[401, 403, 429],
    },
];

/// What an error status means, wherever it is answered.
fn error_description(status: u16) -> &'static str {
    match status {
        400 => "the body is not JSON",
        401 => "no valid API key (`WWW-Authenticate: Bearer`)",
        403 => {
            "the key lacks the scope (for a command also: a tenant's key naming another tenant in `X-Bosun-Tenant`; for `/mcp`: a browser origin that may not call it)"
        }
        404 => "not found (or another tenant's)",
        409 => {
            "a conflict: an id prefix that names several, a concurrent change, or a request with the same Idempotency-Key still in progress"
        }
        413 => "the body is over BOSUN_HTTP_MAX_BODY_BYTES",
        422 => "an invalid field, query parameter or header, named in `error.field` (unknown ones too)",
        429 => "over the key's request budget (BOSUN_HTTP_RATE_LIMIT_*): retry after `Retry-After`",
        503 => "store or transport unavailable",
        _ => "an error",
    }
}

/// A response with the API's error body.
fn error(status: u16, error_schema: &Value) -> Value {
    let mut response = json!({
        "description": error_description(status),
        "content": {"application/json": {"schema": error_schema}}
    });
    let headers = match status {
        401 => json!({"WWW-Authenticate": {"description": "`Bearer realm=\"bosun\"`", "schema": {"type": "string"}}}),
        429 => json!({"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer", "minimum": 1}}}),
        _ => return response,
    };
    if let Some(object) = response.as_object_mut() {
        object.insert("headers".into(), headers);
    }
    response
}

/// The `content` of a body, `None` for no body.
fn content(content: &Content, generator: &mut SchemaGenerator) -> Option<Value> {
    match content {
        Content::Json(schema) => Some(json!({"application/json": {"schema": schema(generator)}})),
        Content::AnyJson => Some(json!({"application/json": {"schema": {"type": "object"}}})),
        Content::Media(media) => Some(json!({ *media: {"schema": {"type": "string"}} })),
        Content::Events(schema) => Some(json!({"text/event-stream": {"schema": schema(generator)}})),
        Content::Empty => None,
    }
}

fn query_schema(kind: QueryType) -> Value {
    match kind {
        QueryType::Text => json!({"type": "string", "minLength": 1}),
        QueryType::Enum(name, _) => json!({"$ref": format!("#/components/schemas/{name}")}),
        QueryType::Integer { minimum, maximum } => match maximum {
            Some(maximum) => json!({"type": "integer", "minimum": minimum, "maximum": maximum}),
            None => json!({"type": "integer", "minimum": minimum}),
        },
        QueryType::Boolean => json!({"type": "boolean"}),
        QueryType::DateTime => json!({"type": "string", "format": "date-time"}),
    }
}

/// Moves a schema's `$defs` into `components` and points its refs there.
fn hoist(mut schema: Value, components: &mut Vec<(String, Value)>) -> Value {
    if let Some(defs) = schema.as_object_mut().and_then(|o| o.remove("$defs"))
        && let Value::Object(defs) = defs
    {
        for (name, def) in defs {
            components.push((name, relink(def)));
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

/// The same schema, with an `anyOf` or `oneOf` that sits beside the
/// object's `properties` (CreateCommit: `files` or `delete`) moved into an
/// `allOf` with them: what it accepts is the same, and client generators
/// make one model of the properties instead of a union of partial ones.
fn generator_friendly(schema: Value) -> Value {
    let Value::Object(mut object) = schema else {
        return schema;
    };
    if !object.contains_key("properties") {
        return Value::Object(object);
    }
    let mut alternatives = Vec::new();
    for combinator in ["anyOf", "oneOf"] {
        if let Some(choice) = object.remove(combinator) {
            alternatives.push(json!({ combinator: choice }));
        }
    }
    if alternatives.is_empty() {
        return Value::Object(object);
    }
    let mut outer = Map::new();
    for annotation in ["title", "description"] {
        if let Some(value) = object.remove(annotation) {
            outer.insert(annotation.into(), value);
        }
    }
    let mut all = vec![Value::Object(object)];
    all.extend(alternatives);
    outer.insert("allOf".into(), Value::Array(all));
    Value::Object(outer)
}

/// A generator whose `$ref`s point into `components/schemas`, with
/// string enums as `enum` lists.
fn generator(settings: SchemaSettings) -> SchemaGenerator {
    settings
        .with(|settings| settings.definitions_path = "/components/schemas/".into())
        .with_transform(string_enums)
        .with_transform(plain_links)
        .into_generator()
}

/// Descriptions without rustdoc's link brackets (``[`ReplayRecord::by`]``
/// reads `` `ReplayRecord::by` ``): the doc comments are for Rust readers
/// first.
fn plain_links(schema: &mut Schema) {
    schemars::transform::transform_subschemas(&mut plain_links, schema);
    if let Some(Value::String(description)) = schema.get_mut("description") {
        *description = description.replace("[`", "`").replace("`]", "`");
    }
}

/// A `oneOf` of documented string constants (what schemars makes of an
/// enum whose variants have doc comments) as a string `enum`, each value's
/// meaning appended to the description: the same values, and a form every
/// client generator reads as one enum type.
fn string_enums(schema: &mut Schema) {
    schemars::transform::transform_subschemas(&mut string_enums, schema);
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let Some(Value::Array(choices)) = object.get("oneOf") else {
        return;
    };
    let mut values = Vec::new();
    let mut meanings = Vec::new();
    for choice in choices {
        let Some(choice) = choice.as_object() else {
            return;
        };
        let Some(Value::String(value)) = choice.get("const") else {
            return;
        };
        if choice
            .keys()
            .any(|key| !matches!(key.as_str(), "const" | "type" | "description"))
        {
            return;
        }
        if let Some(Value::String(meaning)) = choice.get("description") {
            meanings.push(format!("- `{value}`: {}", meaning.replace('\n', " ")));
        }
        values.push(Value::String(value.clone()));
    }
    object.remove("oneOf");
    object.insert("type".into(), json!("string"));
    object.insert("enum".into(), Value::Array(values));
    if !meanings.is_empty() {
        let mut description = object
            .get("description")
            .and_then(Value::as_str)
            .map(|text| format!("{text}\n\n"))
            .unwrap_or_default();
        description.push_str(&meanings.join("\n"));
        object.insert("description".into(), json!(description));
    }
}

/// The document's paths and its components in the order they were made
/// (a name made twice with two schemas is a bug the unit test catches).
fn parts() -> (Map<String, Value>, Vec<(String, Value)>) {
    // Answers are described as bosun writes them, request bodies as it reads them.
    let mut answers = generator(SchemaSettings::draft2020_12().for_serialize());
    let mut requests = generator(SchemaSettings::draft2020_12().for_deserialize());
    let error_schema = answers.subschema_for::<ErrorBody>().to_value();
    let mut components = Vec::new();
    let mut paths = Map::new();
    for route in ROUTES {
        let mut operation = Map::new();
        operation.insert("operationId".into(), json!(route.operation_id));
        operation.insert("summary".into(), json!(route.summary));
        if let Some(scope) = route.scope {
            operation.insert("description".into(), json!(format!("Scope: `{scope}`.")));
            operation.insert("security".into(), json!([{"apiKey": []}]));
        } else {
            operation.insert("security".into(), json!([]));
        }
        let mut parameters: Vec<Value> = path_parameters(route.path);
        for parameter in route.query {
            parameters.push(json!({"name": parameter.name, "in": "query", "required": false,
                "description": parameter.description, "schema": query_schema(parameter.kind)}));
        }
        if !parameters.is_empty() {
            operation.insert("parameters".into(), Value::Array(parameters));
        }
        if let Some(body) = &route.body
            && let Some(content) = content(&body.content, &mut requests)
        {
            operation.insert(
                "requestBody".into(),
                json!({"description": body.description, "required": body.required, "content": content}),
            );
        }
        let mut responses = Map::new();
        for reply in route.replies {
            let mut response = json!({"description": reply.description});
            if let Some(object) = response.as_object_mut() {
                if let Some(content) = content(&reply.content, &mut answers) {
                    object.insert("content".into(), content);
                }
                if !reply.headers.is_empty() {
                    let headers: Map<String, Value> = reply
                        .headers
                        .iter()
                        .map(|(name, description)| {
                            (
                                (*name).to_owned(),
                                json!({"description": description, "schema": {"type": "string"}}),
                            )
                        })
                        .collect();
                    object.insert("headers".into(), Value::Object(headers));
                }
            }
            responses.insert(reply.status.to_string(), response);
        }
        for status in route.errors {
            responses.insert(status.to_string(), error(*status, &error_schema));
        }
        operation.insert("responses".into(), Value::Object(responses));
        let entry = paths.entry(route.path.to_owned()).or_insert_with(|| json!({}));
        if let Some(entry) = entry.as_object_mut() {
            entry.insert(route.method.into(), Value::Object(operation));
        }
    }
    let accepted_schema = answers.subschema_for::<AcceptedCommand>().to_value();
    for (name, schema) in payload_schemas() {
        let Some(spec) = CATALOGUE.iter().find(|spec| spec.message_type == name) else {
            continue;
        };
        if !spec.is_sendable() {
            continue;
        }
        let schema = generator_friendly(hoist(json!(schema), &mut components));
        components.push((name.to_owned(), schema));
        let consumer = command_handler(name).map_or("nobody", |c| c.name);
        let mut responses = Map::new();
        responses.insert(
            "202".into(),
            json!({"description": "accepted (with `Idempotent-Replayed: true` when answering a repeated Idempotency-Key)",
                   "headers": {"Location": {"description": "the delivery: `/v1/deliveries/{correlationId}`", "schema": {"type": "string"}}},
                   "content": {"application/json": {"schema": accepted_schema}}}),
        );
        for status in COMMAND_ERRORS {
            responses.insert(status.to_string(), error(*status, &error_schema));
        }
        paths.insert(
            format!("/v1/commands/{name}"),
            json!({"post": {
                "summary": spec.description,
                "description": format!("Scope: `commands:send` (`releases:approve` for ApproveRelease and RejectRelease). Handled by the `{consumer}` consumer. Schema version {}.", spec.schema_version),
                "operationId": format!("send{name}"),
                "security": [{"apiKey": []}],
                "parameters": command_headers(),
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{name}")}}}},
                "responses": responses
            }}),
        );
    }
    components.push((
        "SagaKind".to_owned(),
        json!({"type": "string", "enum": SAGA_KINDS, "description": "A kind of saga: `release` (keyed by releaseId), `gitops` (by environment) or `probe` (by probe group)."}),
    ));
    for (name, schema) in answers
        .take_definitions(true)
        .into_iter()
        .chain(requests.take_definitions(true))
    {
        components.push((name, schema));
    }
    (paths, components)
}

/// The headers a command takes, as `send_command` in `mod.rs` reads them.
fn command_headers() -> Value {
    let mut tenant = Schema::from(Map::from_iter([("type".to_owned(), json!("string"))]));
    bosun_contracts::schema_rules::tenant_id(&mut tenant);
    let mut tenant = tenant.to_value();
    if let Some(object) = tenant.as_object_mut() {
        object.insert("minLength".into(), json!(1));
    }
    json!([
        {"name": "Idempotency-Key", "in": "header", "required": false,
         "schema": {"type": "string", "minLength": 1, "maxLength": super::IDEMPOTENCY_KEY_MAX_CHARS, "pattern": "^[!-~]+$"},
         "description": "a retried request with the same key and body gets the first answer; another body gets 422 (visible ASCII, no spaces)"},
        {"name": "X-Correlation-Id", "in": "header", "required": false, "schema": {"type": "string", "format": "uuid"},
         "description": "join this delivery instead of starting one"},
        {"name": "X-Bosun-Tenant", "in": "header", "required": false, "schema": tenant,
         "description": "the tenant: a platform key's (tenant `*`) must name it; a tenant's key may name only its own (403 otherwise)"}
    ])
}

/// The error statuses of `POST /v1/commands/{Type}`.
pub const COMMAND_ERRORS: &[u16] = &[400, 401, 403, 404, 409, 413, 422, 429, 503];

/// The whole document.
pub fn document() -> Value {
    let (paths, parts) = parts();
    let mut components = Map::new();
    for (name, schema) in parts {
        components.entry(name).or_insert(schema);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "bosun",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Saga orchestration for software delivery: fire delivery commands, follow deliveries, triage and replay failures. Authenticate with `Authorization: Bearer <key>` (keys from `bosun keys create`). Every error is the `Error` schema: `{\"error\": {\"code\", \"message\", \"field\"?}}`."
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
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": path_schema(path, name)}))
        .collect()
}

/// What a path parameter takes. A value outside it is "not found" (404),
/// or 422 for a saga's kind: none names anything.
fn path_schema(path: &str, name: &str) -> Value {
    match name {
        "kind" => json!({"$ref": "#/components/schemas/SagaKind"}),
        // A full dead letter id or a unique prefix of at least 4 characters.
        "id" if path.starts_with("/v1/dead-letters/") => json!({"type": "string", "pattern": "^[0-9a-fA-F-]{4,}$"}),
        "id" => json!({"type": "string", "format": "uuid"}),
        // The first 16 hex digits of a SHA-256.
        "fingerprint" => json!({"type": "string", "pattern": "^[0-9a-f]{16}$"}),
        _ => json!({"type": "string", "minLength": 1}),
    }
}

/// One server-sent event of `GET /v1/deliveries/{correlationId}/events`:
/// `timeline` (a `TimelineEntry`), then `end` (the final status), or
/// `error` (the `Error` body) when the delivery can no longer be read.
fn delivery_event(generator: &mut SchemaGenerator) -> Schema {
    let line = generator.subschema_for::<TimelineEntry>().to_value();
    let error = generator.subschema_for::<ErrorBody>().to_value();
    let event = |name: &str, data: Value| {
        json!({
            "type": "object",
            "required": ["event", "data"],
            "properties": {
                "event": {"const": name},
                "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": data},
                "id": {"type": "string"},
                "retry": {"type": "integer"}
            }
        })
    };
    let end = json!({
        "type": "object",
        "required": ["status"],
        "additionalProperties": false,
        "properties": {"status": {"type": "string", "enum": ["completed", "failed"]}}
    });
    let schema = json!({
        "title": "DeliveryEvent",
        "oneOf": [event("timeline", line), event("end", end), event("error", error)]
    });
    Schema::try_from(schema).unwrap_or_default()
}

/// A JSON-RPC 2.0 message to `/mcp`: a request (with an `id`) or a
/// notification (without).
fn json_rpc_message(_: &mut SchemaGenerator) -> Schema {
    let schema = json!({
        "title": "JsonRpcMessage",
        "type": "object",
        "required": ["jsonrpc", "method"],
        "properties": {
            "jsonrpc": {"const": "2.0"},
            // The MCP SDK holds a numeric id in an `i64`.
            "id": {"oneOf": [
                {"type": "string"},
                {"type": "integer", "minimum": i64::MIN, "maximum": i64::MAX}
            ]},
            "method": {"type": "string"},
            "params": {"type": ["object", "null"]}
        }
    });
    Schema::try_from(schema).unwrap_or_default()
}

#[cfg(test)]
mod tests;
