//! The port the repository-provisioning handler needs: a Git host that finds
//! or creates a tenant's repository by name.

use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::RepositoryRef;

use crate::BoxError;

/// What to provision: the command's fields with the envelope's tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepositorySpec {
    /// The tenant owning the repository (from the envelope).
    pub tenant: String,
    /// Repository name; with the tenant, the natural key.
    pub name: String,
    /// The project asked for; `None` lets the adapter choose (the tenant
    /// locally, the tenant's project on Azure DevOps).
    pub project: Option<String>,
    /// The default branch, without `refs/heads/`.
    pub default_branch: String,
    /// Human description.
    pub description: Option<String>,
    /// Minimum reviewers the default branch's policy requires (0 = none).
    pub minimum_reviewers: u32,
}

/// The repository, and whether this call created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisionedRepository {
    /// The repository as later messages refer to it.
    pub repository: RepositoryRef,
    /// `true` when this call created it, `false` when it already existed.
    pub created: bool,
}

/// A Git host that can provision repositories. Implementations must be
/// idempotent on tenant + name: an existing repository is returned with
/// `created: false`, and concurrent calls for one name create one repository.
#[async_trait]
pub trait RepositoryHost: Send + Sync {
    /// Finds the tenant's repository of this name, or creates it.
    async fn provision(&self, spec: &RepositorySpec) -> Result<ProvisionedRepository, ProvisionError>;
}

/// Why provisioning failed; each variant says whether a retry can help.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// The request cannot be carried out as given (bad name, bad tenant id).
    /// Permanent.
    #[error("invalid repository request: {0}")]
    Invalid(String),
    /// The project does not exist on the Git host. Permanent: an operator
    /// creates it, then replays.
    #[error("project `{project}` does not exist")]
    ProjectNotFound {
        /// The project.
        project: String,
    },
    /// The tenant already has a repository of this name in another project.
    /// Permanent: names are unique per tenant.
    #[error("repository `{name}` already exists in project `{existing_project}`, not in `{requested_project}`")]
    NameTaken {
        /// Repository name.
        name: String,
        /// Where it lives.
        existing_project: String,
        /// Where the command asked for it.
        requested_project: String,
    },
    /// The command names a project that is not the tenant's (each tenant
    /// has its own project, and may not create repositories in another's).
    /// Permanent.
    #[error(
        "tenant `{tenant}` may not provision repositories in project `{requested_project}`: \
         its project is `{tenant_project}`"
    )]
    ForeignProject {
        /// The command's tenant.
        tenant: String,
        /// The project the command names.
        requested_project: String,
        /// The tenant's project.
        tenant_project: String,
    },
    /// The Git host could not be reached or failed. Transient.
    #[error("Git host unavailable: {0}")]
    Unavailable(#[source] BoxError),
    /// The Git host is throttling; retry after the delay.
    #[error("Git host asks to retry after {after:?}: {source}")]
    Throttled {
        /// Earliest retry.
        after: Duration,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The Git host refused the request (authentication, permissions,
    /// validation). Permanent.
    #[error("Git host refused the request: {0}")]
    Rejected(#[source] BoxError),
}

impl ProvisionError {
    /// Whether retrying may help.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Throttled { .. })
    }
}

port_error_conversions!(ProvisionError);
