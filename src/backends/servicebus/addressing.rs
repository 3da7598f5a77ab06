//! Where each outgoing message goes on Service Bus, and with which session
//! id. Pure: no I/O, unit-tested here.
//!
//! A message to a session-keyed consumer's queue or subscription (a
//! command, a retry, a replay) carries that consumer's saga key as its
//! session id ([`Topology::session_id`], computed from the envelope bytes
//! alone, so every sender agrees). An event has one session id but may fan
//! out to several session subscriptions keyed differently
//! (`InfrastructureProvisioned`: by release for release-orchestration, by
//! environment for gitops-sync), so an event some session subscription
//! receives is sent as
//! - one untargeted copy, as before, when a subscription without sessions
//!   receives it too (their `bosun-types` rules take it), and
//! - one copy per session subscription that receives it, addressed to it
//!   with `replayTo` (its `bosun-replay` rule takes it; its `bosun-types`
//!   rule takes nothing, so it gets exactly one copy) and carrying its
//!   session id, under the broker message id `<id>.to-<subscription>`, so
//!   the topic's duplicate detection keeps the copies apart (and drops a
//!   repeated send of any of them).
//!
//! The other transports ignore sessions: their own per-key turns give the
//! same one-at-a-time handling.

use bosun_contracts::Destination;

use crate::ports::topology::Topology;
use crate::ports::transport::OutboundMessage;

/// The broker message id suffix of a session subscription's copy of an
/// event: `<id>.to-<subscription>`.
pub(crate) const COPY_SUFFIX: &str = ".to-";

/// A message as Service Bus gets it: the message, and the session id it
/// carries (AMQP `group-id`), if its entity requires sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Addressed {
    /// The message (for a copy, its destination is the one subscription).
    pub(crate) message: OutboundMessage,
    /// Its session id.
    pub(crate) session_id: Option<String>,
}

/// The sends `message` becomes on Service Bus under `topology`.
///
/// A message for one subscription (a retry, a wait, a replay of an event)
/// goes through the topic, whose duplicate detection is topic-wide: its
/// broker message id gets the subscription's [`COPY_SUFFIX`] (unless it
/// ends with it already), so two consumers' retries of one event — both
/// `<id>.retry-1` — are two messages, not one dropped as a duplicate of
/// the other.
pub(crate) fn address(topology: &Topology, mut message: OutboundMessage) -> Vec<Addressed> {
    let consumer = match &message.destination {
        Destination::Queue(name) => Some(name.clone()),
        Destination::Subscription { topic, subscription } if *topic == topology.topic => Some(subscription.clone()),
        Destination::Subscription { .. } => None,
        Destination::Topic(topic) => return fan_out(topology, topic.clone(), message),
    };
    let session_id = consumer.and_then(|name| topology.session_id(&name, &message.body, &message.broker_message_id));
    if let Destination::Subscription { subscription, .. } = &message.destination {
        let own = format!("{COPY_SUFFIX}{subscription}");
        if !message.broker_message_id.ends_with(&own) {
            message.broker_message_id.push_str(&own);
        }
    }
    vec![Addressed { message, session_id }]
}

/// An event to `topic`: one untargeted copy for the subscriptions without
/// sessions, one addressed copy per session subscription.
fn fan_out(topology: &Topology, topic: String, message: OutboundMessage) -> Vec<Addressed> {
    let (keyed, plain): (Vec<_>, Vec<_>) = topology
        .matching_subscriptions(&topic, message.message_type.as_deref())
        .partition(|subscription| topology.session_keyed(&subscription.name).is_some());
    if keyed.is_empty() {
        return vec![Addressed {
            message,
            session_id: None,
        }];
    }
    let mut out = Vec::with_capacity(keyed.len() + 1);
    for subscription in keyed {
        let mut copy = message.clone();
        copy.destination = Destination::Subscription {
            topic: topic.clone(),
            subscription: subscription.name.clone(),
        };
        copy.broker_message_id = format!("{}{COPY_SUFFIX}{}", message.broker_message_id, subscription.name);
        let session_id = topology.session_id(&subscription.name, &copy.body, &message.broker_message_id);
        out.push(Addressed {
            message: copy,
            session_id,
        });
    }
    if !plain.is_empty() {
        out.insert(
            0,
            Addressed {
                message,
                session_id: None,
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use bosun_contracts::routing::EVENTS_TOPIC;
    use bosun_contracts::{Envelope, Message};

    use super::*;
    use crate::ports::topology::{OWN_SESSION_PREFIX, SessionKeyed};

    fn release_key(envelope: &Envelope, message: &Message) -> Option<(&'static str, String)> {
        match message {
            Message::InfrastructureProvisioned(m) => m
                .release_id
                .clone()
                .map(|release| ("release", format!("{}/{release}", envelope.tenant_id))),
            _ => None,
        }
    }

    fn environment_key(envelope: &Envelope, message: &Message) -> Option<(&'static str, String)> {
        match message {
            Message::InfrastructureProvisioned(m) => {
                Some(("gitops", format!("{}/{}", envelope.tenant_id, m.environment)))
            }
            _ => None,
        }
    }

    fn topology() -> Topology {
        Topology::from_routing().with_sessions([
            SessionKeyed {
                consumer: "release-orchestration",
                key: release_key,
            },
            SessionKeyed {
                consumer: "gitops-sync",
                key: environment_key,
            },
        ])
    }

    fn provisioned() -> OutboundMessage {
        let sample = bosun_contracts::samples::sample("InfrastructureProvisioned").expect("a sample");
        let Message::InfrastructureProvisioned(mut payload) = sample else {
            panic!("the sample is an InfrastructureProvisioned");
        };
        payload.release_id = Some("rel-7".into());
        payload.environment = "prod".into();
        payload.preview_only = false;
        let envelope = Envelope::new(
            &Message::InfrastructureProvisioned(payload),
            uuid::Uuid::now_v7(),
            "acme",
            "iac-provisioning",
        );
        OutboundMessage {
            destination: Destination::Topic(EVENTS_TOPIC.into()),
            broker_message_id: envelope.message_id.to_string(),
            message_type: Some("InfrastructureProvisioned".into()),
            correlation_id: None,
            body: envelope.to_vec(),
            scheduled_at: None,
        }
    }

    #[test]
    fn two_consumers_retries_of_one_event_are_two_messages_to_the_topic() {
        let retry = |subscription: &str| {
            let mut message = provisioned();
            message.destination = Destination::Subscription {
                topic: EVENTS_TOPIC.into(),
                subscription: subscription.into(),
            };
            message.broker_message_id = format!("{}.retry-1", message.broker_message_id);
            address(&topology(), message).remove(0).message.broker_message_id
        };
        let (first, second) = (retry("container-build"), retry("package-publishing"));
        assert_ne!(first, second, "the topic's duplicate detection would drop one");
        assert!(first.ends_with(".retry-1.to-container-build"), "{first}");
        // Addressed again (a retry of that copy keeps its base), the suffix
        // is not repeated.
        let mut again = provisioned();
        again.destination = Destination::Subscription {
            topic: EVENTS_TOPIC.into(),
            subscription: "container-build".into(),
        };
        again.broker_message_id = first.clone();
        assert_eq!(address(&topology(), again).remove(0).message.broker_message_id, first);
    }

    #[test]
    fn an_event_for_two_session_subscriptions_is_one_copy_each_with_its_own_session() {
        let message = provisioned();
        let sent = address(&topology(), message.clone());
        assert_eq!(sent.len(), 2, "no subscription without sessions takes it: {sent:#?}");
        let by = |name: &str| {
            sent.iter()
                .find(|a| {
                    a.message.destination
                        == Destination::Subscription {
                            topic: EVENTS_TOPIC.into(),
                            subscription: name.into(),
                        }
                })
                .unwrap_or_else(|| panic!("a copy for {name}: {sent:#?}"))
        };
        let release = by("release-orchestration");
        assert_eq!(release.session_id.as_deref(), Some("acme/rel-7"));
        assert_eq!(
            release.message.broker_message_id,
            format!("{}.to-release-orchestration", message.broker_message_id)
        );
        let gitops = by("gitops-sync");
        assert_eq!(gitops.session_id.as_deref(), Some("acme/prod"));
        assert_ne!(release.message.broker_message_id, gitops.message.broker_message_id);
        assert_eq!(release.message.body, message.body, "the envelope, byte for byte");
    }

    #[test]
    fn subscriptions_without_sessions_get_one_untargeted_copy() {
        let mut message = provisioned();
        // BuildCompleted: release-orchestration (sessions) and
        // container-build, package-publishing (none).
        message.message_type = Some("BuildCompleted".into());
        let sent = address(&topology(), message.clone());
        assert_eq!(sent.len(), 2, "{sent:#?}");
        assert_eq!(sent[0].message, message, "the untargeted copy, as before");
        assert_eq!(sent[0].session_id, None);
        assert!(
            matches!(&sent[1].message.destination, Destination::Subscription { subscription, .. } if subscription == "release-orchestration")
        );
        // The key comes from the envelope (still the InfrastructureProvisioned).
        assert_eq!(sent[1].session_id.as_deref(), Some("acme/rel-7"));

        let mut plain = message;
        plain.message_type = Some("CommitCreated".into());
        assert_eq!(
            address(&topology(), plain.clone()),
            [Addressed {
                message: plain,
                session_id: None
            }],
            "no session subscription receives it"
        );
    }

    #[test]
    fn queue_and_subscription_sends_carry_their_consumers_session() {
        let mut message = provisioned();
        message.destination = Destination::Subscription {
            topic: EVENTS_TOPIC.into(),
            subscription: "gitops-sync".into(),
        };
        message.broker_message_id = format!("{}.retry-2", message.broker_message_id);
        let sent = address(&topology(), message.clone());
        let mut expected = message.clone();
        expected.broker_message_id.push_str(".to-gitops-sync");
        assert_eq!(
            sent,
            [Addressed {
                message: expected,
                session_id: Some("acme/prod".into())
            }],
            "a retry or replay to one subscription keeps its saga's session"
        );
        message.destination = Destination::Queue("commit".into());
        assert_eq!(
            address(&topology(), message)[0].session_id,
            None,
            "commit has no sessions"
        );
    }

    #[test]
    fn a_body_that_is_no_envelope_is_a_session_of_its_own() {
        let topology = topology();
        assert_eq!(
            topology.session_id("gitops-sync", b"not json", "m-1"),
            Some(format!("{OWN_SESSION_PREFIX}m-1"))
        );
        assert_eq!(topology.session_id("commit", b"not json", "m-1"), None);
    }
}
