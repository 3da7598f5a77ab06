//! `bosun bench`: throughput and latency of the runtime itself.
//!
//! For each backend, scenario and number of concurrent handlers, a fresh
//! data directory (or database schema) is filled with messages, one host
//! runs the `probe` consumer until every message is handled, and a row is
//! printed: messages per second, and p50/p99 of the processing latency
//! (receive to settle: idempotency check, saga load, handler, atomic commit,
//! complete) and of the handler latency.
//!
//! Scenarios:
//! - `noop`: `Probe` commands without echo: a handler that does nothing and
//!   emits nothing, so the numbers are the runtime's own cost;
//! - `saga`: `ProbeEchoed` events counted in probe sagas (16 keys), so every
//!   message loads and saves a saga with optimistic concurrency.
//!
//! This is a measurement, not a test: run it on a quiet machine and compare
//! runs of the same build.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun_consumers::probe::ProbeConsumer;
use bosun_contracts::messages::{Probe, ProbeEchoed};
use bosun_contracts::routing::{consumer, destination_of};
use bosun_contracts::{Envelope, Message};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::host::HostOptions;
use crate::ports::transport::{OutboundMessage, TransportError};
use crate::runtime::config::Settings;
use crate::wiring::{Backends, StartError};

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

/// One measured configuration.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchRow {
    /// `embedded` or `postgres`.
    pub backend: String,
    /// The workload.
    pub scenario: Scenario,
    /// Concurrent handlers.
    pub concurrency: usize,
    /// Messages handled.
    pub messages: usize,
    /// Wall time in seconds.
    pub seconds: f64,
    /// Messages per second.
    pub per_second: f64,
    /// Processing latency p50, milliseconds.
    pub processing_p50_ms: f64,
    /// Processing latency p99, milliseconds.
    pub processing_p99_ms: f64,
    /// Handler latency p50, milliseconds.
    pub handler_p50_ms: f64,
    /// Handler latency p99, milliseconds.
    pub handler_p99_ms: f64,
    /// Saga version conflicts (reloaded and re-applied).
    pub saga_conflicts: u64,
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
    /// The run did not finish.
    #[error("{scenario} with {concurrency} handlers handled {handled} of {messages} messages within {timeout:?}")]
    Timeout {
        /// The workload.
        scenario: &'static str,
        /// Concurrent handlers.
        concurrency: usize,
        /// Handled so far.
        handled: u64,
        /// Sent.
        messages: usize,
        /// The limit.
        timeout: Duration,
    },
}

const SAGA_KEYS: u64 = 16;

fn envelopes(scenario: Scenario, messages: usize) -> Vec<OutboundMessage> {
    let correlation = Uuid::now_v7();
    (0..messages as u64)
        .map(|sequence| {
            let message = match scenario {
                Scenario::Noop => Message::Probe(Probe {
                    group: "bench".to_owned(),
                    sequence,
                    echo: false,
                    work_ms: 0,
                }),
                Scenario::Saga => Message::ProbeEchoed(ProbeEchoed {
                    group: format!("bench-{}", sequence % SAGA_KEYS),
                    sequence,
                }),
            };
            let envelope = Envelope::new(&message, correlation, "bench", "bench");
            let destination = match scenario {
                Scenario::Noop => destination_of("Probe"),
                // Straight into the probe consumer's subscription.
                Scenario::Saga => consumer("probe").map(|route| route.subscription()),
            };
            OutboundMessage {
                destination: destination.unwrap_or_else(|| bosun_contracts::Destination::Queue("probe".into())),
                broker_message_id: envelope.message_id.to_string(),
                message_type: Some(envelope.message_type.clone()),
                correlation_id: Some(correlation.to_string()),
                body: envelope.to_vec(),
                scheduled_at: None,
            }
        })
        .collect()
}

/// Runs one configuration on `backends` (fresh and empty).
pub async fn run_one(
    backend: &str,
    backends: &Backends,
    base: &Settings,
    scenario: Scenario,
    concurrency: usize,
    messages: usize,
    timeout: Duration,
) -> Result<BenchRow, BenchError> {
    let batch = envelopes(scenario, messages);
    for chunk in batch.chunks(500) {
        backends.transport.send(chunk.to_vec()).await?;
    }
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
    let handled = loop {
        let handled = metrics.consumer("probe").processed;
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
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let seconds = started.elapsed().as_secs_f64();
    shutdown.cancel();
    let _ = running.await;
    let probe = metrics.consumer("probe");
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Ok(BenchRow {
        backend: backend.to_owned(),
        scenario,
        concurrency,
        messages: usize::try_from(handled).unwrap_or(messages),
        seconds,
        per_second: handled as f64 / seconds,
        processing_p50_ms: ms(probe.processing.percentile(0.5)),
        processing_p99_ms: ms(probe.processing.percentile(0.99)),
        handler_p50_ms: ms(probe.handler.percentile(0.5)),
        handler_p99_ms: ms(probe.handler.percentile(0.99)),
        saga_conflicts: probe.saga_conflicts,
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
    /// Longest one run may take.
    pub timeout: Duration,
}

/// Runs every configuration on the embedded backend, each in a fresh
/// temporary data directory under `scratch`.
pub async fn run_embedded(
    scratch: &std::path::Path,
    base: &Settings,
    plan: &BenchPlan,
    mut on_row: impl FnMut(&BenchRow),
    mut on_start: impl FnMut(&str, Scenario, usize),
) -> Result<Vec<BenchRow>, BenchError> {
    let (messages, timeout) = (plan.messages, plan.timeout);
    let mut rows = Vec::new();
    for &scenario in &plan.scenarios {
        for &handlers in &plan.concurrency {
            on_start("embedded", scenario, handlers);
            let dir: PathBuf = scratch.join(format!("{}-{handlers}-{}", scenario.as_str(), Uuid::now_v7()));
            let mut settings = base.clone();
            settings.data_dir = dir.clone();
            let backends = Backends::open(&settings).await?;
            let row = run_one("embedded", &backends, &settings, scenario, handlers, messages, timeout).await?;
            drop(backends);
            let _ = std::fs::remove_dir_all(&dir);
            on_row(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Runs every configuration on PostgreSQL (stores and transport), each in
/// a fresh schema of the database at `url`, dropped afterwards.
pub async fn run_postgres(
    url: &str,
    base: &Settings,
    plan: &BenchPlan,
    mut on_row: impl FnMut(&BenchRow),
    mut on_start: impl FnMut(&str, Scenario, usize),
) -> Result<Vec<BenchRow>, BenchError> {
    let mut rows = Vec::new();
    for &scenario in &plan.scenarios {
        for &handlers in &plan.concurrency {
            on_start("postgres", scenario, handlers);
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
                let backends = Backends::open(&settings).await?;
                run_one(
                    "postgres",
                    &backends,
                    &settings,
                    scenario,
                    handlers,
                    plan.messages,
                    plan.timeout,
                )
                .await
            }
            .await;
            crate::backends::postgres::drop_schema(url, &schema).await?;
            let row = result?;
            on_row(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The rows as a table.
pub fn table(rows: &[BenchRow]) -> String {
    let mut out = format!(
        "{:<9} {:<6} {:>8} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}\n",
        "BACKEND", "LOAD", "HANDLERS", "MESSAGES", "MSG/S", "PROC P50", "PROC P99", "HNDL P50", "HNDL P99", "CONFLICTS"
    );
    for row in rows {
        out.push_str(&format!(
            "{:<9} {:<6} {:>8} {:>9} {:>10.0} {:>8.2}ms {:>8.2}ms {:>8.3}ms {:>8.3}ms {:>9}\n",
            row.backend,
            row.scenario.as_str(),
            row.concurrency,
            row.messages,
            row.per_second,
            row.processing_p50_ms,
            row.processing_p99_ms,
            row.handler_p50_ms,
            row.handler_p99_ms,
            row.saga_conflicts
        ));
    }
    out
}
