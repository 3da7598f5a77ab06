//! Published artifacts: `ContainerImageBuilt` (consumer `container-build`,
//! with its self-scheduled `PollContainerBuild`) and `PackagePublished` (consumer `package-publishing`), and the slim
//! [`ImageArtifact`] and [`PackageArtifact`] references a release carries.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::module::MAX_PLATFORM_CHARS;
use crate::schema_rules as rule;
use crate::validate::{self, FieldError, Validate};

/// An OCI image pinned by digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageArtifact {
    /// Registry host, e.g. `contoso.azurecr.io`.
    #[schemars(transform = rule::registry_host)]
    pub registry: String,
    /// Image repository, e.g. `contoso/payments-api`.
    #[schemars(transform = rule::oci_repository)]
    pub image: String,
    /// The tag pushed, e.g. `1.4.0`.
    #[schemars(transform = rule::oci_tag)]
    pub tag: String,
    /// Manifest digest, `sha256:<64 hex>`; deployments pin this, not the tag.
    #[schemars(transform = rule::oci_digest)]
    pub digest: String,
}

impl ImageArtifact {
    /// The pinned reference `registry/image@digest`.
    pub fn reference(&self) -> String {
        format!("{}/{}@{}", self.registry, self.image, self.digest)
    }
}

impl Validate for ImageArtifact {
    fn validate(&self) -> Result<(), FieldError> {
        validate::registry_host("registry", &self.registry)?;
        validate::oci_repository("image", &self.image)?;
        validate::oci_tag("tag", &self.tag)?;
        validate::oci_digest("digest", &self.digest)
    }
}

/// A NuGet package version on a feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PackageArtifact {
    /// NuGet package id.
    #[schemars(transform = rule::nuget_package_id)]
    pub package_id: String,
    /// Package version (semantic version; immutable on the feed).
    #[schemars(transform = rule::semantic_version)]
    pub version: String,
    /// Feed it was published to.
    #[schemars(transform = rule::identifier)]
    pub feed: String,
}

impl Validate for PackageArtifact {
    fn validate(&self) -> Result<(), FieldError> {
        validate::nuget_package_id("packageId", &self.package_id)?;
        validate::semantic_version("version", &self.version)?;
        validate::identifier("feed", &self.feed)
    }
}

/// An OCI image was built from a build and pushed. Idempotent on the image
/// digest: the same digest already in the registry is reported, not pushed
/// again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerImageBuilt {
    /// The release the image belongs to.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The build the image was made from.
    #[schemars(transform = rule::identifier)]
    pub build_id: String,
    /// The module.
    #[schemars(transform = rule::identifier)]
    pub module_id: String,
    /// Source repository name (Git).
    #[schemars(transform = rule::repository_name)]
    pub repository: String,
    /// Source commit.
    #[schemars(transform = rule::git_sha)]
    pub commit_sha: String,
    /// Registry host, e.g. `contoso.azurecr.io`.
    #[schemars(transform = rule::registry_host)]
    pub registry: String,
    /// Image repository in the registry, e.g. `contoso/payments-api`.
    #[schemars(transform = rule::oci_repository)]
    pub image: String,
    /// The tag pushed, e.g. `1.4.0`.
    #[schemars(transform = rule::oci_tag)]
    pub tag: String,
    /// Manifest digest, `sha256:<64 hex>`.
    #[schemars(transform = rule::oci_digest)]
    pub digest: String,
    /// Platform built, e.g. `linux/amd64`.
    #[schemars(transform = rule::text(MAX_PLATFORM_CHARS))]
    pub platform: String,
    /// Total size of the image (manifest, config and layers) in bytes.
    #[schemars(transform = rule::positive)]
    pub size_bytes: u64,
    /// `true` when the registry already had this digest and nothing was
    /// pushed.
    #[serde(default)]
    pub already_present: bool,
    /// When the push finished.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub pushed_at: OffsetDateTime,
}

impl ContainerImageBuilt {
    /// The image as a release artifact.
    pub fn artifact(&self) -> ImageArtifact {
        ImageArtifact {
            registry: self.registry.clone(),
            image: self.image.clone(),
            tag: self.tag.clone(),
            digest: self.digest.clone(),
        }
    }
}

impl Validate for ContainerImageBuilt {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("releaseId", &self.release_id)?;
        validate::identifier("buildId", &self.build_id)?;
        validate::identifier("moduleId", &self.module_id)?;
        validate::repository_name("repository", &self.repository)?;
        validate::git_sha("commitSha", &self.commit_sha)?;
        self.artifact().validate()?;
        validate::text("platform", &self.platform, MAX_PLATFORM_CHARS)?;
        validate::positive("sizeBytes", self.size_bytes)
    }
}

/// The container-build consumer's self-scheduled check of an image build
/// that runs elsewhere (an ACR Tasks run). It carries the whole build so
/// the consumer holds no lock and no state between polls; while the run
/// is still going it schedules poll `poll + 1` with backoff, and once it
/// succeeded it emits `ContainerImageBuilt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PollContainerBuild {
    /// The builder's id of the run (ACR Tasks' `runId`).
    #[schemars(transform = rule::identifier)]
    pub run_id: String,
    /// The build key: SHA-256 of the context digest, Dockerfile path,
    /// build arguments and platform (64 lowercase hex).
    #[schemars(transform = rule::sha256_hex)]
    pub build_key: String,
    /// The release the image belongs to.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The build the image is made from.
    #[schemars(transform = rule::identifier)]
    pub build_id: String,
    /// The module.
    #[schemars(transform = rule::identifier)]
    pub module_id: String,
    /// Source repository name (Git).
    #[schemars(transform = rule::repository_name)]
    pub repository: String,
    /// Source commit.
    #[schemars(transform = rule::git_sha)]
    pub commit_sha: String,
    /// Registry host, e.g. `contoso.azurecr.io`.
    #[schemars(transform = rule::registry_host)]
    pub registry: String,
    /// The module's image name (the registry holds it under the tenant's
    /// repository, `<tenant>/<image>`).
    #[schemars(transform = rule::oci_repository)]
    pub image: String,
    /// The tag being built, e.g. `1.4.0`.
    #[schemars(transform = rule::oci_tag)]
    pub tag: String,
    /// Platform being built, e.g. `linux/amd64`.
    #[schemars(transform = rule::text(MAX_PLATFORM_CHARS))]
    pub platform: String,
    /// Number of this poll, 1 for the first. Distinct from the envelope's
    /// `attempt`, which counts retries of one poll.
    #[schemars(transform = rule::positive)]
    pub poll: u32,
}

impl PollContainerBuild {
    /// The poll after this one.
    pub fn next(&self) -> Self {
        Self {
            poll: self.poll.saturating_add(1),
            ..self.clone()
        }
    }
}

impl Validate for PollContainerBuild {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("runId", &self.run_id)?;
        validate::sha256_hex("buildKey", &self.build_key)?;
        validate::identifier("releaseId", &self.release_id)?;
        validate::identifier("buildId", &self.build_id)?;
        validate::identifier("moduleId", &self.module_id)?;
        validate::repository_name("repository", &self.repository)?;
        validate::git_sha("commitSha", &self.commit_sha)?;
        validate::registry_host("registry", &self.registry)?;
        validate::oci_repository("image", &self.image)?;
        validate::oci_tag("tag", &self.tag)?;
        validate::text("platform", &self.platform, MAX_PLATFORM_CHARS)?;
        validate::positive("poll", u64::from(self.poll))
    }
}

/// A NuGet package version is on its feed. Idempotent on (packageId,
/// version): versions are immutable, so the same version with the same hash
/// is reported as published and a different hash is an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PackagePublished {
    /// The release the package belongs to.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The build the package came from.
    #[schemars(transform = rule::identifier)]
    pub build_id: String,
    /// The module.
    #[schemars(transform = rule::identifier)]
    pub module_id: String,
    /// NuGet package id.
    #[schemars(transform = rule::nuget_package_id)]
    pub package_id: String,
    /// Package version (semantic version).
    #[schemars(transform = rule::semantic_version)]
    pub version: String,
    /// Feed published to.
    #[schemars(transform = rule::identifier)]
    pub feed: String,
    /// SHA-512 of the `.nupkg`, 128 lowercase hex digits.
    #[schemars(transform = rule::sha512_hex)]
    pub sha512: String,
    /// Size of the `.nupkg` in bytes.
    #[schemars(transform = rule::positive)]
    pub size_bytes: u64,
    /// Address of the package on the feed, when the feed has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::url)]
    pub url: Option<String>,
    /// `true` when the feed already had this version with this hash and
    /// nothing was pushed.
    #[serde(default)]
    pub already_published: bool,
    /// When the push finished.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub published_at: OffsetDateTime,
}

impl PackagePublished {
    /// The package as a release artifact.
    pub fn artifact(&self) -> PackageArtifact {
        PackageArtifact {
            package_id: self.package_id.clone(),
            version: self.version.clone(),
            feed: self.feed.clone(),
        }
    }
}

impl Validate for PackagePublished {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("releaseId", &self.release_id)?;
        validate::identifier("buildId", &self.build_id)?;
        validate::identifier("moduleId", &self.module_id)?;
        self.artifact().validate()?;
        validate::sha512_hex("sha512", &self.sha512)?;
        validate::positive("sizeBytes", self.size_bytes)?;
        if let Some(url) = &self.url {
            validate::url("url", url)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samples;

    #[test]
    fn samples_are_valid() {
        assert_eq!(samples::container_image_built().validate(), Ok(()));
        assert_eq!(samples::package_published().validate(), Ok(()));
    }

    #[test]
    fn image_bad_fields_are_named() {
        let mut event = samples::container_image_built();
        event.digest = "sha256:1234".into();
        assert_eq!(event.validate().unwrap_err().field, "digest");

        let mut event = samples::container_image_built();
        event.tag = "-1.4.0".into();
        assert_eq!(event.validate().unwrap_err().field, "tag");

        let mut event = samples::container_image_built();
        event.size_bytes = 0;
        assert_eq!(event.validate().unwrap_err().field, "sizeBytes");
    }

    #[test]
    fn package_bad_fields_are_named() {
        let mut event = samples::package_published();
        event.version = "1.4".into();
        assert_eq!(event.validate().unwrap_err().field, "version");

        let mut event = samples::package_published();
        event.sha512 = "ab".repeat(32);
        assert_eq!(event.validate().unwrap_err().field, "sha512");
    }

    #[test]
    fn image_reference_pins_the_digest() {
        let image = samples::container_image_built().artifact();
        assert_eq!(
            image.reference(),
            format!("contoso.azurecr.io/contoso/payments-api@{}", image.digest)
        );
    }
}
