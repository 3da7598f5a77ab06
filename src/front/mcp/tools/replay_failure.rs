//! `replay_failure`: sends a dead letter's message again, optionally with
//! a corrected payload, as `POST /v1/dead-letters/{id}/replay`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{McpTool, required, to_json};
use crate::front::access::Caller;
use crate::front::gateway::{Gateway, GatewayError};

/// The `replay_failure` tool.
pub struct ReplayFailure;

/// `replay_failure`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReplayFailureArguments {
    /// The dead letter's id (from list_failures; a unique prefix is enough).
    #[schemars(length(min = 1))]
    id: String,
    /// A corrected payload for the message (the whole payload, as in get_failure's envelope.payload).
    payload: Option<Map<String, Value>>,
}

impl McpTool for ReplayFailure {
    const NAME: &'static str = "replay_failure";
    const TITLE: &'static str = "Replay a failure";
    const READ_ONLY: bool = false;
    const OPEN_WORLD: bool = true;
    type Arguments = ReplayFailureArguments;

    fn description() -> String {
        "Sends a dead letter's message again to the consumer that gave up on it. With payload, the message's \
         payload is replaced first (validated against its contract; an invalid payload is refused naming the \
         field): fix the cause, e.g. a field the failure named, then replay. Returns the replay (replayId, \
         destination, edited). Needs the dead-letters:replay scope."
            .to_owned()
    }

    async fn run(gateway: &Gateway, caller: &Caller, arguments: ReplayFailureArguments) -> Result<Value, GatewayError> {
        let id = required("id", &arguments.id)?;
        let payload = arguments.payload.map(Value::Object);
        to_json(&gateway.replay(caller, id, payload.as_ref()).await?)
    }
}
