//! Sagas: state with optimistic concurrency, and its history, read in one snapshot.

use std::collections::HashMap;

use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_core::types::Json;
use sqlx_postgres::PgRow;

use super::PostgresStore;
use crate::backends::postgres::PostgresDatabase;
use crate::ports::store::{SagaHistoryEntry, SagaRecord, SagaState, StoreError};
use crate::ports::store::{SagaStore, doing};

/// Sagas (of one kind, one key), most recently updated first, each with
/// its history, read in one snapshot.
pub(super) async fn sagas(
    database: &PostgresDatabase,
    kind: Option<&str>,
    key: Option<&str>,
) -> Result<Vec<SagaRecord>, StoreError> {
    let mut tx = database.pool().begin().await?;
    sqlx_core::executor::Executor::execute(&mut *tx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .await?;
    let rows = query(
        "SELECT kind, key, version, state, created_at, updated_at, tenant_id FROM bosun_sagas
         WHERE ($1::text IS NULL OR kind = $1) AND ($2::text IS NULL OR key = $2)
         ORDER BY updated_at DESC, kind, key",
    )
    .bind(kind)
    .bind(key)
    .fetch_all(&mut *tx)
    .await?;
    let history_rows = query(
        "SELECT kind, key, version, message_id, message_type, at FROM bosun_saga_history
         WHERE ($1::text IS NULL OR kind = $1) AND ($2::text IS NULL OR key = $2)
         ORDER BY kind, key, version",
    )
    .bind(kind)
    .bind(key)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let mut histories: HashMap<(String, String), Vec<SagaHistoryEntry>> = HashMap::new();
    for row in &history_rows {
        histories
            .entry((row.try_get(0)?, row.try_get(1)?))
            .or_default()
            .push(SagaHistoryEntry {
                version: row.try_get(2)?,
                message_id: row.try_get(3)?,
                message_type: row.try_get(4)?,
                at: row.try_get(5)?,
            });
    }
    rows.iter()
        .map(|row| {
            let kind: String = row.try_get(0)?;
            let key: String = row.try_get(1)?;
            let Json(state) = row
                .try_get(3)
                .map_err(|err| StoreError::corrupt(format!("state of saga {kind}/{key}"), err))?;
            Ok(SagaRecord {
                history: histories.remove(&(kind.clone(), key.clone())).unwrap_or_default(),
                kind,
                key,
                version: row.try_get(2)?,
                tenant_id: row.try_get(6)?,
                state,
                created_at: row.try_get(4)?,
                updated_at: row.try_get(5)?,
            })
        })
        .collect()
}

/// The saga state in `row`'s columns `first` (version), `first + 1` (state)
/// and `first + 2` (tenant).
pub(super) fn saga_state_at(row: &PgRow, first: usize, kind: &str, key: &str) -> Result<SagaState, StoreError> {
    let Json(state) = row
        .try_get(first + 1)
        .map_err(|err| StoreError::corrupt(format!("state of saga {kind}/{key}"), err))?;
    Ok(SagaState {
        version: row.try_get(first)?,
        tenant_id: row.try_get(first + 2)?,
        state,
    })
}

#[async_trait::async_trait]
impl SagaStore for PostgresStore {
    async fn load_saga(&self, kind: &str, key: &str) -> Result<Option<SagaRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            let mut sagas = sagas(database, Some(kind), Some(key)).await?;
            Ok(sagas.pop())
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::load_saga(kind, key)))
    }

    async fn load_saga_state(&self, kind: &str, key: &str) -> Result<Option<SagaState>, StoreError> {
        let run = async {
            let database = &self.database;
            let Some(row) = query("SELECT version, state, tenant_id FROM bosun_sagas WHERE kind = $1 AND key = $2")
                .bind(kind)
                .bind(key)
                .fetch_optional(database.pool())
                .await?
            else {
                return Ok(None);
            };
            saga_state_at(&row, 0, kind, key).map(Some)
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::load_saga(kind, key)))
    }

    async fn list_sagas(&self, kind: Option<&str>) -> Result<Vec<SagaRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            sagas(database, kind, None).await
        };
        run.await.map_err(|err: StoreError| err.doing(doing::list_sagas()))
    }
}
