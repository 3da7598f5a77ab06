//! The executor: runs one readable message through its consumer and
//! carries out what [`decision::decide`] says.
//!
//! Each step (the idempotency check, loading the saga, the handler, the
//! commit) ends in an [`Observed`]; the decision for it is taken by the
//! pure function, and this module only performs it. Every decision that
//! writes or tells the transport anything becomes one [`Settlement`] and
//! goes through the one settle port ([`Runtime::settle`]): commit and
//! complete, acknowledge a duplicate, schedule a retry, dead-letter,
//! abandon. Only reloading and re-running (a saga conflict), stopping and
//! letting a lost lock go happen here.
//!
//! The message's lock is renewed while the message is handled, by a guard
//! whose scope is [`run`]: it ends, by itself, before a failure is settled.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bosun_consumers::{Consumer, HandlerError, Inbound, RetryPolicy, SagaInstance};
use bosun_contracts::routing::destination_of;
use bosun_contracts::{ContractError, Destination, Envelope, Message};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio_util::sync::CancellationToken;

use super::dead_letter::dead_letter_record;
use super::decision::{self, DeadLetterReason, Decision, Observed};
use super::lock::LockRenewal;
use super::newer;
use super::{Places, Runtime, TenantMismatch, error_chain, handler_error_chain};
use crate::ports::settle::{SettleError, Settled, Settlement};
use crate::ports::store::{
    AttemptRecord, HandledMessage, RetryWrite, SagaState, SagaWrite, StoreError, TimelineEntry, TimelineStatus,
};
use crate::ports::transport::{OutboundMessage, ReceivedMessage};
use crate::runtime::config::Failpoint;
use crate::runtime::metrics::Event;
use crate::runtime::telemetry;

/// One delivery being handled: what every step needs.
struct Delivery<'a> {
    runtime: &'a Runtime,
    consumer: &'a dyn Consumer,
    entity: &'a Destination,
    received: &'a ReceivedMessage,
    envelope: &'a Envelope,
    policy: RetryPolicy,
}

/// Why a delivery failed: the error and its causes, outermost first (for
/// the log, the attempt and the dead letter).
struct Failure {
    chain: Vec<String>,
}

impl Failure {
    fn handler(err: &HandlerError) -> Self {
        Self {
            chain: handler_error_chain(err),
        }
    }

    fn runtime(err: &(dyn std::error::Error + 'static)) -> Self {
        Self {
            chain: error_chain(err),
        }
    }

    fn text(&self) -> String {
        self.chain.join(": ")
    }
}

/// How the run of a delivery ended.
enum Ending {
    /// The handling went through the settle: written with the message's
    /// completion, or found handled by another host meanwhile.
    Committed {
        /// What the settle did.
        status: Settled,
        /// The handler's time.
        elapsed_ms: u64,
        /// Messages the handling sends.
        sends: usize,
    },
    /// A decision still to carry out (and settle), with the failure that
    /// led to it, if any.
    Decided(Decision, Option<Failure>),
}

impl Delivery<'_> {
    fn decide(&self, observed: Observed<'_>) -> Decision {
        // A handler that needs a newer release waits as a newer message does.
        let observed = match observed {
            Observed::HandlerFailed(HandlerError::NeedsNewer(_)) => {
                newer::observed(self.envelope, self.runtime.options.message_versions)
            }
            observed => observed,
        };
        decision::decide(observed, &self.policy, self.envelope.attempt, fastrand::f64())
    }

    /// The decision for `observed`, with the failure behind it.
    fn failed(&self, observed: Observed<'_>, failure: Failure) -> Ending {
        Ending::Decided(self.decide(observed), Some(failure))
    }

    fn name(&self) -> &'static str {
        self.consumer.name()
    }

    fn timeline(&self, status: TimelineStatus, detail: Option<String>) -> TimelineEntry {
        timeline(self.envelope, self.name(), status, detail)
    }

    /// Settles the received message with `settlement`.
    async fn settle(&self, settlement: Settlement) -> Result<Settled, SettleError> {
        self.runtime.settle.settle(settlement, &self.received.lock).await
    }
}

/// Handles a message whose envelope was read and decoded. `places` holds
/// its claim and handler slot while the handler runs; as soon as the
/// handler returns they go to the consumer's next message
/// ([`Places::settle`]), so the next handler runs while this message's
/// commit waits for its WAL flush.
#[allow(clippy::too_many_arguments)]
pub(super) async fn handle(
    runtime: &Runtime,
    consumer: &dyn Consumer,
    entity: &Destination,
    received: &ReceivedMessage,
    envelope: &Envelope,
    message: &Message,
    places: Places,
    hard_stop: &CancellationToken,
) {
    let delivery = Delivery {
        runtime,
        consumer,
        entity,
        received,
        envelope,
        policy: runtime.options.scaled(consumer.retry_policy()),
    };
    let ending = run(&delivery, message, places, hard_stop).await;
    finish(&delivery, ending).await;
}

/// Runs the delivery up to its ending, its lock renewed meanwhile. A
/// handling is committed here, holding the saga's turns; every other
/// ending is settled by [`finish`], after the renewal stopped.
async fn run(delivery: &Delivery<'_>, message: &Message, mut places: Places, hard_stop: &CancellationToken) -> Ending {
    let (runtime, consumer, envelope) = (delivery.runtime, delivery.consumer, delivery.envelope);
    let _renewal = LockRenewal::start(runtime, delivery.received);
    let name = consumer.name();
    let message_id = envelope.message_id.to_string();
    let saga_key = consumer.saga_of(envelope, message);
    if let Some((kind, key)) = &saga_key {
        let span = tracing::Span::current();
        span.record("saga_kind", *kind);
        span.record("saga_key", key.as_str());
    }
    let interrupted = || {
        tracing::warn!("shutdown grace period over while waiting for the saga's turn; abandoning");
        Ending::Decided(delivery.decide(Observed::Interrupted), None)
    };
    // The saga key's turn (its lock renewed meanwhile), kept until the
    // commit: messages of one saga never conflict with each other here.
    let _turn = match &saga_key {
        Some((kind, key)) => {
            let turn = runtime.saga_turns.turn(format!("{kind}/{key}"));
            tokio::select! {
                turn = turn => Some(turn),
                () = hard_stop.cancelled() => return interrupted(),
            }
        }
        None => None,
    };
    // And across processes, where the store can (PostgreSQL): taken after
    // the in-process turn, so a process waits for it once per key.
    let _store_turn = match &saga_key {
        Some((kind, key)) => {
            tokio::select! {
                turn = runtime.store.saga_turn(kind, key) => match turn {
                    Ok(turn) => turn,
                    Err(err) => return delivery.failed(Observed::RuntimeFailed(err.next_step()), Failure::runtime(&err)),
                },
                () = hard_stop.cancelled() => return interrupted(),
            }
        }
        None => None,
    };
    // Whether it was handled, and the saga as stored now, in one read.
    let saga_ref = saga_key.as_ref().map(|(kind, key)| (*kind, key.as_str()));
    // Without a saga, the transport may have looked up the idempotency
    // record in the claim already (one round trip less).
    let checked = delivery
        .received
        .handled
        .as_ref()
        .filter(|check| saga_ref.is_none() && check.message_id == message_id)
        .map(|check| Ok((check.handled, None)));
    let looked_up = match checked {
        Some(checked) => checked,
        None => runtime.store.handled_and_saga(name, &message_id, saga_ref).await,
    };
    let mut stored = match looked_up {
        Ok((true, _)) => return Ending::Decided(delivery.decide(Observed::AlreadyHandled), None),
        Ok((false, saga)) => Some(saga),
        Err(err) => return delivery.failed(Observed::RuntimeFailed(err.next_step()), Failure::runtime(&err)),
    };
    let mut conflicts = 0u32;
    loop {
        let started = std::time::Instant::now();
        // A saga consumer gets its saga as stored now (read above the first
        // time); on a version conflict at commit the saga is loaded again
        // and the handler re-run.
        let saga = match &saga_key {
            Some((kind, key)) => match admit_saga(delivery, kind, key, stored.take()).await {
                Ok(saga) => Some(saga),
                Err(Refused::Handler(err)) => {
                    tracing::warn!(error = %err, "message refused: it names another tenant's saga");
                    return delivery.failed(Observed::HandlerFailed(&err), Failure::handler(&err));
                }
                Err(Refused::Store(err)) => {
                    tracing::warn!(error = %err, "could not load the saga");
                    return delivery.failed(Observed::RuntimeFailed(err.next_step()), Failure::runtime(&err));
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
        // The handler is done: its slot and claim go to the next message.
        // A run after a saga conflict (rare: this process holds the saga's
        // turn) runs without a slot: waiting for one while holding the turn
        // could wait for a handler that waits for the turn.
        places.settle().await;
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        runtime
            .metrics
            .handler_latency(name, &envelope.message_type, started.elapsed());
        let Some(result) = result else {
            tracing::warn!("shutdown grace period over; abandoning");
            return Ending::Decided(delivery.decide(Observed::Interrupted), None);
        };
        let outputs = result.and_then(|outcome| {
            outgoing_messages(envelope, name, runtime.options.messaging_system, &outcome)
                .map(|outbox| (outbox, outcome.saga_state))
        });
        let (outbox, saga_state) = match outputs {
            Ok(outputs) => outputs,
            Err(err) => return delivery.failed(Observed::HandlerFailed(&err), Failure::handler(&err)),
        };
        let decision = delivery.decide(Observed::Succeeded);
        if decision != (Decision::Complete { outputs: true }) {
            return Ending::Decided(decision, None);
        }
        let sends = outbox.len();
        let handled = HandledMessage {
            consumer: name.to_owned(),
            message_id: message_id.clone(),
            message_type: envelope.message_type.clone(),
            saga: saga_write(envelope, saga_state, saga.as_ref()),
            outbox,
            timeline: vec![delivery.timeline(
                TimelineStatus::Completed,
                Some(format!("{elapsed_ms} ms, pid {}", std::process::id())),
            )],
        };
        if runtime.options.failpoint == Some(Failpoint::HaltAfterStateCommit) {
            runtime.frozen.store(true, Ordering::SeqCst);
        }
        // Writes the handling and settles the message, in one transaction
        // where the backends share one database.
        match delivery.settle(Settlement::Handled(handled)).await {
            Ok(Settled::SagaConflict { expected, found, .. }) => {
                conflicts += 1;
                let decision = delivery.decide(Observed::SagaConflict { conflicts });
                if decision == Decision::Reapply {
                    runtime.metrics.count(name, &envelope.message_type, Event::SagaConflict);
                    tracing::info!(
                        expected,
                        found,
                        conflicts,
                        "saga changed meanwhile; reloading and applying again"
                    );
                    continue;
                }
                tracing::warn!(conflicts, "saga kept changing; abandoning for redelivery");
                return Ending::Decided(decision, None);
            }
            Ok(status) => {
                return Ending::Committed {
                    status,
                    elapsed_ms,
                    sends,
                };
            }
            Err(err @ SettleError::LockLost { .. }) => {
                return delivery.failed(Observed::LockLost, Failure::runtime(&err));
            }
            Err(err) => return delivery.failed(Observed::RuntimeFailed(err.next_step()), Failure::runtime(&err)),
        }
    }
}

/// Reports a committed handling, or carries out (and settles) the decision
/// the run ended with.
async fn finish(delivery: &Delivery<'_>, ending: Ending) {
    let (runtime, envelope) = (delivery.runtime, delivery.envelope);
    let name = delivery.name();
    match ending {
        Ending::Committed {
            status: Settled::AlreadyHandled,
            ..
        } => {
            outcome("duplicate", false);
            tracing::info!("another host handled it first; acknowledging");
            runtime.outbox_ready.notify_one();
        }
        Ending::Committed { elapsed_ms, sends, .. } => {
            outcome("completed", false);
            tracing::info!(elapsed_ms, sends, "finished");
            runtime.metrics.count(name, &envelope.message_type, Event::Processed);
            // The dispatcher is woken only when there is something to send
            // (an empty claim per message was a third of the queries of a
            // message that emits nothing).
            if sends > 0 {
                runtime.outbox_ready.notify_one();
            }
        }
        Ending::Decided(decision, failure) => carry_out(delivery, decision, failure).await,
    }
}

/// Carries out a decision that is not a commit.
async fn carry_out(delivery: &Delivery<'_>, decision: Decision, failure: Option<Failure>) {
    let runtime = delivery.runtime;
    let why = failure.as_ref().map(Failure::text);
    match (decision, failure) {
        (Decision::Complete { outputs: false }, _) => acknowledge(delivery).await,
        (Decision::Retry { attempt, delay }, Some(failure)) => schedule_retry(delivery, attempt, delay, failure).await,
        (Decision::Wait { delay }, Some(failure)) => schedule_wait(delivery, delay, failure).await,
        (Decision::DeadLetter(reason), Some(failure)) => dead_letter_failure(delivery, reason, failure).await,
        (Decision::LetGo, _) => {
            outcome("lock_lost", true);
            tracing::warn!("lock lost before the commit; nothing was written, the message will be delivered again");
        }
        (Decision::Stop, _) => {
            let why = why.unwrap_or_else(|| "stopped".to_owned());
            tracing::error!(
                error = why,
                "this process cannot handle messages; stopping and abandoning"
            );
            outcome("abandoned", true);
            // Stop receiving first, so the abandoned message goes to another
            // process rather than back to this one.
            runtime.halt(why);
            abandon(delivery).await;
        }
        (Decision::Abandon, _) => {
            outcome("abandoned", why.is_some());
            if let Some(why) = why {
                tracing::warn!(error = why, "abandoning for redelivery");
            }
            abandon(delivery).await;
        }
        (other, _) => {
            tracing::error!(decision = ?other, "this decision cannot end a delivery here; abandoning");
            abandon(delivery).await;
        }
    }
}

/// Gives the message back for redelivery now.
async fn abandon(delivery: &Delivery<'_>) {
    if let Err(err) = delivery.settle(Settlement::Abandon).await {
        tracing::debug!(error = %err, "could not abandon; the message is delivered again when its lock expires");
    }
}

/// A saga could not be given to the handler.
enum Refused {
    /// The message may not act on it (another tenant's).
    Handler(HandlerError),
    /// The store could not load it.
    Store(StoreError),
}

/// The saga a message is given: `stored` when it was read with the handled
/// check (the first run), else loaded now (a run after a conflict).
async fn admit_saga(
    delivery: &Delivery<'_>,
    kind: &'static str,
    key: &str,
    stored: Option<Option<SagaState>>,
) -> Result<SagaInstance, Refused> {
    let envelope = delivery.envelope;
    let loaded = match stored {
        Some(stored) => Ok(stored),
        None => delivery.runtime.store.load_saga_state(kind, key).await,
    };
    match loaded {
        // Tenants are walls: a message never acts on another tenant's
        // saga, whatever its key says.
        Ok(Some(record))
            if record
                .tenant_id
                .as_deref()
                .is_some_and(|owner| owner != envelope.tenant_id) =>
        {
            Err(Refused::Handler(HandlerError::permanent(TenantMismatch {
                message_type: envelope.message_type.clone(),
                message_tenant: envelope.tenant_id.clone(),
                saga: format!("{kind}/{key}"),
                saga_tenant: record.tenant_id.unwrap_or_default(),
            })))
        }
        Ok(record) => Ok(SagaInstance {
            kind,
            key: key.to_owned(),
            version: record.as_ref().map_or(0, |r| r.version),
            state: record.map_or(Value::Null, |r| r.state),
        }),
        Err(err) => Err(Refused::Store(err)),
    }
}

fn saga_write(envelope: &Envelope, state: Option<Value>, saga: Option<&SagaInstance>) -> Option<SagaWrite> {
    match (state, saga) {
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
    }
}

/// Acknowledges a message handled before, without running the handler.
async fn acknowledge(delivery: &Delivery<'_>) {
    let runtime = delivery.runtime;
    outcome("duplicate", false);
    tracing::info!("already handled; acknowledging without running the handler again");
    runtime
        .metrics
        .count(delivery.name(), &delivery.envelope.message_type, Event::Duplicate);
    let line = delivery.timeline(TimelineStatus::Duplicate, None);
    if let Err(err) = delivery.settle(Settlement::Duplicate(line)).await {
        tracing::warn!(error = %err, "could not acknowledge; a redelivery will be recognised as handled");
    }
    runtime.outbox_ready.notify_one();
}

fn attempt_record(delivery: &Delivery<'_>, chain: &[String]) -> AttemptRecord {
    AttemptRecord {
        attempt: delivery.envelope.attempt,
        at: OffsetDateTime::now_utc(),
        error_chain: chain.to_vec(),
    }
}

/// A copy of the received message with `body`, back to the entity it came
/// from (for an event, only this consumer's subscription, not every
/// subscriber again), due at `at`. Its broker id is the received one's
/// with its own `.<kind>-<tag>` suffix in place of an earlier copy's of
/// the same kind, so each copy is unique to duplicate detection.
fn scheduled_copy(
    delivery: &Delivery<'_>,
    kind: &str,
    tag: impl std::fmt::Display,
    body: Vec<u8>,
    at: OffsetDateTime,
) -> OutboundMessage {
    let envelope = delivery.envelope;
    let message_id = envelope.message_id.to_string();
    let received_id = delivery.received.broker_message_id.as_str();
    let base = match received_id.rsplit_once(&format!(".{kind}-")) {
        Some((base, _)) => base,
        None if received_id.is_empty() => message_id.as_str(),
        None => received_id,
    };
    OutboundMessage {
        destination: delivery.entity.clone(),
        broker_message_id: format!("{base}.{kind}-{tag}"),
        message_type: Some(envelope.message_type.clone()),
        correlation_id: Some(envelope.correlation_id.to_string()),
        body,
        scheduled_at: Some(at),
    }
}

async fn schedule_retry(delivery: &Delivery<'_>, attempt: u32, delay: Duration, failure: Failure) {
    let (runtime, envelope, received) = (delivery.runtime, delivery.envelope, delivery.received);
    let name = delivery.name();
    let Some(body) = with_attempt(&received.body, attempt) else {
        tracing::error!("cannot rewrite the attempt of a message that parsed before; abandoning");
        return abandon(delivery).await;
    };
    // A retry's broker id is unique per delivery of the message: a replayed
    // copy (`<id>.replay-<replay id>`) keeps its suffix, so its retries are
    // not taken for the first delivery's retries by duplicate detection
    // (which would drop them, and the replayed message with them).
    let message_id = envelope.message_id.to_string();
    let retry = scheduled_copy(delivery, "retry", attempt, body, OffsetDateTime::now_utc() + delay);
    let error = failure.text();
    let line = delivery.timeline(
        TimelineStatus::RetryScheduled,
        Some(format!(
            "retry {attempt} of {} in {} ms: {error}",
            delivery.policy.max_retries,
            delay.as_millis(),
        )),
    );
    let write = RetryWrite {
        consumer: name.to_owned(),
        message_id: message_id.clone(),
        received_broker_message_id: received.broker_message_id.clone(),
        attempt: attempt_record(delivery, &failure.chain),
        retry,
        timeline: line,
    };
    if settle_copy(delivery, write, "retry").await {
        outcome("retry_scheduled", true);
        runtime.metrics.count(name, &envelope.message_type, Event::Retried);
        let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        tracing::warn!(error, retry = attempt, delay_ms, "failed; retry scheduled");
        runtime.outbox_ready.notify_one();
    }
}

/// Settles the delivery with `write` (a retry's or a wait's scheduled
/// copy, named `what` in the logs): `true` once recorded; when the lock was
/// lost first, or the write failed (the message is then abandoned for
/// redelivery), says so and returns `false`.
async fn settle_copy(delivery: &Delivery<'_>, write: RetryWrite, what: &str) -> bool {
    match delivery.settle(Settlement::Retry(write)).await {
        Ok(_) => true,
        Err(err @ SettleError::LockLost { .. }) => {
            outcome("lock_lost", true);
            tracing::warn!(error = %err, "lock lost before the {what} was recorded; it will be delivered again");
            false
        }
        Err(err) => {
            outcome("abandoned", true);
            tracing::warn!(error = %err, "could not record the {what}; abandoning for redelivery");
            abandon(delivery).await;
            false
        }
    }
}

/// Leaves a message whose schema version is newer than this build reads
/// for a newer process (or dead-letters it, past the patience).
pub(super) async fn leave_for_newer(
    runtime: &Runtime,
    consumer: &dyn Consumer,
    entity: &Destination,
    received: &ReceivedMessage,
    envelope: &Envelope,
    err: &ContractError,
) {
    let delivery = Delivery {
        runtime,
        consumer,
        entity,
        received,
        envelope,
        policy: runtime.options.scaled(consumer.retry_policy()),
    };
    let decision = decision::decide(
        newer::observed(envelope, runtime.options.message_versions),
        &delivery.policy,
        envelope.attempt,
        0.0,
    );
    let failure = Failure {
        chain: vec![err.to_string()],
    };
    carry_out(&delivery, decision, Some(failure)).await;
}

/// Schedules the copy that waits `delay` for a newer process.
async fn schedule_wait(delivery: &Delivery<'_>, delay: Duration, failure: Failure) {
    let (runtime, envelope, received) = (delivery.runtime, delivery.envelope, delivery.received);
    let name = delivery.name();
    let now = OffsetDateTime::now_utc();
    let since = newer::waiting_since(envelope).unwrap_or(now);
    let Some(body) = newer::with_waiting_since(&received.body, since) else {
        tracing::error!("cannot mark a message that parsed before as waiting; abandoning");
        return abandon(delivery).await;
    };
    let message_id = envelope.message_id.to_string();
    let copy = scheduled_copy(
        delivery,
        "wait",
        now.unix_timestamp_nanos() / 1_000_000,
        body,
        now + delay,
    );
    let error = failure.text();
    let patience = runtime.options.message_versions.newer_message_patience;
    let since_text = since.format(&Rfc3339).unwrap_or_default();
    let line = delivery.timeline(
        TimelineStatus::RetryScheduled,
        Some(format!(
            "waiting for a newer bosun since {since_text} (no attempt counted); looked at again in {} ms, dead-lettered as needs-newer after {} s: {error}",
            delay.as_millis(),
            patience.as_secs(),
        )),
    );
    let write = RetryWrite {
        consumer: name.to_owned(),
        message_id,
        received_broker_message_id: received.broker_message_id.clone(),
        attempt: attempt_record(delivery, &failure.chain),
        retry: copy,
        timeline: line,
    };
    if settle_copy(delivery, write, "wait").await {
        outcome("waiting", false);
        runtime.metrics.count(name, &envelope.message_type, Event::Waiting);
        tracing::warn!(
            schema_version = envelope.schema_version,
            newest_read = newer::newest_read(envelope),
            waiting_since = since_text,
            delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            error,
            "this build cannot handle the message yet; left for a newer bosun"
        );
        runtime.outbox_ready.notify_one();
    }
}

async fn dead_letter_failure(delivery: &Delivery<'_>, reason: DeadLetterReason, failure: Failure) {
    let (runtime, envelope) = (delivery.runtime, delivery.envelope);
    let name = delivery.name();
    let chain = failure.chain;
    let description = match reason {
        DeadLetterReason::RetriesExhausted => format!(
            "failed {} times; last error: {}",
            envelope.attempt + 1,
            chain.join(": ")
        ),
        DeadLetterReason::NeedsNewer => newer::gave_up(
            envelope,
            runtime.options.message_versions.newer_message_patience,
            &chain,
        ),
        DeadLetterReason::PermanentFailure | DeadLetterReason::CorruptState => chain.join(": "),
    };
    let mut attempts = match runtime.store.attempts(name, &envelope.message_id.to_string()).await {
        Ok(attempts) => attempts,
        Err(err) => {
            tracing::warn!(error = %err, "could not read the earlier attempts; the dead letter lists this one only");
            Vec::new()
        }
    };
    attempts.push(attempt_record(delivery, &chain));
    outcome("dead_lettered", true);
    runtime.metrics.count(name, &envelope.message_type, Event::DeadLettered);
    let record = dead_letter_record(
        name,
        delivery.entity,
        delivery.received,
        Some(envelope),
        reason.as_str(),
        &description,
        chain,
        attempts,
    );
    super::dead_letter::settle_dead_letter(runtime, delivery.received, record, Some(envelope), envelope.attempt).await;
}

/// Records what became of the message on its span (`outcome`), and an
/// error status when the handling failed.
fn outcome(what: &'static str, failed: bool) {
    let span = tracing::Span::current();
    span.record("outcome", what);
    if failed {
        span.record("otel.status_code", "error");
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

/// Turns a handler's outgoing messages into outbox entries. Each gets a
/// producer span (`create <destination>`) under the message's span, and
/// that span's trace context in its envelope, so the message's own
/// handling is that span's child in the delivery's trace.
fn outgoing_messages(
    envelope: &Envelope,
    consumer: &str,
    messaging_system: &'static str,
    outcome: &bosun_consumers::Outcome,
) -> Result<Vec<OutboundMessage>, HandlerError> {
    let now = OffsetDateTime::now_utc();
    let incoming = telemetry::context_of(envelope);
    outcome
        .messages
        .iter()
        .map(|outgoing| {
            let message_type = outgoing.message.message_type();
            let destination = destination_of(message_type).ok_or_else(|| {
                HandlerError::permanent(format!("no route for `{message_type}`: no consumer handles it"))
            })?;
            let mut next = envelope.follow_up(&outgoing.message, consumer);
            let span_name = format!("create {destination}");
            let span = tracing::info_span!(
                "create",
                otel.name = span_name.as_str(),
                otel.kind = "producer",
                messaging.system = messaging_system,
                messaging.operation.type = "create",
                messaging.operation.name = "create",
                messaging.destination.name = %destination,
                messaging.message.id = %next.message_id,
                messaging.message.conversation_id = %next.correlation_id,
                message_type,
                delay_ms = outgoing.delay.map(|delay| u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)),
            );
            let context = telemetry::outgoing_context(&span, incoming.as_ref());
            next.traceparent = Some(context.traceparent);
            next.tracestate = context.tracestate;
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
