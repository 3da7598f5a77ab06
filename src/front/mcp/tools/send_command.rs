//! `send_command`: validates a command against its contract and sends it
//! for the caller's tenant, as `POST /v1/commands/{type}` does.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::McpTool;
use super::commands::{self, CommandPayload, CommandType};
use crate::front::access::Caller;
use crate::front::gateway::{CommandRouting, Gateway, GatewayError};
use crate::runtime::telemetry::TraceContext;

/// The `send_command` tool.
pub struct SendCommand;

/// `send_command`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SendCommandArguments {
    /// The command type, e.g. CreateCommit.
    #[serde(rename = "type")]
    message_type: CommandType,
    /// The command's payload, a JSON object of the schema of the command in `type` (see describe_command).
    payload: CommandPayload,
    /// Join an existing delivery (e.g. approve a release of it) instead of starting a new one.
    correlation_id: Option<Uuid>,
    /// A key you choose for when you may retry: the same key and arguments again send nothing (replayed: true).
    #[schemars(length(min = 1, max = 255))]
    idempotency_key: Option<String>,
    /// Only for platform keys (tenant `*`): the command's tenant. A tenant's key acts for its own; leave it out.
    tenant: Option<String>,
}

impl McpTool for SendCommand {
    const NAME: &'static str = "send_command";
    const TITLE: &'static str = "Send a command";
    const READ_ONLY: bool = false;
    const OPEN_WORLD: bool = true;
    type Arguments = SendCommandArguments;

    fn description() -> String {
        let mut text = String::from(
            "Sends a bosun command for your tenant after validating its payload against the command's contract \
             (an invalid payload is refused naming the field, e.g. payload.branch). Returns messageId and \
             correlationId; follow the delivery with wait_for_delivery or get_delivery. Get a command's payload \
             schema and an example with describe_command. Needs the commands:send scope (ApproveRelease and \
             RejectRelease: releases:approve).\nCommands:",
        );
        for spec in commands::sendable() {
            text.push_str(&format!("\n- {}: {}", spec.message_type, spec.description));
        }
        text
    }

    async fn run(gateway: &Gateway, caller: &Caller, arguments: SendCommandArguments) -> Result<Value, GatewayError> {
        Self::run_traced(gateway, caller, None, arguments).await
    }

    /// The command continues the tool call's trace: its producer span is
    /// the child of the call's server span (whose parent is the caller's
    /// `_meta.traceparent`), so the delivery is in the agent's trace.
    async fn run_traced(
        gateway: &Gateway,
        caller: &Caller,
        trace: Option<&TraceContext>,
        arguments: SendCommandArguments,
    ) -> Result<Value, GatewayError> {
        let payload = arguments.payload.into_value();
        let accepted = gateway
            .send_command(
                caller,
                &arguments.message_type.0,
                &payload,
                arguments.tenant.as_deref(),
                CommandRouting {
                    correlation_id: arguments.correlation_id,
                    idempotency_key: arguments.idempotency_key.as_deref(),
                    trace,
                },
            )
            .await?;
        let mut body = accepted.body;
        if let Some(object) = body.as_object_mut() {
            object.insert("replayed".into(), json!(accepted.replayed));
        }
        Ok(body)
    }
}
