//! The container-build consumer: `BuildCompleted` in, `ContainerImageBuilt`
//! out.
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
//! [`buildah`]). Retried
//! exponentially, 3 times (DESIGN.md).
//!
//! - [`port`] — the [`ImageBuilder`] port and its [`ContainerBuildError`];
//! - [`image`] — the first half of both adapters: the build context from
//!   the blob store through [`crate::delivery::oci`]'s builder;
//! - [`buildah`] — Debian's buildah, pushing to the configured registry and
//!   verifying the push by digest ([`buildah::BuildahBuilder`]);
//! - [`local`] — OCI image layouts on disk
//!   ([`local::LocalImageBuilder`]);
//! - [`azure`] — Azure Container Registry through the OCI distribution API
//!   ([`azure::AzureContainerRegistry`]).

pub mod azure;
pub mod buildah;
pub mod image;
pub mod local;
pub mod port;

#[cfg(test)]
mod buildah_tests;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use bosun_contracts::messages::{ArtifactKind, BuildCompleted, ContainerImageBuilt};
use bosun_contracts::validate;
use bosun_contracts::{ConsumerName, Message};

pub use port::{BuiltImage, ContainerBuildError, ImageBuilder, ImageSpec};

use crate::{Consumer, HandlerError, Inbound, Outcome, RetryPolicy, UnexpectedMessage};

/// The consumer's name: its queue and subscription.
pub const NAME: ConsumerName = "container-build";

/// The artifact name the pipeline gives the build context.
pub const CONTEXT_ARTIFACT: &str = "container-context.tar";

/// The container-build consumer over an [`ImageBuilder`].
#[derive(Debug, Clone)]
pub struct ContainerBuild<P> {
    builder: P,
}

impl<P: ImageBuilder> ContainerBuild<P> {
    /// The consumer over a registry: [`local::LocalImageBuilder`],
    /// [`azure::AzureContainerRegistry`] (or any other implementation of the port).
    pub fn new(builder: P) -> Self {
        Self { builder }
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

#[async_trait]
impl<P: ImageBuilder> Consumer for ContainerBuild<P> {
    fn name(&self) -> ConsumerName {
        NAME
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(3)
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        let Message::BuildCompleted(event) = inbound.message else {
            return Err(UnexpectedMessage::handler_error(NAME, inbound.message));
        };
        let tenant = inbound.envelope.tenant_id.as_str();
        let Some(spec) = image_spec(tenant, event)? else {
            tracing::debug!(
                build_id = %event.build_id,
                result = ?event.result,
                has_container = event.module.container.is_some(),
                "no image to build for this build"
            );
            return Ok(Outcome::default());
        };
        let built = self.builder.build(&spec).await.inspect_err(|err| {
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
        Ok(Outcome::send([Message::from(ContainerImageBuilt {
            release_id: event.release_id.clone(),
            build_id: event.build_id.clone(),
            module_id: event.module.module_id.clone(),
            repository: event.repository.clone(),
            commit_sha: event.commit_sha.clone(),
            registry: spec.registry,
            image: built.repository,
            tag: spec.tag,
            digest: built.digest,
            platform: spec.platform,
            size_bytes: built.size_bytes,
            already_present: built.already_present,
            pushed_at: built.pushed_at,
        })]))
    }
}
