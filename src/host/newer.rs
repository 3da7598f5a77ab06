//! Messages this build cannot handle yet, left for a newer process.
//!
//! During a rolling upgrade a later release may write a message (a newer
//! schema version) or a saga state (the handler answers
//! [`HandlerError::NeedsNewer`](bosun_consumers::HandlerError::NeedsNewer))
//! that this build cannot read. Such a message is not a failure: it waits.
//! The host settles it, through the one settle port, as a scheduled copy of
//! its original bytes, delivered again after `BOSUN_NEWER_MESSAGE_WAIT`,
//! with the same `attempt` (waiting counts no attempt) and the envelope
//! extension [`WAITING_SINCE`] set to when it was first seen waiting. A
//! newer process takes the copy and handles it; an old one leaves it again.
//! Only once it has waited past `BOSUN_NEWER_MESSAGE_PATIENCE` is it
//! dead-lettered (`needs-newer`). The rule is [`decision::decide`]'s; this
//! module carries it out.
//!
//! The wait is recorded as a retry is (attempt row, scheduled copy in the
//! outbox, a `retry-scheduled` timeline line whose detail says it waits),
//! so the previous release, reading the same database, reads every row.

use std::time::Duration;

use bosun_consumers::Consumer;
use bosun_contracts::{ContractError, Destination, Envelope, MessageSpec};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::Runtime;
use super::decision::{self, Observed};
use super::execute::{Delivery, Failure, abandon, attempt_record, carry_out, outcome};
use crate::ports::settle::{SettleError, Settlement};
use crate::ports::store::{RetryWrite, TimelineStatus};
use crate::ports::transport::{OutboundMessage, ReceivedMessage};
use crate::runtime::metrics::Event;

/// The envelope extension holding when a message was first seen waiting
/// for a newer bosun (RFC 3339).
pub const WAITING_SINCE: &str = "waitingSince";

/// When `envelope` was first seen waiting, if it has waited before.
pub(super) fn waiting_since(envelope: &Envelope) -> Option<OffsetDateTime> {
    let text = envelope.extensions.get(WAITING_SINCE)?.as_str()?;
    OffsetDateTime::parse(text, &Rfc3339).ok()
}

/// What the executor observes about a delivery this build cannot handle
/// yet: how long it has waited, and the settings.
pub(super) fn observed(delivery: &Delivery<'_>) -> Observed<'static> {
    let waited = waiting_since(delivery.envelope).map_or(Duration::ZERO, |since| {
        (OffsetDateTime::now_utc() - since).try_into().unwrap_or(Duration::ZERO)
    });
    let settings = delivery.runtime.options.message_versions;
    Observed::NeedsNewer {
        waited,
        wait: settings.newer_message_wait,
        patience: settings.newer_message_patience,
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
    let decision = decision::decide(observed(&delivery), &delivery.policy, envelope.attempt, 0.0);
    let failure = Failure {
        chain: vec![err.to_string()],
    };
    carry_out(&delivery, decision, Some(failure)).await;
}

/// The newest schema version of the message's type this build reads.
fn newest_read(envelope: &Envelope) -> Option<u32> {
    MessageSpec::find(&envelope.message_type).map(|spec| spec.schema_version)
}

/// Schedules the copy that waits `delay` for a newer process.
pub(super) async fn schedule_wait(delivery: &Delivery<'_>, delay: Duration, failure: Failure) {
    let (runtime, envelope, received) = (delivery.runtime, delivery.envelope, delivery.received);
    let name = delivery.name();
    let now = OffsetDateTime::now_utc();
    let since = waiting_since(envelope).unwrap_or(now);
    let Some(body) = with_waiting_since(&received.body, since) else {
        tracing::error!("cannot mark a message that parsed before as waiting; abandoning");
        return abandon(delivery).await;
    };
    // Each copy has its own broker id (duplicate detection must not drop
    // it), built on the first delivery's.
    let message_id = envelope.message_id.to_string();
    let received_id = received.broker_message_id.as_str();
    let base = match received_id.rsplit_once(".wait-") {
        Some((base, _)) => base,
        None if received_id.is_empty() => message_id.as_str(),
        None => received_id,
    };
    let copy = OutboundMessage {
        // Back to the entity it came from.
        destination: delivery.entity.clone(),
        broker_message_id: format!("{base}.wait-{}", now.unix_timestamp_nanos() / 1_000_000),
        message_type: Some(envelope.message_type.clone()),
        correlation_id: Some(envelope.correlation_id.to_string()),
        body,
        scheduled_at: Some(now + delay),
    };
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
    match delivery.settle(Settlement::Retry(write)).await {
        Ok(_) => {
            outcome("waiting", false);
            runtime.metrics.count(name, &envelope.message_type, Event::Waiting);
            tracing::warn!(
                schema_version = envelope.schema_version,
                newest_read = newest_read(envelope),
                waiting_since = since_text,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error,
                "this build cannot handle the message yet; left for a newer bosun"
            );
            runtime.outbox_ready.notify_one();
        }
        Err(err @ SettleError::LockLost { .. }) => {
            outcome("lock_lost", true);
            tracing::warn!(error = %err, "lock lost before the wait was recorded; it will be delivered again");
        }
        Err(err) => {
            outcome("abandoned", true);
            tracing::warn!(error = %err, "could not record the wait; abandoning for redelivery");
            abandon(delivery).await;
        }
    }
}

/// The dead letter's description of a message that waited too long.
pub(super) fn gave_up(delivery: &Delivery<'_>, chain: &[String]) -> String {
    let patience = delivery.runtime.options.message_versions.newer_message_patience;
    let since = waiting_since(delivery.envelope)
        .and_then(|since| since.format(&Rfc3339).ok())
        .unwrap_or_else(|| "now".to_owned());
    format!(
        "waited for a newer bosun since {since}, longer than the patience of {} s (BOSUN_NEWER_MESSAGE_PATIENCE), and no process that reads it took it; upgrade bosun and replay it: {}",
        patience.as_secs(),
        chain.join(": ")
    )
}

/// The bytes of a message with its [`WAITING_SINCE`] extension set to
/// `since` (kept when already set), all else kept.
fn with_waiting_since(body: &[u8], since: OffsetDateTime) -> Option<Vec<u8>> {
    let mut value: Value = serde_json::from_slice(body).ok()?;
    let object = value.as_object_mut()?;
    if !object.contains_key(WAITING_SINCE) {
        object.insert(WAITING_SINCE.to_owned(), Value::String(since.format(&Rfc3339).ok()?));
    }
    serde_json::to_vec(&value).ok()
}
