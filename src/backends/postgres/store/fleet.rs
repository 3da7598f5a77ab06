//! The fleet (migration 14): one row per `serve` or `api` process, written
//! when it starts and with every schema check, removed when it stops.
//! Times are the database's, so processes on hosts with skewed clocks
//! compare alike. A process that died without leaving is listed until it
//! has not been seen for [`FORGOTTEN_AFTER_HOURS`], then its row goes with
//! the next heartbeat of any process, so the table stays the size of the
//! fleet.

use sqlx_core::query::query;
use sqlx_core::row::Row;
use uuid::Uuid;

use super::PostgresStore;
use crate::ports::store::{ProcessRecord, StoreError, doing};

/// Hours after which a process not seen is dropped from the table.
pub(super) const FORGOTTEN_AFTER_HOURS: i32 = 24;

const HEARTBEAT: &str = "INSERT INTO bosun_processes
    (id, role, release, built_for_schema, writes_wire, reads_wire_from, reads_wire_to, host, started_at, seen_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now())
    ON CONFLICT (id) DO UPDATE SET seen_at = now(), writes_wire = EXCLUDED.writes_wire";

const FORGET: &str = "DELETE FROM bosun_processes WHERE seen_at < now() - make_interval(hours => $1)";

const FLEET: &str = "SELECT id, role, release, built_for_schema, writes_wire, reads_wire_from, reads_wire_to, host,
        started_at, seen_at
    FROM bosun_processes WHERE seen_at >= now() - make_interval(secs => $1)
    ORDER BY started_at, id";

fn wire(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

impl PostgresStore {
    pub(super) async fn record_heartbeat(&self, process: &ProcessRecord) -> Result<(), StoreError> {
        let pool = self.database.pool();
        query(HEARTBEAT)
            .bind(process.id)
            .bind(&process.role)
            .bind(&process.release)
            .bind(process.built_for_schema)
            .bind(wire(process.writes_wire))
            .bind(wire(process.reads_wire_from))
            .bind(wire(process.reads_wire_to))
            .bind(&process.host)
            .bind(process.started_at)
            .execute(pool)
            .await
            .map_err(|err| StoreError::from(err).doing(doing::HEARTBEAT))?;
        query(FORGET)
            .bind(FORGOTTEN_AFTER_HOURS)
            .execute(pool)
            .await
            .map_err(|err| StoreError::from(err).doing(doing::HEARTBEAT))?;
        Ok(())
    }

    pub(super) async fn remove_process(&self, id: Uuid) -> Result<(), StoreError> {
        query("DELETE FROM bosun_processes WHERE id = $1")
            .bind(id)
            .execute(self.database.pool())
            .await
            .map_err(|err| StoreError::from(err).doing(doing::HEARTBEAT))?;
        Ok(())
    }

    pub(super) async fn list_fleet(&self, within: std::time::Duration) -> Result<Vec<ProcessRecord>, StoreError> {
        let rows = query(FLEET)
            .bind(within.as_secs_f64())
            .fetch_all(self.database.pool())
            .await
            .map_err(|err| StoreError::from(err).doing(doing::FLEET))?;
        rows.iter()
            .map(|row| {
                let wire = |column: &str| -> Result<u32, sqlx_core::Error> {
                    let value: i32 = row.try_get(column)?;
                    Ok(u32::try_from(value).unwrap_or(0))
                };
                Ok(ProcessRecord {
                    id: row.try_get("id")?,
                    role: row.try_get("role")?,
                    release: row.try_get("release")?,
                    built_for_schema: row.try_get("built_for_schema")?,
                    writes_wire: wire("writes_wire")?,
                    reads_wire_from: wire("reads_wire_from")?,
                    reads_wire_to: wire("reads_wire_to")?,
                    host: row.try_get("host")?,
                    started_at: row.try_get("started_at")?,
                    seen_at: row.try_get("seen_at")?,
                })
            })
            .collect::<Result<Vec<_>, sqlx_core::Error>>()
            .map_err(|err| StoreError::from(err).doing(doing::FLEET))
    }
}
