//! Live control: an operator pauses a consumer (for every tenant) during an
//! incident at a downstream service, and resumes it; and acknowledges a
//! failure group, hiding it until a new failure of its cause arrives.
//! Every pause and resume is one row of an append-only log
//! ([`ControlStore`]); what is paused now is each consumer's latest row.
//! Every replica of the consumer reads it every few seconds and stops
//! taking messages while it is paused: they wait in their queue, nothing is
//! dead-lettered by a pause.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::StoreError;

/// What an operator did to a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ControlAction {
    /// Stop taking messages (they wait in the queue).
    Pause,
    /// Take messages again.
    Resume,
}

impl ControlAction {
    /// The word stored: `pause` or `resume`.
    pub fn as_str(self) -> &'static str {
        match self {
            ControlAction::Pause => "pause",
            ControlAction::Resume => "resume",
        }
    }

    /// The action a stored word names.
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "pause" => Some(ControlAction::Pause),
            "resume" => Some(ControlAction::Resume),
            _ => None,
        }
    }
}

/// One pause or resume of a consumer, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerControl {
    /// Position in the log, 1 for the first (0 before it is recorded).
    pub sequence: u64,
    /// The consumer.
    pub consumer: String,
    /// What was done.
    pub action: ControlAction,
    /// Who did it (`cli:<operator>`, `key:<id> (<description>)`).
    pub by: String,
    /// Through which door (`cli:<operator>`, `api:<key id>`, `mcp:<key id>`).
    pub door: String,
    /// Why, as given.
    pub reason: Option<String>,
    /// When (whole milliseconds, as every store keeps it).
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub at: OffsetDateTime,
}

/// The log of consumer pauses and resumes, append-only, in the same
/// database as the [`Store`](super::Store) (so every replica reads the
/// same); retention never prunes it.
#[async_trait]
pub trait ControlStore: Send + Sync {
    /// Appends `control` (its `sequence` is ignored); returns it as stored,
    /// numbered.
    async fn record_control(&self, control: &ConsumerControl) -> Result<ConsumerControl, StoreError>;

    /// Each consumer's latest entry (whether it is paused now, since when
    /// and by whom), by consumer.
    async fn latest_controls(&self) -> Result<Vec<ConsumerControl>, StoreError>;

    /// The log, newest first, at most `limit` entries.
    async fn controls(&self, limit: usize) -> Result<Vec<ConsumerControl>, StoreError>;

    /// Records `acknowledgement` of its failure group in its scope,
    /// replacing an earlier one.
    async fn acknowledge_group(&self, acknowledgement: &GroupAcknowledgement) -> Result<(), StoreError>;

    /// Removes the acknowledgement of `fingerprint` in `scope`; false when
    /// there was none.
    async fn unacknowledge_group(&self, scope: &str, fingerprint: &str) -> Result<bool, StoreError>;

    /// The acknowledgements in `scope`.
    async fn group_acknowledgements(&self, scope: &str) -> Result<Vec<GroupAcknowledgement>, StoreError>;
}

/// An operator's acknowledgement of a failure group: the group is hidden
/// from the list until a failure of its cause newer than `at` arrives, and
/// carries the note.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupAcknowledgement {
    /// Whose view of the groups it is in: the tenant, or `*` for the
    /// platform's (every tenant's dead letters).
    pub scope: String,
    /// The group's fingerprint.
    pub fingerprint: String,
    /// Who acknowledged it.
    pub by: String,
    /// Through which door.
    pub door: String,
    /// What the operator wants the next one to know (a ticket, a cause).
    pub note: Option<String>,
    /// When (whole milliseconds).
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub at: OffsetDateTime,
}
