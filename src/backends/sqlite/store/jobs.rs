//! Bulk replay jobs ([`ReplayJobStore`]): `replay_jobs` and their
//! `replay_job_items`. Every write that depends on who holds a job is one
//! IMMEDIATE transaction, so two processes on one `state.db` never both
//! hold it.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};
use time::OffsetDateTime;
use uuid::Uuid;

use super::{SqliteStore, to_json};
use crate::backends::sqlite::undecodable;
use crate::ports::error::BoxError;
use crate::ports::store::{
    ControlOutcome, ReplayItemOutcome, ReplayJobControl, ReplayJobItem, ReplayJobRecord, ReplayJobStore, StoreError,
    controls_from_json, controls_to_json, doing, outcome_columns, outcome_from_columns, status_from_str,
};
use crate::ports::transport::{duration_ms, from_unix_ms, unix_ms};

const JOB_COLUMNS: &str = "id, tenant_id, requested_by, source, principal, request, rate, status, total, replayed, \
                           failed, created_at, updated_at, finished_at, lease_owner, lease_until, controls";

/// A `replay_jobs` row as read, before its JSON and names are decoded.
struct JobRow {
    id: String,
    tenant_id: String,
    requested_by: String,
    source: String,
    principal: String,
    request: String,
    rate: Option<f64>,
    status: String,
    total: i64,
    replayed: i64,
    failed: i64,
    created_at: i64,
    updated_at: i64,
    finished_at: Option<i64>,
    lease_owner: Option<String>,
    lease_until: Option<i64>,
    controls: String,
}

fn job_row(row: &Row<'_>) -> rusqlite::Result<JobRow> {
    Ok(JobRow {
        id: row.get(0)?,
        tenant_id: row.get(1)?,
        requested_by: row.get(2)?,
        source: row.get(3)?,
        principal: row.get(4)?,
        request: row.get(5)?,
        rate: row.get(6)?,
        status: row.get(7)?,
        total: row.get(8)?,
        replayed: row.get(9)?,
        failed: row.get(10)?,
        created_at: row.get(11)?,
        updated_at: row.get(12)?,
        finished_at: row.get(13)?,
        lease_owner: row.get(14)?,
        lease_until: row.get(15)?,
        controls: row.get(16)?,
    })
}

impl JobRow {
    fn decode(self) -> Result<ReplayJobRecord, StoreError> {
        let corrupt = |what: &str, source: BoxError| StoreError::Corrupt {
            what: format!("{what} of replay job {}", self.id),
            source,
        };
        Ok(ReplayJobRecord {
            id: Uuid::parse_str(&self.id).map_err(|err| corrupt("id", err.into()))?,
            request: serde_json::from_str(&self.request).map_err(|err| corrupt("request", err.into()))?,
            status: status_from_str(&self.status)?,
            controls: controls_from_json(&self.controls)?,
            tenant_id: self.tenant_id,
            requested_by: self.requested_by,
            source: self.source,
            principal: self.principal,
            rate: self.rate,
            total: u64::try_from(self.total).unwrap_or_default(),
            replayed: u64::try_from(self.replayed).unwrap_or_default(),
            failed: u64::try_from(self.failed).unwrap_or_default(),
            created_at: from_unix_ms(self.created_at),
            updated_at: from_unix_ms(self.updated_at),
            finished_at: self.finished_at.map(from_unix_ms),
            lease_owner: self.lease_owner,
            lease_until: self.lease_until.map(from_unix_ms),
        })
    }
}

fn load(conn: &Connection, id: &str) -> Result<Option<ReplayJobRecord>, StoreError> {
    conn.query_row(
        &format!("SELECT {JOB_COLUMNS} FROM replay_jobs WHERE id = ?1"),
        [id],
        job_row,
    )
    .optional()?
    .map(JobRow::decode)
    .transpose()
}

fn count(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[async_trait::async_trait]
impl ReplayJobStore for SqliteStore {
    async fn create_replay_job(&self, job: &ReplayJobRecord, items: &[ReplayJobItem]) -> Result<(), StoreError> {
        let (job, items) = (job.clone(), items.to_vec());
        let id = job.id;
        self.database
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                tx.execute(
                    &format!(
                        "INSERT INTO replay_jobs ({JOB_COLUMNS})
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"
                    ),
                    params![
                        job.id.to_string(),
                        job.tenant_id,
                        job.requested_by,
                        job.source,
                        job.principal,
                        to_json(&job.request, "the request of a replay job")?,
                        job.rate,
                        job.status.as_str(),
                        count(job.total),
                        count(job.replayed),
                        count(job.failed),
                        unix_ms(job.created_at),
                        unix_ms(job.updated_at),
                        job.finished_at.map(unix_ms),
                        job.lease_owner,
                        job.lease_until.map(unix_ms),
                        controls_to_json(&job.controls)?,
                    ],
                )?;
                {
                    let mut insert = tx.prepare_cached(
                        "INSERT INTO replay_job_items (job_id, position, dead_letter_id, replay_id, state, error, at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    )?;
                    let job_id = job.id.to_string();
                    for item in &items {
                        let (state, error, at) = match &item.outcome {
                            None => ("pending", None, None),
                            Some(outcome) => {
                                let (state, error, at) = outcome_columns(outcome);
                                (state, error, Some(unix_ms(at)))
                            }
                        };
                        insert.execute(params![
                            job_id,
                            item.position,
                            item.dead_letter_id.to_string(),
                            item.replay_id.to_string(),
                            state,
                            error,
                            at
                        ])?;
                    }
                }
                tx.commit()?;
                Ok(())
            })
            .await
            .map_err(|err: StoreError| err.doing(doing::create_replay_job(id)))
    }

    async fn replay_job(&self, id: Uuid, tenant_id: Option<&str>) -> Result<Option<ReplayJobRecord>, StoreError> {
        let tenant_id = tenant_id.map(str::to_owned);
        self.database
            .call(move |conn| {
                Ok(load(conn, &id.to_string())?.filter(|job| tenant_id.as_ref().is_none_or(|t| *t == job.tenant_id)))
            })
            .await
            .map_err(|err: StoreError| err.doing(doing::replay_job(id)))
    }

    async fn list_replay_jobs(
        &self,
        tenant_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ReplayJobRecord>, StoreError> {
        let tenant_id = tenant_id.map(str::to_owned);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.database
            .call(move |conn| {
                let mut statement = conn.prepare_cached(&format!(
                    "SELECT {JOB_COLUMNS} FROM replay_jobs WHERE (?1 IS NULL OR tenant_id = ?1)
                     ORDER BY created_at DESC, id DESC LIMIT ?2"
                ))?;
                let rows = statement
                    .query_map(params![tenant_id, limit], job_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                rows.into_iter().map(JobRow::decode).collect()
            })
            .await
            .map_err(|err: StoreError| err.doing(doing::list_replay_jobs()))
    }

    async fn replay_job_items(&self, id: Uuid) -> Result<Vec<ReplayJobItem>, StoreError> {
        self.database
            .call(move |conn| {
                let mut statement = conn.prepare_cached(
                    "SELECT position, dead_letter_id, replay_id, state, error, at FROM replay_job_items
                     WHERE job_id = ?1 ORDER BY position",
                )?;
                let rows = statement.query_map([id.to_string()], |row| {
                    Ok((
                        row.get::<_, u32>(0)?,
                        Uuid::parse_str(&row.get::<_, String>(1)?)
                            .map_err(|err| undecodable(1, "dead letter id of a replay job item", err))?,
                        Uuid::parse_str(&row.get::<_, String>(2)?)
                            .map_err(|err| undecodable(2, "replay id of a replay job item", err))?,
                        row.get::<_, String>(3)?,
                        row.get::<_, Option<String>>(4)?,
                        row.get::<_, Option<i64>>(5)?,
                    ))
                })?;
                let mut items = Vec::new();
                for row in rows {
                    let (position, dead_letter_id, replay_id, state, error, at) = row?;
                    items.push(ReplayJobItem {
                        position,
                        dead_letter_id,
                        replay_id,
                        outcome: outcome_from_columns(&state, error, at.map(from_unix_ms))?,
                    });
                }
                Ok(items)
            })
            .await
            .map_err(|err: StoreError| err.doing(doing::replay_job(id)))
    }

    async fn claim_replay_job(
        &self,
        owner: &str,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<ReplayJobRecord>, StoreError> {
        let owner = owner.to_owned();
        self.database
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let now = unix_ms(now);
                let id: Option<String> = tx
                    .query_row(
                        "SELECT id FROM replay_jobs
                         WHERE status = 'running' AND (lease_until IS NULL OR lease_until < ?1)
                         ORDER BY created_at, id LIMIT 1",
                        [now],
                        |row| row.get(0),
                    )
                    .optional()?;
                let Some(id) = id else {
                    return Ok(None);
                };
                tx.execute(
                    "UPDATE replay_jobs SET lease_owner = ?2, lease_until = ?3 WHERE id = ?1",
                    params![id, owner, now + duration_ms(lease)],
                )?;
                let job = load(&tx, &id)?;
                tx.commit()?;
                Ok(job)
            })
            .await
            .map_err(|err: StoreError| err.doing(doing::claim_replay_job()))
    }

    async fn renew_replay_job(
        &self,
        id: Uuid,
        owner: &str,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<ReplayJobRecord>, StoreError> {
        let owner = owner.to_owned();
        self.database
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let renewed = tx.execute(
                    "UPDATE replay_jobs SET lease_until = ?3 WHERE id = ?1 AND lease_owner = ?2",
                    params![id.to_string(), owner, unix_ms(now) + duration_ms(lease)],
                )?;
                let job = if renewed == 0 {
                    None
                } else {
                    load(&tx, &id.to_string())?
                };
                tx.commit()?;
                Ok(job)
            })
            .await
            .map_err(|err: StoreError| err.doing(doing::renew_replay_job(id)))
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
        let (owner, outcome) = (owner.to_owned(), outcome.clone());
        self.database
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let job_id = id.to_string();
                let now_ms = unix_ms(now);
                let held = tx.execute(
                    "UPDATE replay_jobs SET lease_until = ?3, updated_at = ?4 WHERE id = ?1 AND lease_owner = ?2",
                    params![job_id, owner, now_ms + duration_ms(lease), now_ms],
                )?;
                if held == 0 {
                    return Ok(None);
                }
                let (state, error, at) = outcome_columns(&outcome);
                let changed = tx.execute(
                    "UPDATE replay_job_items SET state = ?3, error = ?4, at = ?5
                     WHERE job_id = ?1 AND position = ?2 AND state = 'pending'",
                    params![job_id, position, state, error, unix_ms(at)],
                )?;
                if changed > 0 {
                    let column = if state == "replayed" { "replayed" } else { "failed" };
                    tx.execute(
                        &format!("UPDATE replay_jobs SET {column} = {column} + 1 WHERE id = ?1"),
                        [&job_id],
                    )?;
                }
                tx.execute(
                    "UPDATE replay_jobs SET status = 'finished', finished_at = ?2, lease_owner = NULL, lease_until = NULL
                     WHERE id = ?1 AND status = 'running' AND replayed + failed >= total",
                    params![job_id, now_ms],
                )?;
                let job = load(&tx, &job_id)?;
                tx.commit()?;
                Ok(job)
            })
            .await
            .map_err(|err: StoreError| err.doing(doing::record_replay_item(id, position)))
    }

    async fn release_replay_job(&self, id: Uuid, owner: &str) -> Result<(), StoreError> {
        let owner = owner.to_owned();
        self.database
            .call(move |conn| {
                conn.execute(
                    "UPDATE replay_jobs SET lease_owner = NULL, lease_until = NULL WHERE id = ?1 AND lease_owner = ?2",
                    params![id.to_string(), owner],
                )?;
                Ok(())
            })
            .await
            .map_err(|err: StoreError| err.doing(doing::release_replay_job(id)))
    }

    async fn control_replay_job(
        &self,
        id: Uuid,
        tenant_id: Option<&str>,
        control: ReplayJobControl,
    ) -> Result<ControlOutcome, StoreError> {
        let tenant_id = tenant_id.map(str::to_owned);
        self.database
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let job_id = id.to_string();
                let mut job = load(&tx, &job_id)?
                    .filter(|job| tenant_id.as_ref().is_none_or(|t| *t == job.tenant_id))
                    .ok_or_else(|| StoreError::NotFound {
                        what: "replay job",
                        id: job_id.clone(),
                    })?;
                if !job.apply(control) {
                    return Ok(ControlOutcome::NotApplicable(job));
                }
                tx.execute(
                    "UPDATE replay_jobs SET status = ?2, updated_at = ?3, finished_at = ?4, controls = ?5 WHERE id = ?1",
                    params![
                        job_id,
                        job.status.as_str(),
                        unix_ms(job.updated_at),
                        job.finished_at.map(unix_ms),
                        controls_to_json(&job.controls)?
                    ],
                )?;
                tx.commit()?;
                Ok(ControlOutcome::Applied(job))
            })
            .await
            .map_err(|err: StoreError| err.doing(doing::control_replay_job(id)))
    }
}
