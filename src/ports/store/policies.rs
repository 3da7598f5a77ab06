//! Release policies: each tenant's release policy document, kept as an
//! append-only list of versions, and the store of them ([`PolicyStore`]).
//!
//! A version is never changed or deleted once stored (retention leaves
//! them alone): the list is the audit trail of who changed the policy,
//! when and why. A new version is stored only over the version its writer
//! read ([`PolicyStore::put_release_policy`]'s `expected`), so two writers
//! who read the same version cannot both store theirs.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use time::OffsetDateTime;

use super::StoreError;

/// One version of a tenant's release policy document.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleasePolicyRecord {
    /// The tenant whose policy it is.
    pub tenant_id: String,
    /// 1 for the first version, then +1 per change.
    pub version: u64,
    /// The document as given (JSON; its meaning is the release saga's, the
    /// store does not look inside).
    pub document: serde_json::Value,
    /// Who stored this version (`cli:<user>`, `key:<id>`).
    pub changed_by: String,
    /// When (whole milliseconds, as every store keeps it).
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub changed_at: OffsetDateTime,
    /// Why, as the changer said.
    pub reason: Option<String>,
}

/// Each tenant's release policy, versioned and append-only. In the same
/// database as the [`Store`](super::Store); every key includes the tenant,
/// and one tenant's versions are never seen through another's.
#[async_trait]
pub trait PolicyStore: Send + Sync {
    /// Stores `document` as the tenant's next version, only if the
    /// tenant's current version is `expected` (`None`: the tenant has none
    /// yet). When it is not (another writer stored a version since this
    /// one read it), nothing is stored and the error is
    /// [`StoreError::PolicyChanged`]: read again and retry. Returns the
    /// stored record (`changed_at` as the store keeps it, to the
    /// millisecond).
    async fn put_release_policy(
        &self,
        tenant_id: &str,
        document: &serde_json::Value,
        changed_by: &str,
        reason: Option<&str>,
        expected: Option<u64>,
        at: OffsetDateTime,
    ) -> Result<ReleasePolicyRecord, StoreError>;

    /// The tenant's current (latest) version, if any.
    async fn release_policy(&self, tenant_id: &str) -> Result<Option<ReleasePolicyRecord>, StoreError>;

    /// Every version of the tenant's policy, oldest first (the audit trail
    /// of policy changes).
    async fn release_policy_history(&self, tenant_id: &str) -> Result<Vec<ReleasePolicyRecord>, StoreError>;
}

/// The version a put over `expected` stores (1 over none), or the
/// refusal of a version past what a store can count.
pub(crate) fn next_version(tenant_id: &str, expected: Option<u64>) -> Result<u64, StoreError> {
    expected
        .map_or(Some(1), |version| version.checked_add(1))
        .ok_or_else(|| {
            StoreError::unencodable(
                format!("release policy of tenant {tenant_id}"),
                "its version would pass the largest a store keeps",
            )
        })
}

/// `version` as the durable stores keep it (a signed 64-bit integer).
pub(crate) fn stored_version(tenant_id: &str, version: u64) -> Result<i64, StoreError> {
    i64::try_from(version).map_err(|err| {
        StoreError::unencodable(
            format!("version {version} of the release policy of tenant {tenant_id}"),
            err,
        )
    })
}

/// A version as a durable store read it, refused when it is not one a
/// store writes (below 1).
pub(crate) fn read_version(tenant_id: &str, stored: i64) -> Result<u64, StoreError> {
    u64::try_from(stored)
        .ok()
        .filter(|version| *version >= 1)
        .ok_or_else(|| {
            StoreError::corrupt(
                format!("version of the release policy of tenant {tenant_id}"),
                format!("{stored} is not a version (they start at 1)"),
            )
        })
}
