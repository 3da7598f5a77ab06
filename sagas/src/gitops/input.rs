//! What goes into [`GitOpsSaga::step`](super::GitOpsSaga::step) (a
//! message or an observation of the consumer's) and what comes out (the
//! transition, with the work the consumer must do next).

use bosun_contracts::Message;
use bosun_contracts::messages::{AppliedResource, DeploymentPromoted, ReconcileReason};
use time::OffsetDateTime;

use super::GitOpsState;
use crate::Action;

/// The consumer wrote a promotion into the environment repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredStateWritten {
    /// The module promoted.
    pub module_id: String,
    /// The release promoted.
    pub release_id: String,
    /// When it was promoted.
    pub promoted_at: OffsetDateTime,
    /// The environment repository written.
    pub repository: String,
    /// The repository's branch head holding the promotion (a new commit,
    /// or the existing head when the write changed nothing).
    pub commit_sha: String,
}

/// What an environment reports after a reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvironmentReport {
    /// The commit it runs; `None` when it runs nothing from the repository
    /// (or cannot tell yet).
    pub commit_sha: Option<String>,
    /// Resources the reconcile applied.
    pub applied: Vec<AppliedResource>,
    /// Whether every applied resource reported ready.
    pub healthy: bool,
    /// When the environment was observed.
    pub observed_at: OffsetDateTime,
}

/// One input of the saga: a message, or an observation the consumer made.
#[derive(Debug, Clone, PartialEq)]
pub enum GitOpsInput<'a> {
    /// A message routed to the saga (`DeploymentPromoted`,
    /// `ReconcileEnvironment`, `InfrastructureProvisioned`).
    Message(&'a Message),
    /// The consumer wrote a promotion ([`Work::WriteDesiredState`]).
    DesiredStateWritten(DesiredStateWritten),
    /// The consumer reconciled and observed the environment
    /// ([`Work::Reconcile`]).
    EnvironmentReported(EnvironmentReport),
}

/// What the saga asks the consumer to do next, through its port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// Write this promotion into the environment repository, then feed
    /// [`GitOpsInput::DesiredStateWritten`].
    WriteDesiredState(Box<DeploymentPromoted>),
    /// Reconcile the environment with a commit, then feed
    /// [`GitOpsInput::EnvironmentReported`].
    Reconcile {
        /// The environment repository, when known.
        repository: Option<String>,
        /// The commit; `None` means the repository's branch head (no
        /// desired commit is known yet).
        commit_sha: Option<String>,
        /// Why.
        reason: ReconcileReason,
    },
}

/// The result of one step: the new state, the messages to send, and the
/// work the consumer must do before the next step.
#[derive(Debug, Clone, PartialEq)]
pub struct GitOpsTransition {
    /// The state after the input.
    pub state: GitOpsState,
    /// Messages to send or schedule.
    pub actions: Vec<Action>,
    /// Work for the consumer, if any.
    pub work: Option<Work>,
}
