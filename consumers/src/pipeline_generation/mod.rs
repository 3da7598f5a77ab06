//! The pipeline-generation consumer: `RepositoryProvisioned`,
//! `PullRequestOpened` and `GeneratePipeline` in; `PipelineGenerated` then
//! `PipelineRunStarted` out.
//!
//! For a module (from `PullRequestOpened.module`, from the command, or —
//! on `RepositoryProvisioned` — from `bosun.module.json` at the head of the
//! default branch), the handler:
//!
//! 1. renders the Azure Pipelines YAML from the versioned template of the
//!    module's language ([`template`]; [`TEMPLATE_VERSION`] unless the
//!    command names another version this build has);
//! 2. commits it as `azure-pipelines.yml` in the module's folder (or the
//!    command's `pipelinePath`) onto the pull request's source branch, the
//!    command's branch, or the default branch — a no-op when the branch
//!    already holds the same file;
//! 3. makes sure a pipeline definition (named after the module) runs that
//!    file, and queues a run of the commit holding it — the port returns
//!    the existing run when that commit was queued already;
//! 4. emits `PipelineGenerated` and `PipelineRunStarted`, whose `releaseId`
//!    is `<moduleId>-<first 12 hex of the built commit>`.
//!
//! Nothing happens (an empty outcome) for a pull request without module
//! metadata, or a repository whose default branch has no
//! `bosun.module.json` yet. Idempotent on (repository, moduleId,
//! templateVersion): the same module renders the same bytes, so a second
//! delivery commits nothing and finds the same run, and reports the same
//! events. The tenant comes from the envelope and the envelope's
//! `occurredAt` is the commit date. Retried exponentially, 3 times
//! (DESIGN.md).
//!
//! - [`port`] — the [`PipelineHost`] port and its [`PipelineError`];
//! - [`template`] — the versioned templates and the YAML emitter;
//! - [`local`] — the local Git host and the local pipeline runner
//!   ([`local::LocalPipelineGenerator`]);
//! - [`azure`] — Azure Repos pushes and Azure Pipelines
//!   ([`azure::AzurePipelineGenerator`]).

pub mod azure;
pub mod local;
pub mod port;
pub mod template;

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use bosun_contracts::messages::{ModuleMetadata, PipelineGenerated, PipelineRunStarted};
use bosun_contracts::validate::{self, Validate};
use bosun_contracts::{ConsumerName, Envelope, Message};

pub use port::{CommittedPipeline, DefinitionSpec, PipelineError, PipelineFile, PipelineHost, QueuedRun, RunSpec};
pub use template::{TEMPLATE_VERSION, TEMPLATE_VERSIONS, UnknownTemplateVersion};

use crate::delivery::git::short_branch;
use crate::{Consumer, HandlerError, Inbound, Outcome, RetryPolicy, UnexpectedMessage};

/// The consumer's name: its queue and subscription.
pub const NAME: ConsumerName = "pipeline-generation";

/// The module metadata file read from a repository's default branch.
pub const MODULE_FILE: &str = "bosun.module.json";

/// The pipeline file's name, in the module's folder.
pub const PIPELINE_FILE: &str = "azure-pipelines.yml";

/// Hex digits of the built commit in a release id.
pub const RELEASE_SHA_DIGITS: usize = 12;

/// The pipeline-generation consumer over a [`PipelineHost`].
#[derive(Debug, Clone)]
pub struct PipelineGeneration<P> {
    host: P,
}

/// What to generate, decoded from any of the three messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerationRequest {
    /// Tenant (from the envelope).
    pub tenant: String,
    /// Repository name.
    pub repository: String,
    /// Branch to commit to and build, without `refs/heads/`.
    pub branch: String,
    /// The module.
    pub module: ModuleMetadata,
    /// Template version to render.
    pub template_version: String,
    /// Where the pipeline file goes.
    pub pipeline_path: String,
}

/// Where a module's pipeline file goes by default:
/// `<module path>/azure-pipelines.yml`, or `azure-pipelines.yml` at the
/// root.
pub fn default_pipeline_path(module: &ModuleMetadata) -> String {
    match module.path.as_deref() {
        Some(path) if !path.is_empty() => format!("{path}/{PIPELINE_FILE}"),
        _ => PIPELINE_FILE.to_owned(),
    }
}

/// The release a run is a candidate for: `<moduleId>-<first 12 hex of the
/// commit>`. A module id longer than 115 characters is cut so the release id
/// stays an identifier (at most 128 characters).
pub fn release_id(module_id: &str, commit_sha: &str) -> String {
    let short = commit_sha.get(..RELEASE_SHA_DIGITS).unwrap_or(commit_sha);
    let keep = MAX_RELEASE_ID_CHARS - 1 - short.len();
    let module = module_id.get(..keep.min(module_id.len())).unwrap_or(module_id);
    format!("{module}-{short}")
}

/// Longest identifier the contracts accept.
const MAX_RELEASE_ID_CHARS: usize = 128;

impl<P: PipelineHost> PipelineGeneration<P> {
    /// The consumer over a pipeline host:
    /// [`local::LocalPipelineGenerator`], [`azure::AzurePipelineGenerator`]
    /// (or any other implementation of the port).
    pub fn new(host: P) -> Self {
        Self { host }
    }

    /// The port.
    pub fn host(&self) -> &P {
        &self.host
    }

    /// Decodes a message into a request; `None` when there is nothing to
    /// generate (no module metadata).
    async fn request(&self, envelope: &Envelope, message: &Message) -> Result<Option<GenerationRequest>, HandlerError> {
        let tenant = envelope.tenant_id.clone();
        validate::tenant_id("tenantId", &tenant).map_err(|err| invalid(&err.field, &err.reason))?;
        let payload_invalid = |err: validate::FieldError| invalid(&format!("payload.{}", err.field), &err.reason);
        match message {
            Message::GeneratePipeline(command) => {
                command.validate().map_err(payload_invalid)?;
                Ok(Some(GenerationRequest {
                    tenant,
                    repository: command.repository.clone(),
                    branch: short_branch(&command.branch).to_owned(),
                    pipeline_path: command
                        .pipeline_path
                        .clone()
                        .unwrap_or_else(|| default_pipeline_path(&command.module)),
                    module: command.module.clone(),
                    template_version: command.template_version.clone(),
                }))
            }
            Message::PullRequestOpened(event) => {
                event.validate().map_err(payload_invalid)?;
                let Some(module) = &event.module else {
                    tracing::debug!(tenant = %tenant, repository = %event.repository, "pull request carries no module metadata; no pipeline to generate");
                    return Ok(None);
                };
                Ok(Some(GenerationRequest {
                    tenant,
                    repository: event.repository.clone(),
                    branch: short_branch(&event.source_branch).to_owned(),
                    pipeline_path: default_pipeline_path(module),
                    module: module.clone(),
                    template_version: TEMPLATE_VERSION.to_owned(),
                }))
            }
            Message::RepositoryProvisioned(event) => {
                event.validate().map_err(payload_invalid)?;
                let repository = &event.repository;
                let branch = short_branch(&repository.default_branch).to_owned();
                let Some(bytes) = self
                    .host
                    .read_file(&tenant, &repository.name, &branch, MODULE_FILE)
                    .await?
                else {
                    tracing::debug!(tenant = %tenant, repository = %repository.name, "no bosun.module.json on the default branch yet; no pipeline to generate");
                    return Ok(None);
                };
                let module = parse_module_file(&repository.name, &bytes)?;
                Ok(Some(GenerationRequest {
                    tenant,
                    repository: repository.name.clone(),
                    branch,
                    pipeline_path: default_pipeline_path(&module),
                    module,
                    template_version: TEMPLATE_VERSION.to_owned(),
                }))
            }
            other => Err(UnexpectedMessage::handler_error(NAME, other)),
        }
    }
}

/// Parses and validates a `bosun.module.json`.
pub fn parse_module_file(repository: &str, bytes: &[u8]) -> Result<ModuleMetadata, PipelineError> {
    let bad = |reason: String| PipelineError::InvalidModuleFile {
        repository: repository.to_owned(),
        reason,
    };
    let module: ModuleMetadata = serde_json::from_slice(bytes).map_err(|err| bad(err.to_string()))?;
    module
        .validate()
        .map_err(|err| bad(format!("{}: {}", err.field, err.reason)))?;
    Ok(module)
}

fn invalid(field: &str, reason: &str) -> HandlerError {
    HandlerError::from(PipelineError::Invalid(format!("{field}: {reason}")))
}

#[async_trait]
impl<P: PipelineHost> Consumer for PipelineGeneration<P> {
    fn name(&self) -> ConsumerName {
        NAME
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(3)
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        let Some(request) = self.request(inbound.envelope, inbound.message).await? else {
            return Ok(Outcome::default());
        };
        validate::repository_path("pipelinePath", &request.pipeline_path)
            .map_err(|err| invalid(&err.field, &err.reason))?;
        let module = &request.module;
        let yaml = template::render(module, &request.template_version).map_err(PipelineError::from)?;
        let template = format!(
            "{}@{}",
            template::template_name(module.language),
            request.template_version
        );

        let log_failure = |step: &'static str| {
            let request = &request;
            move |err: &PipelineError| {
                tracing::warn!(
                    tenant = %request.tenant,
                    repository = %request.repository,
                    module = %request.module.module_id,
                    step,
                    retryable = err.is_retryable(),
                    error = %err,
                    "pipeline generation failed"
                );
            }
        };
        let committed = self
            .host
            .commit_pipeline(&PipelineFile {
                tenant: request.tenant.clone(),
                repository: request.repository.clone(),
                branch: request.branch.clone(),
                path: request.pipeline_path.clone(),
                content: yaml,
                message: format!("Generate the pipeline of {} ({template})", module.module_id),
                date: inbound.envelope.occurred_at,
            })
            .await
            .inspect_err(log_failure("commit"))?;
        let pipeline_id = self
            .host
            .ensure_pipeline(&DefinitionSpec {
                tenant: request.tenant.clone(),
                repository: request.repository.clone(),
                pipeline_path: request.pipeline_path.clone(),
                name: module.module_id.clone(),
            })
            .await
            .inspect_err(log_failure("definition"))?;
        let run = self
            .host
            .queue_run(&RunSpec {
                tenant: request.tenant.clone(),
                repository: request.repository.clone(),
                branch: request.branch.clone(),
                commit_sha: committed.commit_sha.clone(),
                pipeline_path: request.pipeline_path.clone(),
                pipeline_id: pipeline_id.clone(),
            })
            .await
            .inspect_err(log_failure("queue"))?;
        tracing::info!(
            tenant = %request.tenant,
            repository = %request.repository,
            module = %module.module_id,
            template = %template,
            commit = %committed.commit_sha,
            no_op = committed.no_op,
            pipeline = %pipeline_id,
            run = %run.run_id,
            "pipeline generated and run queued"
        );

        let generated = PipelineGenerated {
            repository: request.repository.clone(),
            branch: request.branch.clone(),
            pipeline_path: request.pipeline_path.clone(),
            module_id: module.module_id.clone(),
            template_version: request.template_version.clone(),
            commit_sha: committed.commit_sha.clone(),
            pipeline_id: pipeline_id.clone(),
            no_op: committed.no_op,
        };
        let started = PipelineRunStarted {
            pipeline_run_id: run.run_id,
            pipeline_id,
            repository: request.repository.clone(),
            branch: request.branch.clone(),
            release_id: release_id(&module.module_id, &committed.commit_sha),
            commit_sha: committed.commit_sha,
            module: request.module.clone(),
            started_at: run.queued_at,
            url: run.url,
        };
        Ok(Outcome::send([Message::from(generated), Message::from(started)]))
    }
}
