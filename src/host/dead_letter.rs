//! Dead letters: a message that cannot be read, or whose decision is to
//! dead-letter it, is recorded with its original bytes, error chain and
//! attempts, then dead-lettered on the transport.

use bosun_consumers::Consumer;
use bosun_contracts::{ContractError, Destination, Envelope};
use time::OffsetDateTime;
use uuid::Uuid;

use super::Runtime;
use crate::ports::settle::{SettleError, Settlement};
use crate::ports::store::{AttemptRecord, DeadLetterRecord, DeadLetterStatus, TimelineEntry, TimelineStatus};
use crate::ports::transport::ReceivedMessage;
use crate::runtime::metrics::Event;

/// The `message_type` label of a message whose envelope cannot be read.
const UNREADABLE: &str = "unreadable";

/// Dead-letters a message that cannot be read.
pub(super) async fn reject(
    runtime: &Runtime,
    consumer: &dyn Consumer,
    entity: &Destination,
    received: &ReceivedMessage,
    envelope: Option<&Envelope>,
    err: &ContractError,
) {
    tracing::warn!(reason = err.cause(), error = %err, "message cannot be read; dead-lettering");
    // An envelope that cannot be read has no type to count it under.
    let message_type = envelope.map_or(UNREADABLE, |envelope| envelope.message_type.as_str());
    runtime
        .metrics
        .count(consumer.name(), message_type, Event::DeadLettered);
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
    settle_dead_letter(runtime, received, record, envelope, 0).await;
}

#[allow(clippy::too_many_arguments)]
pub(super) fn dead_letter_record(
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

/// Dead-letters the message received as `received`: records `record` (and
/// its timeline line, when the envelope could be read) and dead-letters
/// the message on the transport, through the one settle.
pub(super) async fn settle_dead_letter(
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
    let (id, reason) = (record.id, record.reason.clone());
    match runtime
        .settle
        .settle(Settlement::DeadLetter { record, timeline }, &received.lock)
        .await
    {
        Ok(_) => tracing::warn!(dead_letter_id = %id, reason, "dead-lettered"),
        Err(err @ SettleError::LockLost { .. }) => {
            tracing::warn!(error = %err, "lock lost before the dead letter was recorded; it will be delivered again")
        }
        Err(err) => tracing::error!(error = %err, "could not dead-letter; it will be delivered again"),
    }
}
