//! The Azure DevOps adapter: repositories are Azure Repos Git repositories,
//! through REST API 7.1.
//!
//! 1. `GET {org}/{project}/_apis/git/repositories/{name}` — an existing
//!    repository is returned with `created: false`;
//! 2. otherwise `GET {org}/_apis/projects/{project}` for the project id, and
//!    `POST {org}/{project}/_apis/git/repositories` with
//!    `{"name", "project": {"id"}}`; a 409 (created concurrently) reads the
//!    repository again;
//! 3. with `minimumReviewers > 0`, a blocking "Minimum number of reviewers"
//!    branch policy on the default branch, created unless one exists
//!    (`GET .../_apis/git/policy/configurations`, then
//!    `POST .../_apis/policy/configurations`).
//!
//! The project is the tenant's ([`AzureDevOpsClient::project_for`]). When
//! the setting has `{tenant}`, each tenant has its own project, and a
//! command naming another project than the tenant's is refused
//! ([`ProvisionError::ForeignProject`], permanent). Without it, the project
//! is the command's, else the configured one that every tenant maps to, so
//! a repository name is unique per project, not per tenant (see the
//! tenants section of [`crate::delivery::azure::devops`]). Azure DevOps has no repository
//! description, so `description` is not sent. The repository's default
//! branch is set by its first push; until then the requested one is
//! reported.

use async_trait::async_trait;
use bosun_contracts::messages::RepositoryRef;
use serde::Deserialize;
use serde_json::json;

use super::port::{ProvisionError, ProvisionedRepository, RepositoryHost, RepositorySpec};
use crate::delivery::azure::devops::{AzureDevOpsClient, AzureDevOpsConfig, AzureDevOpsError};
use crate::delivery::git::short_branch;

/// Type id of Azure DevOps' "Minimum number of reviewers" branch policy.
pub const MINIMUM_REVIEWERS_POLICY_TYPE: &str = "fa6ba5fd-ee4a-4c6f-9f9e-5ee3e79ff4c3";

/// Provisions Azure Repos Git repositories.
#[derive(Debug, Clone)]
pub struct AzureRepositoryHost {
    client: AzureDevOpsClient,
}

impl AzureRepositoryHost {
    /// An adapter for the configured organization and project setting.
    pub fn new(config: &AzureDevOpsConfig) -> Result<Self, AzureDevOpsError> {
        Ok(Self::from_client(AzureDevOpsClient::new(config)?))
    }

    /// An adapter sharing an existing client.
    pub fn from_client(client: AzureDevOpsClient) -> Self {
        Self { client }
    }

    async fn find(&self, project: &str, name: &str) -> Result<Option<GitRepository>, AzureDevOpsError> {
        let url = self.client.url(&[project, "_apis", "git", "repositories", name], &[]);
        self.client.get_json_opt(url).await
    }

    async fn create(&self, project: &str, name: &str) -> Result<Option<GitRepository>, ProvisionError> {
        let url = self.client.url(&["_apis", "projects", project], &[]);
        let Some(team_project) = self.client.get_json_opt::<TeamProject>(url).await? else {
            return Err(ProvisionError::ProjectNotFound {
                project: project.to_owned(),
            });
        };
        let url = self.client.url(&[project, "_apis", "git", "repositories"], &[]);
        let body = json!({ "name": name, "project": { "id": team_project.id } });
        match self.client.post_json::<_, GitRepository>(url, &body).await {
            Ok(repository) => Ok(Some(repository)),
            // Created by someone else between our GET and POST.
            Err(err) if err.status() == Some(409) => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    async fn ensure_minimum_reviewers(
        &self,
        project: &str,
        repository_id: &str,
        branch: &str,
        reviewers: u32,
    ) -> Result<(), AzureDevOpsError> {
        let ref_name = format!("refs/heads/{branch}");
        let url = self.client.url(
            &[project, "_apis", "git", "policy", "configurations"],
            &[
                ("repositoryId", repository_id),
                ("refName", &ref_name),
                ("policyType", MINIMUM_REVIEWERS_POLICY_TYPE),
            ],
        );
        let existing: PolicyConfigurations = self.client.get_json(url).await?;
        if !existing.value.is_empty() {
            return Ok(());
        }
        let url = self.client.url(&[project, "_apis", "policy", "configurations"], &[]);
        let body = json!({
            "isEnabled": true,
            "isBlocking": true,
            "type": { "id": MINIMUM_REVIEWERS_POLICY_TYPE },
            "settings": {
                "minimumApproverCount": reviewers,
                "creatorVoteCounts": false,
                "allowDownvotes": false,
                "resetOnSourcePush": true,
                "scope": [{ "repositoryId": repository_id, "refName": ref_name, "matchKind": "exact" }]
            }
        });
        let _created: serde_json::Value = self.client.post_json(url, &body).await?;
        tracing::info!(repository_id, reviewers, "minimum reviewers policy created");
        Ok(())
    }
}

#[async_trait]
impl RepositoryHost for AzureRepositoryHost {
    async fn provision(&self, spec: &RepositorySpec) -> Result<ProvisionedRepository, ProvisionError> {
        let tenant_project = self.client.project_for(&spec.tenant);
        let project = match spec.project.as_deref() {
            None => tenant_project.as_ref(),
            // One project per tenant: the tenant's own, under any spelling
            // (Azure DevOps project names ignore case).
            Some(requested) if self.client.project_per_tenant() => {
                if !requested.eq_ignore_ascii_case(&tenant_project) {
                    return Err(ProvisionError::ForeignProject {
                        tenant: spec.tenant.clone(),
                        requested_project: requested.to_owned(),
                        tenant_project: tenant_project.into_owned(),
                    });
                }
                requested
            }
            Some(requested) => requested,
        };
        let (repository, created) = match self.find(project, &spec.name).await? {
            Some(existing) => (existing, false),
            None => match self.create(project, &spec.name).await? {
                Some(created) => (created, true),
                None => match self.find(project, &spec.name).await? {
                    Some(existing) => (existing, false),
                    None => {
                        return Err(ProvisionError::Unavailable(
                            format!("repository `{}` reported as existing but not found", spec.name).into(),
                        ));
                    }
                },
            },
        };
        let default_branch = repository
            .default_branch
            .as_deref()
            .map(short_branch)
            .unwrap_or(&spec.default_branch)
            .to_owned();
        if spec.minimum_reviewers > 0 {
            self.ensure_minimum_reviewers(project, &repository.id, &default_branch, spec.minimum_reviewers)
                .await?;
        }
        let url = repository
            .remote_url
            .or(repository.web_url)
            .or(repository.url)
            .unwrap_or_default();
        Ok(ProvisionedRepository {
            repository: RepositoryRef {
                id: repository.id,
                name: repository.name,
                project: repository.project.name,
                url,
                default_branch,
            },
            created,
        })
    }
}

/// `GitRepository`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GitRepository {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) project: TeamProjectReference,
    #[serde(default)]
    pub(crate) default_branch: Option<String>,
    #[serde(default)]
    pub(crate) remote_url: Option<String>,
    #[serde(default)]
    pub(crate) web_url: Option<String>,
    #[serde(default)]
    pub(crate) url: Option<String>,
}

/// `TeamProjectReference`, the fields bosun reads.
#[derive(Debug, Deserialize)]
pub(crate) struct TeamProjectReference {
    pub(crate) name: String,
}

/// `TeamProject`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct TeamProject {
    id: String,
}

/// A list of policy configurations.
#[derive(Debug, Deserialize)]
struct PolicyConfigurations {
    #[serde(default)]
    value: Vec<serde_json::Value>,
}
