//! The commit of a handled message: the one operation the host calls once a
//! handler succeeded.
//!
//! [`Commit::commit`] records that a consumer handled a message (the
//! idempotency record, the saga write with its version check, the outgoing
//! messages, the timeline lines) **and** settles (completes) the received
//! message. Which implementation runs is decided once, by
//! [`crate::wiring`], from the pair of backends:
//!
//! - store and transport in one PostgreSQL database:
//!   [`PostgresCommit`](crate::backends::postgres::commit::PostgresCommit),
//!   one transaction for everything, the outgoing messages written straight
//!   into the transport's tables;
//! - every other pair (SQLite store with the embedded transport, any store
//!   with Service Bus, the memory transport in tests): [`StoreThenComplete`]
//!   below, at least once.

use std::sync::Arc;

use async_trait::async_trait;

use crate::ports::error::NextStep;
use crate::ports::store::{CommitOutcome, HandledMessage, Store, StoreError};
use crate::ports::transport::{LockToken, Transport};

/// What [`Commit::commit`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitStatus {
    /// The handling is written and the received message settled.
    Written,
    /// This consumer had already handled this message: nothing written, the
    /// received message settled.
    AlreadyHandled,
    /// The saga moved on since the handler loaded it: nothing written, the
    /// received message is still locked. Load the saga and handle again.
    SagaConflict {
        /// Saga kind.
        kind: String,
        /// Saga key.
        key: String,
        /// The version the handler loaded.
        expected: i64,
        /// The version in the store.
        found: i64,
    },
}

/// Why [`Commit::commit`] failed. Nothing was written in every case; the
/// received message is not settled.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The received message's lock was lost before its handling was
    /// written: nothing was written, and the message will be delivered
    /// again.
    #[error(
        "lock lost on {entity} message {sequence} before the commit; nothing was written, it will be delivered again"
    )]
    LockLost {
        /// The entity the message was received from.
        entity: String,
        /// The message's sequence number.
        sequence: i64,
    },
    /// The store failed; nothing was written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl CommitError {
    /// What to do with the received message.
    pub fn next_step(&self) -> NextStep {
        match self {
            Self::LockLost { .. } => NextStep::Retry,
            Self::Store(err) => err.next_step(),
        }
    }

    fn lock_lost(lock: &LockToken) -> Self {
        Self::LockLost {
            entity: lock.entity.path(),
            sequence: lock.sequence,
        }
    }
}

/// Records a handled message and settles it: the one commit the host calls.
#[async_trait]
pub trait Commit: Send + Sync {
    /// Writes `handled` (idempotency record, saga with its version check,
    /// outgoing messages, timeline) and completes the message received
    /// under `lock`. See [`CommitStatus`] and [`CommitError`] for what each
    /// answer leaves behind.
    async fn commit(&self, handled: HandledMessage, lock: &LockToken) -> Result<CommitStatus, CommitError>;
}

/// The commit for a store and a transport that do not share a transaction:
/// commit the store's transaction, then complete the message on the
/// transport.
///
/// **Guarantee: at least once.** Before writing, the transport is asked
/// whether the lock still holds ([`Transport::is_locked`]), so a message
/// whose lock is already lost gets [`CommitError::LockLost`] and nothing is
/// written (when the transport cannot tell, the commit goes ahead). After the store's transaction commits, the message
/// is completed; if the process dies between the two, or the completion
/// fails (the lock was lost meanwhile, the broker is down), the message is
/// delivered again and the idempotency record written with the handling
/// makes that second handling a no-op ([`Store::is_handled`] is checked
/// before the handler runs, and [`Store::commit_handled`] refuses a second
/// record). The outgoing messages are in the store's outbox, written in the
/// same transaction as the handling, and the outbox dispatcher sends them
/// (the transport's duplicate detection drops a second send).
///
/// The SQLite store and the embedded transport keep separate files
/// (`state.db` and the transport's), opened by separate handles; SQLite
/// makes a transaction over two WAL-mode files atomic per file only, not
/// across them, so this pair commits this way too.
pub struct StoreThenComplete {
    store: Arc<dyn Store>,
    transport: Arc<dyn Transport>,
    halt_after_state_commit: bool,
}

impl StoreThenComplete {
    /// Commits in `store`, then completes on `transport`.
    pub fn new(store: Arc<dyn Store>, transport: Arc<dyn Transport>) -> Self {
        Self {
            store,
            transport,
            halt_after_state_commit: false,
        }
    }

    /// Test hook (`BOSUN_FAILPOINT=halt-after-state-commit`): after the
    /// store's transaction commits and before the message is completed,
    /// print `FAILPOINT halt-after-state-commit <messageId>` and wait
    /// forever, so a crash test can kill the process between the two.
    pub fn halting_after_state_commit(mut self, halt: bool) -> Self {
        self.halt_after_state_commit = halt;
        self
    }
}

#[async_trait]
impl Commit for StoreThenComplete {
    async fn commit(&self, handled: HandledMessage, lock: &LockToken) -> Result<CommitStatus, CommitError> {
        match self.transport.is_locked(lock).await {
            Ok(true) => {}
            Ok(false) => return Err(CommitError::lock_lost(lock)),
            // As if it held: a redelivery after a lost lock is recognised
            // as handled.
            Err(err) => tracing::warn!(error = %err, "could not check the lock; committing anyway"),
        }
        let message_id = handled.message_id.clone();
        let status = match self.store.commit_handled(handled).await {
            Ok(CommitOutcome::Committed) => CommitStatus::Written,
            Ok(CommitOutcome::AlreadyHandled) => CommitStatus::AlreadyHandled,
            Err(StoreError::SagaConflict {
                kind,
                key,
                expected,
                found,
            }) => {
                return Ok(CommitStatus::SagaConflict {
                    kind,
                    key,
                    expected,
                    found,
                });
            }
            Err(err) => return Err(CommitError::Store(err)),
        };
        if self.halt_after_state_commit && status == CommitStatus::Written {
            tracing::error!("failpoint halt-after-state-commit reached; halting");
            eprintln!("FAILPOINT halt-after-state-commit {message_id}");
            std::future::pending::<()>().await;
        }
        if let Err(err) = self.transport.complete(lock).await {
            tracing::warn!(error = %err, "could not complete; a redelivery will be recognised as handled");
        }
        Ok(status)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::backends::memory::MemoryTransport;
    use crate::backends::sqlite::store::SqliteStore;
    use crate::backends::sqlite::transport::EmbeddedTransport;
    use crate::ports::behaviour::commit::{Pairing, run_all};

    fn pairing(store: Arc<dyn Store>, transport: Arc<dyn Transport>) -> Pairing {
        Pairing {
            commit: Arc::new(StoreThenComplete::new(Arc::clone(&store), Arc::clone(&transport))),
            store,
            transport,
        }
    }

    #[test]
    fn each_error_says_what_to_do_next() {
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let cases = [
            (
                CommitError::LockLost {
                    entity: "commit".into(),
                    sequence: 1,
                },
                NextStep::Retry,
            ),
            (
                StoreError::unavailable("loading saga release/r-1", "disk I/O error").into(),
                NextStep::Retry,
            ),
            (
                StoreError::corrupt("state of saga release/r-1", json).into(),
                NextStep::DeadLetter,
            ),
            (
                StoreError::SchemaMismatch { found: 4, expected: 5 }.into(),
                NextStep::Stop,
            ),
        ];
        for (err, next) in cases {
            assert_eq!(err.next_step(), next, "{err}");
        }
    }

    #[tokio::test]
    async fn the_sqlite_store_with_the_embedded_transport_passes_the_commit_suite() {
        let dir = tempfile::tempdir().unwrap();
        let made = AtomicUsize::new(0);
        run_all(|| {
            // Two files per pair, as wiring opens them under a data directory.
            let n = made.fetch_add(1, Ordering::SeqCst);
            let (state, messages) = (
                dir.path().join(format!("state-{n}.db")),
                dir.path().join(format!("transport-{n}.db")),
            );
            async move {
                pairing(
                    Arc::new(SqliteStore::open(&state).unwrap()),
                    Arc::new(EmbeddedTransport::open(&messages, 10).unwrap()),
                )
            }
        })
        .await;
    }

    #[tokio::test]
    async fn the_sqlite_store_with_the_memory_transport_passes_the_commit_suite() {
        run_all(|| async {
            pairing(
                Arc::new(SqliteStore::in_memory().unwrap()),
                Arc::new(MemoryTransport::new(10)),
            )
        })
        .await;
    }
}
