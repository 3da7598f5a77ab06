//! An in-memory transport with the same peek-lock semantics as the embedded
//! one, for unit tests of the consumer host, and beside it an in-memory
//! store ([`store::MemoryStore`]) for unit tests and for trying bosun
//! without a disk: nothing either keeps survives the process.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::Destination;
use time::OffsetDateTime;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::ports::transport::{
    DeadLetteredMessage, LockToken, OutboundMessage, ReceivedMessage, Topology, Transport, TransportAdmin,
    TransportError,
};

pub mod store;

#[derive(Debug, Clone)]
struct Row {
    sequence: i64,
    entity: String,
    broker_message_id: String,
    message_type: Option<String>,
    body: Vec<u8>,
    enqueued_at: OffsetDateTime,
    visible_at: OffsetDateTime,
    delivery_count: u32,
    lock: Option<(Uuid, OffsetDateTime)>,
    dead: Option<(String, String, OffsetDateTime)>,
}

#[derive(Debug, Default)]
struct State {
    next_sequence: i64,
    rows: Vec<Row>,
    seen: HashSet<(String, String)>,
    queues: HashSet<String>,
    subscriptions: HashMap<(String, String), Vec<String>>,
}

/// The in-memory transport.
#[derive(Debug, Clone)]
pub struct MemoryTransport {
    state: Arc<Mutex<State>>,
    max_delivery_count: u32,
    arrivals: Arc<Notify>,
}

impl MemoryTransport {
    /// A new, empty transport.
    pub fn new(max_delivery_count: u32) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::default())),
            max_delivery_count,
            arrivals: Arc::new(Notify::new()),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut guard = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    }
}

fn lock_lost(lock: &LockToken) -> TransportError {
    TransportError::LockLost {
        entity: lock.entity.path(),
        sequence: lock.sequence,
    }
}

fn held(row: &Row, lock: &LockToken, now: OffsetDateTime) -> bool {
    row.sequence == lock.sequence
        && row.dead.is_none()
        && row
            .lock
            .is_some_and(|(token, until)| token == lock.token && until > now)
}

#[async_trait]
impl Transport for MemoryTransport {
    async fn ensure_topology(&self, topology: &Topology) -> Result<(), TransportError> {
        self.with(|state| {
            state.queues.extend(topology.queues.iter().cloned());
            for subscription in &topology.subscriptions {
                state.subscriptions.insert(
                    (topology.topic.clone(), subscription.name.clone()),
                    subscription.event_types.clone(),
                );
            }
        });
        Ok(())
    }

    async fn send(&self, messages: Vec<OutboundMessage>) -> Result<(), TransportError> {
        self.with(|state| {
            let now = OffsetDateTime::now_utc();
            for message in &messages {
                let known = match &message.destination {
                    Destination::Queue(name) => state.queues.contains(name),
                    Destination::Topic(topic) => state.subscriptions.keys().any(|(t, _)| t == topic),
                    Destination::Subscription { topic, subscription } => {
                        state.subscriptions.contains_key(&(topic.clone(), subscription.clone()))
                    }
                };
                if !known {
                    return Err(TransportError::NoSuchEntity(message.destination.path()));
                }
            }
            for message in messages {
                if !state
                    .seen
                    .insert((message.destination.path(), message.broker_message_id.clone()))
                {
                    continue;
                }
                let entities: Vec<String> = match &message.destination {
                    Destination::Topic(topic) => state
                        .subscriptions
                        .iter()
                        .filter(|((t, _), types)| {
                            t == topic && message.message_type.as_ref().is_some_and(|m| types.contains(m))
                        })
                        .map(|((t, name), _)| format!("{t}/subscriptions/{name}"))
                        .collect(),
                    other => vec![other.path()],
                };
                for entity in entities {
                    state.next_sequence += 1;
                    let row = Row {
                        sequence: state.next_sequence,
                        entity,
                        broker_message_id: message.broker_message_id.clone(),
                        message_type: message.message_type.clone(),
                        body: message.body.clone(),
                        enqueued_at: now,
                        visible_at: message.scheduled_at.unwrap_or(now),
                        delivery_count: 0,
                        lock: None,
                        dead: None,
                    };
                    state.rows.push(row);
                }
            }
            Ok(())
        })?;
        self.arrivals.notify_waiters();
        Ok(())
    }

    async fn receive(
        &self,
        entity: &Destination,
        max: usize,
        lock_duration: Duration,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        let path = entity.path();
        let max_delivery_count = self.max_delivery_count;
        Ok(self.with(|state| {
            let now = OffsetDateTime::now_utc();
            let token = Uuid::now_v7();
            let mut received = Vec::new();
            for row in state
                .rows
                .iter_mut()
                .filter(|row| row.entity == path && row.dead.is_none())
            {
                let ready = row.visible_at <= now && row.lock.is_none_or(|(_, until)| until <= now);
                if !ready {
                    continue;
                }
                if row.delivery_count >= max_delivery_count {
                    row.lock = None;
                    row.dead = Some((
                        "MaxDeliveryCountExceeded".to_owned(),
                        format!(
                            "message was delivered {} times without being completed",
                            row.delivery_count
                        ),
                        now,
                    ));
                    continue;
                }
                if received.len() >= max {
                    continue;
                }
                row.delivery_count += 1;
                let until = now + lock_duration;
                row.lock = Some((token, until));
                received.push(ReceivedMessage {
                    lock: LockToken {
                        entity: entity.clone(),
                        sequence: row.sequence,
                        token,
                    },
                    broker_message_id: row.broker_message_id.clone(),
                    message_type: row.message_type.clone(),
                    body: row.body.clone(),
                    delivery_count: row.delivery_count,
                    enqueued_at: row.enqueued_at,
                    locked_until: until,
                    handled: None,
                });
            }
            received
        }))
    }

    async fn wait_for_messages(&self, _entity: &Destination, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.arrivals.notified()).await;
    }

    async fn renew_lock(&self, lock: &LockToken, lock_duration: Duration) -> Result<OffsetDateTime, TransportError> {
        self.with(|state| {
            let now = OffsetDateTime::now_utc();
            let row = state
                .rows
                .iter_mut()
                .find(|row| held(row, lock, now))
                .ok_or_else(|| lock_lost(lock))?;
            let until = now + lock_duration;
            row.lock = Some((lock.token, until));
            Ok(until)
        })
    }

    async fn is_locked(&self, lock: &LockToken) -> Result<bool, TransportError> {
        let now = OffsetDateTime::now_utc();
        Ok(self.with(|state| state.rows.iter().any(|row| held(row, lock, now))))
    }

    async fn complete(&self, lock: &LockToken) -> Result<(), TransportError> {
        self.with(|state| {
            let now = OffsetDateTime::now_utc();
            let index = state
                .rows
                .iter()
                .position(|row| held(row, lock, now))
                .ok_or_else(|| lock_lost(lock))?;
            state.rows.remove(index);
            Ok(())
        })
    }

    async fn abandon(&self, lock: &LockToken) -> Result<(), TransportError> {
        self.with(|state| {
            let now = OffsetDateTime::now_utc();
            let row = state
                .rows
                .iter_mut()
                .find(|row| held(row, lock, now))
                .ok_or_else(|| lock_lost(lock))?;
            row.lock = None;
            Ok::<_, TransportError>(())
        })?;
        self.arrivals.notify_waiters();
        Ok(())
    }

    async fn dead_letter(&self, lock: &LockToken, reason: &str, description: &str) -> Result<(), TransportError> {
        self.with(|state| {
            let now = OffsetDateTime::now_utc();
            let row = state
                .rows
                .iter_mut()
                .find(|row| held(row, lock, now))
                .ok_or_else(|| lock_lost(lock))?;
            row.lock = None;
            row.dead = Some((reason.to_owned(), description.to_owned(), now));
            Ok(())
        })
    }

    async fn reachable(&self) -> Result<(), TransportError> {
        Ok(())
    }
}

#[async_trait]
impl TransportAdmin for MemoryTransport {
    async fn peek_dead_letters(
        &self,
        entity: &Destination,
        max: usize,
    ) -> Result<Vec<DeadLetteredMessage>, TransportError> {
        let path = entity.path();
        Ok(self.with(|state| {
            state
                .rows
                .iter()
                .filter(|row| row.entity == path)
                .filter_map(|row| {
                    row.dead.as_ref().map(|(reason, description, at)| DeadLetteredMessage {
                        entity: entity.clone(),
                        sequence: row.sequence,
                        broker_message_id: row.broker_message_id.clone(),
                        message_type: row.message_type.clone(),
                        body: row.body.clone(),
                        delivery_count: row.delivery_count,
                        reason: reason.clone(),
                        description: description.clone(),
                        enqueued_at: row.enqueued_at,
                        dead_lettered_at: *at,
                    })
                })
                .take(max)
                .collect()
        }))
    }

    async fn remove_dead_letter(&self, entity: &Destination, sequence: i64) -> Result<bool, TransportError> {
        let path = entity.path();
        Ok(self.with(|state| {
            let before = state.rows.len();
            state
                .rows
                .retain(|row| !(row.entity == path && row.sequence == sequence && row.dead.is_some()));
            before != state.rows.len()
        }))
    }

    async fn depth(&self, entity: &Destination) -> Result<u64, TransportError> {
        let path = entity.path();
        Ok(self.with(|state| {
            state
                .rows
                .iter()
                .filter(|row| row.entity == path && row.dead.is_none())
                .count() as u64
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_transport_passes_the_behaviour_suite() {
        crate::ports::behaviour::transport::run_all(|max| async move { MemoryTransport::new(max) }).await;
    }
}
