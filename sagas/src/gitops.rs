//! The GitOps saga, keyed by `environment`: it tracks the desired commit of
//! an environment's repository and reconciles until the environment reports
//! that commit.
//!
//! # Inputs
//!
//! The saga consumes three messages and two observations ([`GitOpsInput`]):
//!
//! - `DeploymentPromoted` — a release becomes the desired state of the
//!   environment. The saga keeps, per module, the newest promotion it
//!   accepted (ordered by `promotedAt`, then `releaseId`): a promotion older
//!   than that one is ignored (a late promotion never rolls an environment
//!   back), the same release again asks for no new write, and a newer one
//!   asks the consumer to write it ([`Work::WriteDesiredState`]).
//! - [`DesiredStateWritten`] — the consumer wrote a promotion into the
//!   environment repository; the commit it got becomes the desired commit
//!   (a newer desired commit supersedes one still in flight) and the
//!   consumer is asked to reconcile ([`Work::Reconcile`]).
//! - `ReconcileEnvironment` — a scheduled retry (`reason: schedule`, naming
//!   the commit it was scheduled for), or a manual, drift or infrastructure
//!   request: reconcile the desired commit now. A timer scheduled for a
//!   commit that is no longer desired is ignored. A request naming another
//!   commit than the desired one is ignored (a rollback is a promotion).
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

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use bosun_contracts::Message;
use bosun_contracts::messages::{
    AppliedResource, DeploymentPromoted, GitOpsSynced, InfrastructureProvisioned, ReconcileEnvironment, ReconcileReason,
};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::{Action, SagaError, SagaKind, StateMachine, Transition};

/// History entries kept in the state (the newest).
pub const HISTORY_LIMIT: usize = 50;

/// Superseded desired commits kept to report them once a newer commit that
/// contains them is synced.
pub const SUPERSEDED_LIMIT: usize = 20;

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
}

impl Default for GitOpsSaga {
    fn default() -> Self {
        Self::new()
    }
}

/// Where an environment stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum GitOpsPhase {
    /// No desired commit yet.
    #[default]
    Idle,
    /// A desired commit is not yet reported by the environment.
    Reconciling,
    /// The environment reports the desired commit.
    Synced,
}

/// A commit of the environment repository the environment should run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DesiredCommit {
    /// The commit.
    pub commit_sha: String,
    /// Increases with every new desired commit of the environment.
    pub generation: u64,
    /// The release whose promotion wrote it; `None` for a commit adopted
    /// from the repository (a reconcile of its branch head).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_id: Option<String>,
    /// The module of that release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_id: Option<String>,
    /// Scheduled reconcile retries made for this commit so far.
    #[serde(default)]
    pub reconcile_attempts: u32,
}

/// The newest promotion accepted for one module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppRelease {
    /// The release.
    pub release_id: String,
    /// When it was promoted (orders promotions of the module).
    #[serde(with = "time::serde::rfc3339")]
    pub promoted_at: OffsetDateTime,
    /// The environment commit that holds it, once written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_sha: Option<String>,
}

/// What the environment last reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedCommit {
    /// The commit it runs; `None` when it runs nothing from the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_sha: Option<String>,
    /// Whether every applied resource reported ready.
    pub healthy: bool,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub observed_at: OffsetDateTime,
}

/// The reconcile retry scheduled and not yet delivered (one at a time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingReconcile {
    /// The desired commit it was scheduled for.
    pub commit_sha: String,
    /// Which retry it is (1-based).
    pub attempt: u32,
    /// Its delay, in milliseconds.
    pub delay_ms: u64,
}

/// What happened, for `bosun sagas show gitops ENV`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HistoryEvent {
    /// A promotion was accepted and is to be written.
    PromotionAccepted,
    /// A promotion of a release already accepted arrived again.
    PromotionRepeated,
    /// A promotion older than the module's current release was ignored.
    PromotionIgnored,
    /// A new desired commit was written.
    DesiredCommitSet,
    /// A desired commit was superseded before the environment reported it.
    Superseded,
    /// A reconcile was asked of the consumer.
    ReconcileRequested,
    /// A reconcile request was ignored (stale timer, other commit, preview).
    ReconcileIgnored,
    /// The environment reported a commit other than the desired one.
    Observed,
    /// A reconcile retry was scheduled.
    ReconcileScheduled,
    /// The environment reports the desired commit.
    Synced,
    /// `GitOpsSynced` was sent for a commit.
    Reported,
}

/// One history entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// When, if the input carried a time.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub at: Option<OffsetDateTime>,
    /// What happened.
    pub event: HistoryEvent,
    /// The commit concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_sha: Option<String>,
    /// The release concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_id: Option<String>,
    /// Why, in a few words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The persisted state of one environment's GitOps saga.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GitOpsState {
    /// The environment (the saga key); empty before the first message.
    pub environment: String,
    /// The environment repository, from the newest promotion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Where the environment stands.
    pub phase: GitOpsPhase,
    /// The commit the environment should run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired: Option<DesiredCommit>,
    /// The newest accepted promotion of each module.
    pub apps: BTreeMap<String, AppRelease>,
    /// Desired commits superseded before they were reported (oldest
    /// first, at most [`SUPERSEDED_LIMIT`]).
    pub superseded: Vec<DesiredCommit>,
    /// What the environment last reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed: Option<ObservedCommit>,
    /// Commits `GitOpsSynced` was sent for (oldest first, at most
    /// [`REPORTED_LIMIT`]): the (environment, commitSha) dedup record.
    pub reported: Vec<String>,
    /// The scheduled reconcile retry not yet delivered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_reconcile: Option<PendingReconcile>,
    /// What happened (oldest first, at most [`HISTORY_LIMIT`]).
    pub history: Vec<HistoryEntry>,
}

impl GitOpsState {
    /// The desired commit, if any.
    pub fn desired_commit(&self) -> Option<&str> {
        self.desired.as_ref().map(|desired| desired.commit_sha.as_str())
    }

    /// Whether `GitOpsSynced` was sent for this commit.
    pub fn was_reported(&self, commit_sha: &str) -> bool {
        self.reported.iter().any(|reported| reported == commit_sha)
    }

    /// Whether the environment reports the desired commit.
    pub fn is_synced(&self) -> bool {
        self.phase == GitOpsPhase::Synced
    }

    fn record(&mut self, entry: HistoryEntry) {
        self.history.push(entry);
        if self.history.len() > HISTORY_LIMIT {
            let excess = self.history.len() - HISTORY_LIMIT;
            self.history.drain(..excess);
        }
    }

    fn mark_reported(&mut self, commit_sha: &str) {
        self.reported.push(commit_sha.to_owned());
        if self.reported.len() > REPORTED_LIMIT {
            let excess = self.reported.len() - REPORTED_LIMIT;
            self.reported.drain(..excess);
        }
    }
}

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

impl GitOpsSaga {
    /// A saga retrying reconciles after [`DEFAULT_RECONCILE_BASE_DELAY`],
    /// doubling up to [`DEFAULT_RECONCILE_MAX_DELAY`].
    pub const fn new() -> Self {
        Self {
            reconcile_base_delay: DEFAULT_RECONCILE_BASE_DELAY,
            reconcile_max_delay: DEFAULT_RECONCILE_MAX_DELAY,
        }
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
            Message::DeploymentPromoted(promoted) => Self::on_promoted(next, promoted),
            Message::ReconcileEnvironment(request) => Self::on_reconcile_request(next, request),
            Message::InfrastructureProvisioned(provisioned) => Self::on_infrastructure(next, provisioned),
            _ => {}
        }
        Ok(())
    }

    fn on_promoted(next: &mut Next, promoted: &DeploymentPromoted) {
        let state = &mut next.state;
        state.repository = Some(promoted.environment_repository.clone());
        let entry = |event, detail: Option<String>| HistoryEntry {
            at: Some(promoted.promoted_at),
            event,
            commit_sha: None,
            release_id: Some(promoted.release_id.clone()),
            detail,
        };
        if let Some(current) = state.apps.get(&promoted.module_id).cloned() {
            if current.release_id == promoted.release_id {
                let detail = current
                    .commit_sha
                    .as_ref()
                    .map(|commit| format!("already written as {commit}"));
                state.record(entry(HistoryEvent::PromotionRepeated, detail));
                if current.commit_sha.is_some() && state.phase == GitOpsPhase::Reconciling {
                    Self::request_reconcile(next, ReconcileReason::Promotion);
                }
                return;
            }
            if (current.promoted_at, current.release_id.as_str()) > (promoted.promoted_at, promoted.release_id.as_str())
            {
                let detail = format!("older than {}, the module's current release", current.release_id);
                state.record(entry(HistoryEvent::PromotionIgnored, Some(detail)));
                return;
            }
        }
        state.record(entry(HistoryEvent::PromotionAccepted, None));
        next.work = Some(Work::WriteDesiredState(Box::new(promoted.clone())));
    }

    fn on_written(next: &mut Next, written: &DesiredStateWritten) {
        let state = &mut next.state;
        state.repository = Some(written.repository.clone());
        if let Some(current) = state.apps.get(&written.module_id)
            && current.release_id != written.release_id
            && (current.promoted_at, current.release_id.as_str()) > (written.promoted_at, written.release_id.as_str())
        {
            // Cannot happen when the consumer follows the saga; recorded,
            // never applied.
            state.record(HistoryEntry {
                at: Some(written.promoted_at),
                event: HistoryEvent::PromotionIgnored,
                commit_sha: Some(written.commit_sha.clone()),
                release_id: Some(written.release_id.clone()),
                detail: Some(format!("written after the newer {}", current.release_id)),
            });
            return;
        }
        state.apps.insert(
            written.module_id.clone(),
            AppRelease {
                release_id: written.release_id.clone(),
                promoted_at: written.promoted_at,
                commit_sha: Some(written.commit_sha.clone()),
            },
        );
        if state.desired_commit() != Some(written.commit_sha.as_str()) {
            let generation = state.desired.as_ref().map_or(0, |desired| desired.generation) + 1;
            let previous = state.desired.replace(DesiredCommit {
                commit_sha: written.commit_sha.clone(),
                generation,
                release_id: Some(written.release_id.clone()),
                module_id: Some(written.module_id.clone()),
                reconcile_attempts: 0,
            });
            if let Some(previous) = previous
                && !state.was_reported(&previous.commit_sha)
            {
                state.record(HistoryEntry {
                    at: Some(written.promoted_at),
                    event: HistoryEvent::Superseded,
                    commit_sha: Some(previous.commit_sha.clone()),
                    release_id: previous.release_id.clone(),
                    detail: Some(format!("by {}", written.commit_sha)),
                });
                state.superseded.push(previous);
                if state.superseded.len() > SUPERSEDED_LIMIT {
                    let excess = state.superseded.len() - SUPERSEDED_LIMIT;
                    state.superseded.drain(..excess);
                }
            }
            // A timer scheduled for the old commit is now stale.
            state.pending_reconcile = None;
            state.phase = if state.was_reported(&written.commit_sha) {
                GitOpsPhase::Synced
            } else {
                GitOpsPhase::Reconciling
            };
            state.record(HistoryEntry {
                at: Some(written.promoted_at),
                event: HistoryEvent::DesiredCommitSet,
                commit_sha: Some(written.commit_sha.clone()),
                release_id: Some(written.release_id.clone()),
                detail: Some(format!("generation {generation}")),
            });
        }
        Self::request_reconcile(next, ReconcileReason::Promotion);
    }

    fn on_reconcile_request(next: &mut Next, request: &ReconcileEnvironment) {
        let state = &mut next.state;
        let ignored = |state: &mut GitOpsState, detail: String| {
            state.record(HistoryEntry {
                at: None,
                event: HistoryEvent::ReconcileIgnored,
                commit_sha: request.desired_commit_sha.clone(),
                release_id: None,
                detail: Some(detail),
            });
        };
        let Some(desired) = state.desired.clone() else {
            // Nothing desired yet: reconcile what was asked for (or the
            // branch head) and adopt what the environment then reports.
            next.work = Some(Work::Reconcile {
                repository: state.repository.clone(),
                commit_sha: request.desired_commit_sha.clone(),
                reason: request.reason,
            });
            state.record(HistoryEntry {
                at: None,
                event: HistoryEvent::ReconcileRequested,
                commit_sha: request.desired_commit_sha.clone(),
                release_id: None,
                detail: Some(format!("{:?}, nothing desired yet", request.reason)),
            });
            return;
        };
        match (&request.reason, &request.desired_commit_sha) {
            (ReconcileReason::Schedule, Some(commit)) => {
                if state
                    .pending_reconcile
                    .as_ref()
                    .is_some_and(|pending| &pending.commit_sha == commit)
                {
                    state.pending_reconcile = None;
                }
                if commit != &desired.commit_sha {
                    ignored(
                        state,
                        format!("timer for a superseded commit; desired is {}", desired.commit_sha),
                    );
                } else if state.phase == GitOpsPhase::Synced {
                    ignored(state, "already synced".to_owned());
                } else {
                    Self::request_reconcile(next, ReconcileReason::Schedule);
                }
            }
            (_, Some(commit)) if commit != &desired.commit_sha => {
                ignored(
                    state,
                    format!(
                        "not the desired commit {}; a rollback is a promotion",
                        desired.commit_sha
                    ),
                );
            }
            (reason, _) => Self::request_reconcile(next, *reason),
        }
    }

    fn on_infrastructure(next: &mut Next, provisioned: &InfrastructureProvisioned) {
        let state = &mut next.state;
        if provisioned.preview_only || state.desired.is_none() {
            let detail = if provisioned.preview_only {
                "infrastructure preview only"
            } else {
                "infrastructure changed, nothing desired yet"
            };
            state.record(HistoryEntry {
                at: Some(provisioned.provisioned_at),
                event: HistoryEvent::ReconcileIgnored,
                commit_sha: None,
                release_id: provisioned.release_id.clone(),
                detail: Some(detail.to_owned()),
            });
            return;
        }
        Self::request_reconcile(next, ReconcileReason::Infrastructure);
    }

    fn request_reconcile(next: &mut Next, reason: ReconcileReason) {
        let state = &mut next.state;
        let commit_sha = state.desired_commit().map(str::to_owned);
        state.record(HistoryEntry {
            at: None,
            event: HistoryEvent::ReconcileRequested,
            commit_sha: commit_sha.clone(),
            release_id: None,
            detail: Some(format!("{reason:?}")),
        });
        next.work = Some(Work::Reconcile {
            repository: state.repository.clone(),
            commit_sha,
            reason,
        });
    }

    fn on_report(&self, next: &mut Next, report: &EnvironmentReport) {
        let state = &mut next.state;
        state.observed = Some(ObservedCommit {
            commit_sha: report.commit_sha.clone(),
            healthy: report.healthy,
            observed_at: report.observed_at,
        });
        if state.desired.is_none()
            && let Some(commit) = &report.commit_sha
        {
            // Adopt the repository's commit the environment now runs.
            state.desired = Some(DesiredCommit {
                commit_sha: commit.clone(),
                generation: 1,
                release_id: None,
                module_id: None,
                reconcile_attempts: 0,
            });
            state.record(HistoryEntry {
                at: Some(report.observed_at),
                event: HistoryEvent::DesiredCommitSet,
                commit_sha: Some(commit.clone()),
                release_id: None,
                detail: Some("adopted from the repository".to_owned()),
            });
        }
        let Some(desired) = state.desired.clone() else {
            state.record(HistoryEntry {
                at: Some(report.observed_at),
                event: HistoryEvent::Observed,
                commit_sha: None,
                release_id: None,
                detail: Some("nothing desired, nothing running".to_owned()),
            });
            return;
        };

        if report.commit_sha.as_deref() == Some(desired.commit_sha.as_str()) {
            state.phase = GitOpsPhase::Synced;
            // A retry still in flight stays recorded: when it arrives it
            // finds the environment synced and does nothing.
            if let Some(current) = state.desired.as_mut() {
                current.reconcile_attempts = 0;
            }
            state.record(HistoryEntry {
                at: Some(report.observed_at),
                event: HistoryEvent::Synced,
                commit_sha: Some(desired.commit_sha.clone()),
                release_id: desired.release_id.clone(),
                detail: (!report.healthy).then(|| "not healthy".to_owned()),
            });
            let mut to_report = vec![desired.clone()];
            let superseded = std::mem::take(&mut state.superseded);
            for old in superseded {
                let still_current = match (&old.module_id, &old.release_id) {
                    (Some(module), Some(release)) => {
                        state.apps.get(module).is_some_and(|app| &app.release_id == release)
                    }
                    _ => false,
                };
                if still_current && old.commit_sha != desired.commit_sha {
                    to_report.push(old);
                }
            }
            for commit in to_report {
                if state.was_reported(&commit.commit_sha) {
                    continue;
                }
                state.mark_reported(&commit.commit_sha);
                state.record(HistoryEntry {
                    at: Some(report.observed_at),
                    event: HistoryEvent::Reported,
                    commit_sha: Some(commit.commit_sha.clone()),
                    release_id: commit.release_id.clone(),
                    detail: (commit.commit_sha != desired.commit_sha)
                        .then(|| format!("contained in {}", desired.commit_sha)),
                });
                next.actions.push(Action::Send(Message::GitOpsSynced(GitOpsSynced {
                    environment: state.environment.clone(),
                    commit_sha: commit.commit_sha,
                    release_id: commit.release_id,
                    applied: report.applied.clone(),
                    healthy: report.healthy,
                    synced_at: report.observed_at,
                })));
            }
            return;
        }

        state.phase = GitOpsPhase::Reconciling;
        state.record(HistoryEntry {
            at: Some(report.observed_at),
            event: HistoryEvent::Observed,
            commit_sha: report.commit_sha.clone(),
            release_id: None,
            detail: Some(format!("desired is {}", desired.commit_sha)),
        });
        let timer_pending = state
            .pending_reconcile
            .as_ref()
            .is_some_and(|pending| pending.commit_sha == desired.commit_sha);
        if timer_pending {
            return;
        }
        let attempt = desired.reconcile_attempts.saturating_add(1);
        let delay = self.reconcile_delay(attempt);
        if let Some(current) = state.desired.as_mut() {
            current.reconcile_attempts = attempt;
        }
        state.pending_reconcile = Some(PendingReconcile {
            commit_sha: desired.commit_sha.clone(),
            attempt,
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        });
        state.record(HistoryEntry {
            at: Some(report.observed_at),
            event: HistoryEvent::ReconcileScheduled,
            commit_sha: Some(desired.commit_sha.clone()),
            release_id: None,
            detail: Some(format!("retry {attempt} in {delay:?}")),
        });
        next.actions.push(Action::Schedule {
            message: Message::ReconcileEnvironment(ReconcileEnvironment {
                environment: state.environment.clone(),
                desired_commit_sha: Some(desired.commit_sha),
                reason: ReconcileReason::Schedule,
                requested_by: None,
            }),
            after: delay,
        });
    }
}

/// A transition being built.
struct Next {
    state: GitOpsState,
    actions: Vec<Action>,
    work: Option<Work>,
}

fn rejected(message_type: &str, reason: &str) -> SagaError {
    SagaError::Rejected {
        message_type: message_type.to_owned(),
        reason: reason.to_owned(),
    }
}

impl StateMachine for GitOpsSaga {
    type State = GitOpsState;

    const KIND: SagaKind = SagaKind::Gitops;

    fn key_of(&self, message: &Message) -> Option<String> {
        match message {
            Message::DeploymentPromoted(promoted) => Some(promoted.environment.clone()),
            Message::ReconcileEnvironment(request) => Some(request.environment.clone()),
            Message::InfrastructureProvisioned(provisioned) => Some(provisioned.environment.clone()),
            _ => None,
        }
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

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet, VecDeque};

    use bosun_contracts::messages::{InfrastructureProvisioned, SyncAction};
    use bosun_contracts::samples;
    use proptest::prelude::*;
    use time::macros::datetime;

    use super::*;

    const ENV: &str = "dev";

    fn promoted(module: &str, release: &str, minute: i64) -> DeploymentPromoted {
        let mut promoted = samples::deployment_promoted();
        promoted.environment = ENV.to_owned();
        promoted.module_id = module.to_owned();
        promoted.release_id = release.to_owned();
        promoted.promoted_at = datetime!(2026-11-29 10:00 UTC) + time::Duration::minutes(minute);
        promoted
    }

    fn reconcile(reason: ReconcileReason, commit: Option<&str>) -> Message {
        Message::ReconcileEnvironment(ReconcileEnvironment {
            environment: ENV.to_owned(),
            desired_commit_sha: commit.map(str::to_owned),
            reason,
            requested_by: None,
        })
    }

    fn infrastructure() -> Message {
        let mut provisioned: InfrastructureProvisioned = samples::infrastructure_provisioned();
        provisioned.environment = ENV.to_owned();
        Message::InfrastructureProvisioned(provisioned)
    }

    /// A simulated environment repository and environment, standing in for
    /// the consumer's port.
    #[derive(Debug, Default)]
    struct World {
        /// Content of every commit written, by commit.
        commits: BTreeMap<String, BTreeMap<String, String>>,
        /// Commits in write order.
        order: Vec<String>,
        head: Option<String>,
        running: Option<String>,
        lagging: bool,
        /// Every promotion written, in order (module, release).
        writes: Vec<(String, String)>,
    }

    impl World {
        fn content(&self) -> BTreeMap<String, String> {
            self.head
                .as_ref()
                .and_then(|head| self.commits.get(head))
                .cloned()
                .unwrap_or_default()
        }

        fn write(&mut self, promotion: &DeploymentPromoted) -> String {
            let mut content = self.content();
            let old = content.insert(promotion.module_id.clone(), promotion.release_id.clone());
            if let Some(head) = &self.head
                && old.as_deref() == Some(promotion.release_id.as_str())
            {
                return head.clone();
            }
            let commit = format!("{:040x}", self.order.len() + 1);
            self.writes
                .push((promotion.module_id.clone(), promotion.release_id.clone()));
            self.commits.insert(commit.clone(), content);
            self.order.push(commit.clone());
            self.head = Some(commit.clone());
            commit
        }

        fn reconcile(&mut self, commit: Option<&str>) -> EnvironmentReport {
            if !self.lagging {
                self.running = commit.map(str::to_owned).or_else(|| self.head.clone());
            }
            self.report()
        }

        fn report(&self) -> EnvironmentReport {
            EnvironmentReport {
                commit_sha: self.running.clone(),
                applied: vec![AppliedResource {
                    kind: "app".to_owned(),
                    name: "payments-api".to_owned(),
                    namespace: None,
                    action: SyncAction::Configured,
                }],
                healthy: true,
                observed_at: datetime!(2026-11-29 12:00 UTC),
            }
        }
    }

    /// The consumer's loop over a simulated port.
    struct Driver {
        saga: GitOpsSaga,
        state: GitOpsState,
        world: World,
        synced: Vec<GitOpsSynced>,
        timers: VecDeque<ReconcileEnvironment>,
    }

    impl Driver {
        fn new() -> Self {
            Self {
                saga: GitOpsSaga::new(),
                state: GitOpsState::default(),
                world: World::default(),
                synced: Vec::new(),
                timers: VecDeque::new(),
            }
        }

        fn collect(&mut self, actions: Vec<Action>) {
            for action in actions {
                match action {
                    Action::Send(Message::GitOpsSynced(event)) => self.synced.push(event),
                    Action::Schedule {
                        message: Message::ReconcileEnvironment(timer),
                        ..
                    } => self.timers.push_back(timer),
                    other => panic!("unexpected action {other:?}"),
                }
            }
        }

        fn input(&mut self, input: GitOpsInput<'_>) {
            let mut transition = self.saga.step(&self.state, &input).unwrap();
            loop {
                self.collect(std::mem::take(&mut transition.actions));
                let Some(work) = transition.work.take() else {
                    break;
                };
                let next = match work {
                    Work::WriteDesiredState(promotion) => {
                        let commit = self.world.write(&promotion);
                        GitOpsInput::DesiredStateWritten(DesiredStateWritten {
                            module_id: promotion.module_id.clone(),
                            release_id: promotion.release_id.clone(),
                            promoted_at: promotion.promoted_at,
                            repository: promotion.environment_repository.clone(),
                            commit_sha: commit,
                        })
                    }
                    Work::Reconcile { commit_sha, .. } => {
                        GitOpsInput::EnvironmentReported(self.world.reconcile(commit_sha.as_deref()))
                    }
                };
                transition = self.saga.step(&transition.state, &next).unwrap();
            }
            self.state = transition.state;
        }

        fn message(&mut self, message: impl Into<Message>) {
            let message = message.into();
            self.input(GitOpsInput::Message(&message));
        }

        fn fire_timer(&mut self) -> bool {
            match self.timers.pop_front() {
                Some(timer) => {
                    self.message(timer);
                    true
                }
                None => false,
            }
        }

        fn synced_commits(&self) -> Vec<&str> {
            self.synced.iter().map(|event| event.commit_sha.as_str()).collect()
        }
    }

    #[test]
    fn a_promotion_is_written_reconciled_and_reported_once() {
        let mut driver = Driver::new();
        driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
        let head = driver.world.head.clone().unwrap();
        assert_eq!(driver.state.desired_commit(), Some(head.as_str()));
        assert!(driver.state.is_synced());
        assert_eq!(driver.synced_commits(), vec![head.as_str()]);
        assert_eq!(
            driver.synced[0].release_id.as_deref(),
            Some("payments-api-1.0.0-aaaaaaa")
        );
        assert_eq!(driver.synced[0].environment, ENV);

        // The same promotion again: no write, no second GitOpsSynced.
        driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
        assert_eq!(driver.world.writes.len(), 1);
        assert_eq!(driver.synced.len(), 1);
        assert_eq!(
            driver.state.history.last().map(|entry| entry.event),
            Some(HistoryEvent::PromotionRepeated)
        );
    }

    #[test]
    fn a_newer_promotion_supersedes_an_older_one_in_flight() {
        let mut driver = Driver::new();
        driver.world.lagging = true;
        driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
        let first = driver.world.head.clone().unwrap();
        assert_eq!(driver.state.phase, GitOpsPhase::Reconciling);
        assert_eq!(driver.timers.len(), 1, "one retry scheduled");
        assert_eq!(driver.timers[0].desired_commit_sha.as_deref(), Some(first.as_str()));

        driver.message(promoted("payments-api", "payments-api-1.1.0-bbbbbbb", 5));
        let second = driver.world.head.clone().unwrap();
        assert_ne!(first, second);
        assert_eq!(driver.state.desired_commit(), Some(second.as_str()));
        assert_eq!(driver.timers.len(), 2, "a retry for the new commit");

        // The environment catches up with the old commit only: not synced.
        driver.world.lagging = false;
        driver.world.running = Some(first.clone());
        driver.input(GitOpsInput::EnvironmentReported(driver.world.report()));
        assert_eq!(driver.state.phase, GitOpsPhase::Reconciling);
        assert!(driver.synced.is_empty());

        // The old timer is stale; the new one reconciles the new commit.
        assert!(driver.fire_timer());
        assert!(driver.synced.is_empty());
        assert_eq!(
            driver.state.history.last().map(|entry| entry.event),
            Some(HistoryEvent::ReconcileIgnored)
        );
        assert!(driver.fire_timer());
        assert!(driver.state.is_synced());
        // The superseded release of the same module is never reported.
        assert_eq!(driver.synced_commits(), vec![second.as_str()]);
        assert_eq!(
            driver.synced[0].release_id.as_deref(),
            Some("payments-api-1.1.0-bbbbbbb")
        );
    }

    #[test]
    fn a_late_older_promotion_does_not_roll_back() {
        let mut driver = Driver::new();
        driver.message(promoted("payments-api", "payments-api-1.1.0-bbbbbbb", 5));
        let head = driver.world.head.clone();
        driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
        assert_eq!(driver.world.head, head);
        assert_eq!(driver.world.writes.len(), 1);
        assert_eq!(driver.synced.len(), 1);
        assert_eq!(
            driver.state.history.last().map(|entry| entry.event),
            Some(HistoryEvent::PromotionIgnored)
        );
    }

    #[test]
    fn releases_contained_in_a_newer_synced_commit_are_reported() {
        let mut driver = Driver::new();
        driver.world.lagging = true;
        driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
        let first = driver.world.head.clone().unwrap();
        driver.message(promoted("billing", "billing-2.0.0-ccccccc", 1));
        let second = driver.world.head.clone().unwrap();
        driver.world.lagging = false;
        while driver.fire_timer() {}
        assert!(driver.state.is_synced());
        assert_eq!(driver.synced_commits(), vec![second.as_str(), first.as_str()]);
        assert_eq!(
            driver.synced[1].release_id.as_deref(),
            Some("payments-api-1.0.0-aaaaaaa")
        );
    }

    #[test]
    fn infrastructure_changes_and_manual_requests_reconcile_again_without_reporting_twice() {
        let mut driver = Driver::new();
        driver.message(infrastructure());
        assert_eq!(driver.state.phase, GitOpsPhase::Idle);

        driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
        let head = driver.world.head.clone().unwrap();
        driver.world.running = None; // drifted away
        driver.message(infrastructure());
        assert_eq!(driver.world.running.as_deref(), Some(head.as_str()));
        driver.message(reconcile(ReconcileReason::Manual, None));
        driver.message(reconcile(ReconcileReason::Drift, Some(&head)));
        assert_eq!(driver.synced.len(), 1);

        // A manual request for another commit is not a rollback.
        let other = "f".repeat(40);
        let transition = driver
            .saga
            .step(
                &driver.state,
                &GitOpsInput::Message(&reconcile(ReconcileReason::Manual, Some(&other))),
            )
            .unwrap();
        assert_eq!(transition.work, None);

        // A preview changes nothing.
        let mut preview = samples::infrastructure_provisioned();
        preview.environment = ENV.to_owned();
        preview.preview_only = true;
        let transition = driver
            .saga
            .step(&driver.state, &GitOpsInput::Message(&preview.into()))
            .unwrap();
        assert_eq!(transition.work, None);
    }

    #[test]
    fn a_reconcile_without_a_promotion_adopts_the_branch_head() {
        let saga = GitOpsSaga::new();
        let transition = saga
            .step(
                &GitOpsState::default(),
                &GitOpsInput::Message(&reconcile(ReconcileReason::Manual, None)),
            )
            .unwrap();
        assert_eq!(
            transition.work,
            Some(Work::Reconcile {
                repository: None,
                commit_sha: None,
                reason: ReconcileReason::Manual
            })
        );
        let commit = "a".repeat(40);
        let report = EnvironmentReport {
            commit_sha: Some(commit.clone()),
            applied: vec![],
            healthy: true,
            observed_at: datetime!(2026-11-29 12:00 UTC),
        };
        let synced = saga
            .step(&transition.state, &GitOpsInput::EnvironmentReported(report))
            .unwrap();
        assert!(synced.state.is_synced());
        assert!(matches!(
            &synced.actions[..],
            [Action::Send(Message::GitOpsSynced(event))] if event.commit_sha == commit && event.release_id.is_none()
        ));
    }

    #[test]
    fn retries_back_off_exponentially_one_timer_at_a_time() {
        let saga = GitOpsSaga::new().with_reconcile_backoff(Duration::from_secs(2), Duration::from_secs(10));
        assert_eq!(saga.reconcile_delay(1), Duration::from_secs(2));
        assert_eq!(saga.reconcile_delay(2), Duration::from_secs(4));
        assert_eq!(saga.reconcile_delay(3), Duration::from_secs(8));
        assert_eq!(saga.reconcile_delay(4), Duration::from_secs(10));
        assert_eq!(saga.reconcile_delay(400), Duration::from_secs(10));

        let mut driver = Driver::new();
        driver.saga = saga;
        driver.world.lagging = true;
        driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
        // Another reconcile while the timer is pending schedules nothing.
        driver.message(reconcile(ReconcileReason::Manual, None));
        assert_eq!(driver.timers.len(), 1);
        let mut delays = vec![driver.state.pending_reconcile.as_ref().unwrap().delay_ms];
        for _ in 0..3 {
            assert!(driver.fire_timer());
            delays.push(driver.state.pending_reconcile.as_ref().unwrap().delay_ms);
        }
        assert_eq!(delays, vec![2000, 4000, 8000, 10000]);
        assert_eq!(driver.timers.len(), 1);
    }

    #[test]
    fn messages_of_another_environment_or_type_are_rejected() {
        let saga = GitOpsSaga::new();
        let state = saga
            .apply(&GitOpsState::default(), &promoted("a", "a-1.0.0-aaaaaaa", 0).into())
            .unwrap()
            .state;
        let mut other = promoted("a", "a-1.0.0-aaaaaaa", 0);
        other.environment = "prod".to_owned();
        assert!(saga.apply(&state, &other.into()).is_err());
        assert!(saga.apply(&state, &samples::release_approved().into()).is_err());
        assert_eq!(saga.key_of(&samples::release_approved().into()), None);
        assert_eq!(
            saga.key_of(&samples::reconcile_environment().into()).as_deref(),
            Some("prod")
        );
        assert!(
            saga.step(
                &GitOpsState::default(),
                &GitOpsInput::EnvironmentReported(World::default().report())
            )
            .is_err()
        );
    }

    #[test]
    fn state_round_trips_through_json_and_diagram_is_mermaid() {
        let mut driver = Driver::new();
        driver.world.lagging = true;
        driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
        let json = serde_json::to_value(&driver.state).unwrap();
        assert_eq!(json["phase"], "reconciling");
        assert!(json["pendingReconcile"]["commitSha"].is_string());
        let back: GitOpsState = serde_json::from_value(json).unwrap();
        assert_eq!(back, driver.state);
        let empty: GitOpsState = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(empty, GitOpsState::default());

        let diagram = GitOpsSaga::new().diagram();
        assert!(diagram.starts_with("stateDiagram-v2\n"));
        assert!(diagram.contains("Reconciling --> Synced"));
    }

    #[test]
    fn history_is_bounded() {
        let mut driver = Driver::new();
        driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
        for _ in 0..(HISTORY_LIMIT * 2) {
            driver.message(reconcile(ReconcileReason::Manual, None));
        }
        assert_eq!(driver.state.history.len(), HISTORY_LIMIT);
    }

    /// Releases of two modules, in promotion order within each module.
    const RELEASES: &[(&str, &str, i64)] = &[
        ("payments-api", "payments-api-1.0.0-aaaaaaa", 0),
        ("payments-api", "payments-api-1.1.0-bbbbbbb", 10),
        ("payments-api", "payments-api-1.2.0-ccccccc", 20),
        ("billing", "billing-1.0.0-ddddddd", 5),
        ("billing", "billing-1.1.0-eeeeeee", 15),
    ];

    #[derive(Debug, Clone)]
    enum Op {
        Promote(usize),
        Manual,
        Infrastructure,
        FireTimer,
        Lag(bool),
        /// The environment is seen running an earlier written commit.
        ObserveEarlier(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..RELEASES.len()).prop_map(Op::Promote),
            1 => Just(Op::Manual),
            1 => Just(Op::Infrastructure),
            3 => Just(Op::FireTimer),
            2 => any::<bool>().prop_map(Op::Lag),
            1 => any::<usize>().prop_map(Op::ObserveEarlier),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_order_and_duplication_converges_to_the_newest_desired_commit(ops in prop::collection::vec(op(), 1..40)) {
            let mut driver = Driver::new();
            let mut promoted_any = BTreeSet::new();
            for op in ops {
                match op {
                    Op::Promote(index) => {
                        let (module, release, minute) = RELEASES[index];
                        promoted_any.insert(index);
                        driver.message(promoted(module, release, minute));
                    }
                    Op::Manual => driver.message(reconcile(ReconcileReason::Manual, None)),
                    Op::Infrastructure => driver.message(infrastructure()),
                    Op::FireTimer => {
                        driver.fire_timer();
                    }
                    Op::Lag(lagging) => driver.world.lagging = lagging,
                    Op::ObserveEarlier(pick) => {
                        if !driver.world.order.is_empty() {
                            let commit = driver.world.order[pick % driver.world.order.len()].clone();
                            driver.world.running = Some(commit);
                            driver.input(GitOpsInput::EnvironmentReported(driver.world.report()));
                        }
                    }
                }
                // The desired commit is always the repository's head.
                prop_assert_eq!(driver.state.desired_commit(), driver.world.head.as_deref());
                // At most one retry in flight for the desired commit.
                let desired = driver.state.desired_commit().map(str::to_owned);
                let timers_for_desired = driver
                    .timers
                    .iter()
                    .filter(|timer| timer.desired_commit_sha == desired)
                    .count();
                prop_assert!(timers_for_desired <= 1, "{timers_for_desired} timers for the desired commit");
            }

            // Let the environment catch up: deliver every retry.
            driver.world.lagging = false;
            let mut deliveries = 0;
            while driver.fire_timer() {
                deliveries += 1;
                prop_assert!(deliveries < 100);
            }

            // GitOpsSynced at most once per (environment, commitSha), and
            // only for releases the commit really holds.
            let commits = driver.synced_commits();
            let unique: BTreeSet<&str> = commits.iter().copied().collect();
            prop_assert_eq!(unique.len(), commits.len(), "duplicate GitOpsSynced: {:?}", commits);
            for event in &driver.synced {
                let content = &driver.world.commits[&event.commit_sha];
                let release = event.release_id.as_deref().unwrap();
                prop_assert!(content.values().any(|r| r == release));
            }

            // Writes per module only move forward.
            let mut last: BTreeMap<&str, usize> = BTreeMap::new();
            for (module, release) in &driver.world.writes {
                let index = RELEASES.iter().position(|(_, r, _)| r == release).unwrap();
                if let Some(previous) = last.insert(module.as_str(), index) {
                    prop_assert!(previous < index, "{} rolled back", module);
                }
            }

            if promoted_any.is_empty() {
                prop_assert_eq!(driver.state.phase, GitOpsPhase::Idle);
                prop_assert!(driver.synced.is_empty());
                return Ok(());
            }
            // Converged: the newest promotion of each module is desired,
            // the environment runs it, and it was reported exactly once.
            let mut newest: BTreeMap<String, String> = BTreeMap::new();
            for index in &promoted_any {
                let (module, release, _) = RELEASES[*index];
                newest.insert(module.to_owned(), release.to_owned());
            }
            prop_assert_eq!(driver.world.content(), newest.clone());
            let head = driver.world.head.clone().unwrap();
            prop_assert!(driver.state.is_synced());
            prop_assert_eq!(driver.world.running.as_deref(), Some(head.as_str()));
            prop_assert_eq!(commits.iter().filter(|c| **c == head).count(), 1);
            prop_assert!(driver.state.pending_reconcile.is_none());
            // Every module's current release was reported.
            for release in newest.values() {
                prop_assert!(
                    driver.synced.iter().any(|event| event.release_id.as_deref() == Some(release.as_str())),
                    "{} never reported", release
                );
            }
        }
    }
}
