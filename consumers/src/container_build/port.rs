//! The port the container-build handler needs: something that builds the
//! image of a build context and puts it in a registry (the local OCI
//! layout, or Azure Container Registry).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::BlobRef;
use time::OffsetDateTime;

use crate::delivery::blob::BlobError;
use crate::delivery::oci::BuildError;
use crate::delivery::tenant::ForeignTenant;
use crate::{BoxError, HandlerError};

/// What to build and where to put it: the module's container settings and
/// version, decoded and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSpec {
    /// The tenant (from the envelope).
    pub tenant: String,
    /// Registry host, e.g. `contoso.azurecr.io` or `localhost`.
    pub registry: String,
    /// Image repository, e.g. `contoso/payments-api`.
    pub image: String,
    /// The tag: the module version (a `+` of build metadata becomes `_`,
    /// as tags do not allow `+`).
    pub tag: String,
    /// Target platform, e.g. `linux/amd64`.
    pub platform: String,
    /// Path of the Dockerfile inside the context tar.
    pub dockerfile: String,
    /// `--build-arg` values.
    pub build_args: BTreeMap<String, String>,
    /// The context tar (the `container-context.tar` artifact).
    pub context: BlobRef,
}

/// The image as the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltImage {
    /// The repository the registry holds it under, the one to pull:
    /// scoped to the tenant where the registry is shared (on ACR
    /// `<tenant>/<image>`); the module's image name where the registry
    /// itself is the tenant's (the local layouts, `<root>/<tenant>/...`).
    pub repository: String,
    /// Manifest digest, `sha256:<hex>`.
    pub digest: String,
    /// Manifest, config and layers together, in bytes.
    pub size_bytes: u64,
    /// `true` when the tag already named this digest and nothing was
    /// written or pushed.
    pub already_present: bool,
    /// When the image was stored (for an image already present, when it was
    /// first stored, where the registry can tell).
    pub pushed_at: OffsetDateTime,
}

/// Builds an image and stores it in a registry. Implementations must be
/// idempotent on the digest: when the tag already names the digest they
/// build, they write nothing and report `already_present: true`.
#[async_trait]
pub trait ImageBuilder: Send + Sync {
    /// Builds `spec`'s image and stores it under its tag.
    async fn build(&self, spec: &ImageSpec) -> Result<BuiltImage, ContainerBuildError>;
}

/// Why an image was not built or stored; each variant says whether a retry
/// can help.
#[derive(Debug, thiserror::Error)]
pub enum ContainerBuildError {
    /// The request cannot be carried out (bad tag, platform, registry not
    /// configured). Permanent.
    #[error("invalid container build request: {0}")]
    Invalid(String),
    /// The Dockerfile or the context cannot be built (unsupported base
    /// image or instruction, missing file). Permanent.
    #[error("image build failed: {0}")]
    Build(#[from] BuildError),
    /// The context could not be read from the blob store; transient when
    /// the store is unavailable, permanent when the blob is missing or
    /// corrupt.
    #[error("build context unavailable: {0}")]
    Context(#[source] BlobError),
    /// Local storage (the OCI layout) failed. Transient.
    #[error("image storage failed: {0}")]
    Storage(String),
    /// The local OCI layout holds something this builder cannot read.
    /// Permanent until an operator looks at it.
    #[error("image layout is corrupt: {0}")]
    CorruptLayout(String),
    /// The registry could not be reached or failed. Transient.
    #[error("registry unavailable: {0}")]
    Unavailable(#[source] BoxError),
    /// The registry is throttling; retry after the delay.
    #[error("registry asks to retry after {after:?}: {source}")]
    Throttled {
        /// Earliest retry.
        after: Duration,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The registry refused the request (authentication, permissions, a
    /// manifest it does not accept). Permanent.
    #[error("registry refused the request: {0}")]
    Rejected(#[source] BoxError),
    /// The real builder (buildah, ACR Tasks) ran and failed: the
    /// Dockerfile does not build (a `RUN` failed, a base image is missing),
    /// permanent; or a registry could not be reached, transient. The
    /// build's log is in the blob store.
    #[error("{builder} failed{}; last lines of its log:\n{tail}", log_hint(.log.as_deref()))]
    BuilderFailed {
        /// What ran: `buildah`, `buildah push`, `ACR Tasks`.
        builder: &'static str,
        /// The whole log, when it could be stored (boxed: errors stay small).
        log: Option<Box<BlobRef>>,
        /// The log's last lines.
        tail: String,
        /// Whether a retry can help (the log says a registry could not be
        /// reached).
        transient: bool,
    },
    /// The request names a context or a tag of another tenant. Permanent.
    #[error(transparent)]
    ForeignTenant(#[from] ForeignTenant),
}

impl ContainerBuildError {
    /// Whether retrying may help.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Context(err) => err.is_transient(),
            Self::BuilderFailed { transient, .. } => *transient,
            Self::Storage(_) | Self::Unavailable(_) | Self::Throttled { .. } => true,
            Self::Invalid(_) | Self::Build(_) | Self::CorruptLayout(_) | Self::Rejected(_) | Self::ForeignTenant(_) => {
                false
            }
        }
    }
}

/// Where a failed build's log is, for its error message.
fn log_hint(log: Option<&BlobRef>) -> String {
    match log {
        Some(log) => format!(" (log: blob {}/{})", log.container, log.key),
        None => " (its log could not be stored)".to_owned(),
    }
}

impl From<BlobError> for ContainerBuildError {
    fn from(err: BlobError) -> Self {
        Self::Context(err)
    }
}

impl From<ContainerBuildError> for HandlerError {
    fn from(err: ContainerBuildError) -> Self {
        match err {
            ContainerBuildError::Throttled { after, .. } => HandlerError::RetryAfter {
                after,
                source: Box::new(err),
            },
            err if err.is_retryable() => HandlerError::Transient(Box::new(err)),
            err => HandlerError::Permanent(Box::new(err)),
        }
    }
}
