//! The delivery timeline and how each delivery started.

use std::collections::BTreeMap;

use super::{MemoryStore, ms};
use crate::ports::store::{DeliveryRecord, StoreError, TimelineEntry};
use crate::ports::store::{DeliveryStore, TimelineStore, TimelineWait};

/// Every timeline line by id, in the order written.
#[derive(Debug, Default)]
pub(super) struct Timeline {
    last_id: u64,
    pub(super) lines: BTreeMap<u64, TimelineEntry>,
}

impl Timeline {
    /// Appends `entries`, in order.
    pub(super) fn append(&mut self, entries: impl IntoIterator<Item = TimelineEntry>) {
        for entry in entries {
            self.last_id += 1;
            let entry = TimelineEntry {
                at: ms(entry.at),
                ..entry
            };
            self.lines.insert(self.last_id, entry);
        }
    }

    /// Whether delivery `correlation_id` has a line.
    pub(super) fn has_lines(&self, correlation_id: &str) -> bool {
        self.lines.values().any(|line| line.correlation_id == correlation_id)
    }
}

/// How each delivery started, by correlation id, with the order recorded
/// (the tie-break of deliveries started at the same time).
#[derive(Debug, Default)]
pub(super) struct Deliveries {
    last_seq: u64,
    pub(super) records: BTreeMap<String, (u64, DeliveryRecord)>,
}

impl Deliveries {
    /// Records a delivery; the first record of a correlation id stays.
    pub(super) fn insert(&mut self, record: DeliveryRecord) {
        if self.records.contains_key(&record.correlation_id) {
            return;
        }
        self.last_seq += 1;
        let record = DeliveryRecord {
            started_at: ms(record.started_at),
            ..record
        };
        self.records
            .insert(record.correlation_id.clone(), (self.last_seq, record));
    }
}

#[async_trait::async_trait]
impl TimelineStore for MemoryStore {
    async fn append_timeline(&self, entries: Vec<TimelineEntry>) -> Result<(), StoreError> {
        let lines = self.waited_on(&entries);
        self.with(|state| state.timeline.append(entries));
        self.written(&lines);
        Ok(())
    }

    async fn timeline(&self, correlation_id: &str) -> Result<Vec<TimelineEntry>, StoreError> {
        Ok(self.with(|state| {
            state
                .timeline
                .lines
                .values()
                .filter(|line| line.correlation_id == correlation_id)
                .cloned()
                .collect()
        }))
    }

    fn watch_timeline(&self, correlation_id: &str) -> TimelineWait {
        self.watch.subscribe(correlation_id)
    }
}

#[async_trait::async_trait]
impl DeliveryStore for MemoryStore {
    async fn record_delivery(&self, record: DeliveryRecord) -> Result<(), StoreError> {
        self.with(|state| state.deliveries.insert(record));
        Ok(())
    }

    async fn delivery_record(&self, correlation_id: &str) -> Result<Option<DeliveryRecord>, StoreError> {
        Ok(self.with(|state| {
            state
                .deliveries
                .records
                .get(correlation_id)
                .map(|(_, record)| record.clone())
        }))
    }

    async fn list_deliveries(&self, tenant_id: Option<&str>, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError> {
        let mut found: Vec<(u64, DeliveryRecord)> = self.with(|state| {
            state
                .deliveries
                .records
                .values()
                .filter(|(_, record)| tenant_id.is_none_or(|tenant| record.tenant_id == tenant))
                .cloned()
                .collect()
        });
        // Newest first; of two started at once, the one recorded last.
        found.sort_by_key(|(seq, record)| std::cmp::Reverse((record.started_at, *seq)));
        Ok(found.into_iter().take(limit).map(|(_, record)| record).collect())
    }

    async fn deliveries_by_prefix(
        &self,
        prefix: &str,
        tenant_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        // Compared literally, within the tenant when one is given; the map
        // is in correlation id order.
        Ok(self.with(|state| {
            state
                .deliveries
                .records
                .range(prefix.to_owned()..)
                .take_while(|(id, _)| id.starts_with(prefix))
                .map(|(_, (_, record))| record)
                .filter(|record| tenant_id.is_none_or(|tenant| record.tenant_id == tenant))
                .take(limit)
                .cloned()
                .collect()
        }))
    }
}
