//! Each tenant's release audit log, append-only ([`AuditStore`]):
//! `bosun_release_audit` (migration 16), one row per entry, only ever
//! inserted.
//!
//! An append is one short transaction holding a transaction-scoped
//! advisory lock on its tenant (hashed with the schema, as the saga turns
//! are): it reads the tenant's last sequence and inserts the next, and the
//! next append to that tenant waits for the commit. So one tenant's
//! sequences are 1, 2, 3 ... in the order their entries became visible,
//! and a reader that has seen sequence N finds every later entry after N,
//! whichever process appended it. A global sequence (`bigserial`) would
//! need no lock, but its numbers are taken before the commit: an entry
//! numbered 5 may become visible after one numbered 6, and a reader paging
//! past 6 would never see it. Appends to different tenants do not wait
//! for each other (unless their hashes meet, which only makes one wait).

use serde_json::Value;
use sqlx_core::executor::Executor;
use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_core::types::Json;
use sqlx_postgres::PgRow;
use time::OffsetDateTime;

use super::PostgresStore;
use crate::ports::store::{AuditEntry, AuditStore, StoreError, audit_page, doing, read_sequence};
use crate::ports::transport::{from_unix_ms, unix_ms};

/// Held by an append until its transaction ends: one append per tenant
/// (`$1`) at a time, in this schema.
const LOCK_TENANT: &str = "SELECT pg_advisory_xact_lock(
    hashtextextended('bosun release audit:' || coalesce(current_schema(), '') || ':' || $1, 0))";

/// Inserts the entry as the tenant's next (its last sequence plus one)
/// unless the tenant's log has its id. Returns the sequence given, none
/// when the id was there. Run under [`LOCK_TENANT`]: the statement starts
/// after the previous append to the tenant committed, so it sees its row.
const APPEND: &str = "INSERT INTO bosun_release_audit
        (tenant_id, sequence, id, at, action, release_id, environment, by, door, reason, detail)
    SELECT $1, coalesce((SELECT max(sequence) FROM bosun_release_audit WHERE tenant_id = $1), 0) + 1,
        $2, $3, $4, $5, $6, $7, $8, $9, $10
    ON CONFLICT (tenant_id, id) DO NOTHING
    RETURNING sequence";

const STORED: &str = "SELECT tenant_id, sequence, id, at, action, release_id, environment, by, door, reason, detail
    FROM bosun_release_audit WHERE tenant_id = $1 AND id = $2";

/// A page of the tenant's log: after sequence `$2`, at or after `$3`
/// (`NULL`: any time), at most `$4` entries, by sequence (the
/// `(tenant_id, sequence)` index).
const PAGE: &str = "SELECT tenant_id, sequence, id, at, action, release_id, environment, by, door, reason, detail
    FROM bosun_release_audit WHERE tenant_id = $1 AND sequence > $2 AND at >= coalesce($3, '-infinity')
    ORDER BY sequence LIMIT $4";

const RELEASE: &str = "SELECT tenant_id, sequence, id, at, action, release_id, environment, by, door, reason, detail
    FROM bosun_release_audit WHERE tenant_id = $1 AND release_id = $2
    ORDER BY sequence LIMIT $3";

fn audit_from_row(row: &PgRow) -> Result<AuditEntry, StoreError> {
    let tenant_id: String = row.try_get(0)?;
    let Json(detail): Json<Value> = row.try_get(10)?;
    Ok(AuditEntry {
        sequence: read_sequence(&tenant_id, row.try_get(1)?)?,
        tenant_id,
        id: row.try_get(2)?,
        at: row.try_get(3)?,
        action: row.try_get(4)?,
        release_id: row.try_get(5)?,
        environment: row.try_get(6)?,
        by: row.try_get(7)?,
        door: row.try_get(8)?,
        reason: row.try_get(9)?,
        detail,
    })
}

#[async_trait::async_trait]
impl AuditStore for PostgresStore {
    async fn append_audit(&self, entry: &AuditEntry) -> Result<(AuditEntry, bool), StoreError> {
        let run = async {
            // Kept to the millisecond, as every store keeps times.
            let at = from_unix_ms(unix_ms(entry.at));
            let mut tx = self.database.pool().begin().await?;
            (&mut *tx).execute(query(LOCK_TENANT).bind(&entry.tenant_id)).await?;
            let appended: Option<i64> = sqlx_core::query_scalar::query_scalar(APPEND)
                .bind(&entry.tenant_id)
                .bind(&entry.id)
                .bind(at)
                .bind(&entry.action)
                .bind(&entry.release_id)
                .bind(&entry.environment)
                .bind(&entry.by)
                .bind(&entry.door)
                .bind(&entry.reason)
                .bind(Json(&entry.detail))
                .fetch_optional(&mut *tx)
                .await?;
            let answer = match appended {
                Some(sequence) => (
                    AuditEntry {
                        sequence: read_sequence(&entry.tenant_id, sequence)?,
                        at,
                        ..entry.clone()
                    },
                    true,
                ),
                // The id was there: the entry stored first, as it is.
                None => {
                    let row = query(STORED)
                        .bind(&entry.tenant_id)
                        .bind(&entry.id)
                        .fetch_one(&mut *tx)
                        .await?;
                    (audit_from_row(&row)?, false)
                }
            };
            tx.commit().await?;
            Ok(answer)
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::append_audit(entry)))
    }

    async fn audit_entries(
        &self,
        tenant_id: &str,
        since: Option<OffsetDateTime>,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let run = async {
            let (after, since, limit) = audit_page(since, after, limit);
            let since = since.map(from_unix_ms);
            let rows = query(PAGE)
                .bind(tenant_id)
                .bind(after)
                .bind(since)
                .bind(limit)
                .fetch_all(self.database.pool())
                .await?;
            rows.iter().map(audit_from_row).collect::<Result<Vec<_>, StoreError>>()
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::audit_entries(tenant_id)))
    }

    async fn release_audit(
        &self,
        tenant_id: &str,
        release_id: &str,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let run = async {
            let rows = query(RELEASE)
                .bind(tenant_id)
                .bind(release_id)
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .fetch_all(self.database.pool())
                .await?;
            rows.iter().map(audit_from_row).collect::<Result<Vec<_>, StoreError>>()
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::audit_entries(tenant_id)))
    }
}
