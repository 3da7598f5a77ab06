//! The demo delivery, many times in-process: a handled hop never shows as
//! `sent`, however the writers' lines interleave; a tenant's second demo on
//! one data directory is refused at once.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use super::*;

/// How many demo deliveries [`a_handled_hop_never_shows_as_sent_in_demo_runs`]
/// runs: each takes about a second in a test build, so a few here, and
/// fifty through the binary in `tests/full_delivery.rs` (a long test).
const RUNS: usize = 8;

/// The settings `bosun demo` runs with (its `quicken`).
fn demo_settings(dir: &std::path::Path) -> Settings {
    let mut settings = Settings::with_data_dir(dir);
    settings.retry_base_delay = Duration::from_millis(200);
    settings.poll_interval = Duration::from_millis(50);
    settings.delivery.pipeline_poll = Duration::from_millis(200);
    settings.delivery.pipeline_poll_max = Duration::from_secs(2);
    settings.delivery.reconcile = Duration::from_millis(200);
    settings.delivery.reconcile_max = Duration::from_secs(2);
    settings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handled_hop_never_shows_as_sent_in_demo_runs() {
    let dir = tempfile::tempdir().unwrap();
    let settings = demo_settings(dir.path());
    // Runs where a `sent` line was written after its message's `completed`
    // one: the order that showed a handled hop as `sent`.
    let mut reordered = 0;
    for run in 0..RUNS {
        let options = DemoOptions {
            tenant: format!("t{run:02}"),
            timeout: Duration::from_secs(120),
            ..DemoOptions::default()
        };
        let report = super::run(&settings, &options, |_, _| {}).await.expect("the demo runs");
        assert!(report.completed, "run {run}: {:?}", report.failure);
        let backends = Backends::open(&settings).await.unwrap();
        let correlation_id = report.correlation_id.to_string();
        let delivery = backends.operator("test").delivery(&correlation_id).await.unwrap();
        let mut saw_reordering = false;
        for message in &delivery.messages {
            if expected_handled(&message.message_type, &message.events) {
                assert_eq!(
                    message.status,
                    TimelineStatus::Completed,
                    "run {run}: {} was handled by every consumer it is routed to but shows {:?}: {:#?}",
                    message.message_type,
                    message.status,
                    message.events
                );
            }
            let completed_at = message
                .events
                .iter()
                .position(|line| line.status == TimelineStatus::Completed);
            let sent_at = message
                .events
                .iter()
                .rposition(|line| line.status == TimelineStatus::Sent);
            if let (Some(completed_at), Some(sent_at)) = (completed_at, sent_at)
                && sent_at > completed_at
            {
                saw_reordering = true;
            }
        }
        // The report shows the same statuses as the delivery.
        for (hop, message) in report.hops.iter().zip(&delivery.messages) {
            assert_eq!(hop.message_type, message.message_type);
            if message.status == TimelineStatus::Completed {
                assert_eq!(hop.status, TimelineStatus::Completed, "run {run}: {hop:?}");
            }
        }
        reordered += usize::from(saw_reordering);
    }
    eprintln!("{reordered} of {RUNS} runs wrote a `sent` line after its message's `completed` one");
}

/// Whether every consumer the message is routed to has a `completed` (or
/// `duplicate`) line, read straight from the lines.
fn expected_handled(message_type: &str, lines: &[TimelineEntry]) -> bool {
    let consumers = crate::operator::expected_consumers(message_type);
    !consumers.is_empty()
        && consumers.iter().all(|consumer| {
            lines.iter().any(|line| {
                line.consumer.as_deref() == Some(*consumer)
                    && matches!(line.status, TimelineStatus::Completed | TimelineStatus::Duplicate)
            })
        })
}

#[tokio::test]
async fn a_tenants_second_demo_on_one_data_directory_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let settings = demo_settings(dir.path());
    let options = DemoOptions {
        timeout: Duration::from_secs(120),
        ..DemoOptions::default()
    };
    let first = super::run(&settings, &options, |_, _| {}).await.expect("the demo runs");
    assert!(first.completed, "{:?}", first.failure);
    let Err(err) = super::run(&settings, &options, |_, _| {}).await else {
        panic!("the second demo of the same tenant ran");
    };
    let text = err.to_string();
    // Refused before anything was sent, not timed out (a timeout is a
    // report with its failure).
    assert!(matches!(err, DemoError::AlreadyRun { .. }), "{text}");
    assert!(text.contains("tenant `demo`") && text.contains("--tenant"), "{text}");
    assert!(text.contains(&first.correlation_id.to_string()), "{text}");
    // Another tenant's demo on the same directory runs.
    let other = DemoOptions {
        tenant: "other".into(),
        ..options
    };
    let report = super::run(&settings, &other, |_, _| {}).await.expect("the demo runs");
    assert!(report.completed, "{:?}", report.failure);
}
