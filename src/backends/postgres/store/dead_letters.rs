//! Dead letters: messages that could not be processed, kept whole, and their replays.

use bosun_contracts::Destination;
use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_core::types::Json;
use sqlx_postgres::{PgConnection, PgRow};
use uuid::Uuid;

use super::PostgresStore;
use super::timeline::insert_timeline;
use crate::backends::postgres::notify::Wakes;
use crate::ports::store::{
    AttemptRecord, DeadLetterFilter, DeadLetterRecord, DeadLetterStatus, IdLookup, ReplayRecord, StoreError,
    TimelineEntry,
};
use crate::ports::store::{DeadLetterStore, doing};

pub(super) const DEAD_LETTER_COLUMNS: &str =
    "id, consumer, entity, transport_sequence, broker_message_id, message_id, message_type,
    correlation_id, tenant_id, body, reason, description, error_chain, attempts, dead_lettered_at, origin, replays";

pub(super) fn dead_letter_from_row(row: &PgRow) -> Result<DeadLetterRecord, StoreError> {
    let id: Uuid = row.try_get(0)?;
    let corrupt = |what: &str| {
        let what = format!("{what} of dead letter {id}");
        move |err| StoreError::corrupt(what, err)
    };
    let Json(error_chain): Json<Vec<String>> = row.try_get(12).map_err(corrupt("error chain"))?;
    let Json(attempts): Json<Vec<AttemptRecord>> = row.try_get(13).map_err(corrupt("attempts"))?;
    let Json(replays): Json<Vec<ReplayRecord>> = row.try_get(16).map_err(corrupt("replays"))?;
    Ok(DeadLetterRecord {
        id,
        consumer: row.try_get(1)?,
        entity: row.try_get(2)?,
        transport_sequence: row.try_get(3)?,
        broker_message_id: row.try_get(4)?,
        message_id: row.try_get(5)?,
        message_type: row.try_get(6)?,
        correlation_id: row.try_get(7)?,
        tenant_id: row.try_get(8)?,
        body: row.try_get(9)?,
        reason: row.try_get(10)?,
        description: row.try_get(11)?,
        error_chain,
        attempts,
        dead_lettered_at: row.try_get(14)?,
        origin: row.try_get(15)?,
        status: if replays.is_empty() {
            DeadLetterStatus::Dead
        } else {
            DeadLetterStatus::Replayed
        },
        replays,
    })
}

/// [`record_dead_letter`]'s writes on `conn`, inside a transaction the
/// caller commits (with the received message's dead-lettering, for the
/// settle of the PostgreSQL backends); what they wake goes to `wakes`.
pub(crate) async fn record_dead_letter_in(
    conn: &mut PgConnection,
    record: &DeadLetterRecord,
    timeline: Option<&TimelineEntry>,
    wakes: &mut Wakes,
) -> Result<(), StoreError> {
    let inserted = query(
        "INSERT INTO bosun_dead_letters (id, consumer, entity, transport_sequence, broker_message_id, message_id,
            message_type, correlation_id, tenant_id, body, reason, description, error_chain, attempts,
            dead_lettered_at, origin, replays)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
         ON CONFLICT DO NOTHING",
    )
    .bind(record.id)
    .bind(&record.consumer)
    .bind(&record.entity)
    .bind(record.transport_sequence)
    .bind(&record.broker_message_id)
    .bind(&record.message_id)
    .bind(&record.message_type)
    .bind(&record.correlation_id)
    .bind(&record.tenant_id)
    .bind(&record.body)
    .bind(&record.reason)
    .bind(&record.description)
    .bind(Json(&record.error_chain))
    .bind(Json(&record.attempts))
    .bind(record.dead_lettered_at)
    .bind(&record.origin)
    .bind(Json(&record.replays))
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if let Some(entry) = timeline.filter(|_| inserted > 0) {
        insert_timeline(conn, std::slice::from_ref(entry), wakes).await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl DeadLetterStore for PostgresStore {
    async fn record_dead_letter(
        &self,
        record: DeadLetterRecord,
        timeline: Option<TimelineEntry>,
    ) -> Result<(), StoreError> {
        let doing = doing::record_dead_letter(&record);
        let run = async {
            let database = &self.database;
            let mut tx = database.pool().begin().await?;
            let mut wakes = Wakes::default();
            record_dead_letter_in(&mut tx, &record, timeline.as_ref(), &mut wakes).await?;
            tx.commit().await?;
            database.wake(wakes);
            Ok(())
        };
        run.await.map_err(|err: StoreError| err.doing(doing))
    }

    async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetterRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            let rows = query(sqlx_core::sql_str::AssertSqlSafe(format!(
                "SELECT {DEAD_LETTER_COLUMNS} FROM bosun_dead_letters
             WHERE ($1::text IS NULL OR consumer = $1) AND ($2::text IS NULL OR message_type = $2)
               AND ($3::timestamptz IS NULL OR dead_lettered_at >= $3) AND ($4 OR replays = '[]'::jsonb)
               AND ($5::text IS NULL OR tenant_id = $5) AND ($6::text IS NULL OR reason = $6)
             ORDER BY dead_lettered_at DESC, id DESC
             LIMIT $7"
            )))
            .bind(&filter.consumer)
            .bind(&filter.message_type)
            .bind(filter.since)
            .bind(filter.include_replayed)
            .bind(&filter.tenant_id)
            .bind(&filter.reason)
            // NULL: no limit.
            .bind(filter.limit.map(|limit| i64::try_from(limit).unwrap_or(i64::MAX)))
            .fetch_all(database.pool())
            .await?;
            rows.iter()
                .map(dead_letter_from_row)
                .collect::<Result<Vec<_>, StoreError>>()
        };
        run.await.map_err(|err: StoreError| err.doing(doing::dead_letters()))
    }

    async fn dead_letter(&self, id: &str, tenant_id: Option<&str>) -> Result<DeadLetterRecord, StoreError> {
        let run = async {
            let database = &self.database;
            let lookup = IdLookup::dead_letter(id);
            let Some(prefix) = lookup.prefix.as_deref() else {
                return Err(lookup.not_found());
            };
            // `starts_with` compares literally: no character is a wildcard.
            let rows = query(sqlx_core::sql_str::AssertSqlSafe(format!(
                "SELECT {DEAD_LETTER_COLUMNS} FROM bosun_dead_letters
             WHERE starts_with(id::text, $1) AND ($2::text IS NULL OR tenant_id = $2)
             ORDER BY id LIMIT $3"
            )))
            .bind(prefix)
            .bind(tenant_id)
            .bind(i64::try_from(IdLookup::LIMIT).unwrap_or(i64::MAX))
            .fetch_all(database.pool())
            .await?;
            let found = rows.iter().map(dead_letter_from_row).collect::<Result<Vec<_>, _>>()?;
            lookup.pick(found, |record| record.id.to_string())
        };
        run.await.map_err(|err: StoreError| err.doing(doing::dead_letter(id)))
    }

    async fn dead_letter_for(
        &self,
        entity: &Destination,
        sequence: i64,
    ) -> Result<Option<DeadLetterRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            let row = query(sqlx_core::sql_str::AssertSqlSafe(format!(
                "SELECT {DEAD_LETTER_COLUMNS} FROM bosun_dead_letters WHERE entity = $1 AND transport_sequence = $2"
            )))
            .bind(entity.path())
            .bind(sequence)
            .fetch_optional(database.pool())
            .await?;
            row.as_ref().map(dead_letter_from_row).transpose()
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::dead_letter_for(entity, sequence)))
    }

    async fn record_replay(
        &self,
        id: Uuid,
        replay: ReplayRecord,
        timeline: Option<TimelineEntry>,
    ) -> Result<(), StoreError> {
        let run = async {
            let database = &self.database;
            let mut tx = database.pool().begin().await?;
            let mut wakes = Wakes::default();
            let updated =
                query("UPDATE bosun_dead_letters SET replays = replays || jsonb_build_array($2::jsonb) WHERE id = $1")
                    .bind(id)
                    .bind(Json(&replay))
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            if updated == 0 {
                return Err(StoreError::NotFound {
                    what: "dead letter",
                    id: id.to_string(),
                });
            }
            if let Some(entry) = &timeline {
                insert_timeline(&mut tx, std::slice::from_ref(entry), &mut wakes).await?;
            }
            tx.commit().await?;
            database.wake(wakes);
            Ok(())
        };
        run.await.map_err(|err: StoreError| err.doing(doing::record_replay(id)))
    }

    async fn purge_dead_letter(&self, id: Uuid) -> Result<(), StoreError> {
        let run = async {
            let database = &self.database;
            let deleted = query("DELETE FROM bosun_dead_letters WHERE id = $1")
                .bind(id)
                .execute(database.pool())
                .await?
                .rows_affected();
            if deleted == 0 {
                return Err(StoreError::NotFound {
                    what: "dead letter",
                    id: id.to_string(),
                });
            }
            Ok(())
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::purge_dead_letter(id)))
    }
}
