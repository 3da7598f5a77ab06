//! The log of consumer pauses and resumes ([`ControlStore`]).

use super::{MemoryStore, ms};
use crate::ports::store::{ConsumerControl, ControlStore, GroupAcknowledgement, StoreError};

/// Every entry, oldest first; only ever pushed. And the acknowledgements
/// by (scope, fingerprint).
#[derive(Debug, Default)]
pub(super) struct Controls {
    log: Vec<ConsumerControl>,
    acknowledgements: std::collections::BTreeMap<(String, String), GroupAcknowledgement>,
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

    async fn acknowledge_group(&self, acknowledgement: &GroupAcknowledgement) -> Result<(), StoreError> {
        let stored = GroupAcknowledgement {
            at: ms(acknowledgement.at),
            ..acknowledgement.clone()
        };
        self.with(|state| {
            state
                .controls
                .acknowledgements
                .insert((stored.scope.clone(), stored.fingerprint.clone()), stored);
        });
        Ok(())
    }

    async fn unacknowledge_group(&self, scope: &str, fingerprint: &str) -> Result<bool, StoreError> {
        Ok(self.with(|state| {
            state
                .controls
                .acknowledgements
                .remove(&(scope.to_owned(), fingerprint.to_owned()))
                .is_some()
        }))
    }

    async fn group_acknowledgements(&self, scope: &str) -> Result<Vec<GroupAcknowledgement>, StoreError> {
        Ok(self.with(|state| {
            state
                .controls
                .acknowledgements
                .values()
                .filter(|ack| ack.scope == scope)
                .cloned()
                .collect()
        }))
    }
}
