//! `bosun bench`: messages per second and latencies of the runtime, per
//! backend, workload and number of concurrent handlers, each beside the
//! one-transaction-per-message limit of the same database, measured in the
//! same run, and the ratio of the two; and the latency row: a three-hop
//! delivery through the HTTP API, from acceptance to the SSE client reading
//! its end.

use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;

use bosun::runtime::config::Settings;
use bosun::runtime::telemetry;
use bosun::tools::bench::{self, BenchPlan, Scenario, latency};

use super::output::{out, outln};

/// `bosun bench`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct BenchArgs {
    /// Messages per run.
    #[arg(long, default_value_t = 2000)]
    pub messages: usize,
    /// Concurrent handlers to try (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub concurrency: Vec<usize>,
    /// Workloads (comma-separated: noop, saga, latency). `latency` is the
    /// latency row: a three-hop delivery through the HTTP API, end to end
    /// as an SSE client sees it, on the embedded backend.
    #[arg(long, value_delimiter = ',', default_value = "noop,saga,latency")]
    pub scenarios: Vec<String>,
    /// Deliveries the latency row measures, one after the other (after 10
    /// uncounted ones).
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub latency_runs: usize,
    /// Messages sent before the clock starts that stay in the queue under
    /// the timed ones (for bosun's rows and the limit's).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub backlog: usize,
    /// Saga keys the `saga` workload spreads its messages over (1: all in
    /// one saga, to see whether its history makes later messages cost more).
    #[arg(long, default_value_t = bench::SAGA_KEYS, value_name = "N")]
    pub saga_keys: u64,
    /// Give up on one run after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Also measure on PostgreSQL (a fresh schema per run, dropped after).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Print one JSON object per row and line.
    #[arg(long)]
    pub json: bool,
}

/// Uncounted deliveries before the latency row's timed ones.
const LATENCY_WARMUP: usize = 10;

impl BenchArgs {
    /// Whether the latency row is asked for.
    fn latency(&self) -> bool {
        self.scenarios.iter().any(|name| name == "latency")
    }

    /// What to run, checked: known workloads, and more than 0 messages and
    /// handlers (and latency runs, when the latency row is asked for).
    fn plan(&self) -> Result<BenchPlan> {
        let scenarios = self
            .scenarios
            .iter()
            .filter(|name| name.as_str() != "latency")
            .map(|name| match name.as_str() {
                "noop" => Ok(Scenario::Noop),
                "saga" => Ok(Scenario::Saga),
                other => bail!("--scenarios: `{other}` is not noop, saga or latency"),
            })
            .collect::<Result<Vec<_>>>()?;
        if self.messages == 0 || self.concurrency.contains(&0) || self.saga_keys == 0 {
            bail!("--messages, --concurrency and --saga-keys must be more than 0");
        }
        if self.latency() && self.latency_runs == 0 {
            bail!("--latency-runs must be more than 0");
        }
        Ok(BenchPlan {
            scenarios,
            concurrency: self.concurrency.clone(),
            messages: self.messages,
            backlog: self.backlog,
            timeout: Duration::from_secs(self.timeout),
            saga_keys: self.saga_keys,
        })
    }
}

/// Runs every (backend, workload, handlers) combination, each between two
/// runs of its limit, in a scratch directory and prints the table (or JSON
/// lines); progress goes to stderr.
pub async fn run(args: BenchArgs, settings: Settings) -> Result<()> {
    // The bench measures the hot path: no trace export, whatever OTEL_* say.
    let _telemetry = telemetry::init_with_filter(settings.log_format, "error", &Default::default());
    let plan = args.plan()?;
    let scratch = tempfile::Builder::new().prefix("bosun-bench-").tempdir()?;
    eprintln!(
        "bosun bench: {} messages per run, backlog {}, handlers {:?}, scenarios {:?}",
        plan.messages,
        plan.backlog,
        plan.concurrency,
        plan.scenarios.iter().map(|s| s.as_str()).collect::<Vec<_>>()
    );
    let mut progress = |line: &str| eprintln!("{line}");
    let mut rows = bench::run_embedded(scratch.path(), &settings, &plan, &mut progress).await?;
    if let Some(url) = &args.database_url {
        rows.extend(bench::run_postgres(url, &settings, &plan, &mut progress).await?);
    }
    let latency = if args.latency() {
        progress(&format!(
            "embedded latency: {} three-hop deliveries through the HTTP API ...",
            args.latency_runs
        ));
        let row = latency::run_latency(
            scratch.path(),
            &settings,
            args.latency_runs,
            LATENCY_WARMUP,
            plan.timeout,
            &mut progress,
        )
        .await?;
        progress(&format!(
            "  done: p50 {:.2} ms, p99 {:.2} ms (accepted to the SSE end event)",
            row.p50_ms, row.p99_ms
        ));
        Some(row)
    } else {
        None
    };
    if args.json {
        out!("{}", bench::json_lines(&rows)?)?;
        if let Some(row) = &latency {
            outln!("{}", serde_json::to_string(row)?)?;
        }
    } else {
        if !rows.is_empty() {
            out!("{}", bench::table(&rows))?;
        }
        if let Some(row) = &latency {
            if !rows.is_empty() {
                outln!()?;
            }
            out!("{}", latency::table(row))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(messages: usize, concurrency: &[usize], scenarios: &[&str]) -> BenchArgs {
        BenchArgs {
            messages,
            concurrency: concurrency.to_vec(),
            scenarios: scenarios.iter().map(|s| (*s).to_owned()).collect(),
            latency_runs: 200,
            backlog: 0,
            saga_keys: 16,
            timeout: 5,
            database_url: None,
            json: false,
        }
    }

    #[test]
    fn the_plan_has_the_named_workloads_in_order() {
        let plan = args(10, &[1, 4], &["saga", "noop"]).plan().unwrap();
        assert_eq!(plan.scenarios, [Scenario::Saga, Scenario::Noop]);
        assert_eq!(plan.concurrency, [1, 4]);
        assert_eq!(plan.messages, 10);
        assert_eq!(plan.backlog, 0);
        assert_eq!(plan.timeout, Duration::from_secs(5));
    }

    #[test]
    fn latency_is_its_own_row_not_a_throughput_workload() {
        let only = args(10, &[1], &["latency"]);
        assert!(only.latency());
        assert_eq!(only.plan().unwrap().scenarios, []);
        let mut none = args(10, &[1], &["noop", "latency"]);
        none.latency_runs = 0;
        assert_eq!(
            none.plan().unwrap_err().to_string(),
            "--latency-runs must be more than 0"
        );
        assert!(!args(10, &[1], &["noop"]).latency());
    }

    #[test]
    fn an_unknown_workload_or_zero_is_refused_by_name() {
        let unknown = args(10, &[1], &["noop", "sleep"]).plan().unwrap_err();
        assert_eq!(unknown.to_string(), "--scenarios: `sleep` is not noop, saga or latency");
        let mut no_keys = args(10, &[1], &["saga"]);
        no_keys.saga_keys = 0;
        for zero in [args(0, &[1], &["noop"]), args(10, &[1, 0], &["noop"]), no_keys] {
            let err = zero.plan().unwrap_err();
            assert_eq!(
                err.to_string(),
                "--messages, --concurrency and --saga-keys must be more than 0"
            );
        }
    }
}
