//! The MCP server: bosun's operations as tools for AI agents, over the
//! [Model Context Protocol](https://modelcontextprotocol.io).
//!
//! The protocol is the official Rust MCP SDK's (`rmcp`): JSON-RPC, the
//! `initialize` handshake and version negotiation, cancellation, and both
//! transports. bosun keeps only what is its own: [`McpHandler`] (server
//! info, instructions, tool listing and calls) and the tools in [`tools`],
//! one file each, which all act through [`Gateway`], so scopes, tenant
//! walls, `Idempotency-Key` and audit are exactly the HTTP API's.
//!
//! Protocol versions: whatever the SDK knows ([`ServerHandler`]'s default
//! `supported_protocol_versions`). A client's `initialize` gets the version
//! it asked for when the SDK speaks it (2024-11-05, 2025-03-26, 2025-06-18,
//! 2025-11-25), else the newest one with a handshake (2025-11-25); clients
//! of the handshake-less 2026-07-28 revision are served per request.
//!
//! Two transports share [`McpServer`]:
//!
//! - stdio (`bosun mcp`): [`McpServer::serve_stdio`], one JSON-RPC message
//!   per line, acting as the `BOSUN_API_KEY` caller. Nothing but protocol
//!   messages is written to the output; logs go to stderr (see
//!   [`crate::runtime::telemetry`]).
//! - Streamable HTTP (`/mcp`): [`McpServer::http_service`], a tower service
//!   the API mounts behind its front door (`src/front/api/mod.rs`): the
//!   Origin check, then the bearer key and its rate budget, on every
//!   request, before the SDK sees it. The front door puts the [`Caller`] in
//!   the request's extensions; the SDK hands the request's
//!   [`http::request::Parts`](axum::http::request::Parts) to the tool
//!   call, and [`McpHandler`] acts as that caller.

use std::io;
use std::sync::Arc;

use axum::http::request::Parts;
use rmcp::model::ErrorCode;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeRequestParams, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, ServerInitializeError};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::Instrument;

use crate::front::access::{Caller, Refusal};
use crate::front::gateway::{Gateway, GatewayError};
use crate::runtime::telemetry::{self, TraceContext};

pub mod jsonrpc;
pub mod tools;

#[cfg(test)]
mod tests;

use self::tools::Tools;

/// The largest message [`McpServer::serve_stdio`] reads by default (the
/// HTTP API's default body limit).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

const INSTRUCTIONS: &str = "bosun orchestrates software delivery (repositories, commits, pull requests, pipelines, \
builds, releases, infrastructure, GitOps) with commands and events on a message bus. A delivery is every message \
that follows from one command; it shares the command's correlationId.\n\
Typical use:\n\
1. describe_command: the JSON Schema and an example payload of a command.\n\
2. send_command: validates the payload and sends it; returns its correlationId.\n\
3. wait_for_delivery (or get_delivery) with that correlationId until status is `completed` or `failed`.\n\
4. When it failed: list_failures (grouped: true for an overview) and get_failure show why a message was \
dead-lettered; replay_failure sends it again, optionally with a corrected payload; replay_failure_group (or, \
with the admin scope, purge_failure_group) acts on every failure of one root cause, by the group's fingerprint.\n\
5. get_release shows a release: where it is, the approval it waits for and who may give it. Approving needs \
releases:approve, and never counts for the key that requested the release nor the person it acts for.\n\
6. get_environment shows an environment: per module the release it runs and the releases verified there. \
rollback_environment (releases:rollback; with overrideReason, releases:override too) rolls a module back to a \
verified release.\n\
7. list_consumers shows which consumers are paused; control_consumer (consumers:pause, a platform key's) pauses \
one during an incident at a downstream service (its messages wait) and resumes it.\n\
Your API key acts for one tenant and sees only that tenant's deliveries and failures. A failed tool call returns \
isError with {\"error\": {\"code\", \"message\", \"field\"}}: fix the named field and call again. Pass an \
idempotencyKey to send_command when a retry must not send twice.";

/// The MCP server over a [`Gateway`]: the stdio and the HTTP transport.
/// Cheap to clone.
#[derive(Clone)]
pub struct McpServer {
    tools: Tools,
    max_message_bytes: usize,
}

impl McpServer {
    /// A server whose tools act through `gateway`.
    pub fn new(gateway: Gateway) -> Self {
        Self {
            tools: Tools::new(gateway),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }

    /// Sets the largest message [`McpServer::serve_stdio`] reads (longer
    /// lines are dropped, logged, and the server goes on).
    pub fn with_max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes.max(1024);
        self
    }

    /// Serves MCP over stdio as `caller`: one JSON-RPC message per line of
    /// `input`, the answers on `output`, until `input` ends. Requests run
    /// concurrently (a long `wait_for_delivery` does not hold up a `ping`)
    /// and `notifications/cancelled` stops the request it names; requests
    /// still running when `input` ends get a few seconds to answer.
    pub async fn serve_stdio(
        &self,
        caller: Caller,
        input: impl AsyncRead + Send + Unpin + 'static,
        output: impl AsyncWrite + Send + Unpin + 'static,
    ) -> io::Result<()> {
        tracing::info!(key_id = %caller.key_id, tenant_id = %caller.tenant_id, "MCP server on stdio");
        let transport = AsyncRwTransport::new_server(input, output).with_max_line_length(self.max_message_bytes);
        let handler = McpHandler::new(self.tools.clone(), CallerSource::Key(caller));
        match handler.serve(transport).await {
            Ok(running) => {
                let reason = running.waiting().await.map_err(io::Error::other)?;
                tracing::info!(?reason, "MCP stdio input closed");
                Ok(())
            }
            Err(ServerInitializeError::ConnectionClosed(_)) => {
                tracing::info!("MCP stdio input closed before initialize");
                Ok(())
            }
            Err(err) => Err(io::Error::other(err)),
        }
    }

    /// The Streamable HTTP transport, for the API to mount at `/mcp` behind
    /// its front door (which must put the request's [`Caller`] in its
    /// extensions; a request without one is refused as an internal error).
    ///
    /// Stateless, JSON answers: every POST is answered on its own as
    /// `application/json`, with no `Mcp-Session-Id`, and the server keeps
    /// nothing between requests. bosun's tools need no session (the caller
    /// comes with every request's key, and a delivery is followed by its
    /// correlationId), and with several API replicas behind a load balancer
    /// any replica can answer any request, with no sticky sessions and
    /// nothing lost when a replica restarts. There is no server-initiated
    /// stream: GET and DELETE answer 405. The SDK's own Host and Origin
    /// checks are off: the front door's Origin policy (`origin.rs`, set by
    /// `BOSUN_HTTP_ALLOWED_ORIGINS`) is the one in force, and behind an
    /// ingress the Host is the public name, not loopback.
    pub fn http_service(&self, max_body_bytes: usize) -> StreamableHttpService<McpHandler, NeverSessionManager> {
        let handler = McpHandler::new(self.tools.clone(), CallerSource::HttpRequest);
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(None)
            .disable_allowed_hosts()
            .disable_allowed_origins()
            .with_max_request_body_bytes(max_body_bytes);
        StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(NeverSessionManager::default()),
            config,
        )
    }
}

/// Who a tool call acts as.
#[derive(Clone)]
enum CallerSource {
    /// The key the server was started with (stdio).
    Key(Caller),
    /// The key of each HTTP request, which the front door authenticated and
    /// put in the request's extensions.
    HttpRequest,
}

/// bosun's MCP server handler: server info, capabilities and instructions,
/// and the tools. The SDK makes one per HTTP request (cheap: a clone).
#[derive(Clone)]
pub struct McpHandler {
    tools: Tools,
    caller: CallerSource,
}

impl McpHandler {
    fn new(tools: Tools, caller: CallerSource) -> Self {
        Self { tools, caller }
    }

    /// The trace context the client sent with a request: W3C keys in its
    /// `_meta` (SEP-414), which stdio and HTTP carry alike, else the HTTP
    /// request's headers.
    fn caller_trace(&self, context: &RequestContext<RoleServer>) -> Option<TraceContext> {
        TraceContext::from_headers(context.meta.get_traceparent(), context.meta.get_tracestate()).or_else(|| {
            let headers = &context.extensions.get::<Parts>()?.headers;
            let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
            TraceContext::from_headers(header("traceparent"), header("tracestate"))
        })
    }

    /// The caller a request acts as. On stdio the key the server was
    /// started with is checked again for every call, so a key revoked or
    /// expired meanwhile is refused at the session's next call.
    async fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        match &self.caller {
            CallerSource::Key(caller) => self.tools.gateway().recheck(caller).await.map_err(|err| match err {
                GatewayError::Unauthorized(refusal) => unauthorized(refusal),
                other => ErrorData::internal_error(format!("cannot check the API key: {other}"), None),
            }),
            CallerSource::HttpRequest => context
                .extensions
                .get::<Parts>()
                .and_then(|parts| parts.extensions.get::<Caller>())
                .cloned()
                .ok_or_else(|| ErrorData::internal_error("no authenticated caller on this request", None)),
        }
    }
}

/// The JSON-RPC error of a call whose key no longer holds: the stdio
/// equivalent of HTTP's 401, with the API's error body as its data.
fn unauthorized(refusal: Refusal) -> ErrorData {
    ErrorData::new(
        UNAUTHORIZED,
        refusal.to_string(),
        Some(GatewayError::Unauthorized(refusal).to_json()),
    )
}

/// The JSON-RPC error code of a refused key (an implementation-defined
/// server error, -32000 to -32099).
pub const UNAUTHORIZED: ErrorCode = ErrorCode(-32001);

impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("bosun", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request)?;
        tracing::info!(
            requested = %request.protocol_version,
            version = %result.protocol_version,
            client = %request.client_info.name,
            client_version = %request.client_info.version,
            "MCP client initialized"
        );
        Ok(result)
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = tools::list().map_err(|err| ErrorData::internal_error(err.to_owned(), None))?;
        Ok(ListToolsResult::with_all_items(tools.to_vec()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::find(name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = self.caller(&context).await?;
        // The tool call's server span (OpenTelemetry's MCP conventions), in
        // the caller's trace: `params._meta.traceparent` (SEP-414), else
        // the HTTP request's `traceparent` header.
        let caller_trace = self.caller_trace(&context);
        let span_name = format!("tools/call {}", request.name);
        let span = tracing::info_span!(
            "mcp",
            otel.name = span_name.as_str(),
            otel.kind = "server",
            mcp.method.name = "tools/call",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %request.name,
            jsonrpc.request.id = %context.id,
            network.transport = match self.caller {
                CallerSource::Key(_) => "pipe",
                CallerSource::HttpRequest => "tcp",
            },
            "error.type" = tracing::field::Empty,
        );
        telemetry::continue_trace(&span, caller_trace.as_ref());
        let trace = telemetry::traceparent_of(&span).or(caller_trace);
        // A cancelled request (the client's `notifications/cancelled`, or an
        // HTTP client gone) stops here, not when a long wait would end.
        let result = tokio::select! {
            result = self.tools.call(&caller, trace.as_ref(), &request.name, request.arguments).instrument(span.clone()) => result,
            () = context.ct.cancelled() => {
                return Err(ErrorData::internal_error("the request was cancelled", None));
            }
        };
        if let Some(result) = &result
            && result.is_error == Some(true)
        {
            span.record("error.type", "tool_error");
        }
        result.map(CallToolResponse::from).ok_or_else(|| {
            ErrorData::invalid_params(
                format!("Unknown tool: `{}` (tools: {})", request.name, tools::NAMES.join(", ")),
                None,
            )
        })
    }
}
