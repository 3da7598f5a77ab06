//! The latency row: how long a three-hop delivery takes end to end, as a
//! client of the HTTP API sees it.
//!
//! On the embedded default (SQLite store, embedded transport), one process
//! serves the real HTTP API (`front::api::serve`, on a loopback port) and
//! runs a host with the `probe` consumer. Each run, one after the other:
//! 1. a client sends `POST /v1/commands/Probe` with `relays: 1`: the probe
//!    consumer passes it on once (hop 1: `Probe`, hop 2: the relayed
//!    `Probe`), then echoes it (hop 3: `ProbeEchoed`, counted in the probe
//!    saga);
//! 2. once the API answered 202 (the command accepted), the client opens
//!    `GET /v1/deliveries/{id}/events` and reads it until `event: end`.
//!
//! The row's latency is from the 202 to the moment the client has read the
//! end event (the SSE connection is opened within it, as a client would);
//! `totalP50Ms`/`totalP99Ms` also count the POST itself. It uses the API
//! it measures, so this one bench module sits above `front/`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun_consumers::probe::ProbeConsumer;
use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{BenchError, Progress};
use crate::front::access::{self, Scope};
use crate::front::api::{ApiState, serve};
use crate::front::gateway::Gateway;
use crate::host::HostOptions;
use crate::runtime::config::{HttpLimits, Settings};
use crate::wiring::Backends;

/// The workload's name in the row.
pub const WORKLOAD: &str = "latency-3-hop";

/// Consumer hops of the measured delivery.
pub const HOPS: u32 = 3;

/// One latency row.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LatencyRow {
    /// `embedded`.
    pub backend: String,
    /// [`WORKLOAD`].
    pub workload: String,
    /// Consumer hops of each delivery.
    pub hops: u32,
    /// Deliveries measured (one at a time).
    pub runs: usize,
    /// Runs not counted, first, to warm up.
    pub warmup: usize,
    /// Accepted (202) to end event read by the SSE client, p50, milliseconds.
    pub p50_ms: f64,
    /// ... p99.
    pub p99_ms: f64,
    /// ... the slowest.
    pub max_ms: f64,
    /// POST sent to end event read, p50, milliseconds.
    pub total_p50_ms: f64,
    /// ... p99.
    pub total_p99_ms: f64,
    /// The POST's round trip (acceptance), p50, milliseconds.
    pub accept_p50_ms: f64,
}

/// Why a latency run failed.
#[derive(Debug, thiserror::Error)]
pub enum LatencyError {
    /// The HTTP API could not be served or answered unexpectedly.
    #[error("latency bench: {0}")]
    Api(String),
}

fn api(what: impl std::fmt::Display) -> BenchError {
    BenchError::Latency(LatencyError::Api(what.to_string()))
}

/// The `q` quantile of `sorted` durations in milliseconds (0 when empty).
pub fn percentile_ms(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64) * q).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1000.0
}

/// Measures `runs` three-hop deliveries (after `warmup` uncounted ones) on
/// a fresh embedded data directory under `scratch`, removed afterwards.
pub async fn run_latency(
    scratch: &std::path::Path,
    base: &Settings,
    runs: usize,
    warmup: usize,
    timeout: Duration,
    progress: Progress<'_>,
) -> Result<LatencyRow, BenchError> {
    let dir = scratch.join(format!("latency-{}", Uuid::now_v7()));
    let mut settings = base.clone();
    settings.data_dir = dir.clone();
    settings.database_url = None;
    settings.transport = crate::runtime::config::TransportKind::Embedded;
    let result = async {
        let backends = Backends::open(&settings).await?;
        measure(&backends, &settings, runs, warmup, timeout, progress).await
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn measure(
    backends: &Backends,
    settings: &Settings,
    runs: usize,
    warmup: usize,
    timeout: Duration,
    progress: Progress<'_>,
) -> Result<LatencyRow, BenchError> {
    let shutdown = CancellationToken::new();
    let host = backends.host(
        vec![Arc::new(ProbeConsumer::new())],
        HostOptions::from_settings(settings),
    );
    let metrics = host.metrics();
    let token = shutdown.clone();
    let running = tokio::spawn(async move { host.run(token).await });
    let result = async {
        let made = access::generate(
            "bench",
            &[Scope::CommandsSend, Scope::DeliveriesRead],
            "bench",
            None,
            access::DEFAULT_MAX_KEY_LIFETIME,
        )
        .map_err(api)?;
        backends.access.insert_api_key(made.record).await.map_err(api)?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(api)?;
        let url = format!("http://{}", listener.local_addr().map_err(api)?);
        let limits = HttpLimits {
            // One client, as fast as it can: the budget is not measured.
            rate_limit_per_second: 1_000_000,
            rate_limit_burst: 1_000_000,
            ..HttpLimits::default()
        };
        let state = ApiState::new(Gateway::new(backends.clone(), shutdown.clone()), metrics);
        tokio::spawn(serve(listener, state, 64 * 1024, limits, shutdown.clone()));
        let client = reqwest::Client::new();
        let mut latencies = Vec::with_capacity(runs);
        let mut totals = Vec::with_capacity(runs);
        let mut accepts = Vec::with_capacity(runs);
        let mut reported = Instant::now();
        for run in 0..warmup + runs {
            let (accept, end) = tokio::time::timeout(timeout, one(&client, &url, &made.key, run))
                .await
                .map_err(|_| api(format!("run {run} did not end within {timeout:?}")))??;
            if run >= warmup {
                latencies.push(end - accept);
                totals.push(end);
                accepts.push(accept);
            }
            if reported.elapsed() >= Duration::from_secs(5) {
                progress(&format!("    latency: {run} of {} deliveries", warmup + runs));
                reported = Instant::now();
            }
        }
        latencies.sort();
        totals.sort();
        accepts.sort();
        Ok(LatencyRow {
            backend: "embedded".to_owned(),
            workload: WORKLOAD.to_owned(),
            hops: HOPS,
            runs,
            warmup,
            p50_ms: percentile_ms(&latencies, 0.5),
            p99_ms: percentile_ms(&latencies, 0.99),
            max_ms: percentile_ms(&latencies, 1.0),
            total_p50_ms: percentile_ms(&totals, 0.5),
            total_p99_ms: percentile_ms(&totals, 0.99),
            accept_p50_ms: percentile_ms(&accepts, 0.5),
        })
    }
    .await;
    shutdown.cancel();
    let _ = running.await;
    result
}

/// One delivery: the time from the POST to its 202, and from the POST to
/// the end event read.
async fn one(client: &reqwest::Client, url: &str, key: &str, run: usize) -> Result<(Duration, Duration), BenchError> {
    let started = Instant::now();
    let response = client
        .post(format!("{url}/v1/commands/Probe"))
        .bearer_auth(key)
        .json(&json!({"group": "latency", "sequence": run, "relays": HOPS - 2}))
        .send()
        .await
        .map_err(api)?;
    let status = response.status();
    let body: Value = response.json().await.map_err(api)?;
    let accepted = started.elapsed();
    if status != reqwest::StatusCode::ACCEPTED {
        return Err(api(format!("POST /v1/commands/Probe answered {status}: {body}")));
    }
    let correlation = body["correlationId"]
        .as_str()
        .ok_or_else(|| api(format!("no correlationId in {body}")))?;
    let mut stream = client
        .get(format!("{url}/v1/deliveries/{correlation}/events"))
        .bearer_auth(key)
        .send()
        .await
        .map_err(api)?;
    let mut text = String::new();
    while let Some(chunk) = stream.chunk().await.map_err(api)? {
        text.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(end) = text.find("event: end") {
            // The end event's data line has arrived with it or comes next.
            if text[end..].contains("\n\n") {
                let seen = started.elapsed();
                if !text[end..].contains("\"completed\"") {
                    return Err(api(format!("delivery {correlation} did not complete:\n{text}")));
                }
                return Ok((accepted, seen));
            }
        }
    }
    Err(api(format!(
        "the event stream of {correlation} closed before its end:\n{text}"
    )))
}

/// The row as a table line, under its own header.
pub fn table(row: &LatencyRow) -> String {
    format!(
        "{:<9} {:<14} {:>4} {:>5} {:>9} {:>9} {:>9} {:>10} {:>10}\n{:<9} {:<14} {:>4} {:>5} {:>7.2}ms {:>7.2}ms {:>7.2}ms {:>8.2}ms {:>8.2}ms\n",
        "BACKEND",
        "LOAD",
        "HOPS",
        "RUNS",
        "P50",
        "P99",
        "MAX",
        "TOTAL P50",
        "ACCEPT P50",
        row.backend,
        row.workload,
        row.hops,
        row.runs,
        row.p50_ms,
        row.p99_ms,
        row.max_ms,
        row.total_p50_ms,
        row.accept_p50_ms,
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn percentiles_pick_the_rank_and_nothing_gives_zero() {
        let sorted: Vec<_> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile_ms(&sorted, 0.5), 50.0);
        assert_eq!(percentile_ms(&sorted, 0.99), 99.0);
        assert_eq!(percentile_ms(&sorted, 1.0), 100.0);
        assert_eq!(percentile_ms(&[], 0.5), 0.0);
    }

    /// Three hops through the real API and an SSE client, a few times; the
    /// numbers are not judged (a shared machine), only that every delivery
    /// completed and was measured.
    #[tokio::test]
    async fn the_latency_row_measures_completed_three_hop_deliveries() {
        let scratch = tempfile::tempdir().unwrap();
        let settings = Settings::from_sources(&BTreeMap::new(), &BTreeMap::new()).unwrap();
        let mut lines = Vec::new();
        let row = run_latency(
            scratch.path(),
            &settings,
            5,
            1,
            Duration::from_secs(60),
            &mut |line: &str| lines.push(line.to_owned()),
        )
        .await
        .unwrap();
        assert_eq!(
            (row.backend.as_str(), row.workload.as_str(), row.hops),
            ("embedded", WORKLOAD, 3)
        );
        assert_eq!((row.runs, row.warmup), (5, 1));
        assert!(
            row.p50_ms > 0.0 && row.p50_ms <= row.p99_ms && row.p99_ms <= row.max_ms,
            "{row:?}"
        );
        assert!(row.total_p50_ms >= row.accept_p50_ms, "{row:?}");
        let json = serde_json::to_value(&row).unwrap();
        for field in [
            "backend",
            "workload",
            "hops",
            "runs",
            "p50Ms",
            "p99Ms",
            "maxMs",
            "totalP50Ms",
        ] {
            assert!(json.get(field).is_some(), "{field} missing from {json}");
        }
        assert_eq!(json["workload"], WORKLOAD);
        let table = table(&row);
        assert!(
            table.lines().nth(1).unwrap().starts_with("embedded  latency-3-hop"),
            "{table}"
        );
        let left: Vec<_> = std::fs::read_dir(scratch.path()).unwrap().collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}
