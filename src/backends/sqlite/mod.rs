//! Shared SQLite plumbing for the embedded transport and the SQLite stores:
//! opening a database file in WAL mode with a busy timeout (several `bosun`
//! processes may share one data directory), and running blocking calls off
//! the async runtime.

pub mod store;
pub mod transport;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::Connection;

use crate::ports::store::{SOME_STORE_OPERATION, StoreError};
use crate::ports::transport::{SOME_TRANSPORT_OPERATION, TransportError};

/// A SQLite connection shared by one process, used from blocking tasks.
#[derive(Clone)]
pub struct Database {
    connection: Arc<Mutex<Connection>>,
}

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
    pub(crate) fn downgrade(&self) -> std::sync::Weak<Mutex<Connection>> {
        Arc::downgrade(&self.connection)
    }

    /// The database of a connection handle from [`Database::downgrade`].
    pub(crate) fn from_shared(connection: Arc<Mutex<Connection>>) -> Self {
        Self { connection }
    }

    fn configure(connection: Connection, schema: &str) -> rusqlite::Result<Self> {
        Ok(Self {
            connection: Arc::new(Mutex::new(configured(connection, schema)?)),
        })
    }

    /// Runs `f` with the connection: on this thread when the connection is
    /// free (bosun's statements take microseconds, and handing them to a
    /// blocking thread and back cost many times that: `bosun bench`'s
    /// embedded rows went from 0.05 to 0.16 of their limit at 1 handler),
    /// else on a blocking thread that waits for it. When another process
    /// holds the file's write lock, SQLite's busy handler waits on the
    /// calling thread either way.
    pub async fn call<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<rusqlite::Error> + Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, E> + Send + 'static,
    {
        // Uncontended: run here (a statement or two take microseconds; a
        // hand-off to a blocking thread and back cost more than the work).
        if let Ok(mut guard) = self.connection.try_lock() {
            return f(&mut guard);
        }
        let connection = Arc::clone(&self.connection);
        match tokio::task::spawn_blocking(move || {
            let mut guard = connection.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            f(&mut guard)
        })
        .await
        {
            Ok(result) => result,
            Err(join) => Err(E::from(rusqlite::Error::ToSqlConversionFailure(Box::new(join)))),
        }
    }
}

/// Opens (creating if needed) a database file with bosun's settings (WAL,
/// `synchronous = NORMAL`, foreign keys, a 32 MiB page cache, a 30 s busy
/// timeout) and applies
/// `schema`: the connection every SQLite database of bosun uses (`bosun
/// bench` measures its limit workload on one of these).
pub(crate) fn open_connection(path: &Path, schema: &str) -> rusqlite::Result<Connection> {
    configured(Connection::open(path)?, schema)
}

fn configured(connection: Connection, schema: &str) -> rusqlite::Result<Connection> {
    connection.busy_timeout(Duration::from_secs(30))?;
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
