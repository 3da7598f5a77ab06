//! Each tenant's release audit log, append-only ([`AuditStore`]).

use std::collections::{BTreeMap, HashMap};

use time::OffsetDateTime;

use super::{MemoryStore, ms};
use crate::ports::store::{AuditEntry, AuditStore, StoreError, next_sequence};

/// Every tenant's log (the durable stores' `(tenant_id, id)` key and
/// `(tenant_id, sequence)` order). Entries are only ever pushed: nothing
/// here changes or removes one.
#[derive(Debug, Default)]
pub(super) struct Audit {
    by_tenant: BTreeMap<String, Log>,
}

/// One tenant's log: its entries by sequence, and where each id is.
#[derive(Debug, Default)]
struct Log {
    entries: Vec<AuditEntry>,
    by_id: HashMap<String, usize>,
}

#[async_trait::async_trait]
impl AuditStore for MemoryStore {
    async fn append_audit(&self, entry: &AuditEntry) -> Result<(AuditEntry, bool), StoreError> {
        self.with(|state| {
            // Looked up, numbered and pushed under the one lock: no other
            // append comes between.
            let log = state.audit.by_tenant.entry(entry.tenant_id.clone()).or_default();
            if let Some(stored) = log.by_id.get(&entry.id).and_then(|at| log.entries.get(*at)) {
                return Ok((stored.clone(), false));
            }
            let stored = AuditEntry {
                sequence: next_sequence(&entry.tenant_id, log.entries.last().map(|last| last.sequence))?,
                at: ms(entry.at),
                ..entry.clone()
            };
            log.by_id.insert(stored.id.clone(), log.entries.len());
            log.entries.push(stored.clone());
            Ok((stored, true))
        })
    }

    async fn audit_entries(
        &self,
        tenant_id: &str,
        since: Option<OffsetDateTime>,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(self.with(|state| {
            let Some(log) = state.audit.by_tenant.get(tenant_id) else {
                return Vec::new();
            };
            let after = after.unwrap_or(0);
            // By sequence already: the first after the cursor is found by halving.
            let from = log.entries.partition_point(|entry| entry.sequence <= after);
            log.entries
                .iter()
                .skip(from)
                .filter(|entry| since.is_none_or(|since| entry.at >= since))
                .take(limit)
                .cloned()
                .collect()
        }))
    }

    async fn release_audit(
        &self,
        tenant_id: &str,
        release_id: &str,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(self.with(|state| {
            state.audit.by_tenant.get(tenant_id).map_or_else(Vec::new, |log| {
                log.entries
                    .iter()
                    .filter(|entry| entry.release_id.as_deref() == Some(release_id))
                    .take(limit)
                    .cloned()
                    .collect()
            })
        }))
    }
}
