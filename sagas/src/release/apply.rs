//! One message being applied ([`Step`]): the state being changed, the
//! messages it emits (each step once) and the history entry it leaves; the
//! phase changes only along an edge of [`TRANSITIONS`](super::TRANSITIONS).

use bosun_contracts::Message;
use bosun_contracts::messages::{
    DecisionEntry, MAX_DECISIONS, MAX_REASON_CHARS, ReleaseBlocked, ReleaseDecision, ReleaseDecisionRecorded,
    ReleaseStep,
};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::phase::is_transition;
use super::state::step;
use super::{HistoryEntry, ReleasePhase, ReleasePolicy, ReleaseState};
use crate::{Action, SagaError, Transition};

/// One message being applied: the state being changed and what it emits.
pub(super) struct Step<'a> {
    pub(super) policy: &'a ReleasePolicy,
    pub(super) release_id: String,
    pub(super) message_type: &'static str,
    pub(super) now: OffsetDateTime,
    /// When the promotion gate is read: the handling host's clock when the
    /// consumer gives it (never before `now`), else `now`.
    pub(super) gate_at: OffsetDateTime,
    /// Set when the step only looked at a closed gate again: no history
    /// entry for it (a hold with no end is looked at every few minutes).
    pub(super) quiet: bool,
    pub(super) state: ReleaseState,
    pub(super) actions: Vec<Action>,
    pub(super) emitted: Vec<String>,
    pub(super) notes: Vec<String>,
    pub(super) decisions: Vec<DecisionEntry>,
}

impl Step<'_> {
    /// The authenticated caller of an approval or rejection: a decision
    /// that names no one bosun authenticated is refused, whatever name it
    /// claims.
    pub(super) fn authenticated(&self, by: Option<&str>, field: &str) -> Result<String, SagaError> {
        match by.map(str::trim) {
            Some(by) if !by.is_empty() => Ok(by.to_owned()),
            _ => Err(self.refuse(format!(
                "a decision on release {} names no authenticated caller (`{field}` is missing): \
                 approvals and rejections are accepted only through bosun's front door",
                self.release_id
            ))),
        }
    }

    pub(super) fn refuse(&self, reason: impl Into<String>) -> SagaError {
        SagaError::Rejected {
            message_type: self.message_type.to_owned(),
            reason: reason.into(),
        }
    }

    pub(super) fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// Moves to `to` along an edge of [`TRANSITIONS`](super::TRANSITIONS); any other change is
    /// refused, so the saga never does what its diagram does not show.
    pub(super) fn enter(&mut self, to: ReleasePhase) -> Result<(), SagaError> {
        let from = self.state.phase;
        if from != to && !is_transition(from, to) {
            return Err(self.refuse(format!(
                "release {}: no transition from {from} to {to} in the release state machine",
                self.release_id
            )));
        }
        self.state.phase = to;
        Ok(())
    }

    /// Sends `message` unless the step `key` was emitted before.
    pub(super) fn send(&mut self, key: String, message: Message) {
        if self.state.emitted.insert(key) {
            self.emitted.push(message.message_type().to_owned());
            self.actions.push(Action::Send(message));
        }
    }

    /// A decision for the audit log, stamped with this step's time and
    /// policy version; the caller fills in who, why and the rule.
    pub(super) fn decision(&self, decision: ReleaseDecision, environment: Option<&str>) -> DecisionEntry {
        DecisionEntry {
            decision,
            environment: environment.map(str::to_owned),
            by: None,
            identities: Vec::new(),
            reason: None,
            rule: None,
            policy_version: self.policy.approval_version,
            until: None,
            decided_at: self.now,
        }
    }

    /// Keeps `decision` for the audit log: the step's decisions leave in
    /// one `ReleaseDecisionRecorded`, in order, through the outbox with the
    /// new state (so exactly the decisions committed are recorded; it is
    /// not listed in the history's `emitted`, which names the release's
    /// steps).
    pub(super) fn record(&mut self, mut decision: DecisionEntry) {
        decision.reason = decision.reason.map(|reason| clip(reason, MAX_REASON_CHARS));
        let mut seen = Vec::with_capacity(decision.identities.len());
        decision.identities.retain(|identity| {
            let new = !seen.contains(identity);
            seen.push(identity.clone());
            new
        });
        if self.decisions.len() < MAX_DECISIONS {
            self.decisions.push(decision);
        }
    }

    pub(super) fn finish(mut self, before: &ReleaseState) -> Transition<ReleaseState> {
        if self.state == *before {
            return Transition {
                state: before.clone(),
                actions: Vec::new(),
            };
        }
        if !self.decisions.is_empty() {
            self.actions.push(Action::Send(
                ReleaseDecisionRecorded {
                    release_id: self.release_id.clone(),
                    door: None,
                    decisions: std::mem::take(&mut self.decisions),
                }
                .into(),
            ));
        }
        self.state.release_id = Some(self.release_id);
        if self.quiet && self.notes.is_empty() && self.emitted.is_empty() {
            return Transition {
                state: self.state,
                actions: self.actions,
            };
        }
        self.state.history.push(HistoryEntry {
            at: self.now,
            message_type: self.message_type.to_owned(),
            phase: self.state.phase,
            note: self.notes.join("; "),
            emitted: self.emitted,
        });
        Transition {
            state: self.state,
            actions: self.actions,
        }
    }

    /// Whether `environment` needs a person, or `None` when it is not on
    /// the release's promotion path.
    pub(super) fn requires_approval(&self, environment: &str) -> Option<bool> {
        self.state
            .path(self.policy)
            .into_iter()
            .find(|planned| planned.environment == environment)
            .map(|planned| planned.requires_approval)
    }

    pub(super) fn is_current(&self, environment: &str) -> bool {
        self.state.current_environment.as_deref() == Some(environment)
    }

    /// Emits `ReleaseBlocked` (once per step and environment) and keeps it
    /// as the block in force. The caller decides the phase.
    pub(super) fn block(&mut self, failing_step: ReleaseStep, reason: String, environment: Option<&str>) {
        let blocked = ReleaseBlocked {
            release_id: self.release_id.clone(),
            failing_step,
            reason: clip(reason, MAX_REASON_CHARS),
            environment: environment.map(str::to_owned),
            blocked_at: self.now,
        };
        if !self.state.emitted.contains(&step::blocked(failing_step, environment)) {
            let mut decision = self.decision(ReleaseDecision::Blocked, environment);
            decision.by = Some("bosun".to_owned());
            decision.reason = Some(blocked.reason.clone());
            decision.rule = Some(step::blocked(failing_step, None));
            self.record(decision);
        }
        self.send(step::blocked(failing_step, environment), blocked.clone().into());
        self.state.blocked = Some(blocked);
    }
}

/// The free-text name a sender gave, when it adds something to the
/// authenticated identity.
pub(super) fn claimed_name(claimed: Option<&str>, authenticated: &str) -> Option<String> {
    claimed
        .map(str::trim)
        .filter(|name| !name.is_empty() && *name != authenticated)
        .map(str::to_owned)
}

/// `text` cut to at most `max` characters.
pub(super) fn clip(text: String, max: usize) -> String {
    if text.chars().count() <= max {
        text
    } else {
        text.chars().take(max).collect()
    }
}

pub(super) fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_else(|_| at.to_string())
}
