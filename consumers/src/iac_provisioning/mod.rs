//! The iac-provisioning consumer: `ReleaseApproved` (event) or
//! `ProvisionInfrastructure` (command) in, `InfrastructureProvisioned` out,
//! preceded by `InfrastructureDriftDetected` when the actual resources
//! differ from the stack's recorded state.
//!
//! Every change is previewed, then applied (unless `previewOnly`).
//! Idempotent on `planId`: a plan already applied reports its recorded
//! result again and changes nothing. The apply is guarded: an apply that
//! was interrupted or failed midway is never retried as it was planned; the
//! next attempt previews again against the actual resources and applies
//! only what is still missing. Retried exponentially, 3 times (DESIGN.md).
//!
//! A `ReleaseApproved` provisions the module's default stack for the
//! approved environment ([`release_request`]): plan `<releaseId>-<environment>`,
//! stack `<moduleId>/<environment>`, and three resources of the local
//! engine — `local:namespace/<moduleId>`, `local:storage/<moduleId>-data`
//! and `local:settings/<moduleId>-settings` (a Pulumi program declares its
//! own resources and ignores them). The tenant comes from the envelope.
//! The approval's `repository` and `commitSha` (the release's build) say
//! where the module's Pulumi program is ([`ProvisionRequest::program`]);
//! a `ProvisionInfrastructure` may name them too.
//!
//! - [`port`] — the [`InfrastructureEngine`] port and its [`IacError`];
//! - [`local`] — the embedded engine: state file, journal, resources as
//!   files ([`local::LocalInfrastructure`]);
//! - [`azure`] — the Pulumi CLI ([`azure::PulumiEngine`]);
//! - [`program`] — where the Pulumi program comes from: a configured
//!   folder, or Git (the module's repository at the release's commit, or a
//!   configured repository), fetched per plan ([`program::ProgramSource`]).

pub mod azure;
pub mod local;
pub mod port;
pub mod program;

#[cfg(test)]
mod program_tests;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use async_trait::async_trait;
use bosun_contracts::messages::{
    InfrastructureDriftDetected, InfrastructureProvisioned, ProvisionInfrastructure, ReleaseApproved, ResourceSpec,
};
use bosun_contracts::validate::{self, Validate};
use bosun_contracts::{ConsumerName, Envelope, Message};
use serde_json::json;

pub use port::{IacError, InfrastructureEngine, ProgramCommit, ProvisionReport, ProvisionRequest};

use crate::{Consumer, HandlerError, Inbound, Outcome, RetryPolicy, UnexpectedMessage};

/// The consumer's name: its queue and subscription.
pub const NAME: ConsumerName = "iac-provisioning";

/// The iac-provisioning consumer over an [`InfrastructureEngine`].
#[derive(Debug, Clone)]
pub struct IacProvisioning<P> {
    engine: P,
}

impl<P: InfrastructureEngine> IacProvisioning<P> {
    /// The consumer over an engine: [`local::LocalInfrastructure`],
    /// [`azure::PulumiEngine`] (or any other implementation of the port).
    pub fn new(engine: P) -> Self {
        Self { engine }
    }

    /// The port.
    pub fn engine(&self) -> &P {
        &self.engine
    }
}

fn invalid(field: &str, reason: &str) -> IacError {
    IacError::Invalid(format!("{field}: {reason}"))
}

fn tenant_of(envelope: &Envelope) -> Result<String, IacError> {
    validate::tenant_id("tenantId", &envelope.tenant_id).map_err(|err| invalid(&err.field, &err.reason))?;
    Ok(envelope.tenant_id.clone())
}

/// The request of a `ProvisionInfrastructure` command.
pub fn command_request(envelope: &Envelope, command: &ProvisionInfrastructure) -> Result<ProvisionRequest, IacError> {
    let tenant = tenant_of(envelope)?;
    command
        .validate()
        .map_err(|err| invalid(&format!("payload.{}", err.field), &err.reason))?;
    Ok(ProvisionRequest {
        tenant,
        plan_id: command.plan_id.clone(),
        stack: command.stack.clone(),
        environment: command.environment.clone(),
        release_id: command.release_id.clone(),
        config: command.config.clone(),
        resources: command.resources.clone(),
        preview_only: command.preview_only,
        program: program_commit(command.repository.as_ref(), command.commit_sha.as_ref()),
    })
}

/// The repository and commit a message names, when it names both.
fn program_commit(repository: Option<&String>, commit_sha: Option<&String>) -> Option<ProgramCommit> {
    Some(ProgramCommit {
        repository: repository?.clone(),
        commit_sha: commit_sha?.clone(),
    })
}

/// The default stack of a module in an environment, provisioned when a
/// release is approved: see the module documentation.
pub fn default_resources(module_id: &str, environment: &str) -> Vec<ResourceSpec> {
    let common = |extra: serde_json::Value| {
        let mut properties = BTreeMap::from([
            ("environment".to_owned(), json!(environment)),
            ("module".to_owned(), json!(module_id)),
        ]);
        if let serde_json::Value::Object(extra) = extra {
            properties.extend(extra);
        }
        properties
    };
    vec![
        ResourceSpec {
            resource_type: "local:namespace".to_owned(),
            name: module_id.to_owned(),
            properties: common(json!({ "labels": { "bosun.dev/module": module_id } })),
        },
        ResourceSpec {
            resource_type: "local:storage".to_owned(),
            name: format!("{module_id}-data"),
            properties: common(json!({ "sizeGb": 1, "redundancy": "local" })),
        },
        ResourceSpec {
            resource_type: "local:settings".to_owned(),
            name: format!("{module_id}-settings"),
            properties: common(json!({
                "logLevel": if environment == "prod" { "warn" } else { "info" },
            })),
        },
    ]
}

/// The request of a `ReleaseApproved` event: the module's default stack
/// (`<moduleId>/<environment>`), plan `<releaseId>-<environment>`.
pub fn release_request(envelope: &Envelope, approved: &ReleaseApproved) -> Result<ProvisionRequest, IacError> {
    let tenant = tenant_of(envelope)?;
    approved
        .validate()
        .map_err(|err| invalid(&format!("payload.{}", err.field), &err.reason))?;
    let plan_id = format!("{}-{}", approved.release_id, approved.environment);
    validate::identifier("planId", &plan_id)?;
    let stack = format!("{}/{}", approved.module_id, approved.environment);
    validate::stack_name("stack", &stack)?;
    Ok(ProvisionRequest {
        tenant,
        plan_id,
        stack,
        environment: approved.environment.clone(),
        release_id: Some(approved.release_id.clone()),
        config: BTreeMap::new(),
        resources: default_resources(&approved.module_id, &approved.environment),
        preview_only: false,
        program: program_commit(approved.repository.as_ref(), approved.commit_sha.as_ref()),
    })
}

#[async_trait]
impl<P: InfrastructureEngine> Consumer for IacProvisioning<P> {
    fn name(&self) -> ConsumerName {
        NAME
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(3)
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        let request = match inbound.message {
            Message::ProvisionInfrastructure(command) => command_request(inbound.envelope, command)?,
            Message::ReleaseApproved(approved) => release_request(inbound.envelope, approved)?,
            other => return Err(UnexpectedMessage::handler_error(NAME, other)),
        };
        let report = self.engine.provision(&request).await.inspect_err(|err| {
            tracing::warn!(
                tenant = %request.tenant,
                plan_id = %request.plan_id,
                stack = %request.stack,
                environment = %request.environment,
                retryable = err.is_retryable(),
                error = %err,
                "provisioning failed"
            );
        })?;
        if report.previewed_after_interruption {
            tracing::warn!(
                plan_id = %request.plan_id,
                stack = %request.stack,
                environment = %request.environment,
                "an earlier apply was interrupted; previewed again against the actual resources before applying"
            );
        }
        tracing::info!(
            tenant = %request.tenant,
            plan_id = %request.plan_id,
            stack = %request.stack,
            environment = %request.environment,
            preview_only = request.preview_only,
            replayed = report.replayed,
            created = report.changes.created,
            updated = report.changes.updated,
            replaced = report.changes.replaced,
            deleted = report.changes.deleted,
            unchanged = report.changes.unchanged,
            drifted = report.drift.len(),
            "infrastructure provisioned"
        );

        let mut messages = Vec::with_capacity(2);
        if !report.drift.is_empty() {
            messages.push(Message::from(InfrastructureDriftDetected {
                plan_id: report.drift_plan_id.clone().unwrap_or_else(|| request.plan_id.clone()),
                stack: request.stack.clone(),
                environment: request.environment.clone(),
                drifted: report.drift.clone(),
                detected_at: report.provisioned_at,
            }));
        }
        messages.push(Message::from(InfrastructureProvisioned {
            plan_id: request.plan_id,
            stack: request.stack,
            environment: request.environment,
            release_id: request.release_id,
            preview_only: request.preview_only,
            changes: report.changes,
            outputs: report.outputs,
            log: None,
            provisioned_at: report.provisioned_at,
        }));
        Ok(Outcome::send(messages))
    }
}
