//! Bulk replay jobs ([`ReplayJobStore`]) and their items. Every write that
//! depends on who holds a job looks and writes under the one lock, so two
//! runners never both hold it.

use std::collections::BTreeMap;
use std::time::Duration;

use time::OffsetDateTime;
use uuid::Uuid;

use super::{MemoryStore, after, ms};
use crate::ports::store::{
    ControlOutcome, ReplayItemOutcome, ReplayJobControl, ReplayJobItem, ReplayJobRecord, ReplayJobStatus,
    ReplayJobStore, StoreError, doing,
};

/// Every job by id, with its items by position.
#[derive(Debug, Default)]
pub(super) struct Jobs {
    pub(super) jobs: BTreeMap<Uuid, Job>,
}

/// One job and its items.
#[derive(Debug)]
pub(super) struct Job {
    pub(super) record: ReplayJobRecord,
    items: BTreeMap<u32, ReplayJobItem>,
}

/// `job` with its times as the durable stores keep them: whole
/// milliseconds (its controls keep theirs whole, as JSON does).
fn stored(job: ReplayJobRecord) -> ReplayJobRecord {
    ReplayJobRecord {
        created_at: ms(job.created_at),
        updated_at: ms(job.updated_at),
        finished_at: job.finished_at.map(ms),
        lease_until: job.lease_until.map(ms),
        ..job
    }
}

/// `outcome` with its time as stored.
fn stored_outcome(outcome: ReplayItemOutcome) -> ReplayItemOutcome {
    match outcome {
        ReplayItemOutcome::Replayed { at } => ReplayItemOutcome::Replayed { at: ms(at) },
        ReplayItemOutcome::Failed { error, at } => ReplayItemOutcome::Failed { error, at: ms(at) },
    }
}

/// When a lease of `lease` taken at `now` ends, as stored.
fn lease_end(now: OffsetDateTime, lease: Duration) -> OffsetDateTime {
    ms(after(ms(now), lease))
}

impl Jobs {
    /// Job `id` while `owner` holds it.
    fn held(&mut self, id: Uuid, owner: &str) -> Option<&mut Job> {
        self.jobs
            .get_mut(&id)
            .filter(|job| job.record.lease_owner.as_deref() == Some(owner))
    }
}

#[async_trait::async_trait]
impl ReplayJobStore for MemoryStore {
    async fn create_replay_job(&self, job: &ReplayJobRecord, items: &[ReplayJobItem]) -> Result<(), StoreError> {
        // The durable stores' keys (the job's id, an item's position in its
        // job) refuse a second row with a database error; so does this one.
        let refused = |why: String| StoreError::unavailable(doing::create_replay_job(job.id), why);
        let mut by_position = BTreeMap::new();
        for item in items {
            let item = ReplayJobItem {
                outcome: item.outcome.clone().map(stored_outcome),
                ..item.clone()
            };
            if let Some(twice) = by_position.insert(item.position, item) {
                return Err(refused(format!("two items at position {}", twice.position)));
            }
        }
        self.with(|state| {
            if state.jobs.jobs.contains_key(&job.id) {
                return Err(refused(format!("a replay job with id {} is already stored", job.id)));
            }
            let record = stored(job.clone());
            state.jobs.jobs.insert(
                job.id,
                Job {
                    record,
                    items: by_position,
                },
            );
            Ok(())
        })
    }

    async fn replay_job(&self, id: Uuid, tenant_id: Option<&str>) -> Result<Option<ReplayJobRecord>, StoreError> {
        Ok(self.with(|state| {
            state
                .jobs
                .jobs
                .get(&id)
                .map(|job| &job.record)
                .filter(|job| tenant_id.is_none_or(|tenant| job.tenant_id == tenant))
                .cloned()
        }))
    }

    async fn list_replay_jobs(
        &self,
        tenant_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ReplayJobRecord>, StoreError> {
        let mut jobs: Vec<ReplayJobRecord> = self.with(|state| {
            state
                .jobs
                .jobs
                .values()
                .map(|job| &job.record)
                .filter(|job| tenant_id.is_none_or(|tenant| job.tenant_id == tenant))
                .cloned()
                .collect()
        });
        jobs.sort_by_key(|job| std::cmp::Reverse((job.created_at, job.id)));
        jobs.truncate(limit);
        Ok(jobs)
    }

    async fn replay_job_items(&self, id: Uuid) -> Result<Vec<ReplayJobItem>, StoreError> {
        Ok(self.with(|state| {
            state
                .jobs
                .jobs
                .get(&id)
                .map(|job| job.items.values().cloned().collect())
                .unwrap_or_default()
        }))
    }

    async fn claim_replay_job(
        &self,
        owner: &str,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<ReplayJobRecord>, StoreError> {
        Ok(self.with(|state| {
            let at = ms(now);
            let job = state
                .jobs
                .jobs
                .values_mut()
                .filter(|job| {
                    job.record.status == ReplayJobStatus::Running
                        && job.record.lease_until.is_none_or(|until| until < at)
                })
                .min_by_key(|job| (job.record.created_at, job.record.id))?;
            job.record.lease_owner = Some(owner.to_owned());
            job.record.lease_until = Some(lease_end(now, lease));
            Some(job.record.clone())
        }))
    }

    async fn renew_replay_job(
        &self,
        id: Uuid,
        owner: &str,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<ReplayJobRecord>, StoreError> {
        Ok(self.with(|state| {
            let job = state.jobs.held(id, owner)?;
            job.record.lease_until = Some(lease_end(now, lease));
            Some(job.record.clone())
        }))
    }

    async fn record_replay_item(
        &self,
        id: Uuid,
        owner: &str,
        position: u32,
        outcome: &ReplayItemOutcome,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<ReplayJobRecord>, StoreError> {
        Ok(self.with(|state| {
            let job = state.jobs.held(id, owner)?;
            let record = &mut job.record;
            record.lease_until = Some(lease_end(now, lease));
            record.updated_at = ms(now);
            // An item is done once: recording it again counts nothing twice.
            if let Some(item) = job.items.get_mut(&position).filter(|item| item.outcome.is_none()) {
                match outcome {
                    ReplayItemOutcome::Replayed { .. } => record.replayed += 1,
                    ReplayItemOutcome::Failed { .. } => record.failed += 1,
                }
                item.outcome = Some(stored_outcome(outcome.clone()));
            }
            if record.status == ReplayJobStatus::Running && record.replayed + record.failed >= record.total {
                record.status = ReplayJobStatus::Finished;
                record.finished_at = Some(ms(now));
                record.lease_owner = None;
                record.lease_until = None;
            }
            Some(record.clone())
        }))
    }

    async fn release_replay_job(&self, id: Uuid, owner: &str) -> Result<(), StoreError> {
        self.with(|state| {
            if let Some(job) = state.jobs.held(id, owner) {
                job.record.lease_owner = None;
                job.record.lease_until = None;
            }
        });
        Ok(())
    }

    async fn control_replay_job(
        &self,
        id: Uuid,
        tenant_id: Option<&str>,
        control: ReplayJobControl,
    ) -> Result<ControlOutcome, StoreError> {
        self.with(|state| {
            let job = state
                .jobs
                .jobs
                .get_mut(&id)
                .map(|job| &mut job.record)
                .filter(|job| tenant_id.is_none_or(|tenant| job.tenant_id == tenant))
                .ok_or_else(|| StoreError::NotFound {
                    what: "replay job",
                    id: id.to_string(),
                })?;
            let mut changed = job.clone();
            if !changed.apply(control) {
                return Ok(ControlOutcome::NotApplicable(changed));
            }
            *job = stored(changed);
            Ok(ControlOutcome::Applied(job.clone()))
        })
    }
}
