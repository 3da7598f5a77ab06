//! The pipeline-monitor consumer: `PipelineRunStarted` and its own
//! scheduled `PollPipelineRun` in; `PipelineRunCompleted` (or the next
//! `PollPipelineRun`) out.
//!
//! It follows a run to completion without holding a lock or waiting inside
//! a handler: each message asks the port where the run is once. A finished
//! run is reported as `PipelineRunCompleted` (result, timings, failed step,
//! and the blob references of its log, JUnit files and artifacts); a run
//! still going schedules the next poll with `Outgoing::after`, the delay
//! growing exponentially with the poll number up to a cap
//! ([`PipelineMonitor::poll_delay`]). `PipelineRunStarted` is poll 0: it
//! looks at once (which, on the local runner, also starts a run whose
//! executor was lost) and schedules poll 1. After `max_polls` polls without
//! an end the handler gives up with a permanent error, so the last poll
//! lands in the dead letters for an operator to replay.
//!
//! Reconciled on `pipelineRunId`: the messages carry the whole run, the
//! monitor keeps no state, and asking about a finished run again reports
//! the same completion. Transient port failures are retried by the runtime
//! (exponential, 5 times) without counting as a poll.
//!
//! - [`port`] — the [`PipelineRunStatus`] port and its [`MonitorError`];
//! - [`local`] — the local pipeline runner ([`local::LocalRunStatus`]);
//! - [`azure`] — Azure Pipelines runs, logs, timeline and test results
//!   ([`azure::AzureRunStatus`]).

pub mod azure;
pub mod local;
pub mod port;

#[cfg(test)]
mod tests;

use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{
    ModuleMetadata, PipelineResult, PipelineRunCompleted, PipelineRunStarted, PollPipelineRun,
};
use bosun_contracts::validate::{self, Validate};
use bosun_contracts::{ConsumerName, Message};
use time::OffsetDateTime;

pub use port::{FinishedRun, MonitorError, PipelineRunStatus, RunQuery, RunState};

use crate::{Consumer, HandlerError, Inbound, Outcome, Outgoing, RetryPolicy, UnexpectedMessage};

/// The consumer's name: its queue and subscription.
pub const NAME: ConsumerName = "pipeline-monitor";

/// The default delay before the first poll.
pub const DEFAULT_BASE_DELAY: Duration = Duration::from_secs(1);

/// The default longest delay between polls.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(30);

/// The default number of polls before giving up (about two hours with the
/// default delays; Azure Pipelines' default job timeout is one hour).
pub const DEFAULT_MAX_POLLS: u32 = 240;

/// Longest `failedStep` a message carries.
const MAX_STEP_CHARS: usize = 256;

/// The pipeline-monitor consumer over a [`PipelineRunStatus`].
#[derive(Debug, Clone)]
pub struct PipelineMonitor<P> {
    port: P,
    base_delay: Duration,
    max_delay: Duration,
    max_polls: u32,
}

/// The run a message is about (the fields every run message shares).
struct Run<'a> {
    pipeline_run_id: &'a str,
    pipeline_id: &'a str,
    repository: &'a str,
    branch: &'a str,
    commit_sha: &'a str,
    release_id: &'a str,
    module: &'a ModuleMetadata,
    started_at: OffsetDateTime,
    url: Option<&'a str>,
}

impl<P: PipelineRunStatus> PipelineMonitor<P> {
    /// The consumer over a pipeline service ([`local::LocalRunStatus`],
    /// [`azure::AzureRunStatus`] or any other implementation of the port),
    /// polling first after `base_delay`, doubling up to `max_delay`, and
    /// giving up after `max_polls` polls (at least 1). The runtime passes
    /// [`DEFAULT_BASE_DELAY`], [`DEFAULT_MAX_DELAY`] and
    /// [`DEFAULT_MAX_POLLS`], scaled as it sees fit.
    pub fn new(port: P, base_delay: Duration, max_delay: Duration, max_polls: u32) -> Self {
        Self {
            port,
            base_delay,
            max_delay: max_delay.max(base_delay),
            max_polls: max_polls.max(1),
        }
    }

    /// The port.
    pub fn port(&self) -> &P {
        &self.port
    }

    /// The delay before poll number `poll` (1-based):
    /// `min(max_delay, base_delay * 2^(poll - 1))`.
    pub fn poll_delay(&self, poll: u32) -> Duration {
        let factor = 2u32.saturating_pow(poll.saturating_sub(1).min(31));
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }

    /// The most polls made before giving up.
    pub fn max_polls(&self) -> u32 {
        self.max_polls
    }
}

fn invalid(field: &str, reason: &str) -> HandlerError {
    HandlerError::from(MonitorError::Invalid(format!("{field}: {reason}")))
}

fn millis(duration: time::Duration) -> u64 {
    u64::try_from(duration.whole_milliseconds()).unwrap_or(0)
}

/// The first `max` characters of a step name.
fn shorten(step: &str, max: usize) -> String {
    step.chars().take(max).collect()
}

/// `PipelineRunCompleted` for a finished run. Timings are clamped so the
/// event is valid whatever the service reports: the run started no earlier
/// than it was queued (`run.started_at`) and finished no earlier than it
/// started.
fn completed(run: &Run<'_>, finished: FinishedRun) -> PipelineRunCompleted {
    let queued_at = run.started_at;
    let finished_at = finished.finished_at.max(queued_at);
    let agent_start = finished.started_at.unwrap_or(queued_at).clamp(queued_at, finished_at);
    let failed_step = match finished.result {
        PipelineResult::Failed => finished
            .failed_step
            .as_deref()
            .map(str::trim)
            .filter(|step| !step.is_empty())
            .map(|step| shorten(step, MAX_STEP_CHARS)),
        _ => None,
    };
    PipelineRunCompleted {
        pipeline_run_id: run.pipeline_run_id.to_owned(),
        pipeline_id: run.pipeline_id.to_owned(),
        repository: run.repository.to_owned(),
        branch: run.branch.to_owned(),
        commit_sha: run.commit_sha.to_owned(),
        release_id: run.release_id.to_owned(),
        module: run.module.clone(),
        result: finished.result,
        started_at: queued_at,
        finished_at,
        queued_ms: millis(agent_start - queued_at),
        duration_ms: millis(finished_at - agent_start),
        failed_step,
        log: finished.log,
        test_results: finished.test_results,
        artifacts: finished.artifacts,
        url: finished.url.or_else(|| run.url.map(str::to_owned)),
    }
}

#[async_trait]
impl<P: PipelineRunStatus> Consumer for PipelineMonitor<P> {
    fn name(&self) -> ConsumerName {
        NAME
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(5)
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        let tenant = &inbound.envelope.tenant_id;
        validate::tenant_id("tenantId", tenant).map_err(|err| invalid(&err.field, &err.reason))?;
        let payload_invalid = |err: validate::FieldError| invalid(&format!("payload.{}", err.field), &err.reason);
        let (run, poll, next) = match inbound.message {
            Message::PipelineRunStarted(event) => {
                event.validate().map_err(payload_invalid)?;
                (run_of_started(event), 0, PollPipelineRun::first(event))
            }
            Message::PollPipelineRun(command) => {
                command.validate().map_err(payload_invalid)?;
                (run_of_poll(command), command.poll, command.next())
            }
            other => return Err(UnexpectedMessage::handler_error(NAME, other)),
        };
        let query = RunQuery {
            tenant: tenant.clone(),
            pipeline_run_id: run.pipeline_run_id.to_owned(),
            pipeline_id: run.pipeline_id.to_owned(),
            repository: run.repository.to_owned(),
            commit_sha: run.commit_sha.to_owned(),
        };
        let state = self.port.run_status(&query).await.inspect_err(|err| {
            tracing::warn!(
                tenant = %tenant,
                run = %run.pipeline_run_id,
                poll,
                retryable = err.is_retryable(),
                error = %err,
                "could not get the pipeline run's status"
            );
        })?;
        match state {
            RunState::Finished(finished) => {
                let event = completed(&run, *finished);
                tracing::info!(
                    tenant = %tenant,
                    run = %run.pipeline_run_id,
                    release = %run.release_id,
                    poll,
                    succeeded = event.result.is_success(),
                    failed_step = event.failed_step.as_deref().unwrap_or(""),
                    duration_ms = event.duration_ms,
                    "pipeline run finished"
                );
                Ok(Outcome::send([Message::from(event)]))
            }
            RunState::InProgress { status } => {
                if poll >= self.max_polls {
                    tracing::warn!(tenant = %tenant, run = %run.pipeline_run_id, poll, %status, "pipeline run not finished after the last poll; giving up");
                    return Err(MonitorError::GaveUp {
                        run_id: run.pipeline_run_id.to_owned(),
                        polls: poll,
                    }
                    .into());
                }
                let delay = self.poll_delay(next.poll);
                tracing::debug!(tenant = %tenant, run = %run.pipeline_run_id, poll, %status, next_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), "pipeline run in progress; polling again later");
                Ok(Outcome {
                    messages: vec![Outgoing::after(next, delay)],
                    saga_state: None,
                })
            }
        }
    }
}

fn run_of_started(event: &PipelineRunStarted) -> Run<'_> {
    Run {
        pipeline_run_id: &event.pipeline_run_id,
        pipeline_id: &event.pipeline_id,
        repository: &event.repository,
        branch: &event.branch,
        commit_sha: &event.commit_sha,
        release_id: &event.release_id,
        module: &event.module,
        started_at: event.started_at,
        url: event.url.as_deref(),
    }
}

fn run_of_poll(command: &PollPipelineRun) -> Run<'_> {
    Run {
        pipeline_run_id: &command.pipeline_run_id,
        pipeline_id: &command.pipeline_id,
        repository: &command.repository,
        branch: &command.branch,
        commit_sha: &command.commit_sha,
        release_id: &command.release_id,
        module: &command.module,
        started_at: command.started_at,
        url: command.url.as_deref(),
    }
}
