//! The MCP server: bosun's operations as tools for AI agents, over the
//! [Model Context Protocol](https://modelcontextprotocol.io) (JSON-RPC 2.0).
//!
//! Two transports share [`McpServer`]:
//!
//! - stdio (`bosun mcp`): [`McpServer::serve_stdio`] reads newline-delimited
//!   JSON-RPC messages and writes one answer per line. Nothing else is ever
//!   written to the output; logs go to stderr (see [`crate::runtime::telemetry`]).
//!   Requests run concurrently, so a long `wait_for_delivery` does not hold
//!   up a `ping`, and `notifications/cancelled` stops the request it names.
//! - Streamable HTTP (`POST /mcp`): the API calls [`McpServer::handle`] with
//!   the request body and answers `application/json` (202 for notifications).
//!
//! The caller is known before the first message (the key of `BOSUN_API_KEY`
//! or of the `Authorization` header). Every tool calls [`Gateway`], so
//! scopes, tenant isolation and `Idempotency-Key` behave exactly as in the
//! HTTP API.
//!
//! Failures of a tool (a missing scope, an invalid payload, an unknown or
//! another tenant's delivery) are tool results with `isError: true` whose
//! text is the API's error JSON (`{"error": {"code", "message", "field"?}}`),
//! as the MCP specification asks, so that the agent reads them and can
//! correct its call. JSON-RPC errors are for protocol mistakes only:
//! malformed JSON (-32700), an invalid request (-32600), an unknown method
//! (-32601) or unusable params such as an unknown tool (-32602).

use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant};

use bosun_contracts::{CATALOGUE, MessageSpec};
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use uuid::Uuid;

use crate::front::access::Caller;
use crate::front::gateway::{Gateway, GatewayError};
use crate::ports::store::DeadLetterFilter;

/// The protocol versions this server speaks, newest first. A client asking
/// for another one is answered with the first.
pub const PROTOCOL_VERSIONS: [&str; 3] = ["2025-06-18", "2025-03-26", "2024-11-05"];

/// The largest message [`McpServer::serve_stdio`] reads by default (the
/// HTTP API's default body limit).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

/// `wait_for_delivery` waits this long unless told otherwise ...
const DEFAULT_WAIT_SECONDS: f64 = 30.0;
/// ... and never longer than this.
const MAX_WAIT_SECONDS: f64 = 600.0;
/// `list_failures` returns this many dead letters unless told otherwise ...
const DEFAULT_FAILURE_LIMIT: usize = 50;
/// ... and never more than this.
const MAX_FAILURE_LIMIT: usize = 500;
/// When stdin closes, requests still running get this long to answer.
const STDIO_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Gateway errors name HTTP headers; over MCP the same values are tool
/// arguments.
const HEADER_ARGUMENTS: [(&str, &str); 2] = [("X-Bosun-Tenant", "tenant"), ("Idempotency-Key", "idempotencyKey")];

const INSTRUCTIONS: &str = "bosun orchestrates software delivery (repositories, commits, pull requests, pipelines, \
builds, releases, infrastructure, GitOps) with commands and events on a message bus. A delivery is every message \
that follows from one command; it shares the command's correlationId.\n\
Typical use:\n\
1. describe_command: the JSON Schema and an example payload of a command.\n\
2. send_command: validates the payload and sends it; returns its correlationId.\n\
3. wait_for_delivery (or get_delivery) with that correlationId until status is `completed` or `failed`.\n\
4. When it failed: list_failures (grouped: true for an overview) and get_failure show why a message was \
dead-lettered; replay_failure sends it again, optionally with a corrected payload.\n\
Your API key acts for one tenant and sees only that tenant's deliveries and failures. A failed tool call returns \
isError with {\"error\": {\"code\", \"message\", \"field\"}}: fix the named field and call again. Pass an \
idempotencyKey to send_command when a retry must not send twice.";

/// The MCP server over a [`Gateway`]. Cheap to clone.
#[derive(Clone)]
pub struct McpServer {
    gateway: Gateway,
    max_message_bytes: usize,
}

impl McpServer {
    /// A server whose tools act through `gateway`.
    pub fn new(gateway: Gateway) -> Self {
        Self {
            gateway,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }

    /// Sets the largest message [`McpServer::serve_stdio`] reads (longer
    /// lines are answered with an Invalid Request error and skipped).
    pub fn with_max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes.max(1024);
        self
    }

    /// Answers one JSON-RPC message, or a batch (a JSON array, answered with
    /// an array). `None` when nothing is to be answered: a notification, a
    /// response, or a batch of those.
    pub async fn handle(&self, caller: &Caller, request: Value) -> Option<Value> {
        match request {
            Value::Array(batch) if batch.is_empty() => {
                Some(error_answer(Value::Null, INVALID_REQUEST, "an empty batch".into()))
            }
            Value::Array(batch) => {
                let mut answers = Vec::new();
                for message in batch {
                    answers.extend(self.handle_message(caller, message).await);
                }
                (!answers.is_empty()).then_some(Value::Array(answers))
            }
            message => self.handle_message(caller, message).await,
        }
    }

    /// [`McpServer::handle`] for raw bytes: text that is not JSON is
    /// answered with a Parse error (-32700).
    pub async fn handle_text(&self, caller: &Caller, text: &[u8]) -> Option<Value> {
        match serde_json::from_slice::<Value>(text) {
            Ok(request) => self.handle(caller, request).await,
            Err(err) => Some(error_answer(
                Value::Null,
                PARSE_ERROR,
                format!("Parse error: not JSON ({err})"),
            )),
        }
    }

    /// Serves the MCP stdio transport: one JSON-RPC message per line of
    /// `input`, one answer per line on `output`, until `input` ends. Blank
    /// lines are skipped. Requests still running when `input` ends get a
    /// few seconds to answer, then are stopped.
    pub async fn serve_stdio(
        &self,
        caller: Caller,
        input: impl AsyncBufRead + Unpin,
        output: impl AsyncWrite + Unpin,
    ) -> io::Result<()> {
        tracing::info!(key_id = %caller.key_id, tenant_id = %caller.tenant_id, "MCP server on stdio");
        let (answers, mut outbox) = mpsc::unbounded_channel::<Value>();
        let reader = self.read_stdio(caller, input, answers);
        let writer = async move {
            let mut output = output;
            while let Some(answer) = outbox.recv().await {
                let mut line = serde_json::to_vec(&answer).map_err(io::Error::other)?;
                line.push(b'\n');
                output.write_all(&line).await?;
                output.flush().await?;
            }
            Ok::<(), io::Error>(())
        };
        tokio::try_join!(reader, writer)?;
        tracing::info!("MCP stdio input closed");
        Ok(())
    }

    /// Reads messages and starts a task per message; each task sends its
    /// answer to `answers`. Returns when `input` ends and every task is
    /// done or stopped.
    async fn read_stdio(
        &self,
        caller: Caller,
        mut input: impl AsyncBufRead + Unpin,
        answers: mpsc::UnboundedSender<Value>,
    ) -> io::Result<()> {
        let mut tasks: JoinSet<Option<String>> = JoinSet::new();
        let mut running: HashMap<String, AbortHandle> = HashMap::new();
        let mut line = Vec::new();
        loop {
            while let Some(done) = tasks.try_join_next() {
                if let Ok(Some(key)) = done {
                    running.remove(&key);
                }
            }
            match read_line(&mut input, &mut line, self.max_message_bytes).await? {
                LineRead::End => break,
                LineRead::TooLong => {
                    let message = format!("message over {} bytes; skipped", self.max_message_bytes);
                    tracing::warn!("{message}");
                    send(&answers, error_answer(Value::Null, INVALID_REQUEST, message));
                    continue;
                }
                LineRead::Line => {}
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let message = match serde_json::from_slice::<Value>(&line) {
                Ok(message) => message,
                Err(err) => {
                    tracing::warn!(error = %err, "MCP message is not JSON");
                    send(
                        &answers,
                        error_answer(Value::Null, PARSE_ERROR, format!("Parse error: not JSON ({err})")),
                    );
                    continue;
                }
            };
            if let Some(request_id) = cancelled_request(&message) {
                if let Some(task) = running.remove(&id_key(request_id)) {
                    task.abort();
                    tracing::info!(request_id = %request_id, "MCP request cancelled by the client");
                }
                continue;
            }
            // Requests can be cancelled by id; notifications and batches cannot.
            let key = match (message.get("id"), message.get("method")) {
                (Some(id), Some(_)) => Some(id_key(id)),
                _ => None,
            };
            let (server, caller, answers) = (self.clone(), caller.clone(), answers.clone());
            let task_key = key.clone();
            let task = tasks.spawn(async move {
                if let Some(answer) = server.handle(&caller, message).await {
                    send(&answers, answer);
                }
                task_key
            });
            if let Some(key) = key {
                running.insert(key, task);
            }
        }
        drop(answers);
        let finished = tokio::time::timeout(STDIO_SHUTDOWN_GRACE, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if finished.is_err() {
            tracing::warn!(
                requests = tasks.len(),
                "stdin closed; stopping MCP requests still running"
            );
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
        Ok(())
    }

    async fn handle_message(&self, caller: &Caller, message: Value) -> Option<Value> {
        let request = match Incoming::read(message) {
            Ok(Incoming::Request(request)) => request,
            Ok(Incoming::Notification(method)) => {
                tracing::debug!(method, "MCP notification");
                return None;
            }
            Ok(Incoming::Response) => return None,
            Err((id, message)) => return Some(error_answer(id, INVALID_REQUEST, message)),
        };
        let started = Instant::now();
        let answer = match self.dispatch(caller, &request.method, request.params).await {
            Ok(result) => json!({"jsonrpc": "2.0", "id": request.id, "result": result}),
            Err(err) => {
                tracing::debug!(
                    method = %request.method,
                    code = err.code,
                    message = %err.message,
                    "MCP request refused"
                );
                error_answer(request.id, err.code, err.message)
            }
        };
        tracing::debug!(
            method = %request.method,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "MCP request answered"
        );
        Some(answer)
    }

    async fn dispatch(&self, caller: &Caller, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        match method {
            "initialize" => initialize(params),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({"tools": Tool::ALL.iter().map(|tool| tool.definition()).collect::<Vec<_>>()})),
            "tools/call" => self.call_tool(caller, params).await,
            _ => Err(RpcError::new(METHOD_NOT_FOUND, format!("Method not found: `{method}`"))),
        }
    }

    async fn call_tool(&self, caller: &Caller, params: Option<Value>) -> Result<Value, RpcError> {
        let Some(Value::Object(mut params)) = params else {
            return Err(RpcError::new(
                INVALID_PARAMS,
                "tools/call needs params {\"name\", \"arguments\"}".into(),
            ));
        };
        let name = match params.get("name") {
            Some(Value::String(name)) => name.clone(),
            _ => {
                return Err(RpcError::new(
                    INVALID_PARAMS,
                    "tools/call needs params.name (a string)".into(),
                ));
            }
        };
        let tool = Tool::find(&name).ok_or_else(|| {
            let known: Vec<&str> = Tool::ALL.iter().map(|tool| tool.name()).collect();
            RpcError::new(
                INVALID_PARAMS,
                format!("Unknown tool: `{name}` (tools: {})", known.join(", ")),
            )
        })?;
        let arguments = match params.remove("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(arguments)) => arguments,
            Some(_) => {
                return Err(RpcError::new(
                    INVALID_PARAMS,
                    "tools/call params.arguments must be an object".into(),
                ));
            }
        };
        let started = Instant::now();
        let outcome = self.run_tool(caller, tool, &Arguments(arguments)).await;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(match outcome {
            Ok(value) => {
                tracing::info!(tool = tool.name(), key_id = %caller.key_id, elapsed_ms, "MCP tool call");
                tool_result(value, false)
            }
            Err(err) => {
                tracing::info!(
                    tool = tool.name(),
                    key_id = %caller.key_id,
                    elapsed_ms,
                    code = err.code(),
                    error = %err,
                    "MCP tool call failed"
                );
                tool_result(tool_error(&err), true)
            }
        })
    }

    async fn run_tool(&self, caller: &Caller, tool: Tool, arguments: &Arguments) -> Result<Value, GatewayError> {
        arguments.only(tool)?;
        match tool {
            Tool::SendCommand => {
                let message_type = arguments.required_text("type")?;
                let payload = arguments.object("payload")?.ok_or_else(|| {
                    invalid(
                        "payload",
                        "`payload` is required: the command's JSON object (see describe_command)",
                    )
                })?;
                let accepted = self
                    .gateway
                    .send_command(
                        caller,
                        message_type,
                        payload,
                        arguments.text("tenant")?,
                        arguments.uuid("correlationId")?,
                        arguments.text("idempotencyKey")?,
                    )
                    .await?;
                let mut body = accepted.body;
                if let Some(object) = body.as_object_mut() {
                    object.insert("replayed".into(), json!(accepted.replayed));
                }
                Ok(body)
            }
            Tool::DescribeCommand => describe_command(arguments.required_text("type")?),
            Tool::GetDelivery => {
                let correlation_id = arguments.required_text("correlationId")?;
                to_json(&self.gateway.delivery(caller, correlation_id).await?)
            }
            Tool::WaitForDelivery => {
                let correlation_id = arguments.required_text("correlationId")?;
                let seconds = arguments.number("timeoutSeconds")?.unwrap_or(DEFAULT_WAIT_SECONDS);
                if !(0.0..=MAX_WAIT_SECONDS).contains(&seconds) {
                    return Err(invalid(
                        "timeoutSeconds",
                        format!("`timeoutSeconds` must be from 0 to {MAX_WAIT_SECONDS}"),
                    ));
                }
                let delivery = self
                    .gateway
                    .wait_for_delivery(caller, correlation_id, Duration::from_secs_f64(seconds))
                    .await?;
                let timed_out = delivery.status == "in-progress";
                let mut body = to_json(&delivery)?;
                if let Some(object) = body.as_object_mut() {
                    object.insert("timedOut".into(), json!(timed_out));
                }
                Ok(body)
            }
            Tool::ListFailures => {
                let grouped = arguments.flag("grouped")?.unwrap_or(false);
                let limit = arguments.count("limit")?.unwrap_or(DEFAULT_FAILURE_LIMIT);
                if !(1..=MAX_FAILURE_LIMIT).contains(&limit) {
                    return Err(invalid(
                        "limit",
                        format!("`limit` must be from 1 to {MAX_FAILURE_LIMIT}"),
                    ));
                }
                let filter = DeadLetterFilter {
                    consumer: arguments.text("consumer")?.map(str::to_owned),
                    message_type: arguments.text("type")?.map(str::to_owned),
                    reason: arguments.text("reason")?.map(str::to_owned),
                    include_replayed: arguments.flag("includeReplayed")?.unwrap_or(false),
                    // Groups count every matching dead letter.
                    limit: (!grouped).then_some(limit),
                    ..DeadLetterFilter::default()
                };
                if grouped {
                    let groups = self.gateway.dead_letter_groups(caller, filter).await?;
                    Ok(json!({"groups": to_json(&groups)?}))
                } else {
                    let dead_letters = self.gateway.dead_letters(caller, filter).await?;
                    Ok(json!({"count": dead_letters.len(), "deadLetters": to_json(&dead_letters)?}))
                }
            }
            Tool::GetFailure => {
                let id = arguments.required_text("id")?;
                to_json(&self.gateway.dead_letter(caller, id).await?)
            }
            Tool::ReplayFailure => {
                let id = arguments.required_text("id")?;
                let payload = arguments.object("payload")?;
                to_json(&self.gateway.replay(caller, id, payload).await?)
            }
        }
    }
}

// -- the tools ------------------------------------------------------------

/// bosun's tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    SendCommand,
    DescribeCommand,
    GetDelivery,
    WaitForDelivery,
    ListFailures,
    GetFailure,
    ReplayFailure,
}

impl Tool {
    const ALL: [Tool; 7] = [
        Tool::SendCommand,
        Tool::DescribeCommand,
        Tool::GetDelivery,
        Tool::WaitForDelivery,
        Tool::ListFailures,
        Tool::GetFailure,
        Tool::ReplayFailure,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::SendCommand => "send_command",
            Self::DescribeCommand => "describe_command",
            Self::GetDelivery => "get_delivery",
            Self::WaitForDelivery => "wait_for_delivery",
            Self::ListFailures => "list_failures",
            Self::GetFailure => "get_failure",
            Self::ReplayFailure => "replay_failure",
        }
    }

    fn find(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }

    /// The tool as `tools/list` shows it.
    fn definition(self) -> Value {
        let (title, description, schema, read_only, open_world) = match self {
            Self::SendCommand => (
                "Send a command",
                send_command_description(),
                json!({
                    "type": "object",
                    "properties": {
                        "type": {
                            "type": "string",
                            "enum": command_types(),
                            "description": "The command type, e.g. CreateCommit."
                        },
                        "payload": {
                            "type": "object",
                            "description": "The command's payload, a JSON object with camelCase fields (get \
                                its schema and an example with describe_command)."
                        },
                        "correlationId": {
                            "type": "string",
                            "format": "uuid",
                            "description": "Join an existing delivery (e.g. approve a release of it) instead \
                                of starting a new one."
                        },
                        "idempotencyKey": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": 255,
                            "description": "A key you choose: calling again with the same key and arguments \
                                sends nothing and returns the first answer (with replayed: true). Use it when \
                                you may retry."
                        },
                        "tenant": {
                            "type": "string",
                            "description": "Only for platform keys (tenant `*`): the tenant the command is \
                                for. A tenant's key always acts for its own tenant; leave this out."
                        }
                    },
                    "required": ["type", "payload"],
                    "additionalProperties": false
                }),
                false,
                true,
            ),
            Self::DescribeCommand => (
                "Describe a command",
                "The contract of a command: what it does, the JSON Schema of its payload and an example payload \
                 to start from. Call it before send_command to build a valid payload."
                    .to_owned(),
                json!({
                    "type": "object",
                    "properties": {
                        "type": {"type": "string", "enum": command_types(), "description": "The command type, \
                            e.g. CreateCommit."}
                    },
                    "required": ["type"],
                    "additionalProperties": false
                }),
                true,
                false,
            ),
            Self::GetDelivery => (
                "Get a delivery",
                "The current state of a delivery: status (`in-progress`, `completed` or `failed`) and every \
                 message that followed from the command, with its consumers, status (sent, completed, \
                 retry-scheduled, dead-lettered, duplicate, replayed), attempts and events. Does not wait; see \
                 wait_for_delivery. Needs the deliveries:read scope."
                    .to_owned(),
                correlation_schema(json!({})),
                true,
                false,
            ),
            Self::WaitForDelivery => (
                "Wait for a delivery",
                format!(
                    "Waits until a delivery is `completed` or `failed`, or timeoutSeconds pass (default \
                     {DEFAULT_WAIT_SECONDS}, at most {MAX_WAIT_SECONDS}), then returns it as get_delivery does, \
                     plus timedOut: true when it is still in progress (then call again). Keep timeoutSeconds \
                     below your client's request timeout. When it failed, list_failures and get_failure tell \
                     why. Needs the deliveries:read scope."
                ),
                correlation_schema(json!({
                    "timeoutSeconds": {
                        "type": "number",
                        "minimum": 0,
                        "maximum": MAX_WAIT_SECONDS,
                        "default": DEFAULT_WAIT_SECONDS,
                        "description": "How long to wait at most, in seconds."
                    }
                })),
                true,
                false,
            ),
            Self::ListFailures => (
                "List failures",
                format!(
                    "Dead letters: messages a consumer gave up on, newest first, each with its consumer, type, \
                     correlationId, reason (e.g. retries-exhausted, permanent-failure, invalid-field), description \
                     and error chain. With grouped: true, one line per (reason, consumer, type) with a count and \
                     the ids, largest group first: the quickest overview. Already replayed ones are left out unless \
                     includeReplayed is true. Returns at most `limit` (default {DEFAULT_FAILURE_LIMIT}) dead \
                     letters. Needs deliveries:read or dead-letters:replay."
                ),
                json!({
                    "type": "object",
                    "properties": {
                        "consumer": {"type": "string", "description": "Only this consumer's, e.g. commit."},
                        "type": {"type": "string", "description": "Only this message type's, e.g. CreateCommit."},
                        "reason": {"type": "string", "description": "Only this cause, e.g. retries-exhausted."},
                        "grouped": {
                            "type": "boolean",
                            "default": false,
                            "description": "Group by reason, consumer and type."
                        },
                        "includeReplayed": {
                            "type": "boolean",
                            "default": false,
                            "description": "Also list dead letters already replayed."
                        },
                        "limit": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_FAILURE_LIMIT,
                            "default": DEFAULT_FAILURE_LIMIT,
                            "description": "At most this many dead letters (not used when grouped)."
                        }
                    },
                    "additionalProperties": false
                }),
                true,
                false,
            ),
            Self::GetFailure => (
                "Get a failure",
                "One dead letter with everything known about it: the failed attempts, the error chain, its \
                 replays and the original message (`envelope`, whose `payload` is what replay_failure can \
                 correct). Needs deliveries:read or dead-letters:replay."
                    .to_owned(),
                id_schema(json!({})),
                true,
                false,
            ),
            Self::ReplayFailure => (
                "Replay a failure",
                "Sends a dead letter's message again to the consumer that gave up on it. With payload, the \
                 message's payload is replaced first (validated against its contract; an invalid payload is \
                 refused naming the field): fix the cause, e.g. a field the failure named, then replay. \
                 Returns the replay (replayId, destination, edited). Needs the dead-letters:replay scope."
                    .to_owned(),
                id_schema(json!({
                    "payload": {
                        "type": "object",
                        "description": "A corrected payload for the message (the whole payload, as in \
                            get_failure's envelope.payload)."
                    }
                })),
                false,
                true,
            ),
        };
        json!({
            "name": self.name(),
            "title": title,
            "description": description,
            "inputSchema": schema,
            "annotations": {
                "title": title,
                "readOnlyHint": read_only,
                "destructiveHint": false,
                "idempotentHint": read_only,
                "openWorldHint": open_world
            }
        })
    }
}

/// The names of the commands, in catalogue order.
fn command_types() -> Vec<&'static str> {
    commands().map(|spec| spec.message_type).collect()
}

fn commands() -> impl Iterator<Item = &'static MessageSpec> {
    CATALOGUE.iter().filter(|spec| spec.is_sendable())
}

fn send_command_description() -> String {
    let mut text = String::from(
        "Sends a bosun command for your tenant after validating its payload against the command's contract \
         (an invalid payload is refused naming the field, e.g. payload.branch). Returns messageId and \
         correlationId; follow the delivery with wait_for_delivery or get_delivery. Get a command's payload \
         schema and an example with describe_command. Needs the commands:send scope.\nCommands:",
    );
    for spec in commands() {
        text.push_str(&format!("\n- {}: {}", spec.message_type, spec.description));
    }
    text
}

fn correlation_schema(extra: Value) -> Value {
    let mut properties = Map::new();
    properties.insert(
        "correlationId".into(),
        json!({
            "type": "string",
            "format": "uuid",
            "description": "The delivery's correlationId (send_command returns it)."
        }),
    );
    if let Value::Object(extra) = extra {
        properties.extend(extra);
    }
    json!({"type": "object", "properties": properties, "required": ["correlationId"], "additionalProperties": false})
}

fn id_schema(extra: Value) -> Value {
    let mut properties = Map::new();
    properties.insert(
        "id".into(),
        json!({
            "type": "string",
            "description": "The dead letter's id (from list_failures; a unique prefix is enough)."
        }),
    );
    if let Value::Object(extra) = extra {
        properties.extend(extra);
    }
    json!({"type": "object", "properties": properties, "required": ["id"], "additionalProperties": false})
}

/// `describe_command`: the catalogue entry, the payload schema and a sample.
fn describe_command(message_type: &str) -> Result<Value, GatewayError> {
    let spec = MessageSpec::find(message_type)
        .filter(|spec| spec.is_sendable())
        .ok_or_else(|| {
            GatewayError::UnknownType(format!(
                "`{message_type}` is not a command (commands: {})",
                command_types().join(", ")
            ))
        })?;
    let schema = bosun_contracts::messages::payload_schemas()
        .into_iter()
        .find(|(name, _)| *name == spec.message_type)
        .map(|(_, schema)| serde_json::to_value(schema))
        .transpose()
        .map_err(|err| GatewayError::Unavailable(format!("could not write the schema: {err}")))?;
    let example = bosun_contracts::samples::sample(spec.message_type).map(|message| message.to_payload());
    Ok(json!({
        "type": spec.message_type,
        "description": spec.description,
        "schemaVersion": spec.schema_version,
        "payloadSchema": schema,
        "examplePayload": example,
    }))
}

// -- arguments ------------------------------------------------------------

/// A tool call's arguments, read with the API's error for a bad one.
struct Arguments(Map<String, Value>);

impl Arguments {
    /// Refuses arguments the tool does not take (a misspelt name would
    /// otherwise be ignored silently).
    fn only(&self, tool: Tool) -> Result<(), GatewayError> {
        let definition = tool.definition();
        let known = definition["inputSchema"]["properties"].as_object();
        for name in self.0.keys() {
            if !known.is_some_and(|known| known.contains_key(name)) {
                let names: Vec<&str> = known.into_iter().flat_map(|k| k.keys().map(String::as_str)).collect();
                return Err(invalid(
                    name,
                    format!(
                        "{} takes no argument `{name}` (it takes: {})",
                        tool.name(),
                        names.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A string argument; absent or null is `None`.
    fn text(&self, name: &str) -> Result<Option<&str>, GatewayError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(_) => Err(invalid(name, format!("`{name}` must be a string"))),
        }
    }

    fn required_text(&self, name: &str) -> Result<&str, GatewayError> {
        self.text(name)?
            .filter(|text| !text.trim().is_empty())
            .ok_or_else(|| invalid(name, format!("`{name}` is required")))
    }

    fn uuid(&self, name: &str) -> Result<Option<Uuid>, GatewayError> {
        self.text(name)?
            .map(|text| Uuid::parse_str(text.trim()).map_err(|_| invalid(name, format!("`{name}` must be a UUID"))))
            .transpose()
    }

    fn object(&self, name: &str) -> Result<Option<&Value>, GatewayError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(value @ Value::Object(_)) => Ok(Some(value)),
            Some(_) => Err(invalid(name, format!("`{name}` must be a JSON object"))),
        }
    }

    fn flag(&self, name: &str) -> Result<Option<bool>, GatewayError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(*flag)),
            Some(_) => Err(invalid(name, format!("`{name}` must be true or false"))),
        }
    }

    fn number(&self, name: &str) -> Result<Option<f64>, GatewayError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(number)) => number
                .as_f64()
                .map(Some)
                .ok_or_else(|| invalid(name, format!("`{name}` must be a number"))),
            Some(_) => Err(invalid(name, format!("`{name}` must be a number"))),
        }
    }

    fn count(&self, name: &str) -> Result<Option<usize>, GatewayError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(number)) => number
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| invalid(name, format!("`{name}` must be a whole number"))),
            Some(_) => Err(invalid(name, format!("`{name}` must be a whole number"))),
        }
    }
}

fn invalid(field: &str, message: impl Into<String>) -> GatewayError {
    GatewayError::Invalid {
        field: Some(field.to_owned()),
        message: message.into(),
    }
}

fn to_json(value: &impl Serialize) -> Result<Value, GatewayError> {
    serde_json::to_value(value).map_err(|err| GatewayError::Unavailable(format!("could not write the answer: {err}")))
}

// -- answers --------------------------------------------------------------

/// A tool's answer: the JSON as text (what every client shows the model)
/// and as `structuredContent`.
fn tool_result(value: Value, is_error: bool) -> Value {
    let text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string());
    json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": value,
        "isError": is_error,
    })
}

/// The API's error JSON, with header names replaced by the tool arguments
/// that carry the same values over MCP.
fn tool_error(err: &GatewayError) -> Value {
    let mut body = err.to_json();
    if let Some(error) = body.get_mut("error").and_then(Value::as_object_mut) {
        for (header, argument) in HEADER_ARGUMENTS {
            if error.get("field").and_then(Value::as_str) == Some(header) {
                error.insert("field".into(), json!(argument));
            }
            if let Some(Value::String(message)) = error.get_mut("message") {
                *message = message.replace(header, &format!("`{argument}`"));
            }
        }
    }
    body
}

fn initialize(params: Option<Value>) -> Result<Value, RpcError> {
    let requested = match &params {
        None | Some(Value::Null) => None,
        Some(Value::Object(params)) => params.get("protocolVersion").and_then(Value::as_str),
        Some(_) => {
            return Err(RpcError::new(
                INVALID_PARAMS,
                "initialize params must be an object".into(),
            ));
        }
    };
    let version = requested
        .and_then(|requested| PROTOCOL_VERSIONS.into_iter().find(|known| *known == requested))
        .unwrap_or(PROTOCOL_VERSIONS[0]);
    if let Some(Value::Object(params)) = &params {
        let client = params.get("clientInfo").cloned().unwrap_or(Value::Null);
        tracing::info!(requested = requested.unwrap_or("none"), version, %client, "MCP client initialized");
    }
    Ok(json!({
        "protocolVersion": version,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "bosun", "version": env!("CARGO_PKG_VERSION")},
        "instructions": INSTRUCTIONS,
    }))
}

fn error_answer(id: Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn send(answers: &mpsc::UnboundedSender<Value>, answer: Value) {
    // The writer stops only when the output failed; serve_stdio reports that.
    let _ = answers.send(answer);
}

/// The `requestId` of a `notifications/cancelled`.
fn cancelled_request(message: &Value) -> Option<&Value> {
    (message.get("method").and_then(Value::as_str) == Some("notifications/cancelled") && message.get("id").is_none())
        .then(|| message.get("params").and_then(|params| params.get("requestId")))
        .flatten()
}

/// A request id as a map key (`1` and `"1"` stay different).
fn id_key(id: &Value) -> String {
    id.to_string()
}

/// A JSON-RPC error.
#[derive(Debug)]
struct RpcError {
    code: i64,
    message: String,
}

impl RpcError {
    fn new(code: i64, message: String) -> Self {
        Self { code, message }
    }
}

/// A request to answer.
struct Request {
    id: Value,
    method: String,
    params: Option<Value>,
}

/// What a JSON-RPC message is.
enum Incoming {
    Request(Request),
    Notification(String),
    /// A response (to a request this server never sends): ignored.
    Response,
}

impl Incoming {
    /// Reads a message; `Err` is an Invalid Request with the id to answer.
    fn read(message: Value) -> Result<Self, (Value, String)> {
        let Value::Object(mut message) = message else {
            return Err((
                Value::Null,
                "Invalid Request: a JSON-RPC message is a JSON object".into(),
            ));
        };
        let id = message.remove("id");
        let answer_id = match &id {
            Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
            _ => Value::Null,
        };
        if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err((answer_id, "Invalid Request: `jsonrpc` must be \"2.0\"".into()));
        }
        if id
            .as_ref()
            .is_some_and(|id| !matches!(id, Value::String(_) | Value::Number(_)))
        {
            return Err((Value::Null, "Invalid Request: `id` must be a string or a number".into()));
        }
        let method = match message.remove("method") {
            Some(Value::String(method)) => method,
            None if message.contains_key("result") || message.contains_key("error") => {
                return Ok(Self::Response);
            }
            _ => return Err((answer_id, "Invalid Request: `method` must be a string".into())),
        };
        let params = message.remove("params");
        Ok(match id {
            Some(id) => Self::Request(Request { id, method, params }),
            None => Self::Notification(method),
        })
    }
}

/// How [`read_line`] ended.
enum LineRead {
    /// A line (without its newline) is in the buffer.
    Line,
    /// The line was longer than allowed; it was read and dropped.
    TooLong,
    /// The input ended.
    End,
}

/// Reads one line into `line` (cleared first), holding at most `max` bytes
/// of it in memory.
async fn read_line(input: &mut (impl AsyncBufRead + Unpin), line: &mut Vec<u8>, max: usize) -> io::Result<LineRead> {
    line.clear();
    let mut too_long = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => LineRead::TooLong,
                (false, true) => LineRead::End,
                (false, false) => LineRead::Line,
            });
        }
        let newline = available.iter().position(|&byte| byte == b'\n');
        let chunk = &available[..newline.unwrap_or(available.len())];
        if !too_long {
            if line.len() + chunk.len() > max {
                too_long = true;
                line.clear();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = newline.map_or(available.len(), |at| at + 1);
        input.consume(used);
        if newline.is_some() {
            return Ok(if too_long { LineRead::TooLong } else { LineRead::Line });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bosun_contracts::{Envelope, Message};
    use serde_json::{Value, json};
    use time::OffsetDateTime;
    use tokio_util::sync::CancellationToken;
    use uuid::Uuid;

    use super::*;
    use crate::front::access::{ALL_TENANTS, Scope};
    use crate::ports::store::{DeadLetterRecord, DeadLetterStatus};
    use crate::runtime::config::Settings;
    use crate::wiring::Backends;
    use tokio::io::AsyncReadExt;

    /// A server over the embedded transport and SQLite store in a
    /// temporary directory (no consumers run: deliveries stay in progress).
    struct Fixture {
        server: McpServer,
        backends: Backends,
        _dir: tempfile::TempDir,
    }

    async fn fixture() -> Fixture {
        let dir = tempfile::tempdir().expect("temporary directory");
        let backends = Backends::open(&Settings::with_data_dir(dir.path()))
            .await
            .expect("backends open");
        let gateway = Gateway::new(backends.clone(), CancellationToken::new());
        Fixture {
            server: McpServer::new(gateway),
            backends,
            _dir: dir,
        }
    }

    fn caller(tenant: &str, scopes: &[Scope]) -> Caller {
        Caller::new(format!("{tenant}-key"), tenant, scopes.to_vec())
    }

    fn contoso() -> Caller {
        caller("contoso", &[Scope::Admin])
    }

    fn request(id: i64, method: &str, params: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    /// Calls a tool; returns (isError, structuredContent) after checking
    /// that the text content holds the same JSON.
    async fn call(server: &McpServer, caller: &Caller, tool: &str, arguments: Value) -> (bool, Value) {
        let answer = server
            .handle(
                caller,
                request(1, "tools/call", json!({"name": tool, "arguments": arguments})),
            )
            .await
            .expect("a request is answered");
        assert_eq!(answer["id"], 1, "{answer}");
        let result = &answer["result"];
        assert!(
            result.is_object(),
            "tools/call answers a result, not an error: {answer}"
        );
        assert_eq!(result["content"][0]["type"], "text", "{answer}");
        let text = result["content"][0]["text"].as_str().expect("text content");
        let from_text: Value = serde_json::from_str(text).expect("the text is JSON");
        assert_eq!(
            from_text, result["structuredContent"],
            "text and structuredContent agree"
        );
        (result["isError"] == json!(true), result["structuredContent"].clone())
    }

    fn probe(group: &str) -> Value {
        json!({"group": group, "sequence": 1})
    }

    #[tokio::test]
    async fn initialize_answers_the_requested_version_when_known_else_the_latest() {
        let f = fixture().await;
        for (requested, expected) in [
            ("2025-06-18", "2025-06-18"),
            ("2025-03-26", "2025-03-26"),
            ("2024-11-05", "2024-11-05"),
            ("2099-01-01", "2025-06-18"),
        ] {
            let params =
                json!({"protocolVersion": requested, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
            let answer = f
                .server
                .handle(
                    &contoso(),
                    json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": params}),
                )
                .await
                .expect("answered");
            assert_eq!(answer["id"], "init");
            let result = &answer["result"];
            assert_eq!(result["protocolVersion"], expected, "{requested}");
            assert_eq!(result["capabilities"], json!({"tools": {}}));
            assert_eq!(result["serverInfo"]["name"], "bosun");
            assert_eq!(result["serverInfo"]["version"], env!("CARGO_PKG_VERSION"));
            assert!(
                result["instructions"]
                    .as_str()
                    .is_some_and(|text| text.contains("send_command"))
            );
        }
        let ping = f
            .server
            .handle(&contoso(), request(9, "ping", json!({})))
            .await
            .expect("answered");
        assert_eq!(ping, json!({"jsonrpc": "2.0", "id": 9, "result": {}}));
    }

    #[tokio::test]
    async fn notifications_and_responses_get_no_answer_and_batches_answer_requests_only() {
        let f = fixture().await;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(f.server.handle(&contoso(), initialized.clone()).await, None);
        let unknown_notification = json!({"jsonrpc": "2.0", "method": "notifications/whatever", "params": {}});
        assert_eq!(f.server.handle(&contoso(), unknown_notification).await, None);
        let response = json!({"jsonrpc": "2.0", "id": 3, "result": {}});
        assert_eq!(f.server.handle(&contoso(), response).await, None);
        assert_eq!(f.server.handle(&contoso(), json!([initialized.clone()])).await, None);
        let batch = json!([
            request(1, "ping", json!({})),
            initialized,
            request(2, "nope", json!({}))
        ]);
        let answers = f.server.handle(&contoso(), batch).await.expect("answered");
        let answers = answers.as_array().expect("a batch is answered with an array");
        assert_eq!(answers.len(), 2);
        assert_eq!(answers[0]["id"], 1);
        assert_eq!(answers[1]["error"]["code"], -32601);
        let empty = f.server.handle(&contoso(), json!([])).await.expect("answered");
        assert_eq!(empty["error"]["code"], -32600);
    }

    #[tokio::test]
    async fn protocol_mistakes_are_json_rpc_errors() {
        let f = fixture().await;
        let unknown = f
            .server
            .handle(&contoso(), request(4, "resources/list", json!({})))
            .await
            .expect("answered");
        assert_eq!(unknown["id"], 4);
        assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
        for (message, code) in [
            (json!({"id": 5, "method": "ping"}), -32600),
            (json!({"jsonrpc": "2.0", "id": 5, "method": 7}), -32600),
            (json!("ping"), -32600),
            (request(5, "tools/call", json!({"arguments": {}})), -32602),
            (request(5, "tools/call", json!({"name": "format_disk"})), -32602),
            (
                request(5, "tools/call", json!({"name": "get_delivery", "arguments": "x"})),
                -32602,
            ),
        ] {
            let answer = f.server.handle(&contoso(), message.clone()).await.expect("answered");
            assert_eq!(answer["error"]["code"], code, "{message} -> {answer}");
            assert!(answer.get("result").is_none());
        }
        let malformed = f
            .server
            .handle_text(&contoso(), b"{\"jsonrpc\": \"2.0\",")
            .await
            .expect("answered");
        assert_eq!(malformed["error"]["code"], -32700);
        assert_eq!(malformed["id"], Value::Null);
    }

    #[tokio::test]
    async fn tools_list_describes_every_tool_and_lists_the_commands() {
        let f = fixture().await;
        let answer = f
            .server
            .handle(&contoso(), request(1, "tools/list", json!({})))
            .await
            .expect("answered");
        let tools = answer["result"]["tools"].as_array().expect("tools");
        let names: Vec<&str> = tools.iter().filter_map(|tool| tool["name"].as_str()).collect();
        for expected in [
            "send_command",
            "get_delivery",
            "wait_for_delivery",
            "list_failures",
            "replay_failure",
        ] {
            assert!(names.contains(&expected), "{expected} in {names:?}");
        }
        for tool in tools {
            assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
            assert!(tool["description"].as_str().is_some_and(|d| d.len() > 80), "{tool}");
        }
        let send = tools
            .iter()
            .find(|tool| tool["name"] == "send_command")
            .expect("send_command");
        let description = send["description"].as_str().expect("description");
        for spec in CATALOGUE {
            let listed = description.contains(&format!("- {}:", spec.message_type));
            assert_eq!(listed, spec.is_sendable(), "{}", spec.message_type);
        }
        assert!(description.contains("- CreateCommit: "));
        assert_eq!(send["inputSchema"]["required"], json!(["type", "payload"]));
    }

    #[tokio::test]
    async fn send_command_sends_and_get_delivery_shows_it_to_its_tenant_only() {
        let f = fixture().await;
        let (failed, sent) = call(
            &f.server,
            &contoso(),
            "send_command",
            json!({"type": "Probe", "payload": probe("mcp")}),
        )
        .await;
        assert!(!failed, "{sent}");
        assert_eq!(sent["messageType"], "Probe");
        assert_eq!(sent["tenantId"], "contoso");
        assert_eq!(sent["replayed"], false);
        let correlation_id = sent["correlationId"].as_str().expect("correlationId").to_owned();
        Uuid::parse_str(&correlation_id).expect("a UUID");
        // It is on the probe queue.
        let depth = f
            .backends
            .transport
            .depth(&bosun_contracts::Destination::Queue("probe".into()))
            .await
            .expect("depth");
        assert_eq!(depth, 1);

        let reader = caller("contoso", &[Scope::DeliveriesRead]);
        let (failed, delivery) = call(
            &f.server,
            &reader,
            "get_delivery",
            json!({"correlationId": correlation_id}),
        )
        .await;
        assert!(!failed, "{delivery}");
        assert_eq!(delivery["correlationId"], json!(correlation_id));
        assert_eq!(delivery["tenantId"], "contoso");
        assert_eq!(delivery["status"], "in-progress");
        assert_eq!(delivery["messages"][0]["messageType"], "Probe");

        // Another tenant is told it does not exist, not that it is forbidden.
        let other = caller("fabrikam", &[Scope::Admin]);
        let (failed, error) = call(
            &f.server,
            &other,
            "get_delivery",
            json!({"correlationId": correlation_id}),
        )
        .await;
        assert!(failed);
        assert_eq!(error["error"]["code"], "not-found", "{error}");
        let (failed, error) = call(
            &f.server,
            &other,
            "wait_for_delivery",
            json!({"correlationId": correlation_id, "timeoutSeconds": 0}),
        )
        .await;
        assert!(failed);
        assert_eq!(error["error"]["code"], "not-found");
        // ... and cannot join it either.
        let (failed, error) = call(
            &f.server,
            &other,
            "send_command",
            json!({"type": "Probe", "payload": probe("mcp"), "correlationId": correlation_id}),
        )
        .await;
        assert!(failed);
        assert_eq!(error["error"]["code"], "not-found");

        // A platform key sees it.
        let platform = caller(ALL_TENANTS, &[Scope::DeliveriesRead]);
        let (failed, _) = call(
            &f.server,
            &platform,
            "get_delivery",
            json!({"correlationId": correlation_id}),
        )
        .await;
        assert!(!failed);
    }

    #[tokio::test]
    async fn send_command_refusals_name_the_field() {
        let f = fixture().await;
        let cases = [
            (
                json!({"type": "Probe", "payload": {"group": "mcp", "workMs": 999_999}}),
                "invalid-field",
                Some("payload.workMs"),
            ),
            (
                json!({"type": "Probe", "payload": {"group": 5, "sequence": 1}}),
                "invalid-field",
                Some("payload.group"),
            ),
            (json!({"type": "Probe"}), "invalid-field", Some("payload")),
            (
                json!({"type": "Probe", "payload": "{\"group\":\"x\"}"}),
                "invalid-field",
                Some("payload"),
            ),
            (json!({"payload": probe("mcp")}), "invalid-field", Some("type")),
            (
                json!({"type": "Frobnicate", "payload": {}}),
                "unknown-type",
                Some("type"),
            ),
            (
                json!({"type": "ProbeEchoed", "payload": {"group": "g", "sequence": 1}}),
                "unknown-type",
                Some("type"),
            ),
            (
                json!({"type": "Probe", "payload": probe("mcp"), "correlationId": "nope"}),
                "invalid-field",
                Some("correlationId"),
            ),
            (
                json!({"type": "Probe", "payload": probe("mcp"), "correlation_id": "x"}),
                "invalid-field",
                Some("correlation_id"),
            ),
            (
                json!({"type": "Probe", "payload": probe("mcp"), "tenant": "fabrikam"}),
                "invalid-field",
                Some("tenant"),
            ),
            (
                json!({"type": "Probe", "payload": probe("mcp"), "idempotencyKey": ""}),
                "invalid-field",
                Some("idempotencyKey"),
            ),
        ];
        for (arguments, code, field) in cases {
            let (failed, error) = call(&f.server, &contoso(), "send_command", arguments.clone()).await;
            assert!(failed, "{arguments} was accepted: {error}");
            assert_eq!(error["error"]["code"], code, "{arguments}: {error}");
            assert_eq!(error["error"]["field"].as_str(), field, "{arguments}: {error}");
            assert!(
                error["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.contains("X-Bosun-Tenant"))
            );
        }
        // Nothing was sent.
        let depth = f
            .backends
            .transport
            .depth(&bosun_contracts::Destination::Queue("probe".into()))
            .await
            .expect("depth");
        assert_eq!(depth, 0);
    }

    #[tokio::test]
    async fn scopes_and_platform_keys_are_the_gateways() {
        let f = fixture().await;
        let reader = caller("contoso", &[Scope::DeliveriesRead]);
        let (failed, error) = call(
            &f.server,
            &reader,
            "send_command",
            json!({"type": "Probe", "payload": probe("mcp")}),
        )
        .await;
        assert!(failed);
        assert_eq!(error["error"]["code"], "forbidden", "{error}");
        assert!(
            error["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("commands:send"))
        );
        let sender = caller("contoso", &[Scope::CommandsSend]);
        let (failed, error) = call(&f.server, &sender, "list_failures", json!({})).await;
        assert!(failed);
        assert_eq!(error["error"]["code"], "forbidden");
        // Approving is its own right; internal messages are nobody's to send.
        let approve = json!({"releaseId": "payments-api-1", "environment": "prod", "approver": "mallory"});
        let (failed, error) = call(
            &f.server,
            &sender,
            "send_command",
            json!({"type": "ApproveRelease", "payload": approve}),
        )
        .await;
        assert!(failed);
        assert_eq!(error["error"]["code"], "forbidden", "{error}");
        assert!(error.to_string().contains("releases:approve"), "{error}");
        let timeout = json!({"releaseId": "payments-api-1", "environment": "prod", "deadline": "2020-01-01T00:00:00Z"});
        let (failed, error) = call(
            &f.server,
            &caller("contoso", &[Scope::Admin]),
            "send_command",
            json!({"type": "ReleaseApprovalTimeout", "payload": timeout}),
        )
        .await;
        assert!(failed);
        assert_eq!(error["error"]["code"], "unknown-type", "{error}");
        let (failed, error) = call(
            &f.server,
            &reader,
            "replay_failure",
            json!({"id": Uuid::now_v7().to_string()}),
        )
        .await;
        assert!(failed);
        assert_eq!(error["error"]["code"], "forbidden");

        let platform = caller(ALL_TENANTS, &[Scope::CommandsSend]);
        let (failed, error) = call(
            &f.server,
            &platform,
            "send_command",
            json!({"type": "Probe", "payload": probe("mcp")}),
        )
        .await;
        assert!(failed);
        assert_eq!(error["error"]["field"], "tenant", "{error}");
        let (failed, sent) = call(
            &f.server,
            &platform,
            "send_command",
            json!({"type": "Probe", "payload": probe("mcp"), "tenant": "fabrikam"}),
        )
        .await;
        assert!(!failed, "{sent}");
        assert_eq!(sent["tenantId"], "fabrikam");
    }

    #[tokio::test]
    async fn an_idempotency_key_sends_once() {
        let f = fixture().await;
        let arguments = json!({"type": "Probe", "payload": probe("mcp"), "idempotencyKey": "run-42"});
        let (_, first) = call(&f.server, &contoso(), "send_command", arguments.clone()).await;
        let (failed, second) = call(&f.server, &contoso(), "send_command", arguments).await;
        assert!(!failed, "{second}");
        assert_eq!(first["replayed"], false);
        assert_eq!(second["replayed"], true);
        assert_eq!(first["correlationId"], second["correlationId"]);
        assert_eq!(first["messageId"], second["messageId"]);
        let (failed, error) = call(
            &f.server,
            &contoso(),
            "send_command",
            json!({"type": "Probe", "payload": probe("other"), "idempotencyKey": "run-42"}),
        )
        .await;
        assert!(failed);
        assert_eq!(error["error"]["code"], "idempotency-key-reused");
        assert!(
            error["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("`idempotencyKey`")),
            "{error}"
        );
    }

    #[tokio::test]
    async fn wait_for_delivery_returns_when_the_time_is_up_and_checks_its_timeout() {
        let f = fixture().await;
        let (_, sent) = call(
            &f.server,
            &contoso(),
            "send_command",
            json!({"type": "Probe", "payload": probe("mcp")}),
        )
        .await;
        let started = Instant::now();
        let (failed, delivery) = call(
            &f.server,
            &contoso(),
            "wait_for_delivery",
            json!({"correlationId": sent["correlationId"], "timeoutSeconds": 0.3}),
        )
        .await;
        assert!(!failed, "{delivery}");
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(delivery["status"], "in-progress");
        assert_eq!(delivery["timedOut"], true);
        for timeout in [json!(601), json!(-1), json!("10")] {
            let (failed, error) = call(
                &f.server,
                &contoso(),
                "wait_for_delivery",
                json!({"correlationId": sent["correlationId"], "timeoutSeconds": timeout}),
            )
            .await;
            assert!(failed, "{timeout}");
            assert_eq!(error["error"]["field"], "timeoutSeconds");
        }
        let (failed, error) = call(&f.server, &contoso(), "get_delivery", json!({})).await;
        assert!(failed);
        assert_eq!(error["error"]["field"], "correlationId");
    }

    #[tokio::test]
    async fn describe_command_gives_schema_and_a_valid_example() {
        let f = fixture().await;
        let (failed, described) = call(
            &f.server,
            &contoso(),
            "describe_command",
            json!({"type": "CreateCommit"}),
        )
        .await;
        assert!(!failed, "{described}");
        assert_eq!(described["type"], "CreateCommit");
        assert!(
            described["payloadSchema"]["properties"]["branch"].is_object(),
            "{described}"
        );
        Message::from_type_and_payload("CreateCommit", &described["examplePayload"]).expect("the example is valid");
        let (failed, error) = call(
            &f.server,
            &contoso(),
            "describe_command",
            json!({"type": "CommitCreated"}),
        )
        .await;
        assert!(failed);
        assert_eq!(error["error"]["code"], "unknown-type");
    }

    /// A dead-lettered Probe of `tenant`, as the host records one.
    async fn dead_letter(backends: &Backends, tenant: &str, reason: &str) -> DeadLetterRecord {
        let message = Message::Probe(bosun_contracts::samples::probe());
        let envelope = Envelope::new(&message, Uuid::now_v7(), tenant, "test");
        let record = DeadLetterRecord {
            id: Uuid::now_v7(),
            consumer: Some("probe".into()),
            entity: "probe".into(),
            transport_sequence: None,
            broker_message_id: envelope.message_id.to_string(),
            message_id: Some(envelope.message_id.to_string()),
            message_type: Some("Probe".into()),
            correlation_id: Some(envelope.correlation_id.to_string()),
            tenant_id: Some(tenant.into()),
            body: envelope.to_vec(),
            reason: reason.into(),
            description: format!("{reason}: gave up"),
            error_chain: vec!["outer".into(), "inner".into()],
            attempts: vec![],
            dead_lettered_at: OffsetDateTime::now_utc(),
            origin: "host".into(),
            status: DeadLetterStatus::Dead,
            replays: vec![],
        };
        backends
            .store
            .record_dead_letter(record.clone(), None)
            .await
            .expect("recorded");
        record
    }

    #[tokio::test]
    async fn failures_are_listed_grouped_shown_and_replayed_per_tenant() {
        let f = fixture().await;
        let first = dead_letter(&f.backends, "contoso", "invalid-field").await;
        dead_letter(&f.backends, "contoso", "invalid-field").await;
        dead_letter(&f.backends, "contoso", "retries-exhausted").await;
        let theirs = dead_letter(&f.backends, "fabrikam", "invalid-field").await;

        let (failed, listed) = call(&f.server, &contoso(), "list_failures", json!({})).await;
        assert!(!failed, "{listed}");
        assert_eq!(listed["count"], 3);
        assert!(
            listed["deadLetters"]
                .as_array()
                .expect("list")
                .iter()
                .all(|d| d["tenantId"] == "contoso")
        );
        let (_, limited) = call(
            &f.server,
            &contoso(),
            "list_failures",
            json!({"reason": "invalid-field", "limit": 1}),
        )
        .await;
        assert_eq!(limited["count"], 1);
        let (_, grouped) = call(&f.server, &contoso(), "list_failures", json!({"grouped": true})).await;
        assert_eq!(grouped["groups"][0]["reason"], "invalid-field", "{grouped}");
        assert_eq!(grouped["groups"][0]["count"], 2);
        assert_eq!(grouped["groups"][1]["count"], 1);

        let (failed, detail) = call(
            &f.server,
            &contoso(),
            "get_failure",
            json!({"id": first.id.to_string()}),
        )
        .await;
        assert!(!failed, "{detail}");
        assert_eq!(detail["envelope"]["payload"]["group"], "canary");
        let other = caller("fabrikam", &[Scope::Admin]);
        let (failed, error) = call(&f.server, &other, "get_failure", json!({"id": first.id.to_string()})).await;
        assert!(failed);
        assert_eq!(error["error"]["code"], "not-found");
        let (failed, error) = call(
            &f.server,
            &contoso(),
            "replay_failure",
            json!({"id": theirs.id.to_string()}),
        )
        .await;
        assert!(failed);
        assert_eq!(error["error"]["code"], "not-found");

        let bad = json!({"id": first.id.to_string(), "payload": {"group": "canary", "workMs": 999_999}});
        let (failed, error) = call(&f.server, &contoso(), "replay_failure", bad).await;
        assert!(failed);
        assert_eq!(error["error"]["field"], "payload.workMs", "{error}");

        let edited = json!({"id": first.id.to_string(), "payload": {"group": "fixed"}});
        let (failed, replay) = call(&f.server, &contoso(), "replay_failure", edited).await;
        assert!(!failed, "{replay}");
        assert_eq!(replay["edited"], true);
        assert_eq!(replay["by"], "key:contoso-key");
        assert!(replay["replayId"].is_string());
        let (_, listed) = call(&f.server, &contoso(), "list_failures", json!({})).await;
        assert_eq!(listed["count"], 2, "a replayed dead letter leaves the default list");
        let (_, listed) = call(&f.server, &contoso(), "list_failures", json!({"includeReplayed": true})).await;
        assert_eq!(listed["count"], 3);
    }

    fn as_line(value: Value) -> String {
        format!("{value}\n")
    }

    async fn stdio(server: &McpServer, caller: Caller, input: &str) -> Vec<Value> {
        let mut output = Vec::new();
        server
            .serve_stdio(caller, tokio::io::BufReader::new(input.as_bytes()), &mut output)
            .await
            .expect("served");
        let text = String::from_utf8(output).expect("UTF-8");
        assert!(text.is_empty() || text.ends_with('\n'), "every answer ends its line");
        text.lines()
            .map(|line| serde_json::from_str(line).expect("every output line is one JSON message"))
            .collect()
    }

    fn by_id(answers: &[Value], id: Value) -> Value {
        answers
            .iter()
            .find(|answer| answer["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no answer with id {id} in {answers:?}"))
    }

    #[tokio::test]
    async fn stdio_answers_each_line_and_parse_errors_with_null_ids() {
        let f = fixture().await;
        let lines = [
            json!({
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-03-26",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"}
                }
            })
            .to_string(),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
            "{not json".to_owned(),
            String::new(),
            "   ".to_owned(),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string(),
            json!({"jsonrpc": "2.0", "id": 2, "method": "sampling/createMessage", "params": {}}).to_string(),
            json!({
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "send_command", "arguments": {"type": "Probe", "payload": probe("stdio")}}
            })
            .to_string(),
        ];
        // The last line has no newline: it is still read.
        let answers = stdio(&f.server, contoso(), &lines.join("\r\n")).await;
        assert_eq!(answers.len(), 5, "{answers:?}");
        assert_eq!(by_id(&answers, json!(0))["result"]["protocolVersion"], "2025-03-26");
        assert_eq!(by_id(&answers, Value::Null)["error"]["code"], -32700);
        assert!(by_id(&answers, json!(1))["result"]["tools"].is_array());
        assert_eq!(by_id(&answers, json!(2))["error"]["code"], -32601);
        let sent = by_id(&answers, json!(3));
        assert_eq!(sent["result"]["isError"], false, "{sent}");
        assert_eq!(sent["result"]["structuredContent"]["tenantId"], "contoso");
        assert!(answers.iter().all(|answer| answer["jsonrpc"] == "2.0"));
    }

    #[tokio::test]
    async fn stdio_skips_an_oversized_line_and_goes_on() {
        let f = fixture().await;
        let server = f.server.clone().with_max_message_bytes(1024);
        let big = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(4000)}}).to_string();
        let input = format!("{big}\n{}\n", json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}));
        let answers = stdio(&server, contoso(), &input).await;
        assert_eq!(answers.len(), 2, "{answers:?}");
        assert_eq!(by_id(&answers, Value::Null)["error"]["code"], -32600);
        assert_eq!(by_id(&answers, json!(2))["result"], json!({}));
    }

    #[tokio::test]
    async fn stdio_cancellation_stops_a_wait_and_other_requests_still_answer() {
        let f = fixture().await;
        let (_, sent) = call(
            &f.server,
            &contoso(),
            "send_command",
            json!({"type": "Probe", "payload": probe("mcp")}),
        )
        .await;
        let arguments = json!({"correlationId": sent["correlationId"], "timeoutSeconds": 600});
        let wait = json!({
            "jsonrpc": "2.0",
            "id": "w",
            "method": "tools/call",
            "params": {"name": "wait_for_delivery", "arguments": arguments}
        });
        let (mut client, server_side) = tokio::io::duplex(64 * 1024);
        let (server_in, server_out) = tokio::io::split(server_side);
        let server = f.server.clone();
        let serving = tokio::spawn(async move {
            server
                .serve_stdio(contoso(), tokio::io::BufReader::new(server_in), server_out)
                .await
        });
        let mut read = tokio::io::BufReader::new(&mut client);
        let input = [
            as_line(wait),
            as_line(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
        ]
        .concat();
        read.get_mut().write_all(input.as_bytes()).await.expect("written");
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(5), read.read_line(&mut line))
            .await
            .expect("ping answered while the wait runs")
            .expect("read");
        assert_eq!(serde_json::from_str::<Value>(&line).expect("JSON")["id"], 1, "{line}");
        let cancel = json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": "w", "reason": "test"}
        });
        read.get_mut()
            .write_all(as_line(cancel).as_bytes())
            .await
            .expect("written");
        read.get_mut().shutdown().await.expect("closed");
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(3), serving)
            .await
            .expect("the cancelled wait does not hold the server")
            .expect("joined")
            .expect("served");
        assert!(started.elapsed() < STDIO_SHUTDOWN_GRACE);
        let mut rest = String::new();
        read.read_to_string(&mut rest).await.expect("read");
        assert_eq!(rest, "", "a cancelled request is not answered");
    }
}
