//! Each tenant's release policy, versioned and append-only ([`PolicyStore`]).

use std::collections::BTreeMap;

use serde_json::Value;
use time::OffsetDateTime;

use super::{MemoryStore, ms};
use crate::ports::store::{PolicyStore, ReleasePolicyRecord, StoreError, next_version};

/// Every version of every tenant's policy, oldest first per tenant (the
/// durable stores' `(tenant_id, version)` key). Versions are only ever
/// pushed: nothing here changes or removes one.
#[derive(Debug, Default)]
pub(super) struct Policies {
    by_tenant: BTreeMap<String, Vec<ReleasePolicyRecord>>,
}

#[async_trait::async_trait]
impl PolicyStore for MemoryStore {
    async fn put_release_policy(
        &self,
        tenant_id: &str,
        document: &Value,
        changed_by: &str,
        reason: Option<&str>,
        expected: Option<u64>,
        at: OffsetDateTime,
    ) -> Result<ReleasePolicyRecord, StoreError> {
        let version = next_version(tenant_id, expected)?;
        self.with(|state| {
            // Checked and pushed under the one lock: no other put comes
            // between.
            let found = state
                .policies
                .by_tenant
                .get(tenant_id)
                .and_then(|versions| versions.last())
                .map(|record| record.version);
            if found != expected {
                return Err(StoreError::PolicyChanged {
                    tenant: tenant_id.to_owned(),
                    expected,
                    found,
                });
            }
            let record = ReleasePolicyRecord {
                tenant_id: tenant_id.to_owned(),
                version,
                document: document.clone(),
                changed_by: changed_by.to_owned(),
                changed_at: ms(at),
                reason: reason.map(str::to_owned),
            };
            state
                .policies
                .by_tenant
                .entry(tenant_id.to_owned())
                .or_default()
                .push(record.clone());
            Ok(record)
        })
    }

    async fn release_policy(&self, tenant_id: &str) -> Result<Option<ReleasePolicyRecord>, StoreError> {
        Ok(self.with(|state| {
            state
                .policies
                .by_tenant
                .get(tenant_id)
                .and_then(|versions| versions.last().cloned())
        }))
    }

    async fn release_policy_history(&self, tenant_id: &str) -> Result<Vec<ReleasePolicyRecord>, StoreError> {
        Ok(self.with(|state| state.policies.by_tenant.get(tenant_id).cloned().unwrap_or_default()))
    }
}
