//! The limit on SQLite: scratch tables in a file of their own next to
//! bosun's data directory (the same disk), opened with bosun's pragmas (WAL,
//! `synchronous = NORMAL`, foreign keys, busy timeout) by the same code as
//! bosun's own files. One connection, as each bosun process has, shared by
//! the workers; one `IMMEDIATE` transaction per message.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use time::OffsetDateTime;
use uuid::Uuid;

use super::{CONSUMER, LimitError, LimitMessage, LimitRun, LimitSpec, LimitTables, Tickets, micros, next_state, watch};
use crate::backends::sqlite::open_connection;
use crate::ports::transport::unix_ms;
use crate::tools::bench::{Progress, Scenario};

/// Runs the limit in a fresh file under `dir`: creates the tables, fills the
/// queue with `messages` (the backlog and the timed ones), times
/// `spec.messages` of them, drops the tables and removes the file (also
/// when the run failed).
pub async fn run(
    dir: &Path,
    spec: &LimitSpec,
    messages: Vec<LimitMessage>,
    progress: Progress<'_>,
) -> Result<LimitRun, LimitError> {
    let path = dir.join(format!("bench-limit-{}.db", Uuid::now_v7().simple()));
    let tables = LimitTables::fresh();
    let result = async {
        let connection = Arc::new(Mutex::new(open(&path, &tables)?));
        let filling = Arc::clone(&connection);
        let filled = tables.clone();
        blocking(move || prefill(&lock(&filling), &filled, &messages)).await??;
        let run = measure(Arc::clone(&connection), &tables, spec, progress).await;
        let dropped = drop_tables(&lock(&connection), &tables);
        let run = run?;
        dropped?;
        Ok(run)
    }
    .await;
    remove(&path);
    result
}

/// The file and its WAL companions.
pub fn files_of(path: &Path) -> [PathBuf; 3] {
    let with = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [path.to_path_buf(), with("-wal"), with("-shm")]
}

fn remove(path: &Path) {
    for file in files_of(path) {
        let _ = std::fs::remove_file(file);
    }
}

fn lock(connection: &Mutex<Connection>) -> std::sync::MutexGuard<'_, Connection> {
    connection.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, LimitError> {
    tokio::task::spawn_blocking(f).await.map_err(LimitError::Worker)
}

/// Opens `path` with bosun's pragmas and creates the scratch tables, shaped
/// as bosun's (`messages`, `handled`, `sagas`, `outbox`) without the
/// columns the limit never uses.
pub fn open(path: &Path, tables: &LimitTables) -> Result<Connection, rusqlite::Error> {
    let LimitTables {
        queue,
        handled,
        sagas,
        outbox,
    } = tables;
    open_connection(
        path,
        &format!(
            "CREATE TABLE {queue} (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                message_id TEXT NOT NULL,
                saga_key TEXT NOT NULL,
                body BLOB NOT NULL
             );
             CREATE TABLE {handled} (
                consumer TEXT NOT NULL,
                message_id TEXT NOT NULL,
                handled_at INTEGER NOT NULL,
                PRIMARY KEY (consumer, message_id)
             );
             CREATE TABLE {sagas} (
                kind TEXT NOT NULL,
                key TEXT NOT NULL,
                version INTEGER NOT NULL,
                state TEXT NOT NULL,
                updated_at INTEGER NOT NULL,
                PRIMARY KEY (kind, key)
             );
             CREATE TABLE {outbox} (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                destination TEXT NOT NULL,
                message_id TEXT NOT NULL,
                body BLOB NOT NULL,
                created_at INTEGER NOT NULL
             );"
        ),
    )
}

/// Drops the scratch tables.
pub fn drop_tables(connection: &Connection, tables: &LimitTables) -> Result<(), rusqlite::Error> {
    for table in tables.all() {
        connection.execute_batch(&format!("DROP TABLE IF EXISTS {table}"))?;
    }
    Ok(())
}

/// Appends `messages` to the queue, in order, in one transaction.
pub fn prefill(
    connection: &Connection,
    tables: &LimitTables,
    messages: &[LimitMessage],
) -> Result<(), rusqlite::Error> {
    let tx = connection.unchecked_transaction()?;
    {
        let mut insert = tx.prepare(&format!(
            "INSERT INTO {} (message_id, saga_key, body) VALUES (?1, ?2, ?3)",
            tables.queue
        ))?;
        for message in messages {
            insert.execute(params![message.message_id, message.saga_key, message.body])?;
        }
    }
    tx.commit()
}

/// Rows in `table`.
pub fn count(connection: &Connection, table: &str) -> Result<i64, rusqlite::Error> {
    connection.query_row(&format!("SELECT count(*) FROM {table}"), [], |row| row.get(0))
}

/// How many of `tables` exist.
pub fn existing(connection: &Connection, tables: &LimitTables) -> Result<i64, rusqlite::Error> {
    let mut found = 0;
    for table in tables.all() {
        found += connection.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |row| row.get::<_, i64>(0),
        )?;
    }
    Ok(found)
}

/// The statements of one run, over its tables.
#[derive(Debug)]
struct Statements {
    claim: String,
    load_saga: String,
    handled: String,
    saga: String,
    outbox: String,
}

impl Statements {
    fn new(tables: &LimitTables) -> Self {
        let LimitTables {
            queue,
            handled,
            sagas,
            outbox,
        } = tables;
        Self {
            claim: format!(
                "DELETE FROM {queue} WHERE id = (SELECT id FROM {queue} ORDER BY id LIMIT 1)
                 RETURNING id, message_id, saga_key, body"
            ),
            load_saga: format!("SELECT version, state FROM {sagas} WHERE kind = ?1 AND key = ?2"),
            handled: format!("INSERT OR IGNORE INTO {handled} (consumer, message_id, handled_at) VALUES (?1, ?2, ?3)"),
            saga: format!(
                "INSERT INTO {sagas} (kind, key, version, state, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (kind, key) DO UPDATE
                    SET version = excluded.version, state = excluded.state, updated_at = excluded.updated_at
                    WHERE {sagas}.version = ?6"
            ),
            outbox: format!("INSERT INTO {outbox} (destination, message_id, body, created_at) VALUES (?1, ?2, ?3, ?4)"),
        }
    }
}

/// What one transaction did.
enum Attempt {
    Done,
    Conflict,
    Empty,
}

/// Times `spec.messages` messages through the queue, `spec.concurrency`
/// worker threads sharing the connection.
pub async fn measure(
    connection: Arc<Mutex<Connection>>,
    tables: &LimitTables,
    spec: &LimitSpec,
    progress: Progress<'_>,
) -> Result<LimitRun, LimitError> {
    let statements = Arc::new(Statements::new(tables));
    let tickets = Arc::new(Tickets::new(spec.messages));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let workers: Vec<_> = (0..spec.concurrency)
        .map(|_| {
            let (connection, statements, tickets, stop) = (
                Arc::clone(&connection),
                Arc::clone(&statements),
                Arc::clone(&tickets),
                Arc::clone(&stop),
            );
            let workload = spec.workload;
            tokio::task::spawn_blocking(move || worker(&connection, &statements, &tickets, workload, &stop))
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

fn worker(
    connection: &Mutex<Connection>,
    statements: &Statements,
    tickets: &Tickets,
    workload: Scenario,
    stop: &AtomicBool,
) -> Result<Vec<u64>, rusqlite::Error> {
    let mut latencies = Vec::new();
    while !stop.load(Ordering::Acquire) && tickets.take() {
        let began = Instant::now();
        loop {
            if stop.load(Ordering::Acquire) {
                return Ok(latencies);
            }
            let attempt = handle_one(&mut lock(connection), statements, workload)?;
            match attempt {
                Attempt::Done => break,
                Attempt::Conflict => tickets.conflict(),
                Attempt::Empty => std::thread::yield_now(),
            }
        }
        latencies.push(micros(began.elapsed()));
        tickets.finished();
    }
    Ok(latencies)
}

/// One message, in one transaction.
fn handle_one(
    connection: &mut Connection,
    statements: &Statements,
    workload: Scenario,
) -> Result<Attempt, rusqlite::Error> {
    let now = unix_ms(OffsetDateTime::now_utc());
    let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let claimed = tx
        .prepare_cached(&statements.claim)?
        .query_row([], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, Vec<u8>>(3)?,
            ))
        })
        .optional()?;
    let Some((id, message_id, saga_key, body)) = claimed else {
        return Ok(Attempt::Empty);
    };
    let fresh = tx
        .prepare_cached(&statements.handled)?
        .execute(params![CONSUMER, message_id, now])?;
    if workload == Scenario::Saga && fresh > 0 {
        let saga = tx
            .prepare_cached(&statements.load_saga)?
            .query_row(params![CONSUMER, saga_key], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
            })
            .optional()?;
        let (expected, state) = match saga {
            Some((version, state)) => (version, serde_json::from_str(&state).ok()),
            None => (0, None),
        };
        let next = next_state(state.as_ref(), usize::try_from(id).unwrap_or(0));
        let written = tx.prepare_cached(&statements.saga)?.execute(params![
            CONSUMER,
            saga_key,
            expected + 1,
            next.to_string(),
            now,
            expected
        ])?;
        if written == 0 {
            return Ok(Attempt::Conflict);
        }
        tx.prepare_cached(&statements.outbox)?
            .execute(params![CONSUMER, message_id, body, now])?;
    }
    tx.commit()?;
    Ok(Attempt::Done)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::tools::bench::{SAGA_KEYS, limit_messages};

    fn spec(workload: Scenario, messages: usize, backlog: usize) -> LimitSpec {
        LimitSpec {
            workload,
            concurrency: 3,
            messages,
            backlog,
            timeout: Duration::from_secs(120),
        }
    }

    #[tokio::test]
    async fn the_backlog_is_prefilled_exactly_and_stays_under_the_timed_messages() {
        let dir = tempfile::tempdir().unwrap();
        for workload in [Scenario::Noop, Scenario::Saga] {
            let tables = LimitTables::fresh();
            let connection = open(&dir.path().join(format!("{}.db", workload.as_str())), &tables).unwrap();
            prefill(&connection, &tables, &limit_messages(workload, 40 + 25, SAGA_KEYS)).unwrap();
            assert_eq!(count(&connection, &tables.queue).unwrap(), 65);
            let connection = Arc::new(Mutex::new(connection));
            let run = measure(
                Arc::clone(&connection),
                &tables,
                &spec(workload, 40, 25),
                &mut |_: &str| {},
            )
            .await
            .unwrap();
            assert_eq!(run.messages, 40);
            assert_eq!(run.latencies_us.len(), 40);
            let connection = lock(&connection);
            assert_eq!(count(&connection, &tables.queue).unwrap(), 25, "the backlog is left");
            assert_eq!(count(&connection, &tables.handled).unwrap(), 40);
            let (sagas, outbox) = match workload {
                Scenario::Noop => (0, 0),
                Scenario::Saga => (16, 40),
            };
            assert_eq!(count(&connection, &tables.sagas).unwrap(), sagas);
            assert_eq!(count(&connection, &tables.outbox).unwrap(), outbox);
            if workload == Scenario::Saga {
                let counted: i64 = connection
                    .query_row(&format!("SELECT sum(version) FROM {}", tables.sagas), [], |row| {
                        row.get(0)
                    })
                    .unwrap();
                assert_eq!(counted, 40, "every message counted once in its saga");
            }
            drop_tables(&connection, &tables).unwrap();
            assert_eq!(existing(&connection, &tables).unwrap(), 0);
        }
    }

    #[tokio::test]
    async fn a_run_drops_its_tables_and_removes_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let run = super::run(
            dir.path(),
            &spec(Scenario::Saga, 30, 10),
            limit_messages(Scenario::Saga, 40, SAGA_KEYS),
            &mut |_: &str| {},
        )
        .await
        .unwrap();
        assert_eq!(run.messages, 30);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    #[test]
    fn the_wal_companions_are_named_after_the_file() {
        let [db, wal, shm] = files_of(Path::new("/tmp/x/bench-limit-1.db"));
        assert_eq!(db, Path::new("/tmp/x/bench-limit-1.db"));
        assert_eq!(wal, Path::new("/tmp/x/bench-limit-1.db-wal"));
        assert_eq!(shm, Path::new("/tmp/x/bench-limit-1.db-shm"));
    }
}
