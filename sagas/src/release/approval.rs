//! Approving a release environment by environment: entering an
//! environment (approved by the policy, by a person ahead of time, or
//! waiting with an approval timeout scheduled), approvals, rejections and
//! the timeout.

use bosun_contracts::messages::{
    MAX_REASON_CHARS, ReleaseApprovalTimeout, ReleaseApproved, ReleaseDecision, ReleaseRejected, ReleaseStep,
};

use super::apply::{Step, clip, rfc3339};
use super::state::step;
use super::{
    AUTO_APPROVER, ApprovalProgress, ApprovalRecord, ApprovalRefused, MAX_REFUSALS_KEPT, PendingTimeout,
    RefusedApproval, ReleasePhase,
};
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
            let mut decision = self.decision(ReleaseDecision::Completed, None);
            decision.by = Some("bosun".to_owned());
            self.record(decision);
            return self.enter(ReleasePhase::Completed);
        };
        let environment = planned.environment;
        self.state.current_environment = Some(environment.clone());
        // The promotion graph: evidence from the environments this one
        // requires, not only the order of the path.
        let missing = self.missing_evidence(&environment);
        if !missing.is_empty() {
            let verified: Vec<&str> = self.state.verified.keys().map(String::as_str).collect();
            let reason = format!(
                "{environment} requires the release to be verified in {} first; it was verified in {}",
                missing.join(", "),
                if verified.is_empty() {
                    "none".to_owned()
                } else {
                    verified.join(", ")
                }
            );
            self.note(format!("not promoted to {environment}: {reason}"));
            self.block(ReleaseStep::Promotion, reason, Some(&environment));
            return self.enter(ReleasePhase::Blocked);
        }
        if !planned.requires_approval {
            let record = ApprovalRecord {
                approver: AUTO_APPROVER.to_owned(),
                note: None,
                comment: None,
                auto: true,
                at: self.now,
                identities: Vec::new(),
                approvers: Vec::new(),
            };
            return self.approve(&environment, record);
        }
        // Given ahead of time in a state written before approval policies
        // (or by the previous release during a rolling update): it counts
        // only if the policy in force lets it.
        if let Some(record) = self.state.approvals.remove(&environment) {
            match self.policy.approval.check(
                &environment,
                &record.who(),
                record.comment.as_deref(),
                &self.state.requested_by,
            ) {
                Ok(()) => self
                    .state
                    .approvals_given
                    .entry(environment.clone())
                    .or_default()
                    .push(record),
                Err(refused) => self.refuse_approval(&environment, &record, refused),
            }
        }
        if let Some(record) = self.tally(&environment) {
            return self.approve(&environment, record);
        }
        self.enter(ReleasePhase::AwaitingApproval)?;
        self.state.waiting_for = Some(self.progress(&environment));
        self.schedule_timeout(&environment)
    }

    /// Drops from `environment`'s counted approvals those that no longer
    /// count: expired ones, and ones the policy in force refuses now (a
    /// requester learnt since, a group or a pattern changed), each refusal
    /// recorded.
    fn prune_given(&mut self, environment: &str) {
        let Some(given) = self.state.approvals_given.remove(environment) else {
            return;
        };
        let mut kept = Vec::with_capacity(given.len());
        let mut expired = Vec::new();
        for record in given {
            if self.expired(environment, &record) {
                expired.push(record.approver.clone());
                continue;
            }
            match self.policy.approval.check(
                environment,
                &record.who(),
                record.comment.as_deref(),
                &self.state.requested_by,
            ) {
                Ok(()) => kept.push(record),
                Err(refused) => self.refuse_approval(environment, &record, refused),
            }
        }
        if !expired.is_empty() {
            let seconds = self
                .policy
                .approval
                .rule(environment)
                .expires_after_seconds
                .unwrap_or_default();
            self.note(format!(
                "approval of {environment} by {} expired (an approval counts for {seconds}s)",
                expired.join(", ")
            ));
        }
        if !kept.is_empty() {
            self.state.approvals_given.insert(environment.to_owned(), kept);
        }
    }

    /// Whether `record` no longer counts for `environment` at this step's
    /// time (an expiry too far to add never passes).
    fn expired(&self, environment: &str, record: &ApprovalRecord) -> bool {
        self.policy
            .approval
            .rule(environment)
            .expires_after()
            .and_then(|after| time::Duration::try_from(after).ok())
            .and_then(|expiry| record.at.checked_add(expiry))
            .is_some_and(|until| until < self.now)
    }

    /// Whether `record` counts for `environment` now: not expired, and the
    /// policy in force lets it.
    fn counts(&self, environment: &str, record: &ApprovalRecord) -> bool {
        !self.expired(environment, record)
            && self
                .policy
                .approval
                .check(
                    environment,
                    &record.who(),
                    record.comment.as_deref(),
                    &self.state.requested_by,
                )
                .is_ok()
    }

    /// The approvals counting towards `environment` once those that no
    /// longer count are dropped ([`Step::prune_given`]): the record
    /// completing its approval when there are as many as its rule requires
    /// (they leave [`ReleaseState::approvals_given`]), else `None`.
    fn tally(&mut self, environment: &str) -> Option<ApprovalRecord> {
        self.prune_given(environment);
        let required = self.policy.approval.rule(environment).required_approvals as usize;
        if self.state.approvals_given.get(environment)?.len() < required {
            return None;
        }
        let records = self.state.approvals_given.remove(environment)?;
        let mut last = records.last()?.clone();
        if records.len() > 1 {
            last.approvers = records.iter().map(|record| record.approver.clone()).collect();
        }
        Some(last)
    }

    /// What `environment` waits for, as the policy and the counted
    /// approvals say now.
    fn progress(&self, environment: &str) -> ApprovalProgress {
        let rule = self.policy.approval.rule(environment);
        let approved_by: Vec<String> = self
            .state
            .approvals_given
            .get(environment)
            .map(|records| records.iter().map(|record| record.approver.clone()).collect())
            .unwrap_or_default();
        let counted = u32::try_from(approved_by.len()).unwrap_or(u32::MAX);
        ApprovalProgress {
            environment: environment.to_owned(),
            required: rule.required_approvals,
            still_needed: rule.required_approvals.saturating_sub(counted),
            approved_by,
            approver_groups: rule.approver_groups,
            comment_pattern: rule.comment_pattern,
            excluded: self.state.requested_by.clone(),
            policy_version: self.policy.approval_version,
        }
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
            approvers: record.approvers.clone(),
        };
        let by = if record.approvers.is_empty() {
            record.approver.clone()
        } else {
            record.approvers.join(", ")
        };
        match &record.note {
            Some(note) => self.note(format!("{environment} approved by {by} (as \"{note}\")")),
            None => self.note(format!("{environment} approved by {by}")),
        }
        if self
            .state
            .waiting_for
            .as_ref()
            .is_some_and(|waiting| waiting.environment == environment)
        {
            self.state.waiting_for = None;
        }
        if !self.is_decided(environment) {
            let mut decision = self.decision(ReleaseDecision::Approved, Some(environment));
            decision.by = Some(record.approver.clone());
            decision.identities = if record.approvers.is_empty() {
                record.who()
            } else {
                record.approvers.clone()
            };
            decision.reason = record.comment.clone();
            self.record(decision);
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
        if !requires_approval || self.is_approved(environment) {
            // Auto-approved by the policy, or already approved: nothing to add.
            return Ok(());
        }
        if let Err(refused) = self.policy.approval.check(
            environment,
            &record.who(),
            record.comment.as_deref(),
            &self.state.requested_by,
        ) {
            self.refuse_approval(environment, &record, refused);
            return Ok(());
        }
        // An approval that no longer counts (expired, say) does not stand
        // in the way of the same person approving again.
        self.prune_given(environment);
        let pending = self.state.approvals_given.entry(environment.to_owned()).or_default();
        if let Some(earlier) = pending.iter().find(|given| given.same_person(&record)) {
            let earlier = earlier.approver.clone();
            self.note(format!(
                "approval of {environment} by {} not counted again: {earlier} approved it already, and they share an identity",
                record.approver
            ));
            return Ok(());
        }
        let approver = record.approver.clone();
        pending.push(record.clone());
        let mut decision = self.decision(ReleaseDecision::ApprovalGiven, Some(environment));
        decision.by = Some(record.approver.clone());
        decision.identities = record.who();
        decision.reason = record.comment.clone();
        self.record(decision);
        let waiting = self.state.phase == ReleasePhase::AwaitingApproval && self.is_current(environment);
        if waiting {
            if let Some(record) = self.tally(environment) {
                return self.approve(environment, record);
            }
            let progress = self.progress(environment);
            self.note(format!(
                "approval of {environment} by {approver} counted ({} of {}); {} more needed",
                progress.required - progress.still_needed,
                progress.required,
                progress.still_needed
            ));
            self.state.waiting_for = Some(progress);
            return Ok(());
        }
        self.note(format!(
            "approval of {environment} by {approver} recorded: it counts when the release reaches {environment}"
        ));
        Ok(())
    }

    /// Whether `environment` has its approval: decided, or enough
    /// approvals given ahead of time that still count now.
    fn is_approved(&self, environment: &str) -> bool {
        let required = self.policy.approval.rule(environment).required_approvals as usize;
        (self.state.approvals.contains_key(environment) && self.is_decided(environment))
            || self
                .state
                .approvals_given
                .get(environment)
                .is_some_and(|given| given.iter().filter(|record| self.counts(environment, record)).count() >= required)
    }

    /// Whether `environment`'s approval was emitted (it is decided for good).
    fn is_decided(&self, environment: &str) -> bool {
        self.state.emitted.contains(&super::state::step::approved(environment))
    }

    /// Records an approval the policy refused (the rule and why, in the
    /// state and the history), keeping the last [`MAX_REFUSALS_KEPT`].
    fn refuse_approval(&mut self, environment: &str, record: &ApprovalRecord, refused: ApprovalRefused) {
        self.note(format!(
            "approval of {environment} by {} refused by rule `{}`: {}",
            record.approver, refused.rule, refused.reason
        ));
        let mut decision = self.decision(ReleaseDecision::ApprovalRefused, Some(environment));
        decision.by = Some(record.approver.clone());
        decision.identities = record.who();
        decision.reason = Some(refused.reason.clone());
        decision.rule = Some(refused.rule.name().to_owned());
        self.record(decision);
        self.state.refused_approvals.push(RefusedApproval {
            environment: environment.to_owned(),
            approver: record.approver.clone(),
            rule: refused.rule,
            reason: refused.reason,
            policy_version: self.policy.approval_version,
            at: self.now,
        });
        let excess = self.state.refused_approvals.len().saturating_sub(MAX_REFUSALS_KEPT);
        self.state.refused_approvals.drain(..excess);
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
                        Some(true) if self.is_approved(environment) => {
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
        if !self.state.emitted.contains(&step::rejected()) {
            let mut decision = self.decision(ReleaseDecision::Rejected, rejected.environment.as_deref());
            decision.by = Some(rejected.approver.clone().unwrap_or_else(|| "bosun".to_owned()));
            decision.reason = Some(rejected.reason.clone());
            decision.rule = timed_out.then(|| "approval-timeout".to_owned());
            self.record(decision);
        }
        self.send(step::rejected(), rejected.clone().into());
        self.state.rejected = Some(rejected);
        self.state.pending_timeout = None;
        self.state.waiting_for = None;
        self.state.window_wait = None;
        self.enter(ReleasePhase::Rejected)
    }
}
