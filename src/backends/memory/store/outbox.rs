//! The outbox: messages to send, written with the handling that made them.

use std::collections::BTreeMap;
use std::time::Duration;

use bosun_contracts::Destination;
use time::OffsetDateTime;

use super::{MemoryStore, after, ms, now};
use crate::ports::store::OutboxStore;
use crate::ports::store::{AcceptedCommand, OutboxPurpose, PendingOutbox, StoreError};
use crate::ports::transport::OutboundMessage;

/// Every outbox entry by id, in the order written.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    last_id: i64,
    pub(super) entries: BTreeMap<i64, Entry>,
}

/// One outbox entry.
#[derive(Debug)]
pub(super) struct Entry {
    purpose: OutboxPurpose,
    message: OutboundMessage,
    /// The message whose handling wrote it (none for a command).
    source_message_id: Option<String>,
    /// Until when a dispatcher holds it.
    claimed_until: Option<OffsetDateTime>,
    /// When it was sent.
    pub(super) dispatched_at: Option<OffsetDateTime>,
}

impl Outbox {
    /// Adds `message`, written for `purpose` by the handling of
    /// `message_id` (none: a command); returns its id. (The durable stores
    /// also keep the consumer that wrote it and when, for operators; nothing
    /// reads those through the port.)
    pub(super) fn insert(&mut self, message_id: Option<&str>, purpose: OutboxPurpose, message: OutboundMessage) -> i64 {
        self.last_id += 1;
        let message = OutboundMessage {
            // As the durable stores keep it: by its path.
            destination: Destination::parse(&message.destination.path()),
            scheduled_at: message.scheduled_at.map(ms),
            ..message
        };
        self.entries.insert(
            self.last_id,
            Entry {
                purpose,
                message,
                source_message_id: message_id.map(str::to_owned),
                claimed_until: None,
                dispatched_at: None,
            },
        );
        self.last_id
    }
}

#[async_trait::async_trait]
impl OutboxStore for MemoryStore {
    async fn accept_command(&self, accepted: AcceptedCommand, lease: Duration) -> Result<i64, StoreError> {
        let lines = self.waited_on([&accepted.timeline]);
        let AcceptedCommand {
            delivery,
            message,
            timeline,
        } = accepted;
        let id = self.with(|state| {
            let now = now();
            state.deliveries.insert(delivery);
            let id = state.outbox.insert(None, OutboxPurpose::Sent, message);
            if let Some(entry) = state.outbox.entries.get_mut(&id) {
                entry.claimed_until = Some(after(now, lease));
            }
            state.timeline.append([timeline]);
            id
        });
        self.written(&lines);
        Ok(id)
    }

    async fn claim_outbox(&self, limit: usize, lease: Duration) -> Result<Vec<PendingOutbox>, StoreError> {
        Ok(self.with(|state| {
            let now = now();
            state
                .outbox
                .entries
                .iter_mut()
                .filter(|(_, entry)| {
                    entry.dispatched_at.is_none() && entry.claimed_until.is_none_or(|until| until <= now)
                })
                .take(limit)
                .map(|(id, entry)| {
                    entry.claimed_until = Some(after(now, lease));
                    PendingOutbox {
                        id: *id,
                        purpose: entry.purpose,
                        message: entry.message.clone(),
                        message_id: entry.source_message_id.clone(),
                    }
                })
                .collect()
        }))
    }

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError> {
        self.with(|state| {
            let now = now();
            for id in ids {
                if let Some(entry) = state.outbox.entries.get_mut(id) {
                    entry.dispatched_at = Some(now);
                }
            }
        });
        Ok(())
    }

    async fn outbox_backlog(&self) -> Result<u64, StoreError> {
        Ok(self.with(|state| {
            let unsent = state
                .outbox
                .entries
                .values()
                .filter(|entry| entry.dispatched_at.is_none())
                .count();
            u64::try_from(unsent).unwrap_or(u64::MAX)
        }))
    }

    async fn emitted(&self, correlation_id: &str) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(self.with(|state| {
            state
                .outbox
                .entries
                .values()
                .filter(|entry| {
                    entry.purpose != OutboxPurpose::Retry
                        && entry.message.correlation_id.as_deref() == Some(correlation_id)
                })
                .map(|entry| entry.message.body.clone())
                .collect()
        }))
    }
}
