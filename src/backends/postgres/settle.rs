//! [`PostgresSettle`]: the [`Settle`] of a store and a transport in one
//! PostgreSQL database, each settlement in one transaction.

use async_trait::async_trait;

use crate::backends::postgres::PostgresDatabase;
use crate::backends::postgres::notify::Wakes;
use crate::backends::postgres::queue::{complete_locked, dead_letter_locked};
use crate::backends::postgres::store::commit::commit_in_one_statement;
use crate::backends::postgres::store::dead_letters::record_dead_letter_in;
use crate::backends::postgres::store::handled::record_retry_in;
use crate::backends::postgres::store::timeline::insert_timeline;
use crate::backends::postgres::transport::PostgresTransport;
use crate::ports::settle::{Halts, Settle, SettleError, Settled, Settlement, transport_description};
use crate::ports::store::{DeadLetterRecord, HandledMessage, RetryWrite, StoreError, TimelineEntry, doing};
use crate::ports::transport::{LockToken, Transport};

mod batch;

/// The settle for the PostgreSQL store with the PostgreSQL transport on the
/// same database: every settlement is one transaction.
///
/// - **A handling** ([`Settlement::Handled`]) completes the received
///   message (deletes it, if its lock is still held; the row lock keeps
///   competing receivers away until the end), writes the idempotency
///   record, the saga (version checked), the outgoing messages straight
///   into their queues or subscriptions (with duplicate detection; recorded
///   in the outbox as already dispatched, with their `sent` timeline lines)
///   and the timeline.
/// - **A retry** completes the received message and writes the attempt,
///   the retry (in the outbox, for the dispatcher) and its timeline line.
/// - **A dead letter** marks the received message dead-lettered and writes
///   the dead letter and its timeline line.
/// - **A duplicate** completes the message and writes its timeline line.
///
/// **Guarantee: exactly once per delivery.** Either all of it is written
/// and the message is settled, or nothing is: [`SettleError::LockLost`]
/// (the lock expired or another receiver took it; the message will be
/// delivered again), [`Settled::SagaConflict`] (the message stays
/// locked), [`SettleError::Store`]. An outgoing message to an entity the
/// transport does not have is left in the outbox for the dispatcher, which
/// reports it.
///
/// **Commits of handlings that meet are batched.** A commit goes to the
/// database at once while fewer than two (`batch::IN_FLIGHT`) calls are on
/// their way; commits that arrive meanwhile wait and go together in the
/// next call (`bosun_commit_many`, migration 12: one round trip, one
/// transaction, one WAL flush for all of them), each written as its own
/// call would have been, a saga conflict undoing only its own message. So
/// one handler's commits cost what they did, and under load the server
/// stops paying a round trip, a parameter bind and a transaction per
/// message. Failures (retries, dead letters) are rare and go alone.
#[derive(Debug, Clone)]
pub struct PostgresSettle {
    transport: PostgresTransport,
    batches: std::sync::Arc<batch::Batches>,
    halts: Halts,
}

impl PostgresSettle {
    /// The settle over `transport`'s database, which the store must use
    /// too (the store's tables and the transport's are written in one
    /// transaction).
    pub fn new(transport: &PostgresTransport) -> Self {
        Self {
            transport: transport.clone(),
            batches: std::sync::Arc::default(),
            halts: Halts::default(),
        }
    }

    /// Stops at `halts` (crash tests).
    pub fn halting(mut self, halts: Halts) -> Self {
        self.halts = halts;
        self
    }

    fn database(&self) -> &PostgresDatabase {
        self.transport.database()
    }

    /// A retry, a dead letter or a duplicate (`alone`, of `settlement`):
    /// the message settled and the settlement's rows written, in one
    /// transaction.
    async fn settle_alone(
        &self,
        settlement: &Settlement,
        alone: Alone<'_>,
        lock: &LockToken,
    ) -> Result<Settled, SettleError> {
        let database = self.database();
        let doing = || {
            format!(
                "settling ({}) {} message {}",
                settlement.kind(),
                lock.entity,
                lock.sequence
            )
        };
        let store = |err: sqlx_core::Error| SettleError::Store(StoreError::from(err).doing(doing()));
        let mut tx = database.pool().begin().await.map_err(store)?;
        let mut wakes = Wakes::default();
        let settled = match alone {
            Alone::DeadLetter(record, _) => {
                dead_letter_locked(&mut *tx, lock, &record.reason, transport_description(record)).await
            }
            Alone::Retry(_) | Alone::Duplicate(_) => complete_locked(&mut *tx, lock).await,
        }
        .map_err(store)?;
        if !settled {
            // Nothing written: the transaction rolls back when dropped.
            return Err(SettleError::lock_lost(lock));
        }
        let written = match alone {
            Alone::Retry(retry) => record_retry_in(&mut tx, retry, &mut wakes).await,
            Alone::DeadLetter(record, timeline) => record_dead_letter_in(&mut tx, record, timeline, &mut wakes).await,
            Alone::Duplicate(line) => insert_timeline(&mut tx, std::slice::from_ref(line), &mut wakes)
                .await
                .map_err(StoreError::from),
        };
        written.map_err(|err| SettleError::Store(err.doing(doing())))?;
        self.halts.after_store_writes(settlement).await;
        tx.commit().await.map_err(store)?;
        database.wake(wakes);
        Ok(match alone {
            Alone::Duplicate(_) => Settled::AlreadyHandled,
            Alone::Retry(_) | Alone::DeadLetter(..) => Settled::Written,
        })
    }
}

/// The settlements written in a transaction of their own: the message
/// completed (or dead-lettered) and what became of it recorded. A handling
/// goes through the batched commit, an abandon writes nothing.
#[derive(Clone, Copy)]
enum Alone<'a> {
    Retry(&'a RetryWrite),
    DeadLetter(&'a DeadLetterRecord, Option<&'a TimelineEntry>),
    Duplicate(&'a TimelineEntry),
}

#[async_trait]
impl Settle for PostgresSettle {
    async fn settle(&self, settlement: Settlement, lock: &LockToken) -> Result<Settled, SettleError> {
        match settlement {
            Settlement::Handled(handled) => {
                let message_id = self.halts.after_state_commit.then(|| handled.message_id.clone());
                let status = batch::commit(self.database(), &self.batches, handled, lock.clone()).await?;
                if let Some(message_id) = message_id.filter(|_| status == Settled::Written) {
                    self.halts.after_handling_written(&message_id).await;
                }
                Ok(status)
            }
            Settlement::Abandon => {
                self.transport.abandon(lock).await?;
                Ok(Settled::Written)
            }
            Settlement::Retry(ref retry) => self.settle_alone(&settlement, Alone::Retry(retry), lock).await,
            Settlement::DeadLetter {
                ref record,
                ref timeline,
            } => {
                self.settle_alone(&settlement, Alone::DeadLetter(record, timeline.as_ref()), lock)
                    .await
            }
            Settlement::Duplicate(ref line) => self.settle_alone(&settlement, Alone::Duplicate(line), lock).await,
        }
    }
}

/// One commit alone: one `bosun_commit` call on a connection of its own,
/// and its wake-ups sent after it.
async fn commit_alone(
    database: &PostgresDatabase,
    handled: &HandledMessage,
    lock: &LockToken,
) -> Result<Settled, SettleError> {
    let doing = || doing::commit_handled(handled);
    let mut conn = database
        .pool()
        .acquire()
        .await
        .map_err(|err| StoreError::from(err).doing(doing()))?;
    let (status, wakes) = commit_in_one_statement(&mut conn, handled, Some(lock))
        .await
        .map_err(|err| match err {
            SettleError::Store(err) => SettleError::Store(err.doing(doing())),
            other => other,
        })?;
    drop(conn);
    database.wake(wakes);
    Ok(status)
}

#[cfg(test)]
mod tests;
