//! Each tenant's release policy, versioned and append-only
//! ([`PolicyStore`]): the `release_policies` table, one row per version,
//! only ever inserted.

use rusqlite::{OptionalExtension, Row, TransactionBehavior, params};
use serde_json::Value;
use time::OffsetDateTime;

use super::{SqliteStore, to_json};
use crate::backends::sqlite::undecodable;
use crate::ports::store::{
    PolicyStore, ReleasePolicyRecord, StoreError, doing, next_version, read_version, stored_version,
};
use crate::ports::transport::{from_unix_ms, unix_ms};

const POLICY_COLUMNS: &str = "tenant_id, version, document, changed_by, changed_at, reason";

/// A row as read, before its version is checked.
fn policy_from_row(row: &Row<'_>) -> rusqlite::Result<(i64, ReleasePolicyRecord)> {
    let tenant_id: String = row.get(0)?;
    let document: String = row.get(2)?;
    let document = serde_json::from_str(&document)
        .map_err(|err| undecodable(2, format!("release policy document of tenant {tenant_id}"), err))?;
    Ok((
        row.get(1)?,
        ReleasePolicyRecord {
            tenant_id,
            // Set from the stored version by `checked`.
            version: 0,
            document,
            changed_by: row.get(3)?,
            changed_at: from_unix_ms(row.get(4)?),
            reason: row.get(5)?,
        },
    ))
}

/// The record of a row read by [`policy_from_row`], its version checked.
fn checked((version, record): (i64, ReleasePolicyRecord)) -> Result<ReleasePolicyRecord, StoreError> {
    Ok(ReleasePolicyRecord {
        version: read_version(&record.tenant_id, version)?,
        ..record
    })
}

#[async_trait::async_trait]
impl PolicyStore for SqliteStore {
    async fn put_release_policy(
        &self,
        tenant_id: &str,
        document: &Value,
        changed_by: &str,
        reason: Option<&str>,
        expected: Option<u64>,
        at: OffsetDateTime,
    ) -> Result<ReleasePolicyRecord, StoreError> {
        let run = async {
            let version = next_version(tenant_id, expected)?;
            let record = ReleasePolicyRecord {
                tenant_id: tenant_id.to_owned(),
                version,
                document: document.clone(),
                changed_by: changed_by.to_owned(),
                changed_at: from_unix_ms(unix_ms(at)),
                reason: reason.map(str::to_owned),
            };
            let stored = stored_version(tenant_id, version)?;
            let text = to_json(document, "a release policy document")?;
            self.database
                .call(move |conn| {
                    // Immediate: the write lock is taken before the current
                    // version is read, so a put of another process (or
                    // connection) waits for this one and then finds its version.
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let found: Option<i64> = tx
                        .query_row(
                            "SELECT max(version) FROM release_policies WHERE tenant_id = ?1",
                            [&record.tenant_id],
                            |row| row.get(0),
                        )
                        .optional()?
                        .flatten();
                    let found = found.map(|found| read_version(&record.tenant_id, found)).transpose()?;
                    if found != expected {
                        return Err(StoreError::PolicyChanged {
                            tenant: record.tenant_id,
                            expected,
                            found,
                        });
                    }
                    tx.execute(
                        &format!("INSERT INTO release_policies ({POLICY_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
                        params![
                            record.tenant_id,
                            stored,
                            text,
                            record.changed_by,
                            unix_ms(record.changed_at),
                            record.reason,
                        ],
                    )?;
                    tx.commit()?;
                    Ok(record)
                })
                .await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::put_release_policy(tenant_id, expected)))
    }

    async fn release_policy(&self, tenant_id: &str) -> Result<Option<ReleasePolicyRecord>, StoreError> {
        let run = async {
            let tenant_id = tenant_id.to_owned();
            let row = self
                .database
                .read(move |conn| {
                    conn.query_row(
                        &format!(
                            "SELECT {POLICY_COLUMNS} FROM release_policies WHERE tenant_id = ?1
                             ORDER BY version DESC LIMIT 1"
                        ),
                        [tenant_id],
                        policy_from_row,
                    )
                    .optional()
                })
                .await?;
            row.map(checked).transpose()
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::release_policy(tenant_id)))
    }

    async fn release_policy_history(&self, tenant_id: &str) -> Result<Vec<ReleasePolicyRecord>, StoreError> {
        let run = async {
            let tenant_id = tenant_id.to_owned();
            let rows = self
                .database
                .read(move |conn| {
                    let mut statement = conn.prepare_cached(&format!(
                        "SELECT {POLICY_COLUMNS} FROM release_policies WHERE tenant_id = ?1 ORDER BY version"
                    ))?;
                    let rows = statement.query_map([tenant_id], policy_from_row)?;
                    rows.collect::<rusqlite::Result<Vec<_>>>()
                })
                .await?;
            rows.into_iter().map(checked).collect::<Result<Vec<_>, StoreError>>()
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::release_policy_history(tenant_id)))
    }
}
