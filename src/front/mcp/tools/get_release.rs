//! `get_release`: where one release is, what approval it waits for and
//! who may (and may not) give it, as `bosun releases show`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{McpTool, required};
use crate::front::access::Caller;
use crate::front::gateway::{Gateway, GatewayError};

/// The `get_release` tool.
pub struct GetRelease;

/// `get_release`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetReleaseArguments {
    /// The release id (`<moduleId>-<12 hex of the commit>`, from the
    /// delivery's `ReleasePlanned`).
    #[schemars(length(min = 1))]
    release_id: String,
}

/// The fields of a release's state an agent needs (the whole state is
/// `GET /v1/sagas/release/{releaseId}`).
const SHOWN: [&str; 16] = [
    "releaseId",
    "phase",
    "currentEnvironment",
    "requestedBy",
    "waitingFor",
    "approvals",
    "refusedApprovals",
    "deployed",
    "blocked",
    "rejected",
    "plan",
    "windowWait",
    "overrides",
    "verifying",
    "verified",
    "verificationFailed",
];

impl McpTool for GetRelease {
    const NAME: &'static str = "get_release";
    const TITLE: &'static str = "Get a release";
    const READ_ONLY: bool = true;
    const OPEN_WORLD: bool = false;
    type Arguments = GetReleaseArguments;

    fn description() -> String {
        "One release: its phase and environment, the approval it waits for (required, given, how many more, the \
         groups that may give it and who may not: whoever requested the release, and the person its key acts for), \
         the approvals given and those the policy refused with the rule, a promotion waiting for a window or hold \
         (windowWait) and the overrides given, its verification (the run in progress with its last outcomes per \
         check, the environments it was verified in, a failed verification and whether the environment was rolled \
         back), and its last steps. An agent can request \
         a release and follow it, never satisfy its own approval. Needs deliveries:read."
            .to_owned()
    }

    async fn run(gateway: &Gateway, caller: &Caller, arguments: GetReleaseArguments) -> Result<Value, GatewayError> {
        let release_id = required("releaseId", &arguments.release_id)?;
        let saga = gateway.saga(caller, "release", release_id).await?;
        let mut shown = serde_json::Map::new();
        for field in SHOWN {
            if let Some(value) = saga.state.get(field).filter(|value| !value.is_null()) {
                shown.insert(field.to_owned(), value.clone());
            }
        }
        let history = saga.state["history"].as_array().cloned().unwrap_or_default();
        let recent = history[history.len().saturating_sub(10)..].to_vec();
        shown.insert("recentSteps".to_owned(), json!(recent));
        shown.insert("version".to_owned(), json!(saga.version));
        Ok(Value::Object(shown))
    }
}
