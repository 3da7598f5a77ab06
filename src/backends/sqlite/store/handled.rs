//! Idempotency, the atomic commit of a handled message, and retries.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::SqliteStore;
use super::now_ms;
use super::outbox::insert_outbox;
use super::timeline::insert_timeline;
use crate::ports::store::{
    AttemptRecord, CommitOutcome, HandledMessage, OutboxPurpose, RetryWrite, SagaState, StoreError,
};
use crate::ports::store::{HandledStore, doing};
use crate::ports::transport::{from_unix_ms, unix_ms};

fn handled_on(conn: &Connection, consumer: &str, message_id: &str) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM handled WHERE consumer = ?1 AND message_id = ?2")?
        .query_row(params![consumer, message_id], |_| Ok(()))
        .optional()?
        .is_some())
}

#[async_trait::async_trait]
impl HandledStore for SqliteStore {
    async fn is_handled(&self, consumer: &str, message_id: &str) -> Result<bool, StoreError> {
        let run = async {
            let database = &self.database;
            let (consumer, message_id) = (consumer.to_owned(), message_id.to_owned());
            database
                .read(move |conn| handled_on(conn, &consumer, &message_id))
                .await
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
            let (consumer, message_id) = (consumer.to_owned(), message_id.to_owned());
            let saga = saga.map(|(kind, key)| (kind.to_owned(), key.to_owned()));
            database
                .read(move |conn| {
                    if handled_on(conn, &consumer, &message_id)? {
                        return Ok((true, None));
                    }
                    match &saga {
                        Some((kind, key)) => Ok((false, super::sagas::saga_state(conn, kind, key)?)),
                        None => Ok((false, None)),
                    }
                })
                .await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::is_handled(consumer, message_id)))
    }

    async fn commit_handled(&self, handled: HandledMessage) -> Result<CommitOutcome, StoreError> {
        let doing = doing::commit_handled(&handled);
        let lines = self.waited_on(&handled.timeline);
        let run = async {
            let database = &self.database;
            // A write of its own in the shared transaction: handlers committing at
            // the same moment commit together (one SQLite transaction), each in a
            // savepoint, so a conflict rolls back only its own.
            database
            .write(move |tx| {
                let now = now_ms();
                let fresh = tx.prepare_cached("INSERT OR IGNORE INTO handled (consumer, message_id, handled_at) VALUES (?1, ?2, ?3)")?.execute(params![handled.consumer, handled.message_id, now])?;
                if fresh == 0 {
                    return Ok(CommitOutcome::AlreadyHandled);
                }
                if let Some(saga) = &handled.saga {
                    let found: i64 = tx.prepare_cached("SELECT version FROM sagas WHERE kind = ?1 AND key = ?2")?.query_row(params![saga.kind, saga.key],
                            |row| row.get(0),
                        )
                        .optional()?
                        .unwrap_or(0);
                    if found != saga.expected_version {
                        return Err(StoreError::SagaConflict {
                            kind: saga.kind.clone(),
                            key: saga.key.clone(),
                            expected: saga.expected_version,
                            found,
                        });
                    }
                    let version = found + 1;
                    let state = serde_json::to_string(&saga.state).map_err(|err| {
                        StoreError::unencodable(format!("state of saga {}/{}", saga.kind, saga.key), err)
                    })?;
                    // The tenant is kept from the first save (one made before
                    // tenants were kept takes the next one's).
                    tx.prepare_cached("INSERT INTO sagas (kind, key, version, state, created_at, updated_at, tenant_id)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)
                         ON CONFLICT (kind, key) DO UPDATE SET version = excluded.version, state = excluded.state,
                            updated_at = excluded.updated_at, tenant_id = coalesce(sagas.tenant_id, excluded.tenant_id)")?.execute(params![saga.kind, saga.key, version, state, now, saga.tenant_id])?;
                    tx.prepare_cached("INSERT INTO saga_history (kind, key, version, message_id, message_type, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?.execute(params![saga.kind, saga.key, version, handled.message_id, handled.message_type, now])?;
                }
                for message in &handled.outbox {
                    insert_outbox(
                            tx,
                            Some(&handled.consumer),
                            Some(&handled.message_id),
                            OutboxPurpose::Emitted,
                            message,
                        )?;
                }
                insert_timeline(tx, &handled.timeline)?;
                Ok(CommitOutcome::Committed)
            })
            .await
        };
        let done = run.await.map_err(|err: StoreError| err.doing(doing))?;
        self.written(&lines);
        Ok(done)
    }

    async fn record_retry(&self, retry: RetryWrite) -> Result<(), StoreError> {
        let doing = doing::record_retry(&retry.consumer, &retry.message_id);
        let line = self.waited_on([&retry.timeline]);
        let run = async {
            let database = &self.database;
            let write = retry;
            database
            .call(move |conn| {
                let RetryWrite {
                    consumer,
                    message_id,
                    received_broker_message_id,
                    attempt,
                    retry,
                    timeline,
                } = write;
                let error_chain = serde_json::to_string(&attempt.error_chain)
                    .map_err(|err| StoreError::unencodable("the error chain of an attempt", err))?;
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let fresh = tx.prepare_cached("INSERT OR IGNORE INTO attempts (consumer, received_broker_message_id, message_id, attempt, at, error_chain)
                     VALUES (?1, ?6, ?2, ?3, ?4, ?5)")?.execute(params![
                        consumer,
                        message_id,
                        attempt.attempt,
                        unix_ms(attempt.at),
                        error_chain,
                        received_broker_message_id
                    ])?;
                // A redelivered attempt that was already recorded already has its retry in the outbox.
                if fresh > 0 {
                    insert_outbox(&tx, Some(&consumer), Some(&message_id), OutboxPurpose::Retry, &retry)?;
                    insert_timeline(&tx, std::slice::from_ref(&timeline))?;
                }
                tx.commit()?;
                Ok(())
            })
            .await
        };
        run.await.map_err(|err: StoreError| err.doing(doing))?;
        self.written(&line);
        Ok(())
    }

    async fn attempts(&self, consumer: &str, message_id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            let (consumer, message_id) = (consumer.to_owned(), message_id.to_owned());
            database
            .call(move |conn| {
                let mut statement = conn.prepare_cached(
                    "SELECT attempt, at, error_chain FROM attempts WHERE consumer = ?1 AND message_id = ?2 ORDER BY at, attempt",
                )?;
                let rows = statement.query_map(params![consumer, message_id], |row| {
                    Ok((row.get::<_, u32>(0)?, row.get::<_, i64>(1)?, row.get::<_, String>(2)?))
                })?;
                let mut attempts = Vec::new();
                for row in rows {
                    let (attempt, at, chain) = row?;
                    attempts.push(AttemptRecord {
                        attempt,
                        at: from_unix_ms(at),
                        error_chain: serde_json::from_str(&chain).map_err(|err| {
                            StoreError::corrupt(
                                format!("error chain of attempt {attempt} of message {message_id} at {consumer}"),
                                err,
                            )
                        })?,
                    });
                }
                Ok(attempts)
            })
            .await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::attempts(consumer, message_id)))
    }
}
