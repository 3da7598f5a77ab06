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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_consumers::{Consumer, HandlerError, RetryPolicy};
use bosun_contracts::routing;
use bosun_contracts::{ContractError, Destination, Envelope};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, field, info_span};

use crate::ports::settle::{Halts, Settle, StoreThenSettle};
use crate::ports::store::{AdminStore, RetentionPolicy, Store, StoreError};
use crate::ports::transport::{ReceivedMessage, Transport, TransportError};
use crate::runtime::config::{Failpoint, MessageVersionSettings, Settings};
use crate::runtime::metrics::Metrics;
use crate::runtime::telemetry;
use claim_check::ClaimCheck;
use dead_letter::reject;
use execute::handle;
pub(crate) use execute::with_attempt;

pub mod claim_check;
mod dead_letter;
pub mod decision;
pub mod dispatcher;
mod execute;
mod key_lock;
mod lock;
mod newer;
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

/// How many messages of one consumer may be claimed and handled at once.
#[derive(Clone)]
struct Permits {
    /// Claimed and not yet settled: up to twice the concurrency, so a
    /// handler that finishes finds its next message already claimed
    /// instead of waiting for a receive (one claim serves many messages).
    claimed: Arc<Semaphore>,
    /// How many claims a fast consumer waits for before it receives: a
    /// quarter of [`Permits::claimed`].
    refill: usize,
    /// Being handled: the consumer's concurrency.
    handling: Arc<Semaphore>,
    /// Handled and being settled (committed): as many as may be claimed.
    /// A handled message gives its handler slot and its claim to the next
    /// one, so the next handler runs and the next receive claims while
    /// this commit waits for its WAL flush; this bounds the commits in
    /// flight instead.
    settling: Arc<Semaphore>,
    /// How long the consumer's recent messages took to handle, in
    /// microseconds (a moving average): a consumer whose messages take
    /// longer than [`CLAIM_AHEAD_BELOW_MICROS`] claims nothing ahead, so a message
    /// never waits behind a long build in one replica while another
    /// replica could take it.
    recent_micros: Arc<AtomicU64>,
}

impl Permits {
    fn for_concurrency(concurrency: usize) -> Self {
        let room = concurrency.saturating_mul(PREFETCH_FACTOR).max(1);
        Self {
            claimed: Arc::new(Semaphore::new(room)),
            refill: (room / 4).clamp(1, RECEIVE_BATCH),
            handling: Arc::new(Semaphore::new(concurrency.max(1))),
            settling: Arc::new(Semaphore::new(room)),
            // Until its messages prove fast, a consumer claims nothing ahead.
            recent_micros: Arc::new(AtomicU64::new(CLAIM_AHEAD_BELOW_MICROS)),
        }
    }

    /// Whether the consumer's messages are handled fast enough to claim
    /// ahead.
    fn claims_ahead(&self) -> bool {
        self.recent_micros.load(Ordering::Relaxed) < CLAIM_AHEAD_BELOW_MICROS
    }

    /// Notes how long one message took (an exponential moving average
    /// weighting the newest a quarter).
    fn handled_in(&self, took: Duration) {
        let took = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let _ = self
            .recent_micros
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |average| {
                Some(average - average / 4 + took / 4)
            });
    }
}

/// One message's places among its consumer's [`Permits`]: its claim and,
/// once its turn came, its handler slot; once handled, its place among the
/// messages being settled instead (see [`Places::settle`]).
pub(super) struct Places {
    handling: Option<tokio::sync::OwnedSemaphorePermit>,
    claimed: Option<tokio::sync::OwnedSemaphorePermit>,
    settling_room: Arc<Semaphore>,
    settling: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Places {
    /// The handler returned: takes a place among the messages being
    /// settled (waiting, with the handler slot still held, while as many
    /// commits as the consumer may claim are in flight), then gives the
    /// handler slot and the claim to the next message. The message stays
    /// locked, its lock renewed and its saga's turn held, until it is
    /// settled. Called again (a run after a saga conflict) it keeps its
    /// place.
    pub(super) async fn settle(&mut self) {
        if self.settling.is_none() {
            // Commits in flight never wait for a handler slot, so this
            // wait always ends.
            self.settling = Arc::clone(&self.settling_room).acquire_owned().await.ok();
        }
        self.handling = None;
        self.claimed = None;
    }
}

/// Claimed messages per handler slot (see [`Permits::claimed`]).
const PREFETCH_FACTOR: usize = 2;

/// A consumer whose messages take longer than this (200 ms, in
/// microseconds) on average claims none ahead (see
/// [`Permits::recent_micros`]).
const CLAIM_AHEAD_BELOW_MICROS: u64 = 200_000;

/// Most messages one receive claims.
const RECEIVE_BATCH: usize = 32;

/// Receives from `entity` while there is room among the consumer's
/// [`Permits`], and hands each message to a task that handles it once a
/// handler slot is free.
async fn receive_loop(
    runtime: Arc<Runtime>,
    consumer: Arc<dyn Consumer>,
    entity: Destination,
    permits: Permits,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
    in_flight: TaskTracker,
) {
    let mut failures = 0u32;
    let path = entity.path();
    loop {
        // A fast consumer waits until a quarter of its room is free and
        // claims that much at once: taking one message whenever one handler
        // finishes would cost a claim per message.
        let refill = if permits.claims_ahead() { permits.refill } else { 1 };
        let mut first = tokio::select! {
            permit = Arc::clone(&permits.claimed).acquire_many_owned(u32::try_from(refill).unwrap_or(1)) => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = shutdown.cancelled() => return,
        };
        let mut held = Vec::with_capacity(refill);
        while first.num_permits() > 1 {
            match first.split(1) {
                Some(one) => held.push(one),
                None => break,
            }
        }
        held.push(first);
        // A slow consumer claims only for free handler slots, taken now
        // (waiting for one first); a fast one claims as many as there is
        // room for, in one receive.
        let mut slots = Vec::new();
        if !permits.claims_ahead() {
            let slot = tokio::select! {
                permit = Arc::clone(&permits.handling).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
                () = shutdown.cancelled() => return,
            };
            slots.push(slot);
        }
        while held.len() < RECEIVE_BATCH {
            if !slots.is_empty() {
                match Arc::clone(&permits.handling).try_acquire_owned() {
                    Ok(slot) => slots.push(slot),
                    Err(_) => break,
                }
            }
            match Arc::clone(&permits.claimed).try_acquire_owned() {
                Ok(permit) => held.push(permit),
                Err(_) => {
                    slots.truncate(held.len());
                    break;
                }
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
                runtime.metrics.receiving().received(consumer.name(), &path);
                received
            }
            Err(err) => {
                failures = failures.saturating_add(1);
                runtime
                    .metrics
                    .receiving()
                    .failed(consumer.name(), &path, &err.to_string());
                let backoff = Duration::from_millis(100u64.saturating_mul(2u64.saturating_pow(failures.min(8))));
                tracing::warn!(consumer = consumer.name(), entity = %entity, error = %err, ?backoff, "receive failed");
                drop((held, slots));
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {},
                    () = shutdown.cancelled() => return,
                }
                continue;
            }
        };
        if received.is_empty() {
            drop((held, slots));
            tokio::select! {
                () = runtime.transport.wait_for_messages(&entity, runtime.options.poll_interval) => {},
                () = shutdown.cancelled() => return,
            }
            continue;
        }
        if shutdown.is_cancelled() || runtime.halted.is_cancelled() {
            // Stopping began while this receive was under way: give the
            // messages back untouched for another process.
            for message in &received {
                let _ = runtime.transport.abandon(&message.lock).await;
            }
            return;
        }
        held.truncate(received.len());
        let mut slots = slots.into_iter();
        for (message, claimed) in received.into_iter().zip(held) {
            let slot = slots.next();
            let runtime = Arc::clone(&runtime);
            let consumer = Arc::clone(&consumer);
            let entity = entity.clone();
            let hard_stop = hard_stop.clone();
            let shutdown = shutdown.clone();
            let permits = permits.clone();
            in_flight.spawn(async move {
                let permit = match slot {
                    Some(slot) => slot,
                    None => match turn_to_handle(&runtime, &message, Arc::clone(&permits.handling), &shutdown).await {
                        Some(permit) => permit,
                        None => {
                            // Stopping before its turn came: back to the queue at once.
                            let _ = runtime.transport.abandon(&message.lock).await;
                            return;
                        }
                    },
                };
                let started = std::time::Instant::now();
                let places = Places {
                    handling: Some(permit),
                    claimed: Some(claimed),
                    settling_room: Arc::clone(&permits.settling),
                    settling: None,
                };
                process(&runtime, consumer.as_ref(), &entity, message, places, &hard_stop).await;
                permits.handled_in(started.elapsed());
            });
        }
    }
}

/// Waits for a handler slot for a claimed message, keeping its lock renewed
/// while it waits (a slot is usually free at once); `None` when the host
/// stops first.
async fn turn_to_handle(
    runtime: &Runtime,
    message: &ReceivedMessage,
    handling: Arc<Semaphore>,
    shutdown: &CancellationToken,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    if let Ok(permit) = Arc::clone(&handling).try_acquire_owned() {
        return Some(permit);
    }
    let _renewal = lock::LockRenewal::start(runtime, message);
    tokio::select! {
        permit = handling.acquire_owned() => permit.ok(),
        () = shutdown.cancelled() => None,
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
