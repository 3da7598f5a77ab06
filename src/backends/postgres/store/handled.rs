//! Idempotency, the atomic commit of a handled message, and retries.

use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_core::types::Json;
use sqlx_postgres::PgConnection;

use super::PostgresStore;
use super::attempt_number;
use super::commit::commit_in_one_statement;
use super::outbox::insert_outbox;
use super::timeline::insert_timeline;
use crate::backends::postgres::notify::Wakes;
use crate::ports::settle::{SettleError, Settled};
use crate::ports::store::{
    AttemptRecord, CommitOutcome, HandledMessage, OutboxPurpose, RetryWrite, SagaState, StoreError,
};
use crate::ports::store::{HandledStore, SagaTurn, doing};

/// [`record_retry`]'s writes on `conn`, inside a transaction the caller
/// commits (with the received message's settlement, for the settle of the
/// PostgreSQL backends); what they wake goes to `wakes`.
pub(crate) async fn record_retry_in(
    conn: &mut PgConnection,
    write: &RetryWrite,
    wakes: &mut Wakes,
) -> Result<(), StoreError> {
    let attempt = &write.attempt;
    let fresh = query(
        "INSERT INTO bosun_attempts (consumer, received_broker_message_id, message_id, attempt, at, error_chain)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
    )
    .bind(&write.consumer)
    .bind(&write.received_broker_message_id)
    .bind(&write.message_id)
    .bind(i64::from(attempt.attempt))
    .bind(attempt.at)
    .bind(Json(&attempt.error_chain))
    .execute(&mut *conn)
    .await?
    .rows_affected();
    // A redelivered attempt that was already recorded already has its retry in the outbox.
    if fresh > 0 {
        insert_outbox(
            conn,
            Some(&write.consumer),
            Some(&write.message_id),
            OutboxPurpose::Retry,
            &write.retry,
            false,
        )
        .await?;
        insert_timeline(conn, std::slice::from_ref(&write.timeline), wakes).await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl HandledStore for PostgresStore {
    async fn is_handled(&self, consumer: &str, message_id: &str) -> Result<bool, StoreError> {
        let run = async {
            let database = &self.database;
            let found = query("SELECT 1 FROM bosun_handled WHERE consumer = $1 AND message_id = $2")
                .bind(consumer)
                .bind(message_id)
                .fetch_optional(database.pool())
                .await?;
            Ok(found.is_some())
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::is_handled(consumer, message_id)))
    }

    async fn handled_and_saga(
        &self,
        consumer: &str,
        message_id: &str,
        saga: Option<(&str, &str)>,
    ) -> Result<(bool, Option<SagaState>), StoreError> {
        let run = async {
            let database = &self.database;
            let (kind, key) = saga.unzip();
            let row = query(
                "SELECT EXISTS (SELECT 1 FROM bosun_handled WHERE consumer = $1 AND message_id = $2),
                    s.version, s.state, s.tenant_id
             FROM (SELECT 1) AS one LEFT JOIN bosun_sagas AS s ON s.kind = $3 AND s.key = $4",
            )
            .bind(consumer)
            .bind(message_id)
            .bind(kind)
            .bind(key)
            .fetch_one(database.pool())
            .await?;
            let handled: bool = row.try_get(0)?;
            // The version is null when the saga is not there (the outer join).
            let found = row.try_get::<Option<i64>, _>(1)?.is_some();
            let saga = match (handled, found, saga) {
                (false, true, Some((kind, key))) => Some(super::sagas::saga_state_at(&row, 1, kind, key)?),
                _ => None,
            };
            Ok((handled, saga))
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::is_handled(consumer, message_id)))
    }

    async fn saga_turn(&self, kind: &str, key: &str) -> Result<Option<SagaTurn>, StoreError> {
        super::turns::saga_turn(&self.database, kind, key)
            .await
            .map(Some)
            .map_err(|err| err.doing(format!("waiting for the turn of saga {kind}/{key}")))
    }

    async fn commit_handled(&self, handled: HandledMessage) -> Result<CommitOutcome, StoreError> {
        let doing = doing::commit_handled(&handled);
        let run = async {
            let database = &self.database;
            // One statement (`bosun_commit`); the outgoing messages stay in the
            // outbox for the dispatcher, which sends them on the other transport.
            let mut conn = database.pool().acquire().await?;
            let (status, wakes) = match commit_in_one_statement(&mut conn, &handled, None).await {
                Ok(done) => done,
                Err(SettleError::Store(err)) => return Err(err),
                // Only a settling commit can lose a lock.
                Err(other) => return Err(StoreError::unavailable("committing a handled message", other)),
            };
            drop(conn);
            database.wake(wakes);
            match status {
                Settled::Written => Ok(CommitOutcome::Committed),
                Settled::AlreadyHandled => Ok(CommitOutcome::AlreadyHandled),
                Settled::SagaConflict {
                    kind,
                    key,
                    expected,
                    found,
                } => Err(StoreError::SagaConflict {
                    kind,
                    key,
                    expected,
                    found,
                }),
            }
        };
        run.await.map_err(|err: StoreError| err.doing(doing))
    }

    async fn record_retry(&self, retry: RetryWrite) -> Result<(), StoreError> {
        let doing = doing::record_retry(&retry.consumer, &retry.message_id);
        let run = async {
            let database = &self.database;
            let write = retry;
            let mut tx = database.pool().begin().await?;
            let mut wakes = Wakes::default();
            record_retry_in(&mut tx, &write, &mut wakes).await?;
            tx.commit().await?;
            database.wake(wakes);
            Ok(())
        };
        run.await.map_err(|err: StoreError| err.doing(doing))
    }

    async fn attempts(&self, consumer: &str, message_id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            let rows = query(
                "SELECT attempt, at, error_chain FROM bosun_attempts WHERE consumer = $1 AND message_id = $2
             ORDER BY at, attempt",
            )
            .bind(consumer)
            .bind(message_id)
            .fetch_all(database.pool())
            .await?;
            rows.iter()
                .map(|row| {
                    let Json(error_chain): Json<Vec<String>> = row.try_get(2).map_err(|err| {
                        StoreError::corrupt(
                            format!("error chain of an attempt of message {message_id} at {consumer}"),
                            err,
                        )
                    })?;
                    Ok(AttemptRecord {
                        attempt: attempt_number(row.try_get(0)?),
                        at: row.try_get(1)?,
                        error_chain,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::attempts(consumer, message_id)))
    }
}
