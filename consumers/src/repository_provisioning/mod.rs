//! The repository-provisioning consumer: `ProvisionRepository` in,
//! `RepositoryProvisioned` out.
//!
//! Idempotent on the natural key tenant + name: an existing repository is
//! reported as provisioned with `created: false`. The tenant comes from the
//! envelope. Retried exponentially, 5 times (DESIGN.md).
//!
//! - [`port`] — the [`RepositoryHost`] port and its [`ProvisionError`];
//! - [`local`] — bare repositories on disk ([`local::LocalRepositoryHost`]);
//! - [`azure`] — Azure DevOps Git repositories
//!   ([`azure::AzureRepositoryHost`]).

pub mod azure;
pub mod local;
pub mod port;

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use bosun_contracts::messages::{ProvisionRepository, RepositoryProvisioned};
use bosun_contracts::validate::{self, Validate};
use bosun_contracts::{ConsumerName, Message};

pub use port::{ProvisionError, ProvisionedRepository, RepositoryHost, RepositorySpec};

use crate::delivery::git::short_branch;
use crate::{Consumer, HandlerError, Inbound, Outcome, RetryPolicy, UnexpectedMessage};

/// The consumer's name: its queue and subscription.
pub const NAME: ConsumerName = "repository-provisioning";

/// The repository-provisioning consumer over a [`RepositoryHost`].
#[derive(Debug, Clone)]
pub struct RepositoryProvisioning<P> {
    host: P,
}

impl<P: RepositoryHost> RepositoryProvisioning<P> {
    /// The consumer over a Git host: [`local::LocalRepositoryHost`],
    /// [`azure::AzureRepositoryHost`] (or any other implementation of the port).
    pub fn new(host: P) -> Self {
        Self { host }
    }

    /// The port.
    pub fn host(&self) -> &P {
        &self.host
    }
}

/// Turns a validated command and its tenant into the port's request.
fn spec(tenant: &str, command: &ProvisionRepository) -> Result<RepositorySpec, HandlerError> {
    let invalid = |reason: String| HandlerError::from(ProvisionError::Invalid(reason));
    validate::tenant_id("tenantId", tenant).map_err(|err| invalid(format!("{}: {}", err.field, err.reason)))?;
    command
        .validate()
        .map_err(|err| invalid(format!("payload.{}: {}", err.field, err.reason)))?;
    Ok(RepositorySpec {
        tenant: tenant.to_owned(),
        name: command.name.clone(),
        project: command.project.clone(),
        default_branch: short_branch(&command.default_branch).to_owned(),
        description: command.description.clone(),
        minimum_reviewers: command.minimum_reviewers,
    })
}

#[async_trait]
impl<P: RepositoryHost> Consumer for RepositoryProvisioning<P> {
    fn name(&self) -> ConsumerName {
        NAME
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(5)
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        let Message::ProvisionRepository(command) = inbound.message else {
            return Err(UnexpectedMessage::handler_error(NAME, inbound.message));
        };
        let tenant = inbound.envelope.tenant_id.as_str();
        let spec = spec(tenant, command)?;
        let provisioned = self.host.provision(&spec).await.inspect_err(|err| {
            tracing::warn!(
                tenant,
                repository = %spec.name,
                retryable = err.is_retryable(),
                error = %err,
                "repository provisioning failed"
            );
        })?;
        tracing::info!(
            tenant,
            repository = %provisioned.repository.name,
            repository_id = %provisioned.repository.id,
            project = %provisioned.repository.project,
            created = provisioned.created,
            "repository provisioned"
        );
        Ok(Outcome::send([Message::from(RepositoryProvisioned {
            repository: provisioned.repository,
            created: provisioned.created,
        })]))
    }
}
