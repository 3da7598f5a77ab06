//! The fleet: the `serve` and `api` processes that run on one shared store,
//! each saying so when it starts and every schema check after, so an
//! operator sees which releases still run during a rolling update.

use schemars::JsonSchema;
use serde::Serialize;
use time::OffsetDateTime;
use uuid::Uuid;

/// One process on the store, as it last said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessRecord {
    /// Chosen by the process when it starts.
    pub id: Uuid,
    /// `serve` or `api`.
    pub role: String,
    /// The bosun release it runs (its package version).
    pub release: String,
    /// The PostgreSQL schema version it was built for.
    pub built_for_schema: i64,
    /// The message wire version it writes (lowered by `BOSUN_COMPAT_VERSION`).
    pub writes_wire: u32,
    /// The oldest message wire version it reads.
    pub reads_wire_from: u32,
    /// The newest message wire version it reads.
    pub reads_wire_to: u32,
    /// Its host name (the pod's name on Kubernetes).
    pub host: String,
    /// When it started.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub started_at: OffsetDateTime,
    /// When it last said it runs.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub seen_at: OffsetDateTime,
}
