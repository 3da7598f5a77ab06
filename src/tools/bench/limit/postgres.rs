//! The limit on PostgreSQL: scratch tables in the database (and schema) the
//! URL names, one connection per worker, opened before the clock starts and
//! held for the whole run.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use sqlx_core::connection::Connection;
use sqlx_core::executor::Executor;
use sqlx_core::pool::PoolConnection;
use sqlx_core::query::query;
use sqlx_core::query_scalar::query_scalar;
use sqlx_core::raw_sql::raw_sql;
use sqlx_core::row::Row;
use sqlx_core::sql_str::AssertSqlSafe;
use sqlx_core::types::Json;
use sqlx_postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, Postgres};

use super::{CONSUMER, LimitError, LimitMessage, LimitRun, LimitSpec, LimitTables, Tickets, micros, next_state, watch};
use crate::tools::bench::{Progress, Scenario};

/// Messages per prefill statement.
const PREFILL_BATCH: usize = 1000;

/// Runs the limit in fresh tables of the database at `url`: creates them,
/// fills the queue with `messages` (the backlog and the timed ones), times
/// `spec.messages` of them, drops the tables (also when the run failed).
pub async fn run(
    url: &str,
    spec: &LimitSpec,
    messages: &[LimitMessage],
    progress: Progress<'_>,
) -> Result<LimitRun, LimitError> {
    let options = PgConnectOptions::from_str(url)?.application_name("bosun-bench-limit");
    let pool = PgPoolOptions::new()
        .max_connections(u32::try_from(spec.concurrency).unwrap_or(u32::MAX).saturating_add(1))
        .connect_with(options)
        .await?;
    let result = run_on(&pool, spec, messages, progress).await;
    pool.close().await;
    result
}

/// [`run`] on an open pool (with at least `spec.concurrency` connections).
pub async fn run_on(
    pool: &PgPool,
    spec: &LimitSpec,
    messages: &[LimitMessage],
    progress: Progress<'_>,
) -> Result<LimitRun, LimitError> {
    let tables = LimitTables::fresh();
    let result = async {
        create(pool, &tables).await?;
        prefill(pool, &tables, messages, &mut *progress).await?;
        measure(pool, &tables, spec, &mut *progress).await
    }
    .await;
    let dropped = drop_tables(pool, &tables).await;
    let run = result?;
    dropped?;
    Ok(run)
}

/// Creates the scratch tables: the queue, idempotency records, sagas and
/// outbox, shaped as bosun's (`bosun_messages`, `bosun_handled`,
/// `bosun_sagas`, `bosun_outbox`) without the columns the limit never uses.
pub async fn create(pool: &PgPool, tables: &LimitTables) -> Result<(), sqlx_core::Error> {
    let LimitTables {
        queue,
        handled,
        sagas,
        outbox,
    } = tables;
    let ddl = format!(
        "CREATE TABLE {queue} (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            message_id text NOT NULL,
            saga_key text NOT NULL,
            body bytea NOT NULL
         );
         CREATE TABLE {handled} (
            consumer text NOT NULL,
            message_id text NOT NULL,
            handled_at timestamptz NOT NULL,
            PRIMARY KEY (consumer, message_id)
         );
         CREATE TABLE {sagas} (
            kind text NOT NULL,
            key text NOT NULL,
            version bigint NOT NULL,
            state jsonb NOT NULL,
            updated_at timestamptz NOT NULL,
            PRIMARY KEY (kind, key)
         );
         CREATE TABLE {outbox} (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            destination text NOT NULL,
            message_id text NOT NULL,
            body bytea NOT NULL,
            created_at timestamptz NOT NULL
         );"
    );
    pool.execute(raw_sql(AssertSqlSafe(ddl))).await?;
    Ok(())
}

/// Drops the scratch tables (those that exist).
pub async fn drop_tables(pool: &PgPool, tables: &LimitTables) -> Result<(), sqlx_core::Error> {
    let statement = format!("DROP TABLE IF EXISTS {}", tables.all().join(", "));
    pool.execute(AssertSqlSafe(statement)).await?;
    Ok(())
}

/// Appends `messages` to the queue, in order, a thousand per statement.
pub async fn prefill(
    pool: &PgPool,
    tables: &LimitTables,
    messages: &[LimitMessage],
    progress: Progress<'_>,
) -> Result<(), sqlx_core::Error> {
    let statement: Arc<str> = format!(
        "INSERT INTO {} (message_id, saga_key, body)
         SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[])",
        tables.queue
    )
    .into();
    let mut written = 0;
    let mut reported = Instant::now();
    for chunk in messages.chunks(PREFILL_BATCH) {
        let ids: Vec<&str> = chunk.iter().map(|m| m.message_id.as_str()).collect();
        let keys: Vec<&str> = chunk.iter().map(|m| m.saga_key.as_str()).collect();
        let bodies: Vec<&[u8]> = chunk.iter().map(|m| m.body.as_slice()).collect();
        query(AssertSqlSafe(Arc::clone(&statement)))
            .bind(ids)
            .bind(keys)
            .bind(bodies)
            .execute(pool)
            .await?;
        written += chunk.len();
        if reported.elapsed().as_secs() >= 5 {
            progress(&format!(
                "    limit queue: {written} of {} messages written",
                messages.len()
            ));
            reported = Instant::now();
        }
    }
    Ok(())
}

/// Rows in `table`.
pub async fn count(pool: &PgPool, table: &str) -> Result<i64, sqlx_core::Error> {
    query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(pool)
        .await
}

/// How many of `tables` exist (in the connection's schema).
pub async fn existing(pool: &PgPool, tables: &LimitTables) -> Result<i64, sqlx_core::Error> {
    let names: Vec<&str> = tables.all().to_vec();
    query_scalar("SELECT count(*) FROM unnest($1::text[]) AS t(name) WHERE to_regclass(name) IS NOT NULL")
        .bind(names)
        .fetch_one(pool)
        .await
}

/// The statements of one run, over its tables.
#[derive(Debug)]
struct Statements {
    claim: Arc<str>,
    claim_with_saga: Arc<str>,
    handled: Arc<str>,
    saga: Arc<str>,
    outbox: Arc<str>,
}

impl Statements {
    fn new(tables: &LimitTables) -> Self {
        let LimitTables {
            queue,
            handled,
            sagas,
            outbox,
        } = tables;
        let claim = format!(
            "DELETE FROM {queue}
             WHERE id = (SELECT id FROM {queue} ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
             RETURNING id, message_id, saga_key, body"
        );
        Self {
            claim_with_saga: format!(
                "WITH claimed AS ({claim})
                 SELECT c.id, c.message_id, c.saga_key, c.body, s.version, s.state
                 FROM claimed c LEFT JOIN {sagas} s ON s.kind = $1 AND s.key = c.saga_key"
            )
            .into(),
            claim: claim.into(),
            handled: format!(
                "INSERT INTO {handled} (consumer, message_id, handled_at) VALUES ($1, $2, now())
                 ON CONFLICT DO NOTHING"
            )
            .into(),
            saga: format!(
                "INSERT INTO {sagas} (kind, key, version, state, updated_at) VALUES ($1, $2, $3, $4, now())
                 ON CONFLICT (kind, key) DO UPDATE
                    SET version = excluded.version, state = excluded.state, updated_at = excluded.updated_at
                    WHERE {sagas}.version = $5"
            )
            .into(),
            outbox: format!(
                "INSERT INTO {outbox} (destination, message_id, body, created_at) VALUES ($1, $2, $3, now())"
            )
            .into(),
        }
    }
}

fn sql(statement: &Arc<str>) -> AssertSqlSafe<Arc<str>> {
    AssertSqlSafe(Arc::clone(statement))
}

/// What one transaction did.
enum Attempt {
    /// The message is handled and gone.
    Done,
    /// The saga moved on: rolled back.
    Conflict,
    /// No row could be claimed: rolled back.
    Empty,
}

/// Times `spec.messages` messages through the queue, `spec.concurrency`
/// workers at once.
pub async fn measure(
    pool: &PgPool,
    tables: &LimitTables,
    spec: &LimitSpec,
    progress: Progress<'_>,
) -> Result<LimitRun, LimitError> {
    let statements = Arc::new(Statements::new(tables));
    let mut connections = Vec::with_capacity(spec.concurrency);
    for _ in 0..spec.concurrency {
        connections.push(pool.acquire().await?);
    }
    let tickets = Arc::new(Tickets::new(spec.messages));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let workers: Vec<_> = connections
        .into_iter()
        .map(|connection| {
            tokio::spawn(worker(
                connection,
                Arc::clone(&statements),
                Arc::clone(&tickets),
                spec.workload,
                Arc::clone(&stop),
            ))
        })
        .collect();
    let joined = futures_util::future::join_all(workers);
    let results = watch(joined, &tickets, spec, started, &stop, progress).await?;
    let seconds = started.elapsed().as_secs_f64();
    let mut latencies_us = Vec::with_capacity(spec.messages);
    for result in results {
        let latencies = result.map_err(LimitError::Worker)??;
        latencies_us.extend(latencies);
    }
    Ok(LimitRun {
        messages: latencies_us.len(),
        seconds,
        latencies_us,
        conflicts: tickets.conflicts.load(Ordering::Relaxed),
    })
}

async fn worker(
    mut connection: PoolConnection<Postgres>,
    statements: Arc<Statements>,
    tickets: Arc<Tickets>,
    workload: Scenario,
    stop: Arc<AtomicBool>,
) -> Result<Vec<u64>, LimitError> {
    let mut latencies = Vec::new();
    while !stop.load(Ordering::Acquire) && tickets.take() {
        let began = Instant::now();
        loop {
            if stop.load(Ordering::Acquire) {
                return Ok(latencies);
            }
            match handle_one(&mut connection, &statements, workload).await? {
                Attempt::Done => break,
                Attempt::Conflict => tickets.conflict(),
                Attempt::Empty => tokio::task::yield_now().await,
            }
        }
        latencies.push(micros(began.elapsed()));
        tickets.finished();
    }
    Ok(latencies)
}

/// One message, in one transaction.
async fn handle_one(
    connection: &mut PgConnection,
    statements: &Statements,
    workload: Scenario,
) -> Result<Attempt, sqlx_core::Error> {
    let mut tx = connection.begin().await?;
    match workload {
        Scenario::Noop => {
            let Some(row) = query(sql(&statements.claim)).fetch_optional(&mut *tx).await? else {
                tx.rollback().await?;
                return Ok(Attempt::Empty);
            };
            let message_id: String = row.try_get(1)?;
            query(sql(&statements.handled))
                .bind(CONSUMER)
                .bind(&message_id)
                .execute(&mut *tx)
                .await?;
        }
        Scenario::Saga => {
            let Some(row) = query(sql(&statements.claim_with_saga))
                .bind(CONSUMER)
                .fetch_optional(&mut *tx)
                .await?
            else {
                tx.rollback().await?;
                return Ok(Attempt::Empty);
            };
            let id: i64 = row.try_get(0)?;
            let message_id: String = row.try_get(1)?;
            let saga_key: String = row.try_get(2)?;
            let body: Vec<u8> = row.try_get(3)?;
            let version: Option<i64> = row.try_get(4)?;
            let state: Option<Json<serde_json::Value>> = row.try_get(5)?;
            let fresh = query(sql(&statements.handled))
                .bind(CONSUMER)
                .bind(&message_id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if fresh > 0 {
                let expected = version.unwrap_or(0);
                let next = next_state(
                    state.as_ref().map(|Json(state)| state),
                    usize::try_from(id).unwrap_or(0),
                );
                let written = query(sql(&statements.saga))
                    .bind(CONSUMER)
                    .bind(&saga_key)
                    .bind(expected + 1)
                    .bind(Json(&next))
                    .bind(expected)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if written == 0 {
                    tx.rollback().await?;
                    return Ok(Attempt::Conflict);
                }
                query(sql(&statements.outbox))
                    .bind(CONSUMER)
                    .bind(&message_id)
                    .bind(&body)
                    .execute(&mut *tx)
                    .await?;
            }
        }
    }
    tx.commit().await?;
    Ok(Attempt::Done)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::backends::postgres::testing;
    use crate::tools::bench::{SAGA_KEYS, limit_messages};

    fn spec(workload: Scenario, messages: usize, backlog: usize) -> LimitSpec {
        LimitSpec {
            workload,
            concurrency: 4,
            messages,
            backlog,
            timeout: Duration::from_secs(120),
        }
    }

    #[tokio::test]
    async fn the_backlog_is_prefilled_exactly_and_stays_under_the_timed_messages() {
        let test = testing::fresh().await;
        let pool = test.database.pool().clone();
        for workload in [Scenario::Noop, Scenario::Saga] {
            let tables = LimitTables::fresh();
            create(&pool, &tables).await.unwrap();
            assert_eq!(existing(&pool, &tables).await.unwrap(), 4);
            // More than one prefill statement.
            prefill(
                &pool,
                &tables,
                &limit_messages(workload, 1200 + 300, SAGA_KEYS),
                &mut |_: &str| {},
            )
            .await
            .unwrap();
            assert_eq!(count(&pool, &tables.queue).await.unwrap(), 1500);
            let run = measure(&pool, &tables, &spec(workload, 300, 1200), &mut |_: &str| {})
                .await
                .unwrap();
            assert_eq!(run.messages, 300);
            assert_eq!(count(&pool, &tables.queue).await.unwrap(), 1200, "the backlog is left");
            assert_eq!(count(&pool, &tables.handled).await.unwrap(), 300);
            let (sagas, outbox) = match workload {
                Scenario::Noop => (0, 0),
                Scenario::Saga => (16, 300),
            };
            assert_eq!(count(&pool, &tables.sagas).await.unwrap(), sagas);
            assert_eq!(count(&pool, &tables.outbox).await.unwrap(), outbox);
            if workload == Scenario::Saga {
                let counted: i64 = query_scalar(AssertSqlSafe(format!(
                    "SELECT sum(version)::bigint FROM {}",
                    tables.sagas
                )))
                .fetch_one(&pool)
                .await
                .unwrap();
                assert_eq!(counted, 300, "every message counted once in its saga, conflicts redone");
            }
            drop_tables(&pool, &tables).await.unwrap();
            assert_eq!(existing(&pool, &tables).await.unwrap(), 0);
        }
        test.finish().await;
    }

    #[tokio::test]
    async fn a_run_drops_its_tables() {
        let test = testing::fresh().await;
        let pool = test.database.pool().clone();
        let run = run_on(
            &pool,
            &spec(Scenario::Saga, 50, 10),
            &limit_messages(Scenario::Saga, 60, SAGA_KEYS),
            &mut |_: &str| {},
        )
        .await
        .unwrap();
        assert_eq!(run.messages, 50);
        let left: i64 = query_scalar(
            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'bench\\_limit\\_%'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(left, 0, "limit tables left behind");
        test.finish().await;
    }
}
