//! `bosun demo`: one whole delivery on the embedded default, for real.
//!
//! Starts every consumer this build has on a data directory (a temporary
//! one unless given), fires a delivery of the sample module in
//! `src/tools/demo/sample/` (a tiny shell service with unit tests, a Dockerfile
//! and NuGet package settings), prints each hop as it happens, and ends with
//! a summary: every hop with its latency and what the delivery produced.
//! The delivery is: provision the repository, commit an initial README to
//! `main`, commit the module to a feature branch with a pull request into
//! `main`; from there the consumers carry it (pull request, pipeline,
//! build, image, package, release, infrastructure, GitOps) as far as this
//! build's consumers go. The image is built with buildah against a
//! registry the demo starts when the machine has them, else with the
//! built-in builder (see `images.rs`).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bosun_contracts::{Envelope, Message};
use serde::Serialize;
use serde_json::json;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::host::HostOptions;
use crate::operator::{Operator, OperatorError, SendOptions};
use crate::ports::store::{StoreError, TimelineEntry, TimelineStatus};
use crate::runtime::config::Settings;
use crate::runtime::registry::{self, RegistryError};
use crate::runtime::telemetry::{self, TraceContext};
use crate::wiring::{Backends, StartError, verify_topology};

mod images;

const SAMPLE: &[(&str, &str, bool)] = &[
    ("bosun.module.json", include_str!("sample/bosun.module.json"), false),
    ("README.md", include_str!("sample/README.md"), false),
    ("build.sh", include_str!("sample/build.sh"), true),
    ("test.sh", include_str!("sample/test.sh"), true),
    ("Dockerfile", include_str!("sample/Dockerfile"), false),
    ("Dockerfile.scratch", include_str!("sample/Dockerfile.scratch"), false),
];
const CALC: &str = include_str!("sample/src/calc.sh");

/// The repository the demo creates.
pub const REPOSITORY: &str = "payments-api";
/// The tenant the demo runs as unless told otherwise.
pub const TENANT: &str = "demo";

/// How to run the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Break the sample's fee calculation so its unit test fails (the
    /// pipeline fails and the release stops before promotion).
    pub failing_test: bool,
    /// Give up after this long.
    pub timeout: Duration,
    /// The tenant the delivery belongs to ([`TENANT`] by default). Demos of
    /// different tenants may run at once on one data directory: every
    /// repository, feed, image, release and environment is the tenant's own.
    pub tenant: String,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            failing_test: false,
            timeout: Duration::from_secs(300),
            tenant: TENANT.to_owned(),
        }
    }
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Start-up failed.
    #[error(transparent)]
    Start(#[from] StartError),
    /// Consumers could not be built.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// Sending a command failed.
    #[error(transparent)]
    Operator(#[from] OperatorError),
    /// Reading the timeline failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The tenant already has deliveries in this data directory: the same
    /// commits again change nothing, so no new release would come.
    #[error(
        "{data_dir} already holds deliveries of tenant `{tenant}` (the latest {correlation_id}, started {started_at}): a second demo there would repeat commits that change nothing and wait for a release that never comes. Run it with another --tenant, or on a new --data-dir"
    )]
    AlreadyRun {
        /// The data directory.
        data_dir: PathBuf,
        /// The tenant.
        tenant: String,
        /// Its latest delivery.
        correlation_id: String,
        /// When that started.
        started_at: OffsetDateTime,
    },
}

/// One hop of the delivery: a message and what became of it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hop {
    /// Message type.
    pub message_type: String,
    /// Consumers that handled it.
    pub consumers: Vec<String>,
    /// Last status.
    pub status: TimelineStatus,
    /// Attempts.
    pub attempts: u32,
    /// From first sent to last handled, in milliseconds.
    pub latency_ms: u64,
    /// Seconds after the demo started that it was first seen.
    pub at_seconds: f64,
}

/// What the demo did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DemoReport {
    /// Whether the delivery reached its goal.
    pub completed: bool,
    /// Why not, when it did not.
    pub failure: Option<String>,
    /// The delivery's correlation id.
    pub correlation_id: Uuid,
    /// The data directory used.
    pub data_dir: PathBuf,
    /// The message type whose arrival completes the delivery.
    pub goal: String,
    /// Every hop.
    pub hops: Vec<Hop>,
    /// What the delivery produced: (label, value).
    pub results: Vec<(String, String)>,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// The sample module's files with its `container` settings replaced by
/// `container` (the demo's choice of builder and registry).
pub fn sample_files_with(failing_test: bool, container: &serde_json::Value) -> Vec<serde_json::Value> {
    let mut files = sample_files(failing_test);
    for file in &mut files {
        if file["path"] == "bosun.module.json"
            && let Some(text) = file["content"].as_str()
            && let Ok(mut module) = serde_json::from_str::<serde_json::Value>(text)
        {
            module["container"] = container.clone();
            let mut text = serde_json::to_string_pretty(&module).unwrap_or_else(|_| text.to_owned());
            text.push('\n');
            file["content"] = serde_json::Value::String(text);
        }
    }
    files
}

/// The sample module's files the demo commits to its feature branch (with
/// `failing_test`, one of its unit tests fails). Its `container` settings
/// name `Dockerfile.scratch`, which the built-in builder makes; the demo
/// names the multi-stage `Dockerfile` when it builds with buildah
/// ([`sample_files_with`]).
pub fn sample_files(failing_test: bool) -> Vec<serde_json::Value> {
    let calc = if failing_test {
        CALC.replace("echo $(( $1 + $2 ))", "echo $(( $1 - $2 ))")
    } else {
        CALC.to_owned()
    };
    let mut files: Vec<serde_json::Value> = SAMPLE
        .iter()
        .map(|(path, content, executable)| json!({"path": path, "content": content, "executable": executable}))
        .collect();
    files.push(json!({"path": "src/calc.sh", "content": calc}));
    files
}

/// The message type that ends a delivery for the consumers of this build:
/// the last hop the running consumers can reach.
pub fn goal(consumers: &BTreeSet<&str>) -> &'static str {
    let all = bosun_contracts::CONSUMERS
        .iter()
        .all(|route| consumers.contains(route.name));
    if all { "GitOpsSynced" } else { "CommitCreated" }
}

/// Runs the demo; `on_line` receives each timeline line as it happens with
/// the seconds since the start. Starts as `serve` does: on Service Bus the
/// topology is verified first ([`verify_topology`], unless
/// `BOSUN_SERVICEBUS_VERIFY=false`).
pub async fn run(
    settings: &Settings,
    options: &DemoOptions,
    mut on_line: impl FnMut(f64, &TimelineEntry),
) -> Result<DemoReport, DemoError> {
    let started = Instant::now();
    let mut settings = settings.clone();
    let images = images::prepare(&mut settings, &options.tenant).await;
    let settings = &settings;
    verify_topology(settings).await?;
    let backends = Backends::open(settings).await?;
    if let Some(latest) = backends.store.list_deliveries(Some(&options.tenant), 1).await?.pop() {
        return Err(DemoError::AlreadyRun {
            data_dir: settings.data_dir.clone(),
            tenant: options.tenant.clone(),
            correlation_id: latest.correlation_id,
            started_at: latest.started_at,
        });
    }
    let consumers = registry::build(settings, backends.governance())?;
    let names: BTreeSet<&str> = consumers.iter().map(|c| c.name()).collect();
    let goal = goal(&names);
    let shutdown = CancellationToken::new();
    let host = backends.host(consumers, HostOptions::from_settings(settings));
    let token = shutdown.clone();
    let running = tokio::spawn(async move { host.run(token).await });
    let operator = backends.operator("demo");
    let correlation_id = Uuid::now_v7();
    // One trace for the whole delivery: the demo is the caller, and each
    // command it sends continues the demo's span.
    let demo_span = tracing::info_span!("demo", otel.name = "bosun demo", correlation_id = %correlation_id);
    let trace = telemetry::traceparent_of(&demo_span).unwrap_or_else(|| TraceContext {
        traceparent: telemetry::new_traceparent(),
        tracestate: None,
    });

    let result = drive(
        &backends,
        &operator,
        options,
        SendOptions {
            correlation_id: Some(correlation_id),
            message_id: None,
            trace: Some(trace),
            joined: None,
        },
        Goal {
            message_type: goal,
            files: sample_files_with(options.failing_test, &images.container),
        },
        started,
        &mut on_line,
    )
    .await;
    drop(demo_span);
    shutdown.cancel();
    let _ = running.await;
    let failure = result?;

    let delivery = operator.delivery(&correlation_id.to_string()).await?;
    let origin = delivery
        .messages
        .first()
        .map_or(OffsetDateTime::now_utc(), |m| m.first_seen);
    let hops = delivery
        .messages
        .iter()
        .map(|message| Hop {
            message_type: message.message_type.clone(),
            consumers: message.consumers.clone(),
            status: message.status,
            attempts: message.attempts,
            latency_ms: u64::try_from((message.last_update - message.first_seen).whole_milliseconds()).unwrap_or(0),
            at_seconds: (message.first_seen - origin).as_seconds_f64(),
        })
        .collect();
    let mut results = results(&backends, settings, &options.tenant, correlation_id).await?;
    results.push(("image builder".to_owned(), images.summary.clone()));
    drop(images);
    Ok(DemoReport {
        completed: failure.is_none(),
        failure,
        correlation_id,
        data_dir: settings.data_dir.clone(),
        goal: goal.to_owned(),
        hops,
        results,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// What a delivery commits and where it ends.
struct Goal<'a> {
    /// The message type that completes it.
    message_type: &'a str,
    /// The sample module's files.
    files: Vec<serde_json::Value>,
}

/// Sends the commands and follows the timeline; `Ok(None)` when the goal
/// is reached, `Ok(Some(reason))` when the delivery failed.
async fn drive(
    backends: &Backends,
    operator: &Operator,
    options: &DemoOptions,
    send: SendOptions,
    goal: Goal<'_>,
    started: Instant,
    on_line: &mut impl FnMut(f64, &TimelineEntry),
) -> Result<Option<String>, DemoError> {
    let correlation = send.correlation_id.map(|id| id.to_string()).unwrap_or_default();
    let Goal {
        message_type: goal,
        files,
    } = goal;
    let mut files = Some(files);
    let mut seen = 0;
    let mut step = 0;
    let deadline = started + options.timeout;
    loop {
        // Fire the next command once the previous one is handled.
        let timeline = backends.store.timeline(&correlation).await?;
        let completed = |message_type: &str| {
            timeline
                .iter()
                .any(|line| line.message_type == message_type && line.status == TimelineStatus::Completed)
        };
        let next = match step {
            0 => Some((
                "ProvisionRepository",
                json!({"name": REPOSITORY, "description": "bosun demo: the payments service"}),
            )),
            1 if completed("ProvisionRepository") => Some((
                "CreateCommit",
                json!({
                    "repository": REPOSITORY, "branch": "main", "message": "Initial commit",
                    "files": [{"path": "README.md", "content": "# payments-api\n"}]
                }),
            )),
            2 if completed("CreateCommit") => Some((
                "CreateCommit",
                json!({
                    "repository": REPOSITORY, "branch": "feature/payments-api", "baseBranch": "main",
                    "message": "Add the payments service", "files": files.take().unwrap_or_default(),
                    "pullRequestTarget": "main"
                }),
            )),
            _ => None,
        };
        if let Some((message_type, payload)) = next {
            operator
                .send_with(message_type, &payload, &options.tenant, &send)
                .await?;
            step += 1;
            continue;
        }
        for line in timeline.iter().skip(seen) {
            on_line(started.elapsed().as_secs_f64(), line);
        }
        seen = timeline.len();
        if let Some(dead) = timeline.iter().find(|line| line.status == TimelineStatus::DeadLettered) {
            return Ok(Some(format!(
                "{} was dead-lettered by {}: {}",
                dead.message_type,
                dead.consumer.as_deref().unwrap_or("-"),
                dead.detail.as_deref().unwrap_or("")
            )));
        }
        if let Some(stop) = timeline
            .iter()
            .find(|line| matches!(line.message_type.as_str(), "ReleaseBlocked" | "ReleaseRejected"))
        {
            let reason = emitted_of(backends, &correlation, &stop.message_type)
                .await?
                .map(|message| message.to_payload().to_string())
                .unwrap_or_default();
            return Ok(Some(format!(
                "the release stopped before promotion: {} {reason}",
                stop.message_type
            )));
        }
        let goal_reached = step >= 3
            && timeline
                .iter()
                .any(|line| line.message_type == goal && line.status == TimelineStatus::Sent)
            && (goal != "CommitCreated"
                || timeline
                    .iter()
                    .filter(|line| line.message_type == "CommitCreated" && line.status == TimelineStatus::Sent)
                    .count()
                    >= 2);
        if goal_reached {
            return Ok(None);
        }
        if Instant::now() >= deadline {
            return Ok(Some(format!(
                "timed out after {:?} waiting for {goal}",
                options.timeout
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn emitted_of(backends: &Backends, correlation: &str, message_type: &str) -> Result<Option<Message>, StoreError> {
    Ok(backends
        .store
        .emitted(correlation)
        .await?
        .iter()
        .rev()
        .filter_map(|body| Envelope::parse(body).ok())
        .find(|(envelope, _)| envelope.message_type == message_type)
        .map(|(_, message)| message))
}

async fn results(
    backends: &Backends,
    settings: &Settings,
    tenant: &str,
    correlation_id: Uuid,
) -> Result<Vec<(String, String)>, StoreError> {
    let mut results = Vec::new();
    let mut push = |label: &str, value: String| {
        if let Some(existing) = results.iter_mut().find(|(l, _): &&mut (String, String)| l == label) {
            existing.1 = value;
        } else {
            results.push((label.to_owned(), value));
        }
    };
    for body in backends.store.emitted(&correlation_id.to_string()).await? {
        let Ok((_, message)) = Envelope::parse(&body) else {
            continue;
        };
        match message {
            Message::RepositoryProvisioned(event) => {
                let path = settings
                    .git_root()
                    .join(tenant)
                    .join(&event.repository.project)
                    .join(format!("{}.git", event.repository.name));
                push("repository", path.display().to_string());
            }
            Message::CommitCreated(event) => {
                push(&format!("commit on {}", event.branch), event.commit_sha);
            }
            Message::PullRequestOpened(event) => {
                push(
                    "pull request",
                    format!("#{} {:?}", event.pull_request_id, event.status).to_lowercase(),
                );
            }
            Message::PipelineRunCompleted(event) => {
                push(
                    "pipeline run",
                    format!("{} {:?}", event.pipeline_run_id, event.result).to_lowercase(),
                );
            }
            Message::BuildCompleted(event) => {
                push(
                    "tests",
                    format!(
                        "{} passed, {} failed, {} skipped{}",
                        event.test_summary.passed,
                        event.test_summary.failed,
                        event.test_summary.skipped,
                        if event.failed_tests.is_empty() {
                            String::new()
                        } else {
                            format!(" (failed: {})", event.failed_tests.join(", "))
                        }
                    ),
                );
            }
            Message::ContainerImageBuilt(event) => {
                push("image", event.artifact().reference());
            }
            Message::PackagePublished(event) => {
                push(
                    "package",
                    format!("{} {} ({})", event.package_id, event.version, event.feed),
                );
            }
            Message::ReleasePlanned(event) => push("release", event.release_id),
            Message::ReleaseApproved(event) => {
                push("approval", format!("{} for {}", event.approver, event.environment));
            }
            Message::GitOpsSynced(event) => {
                push(
                    &format!("environment {}", event.environment),
                    format!("synced to {}", event.commit_sha),
                );
            }
            _ => {}
        }
    }
    Ok(results)
}

#[cfg(test)]
mod tests;
