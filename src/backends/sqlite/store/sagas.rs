//! Sagas: state with optimistic concurrency, and its history.

use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use crate::ports::store::{SagaHistoryEntry, SagaRecord, SagaState, StoreError};
use crate::ports::store::{SagaStore, doing};
use crate::ports::transport::from_unix_ms;

pub(super) fn load_saga_tx(
    conn: &rusqlite::Connection,
    kind: &str,
    key: &str,
) -> Result<Option<SagaRecord>, StoreError> {
    let Some((version, state, created_at, updated_at, tenant_id)) = conn
        .query_row(
            "SELECT version, state, created_at, updated_at, tenant_id FROM sagas WHERE kind = ?1 AND key = ?2",
            params![kind, key],
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, i64>(3)?,
                    row.get::<_, Option<String>>(4)?,
                ))
            },
        )
        .optional()?
    else {
        return Ok(None);
    };
    let mut statement = conn.prepare_cached(
        "SELECT version, message_id, message_type, at FROM saga_history WHERE kind = ?1 AND key = ?2 ORDER BY version",
    )?;
    let history = statement
        .query_map(params![kind, key], |row| {
            Ok(SagaHistoryEntry {
                version: row.get(0)?,
                message_id: row.get(1)?,
                message_type: row.get(2)?,
                at: from_unix_ms(row.get(3)?),
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(SagaRecord {
        kind: kind.to_owned(),
        key: key.to_owned(),
        version,
        tenant_id,
        state: serde_json::from_str(&state)
            .map_err(|err| StoreError::corrupt(format!("state of saga {kind}/{key}"), err))?,
        created_at: from_unix_ms(created_at),
        updated_at: from_unix_ms(updated_at),
        history,
    }))
}

/// [`load_saga_state`] on a connection.
pub(super) fn saga_state(conn: &Connection, kind: &str, key: &str) -> Result<Option<SagaState>, StoreError> {
    let Some((version, state, tenant_id)) = conn
        .prepare_cached("SELECT version, state, tenant_id FROM sagas WHERE kind = ?1 AND key = ?2")?
        .query_row(params![kind, key], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, Option<String>>(2)?,
            ))
        })
        .optional()?
    else {
        return Ok(None);
    };
    Ok(Some(SagaState {
        version,
        tenant_id,
        state: serde_json::from_str(&state)
            .map_err(|err| StoreError::corrupt(format!("state of saga {kind}/{key}"), err))?,
    }))
}

#[async_trait::async_trait]
impl SagaStore for SqliteStore {
    async fn load_saga(&self, kind: &str, key: &str) -> Result<Option<SagaRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            let (kind, key) = (kind.to_owned(), key.to_owned());
            database.call(move |conn| load_saga_tx(conn, &kind, &key)).await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::load_saga(kind, key)))
    }

    async fn load_saga_state(&self, kind: &str, key: &str) -> Result<Option<SagaState>, StoreError> {
        let run = async {
            let database = &self.database;
            let (kind, key) = (kind.to_owned(), key.to_owned());
            database.read(move |conn| saga_state(conn, &kind, &key)).await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::load_saga(kind, key)))
    }

    async fn list_sagas(&self, kind: Option<&str>) -> Result<Vec<SagaRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            let kind = kind.map(str::to_owned);
            database
                .call(move |conn| {
                    let keys = {
                        let mut statement = conn.prepare(
                            "SELECT kind, key FROM sagas WHERE (?1 IS NULL OR kind = ?1) ORDER BY updated_at DESC",
                        )?;
                        statement
                            .query_map([&kind], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))?
                            .collect::<Result<Vec<_>, _>>()?
                    };
                    let mut sagas = Vec::new();
                    for (kind, key) in keys {
                        if let Some(saga) = load_saga_tx(conn, &kind, &key)? {
                            sagas.push(saga);
                        }
                    }
                    Ok(sagas)
                })
                .await
        };
        run.await.map_err(|err: StoreError| err.doing(doing::list_sagas()))
    }
}
