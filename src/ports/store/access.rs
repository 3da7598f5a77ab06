//! Access: API keys, HTTP idempotency keys, and the store of both.

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

use super::*;

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
    /// Who the key acts for (`bosun keys create --sponsor`, e.g. the
    /// person an agent's key works for, `cli:dana`): an approval policy
    /// lets neither the key nor its sponsor approve a release the key
    /// requested. `None`: the key answers for itself only.
    pub sponsor: Option<String>,
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
