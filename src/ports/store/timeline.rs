//! The delivery timeline: its lines and statuses, and the record of each delivery.

use schemars::JsonSchema;
use serde::Serialize;
use time::OffsetDateTime;
use uuid::Uuid;

use super::*;

/// What happened to a message, for `bosun deliveries show`: a line's
/// status, and (from its lines) a message's or a hop's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TimelineStatus {
    /// Sent by an agent or dispatched from the outbox (a message: sent, not
    /// handled yet by every consumer it is routed to).
    Sent,
    /// Handled successfully by a consumer.
    Completed,
    /// Failed transiently; a retry is scheduled.
    RetryScheduled,
    /// Moved to the dead letters.
    DeadLettered,
    /// Delivered again after it was already handled; acknowledged, no effect.
    Duplicate,
    /// Sent again by an operator from the dead letters.
    Replayed,
    /// A message's status, never a line's: sent, and no consumer is routed
    /// to it (an event for whoever watches the delivery, as
    /// `ReleaseBlocked`). Nothing more happens to it: it is over, as a
    /// `completed` one is.
    Published,
}

impl TimelineStatus {
    /// The status as stored and printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sent => "sent",
            Self::Completed => "completed",
            Self::RetryScheduled => "retry-scheduled",
            Self::DeadLettered => "dead-lettered",
            Self::Duplicate => "duplicate",
            Self::Replayed => "replayed",
            Self::Published => "published",
        }
    }

    /// The status stored as `text`; `None` for text no bosun writes.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "sent" => Self::Sent,
            "completed" => Self::Completed,
            "retry-scheduled" => Self::RetryScheduled,
            "dead-lettered" => Self::DeadLettered,
            "duplicate" => Self::Duplicate,
            "replayed" => Self::Replayed,
            _ => return None,
        })
    }

    /// [`TimelineStatus::parse`], or [`StoreError::Corrupt`] naming the row.
    pub(crate) fn decode(text: &str, correlation_id: &str) -> Result<Self, StoreError> {
        Self::parse(text).ok_or_else(|| {
            StoreError::corrupt(
                format!("timeline line of delivery {correlation_id}"),
                format!("unknown status `{text}`"),
            )
        })
    }
}

/// One line of a delivery's timeline.
///
/// Serialized (API, MCP, `--json`) with its fields and `attemptNumber`
/// beside `attempt`: the attempt counted from 1
/// ([`TimelineEntry::attempt_number`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineEntry {
    /// The delivery.
    pub correlation_id: String,
    /// The message.
    pub message_id: String,
    /// Its type.
    pub message_type: String,
    /// The consumer it concerns (none for a plain send).
    pub consumer: Option<String>,
    /// What happened.
    pub status: TimelineStatus,
    /// How many times handling the message was retried before this line
    /// (0 for its first delivery): the envelope's `attempt`.
    pub attempt: u32,
    /// When.
    pub at: OffsetDateTime,
    /// Free text: the error, the entity, the replay id ...
    pub detail: Option<String>,
}

/// A [`TimelineEntry`] as the API, MCP and `--json` write it: its fields,
/// and the attempt counted from 1 as everywhere people read it
/// (`attemptNumber`, the `attempts` of the message).
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "TimelineEntry", description = "One line of a delivery's timeline.")]
struct TimelineLine<'a> {
    /// The delivery.
    correlation_id: &'a str,
    /// The message.
    message_id: &'a str,
    /// Its type.
    message_type: &'a str,
    /// The consumer it concerns (none for a plain send).
    consumer: Option<&'a str>,
    /// What happened.
    status: TimelineStatus,
    /// How many times handling the message was retried before this line: 0
    /// for its first delivery (`attemptNumber` counts from 1).
    attempt: u32,
    /// The attempt this line is about, counted from 1 (`attempt` + 1): the
    /// number the console, `bosun deliveries show` and a message's
    /// `attempts` use.
    attempt_number: u32,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    at: OffsetDateTime,
    /// Free text: the error, the entity, the replay id ...
    detail: Option<&'a str>,
}

impl<'a> From<&'a TimelineEntry> for TimelineLine<'a> {
    fn from(entry: &'a TimelineEntry) -> Self {
        Self {
            correlation_id: &entry.correlation_id,
            message_id: &entry.message_id,
            message_type: &entry.message_type,
            consumer: entry.consumer.as_deref(),
            status: entry.status,
            attempt: entry.attempt,
            attempt_number: entry.attempt_number(),
            at: entry.at,
            detail: entry.detail.as_deref(),
        }
    }
}

impl Serialize for TimelineEntry {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        TimelineLine::from(self).serialize(serializer)
    }
}

impl JsonSchema for TimelineEntry {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TimelineEntry".into()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        concat!(module_path!(), "::TimelineEntry").into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        TimelineLine::json_schema(generator)
    }
}

impl TimelineEntry {
    /// The attempt this line is about, counted from 1: `attempt` + 1.
    pub fn attempt_number(&self) -> u32 {
        self.attempt.saturating_add(1)
    }

    /// The dead letter a `dead-lettered` or `replayed` line names: the id
    /// after the last `dead letter ` in its detail, as the host and the
    /// operator write them (`... (dead letter <id>)`, `by ... from dead
    /// letter <id>`). Lets a delivery's status tell which dead letters a
    /// replay resolved, whatever order the lines were written in.
    pub fn dead_letter_id(&self) -> Option<Uuid> {
        let detail = self.detail.as_deref()?;
        let start = detail.rfind("dead letter ")? + "dead letter ".len();
        Uuid::try_parse(detail.get(start..start + 36)?).ok()
    }
}

/// How a delivery started: the first command of a correlation id, kept so
/// that a delivery can be listed and belongs to one tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryRecord {
    /// The correlation id.
    pub correlation_id: String,
    /// The tenant whose delivery it is.
    pub tenant_id: String,
    /// Who started it (`cli:<user>`, `api:<key id>` ...).
    pub started_by: String,
    /// The first command's type.
    pub message_type: String,
    /// The first command's messageId.
    pub message_id: String,
    /// When it started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// The W3C `traceparent` of the first command's producer span: the
    /// delivery's trace, which a command joining the delivery later
    /// continues. `None` for deliveries recorded before bosun kept it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The `tracestate` that came with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}
