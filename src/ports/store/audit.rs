//! The release audit: each tenant's log of release decisions (who asked
//! for, approved, refused, overrode, promoted and deployed what, when,
//! through which door and why), kept append-only, and the store of it
//! ([`AuditStore`]).
//!
//! An entry is never changed or deleted once stored (retention leaves the
//! log alone, and the durable stores' triggers refuse an update or a
//! delete): the log is what an auditor reads. Each entry has an id of its
//! own (the id of the message that carried the decision), so recording the
//! same decision again, as a redelivered message does, stores nothing
//! new. The store numbers a tenant's entries in the order they are
//! appended ([`AuditEntry::sequence`]), so a reader pages through the log
//! by sequence and misses nothing appended after its last page.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use time::OffsetDateTime;

use super::StoreError;
use crate::ports::transport::{from_unix_ms, unix_ms};

/// One release decision in a tenant's audit log.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// Unique id of the entry in its tenant's log (the id of the message
    /// that carried the decision, or `policy:<version>` for a policy
    /// change); appending an entry whose id the tenant's log already has
    /// stores nothing.
    pub id: String,
    /// The tenant whose log it is in.
    pub tenant_id: String,
    /// Position in the tenant's log, 1 for the first, assigned by the
    /// store in the order entries are appended (0 on an entry not yet
    /// appended).
    pub sequence: u64,
    /// When the decision was made (whole milliseconds, as every store
    /// keeps it).
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub at: OffsetDateTime,
    /// What was decided: `requested`, `approved`, `approval-refused`,
    /// `rejected`, `overridden`, `waiting-for-window`, `promoted`,
    /// `deployed`, `policy-changed` ... (free text to the store).
    pub action: String,
    /// The release it is about, if any (a policy change is about none).
    pub release_id: Option<String>,
    /// The environment it is about, if any.
    pub environment: Option<String>,
    /// Who decided (`key:<id> (<description>)`, `cli:<operator>`, `bosun`).
    pub by: Option<String>,
    /// Through which door (`cli:<operator>`, `api:<key id>`, `bosun` for
    /// the saga itself).
    pub door: Option<String>,
    /// Why, as given.
    pub reason: Option<String>,
    /// The rest, as JSON (the rule named, identities, policy version,
    /// until ...); the store does not look inside.
    pub detail: serde_json::Value,
}

/// Each tenant's release audit log, append-only. In the same database as
/// the [`Store`](super::Store); every key includes the tenant, one
/// tenant's entries are never seen through another's, and an id in one
/// tenant's log says nothing about another's.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Appends `entry` (its `sequence` ignored) to its tenant's log unless
    /// the log has an entry with its id. Returns the entry as stored (its
    /// sequence, the tenant's last plus one; `at` to the millisecond, as
    /// every store keeps times) and whether it was new; when it was not,
    /// the entry stored first, unchanged, and nothing was written. Appends
    /// to one tenant's log are numbered in the order they are stored, also
    /// when several processes append at once, so a reader that has seen
    /// sequence N finds every later entry after N. Never changes or deletes
    /// an entry. After an error the entry may or may not be stored: append
    /// it again (its id keeps the retry from storing it twice).
    async fn append_audit(&self, entry: &AuditEntry) -> Result<(AuditEntry, bool), StoreError>;

    /// The tenant's entries in log order (by sequence): those made at or
    /// after `since` (when given) and after sequence `after` (when given:
    /// the last sequence of the page before, to read the next), at most
    /// `limit`.
    async fn audit_entries(
        &self,
        tenant_id: &str,
        since: Option<OffsetDateTime>,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError>;

    /// The tenant's entries about one release, in log order, at most
    /// `limit` (a release's decisions are few: tens, not thousands).
    async fn release_audit(
        &self,
        tenant_id: &str,
        release_id: &str,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError>;
}

/// The sequence the next entry of `tenant_id`'s log gets after `last` (1
/// after none), or the refusal of one past what a durable store keeps (a
/// signed 64-bit integer).
pub(crate) fn next_sequence(tenant_id: &str, last: Option<u64>) -> Result<u64, StoreError> {
    last.map_or(Some(1), |last| last.checked_add(1))
        .filter(|next| i64::try_from(*next).is_ok())
        .ok_or_else(|| {
            StoreError::unencodable(
                format!("release audit entry of tenant {tenant_id}"),
                "its sequence would pass the largest a store keeps",
            )
        })
}

/// `sequence` as the durable stores keep it (a signed 64-bit integer).
pub(crate) fn stored_sequence(tenant_id: &str, sequence: u64) -> Result<i64, StoreError> {
    i64::try_from(sequence).map_err(|err| {
        StoreError::unencodable(
            format!("sequence {sequence} of the release audit of tenant {tenant_id}"),
            err,
        )
    })
}

/// A sequence as a durable store read it, refused when it is not one a
/// store writes (below 1).
pub(crate) fn read_sequence(tenant_id: &str, stored: i64) -> Result<u64, StoreError> {
    u64::try_from(stored)
        .ok()
        .filter(|sequence| *sequence >= 1)
        .ok_or_else(|| {
            StoreError::corrupt(
                format!("sequence of a release audit entry of tenant {tenant_id}"),
                format!("{stored} is not a sequence (they start at 1)"),
            )
        })
}

/// What [`AuditStore::audit_entries`] asks of a durable store's columns:
/// the sequence to read after (0, before the first, when not given; past
/// the largest a store keeps reads nothing), the earliest time in whole
/// milliseconds (`since` rounded up, so a time kept to the millisecond is
/// at or after it exactly when it is at or after `since`), and the limit.
pub(crate) fn audit_page(since: Option<OffsetDateTime>, after: Option<u64>, limit: usize) -> (i64, Option<i64>, i64) {
    let after = after.map_or(0, |after| i64::try_from(after).unwrap_or(i64::MAX));
    let since = since.map(|since| {
        let ms = unix_ms(since);
        if from_unix_ms(ms) < since {
            ms.saturating_add(1)
        } else {
            ms
        }
    });
    (after, since, i64::try_from(limit).unwrap_or(i64::MAX))
}
