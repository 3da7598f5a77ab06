//! The log of consumer pauses and resumes ([`ControlStore`]): the
//! `consumer_controls` table, only ever inserted.

use rusqlite::{Row, params};

use super::SqliteStore;
use crate::backends::sqlite::undecodable;
use crate::ports::store::{ConsumerControl, ControlAction, ControlStore, GroupAcknowledgement, StoreError, doing};
use crate::ports::transport::{from_unix_ms, unix_ms};

const COLUMNS: &str = "sequence, consumer, action, by, door, reason, at";

fn control_from_row(row: &Row<'_>) -> rusqlite::Result<ConsumerControl> {
    let action: String = row.get(2)?;
    let action = ControlAction::parse(&action).ok_or_else(|| {
        undecodable(
            2,
            "a consumer control's action".to_owned(),
            format!("`{action}` is neither pause nor resume"),
        )
    })?;
    Ok(ConsumerControl {
        sequence: u64::try_from(row.get::<_, i64>(0)?).unwrap_or_default(),
        consumer: row.get(1)?,
        action,
        by: row.get(3)?,
        door: row.get(4)?,
        reason: row.get(5)?,
        at: from_unix_ms(row.get(6)?),
    })
}

#[async_trait::async_trait]
impl ControlStore for SqliteStore {
    async fn record_control(&self, control: &ConsumerControl) -> Result<ConsumerControl, StoreError> {
        let control = ConsumerControl {
            at: from_unix_ms(unix_ms(control.at)),
            ..control.clone()
        };
        let operation = doing::record_control(&control.consumer, control.action.as_str());
        self.database
            .call(move |conn| {
                conn.prepare_cached(
                    "INSERT INTO consumer_controls (consumer, action, by, door, reason, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![
                    control.consumer,
                    control.action.as_str(),
                    control.by,
                    control.door,
                    control.reason,
                    unix_ms(control.at)
                ])?;
                Ok(ConsumerControl {
                    sequence: u64::try_from(conn.last_insert_rowid()).unwrap_or_default(),
                    ..control
                })
            })
            .await
            .map_err(|err: StoreError| err.doing(operation))
    }

    async fn latest_controls(&self) -> Result<Vec<ConsumerControl>, StoreError> {
        self.database
            .call(|conn| {
                let mut statement = conn.prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM consumer_controls c
                     WHERE sequence = (SELECT max(sequence) FROM consumer_controls WHERE consumer = c.consumer)
                     ORDER BY consumer"
                ))?;
                let rows = statement.query_map([], control_from_row)?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .await
            .map_err(|err: StoreError| err.doing(doing::CONTROLS))
    }

    async fn controls(&self, limit: usize) -> Result<Vec<ConsumerControl>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.database
            .call(move |conn| {
                let mut statement = conn.prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM consumer_controls ORDER BY sequence DESC LIMIT ?1"
                ))?;
                let rows = statement.query_map([limit], control_from_row)?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .await
            .map_err(|err: StoreError| err.doing(doing::CONTROLS))
    }

    async fn acknowledge_group(&self, acknowledgement: &GroupAcknowledgement) -> Result<(), StoreError> {
        let ack = acknowledgement.clone();
        self.database
            .call(move |conn| {
                conn.prepare_cached(
                    "INSERT INTO failure_group_acks (scope, fingerprint, by, door, note, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (scope, fingerprint) DO UPDATE SET by = excluded.by, door = excluded.door,
                     note = excluded.note, at = excluded.at",
                )?
                .execute(params![ack.scope, ack.fingerprint, ack.by, ack.door, ack.note, unix_ms(ack.at)])?;
                Ok(())
            })
            .await
            .map_err(|err: StoreError| err.doing(doing::GROUP_ACKNOWLEDGEMENTS))
    }

    async fn unacknowledge_group(&self, scope: &str, fingerprint: &str) -> Result<bool, StoreError> {
        let (scope, fingerprint) = (scope.to_owned(), fingerprint.to_owned());
        self.database
            .call(move |conn| {
                let deleted = conn
                    .prepare_cached("DELETE FROM failure_group_acks WHERE scope = ?1 AND fingerprint = ?2")?
                    .execute(params![scope, fingerprint])?;
                Ok(deleted > 0)
            })
            .await
            .map_err(|err: StoreError| err.doing(doing::GROUP_ACKNOWLEDGEMENTS))
    }

    async fn group_acknowledgements(&self, scope: &str) -> Result<Vec<GroupAcknowledgement>, StoreError> {
        let scope = scope.to_owned();
        self.database
            .call(move |conn| {
                let mut statement = conn.prepare_cached(
                    "SELECT scope, fingerprint, by, door, note, at FROM failure_group_acks WHERE scope = ?1",
                )?;
                let rows = statement.query_map([scope], |row| {
                    Ok(GroupAcknowledgement {
                        scope: row.get(0)?,
                        fingerprint: row.get(1)?,
                        by: row.get(2)?,
                        door: row.get(3)?,
                        note: row.get(4)?,
                        at: from_unix_ms(row.get(5)?),
                    })
                })?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .await
            .map_err(|err: StoreError| err.doing(doing::GROUP_ACKNOWLEDGEMENTS))
    }
}
