//! The entities bosun needs, derived from the contracts' routing table.

use bosun_contracts::Destination;
use bosun_contracts::routing::{CONSUMERS, EVENTS_TOPIC};

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
}

impl Topology {
    /// The topology of all eleven consumers.
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
        }
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
