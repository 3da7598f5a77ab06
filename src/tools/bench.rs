//! `bosun bench`: throughput and latency of the runtime itself, beside the
//! limit of the same database in the same run.
//!
//! For each backend, scenario and number of concurrent handlers:
//! 1. the limit ([`limit`]): the cheapest correct one-transaction-per-
//!    message workload, written straight in SQL on the same database (the
//!    PostgreSQL database bosun's row uses; for the embedded backend, a
//!    SQLite file with bosun's pragmas next to bosun's data directory), in
//!    scratch tables dropped afterwards, with the same concurrency;
//! 2. bosun: a fresh data directory (or database schema) is filled with
//!    messages, one host runs the `probe` consumer until the timed messages
//!    are handled;
//! 3. the limit again, so drift on a noisy machine shows as a gap between
//!    the two limit runs rather than as a wrong ratio.
//!
//! The row has messages per second, p50/p99 of the processing latency
//! (receive to settle: idempotency check, saga load, handler, atomic commit,
//! complete) and of the handler latency, the limit's messages per second
//! (both runs' messages over their time) and latencies, and `ratio`: bosun's
//! messages per second as a fraction of the limit's.
//!
//! With a backlog of N, N more messages are sent before the clock starts and
//! stay in the queue under the timed ones, for bosun and for the limit.
//!
//! Scenarios:
//! - `noop`: `Probe` commands without echo: a handler that does nothing and
//!   emits nothing, so the numbers are the runtime's own cost;
//! - `saga`: `ProbeEchoed` events counted in probe sagas (16 keys), so every
//!   message loads and saves a saga with optimistic concurrency.
//!
//! Beside them, the latency row ([`latency`]): a three-hop delivery through
//! the HTTP API, from the command's acceptance to the moment an SSE client
//! reads its end.
//!
//! This is a measurement, not a test: run it on a quiet machine and compare
//! runs of the same build; the ratio is the number to compare across
//! machines.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun_consumers::probe::ProbeConsumer;
use bosun_contracts::messages::{Probe, ProbeEchoed};
use bosun_contracts::routing::{consumer, destination_of};
use bosun_contracts::{Destination, Envelope, Message};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::host::HostOptions;
use crate::ports::transport::{OutboundMessage, TransportError};
use crate::runtime::config::Settings;
use crate::wiring::{Backends, StartError};
use limit::{LimitError, LimitMessage, LimitRun, LimitSpec};

pub mod latency;
pub mod limit;

/// A workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// A handler that does nothing.
    Noop,
    /// A handler that updates a saga.
    Saga,
}

impl Scenario {
    /// Its name in the table.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Noop => "noop",
            Self::Saga => "saga",
        }
    }
}

/// Where progress lines go (stderr, for the command).
pub type Progress<'a> = &'a mut (dyn FnMut(&str) + Send);

/// What the limit beside a row is.
pub const POSTGRES_LIMIT: &str = "postgres: one transaction per message";
/// What the limit beside an embedded row is.
pub const SQLITE_LIMIT: &str = "sqlite: one transaction per message";

/// One measured configuration: bosun's run, and the limit measured right
/// before and right after it on the same database with the same
/// concurrency and backlog.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchRow {
    /// `embedded` or `postgres`.
    pub backend: String,
    /// The workload.
    pub workload: Scenario,
    /// Concurrent handlers (and limit workers).
    pub concurrency: usize,
    /// Messages left in the queue under the timed ones.
    pub backlog: usize,
    /// Messages handled within the timing.
    pub messages: usize,
    /// Wall time in seconds.
    pub seconds: f64,
    /// Messages per second.
    pub msg_per_sec: f64,
    /// Messages per second over the first tenth of the timed messages.
    pub first_tenth_per_sec: f64,
    /// Messages per second over the last tenth (a cost that grows with the
    /// work done, a saga's history or the tables' size, shows as a last
    /// tenth slower than the first).
    pub last_tenth_per_sec: f64,
    /// Saga keys the workload's messages were spread over.
    pub saga_keys: u64,
    /// Processing latency p50 (receive to settle), milliseconds.
    pub p50_ms: f64,
    /// Processing latency p99, milliseconds.
    pub p99_ms: f64,
    /// Handler latency p50, milliseconds.
    pub handler_p50_ms: f64,
    /// Handler latency p99, milliseconds.
    pub handler_p99_ms: f64,
    /// Saga version conflicts (reloaded and re-applied).
    pub conflicts: u64,
    /// What the limit is ([`POSTGRES_LIMIT`], [`SQLITE_LIMIT`]).
    pub limit: String,
    /// The limit's messages per second: both of its runs' messages over
    /// their time.
    pub limit_per_sec: f64,
    /// The limit's run before bosun's, messages per second.
    pub limit_before_per_sec: f64,
    /// The limit's run after bosun's, messages per second.
    pub limit_after_per_sec: f64,
    /// The limit's latency p50 (claim to commit), milliseconds.
    pub limit_p50_ms: f64,
    /// The limit's latency p99, milliseconds.
    pub limit_p99_ms: f64,
    /// The limit's saga version conflicts (rolled back and done again).
    pub limit_conflicts: u64,
    /// `msgPerSec / limitPerSec`: bosun as a fraction of the limit.
    pub ratio: f64,
}

impl BenchRow {
    /// This row with its limit, measured in `before` and `after` (the
    /// ratio is 0 when the limit handled nothing).
    pub fn beside(mut self, limit: &str, before: &LimitRun, after: &LimitRun) -> Self {
        let both = LimitRun::combine(&[before.clone(), after.clone()]);
        self.limit = limit.to_owned();
        self.limit_per_sec = both.per_second();
        self.limit_before_per_sec = before.per_second();
        self.limit_after_per_sec = after.per_second();
        self.limit_p50_ms = both.percentile_ms(0.5);
        self.limit_p99_ms = both.percentile_ms(0.99);
        self.limit_conflicts = both.conflicts;
        self.ratio = if self.limit_per_sec > 0.0 {
            self.msg_per_sec / self.limit_per_sec
        } else {
            0.0
        };
        self
    }
}

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Backends could not be opened.
    #[error(transparent)]
    Start(#[from] StartError),
    /// Messages could not be sent.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The PostgreSQL schema could not be prepared.
    #[error(transparent)]
    Database(#[from] crate::backends::postgres::DatabaseError),
    /// The limit workload failed.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The latency row could not be measured.
    #[error(transparent)]
    Latency(#[from] latency::LatencyError),
    /// The run did not finish.
    #[error("{scenario} with {concurrency} handlers handled {handled} of {messages} messages within {timeout:?}")]
    Timeout {
        /// The workload.
        scenario: &'static str,
        /// Concurrent handlers.
        concurrency: usize,
        /// Handled so far.
        handled: u64,
        /// To handle within the timing.
        messages: usize,
        /// The limit.
        timeout: Duration,
    },
}

/// Saga keys the `saga` workload spreads its messages over, unless
/// `--saga-keys` says otherwise.
pub const SAGA_KEYS: u64 = 16;

/// The entity the probe consumer receives `scenario`'s messages from.
pub fn entity_of(scenario: Scenario) -> Destination {
    let entity = match scenario {
        Scenario::Noop => destination_of("Probe"),
        // Straight into the probe consumer's subscription.
        Scenario::Saga => consumer("probe").map(|route| route.subscription()),
    };
    entity.unwrap_or_else(|| Destination::Queue("probe".into()))
}

fn envelopes(scenario: Scenario, messages: usize, saga_keys: u64) -> Vec<OutboundMessage> {
    let saga_keys = saga_keys.max(1);
    let correlation = Uuid::now_v7();
    let destination = entity_of(scenario);
    (0..messages as u64)
        .map(|sequence| {
            let message = match scenario {
                Scenario::Noop => Message::Probe(Probe {
                    group: "bench".to_owned(),
                    sequence,
                    echo: false,
                    work_ms: 0,
                    relays: 0,
                }),
                Scenario::Saga => Message::ProbeEchoed(ProbeEchoed {
                    group: format!("bench-{}", sequence % saga_keys),
                    sequence,
                }),
            };
            let envelope = Envelope::new(&message, correlation, "bench", "bench");
            OutboundMessage {
                destination: destination.clone(),
                broker_message_id: envelope.message_id.to_string(),
                message_type: Some(envelope.message_type.clone()),
                correlation_id: Some(correlation.to_string()),
                body: envelope.to_vec(),
                scheduled_at: None,
            }
        })
        .collect()
}

/// The limit's messages: bosun's (the same bodies and the same saga keys).
pub fn limit_messages(scenario: Scenario, messages: usize, saga_keys: u64) -> Vec<LimitMessage> {
    let saga_keys = saga_keys.max(1);
    envelopes(scenario, messages, saga_keys)
        .into_iter()
        .zip(0u64..)
        .map(|(message, sequence)| LimitMessage {
            message_id: message.broker_message_id,
            saga_key: format!("bench-{}", sequence % saga_keys),
            body: message.body,
        })
        .collect()
}

/// Sends `count` messages of `scenario` to the probe consumer, 500 per
/// send, saying every five seconds how far it got.
pub async fn prefill(
    backends: &Backends,
    scenario: Scenario,
    count: usize,
    saga_keys: u64,
    progress: Progress<'_>,
) -> Result<(), BenchError> {
    let batch = envelopes(scenario, count, saga_keys);
    let mut sent = 0;
    let mut reported = Instant::now();
    for chunk in batch.chunks(500) {
        backends.transport.send(chunk.to_vec()).await?;
        sent += chunk.len();
        if reported.elapsed() >= Duration::from_secs(5) {
            progress(&format!("    bosun queue: {sent} of {count} messages sent"));
            reported = Instant::now();
        }
    }
    Ok(())
}

/// Runs one configuration on `backends` (fresh and empty): sends
/// `backlog + messages` messages, then times the probe consumer until
/// `messages` of them are handled (the first ones: the backlog stays in
/// the queue under them). The row's limit fields are empty; see
/// [`BenchRow::beside`].
pub async fn run_one(
    backend: &str,
    backends: &Backends,
    base: &Settings,
    plan: &BenchPlan,
    scenario: Scenario,
    concurrency: usize,
    progress: Progress<'_>,
) -> Result<BenchRow, BenchError> {
    let (messages, backlog, timeout) = (plan.messages, plan.backlog, plan.timeout);
    prefill(backends, scenario, backlog + messages, plan.saga_keys, &mut *progress).await?;
    let mut options = HostOptions::from_settings(base);
    options.concurrency = concurrency;
    options.poll_interval = Duration::from_millis(20);
    let host = backends.host(vec![Arc::new(ProbeConsumer::new())], options);
    let metrics = host.metrics();
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let started = Instant::now();
    let running = tokio::spawn(async move { host.run(token).await });
    let deadline = started + timeout;
    let mut reported = started;
    // When the first tenth was handled and when the last tenth began, for
    // the rate at the start and at the end of the run.
    let tenth = (messages as u64 / 10).max(1);
    let (mut first_tenth, mut last_tenth_from) = (None, None);
    let handled = loop {
        let handled = metrics.consumer("probe").processed;
        if handled >= tenth {
            first_tenth.get_or_insert_with(|| started.elapsed());
        }
        if handled >= (messages as u64).saturating_sub(tenth) {
            last_tenth_from.get_or_insert_with(|| (started.elapsed(), handled));
        }
        if handled >= messages as u64 {
            break handled;
        }
        if Instant::now() >= deadline {
            shutdown.cancel();
            let _ = running.await;
            return Err(BenchError::Timeout {
                scenario: scenario.as_str(),
                concurrency,
                handled,
                messages,
                timeout,
            });
        }
        if reported.elapsed() >= Duration::from_secs(5) {
            progress(&format!("    bosun: {handled} of {messages} messages handled"));
            reported = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let seconds = started.elapsed().as_secs_f64();
    let rate = |count: u64, time: f64| if time > 0.0 { count as f64 / time } else { 0.0 };
    let first_tenth_per_sec = rate(tenth.min(handled), first_tenth.map_or(seconds, |t| t.as_secs_f64()));
    let last_tenth_per_sec = last_tenth_from.map_or(0.0, |(from, at)| {
        rate(handled.saturating_sub(at), seconds - from.as_secs_f64())
    });
    shutdown.cancel();
    let _ = running.await;
    let probe = metrics.consumer("probe");
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Ok(BenchRow {
        backend: backend.to_owned(),
        workload: scenario,
        concurrency,
        backlog,
        messages: usize::try_from(handled).unwrap_or(messages),
        seconds,
        msg_per_sec: handled as f64 / seconds,
        first_tenth_per_sec,
        last_tenth_per_sec,
        saga_keys: plan.saga_keys,
        p50_ms: ms(probe.processing.percentile(0.5)),
        p99_ms: ms(probe.processing.percentile(0.99)),
        handler_p50_ms: ms(probe.handler.percentile(0.5)),
        handler_p99_ms: ms(probe.handler.percentile(0.99)),
        conflicts: probe.saga_conflicts,
        limit: String::new(),
        limit_per_sec: 0.0,
        limit_before_per_sec: 0.0,
        limit_after_per_sec: 0.0,
        limit_p50_ms: 0.0,
        limit_p99_ms: 0.0,
        limit_conflicts: 0,
        ratio: 0.0,
    })
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    /// Workloads.
    pub scenarios: Vec<Scenario>,
    /// Numbers of concurrent handlers.
    pub concurrency: Vec<usize>,
    /// Messages per run.
    pub messages: usize,
    /// Messages left in the queue under the timed ones.
    pub backlog: usize,
    /// Longest one run may take.
    pub timeout: Duration,
    /// Saga keys the `saga` workload's messages are spread over
    /// ([`SAGA_KEYS`] by default; 1: every message in one saga, to see
    /// whether a saga's history makes its later messages cost more).
    pub saga_keys: u64,
}

impl BenchPlan {
    fn limit_spec(&self, workload: Scenario, concurrency: usize) -> LimitSpec {
        LimitSpec {
            workload,
            concurrency,
            messages: self.messages,
            backlog: self.backlog,
            timeout: self.timeout,
        }
    }
}

/// The summary line of a finished row.
fn summary(row: &BenchRow) -> String {
    format!(
        "  done: bosun {:.0} msg/s (first tenth {:.0}, last tenth {:.0}; p50 {:.2} ms, p99 {:.2} ms), limit {:.0} msg/s (before {:.0}, after {:.0}): ratio {:.3}",
        row.msg_per_sec,
        row.first_tenth_per_sec,
        row.last_tenth_per_sec,
        row.p50_ms,
        row.p99_ms,
        row.limit_per_sec,
        row.limit_before_per_sec,
        row.limit_after_per_sec,
        row.ratio
    )
}

fn limit_done(run: &LimitRun) -> String {
    format!(
        "    limit: {:.0} msg/s (p50 {:.2} ms, p99 {:.2} ms, {} conflicts)",
        run.per_second(),
        run.percentile_ms(0.5),
        run.percentile_ms(0.99),
        run.conflicts
    )
}

/// Runs every configuration on the embedded backend, each in a fresh
/// temporary data directory under `scratch`, between two runs of the
/// SQLite limit in a file of its own under `scratch`.
pub async fn run_embedded(
    scratch: &std::path::Path,
    base: &Settings,
    plan: &BenchPlan,
    progress: Progress<'_>,
) -> Result<Vec<BenchRow>, BenchError> {
    let mut rows = Vec::new();
    for &scenario in &plan.scenarios {
        for &handlers in &plan.concurrency {
            let name = scenario.as_str();
            let spec = plan.limit_spec(scenario, handlers);
            let count = plan.backlog + plan.messages;
            progress(&format!(
                "embedded {name}, {handlers} handlers, backlog {}: the SQLite limit ...",
                plan.backlog
            ));
            let before = limit::sqlite::run(
                scratch,
                &spec,
                limit_messages(scenario, count, plan.saga_keys),
                &mut *progress,
            )
            .await?;
            progress(&limit_done(&before));
            progress(&format!("embedded {name}, {handlers} handlers: bosun ..."));
            let dir: PathBuf = scratch.join(format!("{name}-{handlers}-{}", Uuid::now_v7()));
            let mut settings = base.clone();
            settings.data_dir = dir.clone();
            let backends = Backends::open(&settings).await?;
            let row = run_one(
                "embedded",
                &backends,
                &settings,
                plan,
                scenario,
                handlers,
                &mut *progress,
            )
            .await;
            drop(backends);
            let _ = std::fs::remove_dir_all(&dir);
            let row = row?;
            progress(&format!(
                "embedded {name}, {handlers} handlers: the SQLite limit again ..."
            ));
            let after = limit::sqlite::run(
                scratch,
                &spec,
                limit_messages(scenario, count, plan.saga_keys),
                &mut *progress,
            )
            .await?;
            progress(&limit_done(&after));
            let row = row.beside(SQLITE_LIMIT, &before, &after);
            progress(&summary(&row));
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Runs every configuration on PostgreSQL (stores and transport), each in
/// a fresh schema of the database at `url`, dropped afterwards, between
/// two runs of the PostgreSQL limit in scratch tables of the database.
pub async fn run_postgres(
    url: &str,
    base: &Settings,
    plan: &BenchPlan,
    progress: Progress<'_>,
) -> Result<Vec<BenchRow>, BenchError> {
    let mut rows = Vec::new();
    for &scenario in &plan.scenarios {
        for &handlers in &plan.concurrency {
            let name = scenario.as_str();
            let spec = plan.limit_spec(scenario, handlers);
            let limit_messages = limit_messages(scenario, plan.backlog + plan.messages, plan.saga_keys);
            progress(&format!(
                "postgres {name}, {handlers} handlers, backlog {}: the PostgreSQL limit ...",
                plan.backlog
            ));
            let before = limit::postgres::run(url, &spec, &limit_messages, &mut *progress).await?;
            progress(&limit_done(&before));
            progress(&format!("postgres {name}, {handlers} handlers: bosun ..."));
            let row = run_postgres_one(url, base, plan, scenario, handlers, &mut *progress).await?;
            progress(&format!(
                "postgres {name}, {handlers} handlers: the PostgreSQL limit again ..."
            ));
            let after = limit::postgres::run(url, &spec, &limit_messages, &mut *progress).await?;
            progress(&limit_done(&after));
            let row = row.beside(POSTGRES_LIMIT, &before, &after);
            progress(&summary(&row));
            rows.push(row);
        }
    }
    Ok(rows)
}

/// One bosun row on PostgreSQL, in a fresh schema dropped afterwards.
async fn run_postgres_one(
    url: &str,
    base: &Settings,
    plan: &BenchPlan,
    scenario: Scenario,
    handlers: usize,
    progress: Progress<'_>,
) -> Result<BenchRow, BenchError> {
    let schema = format!("bosun_bench_{}", Uuid::now_v7().simple());
    crate::backends::postgres::create_schema(url, &schema).await?;
    let separator = if url.contains('?') { '&' } else { '?' };
    let scoped = format!("{url}{separator}options=-c%20search_path%3D{schema}");
    let result = async {
        crate::backends::postgres::PostgresDatabase::connect(&scoped)
            .await?
            .migrate()
            .await?;
        let mut settings = base.clone();
        settings.database_url = Some(crate::runtime::config::Secret::new(scoped.clone()));
        settings.transport = crate::runtime::config::TransportKind::Postgres;
        // A pool sized for the handlers, as the limit has a connection per
        // worker: one each, plus the dispatcher, LISTEN and a spare.
        let pool_size = u32::try_from(handlers.saturating_add(4)).unwrap_or(u32::MAX);
        settings.database_pool_size = settings.database_pool_size.max(pool_size);
        // Opened before the clock starts, as the limit opens its
        // connections before it times anything.
        settings.database_pool_min = settings.database_pool_size;
        let backends = Backends::open(&settings).await?;
        run_one("postgres", &backends, &settings, plan, scenario, handlers, progress).await
    }
    .await;
    crate::backends::postgres::drop_schema(url, &schema).await?;
    result
}

/// The rows as a table: bosun's numbers, the limit's, and the ratio.
pub fn table(rows: &[BenchRow]) -> String {
    let mut out = format!(
        "{:<9} {:<5} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9} {:>6}\n",
        "BACKEND",
        "LOAD",
        "HANDLERS",
        "BACKLOG",
        "MSG/S",
        "P50",
        "P99",
        "CONFLICTS",
        "LIMIT/S",
        "LIMIT P50",
        "LIMIT P99",
        "RATIO"
    );
    for row in rows {
        out.push_str(&format!(
            "{:<9} {:<5} {:>8} {:>8} {:>8.0} {:>7.2}ms {:>7.2}ms {:>9} {:>8.0} {:>7.2}ms {:>7.2}ms {:>6.3}\n",
            row.backend,
            row.workload.as_str(),
            row.concurrency,
            row.backlog,
            row.msg_per_sec,
            row.p50_ms,
            row.p99_ms,
            row.conflicts,
            row.limit_per_sec,
            row.limit_p50_ms,
            row.limit_p99_ms,
            row.ratio
        ));
    }
    out
}

/// The rows as JSON, one object per line.
pub fn json_lines(rows: &[BenchRow]) -> Result<String, serde_json::Error> {
    let mut out = String::new();
    for row in rows {
        out.push_str(&serde_json::to_string(row)?);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
