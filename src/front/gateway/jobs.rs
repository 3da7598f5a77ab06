//! Bulk replay jobs: started, shown, paused, resumed and cancelled through
//! the front door, stored ([`crate::ports::store::ReplayJobStore`]) and run
//! by [`Gateway::run_replay_jobs`] in every process that serves the API.
//!
//! A runner claims a job by a lease ([`JOB_LEASE`]) that it renews with
//! every replay and while it waits between two (the job's rate). When its
//! process dies, the lease runs out and a runner of any replica, or of the
//! same process restarted, claims the job and carries on with the items not
//! yet done. Each item's replay id is fixed when the job is made, so no dead
//! letter is replayed twice ([`Operator::replay_as`]). A pause or cancel is
//! a change of the stored status, seen by the runner at its next renewal or
//! replay; a resumed job is claimed again.

use std::time::Instant;

use serde_json::json;

use super::*;
use crate::front::access::Refusal;
use crate::ports::store::{
    ControlOutcome, ReplayItemOutcome, ReplayJobAction, ReplayJobControl, ReplayJobItem, ReplayJobRecord,
    ReplayJobStatus,
};

/// How long a runner holds a job without renewing its lease: how soon a
/// job resumes after its process died.
pub const JOB_LEASE: Duration = Duration::from_secs(10);
/// How often a waiting runner renews its lease (and sees a pause or cancel).
const JOB_RENEW: Duration = Duration::from_secs(2);
/// How often an idle runner looks for a job another process started or
/// whose runner died (a job started in this process wakes it at once).
const JOB_LOOK: Duration = Duration::from_secs(2);
/// The most jobs a listing shows.
pub const MAX_JOBS_LISTED: usize = 200;

impl Gateway {
    /// Starts replaying many dead letters: the job is stored and a runner
    /// (this process's, or any replica's) carries it out; follow it with
    /// [`Gateway::replay_job`].
    pub async fn start_bulk_replay(
        &self,
        caller: &Caller,
        request: BulkReplayRequest,
    ) -> Result<ReplayJob, GatewayError> {
        self.start_bulk_replay_as(caller, request, None).await
    }

    /// [`Gateway::start_bulk_replay`], recording the failure group the
    /// dead letters were taken from.
    pub(super) async fn start_bulk_replay_as(
        &self,
        caller: &Caller,
        request: BulkReplayRequest,
        group: Option<&str>,
    ) -> Result<ReplayJob, GatewayError> {
        Self::require(caller, Scope::DeadLettersReplay)?;
        let invalid = |field: &str, message: String| GatewayError::Invalid {
            field: Some(field.to_owned()),
            message,
        };
        if let Some(rate) = request.rate
            && !(rate >= MIN_REPLAY_RATE && rate.is_finite())
        {
            return Err(invalid(
                "rate",
                format!("rate must be a number of replays per second of at least {MIN_REPLAY_RATE}"),
            ));
        }
        // Exactly one of ids, a narrowing filter, or an explicit `all`: a
        // filter that names nothing would take every dead letter of the
        // tenant, which must be asked for as such.
        let narrows = |filter: &DeadLetterFilter| {
            filter.consumer.is_some()
                || filter.message_type.is_some()
                || filter.reason.is_some()
                || filter.since.is_some()
        };
        if request.all && (!request.ids.is_empty() || request.filter.is_some()) {
            return Err(invalid(
                "all",
                "`all: true` takes every dead letter of the tenant: give it alone, without `ids` or `filter`".into(),
            ));
        }
        if let Some(filter) = &request.filter
            && !narrows(filter)
        {
            return Err(invalid(
                "all",
                "the filter names nothing to narrow by (consumer, type, reason, since): to replay every dead \
                 letter of the tenant, send `\"all\": true` instead"
                    .into(),
            ));
        }
        let filter = match (&request.filter, request.all) {
            (Some(filter), _) => Some(filter.clone()),
            (None, true) => Some(DeadLetterFilter::default()),
            (None, false) => None,
        };
        let ids: Vec<Uuid> = match (&filter, request.ids.is_empty()) {
            (Some(filter), true) => {
                let filter = DeadLetterFilter {
                    include_replayed: false,
                    limit: Some(MAX_BULK_REPLAY),
                    ..filter.clone()
                };
                let records = self.dead_letters(caller, filter).await?;
                for record in &records {
                    Self::require_decision_right(caller, record, None)?;
                }
                records.iter().map(|r| r.id).collect()
            }
            (None, false) => {
                let mut ids = Vec::new();
                for id in &request.ids {
                    let record = self.visible_dead_letter(caller, &id.to_string()).await?;
                    Self::require_decision_right(caller, &record, None)?;
                    ids.push(record.id);
                }
                ids
            }
            (Some(_), false) => {
                return Err(invalid("ids", "give either `ids` or `filter`, not both".into()));
            }
            (None, true) => {
                return Err(invalid(
                    "ids",
                    "give `ids` (a non-empty list), a `filter`, or `\"all\": true`".into(),
                ));
            }
        };
        if ids.len() > MAX_BULK_REPLAY {
            return Err(GatewayError::Invalid {
                field: Some("ids".into()),
                message: format!("at most {MAX_BULK_REPLAY} dead letters per bulk replay"),
            });
        }
        let now = OffsetDateTime::now_utc();
        let asked = match (group, &request.filter) {
            (Some(fingerprint), _) => json!({ "group": fingerprint }),
            (None, Some(filter)) => json!({ "filter": filter_json(filter) }),
            (None, None) if request.all => json!({ "all": true }),
            (None, None) => json!({ "ids": ids }),
        };
        let empty = ids.is_empty();
        let job = ReplayJobRecord {
            id: Uuid::now_v7(),
            tenant_id: caller.tenant_id.clone(),
            requested_by: caller.identity(),
            source: format!("api:{}", caller.key_id),
            principal: caller.principal(),
            request: asked,
            rate: request.rate,
            status: if empty {
                ReplayJobStatus::Finished
            } else {
                ReplayJobStatus::Running
            },
            total: ids.len() as u64,
            replayed: 0,
            failed: 0,
            created_at: now,
            updated_at: now,
            finished_at: empty.then_some(now),
            lease_owner: None,
            lease_until: None,
            controls: Vec::new(),
        };
        let items: Vec<ReplayJobItem> = ids
            .iter()
            .zip(0u32..)
            .map(|(id, position)| ReplayJobItem {
                position,
                dead_letter_id: *id,
                replay_id: Uuid::now_v7(),
                outcome: None,
            })
            .collect();
        self.access.create_replay_job(&job, &items).await?;
        tracing::info!(
            key_id = %caller.key_id,
            by = %job.requested_by,
            job = %job.id,
            total = job.total,
            rate = ?job.rate,
            "bulk replay started"
        );
        self.wake_runner.notify_one();
        Ok(ReplayJob::of(&job, &items))
    }

    /// A bulk replay job and how far it got, from the store: the same from
    /// every replica.
    pub async fn replay_job(&self, caller: &Caller, id: &str) -> Result<ReplayJob, GatewayError> {
        Self::require_dead_letter_read(caller)?;
        let not_found = || GatewayError::not_found("replay", id);
        let job_id = Uuid::parse_str(id).map_err(|_| not_found())?;
        let tenant = caller.tenant_filter();
        let job = self
            .access
            .replay_job(job_id, tenant.as_deref())
            .await?
            .ok_or_else(not_found)?;
        let items = self.access.replay_job_items(job.id).await?;
        Ok(ReplayJob::of(&job, &items))
    }

    /// The caller's bulk replay jobs, newest first (without their items'
    /// lists: counts only).
    pub async fn replay_jobs(&self, caller: &Caller, limit: Option<usize>) -> Result<Vec<ReplayJob>, GatewayError> {
        Self::require_dead_letter_read(caller)?;
        let limit = limit.unwrap_or(50).clamp(1, MAX_JOBS_LISTED);
        let tenant = caller.tenant_filter();
        let jobs = self.access.list_replay_jobs(tenant.as_deref(), limit).await?;
        Ok(jobs.iter().map(|job| ReplayJob::of(job, &[])).collect())
    }

    /// Pauses, resumes or cancels one of the caller's jobs, recorded with
    /// who did it. Conflict when the action does not apply to where the job
    /// is (pausing a finished job).
    pub async fn control_replay_job(
        &self,
        caller: &Caller,
        id: &str,
        action: ReplayJobAction,
    ) -> Result<ReplayJob, GatewayError> {
        Self::require(caller, Scope::DeadLettersReplay)?;
        let not_found = || GatewayError::not_found("replay", id);
        let job_id = Uuid::parse_str(id).map_err(|_| not_found())?;
        let tenant = caller.tenant_filter();
        let control = ReplayJobControl {
            action,
            by: caller.identity(),
            at: OffsetDateTime::now_utc(),
            reason: None,
        };
        let job = match self.access.control_replay_job(job_id, tenant.as_deref(), control).await {
            Ok(ControlOutcome::Applied(job)) => job,
            Ok(ControlOutcome::NotApplicable(job)) => {
                return Err(GatewayError::Conflict(format!(
                    "replay job {} is {}: it cannot be {}",
                    job.id,
                    job.status.as_str(),
                    action.done_word()
                )));
            }
            Err(StoreError::NotFound { .. }) => return Err(not_found()),
            Err(err) => return Err(err.into()),
        };
        tracing::info!(
            key_id = %caller.key_id,
            by = %caller.identity(),
            job = %job.id,
            action = action.as_str(),
            status = job.status.as_str(),
            "bulk replay job changed"
        );
        if action == ReplayJobAction::Resume {
            self.wake_runner.notify_one();
        }
        let items = self.access.replay_job_items(job.id).await?;
        Ok(ReplayJob::of(&job, &items))
    }

    /// Runs stored bulk replay jobs, one at a time, until `stop` is
    /// cancelled: every process serving the API runs one.
    pub async fn run_replay_jobs(self, stop: CancellationToken) {
        let owner = format!(
            "{}:{}:{}",
            crate::runtime::host_name(),
            std::process::id(),
            Uuid::now_v7().simple()
        );
        tracing::debug!(%owner, "replay job runner started");
        while !stop.is_cancelled() {
            match self
                .access
                .claim_replay_job(&owner, JOB_LEASE, OffsetDateTime::now_utc())
                .await
            {
                Ok(Some(job)) => {
                    self.run_job(job, &owner, &stop).await;
                    continue;
                }
                Ok(None) => {}
                Err(err) => tracing::warn!(error = %err, "cannot look for replay jobs; trying again"),
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = self.wake_runner.notified() => {}
                () = tokio::time::sleep(JOB_LOOK) => {}
            }
        }
    }

    /// Carries one claimed job on until it is done, paused, cancelled, its
    /// lease is lost or `stop` is cancelled.
    async fn run_job(&self, job: ReplayJobRecord, owner: &str, stop: &CancellationToken) {
        let job_id = job.id;
        let items = match self.access.replay_job_items(job_id).await {
            Ok(items) => items,
            Err(err) => {
                tracing::warn!(job = %job_id, error = %err, "cannot read the replay job's items; trying again later");
                self.release(job_id, owner).await;
                return;
            }
        };
        let pending: Vec<ReplayJobItem> = items.into_iter().filter(|item| item.outcome.is_none()).collect();
        tracing::info!(
            job = %job_id,
            by = %job.requested_by,
            pending = pending.len(),
            total = job.total,
            "replay job claimed"
        );
        // Who the job's key answers to in approval policies (itself and its
        // sponsor): an edited approval it replays is that key's decision.
        let identities = match job.requested_by.strip_prefix("key:") {
            Some(key_id) => self
                .recheck(&Caller::new(key_id, job.tenant_id.clone(), Vec::new()))
                .await
                .map_or_else(|_| vec![job.requested_by.clone()], |caller| caller.identities()),
            None => vec![job.requested_by.clone()],
        };
        let operator = self
            .backends
            .operator(&job.requested_by)
            .acting_as(job.requested_by.clone(), job.source.clone())
            .approving_as(job.principal.clone())
            .answering_to(identities);
        let interval = job
            .rate
            .filter(|rate| *rate > 0.0 && rate.is_finite())
            .map(|rate| Duration::from_secs_f64(1.0 / rate));
        let mut next_at = Instant::now();
        for item in pending {
            // Wait for the rate's next slot, renewing the lease meanwhile
            // and, after every sleep, looking whether the job was paused or
            // cancelled during it (without a wait, the status the last
            // record returned is at most one replay old).
            loop {
                let now = Instant::now();
                if now >= next_at {
                    break;
                }
                tokio::select! {
                    () = stop.cancelled() => {
                        self.release(job_id, owner).await;
                        return;
                    }
                    () = tokio::time::sleep((next_at - now).min(JOB_RENEW)) => {}
                }
                match self
                    .access
                    .renew_replay_job(job_id, owner, JOB_LEASE, OffsetDateTime::now_utc())
                    .await
                {
                    Ok(Some(job)) if job.status == ReplayJobStatus::Running => {}
                    Ok(Some(job)) => {
                        self.stopped(&job, owner).await;
                        return;
                    }
                    Ok(None) => {
                        tracing::warn!(job = %job_id, "lost the replay job's lease; another runner has it");
                        return;
                    }
                    Err(err) => tracing::warn!(job = %job_id, error = %err, "cannot renew the replay job's lease"),
                }
            }
            if stop.is_cancelled() {
                self.release(job_id, owner).await;
                return;
            }
            // The job acts with the rights of the key that started it, as
            // they are now: revoked, expired or narrowed, it pauses before
            // this replay, saying why.
            match self.job_may_replay(&job, item.dead_letter_id).await {
                Ok(()) => {}
                Err(JobRefusal::Refused(reason)) => {
                    self.pause_refused(&job, owner, reason).await;
                    return;
                }
                Err(JobRefusal::Unavailable(err)) => {
                    tracing::warn!(job = %job_id, error = %err, "cannot check the replay job's key; trying again later");
                    self.release(job_id, owner).await;
                    return;
                }
            }
            let outcome = match operator
                .replay_as(&item.dead_letter_id.to_string(), item.replay_id)
                .await
            {
                Ok(replay) => ReplayItemOutcome::Replayed { at: replay.at },
                Err(err) => ReplayItemOutcome::Failed {
                    error: err.to_string(),
                    at: OffsetDateTime::now_utc(),
                },
            };
            if let ReplayItemOutcome::Failed { error, .. } = &outcome {
                tracing::warn!(job = %job_id, dead_letter = %item.dead_letter_id, %error, "replay in a job failed");
            }
            next_at = Instant::now() + interval.unwrap_or_default();
            match self
                .access
                .record_replay_item(
                    job_id,
                    owner,
                    item.position,
                    &outcome,
                    JOB_LEASE,
                    OffsetDateTime::now_utc(),
                )
                .await
            {
                Ok(Some(job)) if job.status == ReplayJobStatus::Running => {}
                Ok(Some(job)) => {
                    self.stopped(&job, owner).await;
                    return;
                }
                Ok(None) => {
                    // The replay is sent and recorded on the dead letter;
                    // the runner that holds the job now finds it there.
                    tracing::warn!(job = %job_id, "lost the replay job's lease; another runner has it");
                    return;
                }
                Err(err) => {
                    // The replay is recorded on the dead letter: whoever
                    // takes the job next finds it there and does not send
                    // it again.
                    tracing::warn!(job = %job_id, error = %err, "cannot record the replay job's progress; trying again later");
                    self.release(job_id, owner).await;
                    return;
                }
            }
        }
    }

    /// Whether the key that started `job` may, now, replay dead letter
    /// `dead_letter_id` (an approval needs the approval right for its
    /// environment). A job that no key started (none today) is not checked.
    async fn job_may_replay(&self, job: &ReplayJobRecord, dead_letter_id: Uuid) -> Result<(), JobRefusal> {
        let Some(key_id) = job.requested_by.strip_prefix("key:") else {
            return Ok(());
        };
        let started_by = Caller::new(key_id, job.tenant_id.clone(), Vec::new());
        let caller = match self.recheck(&started_by).await {
            Ok(caller) => caller,
            Err(GatewayError::Unauthorized(refusal)) => {
                return Err(JobRefusal::Refused(format!(
                    "key {key_id} that started the job is {}",
                    match refusal {
                        Refusal::Revoked => "revoked",
                        Refusal::Expired => "expired",
                        _ => "gone",
                    }
                )));
            }
            Err(err) => return Err(JobRefusal::Unavailable(err)),
        };
        if caller.tenant_id != job.tenant_id || !caller.has(Scope::DeadLettersReplay) {
            return Err(JobRefusal::Refused(format!(
                "key {key_id} that started the job no longer has the `{}` scope",
                Scope::DeadLettersReplay
            )));
        }
        let record = match self.visible_dead_letter(&caller, &dead_letter_id.to_string()).await {
            Ok(record) => record,
            // Gone (purged) or not the tenant's: the replay itself fails
            // and says so, as an item of the job.
            Err(GatewayError::NotFound { .. }) => return Ok(()),
            Err(err) => return Err(JobRefusal::Unavailable(err)),
        };
        match Self::require_decision_right(&caller, &record, None) {
            Ok(()) => Ok(()),
            Err(err) => Err(JobRefusal::Refused(format!(
                "key {key_id} that started the job may not decide on this release ({err}): dead letter {dead_letter_id}"
            ))),
        }
    }

    /// Pauses `job` because its key no longer allows it, recorded as done
    /// by bosun with the reason, and lets go of it. Someone resumes it once
    /// the key holds again, or cancels it.
    async fn pause_refused(&self, job: &ReplayJobRecord, owner: &str, reason: String) {
        tracing::warn!(job = %job.id, by = %job.requested_by, %reason, "replay job paused: its key no longer allows it");
        let control = ReplayJobControl {
            action: ReplayJobAction::Pause,
            by: "bosun".to_owned(),
            at: OffsetDateTime::now_utc(),
            reason: Some(reason),
        };
        if let Err(err) = self.access.control_replay_job(job.id, None, control).await {
            tracing::warn!(job = %job.id, error = %err, "cannot pause the replay job; it is checked again when next claimed");
        }
        self.release(job.id, owner).await;
    }

    /// The job is no longer running: finished (the store let go of it),
    /// paused or cancelled (let go of it here).
    async fn stopped(&self, job: &ReplayJobRecord, owner: &str) {
        if job.status == ReplayJobStatus::Finished {
            tracing::info!(job = %job.id, replayed = job.replayed, failed = job.failed, "bulk replay finished");
        } else {
            tracing::info!(job = %job.id, status = job.status.as_str(), "replay job stopped");
            self.release(job.id, owner).await;
        }
    }

    async fn release(&self, id: Uuid, owner: &str) {
        if let Err(err) = self.access.release_replay_job(id, owner).await {
            tracing::warn!(job = %id, error = %err, "cannot release the replay job; its lease runs out instead");
        }
    }

    /// Starts [`Gateway::run_replay_jobs`] in the background.
    pub fn spawn_replay_runner(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.clone().run_replay_jobs(stop))
    }
}

/// Why a job may not go on.
enum JobRefusal {
    /// Its key no longer allows the next replay: the job pauses, saying so.
    Refused(String),
    /// The key could not be checked: the job is let go and tried again.
    Unavailable(GatewayError),
}

/// A filter as the job records it, in the API's words.
fn filter_json(filter: &DeadLetterFilter) -> Value {
    let mut object = serde_json::Map::new();
    let mut put = |name: &str, value: Option<Value>| {
        if let Some(value) = value {
            object.insert(name.to_owned(), value);
        }
    };
    put("consumer", filter.consumer.clone().map(Value::String));
    put("type", filter.message_type.clone().map(Value::String));
    put("reason", filter.reason.clone().map(Value::String));
    put(
        "since",
        filter
            .since
            .and_then(|since| since.format(&time::format_description::well_known::Rfc3339).ok())
            .map(Value::String),
    );
    put("limit", filter.limit.map(Value::from));
    Value::Object(object)
}

impl ReplayJob {
    /// The view of a stored job; `items` fills its lists (empty: counts
    /// only).
    pub fn of(job: &ReplayJobRecord, items: &[ReplayJobItem]) -> Self {
        let mut replayed = Vec::new();
        let mut failed = Vec::new();
        for item in items {
            match &item.outcome {
                Some(ReplayItemOutcome::Replayed { .. }) => replayed.push(item.dead_letter_id),
                Some(ReplayItemOutcome::Failed { error, .. }) => failed.push(FailedReplay {
                    id: item.dead_letter_id,
                    error: error.clone(),
                }),
                None => {}
            }
        }
        ReplayJob {
            id: job.id,
            status: job.status.as_str().to_owned(),
            total: usize::try_from(job.total).unwrap_or(usize::MAX),
            done: usize::try_from(job.replayed + job.failed).unwrap_or(usize::MAX),
            replayed_count: usize::try_from(job.replayed).unwrap_or(usize::MAX),
            failed_count: usize::try_from(job.failed).unwrap_or(usize::MAX),
            replayed,
            failed,
            rate: job.rate,
            by: job.requested_by.clone(),
            request: job.request.clone(),
            controls: job
                .controls
                .iter()
                .map(|control| JobControl {
                    action: control.action.as_str().to_owned(),
                    by: control.by.clone(),
                    at: control.at,
                    reason: control.reason.clone(),
                })
                .collect(),
            running_on: job.lease_owner.clone(),
            tenant_id: job.tenant_id.clone(),
            started_at: job.created_at,
            updated_at: job.updated_at,
            finished_at: job.finished_at,
        }
    }
}
