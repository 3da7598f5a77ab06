//! The delivery timeline and how each delivery started.

use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_postgres::{PgConnection, PgRow};

use super::attempt_number;
use crate::backends::postgres::PostgresDatabase;
use crate::ports::store::{DeliveryRecord, StoreError, TimelineEntry, TimelineStatus};

pub(crate) async fn insert_timeline(
    conn: &mut PgConnection,
    entries: &[TimelineEntry],
) -> Result<(), sqlx_core::Error> {
    for entry in entries {
        query(
            // The notification wakes timeline waits in every process
            // (`listen`) when the transaction commits.
            "WITH line AS (
                 INSERT INTO bosun_timeline (correlation_id, message_id, message_type, consumer, status, attempt, at, detail)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 RETURNING correlation_id
             )
             SELECT pg_notify('bosun_timeline', correlation_id) FROM line",
        )
        .bind(&entry.correlation_id)
        .bind(&entry.message_id)
        .bind(&entry.message_type)
        .bind(&entry.consumer)
        .bind(entry.status.as_str())
        .bind(i64::from(entry.attempt))
        .bind(entry.at)
        .bind(&entry.detail)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

pub(super) fn timeline_from_row(row: &PgRow) -> Result<TimelineEntry, StoreError> {
    let correlation_id: String = row.try_get(0)?;
    Ok(TimelineEntry {
        status: TimelineStatus::decode(&row.try_get::<String, _>(4)?, &correlation_id)?,
        correlation_id,
        message_id: row.try_get(1)?,
        message_type: row.try_get(2)?,
        consumer: row.try_get(3)?,
        attempt: attempt_number(row.try_get(5)?),
        at: row.try_get(6)?,
        detail: row.try_get(7)?,
    })
}

pub(super) const DELIVERY_COLUMNS: &str = "correlation_id, tenant_id, started_by, message_type, message_id, started_at";

pub(super) fn delivery_from_row(row: &PgRow) -> Result<DeliveryRecord, StoreError> {
    Ok(DeliveryRecord {
        correlation_id: row.try_get(0)?,
        tenant_id: row.try_get(1)?,
        started_by: row.try_get(2)?,
        message_type: row.try_get(3)?,
        message_id: row.try_get(4)?,
        started_at: row.try_get(5)?,
    })
}

pub(super) async fn append_timeline(
    database: &PostgresDatabase,
    entries: Vec<TimelineEntry>,
) -> Result<(), StoreError> {
    if entries.is_empty() {
        return Ok(());
    }
    let mut tx = database.pool().begin().await?;
    insert_timeline(&mut tx, &entries).await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn timeline(
    database: &PostgresDatabase,
    correlation_id: &str,
) -> Result<Vec<TimelineEntry>, StoreError> {
    let rows = query(
        "SELECT correlation_id, message_id, message_type, consumer, status, attempt, at, detail
         FROM bosun_timeline WHERE correlation_id = $1 ORDER BY id",
    )
    .bind(correlation_id)
    .fetch_all(database.pool())
    .await?;
    rows.iter().map(timeline_from_row).collect()
}

pub(super) async fn record_delivery(database: &PostgresDatabase, record: DeliveryRecord) -> Result<(), StoreError> {
    query(
        "INSERT INTO bosun_deliveries (correlation_id, tenant_id, started_by, message_type, message_id, started_at)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
    )
    .bind(&record.correlation_id)
    .bind(&record.tenant_id)
    .bind(&record.started_by)
    .bind(&record.message_type)
    .bind(&record.message_id)
    .bind(record.started_at)
    .execute(database.pool())
    .await?;
    Ok(())
}

pub(super) async fn delivery_record(
    database: &PostgresDatabase,
    correlation_id: &str,
) -> Result<Option<DeliveryRecord>, StoreError> {
    let row = query(sqlx_core::sql_str::AssertSqlSafe(format!(
        "SELECT {DELIVERY_COLUMNS} FROM bosun_deliveries WHERE correlation_id = $1"
    )))
    .bind(correlation_id)
    .fetch_optional(database.pool())
    .await?;
    row.as_ref().map(delivery_from_row).transpose()
}

pub(super) async fn list_deliveries(
    database: &PostgresDatabase,
    tenant_id: Option<&str>,
    limit: usize,
) -> Result<Vec<DeliveryRecord>, StoreError> {
    let rows = query(sqlx_core::sql_str::AssertSqlSafe(format!(
        "SELECT {DELIVERY_COLUMNS} FROM bosun_deliveries WHERE ($1::text IS NULL OR tenant_id = $1)
         ORDER BY started_at DESC, seq DESC LIMIT $2"
    )))
    .bind(tenant_id)
    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
    .fetch_all(database.pool())
    .await?;
    rows.iter().map(delivery_from_row).collect()
}
