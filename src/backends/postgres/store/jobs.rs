//! Bulk replay jobs ([`ReplayJobStore`]): `bosun_replay_jobs` and their
//! `bosun_replay_job_items`. A claim takes the job row with `FOR UPDATE SKIP
//! LOCKED`, and every write that depends on who holds a job checks the
//! lease owner in the same statement or transaction, so two replicas never
//! both run one job.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_core::types::Json;
use sqlx_postgres::{PgConnection, PgRow};
use time::OffsetDateTime;
use uuid::Uuid;

use super::PostgresStore;
use crate::ports::store::{
    ControlOutcome, ReplayItemOutcome, ReplayJobControl, ReplayJobItem, ReplayJobRecord, ReplayJobStore, StoreError,
    doing, outcome_columns, outcome_from_columns, status_from_str,
};

const JOB_COLUMNS: &str = "id, tenant_id, requested_by, source, principal, request, rate, status, total, replayed, \
                           failed, created_at, updated_at, finished_at, lease_owner, lease_until, controls";

fn job_from_row(row: &PgRow) -> Result<ReplayJobRecord, StoreError> {
    let Json(request): Json<Value> = row.try_get(5)?;
    let Json(controls): Json<Value> = row.try_get(16)?;
    let status: String = row.try_get(7)?;
    let counter = |index: usize| -> Result<u64, StoreError> {
        Ok(u64::try_from(row.try_get::<i64, _>(index)?).unwrap_or_default())
    };
    Ok(ReplayJobRecord {
        id: row.try_get(0)?,
        tenant_id: row.try_get(1)?,
        requested_by: row.try_get(2)?,
        source: row.try_get(3)?,
        principal: row.try_get(4)?,
        request,
        rate: row.try_get(6)?,
        status: status_from_str(&status)?,
        total: counter(8)?,
        replayed: counter(9)?,
        failed: counter(10)?,
        created_at: row.try_get(11)?,
        updated_at: row.try_get(12)?,
        finished_at: row.try_get(13)?,
        lease_owner: row.try_get(14)?,
        lease_until: row.try_get(15)?,
        controls: crate::ports::store::controls_from_json(&controls.to_string())?,
    })
}

fn controls_json(controls: &[ReplayJobControl]) -> Result<Value, StoreError> {
    serde_json::to_value(controls).map_err(|err| StoreError::unencodable("the controls of a replay job", err))
}

fn count(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn lease_until(now: OffsetDateTime, lease: Duration) -> OffsetDateTime {
    now + lease
}

async fn load(conn: &mut PgConnection, id: Uuid, lock: bool) -> Result<Option<ReplayJobRecord>, StoreError> {
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM bosun_replay_jobs WHERE id = $1{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    query(sqlx_core::sql_str::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
        .as_ref()
        .map(job_from_row)
        .transpose()
}

#[async_trait]
impl ReplayJobStore for PostgresStore {
    async fn create_replay_job(&self, job: &ReplayJobRecord, items: &[ReplayJobItem]) -> Result<(), StoreError> {
        let run = async {
            let mut tx = self.database.pool().begin().await?;
            query(sqlx_core::sql_str::AssertSqlSafe(format!(
                "INSERT INTO bosun_replay_jobs ({JOB_COLUMNS})
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)"
            )))
            .bind(job.id)
            .bind(&job.tenant_id)
            .bind(&job.requested_by)
            .bind(&job.source)
            .bind(&job.principal)
            .bind(Json(&job.request))
            .bind(job.rate)
            .bind(job.status.as_str())
            .bind(count(job.total))
            .bind(count(job.replayed))
            .bind(count(job.failed))
            .bind(job.created_at)
            .bind(job.updated_at)
            .bind(job.finished_at)
            .bind(&job.lease_owner)
            .bind(job.lease_until)
            .bind(Json(controls_json(&job.controls)?))
            .execute(&mut *tx)
            .await?;
            // One statement for all items: arrays, unnested.
            let mut positions = Vec::with_capacity(items.len());
            let mut dead_letters = Vec::with_capacity(items.len());
            let mut replays = Vec::with_capacity(items.len());
            let mut states = Vec::with_capacity(items.len());
            let mut errors: Vec<Option<String>> = Vec::with_capacity(items.len());
            let mut ats: Vec<Option<OffsetDateTime>> = Vec::with_capacity(items.len());
            for item in items {
                positions.push(i32::try_from(item.position).unwrap_or(i32::MAX));
                dead_letters.push(item.dead_letter_id);
                replays.push(item.replay_id);
                match &item.outcome {
                    None => {
                        states.push("pending".to_owned());
                        errors.push(None);
                        ats.push(None);
                    }
                    Some(outcome) => {
                        let (state, error, at) = outcome_columns(outcome);
                        states.push(state.to_owned());
                        errors.push(error.map(str::to_owned));
                        ats.push(Some(at));
                    }
                }
            }
            query(
                "INSERT INTO bosun_replay_job_items (job_id, position, dead_letter_id, replay_id, state, error, at)
                 SELECT $1, * FROM unnest($2::integer[], $3::uuid[], $4::uuid[], $5::text[], $6::text[], $7::timestamptz[])",
            )
            .bind(job.id)
            .bind(positions)
            .bind(dead_letters)
            .bind(replays)
            .bind(states)
            .bind(errors)
            .bind(ats)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::create_replay_job(job.id)))
    }

    async fn replay_job(&self, id: Uuid, tenant_id: Option<&str>) -> Result<Option<ReplayJobRecord>, StoreError> {
        let run = async {
            let mut conn = self.database.pool().acquire().await?;
            Ok(load(&mut conn, id, false)
                .await?
                .filter(|job| tenant_id.is_none_or(|t| t == job.tenant_id)))
        };
        run.await.map_err(|err: StoreError| err.doing(doing::replay_job(id)))
    }

    async fn list_replay_jobs(
        &self,
        tenant_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ReplayJobRecord>, StoreError> {
        let run = async {
            let rows = query(sqlx_core::sql_str::AssertSqlSafe(format!(
                "SELECT {JOB_COLUMNS} FROM bosun_replay_jobs WHERE ($1::text IS NULL OR tenant_id = $1)
                 ORDER BY created_at DESC, id DESC LIMIT $2"
            )))
            .bind(tenant_id)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(self.database.pool())
            .await?;
            rows.iter().map(job_from_row).collect::<Result<Vec<_>, StoreError>>()
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::list_replay_jobs()))
    }

    async fn replay_job_items(&self, id: Uuid) -> Result<Vec<ReplayJobItem>, StoreError> {
        let run = async {
            let rows = query(
                "SELECT position, dead_letter_id, replay_id, state, error, at FROM bosun_replay_job_items
                 WHERE job_id = $1 ORDER BY position",
            )
            .bind(id)
            .fetch_all(self.database.pool())
            .await?;
            rows.iter()
                .map(|row| {
                    let state: String = row.try_get(3)?;
                    Ok(ReplayJobItem {
                        position: u32::try_from(row.try_get::<i32, _>(0)?).unwrap_or_default(),
                        dead_letter_id: row.try_get(1)?,
                        replay_id: row.try_get(2)?,
                        outcome: outcome_from_columns(&state, row.try_get(4)?, row.try_get(5)?)?,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()
        };
        run.await.map_err(|err: StoreError| err.doing(doing::replay_job(id)))
    }

    async fn claim_replay_job(
        &self,
        owner: &str,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<ReplayJobRecord>, StoreError> {
        let run = async {
            let row = query(sqlx_core::sql_str::AssertSqlSafe(format!(
                "UPDATE bosun_replay_jobs SET lease_owner = $1, lease_until = $2
                 WHERE id = (SELECT id FROM bosun_replay_jobs
                             WHERE status = 'running' AND (lease_until IS NULL OR lease_until < $3)
                             ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
                 RETURNING {JOB_COLUMNS}"
            )))
            .bind(owner)
            .bind(lease_until(now, lease))
            .bind(now)
            .fetch_optional(self.database.pool())
            .await?;
            row.as_ref().map(job_from_row).transpose()
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::claim_replay_job()))
    }

    async fn renew_replay_job(
        &self,
        id: Uuid,
        owner: &str,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<ReplayJobRecord>, StoreError> {
        let run = async {
            let row = query(sqlx_core::sql_str::AssertSqlSafe(format!(
                "UPDATE bosun_replay_jobs SET lease_until = $3 WHERE id = $1 AND lease_owner = $2 RETURNING {JOB_COLUMNS}"
            )))
            .bind(id)
            .bind(owner)
            .bind(lease_until(now, lease))
            .fetch_optional(self.database.pool())
            .await?;
            row.as_ref().map(job_from_row).transpose()
        };
        run.await
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
        let run = async {
            let mut tx = self.database.pool().begin().await?;
            let held = query(
                "UPDATE bosun_replay_jobs SET lease_until = $3, updated_at = $4 WHERE id = $1 AND lease_owner = $2",
            )
            .bind(id)
            .bind(owner)
            .bind(lease_until(now, lease))
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if held == 0 {
                tx.rollback().await?;
                return Ok(None);
            }
            let (state, error, at) = outcome_columns(outcome);
            let changed = query(
                "UPDATE bosun_replay_job_items SET state = $3, error = $4, at = $5
                 WHERE job_id = $1 AND position = $2 AND state = 'pending'",
            )
            .bind(id)
            .bind(i32::try_from(position).unwrap_or(i32::MAX))
            .bind(state)
            .bind(error)
            .bind(at)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if changed > 0 {
                let sql = if state == "replayed" {
                    "UPDATE bosun_replay_jobs SET replayed = replayed + 1 WHERE id = $1"
                } else {
                    "UPDATE bosun_replay_jobs SET failed = failed + 1 WHERE id = $1"
                };
                query(sql).bind(id).execute(&mut *tx).await?;
            }
            query(
                "UPDATE bosun_replay_jobs SET status = 'finished', finished_at = $2, lease_owner = NULL, lease_until = NULL
                 WHERE id = $1 AND status = 'running' AND replayed + failed >= total",
            )
            .bind(id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            let job = load(&mut tx, id, false).await?;
            tx.commit().await?;
            Ok(job)
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::record_replay_item(id, position)))
    }

    async fn release_replay_job(&self, id: Uuid, owner: &str) -> Result<(), StoreError> {
        let run = async {
            query(
                "UPDATE bosun_replay_jobs SET lease_owner = NULL, lease_until = NULL WHERE id = $1 AND lease_owner = $2",
            )
            .bind(id)
            .bind(owner)
            .execute(self.database.pool())
            .await?;
            Ok(())
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::release_replay_job(id)))
    }

    async fn control_replay_job(
        &self,
        id: Uuid,
        tenant_id: Option<&str>,
        control: ReplayJobControl,
    ) -> Result<ControlOutcome, StoreError> {
        let run = async {
            let mut tx = self.database.pool().begin().await?;
            // The row stays locked until the transaction ends: every way
            // out ends it here, not when the pool gets round to it (a claim
            // meanwhile would skip the locked job).
            let found = load(&mut tx, id, true)
                .await?
                .filter(|job| tenant_id.is_none_or(|t| t == job.tenant_id));
            let Some(mut job) = found else {
                tx.rollback().await?;
                return Err(StoreError::NotFound {
                    what: "replay job",
                    id: id.to_string(),
                });
            };
            if !job.apply(control) {
                tx.rollback().await?;
                return Ok(ControlOutcome::NotApplicable(job));
            }
            query(
                "UPDATE bosun_replay_jobs SET status = $2, updated_at = $3, finished_at = $4, controls = $5 WHERE id = $1",
            )
            .bind(id)
            .bind(job.status.as_str())
            .bind(job.updated_at)
            .bind(job.finished_at)
            .bind(Json(controls_json(&job.controls)?))
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(ControlOutcome::Applied(job))
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::control_replay_job(id)))
    }
}
