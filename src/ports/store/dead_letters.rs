//! Dead letters: the record kept of each (original bytes, error chain, attempts), their replays and edits; how they
//! are found by an id prefix is [`IdLookup`]'s.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

/// One failed attempt at handling a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptRecord {
    /// Attempt number (0 = first delivery).
    pub attempt: u32,
    /// When it failed.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub at: OffsetDateTime,
    /// The error and its causes, outermost first.
    pub error_chain: Vec<String>,
}

/// A replay of a dead letter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplayRecord {
    /// Id of this replay.
    pub replay_id: Uuid,
    /// Who replayed it.
    pub by: String,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub at: OffsetDateTime,
    /// Where it was sent.
    pub destination: String,
    /// The broker message id of the replayed copy.
    pub broker_message_id: String,
    /// When the payload was edited before the replay: the original and the
    /// edited payload and what changed, field by field (who edited it and
    /// when are [`ReplayRecord::by`] and [`ReplayRecord::at`]). The dead
    /// letter's own bytes stay as they were received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit: Option<ReplayEdit>,
}

/// What an edited replay changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplayEdit {
    /// The payload as the dead letter held it.
    pub original_payload: Value,
    /// The payload sent (the edited copy).
    pub edited_payload: Value,
    /// Every field that differs, as JSON Pointers, ordered by pointer.
    pub diff: Vec<FieldChange>,
}

/// One field an edit changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldChange {
    /// The field, as a JSON Pointer (`/files/0/content`).
    pub path: String,
    /// Its value before (none: added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    /// Its value after (none: removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
}

impl ReplayEdit {
    /// The edit from `original` to `edited`: objects compared key by key,
    /// arrays of the same length item by item, anything else whole.
    pub fn between(original: Value, edited: Value) -> Self {
        let mut diff = Vec::new();
        field_changes("", Some(&original), Some(&edited), &mut diff);
        diff.sort_by(|a, b| a.path.cmp(&b.path));
        Self {
            original_payload: original,
            edited_payload: edited,
            diff,
        }
    }
}

fn field_changes(path: &str, before: Option<&Value>, after: Option<&Value>, out: &mut Vec<FieldChange>) {
    match (before, after) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let mut keys: Vec<&String> = a.keys().collect();
            keys.extend(b.keys().filter(|key| !a.contains_key(*key)));
            for key in keys {
                let escaped = key.replace('~', "~0").replace('/', "~1");
                field_changes(&format!("{path}/{escaped}"), a.get(key), b.get(key), out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) if a.len() == b.len() => {
            for (index, (x, y)) in a.iter().zip(b).enumerate() {
                field_changes(&format!("{path}/{index}"), Some(x), Some(y), out);
            }
        }
        (before, after) if before != after => out.push(FieldChange {
            path: if path.is_empty() { "/".into() } else { path.to_owned() },
            before: before.cloned(),
            after: after.cloned(),
        }),
        _ => {}
    }
}

/// Where a dead letter stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeadLetterStatus {
    /// Waiting for an operator.
    Dead,
    /// Replayed at least once.
    Replayed,
}

/// A message that could not be processed, kept whole.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterRecord {
    /// Id of the dead letter.
    pub id: Uuid,
    /// The consumer that gave up on it.
    pub consumer: Option<String>,
    /// The queue or subscription it came from.
    pub entity: String,
    /// Its sequence number in the transport, when known.
    pub transport_sequence: Option<i64>,
    /// Broker-level id.
    pub broker_message_id: String,
    /// The envelope's messageId, when the envelope could be read.
    pub message_id: Option<String>,
    /// Its type, when known.
    pub message_type: Option<String>,
    /// Its correlation id, when known.
    pub correlation_id: Option<String>,
    /// Its tenant, when known.
    pub tenant_id: Option<String>,
    /// The original bytes, exactly as received.
    #[serde(skip)]
    pub body: Vec<u8>,
    /// Short cause used for grouping (`invalid-field`, `transient-exhausted` ...).
    pub reason: String,
    /// The full description.
    pub description: String,
    /// The error chain of the last failure, outermost first.
    pub error_chain: Vec<String>,
    /// Every failed attempt.
    pub attempts: Vec<AttemptRecord>,
    /// When it was dead-lettered.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub dead_lettered_at: OffsetDateTime,
    /// `host` when bosun dead-lettered it, `transport` for a native dead letter.
    pub origin: String,
    /// Dead or replayed.
    pub status: DeadLetterStatus,
    /// Every replay.
    pub replays: Vec<ReplayRecord>,
}

impl DeadLetterRecord {
    /// The trace the message belonged to: the trace id of the `traceparent`
    /// its original envelope carries (kept with the original bytes), so an
    /// operator can open the delivery's trace.
    pub fn trace_id(&self) -> Option<String> {
        let envelope: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        let traceparent = envelope.get("traceparent")?.as_str()?;
        bosun_contracts::envelope::trace_id(traceparent).map(str::to_owned)
    }
}

/// Filters for listing dead letters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadLetterFilter {
    /// Only this consumer.
    pub consumer: Option<String>,
    /// Only this message type.
    pub message_type: Option<String>,
    /// Only dead-lettered at or after this time.
    pub since: Option<OffsetDateTime>,
    /// Include ones already replayed.
    pub include_replayed: bool,
    /// Only this tenant's.
    pub tenant_id: Option<String>,
    /// Only this failure cause (the dead letter's `reason`).
    pub reason: Option<String>,
    /// At most this many (newest first); `None`: all.
    pub limit: Option<usize>,
}
