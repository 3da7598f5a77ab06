//! Each tenant's release audit log, append-only ([`AuditStore`]): the
//! `release_audit` table, one row per entry, only ever inserted. An append
//! is one immediate transaction: the write lock is taken before the
//! tenant's last sequence is read, so appends of other connections (or
//! processes) wait for it and number after it.

use rusqlite::{OptionalExtension, Row, TransactionBehavior, params};
use time::OffsetDateTime;

use super::{SqliteStore, to_json};
use crate::backends::sqlite::undecodable;
use crate::ports::store::{
    AuditEntry, AuditStore, StoreError, audit_page, doing, next_sequence, read_sequence, stored_sequence,
};
use crate::ports::transport::{from_unix_ms, unix_ms};

const AUDIT_COLUMNS: &str = "tenant_id, sequence, id, at, action, release_id, environment, by, door, reason, detail";

/// A row as read, before its sequence is checked.
fn audit_from_row(row: &Row<'_>) -> rusqlite::Result<(i64, AuditEntry)> {
    let tenant_id: String = row.get(0)?;
    let id: String = row.get(2)?;
    let detail: String = row.get(10)?;
    let detail = serde_json::from_str(&detail).map_err(|err| {
        undecodable(
            10,
            format!("detail of release audit entry {id} of tenant {tenant_id}"),
            err,
        )
    })?;
    Ok((
        row.get(1)?,
        AuditEntry {
            id,
            tenant_id,
            // Set from the stored sequence by `checked`.
            sequence: 0,
            at: from_unix_ms(row.get(3)?),
            action: row.get(4)?,
            release_id: row.get(5)?,
            environment: row.get(6)?,
            by: row.get(7)?,
            door: row.get(8)?,
            reason: row.get(9)?,
            detail,
        },
    ))
}

/// The entry of a row read by [`audit_from_row`], its sequence checked.
fn checked((sequence, entry): (i64, AuditEntry)) -> Result<AuditEntry, StoreError> {
    Ok(AuditEntry {
        sequence: read_sequence(&entry.tenant_id, sequence)?,
        ..entry
    })
}

#[async_trait::async_trait]
impl AuditStore for SqliteStore {
    async fn append_audit(&self, entry: &AuditEntry) -> Result<(AuditEntry, bool), StoreError> {
        let run = async {
            let detail = to_json(&entry.detail, "the detail of a release audit entry")?;
            let entry = AuditEntry {
                at: from_unix_ms(unix_ms(entry.at)),
                ..entry.clone()
            };
            self.database
                .call(move |conn| {
                    // Immediate: the write lock is taken before the log is
                    // read, so another append waits for this one and then
                    // finds its entry and its sequence.
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let stored = tx
                        .query_row(
                            &format!("SELECT {AUDIT_COLUMNS} FROM release_audit WHERE tenant_id = ?1 AND id = ?2"),
                            params![entry.tenant_id, entry.id],
                            audit_from_row,
                        )
                        .optional()?;
                    if let Some(stored) = stored {
                        return Ok((checked(stored)?, false));
                    }
                    let last: Option<i64> = tx.query_row(
                        "SELECT max(sequence) FROM release_audit WHERE tenant_id = ?1",
                        [&entry.tenant_id],
                        |row| row.get(0),
                    )?;
                    let last = last.map(|last| read_sequence(&entry.tenant_id, last)).transpose()?;
                    let entry = AuditEntry {
                        sequence: next_sequence(&entry.tenant_id, last)?,
                        ..entry
                    };
                    let sequence = stored_sequence(&entry.tenant_id, entry.sequence)?;
                    tx.execute(
                        &format!(
                            "INSERT INTO release_audit ({AUDIT_COLUMNS})
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
                        ),
                        params![
                            entry.tenant_id,
                            sequence,
                            entry.id,
                            unix_ms(entry.at),
                            entry.action,
                            entry.release_id,
                            entry.environment,
                            entry.by,
                            entry.door,
                            entry.reason,
                            detail,
                        ],
                    )?;
                    tx.commit()?;
                    Ok((entry, true))
                })
                .await
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
            let tenant_id = tenant_id.to_owned();
            let (after, since, limit) = audit_page(since, after, limit);
            let since = since.unwrap_or(i64::MIN);
            let rows = self
                .database
                .read(move |conn| {
                    let mut statement = conn.prepare_cached(&format!(
                        "SELECT {AUDIT_COLUMNS} FROM release_audit
                         WHERE tenant_id = ?1 AND sequence > ?2 AND at >= ?3
                         ORDER BY sequence LIMIT ?4"
                    ))?;
                    let rows = statement.query_map(params![tenant_id, after, since, limit], audit_from_row)?;
                    rows.collect::<rusqlite::Result<Vec<_>>>()
                })
                .await?;
            rows.into_iter().map(checked).collect::<Result<Vec<_>, StoreError>>()
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
            let (tenant_id, release_id) = (tenant_id.to_owned(), release_id.to_owned());
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let rows = self
                .database
                .read(move |conn| {
                    let mut statement = conn.prepare_cached(&format!(
                        "SELECT {AUDIT_COLUMNS} FROM release_audit
                         WHERE tenant_id = ?1 AND release_id = ?2
                         ORDER BY sequence LIMIT ?3"
                    ))?;
                    let rows = statement.query_map(params![tenant_id, release_id, limit], audit_from_row)?;
                    rows.collect::<rusqlite::Result<Vec<_>>>()
                })
                .await?;
            rows.into_iter().map(checked).collect::<Result<Vec<_>, StoreError>>()
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::audit_entries(tenant_id)))
    }
}
