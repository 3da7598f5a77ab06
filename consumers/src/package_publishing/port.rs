//! The port the package-publishing handler needs: a NuGet feed that takes
//! a package version once and never changes it.

use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::BlobRef;
use time::OffsetDateTime;

use crate::delivery::archive::tar::TarError;
use crate::delivery::archive::zip::ZipError;
use crate::delivery::blob::BlobError;
use crate::delivery::tenant::ForeignTenant;
use crate::{BoxError, HandlerError};

/// Where the package's content comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackageSource {
    /// A tar of the files to pack (the `package-content.tar` artifact);
    /// bosun packs the `.nupkg`.
    Content(BlobRef),
    /// A ready `.nupkg` the build produced (an artifact of kind `Package`);
    /// its `.nuspec` must name the same id and version.
    Nupkg(BlobRef),
}

/// What to publish: the module's package settings and metadata, checked.
/// The tenant scopes the version: two tenants publishing the same id and
/// version each get their own (locally, `<tenant>/<feed>/...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageSpec {
    /// The tenant (from the envelope).
    pub tenant: String,
    /// The feed's name (`package.feed`).
    pub feed: String,
    /// NuGet package id (`package.packageId`).
    pub package_id: String,
    /// The version (the module's semantic version).
    pub version: String,
    /// `<authors>` of a packed `.nuspec`.
    pub authors: String,
    /// `<description>` of a packed `.nuspec`.
    pub description: String,
    /// The content.
    pub source: PackageSource,
}

/// The version as the feed holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedPackage {
    /// SHA-512 of the `.nupkg` on the feed, 128 lowercase hex digits.
    pub sha512: String,
    /// Size of the `.nupkg` in bytes.
    pub size_bytes: u64,
    /// Address of the package (a `file://` URL for the folder feed, the
    /// feed's service index for Azure Artifacts).
    pub url: Option<String>,
    /// `true` when the feed already had this version with this content and
    /// nothing was pushed.
    pub already_published: bool,
    /// When the version was published (for one already there, when it was
    /// first published, where the feed can tell).
    pub published_at: OffsetDateTime,
}

/// A NuGet feed. Versions are immutable: implementations must report a
/// version already there with the same SHA-512 as published
/// (`already_published: true`, nothing written) and refuse different
/// content for an existing version with [`PublishError::VersionConflict`].
#[async_trait]
pub trait PackageFeed: Send + Sync {
    /// Packs (or reads) the package and publishes it.
    async fn publish(&self, spec: &PackageSpec) -> Result<PublishedPackage, PublishError>;
}

/// Why a package was not published; each variant says whether a retry can
/// help.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The request cannot be carried out (bad id, version or feed name).
    /// Permanent.
    #[error("invalid package request: {0}")]
    Invalid(String),
    /// The content cannot be packed, or the ready package is not a usable
    /// `.nupkg` for this id and version. Permanent.
    #[error("package content: {0}")]
    Content(String),
    /// The content archive (a tar) cannot be read. Permanent: the same
    /// bytes fail the same way again.
    #[error("package content: {0}")]
    ContentArchive(#[source] TarError),
    /// The `.nupkg` cannot be written, or a ready one cannot be read as a
    /// ZIP. Permanent: the same bytes fail the same way again.
    #[error("package content: {context}: {source}")]
    Nupkg {
        /// What was being done (`packing the .nupkg`, `reading the
        /// .nupkg`).
        context: &'static str,
        /// What the ZIP reader or writer found.
        #[source]
        source: ZipError,
    },
    /// The feed has this version with different content: versions are
    /// immutable. Permanent (publish a new version).
    #[error(
        "{package_id} {version} is already on the feed with different content \
         (sha512 {existing_sha512}, this build {new_sha512}); versions are immutable: bump the version"
    )]
    VersionConflict {
        /// Package id.
        package_id: String,
        /// Version.
        version: String,
        /// SHA-512 (hex) of the package on the feed; `unknown` when the
        /// feed would not say.
        existing_sha512: String,
        /// SHA-512 (hex) of this build's package.
        new_sha512: String,
    },
    /// The content could not be read from the blob store; transient when
    /// the store is unavailable, permanent when the blob is missing or
    /// corrupt.
    #[error("package content unavailable: {0}")]
    ContentUnavailable(#[source] BlobError),
    /// Local storage failed: the folder feed's files, or a background task
    /// packing or storing the package. Transient.
    #[error("feed storage failed: {context}: {source}")]
    Storage {
        /// What was being done (`reading <path>`, `running the packing
        /// task`).
        context: String,
        /// What failed underneath.
        #[source]
        source: BoxError,
    },
    /// The feed could not be reached or failed. Transient.
    #[error("feed unavailable: {0}")]
    Unavailable(#[source] BoxError),
    /// The feed is throttling; retry after the delay.
    #[error("feed asks to retry after {after:?}: {source}")]
    Throttled {
        /// Earliest retry.
        after: Duration,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The feed refused the request (authentication, permissions, an
    /// invalid package). Permanent.
    #[error("feed refused the request: {0}")]
    Rejected(#[source] BoxError),
    /// The request names content or a version of another tenant.
    /// Permanent.
    #[error(transparent)]
    ForeignTenant(#[from] ForeignTenant),
}

impl PublishError {
    /// Whether retrying may help.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::ContentUnavailable(err) => err.is_transient(),
            Self::Storage { .. } | Self::Unavailable(_) | Self::Throttled { .. } => true,
            Self::Invalid(_)
            | Self::Content(_)
            | Self::ContentArchive(_)
            | Self::Nupkg { .. }
            | Self::VersionConflict { .. }
            | Self::Rejected(_)
            | Self::ForeignTenant(_) => false,
        }
    }
}

impl PublishError {
    /// A transient storage failure: what was being done, and the cause.
    pub fn storage(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Storage {
            context: context.into(),
            source: source.into(),
        }
    }
}

impl From<BlobError> for PublishError {
    fn from(err: BlobError) -> Self {
        Self::ContentUnavailable(err)
    }
}

impl From<PublishError> for HandlerError {
    fn from(err: PublishError) -> Self {
        match err {
            PublishError::Throttled { after, .. } => HandlerError::RetryAfter {
                after,
                source: Box::new(err),
            },
            err if err.is_retryable() => HandlerError::Transient(Box::new(err)),
            err => HandlerError::Permanent(Box::new(err)),
        }
    }
}
