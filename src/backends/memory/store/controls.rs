//! The log of consumer pauses and resumes ([`ControlStore`]).

use super::{MemoryStore, ms};
use crate::ports::store::{ConsumerControl, ControlStore, StoreError};

/// Every entry, oldest first; only ever pushed.
#[derive(Debug, Default)]
pub(super) struct Controls {
    log: Vec<ConsumerControl>,
}

#[async_trait::async_trait]
impl ControlStore for MemoryStore {
    async fn record_control(&self, control: &ConsumerControl) -> Result<ConsumerControl, StoreError> {
        Ok(self.with(|state| {
            let stored = ConsumerControl {
                sequence: u64::try_from(state.controls.log.len())
                    .unwrap_or(u64::MAX)
                    .saturating_add(1),
                at: ms(control.at),
                ..control.clone()
            };
            state.controls.log.push(stored.clone());
            stored
        }))
    }

    async fn latest_controls(&self) -> Result<Vec<ConsumerControl>, StoreError> {
        Ok(self.with(|state| {
            let mut latest = std::collections::BTreeMap::new();
            for control in &state.controls.log {
                latest.insert(control.consumer.clone(), control.clone());
            }
            latest.into_values().collect()
        }))
    }

    async fn controls(&self, limit: usize) -> Result<Vec<ConsumerControl>, StoreError> {
        Ok(self.with(|state| state.controls.log.iter().rev().take(limit).cloned().collect()))
    }
}
