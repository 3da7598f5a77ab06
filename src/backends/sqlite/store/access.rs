//! API keys and HTTP idempotency keys ([`AccessStore`]).

use std::time::Duration;

use rusqlite::{OptionalExtension, Row, TransactionBehavior, params};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use super::{SqliteStore, now_ms, to_json};
use crate::backends::sqlite::undecodable;
use crate::ports::store::{AccessStore, ApiKeyRecord, IdempotencyClaim, StoreError, doing};
use crate::ports::transport::{duration_ms, from_unix_ms, unix_ms};

const API_KEY_COLUMNS: &str = "id, tenant_id, scopes, secret_hash, description, created_by, created_at, revoked_at, \
                               expires_at, last_used_at, rotated_from, rotated_to, sponsor";

fn api_key_from_row(row: &Row<'_>) -> rusqlite::Result<ApiKeyRecord> {
    let scopes: String = row.get(2)?;
    Ok(ApiKeyRecord {
        id: row.get(0)?,
        tenant_id: row.get(1)?,
        scopes: serde_json::from_str(&scopes).map_err(|err| undecodable(2, "scopes of an API key", err))?,
        secret_hash: row.get(3)?,
        description: row.get(4)?,
        created_by: row.get(5)?,
        created_at: from_unix_ms(row.get(6)?),
        revoked_at: row.get::<_, Option<i64>>(7)?.map(from_unix_ms),
        expires_at: row.get::<_, Option<i64>>(8)?.map(from_unix_ms),
        last_used_at: row.get::<_, Option<i64>>(9)?.map(from_unix_ms),
        rotated_from: row.get(10)?,
        rotated_to: row.get(11)?,
        sponsor: row.get(12)?,
    })
}

/// An `http_idempotency` row as [`SqliteStore::claim_idempotency`] reads it.
struct IdempotencyRow {
    request_hash: String,
    claim_id: String,
    claimed_at: i64,
    status: Option<i64>,
    response: Option<String>,
}

/// Inserts one key row.
fn insert_key_row(conn: &rusqlite::Connection, key: &ApiKeyRecord) -> Result<(), StoreError> {
    conn.execute(
        &format!(
            "INSERT INTO api_keys ({API_KEY_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
        ),
        params![
            key.id,
            key.tenant_id,
            to_json(&key.scopes, "the scopes of an API key")?,
            key.secret_hash,
            key.description,
            key.created_by,
            unix_ms(key.created_at),
            key.revoked_at.map(unix_ms),
            key.expires_at.map(unix_ms),
            key.last_used_at.map(unix_ms),
            key.rotated_from,
            key.rotated_to,
            key.sponsor,
        ],
    )?;
    Ok(())
}

#[async_trait::async_trait]
impl AccessStore for SqliteStore {
    async fn insert_api_key(&self, key: ApiKeyRecord) -> Result<(), StoreError> {
        let doing = doing::insert_api_key(&key);
        let run = async {
            let database = &self.database;
            database.call(move |conn| insert_key_row(conn, &key)).await
        };
        run.await.map_err(|err: StoreError| err.doing(doing))
    }

    async fn api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            let id = id.to_owned();
            database
                .call(move |conn| {
                    Ok(conn
                        .query_row(
                            &format!("SELECT {API_KEY_COLUMNS} FROM api_keys WHERE id = ?1"),
                            [id],
                            api_key_from_row,
                        )
                        .optional()?)
                })
                .await
        };
        run.await.map_err(|err: StoreError| err.doing(doing::api_key(id)))
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            database
                .call(move |conn| {
                    let mut statement = conn.prepare_cached(&format!(
                        "SELECT {API_KEY_COLUMNS} FROM api_keys ORDER BY created_at, rowid"
                    ))?;
                    let rows = statement.query_map([], api_key_from_row)?;
                    Ok(rows.collect::<Result<Vec<_>, _>>()?)
                })
                .await
        };
        run.await.map_err(|err: StoreError| err.doing(doing::list_api_keys()))
    }

    async fn revoke_api_key(&self, id: &str, at: OffsetDateTime) -> Result<ApiKeyRecord, StoreError> {
        let run = async {
            let database = &self.database;
            let id = id.to_owned();
            database
                .call(move |conn| {
                    conn.query_row(
                        &format!(
                            "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?2) WHERE id = ?1
                         RETURNING {API_KEY_COLUMNS}"
                        ),
                        params![id, unix_ms(at)],
                        api_key_from_row,
                    )
                    .optional()?
                    .ok_or(StoreError::NotFound { what: "API key", id })
                })
                .await
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
            let id = id.to_owned();
            database
                .call(move |conn| {
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let old = tx
                        .query_row(
                            &format!(
                                "UPDATE api_keys SET rotated_to = ?2,
                                 expires_at = min(coalesce(expires_at, ?3), ?3)
                             WHERE id = ?1 RETURNING {API_KEY_COLUMNS}"
                            ),
                            params![id, successor.id, unix_ms(old_expires_at)],
                            api_key_from_row,
                        )
                        .optional()?
                        .ok_or(StoreError::NotFound { what: "API key", id })?;
                    insert_key_row(&tx, &successor)?;
                    tx.commit()?;
                    Ok(old)
                })
                .await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::rotate_api_key(id)))
    }

    async fn touch_api_key(&self, id: &str, at: OffsetDateTime) -> Result<(), StoreError> {
        let run = async {
            let database = &self.database;
            let id = id.to_owned();
            database
                .call(move |conn| {
                    conn.execute(
                        "UPDATE api_keys SET last_used_at = max(coalesce(last_used_at, 0), ?2) WHERE id = ?1",
                        params![id, unix_ms(at)],
                    )?;
                    Ok(())
                })
                .await
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
            let (tenant_id, key, request_hash) = (tenant_id.to_owned(), key.to_owned(), request_hash.to_owned());
            database
                .call(move |conn| {
                    // Immediate: the write lock is taken first, so another process
                    // claiming the same key waits for this one's answer.
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let now = now_ms();
                    let claim_id = Uuid::now_v7().to_string();
                    let inserted = tx.execute(
                        "INSERT INTO http_idempotency (tenant_id, key, request_hash, claim_id, claimed_at)
                     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (tenant_id, key) DO NOTHING",
                        params![tenant_id, key, request_hash, claim_id, now],
                    )?;
                    if inserted > 0 {
                        tx.commit()?;
                        return Ok(IdempotencyClaim::Claimed);
                    }
                    let row = tx.query_row(
                        "SELECT request_hash, claim_id, claimed_at, status, response FROM http_idempotency
                     WHERE tenant_id = ?1 AND key = ?2",
                        params![tenant_id, key],
                        |row| {
                            Ok(IdempotencyRow {
                                request_hash: row.get(0)?,
                                claim_id: row.get(1)?,
                                claimed_at: row.get(2)?,
                                status: row.get(3)?,
                                response: row.get(4)?,
                            })
                        },
                    )?;
                    let claim = match row.status {
                        Some(status) => IdempotencyClaim::Completed {
                            request_hash: row.request_hash,
                            status: u16::try_from(status).unwrap_or_default(),
                            response: row
                                .response
                                .as_deref()
                                .map_or(Ok(Value::Null), serde_json::from_str)
                                .map_err(|err| {
                                    StoreError::corrupt(format!("answer stored for Idempotency-Key `{key}`"), err)
                                })?,
                        },
                        None if row.claimed_at <= now.saturating_sub(duration_ms(stale_after)) => {
                            // Its process died: take it over, unless another taker did.
                            let taken = tx.execute(
                                "UPDATE http_idempotency SET request_hash = ?3, claim_id = ?4, claimed_at = ?5
                             WHERE tenant_id = ?1 AND key = ?2 AND status IS NULL AND claim_id = ?6",
                                params![tenant_id, key, request_hash, claim_id, now, row.claim_id],
                            )?;
                            if taken > 0 {
                                tracing::info!(tenant = %tenant_id, key = %key, "took over a stale idempotency claim");
                                IdempotencyClaim::Claimed
                            } else {
                                IdempotencyClaim::InProgress {
                                    request_hash: row.request_hash,
                                }
                            }
                        }
                        None => IdempotencyClaim::InProgress {
                            request_hash: row.request_hash,
                        },
                    };
                    tx.commit()?;
                    Ok(claim)
                })
                .await
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
            let (tenant_id, key) = (tenant_id.to_owned(), key.to_owned());
            let response = to_json(response, "the answer to a request")?;
            database
                .call(move |conn| {
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let completed = tx.execute(
                        "UPDATE http_idempotency SET status = ?3, response = ?4, completed_at = ?5
                     WHERE tenant_id = ?1 AND key = ?2 AND status IS NULL",
                        params![tenant_id, key, status, response, now_ms()],
                    )?;
                    if completed == 0 {
                        // Already completed: the first answer stands.
                        let exists = tx
                            .query_row(
                                "SELECT 1 FROM http_idempotency WHERE tenant_id = ?1 AND key = ?2",
                                params![tenant_id, key],
                                |_| Ok(()),
                            )
                            .optional()?
                            .is_some();
                        if !exists {
                            return Err(StoreError::NotFound {
                                what: "idempotency key",
                                id: key,
                            });
                        }
                    }
                    tx.commit()?;
                    Ok(())
                })
                .await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::complete_idempotency(tenant_id, key)))
    }

    async fn release_idempotency(&self, tenant_id: &str, key: &str) -> Result<(), StoreError> {
        let run = async {
            let database = &self.database;
            let (tenant_id, key) = (tenant_id.to_owned(), key.to_owned());
            database
                .call(move |conn| {
                    conn.execute(
                        "DELETE FROM http_idempotency WHERE tenant_id = ?1 AND key = ?2 AND status IS NULL",
                        params![tenant_id, key],
                    )?;
                    Ok(())
                })
                .await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::release_idempotency(tenant_id, key)))
    }
}
