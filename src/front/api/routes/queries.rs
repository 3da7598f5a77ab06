//! The query parameters of the API's list routes, as the OpenAPI document
//! describes them and the handlers read them.

use super::MAX_LISTED;
use crate::front::api::openapi::{QueryDoc, QueryType, SAGA_KINDS, query};
use crate::front::gateway::jobs::MAX_JOBS_LISTED;

/// `GET /v1/dead-letters` and `GET /v1/dead-letters/groups`.
pub const DEAD_LETTER_QUERY: &[QueryDoc] = &[
    query("consumer", QueryType::Text, "only this consumer's"),
    query("type", QueryType::Text, "only this message type"),
    query("reason", QueryType::Text, "only this failure cause"),
    query(
        "since",
        QueryType::DateTime,
        "only dead-lettered at or after this RFC 3339 time",
    ),
    query("includeReplayed", QueryType::Boolean, "`true` to include replayed ones"),
    query(
        "includeAcknowledged",
        QueryType::Boolean,
        "groups only: `true` to include acknowledged groups with no newer failure",
    ),
    query(
        "limit",
        QueryType::Integer {
            minimum: 1,
            maximum: Some(MAX_LISTED),
        },
        "at most this many, newest first",
    ),
];

/// The query of `GET /v1/consumers/controls`.
pub const CONTROLS_QUERY: &[QueryDoc] = &[query(
    "limit",
    QueryType::Integer {
        minimum: 1,
        maximum: Some(crate::operator::controls::MAX_LOG_PAGE as u64),
    },
    "at most this many, newest first (default 100)",
)];

/// `GET /v1/tenants/{tenant}/audit`.
pub const AUDIT_QUERY: &[QueryDoc] = &[
    query(
        "since",
        QueryType::DateTime,
        "only decisions taken at or after this RFC 3339 time",
    ),
    query(
        "after",
        QueryType::Integer {
            minimum: 0,
            // A sequence is kept as a signed 64-bit number.
            maximum: Some(i64::MAX as u64),
        },
        "only entries after this `sequence` (the last one of the previous page)",
    ),
    query("releaseId", QueryType::Text, "only this release's decisions"),
    query(
        "limit",
        QueryType::Integer {
            minimum: 1,
            maximum: Some(crate::operator::audit::MAX_AUDIT_PAGE as u64),
        },
        "at most this many, in log order (default 100)",
    ),
];

/// `GET /v1/deliveries`.
pub const DELIVERIES_QUERY: &[QueryDoc] = &[query(
    "limit",
    QueryType::Integer {
        minimum: 1,
        maximum: Some(MAX_LISTED),
    },
    "at most this many (default 50)",
)];

/// `GET /v1/sagas`.
pub const SAGAS_QUERY: &[QueryDoc] = &[query(
    "kind",
    QueryType::Enum("SagaKind", SAGA_KINDS),
    "only sagas of this kind",
)];

/// `GET /v1/replays`.
pub const REPLAY_JOBS_QUERY: &[QueryDoc] = &[query(
    "limit",
    QueryType::Integer {
        minimum: 1,
        maximum: Some(MAX_JOBS_LISTED as u64),
    },
    "at most this many (default 50)",
)];
