//! `bosun demo`: one whole delivery of the sample module, with a line per
//! message as it happens and a summary table at the end.

use std::io::Write;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;

use bosun::ports::store::{TimelineEntry, TimelineStatus};
use bosun::runtime::config::Settings;
use bosun::runtime::telemetry;
use bosun::tools::demo::{self, DemoOptions, DemoReport};

use super::output::{Align, Table, outln, print_json};

/// `bosun demo`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct DemoArgs {
    /// Break the sample's unit test: the pipeline fails and the release
    /// stops before promotion.
    #[arg(long)]
    pub failing_test: bool,
    /// Keep the temporary data directory and print its path.
    #[arg(long)]
    pub keep: bool,
    /// Give up after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub timeout: u64,
    /// The tenant the delivery belongs to.
    #[arg(long, value_name = "TENANT", default_value = demo::TENANT)]
    pub tenant: String,
    /// Print the summary as JSON (progress goes to stderr).
    #[arg(long)]
    pub json: bool,
}

/// Runs the demo in a temporary data directory, unless `--data-dir` named
/// one; fails when the delivery does not complete.
pub async fn run(args: DemoArgs, settings: Settings, explicit_data_dir: bool) -> Result<()> {
    let DemoArgs {
        failing_test,
        keep,
        timeout,
        tenant,
        json,
    } = args;
    let options = DemoOptions {
        failing_test,
        timeout: Duration::from_secs(timeout),
        tenant,
    };
    // The demo's own lines are the progress; only warnings from the runtime.
    let telemetry = if std::env::var_os("RUST_LOG").is_none() {
        telemetry::init_with_filter(settings.log_format, "warn", &settings.telemetry)
    } else {
        telemetry::init(settings.log_format, &settings.telemetry)
    };
    let result = run_with(options, settings, keep, json, explicit_data_dir).await;
    telemetry.shutdown().await;
    result
}

/// The demo itself, once logging and telemetry are set up.
async fn run_with(
    options: DemoOptions,
    mut settings: Settings,
    keep: bool,
    json: bool,
    explicit_data_dir: bool,
) -> Result<()> {
    let temporary = if explicit_data_dir {
        None
    } else {
        let dir = tempfile::Builder::new().prefix("bosun-demo-").tempdir()?;
        settings.data_dir = dir.path().to_path_buf();
        Some(dir)
    };
    quicken(&mut settings);
    // With --json, stdout is the summary alone.
    let say = |text: String| {
        if json {
            eprintln!("{text}");
        } else {
            let _ = outln!("{text}");
        }
    };
    say(format!(
        "bosun demo: one delivery of the sample module `{}`",
        demo::REPOSITORY
    ));
    say(format!("data directory: {}", settings.data_dir.display()));
    say(String::new());
    let report = demo::run(&settings, &options, |seconds, line| say(progress_line(seconds, line))).await?;
    if json {
        print_json(&report)?;
    } else {
        write_summary(&mut std::io::stdout().lock(), &report)?;
    }
    if let Some(dir) = temporary {
        if keep {
            let path = dir.keep();
            eprintln!("kept the data directory {}", path.display());
        } else {
            eprintln!("removed the temporary data directory (pass --keep to keep it, or --data-dir DIR)");
        }
    }
    if let Some(reason) = report.failure {
        bail!("the delivery did not complete: {reason}");
    }
    Ok(())
}

/// Every consumer runs, and waits and retries are short: the demo is
/// watched by a person.
fn quicken(settings: &mut Settings) {
    settings.consumers = None;
    settings.retry_base_delay = settings.retry_base_delay.min(Duration::from_millis(200));
    settings.poll_interval = settings.poll_interval.min(Duration::from_millis(50));
    settings.delivery.pipeline_poll = settings.delivery.pipeline_poll.min(Duration::from_millis(200));
    settings.delivery.pipeline_poll_max = settings.delivery.pipeline_poll_max.min(Duration::from_secs(2));
    settings.delivery.reconcile = settings.delivery.reconcile.min(Duration::from_millis(200));
    settings.delivery.reconcile_max = settings.delivery.reconcile_max.min(Duration::from_secs(2));
}

/// One progress line: seconds since the start, an arrow for the status,
/// the message type, status, consumer and detail.
fn progress_line(seconds: f64, line: &TimelineEntry) -> String {
    let arrow = match line.status {
        TimelineStatus::Sent => "->",
        TimelineStatus::Completed => "ok",
        TimelineStatus::RetryScheduled => "..",
        TimelineStatus::DeadLettered => "XX",
        TimelineStatus::Duplicate => "==",
        TimelineStatus::Replayed => "<>",
        // A message's status, never a line's.
        TimelineStatus::Published => "->",
    };
    format!(
        "[{seconds:7.2}s] {arrow} {:<26} {:<15} {:<22} {}",
        line.message_type,
        line.status.as_str(),
        line.consumer.as_deref().unwrap_or(""),
        line.detail.as_deref().unwrap_or("")
    )
}

/// The summary after the progress: a table of hops, what the delivery
/// produced, and whether it completed.
fn write_summary(out: &mut impl Write, report: &DemoReport) -> Result<()> {
    writeln!(out)?;
    let mut hops = Table::new([
        ("HOP", Align::Left),
        ("STATUS", Align::Left),
        ("ATTEMPTS", Align::Right),
        ("LATENCY", Align::Right),
        ("CONSUMERS", Align::Left),
    ]);
    for hop in &report.hops {
        hops.row([
            hop.message_type.clone(),
            hop.status.as_str().to_owned(),
            hop.attempts.to_string(),
            format!("{}ms", hop.latency_ms),
            hop.consumers.join(","),
        ]);
    }
    hops.write(out)?;
    writeln!(out)?;
    let mut results = Table::headless([Align::Left, Align::Left]);
    for (label, value) in &report.results {
        results.row([label.as_str(), value.as_str()]);
    }
    results.write(out)?;
    writeln!(out)?;
    match &report.failure {
        None => writeln!(
            out,
            "delivery {} completed ({}) in {:.1}s",
            report.correlation_id, report.goal, report.seconds
        )?,
        Some(reason) => writeln!(out, "delivery {} FAILED: {reason}", report.correlation_id)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bosun::tools::demo::Hop;
    use time::macros::datetime;
    use uuid::Uuid;

    use super::*;

    #[test]
    fn a_progress_line_shows_time_status_and_consumer() {
        let line = TimelineEntry {
            correlation_id: "c".to_owned(),
            message_id: "m".to_owned(),
            message_type: "CreateCommit".to_owned(),
            consumer: Some("commit".to_owned()),
            status: TimelineStatus::RetryScheduled,
            attempt: 1,
            at: datetime!(2026-12-01 10:00:00 UTC),
            detail: Some("no repository".to_owned()),
        };
        assert_eq!(
            progress_line(1.5, &line),
            format!(
                "[   1.50s] .. CreateCommit{} retry-scheduled commit{} no repository",
                " ".repeat(14),
                " ".repeat(16)
            )
        );
    }

    fn report(failure: Option<&str>) -> DemoReport {
        DemoReport {
            completed: failure.is_none(),
            failure: failure.map(str::to_owned),
            correlation_id: Uuid::nil(),
            data_dir: "/tmp/demo".into(),
            goal: "GitOpsSynced".to_owned(),
            hops: vec![Hop {
                message_type: "ProvisionRepository".to_owned(),
                consumers: vec!["repository-provisioning".to_owned()],
                status: TimelineStatus::Completed,
                attempts: 1,
                latency_ms: 42,
                at_seconds: 0.1,
            }],
            results: vec![("release".to_owned(), "payments-api-1".to_owned())],
            seconds: 2.04,
        }
    }

    fn summary(report: &DemoReport) -> String {
        let mut out = Vec::new();
        write_summary(&mut out, report).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_summary_has_the_hops_the_results_and_the_outcome() {
        let nil = Uuid::nil();
        assert_eq!(
            summary(&report(None)),
            format!(
                "\nHOP{hop}  STATUS     ATTEMPTS  LATENCY  CONSUMERS\n\
                 ProvisionRepository  completed         1     42ms  repository-provisioning\n\
                 \n\
                 release  payments-api-1\n\
                 \n\
                 delivery {nil} completed (GitOpsSynced) in 2.0s\n",
                hop = " ".repeat(16),
            )
        );
        assert!(summary(&report(Some("timed out"))).ends_with(&format!("delivery {nil} FAILED: timed out\n")));
    }
}
