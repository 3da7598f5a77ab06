//! What one settlement writes: a handling, a retry, an accepted command, and the outbox entries they leave.

use serde::Serialize;

use super::*;
use crate::ports::transport::OutboundMessage;

/// Everything one successful handling writes, atomically.
#[derive(Debug, Clone, PartialEq)]
pub struct HandledMessage {
    /// The consumer.
    pub consumer: String,
    /// The envelope's messageId.
    pub message_id: String,
    /// The envelope's type.
    pub message_type: String,
    /// The saga state to save, if the consumer runs a saga.
    pub saga: Option<SagaWrite>,
    /// Messages to send.
    pub outbox: Vec<OutboundMessage>,
    /// Timeline lines.
    pub timeline: Vec<TimelineEntry>,
}

/// Everything one failed attempt that will be retried writes, atomically:
/// the attempt, the retry to send (a scheduled copy of the message with the
/// next attempt number) and its timeline line.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryWrite {
    /// The consumer.
    pub consumer: String,
    /// The envelope's messageId.
    pub message_id: String,
    /// The broker id of the delivery that failed: a redelivery of the same
    /// failed copy does not schedule a second retry, while a replayed copy
    /// starts afresh.
    pub received_broker_message_id: String,
    /// The failed attempt.
    pub attempt: AttemptRecord,
    /// The copy to send.
    pub retry: OutboundMessage,
    /// The `retry-scheduled` line.
    pub timeline: TimelineEntry,
}

/// A command accepted at the front door: everything
/// [`OutboxStore::accept_command`] writes, atomically.
#[derive(Debug, Clone, PartialEq)]
pub struct AcceptedCommand {
    /// The delivery it starts or joins.
    pub delivery: DeliveryRecord,
    /// The message to send.
    pub message: OutboundMessage,
    /// Its `sent` line.
    pub timeline: TimelineEntry,
}

/// Whether [`HandledStore::commit_handled`] wrote anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOutcome {
    /// Written now.
    Committed,
    /// The message was already handled by this consumer; nothing written.
    AlreadyHandled,
}

/// Why an outbox entry exists, stored with it: which method wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutboxPurpose {
    /// A command sent on its own ([`OutboxStore::accept_command`]: `bosun send`,
    /// the HTTP API, the MCP server).
    Sent,
    /// A message a consumer emitted while handling one
    /// ([`HandledStore::commit_handled`]).
    Emitted,
    /// The scheduled copy of a message whose handling failed
    /// ([`HandledStore::record_retry`]); already on the timeline as
    /// `retry-scheduled`, and not among [`OutboxStore::emitted`].
    Retry,
}

impl OutboxPurpose {
    /// The purpose as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sent => "sent",
            Self::Emitted => "emitted",
            Self::Retry => "retry",
        }
    }

    /// The purpose stored as `text` in outbox row `id`.
    pub(crate) fn decode(text: &str, id: i64) -> Result<Self, StoreError> {
        match text {
            "sent" => Ok(Self::Sent),
            "emitted" => Ok(Self::Emitted),
            "retry" => Ok(Self::Retry),
            other => Err(StoreError::corrupt(
                format!("purpose of outbox entry {id}"),
                format!("unknown purpose `{other}`"),
            )),
        }
    }
}

/// An outbox entry waiting to be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingOutbox {
    /// Outbox row id.
    pub id: i64,
    /// Why it was written.
    pub purpose: OutboxPurpose,
    /// The message.
    pub message: OutboundMessage,
    /// Correlation and causation for the timeline.
    pub message_id: Option<String>,
}
