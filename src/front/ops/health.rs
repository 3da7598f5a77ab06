//! Readiness within its deadline, whatever is down.
//!
//! The checks (the transport, the store, the store's schema) run
//! concurrently, each in a task of its own bounded by
//! [`CHECK_TIMEOUT`], and never more than one of a kind at a time: a
//! request that finds one running waits for it rather than starting
//! another. A request waits at most [`ANSWER_WITHIN`] for the checks it
//! started; a check still running by then is answered with its last
//! result and that result's age, if the result is younger than
//! [`STALE_AFTER`], and as "no answer" otherwise. So `/readyz` and
//! `/metrics` answer within a second even while the database does not
//! (a PostgreSQL pool waits 30 s for a connection), and say what is
//! unreachable. The store check's outbox backlog is what `/metrics`
//! reports, so a scrape never waits on the database either.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Readiness;
use crate::front::http::prometheus::label;
use crate::runtime::receiving::Receiving;
use crate::wiring::Backends;

/// How long a request waits for the checks it started.
pub const ANSWER_WITHIN: Duration = Duration::from_millis(800);
/// How long one check may run before it counts as failed.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// How old a last result may be to stand for a check still running.
pub const STALE_AFTER: Duration = Duration::from_secs(15);

/// One kind of check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// The transport answers (a `SELECT 1`, the open Service Bus connection).
    Transport,
    /// The store answers one small query (the outbox backlog).
    Store,
    /// The store's schema is the one this build runs with.
    Schema,
}

impl Check {
    const ALL: [Check; 3] = [Check::Transport, Check::Store, Check::Schema];

    fn name(self) -> &'static str {
        match self {
            Check::Transport => "transport",
            Check::Store => "store",
            Check::Schema => "schema",
        }
    }

    /// Runs the check: `Ok` with the outbox backlog for the store.
    async fn run(self, backends: &Backends) -> Result<Option<u64>, String> {
        match self {
            Check::Transport => backends
                .transport
                .reachable()
                .await
                .map(|()| None)
                .map_err(|e| e.to_string()),
            Check::Store => backends
                .store
                .outbox_backlog()
                .await
                .map(Some)
                .map_err(|e| e.to_string()),
            Check::Schema => backends
                .store
                .check_schema()
                .await
                .map(|_| None)
                .map_err(|e| e.to_string()),
        }
    }
}

/// What a check answered, and when.
#[derive(Debug, Clone)]
struct Observation {
    outcome: Result<Option<u64>, String>,
    at: Instant,
    took: Duration,
}

/// A check's last answer and whether one is under way.
struct Slot {
    running: AtomicBool,
    last: watch::Sender<Option<Observation>>,
}

/// How a check's answer in a readiness reply was come by.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Observed {
    /// The answer came within this request's deadline; otherwise the last
    /// one is served (or none, when it is too old or there is none).
    pub fresh: bool,
    /// How old the answer is, in milliseconds (absent when there is none).
    pub age_ms: Option<u64>,
    /// How long the check took, in milliseconds.
    pub took_ms: Option<u64>,
}

/// The health checks of one process over its backends, with their last
/// answers (cheap to clone: clones share them).
#[derive(Clone)]
pub struct Health {
    inner: Arc<Inner>,
}

struct Inner {
    backends: Backends,
    draining: CancellationToken,
    slots: [Slot; 3],
    answer_within: Duration,
    check_timeout: Duration,
}

/// Resets a slot's "running" flag however its check ends.
struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Health {
    /// Checks over `backends`; not ready once `draining` is cancelled.
    pub fn new(backends: Backends, draining: CancellationToken) -> Self {
        Self::with_limits(backends, draining, ANSWER_WITHIN, CHECK_TIMEOUT)
    }

    /// The same with other deadlines (tests).
    pub fn with_limits(
        backends: Backends,
        draining: CancellationToken,
        answer_within: Duration,
        check_timeout: Duration,
    ) -> Self {
        let slot = || Slot {
            running: AtomicBool::new(false),
            last: watch::channel(None).0,
        };
        Self {
            inner: Arc::new(Inner {
                backends,
                draining,
                slots: [slot(), slot(), slot()],
                answer_within,
                check_timeout,
            }),
        }
    }

    /// The backends checked.
    pub fn backends(&self) -> &Backends {
        &self.inner.backends
    }

    fn slot(&self, check: Check) -> &Slot {
        &self.inner.slots[Check::ALL.iter().position(|c| *c == check).unwrap_or(0)]
    }

    /// Starts `check` unless one is under way.
    fn start(&self, check: Check) {
        if self.slot(check).running.swap(true, Ordering::SeqCst) {
            return;
        }
        let health = self.clone();
        tokio::spawn(async move {
            let slot = health.slot(check);
            let running = Running(&slot.running);
            let started = Instant::now();
            let limit = health.inner.check_timeout;
            let outcome = tokio::time::timeout(limit, check.run(&health.inner.backends))
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {} s", limit.as_secs_f64())));
            let observation = Observation {
                outcome,
                at: Instant::now(),
                took: started.elapsed(),
            };
            // Not running before the answer is out: a request woken by it
            // may start the next one.
            drop(running);
            slot.last.send_replace(Some(observation));
        });
    }

    /// Every check's answer: fresh when it came within the deadline, else
    /// the last one if not stale, else none.
    async fn observe(&self) -> Vec<(Check, Result<Option<u64>, String>, Observed)> {
        let deadline = tokio::time::Instant::now() + self.inner.answer_within;
        let waits = Check::ALL.map(|check| {
            let mut answers = self.slot(check).last.subscribe();
            answers.borrow_and_update();
            self.start(check);
            async move {
                let fresh = tokio::time::timeout_at(deadline, answers.changed())
                    .await
                    .is_ok_and(|r| r.is_ok());
                let last = answers.borrow().clone();
                (check, fresh, last)
            }
        });
        let [a, b, c] = waits;
        let answers = tokio::join!(a, b, c);
        [answers.0, answers.1, answers.2]
            .into_iter()
            .map(|(check, fresh, last)| self.judge(check, fresh, last))
            .collect()
    }

    fn judge(
        &self,
        check: Check,
        fresh: bool,
        last: Option<Observation>,
    ) -> (Check, Result<Option<u64>, String>, Observed) {
        let waited = self.inner.answer_within.as_secs_f64();
        let Some(last) = last else {
            let outcome = Err(format!("no answer within {waited} s (still checking)"));
            return (
                check,
                outcome,
                Observed {
                    fresh: false,
                    age_ms: None,
                    took_ms: None,
                },
            );
        };
        let age = last.at.elapsed();
        let observed = Observed {
            fresh,
            age_ms: Some(millis(age)),
            took_ms: Some(millis(last.took)),
        };
        let outcome = if fresh || age <= STALE_AFTER {
            last.outcome
        } else {
            Err(format!(
                "no answer within {waited} s; the last, {:.1} s ago, was: {}",
                age.as_secs_f64(),
                last.outcome.as_ref().err().map_or("ok", String::as_str)
            ))
        };
        (check, outcome, observed)
    }

    /// Whether this process can serve: every check answers `ok`, each of
    /// its consumers receives (`receiving`), and it is not draining.
    /// Answers within [`ANSWER_WITHIN`] whatever is down.
    pub async fn readiness(&self, receiving: &Receiving) -> Readiness {
        let draining = self.inner.draining.is_cancelled();
        let mut ready = !draining;
        let mut checks = BTreeMap::new();
        let mut observed = BTreeMap::new();
        for (check, outcome, how) in self.observe().await {
            ready &= outcome.is_ok();
            checks.insert(check.name(), json!(outcome.err().unwrap_or_else(|| "ok".to_owned())));
            observed.insert(check.name(), how);
        }
        if !receiving.is_empty() {
            let consumers = receiving.verdict();
            ready &= consumers.is_ok();
            checks.insert("consumers", json!(consumers.err().unwrap_or_else(|| "ok".to_owned())));
        }
        checks.insert("draining", json!(draining));
        let mut paused: Vec<String> = receiving
            .snapshot()
            .into_iter()
            .filter_map(|health| Some(format!("{}: {}", health.consumer, health.paused?)))
            .collect();
        paused.dedup();
        Readiness {
            ready,
            checks,
            observed,
            paused,
        }
    }

    /// The Prometheus lines of readiness, its checks, each consumer's
    /// receiving, and the outbox backlog (when the store answered).
    pub async fn exposition(&self, receiving: &Receiving) -> String {
        render(&self.readiness(receiving).await, receiving)
    }

    /// The outbox backlog of the store check's last answer, when it is
    /// not stale (no new check is started).
    pub fn outbox_backlog(&self) -> Option<u64> {
        let last = self.slot(Check::Store).last.borrow().clone()?;
        (last.at.elapsed() <= STALE_AFTER)
            .then_some(last.outcome.ok().flatten())
            .flatten()
    }
}

/// The Prometheus lines of `readiness` and of each consumer's
/// `receiving`: `bosun_ready`, `bosun_health_check_up` and
/// `bosun_health_check_age_seconds` per check, `bosun_consumer_receiving`
/// per consumer and entity.
pub fn render(readiness: &Readiness, receiving: &Receiving) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP bosun_ready Whether this process is ready (1) or not (0), as /readyz answers.\n# TYPE bosun_ready gauge\nbosun_ready {}",
        u8::from(readiness.ready)
    );
    let _ = writeln!(
        out,
        "# HELP bosun_health_check_up Whether a readiness check's answer is ok (1) or not (0).\n# TYPE bosun_health_check_up gauge"
    );
    for check in Check::ALL {
        let up = readiness.checks.get(check.name()).is_some_and(|value| value == "ok");
        let _ = writeln!(
            out,
            "bosun_health_check_up{{check=\"{}\"}} {}",
            check.name(),
            u8::from(up)
        );
    }
    let _ = writeln!(
        out,
        "# HELP bosun_health_check_age_seconds How old a readiness check's last answer is.\n# TYPE bosun_health_check_age_seconds gauge"
    );
    for (name, how) in &readiness.observed {
        if let Some(age) = how.age_ms {
            let _ = writeln!(
                out,
                "bosun_health_check_age_seconds{{check=\"{name}\"}} {}",
                age as f64 / 1000.0
            );
        }
    }
    let entities = receiving.snapshot();
    if !entities.is_empty() {
        let _ = writeln!(
            out,
            "# HELP bosun_consumer_receiving Whether a consumer's receives from its queue or subscription come back (1) or fail (0).\n# TYPE bosun_consumer_receiving gauge"
        );
        for health in entities {
            let _ = writeln!(
                out,
                "bosun_consumer_receiving{{consumer=\"{}\",entity=\"{}\"}} {}",
                label(&health.consumer),
                label(&health.entity),
                u8::from(health.failing.is_none())
            );
        }
        let _ = writeln!(
            out,
            "# HELP bosun_consumer_paused Whether an operator paused a consumer (1: it takes no message from this entity) or not (0).\n# TYPE bosun_consumer_paused gauge"
        );
        for health in receiving.snapshot() {
            let _ = writeln!(
                out,
                "bosun_consumer_paused{{consumer=\"{}\",entity=\"{}\"}} {}",
                label(&health.consumer),
                label(&health.entity),
                u8::from(health.paused.is_some())
            );
        }
    }
    out
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
