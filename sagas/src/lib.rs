//! bosun's sagas as pure state machines: `(state, message) -> (state, actions)`.
//!
//! A saga is keyed (the release saga by `releaseId`, the GitOps saga by
//! `environment`), loaded by the runtime, given one message, and saved back
//! with optimistic concurrency together with the actions it returned. Nothing
//! here does I/O; the runtime executes the actions.

use std::time::Duration;

pub mod gitops;
pub mod machine;
pub mod release;
pub mod versioned;

use bosun_contracts::Message;
use serde::{Serialize, de::DeserializeOwned};

/// The kinds of saga bosun runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SagaKind {
    /// The release saga, keyed by `releaseId`.
    Release,
    /// The GitOps saga, keyed by `environment`.
    Gitops,
    /// The probe tally, keyed by probe group (a built-in canary).
    Probe,
}

impl SagaKind {
    /// Every kind.
    pub const ALL: [SagaKind; 3] = [SagaKind::Release, SagaKind::Gitops, SagaKind::Probe];

    /// Every kind's name ([`SagaKind::as_str`]), in [`SagaKind::ALL`]'s
    /// order: what the API and the CLI accept.
    pub const NAMES: [&'static str; Self::ALL.len()] = {
        let mut names = [""; Self::ALL.len()];
        let mut at = 0;
        while at < names.len() {
            names[at] = Self::ALL[at].as_str();
            at += 1;
        }
        names
    };

    /// `release`, `gitops` or `probe`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Release => "release",
            Self::Gitops => "gitops",
            Self::Probe => "probe",
        }
    }

    /// Its state machine as data.
    pub fn machine(self) -> machine::Machine {
        match self {
            Self::Release => release::machine(),
            Self::Gitops => gitops::machine(),
            Self::Probe => machine::Machine {
                state_field: "phase",
                initial: "counting",
                states: vec![machine::MachineState {
                    value: "counting",
                    name: "Counting",
                    description: "counting the probes echoed",
                    is_final: false,
                }],
                transitions: vec![machine::MachineTransition {
                    from: "counting",
                    to: "counting",
                    label: "ProbeEchoed (count + 1)",
                    triggers: &["ProbeEchoed"],
                }],
            },
        }
    }

    /// Parses `release` or `gitops`.
    pub fn parse(text: &str) -> Result<Self, SagaError> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
            .ok_or_else(|| SagaError::UnknownKind(text.to_owned()))
    }
}

impl std::fmt::Display for SagaKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a saga asks the runtime to do after a transition.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Send a message now (through the outbox, atomically with the new state).
    Send(Message),
    /// Send a message later, e.g. a timeout.
    Schedule {
        /// The message.
        message: Message,
        /// How long from now.
        after: Duration,
    },
}

/// The result of applying one message.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition<S> {
    /// The state after the message.
    pub state: S,
    /// What to do.
    pub actions: Vec<Action>,
}

/// A saga as a pure state machine. Implementations hold their policy
/// (e.g. which environments auto-approve) and nothing else.
pub trait StateMachine {
    /// The persisted state; `Default` is the state before the first message.
    type State: Serialize + DeserializeOwned + Default + Clone + PartialEq;

    /// Which saga this is.
    const KIND: SagaKind;

    /// The saga key a message belongs to, or `None` if this saga ignores it.
    fn key_of(&self, message: &Message) -> Option<String>;

    /// Applies one message to a state.
    fn apply(&self, state: &Self::State, message: &Message) -> Result<Transition<Self::State>, SagaError>;

    /// The state machine as a Mermaid `stateDiagram-v2`.
    fn diagram(&self) -> String;
}

/// Errors of the saga layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SagaError {
    /// A saga kind name that is neither `release` nor `gitops`.
    #[error("unknown saga kind `{0}` (expected release, gitops or probe)")]
    UnknownKind(String),
    /// A message the saga cannot accept in its current state.
    #[error("saga rejected `{message_type}`: {reason}")]
    Rejected {
        /// The message type.
        message_type: String,
        /// Why.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_back() {
        for kind in SagaKind::ALL {
            assert_eq!(SagaKind::parse(kind.as_str()), Ok(kind));
        }
        assert!(SagaKind::parse("billing").is_err());
    }
}
