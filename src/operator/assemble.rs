//! A delivery from what is stored, without I/O: its timeline lines grouped
//! by message, each message's status ([`super::status`]), and the
//! delivery's status from them and the messages its consumers emitted.

use bosun_contracts::routing::{command_handler, event_subscribers};
use bosun_contracts::{MessageKind, MessageSpec};

use crate::operator::{DeliveryMessage, status};
use crate::ports::store::{TimelineEntry, TimelineStatus};

/// The consumers a message of this type is routed to.
pub(crate) fn expected_consumers(message_type: &str) -> Vec<&'static str> {
    match MessageSpec::find(message_type).map(|spec| spec.kind) {
        Some(MessageKind::Command) => command_handler(message_type).map(|c| c.name).into_iter().collect(),
        Some(MessageKind::Event) => event_subscribers(message_type).map(|c| c.name).collect(),
        None => Vec::new(),
    }
}

/// Whether every consumer a message is routed to has handled it.
fn handled_everywhere(message_type: &str, events: &[TimelineEntry]) -> bool {
    status::handled_everywhere(&expected_consumers(message_type), events)
}

/// The delivery's messages in the order they first appear in `lines`, each
/// with its lines, consumers, attempts (the highest `attemptNumber` of its
/// handling lines) and status. Their summaries are left to the caller.
pub(crate) fn messages_of(lines: &[TimelineEntry]) -> Vec<DeliveryMessage> {
    let mut messages: Vec<DeliveryMessage> = Vec::new();
    for line in lines.iter().cloned() {
        let index = match messages.iter().position(|m| m.message_id == line.message_id) {
            Some(index) => index,
            None => {
                messages.push(DeliveryMessage {
                    message_id: line.message_id.clone(),
                    message_type: line.message_type.clone(),
                    consumers: Vec::new(),
                    status: line.status,
                    by_consumer: Vec::new(),
                    attempts: 0,
                    first_seen: line.at,
                    last_update: line.at,
                    summary: None,
                    events: Vec::new(),
                });
                messages.len() - 1
            }
        };
        let message = &mut messages[index];
        if let Some(consumer) = line.consumer.as_ref().filter(|c| !message.consumers.contains(c)) {
            message.consumers.push(consumer.clone());
        }
        if matches!(
            line.status,
            TimelineStatus::Completed | TimelineStatus::RetryScheduled | TimelineStatus::DeadLettered
        ) {
            message.attempts = message.attempts.max(line.attempt_number());
        }
        message.first_seen = message.first_seen.min(line.at);
        message.last_update = message.last_update.max(line.at);
        message.events.push(line);
    }
    for message in &mut messages {
        message.by_consumer = status::consumer_statuses(&expected_consumers(&message.message_type), &message.events);
        message.status = status::message_status(&message.by_consumer, &message.events);
    }
    messages
}

/// The delivery's status: `failed` when a message is dead-lettered (and
/// not replayed since) or the release was blocked or rejected; `completed`
/// when every message on the timeline, and every message a consumer
/// emitted (`emitted`: id and type, sent or still in the outbox), was
/// handled by every consumer it is routed to; `in-progress` otherwise.
pub(crate) fn delivery_status(messages: &[DeliveryMessage], emitted: &[(String, String)]) -> &'static str {
    let stopped = messages
        .iter()
        .any(|m| matches!(m.message_type.as_str(), "ReleaseBlocked" | "ReleaseRejected"));
    let failed = stopped || messages.iter().any(|m| m.status == TimelineStatus::DeadLettered);
    // Messages consumers emitted are committed with the handling of their
    // cause, before the dispatcher's `sent` line: a delivery is not
    // complete while one of them waits in the outbox.
    let settled = messages.iter().all(|m| handled_everywhere(&m.message_type, &m.events))
        && emitted.iter().all(
            |(id, message_type)| match messages.iter().find(|m| &m.message_id == id) {
                Some(message) => handled_everywhere(message_type, &message.events),
                None => expected_consumers(message_type).is_empty(),
            },
        );
    if failed {
        "failed"
    } else if settled {
        "completed"
    } else {
        "in-progress"
    }
}
