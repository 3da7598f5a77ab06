//! Idempotency, the atomic commit of a handled message, and retries.

use sqlx_core::query::query;
use sqlx_core::query_scalar::query_scalar;
use sqlx_core::row::Row;
use sqlx_core::types::Json;
use sqlx_postgres::PgConnection;

use super::attempt_number;
use super::outbox::insert_outbox;
use super::timeline::insert_timeline;
use crate::backends::postgres::PostgresDatabase;
use crate::backends::postgres::notify::Wakes;
use crate::ports::store::{
    AttemptRecord, CommitOutcome, HandledMessage, OutboxPurpose, SagaState, StoreError, TimelineEntry,
};
use crate::ports::transport::OutboundMessage;

/// The body of [`Store::commit_handled`](crate::ports::store::Store::commit_handled), inside its transaction.
pub(super) async fn commit_in(
    conn: &mut PgConnection,
    handled: &HandledMessage,
    wakes: &mut Wakes,
) -> Result<CommitOutcome, StoreError> {
    if !insert_handled(conn, handled).await? {
        return Ok(CommitOutcome::AlreadyHandled);
    }
    write_saga(conn, handled).await?;
    for message in &handled.outbox {
        insert_outbox(
            conn,
            Some(&handled.consumer),
            Some(&handled.message_id),
            OutboxPurpose::Emitted,
            message,
            false,
        )
        .await?;
    }
    insert_timeline(conn, &handled.timeline, wakes).await?;
    Ok(CommitOutcome::Committed)
}

/// Writes the idempotency record; false when it was already there.
pub(crate) async fn insert_handled(
    conn: &mut PgConnection,
    handled: &HandledMessage,
) -> Result<bool, sqlx_core::Error> {
    let inserted = query(
        "INSERT INTO bosun_handled (consumer, message_id, handled_at) VALUES ($1, $2, now())
         ON CONFLICT DO NOTHING",
    )
    .bind(&handled.consumer)
    .bind(&handled.message_id)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    Ok(inserted > 0)
}

/// Saves the saga if it is still at the expected version.
pub(crate) async fn write_saga(conn: &mut PgConnection, handled: &HandledMessage) -> Result<(), StoreError> {
    let Some(saga) = &handled.saga else {
        return Ok(());
    };
    let version = saga.expected_version + 1;
    let written = if saga.expected_version == 0 {
        query(
            "INSERT INTO bosun_sagas (kind, key, version, state, created_at, updated_at, tenant_id)
             VALUES ($1, $2, $3, $4, now(), now(), $5) ON CONFLICT DO NOTHING",
        )
        .bind(&saga.kind)
        .bind(&saga.key)
        .bind(version)
        .bind(Json(&saga.state))
        .bind(&saga.tenant_id)
        .execute(&mut *conn)
        .await?
    } else {
        // The tenant is kept from the first save (one made before tenants
        // were kept takes the next one's).
        query(
            "UPDATE bosun_sagas SET version = $3, state = $4, updated_at = now(),
                tenant_id = coalesce(tenant_id, $6)
             WHERE kind = $1 AND key = $2 AND version = $5",
        )
        .bind(&saga.kind)
        .bind(&saga.key)
        .bind(version)
        .bind(Json(&saga.state))
        .bind(saga.expected_version)
        .bind(&saga.tenant_id)
        .execute(&mut *conn)
        .await?
    };
    if written.rows_affected() == 0 {
        let found: Option<i64> = query_scalar("SELECT version FROM bosun_sagas WHERE kind = $1 AND key = $2")
            .bind(&saga.kind)
            .bind(&saga.key)
            .fetch_optional(&mut *conn)
            .await?;
        return Err(StoreError::SagaConflict {
            kind: saga.kind.clone(),
            key: saga.key.clone(),
            expected: saga.expected_version,
            found: found.unwrap_or(0),
        });
    }
    query(
        "INSERT INTO bosun_saga_history (kind, key, version, message_id, message_type, at)
         VALUES ($1, $2, $3, $4, $5, now())",
    )
    .bind(&saga.kind)
    .bind(&saga.key)
    .bind(version)
    .bind(&handled.message_id)
    .bind(&handled.message_type)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

pub(super) async fn is_handled(
    database: &PostgresDatabase,
    consumer: &str,
    message_id: &str,
) -> Result<bool, StoreError> {
    let found = query("SELECT 1 FROM bosun_handled WHERE consumer = $1 AND message_id = $2")
        .bind(consumer)
        .bind(message_id)
        .fetch_optional(database.pool())
        .await?;
    Ok(found.is_some())
}

/// [`is_handled`] and, for a saga message, the saga's state, in one
/// statement (one round trip).
pub(super) async fn handled_and_saga(
    database: &PostgresDatabase,
    consumer: &str,
    message_id: &str,
    saga: Option<(&str, &str)>,
) -> Result<(bool, Option<SagaState>), StoreError> {
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
}

pub(super) async fn commit_handled(
    database: &PostgresDatabase,
    handled: HandledMessage,
) -> Result<CommitOutcome, StoreError> {
    let mut tx = database.pool().begin().await?;
    let mut wakes = Wakes::default();
    match commit_in(&mut tx, &handled, &mut wakes).await {
        Ok(outcome) => {
            tx.commit().await?;
            database.wake(wakes);
            Ok(outcome)
        }
        Err(err) => {
            let _ = tx.rollback().await;
            Err(err)
        }
    }
}

pub(super) async fn record_retry(
    database: &PostgresDatabase,
    consumer: &str,
    message_id: &str,
    received_broker_message_id: &str,
    attempt: AttemptRecord,
    retry: OutboundMessage,
    timeline: TimelineEntry,
) -> Result<(), StoreError> {
    let mut tx = database.pool().begin().await?;
    let mut wakes = Wakes::default();
    let fresh = query(
        "INSERT INTO bosun_attempts (consumer, received_broker_message_id, message_id, attempt, at, error_chain)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
    )
    .bind(consumer)
    .bind(received_broker_message_id)
    .bind(message_id)
    .bind(i64::from(attempt.attempt))
    .bind(attempt.at)
    .bind(Json(&attempt.error_chain))
    .execute(&mut *tx)
    .await?
    .rows_affected();
    // A redelivered attempt that was already recorded already has its retry in the outbox.
    if fresh > 0 {
        insert_outbox(
            &mut tx,
            Some(consumer),
            Some(message_id),
            OutboxPurpose::Retry,
            &retry,
            false,
        )
        .await?;
        insert_timeline(&mut tx, std::slice::from_ref(&timeline), &mut wakes).await?;
    }
    tx.commit().await?;
    database.wake(wakes);
    Ok(())
}

pub(super) async fn attempts(
    database: &PostgresDatabase,
    consumer: &str,
    message_id: &str,
) -> Result<Vec<AttemptRecord>, StoreError> {
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
        .collect()
}
