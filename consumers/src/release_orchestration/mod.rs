//! The release-orchestration consumer: runs the release saga
//! ([`bosun_sagas::release::ReleaseSaga`]), keyed by tenant and `releaseId`
//! (`<tenant>/<releaseId>`): two tenants may use the same release id, and a
//! message only ever reaches the release of its own tenant.
//!
//! Triggered by `BuildCompleted`, `ContainerImageBuilt`, `PackagePublished`,
//! `InfrastructureProvisioned`, `GitOpsSynced` and the commands
//! `ApproveRelease`, `RejectRelease`, `OverrideReleaseWindow`,
//! `ReleaseApprovalTimeout`, `ReleaseWindowCheck` and
//! `ReleaseVerificationCheck` (the saga's own scheduled timeout, look at a
//! promotion window and sample of a verification). Emits
//! `ReleasePlanned`, `ReleaseApproved`, `ReleaseRejected`, `ReleaseBlocked`,
//! `DeploymentPromoted`, `ReleaseVerified` and `RollbackEnvironment`, and
//! with every message that made the saga
//! decide something a `ReleaseDecisionRecorded` (stamped with the door the
//! deciding message came through), which it handles too: it appends the
//! decisions to the tenant's audit log through its governance port.
//!
//! The saga is pure: a verification's checks (an HTTP health URL, a
//! Prometheus query, an Azure Monitor alert rule) are sampled here, through
//! the [`probes`] port, and their outcomes handed to the saga
//! ([`ReleaseSaga::apply_samples`]); a probe never fails the message, a
//! check that cannot be read is a failed sample. The runtime loads its
//! state, passes it in [`Inbound::saga`], and saves the new state with the
//! outgoing messages in one transaction (reloading and re-applying on a
//! version conflict). Idempotency is the saga's: a step is never emitted
//! twice, whatever the order or duplication of its inputs.
//!
//! Approvals and rejections of a release the tenant does not have are
//! refused (dead-lettered): they read the same whether or not another
//! tenant has a release of that id. A `ReleaseApprovalTimeout` that is not
//! the one the saga waits on changes nothing and is logged; one that
//! arrives before its deadline is scheduled again for it, and so is a
//! `ReleaseWindowCheck` that arrives before its `checkAt`.

use std::sync::Arc;

use async_trait::async_trait;
use bosun_contracts::messages::ReleaseVerificationCheck;
use bosun_contracts::{ConsumerName, Envelope, Message};
use bosun_sagas::Action;
use bosun_sagas::release::{CheckOutcome, ReleaseSaga, ReleaseState, VerificationCheck};
use bosun_sagas::versioned::{StateError, load_state, save_state};
use time::OffsetDateTime;

use crate::{Consumer, HandlerError, Inbound, Outcome, Outgoing, RetryPolicy};

pub mod probes;
#[cfg(test)]
mod tests;

pub use crate::delivery::governance::{DefaultGovernance, GovernanceError, ReleaseGovernance, VersionedApprovalPolicy};
pub use probes::VerificationProbes;

/// The consumer's name: its queue and subscription.
pub const NAME: ConsumerName = "release-orchestration";

/// The saga kind this consumer persists.
pub const SAGA_KIND: &str = "release";

/// The release-orchestration consumer.
#[derive(Debug, Clone)]
pub struct ReleaseOrchestration {
    saga: ReleaseSaga,
    governance: Arc<dyn ReleaseGovernance>,
    probes: Option<Arc<dyn VerificationProbes>>,
}

impl ReleaseOrchestration {
    /// The consumer running `saga` (built from the release policy), with
    /// the default approval policy for every tenant and requesters
    /// unknown ([`DefaultGovernance`]).
    pub fn new(saga: ReleaseSaga) -> Self {
        Self {
            saga,
            governance: Arc::new(DefaultGovernance),
            probes: None,
        }
    }

    /// Samples verification checks through `probes`. Without, every sample
    /// of a check fails, saying no probes are configured.
    #[must_use]
    pub fn with_probes(mut self, probes: Arc<dyn VerificationProbes>) -> Self {
        self.probes = Some(probes);
        self
    }

    /// One sample of each of `checks`.
    async fn sample(
        &self,
        tenant: &str,
        check: &ReleaseVerificationCheck,
        checks: &[VerificationCheck],
    ) -> Vec<CheckOutcome> {
        let Some(probes) = &self.probes else {
            return checks
                .iter()
                .map(|verification| CheckOutcome {
                    check: verification.name().to_owned(),
                    passed: false,
                    detail: "this bosun has no verification probes configured".to_owned(),
                })
                .collect();
        };
        let samples = checks
            .iter()
            .map(|verification| probes.sample(tenant, &check.release_id, &check.environment, verification));
        futures_util::future::join_all(samples).await
    }

    /// Reads tenants' approval policies and deliveries' requesters from
    /// `governance`.
    #[must_use]
    pub fn with_governance(mut self, governance: Arc<dyn ReleaseGovernance>) -> Self {
        self.governance = governance;
        self
    }
}

impl From<GovernanceError> for HandlerError {
    fn from(err: GovernanceError) -> Self {
        match err {
            GovernanceError::Unavailable { .. } => HandlerError::transient(err),
            GovernanceError::Unreadable { .. } => HandlerError::needs_newer(err),
        }
    }
}

/// How early a `ReleaseApprovalTimeout` may arrive before its deadline
/// and still count (clocks of the scheduling and the receiving host differ
/// a little).
const DEADLINE_TOLERANCE: time::Duration = time::Duration::seconds(30);

/// The key of a tenant's release saga: `<tenant>/<releaseId>`.
pub fn saga_key(tenant: &str, release_id: &str) -> String {
    format!("{tenant}/{release_id}")
}

/// The release saga (kind, `<tenant>/<releaseId>`) a message belongs to:
/// pure, so the registry computes it without building the consumer (a
/// Service Bus session id); [`Consumer::saga_of`] calls it.
pub fn saga_of(envelope: &Envelope, message: &Message) -> Option<(&'static str, String)> {
    bosun_sagas::release::release_of(message).map(|release_id| (SAGA_KIND, saga_key(&envelope.tenant_id, &release_id)))
}

/// The release an approval or rejection decides on.
fn decision_on(message: &Message) -> Option<&str> {
    match message {
        Message::ApproveRelease(approve) => Some(&approve.release_id),
        Message::RejectRelease(reject) => Some(&reject.release_id),
        Message::OverrideReleaseWindow(overriding) => Some(&overriding.release_id),
        _ => None,
    }
}

/// A decision on a release the tenant does not have.
#[derive(Debug, thiserror::Error)]
#[error("{message_type} refused: tenant `{tenant}` has no release `{release_id}`")]
pub struct UnknownRelease {
    message_type: &'static str,
    tenant: String,
    release_id: String,
}

/// The saga's stored state, unreadable or saved by a later release.
#[derive(Debug, thiserror::Error)]
#[error("release saga {key}: {source}")]
pub struct StoredState {
    key: String,
    #[source]
    source: StateError,
}

impl From<StoredState> for HandlerError {
    fn from(err: StoredState) -> Self {
        match err.source {
            StateError::Newer { .. } => HandlerError::needs_newer(err),
            _ => HandlerError::permanent(err),
        }
    }
}

#[async_trait]
impl Consumer for ReleaseOrchestration {
    fn name(&self) -> ConsumerName {
        NAME
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(5)
    }

    fn saga_of(&self, envelope: &Envelope, message: &Message) -> Option<(&'static str, String)> {
        saga_of(envelope, message)
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        if let Message::ReleaseDecisionRecorded(recorded) = inbound.message {
            // The saga's decisions, committed with its state: into the
            // tenant's audit log, once.
            self.governance
                .record_decisions(
                    &inbound.envelope.tenant_id,
                    &inbound.envelope.message_id.to_string(),
                    recorded,
                )
                .await?;
            return Ok(Outcome::default());
        }
        let Some(saga) = inbound.saga else {
            // Not a message of any release (e.g. a preview-only provisioning).
            return Ok(Outcome::default());
        };
        let tenant = &inbound.envelope.tenant_id;
        if saga.state.is_null()
            && let Some(release_id) = decision_on(inbound.message)
        {
            // The same words whether or not another tenant has this release.
            return Err(HandlerError::permanent(UnknownRelease {
                message_type: inbound.message.message_type(),
                tenant: tenant.clone(),
                release_id: release_id.to_owned(),
            }));
        }
        // The saga's own scheduled messages count no sooner than they are
        // due (the scheduling host's clock may be ahead): one that arrives
        // early is scheduled again for its time. An approval timeout within
        // a tolerance counts; a window check never early, as the gate is
        // read at this host's clock and would only be found closed.
        let due = match inbound.message {
            Message::ReleaseApprovalTimeout(timeout) => Some((timeout.deadline, DEADLINE_TOLERANCE)),
            Message::ReleaseWindowCheck(check) => Some((check.check_at, time::Duration::ZERO)),
            Message::ReleaseVerificationCheck(check) => Some((check.check_at, time::Duration::ZERO)),
            _ => None,
        };
        if let Some((due, tolerance)) = due {
            let early = due - OffsetDateTime::now_utc();
            if early > tolerance {
                tracing::warn!(
                    release_id = %saga.key,
                    message_type = inbound.message.message_type(),
                    due = %due,
                    "arrived before it is due; scheduled again for its time"
                );
                let wait = std::time::Duration::try_from(early).unwrap_or_default();
                return Ok(Outcome {
                    messages: vec![Outgoing::after(inbound.message.clone(), wait)],
                    saga_state: None,
                });
            }
        }
        // A state a later release saved is left as it is: the message
        // waits for a process of that release.
        let state: ReleaseState = load_state(&saga.state).map_err(|source| StoredState {
            key: saga.key.clone(),
            source,
        })?;
        // The tenant's approval policy as it is now, and who requested the
        // delivery this message is part of (for what brings the release a
        // build or an artifact, and until the release knows anyone).
        let machine = match self.governance.approval_policy(tenant).await? {
            Some(stored) => self.saga.with_approval(stored.version, stored.policy),
            None => self.saga.clone(),
        };
        let brings_a_build = matches!(
            inbound.message,
            Message::BuildCompleted(_) | Message::ContainerImageBuilt(_) | Message::PackagePublished(_)
        );
        let requesters = if decision_on(inbound.message).is_none() && (brings_a_build || state.requested_by.is_empty())
        {
            let correlation_id = inbound.envelope.correlation_id.to_string();
            self.governance.requesters(tenant, &correlation_id).await?
        } else {
            Vec::new()
        };
        // The promotion gate is read at this host's clock too: a message
        // handled late (a backlog, a replay) never promotes into a window
        // that opened since it occurred.
        let transition = match inbound.message {
            // A sample of a verification's checks: taken here (the saga
            // runs none), then counted by the saga.
            Message::ReleaseVerificationCheck(check) => match machine.checks_due(&state, check) {
                Some(checks) => {
                    let outcomes = self.sample(tenant, check, &checks).await;
                    for outcome in &outcomes {
                        tracing::info!(
                            release_id = %saga.key,
                            environment = %check.environment,
                            attempt = check.attempt,
                            check = %outcome.check,
                            passed = outcome.passed,
                            detail = %outcome.detail,
                            "verification sample"
                        );
                    }
                    machine.apply_samples(&state, check, &outcomes, OffsetDateTime::now_utc())
                }
                None => {
                    tracing::info!(
                        release_id = %saga.key,
                        environment = %check.environment,
                        attempt = check.attempt,
                        "not the verification sample the release waits for; ignored"
                    );
                    return Ok(Outcome::default());
                }
            },
            message => machine.apply_observed(
                &state,
                message,
                inbound.envelope.occurred_at,
                Some(OffsetDateTime::now_utc()),
                &requesters,
            ),
        }
        .map_err(HandlerError::permanent)?;
        if transition.state == state && transition.actions.is_empty() {
            if let Message::ReleaseApprovalTimeout(timeout) = inbound.message {
                tracing::warn!(
                    release_id = %timeout.release_id,
                    environment = %timeout.environment,
                    deadline = %timeout.deadline,
                    "approval timeout is not the one the release waits on; ignored"
                );
                return Ok(Outcome::default());
            }
            tracing::info!(release_id = %saga.key, "nothing to do for this message in the release's current state");
            return Ok(Outcome::default());
        }
        // The door the decisions came through: the command's source, or
        // the saga itself reacting to an event.
        let door = if decision_on(inbound.message).is_some() {
            inbound.envelope.source.clone()
        } else {
            "bosun".to_owned()
        };
        let messages = transition
            .actions
            .into_iter()
            .map(|action| match action {
                Action::Send(Message::ReleaseDecisionRecorded(mut recorded)) => {
                    recorded.door = Some(door.clone());
                    Outgoing::now(recorded)
                }
                Action::Send(message) => Outgoing::now(message),
                Action::Schedule { message, after } => Outgoing::after(message, after),
            })
            .collect();
        let saga_state = save_state(&transition.state).map_err(HandlerError::permanent)?;
        tracing::info!(release_id = %saga.key, phase = %transition.state.phase, "release saga advanced");
        Ok(Outcome {
            messages,
            saga_state: Some(saga_state),
        })
    }
}
