//! Settling a received message: the one port through which the host
//! carries out every decision about a message it received.
//!
//! The host decides what becomes of a message ([`crate::host::decision`]);
//! each decision that writes or tells the transport anything becomes one
//! [`Settlement`]: the handling is committed, a duplicate is acknowledged,
//! a failed attempt is retried, the message is dead-lettered or given back.
//! [`Settle::settle`] writes what the settlement records **and** settles the
//! received message on the transport. Which implementation runs is decided
//! once, by [`crate::wiring`], from the pair of backends:
//!
//! - store and transport in one PostgreSQL database:
//!   [`PostgresSettle`](crate::backends::postgres::settle::PostgresSettle),
//!   one transaction for every settlement (a retry and a dead letter as
//!   atomic as a success), the outgoing messages of a handling written
//!   straight into the transport's tables;
//! - every other pair (SQLite store with the embedded transport, any store
//!   with Service Bus, the memory transport in tests): [`StoreThenSettle`]
//!   below, at least once.

use std::sync::Arc;

use async_trait::async_trait;

use crate::ports::error::NextStep;
use crate::ports::store::{
    CommitOutcome, DeadLetterRecord, HandledMessage, RetryWrite, Store, StoreError, TimelineEntry,
};
use crate::ports::transport::{LockToken, Transport, TransportError};

/// What to write, and how to settle the received message.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// The handler succeeded: write its handling (idempotency record, saga
    /// with its version check, outgoing messages, timeline) and complete
    /// the message.
    Handled(HandledMessage),
    /// This consumer handled the message before: write the `duplicate`
    /// timeline line and complete the message.
    Duplicate(TimelineEntry),
    /// The attempt failed and will be retried: write the attempt, the retry
    /// to send and its timeline line, and complete the message.
    Retry(RetryWrite),
    /// The message will not be handled: write the dead letter (original
    /// bytes, error chain, attempts) and its timeline line, and dead-letter
    /// the message on the transport with the record's reason and (cut)
    /// description.
    DeadLetter {
        /// The dead letter.
        record: DeadLetterRecord,
        /// Its timeline line, when the envelope could be read.
        timeline: Option<TimelineEntry>,
    },
    /// Nothing to write: give the message back for redelivery now.
    Abandon,
}

impl Settlement {
    /// The settlement's name, for logs and the failpoint line.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Handled(_) => "handled",
            Self::Duplicate(_) => "duplicate",
            Self::Retry(_) => "retry",
            Self::DeadLetter { .. } => "dead-letter",
            Self::Abandon => "abandon",
        }
    }

    /// The message id it is about, when known (for the failpoint line).
    fn message_id(&self) -> Option<&str> {
        match self {
            Self::Handled(handled) => Some(&handled.message_id),
            Self::Duplicate(line) => Some(&line.message_id),
            Self::Retry(retry) => Some(&retry.message_id),
            Self::DeadLetter { record, .. } => record.message_id.as_deref(),
            Self::Abandon => None,
        }
    }
}

/// The description a transport's dead-letter queue keeps: the record's,
/// cut to 1024 bytes (Service Bus's limit for
/// `DeadLetterErrorDescription`) at a character boundary.
pub fn transport_description(record: &DeadLetterRecord) -> &str {
    let description = record.description.as_str();
    let mut cut = description.len().min(1024);
    while !description.is_char_boundary(cut) {
        cut -= 1;
    }
    &description[..cut]
}

/// What [`Settle::settle`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The settlement is written and the received message settled.
    Written,
    /// A [`Settlement::Handled`] for a message this consumer had already
    /// handled: nothing written, the received message completed.
    AlreadyHandled,
    /// A [`Settlement::Handled`] whose saga moved on since the handler
    /// loaded it: nothing written, the received message is still locked.
    /// Load the saga and handle again.
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

/// Why [`Settle::settle`] failed. Nothing was written and the received
/// message is not settled, except where a variant says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    /// The received message's lock was lost before its settlement was
    /// written: nothing was written, and the message will be delivered
    /// again.
    #[error(
        "lock lost on {entity} message {sequence} before it was settled; nothing was written, it will be delivered again"
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
    /// The transport failed to settle the message (the store's writes, on
    /// a pair that cannot share a transaction, are kept: a redelivery is
    /// recognised by them).
    #[error(transparent)]
    Transport(#[from] TransportError),
}

impl SettleError {
    /// What to do with the received message.
    pub fn next_step(&self) -> NextStep {
        match self {
            Self::LockLost { .. } => NextStep::Retry,
            Self::Store(err) => err.next_step(),
            Self::Transport(err) => err.next_step(),
        }
    }

    pub(crate) fn lock_lost(lock: &LockToken) -> Self {
        Self::LockLost {
            entity: lock.entity.path(),
            sequence: lock.sequence,
        }
    }
}

/// Test hooks that stop a settle midway and wait to be killed, so crash
/// tests can show what a kill there leaves behind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Halts {
    /// `BOSUN_FAILPOINT=halt-after-state-commit`: after a handling is
    /// written, before the message is completed (print `FAILPOINT
    /// halt-after-state-commit <messageId>`).
    pub after_state_commit: bool,
    /// `BOSUN_FAILPOINT=halt-in-failure-settle`: in the settle of a retry
    /// or a dead letter, after the store's writes and before the settle is
    /// finished (on PostgreSQL, before its transaction commits; on other
    /// pairs, before the transport is told), print `FAILPOINT
    /// halt-in-failure-settle <kind> <messageId>`.
    pub in_failure_settle: bool,
}

impl Halts {
    /// Stops here for ever if `settlement` is one these halts stop at
    /// after its store writes.
    pub(crate) async fn after_store_writes(&self, settlement: &Settlement) {
        match settlement {
            Settlement::Handled(handled) => self.after_handling_written(&handled.message_id).await,
            Settlement::Retry(_) | Settlement::DeadLetter { .. } if self.in_failure_settle => {
                let id = settlement.message_id().unwrap_or("-");
                tracing::error!("failpoint halt-in-failure-settle reached; halting");
                eprintln!("FAILPOINT halt-in-failure-settle {} {id}", settlement.kind());
                std::future::pending::<()>().await;
            }
            _ => {}
        }
    }

    /// Stops here for ever, after the handling of `message_id` is written,
    /// if [`Halts::after_state_commit`].
    pub(crate) async fn after_handling_written(&self, message_id: &str) {
        if self.after_state_commit {
            tracing::error!("failpoint halt-after-state-commit reached; halting");
            eprintln!("FAILPOINT halt-after-state-commit {message_id}");
            std::future::pending::<()>().await;
        }
    }
}

/// Writes what a settlement records and settles the received message: the
/// one port the host settles every message through.
#[async_trait]
pub trait Settle: Send + Sync {
    /// Writes `settlement` and settles the message received under `lock`.
    /// See [`Settled`] and [`SettleError`] for what each answer leaves
    /// behind.
    async fn settle(&self, settlement: Settlement, lock: &LockToken) -> Result<Settled, SettleError>;
}

/// The settle for a store and a transport that do not share a transaction:
/// write in the store's transaction, then settle the message on the
/// transport.
///
/// **Guarantee: at least once.** Before writing, the transport is asked
/// whether the lock still holds ([`Transport::is_locked`]), so a message
/// whose lock is already lost gets [`SettleError::LockLost`] and nothing is
/// written (when the transport cannot tell, the settle goes ahead). After
/// the store's transaction commits, the message is settled; if the process
/// dies between the two, or the transport fails (the lock was lost
/// meanwhile, the broker is down), the message is delivered again and what
/// was written makes the second delivery harmless: the idempotency record
/// makes a second handling a no-op ([`HandledStore::handled_and_saga`](crate::ports::store::HandledStore::handled_and_saga) is checked
/// before the handler runs, and [`HandledStore::commit_handled`](crate::ports::store::HandledStore::commit_handled) refuses a second
/// record), an attempt already recorded does not schedule a second retry.
/// The outgoing messages are in the store's outbox, written in the same
/// transaction, and the outbox dispatcher sends them (the transport's
/// duplicate detection drops a second send).
///
/// A dead letter whose record cannot be written is dead-lettered on the
/// transport anyway: giving it back would loop, and the transport's
/// dead-letter queue keeps the message.
///
/// The SQLite store and the embedded transport keep separate files
/// (`state.db` and the transport's), opened by separate handles; SQLite
/// makes a transaction over two WAL-mode files atomic per file only, not
/// across them, so this pair settles this way too.
pub struct StoreThenSettle {
    store: Arc<dyn Store>,
    transport: Arc<dyn Transport>,
    halts: Halts,
}

impl StoreThenSettle {
    /// Writes in `store`, then settles on `transport`.
    pub fn new(store: Arc<dyn Store>, transport: Arc<dyn Transport>) -> Self {
        Self {
            store,
            transport,
            halts: Halts::default(),
        }
    }

    /// Stops at `halts` (crash tests).
    pub fn halting(mut self, halts: Halts) -> Self {
        self.halts = halts;
        self
    }

    /// Whether the lock still holds: an error when it is known lost.
    async fn still_locked(&self, lock: &LockToken) -> Result<(), SettleError> {
        match self.transport.is_locked(lock).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(SettleError::lock_lost(lock)),
            // As if it held: a redelivery after a lost lock is recognised
            // by what was written.
            Err(err) => {
                tracing::warn!(error = %err, "could not check the lock; settling anyway");
                Ok(())
            }
        }
    }

    async fn complete(&self, lock: &LockToken) {
        if let Err(err) = self.transport.complete(lock).await {
            tracing::warn!(error = %err, "could not complete; a redelivery will be recognised as handled");
        }
    }
}

#[async_trait]
impl Settle for StoreThenSettle {
    async fn settle(&self, settlement: Settlement, lock: &LockToken) -> Result<Settled, SettleError> {
        match &settlement {
            Settlement::Abandon => {
                self.transport.abandon(lock).await?;
                return Ok(Settled::Written);
            }
            Settlement::Duplicate(line) => {
                if let Err(err) = self.store.append_timeline(vec![line.clone()]).await {
                    tracing::warn!(error = %err, "could not record the duplicate on the timeline");
                }
                self.complete(lock).await;
                return Ok(Settled::AlreadyHandled);
            }
            Settlement::Handled(_) | Settlement::Retry(_) | Settlement::DeadLetter { .. } => {}
        }
        self.still_locked(lock).await?;
        let status = match &settlement {
            Settlement::Handled(handled) => match self.store.commit_handled(handled.clone()).await {
                Ok(CommitOutcome::Committed) => Settled::Written,
                Ok(CommitOutcome::AlreadyHandled) => Settled::AlreadyHandled,
                Err(StoreError::SagaConflict {
                    kind,
                    key,
                    expected,
                    found,
                }) => {
                    return Ok(Settled::SagaConflict {
                        kind,
                        key,
                        expected,
                        found,
                    });
                }
                Err(err) => return Err(err.into()),
            },
            Settlement::Retry(retry) => {
                self.store.record_retry(retry.clone()).await?;
                Settled::Written
            }
            Settlement::DeadLetter { record, timeline } => {
                if let Err(err) = self.store.record_dead_letter(record.clone(), timeline.clone()).await {
                    // Giving it back would loop; the transport's dead-letter
                    // queue still keeps the message.
                    tracing::error!(error = %err, "could not record the dead letter; it stays in the transport's dead-letter queue");
                }
                Settled::Written
            }
            Settlement::Duplicate(_) | Settlement::Abandon => Settled::Written,
        };
        if status == Settled::Written {
            self.halts.after_store_writes(&settlement).await;
        }
        match &settlement {
            Settlement::DeadLetter { record, .. } => {
                self.transport
                    .dead_letter(lock, &record.reason, transport_description(record))
                    .await?;
            }
            _ => self.complete(lock).await,
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
    use crate::ports::behaviour::settle::{Pairing, run_all};
    use crate::ports::transport::Broker;

    fn pairing(store: Arc<dyn Store>, transport: Arc<dyn Broker>) -> Pairing {
        Pairing {
            settle: Arc::new(StoreThenSettle::new(
                Arc::clone(&store),
                Arc::clone(&transport) as Arc<dyn Transport>,
            )),
            store,
            transport,
        }
    }

    #[test]
    fn each_error_says_what_to_do_next() {
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let cases = [
            (
                SettleError::LockLost {
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
