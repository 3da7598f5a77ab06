//! Sagas: state with optimistic concurrency, and its history.

use std::collections::BTreeMap;

use serde_json::Value;
use time::OffsetDateTime;

use super::MemoryStore;
use crate::ports::store::SagaStore;
use crate::ports::store::{SagaHistoryEntry, SagaRecord, SagaState, SagaWrite, StoreError};

/// Every saga by (kind, key).
#[derive(Debug, Default)]
pub(super) struct Sagas {
    pub(super) rows: BTreeMap<(String, String), Saga>,
}

/// One saga as kept.
#[derive(Debug)]
pub(super) struct Saga {
    pub(super) version: i64,
    pub(super) state: Value,
    tenant_id: Option<String>,
    created_at: OffsetDateTime,
    pub(super) updated_at: OffsetDateTime,
    pub(super) history: Vec<SagaHistoryEntry>,
}

impl Sagas {
    /// Whether `write` expects the version the saga is at (0: not there).
    pub(super) fn check(&self, write: &SagaWrite) -> Result<(), StoreError> {
        let found = self
            .rows
            .get(&(write.kind.clone(), write.key.clone()))
            .map_or(0, |saga| saga.version);
        if found == write.expected_version {
            return Ok(());
        }
        Err(StoreError::SagaConflict {
            kind: write.kind.clone(),
            key: write.key.clone(),
            expected: write.expected_version,
            found,
        })
    }

    /// Saves `write` (already [checked](Sagas::check)) as the next version,
    /// applied by message `message_id` at `now`. The tenant is kept from the
    /// first save (one made without a tenant takes the next one's).
    pub(super) fn save(&mut self, write: SagaWrite, message_id: &str, message_type: &str, now: OffsetDateTime) {
        let saga = self.rows.entry((write.kind, write.key)).or_insert_with(|| Saga {
            version: 0,
            state: Value::Null,
            tenant_id: None,
            created_at: now,
            updated_at: now,
            history: Vec::new(),
        });
        saga.version += 1;
        saga.state = write.state;
        saga.updated_at = now;
        if saga.tenant_id.is_none() {
            saga.tenant_id = write.tenant_id;
        }
        saga.history.push(SagaHistoryEntry {
            version: saga.version,
            message_id: message_id.to_owned(),
            message_type: message_type.to_owned(),
            at: now,
        });
    }

    /// What a handler is given of saga `kind`/`key`.
    pub(super) fn state(&self, kind: &str, key: &str) -> Option<SagaState> {
        self.rows.get(&(kind.to_owned(), key.to_owned())).map(|saga| SagaState {
            version: saga.version,
            tenant_id: saga.tenant_id.clone(),
            state: saga.state.clone(),
        })
    }

    fn record(kind: &str, key: &str, saga: &Saga) -> SagaRecord {
        SagaRecord {
            kind: kind.to_owned(),
            key: key.to_owned(),
            version: saga.version,
            tenant_id: saga.tenant_id.clone(),
            state: saga.state.clone(),
            created_at: saga.created_at,
            updated_at: saga.updated_at,
            history: saga.history.clone(),
        }
    }
}

#[async_trait::async_trait]
impl SagaStore for MemoryStore {
    async fn load_saga(&self, kind: &str, key: &str) -> Result<Option<SagaRecord>, StoreError> {
        Ok(self.with(|state| {
            state
                .sagas
                .rows
                .get(&(kind.to_owned(), key.to_owned()))
                .map(|saga| Sagas::record(kind, key, saga))
        }))
    }

    async fn load_saga_state(&self, kind: &str, key: &str) -> Result<Option<SagaState>, StoreError> {
        Ok(self.with(|state| state.sagas.state(kind, key)))
    }

    async fn list_sagas(&self, kind: Option<&str>) -> Result<Vec<SagaRecord>, StoreError> {
        let mut sagas: Vec<SagaRecord> = self.with(|state| {
            state
                .sagas
                .rows
                .iter()
                .filter(|((of, _), _)| kind.is_none_or(|kind| of == kind))
                .map(|((of, key), saga)| Sagas::record(of, key, saga))
                .collect()
        });
        sagas.sort_by_key(|saga| std::cmp::Reverse(saga.updated_at));
        Ok(sagas)
    }
}
