//! The entities bosun needs, derived from the contracts' routing table,
//! and which of them are session-keyed: the consumers whose messages are
//! handled one saga key at a time by the broker (Service Bus sessions;
//! the other transports have their own per-key turns and ignore it).
//!
//! Which consumers are session-keyed, and by what, is declared once per
//! consumer in its registration (`runtime::registry`, which builds the
//! full topology with [`Topology::with_sessions`]); this module only says
//! what a session id is made of ([`Topology::session_id`]).

use bosun_contracts::routing::{CONSUMERS, EVENTS_TOPIC};
use bosun_contracts::{Destination, Envelope, Message};
use sha2::{Digest, Sha256};

/// The saga (kind, key) a message of a consumer belongs to: the pure
/// function the consumer's `Consumer::saga_of` calls.
pub type SagaKeyFn = fn(&Envelope, &Message) -> Option<(&'static str, String)>;

/// A consumer whose messages are session-keyed by its saga key: on Service
/// Bus its queue and its subscription require sessions, and every message
/// to them carries the key as its session id.
#[derive(Clone, Copy)]
pub struct SessionKeyed {
    /// The consumer (its queue and subscription name).
    pub consumer: &'static str,
    /// Its saga key of a message.
    pub key: SagaKeyFn,
}

impl std::fmt::Debug for SessionKeyed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionKeyed")
            .field("consumer", &self.consumer)
            .finish_non_exhaustive()
    }
}

impl PartialEq for SessionKeyed {
    /// One consumer has one key function (its registration's).
    fn eq(&self, other: &Self) -> bool {
        self.consumer == other.consumer
    }
}

impl Eq for SessionKeyed {}

/// The longest session id Service Bus takes.
pub const SESSION_ID_MAX_CHARS: usize = 128;

/// The prefix of a session id that is not a saga key: a message of a
/// session-keyed consumer that belongs to no saga (a `Probe` command, a
/// release-orchestration event of no release) is its own session,
/// `~m/<messageId>`. A saga key starts with its tenant id, which never
/// starts with `~`, so the two cannot collide.
pub const OWN_SESSION_PREFIX: &str = "~m/";

/// The prefix of a saga key too long for a session id, hashed.
pub const HASHED_SESSION_PREFIX: &str = "~h/";

/// One subscription on the events topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// Subscription name (the consumer name).
    pub name: String,
    /// Event types it lets through (its filter).
    pub event_types: Vec<String>,
}

/// Queues, the events topic and its subscriptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// One queue per consumer.
    pub queues: Vec<String>,
    /// The events topic.
    pub topic: String,
    /// One subscription per consumer that handles events.
    pub subscriptions: Vec<Subscription>,
    /// The session-keyed consumers (empty from [`Topology::from_routing`];
    /// the registry's full topology has them).
    pub sessions: Vec<SessionKeyed>,
}

impl Topology {
    /// The entities of every consumer, none session-keyed: enough for the
    /// transports that ignore sessions. Service Bus needs the registry's
    /// (`runtime::registry::topology`), which adds the sessions.
    pub fn from_routing() -> Self {
        Self {
            queues: CONSUMERS.iter().map(|route| route.name.to_owned()).collect(),
            topic: EVENTS_TOPIC.to_owned(),
            subscriptions: CONSUMERS
                .iter()
                .filter(|route| !route.events.is_empty())
                .map(|route| Subscription {
                    name: route.name.to_owned(),
                    event_types: route.events.iter().map(|t| (*t).to_owned()).collect(),
                })
                .collect(),
            sessions: Vec::new(),
        }
    }

    /// This topology with `sessions` session-keyed.
    pub fn with_sessions(mut self, sessions: impl IntoIterator<Item = SessionKeyed>) -> Self {
        self.sessions.extend(sessions);
        self
    }

    /// The session key of `consumer`, if it is session-keyed.
    pub fn session_keyed(&self, consumer: &str) -> Option<&SessionKeyed> {
        self.sessions.iter().find(|keyed| keyed.consumer == consumer)
    }

    /// Whether a queue or subscription requires sessions (its consumer is
    /// session-keyed).
    pub fn requires_session(&self, entity: &Destination) -> bool {
        match entity {
            Destination::Queue(name) => self.session_keyed(name).is_some(),
            Destination::Subscription { topic, subscription } => {
                *topic == self.topic && self.session_keyed(subscription).is_some()
            }
            Destination::Topic(_) => false,
        }
    }

    /// The session id of a message to a session-keyed `consumer` (`None`
    /// for another consumer): its saga key, computed from the envelope
    /// bytes alone, so any sender computes the same one. A message of no
    /// saga, whose payload is claim-checked (the key is in the blob) or
    /// that does not read as a message is its own session,
    /// `~m/<messageId>` (`~m/<broker message id>` without an envelope):
    /// stable across its retries and replays, and never a saga key.
    pub fn session_id(&self, consumer: &str, body: &[u8], broker_message_id: &str) -> Option<String> {
        let keyed = self.session_keyed(consumer)?;
        let Ok(envelope) = Envelope::from_slice(body) else {
            return Some(bounded(format!("{OWN_SESSION_PREFIX}{broker_message_id}")));
        };
        let key = envelope
            .decode()
            .ok()
            .and_then(|message| (keyed.key)(&envelope, &message))
            .map(|(_, key)| key);
        Some(bounded(key.unwrap_or_else(|| {
            format!("{OWN_SESSION_PREFIX}{}", envelope.message_id)
        })))
    }

    /// Every entity messages are received from: queues and subscriptions.
    pub fn receive_entities(&self) -> Vec<Destination> {
        let mut entities: Vec<Destination> = self.queues.iter().map(|q| Destination::Queue(q.clone())).collect();
        entities.extend(self.subscriptions.iter().map(|s| Destination::Subscription {
            topic: self.topic.clone(),
            subscription: s.name.clone(),
        }));
        entities
    }

    /// The subscriptions of `topic` that let `message_type` through.
    pub fn matching_subscriptions<'a>(
        &'a self,
        topic: &'a str,
        message_type: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Subscription> + 'a {
        self.subscriptions.iter().filter(move |subscription| {
            topic == self.topic && message_type.is_some_and(|t| subscription.event_types.iter().any(|e| e == t))
        })
    }
}

/// A session id within Service Bus's limit: a longer key (a 63-character
/// tenant and a 128-character release id) becomes `~h/` and its SHA-256.
fn bounded(key: String) -> String {
    if key.chars().count() <= SESSION_ID_MAX_CHARS {
        return key;
    }
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{HASHED_SESSION_PREFIX}{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_consumer_has_a_queue_and_event_consumers_a_subscription() {
        let topology = Topology::from_routing();
        assert_eq!(topology.queues.len(), 12);
        assert!(
            topology
                .subscriptions
                .iter()
                .any(|s| s.name == "pull-request" && s.event_types == ["CommitCreated"])
        );
        let matching: Vec<_> = topology
            .matching_subscriptions(EVENTS_TOPIC, Some("BuildCompleted"))
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(
            matching,
            ["release-orchestration", "container-build", "package-publishing"]
        );
    }
}
