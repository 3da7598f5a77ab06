//! `get_failure`: one dead letter with everything known about it, as
//! `GET /v1/dead-letters/{id}`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{McpTool, required, to_json};
use crate::front::access::Caller;
use crate::front::gateway::{Gateway, GatewayError};

/// The `get_failure` tool.
pub struct GetFailure;

/// `get_failure`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetFailureArguments {
    /// The dead letter's id (from list_failures; a unique prefix is enough).
    #[schemars(length(min = 1))]
    id: String,
}

impl McpTool for GetFailure {
    const NAME: &'static str = "get_failure";
    const TITLE: &'static str = "Get a failure";
    const READ_ONLY: bool = true;
    const OPEN_WORLD: bool = false;
    type Arguments = GetFailureArguments;

    fn description() -> String {
        "One dead letter with everything known about it: the failed attempts, the error chain, its replays and \
         the original message (`envelope`, whose `payload` is what replay_failure can correct). Needs \
         deliveries:read or dead-letters:replay."
            .to_owned()
    }

    async fn run(gateway: &Gateway, caller: &Caller, arguments: GetFailureArguments) -> Result<Value, GatewayError> {
        let id = required("id", &arguments.id)?;
        to_json(&gateway.dead_letter(caller, id).await?)
    }
}
