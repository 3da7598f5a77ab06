//! Shared SQLite plumbing for the embedded transport and the SQLite stores:
//! opening a database file in WAL mode with a busy timeout (several `bosun`
//! processes may share one data directory), and running blocking calls off
//! the async runtime.

pub mod store;
pub mod transport;

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rusqlite::Connection;

use crate::ports::store::{SOME_STORE_OPERATION, StoreError};
use crate::ports::transport::{SOME_TRANSPORT_OPERATION, TransportError};

/// A SQLite connection shared by one process.
///
/// Callers take turns at the connection by *combining*: whoever finds it
/// free runs its own call and then every call queued meanwhile, on its own
/// thread; whoever finds it busy queues its call and waits, without
/// holding a thread. Queued writes ([`Database::write`]) are committed
/// together, in one transaction with a savepoint each: under load, many
/// handlers' commits cost one transaction (group commit), and alone, one
/// call costs what it did.
#[derive(Clone)]
pub struct Database {
    shared: Arc<Shared>,
}

/// The connection and the calls waiting for it.
pub(crate) struct Shared {
    connection: Mutex<Connection>,
    queue: Mutex<Vec<Job>>,
}

/// A call waiting for the connection.
enum Job {
    /// Runs alone, with the whole connection (it may open its own transaction).
    Plain(Box<dyn FnOnce(&mut Connection) + Send>),
    /// Only reads; runs with other reads in one read transaction.
    Read(ReadJob),
    /// Runs in a shared transaction, inside a savepoint of its own.
    Write(Box<dyn StagedWrite>),
}

/// A read waiting for the connection (it sends its answer itself).
type ReadJob = Box<dyn FnOnce(&Connection) + Send>;

/// A write that shares its transaction with others.
trait StagedWrite: Send {
    /// Runs the write inside its savepoint; `true` keeps what it wrote.
    fn stage(&mut self, connection: &Connection) -> bool;
    /// Hands the result over once the shared transaction ended (`Err`: it
    /// did not commit, so nothing of this write was kept).
    fn finish(self: Box<Self>, committed: Result<(), &rusqlite::Error>);
}

/// A write and where its result goes.
struct Staged<T, E, F> {
    write: Option<F>,
    result: Option<Result<T, E>>,
    reply: tokio::sync::oneshot::Sender<Result<T, E>>,
}

impl<T, E, F> StagedWrite for Staged<T, E, F>
where
    T: Send,
    E: From<rusqlite::Error> + Send,
    F: FnOnce(&Connection) -> Result<T, E> + Send,
{
    fn stage(&mut self, connection: &Connection) -> bool {
        let Some(write) = self.write.take() else {
            return false;
        };
        let result = write(connection);
        let keep = result.is_ok();
        self.result = Some(result);
        keep
    }

    fn finish(self: Box<Self>, committed: Result<(), &rusqlite::Error>) {
        let result = match (self.result, committed) {
            (Some(Ok(_)), Err(err)) => Err(E::from(not_committed(err))),
            (Some(result), _) => result,
            (None, Err(err)) => Err(E::from(not_committed(err))),
            (None, Ok(())) => Err(E::from(not_committed(&rusqlite::Error::InvalidQuery))),
        };
        let _ = self.reply.send(result);
    }
}

/// The error a staged write reports when its shared transaction did not
/// commit (the cause is kept as text: `rusqlite::Error` is not `Clone`).
fn not_committed(err: &rusqlite::Error) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(format!("the transaction did not commit: {err}").into())
}

/// Calls one combiner runs before it lets another take over.
const COMBINE_ROUNDS: usize = 64;

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").finish_non_exhaustive()
    }
}

impl Database {
    /// Opens (creating if needed) a database file and applies `schema`.
    pub fn open(path: &Path, schema: &str) -> rusqlite::Result<Self> {
        let connection = Connection::open(path)?;
        Self::configure(connection, schema)
    }

    /// An in-memory database (tests).
    pub fn open_in_memory(schema: &str) -> rusqlite::Result<Self> {
        Self::configure(Connection::open_in_memory()?, schema)
    }

    /// A weak handle on the connection, for a task that must not keep the
    /// database open.
    pub(crate) fn downgrade(&self) -> std::sync::Weak<Shared> {
        Arc::downgrade(&self.shared)
    }

    /// The database of a connection handle from [`Database::downgrade`].
    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn configure(connection: Connection, schema: &str) -> rusqlite::Result<Self> {
        Ok(Self {
            shared: Arc::new(Shared {
                connection: Mutex::new(configured(connection, schema)?),
                queue: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Runs `f` with the whole connection (it may open a transaction of its
    /// own): on this thread when the connection is free (a statement or two
    /// take microseconds; handing them to another thread and back cost
    /// more than the work), else queued for the caller that holds it. When
    /// another process holds the file's write lock, SQLite's busy handler
    /// waits on the thread that runs the call.
    pub async fn call<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<rusqlite::Error> + Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, E> + Send + 'static,
    {
        if let Ok(mut guard) = self.shared.connection.try_lock() {
            let result = f(&mut guard);
            self.shared.combine(guard);
            return result;
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Job::Plain(Box::new(move |connection: &mut Connection| {
            let _ = reply.send(f(connection));
        }));
        self.wait_for(job, answer).await
    }

    /// Runs `f`, which only reads: alone when the connection is free, else
    /// with the other reads queued meanwhile in one read transaction (one
    /// set of file locks for all of them; SQLite takes and drops them for
    /// every statement run outside a transaction).
    pub async fn read<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<rusqlite::Error> + Send + 'static,
        F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
    {
        if let Ok(guard) = self.shared.connection.try_lock() {
            let result = f(&guard);
            self.shared.combine(guard);
            return result;
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Job::Read(Box::new(move |connection: &Connection| {
            let _ = reply.send(f(connection));
        }));
        self.wait_for(job, answer).await
    }

    /// Runs the write `f` inside a transaction that may be shared with other
    /// writes queued at the same time, in a savepoint of its own: when `f`
    /// fails, what it wrote is rolled back and the others are kept. Its
    /// result is returned once the transaction committed (an `Ok` of a
    /// transaction that then failed to commit becomes that error). `f` must
    /// not begin or end a transaction itself.
    pub async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<rusqlite::Error> + Send + 'static,
        F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Job::Write(Box::new(Staged {
            write: Some(f),
            result: None,
            reply,
        }));
        // Queued either way: a holder found here runs it with whatever else
        // is waiting (`wait_for` tries the connection once more).
        self.wait_for(job, answer).await
    }

    /// Queues `job`, makes sure someone runs it, and waits for its answer.
    async fn wait_for<T, E: From<rusqlite::Error>>(
        &self,
        job: Job,
        answer: tokio::sync::oneshot::Receiver<Result<T, E>>,
    ) -> Result<T, E> {
        self.shared.enqueue(job);
        // The holder may have let go between our try and the push: whoever
        // takes the connection now runs the queue.
        self.shared.run_queue_if_free();
        answer.await.unwrap_or_else(|_| Err(E::from(abandoned())))
    }
}

/// The error of a queued call whose runner went away without answering (it
/// panicked).
fn abandoned() -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure("the call was dropped before it ran".into())
}

impl Shared {
    fn enqueue(&self, job: Job) {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).push(job);
    }

    /// Runs the queue here if nobody holds the connection.
    fn run_queue_if_free(self: &Arc<Self>) {
        if let Ok(guard) = self.connection.try_lock() {
            self.combine(guard);
        }
    }

    fn take_queue(&self) -> Vec<Job> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Runs what is queued while holding the connection, lets it go, and
    /// takes it again if more was queued meanwhile (so no queued call is
    /// left waiting for a holder that has gone). After
    /// [`COMBINE_ROUNDS`] rounds another thread carries on, so one caller
    /// does not serve the others forever.
    fn combine(self: &Arc<Self>, guard: MutexGuard<'_, Connection>) {
        let mut guard = Some(guard);
        for _ in 0..COMBINE_ROUNDS {
            let Some(mut held) = guard.take() else {
                return;
            };
            let jobs = self.take_queue();
            if !jobs.is_empty() {
                run_jobs(&mut held, jobs);
            }
            drop(held);
            if self.queue.lock().unwrap_or_else(PoisonError::into_inner).is_empty() {
                return;
            }
            guard = self.connection.try_lock().ok();
        }
        if guard.is_some() || !self.queue.lock().unwrap_or_else(PoisonError::into_inner).is_empty() {
            drop(guard);
            let shared = Arc::clone(self);
            tokio::task::spawn_blocking(move || {
                let held = shared.connection.lock().unwrap_or_else(PoisonError::into_inner);
                shared.combine(held);
            });
        }
    }
}

/// Runs the plain calls one after another, then the reads and the writes
/// in one transaction: the reads first (they see what was committed before
/// it), then the writes, each in its savepoint.
fn run_jobs(connection: &mut Connection, jobs: Vec<Job>) {
    let mut reads: Vec<ReadJob> = Vec::new();
    let mut writes = Vec::new();
    for job in jobs {
        match job {
            Job::Plain(call) => call(connection),
            Job::Read(read) => reads.push(read),
            Job::Write(write) => writes.push(write),
        }
    }
    match (reads.len(), writes.is_empty()) {
        (0, true) => {}
        // One read needs no transaction of its own.
        (1, true) => {
            for read in reads {
                read(connection);
            }
        }
        (_, true) => {
            let began = connection.execute_batch("BEGIN DEFERRED").is_ok();
            for read in reads {
                read(connection);
            }
            // A read transaction has nothing to keep: ending it only lets
            // go of its snapshot.
            if began {
                let _ = connection.execute_batch("COMMIT");
            }
        }
        (_, false) => {
            let committed = stage_all(connection, &mut reads, &mut writes);
            // The reads need no write lock: those the transaction could not
            // take are run on their own.
            for read in reads {
                read(connection);
            }
            for write in writes {
                write.finish(committed.as_ref().map(|_| ()));
            }
        }
    }
}

/// One `IMMEDIATE` transaction: the reads (taken from `reads`), then every
/// write in its savepoint. When the transaction cannot begin, the reads are
/// left in `reads` for the caller to run.
fn stage_all(
    connection: &mut Connection,
    reads: &mut Vec<ReadJob>,
    writes: &mut [Box<dyn StagedWrite>],
) -> rusqlite::Result<()> {
    let mut tx = connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    for read in reads.drain(..) {
        read(&tx);
    }
    for write in writes.iter_mut() {
        let savepoint = tx.savepoint()?;
        if write.stage(&savepoint) {
            savepoint.commit()?;
        }
        // Dropped without commit: rolled back to where it began.
    }
    tx.commit()
}

/// WAL pages after which a commit checkpoints (SQLite's default is 1,000).
const WAL_AUTOCHECKPOINT_PAGES: i64 = 4_000;

/// Prepared statements kept per connection.
const STATEMENT_CACHE: usize = 128;

pub(crate) fn open_connection(path: &Path, schema: &str) -> rusqlite::Result<Connection> {
    configured(Connection::open(path)?, schema)
}

fn configured(connection: Connection, schema: &str) -> rusqlite::Result<Connection> {
    connection.busy_timeout(Duration::from_secs(30))?;
    // Every statement of the hot path is prepared once and kept: parsing
    // one costs more than running it. rusqlite keeps 16 by default, fewer
    // than a store and a transport use, so they would push each other out.
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // Switching a new file to WAL and creating the schema take locks
    // that SQLite does not always wait for (the busy handler is skipped
    // for some of them), so two processes starting on a fresh data
    // directory retry here instead of failing.
    let mut attempt = 0u32;
    loop {
        let result = connection
            .pragma_update(None, "journal_mode", "WAL")
            .and_then(|()| connection.pragma_update(None, "synchronous", "NORMAL"))
            .and_then(|()| connection.pragma_update(None, "foreign_keys", "ON"))
            // 32 MiB of page cache (SQLite's default is 2 MiB): a queue of
            // 100,000 messages keeps its index and recent pages in memory,
            // so a receive or a settle does not read them back from the
            // file each time.
            .and_then(|()| connection.pragma_update(None, "cache_size", -32_768))
            // Checkpoint every 4,000 pages (16 MiB of WAL) rather than 1,000:
            // the hot pages (the tails of the queue, the idempotency records
            // and the timeline) are rewritten by every commit, so a longer
            // interval copies each of them once for more commits, and the
            // committing thread stops for a checkpoint's fsync a quarter as
            // often.
            .and_then(|()| connection.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES))
            .and_then(|()| connection.execute_batch(schema));
        match result {
            Ok(()) => break,
            Err(err) if is_busy(&err) && attempt < 200 => {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(10 + u64::from(attempt % 10) * 5));
            }
            Err(err) => return Err(err),
        }
    }
    Ok(connection)
}

fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Whether a SQLite error says a stored value does not decode (the row is
/// corrupt), rather than that the database failed.
fn is_decode_error(err: &rusqlite::Error) -> bool {
    matches!(
        err,
        rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::Utf8Error(..)
    )
}

impl From<rusqlite::Error> for StoreError {
    fn from(err: rusqlite::Error) -> Self {
        if is_decode_error(&err) {
            Self::corrupt(SOME_STORE_OPERATION, err)
        } else {
            Self::unavailable(SOME_STORE_OPERATION, err)
        }
    }
}

impl From<rusqlite::Error> for TransportError {
    fn from(err: rusqlite::Error) -> Self {
        if is_decode_error(&err) {
            Self::Corrupt {
                what: SOME_TRANSPORT_OPERATION.to_owned(),
                source: Box::new(err),
            }
        } else {
            Self::unavailable(SOME_TRANSPORT_OPERATION, err)
        }
    }
}

/// A column value that does not decode, as the error a row mapper returns:
/// `what` names the value (`error chain of dead letter <id>`), and the
/// conversion into [`StoreError`] makes it [`StoreError::Corrupt`].
pub(crate) fn undecodable(
    column: usize,
    what: impl Into<String>,
    source: impl Into<crate::ports::error::BoxError>,
) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        column,
        rusqlite::types::Type::Text,
        Box::new(Undecodable {
            what: what.into(),
            source: source.into(),
        }),
    )
}

/// See [`undecodable`].
#[derive(Debug, thiserror::Error)]
#[error("{what} does not decode: {source}")]
struct Undecodable {
    what: String,
    #[source]
    source: crate::ports::error::BoxError,
}

#[cfg(test)]
// The tests hold the connection across awaits on purpose: the calls they
// make meanwhile must queue up and be combined.
#[allow(clippy::await_holding_lock)]
mod tests {
    use super::*;

    fn numbers() -> Database {
        Database::open_in_memory("CREATE TABLE numbers (n INTEGER PRIMARY KEY);").unwrap()
    }

    fn insert(n: i64) -> impl FnOnce(&Connection) -> Result<i64, StoreError> + Send + 'static {
        move |connection| {
            connection
                .prepare_cached("INSERT INTO numbers (n) VALUES (?1)")?
                .execute([n])?;
            Ok(n)
        }
    }

    async fn stored(database: &Database) -> Vec<i64> {
        database
            .call(|connection| {
                let mut statement = connection.prepare("SELECT n FROM numbers ORDER BY n")?;
                let rows = statement.query_map([], |row| row.get(0))?;
                rows.collect::<Result<Vec<i64>, _>>().map_err(StoreError::from)
            })
            .await
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn writes_made_at_once_all_commit_and_each_gets_its_own_answer() {
        let database = numbers();
        let writes = (0..200).map(|n| {
            let database = database.clone();
            tokio::spawn(async move { database.write(insert(n)).await })
        });
        let answers = futures_util::future::join_all(writes).await;
        let mut answered: Vec<i64> = answers.into_iter().map(|a| a.unwrap().unwrap()).collect();
        answered.sort_unstable();
        assert_eq!(answered, (0..200).collect::<Vec<_>>());
        assert_eq!(stored(&database).await, (0..200).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_failed_write_is_rolled_back_alone_when_it_shares_the_transaction() {
        let database = numbers();
        // Hold the connection so the writes below queue up and are combined
        // into one transaction by whoever runs the queue.
        let held = database.shared.connection.lock().unwrap();
        let mut writes = Vec::new();
        for n in 0..10 {
            let database = database.clone();
            writes.push(tokio::spawn(async move {
                database
                    .write(move |connection| {
                        connection
                            .prepare_cached("INSERT INTO numbers (n) VALUES (?1)")?
                            .execute([100 + n])?;
                        if n % 3 == 0 {
                            // Wrote, then failed: this write must leave nothing.
                            return Err(StoreError::unavailable("a test write", "refused on purpose"));
                        }
                        Ok(n)
                    })
                    .await
            }));
        }
        while database.shared.queue.lock().unwrap().len() < 10 {
            tokio::task::yield_now().await;
        }
        database.shared.combine(held);
        let mut kept = Vec::new();
        for (n, write) in writes.into_iter().enumerate() {
            match write.await.unwrap() {
                Ok(answer) => {
                    assert_eq!(answer, i64::try_from(n).unwrap());
                    kept.push(100 + answer);
                }
                Err(err) => assert!(n % 3 == 0, "write {n} failed: {err}"),
            }
        }
        assert_eq!(kept, vec![101, 102, 104, 105, 107, 108]);
        assert_eq!(stored(&database).await, kept);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn no_write_says_done_when_the_shared_transaction_did_not_commit() {
        // A deferred foreign key is checked at COMMIT: an orphan written by
        // one write makes the whole shared transaction fail to commit.
        let database = Database::open_in_memory(
            "CREATE TABLE numbers (n INTEGER PRIMARY KEY);
             CREATE TABLE parents (id INTEGER PRIMARY KEY);
             CREATE TABLE children (id INTEGER PRIMARY KEY,
                 parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED);",
        )
        .unwrap();
        let held = database.shared.connection.lock().unwrap();
        let good = {
            let database = database.clone();
            tokio::spawn(async move { database.write(insert(1)).await })
        };
        let orphan = {
            let database = database.clone();
            tokio::spawn(async move {
                database
                    .write(|connection| {
                        connection.execute("INSERT INTO children (id, parent) VALUES (1, 42)", [])?;
                        Ok::<_, StoreError>(())
                    })
                    .await
            })
        };
        while database.shared.queue.lock().unwrap().len() < 2 {
            tokio::task::yield_now().await;
        }
        database.shared.combine(held);
        let good = good.await.unwrap();
        let orphan = orphan.await.unwrap();
        let err = good.expect_err("a write reported done though its transaction did not commit");
        assert!(err.to_string().contains("did not commit"), "{err}");
        assert!(orphan.is_err());
        assert_eq!(stored(&database).await, Vec::<i64>::new());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn plain_calls_queued_behind_a_holder_are_run_when_it_lets_go() {
        let database = numbers();
        let held = database.shared.connection.lock().unwrap();
        let calls: Vec<_> = (0..20)
            .map(|n| {
                let database = database.clone();
                tokio::spawn(async move {
                    database
                        .call(move |connection| {
                            connection.execute("INSERT INTO numbers (n) VALUES (?1)", [n])?;
                            Ok::<_, StoreError>(n)
                        })
                        .await
                })
            })
            .collect();
        while database.shared.queue.lock().unwrap().len() < 20 {
            tokio::task::yield_now().await;
        }
        database.shared.combine(held);
        for call in calls {
            call.await.unwrap().unwrap();
        }
        assert_eq!(stored(&database).await, (0..20).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn reads_queued_with_writes_see_what_was_committed_before_them() {
        let database = numbers();
        database.write(insert(7)).await.unwrap();
        let held = database.shared.connection.lock().unwrap();
        let count = |database: Database| {
            tokio::spawn(async move {
                database
                    .read(|connection| {
                        Ok::<i64, StoreError>(
                            connection
                                .prepare_cached("SELECT count(*) FROM numbers")?
                                .query_row([], |row| row.get(0))?,
                        )
                    })
                    .await
            })
        };
        let reads = [count(database.clone()), count(database.clone())];
        let write = {
            let database = database.clone();
            tokio::spawn(async move { database.write(insert(8)).await })
        };
        while database.shared.queue.lock().unwrap().len() < 3 {
            tokio::task::yield_now().await;
        }
        database.shared.combine(held);
        for read in reads {
            assert_eq!(
                read.await.unwrap().unwrap(),
                1,
                "a read saw what was committed before it"
            );
        }
        assert_eq!(write.await.unwrap().unwrap(), 8);
        assert_eq!(stored(&database).await, vec![7, 8]);
    }
}
