//! Routing: which queue each command goes to and which consumers subscribe
//! to each event.
//!
//! Commands go to one queue per consumer, named after the consumer. Events go
//! to the one [`EVENTS_TOPIC`], with a subscription per consumer (named after
//! the consumer) whose filter is the list of event types it handles. The
//! Service Bus topology and the Kubernetes manifests are generated from this
//! table.

use crate::messages::{MessageKind, MessageSpec};

/// The topic every event is published to.
pub const EVENTS_TOPIC: &str = "bosun-events";

/// A consumer's name, e.g. `repository-provisioning`.
pub type ConsumerName = &'static str;

/// What one consumer receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerRoute {
    /// Consumer name; also its queue name and its subscription name.
    pub name: ConsumerName,
    /// Commands it receives on its queue.
    pub commands: &'static [&'static str],
    /// Event types its subscription on the events topic lets through.
    pub events: &'static [&'static str],
}

impl ConsumerRoute {
    /// The queue its commands arrive on.
    pub fn queue(&self) -> Destination {
        Destination::Queue(self.name.to_owned())
    }

    /// Its subscription on the events topic.
    pub fn subscription(&self) -> Destination {
        Destination::Subscription {
            topic: EVENTS_TOPIC.to_owned(),
            subscription: self.name.to_owned(),
        }
    }

    /// Whether its subscription lets this event type through.
    pub fn subscribes_to(&self, event_type: &str) -> bool {
        self.events.contains(&event_type)
    }
}

/// The eleven delivery consumers and the `probe` consumer (a built-in
/// canary), and what each receives.
pub const CONSUMERS: &[ConsumerRoute] = &[
    ConsumerRoute {
        name: "repository-provisioning",
        commands: &["ProvisionRepository"],
        events: &[],
    },
    ConsumerRoute {
        name: "commit",
        commands: &["CreateCommit"],
        events: &[],
    },
    ConsumerRoute {
        name: "pull-request",
        commands: &["OpenPullRequest"],
        events: &["CommitCreated"],
    },
    ConsumerRoute {
        name: "pipeline-generation",
        commands: &["GeneratePipeline"],
        events: &["RepositoryProvisioned", "PullRequestOpened"],
    },
    ConsumerRoute {
        name: "pipeline-monitor",
        commands: &["PollPipelineRun"],
        events: &["PipelineRunStarted"],
    },
    ConsumerRoute {
        name: "build-ingestion",
        commands: &[],
        events: &["PipelineRunCompleted"],
    },
    ConsumerRoute {
        name: "release-orchestration",
        commands: &[
            "ApproveRelease",
            "RejectRelease",
            "ReleaseApprovalTimeout",
            "ReleaseWindowCheck",
            "OverrideReleaseWindow",
            "ReleaseVerificationCheck",
        ],
        events: &[
            "BuildCompleted",
            "ContainerImageBuilt",
            "PackagePublished",
            "InfrastructureProvisioned",
            "GitOpsSynced",
            "ReleaseDecisionRecorded",
        ],
    },
    ConsumerRoute {
        name: "iac-provisioning",
        commands: &["ProvisionInfrastructure"],
        events: &["ReleaseApproved"],
    },
    ConsumerRoute {
        name: "gitops-sync",
        commands: &["ReconcileEnvironment", "RollbackEnvironment"],
        events: &["DeploymentPromoted", "InfrastructureProvisioned", "ReleaseVerified"],
    },
    ConsumerRoute {
        name: "container-build",
        commands: &["PollContainerBuild"],
        events: &["BuildCompleted"],
    },
    ConsumerRoute {
        name: "package-publishing",
        commands: &[],
        events: &["BuildCompleted"],
    },
    ConsumerRoute {
        name: "probe",
        commands: &["Probe"],
        events: &["ProbeEchoed"],
    },
];

/// Where a message is sent or received.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Destination {
    /// A queue (one per consumer, for commands).
    Queue(String),
    /// A topic (the events topic); fans out to matching subscriptions.
    Topic(String),
    /// One subscription of a topic: used to receive, and to replay an event
    /// to one consumer only.
    Subscription {
        /// The topic.
        topic: String,
        /// The subscription (a consumer name).
        subscription: String,
    },
}

impl Destination {
    /// The entity path, as Service Bus writes it: `queue`, `topic`,
    /// `topic/subscriptions/name`.
    pub fn path(&self) -> String {
        match self {
            Self::Queue(name) | Self::Topic(name) => name.clone(),
            Self::Subscription { topic, subscription } => format!("{topic}/subscriptions/{subscription}"),
        }
    }

    /// Parses an entity path written by [`Destination::path`]. A bare name is
    /// a queue unless it is the events topic.
    pub fn parse(path: &str) -> Self {
        match path.split_once("/subscriptions/") {
            Some((topic, subscription)) => Self::Subscription {
                topic: topic.to_owned(),
                subscription: subscription.to_owned(),
            },
            None if path == EVENTS_TOPIC => Self::Topic(path.to_owned()),
            None => Self::Queue(path.to_owned()),
        }
    }
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.path())
    }
}

/// The consumer route by name.
pub fn consumer(name: &str) -> Option<&'static ConsumerRoute> {
    CONSUMERS.iter().find(|route| route.name == name)
}

/// The consumer whose queue receives a command.
pub fn command_handler(command_type: &str) -> Option<&'static ConsumerRoute> {
    CONSUMERS.iter().find(|route| route.commands.contains(&command_type))
}

/// The consumers whose subscriptions receive an event.
pub fn event_subscribers(event_type: &str) -> impl Iterator<Item = &'static ConsumerRoute> + '_ {
    CONSUMERS.iter().filter(move |route| route.subscribes_to(event_type))
}

/// Where a message of this type is sent: its consumer's queue for a
/// command, the events topic for an event. `None` for a type the catalogue
/// does not know or a command no consumer handles.
pub fn destination_of(message_type: &str) -> Option<Destination> {
    let spec = MessageSpec::find(message_type)?;
    match spec.kind {
        MessageKind::Command => command_handler(message_type).map(ConsumerRoute::queue),
        MessageKind::Event => Some(Destination::Topic(EVENTS_TOPIC.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::CATALOGUE;

    #[test]
    fn there_are_eleven_delivery_consumers_and_the_probe_with_unique_names() {
        let mut names: Vec<_> = CONSUMERS.iter().map(|c| c.name).collect();
        assert_eq!(names.len(), 12);
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 12);
    }

    #[test]
    fn every_catalogued_command_has_exactly_one_handler() {
        for spec in CATALOGUE.iter().filter(|s| s.kind == MessageKind::Command) {
            let handlers = CONSUMERS
                .iter()
                .filter(|c| c.commands.contains(&spec.message_type))
                .count();
            assert_eq!(handlers, 1, "{} has {handlers} handlers", spec.message_type);
        }
    }

    #[test]
    fn every_routed_type_is_catalogued_with_the_right_kind() {
        for route in CONSUMERS {
            for (types, kind) in [
                (route.commands, MessageKind::Command),
                (route.events, MessageKind::Event),
            ] {
                for message_type in types {
                    let spec = MessageSpec::find(message_type)
                        .unwrap_or_else(|| panic!("{} routes `{message_type}`, which is not catalogued", route.name));
                    assert_eq!(spec.kind, kind, "{} routes `{message_type}` as a {kind}", route.name);
                }
            }
        }
    }

    #[test]
    fn no_consumer_lists_a_type_twice() {
        for route in CONSUMERS {
            let mut types: Vec<_> = route.commands.iter().chain(route.events).collect();
            let before = types.len();
            types.sort_unstable();
            types.dedup();
            assert_eq!(before, types.len(), "{}", route.name);
        }
    }

    #[test]
    fn every_catalogued_command_has_a_queue() {
        for spec in CATALOGUE.iter().filter(|s| s.kind == MessageKind::Command) {
            let handler = command_handler(spec.message_type).map(|c| c.name);
            assert_eq!(
                destination_of(spec.message_type),
                handler.map(|name| Destination::Queue(name.to_owned())),
                "{}",
                spec.message_type
            );
        }
        assert_eq!(
            destination_of("ApproveRelease"),
            Some(Destination::Queue("release-orchestration".into()))
        );
        let subscribers: Vec<_> = event_subscribers("BuildCompleted").map(|c| c.name).collect();
        assert_eq!(
            subscribers,
            ["release-orchestration", "container-build", "package-publishing"]
        );
    }

    #[test]
    fn destination_paths_round_trip() {
        for destination in [
            Destination::Queue("commit".into()),
            Destination::Topic(EVENTS_TOPIC.into()),
            Destination::Subscription {
                topic: EVENTS_TOPIC.into(),
                subscription: "commit".into(),
            },
        ] {
            assert_eq!(Destination::parse(&destination.path()), destination);
        }
    }

    #[test]
    fn commands_route_to_their_queue_and_events_to_the_topic() {
        assert_eq!(
            destination_of("CreateCommit"),
            Some(Destination::Queue("commit".into()))
        );
        assert_eq!(
            destination_of("CommitCreated"),
            Some(Destination::Topic(EVENTS_TOPIC.into()))
        );
        assert_eq!(destination_of("Nope"), None);
    }
}
