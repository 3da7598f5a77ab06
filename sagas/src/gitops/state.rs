//! What a GitOps saga keeps: [`GitOpsState`], its desired and observed
//! commits, the newest release of each module and the history.

use std::collections::BTreeMap;

use bosun_contracts::messages::DeploymentPromoted;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::{HISTORY_LIMIT, REPORTED_LIMIT};

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
    /// first, at most [`SUPERSEDED_LIMIT`](super::SUPERSEDED_LIMIT)).
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
    /// Promotions waiting for the one in flight to be synced, oldest first:
    /// one release is promoted to an environment at a time.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub queued: Vec<DeploymentPromoted>,
    /// Releases verified in the environment, by module (oldest first, at
    /// most [`VERIFIED_LIMIT`](super::VERIFIED_LIMIT)): what a rollback
    /// goes back to.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub verified: BTreeMap<String, Vec<VerifiedRelease>>,
    /// What happened (oldest first, at most [`HISTORY_LIMIT`]).
    pub history: Vec<HistoryEntry>,
}

/// A release verified in the environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifiedRelease {
    /// The release.
    pub release_id: String,
    /// Its promotion, as a rollback writes it again.
    pub promotion: DeploymentPromoted,
    /// When it was verified.
    #[serde(with = "time::serde::rfc3339")]
    pub verified_at: OffsetDateTime,
}

/// Version 1: the state as it was when states were first versioned (and as
/// states saved before then read). See [`crate::versioned`] for when to
/// bump it.
/// Version 2 adds `queued`. A state with no promotion queued is saved as
/// version 1, which the previous release reads; one with a queue as version
/// 2, which it leaves alone (its message waits for this release) instead
/// of saving it without the queue.
impl crate::versioned::VersionedState for GitOpsState {
    const KIND: crate::SagaKind = crate::SagaKind::Gitops;
    const VERSION: u32 = 2;
    const UPCASTS: &'static [crate::versioned::Upcast] = &[|state| Ok(state)];

    fn stored_version(&self) -> u32 {
        if self.queued.is_empty() { 1 } else { 2 }
    }
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

    /// The release whose promotion is in flight (written, not yet synced),
    /// if one is.
    pub fn in_flight(&self) -> Option<&str> {
        if self.phase != GitOpsPhase::Reconciling {
            return None;
        }
        self.desired.as_ref().and_then(|desired| desired.release_id.as_deref())
    }

    pub(super) fn record(&mut self, entry: HistoryEntry) {
        self.history.push(entry);
        if self.history.len() > HISTORY_LIMIT {
            let excess = self.history.len() - HISTORY_LIMIT;
            self.history.drain(..excess);
        }
    }

    pub(super) fn mark_reported(&mut self, commit_sha: &str) {
        self.reported.push(commit_sha.to_owned());
        if self.reported.len() > REPORTED_LIMIT {
            let excess = self.reported.len() - REPORTED_LIMIT;
            self.reported.drain(..excess);
        }
    }
}
