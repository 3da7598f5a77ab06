//! `list_consumers`: every consumer and whether it is paused, as
//! `GET /v1/consumers`; `control_consumer`: pause or resume one, as
//! `POST /v1/consumers/{consumer}/pause` and `.../resume`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{McpTool, invalid, required, to_json};
use crate::front::access::Caller;
use crate::front::gateway::{Gateway, GatewayError};
use crate::ports::store::ControlAction;

/// The `list_consumers` tool.
pub struct ListConsumers;

/// `list_consumers`'s arguments: none.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListConsumersArguments {}

impl McpTool for ListConsumers {
    const NAME: &'static str = "list_consumers";
    const TITLE: &'static str = "List the consumers";
    const READ_ONLY: bool = true;
    const OPEN_WORLD: bool = false;
    type Arguments = ListConsumersArguments;

    fn description() -> String {
        "Every bosun consumer and whether an operator paused it (a paused consumer takes no message: its \
         deliveries wait in its queue until it is resumed), with its latest pause or resume: who, when, why. \
         Needs deliveries:read."
            .to_owned()
    }

    async fn run(
        gateway: &Gateway,
        caller: &Caller,
        _arguments: ListConsumersArguments,
    ) -> Result<Value, GatewayError> {
        to_json(&gateway.consumers(caller).await?)
    }
}

/// The `control_consumer` tool.
pub struct ControlConsumer;

/// `control_consumer`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControlConsumerArguments {
    /// The consumer, as list_consumers names it.
    #[schemars(length(min = 1, max = 63))]
    consumer: String,
    /// `pause` or `resume`.
    action: String,
    /// Why (recorded; required to pause).
    #[schemars(length(max = 500))]
    reason: Option<String>,
}

impl McpTool for ControlConsumer {
    const NAME: &'static str = "control_consumer";
    const TITLE: &'static str = "Pause or resume a consumer";
    const READ_ONLY: bool = false;
    const OPEN_WORLD: bool = false;
    type Arguments = ControlConsumerArguments;

    fn description() -> String {
        "Pauses (action pause, with a reason) or resumes (action resume) a consumer for every tenant, as your \
         key: within a few seconds every replica stops (or starts again) taking its messages; paused, they wait \
         in its queue and none is dead-lettered. Recorded with who, when and why; `changed` is false when it was \
         so already. Needs consumers:pause on a platform key (tenant *)."
            .to_owned()
    }

    async fn run(
        gateway: &Gateway,
        caller: &Caller,
        arguments: ControlConsumerArguments,
    ) -> Result<Value, GatewayError> {
        let consumer = required("consumer", &arguments.consumer)?;
        let action = ControlAction::parse(arguments.action.trim())
            .ok_or_else(|| invalid("action", "must be `pause` or `resume`"))?;
        to_json(
            &gateway
                .control_consumer(caller, consumer, action, arguments.reason.as_deref(), "mcp")
                .await?,
        )
    }
}
