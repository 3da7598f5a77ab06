//! The consumer host: receives messages for each consumer and runs its
//! handler around the runtime's guarantees.
//!
//! The host decides and executes separately: [`decision::decide`] is a pure
//! function from what happened to a delivery (handler result, attempt,
//! retry policy, runtime errors and what they mean) to what to do with it;
//! `execute` runs each step and carries the decision out; `dead_letter`
//! records and dead-letters; `lock` renews the lock while a handler runs.
//!
//! For each message: parse and validate the envelope (a message that cannot
//! be read is dead-lettered with its original bytes and a reason naming the
//! problem); skip it if this consumer already handled its messageId; run the
//! handler while renewing the lock; then
//! - on success, write the idempotency record and the outgoing messages
//!   (outbox) in one transaction, complete the message, wake the dispatcher;
//! - on a transient failure with retries left, record the attempt and, in
//!   the same transaction, a copy of the message with `attempt + 1`
//!   scheduled after an exponential, fully jittered delay, then complete the
//!   original (no lock is held while waiting);
//! - on a permanent failure or exhausted retries, or when the state the
//!   message needs is stored corrupt, record a dead letter with the original
//!   bytes, the error chain and every attempt, and dead-letter the message on
//!   the transport;
//! - on a message this build cannot handle yet (a schema version newer
//!   than it reads, or a handler that says it needs a newer release),
//!   schedule a copy of the original bytes to be looked at again after
//!   `BOSUN_NEWER_MESSAGE_WAIT`, with no attempt counted and `waitingSince`
//!   set the first time, so a newer process can take it; dead-letter it
//!   (`needs-newer`) only once it has waited past
//!   `BOSUN_NEWER_MESSAGE_PATIENCE` (see `host::newer`);
//! - on a transient runtime failure (the store or transport unavailable),
//!   abandon it for redelivery; on one that means this process cannot work
//!   (the database schema is not the one it needs), abandon it and stop.
//!
//! The [`dispatcher`] sends outbox entries; [`retention`] prunes what is
//! past its retention in small batches. Shutdown: stop receiving, let
//! in-flight handlers finish within the grace period, abandon the rest.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_consumers::{Consumer, HandlerError, RetryPolicy};
use bosun_contracts::routing;
use bosun_contracts::{ContractError, Destination, Envelope};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, field, info_span};

use crate::ports::settle::{Halts, Settle, StoreThenSettle};
use crate::ports::store::{AdminStore, ControlStore, RetentionPolicy, Store, StoreError};
use crate::ports::transport::{ReceivedMessage, Transport, TransportError};
use crate::runtime::config::{Failpoint, MessageVersionSettings, Settings};
use crate::runtime::metrics::Metrics;
use crate::runtime::telemetry;
use claim_check::ClaimCheck;
use dead_letter::reject;
use execute::handle;
pub(crate) use execute::with_attempt;
pub(super) use receive::Places;
use receive::{Permits, receive_loop};

pub mod claim_check;
mod dead_letter;
pub mod decision;
pub mod dispatcher;
mod execute;
mod key_lock;
mod lock;
mod newer;
pub mod pause;
mod receive;
pub mod retention;

/// A message whose tenant is not the tenant of the saga it names: refused
/// as a permanent failure (dead-lettered, so an operator sees the attempt).
#[derive(Debug, thiserror::Error)]
#[error(
    "tenant mismatch: `{message_type}` of tenant `{message_tenant}` names saga `{saga}` of tenant `{saga_tenant}`; refused"
)]
pub struct TenantMismatch {
    /// The message's type.
    pub message_type: String,
    /// The tenant on the message's envelope.
    pub message_tenant: String,
    /// The saga, as `kind/key`.
    pub saga: String,
    /// The tenant the saga belongs to.
    pub saga_tenant: String,
}

/// How the host runs its consumers.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// Messages handled at once per consumer.
    pub concurrency: usize,
    /// Peek-lock duration; renewed at a third of it while a handler runs.
    pub lock_duration: Duration,
    /// Idle receivers look for messages from other processes this often.
    pub poll_interval: Duration,
    /// Scales every consumer's retry delays: `retry_base_delay / 1 s`.
    pub retry_base_delay: Duration,
    /// Time in-flight handlers get to finish after shutdown starts.
    pub shutdown_grace: Duration,
    /// Test hook.
    pub failpoint: Option<Failpoint>,
    /// What is pruned, and how often (`None`: never in the background).
    pub retention: Option<(RetentionPolicy, Duration)>,
    /// The `messaging.system` of the spans (the transport's, see
    /// [`telemetry::messaging_system`]).
    pub messaging_system: &'static str,
    /// How long a message that needs a newer bosun waits, and the wire
    /// version this process writes.
    pub message_versions: MessageVersionSettings,
}

impl HostOptions {
    /// Options from settings.
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            concurrency: settings.concurrency,
            lock_duration: settings.lock_duration,
            poll_interval: settings.poll_interval,
            retry_base_delay: settings.retry_base_delay,
            shutdown_grace: settings.shutdown_grace,
            failpoint: settings.failpoint,
            retention: settings
                .retention
                .interval
                .map(|interval| (retention::policy(&settings.retention), interval)),
            messaging_system: telemetry::messaging_system(settings.transport),
            message_versions: settings.message_versions,
        }
    }

    /// A consumer's policy with its delays scaled by `retry_base_delay`.
    pub fn scaled(&self, policy: RetryPolicy) -> RetryPolicy {
        let scale = self.retry_base_delay.as_secs_f64();
        RetryPolicy {
            max_retries: policy.max_retries,
            base_delay: policy.base_delay.mul_f64(scale),
            max_delay: policy.max_delay.mul_f64(scale),
        }
    }
}

/// Errors that stop the host.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The transport failed at start.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The store failed at start.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A runtime failure meant this process could not handle messages
    /// (e.g. the database schema changed under it); it stopped taking work.
    #[error("stopped: {0}; fix it and start bosun again")]
    Stopped(String),
}

/// The halts of the settle for `failpoint` (crash tests).
pub fn halts(failpoint: Option<Failpoint>) -> Halts {
    Halts {
        after_state_commit: failpoint == Some(Failpoint::HaltAfterStateCommit),
        in_failure_settle: failpoint == Some(Failpoint::HaltInFailureSettle),
    }
}

/// Shared state of a running host.
pub(crate) struct Runtime {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) store: Arc<dyn Store>,
    /// Writes what becomes of a received message and settles it, as the
    /// backends allow: the one way a message is settled.
    pub(crate) settle: Arc<dyn Settle>,
    pub(crate) options: HostOptions,
    pub(crate) outbox_ready: Notify,
    /// Set when a failpoint halted the process: nothing more is sent.
    pub(crate) frozen: AtomicBool,
    /// Counters and latencies.
    pub(crate) metrics: Arc<Metrics>,
    /// Large payloads: offloaded before sending, resolved after receiving.
    pub(crate) claim_check: Option<ClaimCheck>,
    /// One message of a saga key at a time in this process.
    pub(crate) saga_turns: key_lock::KeyLocks,
    /// Cancelled when a decision says this process must stop taking work.
    halted: CancellationToken,
    /// Why it stopped.
    halt_reason: Mutex<Option<String>>,
    /// The consumers an operator paused, as last read.
    pub(crate) pauses: pause::Pauses,
}

impl Runtime {
    /// Stops taking work: receivers stop, in-flight handlers drain, and
    /// [`Host::run`] returns [`HostError::Stopped`] with `why`.
    pub(crate) fn halt(&self, why: String) {
        if let Ok(mut reason) = self.halt_reason.lock() {
            reason.get_or_insert(why);
        }
        self.halted.cancel();
    }
}

/// Runs consumers against a transport and a store.
pub struct Host {
    runtime: Arc<Runtime>,
    consumers: Vec<Arc<dyn Consumer>>,
}

impl Host {
    /// A host for `consumers`.
    pub fn new(
        transport: Arc<dyn Transport>,
        store: Arc<dyn Store>,
        consumers: Vec<Arc<dyn Consumer>>,
        options: HostOptions,
    ) -> Self {
        // Correct for every pair of backends; `wiring` passes the atomic
        // one where the backends have it (`with_settle`).
        let settle = StoreThenSettle::new(Arc::clone(&store), Arc::clone(&transport)).halting(halts(options.failpoint));
        Self {
            runtime: Arc::new(Runtime {
                transport,
                store,
                settle: Arc::new(settle),
                options,
                outbox_ready: Notify::new(),
                frozen: AtomicBool::new(false),
                metrics: Arc::new(Metrics::new()),
                claim_check: None,
                saga_turns: key_lock::KeyLocks::default(),
                halted: CancellationToken::new(),
                halt_reason: Mutex::new(None),
                pauses: pause::Pauses::default(),
            }),
            consumers,
        }
    }

    /// Moves payloads over the threshold to the blob store before sending
    /// and resolves them after receiving (claim check).
    pub fn with_claim_check(mut self, claim_check: ClaimCheck) -> Self {
        if let Some(runtime) = Arc::get_mut(&mut self.runtime) {
            runtime.claim_check = Some(claim_check);
        }
        self
    }

    /// Settles messages with `settle` (chosen by [`crate::wiring`] for the
    /// pair of backends) instead of the store-then-settle default.
    pub fn with_settle(mut self, settle: Arc<dyn Settle>) -> Self {
        if let Some(runtime) = Arc::get_mut(&mut self.runtime) {
            runtime.settle = settle;
        }
        self
    }

    /// Counts into `metrics` (shared with `/metrics`) instead of its own.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        if let Some(runtime) = Arc::get_mut(&mut self.runtime) {
            runtime.metrics = metrics;
        }
        self
    }

    /// Reads operators' pauses from `controls` ([`pause`]).
    pub fn with_controls(mut self, controls: Arc<dyn ControlStore>) -> Self {
        if let Some(runtime) = Arc::get_mut(&mut self.runtime) {
            runtime.pauses.controls = Some(controls);
        }
        self
    }

    /// The host's metrics (shared; read them while it runs).
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.runtime.metrics)
    }

    /// Runs until `shutdown` is cancelled (or a decision stops it: then it
    /// returns [`HostError::Stopped`]), then drains: in-flight handlers
    /// get the grace period, after which their messages are abandoned.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), HostError> {
        // Receivers stop on the caller's shutdown or on a halt decision.
        let requested = shutdown;
        let shutdown = CancellationToken::new();
        let stopping = {
            let (requested, halted, shutdown) = (requested.clone(), self.runtime.halted.clone(), shutdown.clone());
            tokio::spawn(async move {
                tokio::select! {
                    () = requested.cancelled() => {},
                    () = halted.cancelled() => {},
                }
                shutdown.cancel();
            })
        };
        let hard_stop = CancellationToken::new();
        let in_flight = TaskTracker::new();
        let mut loops = Vec::new();
        for consumer in &self.consumers {
            let Some(route) = routing::consumer(consumer.name()) else {
                tracing::error!(
                    consumer = consumer.name(),
                    "consumer is not in the routing table; not started"
                );
                continue;
            };
            // Every series of the consumer exists from the start, at zero.
            self.runtime
                .metrics
                .register(consumer.name(), route.commands.iter().chain(route.events).copied());
            let permits = Permits::for_concurrency(self.runtime.options.concurrency);
            let mut entities = Vec::new();
            if !route.commands.is_empty() {
                entities.push(route.queue());
            }
            if !route.events.is_empty() {
                entities.push(route.subscription());
            }
            for entity in entities {
                tracing::info!(consumer = consumer.name(), entity = %entity, "receiving");
                self.runtime
                    .metrics
                    .receiving()
                    .register(consumer.name(), &entity.path());
                loops.push(tokio::spawn(receive_loop(
                    Arc::clone(&self.runtime),
                    Arc::clone(consumer),
                    entity,
                    permits.clone(),
                    shutdown.clone(),
                    hard_stop.clone(),
                    in_flight.clone(),
                )));
            }
        }
        let names = self.consumers.iter().map(|c| c.name().to_owned()).collect();
        let pauses = tokio::spawn(pause::watch(Arc::clone(&self.runtime), names, shutdown.clone()));
        let dispatcher_stop = CancellationToken::new();
        let dispatcher = tokio::spawn(dispatcher::run(Arc::clone(&self.runtime), dispatcher_stop.clone()));
        let retention_stop = CancellationToken::new();
        let retention = self.runtime.options.retention.clone().map(|(policy, interval)| {
            tokio::spawn(retention::run(
                Arc::clone(&self.runtime.store) as Arc<dyn AdminStore>,
                Arc::clone(&self.runtime.transport),
                policy,
                interval,
                retention_stop.clone(),
            ))
        });

        shutdown.cancelled().await;
        tracing::info!("shutting down: no new messages are received");
        retention_stop.cancel();
        if let Some(retention) = retention {
            let _ = retention.await;
        }
        for receive in loops {
            let _ = receive.await;
        }
        let _ = pauses.await;
        in_flight.close();
        if tokio::time::timeout(self.runtime.options.shutdown_grace, in_flight.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                remaining = in_flight.len(),
                "grace period over; abandoning messages still in flight"
            );
            hard_stop.cancel();
            in_flight.wait().await;
        }
        dispatcher_stop.cancel();
        let _ = dispatcher.await;
        let _ = stopping.await;
        if self.runtime.halted.is_cancelled() {
            let why = self
                .runtime
                .halt_reason
                .lock()
                .ok()
                .and_then(|reason| reason.clone())
                .unwrap_or_default();
            tracing::error!(reason = why, "stopped taking work");
            return Err(HostError::Stopped(why));
        }
        tracing::info!("stopped");
        Ok(())
    }
}

/// The error and its sources, outermost first.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut chain = vec![err.to_string()];
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if chain.last() != Some(&text) {
            chain.push(text);
        }
        source = cause.source();
    }
    chain
}

/// A handler error's chain: its kind and message first, then the causes
/// of what it wraps.
fn handler_error_chain(err: &HandlerError) -> Vec<String> {
    let (kind, inner): (&str, &(dyn std::error::Error + 'static)) = match err {
        HandlerError::Transient(inner) => ("transient", inner.as_ref()),
        HandlerError::Permanent(inner) => ("permanent", inner.as_ref()),
        HandlerError::RetryAfter { source, .. } => ("transient", source.as_ref()),
        HandlerError::NeedsNewer(inner) => ("needs a newer bosun", inner.as_ref()),
    };
    let mut chain = error_chain(inner);
    if let Some(first) = chain.first_mut() {
        *first = format!("{kind}: {first}");
    }
    chain
}

async fn process(
    runtime: &Runtime,
    consumer: &dyn Consumer,
    entity: &Destination,
    received: ReceivedMessage,
    places: Places,
    hard_stop: &CancellationToken,
) {
    // The envelope is read before the span exists so that the span can
    // continue the trace its `traceparent` names (a parent is set before a
    // span starts).
    let parsed = Envelope::from_slice(&received.body);
    let span_name = format!("process {entity}");
    let span = info_span!(
        "message",
        otel.name = span_name.as_str(),
        otel.kind = "consumer",
        otel.status_code = field::Empty,
        messaging.system = runtime.options.messaging_system,
        messaging.operation.type = "process",
        messaging.operation.name = "process",
        messaging.destination.name = %entity,
        messaging.consumer.group.name = consumer.name(),
        messaging.message.id = field::Empty,
        messaging.message.conversation_id = field::Empty,
        messaging.message.body.size = received.body.len(),
        consumer = consumer.name(),
        entity = %entity,
        sequence = received.lock.sequence,
        delivery = received.delivery_count,
        message_id = field::Empty,
        message_type = field::Empty,
        correlation_id = field::Empty,
        trace_id = field::Empty,
        span_id = field::Empty,
        attempt = field::Empty,
        tenant = field::Empty,
        saga_kind = field::Empty,
        saga_key = field::Empty,
        outcome = field::Empty,
    );
    if let Ok(envelope) = &parsed {
        telemetry::continue_trace(&span, telemetry::context_of(envelope).as_ref());
    }
    let received_at = std::time::Instant::now();
    let name = consumer.name();
    async {
        let (envelope, message) = match parsed {
            Ok(mut envelope) => {
                // A claim-checked payload is read back from the blob store
                // before the message is decoded; consumers never see the
                // difference. The received bytes (with the reference) are
                // what retries and dead letters keep.
                if let Some(claim_check) = &runtime.claim_check
                    && let Err(err) = claim_check::resolve_envelope(&mut envelope, claim_check.store.as_ref()).await
                {
                    if err.is_transient() {
                        tracing::warn!(error = %err, "blob store unavailable; abandoning for redelivery");
                        let _ = runtime.transport.abandon(&received.lock).await;
                        return;
                    }
                    let contract = ContractError::InvalidField {
                        field: claim_check::REFERENCE_FIELD.to_owned(),
                        reason: err.to_string(),
                    };
                    return reject(runtime, consumer, entity, &received, Some(&envelope), &contract).await;
                }
                let span = tracing::Span::current();
                span.record("message_id", field::display(envelope.message_id));
                span.record("message_type", envelope.message_type.as_str());
                span.record("correlation_id", field::display(envelope.correlation_id));
                span.record("messaging.message.id", field::display(envelope.message_id));
                span.record(
                    "messaging.message.conversation_id",
                    field::display(envelope.correlation_id),
                );
                span.record("attempt", envelope.attempt);
                span.record("tenant", envelope.tenant_id.as_str());
                match telemetry::ids_of(&span) {
                    Some((trace, span_id)) => {
                        span.record("trace_id", trace.as_str());
                        span.record("span_id", span_id.as_str());
                    }
                    None => {
                        if let Some(trace) = envelope.traceparent.as_deref().and_then(telemetry::trace_id) {
                            span.record("trace_id", trace);
                        }
                    }
                }
                match envelope.decode() {
                    Ok(message) => (envelope, message),
                    // Written by a later release: left for a newer process.
                    Err(err @ ContractError::NewerSchemaVersion { .. }) => {
                        return execute::leave_for_newer(runtime, consumer, entity, &received, &envelope, &err).await;
                    }
                    Err(err) => return reject(runtime, consumer, entity, &received, Some(&envelope), &err).await,
                }
            }
            Err(err) => return reject(runtime, consumer, entity, &received, None, &err).await,
        };
        tracing::info!("started");
        handle(
            runtime, consumer, entity, &received, &envelope, &message, places, hard_stop,
        )
        .await;
        let created = time::OffsetDateTime::now_utc() - envelope.occurred_at;
        runtime.metrics.processing_latency(
            name,
            &envelope.message_type,
            received_at.elapsed(),
            created.try_into().unwrap_or_default(),
        );
    }
    .instrument(span)
    .await;
}

#[cfg(test)]
mod tests;
