//! Commits that meet go to the database together: while [`IN_FLIGHT`]
//! calls are on their way, the commits that arrive wait, and the next call
//! takes them all (up to [`MOST_PER_CALL`]) in one `bosun_commit_many`
//! (migration 12): one round trip, one transaction, one WAL flush.
//!
//! Each commit in a call is written exactly as its own `bosun_commit` would
//! have been, in arrival order; a saga conflict rolls back its own message
//! only (a subtransaction), a lost lock writes nothing of its own. Any other
//! error rolls the whole call back, and then each commit of it runs alone,
//! so one message's failure never becomes another's.

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

use super::{OutboxColumns, commit_alone, written_wakes};
use crate::backends::postgres::PostgresDatabase;
use crate::backends::postgres::notify::Wakes;
use crate::backends::postgres::store::timeline::TimelineColumns;
use crate::ports::commit::{CommitError, CommitStatus};
use crate::ports::store::{HandledMessage, StoreError, doing};
use crate::ports::transport::LockToken;

/// How many commit calls one process has on their way at once. Two keep
/// the server busy (one executes while the other waits for its flush); more
/// would only make the batches smaller.
pub(super) const IN_FLIGHT: usize = 2;

/// The most commits one call takes (the rest wait for the next call).
pub(super) const MOST_PER_CALL: usize = 64;

type Answer = Result<CommitStatus, CommitError>;

/// One commit waiting for its call.
struct Waiting {
    handled: HandledMessage,
    lock: LockToken,
    answer: oneshot::Sender<Answer>,
}

/// The commits waiting and the calls on their way, per [`super::PostgresCommit`].
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
    let doing = doing::commit_handled(&handled);
    let (answer, answered) = oneshot::channel();
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
        Err(StoreError::unavailable(
            doing,
            "the task sending commits ended before answering (the process is stopping); the message will be delivered again",
        )
        .into())
    })
}

/// Sends calls until nothing waits.
async fn send_calls(database: PostgresDatabase, batches: Arc<Batches>) {
    loop {
        let call: Vec<Waiting> = {
            let mut state = batches.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.waiting.is_empty() {
                state.senders -= 1;
                return;
            }
            let take = state.waiting.len().min(MOST_PER_CALL);
            #[cfg(test)]
            {
                state.largest_call = state.largest_call.max(take);
            }
            state.waiting.drain(..take).collect()
        };
        send(&database, call).await;
    }
}

/// One call: alone for one commit, else `bosun_commit_many`, falling back
/// to each commit alone if the call as a whole failed.
async fn send(database: &PostgresDatabase, call: Vec<Waiting>) {
    if let [only] = call.as_slice() {
        let answer = commit_alone(database, &only.handled, &only.lock).await;
        if let Some(only) = call.into_iter().next() {
            let _ = only.answer.send(answer);
        }
        return;
    }
    let now = OffsetDateTime::now_utc();
    let outbox = OutboxColumns::of(call.iter().flat_map(|waiting| &waiting.handled.outbox), now);
    match commit_many(database, &call, &outbox, now).await {
        Ok(rows) => {
            let (answers, wakes) = answers(&call, rows, &outbox.sent_correlation_ids);
            drop(outbox);
            database.wake(wakes);
            for (waiting, answer) in call.into_iter().zip(answers) {
                let _ = waiting.answer.send(answer);
            }
        }
        Err(err) => {
            drop(outbox);
            tracing::warn!(
                error = %err,
                commits = call.len(),
                "a batch of commits failed as a whole; committing each alone"
            );
            for waiting in call {
                let answer = commit_alone(database, &waiting.handled, &waiting.lock).await;
                let _ = waiting.answer.send(answer);
            }
        }
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
) -> Result<Vec<PgRow>, StoreError> {
    let doing = || format!("committing {} handled messages in one call", call.len());
    let messages = MessageColumns::of(call);
    let lines = TimelineColumns::of(call.iter().flat_map(|waiting| &waiting.handled.timeline));
    let rows = query(
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
    .bind(&messages.timeline_ends)
    .bind(&outbox.paths)
    .bind(&outbox.kinds)
    .bind(&outbox.names)
    .bind(&outbox.subscriptions)
    .bind(&outbox.broker_message_ids)
    .bind(&outbox.message_types)
    .bind(&outbox.correlation_ids)
    .bind(&outbox.bodies)
    .bind(&outbox.scheduled_at)
    .bind(&outbox.sent_correlation_ids)
    .bind(&outbox.sent_message_ids)
    .bind(&outbox.sent_message_types)
    .bind(&outbox.sent_attempts)
    .bind(&outbox.sent_details)
    .bind(now)
    .bind(&lines.correlation_ids)
    .bind(&lines.message_ids)
    .bind(&lines.message_types)
    .bind(&lines.consumers)
    .bind(&lines.statuses)
    .bind(&lines.attempts)
    .bind(&lines.at)
    .bind(&lines.details)
    .fetch_all(database.pool())
    .await
    .map_err(|err| StoreError::from(err).doing(doing()))?;
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
                ("lock_lost", _) => Err(CommitError::LockLost {
                    entity: waiting.lock.entity.path(),
                    sequence: waiting.lock.sequence,
                }),
                ("already_handled", _) => Ok(CommitStatus::AlreadyHandled),
                ("saga_conflict", Some(saga)) => Ok(CommitStatus::SagaConflict {
                    kind: saga.kind.clone(),
                    key: saga.key.clone(),
                    expected: saga.expected_version,
                    found: found.unwrap_or_default(),
                }),
                ("written", _) => {
                    written_wakes(&mut wakes, woken, &handled.timeline, its_sent);
                    Ok(CommitStatus::Written)
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
