//! Dead letters: messages that could not be processed, kept whole, and their replays.

use std::collections::BTreeMap;

use bosun_contracts::Destination;
use uuid::Uuid;

use super::{MemoryStore, ms};
use crate::ports::store::DeadLetterStore;
use crate::ports::store::{
    DeadLetterFilter, DeadLetterRecord, DeadLetterStatus, IdLookup, ReplayRecord, StoreError, TimelineEntry,
};

/// Every dead letter by id (in id order, as lookups by prefix list them).
#[derive(Debug, Default)]
pub(super) struct DeadLetters {
    pub(super) records: BTreeMap<Uuid, DeadLetterRecord>,
}

impl DeadLetters {
    /// Whether a dead letter of delivery `correlation_id` exists.
    pub(super) fn of_delivery(&self, correlation_id: &str) -> bool {
        self.records
            .values()
            .any(|record| record.correlation_id.as_deref() == Some(correlation_id))
    }
}

/// A dead letter as read: its status is what its replays say.
fn read(record: &DeadLetterRecord) -> DeadLetterRecord {
    DeadLetterRecord {
        status: if record.replays.is_empty() {
            DeadLetterStatus::Dead
        } else {
            DeadLetterStatus::Replayed
        },
        ..record.clone()
    }
}

fn not_found(id: Uuid) -> StoreError {
    StoreError::NotFound {
        what: "dead letter",
        id: id.to_string(),
    }
}

/// Whether `record` passes `filter` (all but its limit).
fn passes(record: &DeadLetterRecord, filter: &DeadLetterFilter) -> bool {
    let same = |wanted: &Option<String>, value: Option<&str>| wanted.as_deref().is_none_or(|w| value == Some(w));
    same(&filter.consumer, record.consumer.as_deref())
        && same(&filter.message_type, record.message_type.as_deref())
        && same(&filter.tenant_id, record.tenant_id.as_deref())
        && same(&filter.reason, Some(&record.reason))
        && filter.since.is_none_or(|since| record.dead_lettered_at >= ms(since))
        && (filter.include_replayed || record.replays.is_empty())
}

#[async_trait::async_trait]
impl DeadLetterStore for MemoryStore {
    async fn record_dead_letter(
        &self,
        record: DeadLetterRecord,
        timeline: Option<TimelineEntry>,
    ) -> Result<(), StoreError> {
        let lines = self.waited_on(&timeline);
        let inserted = self.with(|state| {
            let records = &mut state.dead_letters.records;
            // One record per id and per transport message: a second is ignored.
            let known = records.contains_key(&record.id)
                || record.transport_sequence.is_some()
                    && records.values().any(|other| {
                        other.entity == record.entity && other.transport_sequence == record.transport_sequence
                    });
            if known {
                return false;
            }
            let record = DeadLetterRecord {
                dead_lettered_at: ms(record.dead_lettered_at),
                ..record
            };
            records.insert(record.id, record);
            state.timeline.append(timeline);
            true
        });
        if inserted {
            self.written(&lines);
        }
        Ok(())
    }

    async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetterRecord>, StoreError> {
        let mut found: Vec<DeadLetterRecord> = self.with(|state| {
            state
                .dead_letters
                .records
                .values()
                .filter(|record| passes(record, filter))
                .map(read)
                .collect()
        });
        found.sort_by_key(|record| std::cmp::Reverse((record.dead_lettered_at, record.id)));
        found.truncate(filter.limit.unwrap_or(usize::MAX));
        Ok(found)
    }

    async fn dead_letter(&self, id: &str, tenant_id: Option<&str>) -> Result<DeadLetterRecord, StoreError> {
        let lookup = IdLookup::dead_letter(id);
        let Some(prefix) = &lookup.prefix else {
            return Err(lookup.not_found());
        };
        // Compared literally, within the tenant when one is given.
        let found = self.with(|state| {
            state
                .dead_letters
                .records
                .values()
                .filter(|record| {
                    record.id.to_string().starts_with(prefix.as_str())
                        && tenant_id.is_none_or(|tenant| record.tenant_id.as_deref() == Some(tenant))
                })
                .take(IdLookup::LIMIT)
                .map(read)
                .collect()
        });
        lookup.pick(found, |record| record.id.to_string())
    }

    async fn dead_letter_for(
        &self,
        entity: &Destination,
        sequence: i64,
    ) -> Result<Option<DeadLetterRecord>, StoreError> {
        let path = entity.path();
        Ok(self.with(|state| {
            state
                .dead_letters
                .records
                .values()
                .find(|record| record.entity == path && record.transport_sequence == Some(sequence))
                .map(read)
        }))
    }

    async fn record_replay(
        &self,
        id: Uuid,
        replay: ReplayRecord,
        timeline: Option<TimelineEntry>,
    ) -> Result<(), StoreError> {
        let lines = self.waited_on(&timeline);
        self.with(|state| -> Result<(), StoreError> {
            let record = state.dead_letters.records.get_mut(&id).ok_or_else(|| not_found(id))?;
            record.replays.push(replay);
            state.timeline.append(timeline);
            Ok(())
        })?;
        self.written(&lines);
        Ok(())
    }

    async fn purge_dead_letter(&self, id: Uuid) -> Result<(), StoreError> {
        self.with(|state| {
            state
                .dead_letters
                .records
                .remove(&id)
                .map(drop)
                .ok_or_else(|| not_found(id))
        })
    }
}
