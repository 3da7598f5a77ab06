//! The HTTP API (axum): commands, deliveries (JSON and server-sent
//! events), sagas, dead letters and replays, health, Prometheus metrics,
//! the OpenAPI document and the operator console. Every rule (scopes,
//! tenants, idempotency) lives in [`crate::front::gateway`]; this module reads
//! requests, calls the gateway and writes answers.
//!
//! Errors are always `{"error": {"code", "message", "field"?}}` with the
//! status the gateway chose; the body limit (`BOSUN_HTTP_MAX_BODY_BYTES`)
//! answers 413 in the same shape.
//!
//! The front door holds under abuse: [`server`] serves the router with
//! header and idle timeouts and a connection cap; [`rate_limit`] gives each
//! API key a request budget, checked in `caller` right after the key is
//! authenticated (over it: 429 `rate-limited` with `Retry-After`); and
//! [`origin`] refuses `/mcp` requests from browser origins that are not
//! allowed (403 `origin-not-allowed`), as the MCP specification requires.
//!
//! Every route is declared once, in [`routes`]: its method, path, handler
//! and what the OpenAPI document says of it; [`router`] mounts that list
//! and `/openapi.json` is written from it.
//!
//! Over 800 lines on purpose: one thin handler per route (read the request,
//! call the gateway, write the answer), grouped by resource.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use self::bodies::{
    BulkReplayBody, DeadLetterList, DeliveryList, FailureGroupList, GroupPurged, GroupReplayBody, Health, Purged,
    ReleasePolicyBody, ReplayBody, RollbackBody, SagaList,
};
use self::origin::{OriginPolicy, OriginVerdict};
use self::query::QueryValues;
use self::rate_limit::RateLimiter;
use self::routes::{DEAD_LETTER_QUERY, DELIVERIES_QUERY, REPLAY_JOBS_QUERY, SAGAS_QUERY, Serve};
use crate::front::access::{ALL_TENANTS, Caller, Refusal};
use crate::front::gateway::{
    AuditPage, CommandRouting, ErrorBody, Gateway, GatewayError, ReplayJob, ReplayJobs, RollbackAsk,
};
use crate::front::http::{prometheus, server};
use crate::front::mcp::McpServer;
use crate::ports::store::ReplayJobAction;
use crate::ports::store::{DeadLetterFilter, TimelineWait};
use crate::runtime::config::HttpLimits;
use crate::runtime::metrics::Metrics;
use crate::runtime::telemetry::TraceContext;

pub mod bodies;
mod consumers;
pub mod openapi;
pub mod origin;
pub mod query;
pub mod rate_limit;
pub mod routes;

/// What every handler shares.
#[derive(Clone)]
pub struct ApiState {
    gateway: Gateway,
    mcp: McpServer,
    metrics: Arc<Metrics>,
    http: Arc<prometheus::HttpMetrics>,
    limiter: Arc<RateLimiter>,
    origins: Arc<OriginPolicy>,
}

impl ApiState {
    /// State over a gateway and the host's metrics (empty when no host runs
    /// in this process), with the default front-door limits.
    pub fn new(gateway: Gateway, metrics: Arc<Metrics>) -> Self {
        let limits = HttpLimits::default();
        Self {
            mcp: McpServer::new(gateway.clone()),
            gateway,
            metrics,
            http: Arc::default(),
            limiter: Arc::new(RateLimiter::new(limits.rate_limit_per_second, limits.rate_limit_burst)),
            origins: Arc::new(OriginPolicy::new(limits.allowed_origins, None)),
        }
    }

    /// The API's request and connection counts, which the ops port's
    /// `/metrics` renders too when both run in one process.
    pub fn http_metrics(&self) -> Arc<prometheus::HttpMetrics> {
        Arc::clone(&self.http)
    }

    /// The same state under `limits`' request budget and allowed origins;
    /// `bound` is the server's own address, whose pages may call `/mcp`.
    pub fn with_limits(mut self, limits: &HttpLimits, bound: Option<SocketAddr>) -> Self {
        self.limiter = Arc::new(RateLimiter::new(limits.rate_limit_per_second, limits.rate_limit_burst));
        self.origins = Arc::new(OriginPolicy::new(limits.allowed_origins.clone(), bound));
        self
    }
}

/// An answer that went wrong, in the API's error shape.
#[derive(Debug)]
pub enum ApiError {
    /// What the gateway refused, with the status it chose.
    Gateway(GatewayError),
    /// The key is over its request budget: 429 with `Retry-After`.
    RateLimited(rate_limit::OverBudget),
    /// A body that could not be read (over the limit: 413) or is not JSON
    /// (400), answered as it is.
    Body(Box<Response>),
}

impl From<GatewayError> for ApiError {
    fn from(err: GatewayError) -> Self {
        Self::Gateway(err)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let err = match self {
            Self::Gateway(err) => err,
            Self::RateLimited(over) => {
                let seconds = over.retry_after.as_secs().max(1);
                let mut response = error_response(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate-limited",
                    format!(
                        "this key is over its request budget (BOSUN_HTTP_RATE_LIMIT_PER_SECOND, \
                         BOSUN_HTTP_RATE_LIMIT_BURST); retry in {seconds} s"
                    ),
                );
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
                response.extensions_mut().insert(Refused("rate-limited"));
                return response;
            }
            Self::Body(response) => return *response,
        };
        let status = StatusCode::from_u16(err.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(err.to_json())).into_response();
        if let Some(reason) = err.refusal() {
            response.extensions_mut().insert(Refused(reason));
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"bosun\""),
            );
        }
        response
    }
}

/// Why a response refused its caller (`bosun_api_refusals_total`'s
/// `reason`), carried from the error to [`observe`] in the response's
/// extensions.
#[derive(Debug, Clone, Copy)]
struct Refused(&'static str);

fn error_response(status: StatusCode, code: &str, message: String) -> Response {
    (status, Json(ErrorBody::new(code, message, None))).into_response()
}

type ApiResult<T> = Result<T, ApiError>;

/// The router: every route of `routes::routes()` (the API, the console
/// and `/mcp`), each at its path template.
pub fn router(state: ApiState, max_body_bytes: usize) -> Router {
    let mut router = Router::new();
    for route in routes::routes() {
        router = match route.serve {
            Serve::Handler(handler) => router.route(route.path, *handler),
            Serve::Mcp => router.merge(mcp_routes(route.path, &state, max_body_bytes)),
        };
    }
    router
        .fallback(|| async { error_response(StatusCode::NOT_FOUND, "not-found", "no such route".into()) })
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

/// Serves the API on `listener` under `limits` (timeouts, connection cap,
/// per-key budget, allowed origins) until `shutdown` is cancelled, then
/// finishes the requests in flight.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: ApiState,
    max_body_bytes: usize,
    limits: HttpLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let address: Option<SocketAddr> = listener.local_addr().ok();
    let connection_limits = server::ConnectionLimits::new(&limits, server::open_files_soft_limit());
    tracing::info!(
        address = ?address,
        max_connections = connection_limits.max_connections,
        header_timeout_ms = limits.header_timeout.as_millis() as u64,
        idle_timeout_ms = limits.idle_timeout.as_millis() as u64,
        rate_limit_per_second = limits.rate_limit_per_second,
        rate_limit_burst = limits.rate_limit_burst,
        "HTTP API listening"
    );
    if connection_limits.max_connections < limits.max_connections {
        tracing::info!(
            configured = limits.max_connections,
            max_connections = connection_limits.max_connections,
            "HTTP connection cap lowered to half the open-file limit"
        );
    }
    let state = state.with_limits(&limits, address);
    let http = Arc::clone(&state.http);
    server::serve_router(
        listener,
        router(state, max_body_bytes),
        connection_limits,
        http,
        shutdown,
    )
    .await
}

/// Counts and logs every request (by route template, never by raw path or body).
async fn observe(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = next.run(request).await;
    let status = response.status().as_u16();
    state.http.record(method.as_str(), &route, status, started.elapsed());
    if let Some(Refused(reason)) = response.extensions().get::<Refused>() {
        state.http.record_refusal(reason);
    }
    tracing::debug!(%method, route, status, elapsed_ms = started.elapsed().as_millis() as u64, "http request");
    response
}

/// The caller behind the request's key, if it is within its budget.
async fn caller(state: &ApiState, headers: &HeaderMap) -> ApiResult<Caller> {
    let presented = presented_key(headers).ok_or(GatewayError::Unauthorized(Refusal::Missing))?;
    let caller = state.gateway.authenticate(&presented).await?;
    if let Err(over) = state.limiter.check(&caller.key_id) {
        state.http.record_rate_limited(&caller.key_id);
        return Err(ApiError::RateLimited(over));
    }
    Ok(caller)
}

/// 403 for a browser origin that may not call `/mcp`; `None` to go on.
fn refuse_origin(state: &ApiState, headers: &HeaderMap) -> Option<Response> {
    match state.origins.check(headers) {
        OriginVerdict::Allowed => None,
        OriginVerdict::Refused(origin) => Some(refused_for(
            "origin",
            error_response(
                StatusCode::FORBIDDEN,
                "origin-not-allowed",
                format!("Origin `{origin}` may not call /mcp (allowed: BOSUN_HTTP_ALLOWED_ORIGINS)"),
            ),
        )),
    }
}

/// `response`, marked as refusing its caller for `reason`.
fn refused_for(reason: &'static str, mut response: Response) -> Response {
    response.extensions_mut().insert(Refused(reason));
    response
}

/// The key in `Authorization: Bearer` or `X-Api-Key`.
pub fn presented_key(headers: &HeaderMap) -> Option<String> {
    if let Some(value) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let (scheme, token) = value.trim().split_once(' ')?;
        return scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_owned());
    }
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> ApiResult<Option<&'a str>> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => value.to_str().map(Some).map_err(|_| {
            GatewayError::Invalid {
                field: Some(name.to_owned()),
                message: format!("header {name} is not visible ASCII"),
            }
            .into()
        }),
    }
}

/// The bytes of a body, or the 413 (or 400) answer for a body that could
/// not be read.
fn body_bytes(body: Result<Bytes, BytesRejection>) -> ApiResult<Bytes> {
    body.map_err(|rejection| {
        ApiError::Body(Box::new(if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload-too-large",
                "request body is over the limit (BOSUN_HTTP_MAX_BODY_BYTES)".into(),
            )
        } else {
            error_response(rejection.status(), "bad-request", rejection.body_text())
        }))
    })
}

fn malformed(err: impl std::fmt::Display) -> ApiError {
    ApiError::Body(Box::new(error_response(
        StatusCode::BAD_REQUEST,
        "malformed-json",
        format!("request body is not valid JSON: {err}"),
    )))
}

/// Reads a JSON body; an empty body is `None`.
fn json_body(body: Result<Bytes, BytesRejection>) -> ApiResult<Option<Value>> {
    let bytes = body_bytes(body)?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(&bytes).map(Some).map_err(malformed)
}

/// Reads a JSON body into its type in `bodies` (an empty body is `None`):
/// 400 when it is not JSON, 422 naming the field (`filter.since`,
/// `ids[2]`, an unknown `tenantId`) when it is JSON the type refuses.
fn typed_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> ApiResult<Option<T>> {
    let bytes = body_bytes(body)?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    // Syntax first, so that a body that is not JSON is a 400 wherever the
    // type would have stopped reading it.
    serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).map_err(malformed)?;
    // An object: serde would read a struct from a list too, by position.
    if bytes.iter().find(|byte| !byte.is_ascii_whitespace()) != Some(&b'{') {
        return Err(invalid("body", "the body must be a JSON object"));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(&bytes);
    serde_path_to_error::deserialize(&mut deserializer)
        .map(Some)
        .map_err(|err| body_field_error(&err).into())
}

/// A body's refusal as a 422 naming the field: serde's path to it (a
/// missing field's name added), `body` for the body as a whole.
fn body_field_error(err: &serde_path_to_error::Error<serde_json::Error>) -> GatewayError {
    let message = err.inner().to_string();
    let parent = err.path().to_string();
    let parent = if parent == "." { String::new() } else { parent };
    let unknown = ["unknown field `", "duplicate field `", "missing field `"]
        .iter()
        .find_map(|prefix| message.strip_prefix(prefix))
        .and_then(|rest| rest.split('`').next());
    // An unknown field is in the path already; a missing one is not.
    let field = match unknown {
        Some(name) if parent.is_empty() => name.to_owned(),
        Some(name) if parent != name && !parent.ends_with(&format!(".{name}")) => format!("{parent}.{name}"),
        _ if parent.is_empty() => "body".to_owned(),
        _ => parent,
    };
    // serde_json appends " at line L column C"; the field says where.
    let message = match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message,
    };
    GatewayError::Invalid {
        message: format!("{field}: {message}"),
        field: Some(field),
    }
}

/// The payload with every whole number written as a float (`5.0`) written
/// as an integer: JSON Schema's `integer` takes `5.0`, as the document
/// promises, and the contracts' integer fields then read it.
fn whole_numbers_as_integers(value: Value) -> Value {
    match value {
        Value::Number(number) if !number.is_i64() && !number.is_u64() => {
            match number.as_f64().filter(|float| float.fract() == 0.0) {
                Some(float) if float >= i64::MIN as f64 && float < i64::MAX as f64 => json!(float as i64),
                Some(float) if float >= 0.0 && float < u64::MAX as f64 => json!(float as u64),
                _ => Value::Number(number),
            }
        }
        Value::Array(items) => Value::Array(items.into_iter().map(whole_numbers_as_integers).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| (key, whole_numbers_as_integers(value)))
                .collect(),
        ),
        other => other,
    }
}

/// Refuses any query parameter on a route that documents none.
fn no_query(uri: &Uri) -> ApiResult<()> {
    QueryValues::read(uri, &[])?;
    Ok(())
}

fn invalid(field: &str, message: impl Into<String>) -> ApiError {
    GatewayError::Invalid {
        field: Some(field.to_owned()),
        message: message.into(),
    }
    .into()
}

// -- health, metrics, documents, console -------------------------------------

async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

async fn readyz(State(state): State<ApiState>) -> Response {
    let readiness = state.gateway.readiness(state.metrics.receiving()).await;
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(readiness)).into_response()
}

async fn metrics(State(state): State<ApiState>) -> Response {
    let text = crate::front::ops::metrics_text(state.gateway.health(), &state.metrics, &state.http).await;
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response()
}

async fn openapi_document() -> Json<Value> {
    Json(routes::document())
}

/// `/`: a person at a browser wants the console.
async fn to_console() -> Redirect {
    Redirect::temporary("/console")
}

/// `/favicon.ico`: a browser asks for it with every console page it opens;
/// bosun has no icon, and says so with 204 No Content (kept for a day), not
/// a 404 in the request log and the error metrics at each page view.
async fn favicon() -> Response {
    (
        StatusCode::NO_CONTENT,
        [(header::CACHE_CONTROL, "public, max-age=86400")],
    )
        .into_response()
}

async fn console_page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        include_str!("console/index.html"),
    )
        .into_response()
}

async fn console_script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("console/app.js"),
    )
        .into_response()
}

async fn console_style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("console/app.css"),
    )
        .into_response()
}

// -- commands -----------------------------------------------------------------

async fn send_command(
    State(state): State<ApiState>,
    Path(message_type): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    let payload = json_body(body)?
        .ok_or_else(|| invalid("payload", "request body is empty: send the command's payload as JSON"))?;
    let payload = whole_numbers_as_integers(payload);
    send_command_inner(&state, caller, &message_type, &uri, &headers, &payload).await
}

/// The most characters of an `Idempotency-Key`.
pub const IDEMPOTENCY_KEY_MAX_CHARS: usize = 255;

/// `X-Bosun-Tenant`: a tenant id, and for a tenant's key its own (403
/// otherwise); a platform key may name any.
fn named_tenant<'a>(caller: &Caller, headers: &'a HeaderMap) -> ApiResult<Option<&'a str>> {
    let Some(tenant) = header_text(headers, "x-bosun-tenant")? else {
        return Ok(None);
    };
    bosun_contracts::validate::tenant_id("X-Bosun-Tenant", tenant)
        .map_err(|err| invalid("X-Bosun-Tenant", err.reason))?;
    if caller.tenant_id != ALL_TENANTS && tenant != caller.tenant_id {
        return Err(GatewayError::OtherTenant {
            own: caller.tenant_id.clone(),
        }
        .into());
    }
    Ok(Some(tenant))
}

/// `Idempotency-Key`: 1 to 255 visible ASCII characters (no spaces).
fn idempotency_key(headers: &HeaderMap) -> ApiResult<Option<&str>> {
    let Some(key) = header_text(headers, "idempotency-key")? else {
        return Ok(None);
    };
    if key.is_empty() || key.len() > IDEMPOTENCY_KEY_MAX_CHARS || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(
            "Idempotency-Key",
            format!("Idempotency-Key must be 1 to {IDEMPOTENCY_KEY_MAX_CHARS} visible ASCII characters, no spaces"),
        ));
    }
    Ok(Some(key))
}

/// `X-Correlation-Id`: a UUID in its hyphenated form.
fn correlation_id(headers: &HeaderMap) -> ApiResult<Option<Uuid>> {
    let Some(text) = header_text(headers, "x-correlation-id")? else {
        return Ok(None);
    };
    match Uuid::try_parse(text) {
        Ok(id) if text.len() == 36 => Ok(Some(id)),
        _ => Err(invalid(
            "X-Correlation-Id",
            "X-Correlation-Id is not a UUID (e.g. 0193a0c2-7c1e-7d2a-9b5e-3f1d2c4b5a69)",
        )),
    }
}

async fn send_command_inner(
    state: &ApiState,
    caller: Caller,
    message_type: &str,
    uri: &Uri,
    headers: &HeaderMap,
    payload: &Value,
) -> ApiResult<Response> {
    no_query(uri)?;
    let tenant = named_tenant(&caller, headers)?;
    let correlation_id = correlation_id(headers)?;
    let idempotency_key = idempotency_key(headers)?;
    // W3C trace context: the delivery's trace continues the caller's.
    let trace = TraceContext::from_headers(
        header_text(headers, "traceparent")?,
        header_text(headers, "tracestate")?,
    );
    let routing = CommandRouting {
        correlation_id,
        idempotency_key,
        trace: trace.as_ref(),
    };
    let accepted = state
        .gateway
        .send_command(&caller, message_type, payload, tenant, routing)
        .await?;
    let location = accepted.body["links"]["delivery"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut response = (StatusCode::ACCEPTED, Json(accepted.body)).into_response();
    if let Ok(location) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    if accepted.replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

// -- deliveries ---------------------------------------------------------------

async fn deliveries(State(state): State<ApiState>, headers: HeaderMap, uri: Uri) -> ApiResult<Json<DeliveryList>> {
    let caller = caller(&state, &headers).await?;
    let query = QueryValues::read(&uri, DELIVERIES_QUERY)?;
    let limit = query.integer("limit").unwrap_or(50);
    let deliveries = state.gateway.deliveries(&caller, limit).await?;
    Ok(Json(DeliveryList { deliveries }))
}

async fn delivery(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    Ok(Json(state.gateway.delivery(&caller, &id).await?).into_response())
}

/// A server-sent-event stream of a delivery's timeline: every line as
/// `event: timeline`, then `event: end` with the final status.
async fn delivery_events(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    // Not found (or another tenant's) answers 404 before the stream starts.
    state.gateway.delivery(&caller, &id).await?;
    struct Cursor {
        gateway: Gateway,
        caller: Caller,
        id: String,
        sent: usize,
        pending: std::collections::VecDeque<Event>,
        finished: bool,
        changed: TimelineWait,
    }
    // Made before the stream's first read: a line written after it wakes
    // the stream (the store's fallback timeout covers what it cannot hear).
    let changed = state.gateway.watch_delivery(&id);
    let cursor = Cursor {
        gateway: state.gateway.clone(),
        caller,
        id,
        sent: 0,
        pending: Default::default(),
        finished: false,
        changed,
    };
    let stream = futures_util::stream::unfold(cursor, |mut cursor| async move {
        loop {
            if let Some(event) = cursor.pending.pop_front() {
                return Some((Ok::<Event, Infallible>(event), cursor));
            }
            if cursor.finished {
                return None;
            }
            match cursor.gateway.delivery_timeline(&cursor.caller, &cursor.id).await {
                Ok((lines, status)) => {
                    for line in lines.iter().skip(cursor.sent) {
                        let data = serde_json::to_string(line).unwrap_or_default();
                        cursor.pending.push_back(Event::default().event("timeline").data(data));
                    }
                    cursor.sent = cursor.sent.max(lines.len());
                    if status != "in-progress" {
                        let data = json!({"status": status}).to_string();
                        cursor.pending.push_back(Event::default().event("end").data(data));
                        cursor.finished = true;
                    }
                }
                Err(err) => {
                    cursor
                        .pending
                        .push_back(Event::default().event("error").data(err.to_json().to_string()));
                    cursor.finished = true;
                }
            }
            if cursor.pending.is_empty() {
                cursor.changed.changed().await;
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

// -- sagas --------------------------------------------------------------------

async fn sagas(State(state): State<ApiState>, headers: HeaderMap, uri: Uri) -> ApiResult<Json<SagaList>> {
    let caller = caller(&state, &headers).await?;
    let query = QueryValues::read(&uri, SAGAS_QUERY)?;
    let sagas = state.gateway.sagas(&caller, query.text("kind").as_deref()).await?;
    Ok(Json(SagaList { sagas }))
}

async fn saga(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path((kind, key)): Path<(String, String)>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    Ok(Json(state.gateway.saga(&caller, &kind, &key).await?).into_response())
}

async fn saga_diagram(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path((kind, key)): Path<(String, String)>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    Ok(Json(state.gateway.saga_diagram(&caller, &kind, &key).await?).into_response())
}

// -- approval policies ------------------------------------------------------

async fn release_policy(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(tenant): Path<String>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    Ok(Json(state.gateway.release_policy(&caller, &tenant).await?).into_response())
}

async fn release_policy_history(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(tenant): Path<String>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    Ok(Json(state.gateway.release_policy_history(&caller, &tenant).await?).into_response())
}

async fn set_release_policy(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(tenant): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    let body = typed_body::<ReleasePolicyBody>(body)?.ok_or_else(|| {
        invalid(
            "body",
            "the body is the new policy: {\"document\": {...}, \"reason\": \"...\"}",
        )
    })?;
    let document = serde_json::to_value(&body.document).map_err(|err| invalid("document", err.to_string()))?;
    let record = state
        .gateway
        .set_release_policy(
            &caller,
            &tenant,
            &document,
            body.reason.as_deref(),
            body.expected_version,
        )
        .await?;
    Ok(Json(record).into_response())
}

async fn place_release_hold(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path((tenant, environment)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    let hold = typed_body::<bosun_sagas::release::Hold>(body)?.ok_or_else(|| {
        invalid(
            "body",
            "the body is the hold: {\"reason\": \"...\", \"until\": \"<RFC 3339>\"}",
        )
    })?;
    let record = state
        .gateway
        .change_release_hold(&caller, &tenant, &environment, Some(hold))
        .await?;
    Ok(Json(record).into_response())
}

async fn lift_release_hold(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path((tenant, environment)): Path<(String, String)>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    let record = state
        .gateway
        .change_release_hold(&caller, &tenant, &environment, None)
        .await?;
    Ok(Json(record).into_response())
}

// -- environments -------------------------------------------------------------

async fn environment(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path((tenant, environment)): Path<(String, String)>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    Ok(Json(state.gateway.environment(&caller, &tenant, &environment).await?).into_response())
}

/// Checks a rollback (something verified to go back to, the promotion gate)
/// and sends it as the caller: 202 with the command's ids and the plan, and
/// its delivery at `Location`; a refusal of the check is 422 with why.
async fn rollback_environment(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path((tenant, environment)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    let body = typed_body::<RollbackBody>(body)?.ok_or_else(|| {
        invalid(
            "body",
            "the body is the rollback: {\"reason\": \"...\", \"moduleId\"?, \"toReleaseId\"?, \"overrideReason\"?}",
        )
    })?;
    let trace = TraceContext::from_headers(
        header_text(&headers, "traceparent")?,
        header_text(&headers, "tracestate")?,
    );
    let ask = RollbackAsk {
        reason: &body.reason,
        module_id: body.module_id.as_deref(),
        to_release_id: body.to_release_id.as_deref(),
        override_reason: body.override_reason.as_deref(),
        on_behalf_of: body.on_behalf_of.as_deref(),
    };
    let accepted = state
        .gateway
        .rollback_environment(&caller, &tenant, &environment, ask, trace.as_ref())
        .await?;
    let location = format!("/v1/deliveries/{}", accepted.correlation_id);
    let mut response = (StatusCode::ACCEPTED, Json(accepted)).into_response();
    if let Ok(location) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

async fn audit_log(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(tenant): Path<String>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    let query = QueryValues::read(&uri, routes::AUDIT_QUERY)?;
    let release = query.text("releaseId");
    let page = AuditPage {
        since: query.time("since"),
        after: query.integer("after").map(|after| after as u64),
        release: release.as_deref(),
        limit: query.integer("limit").unwrap_or(100),
    };
    let entries = state.gateway.audit_log(&caller, &tenant, page).await?;
    Ok(Json(entries).into_response())
}

// -- dead letters -------------------------------------------------------------

/// The dead-letter filter of `GET /v1/dead-letters` and its groups.
fn dead_letter_filter(uri: &Uri) -> ApiResult<DeadLetterFilter> {
    let query = QueryValues::read(uri, DEAD_LETTER_QUERY)?;
    Ok(DeadLetterFilter {
        consumer: query.text("consumer"),
        message_type: query.text("type"),
        since: query.time("since"),
        include_replayed: query.boolean("includeReplayed").unwrap_or(false),
        tenant_id: None,
        reason: query.text("reason"),
        limit: query.integer("limit"),
    })
}

async fn dead_letters(State(state): State<ApiState>, headers: HeaderMap, uri: Uri) -> ApiResult<Json<DeadLetterList>> {
    let caller = caller(&state, &headers).await?;
    let filter = dead_letter_filter(&uri)?;
    let records = state.gateway.dead_letters(&caller, filter).await?;
    Ok(Json(DeadLetterList { dead_letters: records }))
}

async fn dead_letter_groups(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
) -> ApiResult<Json<FailureGroupList>> {
    let caller = caller(&state, &headers).await?;
    let filter = dead_letter_filter(&uri)?;
    let include_acknowledged = QueryValues::read(&uri, DEAD_LETTER_QUERY)?
        .boolean("includeAcknowledged")
        .unwrap_or(false);
    let groups = state
        .gateway
        .dead_letter_groups(&caller, filter, include_acknowledged)
        .await?;
    Ok(Json(FailureGroupList { groups }))
}

/// `PUT /v1/dead-letters/groups/{fingerprint}/acknowledgement`.
async fn acknowledge_group(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(fingerprint): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    let body = typed_body::<bodies::AcknowledgementBody>(body)?;
    let note = body.as_ref().and_then(|body| body.note.as_deref());
    Ok(Json(state.gateway.acknowledge_group(&caller, &fingerprint, note).await?).into_response())
}

/// `DELETE /v1/dead-letters/groups/{fingerprint}/acknowledgement`.
async fn unacknowledge_group(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(fingerprint): Path<String>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    Ok(Json(state.gateway.unacknowledge_group(&caller, &fingerprint).await?).into_response())
}

async fn dead_letter_group(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(fingerprint): Path<String>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    Ok(Json(state.gateway.dead_letter_group(&caller, &fingerprint).await?).into_response())
}

/// Replays a whole failure group as a bulk replay job (`{"rate": N}`
/// optional): 202 with the job and its Location.
async fn replay_group(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(fingerprint): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    let rate = typed_body::<GroupReplayBody>(body)?.and_then(|body| body.rate);
    let job = state.gateway.replay_group(&caller, &fingerprint, rate).await?;
    Ok(job_accepted(&job))
}

/// 202 with a bulk replay job and its `Location` (`/v1/replays/{id}`).
fn job_accepted(job: &ReplayJob) -> Response {
    let mut response = (StatusCode::ACCEPTED, Json(job)).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/replays/{}", job.id)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

async fn purge_group(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(fingerprint): Path<String>,
) -> ApiResult<Json<GroupPurged>> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    let purged = state.gateway.purge_group(&caller, &fingerprint).await?;
    Ok(Json(GroupPurged { fingerprint, purged }))
}

async fn dead_letter(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    Ok(Json(state.gateway.dead_letter(&caller, &id).await?).into_response())
}

async fn replay(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    let payload = typed_body::<ReplayBody>(body)?
        .and_then(|body| body.payload)
        .map(|payload| whole_numbers_as_integers(Value::Object(payload)));
    Ok(Json(state.gateway.replay(&caller, &id, payload.as_ref()).await?).into_response())
}

async fn bulk_replay(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    let body = typed_body::<BulkReplayBody>(body)?.ok_or_else(|| {
        invalid(
            "body",
            "the body is required: `{\"ids\": [...]}`, `{\"filter\": {...}}` or `{\"all\": true}`",
        )
    })?;
    let job = state.gateway.start_bulk_replay(&caller, body.into()).await?;
    Ok(job_accepted(&job))
}

async fn replay_job(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    Ok(Json(state.gateway.replay_job(&caller, &id).await?).into_response())
}

/// The caller's bulk replay jobs, newest first (`?limit=N`, at most 200).
async fn replay_jobs(State(state): State<ApiState>, headers: HeaderMap, uri: Uri) -> ApiResult<Json<ReplayJobs>> {
    let caller = caller(&state, &headers).await?;
    let query = QueryValues::read(&uri, REPLAY_JOBS_QUERY)?;
    let jobs = state.gateway.replay_jobs(&caller, query.integer("limit")).await?;
    Ok(Json(ReplayJobs { jobs }))
}

async fn control_replay_job(
    state: &ApiState,
    headers: &HeaderMap,
    uri: &Uri,
    id: &str,
    action: ReplayJobAction,
) -> ApiResult<Json<ReplayJob>> {
    let caller = caller(state, headers).await?;
    no_query(uri)?;
    Ok(Json(state.gateway.control_replay_job(&caller, id, action).await?))
}

/// Pauses a running job after the replay in progress.
async fn pause_replay_job(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult<Json<ReplayJob>> {
    control_replay_job(&state, &headers, &uri, &id, ReplayJobAction::Pause).await
}

/// Resumes a paused job where it stopped.
async fn resume_replay_job(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult<Json<ReplayJob>> {
    control_replay_job(&state, &headers, &uri, &id, ReplayJobAction::Resume).await
}

/// Cancels a running or paused job: what it did not replay stays
/// dead-lettered.
async fn cancel_replay_job(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult<Json<ReplayJob>> {
    control_replay_job(&state, &headers, &uri, &id, ReplayJobAction::Cancel).await
}

async fn purge(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult<Json<Purged>> {
    let caller = caller(&state, &headers).await?;
    no_query(&uri)?;
    let purged = state.gateway.purge(&caller, &id).await?;
    Ok(Json(Purged { purged }))
}

// -- MCP ----------------------------------------------------------------------

/// `/mcp` (at `path`): the MCP SDK's Streamable HTTP service (stateless,
/// JSON answers; see [`McpServer::http_service`]) behind the front door.
fn mcp_routes(path: &str, state: &ApiState, max_body_bytes: usize) -> Router<ApiState> {
    Router::new()
        .route_service(path, state.mcp.http_service(max_body_bytes))
        // After the key: nothing is read of an unauthenticated body.
        .layer(middleware::from_fn(move |request, next| {
            crate::front::mcp::jsonrpc::checked(max_body_bytes, request, next)
        }))
        .layer(middleware::from_fn_with_state(state.clone(), mcp_front_door))
}

/// The front door of every `/mcp` request, before the MCP SDK sees it: a
/// DNS-rebinding page first (403, see `origin`), then the key and its
/// budget (401, 429), so nothing about the request is answered without
/// both. The caller rides in the request's extensions to the tools.
async fn mcp_front_door(State(state): State<ApiState>, mut request: Request, next: Next) -> Response {
    if let Some(refused) = refuse_origin(&state, request.headers()) {
        return refused;
    }
    match caller(&state, request.headers()).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            let mut response = next.run(request).await;
            // A wrong Accept or Content-Type is refused before the SDK, in
            // JSON-RPC (`mcp::jsonrpc`); what the SDK itself refuses (a GET
            // or DELETE: 405) is a line of text with no Content-Type: say
            // what it is.
            if !response.headers().contains_key(header::CONTENT_TYPE) && response.status().is_client_error() {
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; charset=utf-8"),
                );
            }
            response
        }
        Err(err) => err.into_response(),
    }
}

#[cfg(test)]
mod tests;
