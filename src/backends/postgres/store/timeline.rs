//! The delivery timeline and how each delivery started.

use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_postgres::{PgConnection, PgRow};

use super::PostgresStore;
use super::attempt_number;
use crate::backends::postgres::notify::Wakes;
use crate::ports::store::{DeliveryRecord, StoreError, TimelineEntry, TimelineStatus};
use crate::ports::store::{DeliveryStore, TimelineStore, TimelineWait, doing};

/// Writes `entries` in one statement; the timeline waits of their
/// deliveries are woken through `wakes` once the caller's transaction
/// commits.
pub(crate) async fn insert_timeline(
    conn: &mut PgConnection,
    entries: &[TimelineEntry],
    wakes: &mut Wakes,
) -> Result<(), sqlx_core::Error> {
    if entries.is_empty() {
        return Ok(());
    }
    let columns = TimelineColumns::of(entries);
    query(
        "INSERT INTO bosun_timeline (correlation_id, message_id, message_type, consumer, status, attempt, at, detail)
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[],
                              $7::timestamptz[], $8::text[])",
    )
    .bind(&columns.correlation_ids)
    .bind(&columns.message_ids)
    .bind(&columns.message_types)
    .bind(&columns.consumers)
    .bind(&columns.statuses)
    .bind(&columns.attempts)
    .bind(&columns.at)
    .bind(&columns.details)
    .execute(&mut *conn)
    .await?;
    for entry in entries {
        wakes.timeline(entry.correlation_id.as_str());
    }
    Ok(())
}

/// Timeline lines as one array per column, for `unnest`.
pub(crate) struct TimelineColumns<'a> {
    pub(crate) correlation_ids: Vec<&'a str>,
    pub(crate) message_ids: Vec<&'a str>,
    pub(crate) message_types: Vec<&'a str>,
    pub(crate) consumers: Vec<Option<&'a str>>,
    pub(crate) statuses: Vec<&'static str>,
    pub(crate) attempts: Vec<i64>,
    pub(crate) at: Vec<time::OffsetDateTime>,
    pub(crate) details: Vec<Option<&'a str>>,
}

impl<'a> TimelineColumns<'a> {
    /// The columns of `entries`, in order (those of several commits, one
    /// after the other, for a batch).
    pub(crate) fn of(entries: impl IntoIterator<Item = &'a TimelineEntry>) -> Self {
        let mut columns = Self {
            correlation_ids: Vec::new(),
            message_ids: Vec::new(),
            message_types: Vec::new(),
            consumers: Vec::new(),
            statuses: Vec::new(),
            attempts: Vec::new(),
            at: Vec::new(),
            details: Vec::new(),
        };
        for line in entries {
            columns.correlation_ids.push(line.correlation_id.as_str());
            columns.message_ids.push(line.message_id.as_str());
            columns.message_types.push(line.message_type.as_str());
            columns.consumers.push(line.consumer.as_deref());
            columns.statuses.push(line.status.as_str());
            columns.attempts.push(i64::from(line.attempt));
            columns.at.push(line.at);
            columns.details.push(line.detail.as_deref());
        }
        columns
    }
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

pub(super) const DELIVERY_COLUMNS: &str =
    "correlation_id, tenant_id, started_by, message_type, message_id, started_at, traceparent, tracestate";

pub(super) fn delivery_from_row(row: &PgRow) -> Result<DeliveryRecord, StoreError> {
    Ok(DeliveryRecord {
        correlation_id: row.try_get(0)?,
        tenant_id: row.try_get(1)?,
        started_by: row.try_get(2)?,
        message_type: row.try_get(3)?,
        message_id: row.try_get(4)?,
        started_at: row.try_get(5)?,
        traceparent: row.try_get(6)?,
        tracestate: row.try_get(7)?,
    })
}

/// Records a delivery, kept as it is when it exists.
pub(super) async fn insert_delivery(conn: &mut PgConnection, record: &DeliveryRecord) -> Result<(), sqlx_core::Error> {
    query(
        "INSERT INTO bosun_deliveries
             (correlation_id, tenant_id, started_by, message_type, message_id, started_at, traceparent, tracestate)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
    )
    .bind(&record.correlation_id)
    .bind(&record.tenant_id)
    .bind(&record.started_by)
    .bind(&record.message_type)
    .bind(&record.message_id)
    .bind(record.started_at)
    .bind(&record.traceparent)
    .bind(&record.tracestate)
    .execute(conn)
    .await?;
    Ok(())
}

#[async_trait::async_trait]
impl TimelineStore for PostgresStore {
    async fn append_timeline(&self, entries: Vec<TimelineEntry>) -> Result<(), StoreError> {
        let run = async {
            let database = &self.database;
            if entries.is_empty() {
                return Ok(());
            }
            // One statement: atomic on its own.
            let mut conn = database.pool().acquire().await?;
            let mut wakes = Wakes::default();
            insert_timeline(&mut conn, &entries, &mut wakes).await?;
            drop(conn);
            database.wake(wakes);
            Ok(())
        };
        run.await.map_err(|err: StoreError| err.doing(doing::append_timeline()))
    }

    async fn timeline(&self, correlation_id: &str) -> Result<Vec<TimelineEntry>, StoreError> {
        let run = async {
            let database = &self.database;
            let rows = query(
                "SELECT correlation_id, message_id, message_type, consumer, status, attempt, at, detail
             FROM bosun_timeline WHERE correlation_id = $1 ORDER BY id",
            )
            .bind(correlation_id)
            .fetch_all(database.pool())
            .await?;
            rows.iter()
                .map(timeline_from_row)
                .collect::<Result<Vec<_>, StoreError>>()
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::timeline(correlation_id)))
    }

    fn watch_timeline(&self, correlation_id: &str) -> TimelineWait {
        self.timeline.start(self.database.pool());
        self.timeline.watch.subscribe(correlation_id)
    }
}

#[async_trait::async_trait]
impl DeliveryStore for PostgresStore {
    async fn record_delivery(&self, record: DeliveryRecord) -> Result<(), StoreError> {
        let doing = doing::record_delivery(&record);
        let run = async {
            let database = &self.database;
            let mut conn = database.pool().acquire().await?;
            insert_delivery(&mut conn, &record).await?;
            Ok(())
        };
        run.await.map_err(|err: StoreError| err.doing(doing))
    }

    async fn delivery_record(&self, correlation_id: &str) -> Result<Option<DeliveryRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            let row = query(sqlx_core::sql_str::AssertSqlSafe(format!(
                "SELECT {DELIVERY_COLUMNS} FROM bosun_deliveries WHERE correlation_id = $1"
            )))
            .bind(correlation_id)
            .fetch_optional(database.pool())
            .await?;
            row.as_ref().map(delivery_from_row).transpose()
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::delivery_record(correlation_id)))
    }

    async fn list_deliveries(&self, tenant_id: Option<&str>, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            let rows = query(sqlx_core::sql_str::AssertSqlSafe(format!(
                "SELECT {DELIVERY_COLUMNS} FROM bosun_deliveries WHERE ($1::text IS NULL OR tenant_id = $1)
             ORDER BY started_at DESC, seq DESC LIMIT $2"
            )))
            .bind(tenant_id)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(database.pool())
            .await?;
            rows.iter()
                .map(delivery_from_row)
                .collect::<Result<Vec<_>, StoreError>>()
        };
        run.await.map_err(|err: StoreError| err.doing(doing::list_deliveries()))
    }

    async fn deliveries_by_prefix(
        &self,
        prefix: &str,
        tenant_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            // `starts_with` compares literally: no character is a wildcard.
            let rows = query(sqlx_core::sql_str::AssertSqlSafe(format!(
                "SELECT {DELIVERY_COLUMNS} FROM bosun_deliveries
             WHERE starts_with(correlation_id, $1) AND ($2::text IS NULL OR tenant_id = $2)
             ORDER BY correlation_id COLLATE \"C\" LIMIT $3"
            )))
            .bind(prefix)
            .bind(tenant_id)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(database.pool())
            .await?;
            rows.iter()
                .map(delivery_from_row)
                .collect::<Result<Vec<_>, StoreError>>()
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::deliveries_by_prefix(prefix)))
    }
}
