//! What the front door answers: accepted commands, delivery summaries,
//! failure groups, dead-letter details, replays and bulk replay jobs.

use super::*;

/// The answer to an accepted command.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandAccepted {
    /// The 202 body.
    pub body: Value,
    /// True when this is the stored answer of an earlier request with the
    /// same `Idempotency-Key` (nothing was sent now).
    pub replayed: bool,
}

/// The 202 body of an accepted command (kept as JSON in
/// [`CommandAccepted::body`], as the `Idempotency-Key` record stores it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "CommandAccepted")]
pub struct AcceptedCommand {
    /// The command's messageId.
    pub message_id: Uuid,
    /// The delivery it started or joined.
    pub correlation_id: Uuid,
    /// Its type.
    pub message_type: String,
    /// The queue it was sent to.
    pub destination: String,
    /// The tenant it was sent for.
    pub tenant_id: String,
    /// Where to follow the delivery.
    pub links: CommandLinks,
}

/// Where to follow an accepted command's delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct CommandLinks {
    /// `GET` it: the delivery (`/v1/deliveries/{correlationId}`).
    pub delivery: String,
    /// Its server-sent events.
    pub events: String,
}

/// A delivery in a list.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliverySummary {
    /// The correlation id.
    pub correlation_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Who started it.
    pub started_by: String,
    /// The first command.
    pub message_type: String,
    /// The first command's messageId.
    pub message_id: String,
    /// When it started.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub started_at: OffsetDateTime,
    /// `in-progress`, `completed` or `failed`.
    pub status: String,
}

pub use crate::operator::groups::{FailureGroup, Trend};

/// A dead letter with its original message.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterDetail {
    /// The record.
    #[serde(flatten)]
    pub record: DeadLetterRecord,
    /// The original envelope, when the bytes are JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub envelope: Option<Value>,
    /// The original bytes as text (lossy), when they are not JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_text: Option<String>,
    /// The W3C trace id of the delivery's trace, from the envelope's
    /// `traceparent`: look it up in the tracing backend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// A replay answered to the API: the record plus whether the payload was edited.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplayDone {
    /// The replay.
    #[serde(flatten)]
    pub replay: ReplayRecord,
    /// The dead letter replayed.
    pub dead_letter_id: Uuid,
    /// Whether the payload was replaced.
    pub edited: bool,
}

/// What a bulk replay should take: exactly one of `ids`, a `filter` that
/// narrows (names a consumer, type, reason or time), or `all`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BulkReplayRequest {
    /// These dead letters ...
    pub ids: Vec<Uuid>,
    /// ... or every dead (not yet replayed) one matching this filter ...
    pub filter: Option<DeadLetterFilter>,
    /// ... or, explicitly, every dead (not yet replayed) one of the tenant.
    pub all: bool,
    /// At most this many per second.
    pub rate: Option<f64>,
}

/// The least rate of a bulk replay, per second (one replay every 1,000 s):
/// below it the wait between two replays is longer than a job is worth.
pub const MIN_REPLAY_RATE: f64 = 0.001;

/// The most dead letters one bulk replay takes.
pub const BULK_REPLAY_MAX_IDS: usize = MAX_BULK_REPLAY;

/// A dead letter a bulk replay could not replay.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct FailedReplay {
    /// The dead letter.
    pub id: Uuid,
    /// Why.
    pub error: String,
}

/// A bulk replay job and how far it got, as stored: the same from every
/// replica.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplayJob {
    /// Its id.
    pub id: Uuid,
    /// `running`, `paused`, `cancelled` or `finished`.
    pub status: String,
    /// Dead letters to replay.
    pub total: usize,
    /// Dead letters done (replayed or failed).
    pub done: usize,
    /// How many were replayed.
    pub replayed_count: usize,
    /// How many failed.
    pub failed_count: usize,
    /// Replayed (empty in a listing of jobs).
    pub replayed: Vec<Uuid>,
    /// Not replayed, with why (empty in a listing of jobs).
    pub failed: Vec<FailedReplay>,
    /// Per second, when limited.
    pub rate: Option<f64>,
    /// Who started it.
    pub by: String,
    /// What was asked: `{"filter": {...}}`, `{"ids": [...]}` or
    /// `{"group": "<fingerprint>"}`.
    pub request: Value,
    /// Every pause, resume and cancel, with who did it.
    pub controls: Vec<JobControl>,
    /// The runner holding it now (host, process), if any.
    pub running_on: Option<String>,
    /// The tenant it runs for.
    #[serde(skip)]
    pub tenant_id: String,
    /// When it started.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub started_at: OffsetDateTime,
    /// When its progress or status last changed.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub updated_at: OffsetDateTime,
    /// When it finished or was cancelled.
    #[serde(with = "time::serde::rfc3339::option")]
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    pub finished_at: Option<OffsetDateTime>,
}

/// A pause, resume or cancel of a bulk replay job.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct JobControl {
    /// `pause`, `resume` or `cancel`.
    #[schemars(extend("enum" = ["pause", "resume", "cancel"]))]
    pub action: String,
    /// Who.
    pub by: String,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub at: OffsetDateTime,
    /// Why, when bosun paused the job itself (the key that started it was
    /// revoked, expired or lost the right).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Bulk replay jobs, newest first (`GET /v1/replays`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ReplayJobs {
    /// The jobs, with counts (their lists are in each job's own view).
    pub jobs: Vec<ReplayJob>,
}

/// A saga's state machine with where the saga is and the way its history
/// went, for the console's diagram (`GET /v1/sagas/{kind}/{key}/diagram`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SagaDiagram {
    /// `release`, `gitops` or `probe`.
    pub kind: String,
    /// The saga key.
    pub key: String,
    /// The state machine.
    pub machine: bosun_sagas::machine::Machine,
    /// The state the saga is in (a state's `value`).
    pub current: String,
    /// The states the saga has been in, by the way its history went
    /// (`current` included).
    pub visited: Vec<String>,
    /// How many saves took each transition (indexes into
    /// `machine.transitions`; transitions never taken are left out).
    pub taken: Vec<TakenTransition>,
    /// The most recent saves ([`SagaDiagram::RECENT`] at most), oldest
    /// first, with the transition each took.
    pub recent: Vec<SagaStep>,
    /// False when no way through the machine explains the history (the
    /// state was changed by something the machine does not draw): only
    /// `current` is then known.
    pub path_found: bool,
}

impl SagaDiagram {
    /// How many of the latest saves `recent` lists.
    pub const RECENT: usize = 50;
}

/// One transition and how often the saga's history took it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TakenTransition {
    /// An index into `machine.transitions`.
    pub transition: usize,
    /// Saves that took it.
    pub count: usize,
}

/// One save of a saga, as the diagram reads it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SagaStep {
    /// The version written.
    pub version: i64,
    /// The message applied.
    pub message_type: String,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub at: OffsetDateTime,
    /// The state before.
    pub from: String,
    /// The state after.
    pub to: String,
    /// The transition taken, if a drawn one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transition: Option<usize>,
}
