//! The consumer host: receives messages for each consumer and runs its
//! handler around the runtime's guarantees.
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
//! - on a permanent failure or exhausted retries, record a dead letter with
//!   the original bytes, the error chain and every attempt, and dead-letter
//!   the message on the transport.
//!
//! The [`dispatcher`] sends outbox entries. Shutdown: stop receiving, let
//! in-flight handlers finish within the grace period, abandon the rest.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bosun_consumers::{Consumer, HandlerError, Inbound, RetryPolicy, SagaInstance};
use bosun_contracts::routing::{self, destination_of};
use bosun_contracts::{ContractError, Destination, Envelope, Message};
use serde_json::Value;
use time::OffsetDateTime;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, field, info_span};
use uuid::Uuid;

use crate::ports::commit::{Commit, CommitError, CommitStatus, StoreThenComplete};
use crate::ports::error::NextStep;
use crate::ports::store::{
    AttemptRecord, DeadLetterRecord, DeadLetterStatus, HandledMessage, SagaWrite, Store, StoreError, TimelineEntry,
    TimelineStatus,
};
use crate::ports::transport::{OutboundMessage, ReceivedMessage, Transport, TransportError};
use crate::runtime::config::{Failpoint, Settings};
use crate::runtime::metrics::{Event, Metrics};
use crate::runtime::telemetry;
use claim_check::ClaimCheck;

pub mod claim_check;
pub mod dispatcher;

/// Saga version conflicts tolerated for one message before it is abandoned
/// for redelivery.
const MAX_SAGA_CONFLICTS: u32 = 16;

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
}

/// Shared state of a running host.
pub(crate) struct Runtime {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) store: Arc<dyn Store>,
    /// Records a handled message and settles it, as the backends allow.
    pub(crate) commit: Arc<dyn Commit>,
    pub(crate) options: HostOptions,
    pub(crate) outbox_ready: Notify,
    /// Set when a failpoint halted the process: nothing more is sent.
    pub(crate) frozen: AtomicBool,
    /// Counters and latencies.
    pub(crate) metrics: Arc<Metrics>,
    /// Large payloads: offloaded before sending, resolved after receiving.
    pub(crate) claim_check: Option<ClaimCheck>,
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
        // one where the backends have it (`with_commit`).
        let commit = StoreThenComplete::new(Arc::clone(&store), Arc::clone(&transport))
            .halting_after_state_commit(options.failpoint == Some(Failpoint::HaltAfterStateCommit));
        Self {
            runtime: Arc::new(Runtime {
                transport,
                store,
                commit: Arc::new(commit),
                options,
                outbox_ready: Notify::new(),
                frozen: AtomicBool::new(false),
                metrics: Arc::new(Metrics::new()),
                claim_check: None,
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

    /// Commits handled messages with `commit` (chosen by
    /// [`crate::wiring`] for the pair of backends) instead of the
    /// store-then-complete default.
    pub fn with_commit(mut self, commit: Arc<dyn Commit>) -> Self {
        if let Some(runtime) = Arc::get_mut(&mut self.runtime) {
            runtime.commit = commit;
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

    /// The host's metrics (shared; read them while it runs).
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.runtime.metrics)
    }

    /// Runs until `shutdown` is cancelled, then drains: in-flight handlers
    /// get the grace period, after which their messages are abandoned.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), HostError> {
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
            let permits = Arc::new(Semaphore::new(self.runtime.options.concurrency));
            let mut entities = Vec::new();
            if !route.commands.is_empty() {
                entities.push(route.queue());
            }
            if !route.events.is_empty() {
                entities.push(route.subscription());
            }
            for entity in entities {
                tracing::info!(consumer = consumer.name(), entity = %entity, "receiving");
                loops.push(tokio::spawn(receive_loop(
                    Arc::clone(&self.runtime),
                    Arc::clone(consumer),
                    entity,
                    Arc::clone(&permits),
                    shutdown.clone(),
                    hard_stop.clone(),
                    in_flight.clone(),
                )));
            }
        }
        let dispatcher_stop = CancellationToken::new();
        let dispatcher = tokio::spawn(dispatcher::run(Arc::clone(&self.runtime), dispatcher_stop.clone()));

        shutdown.cancelled().await;
        tracing::info!("shutting down: no new messages are received");
        for receive in loops {
            let _ = receive.await;
        }
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
        tracing::info!("stopped");
        Ok(())
    }
}

async fn receive_loop(
    runtime: Arc<Runtime>,
    consumer: Arc<dyn Consumer>,
    entity: Destination,
    permits: Arc<Semaphore>,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
    in_flight: TaskTracker,
) {
    let mut failures = 0u32;
    loop {
        let first = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = shutdown.cancelled() => return,
        };
        let mut held = vec![first];
        while held.len() < 32 {
            match Arc::clone(&permits).try_acquire_owned() {
                Ok(permit) => held.push(permit),
                Err(_) => break,
            }
        }
        if runtime.frozen.load(Ordering::SeqCst) {
            shutdown.cancelled().await;
            return;
        }
        let received = match runtime
            .transport
            .receive(&entity, held.len(), runtime.options.lock_duration)
            .await
        {
            Ok(received) => {
                failures = 0;
                received
            }
            Err(err) => {
                failures = failures.saturating_add(1);
                let backoff = Duration::from_millis(100u64.saturating_mul(2u64.saturating_pow(failures.min(8))));
                tracing::warn!(consumer = consumer.name(), entity = %entity, error = %err, ?backoff, "receive failed");
                drop(held);
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {},
                    () = shutdown.cancelled() => return,
                }
                continue;
            }
        };
        if received.is_empty() {
            drop(held);
            tokio::select! {
                () = runtime.transport.wait_for_messages(&entity, runtime.options.poll_interval) => {},
                () = shutdown.cancelled() => return,
            }
            continue;
        }
        held.truncate(received.len());
        for (message, permit) in received.into_iter().zip(held) {
            let runtime = Arc::clone(&runtime);
            let consumer = Arc::clone(&consumer);
            let entity = entity.clone();
            let hard_stop = hard_stop.clone();
            in_flight.spawn(async move {
                process(&runtime, consumer.as_ref(), &entity, message, &hard_stop).await;
                drop(permit);
            });
        }
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
    hard_stop: &CancellationToken,
) {
    let span = info_span!(
        "message",
        consumer = consumer.name(),
        entity = %entity,
        sequence = received.lock.sequence,
        delivery = received.delivery_count,
        message_id = field::Empty,
        message_type = field::Empty,
        correlation_id = field::Empty,
        trace_id = field::Empty,
        attempt = field::Empty,
    );
    let received_at = std::time::Instant::now();
    let name = consumer.name();
    async {
        let (envelope, message) = match Envelope::from_slice(&received.body) {
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
                span.record("attempt", envelope.attempt);
                if let Some(trace) = envelope.traceparent.as_deref().and_then(telemetry::trace_id) {
                    span.record("trace_id", trace);
                }
                match envelope.decode() {
                    Ok(message) => (envelope, message),
                    Err(err) => return reject(runtime, consumer, entity, &received, Some(&envelope), &err).await,
                }
            }
            Err(err) => return reject(runtime, consumer, entity, &received, None, &err).await,
        };
        tracing::info!("started");
        handle(runtime, consumer, entity, &received, &envelope, &message, hard_stop).await;
    }
    .instrument(span)
    .await;
    runtime.metrics.processing_latency(name, received_at.elapsed());
}

/// Dead-letters a message that cannot be read.
async fn reject(
    runtime: &Runtime,
    consumer: &dyn Consumer,
    entity: &Destination,
    received: &ReceivedMessage,
    envelope: Option<&Envelope>,
    err: &ContractError,
) {
    tracing::warn!(reason = err.cause(), error = %err, "message cannot be read; dead-lettering");
    runtime.metrics.count(consumer.name(), Event::DeadLettered);
    let record = dead_letter_record(
        consumer.name(),
        entity,
        received,
        envelope,
        err.cause(),
        &err.to_string(),
        vec![err.to_string()],
        Vec::new(),
    );
    dead_letter(runtime, received, record, envelope, 0).await;
}

#[allow(clippy::too_many_arguments)]
fn dead_letter_record(
    consumer: &str,
    entity: &Destination,
    received: &ReceivedMessage,
    envelope: Option<&Envelope>,
    reason: &str,
    description: &str,
    error_chain: Vec<String>,
    attempts: Vec<AttemptRecord>,
) -> DeadLetterRecord {
    DeadLetterRecord {
        id: Uuid::now_v7(),
        consumer: Some(consumer.to_owned()),
        entity: entity.path(),
        transport_sequence: Some(received.lock.sequence),
        broker_message_id: received.broker_message_id.clone(),
        message_id: envelope.map(|e| e.message_id.to_string()),
        message_type: envelope
            .map(|e| e.message_type.clone())
            .or_else(|| received.message_type.clone()),
        correlation_id: envelope.map(|e| e.correlation_id.to_string()),
        tenant_id: envelope.map(|e| e.tenant_id.clone()),
        body: received.body.clone(),
        reason: reason.to_owned(),
        description: description.to_owned(),
        error_chain,
        attempts,
        dead_lettered_at: OffsetDateTime::now_utc(),
        origin: "host".to_owned(),
        status: DeadLetterStatus::Dead,
        replays: Vec::new(),
    }
}

async fn dead_letter(
    runtime: &Runtime,
    received: &ReceivedMessage,
    record: DeadLetterRecord,
    envelope: Option<&Envelope>,
    attempt: u32,
) {
    let timeline = envelope.map(|envelope| TimelineEntry {
        correlation_id: envelope.correlation_id.to_string(),
        message_id: envelope.message_id.to_string(),
        message_type: envelope.message_type.clone(),
        consumer: record.consumer.clone(),
        status: TimelineStatus::DeadLettered,
        attempt,
        at: OffsetDateTime::now_utc(),
        detail: Some(format!(
            "{}: {} (dead letter {})",
            record.reason, record.description, record.id
        )),
    });
    let reason = record.reason.clone();
    let mut description = record.description.clone();
    if description.len() > 1024 {
        let mut cut = 1024;
        while !description.is_char_boundary(cut) {
            cut -= 1;
        }
        description.truncate(cut);
    }
    let id = record.id;
    if let Err(err) = runtime.store.record_dead_letter(record, timeline).await {
        // Without the record the transport's dead-letter queue still keeps
        // the message; abandoning would loop. Dead-letter natively anyway.
        tracing::error!(error = %err, "could not record the dead letter; it stays in the transport's dead-letter queue");
    }
    match runtime
        .transport
        .dead_letter(&received.lock, &reason, &description)
        .await
    {
        Ok(()) => tracing::warn!(dead_letter_id = %id, reason, "dead-lettered"),
        Err(err) => tracing::error!(error = %err, "could not dead-letter on the transport; it will be redelivered"),
    }
}

/// Renews `lock` every third of the lock duration until dropped.
struct LockRenewal {
    stop: CancellationToken,
}

impl LockRenewal {
    fn start(runtime: &Runtime, received: &ReceivedMessage) -> Self {
        let stop = CancellationToken::new();
        let transport = Arc::clone(&runtime.transport);
        let lock = received.lock.clone();
        let duration = runtime.options.lock_duration;
        let token = stop.clone();
        tokio::spawn(
            async move {
                loop {
                    tokio::select! {
                        () = tokio::time::sleep(duration / 3) => {},
                        () = token.cancelled() => return,
                    }
                    if let Err(err) = transport.renew_lock(&lock, duration).await {
                        tracing::warn!(error = %err, "lock renewal failed; the message may be delivered again");
                        return;
                    }
                    tracing::debug!("lock renewed");
                }
            }
            .in_current_span(),
        );
        Self { stop }
    }
}

impl Drop for LockRenewal {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn timeline(envelope: &Envelope, consumer: &str, status: TimelineStatus, detail: Option<String>) -> TimelineEntry {
    TimelineEntry {
        correlation_id: envelope.correlation_id.to_string(),
        message_id: envelope.message_id.to_string(),
        message_type: envelope.message_type.clone(),
        consumer: Some(consumer.to_owned()),
        status,
        attempt: envelope.attempt,
        at: OffsetDateTime::now_utc(),
        detail,
    }
}

/// Turns a handler's outgoing messages into outbox entries.
fn outgoing_messages(
    envelope: &Envelope,
    consumer: &str,
    outcome: &bosun_consumers::Outcome,
) -> Result<Vec<OutboundMessage>, HandlerError> {
    let now = OffsetDateTime::now_utc();
    outcome
        .messages
        .iter()
        .map(|outgoing| {
            let message_type = outgoing.message.message_type();
            let destination = destination_of(message_type).ok_or_else(|| {
                HandlerError::permanent(format!("no route for `{message_type}`: no consumer handles it"))
            })?;
            let mut next = envelope.follow_up(&outgoing.message, consumer);
            next.traceparent = Some(telemetry::child_traceparent(envelope.traceparent.as_deref()));
            Ok(OutboundMessage {
                destination,
                broker_message_id: next.message_id.to_string(),
                message_type: Some(message_type.to_owned()),
                correlation_id: Some(next.correlation_id.to_string()),
                body: next.to_vec(),
                scheduled_at: outgoing.delay.map(|delay| now + delay),
            })
        })
        .collect()
}

/// The bytes of a message with its `attempt` field set, all else kept.
pub(crate) fn with_attempt(body: &[u8], attempt: u32) -> Option<Vec<u8>> {
    let mut value: Value = serde_json::from_slice(body).ok()?;
    value
        .as_object_mut()?
        .insert("attempt".to_owned(), Value::from(attempt));
    serde_json::to_vec(&value).ok()
}

async fn handle(
    runtime: &Runtime,
    consumer: &dyn Consumer,
    entity: &Destination,
    received: &ReceivedMessage,
    envelope: &Envelope,
    message: &Message,
    hard_stop: &CancellationToken,
) {
    let name = consumer.name();
    let message_id = envelope.message_id.to_string();
    match runtime.store.is_handled(name, &message_id).await {
        Ok(true) => {
            tracing::info!("already handled; acknowledging without running the handler again");
            runtime.metrics.count(name, Event::Duplicate);
            let _ = runtime
                .store
                .append_timeline(vec![timeline(envelope, name, TimelineStatus::Duplicate, None)])
                .await;
            runtime.outbox_ready.notify_one();
            settle_complete(runtime, received).await;
            return;
        }
        Ok(false) => {}
        Err(err) => {
            tracing::warn!(error = %err, "store unavailable; abandoning for redelivery");
            let _ = runtime.transport.abandon(&received.lock).await;
            return;
        }
    }

    let saga_key = consumer.saga_of(envelope, message);
    let renewal = LockRenewal::start(runtime, received);
    let mut conflicts = 0u32;
    loop {
        let started = std::time::Instant::now();
        // A saga consumer gets its saga as stored now; on a version conflict
        // at commit the saga is loaded again and the handler re-run.
        let saga = match &saga_key {
            Some((kind, key)) => match runtime.store.load_saga(kind, key).await {
                Ok(Some(record))
                    if record
                        .tenant_id
                        .as_deref()
                        .is_some_and(|owner| owner != envelope.tenant_id) =>
                {
                    // Tenants are walls: a message never acts on another
                    // tenant's saga, whatever its key says.
                    drop(renewal);
                    let err = HandlerError::permanent(TenantMismatch {
                        message_type: envelope.message_type.clone(),
                        message_tenant: envelope.tenant_id.clone(),
                        saga: format!("{kind}/{key}"),
                        saga_tenant: record.tenant_id.unwrap_or_default(),
                    });
                    tracing::warn!(error = %err, "message refused: it names another tenant's saga");
                    return fail(runtime, consumer, entity, received, envelope, &err).await;
                }
                Ok(record) => Some(SagaInstance {
                    kind,
                    key: key.clone(),
                    version: record.as_ref().map_or(0, |r| r.version),
                    state: record.map_or(Value::Null, |r| r.state),
                }),
                Err(err) if err.next_step() == NextStep::DeadLetter => {
                    drop(renewal);
                    return dead_letter_store_error(runtime, consumer, entity, received, envelope, &err).await;
                }
                Err(err) => {
                    tracing::warn!(error = %err, "could not load the saga; abandoning for redelivery");
                    drop(renewal);
                    let _ = runtime.transport.abandon(&received.lock).await;
                    return;
                }
            },
            None => None,
        };
        let inbound = Inbound {
            envelope,
            message,
            saga: saga.as_ref(),
        };
        let result = tokio::select! {
            result = consumer.handle(inbound) => Some(result),
            () = hard_stop.cancelled() => None,
        };
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        runtime.metrics.handler_latency(name, started.elapsed());
        let Some(result) = result else {
            tracing::warn!("shutdown grace period over; abandoning");
            drop(renewal);
            let _ = runtime.transport.abandon(&received.lock).await;
            return;
        };
        let outcome = match result
            .and_then(|outcome| outgoing_messages(envelope, name, &outcome).map(|outbox| (outbox, outcome.saga_state)))
        {
            Ok(outcome) => outcome,
            Err(err) => {
                drop(renewal);
                return fail(runtime, consumer, entity, received, envelope, &err).await;
            }
        };
        let (outbox, saga_state) = outcome;
        let saga_write = match (saga_state, &saga) {
            (Some(state), Some(instance)) => Some(SagaWrite {
                kind: instance.kind.to_owned(),
                key: instance.key.clone(),
                expected_version: instance.version,
                state,
                tenant_id: Some(envelope.tenant_id.clone()).filter(|tenant| !tenant.is_empty()),
            }),
            (Some(_), None) => {
                tracing::error!("the handler returned saga state for a message that belongs to no saga; ignored");
                None
            }
            (None, _) => None,
        };
        let sends = outbox.len();
        let handled = HandledMessage {
            consumer: name.to_owned(),
            message_id: message_id.clone(),
            message_type: envelope.message_type.clone(),
            saga: saga_write,
            outbox,
            timeline: vec![timeline(
                envelope,
                name,
                TimelineStatus::Completed,
                Some(format!("{elapsed_ms} ms, pid {}", std::process::id())),
            )],
        };
        if runtime.options.failpoint == Some(Failpoint::HaltAfterStateCommit) {
            runtime.frozen.store(true, Ordering::SeqCst);
        }
        // Writes the handling and settles the message, in one transaction
        // where the backends share one database.
        match runtime.commit.commit(handled, &received.lock).await {
            Ok(CommitStatus::Written) => {
                if runtime.options.failpoint == Some(Failpoint::HaltAfterStateCommit) {
                    tracing::error!("failpoint halt-after-state-commit reached; halting");
                    eprintln!("FAILPOINT halt-after-state-commit {message_id}");
                    std::future::pending::<()>().await;
                }
                tracing::info!(elapsed_ms, sends, "finished");
                runtime.metrics.count(name, Event::Processed);
            }
            Ok(CommitStatus::AlreadyHandled) => {
                tracing::info!("another host handled it first; acknowledging");
            }
            Err(CommitError::LockLost { .. }) => {
                tracing::warn!("lock lost before the commit; nothing was written, the message will be delivered again");
                drop(renewal);
                return;
            }
            Ok(CommitStatus::SagaConflict { expected, found, .. }) if conflicts < MAX_SAGA_CONFLICTS => {
                conflicts += 1;
                runtime.metrics.count(name, Event::SagaConflict);
                tracing::info!(
                    expected,
                    found,
                    conflicts,
                    "saga changed meanwhile; reloading and applying again"
                );
                continue;
            }
            Err(CommitError::Store(err)) if err.next_step() == NextStep::DeadLetter => {
                drop(renewal);
                return dead_letter_store_error(runtime, consumer, entity, received, envelope, &err).await;
            }
            Ok(conflict @ CommitStatus::SagaConflict { .. }) => {
                tracing::warn!(?conflict, "saga kept changing; abandoning for redelivery");
                drop(renewal);
                let _ = runtime.transport.abandon(&received.lock).await;
                return;
            }
            Err(err) => {
                tracing::warn!(error = %err, "could not commit; abandoning for redelivery");
                drop(renewal);
                let _ = runtime.transport.abandon(&received.lock).await;
                return;
            }
        }
        drop(renewal);
        runtime.outbox_ready.notify_one();
        return;
    }
}

/// Dead-letters a message at once because the store holds something it
/// can never get past (a saga stored corrupt ...): retrying would only wait
/// for the broker to give up.
async fn dead_letter_store_error(
    runtime: &Runtime,
    consumer: &dyn Consumer,
    entity: &Destination,
    received: &ReceivedMessage,
    envelope: &Envelope,
    err: &StoreError,
) {
    tracing::error!(error = %err, "the store cannot serve this message; dead-lettering it now");
    let chain = error_chain(err);
    runtime.metrics.count(consumer.name(), Event::DeadLettered);
    let record = dead_letter_record(
        consumer.name(),
        entity,
        received,
        Some(envelope),
        if matches!(err, StoreError::Corrupt { .. }) {
            "corrupt-store-data"
        } else {
            "store-refused"
        },
        &err.to_string(),
        chain.clone(),
        vec![AttemptRecord {
            attempt: envelope.attempt,
            at: OffsetDateTime::now_utc(),
            error_chain: chain,
        }],
    );
    dead_letter(runtime, received, record, Some(envelope), envelope.attempt).await;
}

async fn settle_complete(runtime: &Runtime, received: &ReceivedMessage) {
    if let Err(err) = runtime.transport.complete(&received.lock).await {
        tracing::warn!(error = %err, "could not complete; a redelivery will be recognised as handled");
    }
}

async fn fail(
    runtime: &Runtime,
    consumer: &dyn Consumer,
    entity: &Destination,
    received: &ReceivedMessage,
    envelope: &Envelope,
    err: &HandlerError,
) {
    let name = consumer.name();
    let message_id = envelope.message_id.to_string();
    let chain = handler_error_chain(err);
    let policy = runtime.options.scaled(consumer.retry_policy());
    let attempt = envelope.attempt;
    let record = AttemptRecord {
        attempt,
        at: OffsetDateTime::now_utc(),
        error_chain: chain.clone(),
    };
    if err.is_retryable() && attempt < policy.max_retries {
        let ceiling = policy.ceiling(attempt + 1);
        let jittered = Duration::from_millis(fastrand::u64(
            0..=u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX),
        ));
        let delay = match err {
            HandlerError::RetryAfter { after, .. } => jittered.max(*after),
            _ => jittered,
        };
        let Some(body) = with_attempt(&received.body, attempt + 1) else {
            tracing::error!("cannot rewrite the attempt of a message that parsed before; abandoning");
            let _ = runtime.transport.abandon(&received.lock).await;
            return;
        };
        let retry = OutboundMessage {
            // Back to the entity it came from: for an event, only this
            // consumer's subscription, not every subscriber again.
            destination: entity.clone(),
            broker_message_id: format!("{message_id}.retry-{}", attempt + 1),
            message_type: Some(envelope.message_type.clone()),
            correlation_id: Some(envelope.correlation_id.to_string()),
            body,
            scheduled_at: Some(OffsetDateTime::now_utc() + delay),
        };
        let line = timeline(
            envelope,
            name,
            TimelineStatus::RetryScheduled,
            Some(format!(
                "retry {} of {} in {} ms: {}",
                attempt + 1,
                policy.max_retries,
                delay.as_millis(),
                chain.join(": ")
            )),
        );
        match runtime
            .store
            .record_retry(name, &message_id, &received.broker_message_id, record, retry, line)
            .await
        {
            Ok(()) => {
                runtime.metrics.count(name, Event::Retried);
                tracing::warn!(error = %err, retry = attempt + 1, delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), "failed; retry scheduled");
                runtime.outbox_ready.notify_one();
                settle_complete(runtime, received).await;
            }
            Err(store_err) => {
                tracing::warn!(error = %store_err, "could not record the retry; abandoning for redelivery");
                let _ = runtime.transport.abandon(&received.lock).await;
            }
        }
        return;
    }
    let (reason, description) = if err.is_retryable() {
        (
            "retries-exhausted",
            format!("failed {} times; last error: {}", attempt + 1, chain.join(": ")),
        )
    } else {
        ("permanent-failure", chain.join(": "))
    };
    let mut attempts = runtime.store.attempts(name, &message_id).await.unwrap_or_default();
    attempts.push(record);
    runtime.metrics.count(name, Event::DeadLettered);
    let dead = dead_letter_record(
        name,
        entity,
        received,
        Some(envelope),
        reason,
        &description,
        chain,
        attempts,
    );
    dead_letter(runtime, received, dead, Some(envelope), attempt).await;
}

#[cfg(test)]
mod tests;
