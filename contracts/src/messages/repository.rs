//! Repository provisioning: `ProvisionRepository` and `RepositoryProvisioned`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema_rules as rule;
use crate::validate::{self, FieldError, Validate};

fn default_branch() -> String {
    "main".to_owned()
}

/// Create and configure a Git repository. Idempotent on tenant + name: an
/// existing repository is reported as provisioned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionRepository {
    /// Repository name (Azure DevOps naming rules).
    #[schemars(transform = rule::repository_name)]
    pub name: String,
    /// Azure DevOps project (or local grouping folder); defaults to the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::identifier)]
    pub project: Option<String>,
    /// Branch created with the first commit; `main` when absent.
    #[serde(default = "default_branch")]
    #[schemars(transform = rule::branch_name)]
    pub default_branch: String,
    /// Human description of the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Minimum number of reviewers required by the branch policy (0 = none).
    #[serde(default)]
    pub minimum_reviewers: u32,
}

impl Validate for ProvisionRepository {
    fn validate(&self) -> Result<(), FieldError> {
        validate::repository_name("name", &self.name)?;
        if let Some(project) = &self.project {
            validate::identifier("project", project)?;
        }
        validate::branch_name("defaultBranch", &self.default_branch)?;
        Ok(())
    }
}

/// A reference to a provisioned repository, carried by later messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryRef {
    /// Id given by the Git host (a GUID on Azure DevOps, a stable id locally).
    #[schemars(transform = rule::non_empty)]
    pub id: String,
    /// Repository name.
    #[schemars(transform = rule::repository_name)]
    pub name: String,
    /// Project the repository lives in.
    pub project: String,
    /// Clone URL (a `file://` URL for the local Git host).
    #[schemars(transform = rule::non_empty)]
    pub url: String,
    /// The default branch.
    #[schemars(transform = rule::branch_name)]
    pub default_branch: String,
}

impl Validate for RepositoryRef {
    fn validate(&self) -> Result<(), FieldError> {
        validate::non_empty("id", &self.id)?;
        validate::repository_name("name", &self.name)?;
        validate::non_empty("url", &self.url)?;
        validate::branch_name("defaultBranch", &self.default_branch)?;
        Ok(())
    }
}

/// The repository exists and is configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryProvisioned {
    /// The repository.
    pub repository: RepositoryRef,
    /// `true` when this command created it, `false` when it already existed.
    pub created: bool,
}

impl Validate for RepositoryProvisioned {
    fn validate(&self) -> Result<(), FieldError> {
        self.repository
            .validate()
            .map_err(|err| validate::nested("repository", err))
    }
}
