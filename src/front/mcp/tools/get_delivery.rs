//! `get_delivery`: a delivery as it is now, as `GET /v1/deliveries/{id}`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::{McpTool, to_json};
use crate::front::access::Caller;
use crate::front::gateway::{Gateway, GatewayError};

/// The `get_delivery` tool.
pub struct GetDelivery;

/// `get_delivery`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetDeliveryArguments {
    /// The delivery's correlationId (send_command returns it).
    correlation_id: Uuid,
}

impl McpTool for GetDelivery {
    const NAME: &'static str = "get_delivery";
    const TITLE: &'static str = "Get a delivery";
    const READ_ONLY: bool = true;
    const OPEN_WORLD: bool = false;
    type Arguments = GetDeliveryArguments;

    fn description() -> String {
        "The current state of a delivery: status (`in-progress`, `completed` or `failed`), its outcome (one \
         sentence saying what ended it and where, the hop, consumer and error, and the next actions with their \
         targets: replay or open the dead letter, open the release saga; or how long it took through how many \
         hops), and every message that followed from the command, with its consumers, status (sent, completed, \
         retry-scheduled, dead-lettered, duplicate, replayed, published), attempts (from 1) and events. Does not \
         wait; see wait_for_delivery. Needs the deliveries:read scope."
            .to_owned()
    }

    async fn run(gateway: &Gateway, caller: &Caller, arguments: GetDeliveryArguments) -> Result<Value, GatewayError> {
        to_json(&gateway.delivery(caller, &arguments.correlation_id.to_string()).await?)
    }
}
