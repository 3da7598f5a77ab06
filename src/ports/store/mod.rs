//! Stores: what bosun remembers about messages, sagas and failures.
//!
//! One trait, [`Store`], in sections: idempotency (which consumer handled
//! which message), sagas (state with optimistic concurrency), the outbox
//! (messages to send, written atomically with the first two), attempts and
//! dead letters (every failure, with the original bytes), and the delivery
//! timeline (what happened to each message of a correlation id).
//!
//! The atomic unit is [`Store::commit_handled`]: the idempotency record, the
//! saga state and the outbox entries of one message are written in one
//! transaction, or not at all. The host does not call it directly: it
//! commits through [`crate::ports::settle::Commit`], which also settles the
//! received message.
//!
//! The implementations live with their technology under
//! [`crate::backends`]: SQLite (the default, a file under the data
//! directory) and PostgreSQL (shared by every replica).

use async_trait::async_trait;
use bosun_contracts::Destination;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::ports::transport::OutboundMessage;

pub(crate) mod doing;
mod error;
mod jobs;
mod watch;

pub use error::StoreError;
pub(crate) use error::{SOME_STORE_OPERATION, schema_mismatch_message};
pub use jobs::{
    ControlOutcome, ReplayItemOutcome, ReplayJobAction, ReplayJobControl, ReplayJobItem, ReplayJobRecord,
    ReplayJobStatus, ReplayJobStore,
};
pub(crate) use jobs::{controls_from_json, controls_to_json, outcome_columns, outcome_from_columns, status_from_str};
pub use watch::{TimelineWait, TimelineWatch, Woken};

/// How long a timeline wait lasts when nothing wakes it, unless the store
/// is told otherwise (the default `BOSUN_POLL_INTERVAL_MS`).
pub const DEFAULT_TIMELINE_FALLBACK: std::time::Duration = std::time::Duration::from_millis(250);

/// How many ids an [`StoreError::Ambiguous`] lists.
pub const AMBIGUOUS_SHOWN: usize = 10;

/// A dead-letter lookup by id or id prefix, the same on every backend: the
/// prefix is matched literally (ids are lowercase hex and dashes; anything
/// else matches nothing), within one tenant when one is given, and "not
/// found" reads the same whatever other tenants have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterLookup {
    /// The id or prefix as given, for messages.
    pub given: String,
    /// The prefix to match (lowercase), or `None` when it can match nothing.
    pub prefix: Option<String>,
}

impl DeadLetterLookup {
    /// What "not found" calls a dead letter.
    const WHAT: &'static str = "dead letter (give the full id or a unique prefix of at least 4 characters)";

    /// Reads an id or prefix.
    pub fn new(id: &str) -> Self {
        let prefix = id.trim().to_ascii_lowercase();
        let valid = prefix.len() >= 4 && prefix.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        Self {
            given: id.to_owned(),
            prefix: valid.then_some(prefix),
        }
    }

    /// The rows to fetch at most: enough to list an ambiguity.
    pub const LIMIT: usize = AMBIGUOUS_SHOWN + 1;

    /// The answer for no match.
    pub fn not_found(&self) -> StoreError {
        StoreError::NotFound {
            what: Self::WHAT,
            id: self.given.clone(),
        }
    }

    /// The answer from the records the prefix matched (in id order, at most
    /// [`Self::LIMIT`]).
    pub fn pick(&self, mut found: Vec<DeadLetterRecord>) -> Result<DeadLetterRecord, StoreError> {
        let Some(prefix) = &self.prefix else {
            return Err(self.not_found());
        };
        if let Some(exact) = found.iter().position(|record| record.id.to_string() == *prefix) {
            return Ok(found.swap_remove(exact));
        }
        match <[DeadLetterRecord; 1]>::try_from(found) {
            Ok([only]) => Ok(only),
            Err(found) if found.is_empty() => Err(self.not_found()),
            Err(found) => Err(StoreError::Ambiguous {
                what: "dead letter",
                id: self.given.clone(),
                candidates: found
                    .iter()
                    .take(AMBIGUOUS_SHOWN)
                    .map(|record| record.id.to_string())
                    .chain((found.len() > AMBIGUOUS_SHOWN).then(|| "...".to_owned()))
                    .collect(),
            }),
        }
    }
}

/// A new saga state to save, if the saga is still at `expected_version`.
#[derive(Debug, Clone, PartialEq)]
pub struct SagaWrite {
    /// `release` or `gitops`.
    pub kind: String,
    /// The saga key (releaseId or environment).
    pub key: String,
    /// The version loaded (0 when the saga did not exist).
    pub expected_version: i64,
    /// The new state.
    pub state: Value,
    /// The tenant of the message that wrote it. Kept from the first save:
    /// a saga belongs to the tenant that started it.
    pub tenant_id: Option<String>,
}

/// A saga as stored.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SagaRecord {
    /// `release` or `gitops`.
    pub kind: String,
    /// The key.
    pub key: String,
    /// Incremented by every save.
    pub version: i64,
    /// The tenant that started it (none for sagas saved before tenants were kept).
    pub tenant_id: Option<String>,
    /// The state.
    pub state: Value,
    /// First save.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub created_at: OffsetDateTime,
    /// Last save.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub updated_at: OffsetDateTime,
    /// Every save: version, message and time.
    pub history: Vec<SagaHistoryEntry>,
}

/// What a handler is given of a saga: its state and version, and who owns
/// it, without its history (read by [`Store::load_saga_state`] on every
/// saga message, so its cost does not grow with the saga's age).
#[derive(Debug, Clone, PartialEq)]
pub struct SagaState {
    /// Incremented by every save; the version a save must expect.
    pub version: i64,
    /// The tenant that started it (none for sagas saved before tenants were kept).
    pub tenant_id: Option<String>,
    /// The state.
    pub state: Value,
}

/// One save of a saga.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SagaHistoryEntry {
    /// The version written.
    pub version: i64,
    /// The message applied.
    pub message_id: String,
    /// Its type.
    pub message_type: String,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub at: OffsetDateTime,
}

/// What happened to a message, for `bosun deliveries show`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TimelineStatus {
    /// Sent by an agent or dispatched from the outbox.
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
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
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
    /// The message's attempt number at the time.
    pub attempt: u32,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub at: OffsetDateTime,
    /// Free text: the error, the entity, the replay id ...
    pub detail: Option<String>,
}

impl TimelineEntry {
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

/// Everything one successful handling writes, atomically.
#[derive(Debug, Clone, PartialEq)]
pub struct HandledMessage {
    /// The consumer.
    pub consumer: String,
    /// The envelope's messageId.
    pub message_id: String,
    /// The envelope's type.
    pub message_type: String,
    /// The saga state to save, if the consumer runs a saga.
    pub saga: Option<SagaWrite>,
    /// Messages to send.
    pub outbox: Vec<OutboundMessage>,
    /// Timeline lines.
    pub timeline: Vec<TimelineEntry>,
}

/// Everything one failed attempt that will be retried writes, atomically:
/// the attempt, the retry to send (a scheduled copy of the message with the
/// next attempt number) and its timeline line.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryWrite {
    /// The consumer.
    pub consumer: String,
    /// The envelope's messageId.
    pub message_id: String,
    /// The broker id of the delivery that failed: a redelivery of the same
    /// failed copy does not schedule a second retry, while a replayed copy
    /// starts afresh.
    pub received_broker_message_id: String,
    /// The failed attempt.
    pub attempt: AttemptRecord,
    /// The copy to send.
    pub retry: OutboundMessage,
    /// The `retry-scheduled` line.
    pub timeline: TimelineEntry,
}

/// A command accepted at the front door: everything
/// [`Store::accept_command`] writes, atomically.
#[derive(Debug, Clone, PartialEq)]
pub struct AcceptedCommand {
    /// The delivery it starts or joins.
    pub delivery: DeliveryRecord,
    /// The message to send.
    pub message: OutboundMessage,
    /// Its `sent` line.
    pub timeline: TimelineEntry,
}

/// Whether [`Store::commit_handled`] wrote anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOutcome {
    /// Written now.
    Committed,
    /// The message was already handled by this consumer; nothing written.
    AlreadyHandled,
}

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

/// An API key as stored: only a hash of its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyRecord {
    /// The public part of the key (`bsn_<id>_...`), used to look it up.
    pub id: String,
    /// The tenant it acts for (`*`: every tenant).
    pub tenant_id: String,
    /// What it may do.
    pub scopes: Vec<String>,
    /// SHA-256 of the secret, hex.
    #[serde(skip)]
    pub secret_hash: String,
    /// Free text to tell keys apart.
    pub description: Option<String>,
    /// Who created it.
    pub created_by: String,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it was revoked, if it was.
    #[serde(with = "time::serde::rfc3339::option")]
    pub revoked_at: Option<OffsetDateTime>,
    /// When it stops working; `None` for a key made before keys expired
    /// (`bosun keys list --expiring` lists those too: rotate them).
    #[serde(with = "time::serde::rfc3339::option")]
    pub expires_at: Option<OffsetDateTime>,
    /// When it was last accepted, to the minute.
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_used_at: Option<OffsetDateTime>,
    /// The key this one succeeds (`bosun keys rotate`).
    pub rotated_from: Option<String>,
    /// The key that succeeds this one, which ends this one's life at the
    /// end of the grace period.
    pub rotated_to: Option<String>,
}

/// The outcome of claiming an `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq)]
pub enum IdempotencyClaim {
    /// This request owns the key now: do the work, then
    /// [`AccessStore::complete_idempotency`] (or release it on failure).
    Claimed,
    /// Another request with this key is being processed.
    InProgress {
        /// The hash of that request.
        request_hash: String,
    },
    /// A request with this key was answered before.
    Completed {
        /// The hash of that request.
        request_hash: String,
        /// Its HTTP status.
        status: u16,
        /// Its answer.
        response: Value,
    },
}

/// API keys, HTTP idempotency and bulk replay jobs ([`ReplayJobStore`]):
/// what the front door remembers. In the same database as the [`Store`].
#[async_trait]
pub trait AccessStore: ReplayJobStore {
    /// Stores a new key.
    async fn insert_api_key(&self, key: ApiKeyRecord) -> Result<(), StoreError>;

    /// One key by id (revoked ones included).
    async fn api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError>;

    /// Every key, oldest first.
    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError>;

    /// Revokes a key. [`StoreError::NotFound`] when there is none; revoking
    /// twice keeps the first time.
    async fn revoke_api_key(&self, id: &str, at: OffsetDateTime) -> Result<ApiKeyRecord, StoreError>;

    /// Rotates key `id`: stores `successor` and, in the same transaction,
    /// records it on the old key and ends the old key's life at
    /// `old_expires_at` (or its own expiry, if sooner). Returns the old key
    /// as it is now. [`StoreError::NotFound`] when there is no key `id`.
    async fn rotate_api_key(
        &self,
        id: &str,
        successor: ApiKeyRecord,
        old_expires_at: OffsetDateTime,
    ) -> Result<ApiKeyRecord, StoreError>;

    /// Records that key `id` was accepted at `at`.
    async fn touch_api_key(&self, id: &str, at: OffsetDateTime) -> Result<(), StoreError>;

    /// Claims `(tenant, key)` for a request with hash `request_hash`. A claim
    /// left in progress longer than `stale_after` (its process died) is taken
    /// over and reported as [`IdempotencyClaim::Claimed`].
    async fn claim_idempotency(
        &self,
        tenant_id: &str,
        key: &str,
        request_hash: &str,
        stale_after: std::time::Duration,
    ) -> Result<IdempotencyClaim, StoreError>;

    /// Records the answer of a claimed key.
    async fn complete_idempotency(
        &self,
        tenant_id: &str,
        key: &str,
        status: u16,
        response: &Value,
    ) -> Result<(), StoreError>;

    /// Forgets a claimed key whose request failed, so a retry can run.
    async fn release_idempotency(&self, tenant_id: &str, key: &str) -> Result<(), StoreError>;
}

/// Why an outbox entry exists, stored with it: which method wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutboxPurpose {
    /// A command sent on its own ([`Store::enqueue_outbox`]: `bosun send`,
    /// the HTTP API, the MCP server).
    Sent,
    /// A message a consumer emitted while handling one
    /// ([`Store::commit_handled`]).
    Emitted,
    /// The scheduled copy of a message whose handling failed
    /// ([`Store::record_retry`]); already on the timeline as
    /// `retry-scheduled`, and not among [`Store::emitted`].
    Retry,
}

impl OutboxPurpose {
    /// The purpose as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sent => "sent",
            Self::Emitted => "emitted",
            Self::Retry => "retry",
        }
    }

    /// The purpose stored as `text` in outbox row `id`.
    pub(crate) fn decode(text: &str, id: i64) -> Result<Self, StoreError> {
        match text {
            "sent" => Ok(Self::Sent),
            "emitted" => Ok(Self::Emitted),
            "retry" => Ok(Self::Retry),
            other => Err(StoreError::corrupt(
                format!("purpose of outbox entry {id}"),
                format!("unknown purpose `{other}`"),
            )),
        }
    }
}

/// An outbox entry waiting to be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingOutbox {
    /// Outbox row id.
    pub id: i64,
    /// Why it was written.
    pub purpose: OutboxPurpose,
    /// The message.
    pub message: OutboundMessage,
    /// Correlation and causation for the timeline.
    pub message_id: Option<String>,
}

/// How a saga of one kind says it is over: its state's top-level `field`
/// holds one of `values` (the release saga: `phase` is `completed` or
/// `rejected`). Sagas of kinds with no such rule (GitOps environments,
/// probe tallies) never finish and are never pruned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedSaga {
    /// The saga kind (`release`).
    pub kind: String,
    /// The state's field naming where the saga is (`phase`).
    pub field: String,
    /// The values of that field that mean it is over.
    pub values: Vec<String>,
}

/// What [`Store::prune`] may delete: of each kind, rows older than its
/// retention (`None`: kept forever), at most `batch` rows per kind per call.
/// Dead letters are never pruned (operators purge them), nor outbox entries
/// not yet sent, nor sagas not finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Idempotency records (and the attempts of failed handlings), by when
    /// they were written.
    pub handled: Option<std::time::Duration>,
    /// Outbox entries, by when they were sent (unsent ones are kept).
    pub outbox_sent: Option<std::time::Duration>,
    /// Timeline lines, by their time (the lines of a delivery that has a
    /// dead letter are kept while it exists); a delivery's record goes when
    /// it is older than this and its lines are gone; a bulk replay job when
    /// it ended longer ago than this.
    pub timeline: Option<std::time::Duration>,
    /// Finished sagas (with their history), by their last save.
    pub finished_sagas: Option<std::time::Duration>,
    /// How each saga kind that can finish says so.
    pub finished: Vec<FinishedSaga>,
    /// Most rows deleted per kind per call (each a short statement).
    pub batch: usize,
}

/// How many rows one [`Store::prune`] (and the transport's
/// [`Transport::prune_duplicates`](crate::ports::transport::Transport::prune_duplicates))
/// deleted, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pruned {
    /// Idempotency records.
    pub handled: u64,
    /// Attempts of failed handlings.
    pub attempts: u64,
    /// Sent outbox entries.
    pub outbox: u64,
    /// Timeline lines.
    pub timeline: u64,
    /// Delivery records.
    pub deliveries: u64,
    /// Finished sagas (their history goes with them).
    pub sagas: u64,
    /// The transport's duplicate-detection records.
    pub duplicates: u64,
    /// Bulk replay jobs that ended (finished or cancelled) before the
    /// timeline's retention, with their items.
    pub replay_jobs: u64,
}

impl Pruned {
    /// Rows deleted in all.
    pub fn total(&self) -> u64 {
        self.kinds().iter().map(|(_, count)| count).sum()
    }

    /// Whether some kind filled its batch of `batch` rows: there may be more.
    pub fn any_full(&self, batch: usize) -> bool {
        let batch = u64::try_from(batch).unwrap_or(u64::MAX);
        self.kinds().iter().any(|(_, count)| *count >= batch)
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Pruned) {
        self.handled += other.handled;
        self.attempts += other.attempts;
        self.outbox += other.outbox;
        self.timeline += other.timeline;
        self.deliveries += other.deliveries;
        self.sagas += other.sagas;
        self.duplicates += other.duplicates;
    }

    /// Each kind's name and count.
    pub fn kinds(&self) -> [(&'static str, u64); 8] {
        [
            ("handled", self.handled),
            ("attempts", self.attempts),
            ("outbox", self.outbox),
            ("timeline", self.timeline),
            ("deliveries", self.deliveries),
            ("sagas", self.sagas),
            ("duplicates", self.duplicates),
            ("replay-jobs", self.replay_jobs),
        ]
    }
}

impl std::fmt::Display for Pruned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .kinds()
            .iter()
            .map(|(kind, count)| format!("{kind} {count}"))
            .collect();
        f.write_str(&parts.join(", "))
    }
}

/// `now - keep`: rows older than this are past their retention (`None`
/// when the kind is kept forever; the Unix epoch, older than any row, when
/// `keep` reaches back further than a time can).
pub(crate) fn cutoff(now: OffsetDateTime, keep: Option<std::time::Duration>) -> Option<OffsetDateTime> {
    keep.map(|keep| {
        time::Duration::try_from(keep)
            .ok()
            .and_then(|keep| now.checked_sub(keep))
            .unwrap_or(OffsetDateTime::UNIX_EPOCH)
            .max(OffsetDateTime::UNIX_EPOCH)
    })
}

/// A saga key's turn across every process that shares the store: while it
/// is held, no other process handles a message of that saga. Released when
/// dropped.
pub struct SagaTurn {
    _held: Box<dyn Send + Sync>,
}

impl SagaTurn {
    /// A turn that lasts as long as `held` (whose drop releases it).
    pub fn new(held: impl Send + Sync + 'static) -> Self {
        Self { _held: Box::new(held) }
    }
}

impl std::fmt::Debug for SagaTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SagaTurn")
    }
}

/// Everything bosun persists besides the transport's messages.
#[async_trait]
pub trait Store: Send + Sync {
    // -- idempotency --------------------------------------------------------

    /// Whether `consumer` already handled `message_id`.
    async fn is_handled(&self, consumer: &str, message_id: &str) -> Result<bool, StoreError>;

    /// What the runtime reads before running a handler, in one read:
    /// whether `consumer` already handled `message_id`, and (for a saga
    /// message, `saga` = kind and key, when not handled) the saga's state
    /// as [`Store::load_saga_state`] gives it.
    async fn handled_and_saga(
        &self,
        consumer: &str,
        message_id: &str,
        saga: Option<(&str, &str)>,
    ) -> Result<(bool, Option<SagaState>), StoreError>;

    /// Waits for saga `kind`/`key`'s turn across processes, where the store
    /// is shared by several (`None`: it has no such lock, and the version
    /// check at commit is the only guard across processes). The runtime
    /// takes it after the in-process turn and keeps it until the commit.
    async fn saga_turn(&self, kind: &str, key: &str) -> Result<Option<SagaTurn>, StoreError> {
        let _ = (kind, key);
        Ok(None)
    }

    /// Writes the idempotency record, the saga state (with its version
    /// check) and the outbox entries of one message in one transaction.
    async fn commit_handled(&self, handled: HandledMessage) -> Result<CommitOutcome, StoreError>;

    // -- retries ------------------------------------------------------------

    /// Records a failed attempt and, atomically, the retry to send and its
    /// timeline line. Keyed by the delivery that failed
    /// ([`RetryWrite::received_broker_message_id`]), so a redelivery of the
    /// same failed copy does not schedule a second retry.
    async fn record_retry(&self, retry: RetryWrite) -> Result<(), StoreError>;

    /// Every failed attempt of a message at a consumer, oldest first (replays
    /// included).
    async fn attempts(&self, consumer: &str, message_id: &str) -> Result<Vec<AttemptRecord>, StoreError>;

    // -- dead letters -------------------------------------------------------

    /// Stores a dead letter (attempts included) and its timeline line.
    async fn record_dead_letter(
        &self,
        record: DeadLetterRecord,
        timeline: Option<TimelineEntry>,
    ) -> Result<(), StoreError>;

    /// Lists dead letters, newest first.
    async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetterRecord>, StoreError>;

    /// One dead letter by id, of `tenant_id` only when given (a unique
    /// prefix of at least 4 characters is accepted, matched literally; see
    /// [`DeadLetterLookup`]).
    async fn dead_letter(&self, id: &str, tenant_id: Option<&str>) -> Result<DeadLetterRecord, StoreError>;

    /// The dead letter recorded for a transport message, if any.
    async fn dead_letter_for(
        &self,
        entity: &Destination,
        sequence: i64,
    ) -> Result<Option<DeadLetterRecord>, StoreError>;

    /// Records a replay of a dead letter, with its timeline line.
    async fn record_replay(
        &self,
        id: Uuid,
        replay: ReplayRecord,
        timeline: Option<TimelineEntry>,
    ) -> Result<(), StoreError>;

    /// Deletes a dead letter.
    async fn purge_dead_letter(&self, id: Uuid) -> Result<(), StoreError>;

    // -- outbox -------------------------------------------------------------

    /// Accepts a command at the front door (the API, MCP, `bosun send`) in
    /// one transaction: its delivery (kept as it is when the command joins
    /// one), its outbox entry (purpose [`OutboxPurpose::Sent`], claimed for
    /// `lease` so the caller can send it at once while other dispatchers
    /// leave it alone) and its `sent` timeline line. Returns the outbox
    /// entry's id, for [`Store::mark_dispatched`].
    async fn accept_command(&self, accepted: AcceptedCommand, lease: std::time::Duration) -> Result<i64, StoreError>;

    /// Claims up to `limit` undispatched entries for `lease` so other
    /// processes leave them alone meanwhile.
    async fn claim_outbox(&self, limit: usize, lease: std::time::Duration) -> Result<Vec<PendingOutbox>, StoreError>;

    /// Marks entries as sent.
    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError>;

    /// Number of entries not yet sent.
    async fn outbox_backlog(&self) -> Result<u64, StoreError>;

    /// The envelopes sent or emitted for a delivery (outbox entries with
    /// this correlation id whose purpose is not [`OutboxPurpose::Retry`]),
    /// oldest first.
    async fn emitted(&self, correlation_id: &str) -> Result<Vec<Vec<u8>>, StoreError>;

    // -- sagas --------------------------------------------------------------

    /// Loads a saga with its whole history (for people: `bosun sagas`, the
    /// API and the console).
    async fn load_saga(&self, kind: &str, key: &str) -> Result<Option<SagaRecord>, StoreError>;

    /// Loads what a handler needs of a saga, one indexed row whatever the
    /// length of its history (the runtime's hot path).
    async fn load_saga_state(&self, kind: &str, key: &str) -> Result<Option<SagaState>, StoreError>;

    /// Lists sagas, optionally of one kind.
    async fn list_sagas(&self, kind: Option<&str>) -> Result<Vec<SagaRecord>, StoreError>;

    // -- timeline -----------------------------------------------------------

    /// Appends timeline lines.
    async fn append_timeline(&self, entries: Vec<TimelineEntry>) -> Result<(), StoreError>;

    /// Every line of a delivery, oldest first.
    async fn timeline(&self, correlation_id: &str) -> Result<Vec<TimelineEntry>, StoreError>;

    /// Starts waiting for new lines of `correlation_id`'s timeline: make the
    /// wait, then read [`Store::timeline`], then
    /// [`TimelineWait::changed`] (a line written after the wait was made
    /// wakes it, even one written before `changed` is called). Every
    /// store's wait also ends after a fallback timeout; a store that cannot
    /// signal waits only that ([`DEFAULT_TIMELINE_FALLBACK`]).
    fn watch_timeline(&self, correlation_id: &str) -> TimelineWait {
        let _ = correlation_id;
        TimelineWait::poll_only(DEFAULT_TIMELINE_FALLBACK)
    }

    // -- health -------------------------------------------------------------

    /// Whether the database's schema is the version this bosun needs
    /// (stores that create their own schema have nothing to check).
    async fn check_schema(&self) -> Result<(), StoreError> {
        Ok(())
    }

    // -- deliveries ---------------------------------------------------------

    /// Records how a delivery started; the first record of a correlation id
    /// wins (later calls change nothing).
    async fn record_delivery(&self, record: DeliveryRecord) -> Result<(), StoreError>;

    /// How a delivery started, if it was recorded.
    async fn delivery_record(&self, correlation_id: &str) -> Result<Option<DeliveryRecord>, StoreError>;

    /// Deliveries, newest first, optionally of one tenant.
    async fn list_deliveries(&self, tenant_id: Option<&str>, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError>;

    // -- retention ----------------------------------------------------------

    /// Deletes one batch per kind of what `policy` says is older than its
    /// retention at `now` (at most `policy.batch` rows each, in short
    /// statements on indexed columns, so the hot path is not held up), and
    /// says how many of each. Call again while [`Pruned::any_full`].
    async fn prune(&self, policy: &RetentionPolicy, now: OffsetDateTime) -> Result<Pruned, StoreError>;
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_edit_lists_every_changed_field_as_a_json_pointer() {
        let edit = ReplayEdit::between(
            json!({"branch": "main", "a/b": 1, "files": [{"path": "x"}, {"path": "y"}], "tags": [1], "gone": true}),
            json!({"branch": "hotfix", "a/b": 1, "files": [{"path": "x"}, {"path": "z"}], "tags": [1, 2], "new": "n"}),
        );
        let changes: Vec<(String, Option<Value>, Option<Value>)> = edit
            .diff
            .iter()
            .map(|c| (c.path.clone(), c.before.clone(), c.after.clone()))
            .collect();
        assert_eq!(
            changes,
            [
                ("/branch".into(), Some(json!("main")), Some(json!("hotfix"))),
                ("/files/1/path".into(), Some(json!("y")), Some(json!("z"))),
                ("/gone".into(), Some(json!(true)), None),
                ("/new".into(), None, Some(json!("n"))),
                ("/tags".into(), Some(json!([1])), Some(json!([1, 2]))),
            ]
        );
        assert!(ReplayEdit::between(json!({"a": 1}), json!({"a": 1})).diff.is_empty());
        // `/` and `~` in a key are escaped as JSON Pointer says.
        let escaped = ReplayEdit::between(json!({"a/b~c": 1}), json!({"a/b~c": 2}));
        assert_eq!(escaped.diff[0].path, "/a~1b~0c");
    }

    #[test]
    fn a_replay_stored_before_edits_were_audited_still_reads() {
        let old = json!({
            "replayId": "01910000-0000-7000-8000-000000000009", "by": "alice",
            "at": "2026-12-01T10:00:00Z", "destination": "commit", "brokerMessageId": "m.replay"
        });
        let replay: ReplayRecord = serde_json::from_value(old).unwrap();
        assert_eq!(replay.edit, None);
    }
}
