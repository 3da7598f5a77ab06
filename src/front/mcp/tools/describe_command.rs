//! `describe_command`: a command's contract (what it does, its payload's
//! JSON Schema and an example payload), from the contracts.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::commands::{self, CommandType};
use super::{McpTool, to_json};
use crate::front::access::Caller;
use crate::front::gateway::{Gateway, GatewayError};

/// The `describe_command` tool.
pub struct DescribeCommand;

/// `describe_command`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DescribeCommandArguments {
    /// The command type, e.g. CreateCommit.
    #[serde(rename = "type")]
    message_type: CommandType,
}

impl McpTool for DescribeCommand {
    const NAME: &'static str = "describe_command";
    const TITLE: &'static str = "Describe a command";
    const READ_ONLY: bool = true;
    const OPEN_WORLD: bool = false;
    type Arguments = DescribeCommandArguments;

    fn description() -> String {
        "The contract of a command: what it does, the JSON Schema of its payload and an example payload to start \
         from. Call it before send_command to build a valid payload."
            .to_owned()
    }

    async fn run(_: &Gateway, _: &Caller, arguments: DescribeCommandArguments) -> Result<Value, GatewayError> {
        let message_type = arguments.message_type.0;
        let spec = commands::sendable()
            .find(|spec| spec.message_type == message_type)
            .ok_or_else(|| {
                GatewayError::UnknownType(format!(
                    "`{message_type}` is not a command (commands: {})",
                    commands::names().join(", ")
                ))
            })?;
        let schema = commands::payload_schema(spec.message_type)
            .map(|schema| to_json(&schema))
            .transpose()?;
        let example = bosun_contracts::samples::sample(spec.message_type).map(|message| message.to_payload());
        Ok(json!({
            "type": spec.message_type,
            "description": spec.description,
            "schemaVersion": spec.schema_version,
            "payloadSchema": schema,
            "examplePayload": example,
        }))
    }
}
