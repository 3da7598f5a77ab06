//! The container-build consumer: `BuildCompleted` and its own scheduled
//! `PollContainerBuild` in; `ContainerImageBuilt` (or the next
//! `PollContainerBuild`) out.
//!
//! It acts only on a successful build of a module with `container`
//! settings that stored a `ContainerContext` artifact (the
//! `container-context.tar` the pipeline publishes); for any other build it
//! returns an empty outcome. The image is built from the context and its
//! Dockerfile and stored under the module version as tag: by buildah
//! ([`buildah`]: any Dockerfile, pushed to a registry) where the runtime
//! finds it, else without Docker (the delivery layer's OCI image builder,
//! [`crate::delivery::oci`]: a documented Dockerfile subset, `FROM scratch`
//! only).
//! Images are the tenant's: the context must be under the tenant's blob
//! keys ([`crate::delivery::tenant::check_blob`]), each tenant has its own local
//! layouts, and on ACR the repository is `<tenant>/<image>` — two tenants
//! building the same image name and tag never move each other's tag. The
//! event names the repository the registry holds the image under.
//! The built-in builder is idempotent on the image digest: the build is reproducible, so the same
//! context gives the same digest, and when the tag already names it nothing
//! is written and the event says `alreadyPresent: true`; buildah is
//! idempotent on a build key the image carries as a label (see
//! [`buildah`]); ACR Tasks on a build key the image is also tagged with
//! (see [`acr_tasks`]). Retried exponentially, 3 times (DESIGN.md).
//!
//! A remote builder (ACR Tasks) answers [`BuildProgress::Running`]: the
//! build goes on in the registry, and the consumer follows it as the
//! pipeline monitor follows a pipeline run, without holding a lock or
//! waiting in a handler. It emits an internal `PollContainerBuild` (the
//! whole build, so no state is kept between polls) scheduled with
//! `Outgoing::after`; each poll asks the port once
//! ([`ImageBuilder::poll`]) and emits `ContainerImageBuilt` when the run
//! succeeded, or the next poll, the delay doubling from
//! [`DEFAULT_POLL_BASE_DELAY`] up to [`DEFAULT_POLL_MAX_DELAY`]. After
//! [`DEFAULT_MAX_POLLS`] polls without an end it gives up with a permanent
//! error, so the last poll lands in the dead letters for an operator to
//! replay. A failed run is a permanent error carrying its log.
//!
//! - [`port`] — the [`ImageBuilder`] port and its [`ContainerBuildError`];
//! - [`image`] — the first half of both adapters: the build context from
//!   the blob store through [`crate::delivery::oci`]'s builder;
//! - [`buildah`] — Debian's buildah, pushing to the configured registry and
//!   verifying the push by digest ([`buildah::BuildahBuilder`]);
//! - [`local`] — OCI image layouts on disk
//!   ([`local::LocalImageBuilder`]);
//! - [`azure`] — Azure Container Registry through the OCI distribution API
//!   ([`azure::AzureContainerRegistry`]);
//! - [`acr_tasks`] — ACR Tasks: the registry builds any Dockerfile
//!   ([`acr_tasks::AcrTasks`]).

pub mod acr_tasks;
pub mod azure;
pub mod buildah;
pub mod image;
pub mod local;
pub mod port;

#[cfg(test)]
mod acr_tasks_tests;
#[cfg(test)]
mod buildah_tests;
#[cfg(test)]
mod tests;

use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{ArtifactKind, BuildCompleted, ContainerImageBuilt, PollContainerBuild};
use bosun_contracts::validate::{self, Validate};
use bosun_contracts::{ConsumerName, Message};

pub use port::{BuildProgress, BuildRun, BuiltImage, ContainerBuildError, ImageBuilder, ImageSpec, RunningBuild};

use crate::{Consumer, HandlerError, Inbound, Outcome, Outgoing, RetryPolicy, UnexpectedMessage};

/// The consumer's name: its queue and subscription.
pub const NAME: ConsumerName = "container-build";

/// The artifact name the pipeline gives the build context.
pub const CONTEXT_ARTIFACT: &str = "container-context.tar";

/// The default delay before the first poll of a remote build.
pub const DEFAULT_POLL_BASE_DELAY: Duration = Duration::from_secs(5);

/// The default longest delay between polls of a remote build.
pub const DEFAULT_POLL_MAX_DELAY: Duration = Duration::from_secs(60);

/// The default number of polls of a remote build before giving up (about
/// two and a half hours with the default delays; an ACR Tasks run stops
/// itself after [`acr_tasks::DEFAULT_RUN_TIMEOUT`]).
pub const DEFAULT_MAX_POLLS: u32 = 150;

/// The container-build consumer over an [`ImageBuilder`].
#[derive(Debug, Clone)]
pub struct ContainerBuild<P> {
    builder: P,
    base_delay: Duration,
    max_delay: Duration,
    max_polls: u32,
}

impl<P: ImageBuilder> ContainerBuild<P> {
    /// The consumer over a registry: [`local::LocalImageBuilder`],
    /// [`azure::AzureContainerRegistry`], [`acr_tasks::AcrTasks`] (or any
    /// other implementation of the port), following remote builds with
    /// the default delays ([`DEFAULT_POLL_BASE_DELAY`],
    /// [`DEFAULT_POLL_MAX_DELAY`], [`DEFAULT_MAX_POLLS`]).
    pub fn new(builder: P) -> Self {
        Self {
            builder,
            base_delay: DEFAULT_POLL_BASE_DELAY,
            max_delay: DEFAULT_POLL_MAX_DELAY,
            max_polls: DEFAULT_MAX_POLLS,
        }
    }

    /// Follows remote builds polling first after `base_delay`, doubling up
    /// to `max_delay`, and giving up after `max_polls` polls (at least 1).
    pub fn with_polling(mut self, base_delay: Duration, max_delay: Duration, max_polls: u32) -> Self {
        self.base_delay = base_delay;
        self.max_delay = max_delay.max(base_delay);
        self.max_polls = max_polls.max(1);
        self
    }

    /// The delay before poll number `poll` (1-based):
    /// `min(max_delay, base_delay * 2^(poll - 1))`.
    pub fn poll_delay(&self, poll: u32) -> Duration {
        let factor = 2u32.saturating_pow(poll.saturating_sub(1).min(31));
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }

    /// The most polls of a remote build before giving up.
    pub fn max_polls(&self) -> u32 {
        self.max_polls
    }

    /// The port.
    pub fn builder(&self) -> &P {
        &self.builder
    }
}

/// The image tag of a module version: semantic versions are valid tags
/// except for the `+` of build metadata, which becomes `_`.
pub fn tag_for_version(version: &str) -> String {
    version.replace('+', "_")
}

/// The port's request for a build, or `None` when the build is not one
/// this consumer acts on (failed, no container settings, no context).
pub fn image_spec(tenant: &str, event: &BuildCompleted) -> Result<Option<ImageSpec>, ContainerBuildError> {
    if !event.result.is_success() {
        return Ok(None);
    }
    let Some(container) = &event.module.container else {
        return Ok(None);
    };
    let mut contexts = event.artifacts_of(ArtifactKind::ContainerContext);
    let Some(first) = contexts.next() else {
        return Ok(None);
    };
    let context = std::iter::once(first)
        .chain(contexts)
        .find(|artifact| artifact.name == CONTEXT_ARTIFACT)
        .unwrap_or(first);
    let invalid = |err: validate::FieldError| ContainerBuildError::Invalid(format!("{}: {}", err.field, err.reason));
    validate::tenant_id("tenantId", tenant).map_err(invalid)?;
    crate::delivery::tenant::check_blob(&context.blob, tenant)?;
    let tag = tag_for_version(&event.module.version);
    validate::oci_tag("module.version", &tag).map_err(invalid)?;
    Ok(Some(ImageSpec {
        tenant: tenant.to_owned(),
        registry: container.registry.clone(),
        image: container.image.clone(),
        tag,
        platform: container.platform.clone(),
        dockerfile: dockerfile_in_context(&container.dockerfile, container.context.as_deref()),
        build_args: container.build_args.clone(),
        context: context.blob.clone(),
    }))
}

/// Where the Dockerfile is inside the context tar: `dockerfile` is relative
/// to the module, the tar holds the context folder, so a Dockerfile inside
/// the context loses the context prefix.
fn dockerfile_in_context(dockerfile: &str, context: Option<&str>) -> String {
    let context = context
        .map(|c| c.trim_matches('/'))
        .filter(|c| !c.is_empty() && *c != ".");
    match context {
        Some(context) => dockerfile
            .strip_prefix(context)
            .and_then(|rest| rest.strip_prefix('/'))
            .unwrap_or(dockerfile)
            .to_owned(),
        None => dockerfile.to_owned(),
    }
}

/// The build an outgoing `ContainerImageBuilt` reports on: the fields
/// `BuildCompleted` and `PollContainerBuild` share.
struct Origin<'a> {
    release_id: &'a str,
    build_id: &'a str,
    module_id: &'a str,
    repository: &'a str,
    commit_sha: &'a str,
}

impl<'a> Origin<'a> {
    fn of_build(event: &'a BuildCompleted) -> Self {
        Self {
            release_id: &event.release_id,
            build_id: &event.build_id,
            module_id: &event.module.module_id,
            repository: &event.repository,
            commit_sha: &event.commit_sha,
        }
    }

    fn of_poll(poll: &'a PollContainerBuild) -> Self {
        Self {
            release_id: &poll.release_id,
            build_id: &poll.build_id,
            module_id: &poll.module_id,
            repository: &poll.repository,
            commit_sha: &poll.commit_sha,
        }
    }

    fn image_built(&self, registry: &str, tag: &str, platform: &str, built: BuiltImage) -> Message {
        Message::from(ContainerImageBuilt {
            release_id: self.release_id.to_owned(),
            build_id: self.build_id.to_owned(),
            module_id: self.module_id.to_owned(),
            repository: self.repository.to_owned(),
            commit_sha: self.commit_sha.to_owned(),
            registry: registry.to_owned(),
            image: built.repository,
            tag: tag.to_owned(),
            digest: built.digest,
            platform: platform.to_owned(),
            size_bytes: built.size_bytes,
            already_present: built.already_present,
            pushed_at: built.pushed_at,
        })
    }
}

impl<P: ImageBuilder> ContainerBuild<P> {
    async fn on_build_completed(&self, tenant: &str, event: &BuildCompleted) -> Result<Outcome, HandlerError> {
        let Some(spec) = image_spec(tenant, event)? else {
            tracing::debug!(
                build_id = %event.build_id,
                result = ?event.result,
                has_container = event.module.container.is_some(),
                "no image to build for this build"
            );
            return Ok(Outcome::default());
        };
        let progress = self.builder.build(&spec).await.inspect_err(|err| {
            tracing::warn!(
                tenant,
                build_id = %event.build_id,
                image = %spec.image,
                tag = %spec.tag,
                retryable = err.is_retryable(),
                error = %err,
                "container build failed"
            );
        })?;
        let origin = Origin::of_build(event);
        match progress {
            BuildProgress::Built(built) => {
                tracing::info!(
                    tenant,
                    build_id = %event.build_id,
                    registry = %spec.registry,
                    image = %built.repository,
                    tag = %spec.tag,
                    digest = %built.digest,
                    already_present = built.already_present,
                    "container image built"
                );
                Ok(Outcome::send([origin.image_built(
                    &spec.registry,
                    &spec.tag,
                    &spec.platform,
                    built,
                )]))
            }
            BuildProgress::Running(running) => {
                let poll = PollContainerBuild {
                    run_id: running.run_id,
                    build_key: running.build_key,
                    release_id: event.release_id.clone(),
                    build_id: event.build_id.clone(),
                    module_id: event.module.module_id.clone(),
                    repository: event.repository.clone(),
                    commit_sha: event.commit_sha.clone(),
                    registry: spec.registry,
                    image: spec.image,
                    tag: spec.tag,
                    platform: spec.platform,
                    poll: 1,
                };
                let delay = self.poll_delay(1);
                tracing::info!(
                    tenant,
                    build_id = %event.build_id,
                    run = %poll.run_id,
                    status = %running.status,
                    next_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    "container build started; following it"
                );
                Ok(Outcome {
                    messages: vec![Outgoing::after(poll, delay)],
                    saga_state: None,
                })
            }
        }
    }

    async fn on_poll(&self, tenant: &str, poll: &PollContainerBuild) -> Result<Outcome, HandlerError> {
        let invalid =
            |err: validate::FieldError| ContainerBuildError::Invalid(format!("{}: {}", err.field, err.reason));
        validate::tenant_id("tenantId", tenant).map_err(invalid)?;
        poll.validate()
            .map_err(|err| ContainerBuildError::Invalid(format!("payload.{}: {}", err.field, err.reason)))?;
        let run = BuildRun {
            tenant: tenant.to_owned(),
            run_id: poll.run_id.clone(),
            build_key: poll.build_key.clone(),
            registry: poll.registry.clone(),
            image: poll.image.clone(),
            tag: poll.tag.clone(),
            platform: poll.platform.clone(),
        };
        let progress = self.builder.poll(&run).await.inspect_err(|err| {
            tracing::warn!(
                tenant,
                build_id = %poll.build_id,
                run = %poll.run_id,
                poll = poll.poll,
                retryable = err.is_retryable(),
                error = %err,
                "container build run failed, or could not be looked at"
            );
        })?;
        match progress {
            BuildProgress::Built(built) => {
                tracing::info!(
                    tenant,
                    build_id = %poll.build_id,
                    run = %poll.run_id,
                    poll = poll.poll,
                    image = %built.repository,
                    tag = %poll.tag,
                    digest = %built.digest,
                    "container image built"
                );
                Ok(Outcome::send([Origin::of_poll(poll).image_built(
                    &poll.registry,
                    &poll.tag,
                    &poll.platform,
                    built,
                )]))
            }
            BuildProgress::Running(running) => {
                if poll.poll >= self.max_polls {
                    tracing::warn!(tenant, run = %poll.run_id, poll = poll.poll, status = %running.status, "container build run not finished after the last poll; giving up");
                    return Err(ContainerBuildError::GaveUp {
                        builder: running.builder,
                        run_id: poll.run_id.clone(),
                        polls: poll.poll,
                    }
                    .into());
                }
                let next = poll.next();
                let delay = self.poll_delay(next.poll);
                tracing::debug!(tenant, run = %poll.run_id, poll = poll.poll, status = %running.status, next_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), "container build run in progress; polling again later");
                Ok(Outcome {
                    messages: vec![Outgoing::after(next, delay)],
                    saga_state: None,
                })
            }
        }
    }
}

#[async_trait]
impl<P: ImageBuilder> Consumer for ContainerBuild<P> {
    fn name(&self) -> ConsumerName {
        NAME
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(3)
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        let tenant = inbound.envelope.tenant_id.as_str();
        match inbound.message {
            Message::BuildCompleted(event) => self.on_build_completed(tenant, event).await,
            Message::PollContainerBuild(poll) => self.on_poll(tenant, poll).await,
            other => Err(UnexpectedMessage::handler_error(NAME, other)),
        }
    }
}
