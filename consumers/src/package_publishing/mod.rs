//! The package-publishing consumer: `BuildCompleted` in, `PackagePublished`
//! out.
//!
//! It acts only on a successful build of a module with `package` settings
//! that stored the package content: an artifact of kind `Archive` named
//! `package-content.tar` (bosun packs the `.nupkg` from it), or else an
//! artifact of kind `Package` ending in `.nupkg` (published as is, after
//! checking its id and version). For any other build it returns an empty
//! outcome.
//!
//! The package id and feed come from `module.package`, the version from
//! `module.version`. The module metadata has no authors or description
//! fields, so a packed `.nuspec` names the tenant as author and the
//! module's name as description.
//!
//! Idempotent on (tenant, feed, packageId, version): versions are
//! immutable. On the folder feed each tenant has its own feeds (two tenants
//! publishing the same id and version never meet); on Azure Artifacts the
//! feed a module names is the wall (see [`azure`]). The content blob must
//! be under the tenant's keys ([`crate::delivery::tenant::check_blob`]). Packing is
//! deterministic, so the same content gives the same SHA-512; when the feed
//! already has the version with that hash nothing is written and the event
//! says `alreadyPublished: true`; different content for an existing version
//! is a permanent error (bump the version). Retried exponentially, 5 times
//! (DESIGN.md).
//!
//! - [`port`] — the [`PackageFeed`] port and its [`PublishError`];
//! - [`nupkg`] — packing and reading `.nupkg` files, shared by both
//!   adapters; its container format is the delivery layer's
//!   [`crate::delivery::archive::zip`];
//! - [`local`] — NuGet folder feeds on disk ([`local::LocalNugetFeed`]);
//! - [`azure`] — Azure Artifacts NuGet feeds
//!   ([`azure::AzureArtifactsFeed`]).

pub mod azure;
pub mod local;
pub mod nupkg;
pub mod port;

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use bosun_contracts::messages::{ArtifactKind, BuildCompleted, PackagePublished};
use bosun_contracts::validate;
use bosun_contracts::{ConsumerName, Message};

pub use port::{PackageFeed, PackageSource, PackageSpec, PublishError, PublishedPackage};

use crate::{Consumer, HandlerError, Inbound, Outcome, RetryPolicy, UnexpectedMessage};

/// The consumer's name: its queue and subscription.
pub const NAME: ConsumerName = "package-publishing";

/// The artifact name the pipeline gives the package content.
pub const CONTENT_ARTIFACT: &str = "package-content.tar";

/// The package-publishing consumer over a [`PackageFeed`].
#[derive(Debug, Clone)]
pub struct PackagePublishing<P> {
    feed: P,
}

impl<P: PackageFeed> PackagePublishing<P> {
    /// The consumer over a feed: [`local::LocalNugetFeed`],
    /// [`azure::AzureArtifactsFeed`] (or any other implementation of the port).
    pub fn new(feed: P) -> Self {
        Self { feed }
    }

    /// The port.
    pub fn feed(&self) -> &P {
        &self.feed
    }
}

/// The port's request for a build, or `None` when the build is not one
/// this consumer acts on (failed, no package settings, no content).
pub fn package_spec(tenant: &str, event: &BuildCompleted) -> Result<Option<PackageSpec>, PublishError> {
    if !event.result.is_success() {
        return Ok(None);
    }
    let Some(package) = &event.module.package else {
        return Ok(None);
    };
    let content = event
        .artifacts_of(ArtifactKind::Archive)
        .find(|artifact| artifact.name == CONTENT_ARTIFACT);
    let source = match content {
        Some(artifact) => PackageSource::Content(artifact.blob.clone()),
        None => {
            let mut ready: Vec<_> = event
                .artifacts_of(ArtifactKind::Package)
                .filter(|artifact| artifact.name.to_ascii_lowercase().ends_with(".nupkg"))
                .collect();
            // Prefer the package named after the id (`<id>.<version>.nupkg`).
            let prefix = format!("{}.", package.package_id.to_ascii_lowercase());
            ready.sort_by_key(|artifact| !artifact.name.to_ascii_lowercase().starts_with(&prefix));
            match ready.first() {
                Some(artifact) => PackageSource::Nupkg(artifact.blob.clone()),
                None => return Ok(None),
            }
        }
    };
    validate::tenant_id("tenantId", tenant)
        .map_err(|err| PublishError::Invalid(format!("{}: {}", err.field, err.reason)))?;
    let blob = match &source {
        PackageSource::Content(blob) | PackageSource::Nupkg(blob) => blob,
    };
    crate::delivery::tenant::check_blob(blob, tenant)?;
    Ok(Some(PackageSpec {
        tenant: tenant.to_owned(),
        feed: package.feed.clone(),
        package_id: package.package_id.clone(),
        version: event.module.version.clone(),
        authors: tenant.to_owned(),
        description: event.module.name.clone(),
        source,
    }))
}

#[async_trait]
impl<P: PackageFeed> Consumer for PackagePublishing<P> {
    fn name(&self) -> ConsumerName {
        NAME
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(5)
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        let Message::BuildCompleted(event) = inbound.message else {
            return Err(UnexpectedMessage::handler_error(NAME, inbound.message));
        };
        let tenant = inbound.envelope.tenant_id.as_str();
        let Some(spec) = package_spec(tenant, event)? else {
            tracing::debug!(
                build_id = %event.build_id,
                result = ?event.result,
                has_package = event.module.package.is_some(),
                "no package to publish for this build"
            );
            return Ok(Outcome::default());
        };
        let published = self.feed.publish(&spec).await.inspect_err(|err| {
            tracing::warn!(
                tenant,
                build_id = %event.build_id,
                feed = %spec.feed,
                package_id = %spec.package_id,
                version = %spec.version,
                retryable = err.is_retryable(),
                error = %err,
                "package publishing failed"
            );
        })?;
        tracing::info!(
            tenant,
            build_id = %event.build_id,
            feed = %spec.feed,
            package_id = %spec.package_id,
            version = %spec.version,
            already_published = published.already_published,
            "package published"
        );
        Ok(Outcome::send([Message::from(PackagePublished {
            release_id: event.release_id.clone(),
            build_id: event.build_id.clone(),
            module_id: event.module.module_id.clone(),
            package_id: spec.package_id,
            version: spec.version,
            feed: spec.feed,
            sha512: published.sha512,
            size_bytes: published.size_bytes,
            url: published.url,
            already_published: published.already_published,
            published_at: published.published_at,
        })]))
    }
}
