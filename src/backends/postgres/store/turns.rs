//! Saga turns across processes: a session-level advisory lock per saga key
//! (hashed with the schema, so installations in different schemas of one
//! database never wait for each other), taken on a connection of the pool
//! that is kept, with the lock, until the turn is dropped. Waiting is done
//! by the server (`pg_advisory_lock` returns once the holder unlocks), so a
//! waiting message costs no polling. A process that dies loses its
//! connections, and with them its turns, at once.
//!
//! A held turn holds a connection: at most half the pool's connections are
//! held by turns at once (the others stay for receives, commits, lock
//! renewals and the dispatcher); further saga messages wait for a free turn
//! slot in the process.

use std::sync::Arc;

use sqlx_core::pool::PoolConnection;
use sqlx_core::query::query;
use sqlx_postgres::Postgres;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::backends::postgres::PostgresDatabase;
use crate::ports::store::{SagaTurn, StoreError};

/// The lock key of saga `kind`/`key` in this connection's schema.
const LOCK_KEY: &str =
    "hashtextextended('bosun saga turn:' || coalesce(current_schema(), '') || ':' || $1 || '/' || $2, 0)";

/// Turn slots per database: half its pool.
pub(crate) fn turn_slots(max_connections: u32) -> Arc<Semaphore> {
    let slots = usize::try_from(max_connections / 2).unwrap_or(1).max(1);
    Arc::new(Semaphore::new(slots))
}

/// A held turn: its connection, holding the advisory lock once `locked`.
struct Held {
    connection: Option<PoolConnection<Postgres>>,
    locked: bool,
    kind: String,
    key: String,
    slot: Option<OwnedSemaphorePermit>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(mut connection) = self.connection.take() else {
            return;
        };
        if !self.locked {
            // Dropped while waiting: the lock may yet be granted to this
            // session, so the connection never goes back to the pool.
            drop(connection.detach());
            return;
        }
        let (kind, key, slot) = (
            std::mem::take(&mut self.kind),
            std::mem::take(&mut self.key),
            self.slot.take(),
        );
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to unlock on: closing the connection releases the lock.
            drop(connection.detach());
            return;
        };
        runtime.spawn(async move {
            let unlocked = query(sqlx_core::sql_str::AssertSqlSafe(format!("SELECT pg_advisory_unlock({LOCK_KEY})")))
                .bind(&kind)
                .bind(&key)
                .execute(&mut *connection)
                .await;
            if let Err(err) = unlocked {
                // Never hand a connection that may still hold the lock back
                // to the pool: closing it releases the lock.
                tracing::warn!(error = %err, saga = %format!("{kind}/{key}"), "could not release a saga turn; closing its connection");
                let _ = connection.close().await;
            }
            drop(slot);
        });
    }
}

/// Waits for saga `kind`/`key`'s turn (see the module documentation).
pub(super) async fn saga_turn(database: &PostgresDatabase, kind: &str, key: &str) -> Result<SagaTurn, StoreError> {
    let slot = Arc::clone(database.turn_slots())
        .acquire_owned()
        .await
        .map_err(|err| StoreError::unavailable("waiting for a saga turn slot", err))?;
    let connection = database.pool().acquire().await?;
    let mut held = Held {
        connection: Some(connection),
        locked: false,
        kind: kind.to_owned(),
        key: key.to_owned(),
        slot: Some(slot),
    };
    if let Some(connection) = held.connection.as_mut() {
        query(sqlx_core::sql_str::AssertSqlSafe(format!(
            "SELECT pg_advisory_lock({LOCK_KEY})"
        )))
        .bind(kind)
        .bind(key)
        .execute(&mut **connection)
        .await?;
    }
    // From here on, dropping the turn unlocks.
    held.locked = true;
    Ok(SagaTurn::new(held))
}
