//! `replay_failure_group` and `purge_failure_group`: act on every dead
//! letter of one failure group (a root cause, from `list_failures` with
//! `grouped: true`), as `POST /v1/dead-letters/groups/{fingerprint}/replay`
//! and `DELETE /v1/dead-letters/groups/{fingerprint}`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{McpTool, invalid, required, to_json};
use crate::front::access::Caller;
use crate::front::gateway::{Gateway, GatewayError};

/// The `replay_failure_group` tool.
pub struct ReplayFailureGroup;

/// `replay_failure_group`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReplayFailureGroupArguments {
    /// The group's fingerprint (from list_failures with grouped: true).
    #[schemars(length(min = 1))]
    fingerprint: String,
    /// At most this many replays per second, at least 0.001 (default: as
    /// fast as they go).
    #[schemars(range(min = crate::front::gateway::MIN_REPLAY_RATE))]
    rate: Option<f64>,
}

impl McpTool for ReplayFailureGroup {
    const NAME: &'static str = "replay_failure_group";
    const TITLE: &'static str = "Replay a failure group";
    const READ_ONLY: bool = false;
    const OPEN_WORLD: bool = true;
    type Arguments = ReplayFailureGroupArguments;

    fn description() -> String {
        "Sends every dead letter of one failure group (one root cause: list_failures with grouped: true gives \
         each group's fingerprint) again to the consumer that gave up on it, as a bulk replay at most `rate` per \
         second. Fix the cause first. Returns the replay job (id, total, done). Needs the dead-letters:replay \
         scope."
            .to_owned()
    }

    async fn run(
        gateway: &Gateway,
        caller: &Caller,
        arguments: ReplayFailureGroupArguments,
    ) -> Result<Value, GatewayError> {
        let fingerprint = required("fingerprint", &arguments.fingerprint)?;
        if let Some(rate) = arguments.rate
            && !(rate >= crate::front::gateway::MIN_REPLAY_RATE && rate.is_finite())
        {
            return Err(invalid(
                "rate",
                "rate must be a number of replays per second of at least 0.001",
            ));
        }
        to_json(&gateway.replay_group(caller, fingerprint, arguments.rate).await?)
    }
}

/// The `purge_failure_group` tool.
pub struct PurgeFailureGroup;

/// `purge_failure_group`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PurgeFailureGroupArguments {
    /// The group's fingerprint (from list_failures with grouped: true).
    #[schemars(length(min = 1))]
    fingerprint: String,
}

impl McpTool for PurgeFailureGroup {
    const NAME: &'static str = "purge_failure_group";
    const TITLE: &'static str = "Purge a failure group";
    const READ_ONLY: bool = false;
    const OPEN_WORLD: bool = false;
    const DESTRUCTIVE: bool = true;
    type Arguments = PurgeFailureGroupArguments;

    fn description() -> String {
        "Deletes every dead letter of one failure group (its fingerprint from list_failures with grouped: true) \
         for good: they can no longer be replayed. Returns the ids purged. Needs the admin scope."
            .to_owned()
    }

    async fn run(
        gateway: &Gateway,
        caller: &Caller,
        arguments: PurgeFailureGroupArguments,
    ) -> Result<Value, GatewayError> {
        let fingerprint = required("fingerprint", &arguments.fingerprint)?;
        let purged = gateway.purge_group(caller, fingerprint).await?;
        Ok(json!({"fingerprint": fingerprint, "purged": purged}))
    }
}
