//! bosun's MCP tools, one file per tool. Each tool is a type implementing
//! [`McpTool`]: its name, title, description and hints, its arguments (a
//! serde + schemars struct, so the input schema `tools/list` shows is
//! generated from the type that reads the call), and what it does, always
//! through the [`Gateway`] so that scopes, tenants, idempotency and audit
//! are the HTTP API's. `catalogue!` below is the one list of them.
//!
//! A tool that fails (a missing scope, an invalid argument or payload, an
//! unknown or another tenant's delivery) answers a tool result with
//! `isError: true` whose content is the API's error JSON
//! (`{"error": {"code", "message", "field"?}}`), as the MCP specification
//! asks, so that the agent reads it and corrects its call. Only a call the
//! server cannot route (an unknown tool) is a JSON-RPC error.

use std::future::Future;
use std::sync::LazyLock;
use std::time::Instant;

use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::front::access::Caller;
use crate::front::gateway::{Gateway, GatewayError, Outage};
use crate::runtime::telemetry::TraceContext;

mod commands;
mod consumers;
mod describe_command;
mod environments;
mod failure_groups;
mod get_delivery;
mod get_failure;
mod get_release;
mod list_failures;
mod replay_failure;
mod replay_jobs;
mod send_command;
mod wait_for_delivery;

pub use self::consumers::{ControlConsumer, ListConsumers};
pub use self::describe_command::DescribeCommand;
pub use self::environments::{GetEnvironment, RollbackEnvironment};
pub use self::failure_groups::{PurgeFailureGroup, ReplayFailureGroup};
pub use self::get_delivery::GetDelivery;
pub use self::get_failure::GetFailure;
pub use self::get_release::GetRelease;
pub use self::list_failures::ListFailures;
pub use self::replay_failure::ReplayFailure;
pub use self::replay_jobs::{ControlReplayJob, GetReplayJob};
pub use self::send_command::SendCommand;
pub use self::wait_for_delivery::WaitForDelivery;

/// Gateway errors name HTTP headers; over MCP the same values are tool
/// arguments.
const HEADER_ARGUMENTS: [(&str, &str); 2] = [("X-Bosun-Tenant", "tenant"), ("Idempotency-Key", "idempotencyKey")];

/// One MCP tool.
pub trait McpTool {
    /// The name agents call it by.
    const NAME: &'static str;
    /// A title for people.
    const TITLE: &'static str;
    /// Whether it only reads (also its `idempotentHint`).
    const READ_ONLY: bool;
    /// Whether it reaches outside bosun (a command sent on makes consumers call Git hosts, pipelines, clouds).
    const OPEN_WORLD: bool;
    /// Whether it deletes what cannot be had back (a purge).
    const DESTRUCTIVE: bool = false;
    /// Its arguments: the input schema is generated from this type, and
    /// a call's arguments are read into it (unknown names are refused).
    type Arguments: DeserializeOwned + JsonSchema + 'static;

    /// What it does, for the agent.
    fn description() -> String;

    /// Runs it for `caller`; the answer is the tool result's JSON.
    fn run(
        gateway: &Gateway,
        caller: &Caller,
        arguments: Self::Arguments,
    ) -> impl Future<Output = Result<Value, GatewayError>> + Send;

    /// [`McpTool::run`] inside the trace of the call (`trace`: the context
    /// of the tool call's server span, or the caller's when traces are
    /// off). A tool that sends something passes it on; the others ignore it.
    fn run_traced(
        gateway: &Gateway,
        caller: &Caller,
        trace: Option<&TraceContext>,
        arguments: Self::Arguments,
    ) -> impl Future<Output = Result<Value, GatewayError>> + Send {
        let _ = trace;
        Self::run(gateway, caller, arguments)
    }
}

/// Declares the tools once: their definitions for `tools/list`, in this
/// order, and the dispatch of `tools/call` by name.
macro_rules! catalogue {
    ($($tool:ty),+ $(,)?) => {
        /// The name of every tool, in catalogue order.
        pub const NAMES: &[&str] = &[$(<$tool as McpTool>::NAME),+];

        fn definitions() -> Result<Vec<Tool>, String> {
            Ok(vec![$(definition::<$tool>()?),+])
        }

        /// Runs the tool called `name`; `None` when there is no such tool.
        async fn dispatch(
            gateway: &Gateway,
            caller: &Caller,
            trace: Option<&TraceContext>,
            name: &str,
            arguments: Option<JsonObject>,
        ) -> Option<Result<Value, GatewayError>> {
            $(
                if name == <$tool as McpTool>::NAME {
                    return Some(run::<$tool>(gateway, caller, trace, arguments).await);
                }
            )+
            None
        }
    };
}

catalogue![
    SendCommand,
    DescribeCommand,
    GetDelivery,
    WaitForDelivery,
    ListFailures,
    GetFailure,
    GetRelease,
    GetEnvironment,
    ReplayFailure,
    ReplayFailureGroup,
    GetReplayJob,
    ControlReplayJob,
    PurgeFailureGroup,
    RollbackEnvironment,
    ListConsumers,
    ControlConsumer,
];

/// Every tool as `tools/list` shows it, built once. `Err` only when a
/// tool's arguments type has no object schema (a bug the tests catch).
pub fn list() -> Result<&'static [Tool], &'static str> {
    static TOOLS: LazyLock<Result<Vec<Tool>, String>> = LazyLock::new(definitions);
    TOOLS.as_deref().map_err(String::as_str)
}

/// One tool's definition, if there is a tool called `name`.
pub fn find(name: &str) -> Option<Tool> {
    list().ok()?.iter().find(|tool| tool.name == name).cloned()
}

fn definition<T: McpTool>() -> Result<Tool, String> {
    let schema = rmcp::handler::server::common::schema_for_input::<T::Arguments>()
        .map_err(|err| format!("{}: {err}", T::NAME))?;
    let annotations = ToolAnnotations::with_title(T::TITLE)
        .read_only(T::READ_ONLY)
        .destructive(T::DESTRUCTIVE)
        .idempotent(T::READ_ONLY)
        .open_world(T::OPEN_WORLD);
    Ok(Tool::new(T::NAME, T::description(), schema)
        .with_title(T::TITLE)
        .with_annotations(annotations))
}

/// The tools over a gateway. Cheap to clone.
#[derive(Clone)]
pub struct Tools {
    gateway: Gateway,
}

impl Tools {
    /// Tools acting through `gateway`.
    pub fn new(gateway: Gateway) -> Self {
        Self { gateway }
    }

    /// The gateway the tools act through.
    pub fn gateway(&self) -> &Gateway {
        &self.gateway
    }

    /// Calls the tool `name` as `caller`, in the trace `trace` names: its
    /// answer, or the refusal, as a tool result; `None` when there is no
    /// such tool.
    pub async fn call(
        &self,
        caller: &Caller,
        trace: Option<&TraceContext>,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Option<CallToolResult> {
        let started = Instant::now();
        let outcome = dispatch(&self.gateway, caller, trace, name, arguments).await?;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        Some(match outcome {
            Ok(value) => {
                tracing::info!(tool = name, key_id = %caller.key_id, elapsed_ms, "MCP tool call");
                CallToolResult::structured(value)
            }
            Err(err) => {
                tracing::info!(
                    tool = name,
                    key_id = %caller.key_id,
                    elapsed_ms,
                    code = err.code(),
                    error = %err,
                    "MCP tool call failed"
                );
                CallToolResult::structured_error(tool_error(&err))
            }
        })
    }
}

async fn run<T: McpTool>(
    gateway: &Gateway,
    caller: &Caller,
    trace: Option<&TraceContext>,
    arguments: Option<JsonObject>,
) -> Result<Value, GatewayError> {
    let arguments = read_arguments::<T::Arguments>(T::NAME, arguments)?;
    T::run_traced(gateway, caller, trace, arguments).await
}

/// Reads a call's arguments (absent: none) into the tool's type; a bad one
/// is refused as `invalid-field` naming it (`timeoutSeconds`, `payload`;
/// for a missing or unknown argument, the name serde quotes).
fn read_arguments<A: DeserializeOwned>(tool: &str, arguments: Option<JsonObject>) -> Result<A, GatewayError> {
    let arguments = Value::Object(arguments.unwrap_or_default());
    serde_path_to_error::deserialize(arguments).map_err(|err| {
        let path = err.path().to_string();
        let reason = err.into_inner().to_string();
        let field = if path == "." { quoted_name(&reason) } else { Some(path) };
        let message = match &field {
            Some(field) if !reason.contains(&format!("`{field}`")) => format!("{tool}: `{field}`: {reason}"),
            _ => format!("{tool}: {reason}"),
        };
        GatewayError::Invalid { field, message }
    })
}

/// The first `quoted` name in a serde message (`missing field `type``,
/// `unknown field `correlation_id`, expected one of ...`).
fn quoted_name(message: &str) -> Option<String> {
    let (_, rest) = message.split_once('`')?;
    let (name, _) = rest.split_once('`')?;
    Some(name.to_owned())
}

/// An invalid argument.
fn invalid(field: &str, message: impl Into<String>) -> GatewayError {
    GatewayError::Invalid {
        field: Some(field.to_owned()),
        message: message.into(),
    }
}

/// A string argument that must not be blank.
fn required<'a>(field: &str, text: &'a str) -> Result<&'a str, GatewayError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(invalid(field, format!("`{field}` is required")));
    }
    Ok(text)
}

/// An answer as JSON.
fn to_json(value: &impl serde::Serialize) -> Result<Value, GatewayError> {
    serde_json::to_value(value).map_err(|source| {
        GatewayError::Unavailable(Outage::Answer {
            what: "could not write the answer",
            source,
        })
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
