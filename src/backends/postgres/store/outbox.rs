//! The outbox: messages to send, written with the handling that made them.

use std::time::Duration;

use bosun_contracts::Destination;
use sqlx_core::query::query;
use sqlx_core::query_scalar::query_scalar;
use sqlx_core::row::Row;
use sqlx_postgres::PgConnection;

use super::PostgresStore;
use super::timeline::{insert_delivery, insert_timeline};
use crate::backends::postgres::notify::Wakes;
use crate::ports::store::{AcceptedCommand, OutboxPurpose, PendingOutbox, StoreError};
use crate::ports::store::{OutboxStore, doing};
use crate::ports::transport::{OutboundMessage, duration_ms};

pub(crate) async fn insert_outbox(
    conn: &mut PgConnection,
    consumer: Option<&str>,
    message_id: Option<&str>,
    purpose: OutboxPurpose,
    message: &OutboundMessage,
    dispatched: bool,
) -> Result<(), sqlx_core::Error> {
    query(
        "INSERT INTO bosun_outbox (source_consumer, source_message_id, destination, broker_message_id, message_type,
                                   correlation_id, body, scheduled_at, dispatched_at, purpose)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $9 THEN now() END, $10)",
    )
    .bind(consumer)
    .bind(message_id)
    .bind(message.destination.path())
    .bind(&message.broker_message_id)
    .bind(&message.message_type)
    .bind(&message.correlation_id)
    .bind(&message.body)
    .bind(message.scheduled_at)
    .bind(dispatched)
    .bind(purpose.as_str())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

#[async_trait::async_trait]
impl OutboxStore for PostgresStore {
    async fn accept_command(&self, accepted: AcceptedCommand, lease: Duration) -> Result<i64, StoreError> {
        let doing = doing::accept_command(&accepted);
        let run = async {
            let database = &self.database;
            let mut tx = database.pool().begin().await?;
            insert_delivery(&mut tx, &accepted.delivery).await?;
            let message = &accepted.message;
            let id: i64 = query_scalar(
            "INSERT INTO bosun_outbox (source_consumer, source_message_id, destination, broker_message_id, message_type,
                                       correlation_id, body, scheduled_at, claimed_until, purpose)
             VALUES (NULL, NULL, $1, $2, $3, $4, $5, $6, now() + $7::bigint * interval '1 millisecond', $8)
             RETURNING id",
        )
        .bind(message.destination.path())
        .bind(&message.broker_message_id)
        .bind(&message.message_type)
        .bind(&message.correlation_id)
        .bind(&message.body)
        .bind(message.scheduled_at)
        .bind(duration_ms(lease))
        .bind(OutboxPurpose::Sent.as_str())
        .fetch_one(&mut *tx)
        .await?;
            let mut wakes = Wakes::default();
            insert_timeline(&mut tx, std::slice::from_ref(&accepted.timeline), &mut wakes).await?;
            tx.commit().await?;
            database.wake(wakes);
            Ok(id)
        };
        run.await.map_err(|err: StoreError| err.doing(doing))
    }

    async fn claim_outbox(&self, limit: usize, lease: Duration) -> Result<Vec<PendingOutbox>, StoreError> {
        let run = async {
            let database = &self.database;
            let rows = query(
                "WITH candidates AS MATERIALIZED (
                SELECT id FROM bosun_outbox
                WHERE dispatched_at IS NULL AND (claimed_until IS NULL OR claimed_until <= now())
                ORDER BY id
                LIMIT $1
                FOR UPDATE SKIP LOCKED
             )
             UPDATE bosun_outbox AS o SET claimed_until = now() + $2::bigint * interval '1 millisecond'
             FROM candidates
             WHERE o.id = candidates.id
             RETURNING o.id, o.destination, o.broker_message_id, o.message_type, o.correlation_id, o.body,
                       o.scheduled_at, o.source_message_id, o.purpose",
            )
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(duration_ms(lease))
            .fetch_all(database.pool())
            .await?;
            let mut pending = rows
                .iter()
                .map(|row| {
                    let id = row.try_get(0)?;
                    Ok(PendingOutbox {
                        id,
                        purpose: OutboxPurpose::decode(&row.try_get::<String, _>(8)?, id)?,
                        message: OutboundMessage {
                            destination: Destination::parse(&row.try_get::<String, _>(1)?),
                            broker_message_id: row.try_get(2)?,
                            message_type: row.try_get(3)?,
                            correlation_id: row.try_get(4)?,
                            body: row.try_get(5)?,
                            scheduled_at: row.try_get(6)?,
                        },
                        message_id: row.try_get(7)?,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            pending.sort_by_key(|p| p.id);
            Ok(pending)
        };
        run.await.map_err(|err: StoreError| err.doing(doing::claim_outbox()))
    }

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError> {
        let run = async {
            let database = &self.database;
            query("UPDATE bosun_outbox SET dispatched_at = now() WHERE id = ANY ($1)")
                .bind(ids)
                .execute(database.pool())
                .await?;
            Ok(())
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::mark_dispatched(ids)))
    }

    async fn outbox_backlog(&self) -> Result<u64, StoreError> {
        let run = async {
            let database = &self.database;
            let count: i64 = query_scalar("SELECT count(*) FROM bosun_outbox WHERE dispatched_at IS NULL")
                .fetch_one(database.pool())
                .await?;
            Ok(u64::try_from(count).unwrap_or_default())
        };
        run.await.map_err(|err: StoreError| err.doing(doing::outbox_backlog()))
    }

    async fn emitted(&self, correlation_id: &str) -> Result<Vec<Vec<u8>>, StoreError> {
        let run = async {
            let database = &self.database;
            Ok(query_scalar(
                "SELECT body FROM bosun_outbox WHERE correlation_id = $1 AND purpose <> 'retry' ORDER BY id",
            )
            .bind(correlation_id)
            .fetch_all(database.pool())
            .await?)
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::emitted(correlation_id)))
    }
}
