//! Commits that meet go to the database together: while [`IN_FLIGHT`]
//! calls are on their way, the commits that arrive wait, and the next call
//! takes them all (up to [`MOST_PER_CALL`]) in one `bosun_commit_many`
//! (migration 12): one round trip, one transaction, one WAL flush.
//!
//! Each commit in a call is written exactly as its own `bosun_commit` would
//! have been; a saga conflict rolls back its own message only (a
//! subtransaction), a lost lock writes nothing of its own. Any other error
//! the server reports rolls the whole call back, and then each commit of it
//! runs alone, so one message's failure never becomes another's (a
//! deadlock between two calls is one such error). An error that is not
//! the server's (the pool timed out, the connection dropped: whether the
//! call committed is unknown) is every commit's answer: each message is
//! delivered again, and what was written is found handled.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_core::types::Json;
use sqlx_postgres::PgRow;
use time::OffsetDateTime;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::commit_alone;
use crate::backends::postgres::PostgresDatabase;
use crate::backends::postgres::notify::Wakes;
use crate::backends::postgres::store::commit::{
    OutboxColumns, bind_outbox_and_lines, saga_conflict_status, written_wakes,
};
use crate::backends::postgres::store::timeline::TimelineColumns;
use crate::ports::settle::{SettleError, Settled};
use crate::ports::store::{HandledMessage, StoreError, doing};
use crate::ports::transport::LockToken;

/// How many commit calls one process has on their way at once. Two keep
/// the server busy (one executes while the other waits for its flush); more
/// would only make the batches smaller.
pub(super) const IN_FLIGHT: usize = 2;

/// The most commits one call takes (the rest wait for the next call). Each
/// saga message in a call is a subtransaction; PostgreSQL keeps up to 64 of
/// a transaction's subtransaction ids in shared memory and past that makes
/// every backend's snapshots dearer, so a call stays well under it.
pub(super) const MOST_PER_CALL: usize = 32;

type Answer = Result<Settled, SettleError>;

/// One commit waiting for its call.
struct Waiting {
    handled: HandledMessage,
    lock: LockToken,
    answer: oneshot::Sender<Answer>,
}

/// The commits waiting and the calls on their way, per [`super::PostgresSettle`].
#[derive(Default)]
pub(super) struct Batches {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    waiting: VecDeque<Waiting>,
    /// Tasks sending calls (each sends one call at a time until nothing
    /// waits).
    senders: usize,
    /// The most commits one call has taken so far.
    #[cfg(test)]
    largest_call: usize,
    /// Calls of several commits that the server answered.
    #[cfg(test)]
    answered_calls: usize,
    /// Calls of several commits that failed as a whole.
    #[cfg(test)]
    failed_calls: usize,
}

#[cfg(test)]
impl Batches {
    /// How many commits wait for a call now.
    pub(super) fn waiting(&self) -> usize {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).waiting.len()
    }

    /// The most commits one call has taken so far.
    pub(super) fn largest_call(&self) -> usize {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).largest_call
    }

    /// Calls of several commits the server answered, and those that failed
    /// as a whole.
    pub(super) fn calls(&self) -> (usize, usize) {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        (state.answered_calls, state.failed_calls)
    }

    fn count_call(&self, answered: bool) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if answered {
            state.answered_calls += 1;
        } else {
            state.failed_calls += 1;
        }
    }
}

impl fmt::Debug for Batches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Batches")
            .field("waiting", &state.waiting.len())
            .field("senders", &state.senders)
            .finish()
    }
}

/// Commits `handled`, in a call of its own if fewer than [`IN_FLIGHT`] are
/// on their way, else in the next call with the others that wait.
pub(super) async fn commit(
    database: &PostgresDatabase,
    batches: &Arc<Batches>,
    handled: HandledMessage,
    lock: LockToken,
) -> Answer {
    let (answer, answered) = oneshot::channel();
    let what = (handled.consumer.clone(), handled.message_id.clone());
    let start = {
        let mut state = batches.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.waiting.push_back(Waiting { handled, lock, answer });
        let start = state.senders < IN_FLIGHT;
        if start {
            state.senders += 1;
        }
        start
    };
    if start {
        // A task of its own: a caller that stops waiting (its future
        // dropped) never strands the commits that joined its call.
        tokio::spawn(send_calls(database.clone(), Arc::clone(batches)));
    }
    answered.await.unwrap_or_else(|_| {
        let (consumer, message_id) = what;
        Err(StoreError::unavailable(
            format!("committing message {message_id} handled by {consumer}"),
            "the task sending commits ended before answering (the process is stopping); the message will be delivered again",
        )
        .into())
    })
}

/// Sends calls until nothing waits.
async fn send_calls(database: PostgresDatabase, batches: Arc<Batches>) {
    let mut sender = Sender { batches, ended: false };
    loop {
        let call: Vec<Waiting> = {
            let mut state = sender.batches.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.waiting.is_empty() {
                state.senders -= 1;
                sender.ended = true;
                return;
            }
            let take = state.waiting.len().min(MOST_PER_CALL);
            #[cfg(test)]
            {
                state.largest_call = state.largest_call.max(take);
            }
            state.waiting.drain(..take).collect()
        };
        let _answered = send(&database, call).await;
        #[cfg(test)]
        if let Some(answered) = _answered {
            sender.batches.count_call(answered);
        }
    }
}

/// A task sending calls. Should it stop without having found the queue
/// empty (a panic, or its runtime shutting down mid-call), it gives its
/// place back and, if no other sender is left, answers every waiting commit
/// with an error (their senders dropped) rather than leave them waiting
/// for a sender that never comes.
struct Sender {
    batches: Arc<Batches>,
    ended: bool,
}

impl Drop for Sender {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let stranded = {
            let mut state = self.batches.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.senders = state.senders.saturating_sub(1);
            if state.senders == 0 {
                std::mem::take(&mut state.waiting)
            } else {
                VecDeque::new()
            }
        };
        drop(stranded);
    }
}

/// One call: alone for one commit, else `bosun_commit_many`; if the server
/// rolled that back, each commit alone. Returns, for a call of several,
/// whether `bosun_commit_many` answered it.
async fn send(database: &PostgresDatabase, mut call: Vec<Waiting>) -> Option<bool> {
    if call.len() == 1
        && let Some(only) = call.pop()
    {
        let _ = only
            .answer
            .send(commit_alone(database, &only.handled, &only.lock).await);
        return None;
    }
    // Two calls that write the same idempotency records write them in the
    // same order, so they queue instead of deadlocking.
    call.sort_by(|a, b| {
        (&a.handled.consumer, &a.handled.message_id).cmp(&(&b.handled.consumer, &b.handled.message_id))
    });
    let now = OffsetDateTime::now_utc();
    let outbox = OutboxColumns::of(call.iter().flat_map(|waiting| &waiting.handled.outbox), now);
    match commit_many(database, &call, &outbox, now).await {
        Ok(rows) => {
            let (answers, wakes) = answers(&call, rows, &outbox.sent_correlation_ids);
            database.wake(wakes);
            for (waiting, answer) in call.into_iter().zip(answers) {
                let _ = waiting.answer.send(answer);
            }
            Some(true)
        }
        Err(err) if err.as_database_error().is_some() => {
            // The server refused the call and rolled it back: nothing of
            // it was written.
            tracing::warn!(
                error = %err,
                commits = call.len(),
                "the server rolled back a batch of commits; committing each alone"
            );
            for waiting in call {
                let _ = waiting
                    .answer
                    .send(commit_alone(database, &waiting.handled, &waiting.lock).await);
            }
            Some(false)
        }
        Err(err) => {
            // No connection, or it broke: whether the call committed is
            // unknown, and trying each commit alone would only wait as
            // long again for each. Every message is delivered again; what
            // was written is found handled then.
            let doing = format!("committing {} handled messages in one call", call.len());
            let err = Arc::new(err);
            for waiting in call {
                let cause = SharedError(Arc::clone(&err));
                let _ = waiting
                    .answer
                    .send(Err(StoreError::unavailable(doing.clone(), cause).into()));
            }
            Some(false)
        }
    }
}

/// One database error given as the cause of several commits' errors.
#[derive(Debug)]
struct SharedError(Arc<sqlx_core::Error>);

impl fmt::Display for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SharedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// The commits of `call` in one `bosun_commit_many`; `outbox` holds their
/// outgoing messages, one commit's after the other's. Returns a row per
/// commit, in order.
async fn commit_many(
    database: &PostgresDatabase,
    call: &[Waiting],
    outbox: &OutboxColumns<'_>,
    now: OffsetDateTime,
) -> Result<Vec<PgRow>, sqlx_core::Error> {
    let messages = MessageColumns::of(call);
    let lines = TimelineColumns::of(call.iter().flat_map(|waiting| &waiting.handled.timeline));
    let rows = bind_outbox_and_lines(
        query(
            "SELECT outcome, woken, found_version FROM bosun_commit_many(
            true, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
            $13, $14, $15, $16, $17, $18, $19, $20, $21,
            $22, $23, $24, $25, $26, $27,
            $28, $29, $30, $31, $32, $33, $34, $35)",
        )
        .bind(&messages.sequences)
        .bind(&messages.tokens)
        .bind(&messages.consumers)
        .bind(&messages.message_ids)
        .bind(&messages.message_types)
        .bind(&messages.saga_kinds)
        .bind(&messages.saga_keys)
        .bind(&messages.saga_expected)
        .bind(&messages.saga_states)
        .bind(&messages.saga_tenants)
        .bind(&messages.outbox_ends)
        .bind(&messages.timeline_ends),
        outbox,
        now,
        &lines,
    )
    .fetch_all(database.pool())
    .await?;
    Ok(rows)
}

/// Each commit's answer from its row of a committed `bosun_commit_many`
/// (`sent`: the `sent` lines' correlation ids of all of their outgoing
/// messages, one commit's after the other's), and what the written ones
/// woke. The call has committed: a row that does not read is that commit's
/// error alone.
fn answers(call: &[Waiting], rows: Vec<PgRow>, sent: &[Option<String>]) -> (Vec<Answer>, Wakes) {
    let mut wakes = Wakes::default();
    let mut answers = Vec::with_capacity(call.len());
    let mut rows = rows.into_iter();
    let mut sent_from = 0;
    for waiting in call {
        let handled = &waiting.handled;
        let sent_to = sent_from + handled.outbox.len();
        let its_sent = sent.get(sent_from..sent_to).unwrap_or_default();
        sent_from = sent_to;
        let read = rows.next().map(|row| -> Result<_, StoreError> {
            Ok((
                row.try_get::<String, _>(0)?,
                row.try_get::<Vec<String>, _>(1)?,
                row.try_get::<Option<i64>, _>(2)?,
            ))
        });
        answers.push(match (read, handled.saga.as_ref()) {
            (None, _) => Err(StoreError::unavailable(
                doing::commit_handled(handled),
                "bosun_commit_many answered fewer commits than it was given",
            )
            .into()),
            (Some(Err(err)), _) => Err(err.doing(doing::commit_handled(handled)).into()),
            (Some(Ok((outcome, woken, found))), saga) => match (outcome.as_str(), saga) {
                ("lock_lost", _) => Err(SettleError::LockLost {
                    entity: waiting.lock.entity.path(),
                    sequence: waiting.lock.sequence,
                }),
                ("already_handled", _) => Ok(Settled::AlreadyHandled),
                ("saga_conflict", Some(saga)) => Ok(saga_conflict_status(saga, found.unwrap_or_default())),
                ("written", _) => {
                    written_wakes(&mut wakes, woken, &handled.timeline, its_sent);
                    Ok(Settled::Written)
                }
                (other, _) => Err(StoreError::unavailable(
                    doing::commit_handled(handled),
                    format!("bosun_commit_many answered `{other}`, which this bosun does not know"),
                )
                .into()),
            },
        });
    }
    (answers, wakes)
}

/// The commits of a call, one element each.
struct MessageColumns<'a> {
    sequences: Vec<i64>,
    tokens: Vec<Uuid>,
    consumers: Vec<&'a str>,
    message_ids: Vec<&'a str>,
    message_types: Vec<&'a str>,
    saga_kinds: Vec<Option<&'a str>>,
    saga_keys: Vec<Option<&'a str>>,
    saga_expected: Vec<Option<i64>>,
    saga_states: Vec<Option<Json<&'a serde_json::Value>>>,
    saga_tenants: Vec<Option<&'a str>>,
    /// Where each commit's outgoing messages end in the outbox columns
    /// (1-based, inclusive: the previous end + 1 is where they start).
    outbox_ends: Vec<i32>,
    /// Where each commit's timeline lines end in the timeline columns.
    timeline_ends: Vec<i32>,
}

impl<'a> MessageColumns<'a> {
    fn of(call: &'a [Waiting]) -> Self {
        let mut columns = Self {
            sequences: Vec::with_capacity(call.len()),
            tokens: Vec::with_capacity(call.len()),
            consumers: Vec::with_capacity(call.len()),
            message_ids: Vec::with_capacity(call.len()),
            message_types: Vec::with_capacity(call.len()),
            saga_kinds: Vec::with_capacity(call.len()),
            saga_keys: Vec::with_capacity(call.len()),
            saga_expected: Vec::with_capacity(call.len()),
            saga_states: Vec::with_capacity(call.len()),
            saga_tenants: Vec::with_capacity(call.len()),
            outbox_ends: Vec::with_capacity(call.len()),
            timeline_ends: Vec::with_capacity(call.len()),
        };
        let (mut outbox_end, mut timeline_end) = (0_i32, 0_i32);
        for Waiting { handled, lock, .. } in call {
            let saga = handled.saga.as_ref();
            columns.sequences.push(lock.sequence);
            columns.tokens.push(lock.token);
            columns.consumers.push(&handled.consumer);
            columns.message_ids.push(&handled.message_id);
            columns.message_types.push(&handled.message_type);
            columns.saga_kinds.push(saga.map(|saga| saga.kind.as_str()));
            columns.saga_keys.push(saga.map(|saga| saga.key.as_str()));
            columns.saga_expected.push(saga.map(|saga| saga.expected_version));
            columns.saga_states.push(saga.map(|saga| Json(&saga.state)));
            columns
                .saga_tenants
                .push(saga.and_then(|saga| saga.tenant_id.as_deref()));
            outbox_end = outbox_end.saturating_add(i32::try_from(handled.outbox.len()).unwrap_or(i32::MAX));
            timeline_end = timeline_end.saturating_add(i32::try_from(handled.timeline.len()).unwrap_or(i32::MAX));
            columns.outbox_ends.push(outbox_end);
            columns.timeline_ends.push(timeline_end);
        }
        columns
    }
}

#[cfg(test)]
mod tests {
    use bosun_contracts::Destination;

    use super::*;

    fn waiting() -> (Waiting, oneshot::Receiver<Answer>) {
        let (answer, answered) = oneshot::channel();
        let waiting = Waiting {
            handled: HandledMessage {
                consumer: "commit".into(),
                message_id: "m-1".into(),
                message_type: "CreateCommit".into(),
                saga: None,
                outbox: Vec::new(),
                timeline: Vec::new(),
            },
            lock: LockToken {
                entity: Destination::Queue("commit".into()),
                sequence: 1,
                token: Uuid::now_v7(),
            },
            answer,
        };
        (waiting, answered)
    }

    #[test]
    fn a_sender_that_stops_mid_call_answers_the_commits_no_sender_is_left_for() {
        let batches = Arc::new(Batches::default());
        let (first, mut first_answer) = waiting();
        let (second, mut second_answer) = waiting();
        {
            let mut state = batches.state.lock().unwrap();
            state.senders = 2;
            state.waiting.extend([first, second]);
        }

        // One of two senders stops: the other will take the waiting ones.
        drop(Sender {
            batches: Arc::clone(&batches),
            ended: false,
        });
        assert_eq!(batches.waiting(), 2);
        assert!(
            first_answer
                .try_recv()
                .is_err_and(|err| err == oneshot::error::TryRecvError::Empty)
        );

        // The last one stops: nobody would, so they are answered (an error).
        drop(Sender {
            batches: Arc::clone(&batches),
            ended: false,
        });
        assert_eq!(batches.waiting(), 0);
        assert_eq!(batches.state.lock().unwrap().senders, 0, "no place leaked");
        for answer in [&mut first_answer, &mut second_answer] {
            assert!(matches!(answer.try_recv(), Err(oneshot::error::TryRecvError::Closed)));
        }

        // A sender that found the queue empty has given its place back already.
        drop(Sender {
            batches: Arc::clone(&batches),
            ended: true,
        });
        assert_eq!(batches.state.lock().unwrap().senders, 0);
    }
}
