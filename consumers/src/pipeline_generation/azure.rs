//! The Azure DevOps adapter: the pipeline file is pushed to Azure Repos and
//! run by Azure Pipelines, through REST API 7.1.
//!
//! - reading `bosun.module.json`: `GET {org}/{project}/_apis/git/repositories/{repo}/items`
//!   with `versionDescriptor.versionType=branch` and `$format=octetStream`
//!   (404 — no repository, branch or file — is `None`);
//! - committing: the delivery layer's Azure Repos commit writer
//!   ([`AzureCommitWriter`]): unchanged content is a no-op, a moved branch
//!   is retried;
//! - the definition: `GET .../_apis/build/definitions?name={moduleId}`, the
//!   one in the tenant's folder `\bosun\<tenant>` (definition names are
//!   unique per folder, so two tenants' modules of one id have a definition
//!   each); when missing, a definition of that name in `\bosun` (made
//!   before tenant folders) is reused if it runs the same repository
//!   (`GET .../_apis/build/definitions/{id}`), else Pipelines - Create
//!   (`POST .../_apis/pipelines`) makes one in the tenant's folder with a
//!   `yaml` configuration pointing at the file in the repository. The
//!   pipeline monitor refuses runs of another tenant's folder;
//! - the run: `GET .../_apis/build/builds?definitions={id}&branchName=refs/heads/{branch}`
//!   finds a run of the same commit (`sourceVersion`) queued before, so a
//!   redelivered message does not start a second run; otherwise Pipelines -
//!   Runs - Run Pipeline (`POST .../_apis/pipelines/{id}/runs`) with
//!   `resources.repositories.self` = the branch and the commit.
//!
//! `{project}` is the tenant's project
//! ([`AzureDevOpsClient::project_for`]): one project per tenant when the
//! setting has `{tenant}`, else the one configured project that every
//! tenant maps to (see the tenants section of [`crate::delivery::azure::devops`]).

use async_trait::async_trait;
use bosun_contracts::messages::GitIdentity;
use serde::Deserialize;
use serde_json::json;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::port::{CommittedPipeline, DefinitionSpec, PipelineError, PipelineFile, PipelineHost, QueuedRun, RunSpec};
use crate::delivery::azure::devops::{AzureDevOpsClient, AzureDevOpsConfig, AzureDevOpsError, tenant_pipeline_folder};
use crate::delivery::git::commit::{
    AzureCommitWriter, CommitSpec, CommitWriter, DEFAULT_AUTHOR_EMAIL, DEFAULT_AUTHOR_NAME, FileWrite,
};

pub use crate::delivery::azure::devops::PIPELINE_FOLDER;

/// Recent runs of a definition and branch searched for the same commit.
const RECENT_RUNS: &str = "50";

/// Commits pipeline files to Azure Repos and runs them on Azure Pipelines.
#[derive(Debug, Clone)]
pub struct AzurePipelineGenerator {
    client: AzureDevOpsClient,
    commits: AzureCommitWriter,
}

impl AzurePipelineGenerator {
    /// An adapter for the configured organization and project.
    pub fn new(config: &AzureDevOpsConfig) -> Result<Self, AzureDevOpsError> {
        Ok(Self::from_client(AzureDevOpsClient::new(config)?))
    }

    /// An adapter sharing an existing client.
    pub fn from_client(client: AzureDevOpsClient) -> Self {
        Self {
            commits: AzureCommitWriter::from_client(client.clone()),
            client,
        }
    }

    /// A URL in `tenant`'s project (see [`AzureDevOpsClient::project_for`]).
    fn project_url(&self, tenant: &str, rest: &[&str], query: &[(&str, &str)]) -> reqwest::Url {
        self.client.project_url(tenant, rest, query)
    }
}

/// An Azure DevOps date, to the second; `now` when absent or unreadable.
fn azure_date(value: Option<&str>) -> OffsetDateTime {
    let now = OffsetDateTime::now_utc();
    let at = value
        .and_then(|value| OffsetDateTime::parse(value, &Rfc3339).ok())
        .unwrap_or(now);
    at.replace_nanosecond(0).unwrap_or(at)
}

#[async_trait]
impl PipelineHost for AzurePipelineGenerator {
    async fn read_file(
        &self,
        tenant: &str,
        repository: &str,
        branch: &str,
        path: &str,
    ) -> Result<Option<Vec<u8>>, PipelineError> {
        let item = format!("/{path}");
        let url = self.project_url(
            tenant,
            &["git", "repositories", repository, "items"],
            &[
                ("path", &item),
                ("versionDescriptor.version", branch),
                ("versionDescriptor.versionType", "branch"),
                ("includeContent", "true"),
                ("$format", "octetStream"),
            ],
        );
        Ok(self.client.get_bytes_opt(url).await?)
    }

    async fn commit_pipeline(&self, file: &PipelineFile) -> Result<CommittedPipeline, PipelineError> {
        let result = self
            .commits
            .commit(&CommitSpec {
                tenant: file.tenant.clone(),
                repository: file.repository.clone(),
                branch: file.branch.clone(),
                base_branch: None,
                message: file.message.clone(),
                author: GitIdentity {
                    name: DEFAULT_AUTHOR_NAME.to_owned(),
                    email: DEFAULT_AUTHOR_EMAIL.to_owned(),
                },
                date: file.date,
                files: vec![FileWrite {
                    path: file.path.clone(),
                    content: file.content.clone().into_bytes(),
                    executable: false,
                }],
                delete: Vec::new(),
            })
            .await?;
        Ok(CommittedPipeline {
            commit_sha: result.commit_sha,
            no_op: result.no_op,
        })
    }

    async fn ensure_pipeline(&self, definition: &DefinitionSpec) -> Result<String, PipelineError> {
        bosun_contracts::validate::tenant_id("tenant", &definition.tenant)
            .map_err(|err| PipelineError::Invalid(format!("{}: {}", err.field, err.reason)))?;
        let folder = tenant_pipeline_folder(&definition.tenant);
        let url = self.project_url(
            &definition.tenant,
            &["build", "definitions"],
            &[("name", &definition.name)],
        );
        let existing: DefinitionList = self.client.get_json(url).await?;
        let named = |found: &&DefinitionReference| found.name.eq_ignore_ascii_case(&definition.name);
        if let Some(found) = existing
            .value
            .iter()
            .filter(named)
            .find(|found| found.path.eq_ignore_ascii_case(&folder))
        {
            return Ok(found.id.to_string());
        }
        // A definition of this name made before definitions had a folder
        // per tenant: reused when it runs the requested repository, so a
        // delivery in flight at the upgrade keeps its pipeline.
        if let Some(legacy) = existing
            .value
            .iter()
            .filter(named)
            .find(|found| found.path.eq_ignore_ascii_case(PIPELINE_FOLDER))
        {
            let id = legacy.id.to_string();
            let url = self.project_url(&definition.tenant, &["build", "definitions", &id], &[]);
            let details: DefinitionDetails = self.client.get_json(url).await?;
            if details
                .repository
                .is_some_and(|repository| repository.name.eq_ignore_ascii_case(&definition.repository))
            {
                tracing::debug!(pipeline = legacy.id, name = %definition.name, "reusing a definition made before tenant folders");
                return Ok(id);
            }
        }

        let url = self.project_url(
            &definition.tenant,
            &["git", "repositories", &definition.repository],
            &[],
        );
        let Some(repository) = self.client.get_json_opt::<GitRepository>(url).await? else {
            return Err(PipelineError::RepositoryNotFound {
                repository: definition.repository.clone(),
            });
        };
        let body = json!({
            "name": definition.name,
            "folder": folder,
            "configuration": {
                "type": "yaml",
                "path": format!("/{}", definition.pipeline_path),
                "repository": {
                    "id": repository.id,
                    "name": definition.repository,
                    "type": "azureReposGit",
                },
            },
        });
        let created: Pipeline = self
            .client
            .post_json(self.project_url(&definition.tenant, &["pipelines"], &[]), &body)
            .await?;
        tracing::info!(pipeline = created.id, name = %definition.name, "Azure pipeline definition created");
        Ok(created.id.to_string())
    }

    async fn queue_run(&self, run: &RunSpec) -> Result<QueuedRun, PipelineError> {
        let branch_ref = format!("refs/heads/{}", run.branch);
        let url = self.project_url(
            &run.tenant,
            &["build", "builds"],
            &[
                ("definitions", &run.pipeline_id),
                ("branchName", &branch_ref),
                ("queryOrder", "queueTimeDescending"),
                ("$top", RECENT_RUNS),
            ],
        );
        let recent: BuildList = self.client.get_json(url).await?;
        if let Some(build) = recent
            .value
            .into_iter()
            .find(|build| build.source_version.as_deref() == Some(run.commit_sha.as_str()))
        {
            tracing::debug!(run = build.id, commit = %run.commit_sha, "Azure pipeline run of this commit already queued");
            return Ok(QueuedRun {
                run_id: build.id.to_string(),
                queued_at: azure_date(build.queue_time.as_deref()),
                url: build.links.and_then(|links| links.web).map(|web| web.href),
            });
        }

        let body = json!({
            "resources": {
                "repositories": {
                    "self": { "refName": branch_ref, "version": run.commit_sha },
                },
            },
        });
        let url = self.project_url(&run.tenant, &["pipelines", &run.pipeline_id, "runs"], &[]);
        let started: PipelineRun = self.client.post_json(url, &body).await?;
        Ok(QueuedRun {
            run_id: started.id.to_string(),
            queued_at: azure_date(started.created_date.as_deref()),
            url: started.links.and_then(|links| links.web).map(|web| web.href),
        })
    }
}

/// `GitRepository`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct GitRepository {
    id: String,
}

/// A list of `BuildDefinitionReference`s.
#[derive(Debug, Deserialize)]
struct DefinitionList {
    #[serde(default)]
    value: Vec<DefinitionReference>,
}

/// `BuildDefinitionReference`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct DefinitionReference {
    id: u64,
    name: String,
    /// The folder, e.g. `\bosun\contoso`.
    #[serde(default)]
    path: String,
}

/// `BuildDefinition`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct DefinitionDetails {
    #[serde(default)]
    repository: Option<DefinitionRepository>,
}

/// `BuildRepository`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct DefinitionRepository {
    name: String,
}

/// `Pipeline`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct Pipeline {
    id: u64,
}

/// A list of `Build`s.
#[derive(Debug, Deserialize)]
struct BuildList {
    #[serde(default)]
    value: Vec<Build>,
}

/// `Build`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Build {
    id: u64,
    #[serde(default)]
    source_version: Option<String>,
    #[serde(default)]
    queue_time: Option<String>,
    #[serde(default, rename = "_links")]
    links: Option<Links>,
}

/// `Run`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PipelineRun {
    id: u64,
    #[serde(default)]
    created_date: Option<String>,
    #[serde(default, rename = "_links")]
    links: Option<Links>,
}

/// `ReferenceLinks`, the web link.
#[derive(Debug, Deserialize)]
struct Links {
    #[serde(default)]
    web: Option<Link>,
}

#[derive(Debug, Deserialize)]
struct Link {
    href: String,
}
