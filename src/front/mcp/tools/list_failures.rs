//! `list_failures`: dead letters of the caller's tenant, one by one or
//! grouped by cause, as `GET /v1/dead-letters` and `/groups`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{McpTool, invalid, to_json};
use crate::front::access::Caller;
use crate::front::gateway::{Gateway, GatewayError};
use crate::ports::store::DeadLetterFilter;

/// `list_failures` returns this many dead letters unless told otherwise ...
const DEFAULT_FAILURE_LIMIT: usize = 50;
/// ... and never more than this.
const MAX_FAILURE_LIMIT: usize = 500;

/// The `list_failures` tool.
pub struct ListFailures;

/// `list_failures`' arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListFailuresArguments {
    /// Only this consumer's, e.g. commit.
    consumer: Option<String>,
    /// Only this message type's, e.g. CreateCommit.
    #[serde(rename = "type")]
    message_type: Option<String>,
    /// Only this cause, e.g. retries-exhausted.
    reason: Option<String>,
    /// Group by reason, consumer and type.
    #[schemars(extend("default" = false))]
    grouped: Option<bool>,
    /// Also list dead letters already replayed.
    #[schemars(extend("default" = false))]
    include_replayed: Option<bool>,
    /// At most this many dead letters (not used when grouped).
    #[schemars(range(min = 1, max = 500), extend("default" = DEFAULT_FAILURE_LIMIT))]
    limit: Option<usize>,
}

impl McpTool for ListFailures {
    const NAME: &'static str = "list_failures";
    const TITLE: &'static str = "List failures";
    const READ_ONLY: bool = true;
    const OPEN_WORLD: bool = false;
    type Arguments = ListFailuresArguments;

    fn description() -> String {
        format!(
            "Dead letters: messages a consumer gave up on, newest first, each with its consumer, type, \
             correlationId, reason (e.g. retries-exhausted, permanent-failure, invalid-field), description and \
             error chain. With grouped: true, one line per (reason, consumer, type) with a count and the ids, \
             largest group first: the quickest overview. Already replayed ones are left out unless \
             includeReplayed is true. Returns at most `limit` (default {DEFAULT_FAILURE_LIMIT}) dead letters. \
             Needs deliveries:read or dead-letters:replay."
        )
    }

    async fn run(gateway: &Gateway, caller: &Caller, arguments: ListFailuresArguments) -> Result<Value, GatewayError> {
        let grouped = arguments.grouped.unwrap_or(false);
        let limit = arguments.limit.unwrap_or(DEFAULT_FAILURE_LIMIT);
        if !(1..=MAX_FAILURE_LIMIT).contains(&limit) {
            return Err(invalid(
                "limit",
                format!("`limit` must be from 1 to {MAX_FAILURE_LIMIT}"),
            ));
        }
        let filter = DeadLetterFilter {
            consumer: arguments.consumer,
            message_type: arguments.message_type,
            reason: arguments.reason,
            include_replayed: arguments.include_replayed.unwrap_or(false),
            // Groups count every matching dead letter.
            limit: (!grouped).then_some(limit),
            ..DeadLetterFilter::default()
        };
        if grouped {
            let groups = gateway.dead_letter_groups(caller, filter, false).await?;
            Ok(json!({"groups": to_json(&groups)?}))
        } else {
            let dead_letters = gateway.dead_letters(caller, filter).await?;
            Ok(json!({"count": dead_letters.len(), "deadLetters": to_json(&dead_letters)?}))
        }
    }
}
