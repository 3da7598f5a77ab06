//! Bulk replay jobs, stored: what was asked (the filter or the ids, the
//! rate, who asked), each dead letter's place in the job with the replay id
//! it is sent under, and the progress. A job outlives the process running
//! it: a runner holds a job by a lease it renews, and when its process dies
//! another runner (any replica, or the same one restarted) claims the job
//! once the lease has run out and carries on with the items not yet done.
//!
//! Nothing is replayed twice: each item's replay id is fixed when the job is
//! created, so a replay that was sent but not yet recorded when its process
//! died is sent again under the same broker message id (the transport's
//! duplicate detection drops the copy) and then recorded once; a replay the
//! dead letter already records is not sent again at all.

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use super::StoreError;
use crate::ports::error::BoxError;

/// Where a bulk replay job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplayJobStatus {
    /// Replaying (or waiting for a runner to claim it).
    Running,
    /// Paused by someone; resumes where it stopped.
    Paused,
    /// Cancelled by someone: what was not replayed stays dead-lettered.
    Cancelled,
    /// Every dead letter of the job was replayed or failed.
    Finished,
}

impl ReplayJobStatus {
    /// The stored and shown name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Cancelled => "cancelled",
            Self::Finished => "finished",
        }
    }

    /// From [`ReplayJobStatus::as_str`].
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Running, Self::Paused, Self::Cancelled, Self::Finished]
            .into_iter()
            .find(|status| status.as_str() == text)
    }

    /// Whether nothing more happens to the job.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Cancelled | Self::Finished)
    }
}

/// What someone did to a running job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplayJobAction {
    /// Stop after the replay in progress; resume later.
    Pause,
    /// Carry on with a paused job.
    Resume,
    /// Stop for good.
    Cancel,
}

impl ReplayJobAction {
    /// Its name (`pause`, `resume`, `cancel`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Cancel => "cancel",
        }
    }

    /// What a job it was done to is: `paused`, `resumed`, `cancelled`.
    pub fn done_word(self) -> &'static str {
        match self {
            Self::Pause => "paused",
            Self::Resume => "resumed",
            Self::Cancel => "cancelled",
        }
    }

    /// From [`ReplayJobAction::as_str`].
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Pause, Self::Resume, Self::Cancel]
            .into_iter()
            .find(|action| action.as_str() == text)
    }

    /// The status the action leads to from `from`, or `None` when it does
    /// not apply there (pausing a finished job, resuming a running one).
    pub fn apply(self, from: ReplayJobStatus) -> Option<ReplayJobStatus> {
        match (self, from) {
            (Self::Pause, ReplayJobStatus::Running) => Some(ReplayJobStatus::Paused),
            (Self::Resume, ReplayJobStatus::Paused) => Some(ReplayJobStatus::Running),
            (Self::Cancel, ReplayJobStatus::Running | ReplayJobStatus::Paused) => Some(ReplayJobStatus::Cancelled),
            _ => None,
        }
    }
}

/// One pause, resume or cancel, with who did it and when.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayJobControl {
    /// What was done.
    pub action: ReplayJobAction,
    /// Who did it (`key:<id>`, an operator's name).
    pub by: String,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// Why, when bosun did it itself (a job paused because the key that
    /// started it was revoked, expired or lost the right).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A stored bulk replay job.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayJobRecord {
    /// Its id.
    pub id: Uuid,
    /// The tenant whose dead letters it replays (`*`: a platform key's job).
    pub tenant_id: String,
    /// Who started it: each replay is recorded as theirs.
    pub requested_by: String,
    /// Through what (`api:<key id>`, `cli`), as the replays record it.
    pub source: String,
    /// Who decides again when an approval is replayed.
    pub principal: String,
    /// What was asked: `{"filter": {...}}`, `{"ids": [...]}` or
    /// `{"group": "<fingerprint>"}`.
    pub request: Value,
    /// At most this many replays per second.
    pub rate: Option<f64>,
    /// Where it is.
    pub status: ReplayJobStatus,
    /// Dead letters in the job.
    pub total: u64,
    /// Replayed so far.
    pub replayed: u64,
    /// Failed so far (each item says why).
    pub failed: u64,
    /// When it was started.
    pub created_at: OffsetDateTime,
    /// When its progress or status last changed.
    pub updated_at: OffsetDateTime,
    /// When it finished or was cancelled.
    pub finished_at: Option<OffsetDateTime>,
    /// The runner holding it.
    pub lease_owner: Option<String>,
    /// Until when that runner holds it.
    pub lease_until: Option<OffsetDateTime>,
    /// Every pause, resume and cancel, oldest first.
    pub controls: Vec<ReplayJobControl>,
}

impl ReplayJobRecord {
    /// Applies a pause, resume or cancel to the job as loaded: its status,
    /// when it changed (and ended, for a cancel) and the control recorded.
    /// `false`, and nothing changed, when the action does not apply to where
    /// the job is. Every backend writes the job as this leaves it.
    pub fn apply(&mut self, control: ReplayJobControl) -> bool {
        let Some(status) = control.action.apply(self.status) else {
            return false;
        };
        self.status = status;
        self.updated_at = control.at;
        if status == ReplayJobStatus::Cancelled {
            self.finished_at = Some(control.at);
        }
        self.controls.push(control);
        true
    }
}

/// How one dead letter of a job went.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayItemOutcome {
    /// Replayed (or found replayed under the item's replay id).
    Replayed {
        /// When.
        at: OffsetDateTime,
    },
    /// Not replayed, and why.
    Failed {
        /// The error.
        error: String,
        /// When.
        at: OffsetDateTime,
    },
}

/// One dead letter of a job.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayJobItem {
    /// Its place in the job, from 0.
    pub position: u32,
    /// The dead letter.
    pub dead_letter_id: Uuid,
    /// The replay id it is sent and recorded under.
    pub replay_id: Uuid,
    /// How it went; `None` while still to do.
    pub outcome: Option<ReplayItemOutcome>,
}

/// What [`ReplayJobStore::control_replay_job`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum ControlOutcome {
    /// Applied: the job as it is now.
    Applied(ReplayJobRecord),
    /// The action does not apply to the job's status: the job as it is.
    NotApplicable(ReplayJobRecord),
}

/// Stored bulk replay jobs. In the same database as the dead letters they
/// replay.
#[async_trait]
pub trait ReplayJobStore: Send + Sync {
    /// Stores a new job with its items, in one transaction.
    async fn create_replay_job(&self, job: &ReplayJobRecord, items: &[ReplayJobItem]) -> Result<(), StoreError>;

    /// One job, of `tenant_id` only when given.
    async fn replay_job(&self, id: Uuid, tenant_id: Option<&str>) -> Result<Option<ReplayJobRecord>, StoreError>;

    /// The newest jobs first, of `tenant_id` only when given.
    async fn list_replay_jobs(&self, tenant_id: Option<&str>, limit: usize)
    -> Result<Vec<ReplayJobRecord>, StoreError>;

    /// A job's items, in order.
    async fn replay_job_items(&self, id: Uuid) -> Result<Vec<ReplayJobItem>, StoreError>;

    /// Takes the oldest running job no runner holds (or whose runner's
    /// lease ran out before `now`) for `owner`, until `now + lease`.
    async fn claim_replay_job(
        &self,
        owner: &str,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<ReplayJobRecord>, StoreError>;

    /// Extends `owner`'s lease on a job to `now + lease` and returns the job
    /// (its status may have changed: paused, cancelled); `None` when
    /// `owner` no longer holds it.
    async fn renew_replay_job(
        &self,
        id: Uuid,
        owner: &str,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<ReplayJobRecord>, StoreError>;

    /// Records how one item went and extends the lease, in one transaction,
    /// only while `owner` holds the job; a job whose items are all done
    /// becomes finished. Returns the job, or `None` (and writes nothing)
    /// when `owner` no longer holds it.
    async fn record_replay_item(
        &self,
        id: Uuid,
        owner: &str,
        position: u32,
        outcome: &ReplayItemOutcome,
        lease: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<ReplayJobRecord>, StoreError>;

    /// Lets go of a job `owner` holds (paused, cancelled, or its process
    /// shutting down), so another runner may claim it at once.
    async fn release_replay_job(&self, id: Uuid, owner: &str) -> Result<(), StoreError>;

    /// Pauses, resumes or cancels a job of `tenant_id` (any tenant's when
    /// `None`), recording who did it. [`StoreError::NotFound`] when there is
    /// no such job.
    async fn control_replay_job(
        &self,
        id: Uuid,
        tenant_id: Option<&str>,
        control: ReplayJobControl,
    ) -> Result<ControlOutcome, StoreError>;
}

/// The JSON of a job's controls, as stored.
pub(crate) fn controls_to_json(controls: &[ReplayJobControl]) -> Result<String, StoreError> {
    serde_json::to_string(controls).map_err(|err| StoreError::Unencodable {
        what: "the controls of a replay job".into(),
        source: Box::new(err),
    })
}

/// A job's controls from their stored JSON.
pub(crate) fn controls_from_json(text: &str) -> Result<Vec<ReplayJobControl>, StoreError> {
    #[derive(serde::Deserialize)]
    struct Stored {
        action: String,
        by: String,
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        #[serde(default)]
        reason: Option<String>,
    }
    let corrupt = |source: BoxError| StoreError::Corrupt {
        what: "controls of a replay job".into(),
        source,
    };
    let stored: Vec<Stored> = serde_json::from_str(text).map_err(|err| corrupt(err.into()))?;
    stored
        .into_iter()
        .map(|control| {
            Ok(ReplayJobControl {
                action: ReplayJobAction::parse(&control.action)
                    .ok_or_else(|| corrupt(format!("unknown action `{}`", control.action).into()))?,
                by: control.by,
                at: control.at,
                reason: control.reason,
            })
        })
        .collect()
}

/// A job's status from its stored name.
pub(crate) fn status_from_str(text: &str) -> Result<ReplayJobStatus, StoreError> {
    ReplayJobStatus::parse(text).ok_or_else(|| StoreError::Corrupt {
        what: "status of a replay job".into(),
        source: format!("unknown status `{text}`").into(),
    })
}

/// An item's outcome from its stored columns (state, error, at).
pub(crate) fn outcome_from_columns(
    state: &str,
    error: Option<String>,
    at: Option<OffsetDateTime>,
) -> Result<Option<ReplayItemOutcome>, StoreError> {
    let corrupt = |detail: &str| StoreError::Corrupt {
        what: "outcome of a replay job item".into(),
        source: detail.to_owned().into(),
    };
    match (state, at) {
        ("pending", _) => Ok(None),
        ("replayed", Some(at)) => Ok(Some(ReplayItemOutcome::Replayed { at })),
        ("failed", Some(at)) => Ok(Some(ReplayItemOutcome::Failed {
            error: error.unwrap_or_default(),
            at,
        })),
        ("replayed" | "failed", None) => Err(corrupt("a done item without its time")),
        _ => Err(corrupt(&format!("unknown state `{state}`"))),
    }
}

/// An outcome's stored columns (state, error, at).
pub(crate) fn outcome_columns(outcome: &ReplayItemOutcome) -> (&'static str, Option<&str>, OffsetDateTime) {
    match outcome {
        ReplayItemOutcome::Replayed { at } => ("replayed", None, *at),
        ReplayItemOutcome::Failed { error, at } => ("failed", Some(error.as_str()), *at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_apply_only_where_they_mean_something() {
        use ReplayJobAction::*;
        use ReplayJobStatus::*;
        assert_eq!(Pause.apply(Running), Some(Paused));
        assert_eq!(Resume.apply(Paused), Some(Running));
        assert_eq!(Cancel.apply(Paused), Some(Cancelled));
        assert_eq!(Cancel.apply(Running), Some(Cancelled));
        for (action, status) in [
            (Pause, Paused),
            (Resume, Running),
            (Pause, Finished),
            (Cancel, Finished),
            (Resume, Cancelled),
        ] {
            assert_eq!(action.apply(status), None, "{action:?} on {status:?}");
        }
    }

    #[test]
    fn controls_round_trip_and_corrupt_ones_say_what() {
        let controls = vec![
            ReplayJobControl {
                action: ReplayJobAction::Pause,
                by: "key:abc".into(),
                at: OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap(),
                reason: None,
            },
            ReplayJobControl {
                action: ReplayJobAction::Pause,
                by: "bosun".into(),
                at: OffsetDateTime::from_unix_timestamp(1_700_000_001).unwrap(),
                reason: Some("key abc was revoked".into()),
            },
        ];
        let text = controls_to_json(&controls).unwrap();
        assert_eq!(controls_from_json(&text).unwrap(), controls);
        // What the release before reasons wrote still reads.
        let before = r#"[{"action":"pause","by":"alice","at":"2026-01-01T00:00:00Z"}]"#;
        assert_eq!(controls_from_json(before).unwrap()[0].reason, None);
        let err = controls_from_json(r#"[{"action":"explode","by":"x","at":"2026-01-01T00:00:00Z"}]"#).unwrap_err();
        assert!(err.to_string().contains("explode"), "{err}");
    }
}
