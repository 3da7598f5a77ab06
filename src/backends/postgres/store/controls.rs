//! The log of consumer pauses and resumes ([`ControlStore`]):
//! `bosun_consumer_controls` (migration 18), only ever inserted.

use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_postgres::PgRow;

use super::PostgresStore;
use crate::ports::store::{ConsumerControl, ControlAction, ControlStore, GroupAcknowledgement, StoreError, doing};
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

    async fn acknowledge_group(&self, acknowledgement: &GroupAcknowledgement) -> Result<(), StoreError> {
        let run = async {
            query(
                "INSERT INTO bosun_failure_group_acks (scope, fingerprint, by, door, note, at) VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (scope, fingerprint) DO UPDATE SET by = excluded.by, door = excluded.door,
                 note = excluded.note, at = excluded.at",
            )
            .bind(&acknowledgement.scope)
            .bind(&acknowledgement.fingerprint)
            .bind(&acknowledgement.by)
            .bind(&acknowledgement.door)
            .bind(&acknowledgement.note)
            .bind(from_unix_ms(unix_ms(acknowledgement.at)))
            .execute(self.database.pool())
            .await?;
            Ok(())
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::GROUP_ACKNOWLEDGEMENTS))
    }

    async fn unacknowledge_group(&self, scope: &str, fingerprint: &str) -> Result<bool, StoreError> {
        let run = async {
            let done = query("DELETE FROM bosun_failure_group_acks WHERE scope = $1 AND fingerprint = $2")
                .bind(scope)
                .bind(fingerprint)
                .execute(self.database.pool())
                .await?;
            Ok(done.rows_affected() > 0)
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::GROUP_ACKNOWLEDGEMENTS))
    }

    async fn group_acknowledgements(&self, scope: &str) -> Result<Vec<GroupAcknowledgement>, StoreError> {
        let run = async {
            let rows =
                query("SELECT scope, fingerprint, by, door, note, at FROM bosun_failure_group_acks WHERE scope = $1")
                    .bind(scope)
                    .fetch_all(self.database.pool())
                    .await?;
            rows.iter()
                .map(|row| {
                    Ok(GroupAcknowledgement {
                        scope: row.try_get(0)?,
                        fingerprint: row.try_get(1)?,
                        by: row.try_get(2)?,
                        door: row.try_get(3)?,
                        note: row.try_get(4)?,
                        at: row.try_get(5)?,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::GROUP_ACKNOWLEDGEMENTS))
    }
}
