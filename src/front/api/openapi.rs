//! The OpenAPI 3.1 document served at `/openapi.json`, written from the
//! routes the API declares ([`super::routes`], which the router mounts
//! too): each route's [`Operation`], the `JsonSchema` of every type the
//! handlers write or read (`components/schemas`, by `$ref`), and the
//! contracts' JSON Schemas, one `POST /v1/commands/{Type}` operation per
//! command with its exact payload schema.
//!
//! Every operation has an `operationId`, its success and error responses
//! with their schemas (errors are always the `Error` schema) and, for JSON
//! bodies, a typed `requestBody` (`additionalProperties: false`: the
//! handlers read the same types and refuse what they do not list); the
//! routes that do not answer JSON say their media type. The handlers read
//! query strings by the same [`QueryDoc`] tables ([`super::query`]), so a
//! parameter's documented type is the one the server takes.
//! `tests/schemathesis.rs` sends generated requests to a live server and
//! fails on any answer the document does not describe.

use bosun_contracts::messages::{CATALOGUE, payload_schemas};
use bosun_contracts::routing::command_handler;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value, json};

use crate::front::gateway::{AcceptedCommand, ErrorBody};
use crate::ports::store::TimelineEntry;

/// The schema of a body: a `$ref` to its component, which the generator
/// keeps.
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// The schema of `T`, as a [`SchemaFn`].
pub fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
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

/// One documented operation (besides the per-command ones); its method
/// and path are its route's.
#[derive(Debug, Clone)]
pub struct Operation {
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
    pub replies: Vec<Reply>,
    /// The error statuses it answers, each with the `Error` body.
    pub errors: &'static [u16],
}

/// One entry of the document's `paths`, from one route.
#[derive(Debug, Clone, Copy)]
pub enum PathItem<'a> {
    /// One operation.
    Operation {
        /// `get`, `post`, `delete`.
        method: &'static str,
        /// Path template, `{name}` for parameters.
        path: &'static str,
        /// What it is.
        operation: &'a Operation,
    },
    /// One operation per sendable command, at `path` with its one
    /// parameter (`{type}`) written as the command's type.
    PerCommand {
        /// `post`.
        method: &'static str,
        /// Path template with one parameter.
        path: &'static str,
    },
}

/// A JSON answer of `schema`, without headers.
pub const fn json_reply(status: u16, description: &'static str, schema: SchemaFn) -> Reply {
    Reply {
        status,
        description,
        content: Content::Json(schema),
        headers: &[],
    }
}

/// A query parameter.
pub const fn query(name: &'static str, kind: QueryType, description: &'static str) -> QueryDoc {
    QueryDoc {
        name,
        kind,
        description,
    }
}

/// The kinds of saga: `bosun_sagas::SagaKind::NAMES`.
pub const SAGA_KINDS: &[&str] = &bosun_sagas::SagaKind::NAMES;

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

/// The document's paths, in the order of `items`, and its components in
/// the order they were made (a name made twice with two schemas is a bug
/// the unit test catches).
fn parts<'a>(items: impl IntoIterator<Item = PathItem<'a>>) -> (Map<String, Value>, Vec<(String, Value)>) {
    // Answers are described as bosun writes them, request bodies as it reads them.
    let mut answers = generator(SchemaSettings::draft2020_12().for_serialize());
    let mut requests = generator(SchemaSettings::draft2020_12().for_deserialize());
    let error_schema = answers.subschema_for::<ErrorBody>().to_value();
    let mut components = Vec::new();
    let mut paths = Map::new();
    for item in items {
        match item {
            PathItem::Operation {
                method,
                path,
                operation,
            } => {
                let operation = operation_object(path, operation, &mut answers, &mut requests, &error_schema);
                let entry = paths.entry(path.to_owned()).or_insert_with(|| json!({}));
                if let Some(entry) = entry.as_object_mut() {
                    entry.insert(method.into(), operation);
                }
            }
            PathItem::PerCommand { method, path } => {
                let accepted_schema = answers.subschema_for::<AcceptedCommand>().to_value();
                for (command_path, operation) in
                    command_operations(path, &accepted_schema, &error_schema, &mut components)
                {
                    paths.insert(command_path, json!({ method: operation }));
                }
            }
        }
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

/// The operation object of `operation` at `path`, its schemas made by
/// `answers` and `requests`.
fn operation_object(
    path: &str,
    operation: &Operation,
    answers: &mut SchemaGenerator,
    requests: &mut SchemaGenerator,
    error_schema: &Value,
) -> Value {
    let mut object = Map::new();
    object.insert("operationId".into(), json!(operation.operation_id));
    object.insert("summary".into(), json!(operation.summary));
    if let Some(scope) = operation.scope {
        object.insert("description".into(), json!(format!("Scope: `{scope}`.")));
        object.insert("security".into(), json!([{"apiKey": []}]));
    } else {
        object.insert("security".into(), json!([]));
    }
    let mut parameters: Vec<Value> = path_parameters(path);
    for parameter in operation.query {
        parameters.push(json!({"name": parameter.name, "in": "query", "required": false,
            "description": parameter.description, "schema": query_schema(parameter.kind)}));
    }
    if !parameters.is_empty() {
        object.insert("parameters".into(), Value::Array(parameters));
    }
    if let Some(body) = &operation.body
        && let Some(content) = content(&body.content, requests)
    {
        object.insert(
            "requestBody".into(),
            json!({"description": body.description, "required": body.required, "content": content}),
        );
    }
    let mut responses = Map::new();
    for reply in &operation.replies {
        let mut response = json!({"description": reply.description});
        if let Some(response) = response.as_object_mut() {
            if let Some(content) = content(&reply.content, answers) {
                response.insert("content".into(), content);
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
                response.insert("headers".into(), Value::Object(headers));
            }
        }
        responses.insert(reply.status.to_string(), response);
    }
    for status in operation.errors {
        responses.insert(status.to_string(), error(*status, error_schema));
    }
    object.insert("responses".into(), Value::Object(responses));
    Value::Object(object)
}

/// One operation per sendable command, at `template` with its parameter
/// written as the command's type, each with its payload schema (put in
/// `components`, with the schemas it uses).
fn command_operations(
    template: &str,
    accepted_schema: &Value,
    error_schema: &Value,
    components: &mut Vec<(String, Value)>,
) -> Vec<(String, Value)> {
    let mut operations = Vec::new();
    for (name, schema) in payload_schemas() {
        let Some(spec) = CATALOGUE.iter().find(|spec| spec.message_type == name) else {
            continue;
        };
        if !spec.is_sendable() {
            continue;
        }
        let schema = generator_friendly(hoist(json!(schema), components));
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
            responses.insert(status.to_string(), error(*status, error_schema));
        }
        operations.push((
            command_path(template, name),
            json!({
                "summary": spec.description,
                "description": format!(
                    "Scope: `{}`. Handled by the `{consumer}` consumer. Schema version {}.",
                    crate::front::access::decision_scope(spec.message_type).unwrap_or(crate::front::access::Scope::CommandsSend),
                    spec.schema_version
                ),
                "operationId": format!("send{name}"),
                "security": [{"apiKey": []}],
                "parameters": command_headers(),
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{name}")}}}},
                "responses": responses
            }),
        ));
    }
    operations
}

/// `template` (`/v1/commands/{type}`) with its parameter written as
/// `message_type`.
fn command_path(template: &str, message_type: &str) -> String {
    template
        .split('/')
        .map(|segment| {
            if segment.starts_with('{') {
                message_type
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
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

/// The whole document, its `paths` from `items` in their order.
pub fn document<'a>(items: impl IntoIterator<Item = PathItem<'a>>) -> Value {
    let (paths, parts) = parts(items);
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
        // An environment name (a DNS label).
        "environment" => json!({"type": "string", "pattern": "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", "maxLength": 63}),
        _ => json!({"type": "string", "minLength": 1}),
    }
}

/// One server-sent event of `GET /v1/deliveries/{correlationId}/events`:
/// `timeline` (a `TimelineEntry`), then `end` (the final status), or
/// `error` (the `Error` body) when the delivery can no longer be read.
pub fn delivery_event(generator: &mut SchemaGenerator) -> Schema {
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
pub fn json_rpc_message(_: &mut SchemaGenerator) -> Schema {
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
