//! Dead letters: messages that could not be processed, kept whole, and their replays.

use bosun_contracts::Destination;
use rusqlite::{OptionalExtension, Row, TransactionBehavior, params};
use uuid::Uuid;

use super::SqliteStore;
use super::timeline::insert_timeline;
use super::to_json;
use crate::backends::sqlite::undecodable;
use crate::ports::store::{
    AttemptRecord, DeadLetterFilter, DeadLetterRecord, DeadLetterStatus, IdLookup, ReplayRecord, StoreError,
    TimelineEntry,
};
use crate::ports::store::{DeadLetterStore, doing};
use crate::ports::transport::{from_unix_ms, unix_ms};

pub(super) const DEAD_LETTER_COLUMNS: &str =
    "id, consumer, entity, transport_sequence, broker_message_id, message_id, message_type,
    correlation_id, tenant_id, body, reason, description, error_chain, attempts, dead_lettered_at, origin, replays";

pub(super) fn dead_letter_from_row(row: &Row<'_>) -> rusqlite::Result<DeadLetterRecord> {
    let id: String = row.get(0)?;
    // The JSON columns: a value that does not decode makes the row corrupt.
    fn json<T: serde::de::DeserializeOwned>(row: &Row<'_>, index: usize, what: &str, id: &str) -> rusqlite::Result<T> {
        let text: String = row.get(index)?;
        serde_json::from_str(&text).map_err(|err| undecodable(index, format!("{what} of dead letter {id}"), err))
    }
    let error_chain: Vec<String> = json(row, 12, "error chain", &id)?;
    let attempts: Vec<AttemptRecord> = json(row, 13, "attempts", &id)?;
    let replays: Vec<ReplayRecord> = json(row, 16, "replays", &id)?;
    let parsed = Uuid::parse_str(&id).map_err(|err| undecodable(0, format!("id of dead letter `{id}`"), err))?;
    Ok(DeadLetterRecord {
        id: parsed,
        consumer: row.get(1)?,
        entity: row.get(2)?,
        transport_sequence: row.get(3)?,
        broker_message_id: row.get(4)?,
        message_id: row.get(5)?,
        message_type: row.get(6)?,
        correlation_id: row.get(7)?,
        tenant_id: row.get(8)?,
        body: row.get(9)?,
        reason: row.get(10)?,
        description: row.get(11)?,
        error_chain,
        attempts,
        dead_lettered_at: from_unix_ms(row.get(14)?),
        origin: row.get(15)?,
        status: if replays.is_empty() {
            DeadLetterStatus::Dead
        } else {
            DeadLetterStatus::Replayed
        },
        replays,
    })
}

#[async_trait::async_trait]
impl DeadLetterStore for SqliteStore {
    async fn record_dead_letter(
        &self,
        record: DeadLetterRecord,
        timeline: Option<TimelineEntry>,
    ) -> Result<(), StoreError> {
        let doing = doing::record_dead_letter(&record);
        let line = self.waited_on(&timeline);
        let run = async {
            let database = &self.database;
            database
                .call(move |conn| {
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let inserted = tx.execute(
                        &format!(
                            "INSERT OR IGNORE INTO dead_letters ({DEAD_LETTER_COLUMNS})
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"
                        ),
                        params![
                            record.id.to_string(),
                            record.consumer,
                            record.entity,
                            record.transport_sequence,
                            record.broker_message_id,
                            record.message_id,
                            record.message_type,
                            record.correlation_id,
                            record.tenant_id,
                            record.body,
                            record.reason,
                            record.description,
                            to_json(&record.error_chain, "the error chain of a dead letter")?,
                            to_json(&record.attempts, "the attempts of a dead letter")?,
                            unix_ms(record.dead_lettered_at),
                            record.origin,
                            to_json(&record.replays, "the replays of a dead letter")?
                        ],
                    )?;
                    if let Some(entry) = timeline.as_ref().filter(|_| inserted > 0) {
                        insert_timeline(&tx, std::slice::from_ref(entry))?;
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

    async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetterRecord>, StoreError> {
        let run = async {
            let database = &self.database;
            let filter = filter.clone();
            database
                .call(move |conn| {
                    let mut statement = conn.prepare(&format!(
                        "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters
                     WHERE (?1 IS NULL OR consumer = ?1) AND (?2 IS NULL OR message_type = ?2)
                       AND (?3 IS NULL OR dead_lettered_at >= ?3) AND (?4 OR replays = '[]')
                       AND (?5 IS NULL OR tenant_id = ?5) AND (?6 IS NULL OR reason = ?6)
                     ORDER BY dead_lettered_at DESC, id DESC
                     LIMIT ?7"
                    ))?;
                    // LIMIT -1: no limit.
                    let limit = filter
                        .limit
                        .map_or(-1, |limit| i64::try_from(limit).unwrap_or(i64::MAX));
                    let rows = statement.query_map(
                        params![
                            filter.consumer,
                            filter.message_type,
                            filter.since.map(unix_ms),
                            filter.include_replayed,
                            filter.tenant_id,
                            filter.reason,
                            limit
                        ],
                        dead_letter_from_row,
                    )?;
                    Ok(rows.collect::<Result<Vec<_>, _>>()?)
                })
                .await
        };
        run.await.map_err(|err: StoreError| err.doing(doing::dead_letters()))
    }

    async fn dead_letter(&self, id: &str, tenant_id: Option<&str>) -> Result<DeadLetterRecord, StoreError> {
        let run = async {
            let database = &self.database;
            let lookup = IdLookup::dead_letter(id);
            let Some(prefix) = lookup.prefix.clone() else {
                return Err(lookup.not_found());
            };
            let tenant_id = tenant_id.map(str::to_owned);
            let found: Vec<DeadLetterRecord> = database
                .call(move |conn| -> Result<_, StoreError> {
                    // `substr` compares literally: no character is a wildcard.
                    let mut statement = conn.prepare(&format!(
                        "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters
                     WHERE substr(id, 1, length(?1)) = ?1 AND (?2 IS NULL OR tenant_id = ?2)
                     ORDER BY id LIMIT ?3"
                    ))?;
                    let limit = i64::try_from(IdLookup::LIMIT).unwrap_or(i64::MAX);
                    Ok(statement
                        .query_map(params![prefix, tenant_id, limit], dead_letter_from_row)?
                        .collect::<Result<Vec<_>, _>>()?)
                })
                .await?;
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
            let path = entity.path();
            database
            .call(move |conn| {
                Ok(conn
                    .query_row(
                        &format!(
                            "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters WHERE entity = ?1 AND transport_sequence = ?2"
                        ),
                        params![path, sequence],
                        dead_letter_from_row,
                    )
                    .optional()?)
            })
            .await
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
        let line = self.waited_on(&timeline);
        let run = async {
            let database = &self.database;
            database
                .call(move |conn| {
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let replays: Option<String> = tx
                        .query_row(
                            "SELECT replays FROM dead_letters WHERE id = ?1",
                            [id.to_string()],
                            |row| row.get(0),
                        )
                        .optional()?;
                    let Some(replays) = replays else {
                        return Err(StoreError::NotFound {
                            what: "dead letter",
                            id: id.to_string(),
                        });
                    };
                    let mut replays: Vec<ReplayRecord> = serde_json::from_str(&replays)
                        .map_err(|err| StoreError::corrupt(format!("replays of dead letter {id}"), err))?;
                    replays.push(replay);
                    tx.execute(
                        "UPDATE dead_letters SET replays = ?1 WHERE id = ?2",
                        params![to_json(&replays, "the replays of a dead letter")?, id.to_string()],
                    )?;
                    if let Some(entry) = &timeline {
                        insert_timeline(&tx, std::slice::from_ref(entry))?;
                    }
                    tx.commit()?;
                    Ok(())
                })
                .await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::record_replay(id)))?;
        self.written(&line);
        Ok(())
    }

    async fn purge_dead_letter(&self, id: Uuid) -> Result<(), StoreError> {
        let run = async {
            let database = &self.database;
            database
                .call(move |conn| {
                    let deleted = conn.execute("DELETE FROM dead_letters WHERE id = ?1", [id.to_string()])?;
                    if deleted == 0 {
                        return Err(StoreError::NotFound {
                            what: "dead letter",
                            id: id.to_string(),
                        });
                    }
                    Ok(())
                })
                .await
        };
        run.await
            .map_err(|err: StoreError| err.doing(doing::purge_dead_letter(id)))
    }
}
