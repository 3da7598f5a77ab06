//! API keys and HTTP idempotency keys ([`AccessStore`]).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use time::OffsetDateTime;

use super::{MemoryStore, ms, now};
use crate::ports::store::{AccessStore, ApiKeyRecord, IdempotencyClaim, StoreError, doing};

/// API keys and idempotency claims.
#[derive(Debug, Default)]
pub(super) struct Access {
    last_seq: u64,
    /// Every key by id, with the order stored (the tie-break of keys made
    /// at the same time).
    keys: BTreeMap<String, (u64, ApiKeyRecord)>,
    /// Every claimed `Idempotency-Key` by (tenant, key).
    pub(super) claims: BTreeMap<(String, String), Claim>,
}

/// One claimed `Idempotency-Key`.
#[derive(Debug)]
pub(super) struct Claim {
    request_hash: String,
    pub(super) claimed_at: OffsetDateTime,
    /// The status and answer, once completed.
    answer: Option<(u16, Value)>,
}

impl Access {
    /// The refusal of a key whose id is taken (the durable stores' unique
    /// id: a database error there, the same here).
    fn taken(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        if self.keys.contains_key(&key.id) {
            return Err(StoreError::unavailable(
                doing::insert_api_key(key),
                format!("an API key with id `{}` is already stored", key.id),
            ));
        }
        Ok(())
    }

    /// Stores `key` (whose id is not [taken](Access::taken)).
    fn insert(&mut self, key: ApiKeyRecord) {
        self.last_seq += 1;
        let key = ApiKeyRecord {
            created_at: ms(key.created_at),
            revoked_at: key.revoked_at.map(ms),
            expires_at: key.expires_at.map(ms),
            last_used_at: key.last_used_at.map(ms),
            ..key
        };
        self.keys.insert(key.id.clone(), (self.last_seq, key));
    }

    fn key_mut(&mut self, id: &str) -> Result<&mut ApiKeyRecord, StoreError> {
        self.keys
            .get_mut(id)
            .map(|(_, key)| key)
            .ok_or_else(|| StoreError::NotFound {
                what: "API key",
                id: id.to_owned(),
            })
    }
}

/// Whether a claim made at `claimed_at` is older than `stale_after` at `now`.
fn is_stale(claimed_at: OffsetDateTime, stale_after: Duration, now: OffsetDateTime) -> bool {
    time::Duration::try_from(stale_after)
        .ok()
        .and_then(|stale_after| now.checked_sub(stale_after))
        .is_some_and(|cutoff| claimed_at <= cutoff)
}

#[async_trait::async_trait]
impl AccessStore for MemoryStore {
    async fn insert_api_key(&self, key: ApiKeyRecord) -> Result<(), StoreError> {
        self.with(|state| {
            state.access.taken(&key)?;
            state.access.insert(key);
            Ok(())
        })
    }

    async fn api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        Ok(self.with(|state| state.access.keys.get(id).map(|(_, key)| key.clone())))
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let mut keys: Vec<(u64, ApiKeyRecord)> = self.with(|state| state.access.keys.values().cloned().collect());
        keys.sort_by_key(|(seq, key)| (key.created_at, *seq));
        Ok(keys.into_iter().map(|(_, key)| key).collect())
    }

    async fn revoke_api_key(&self, id: &str, at: OffsetDateTime) -> Result<ApiKeyRecord, StoreError> {
        self.with(|state| {
            let key = state.access.key_mut(id)?;
            // Revoking twice keeps the first time.
            key.revoked_at.get_or_insert(ms(at));
            Ok(key.clone())
        })
    }

    async fn rotate_api_key(
        &self,
        id: &str,
        successor: ApiKeyRecord,
        old_expires_at: OffsetDateTime,
    ) -> Result<ApiKeyRecord, StoreError> {
        self.with(|state| {
            // Both refusals before either write: nothing is stored when one
            // of them applies.
            state.access.key_mut(id)?;
            state.access.taken(&successor)?;
            let successor_id = successor.id.clone();
            state.access.insert(successor);
            let old = state.access.key_mut(id)?;
            let end = ms(old_expires_at);
            // A grace period never lengthens a key's life.
            old.expires_at = Some(old.expires_at.map_or(end, |expires_at| expires_at.min(end)));
            old.rotated_to = Some(successor_id);
            Ok(old.clone())
        })
    }

    async fn touch_api_key(&self, id: &str, at: OffsetDateTime) -> Result<(), StoreError> {
        self.with(|state| {
            // An unknown key: nothing to record.
            if let Ok(key) = state.access.key_mut(id) {
                let last = key.last_used_at.unwrap_or(OffsetDateTime::UNIX_EPOCH);
                key.last_used_at = Some(last.max(ms(at)));
            }
        });
        Ok(())
    }

    async fn claim_idempotency(
        &self,
        tenant_id: &str,
        key: &str,
        request_hash: &str,
        stale_after: Duration,
    ) -> Result<IdempotencyClaim, StoreError> {
        Ok(self.with(|state| {
            let now = now();
            let fresh = Claim {
                request_hash: request_hash.to_owned(),
                claimed_at: now,
                answer: None,
            };
            let slot = (tenant_id.to_owned(), key.to_owned());
            let Some(claim) = state.access.claims.get_mut(&slot) else {
                state.access.claims.insert(slot, fresh);
                return IdempotencyClaim::Claimed;
            };
            match &claim.answer {
                Some((status, response)) => IdempotencyClaim::Completed {
                    request_hash: claim.request_hash.clone(),
                    status: *status,
                    response: response.clone(),
                },
                // Its process died: take it over (under the lock, no other
                // taker can come between the look and the take).
                None if is_stale(claim.claimed_at, stale_after, now) => {
                    *claim = fresh;
                    tracing::info!(tenant = %tenant_id, key = %key, "took over a stale idempotency claim");
                    IdempotencyClaim::Claimed
                }
                None => IdempotencyClaim::InProgress {
                    request_hash: claim.request_hash.clone(),
                },
            }
        }))
    }

    async fn complete_idempotency(
        &self,
        tenant_id: &str,
        key: &str,
        status: u16,
        response: &Value,
    ) -> Result<(), StoreError> {
        self.with(|state| {
            let claim = state
                .access
                .claims
                .get_mut(&(tenant_id.to_owned(), key.to_owned()))
                .ok_or_else(|| StoreError::NotFound {
                    what: "idempotency key",
                    id: key.to_owned(),
                })?;
            // Already completed: the first answer stands.
            claim.answer.get_or_insert_with(|| (status, response.clone()));
            Ok(())
        })
    }

    async fn release_idempotency(&self, tenant_id: &str, key: &str) -> Result<(), StoreError> {
        self.with(|state| {
            let slot = (tenant_id.to_owned(), key.to_owned());
            // Only a claim in progress: a completed key keeps its answer.
            if state
                .access
                .claims
                .get(&slot)
                .is_some_and(|claim| claim.answer.is_none())
            {
                state.access.claims.remove(&slot);
            }
        });
        Ok(())
    }
}
