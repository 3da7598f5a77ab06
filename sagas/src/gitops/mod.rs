//! The GitOps saga, keyed by `environment`: it tracks the desired commit of
//! an environment's repository and reconciles until the environment reports
//! that commit.
//!
//! # Inputs
//!
//! The saga consumes three messages and two observations ([`GitOpsInput`]):
//!
//! - `DeploymentPromoted` — a release becomes the desired state of the
//!   environment. One release at a time: while another release's desired
//!   commit is not synced yet ([`GitOpsState::in_flight`]), the promotion
//!   is queued ([`GitOpsState::queued`], oldest first, at most
//!   [`QUEUE_LIMIT`]); when that one is synced the saga sends itself a
//!   `ReconcileEnvironment` (reason `promotion`) and the next queued
//!   promotion goes in that turn. The saga keeps, per module, the newest
//!   promotion it wrote (ordered by `promotedAt`, then `releaseId`): a
//!   promotion older than that one is ignored (a late promotion never rolls
//!   an environment back), the same release again asks for no new write,
//!   and a newer one asks the consumer to write it
//!   ([`Work::WriteDesiredState`]). A state with a queue is saved as
//!   version 2, which the previous release leaves alone rather than
//!   dropping the queue; without one, as version 1.
//! - [`DesiredStateWritten`] — the consumer wrote a promotion into the
//!   environment repository; the commit it got becomes the desired commit
//!   (a newer desired commit supersedes one still in flight) and the
//!   consumer is asked to reconcile ([`Work::Reconcile`]).
//! - `ReconcileEnvironment` — a scheduled retry (`reason: schedule`, naming
//!   the commit it was scheduled for), or a manual, drift or infrastructure
//!   request: reconcile the desired commit now. A timer scheduled for a
//!   commit that is no longer desired is ignored. A request naming another
//!   commit than the desired one is ignored (a rollback is a promotion).
//! - `ReleaseVerified` — a release passed verification here: kept, per
//!   module, as a release a rollback may go back to
//!   ([`GitOpsState::verified`], the newest [`VERIFIED_LIMIT`]).
//! - `RollbackEnvironment` — go back to a verified release of one module
//!   (the one named, else the newest verified before the current one, or
//!   when the current one was never verified the newest that is not the
//!   failed one): its promotion is written again, stamped with when
//!   the rollback was asked for, ahead of queued promotions. A rollback
//!   with nothing to go back to, or for a failed release that is no longer
//!   the current one, changes nothing. Both are recorded for the tenant's
//!   audit log (`ReleaseDecisionRecorded` on the release rolled back from).
//! - `InfrastructureProvisioned` — the environment's infrastructure changed:
//!   reconcile the desired commit again (previews are ignored).
//! - [`EnvironmentReport`] — what the environment reports after a reconcile
//!   (the commit it runs, the resources applied). When it is the desired
//!   commit the environment is synced and `GitOpsSynced` is sent, once per
//!   (environment, commitSha) whatever happens later. Otherwise a
//!   `ReconcileEnvironment` is scheduled with exponential backoff (one timer
//!   at a time). A report of an older commit never marks the desired one
//!   synced.
//!
//! When a desired commit is synced, earlier desired commits that were
//! superseded before they were reported, and whose release is still the
//! current one of its module, are reported too (`GitOpsSynced` for their
//! own commit and release): the synced commit contains their change, so the
//! release they carry is deployed. A release superseded by a newer release
//! of the same module is never reported.
//!
//! # The consumer drives the saga
//!
//! Observations come from the consumer's port, so the `gitops-sync`
//! consumer runs the loop: it applies the message with
//! [`GitOpsSaga::step`], performs the [`Work`] the transition asks for
//! (write the promotion, reconcile), feeds the result back as
//! [`GitOpsInput::DesiredStateWritten`] or
//! [`GitOpsInput::EnvironmentReported`], and saves the final state with the
//! actions of every step. [`StateMachine::apply`] is the message part of
//! that loop: it applies one message and returns its actions, dropping the
//! work request (which the consumer gets from [`GitOpsSaga::step`]).
//!
//! The saga is pure: no clock (times come from the inputs), no I/O.
//!
//! # The files
//!
//! - `state.rs`: [`GitOpsState`] and what it keeps (desired and observed
//!   commits, releases by module, the history);
//! - `input.rs`: what goes in and comes out of [`GitOpsSaga::step`]:
//!   [`GitOpsInput`], [`Work`], [`GitOpsTransition`];
//! - `promotion.rs`: promotions and the desired commits written for them;
//! - `reconcile.rs`: reconcile requests (timers, manual, infrastructure);
//! - `report.rs`: what the environment reports: synced (`GitOpsSynced`) or
//!   a retry scheduled with backoff.

mod input;
mod promotion;
mod reconcile;
mod report;
mod rollback;
mod state;
#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::time::Duration;

use bosun_contracts::Message;

pub use self::input::{DesiredStateWritten, EnvironmentReport, GitOpsInput, GitOpsTransition, Work};
pub use self::rollback::{VERIFIED_LIMIT, before_current};
pub use self::state::{
    AppRelease, DesiredCommit, GitOpsPhase, GitOpsState, HistoryEntry, HistoryEvent, ObservedCommit, PendingReconcile,
    VerifiedRelease,
};
use crate::{Action, SagaError, SagaKind, StateMachine, Transition};

/// History entries kept in the state (the newest).
pub const HISTORY_LIMIT: usize = 50;

/// Superseded desired commits kept to report them once a newer commit that
/// contains them is synced.
pub const SUPERSEDED_LIMIT: usize = 20;

/// Promotions an environment queues behind the one in flight; one more is
/// ignored (and recorded).
pub const QUEUE_LIMIT: usize = 64;

/// Commits remembered as reported (`GitOpsSynced` sent), the newest.
pub const REPORTED_LIMIT: usize = 100;

/// Default delay before the first scheduled reconcile retry.
pub const DEFAULT_RECONCILE_BASE_DELAY: Duration = Duration::from_secs(5);

/// Default longest delay between scheduled reconcile retries.
pub const DEFAULT_RECONCILE_MAX_DELAY: Duration = Duration::from_secs(300);

/// The GitOps saga: its policy is the reconcile retry backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GitOpsSaga {
    reconcile_base_delay: Duration,
    reconcile_max_delay: Duration,
    queue: bool,
}

impl Default for GitOpsSaga {
    fn default() -> Self {
        Self::new()
    }
}

impl GitOpsSaga {
    /// A saga retrying reconciles after [`DEFAULT_RECONCILE_BASE_DELAY`],
    /// doubling up to [`DEFAULT_RECONCILE_MAX_DELAY`].
    pub const fn new() -> Self {
        Self {
            reconcile_base_delay: DEFAULT_RECONCILE_BASE_DELAY,
            reconcile_max_delay: DEFAULT_RECONCILE_MAX_DELAY,
            queue: true,
        }
    }

    /// Whether a promotion that arrives while another release is in flight
    /// is queued (`true`, the default: one release at a time) or written at
    /// once, superseding the one in flight (`false`: while a previous
    /// release that drops queues may run beside this one). Promotions
    /// already queued still go, one at a time.
    pub fn queueing_promotions(mut self, queue: bool) -> Self {
        self.queue = queue;
        self
    }

    /// The same saga retrying reconciles after `base`, doubling up to `max`.
    pub fn with_reconcile_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.reconcile_base_delay = base;
        self.reconcile_max_delay = max.max(base);
        self
    }

    /// The delay before reconcile retry number `attempt` (1-based):
    /// `min(max, base * 2^(attempt-1))`, without jitter (the saga is pure).
    pub fn reconcile_delay(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(31));
        self.reconcile_base_delay
            .saturating_mul(factor)
            .min(self.reconcile_max_delay)
    }

    /// Applies one input; see the module documentation.
    pub fn step(&self, state: &GitOpsState, input: &GitOpsInput<'_>) -> Result<GitOpsTransition, SagaError> {
        let mut next = Next {
            state: state.clone(),
            actions: Vec::new(),
            work: None,
        };
        match input {
            GitOpsInput::Message(message) => self.on_message(&mut next, message)?,
            GitOpsInput::DesiredStateWritten(written) => {
                if next.state.environment.is_empty() {
                    return Err(rejected("DesiredStateWritten", "the saga has no environment yet"));
                }
                Self::on_written(&mut next, written);
            }
            GitOpsInput::EnvironmentReported(report) => {
                if next.state.environment.is_empty() {
                    return Err(rejected("EnvironmentReported", "the saga has no environment yet"));
                }
                self.on_report(&mut next, report);
            }
        }
        Ok(GitOpsTransition {
            state: next.state,
            actions: next.actions,
            work: next.work,
        })
    }

    fn on_message(&self, next: &mut Next, message: &Message) -> Result<(), SagaError> {
        let environment = self
            .key_of(message)
            .ok_or_else(|| rejected(message.message_type(), "the GitOps saga does not handle this message"))?;
        if next.state.environment.is_empty() {
            next.state.environment = environment;
        } else if next.state.environment != environment {
            return Err(rejected(
                message.message_type(),
                &format!(
                    "message for environment `{environment}` given to the saga of `{}`",
                    next.state.environment
                ),
            ));
        }
        match message {
            Message::DeploymentPromoted(promoted) => Self::on_promoted(next, promoted, self.queue),
            Message::ReconcileEnvironment(request) => Self::on_reconcile_request(next, request, self.queue),
            Message::InfrastructureProvisioned(provisioned) => Self::on_infrastructure(next, provisioned),
            Message::ReleaseVerified(verified) => Self::on_verified(next, verified),
            Message::RollbackEnvironment(rollback) => Self::on_rollback(next, rollback, self.queue),
            _ => {}
        }
        Ok(())
    }
}

/// A transition being built.
pub(super) struct Next {
    pub(super) state: GitOpsState,
    pub(super) actions: Vec<Action>,
    pub(super) work: Option<Work>,
}

fn rejected(message_type: &str, reason: &str) -> SagaError {
    SagaError::Rejected {
        message_type: message_type.to_owned(),
        reason: reason.to_owned(),
    }
}

/// The environment a message belongs to (the GitOps saga's key within its
/// tenant): a pure function of the message, so a sender that does not run
/// the saga (a Service Bus session id) computes the same key as
/// [`StateMachine::key_of`], which calls it.
pub fn environment_of(message: &Message) -> Option<String> {
    match message {
        Message::DeploymentPromoted(promoted) => Some(promoted.environment.clone()),
        Message::ReconcileEnvironment(request) => Some(request.environment.clone()),
        Message::InfrastructureProvisioned(provisioned) => Some(provisioned.environment.clone()),
        Message::ReleaseVerified(verified) => Some(verified.environment.clone()),
        Message::RollbackEnvironment(rollback) => Some(rollback.environment.clone()),
        _ => None,
    }
}

impl StateMachine for GitOpsSaga {
    type State = GitOpsState;

    const KIND: SagaKind = SagaKind::Gitops;

    fn key_of(&self, message: &Message) -> Option<String> {
        environment_of(message)
    }

    /// Applies one message. The work the message asks for (write a
    /// promotion, reconcile) is not part of a [`Transition`]: the consumer
    /// gets it from [`GitOpsSaga::step`].
    fn apply(&self, state: &GitOpsState, message: &Message) -> Result<Transition<GitOpsState>, SagaError> {
        let transition = self.step(state, &GitOpsInput::Message(message))?;
        Ok(Transition {
            state: transition.state,
            actions: transition.actions,
        })
    }

    fn diagram(&self) -> String {
        let mut out = String::from("stateDiagram-v2\n");
        let lines = [
            "[*] --> Idle",
            "Idle --> Writing : DeploymentPromoted (newest of its module)",
            "Synced --> Writing : RollbackEnvironment (a verified release, written again as the newest)",
            "Idle --> Reconciling : ReconcileEnvironment (adopt branch head)",
            "Reconciling --> Writing : DeploymentPromoted (newer release)",
            "Synced --> Writing : DeploymentPromoted (newer release)",
            "Writing --> Reconciling : DesiredStateWritten / new desired commit supersedes the old",
            "Reconciling --> Reconciling : ReconcileEnvironment (timer, manual) or InfrastructureProvisioned / reconcile",
            "Reconciling --> Reconciling : EnvironmentReported (other commit) / schedule ReconcileEnvironment with backoff",
            "Reconciling --> Synced : EnvironmentReported (desired commit) / GitOpsSynced once per (environment, commitSha)",
            "Synced --> Synced : InfrastructureProvisioned, ReconcileEnvironment / reconcile again, no new GitOpsSynced",
            "Synced --> Reconciling : EnvironmentReported (drifted to another commit) / schedule ReconcileEnvironment",
        ];
        for line in lines {
            let _ = writeln!(out, "    {line}");
        }
        out.push_str("    note right of Writing\n");
        out.push_str("        the consumer commits the promotion to the environment repository;\n");
        out.push_str("        promotions older than the module's current release are ignored\n");
        out.push_str("    end note\n");
        out
    }
}

/// The GitOps state machine as data ([`crate::machine`]), by phase: the
/// writing of a promotion and the reconcile after it happen within the
/// handling of one message, so a message moves the phase at most once.
pub fn machine() -> crate::machine::Machine {
    use crate::machine::{Machine, MachineState, MachineTransition};
    const PROMOTED: &[&str] = &["DeploymentPromoted", "ReleaseVerified", "RollbackEnvironment"];
    const RECONCILED: &[&str] = &["ReconcileEnvironment", "InfrastructureProvisioned"];
    const ANY: &[&str] = &[
        "DeploymentPromoted",
        "ReconcileEnvironment",
        "InfrastructureProvisioned",
        "RollbackEnvironment",
    ];
    let state = |value, name, description| MachineState {
        value,
        name,
        description,
        is_final: false,
    };
    let edge = |from, to, label, triggers| MachineTransition {
        from,
        to,
        label,
        triggers,
    };
    Machine {
        state_field: "phase",
        initial: "idle",
        states: vec![
            state("idle", "Idle", "no desired commit yet"),
            state(
                "reconciling",
                "Reconciling",
                "a desired commit is written; the environment does not report it yet",
            ),
            state("synced", "Synced", "the environment reports the desired commit"),
        ],
        transitions: vec![
            edge(
                "idle",
                "reconciling",
                "DeploymentPromoted (written) or ReconcileEnvironment (adopt branch head)",
                ANY,
            ),
            edge(
                "idle",
                "synced",
                "promotion written and reconciled at once / GitOpsSynced",
                ANY,
            ),
            edge(
                "reconciling",
                "reconciling",
                "newer promotion written, or the environment reports another commit / schedule ReconcileEnvironment",
                ANY,
            ),
            edge(
                "reconciling",
                "synced",
                "the environment reports the desired commit / GitOpsSynced once per (environment, commitSha)",
                ANY,
            ),
            edge(
                "synced",
                "reconciling",
                "newer promotion written, or drifted to another commit / schedule ReconcileEnvironment",
                ANY,
            ),
            edge("synced", "synced", "reconcile again, no new GitOpsSynced", RECONCILED),
            edge(
                "synced",
                "synced",
                "promotion of a release already accepted or older, a verified release kept, a rollback refused",
                PROMOTED,
            ),
        ],
    }
}
