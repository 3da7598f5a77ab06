//! Each tenant's release policy, versioned and append-only
//! ([`PolicyStore`]): `bosun_release_policies` (migration 15), one row per
//! version, only ever inserted. A put is one statement: it inserts the next
//! version only where the tenant's latest is the one its writer read, and
//! the primary key `(tenant_id, version)` lets only one of two concurrent
//! puts over the same version in (the other waits for it, then inserts
//! nothing).

use serde_json::Value;
use sqlx_core::query::query;
use sqlx_core::query_scalar::query_scalar;
use sqlx_core::row::Row;
use sqlx_core::types::Json;
use sqlx_postgres::PgRow;
use time::OffsetDateTime;

use super::PostgresStore;
use crate::ports::store::{
    PolicyStore, ReleasePolicyRecord, StoreError, doing, next_version, read_version, stored_version,
};
use crate::ports::transport::{from_unix_ms, unix_ms};

/// Inserts version `$2` of tenant `$1` only if the tenant's latest version
/// is `$7` (`NULL`: none). Returns the row inserted, none when refused.
const PUT: &str = "INSERT INTO bosun_release_policies (tenant_id, version, document, changed_by, changed_at, reason)
    SELECT $1, $2, $3, $4, $5, $6
    WHERE (SELECT max(version) FROM bosun_release_policies WHERE tenant_id = $1) IS NOT DISTINCT FROM $7::bigint
    ON CONFLICT (tenant_id, version) DO NOTHING
    RETURNING version";

const CURRENT_VERSION: &str = "SELECT max(version) FROM bosun_release_policies WHERE tenant_id = $1";

const CURRENT: &str = "SELECT tenant_id, version, document, changed_by, changed_at, reason
    FROM bosun_release_policies WHERE tenant_id = $1 ORDER BY version DESC LIMIT 1";

const HISTORY: &str = "SELECT tenant_id, version, document, changed_by, changed_at, reason
    FROM bosun_release_policies WHERE tenant_id = $1 ORDER BY version";

fn policy_from_row(row: &PgRow) -> Result<ReleasePolicyRecord, StoreError> {
    let tenant_id: String = row.try_get(0)?;
    let Json(document): Json<Value> = row.try_get(2)?;
    Ok(ReleasePolicyRecord {
        version: read_version(&tenant_id, row.try_get(1)?)?,
        tenant_id,
        document,
        changed_by: row.try_get(3)?,
        changed_at: row.try_get(4)?,
        reason: row.try_get(5)?,
    })
}

#[async_trait::async_trait]
impl PolicyStore for PostgresStore {
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
            let pool = self.database.pool();
            let version = next_version(tenant_id, expected)?;
            let expected_stored = expected
                .map(|expected| stored_version(tenant_id, expected))
                .transpose()?;
            // Kept to the millisecond, as every store keeps times.
            let changed_at = from_unix_ms(unix_ms(at));
            let inserted: Option<i64> = query_scalar(PUT)
                .bind(tenant_id)
                .bind(stored_version(tenant_id, version)?)
                .bind(Json(document))
                .bind(changed_by)
                .bind(changed_at)
                .bind(reason)
                .bind(expected_stored)
                .fetch_optional(pool)
                .await?;
            if inserted.is_none() {
                let found: Option<i64> = query_scalar(CURRENT_VERSION).bind(tenant_id).fetch_one(pool).await?;
                return Err(StoreError::PolicyChanged {
                    tenant: tenant_id.to_owned(),
                    expected,
                    found: found.map(|found| read_version(tenant_id, found)).transpose()?,
                });
            }
            Ok(ReleasePolicyRecord {
                tenant_id: tenant_id.to_owned(),
                version,
                document: document.clone(),
                changed_by: changed_by.to_owned(),
                changed_at,
                reason: reason.map(str::to_owned),
            })
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::put_release_policy(tenant_id, expected)))
    }

    async fn release_policy(&self, tenant_id: &str) -> Result<Option<ReleasePolicyRecord>, StoreError> {
        let run = async {
            let row = query(CURRENT)
                .bind(tenant_id)
                .fetch_optional(self.database.pool())
                .await?;
            row.as_ref().map(policy_from_row).transpose()
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::release_policy(tenant_id)))
    }

    async fn release_policy_history(&self, tenant_id: &str) -> Result<Vec<ReleasePolicyRecord>, StoreError> {
        let run = async {
            let rows = query(HISTORY).bind(tenant_id).fetch_all(self.database.pool()).await?;
            rows.iter().map(policy_from_row).collect::<Result<Vec<_>, StoreError>>()
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::release_policy_history(tenant_id)))
    }
}
