//! The port the iac-provisioning handler needs: an infrastructure engine
//! that previews a stack's changes and applies them, guarded.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{DriftedResource, ResourceChanges, ResourceSpec};
use bosun_contracts::validate::FieldError;
use serde_json::Value;
use time::OffsetDateTime;

use crate::delivery::tenant::ForeignTenant;
use crate::{BoxError, HandlerError};

/// What to provision: the command's fields (or the default stack of a
/// release approval), with the envelope's tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisionRequest {
    /// The tenant owning the stack (from the envelope). Stacks, their
    /// state and their plans are the tenant's: two tenants provisioning
    /// the same stack name never share one.
    pub tenant: String,
    /// Id of the change: the idempotency key.
    pub plan_id: String,
    /// The stack, `[organization/][project/]stack`.
    pub stack: String,
    /// The environment the stack belongs to.
    pub environment: String,
    /// The release the change serves, if any.
    pub release_id: Option<String>,
    /// Stack configuration (no secrets).
    pub config: BTreeMap<String, Value>,
    /// Desired resources, for declarative engines (the local engine).
    pub resources: Vec<ResourceSpec>,
    /// Only preview: report the changes without applying them.
    pub preview_only: bool,
    /// Where the module's Pulumi program is (the release's repository and
    /// commit), for engines that fetch it ([`super::program`]); `None`
    /// when the message did not say.
    pub program: Option<ProgramCommit>,
}

/// A repository at a commit: where a module's Pulumi program is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramCommit {
    /// The repository's name (in the tenant's Azure DevOps project).
    pub repository: String,
    /// The commit.
    pub commit_sha: String,
}

/// What a provisioning did (or, for a preview, would do).
#[derive(Debug, Clone, PartialEq)]
pub struct ProvisionReport {
    /// Resource changes made by the plan (planned, for a preview). When an
    /// earlier attempt of the same plan was interrupted, its changes are
    /// counted too.
    pub changes: ResourceChanges,
    /// Stack outputs; secret outputs are `"[secret]"`.
    pub outputs: BTreeMap<String, Value>,
    /// When the apply (or preview) finished; for a replayed plan, when it
    /// first finished.
    pub provisioned_at: OffsetDateTime,
    /// Hash of the preview the apply executed.
    pub preview_hash: String,
    /// Resources found differing from the recorded state before the plan
    /// ran (they were refreshed and put back by the apply).
    pub drift: Vec<DriftedResource>,
    /// The plan last applied to the stack when the drift was found.
    pub drift_plan_id: Option<String>,
    /// `true` when an earlier apply was interrupted and this one ran a
    /// fresh preview against the actual resources before applying.
    pub previewed_after_interruption: bool,
    /// `true` when the plan had already been applied and its recorded
    /// result is returned without doing anything.
    pub replayed: bool,
}

/// An infrastructure engine with guarded apply. Implementations must:
///
/// - be idempotent on `plan_id`: a plan already applied returns its
///   recorded report (`replayed: true`) and changes nothing;
/// - always preview before applying, and never re-run an apply that was
///   interrupted or failed midway without a fresh preview against the
///   actual resources (reporting `previewed_after_interruption`);
/// - report drift (actual resources differing from the recorded state).
#[async_trait]
pub trait InfrastructureEngine: Send + Sync {
    /// Previews the request's changes and, unless `preview_only`, applies
    /// them.
    async fn provision(&self, request: &ProvisionRequest) -> Result<ProvisionReport, IacError>;
}

/// Why provisioning failed; each variant says whether a retry can help.
#[derive(Debug, thiserror::Error)]
pub enum IacError {
    /// The request cannot be carried out as given. Permanent.
    #[error("invalid provisioning request: {0}")]
    Invalid(String),
    /// A desired resource already exists and belongs to another stack.
    /// Permanent until an operator resolves it.
    #[error("resource `{urn}` belongs to stack `{owner}`")]
    ResourceConflict {
        /// The resource.
        urn: String,
        /// The stack owning it.
        owner: String,
    },
    /// The apply stopped midway; some changes were made. Transient: the
    /// retry previews again against the actual resources before applying.
    #[error("apply of plan `{plan_id}` interrupted after {done} of {total} changes: {source}")]
    ApplyInterrupted {
        /// The plan.
        plan_id: String,
        /// Changes made before it stopped.
        done: usize,
        /// Changes planned.
        total: usize,
        /// Why it stopped.
        #[source]
        source: BoxError,
    },
    /// The engine failed (a CLI exited with an error, the state could not
    /// be read or written). Transient.
    #[error("infrastructure engine unavailable: {0}")]
    Unavailable(#[source] BoxError),
    /// A local file or process failed: the local engine's state, the
    /// plan folder, starting `pulumi`. Transient.
    #[error("infrastructure engine unavailable: {context}: {source}")]
    Io {
        /// What was being done (`reading <path>`, `could not run pulumi`).
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A state file or a CLI's output is not the JSON bosun reads or
    /// writes. Transient, as the engine's other failures.
    #[error("infrastructure engine unavailable: {context}: {source}")]
    Json {
        /// What was read or written (`<path> is not valid`, `` `pulumi
        /// preview` printed unexpected JSON``).
        context: String,
        /// What the JSON parser or writer found.
        #[source]
        source: serde_json::Error,
    },
    /// The engine asks to retry after a delay (e.g. a locked stack).
    #[error("infrastructure engine asks to retry after {after:?}: {source}")]
    Throttled {
        /// Earliest retry.
        after: Duration,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The engine refused the request (bad program or configuration,
    /// credentials). Permanent.
    #[error("infrastructure engine refused the request: {0}")]
    Rejected(#[source] BoxError),
    /// The stack exists only under the bare name it had before stacks
    /// were scoped by tenant, so whose it is cannot be known. Permanent:
    /// an operator renames it to its owner's stack, then replays.
    #[error(
        "stack `{stack}` was created before stacks were scoped by tenant and records no owner; \
         if it is this tenant's, rename it (`pulumi stack rename --stack {stack} {tenant_stack}`) and replay"
    )]
    UnscopedStack {
        /// The stack as the request names it.
        stack: String,
        /// The tenant's stack it would be.
        tenant_stack: String,
    },
    /// The Pulumi program's folder is not in the repository at that
    /// commit. Permanent: the program is added there, or the configured
    /// path corrected, and the message replayed.
    #[error(
        "no Pulumi program at `{path}` in repository `{repository}` at commit `{commit}`: add the program \
         (its Pulumi.yaml) there, or set BOSUN_PULUMI_PROGRAM_PATH to the folder that holds it"
    )]
    ProgramNotFound {
        /// The repository (as configured or named by the request).
        repository: String,
        /// The commit fetched.
        commit: String,
        /// The folder looked for.
        path: String,
    },
    /// The request names no repository and no program is configured.
    /// Permanent.
    #[error(
        "no Pulumi program: the request names no repository and commit (a release approval written before \
         they were carried, or a ProvisionInfrastructure without them); set BOSUN_PULUMI_PROGRAM_REPOSITORY \
         (with BOSUN_PULUMI_PROGRAM_REF and BOSUN_PULUMI_PROGRAM_PATH) or BOSUN_PULUMI_PROGRAM_DIR, or send \
         repository and commitSha"
    )]
    ProgramNotConfigured,
    /// The stack is another tenant's. Permanent.
    #[error(transparent)]
    ForeignTenant(#[from] ForeignTenant),
}

impl IacError {
    /// Whether retrying may help.
    pub fn is_retryable(&self) -> bool {
        !matches!(
            self,
            Self::Invalid(_)
                | Self::ResourceConflict { .. }
                | Self::Rejected(_)
                | Self::UnscopedStack { .. }
                | Self::ProgramNotFound { .. }
                | Self::ProgramNotConfigured
                | Self::ForeignTenant(_)
        )
    }
}

impl From<IacError> for HandlerError {
    fn from(err: IacError) -> Self {
        match err {
            IacError::Throttled { after, .. } => HandlerError::RetryAfter {
                after,
                source: Box::new(err),
            },
            err if err.is_retryable() => HandlerError::Transient(Box::new(err)),
            err => HandlerError::Permanent(Box::new(err)),
        }
    }
}

impl From<FieldError> for IacError {
    fn from(err: FieldError) -> Self {
        Self::Invalid(format!("{}: {}", err.field, err.reason))
    }
}
