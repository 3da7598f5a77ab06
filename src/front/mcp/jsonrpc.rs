//! The JSON-RPC check in front of `/mcp`: a POST whose body is not one
//! JSON-RPC 2.0 message is answered as the protocol says, with a JSON-RPC
//! error body, before the MCP SDK sees it (the SDK answers any body it
//! cannot read with `415` and plain text).
//!
//! - a body that is not JSON (or nested deeper than JSON parsers take):
//!   `-32700` parse error;
//! - JSON that is not a JSON-RPC 2.0 request, notification or response, and
//!   a batch (an array: MCP since 2025-06-18 has none): `-32600` invalid
//!   request;
//! - a message the SDK's message type cannot read: `-32600`, with its id.
//!
//! A request of a known method whose `params` do not fit it reads as a
//! custom request and goes on: the SDK answers it with a JSON-RPC error.
//!
//! Each is HTTP 400, as the Streamable HTTP transport says ("an HTTP error
//! status, and a JSON-RPC error response that has no id" when the id cannot
//! be read). Wrong `Accept` and `Content-Type` headers get the SDK's
//! statuses (406, 415) with a JSON-RPC body too, and a body over the limit
//! 413. The body the SDK then reads is the same bytes.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::ClientJsonRpcMessage;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

/// Parse error: the body is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// Invalid request: JSON, but not one JSON-RPC 2.0 message.
pub const INVALID_REQUEST: i64 = -32600;

/// The middleware: checks a POST's headers and body (at most
/// `max_body_bytes`) and passes it on unchanged, or answers the JSON-RPC
/// error. Other methods go straight to the SDK (which answers GET and
/// DELETE with 405).
pub async fn checked(max_body_bytes: usize, request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    if let Some(refused) = refuse_headers(request.headers()) {
        return refused;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                Value::Null,
                INVALID_REQUEST,
                format!("the request body is over {max_body_bytes} bytes (BOSUN_HTTP_MAX_BODY_BYTES)"),
            );
        }
    };
    if let Err(rejection) = check_body(&bytes) {
        return rejection.into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

/// The SDK's header rules, answered in JSON-RPC: a POST accepts both JSON
/// and an event stream, and sends JSON.
fn refuse_headers(headers: &HeaderMap) -> Option<Response> {
    let accepted: Vec<String> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|media| media.split(';').next().unwrap_or_default().trim().to_ascii_lowercase())
        .collect();
    let accepts = |media: &str| accepted.iter().any(|accepted| accepted == media);
    if !accepts("application/json") || !accepts("text/event-stream") {
        return Some(error(
            StatusCode::NOT_ACCEPTABLE,
            Value::Null,
            INVALID_REQUEST,
            "Accept must list both application/json and text/event-stream".to_owned(),
        ));
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .eq_ignore_ascii_case("application/json")
        });
    if !json {
        return Some(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Value::Null,
            INVALID_REQUEST,
            "Content-Type must be application/json".to_owned(),
        ));
    }
    None
}

/// Why a body is not one JSON-RPC 2.0 message: answered with HTTP 400.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// The JSON-RPC error code ([`PARSE_ERROR`], [`INVALID_REQUEST`]).
    pub code: i64,
    /// The request's id when it could be read, else `null`.
    pub id: Value,
    /// What is wrong.
    pub message: String,
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        error(StatusCode::BAD_REQUEST, self.id, self.code, self.message)
    }
}

/// Whether `bytes` are one JSON-RPC 2.0 message the SDK can read; why not
/// when not.
pub fn check_body(bytes: &Bytes) -> Result<(), Rejection> {
    let bad = |code, id, message: String| Err(Rejection { code, id, message });
    // serde_json refuses nesting deeper than 128 levels, so a 10,000-deep
    // body is a parse error, not a stack overflow.
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(value) => value,
        Err(err) => return bad(PARSE_ERROR, Value::Null, format!("Parse error: {err}")),
    };
    let object = match value {
        Value::Object(object) => object,
        Value::Array(_) => {
            return bad(
                INVALID_REQUEST,
                Value::Null,
                "Invalid Request: batches are not supported; send one JSON-RPC message per request".to_owned(),
            );
        }
        _ => {
            return bad(
                INVALID_REQUEST,
                Value::Null,
                "Invalid Request: the body must be a JSON-RPC 2.0 object".to_owned(),
            );
        }
    };
    // The id to answer with: a string or an integer, as the MCP SDK reads
    // it (a signed 64-bit integer, or one in float form such as `1e3` below
    // 2^53); anything else (a fraction, which JSON-RPC ids should not have,
    // or 2^70) is no id.
    let usable = |id: &Value| request_id(id).is_some();
    let id = object.get("id").and_then(request_id).unwrap_or(Value::Null);
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return bad(
            INVALID_REQUEST,
            id,
            "Invalid Request: field `jsonrpc` must be \"2.0\"".to_owned(),
        );
    }
    if let Some(bad_id) = object.get("id").filter(|given| !usable(given)) {
        return bad(
            INVALID_REQUEST,
            Value::Null,
            format!(
                "Invalid Request: field `id` must be a string or an integer from {} to {}, not {bad_id}",
                i64::MIN,
                i64::MAX
            ),
        );
    }
    let is_response = object.contains_key("result") || object.contains_key("error");
    match object.get("method") {
        Some(Value::String(_)) if !is_response => {}
        Some(Value::String(_)) => {
            return bad(
                INVALID_REQUEST,
                id,
                "Invalid Request: a message has a `method` or a `result`/`error`, not both".to_owned(),
            );
        }
        Some(_) => {
            return bad(
                INVALID_REQUEST,
                id,
                "Invalid Request: field `method` must be a string".to_owned(),
            );
        }
        None if is_response && object.contains_key("id") => {}
        None => {
            return bad(
                INVALID_REQUEST,
                id,
                "Invalid Request: field `method` is missing (or, for a response, `id` with `result` or `error`)"
                    .to_owned(),
            );
        }
    }
    if let Err(err) = serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(object)) {
        return bad(INVALID_REQUEST, id, format!("Invalid Request: {err}"));
    }
    Ok(())
}

/// A request id as the MCP SDK reads it, to answer with: a string, or an
/// integer (`1e3` is 1000); `None` for what the SDK refuses.
fn request_id(id: &Value) -> Option<Value> {
    // Float forms of integers are read below 2^53 only: above, one float
    // stands for several integers.
    const MAX_EXACT: f64 = 9_007_199_254_740_992.0;
    match id {
        Value::String(_) => Some(id.clone()),
        Value::Number(number) => match number.as_i64() {
            Some(integer) => Some(Value::from(integer)),
            None => number
                .as_f64()
                .filter(|float| float.fract() == 0.0 && float.abs() < MAX_EXACT)
                // Exact: a whole number below 2^53 in magnitude.
                .map(|float| Value::from(float as i64)),
        },
        _ => None,
    }
}

/// The JSON-RPC 2.0 error response `/mcp` answers a body it cannot take
/// with (and the OpenAPI document's `JsonRpcError`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(rename = "JsonRpcError")]
pub struct ErrorResponse {
    /// Always `2.0`.
    #[schemars(extend("const" = "2.0"))]
    pub jsonrpc: &'static str,
    /// The request's id when it could be read (a string or an integer),
    /// else `null`.
    #[schemars(schema_with = "id_schema")]
    pub id: Value,
    /// What went wrong.
    pub error: ErrorObject,
}

/// The `error` of an [`ErrorResponse`].
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(rename = "JsonRpcErrorObject")]
pub struct ErrorObject {
    /// [`PARSE_ERROR`] or [`INVALID_REQUEST`].
    #[schemars(extend("enum" = [-32700, -32600]))]
    pub code: i64,
    /// What is wrong, for a person.
    pub message: String,
}

fn id_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"oneOf": [
        {"type": "string"},
        {"type": "integer", "minimum": i64::MIN, "maximum": i64::MAX},
        {"type": "null"}
    ]})
}

/// A JSON-RPC error response with `status`.
fn error(status: StatusCode, id: Value, code: i64, message: String) -> Response {
    let body = ErrorResponse {
        jsonrpc: "2.0",
        id,
        error: ErrorObject { code, message },
    };
    (status, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    async fn answer(body: &[u8]) -> Option<(u16, Value)> {
        let response = check_body(&Bytes::copy_from_slice(body)).err()?.into_response();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.ok()?;
        Some((status, serde_json::from_slice(&bytes).ok()?))
    }

    async fn code_of(body: &[u8]) -> (u16, i64, Value) {
        let (status, answer) = answer(body)
            .await
            .unwrap_or_else(|| panic!("{} was accepted", String::from_utf8_lossy(body)));
        assert_eq!(answer["jsonrpc"], "2.0");
        assert!(answer["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
        (
            status,
            answer["error"]["code"].as_i64().unwrap_or_default(),
            answer["id"].clone(),
        )
    }

    #[tokio::test]
    async fn malformed_json_and_deep_nesting_are_parse_errors() {
        for body in [b"{".to_vec(), b"not json".to_vec(), b"".to_vec(), {
            let mut deep = "[".repeat(10_000);
            deep.push_str(&"]".repeat(10_000));
            deep.into_bytes()
        }] {
            assert_eq!(code_of(&body).await, (400, PARSE_ERROR, Value::Null));
        }
    }

    #[tokio::test]
    async fn batches_and_non_jsonrpc_objects_are_invalid_requests() {
        for (body, id) in [
            (json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]), Value::Null),
            (json!({"hello": "world"}), Value::Null),
            (json!("ping"), Value::Null),
            (json!({"jsonrpc": "1.0", "id": 7, "method": "ping"}), json!(7)),
            (json!({"jsonrpc": "2.0", "id": "a", "method": 3}), json!("a")),
            (json!({"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}), Value::Null),
            (json!({"jsonrpc": "2.0", "id": 2.5e-42, "method": "ping"}), Value::Null),
            (
                json!({"jsonrpc": "2.0", "id": 2.148_991_078_434_976e33, "method": "ping"}),
                Value::Null,
            ),
            (json!({"jsonrpc": "2.0", "id": u64::MAX, "method": "ping"}), Value::Null),
            // -2^63 - 1 reads as the float -2^63: not an id the SDK takes.
            (
                json!({"jsonrpc": "2.0", "id": -9.223_372_036_854_776e18, "method": "ping"}),
                Value::Null,
            ),
            (json!({"jsonrpc": "1.0", "id": 1e3, "method": "ping"}), json!(1000)),
            (json!({"jsonrpc": "2.0", "id": 2}), json!(2)),
            (
                json!({"jsonrpc": "2.0", "id": 2, "method": "ping", "result": {}}),
                json!(2),
            ),
        ] {
            let bytes = serde_json::to_vec(&body).unwrap();
            assert_eq!(code_of(&bytes).await, (400, INVALID_REQUEST, id), "{body}");
        }
    }

    #[tokio::test]
    async fn messages_the_sdk_reads_pass() {
        for body in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_delivery", "arguments": {}}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "some/custom"}),
            json!({"jsonrpc": "2.0", "id": i64::MIN, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": i64::MAX, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": 1e3, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": -9_007_199_254_740_991.0, "method": "ping"}),
            // The SDK answers these itself, with a JSON-RPC error.
            json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": 5}}),
        ] {
            assert!(answer(&serde_json::to_vec(&body).unwrap()).await.is_none(), "{body}");
        }
    }
}
