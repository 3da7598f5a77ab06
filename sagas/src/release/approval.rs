//! Approving a release environment by environment: entering an
//! environment (approved by the policy, by a person ahead of time, or
//! waiting with an approval timeout scheduled), approvals, rejections and
//! the timeout.

use bosun_contracts::messages::{MAX_REASON_CHARS, ReleaseApprovalTimeout, ReleaseApproved, ReleaseRejected};

use super::apply::{Step, clip, rfc3339};
use super::state::step;
use super::{AUTO_APPROVER, ApprovalRecord, PendingTimeout, ReleasePhase};
use crate::{Action, SagaError};

impl Step<'_> {
    /// Starts the environment at `index` of the plan, or completes the
    /// release after the last.
    pub(super) fn enter_environment(&mut self, index: usize) -> Result<(), SagaError> {
        let planned = self
            .state
            .plan
            .as_ref()
            .and_then(|plan| plan.environments.get(index))
            .cloned();
        let Some(planned) = planned else {
            self.state.current_environment = None;
            self.note("every environment is deployed: the release is complete");
            return self.enter(ReleasePhase::Completed);
        };
        let environment = planned.environment;
        self.state.current_environment = Some(environment.clone());
        if !planned.requires_approval {
            let record = ApprovalRecord {
                approver: AUTO_APPROVER.to_owned(),
                note: None,
                comment: None,
                auto: true,
                at: self.now,
            };
            return self.approve(&environment, record);
        }
        if let Some(record) = self.state.approvals.get(&environment).cloned() {
            return self.approve(&environment, record);
        }
        self.enter(ReleasePhase::AwaitingApproval)?;
        self.schedule_timeout(&environment)
    }

    pub(super) fn schedule_timeout(&mut self, environment: &str) -> Result<(), SagaError> {
        let after = self.policy.approval_timeout;
        let due = time::Duration::try_from(after)
            .ok()
            .and_then(|timeout| self.now.checked_add(timeout))
            .ok_or_else(|| self.refuse(format!("approval timeout of {}s is out of range", after.as_secs())))?;
        let message = ReleaseApprovalTimeout {
            release_id: self.release_id.clone(),
            environment: environment.to_owned(),
            deadline: due,
        };
        self.note(format!(
            "waiting for a person to approve {environment} until {}",
            rfc3339(due)
        ));
        self.emitted.push("ReleaseApprovalTimeout (scheduled)".to_owned());
        self.actions.push(Action::Schedule {
            message: message.clone().into(),
            after,
        });
        self.state.pending_timeout = Some(PendingTimeout { message, due });
        Ok(())
    }

    /// Records the approval of `environment`, emits its `ReleaseApproved`
    /// and goes on to its infrastructure.
    pub(super) fn approve(&mut self, environment: &str, record: ApprovalRecord) -> Result<(), SagaError> {
        let (module_id, build) = self
            .state
            .plan
            .as_ref()
            .map(|plan| (plan.module_id.clone(), plan.artifacts.build.clone()))
            .ok_or_else(|| self.refuse(format!("release {} is approved before it is planned", self.release_id)))?;
        let approved = ReleaseApproved {
            release_id: self.release_id.clone(),
            module_id,
            environment: environment.to_owned(),
            approver: record.approver.clone(),
            approved_at: record.at,
            auto: record.auto,
            comment: record.comment.clone(),
            // Where the module's infrastructure program is: the release's build.
            repository: Some(build.repository),
            commit_sha: Some(build.commit_sha),
        };
        match &record.note {
            Some(note) => self.note(format!("{environment} approved by {} (as \"{note}\")", record.approver)),
            None => self.note(format!("{environment} approved by {}", record.approver)),
        }
        self.state.approvals.insert(environment.to_owned(), record);
        self.send(step::approved(environment), approved.into());
        if self
            .state
            .pending_timeout
            .as_ref()
            .is_some_and(|pending| pending.message.environment == environment)
        {
            self.state.pending_timeout = None;
        }
        self.enter(ReleasePhase::Provisioning)?;
        if self.state.infrastructure.contains_key(environment) {
            self.promote(environment)?;
        }
        Ok(())
    }

    pub(super) fn on_approve(&mut self, environment: &str, record: ApprovalRecord) -> Result<(), SagaError> {
        let Some(requires_approval) = self.requires_approval(environment) else {
            let path: Vec<String> = self
                .state
                .path(self.policy)
                .into_iter()
                .map(|planned| planned.environment)
                .collect();
            return Err(self.refuse(format!(
                "environment `{environment}` is not on the promotion path of release {} ({})",
                self.release_id,
                path.join(", ")
            )));
        };
        match self.state.phase {
            ReleasePhase::Rejected => {
                return Err(self.refuse(format!(
                    "release {} was rejected: an approval no longer applies",
                    self.release_id
                )));
            }
            ReleasePhase::Completed => return Ok(()),
            _ => {}
        }
        if !requires_approval || self.state.approvals.contains_key(environment) {
            // Auto-approved by the policy, or already approved: nothing to add.
            return Ok(());
        }
        if self.state.phase == ReleasePhase::AwaitingApproval && self.is_current(environment) {
            return self.approve(environment, record);
        }
        self.note(format!(
            "approval of {environment} by {} recorded: it applies when the release reaches {environment}",
            record.approver
        ));
        self.state.approvals.insert(environment.to_owned(), record);
        Ok(())
    }

    pub(super) fn on_reject(
        &mut self,
        environment: Option<String>,
        approver: &str,
        claimed: Option<String>,
        reason: &str,
    ) -> Result<(), SagaError> {
        match self.state.phase {
            ReleasePhase::Rejected => Ok(()),
            ReleasePhase::Completed => Err(self.refuse(format!(
                "release {} is already completed: there is nothing to reject",
                self.release_id
            ))),
            _ => {
                // A rejection about one environment is a decision on that
                // environment's approval: it stops the release only while
                // that approval is still to be given.
                if let Some(environment) = environment.as_deref() {
                    match self.requires_approval(environment) {
                        None => {
                            return Err(self.refuse(format!(
                                "environment `{environment}` is not on the promotion path of release {}",
                                self.release_id
                            )));
                        }
                        Some(false) => {
                            return Err(self.refuse(format!(
                                "{environment} is approved by policy for release {}: there is no approval to refuse",
                                self.release_id
                            )));
                        }
                        Some(true) if self.state.approvals.contains_key(environment) => {
                            return Err(self.refuse(format!(
                                "{environment} is already approved for release {}: a rejection of it no longer applies",
                                self.release_id
                            )));
                        }
                        Some(true) => {}
                    }
                }
                match claimed {
                    Some(name) => self.note(format!("rejected by {approver} (as \"{name}\")")),
                    None => self.note(format!("rejected by {approver}")),
                }
                self.reject(environment, Some(approver.to_owned()), reason.to_owned(), false)
            }
        }
    }

    /// A timeout counts only when it is the one the saga scheduled and
    /// still waits on (same environment and deadline); any other one (a
    /// decision came first, or it is not the saga's) changes nothing.
    pub(super) fn on_timeout(&mut self, timeout: &ReleaseApprovalTimeout) -> Result<(), SagaError> {
        let waiting = self.state.phase == ReleasePhase::AwaitingApproval
            && self.is_current(&timeout.environment)
            && self
                .state
                .pending_timeout
                .as_ref()
                .is_some_and(|pending| pending.message == *timeout);
        if !waiting {
            return Ok(());
        }
        let reason = format!(
            "no decision on {} before the deadline {}",
            timeout.environment,
            rfc3339(timeout.deadline)
        );
        self.note(format!("approval of {} timed out", timeout.environment));
        self.reject(Some(timeout.environment.clone()), None, reason, true)
    }

    pub(super) fn reject(
        &mut self,
        environment: Option<String>,
        approver: Option<String>,
        reason: String,
        timed_out: bool,
    ) -> Result<(), SagaError> {
        let rejected = ReleaseRejected {
            release_id: self.release_id.clone(),
            environment,
            approver,
            reason: clip(reason, MAX_REASON_CHARS),
            timed_out,
            rejected_at: self.now,
        };
        self.send(step::rejected(), rejected.clone().into());
        self.state.rejected = Some(rejected);
        self.state.pending_timeout = None;
        self.enter(ReleasePhase::Rejected)
    }
}
