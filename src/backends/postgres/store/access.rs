//! API keys and HTTP idempotency keys ([`AccessStore`]).

use std::time::Duration;

use serde_json::Value;
use sqlx_core::query::query;
use sqlx_core::query_scalar::query_scalar;
use sqlx_core::row::Row;
use sqlx_core::types::Json;
use sqlx_postgres::PgRow;
use time::OffsetDateTime;
use uuid::Uuid;

use super::PostgresStore;
use crate::ports::store::{AccessStore, ApiKeyRecord, IdempotencyClaim, StoreError, doing};
use crate::ports::transport::duration_ms;

const API_KEY_COLUMNS: &str = "id, tenant_id, scopes, secret_hash, description, created_by, created_at, revoked_at, \
                               expires_at, last_used_at, rotated_from, rotated_to, sponsor";

fn api_key_from_row(row: &PgRow) -> Result<ApiKeyRecord, StoreError> {
    let Json(scopes): Json<Vec<String>> = row.try_get(2)?;
    Ok(ApiKeyRecord {
        id: row.try_get(0)?,
        tenant_id: row.try_get(1)?,
        scopes,
        secret_hash: row.try_get(3)?,
        description: row.try_get(4)?,
        created_by: row.try_get(5)?,
        created_at: row.try_get(6)?,
        revoked_at: row.try_get(7)?,
        expires_at: row.try_get(8)?,
        last_used_at: row.try_get(9)?,
        rotated_from: row.try_get(10)?,
        rotated_to: row.try_get(11)?,
        sponsor: row.try_get(12)?,
    })
}

/// How often `claim_idempotency` starts over when the row
/// it looked at changed under it (released, or taken over by another).
const CLAIM_ROUNDS: usize = 8;

/// The statement that inserts one key row.
fn insert_key_row(
    key: &ApiKeyRecord,
) -> sqlx_core::query::Query<'_, sqlx_postgres::Postgres, sqlx_postgres::PgArguments> {
    query(sqlx_core::sql_str::AssertSqlSafe(format!(
        "INSERT INTO bosun_api_keys ({API_KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
    )))
    .bind(&key.id)
    .bind(&key.tenant_id)
    .bind(Json(&key.scopes))
    .bind(&key.secret_hash)
    .bind(&key.description)
    .bind(&key.created_by)
    .bind(key.created_at)
    .bind(key.revoked_at)
    .bind(key.expires_at)
    .bind(key.last_used_at)
    .bind(&key.rotated_from)
    .bind(&key.rotated_to)
    .bind(&key.sponsor)
}

#[async_trait::async_trait]
impl AccessStore for PostgresStore {
    async fn insert_api_key(&self, key: ApiKeyRecord) -> Result<(), StoreError> {
        let doing = doing::insert_api_key(&key);
        let run = async {
            let database = &self.database;
            insert_key_row(&key).execute(database.pool()).await?;
            Ok(())
        };
        run.await.map_err(|err: StoreError| err.doing(doing))
    }

    async fn api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            let row = query(sqlx_core::sql_str::AssertSqlSafe(format!(
                "SELECT {API_KEY_COLUMNS} FROM bosun_api_keys WHERE id = $1"
            )))
            .bind(id)
            .fetch_optional(database.pool())
            .await?;
            row.as_ref().map(api_key_from_row).transpose()
        };
        run.await.map_err(|err: StoreError| err.doing(doing::api_key(id)))
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            let rows = query(sqlx_core::sql_str::AssertSqlSafe(format!(
                "SELECT {API_KEY_COLUMNS} FROM bosun_api_keys ORDER BY created_at, seq"
            )))
            .fetch_all(database.pool())
            .await?;
            rows.iter()
                .map(api_key_from_row)
                .collect::<Result<Vec<_>, StoreError>>()
        };
        run.await.map_err(|err: StoreError| err.doing(doing::list_api_keys()))
    }

    async fn revoke_api_key(&self, id: &str, at: OffsetDateTime) -> Result<ApiKeyRecord, StoreError> {
        let run = async {
            let database = &self.database;
            let row = query(sqlx_core::sql_str::AssertSqlSafe(format!(
            "UPDATE bosun_api_keys SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1 RETURNING {API_KEY_COLUMNS}"
        )))
        .bind(id)
        .bind(at)
        .fetch_optional(database.pool())
        .await?;
            match row {
                Some(row) => api_key_from_row(&row),
                None => Err(StoreError::NotFound {
                    what: "API key",
                    id: id.to_owned(),
                }),
            }
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::revoke_api_key(id)))
    }

    async fn rotate_api_key(
        &self,
        id: &str,
        successor: ApiKeyRecord,
        old_expires_at: OffsetDateTime,
    ) -> Result<ApiKeyRecord, StoreError> {
        let run = async {
            let database = &self.database;
            let mut tx = database.pool().begin().await?;
            let row = query(sqlx_core::sql_str::AssertSqlSafe(format!(
                "UPDATE bosun_api_keys SET rotated_to = $2, expires_at = least(coalesce(expires_at, $3), $3)
             WHERE id = $1 RETURNING {API_KEY_COLUMNS}"
            )))
            .bind(id)
            .bind(&successor.id)
            .bind(old_expires_at)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(row) = row else {
                return Err(StoreError::NotFound {
                    what: "API key",
                    id: id.to_owned(),
                });
            };
            let old = api_key_from_row(&row)?;
            insert_key_row(&successor).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(old)
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::rotate_api_key(id)))
    }

    async fn touch_api_key(&self, id: &str, at: OffsetDateTime) -> Result<(), StoreError> {
        let run = async {
            let database = &self.database;
            query("UPDATE bosun_api_keys SET last_used_at = greatest(last_used_at, $2) WHERE id = $1")
                .bind(id)
                .bind(at)
                .execute(database.pool())
                .await?;
            Ok(())
        };
        run.await.map_err(|err: StoreError| err.doing(doing::touch_api_key(id)))
    }

    async fn claim_idempotency(
        &self,
        tenant_id: &str,
        key: &str,
        request_hash: &str,
        stale_after: Duration,
    ) -> Result<IdempotencyClaim, StoreError> {
        let run = async {
            let database = &self.database;
            let pool = database.pool();
            for _ in 0..CLAIM_ROUNDS {
                let claim_id = Uuid::now_v7();
                let inserted = query(
                    "INSERT INTO bosun_http_idempotency (tenant_id, key, request_hash, claim_id, claimed_at)
                 VALUES ($1, $2, $3, $4, now()) ON CONFLICT DO NOTHING",
                )
                .bind(tenant_id)
                .bind(key)
                .bind(request_hash)
                .bind(claim_id)
                .execute(pool)
                .await?
                .rows_affected();
                if inserted > 0 {
                    return Ok(IdempotencyClaim::Claimed);
                }
                let Some(row) = query(
                    "SELECT request_hash, claim_id, status, response,
                        claimed_at <= now() - $3::bigint * interval '1 millisecond' AS stale
                 FROM bosun_http_idempotency WHERE tenant_id = $1 AND key = $2",
                )
                .bind(tenant_id)
                .bind(key)
                .bind(duration_ms(stale_after))
                .fetch_optional(pool)
                .await?
                else {
                    // Released meanwhile: claim it afresh.
                    continue;
                };
                let request_hash_found: String = row.try_get(0)?;
                let status: Option<i32> = row.try_get(2)?;
                if let Some(status) = status {
                    let response: Option<Json<Value>> = row.try_get(3)?;
                    return Ok(IdempotencyClaim::Completed {
                        request_hash: request_hash_found,
                        status: u16::try_from(status).unwrap_or_default(),
                        response: response.map_or(Value::Null, |Json(value)| value),
                    });
                }
                let stale: bool = row.try_get(4)?;
                if !stale {
                    return Ok(IdempotencyClaim::InProgress {
                        request_hash: request_hash_found,
                    });
                }
                // Its process died: take it over, unless another taker did first.
                let previous: Uuid = row.try_get(1)?;
                let taken = query(
                    "UPDATE bosun_http_idempotency SET request_hash = $3, claim_id = $4, claimed_at = now()
                 WHERE tenant_id = $1 AND key = $2 AND status IS NULL AND claim_id = $5",
                )
                .bind(tenant_id)
                .bind(key)
                .bind(request_hash)
                .bind(claim_id)
                .bind(previous)
                .execute(pool)
                .await?
                .rows_affected();
                if taken > 0 {
                    tracing::info!(tenant = %tenant_id, key = %key, "took over a stale idempotency claim");
                    return Ok(IdempotencyClaim::Claimed);
                }
            }
            Err(StoreError::unavailable(
                doing::claim_idempotency(tenant_id, key),
                format!("it kept changing over {CLAIM_ROUNDS} rounds; try again"),
            ))
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::claim_idempotency(tenant_id, key)))
    }

    async fn complete_idempotency(
        &self,
        tenant_id: &str,
        key: &str,
        status: u16,
        response: &Value,
    ) -> Result<(), StoreError> {
        let run = async {
            let database = &self.database;
            // Already completed: the first answer stands.
            let found: Option<bool> = query_scalar(
                "WITH completed AS (
                UPDATE bosun_http_idempotency SET status = $3, response = $4, completed_at = now()
                WHERE tenant_id = $1 AND key = $2 AND status IS NULL
                RETURNING 1
             )
             SELECT true FROM completed
             UNION ALL
             SELECT true FROM bosun_http_idempotency WHERE tenant_id = $1 AND key = $2
             LIMIT 1",
            )
            .bind(tenant_id)
            .bind(key)
            .bind(i32::from(status))
            .bind(Json(response))
            .fetch_optional(database.pool())
            .await?;
            match found {
                Some(_) => Ok(()),
                None => Err(StoreError::NotFound {
                    what: "idempotency key",
                    id: key.to_owned(),
                }),
            }
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::complete_idempotency(tenant_id, key)))
    }

    async fn release_idempotency(&self, tenant_id: &str, key: &str) -> Result<(), StoreError> {
        let run = async {
            let database = &self.database;
            query("DELETE FROM bosun_http_idempotency WHERE tenant_id = $1 AND key = $2 AND status IS NULL")
                .bind(tenant_id)
                .bind(key)
                .execute(database.pool())
                .await?;
            Ok(())
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::release_idempotency(tenant_id, key)))
    }
}
