//! Outgoing messages cut into Service Bus batches of at most a size, one
//! session's messages each, and scheduled messages alone.

use super::*;

/// Messages to one entity, ready to send: batches, and scheduled messages
/// alone.
pub(super) enum Chunk {
    Single(Message<fe2o3_amqp::types::messaging::Data>),
    Batch(
        Message<fe2o3_amqp::types::messaging::Batch<fe2o3_amqp::types::messaging::Data>>,
        usize,
    ),
}

impl Chunk {
    pub(super) fn count(&self) -> usize {
        match self {
            Self::Single(_) => 1,
            Self::Batch(_, count) => *count,
        }
    }

    pub(super) async fn send(self, sender: &mut Sender) -> Result<Outcome, fe2o3_amqp::link::SendError> {
        match self {
            Self::Single(message) => sender.send(Sendable::builder().message(message).build()).await,
            Self::Batch(message, _) => {
                sender
                    .send(
                        Sendable::builder()
                            .message(message)
                            .message_format(BATCH_MESSAGE_FORMAT)
                            .build(),
                    )
                    .await
            }
        }
    }
}

/// Splits messages to one entity into sends: consecutive unscheduled
/// messages of one session (or of none) share a batch up to `limit` bytes.
pub(super) fn chunks(messages: &[Addressed], limit: usize) -> Result<Vec<Chunk>, serde_amqp::Error> {
    // Section overhead per batched message, and room for the envelope.
    const PER_MESSAGE: usize = 16;
    const ENVELOPE: usize = 512;
    let mut out = Vec::new();
    let mut pending: Vec<(Message<fe2o3_amqp::types::messaging::Data>, Vec<u8>)> = Vec::new();
    let mut pending_bytes = 0;
    let mut pending_session: Option<&str> = None;
    let flush =
        |pending: &mut Vec<(Message<fe2o3_amqp::types::messaging::Data>, Vec<u8>)>, out: &mut Vec<Chunk>| match pending
            .len()
        {
            0 => {}
            1 => {
                if let Some((message, _)) = pending.pop() {
                    out.push(Chunk::Single(message));
                }
            }
            count => {
                let first = pending[0].0.clone();
                let encoded = pending.drain(..).map(|(_, bytes)| bytes).collect();
                out.push(Chunk::Batch(mapping::batch_message(&first, encoded), count));
            }
        };
    for Addressed { message, session_id } in messages {
        let amqp = mapping::outbound_message(message, session_id.as_deref());
        if !pending.is_empty() && pending_session != session_id.as_deref() {
            flush(&mut pending, &mut out);
            pending_bytes = 0;
        }
        pending_session = session_id.as_deref();
        if message.scheduled_at.is_some() {
            flush(&mut pending, &mut out);
            pending_bytes = 0;
            out.push(Chunk::Single(amqp));
            continue;
        }
        let encoded = mapping::encode(&amqp)?;
        let size = encoded.len() + PER_MESSAGE;
        if !pending.is_empty() && pending_bytes + size + ENVELOPE > limit {
            flush(&mut pending, &mut out);
            pending_bytes = 0;
        }
        pending_bytes += size;
        pending.push((amqp, encoded));
    }
    flush(&mut pending, &mut out);
    Ok(out)
}
