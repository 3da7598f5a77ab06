//! The limit `bosun bench` prints bosun as a fraction of: the cheapest
//! correct way to handle one message in one transaction on the same
//! database, written straight in SQL, in scratch tables of its own
//! (`bench_limit_*`, created before the run and dropped after it).
//!
//! Per message, in one transaction:
//! - `noop`: claim the oldest queue row with `FOR UPDATE SKIP LOCKED` and
//!   delete it in the same statement (claim and complete), insert the
//!   idempotency record, commit;
//! - `saga`: claim and delete the row, reading the saga it belongs to in the
//!   same statement; insert the idempotency record; upsert the saga with a
//!   version check (`ON CONFLICT ... DO UPDATE ... WHERE version = <read>`;
//!   nothing written means another transaction moved it on: roll back,
//!   count a conflict and handle the message again); insert one outbox row;
//!   commit.
//!
//! The messages are bosun's own (the same bodies, the same 16 saga keys),
//! the concurrency is the bosun row's, and `--backlog N` leaves N messages
//! in the queue under the timed ones, as it does for bosun.
//!
//! [`postgres`] runs it on PostgreSQL (one connection per worker, held for
//! the whole run); [`sqlite`] runs it on a SQLite file with bosun's pragmas
//! next to bosun's data directory (one connection, as bosun has, shared by
//! the workers: SQLite has one writer).

pub mod postgres;
pub mod sqlite;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::{Progress, Scenario};

/// The consumer name the idempotency records and sagas are written under.
const CONSUMER: &str = "probe";

/// One message of a limit workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitMessage {
    /// Its message id (the idempotency key).
    pub message_id: String,
    /// The saga it counts in (`saga` workload).
    pub saga_key: String,
    /// Its body: the bytes bosun's message of the same number carries.
    pub body: Vec<u8>,
}

/// What one limit run is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitSpec {
    /// The workload.
    pub workload: Scenario,
    /// Concurrent workers.
    pub concurrency: usize,
    /// Messages to handle within the timing.
    pub messages: usize,
    /// Messages left in the queue under them.
    pub backlog: usize,
    /// Longest the run may take.
    pub timeout: Duration,
}

/// What one limit run measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LimitRun {
    /// Messages handled.
    pub messages: usize,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Per message, from the claim to the commit (retries included),
    /// microseconds.
    pub latencies_us: Vec<u64>,
    /// Saga version conflicts (rolled back and handled again).
    pub conflicts: u64,
}

impl LimitRun {
    /// Several runs as one: their messages over their time.
    pub fn combine(runs: &[LimitRun]) -> LimitRun {
        LimitRun {
            messages: runs.iter().map(|run| run.messages).sum(),
            seconds: runs.iter().map(|run| run.seconds).sum(),
            latencies_us: runs.iter().flat_map(|run| run.latencies_us.iter().copied()).collect(),
            conflicts: runs.iter().map(|run| run.conflicts).sum(),
        }
    }

    /// Messages per second (0 for an empty run).
    pub fn per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.messages as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// The `p`-th percentile (0.0..=1.0) of the latencies, milliseconds
    /// (the rank rule of the runtime's metrics).
    pub fn percentile_ms(&self, p: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return 0.0;
        }
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        let rank = ((sorted.len() - 1) as f64 * p.clamp(0.0, 1.0)).round() as usize;
        sorted[rank.min(sorted.len() - 1)] as f64 / 1000.0
    }
}

/// Why a limit run failed.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    /// PostgreSQL failed.
    #[error("limit workload on PostgreSQL: {0}")]
    Postgres(#[from] sqlx_core::Error),
    /// SQLite failed.
    #[error("limit workload on SQLite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The run did not finish in time.
    #[error(
        "the {workload} limit with {concurrency} workers handled {handled} of {messages} messages within {timeout:?}"
    )]
    Timeout {
        /// The workload.
        workload: &'static str,
        /// Concurrent workers.
        concurrency: usize,
        /// Handled so far.
        handled: usize,
        /// Asked for.
        messages: usize,
        /// The limit.
        timeout: Duration,
    },
    /// A worker thread or task died.
    #[error("a limit worker stopped: {0}")]
    Worker(#[from] tokio::task::JoinError),
}

/// The scratch tables of one limit run: `bench_limit_<role>_<run id>`, so
/// neither two runs nor bosun's own tables (`bosun_*`) can collide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitTables {
    /// The queue.
    pub queue: String,
    /// The idempotency records.
    pub handled: String,
    /// The sagas.
    pub sagas: String,
    /// The outbox.
    pub outbox: String,
}

impl LimitTables {
    /// Fresh names.
    pub fn fresh() -> Self {
        let id = Uuid::now_v7().simple().to_string();
        Self {
            queue: format!("bench_limit_queue_{id}"),
            handled: format!("bench_limit_handled_{id}"),
            sagas: format!("bench_limit_sagas_{id}"),
            outbox: format!("bench_limit_outbox_{id}"),
        }
    }

    /// Every table, in the order they are dropped.
    pub fn all(&self) -> [&str; 4] {
        [&self.queue, &self.handled, &self.sagas, &self.outbox]
    }
}

/// The messages still to hand out: each worker takes one before it claims a
/// queue row and counts it done after the commit, so exactly `messages`
/// are handled and the backlog stays.
#[derive(Debug)]
struct Tickets {
    left: AtomicUsize,
    done: AtomicUsize,
    conflicts: AtomicU64,
}

impl Tickets {
    fn new(messages: usize) -> Self {
        Self {
            left: AtomicUsize::new(messages),
            done: AtomicUsize::new(0),
            conflicts: AtomicU64::new(0),
        }
    }

    /// One more message to handle, or none left.
    fn take(&self) -> bool {
        self.left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| left.checked_sub(1))
            .is_ok()
    }

    fn finished(&self) {
        self.done.fetch_add(1, Ordering::AcqRel);
    }

    fn done(&self) -> usize {
        self.done.load(Ordering::Acquire)
    }

    fn conflict(&self) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
    }
}

/// Waits for `work` (the workers), saying every five seconds how far they
/// got; past the spec's timeout, tells them to stop, waits for them and
/// fails.
async fn watch<F: Future>(
    work: F,
    tickets: &Tickets,
    spec: &LimitSpec,
    started: Instant,
    stop: &AtomicBool,
    progress: Progress<'_>,
) -> Result<F::Output, LimitError> {
    let deadline = tokio::time::Instant::from_std(started + spec.timeout);
    tokio::pin!(work);
    let mut ticks = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(5),
        Duration::from_secs(5),
    );
    loop {
        tokio::select! {
            output = &mut work => return Ok(output),
            _ = ticks.tick() => progress(&format!(
                "    limit: {} of {} messages handled",
                tickets.done(),
                spec.messages
            )),
            () = tokio::time::sleep_until(deadline) => {
                stop.store(true, Ordering::Release);
                let _ = work.await;
                return Err(LimitError::Timeout {
                    workload: spec.workload.as_str(),
                    concurrency: spec.concurrency,
                    handled: tickets.done(),
                    messages: spec.messages,
                    timeout: spec.timeout,
                });
            }
        }
    }
}

/// A duration in whole microseconds.
fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// The saga state after one more message: the count the probe saga keeps.
fn next_state(state: Option<&serde_json::Value>, sequence_hint: usize) -> serde_json::Value {
    let count = state
        .and_then(|state| state.get("count"))
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    serde_json::json!({ "count": count + 1, "highestSequence": sequence_hint })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_hand_out_exactly_the_messages() {
        let tickets = Tickets::new(3);
        assert!(tickets.take() && tickets.take() && tickets.take());
        assert!(!tickets.take());
        assert!(!tickets.take());
        tickets.finished();
        assert_eq!(tickets.done(), 1);
    }

    #[test]
    fn combined_runs_are_their_messages_over_their_time() {
        let before = LimitRun {
            messages: 100,
            seconds: 1.0,
            latencies_us: vec![1000; 100],
            conflicts: 2,
        };
        let after = LimitRun {
            messages: 100,
            seconds: 3.0,
            latencies_us: vec![3000; 100],
            conflicts: 1,
        };
        let both = LimitRun::combine(&[before, after]);
        assert_eq!(both.messages, 200);
        assert_eq!(both.per_second(), 50.0);
        assert_eq!(both.conflicts, 3);
        assert_eq!(both.percentile_ms(0.0), 1.0);
        assert_eq!(both.percentile_ms(1.0), 3.0);
        assert_eq!(LimitRun::default().per_second(), 0.0);
        assert_eq!(LimitRun::default().percentile_ms(0.5), 0.0);
    }

    #[test]
    fn limit_tables_are_named_apart_from_bosuns_and_from_each_other() {
        let (one, two) = (LimitTables::fresh(), LimitTables::fresh());
        for name in one.all() {
            assert!(name.starts_with("bench_limit_"), "{name}");
            assert!(name.len() <= 63, "{name} is too long for PostgreSQL");
        }
        assert_ne!(one.queue, two.queue);
    }

    #[test]
    fn the_saga_state_counts() {
        let first = next_state(None, 4);
        assert_eq!(first["count"], 1);
        assert_eq!(next_state(Some(&first), 5)["count"], 2);
    }
}
