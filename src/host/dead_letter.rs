//! Dead letters: a message that cannot be read, or whose decision is to
//! dead-letter it, is recorded with its original bytes, error chain and
//! attempts, then dead-lettered on the transport.

use bosun_consumers::Consumer;
use bosun_contracts::{ContractError, Destination, Envelope};
use time::OffsetDateTime;
use uuid::Uuid;

use super::Runtime;
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
    dead_letter(runtime, received, record, envelope, 0).await;
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

pub(super) async fn dead_letter(
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
