//! The port the container-build handler needs: something that builds the
//! image of a build context and puts it in a registry (the local OCI
//! layout, a registry buildah pushes to, or Azure Container Registry), at
//! once or in a run it is asked about again (ACR Tasks).

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

/// Where a build is: done, or running on a remote builder (ACR Tasks) that
/// is asked again later ([`ImageBuilder::poll`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildProgress {
    /// The image is in the registry.
    Built(BuiltImage),
    /// The build runs elsewhere and has not finished.
    Running(RunningBuild),
}

/// A build still running on a remote builder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningBuild {
    /// What runs it: `ACR Tasks`.
    pub builder: &'static str,
    /// The builder's id of the run (ACR Tasks' `runId`).
    pub run_id: String,
    /// The build key the run was started for (see
    /// [`super::buildah::build_key`]).
    pub build_key: String,
    /// The builder's word for where the run is (`Queued`, `Running` ...).
    pub status: String,
}

/// A run to ask about again: what a `PollContainerBuild` carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildRun {
    /// The tenant (from the envelope).
    pub tenant: String,
    /// The builder's id of the run.
    pub run_id: String,
    /// The build key the run was started for.
    pub build_key: String,
    /// Registry host the module names.
    pub registry: String,
    /// The module's image name.
    pub image: String,
    /// The tag being built.
    pub tag: String,
    /// The platform being built.
    pub platform: String,
}

/// Builds an image and stores it in a registry. Implementations must be
/// idempotent: when the tag already names the image they would build, they
/// write nothing and report `already_present: true`; a remote builder
/// never starts a second run for a build it already ran.
#[async_trait]
pub trait ImageBuilder: Send + Sync {
    /// Builds `spec`'s image and stores it under its tag; a remote builder
    /// may instead start a run and answer [`BuildProgress::Running`].
    async fn build(&self, spec: &ImageSpec) -> Result<BuildProgress, ContainerBuildError>;

    /// Where a run [`ImageBuilder::build`] started is now. Builders that
    /// finish before `build` returns have no runs: the default says so (a
    /// permanent error).
    async fn poll(&self, run: &BuildRun) -> Result<BuildProgress, ContainerBuildError> {
        Err(ContainerBuildError::Invalid(format!(
            "this container builder finishes its builds at once; it has no run `{}` to follow",
            run.run_id
        )))
    }
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
    /// Local storage failed: the OCI layout, a build's scratch folder, the
    /// blob store keeping run records and logs, a background task, or the
    /// builder process could not be started or waited for. Transient.
    #[error("image storage failed: {context}: {source}")]
    Storage {
        /// What was being done (`writing <path>`, `storing the build log
        /// <blob>`).
        context: String,
        /// What failed underneath.
        #[source]
        source: BoxError,
    },
    /// The builder process ran past its time limit and was stopped.
    /// Transient: the build is retried.
    #[error("{builder} did not finish within {} s ({setting}) and was stopped; the build is retried", limit.as_secs())]
    TimedOut {
        /// What ran: `buildah build`, `buildah push`.
        builder: String,
        /// The limit.
        limit: Duration,
        /// The setting that sets it.
        setting: &'static str,
    },
    /// The local OCI layout holds something this builder cannot read.
    /// Permanent until an operator looks at it.
    #[error("image layout is corrupt: {} {problem}{}", path.display(), cause_text(.source.as_ref()))]
    CorruptLayout {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        problem: &'static str,
        /// The parser's error, when it is one.
        #[source]
        source: Option<serde_json::Error>,
    },
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
    /// A remote build did not finish within the consumer's polls.
    /// Permanent: an operator looks at the run and replays the last poll.
    #[error("{builder} run `{run_id}` still not finished after {polls} polls; giving up")]
    GaveUp {
        /// What runs the build: `ACR Tasks`.
        builder: &'static str,
        /// The run id.
        run_id: String,
        /// Polls made.
        polls: u32,
    },
}

impl ContainerBuildError {
    /// Whether retrying may help.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Context(err) => err.is_transient(),
            Self::BuilderFailed { transient, .. } => *transient,
            Self::Storage { .. } | Self::TimedOut { .. } | Self::Unavailable(_) | Self::Throttled { .. } => true,
            Self::Invalid(_)
            | Self::Build(_)
            | Self::CorruptLayout { .. }
            | Self::Rejected(_)
            | Self::ForeignTenant(_)
            | Self::GaveUp { .. } => false,
        }
    }
}

impl ContainerBuildError {
    /// A transient storage failure: what was being done, and the cause.
    pub fn storage(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Storage {
            context: context.into(),
            source: source.into(),
        }
    }
}

/// `: <cause>` when there is one, for a message that names its cause.
fn cause_text(source: Option<&serde_json::Error>) -> String {
    source.map(|err| format!(": {err}")).unwrap_or_default()
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
