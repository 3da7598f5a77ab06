//! `get_replay_job` and `control_replay_job`: follow, pause, resume or
//! cancel a bulk replay job (from `replay_failure_group`), as `GET
//! /v1/replays/{id}` and `POST /v1/replays/{id}/pause|resume|cancel`. Jobs
//! are stored, so any replica answers the same.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{McpTool, required, to_json};
use crate::front::access::Caller;
use crate::front::gateway::{Gateway, GatewayError};
use crate::ports::store::ReplayJobAction;

/// The `get_replay_job` tool.
pub struct GetReplayJob;

/// `get_replay_job`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetReplayJobArguments {
    /// The job's id (what replay_failure_group returned).
    #[schemars(length(min = 1))]
    id: String,
}

impl McpTool for GetReplayJob {
    const NAME: &'static str = "get_replay_job";
    const TITLE: &'static str = "Follow a bulk replay";
    const READ_ONLY: bool = true;
    const OPEN_WORLD: bool = false;
    type Arguments = GetReplayJobArguments;

    fn description() -> String {
        "A bulk replay job (from replay_failure_group) and how far it got: status (running, paused, cancelled, \
         finished), total, done, replayedCount, failedCount, the dead letters replayed, each failure with why, and \
         who started, paused, resumed or cancelled it. Needs the deliveries:read or dead-letters:replay scope."
            .to_owned()
    }

    async fn run(gateway: &Gateway, caller: &Caller, arguments: GetReplayJobArguments) -> Result<Value, GatewayError> {
        let id = required("id", &arguments.id)?;
        to_json(&gateway.replay_job(caller, id).await?)
    }
}

/// The `control_replay_job` tool.
pub struct ControlReplayJob;

/// What to do to the job.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobAction {
    /// Stop after the replay in progress; resume later.
    Pause,
    /// Carry on with a paused job where it stopped.
    Resume,
    /// Stop for good: what was not replayed stays dead-lettered.
    Cancel,
}

/// `control_replay_job`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControlReplayJobArguments {
    /// The job's id.
    #[schemars(length(min = 1))]
    id: String,
    /// pause, resume or cancel.
    action: JobAction,
}

impl McpTool for ControlReplayJob {
    const NAME: &'static str = "control_replay_job";
    const TITLE: &'static str = "Pause, resume or cancel a bulk replay";
    const READ_ONLY: bool = false;
    const OPEN_WORLD: bool = false;
    type Arguments = ControlReplayJobArguments;

    fn description() -> String {
        "Pauses (after the replay in progress), resumes (where it stopped) or cancels (for good) a bulk replay \
         job; recorded with this key. An action that does not apply (pausing a finished job) is refused as a \
         conflict. Returns the job. Needs the dead-letters:replay scope."
            .to_owned()
    }

    async fn run(
        gateway: &Gateway,
        caller: &Caller,
        arguments: ControlReplayJobArguments,
    ) -> Result<Value, GatewayError> {
        let id = required("id", &arguments.id)?;
        let action = match arguments.action {
            JobAction::Pause => ReplayJobAction::Pause,
            JobAction::Resume => ReplayJobAction::Resume,
            JobAction::Cancel => ReplayJobAction::Cancel,
        };
        to_json(&gateway.control_replay_job(caller, id, action).await?)
    }
}
