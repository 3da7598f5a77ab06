//! The delivery timeline and how each delivery started.

use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use super::SqliteStore;
use crate::backends::sqlite::undecodable;
use crate::ports::store::{DeliveryRecord, StoreError, TimelineEntry, TimelineStatus};
use crate::ports::store::{DeliveryStore, TimelineStore, TimelineWait, doing};
use crate::ports::transport::{from_unix_ms, unix_ms};

pub(super) fn insert_timeline(tx: &Connection, entries: &[TimelineEntry]) -> rusqlite::Result<()> {
    for entry in entries {
        tx.prepare_cached(
            "INSERT INTO timeline (correlation_id, message_id, message_type, consumer, status, attempt, at, detail)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![
            entry.correlation_id,
            entry.message_id,
            entry.message_type,
            entry.consumer,
            entry.status.as_str(),
            entry.attempt,
            unix_ms(entry.at),
            entry.detail
        ])?;
    }
    Ok(())
}

pub(super) const DELIVERY_COLUMNS: &str =
    "correlation_id, tenant_id, started_by, message_type, message_id, started_at, traceparent, tracestate";

pub(super) fn delivery_from_row(row: &Row<'_>) -> rusqlite::Result<DeliveryRecord> {
    Ok(DeliveryRecord {
        correlation_id: row.get(0)?,
        tenant_id: row.get(1)?,
        started_by: row.get(2)?,
        message_type: row.get(3)?,
        message_id: row.get(4)?,
        started_at: from_unix_ms(row.get(5)?),
        traceparent: row.get(6)?,
        tracestate: row.get(7)?,
    })
}

/// Records a delivery, kept as it is when it exists.
pub(super) fn insert_delivery(conn: &Connection, record: &DeliveryRecord) -> rusqlite::Result<()> {
    conn.prepare_cached(&format!(
        "INSERT OR IGNORE INTO deliveries ({DELIVERY_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
    ))?
    .execute(params![
        record.correlation_id,
        record.tenant_id,
        record.started_by,
        record.message_type,
        record.message_id,
        unix_ms(record.started_at),
        record.traceparent,
        record.tracestate
    ])?;
    Ok(())
}

#[async_trait::async_trait]
impl TimelineStore for SqliteStore {
    async fn append_timeline(&self, entries: Vec<TimelineEntry>) -> Result<(), StoreError> {
        let lines = self.waited_on(&entries);
        let run = async {
            let database = &self.database;
            database
                .call(move |conn| {
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    insert_timeline(&tx, &entries)?;
                    tx.commit()?;
                    Ok(())
                })
                .await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::append_timeline()))?;
        self.written(&lines);
        Ok(())
    }

    async fn timeline(&self, correlation_id: &str) -> Result<Vec<TimelineEntry>, StoreError> {
        let run = async {
            let database = &self.database;
            let correlation_id = correlation_id.to_owned();
            database
                .call(move |conn| {
                    let mut statement = conn.prepare_cached(
                        "SELECT correlation_id, message_id, message_type, consumer, status, attempt, at, detail
                     FROM timeline WHERE correlation_id = ?1 ORDER BY id",
                    )?;
                    let rows = statement.query_map([correlation_id], |row| {
                        Ok(TimelineEntry {
                            correlation_id: row.get(0)?,
                            message_id: row.get(1)?,
                            message_type: row.get(2)?,
                            consumer: row.get(3)?,
                            status: {
                                let correlation_id: String = row.get(0)?;
                                TimelineStatus::decode(&row.get::<_, String>(4)?, &correlation_id)
                                    .map_err(|err| undecodable(4, "status of a timeline line", err))?
                            },
                            attempt: row.get(5)?,
                            at: from_unix_ms(row.get(6)?),
                            detail: row.get(7)?,
                        })
                    })?;
                    Ok(rows.collect::<Result<Vec<_>, _>>()?)
                })
                .await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::timeline(correlation_id)))
    }

    fn watch_timeline(&self, correlation_id: &str) -> TimelineWait {
        self.watch.subscribe(correlation_id)
    }
}

#[async_trait::async_trait]
impl DeliveryStore for SqliteStore {
    async fn record_delivery(&self, record: DeliveryRecord) -> Result<(), StoreError> {
        let doing = doing::record_delivery(&record);
        let run = async {
            let database = &self.database;
            database
                .call(move |conn| {
                    insert_delivery(conn, &record)?;
                    Ok(())
                })
                .await
        };
        run.await.map_err(|err: StoreError| err.doing(doing))
    }

    async fn delivery_record(&self, correlation_id: &str) -> Result<Option<DeliveryRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            let correlation_id = correlation_id.to_owned();
            database
                .call(move |conn| {
                    Ok(conn
                        .query_row(
                            &format!("SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE correlation_id = ?1"),
                            [correlation_id],
                            delivery_from_row,
                        )
                        .optional()?)
                })
                .await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::delivery_record(correlation_id)))
    }

    async fn list_deliveries(&self, tenant_id: Option<&str>, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            let tenant_id = tenant_id.map(str::to_owned);
            database
                .call(move |conn| {
                    let mut statement = conn.prepare_cached(&format!(
                        "SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE (?1 IS NULL OR tenant_id = ?1)
                     ORDER BY started_at DESC, rowid DESC LIMIT ?2"
                    ))?;
                    let rows = statement.query_map(
                        params![tenant_id, i64::try_from(limit).unwrap_or(i64::MAX)],
                        delivery_from_row,
                    )?;
                    Ok(rows.collect::<Result<Vec<_>, _>>()?)
                })
                .await
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
            let (prefix, tenant_id) = (prefix.to_owned(), tenant_id.map(str::to_owned));
            database
                .call(move |conn| {
                    // `substr` compares literally: no character is a wildcard.
                    let mut statement = conn.prepare_cached(&format!(
                        "SELECT {DELIVERY_COLUMNS} FROM deliveries
                     WHERE substr(correlation_id, 1, length(?1)) = ?1 AND (?2 IS NULL OR tenant_id = ?2)
                     ORDER BY correlation_id LIMIT ?3"
                    ))?;
                    let rows = statement.query_map(
                        params![prefix, tenant_id, i64::try_from(limit).unwrap_or(i64::MAX)],
                        delivery_from_row,
                    )?;
                    Ok(rows.collect::<Result<Vec<_>, _>>()?)
                })
                .await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::deliveries_by_prefix(prefix)))
    }
}
