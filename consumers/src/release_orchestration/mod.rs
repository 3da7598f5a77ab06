//! The release-orchestration consumer: runs the release saga
//! ([`bosun_sagas::release::ReleaseSaga`]), keyed by `releaseId`.
//!
//! Triggered by `BuildCompleted`, `ContainerImageBuilt`, `PackagePublished`,
//! `InfrastructureProvisioned`, `GitOpsSynced` and the commands
//! `ApproveRelease`, `RejectRelease` and `ReleaseApprovalTimeout` (the
//! saga's own scheduled timeout). Emits `ReleasePlanned`, `ReleaseApproved`,
//! `ReleaseRejected`, `ReleaseBlocked` and `DeploymentPromoted`.
//!
//! Unlike the other consumers this one talks to no outside service, so it
//! has no port and no adapters: the saga is pure, and the runtime loads its
//! state, passes it in [`Inbound::saga`], and saves the new state with the
//! outgoing messages in one transaction (reloading and re-applying on a
//! version conflict). Idempotency is the saga's: a step is never emitted
//! twice, whatever the order or duplication of its inputs.

use async_trait::async_trait;
use bosun_contracts::{ConsumerName, Envelope, Message};
use bosun_sagas::release::{ReleaseSaga, ReleaseState};
use bosun_sagas::{Action, StateMachine};

use crate::{Consumer, HandlerError, Inbound, Outcome, Outgoing, RetryPolicy};

#[cfg(test)]
mod tests;

/// The consumer's name: its queue and subscription.
pub const NAME: ConsumerName = "release-orchestration";

/// The saga kind this consumer persists.
pub const SAGA_KIND: &str = "release";

/// The release-orchestration consumer.
#[derive(Debug, Clone)]
pub struct ReleaseOrchestration {
    saga: ReleaseSaga,
}

impl ReleaseOrchestration {
    /// The consumer running `saga` (built from the release policy).
    pub fn new(saga: ReleaseSaga) -> Self {
        Self { saga }
    }
}

/// The saga's corrupt or unreadable state.
#[derive(Debug, thiserror::Error)]
#[error("release saga {key}: stored state cannot be read: {source}")]
pub struct CorruptState {
    key: String,
    #[source]
    source: serde_json::Error,
}

#[async_trait]
impl Consumer for ReleaseOrchestration {
    fn name(&self) -> ConsumerName {
        NAME
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(5)
    }

    fn saga_of(&self, _envelope: &Envelope, message: &Message) -> Option<(&'static str, String)> {
        self.saga.key_of(message).map(|key| (SAGA_KIND, key))
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        let Some(saga) = inbound.saga else {
            // Not a message of any release (e.g. a preview-only provisioning).
            return Ok(Outcome::default());
        };
        let state: ReleaseState = if saga.state.is_null() {
            ReleaseState::default()
        } else {
            serde_json::from_value(saga.state.clone()).map_err(|source| {
                HandlerError::permanent(CorruptState {
                    key: saga.key.clone(),
                    source,
                })
            })?
        };
        let transition = self
            .saga
            .apply_at(&state, inbound.message, inbound.envelope.occurred_at)
            .map_err(HandlerError::permanent)?;
        if transition.state == state && transition.actions.is_empty() {
            tracing::info!(release_id = %saga.key, "nothing to do for this message in the release's current state");
            return Ok(Outcome::default());
        }
        let messages = transition
            .actions
            .into_iter()
            .map(|action| match action {
                Action::Send(message) => Outgoing::now(message),
                Action::Schedule { message, after } => Outgoing::after(message, after),
            })
            .collect();
        let saga_state = serde_json::to_value(&transition.state).map_err(HandlerError::permanent)?;
        tracing::info!(release_id = %saga.key, phase = %transition.state.phase, "release saga advanced");
        Ok(Outcome {
            messages,
            saga_state: Some(saga_state),
        })
    }
}
