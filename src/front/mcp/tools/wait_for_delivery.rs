//! `wait_for_delivery`: waits until a delivery completes or fails, or a
//! timeout passes.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{McpTool, invalid, to_json};
use crate::front::access::Caller;
use crate::front::gateway::{Gateway, GatewayError};

/// `wait_for_delivery` waits this long unless told otherwise ...
const DEFAULT_WAIT_SECONDS: f64 = 30.0;
/// ... and never longer than this.
const MAX_WAIT_SECONDS: f64 = 600.0;

/// The `wait_for_delivery` tool.
pub struct WaitForDelivery;

/// `wait_for_delivery`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WaitForDeliveryArguments {
    /// The delivery's correlationId (send_command returns it).
    correlation_id: Uuid,
    /// How long to wait at most, in seconds.
    #[schemars(range(min = 0, max = 600), extend("default" = DEFAULT_WAIT_SECONDS))]
    timeout_seconds: Option<f64>,
}

impl McpTool for WaitForDelivery {
    const NAME: &'static str = "wait_for_delivery";
    const TITLE: &'static str = "Wait for a delivery";
    const READ_ONLY: bool = true;
    const OPEN_WORLD: bool = false;
    type Arguments = WaitForDeliveryArguments;

    fn description() -> String {
        format!(
            "Waits until a delivery is `completed` or `failed`, or timeoutSeconds pass (default \
             {DEFAULT_WAIT_SECONDS}, at most {MAX_WAIT_SECONDS}), then returns it as get_delivery does, plus \
             timedOut: true when it is still in progress (then call again). Keep timeoutSeconds below your \
             client's request timeout. When it failed, list_failures and get_failure tell why. Needs the \
             deliveries:read scope."
        )
    }

    async fn run(
        gateway: &Gateway,
        caller: &Caller,
        arguments: WaitForDeliveryArguments,
    ) -> Result<Value, GatewayError> {
        let seconds = arguments.timeout_seconds.unwrap_or(DEFAULT_WAIT_SECONDS);
        if !(0.0..=MAX_WAIT_SECONDS).contains(&seconds) {
            return Err(invalid(
                "timeoutSeconds",
                format!("`timeoutSeconds` must be from 0 to {MAX_WAIT_SECONDS}"),
            ));
        }
        let delivery = gateway
            .wait_for_delivery(
                caller,
                &arguments.correlation_id.to_string(),
                Duration::from_secs_f64(seconds),
            )
            .await?;
        let timed_out = delivery.status == "in-progress";
        let mut body = to_json(&delivery)?;
        if let Some(object) = body.as_object_mut() {
            object.insert("timedOut".into(), json!(timed_out));
        }
        Ok(body)
    }
}
