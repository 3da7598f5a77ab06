//! Saga records: what a saga write carries, a stored saga, its state and history, and the cross-process turn of a saga key.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

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
/// it, without its history (read by [`SagaStore::load_saga_state`](super::SagaStore::load_saga_state) on every
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
