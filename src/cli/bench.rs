//! `bosun bench`: messages per second and latencies of the runtime, per
//! backend, workload and number of concurrent handlers, each beside the
//! one-transaction-per-message limit of the same database, measured in the
//! same run, and the ratio of the two.

use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;

use bosun::runtime::config::Settings;
use bosun::runtime::telemetry;
use bosun::tools::bench::{self, BenchPlan, Scenario};

/// `bosun bench`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct BenchArgs {
    /// Messages per run.
    #[arg(long, default_value_t = 2000)]
    pub messages: usize,
    /// Concurrent handlers to try (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub concurrency: Vec<usize>,
    /// Workloads (comma-separated: noop, saga).
    #[arg(long, value_delimiter = ',', default_value = "noop,saga")]
    pub scenarios: Vec<String>,
    /// Messages sent before the clock starts that stay in the queue under
    /// the timed ones (for bosun's rows and the limit's).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub backlog: usize,
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

impl BenchArgs {
    /// What to run, checked: known workloads, and more than 0 messages and
    /// handlers.
    fn plan(&self) -> Result<BenchPlan> {
        let scenarios = self
            .scenarios
            .iter()
            .map(|name| match name.as_str() {
                "noop" => Ok(Scenario::Noop),
                "saga" => Ok(Scenario::Saga),
                other => bail!("--scenarios: `{other}` is not noop or saga"),
            })
            .collect::<Result<Vec<_>>>()?;
        if self.messages == 0 || self.concurrency.contains(&0) {
            bail!("--messages and --concurrency must be more than 0");
        }
        Ok(BenchPlan {
            scenarios,
            concurrency: self.concurrency.clone(),
            messages: self.messages,
            backlog: self.backlog,
            timeout: Duration::from_secs(self.timeout),
        })
    }
}

/// Runs every (backend, workload, handlers) combination, each between two
/// runs of its limit, in a scratch directory and prints the table (or JSON
/// lines); progress goes to stderr.
pub async fn run(args: BenchArgs, settings: Settings) -> Result<()> {
    telemetry::init_with_filter(settings.log_format, "error");
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
    if args.json {
        print!("{}", bench::json_lines(&rows)?);
    } else {
        print!("{}", bench::table(&rows));
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
            backlog: 0,
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
    fn an_unknown_workload_or_zero_is_refused_by_name() {
        let unknown = args(10, &[1], &["noop", "sleep"]).plan().unwrap_err();
        assert_eq!(unknown.to_string(), "--scenarios: `sleep` is not noop or saga");
        for zero in [args(0, &[1], &["noop"]), args(10, &[1, 0], &["noop"])] {
            let err = zero.plan().unwrap_err();
            assert_eq!(err.to_string(), "--messages and --concurrency must be more than 0");
        }
    }
}
