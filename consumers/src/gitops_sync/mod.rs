//! The gitops-sync consumer: runs the GitOps saga (keyed by environment)
//! over `DeploymentPromoted`, `InfrastructureProvisioned` and the command
//! `ReconcileEnvironment`, and emits `GitOpsSynced` once per
//! (environment, commitSha).
//!
//! For each message the handler loads the saga state the runtime passed in
//! [`Inbound::saga`] (`Null` for a new environment) and drives
//! [`GitOpsSaga::step`]:
//!
//! - a promotion the saga accepts (the newest of its module) is written
//!   into the environment repository as `<environment>/apps/<moduleId>/release.json`
//!   ([`desired_state_manifest`]: image reference and digest, package,
//!   release, approver — deterministic, so the same promotion is the same
//!   tree and the write is a no-op); the branch head becomes the desired
//!   commit;
//! - the environment is reconciled with the desired commit and reports
//!   what it runs; when that is the desired commit the saga emits
//!   `GitOpsSynced`, otherwise it schedules a `ReconcileEnvironment` with
//!   exponential backoff (`Outgoing::after`) — a continuous reconcile that
//!   never holds a lock while waiting;
//! - the saga's new state is returned in [`Outcome::saga_state`]; the
//!   runtime saves it with the outgoing messages, atomically, with
//!   optimistic concurrency (on a conflict the handler runs again on the
//!   fresh state; the write and the reconcile are idempotent).
//!
//! `DeploymentPromoted.desiredCommitSha` is not trusted: the commit is the
//! one this consumer writes (`GitOpsSynced.commitSha`); `GitOpsSynced`
//! carries the release id for the release saga. The repository is
//! `DeploymentPromoted.environmentRepository`; a `ReconcileEnvironment` for
//! an environment never promoted uses [`DEFAULT_ENVIRONMENT_REPOSITORY`].
//! Port failures are retried exponentially, 5 times.
//!
//! - [`port`] — the [`Environments`] port and its [`GitOpsError`];
//! - [`local`] — the environment repository on the local Git host and a
//!   local environment directory ([`local::LocalEnvironments`]);
//! - [`azure`] — Azure Repos pushes and Argo CD ([`azure::AzureEnvironments`]).

pub mod azure;
pub mod local;
pub mod port;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{DeploymentPromoted, ReconcileReason, RollbackEnvironment};
use bosun_contracts::validate;
use bosun_contracts::{ConsumerName, Envelope, Message};
use bosun_sagas::gitops::{DesiredStateWritten, GitOpsInput, GitOpsSaga, GitOpsState, Work};
use bosun_sagas::versioned::{load_state, save_state};
use bosun_sagas::{Action, SagaKind, StateMachine};
use serde_json::json;
use time::format_description::well_known::Rfc3339;

pub use port::{DesiredStateCommit, DesiredStateWrite, EnvironmentReport, Environments, GitOpsError, ReconcileRequest};

use crate::delivery::governance::{GovernanceError, ReleaseGovernance};
use crate::{Consumer, HandlerError, Inbound, Outcome, Outgoing, RetryPolicy, UnexpectedMessage};

/// The consumer's name: its queue and subscription.
pub const NAME: ConsumerName = "gitops-sync";

/// The environment repository of an environment no promotion named.
pub const DEFAULT_ENVIRONMENT_REPOSITORY: &str = "environments";

/// Saga steps one message may take (message, write, reconcile).
const MAX_STEPS: usize = 4;

/// The gitops-sync consumer over an [`Environments`] port.
#[derive(Debug, Clone)]
pub struct GitOpsSync<P> {
    environments: P,
    saga: GitOpsSaga,
    governance: Option<Arc<dyn ReleaseGovernance>>,
}

impl<P: Environments> GitOpsSync<P> {
    /// The consumer over a port ([`local::LocalEnvironments`],
    /// [`azure::AzureEnvironments`] or any other implementation of the port)
    /// and the saga; while an environment does not report the desired commit,
    /// reconciles are retried after `reconcile_base_delay`, doubling up to
    /// `reconcile_max_delay`.
    pub fn new(
        environments: P,
        saga: GitOpsSaga,
        reconcile_base_delay: Duration,
        reconcile_max_delay: Duration,
    ) -> Self {
        Self {
            environments,
            saga: saga.with_reconcile_backoff(reconcile_base_delay, reconcile_max_delay),
            governance: None,
        }
    }

    /// Reads tenants' promotion windows and holds from `governance`: a
    /// rollback a person asks for without an override reason obeys them.
    /// Without, no window closes a rollback.
    #[must_use]
    pub fn with_governance(mut self, governance: Arc<dyn ReleaseGovernance>) -> Self {
        self.governance = Some(governance);
        self
    }

    /// What closes `environment`'s promotion gate for `rollback` now: a
    /// person's rollback without an override reason obeys the tenant's
    /// windows and holds (one the release saga asked for went through them
    /// there).
    async fn rollback_closed(
        &self,
        tenant: &str,
        rollback: &RollbackEnvironment,
    ) -> Result<Option<String>, HandlerError> {
        let Some(governance) = &self.governance else {
            return Ok(None);
        };
        // The release saga's own rollback went through the gate there; the
        // front door stamps `requestedBy` on every other one, so no sender
        // can pass for it.
        let automatic = rollback.requested_by.as_deref() == Some(bosun_sagas::release::AUTO_ROLLBACK);
        if automatic || rollback.override_reason.is_some() {
            return Ok(None);
        }
        let Some(stored) = governance.approval_policy(tenant).await.map_err(|err| match err {
            GovernanceError::Unavailable { .. } => HandlerError::transient(err),
            GovernanceError::Unreadable { .. } => HandlerError::needs_newer(err),
        })?
        else {
            return Ok(None);
        };
        Ok(stored
            .policy
            .promotion_gate(&rollback.environment, time::OffsetDateTime::now_utc())
            .map(|closure| {
                format!(
                    "{} (rule `{}`, policy version {})",
                    closure.reason,
                    closure.rule.name(),
                    stored.version
                )
            }))
    }

    /// The port.
    pub fn environments(&self) -> &P {
        &self.environments
    }

    /// The saga.
    pub fn saga(&self) -> &GitOpsSaga {
        &self.saga
    }
}

/// The path and bytes of a promotion's manifest in the environment
/// repository: `<environment>/apps/<moduleId>/release.json`, pretty JSON
/// with a final newline, keys in a fixed order.
pub fn desired_state_manifest(promoted: &DeploymentPromoted) -> Result<(String, Vec<u8>), GitOpsError> {
    let image = promoted.image.as_ref().map(|image| {
        json!({
            "reference": image.reference(),
            "registry": image.registry,
            "repository": image.image,
            "tag": image.tag,
            "digest": image.digest,
        })
    });
    let package = promoted.package.as_ref().map(|package| {
        json!({
            "id": package.package_id,
            "version": package.version,
            "feed": package.feed,
        })
    });
    let promoted_at = promoted
        .promoted_at
        .format(&Rfc3339)
        .map_err(|err| GitOpsError::Invalid(format!("promotedAt: {err}")))?;
    let manifest = json!({
        "apiVersion": "bosun.dev/v1",
        "kind": "AppRelease",
        "environment": promoted.environment,
        "moduleId": promoted.module_id,
        "releaseId": promoted.release_id,
        "image": image,
        "package": package,
        "approvedBy": promoted.approved_by,
        "promotedAt": promoted_at,
    });
    let mut bytes =
        serde_json::to_vec_pretty(&manifest).map_err(|err| GitOpsError::Invalid(format!("manifest: {err}")))?;
    bytes.push(b'\n');
    let path = format!("{}/apps/{}/release.json", promoted.environment, promoted.module_id);
    validate::repository_path("path", &path)?;
    Ok((path, bytes))
}

/// The GitOps saga (kind, `<tenant>/<environment>`) a message belongs to:
/// pure, so the registry computes it without building the consumer or its
/// adapters (a Service Bus session id); [`Consumer::saga_of`] calls it.
/// Two tenants' `dev` are two sagas.
pub fn saga_of(envelope: &Envelope, message: &Message) -> Option<(&'static str, String)> {
    bosun_sagas::gitops::environment_of(message).map(|environment| {
        (
            SagaKind::Gitops.as_str(),
            format!("{}/{environment}", envelope.tenant_id),
        )
    })
}

fn saga_error(err: bosun_sagas::SagaError) -> HandlerError {
    HandlerError::permanent(err)
}

#[async_trait]
impl<P: Environments> Consumer for GitOpsSync<P> {
    fn name(&self) -> ConsumerName {
        NAME
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(5)
    }

    /// Keyed by `<tenant>/<environment>`: two tenants' `dev` are two sagas.
    fn saga_of(&self, envelope: &Envelope, message: &Message) -> Option<(&'static str, String)> {
        saga_of(envelope, message)
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        let message = inbound.message;
        if self.saga.key_of(message).is_none() {
            return Err(UnexpectedMessage::handler_error(NAME, message));
        }
        message.validate().map_err(HandlerError::permanent)?;
        let tenant = inbound.envelope.tenant_id.clone();
        validate::tenant_id("tenantId", &tenant).map_err(|err| HandlerError::from(GitOpsError::from(err)))?;

        let state: GitOpsState = match inbound.saga {
            // A state a later release saved is left as it is: the message
            // waits for a process of that release.
            Some(saga) => load_state(&saga.state)?,
            None => {
                tracing::warn!(
                    message_type = message.message_type(),
                    "no saga passed in; starting from an empty state"
                );
                GitOpsState::default()
            }
        };

        let closed = match message {
            Message::RollbackEnvironment(rollback) => self.rollback_closed(&tenant, rollback).await?,
            _ => None,
        };
        let mut transition = match (message, closed) {
            (Message::RollbackEnvironment(rollback), Some(closed)) => {
                tracing::warn!(environment = %rollback.environment, module_id = %rollback.module_id, %closed, "rollback refused: the promotion gate is closed");
                self.saga.refuse_closed_rollback(&state, rollback, &closed)
            }
            _ => self
                .saga
                .step(&state, &GitOpsInput::Message(message))
                .map_err(saga_error)?,
        };
        let mut actions: Vec<Action> = Vec::new();
        for _ in 0..MAX_STEPS {
            actions.append(&mut transition.actions);
            let Some(work) = transition.work.take() else {
                break;
            };
            let input = match work {
                Work::WriteDesiredState(promoted) => {
                    let (path, manifest) = desired_state_manifest(&promoted)?;
                    let write = DesiredStateWrite {
                        tenant: tenant.clone(),
                        environment: promoted.environment.clone(),
                        repository: promoted.environment_repository.clone(),
                        module_id: promoted.module_id.clone(),
                        release_id: promoted.release_id.clone(),
                        path,
                        manifest,
                        message: match message {
                            Message::RollbackEnvironment(rollback) => format!(
                                "Roll {} in {} back to {}: {}",
                                promoted.module_id, promoted.environment, promoted.release_id, rollback.reason
                            ),
                            _ => format!("Promote {} to {}", promoted.release_id, promoted.environment),
                        },
                        date: promoted.promoted_at,
                    };
                    let written = self.environments.write_desired_state(&write).await.inspect_err(|err| {
                        tracing::warn!(
                            environment = %write.environment,
                            release_id = %write.release_id,
                            retryable = err.is_retryable(),
                            error = %err,
                            "writing the desired state failed"
                        );
                    })?;
                    tracing::info!(
                        environment = %write.environment,
                        repository = %write.repository,
                        release_id = %write.release_id,
                        commit = %written.commit_sha,
                        no_op = written.no_op,
                        "desired state written"
                    );
                    GitOpsInput::DesiredStateWritten(DesiredStateWritten {
                        module_id: promoted.module_id.clone(),
                        release_id: promoted.release_id.clone(),
                        promoted_at: promoted.promoted_at,
                        repository: promoted.environment_repository.clone(),
                        commit_sha: written.commit_sha,
                    })
                }
                Work::Reconcile {
                    repository,
                    commit_sha,
                    reason,
                } => {
                    let request = ReconcileRequest {
                        tenant: tenant.clone(),
                        environment: transition.state.environment.clone(),
                        repository: repository.unwrap_or_else(|| DEFAULT_ENVIRONMENT_REPOSITORY.to_owned()),
                        commit_sha,
                    };
                    let report = self.environments.reconcile(&request).await.inspect_err(|err| {
                        tracing::warn!(
                            environment = %request.environment,
                            retryable = err.is_retryable(),
                            error = %err,
                            "reconcile failed"
                        );
                    })?;
                    tracing::info!(
                        environment = %request.environment,
                        reason = ?reason,
                        desired = request.commit_sha.as_deref().unwrap_or("branch head"),
                        reported = report.commit_sha.as_deref().unwrap_or("nothing"),
                        healthy = report.healthy,
                        changed = report
                            .applied
                            .iter()
                            .filter(|r| r.action != bosun_contracts::messages::SyncAction::Unchanged)
                            .count(),
                        "reconciled"
                    );
                    GitOpsInput::EnvironmentReported(report)
                }
            };
            transition = self.saga.step(&transition.state, &input).map_err(saga_error)?;
        }
        actions.append(&mut transition.actions);

        let messages = actions
            .into_iter()
            .map(|action| match action {
                // A rollback's decision came through the rollback's door
                // (`cli:<operator>`, `api:<key>`), or is bosun's own (the
                // release saga's, after a failed verification).
                Action::Send(Message::ReleaseDecisionRecorded(mut recorded)) => {
                    let automatic = matches!(message, Message::RollbackEnvironment(rollback)
                        if rollback.requested_by.as_deref() == Some(bosun_sagas::release::AUTO_ROLLBACK));
                    recorded.door = Some(if automatic {
                        "bosun".to_owned()
                    } else {
                        inbound.envelope.source.clone()
                    });
                    Outgoing::now(recorded)
                }
                Action::Send(message) => Outgoing::now(message),
                Action::Schedule { message, after } => {
                    if let Message::ReconcileEnvironment(timer) = &message
                        && timer.reason == ReconcileReason::Schedule
                    {
                        tracing::info!(environment = %timer.environment, delay = ?after, "environment not yet at the desired commit; reconcile scheduled");
                    }
                    Outgoing::after(message, after)
                }
            })
            .collect();
        let saga_state = save_state(&transition.state)?;
        Ok(Outcome {
            messages,
            saga_state: Some(saga_state),
        })
    }
}
