//! The log of consumer pauses and resumes ([`ControlStore`]):
//! `bosun_consumer_controls` (migration 18), only ever inserted.

use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_postgres::PgRow;

use super::PostgresStore;
use crate::ports::store::{ConsumerControl, ControlAction, ControlStore, StoreError, doing};
use crate::ports::transport::{from_unix_ms, unix_ms};

const INSERT: &str = "INSERT INTO bosun_consumer_controls (consumer, action, by, door, reason, at)
    VALUES ($1, $2, $3, $4, $5, $6) RETURNING sequence";

const LATEST: &str = "SELECT DISTINCT ON (consumer) sequence, consumer, action, by, door, reason, at
    FROM bosun_consumer_controls ORDER BY consumer, sequence DESC";

const LOG: &str = "SELECT sequence, consumer, action, by, door, reason, at
    FROM bosun_consumer_controls ORDER BY sequence DESC LIMIT $1";

fn control_from_row(row: &PgRow) -> Result<ConsumerControl, StoreError> {
    let action: String = row.try_get(2)?;
    let action = ControlAction::parse(&action).ok_or_else(|| {
        StoreError::corrupt(
            "a consumer control's action",
            format!("`{action}` is neither pause nor resume"),
        )
    })?;
    Ok(ConsumerControl {
        sequence: u64::try_from(row.try_get::<i64, _>(0)?).unwrap_or_default(),
        consumer: row.try_get(1)?,
        action,
        by: row.try_get(3)?,
        door: row.try_get(4)?,
        reason: row.try_get(5)?,
        at: row.try_get(6)?,
    })
}

#[async_trait::async_trait]
impl ControlStore for PostgresStore {
    async fn record_control(&self, control: &ConsumerControl) -> Result<ConsumerControl, StoreError> {
        let at = from_unix_ms(unix_ms(control.at));
        let run = async {
            let row = query(INSERT)
                .bind(&control.consumer)
                .bind(control.action.as_str())
                .bind(&control.by)
                .bind(&control.door)
                .bind(&control.reason)
                .bind(at)
                .fetch_one(self.database.pool())
                .await?;
            let sequence: i64 = row.try_get(0)?;
            Ok(ConsumerControl {
                sequence: u64::try_from(sequence).unwrap_or_default(),
                at,
                ..control.clone()
            })
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::record_control(&control.consumer, control.action.as_str())))
    }

    async fn latest_controls(&self) -> Result<Vec<ConsumerControl>, StoreError> {
        let run = async {
            let rows = query(LATEST).fetch_all(self.database.pool()).await?;
            rows.iter()
                .map(control_from_row)
                .collect::<Result<Vec<_>, StoreError>>()
        };
        run.await.map_err(|err: StoreError| err.doing(doing::CONTROLS))
    }

    async fn controls(&self, limit: usize) -> Result<Vec<ConsumerControl>, StoreError> {
        let run = async {
            let rows = query(LOG)
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .fetch_all(self.database.pool())
                .await?;
            rows.iter()
                .map(control_from_row)
                .collect::<Result<Vec<_>, StoreError>>()
        };
        run.await.map_err(|err: StoreError| err.doing(doing::CONTROLS))
    }
}
