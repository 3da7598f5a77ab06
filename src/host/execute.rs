//! The executor: runs one readable message through its consumer and
//! carries out what [`decision::decide`] says.
//!
//! Each step (the idempotency check, loading the saga, the handler, the
//! commit) ends in an [`Observed`]; the decision for it is taken by the
//! pure function, and this module only performs it: commit and complete,
//! reload and re-run, schedule a retry, dead-letter, abandon, stop, or let
//! a lost lock go.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bosun_consumers::{Consumer, HandlerError, Inbound, RetryPolicy, SagaInstance};
use bosun_contracts::routing::destination_of;
use bosun_contracts::{Destination, Envelope, Message};
use serde_json::Value;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::dead_letter::{dead_letter, dead_letter_record};
use super::decision::{self, DeadLetterReason, Decision, Observed};
use super::lock::LockRenewal;
use super::{Places, Runtime, TenantMismatch, error_chain, handler_error_chain};
use crate::ports::commit::{CommitError, CommitStatus};
use crate::ports::store::{
    AttemptRecord, HandledMessage, SagaState, SagaWrite, StoreError, TimelineEntry, TimelineStatus,
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

/// Why a delivery failed, for the decision and for the dead letter.
enum Failure<'a> {
    Handler(&'a HandlerError),
    Runtime(&'a (dyn std::error::Error + Send + Sync + 'static)),
}

impl Delivery<'_> {
    fn decide(&self, observed: Observed<'_>) -> Decision {
        decision::decide(observed, &self.policy, self.envelope.attempt, fastrand::f64())
    }

    fn name(&self) -> &'static str {
        self.consumer.name()
    }

    fn timeline(&self, status: TimelineStatus, detail: Option<String>) -> TimelineEntry {
        timeline(self.envelope, self.name(), status, detail)
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
    mut places: Places,
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
    let name = consumer.name();
    let message_id = envelope.message_id.to_string();
    let saga_key = consumer.saga_of(envelope, message);
    if let Some((kind, key)) = &saga_key {
        let span = tracing::Span::current();
        span.record("saga_kind", *kind);
        span.record("saga_key", key.as_str());
    }
    let renewal = LockRenewal::start(runtime, received);
    // The saga key's turn (its lock renewed meanwhile), kept until the
    // commit: messages of one saga never conflict with each other here.
    let _turn = match &saga_key {
        Some((kind, key)) => {
            let turn = runtime.saga_turns.turn(format!("{kind}/{key}"));
            tokio::select! {
                turn = turn => Some(turn),
                () = hard_stop.cancelled() => {
                    drop(renewal);
                    tracing::warn!("shutdown grace period over while waiting for the saga's turn; abandoning");
                    return execute_plain(&delivery, delivery.decide(Observed::Interrupted)).await;
                }
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
                    Err(err) => {
                        drop(renewal);
                        let decision = delivery.decide(Observed::RuntimeFailed(err.next_step()));
                        return execute(&delivery, decision, Failure::Runtime(&err)).await;
                    }
                },
                () = hard_stop.cancelled() => {
                    drop(renewal);
                    tracing::warn!("shutdown grace period over while waiting for the saga's turn; abandoning");
                    return execute_plain(&delivery, delivery.decide(Observed::Interrupted)).await;
                }
            }
        }
        None => None,
    };
    // Whether it was handled, and the saga as stored now, in one read.
    let saga_ref = saga_key.as_ref().map(|(kind, key)| (*kind, key.as_str()));
    // Without a saga, the transport may have looked up the idempotency
    // record in the claim already (one round trip less).
    let checked = received
        .handled
        .as_ref()
        .filter(|check| saga_ref.is_none() && check.message_id == message_id)
        .map(|check| Ok((check.handled, None)));
    let looked_up = match checked {
        Some(checked) => checked,
        None => runtime.store.handled_and_saga(name, &message_id, saga_ref).await,
    };
    let mut stored = match looked_up {
        Ok((true, _)) => {
            drop(renewal);
            let decision = delivery.decide(Observed::AlreadyHandled);
            return acknowledge(&delivery, decision).await;
        }
        Ok((false, saga)) => Some(saga),
        Err(err) => {
            drop(renewal);
            let decision = delivery.decide(Observed::RuntimeFailed(err.next_step()));
            return execute(&delivery, decision, Failure::Runtime(&err)).await;
        }
    };
    let mut conflicts = 0u32;
    loop {
        let started = std::time::Instant::now();
        // A saga consumer gets its saga as stored now (read above the first
        // time); on a version conflict at commit the saga is loaded again
        // and the handler re-run.
        let saga = match &saga_key {
            Some((kind, key)) => match admit_saga(&delivery, kind, key, stored.take()).await {
                Ok(saga) => Some(saga),
                Err(Refused::Handler(err)) => {
                    drop(renewal);
                    tracing::warn!(error = %err, "message refused: it names another tenant's saga");
                    let decision = delivery.decide(Observed::HandlerFailed(&err));
                    return execute(&delivery, decision, Failure::Handler(&err)).await;
                }
                Err(Refused::Store(err)) => {
                    drop(renewal);
                    tracing::warn!(error = %err, "could not load the saga");
                    let decision = delivery.decide(Observed::RuntimeFailed(err.next_step()));
                    return execute(&delivery, decision, Failure::Runtime(&err)).await;
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
            drop(renewal);
            tracing::warn!("shutdown grace period over; abandoning");
            return execute_plain(&delivery, delivery.decide(Observed::Interrupted)).await;
        };
        let outputs = result.and_then(|outcome| {
            outgoing_messages(envelope, name, runtime.options.messaging_system, &outcome)
                .map(|outbox| (outbox, outcome.saga_state))
        });
        let (outbox, saga_state) = match outputs {
            Ok(outputs) => outputs,
            Err(err) => {
                drop(renewal);
                let decision = delivery.decide(Observed::HandlerFailed(&err));
                return execute(&delivery, decision, Failure::Handler(&err)).await;
            }
        };
        debug_assert_eq!(
            delivery.decide(Observed::Succeeded),
            Decision::Complete { outputs: true }
        );
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
        let (decision, failure) = match runtime.commit.commit(handled, &received.lock).await {
            Ok(CommitStatus::Written) => {
                if runtime.options.failpoint == Some(Failpoint::HaltAfterStateCommit) {
                    tracing::error!("failpoint halt-after-state-commit reached; halting");
                    eprintln!("FAILPOINT halt-after-state-commit {message_id}");
                    std::future::pending::<()>().await;
                }
                outcome("completed", false);
                tracing::info!(elapsed_ms, sends, "finished");
                runtime.metrics.count(name, &envelope.message_type, Event::Processed);
                drop(renewal);
                // The dispatcher is woken only when there is something to
                // send (an empty claim per message was a third of the
                // queries of a message that emits nothing).
                if sends > 0 {
                    runtime.outbox_ready.notify_one();
                }
                return;
            }
            Ok(CommitStatus::AlreadyHandled) => {
                outcome("duplicate", false);
                tracing::info!("another host handled it first; acknowledging");
                drop(renewal);
                runtime.outbox_ready.notify_one();
                return;
            }
            Ok(CommitStatus::SagaConflict { expected, found, .. }) => {
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
                (decision, None)
            }
            Err(err @ CommitError::LockLost { .. }) => (delivery.decide(Observed::LockLost), Some(err)),
            Err(err) => (delivery.decide(Observed::RuntimeFailed(err.next_step())), Some(err)),
        };
        drop(renewal);
        return match &failure {
            Some(err) => execute(&delivery, decision, Failure::Runtime(err)).await,
            None => execute_plain(&delivery, decision).await,
        };
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
async fn acknowledge(delivery: &Delivery<'_>, decision: Decision) {
    debug_assert_eq!(decision, Decision::Complete { outputs: false });
    let runtime = delivery.runtime;
    outcome("duplicate", false);
    tracing::info!("already handled; acknowledging without running the handler again");
    runtime
        .metrics
        .count(delivery.name(), &delivery.envelope.message_type, Event::Duplicate);
    let _ = runtime
        .store
        .append_timeline(vec![delivery.timeline(TimelineStatus::Duplicate, None)])
        .await;
    runtime.outbox_ready.notify_one();
    settle_complete(runtime, delivery.received).await;
}

/// Carries out a decision that needs no failure: abandon, stop, let go.
async fn execute_plain(delivery: &Delivery<'_>, decision: Decision) {
    let runtime = delivery.runtime;
    match decision {
        Decision::Abandon => {
            outcome("abandoned", false);
            let _ = runtime.transport.abandon(&delivery.received.lock).await;
        }
        Decision::LetGo => {
            outcome("lock_lost", true);
            tracing::warn!("lock lost before the commit; nothing was written, the message will be delivered again");
        }
        other => tracing::error!(?other, "decision needs a failure to carry out; abandoning"),
    }
}

/// Carries out the decision taken for a failure.
async fn execute(delivery: &Delivery<'_>, decision: Decision, failure: Failure<'_>) {
    let runtime = delivery.runtime;
    let chain = match failure {
        Failure::Handler(err) => handler_error_chain(err),
        Failure::Runtime(err) => error_chain(err),
    };
    match decision {
        Decision::Retry { attempt, delay } => schedule_retry(delivery, attempt, delay, chain, failure).await,
        Decision::DeadLetter(reason) => dead_letter_failure(delivery, reason, chain).await,
        Decision::Abandon => {
            outcome("abandoned", true);
            tracing::warn!(error = chain.join(": "), "abandoning for redelivery");
            let _ = runtime.transport.abandon(&delivery.received.lock).await;
        }
        Decision::Stop => {
            let why = chain.join(": ");
            tracing::error!(
                error = why,
                "this process cannot handle messages; stopping and abandoning"
            );
            outcome("abandoned", true);
            // Stop receiving first, so the abandoned message goes to another
            // process rather than back to this one.
            runtime.halt(why);
            let _ = runtime.transport.abandon(&delivery.received.lock).await;
        }
        Decision::LetGo => {
            outcome("lock_lost", true);
            tracing::warn!("lock lost before the commit; nothing was written, the message will be delivered again");
        }
        Decision::Complete { .. } | Decision::Reapply => {
            tracing::error!(?decision, "a failure cannot complete or reapply; abandoning");
            let _ = runtime.transport.abandon(&delivery.received.lock).await;
        }
    }
}

fn attempt_record(delivery: &Delivery<'_>, chain: &[String]) -> AttemptRecord {
    AttemptRecord {
        attempt: delivery.envelope.attempt,
        at: OffsetDateTime::now_utc(),
        error_chain: chain.to_vec(),
    }
}

async fn schedule_retry(
    delivery: &Delivery<'_>,
    attempt: u32,
    delay: Duration,
    chain: Vec<String>,
    failure: Failure<'_>,
) {
    let (runtime, envelope, received) = (delivery.runtime, delivery.envelope, delivery.received);
    let name = delivery.name();
    let message_id = envelope.message_id.to_string();
    let Some(body) = with_attempt(&received.body, attempt) else {
        tracing::error!("cannot rewrite the attempt of a message that parsed before; abandoning");
        let _ = runtime.transport.abandon(&received.lock).await;
        return;
    };
    // A retry's broker id is unique per delivery of the message: a replayed
    // copy (`<id>.replay-<replay id>`) keeps its suffix, so its retries are
    // not taken for the first delivery's retries by duplicate detection
    // (which would drop them, and the replayed message with them).
    let received_id = received.broker_message_id.as_str();
    let base = match received_id.rsplit_once(".retry-") {
        Some((base, _)) => base,
        None if received_id.is_empty() => message_id.as_str(),
        None => received_id,
    };
    let retry = OutboundMessage {
        // Back to the entity it came from: for an event, only this
        // consumer's subscription, not every subscriber again.
        destination: delivery.entity.clone(),
        broker_message_id: format!("{base}.retry-{attempt}"),
        message_type: Some(envelope.message_type.clone()),
        correlation_id: Some(envelope.correlation_id.to_string()),
        body,
        scheduled_at: Some(OffsetDateTime::now_utc() + delay),
    };
    let line = delivery.timeline(
        TimelineStatus::RetryScheduled,
        Some(format!(
            "retry {attempt} of {} in {} ms: {}",
            delivery.policy.max_retries,
            delay.as_millis(),
            chain.join(": ")
        )),
    );
    let record = attempt_record(delivery, &chain);
    match runtime
        .store
        .record_retry(name, &message_id, &received.broker_message_id, record, retry, line)
        .await
    {
        Ok(()) => {
            outcome("retry_scheduled", true);
            runtime.metrics.count(name, &envelope.message_type, Event::Retried);
            let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
            match failure {
                Failure::Handler(err) => {
                    tracing::warn!(error = %err, retry = attempt, delay_ms, "failed; retry scheduled")
                }
                Failure::Runtime(err) => {
                    tracing::warn!(error = %err, retry = attempt, delay_ms, "failed; retry scheduled")
                }
            }
            runtime.outbox_ready.notify_one();
            settle_complete(runtime, received).await;
        }
        Err(store_err) => {
            tracing::warn!(error = %store_err, "could not record the retry; abandoning for redelivery");
            let _ = runtime.transport.abandon(&received.lock).await;
        }
    }
}

async fn dead_letter_failure(delivery: &Delivery<'_>, reason: DeadLetterReason, chain: Vec<String>) {
    let (runtime, envelope) = (delivery.runtime, delivery.envelope);
    let name = delivery.name();
    let description = match reason {
        DeadLetterReason::RetriesExhausted => format!(
            "failed {} times; last error: {}",
            envelope.attempt + 1,
            chain.join(": ")
        ),
        DeadLetterReason::PermanentFailure | DeadLetterReason::CorruptState => chain.join(": "),
    };
    let mut attempts = runtime
        .store
        .attempts(name, &envelope.message_id.to_string())
        .await
        .unwrap_or_default();
    attempts.push(attempt_record(delivery, &chain));
    outcome("dead_lettered", true);
    runtime.metrics.count(name, &envelope.message_type, Event::DeadLettered);
    let dead = dead_letter_record(
        name,
        delivery.entity,
        delivery.received,
        Some(envelope),
        reason.as_str(),
        &description,
        chain,
        attempts,
    );
    dead_letter(runtime, delivery.received, dead, Some(envelope), envelope.attempt).await;
}

async fn settle_complete(runtime: &Runtime, received: &ReceivedMessage) {
    if let Err(err) = runtime.transport.complete(&received.lock).await {
        tracing::warn!(error = %err, "could not complete; a redelivery will be recognised as handled");
    }
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
