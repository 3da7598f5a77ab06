//! Pausing and resuming consumers, as every door does it (CLI, HTTP API,
//! MCP, console): checked, recorded in the append-only log of consumer
//! controls with who, through which door and why, and read by every
//! replica of the consumer within a few seconds ([`crate::host::pause`]).

use schemars::JsonSchema;
use serde::Serialize;
use time::OffsetDateTime;

use bosun_contracts::routing;

use crate::operator::OperatorError;
use crate::operator::groups::FailureGroup;
use crate::ports::store::{ConsumerControl, ControlAction, ControlStore, GroupAcknowledgement};

/// The most characters of a pause's or resume's reason.
pub const MAX_REASON_CHARS: usize = 500;
/// The most log entries one read returns.
pub const MAX_LOG_PAGE: usize = 1000;

/// A consumer and whether it is paused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerView {
    /// The consumer's name.
    pub name: String,
    /// Whether an operator paused it (its replicas take no message).
    pub paused: bool,
    /// Its latest pause or resume, if it ever had one.
    pub last_control: Option<ConsumerControl>,
}

/// What a pause or resume did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerControlOutcome {
    /// Whether it changed anything (false: the consumer was paused, or
    /// running, already; nothing was recorded).
    pub changed: bool,
    /// The consumer's latest control: the one recorded now, or the one
    /// that already said so.
    pub control: ConsumerControl,
}

/// Who asks, through which door.
#[derive(Debug, Clone, Copy)]
pub struct Actor<'a> {
    /// Who (`cli:<operator>`, `key:<id> (<description>)`).
    pub by: &'a str,
    /// Through which door (`cli:<operator>`, `api:<key id>`, `mcp:<key id>`).
    pub door: &'a str,
}

/// Every consumer of the routing table and whether it is paused.
pub async fn consumers(controls: &dyn ControlStore) -> Result<Vec<ConsumerView>, OperatorError> {
    let latest = controls.latest_controls().await?;
    Ok(routing::CONSUMERS
        .iter()
        .map(|route| {
            let last_control = latest.iter().find(|control| control.consumer == route.name).cloned();
            ConsumerView {
                name: route.name.to_owned(),
                paused: last_control
                    .as_ref()
                    .is_some_and(|control| control.action == ControlAction::Pause),
                last_control,
            }
        })
        .collect())
}

/// The log of pauses and resumes, newest first, at most `limit` (1 to
/// [`MAX_LOG_PAGE`]).
pub async fn log(controls: &dyn ControlStore, limit: usize) -> Result<Vec<ConsumerControl>, OperatorError> {
    if !(1..=MAX_LOG_PAGE).contains(&limit) {
        return Err(OperatorError::Invalid(format!(
            "`limit`: must be between 1 and {MAX_LOG_PAGE}"
        )));
    }
    Ok(controls.controls(limit).await?)
}

/// Pauses (`ControlAction::Pause`) or resumes `consumer` as `actor`, for
/// `reason` (required to pause). Recorded only when it changes something.
pub async fn control(
    controls: &dyn ControlStore,
    consumer: &str,
    action: ControlAction,
    actor: Actor<'_>,
    reason: Option<&str>,
) -> Result<ConsumerControlOutcome, OperatorError> {
    let Some(route) = routing::consumer(consumer) else {
        let known: Vec<&str> = routing::CONSUMERS.iter().map(|route| route.name).collect();
        return Err(OperatorError::Invalid(format!(
            "`consumer`: `{consumer}` is not a consumer of bosun (one of {})",
            known.join(", ")
        )));
    };
    let reason = reason.map(str::trim).filter(|reason| !reason.is_empty());
    if action == ControlAction::Pause && reason.is_none() {
        return Err(OperatorError::Invalid(
            "`reason`: say why the consumer is paused (it is recorded, and shown to whoever sees it paused)".into(),
        ));
    }
    if reason.is_some_and(|reason| reason.chars().count() > MAX_REASON_CHARS) {
        return Err(OperatorError::Invalid(format!(
            "`reason`: at most {MAX_REASON_CHARS} characters"
        )));
    }
    let requested = ConsumerControl {
        sequence: 0,
        consumer: route.name.to_owned(),
        action,
        by: actor.by.to_owned(),
        door: actor.door.to_owned(),
        reason: reason.map(str::to_owned),
        at: OffsetDateTime::now_utc(),
    };
    let latest = controls.latest_controls().await?;
    let current = latest.into_iter().find(|control| control.consumer == route.name);
    let paused = current
        .as_ref()
        .is_some_and(|control| control.action == ControlAction::Pause);
    if paused == (action == ControlAction::Pause) {
        // So already: the pause that stands, or the consumer running (its
        // last resume, or none when it was never paused); nothing recorded.
        return Ok(ConsumerControlOutcome {
            changed: false,
            control: current.unwrap_or(requested),
        });
    }
    let control = controls.record_control(&requested).await?;
    tracing::warn!(
        consumer = route.name,
        action = action.as_str(),
        by = actor.by,
        door = actor.door,
        "consumer {}d",
        action.as_str()
    );
    Ok(ConsumerControlOutcome { changed: true, control })
}

/// Acknowledges `group` in `scope` (a tenant, or `*` for the platform's
/// view) as `actor`, with `note`: it is left out of that scope's group list
/// until a failure of its cause newer than the acknowledgement arrives.
/// Returns the group with its acknowledgement.
pub async fn acknowledge_group(
    controls: &dyn ControlStore,
    scope: &str,
    mut group: FailureGroup,
    actor: Actor<'_>,
    note: Option<&str>,
) -> Result<FailureGroup, OperatorError> {
    let note = note.map(str::trim).filter(|note| !note.is_empty());
    if note.is_some_and(|note| note.chars().count() > MAX_REASON_CHARS) {
        return Err(OperatorError::Invalid(format!(
            "`note`: at most {MAX_REASON_CHARS} characters"
        )));
    }
    let acknowledgement = GroupAcknowledgement {
        scope: scope.to_owned(),
        fingerprint: group.fingerprint.clone(),
        by: actor.by.to_owned(),
        door: actor.door.to_owned(),
        note: note.map(str::to_owned),
        // Not before the group's newest failure, which it acknowledges.
        at: OffsetDateTime::now_utc().max(group.last_at),
    };
    controls.acknowledge_group(&acknowledgement).await?;
    group.acknowledgement = Some(acknowledgement);
    Ok(group)
}
