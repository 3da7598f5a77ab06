//! The outbox: messages to send, written with the handling that made them.

use std::time::Duration;

use bosun_contracts::Destination;
use rusqlite::{Connection, TransactionBehavior, params};

use super::SqliteStore;
use super::now_ms;
use super::timeline::{insert_delivery, insert_timeline};
use crate::backends::sqlite::undecodable;
use crate::ports::store::{AcceptedCommand, OutboxPurpose, PendingOutbox, StoreError};
use crate::ports::store::{OutboxStore, doing};
use crate::ports::transport::{OutboundMessage, duration_ms, from_unix_ms, unix_ms};

pub(super) fn insert_outbox(
    tx: &Connection,
    consumer: Option<&str>,
    message_id: Option<&str>,
    purpose: OutboxPurpose,
    message: &OutboundMessage,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO outbox (source_consumer, source_message_id, destination, broker_message_id, message_type,
                             correlation_id, body, scheduled_at, created_at, purpose)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        consumer,
        message_id,
        message.destination.path(),
        message.broker_message_id,
        message.message_type,
        message.correlation_id,
        message.body,
        message.scheduled_at.map(unix_ms),
        now_ms(),
        purpose.as_str()
    ])?;
    Ok(())
}

#[async_trait::async_trait]
impl OutboxStore for SqliteStore {
    async fn accept_command(&self, accepted: AcceptedCommand, lease: Duration) -> Result<i64, StoreError> {
        let doing = doing::accept_command(&accepted);
        let lines = self.waited_on([&accepted.timeline]);
        let run = async {
            let database = &self.database;
            database
                .call(move |conn| {
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    insert_delivery(&tx, &accepted.delivery)?;
                    insert_outbox(&tx, None, None, OutboxPurpose::Sent, &accepted.message)?;
                    let id = tx.last_insert_rowid();
                    tx.prepare_cached("UPDATE outbox SET claimed_until = ?1 WHERE id = ?2")?
                        .execute(params![now_ms() + duration_ms(lease), id])?;
                    insert_timeline(&tx, std::slice::from_ref(&accepted.timeline))?;
                    tx.commit()?;
                    Ok(id)
                })
                .await
        };
        let done = run.await.map_err(|err: StoreError| err.doing(doing))?;
        self.written(&lines);
        Ok(done)
    }

    async fn claim_outbox(&self, limit: usize, lease: Duration) -> Result<Vec<PendingOutbox>, StoreError> {
        let run = async {
            let database = &self.database;
            database
                .call(move |conn| {
                    let now = now_ms();
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let mut statement = tx.prepare_cached(
                        "UPDATE outbox SET claimed_until = ?1
                     WHERE id IN (SELECT id FROM outbox WHERE dispatched_at IS NULL
                                  AND (claimed_until IS NULL OR claimed_until <= ?2) ORDER BY id LIMIT ?3)
                     RETURNING id, destination, broker_message_id, message_type, correlation_id, body, scheduled_at,
                               source_message_id, purpose",
                    )?;
                    let mut pending = statement
                        .query_map(
                            params![now + duration_ms(lease), now, i64::try_from(limit).unwrap_or(i64::MAX)],
                            |row| {
                                let id = row.get(0)?;
                                let purpose = OutboxPurpose::decode(&row.get::<_, String>(8)?, id)
                                    .map_err(|err| undecodable(8, format!("purpose of outbox entry {id}"), err))?;
                                Ok(PendingOutbox {
                                    id,
                                    purpose,
                                    message: OutboundMessage {
                                        destination: Destination::parse(&row.get::<_, String>(1)?),
                                        broker_message_id: row.get(2)?,
                                        message_type: row.get(3)?,
                                        correlation_id: row.get(4)?,
                                        body: row.get(5)?,
                                        scheduled_at: row.get::<_, Option<i64>>(6)?.map(from_unix_ms),
                                    },
                                    message_id: row.get(7)?,
                                })
                            },
                        )?
                        .collect::<Result<Vec<_>, _>>()?;
                    drop(statement);
                    tx.commit()?;
                    pending.sort_by_key(|p| p.id);
                    Ok(pending)
                })
                .await
        };
        run.await.map_err(|err: StoreError| err.doing(doing::claim_outbox()))
    }

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError> {
        let run = async {
            let database = &self.database;
            let ids = ids.to_vec();
            database
                .call(move |conn| {
                    let now = now_ms();
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    for id in ids {
                        tx.prepare_cached("UPDATE outbox SET dispatched_at = ?1 WHERE id = ?2")?
                            .execute(params![now, id])?;
                    }
                    tx.commit()?;
                    Ok(())
                })
                .await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::mark_dispatched(ids)))
    }

    async fn outbox_backlog(&self) -> Result<u64, StoreError> {
        let run = async {
            let database = &self.database;
            database
                .call(|conn| {
                    let count: i64 = conn
                        .prepare_cached("SELECT COUNT(*) FROM outbox WHERE dispatched_at IS NULL")?
                        .query_row([], |row| row.get(0))?;
                    Ok(u64::try_from(count).unwrap_or_default())
                })
                .await
        };
        run.await.map_err(|err: StoreError| err.doing(doing::outbox_backlog()))
    }

    async fn emitted(&self, correlation_id: &str) -> Result<Vec<Vec<u8>>, StoreError> {
        let run = async {
            let database = &self.database;
            let correlation_id = correlation_id.to_owned();
            database
                .call(move |conn| {
                    let mut statement = conn.prepare_cached(
                        "SELECT body FROM outbox WHERE correlation_id = ?1 AND purpose <> 'retry' ORDER BY id",
                    )?;
                    let rows = statement.query_map([correlation_id], |row| row.get::<_, Vec<u8>>(0))?;
                    Ok(rows.collect::<Result<Vec<_>, _>>()?)
                })
                .await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::emitted(correlation_id)))
    }
}
