//! The HTTP API's own bodies: the lists and purge answers its handlers
//! wrap the gateway's views in, and the JSON request bodies it reads. Each
//! derives `JsonSchema`, so the OpenAPI document ([`super::openapi`])
//! describes exactly what the handlers write.
//!
//! The request bodies are read by hand in the handlers (each wrong field
//! answers 422 naming it); these types are their schema, and the API's
//! conformance test sends bodies valid against them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::front::gateway::{DeliverySummary, FailureGroup};
use crate::ports::store::{DeadLetterRecord, SagaRecord};

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: &'static str,
}

/// `GET /v1/deliveries`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct DeliveryList {
    /// Newest first.
    pub deliveries: Vec<DeliverySummary>,
}

/// `GET /v1/sagas`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SagaList {
    /// The sagas.
    pub sagas: Vec<SagaRecord>,
}

/// `GET /v1/dead-letters`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterList {
    /// Newest first.
    pub dead_letters: Vec<DeadLetterRecord>,
}

/// `GET /v1/dead-letters/groups`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct FailureGroupList {
    /// Largest group first.
    pub groups: Vec<FailureGroup>,
}

/// `DELETE /v1/dead-letters/groups/{fingerprint}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct GroupPurged {
    /// The group.
    pub fingerprint: String,
    /// The dead letters purged.
    pub purged: Vec<Uuid>,
}

/// `DELETE /v1/dead-letters/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Purged {
    /// The dead letter purged.
    pub purged: Uuid,
}

/// `POST /v1/dead-letters/{id}/replay` (the body is optional).
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayBody {
    /// The payload to send instead of the dead letter's (edit-and-replay),
    /// validated against the message type's contract.
    #[serde(default)]
    pub payload: Option<Value>,
}

/// `POST /v1/dead-letters/groups/{fingerprint}/replay` (the body is optional).
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupReplayBody {
    /// At most this many replays per second.
    #[serde(default)]
    #[schemars(extend("exclusiveMinimum" = 0))]
    pub rate: Option<f64>,
}

/// `POST /v1/dead-letters/replays`: these dead letters, or every one not
/// yet replayed that matches the filter (one of the two).
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkReplayBody {
    /// Dead letter ids.
    #[serde(default)]
    pub ids: Vec<Uuid>,
    /// Or the dead letters matching this filter.
    #[serde(default)]
    pub filter: Option<BulkReplayFilter>,
    /// At most this many replays per second.
    #[serde(default)]
    #[schemars(extend("exclusiveMinimum" = 0))]
    pub rate: Option<f64>,
}

/// Which dead letters a bulk replay takes (the query parameters of
/// `GET /v1/dead-letters`, as strings).
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
pub struct BulkReplayFilter {
    /// Only this consumer's.
    #[serde(default)]
    pub consumer: Option<String>,
    /// Only this message type.
    #[serde(default, rename = "type")]
    pub message_type: Option<String>,
    /// Only this failure cause.
    #[serde(default)]
    pub reason: Option<String>,
    /// Only dead-lettered at or after this RFC 3339 time.
    #[serde(default)]
    #[schemars(extend("format" = "date-time"))]
    pub since: Option<String>,
}
