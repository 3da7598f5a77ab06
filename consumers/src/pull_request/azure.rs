//! The Azure DevOps adapter: pull requests are Azure Repos pull requests,
//! through REST API 7.1 (the repository is addressed by name, in the
//! tenant's project: [`AzureDevOpsClient::project_for`], see the tenants
//! section of [`crate::delivery::azure::devops`]).
//!
//! 1. `GET .../pullrequests?searchCriteria.sourceRefName=&targetRefName=&status=active`
//!    — an open pull request between the two branches is the answer
//!    (`created: false`); a 404 is [`PullRequestError::RepositoryNotFound`];
//! 2. `GET .../refs?filter=heads/{source}` for the source's head (reported
//!    as the pull request's head, so a moved source is seen at once);
//! 3. with none open, `GET ...&status=completed`: a completed pull request
//!    whose `lastMergeSourceCommit` is that head is the answer (the request
//!    was already carried out);
//! 4. otherwise `POST .../pullrequests` with `sourceRefName`,
//!    `targetRefName`, `title` (the head commit's subject from
//!    `GET .../commits/{id}` when the request has none) and `description`;
//!    a 409 (opened concurrently) reads the active one again;
//! 5. with auto-complete asked for and not yet set,
//!    `PATCH .../pullrequests/{id}` with `autoCompleteSetBy` (the pull
//!    request's creator) and `completionOptions` (`noFastForward` merge,
//!    source branch kept): Azure DevOps completes it once its policies
//!    pass, so the status reported is the current one (`active` until then);
//! 6. `GET {project}/_apis/policy/evaluations?artifactId=vstfs:///CodeReview/CodeReviewId/{projectId}/{id}`
//!    (API 7.1-preview.1) for the checks — best effort: a failure there is
//!    logged and the pull request reported without checks.
//!
//! Files are read with `GET .../items` at a commit (raw bytes), and found
//! with `GET .../items?scopePath=/&recursionLevel=full`.
//!
//! Every request, the one PATCH included, goes through the Azure DevOps
//! client of [`crate::delivery::azure::devops`] (one HTTP client, one
//! retry policy).

use async_trait::async_trait;
use bosun_contracts::messages::PullRequestStatus;
use bosun_contracts::messages::pull_request::MAX_TITLE_CHARS;
use bosun_contracts::validate;
use reqwest::Url;
use serde::Deserialize;
use serde_json::{Value, json};

use super::port::{CheckStatus, OpenedPullRequest, PolicyCheck, PullRequestError, PullRequestHost, PullRequestSpec};
use crate::delivery::azure::devops::{AzureDevOpsClient, AzureDevOpsConfig, AzureDevOpsError};

/// API version of the policy evaluations API (a preview API).
pub const POLICY_EVALUATIONS_API_VERSION: &str = "7.1-preview.1";

/// Opens pull requests in Azure Repos.
#[derive(Debug, Clone)]
pub struct AzurePullRequests {
    client: AzureDevOpsClient,
    organization: Url,
}

impl AzurePullRequests {
    /// An adapter for the configured organization and project.
    pub fn new(config: &AzureDevOpsConfig) -> Result<Self, AzureDevOpsError> {
        let client = AzureDevOpsClient::new(config)?;
        let organization = Url::parse(config.organization_url.trim())
            .map_err(|err| AzureDevOpsError::Config(format!("organization URL: {err}")))?;
        Ok(Self { client, organization })
    }

    /// A URL of a repository in `tenant`'s project (see
    /// [`AzureDevOpsClient::project_for`]).
    fn repository_url(&self, tenant: &str, repository: &str, rest: &[&str], query: &[(&str, &str)]) -> Url {
        let mut segments = vec!["git", "repositories", repository];
        segments.extend_from_slice(rest);
        self.client.project_url(tenant, &segments, query)
    }

    /// Pull requests between the spec's branches in one status.
    async fn list(&self, spec: &PullRequestSpec, status: &str) -> Result<Vec<GitPullRequest>, PullRequestError> {
        let source = format!("refs/heads/{}", spec.source_branch);
        let target = format!("refs/heads/{}", spec.target_branch);
        let url = self.repository_url(
            &spec.tenant,
            &spec.repository,
            &["pullrequests"],
            &[
                ("searchCriteria.sourceRefName", &source),
                ("searchCriteria.targetRefName", &target),
                ("searchCriteria.status", status),
            ],
        );
        match self.client.get_json::<List<GitPullRequest>>(url).await {
            Ok(list) => Ok(list.value),
            Err(err) if err.status() == Some(404) => Err(PullRequestError::RepositoryNotFound {
                repository: spec.repository.clone(),
            }),
            Err(err) => Err(err.into()),
        }
    }

    /// The commit a branch points at.
    async fn branch_head(
        &self,
        tenant: &str,
        repository: &str,
        branch: &str,
    ) -> Result<Option<String>, AzureDevOpsError> {
        let filter = format!("heads/{branch}");
        let url = self.repository_url(tenant, repository, &["refs"], &[("filter", &filter)]);
        let refs: List<GitRef> = self.client.get_json(url).await?;
        let wanted = format!("refs/heads/{branch}");
        Ok(refs.value.into_iter().find(|r| r.name == wanted).map(|r| r.object_id))
    }

    /// The subject line of a commit.
    async fn subject(&self, tenant: &str, repository: &str, commit: &str) -> Result<String, AzureDevOpsError> {
        let url = self.repository_url(tenant, repository, &["commits", commit], &[]);
        let commit: GitCommit = self.client.get_json(url).await?;
        Ok(commit.comment.lines().next().unwrap_or_default().trim().to_owned())
    }

    async fn create(&self, spec: &PullRequestSpec, title: &str) -> Result<Option<GitPullRequest>, PullRequestError> {
        let mut body = json!({
            "sourceRefName": format!("refs/heads/{}", spec.source_branch),
            "targetRefName": format!("refs/heads/{}", spec.target_branch),
            "title": title,
        });
        if let Some(description) = &spec.description {
            body["description"] = json!(description);
        }
        let url = self.repository_url(&spec.tenant, &spec.repository, &["pullrequests"], &[]);
        match self.client.post_json::<_, GitPullRequest>(url, &body).await {
            Ok(created) => Ok(Some(created)),
            // TF401179: an active pull request for the two branches exists.
            Err(err) if err.status() == Some(409) => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    /// Turns auto-complete on, set by the pull request's creator.
    async fn enable_auto_complete(
        &self,
        tenant: &str,
        repository: &str,
        pull_request: GitPullRequest,
    ) -> Result<GitPullRequest, PullRequestError> {
        if pull_request.auto_complete_set_by.is_some() {
            return Ok(pull_request);
        }
        let Some(creator) = pull_request.created_by.as_ref().map(|identity| identity.id.clone()) else {
            tracing::warn!(
                repository,
                pull_request = pull_request.pull_request_id,
                "the pull request names no creator; auto-complete not set"
            );
            return Ok(pull_request);
        };
        let id = pull_request.pull_request_id.to_string();
        let url = self.repository_url(tenant, repository, &["pullrequests", &id], &[]);
        let body = json!({
            "autoCompleteSetBy": { "id": creator },
            "completionOptions": {
                "mergeStrategy": "noFastForward",
                "deleteSourceBranch": false,
                "mergeCommitMessage": format!("Merged PR {id}: {}", pull_request.title),
            },
        });
        let updated: Value = self.client.patch_json(url, &body).await?;
        serde_json::from_value(updated).map_err(|err| {
            PullRequestError::Rejected(format!("PATCH pull request {id}: unexpected response: {err}").into())
        })
    }

    /// The policy evaluations of a pull request, best effort.
    async fn checks(&self, tenant: &str, pull_request: &GitPullRequest) -> Vec<PolicyCheck> {
        let Some(project_id) = pull_request
            .repository
            .as_ref()
            .and_then(|repository| repository.project.as_ref())
            .map(|project| project.id.clone())
        else {
            return Vec::new();
        };
        let artifact = format!(
            "vstfs:///CodeReview/CodeReviewId/{project_id}/{}",
            pull_request.pull_request_id
        );
        let mut url = self
            .client
            .project_url(tenant, &["policy", "evaluations"], &[("artifactId", &artifact)]);
        set_api_version(&mut url, POLICY_EVALUATIONS_API_VERSION);
        match self.client.get_json::<List<PolicyEvaluation>>(url).await {
            Ok(list) => list
                .value
                .into_iter()
                .filter_map(PolicyEvaluation::into_check)
                .collect(),
            Err(err) => {
                tracing::warn!(
                    pull_request = pull_request.pull_request_id,
                    error = %err,
                    "could not read the pull request's policy evaluations"
                );
                Vec::new()
            }
        }
    }

    fn web_url(&self, spec: &PullRequestSpec, pull_request: &GitPullRequest) -> String {
        let id = pull_request.pull_request_id.to_string();
        if let Some(repository_url) = pull_request
            .repository
            .as_ref()
            .and_then(|repository| repository.web_url.as_deref())
            && let Ok(mut url) = Url::parse(repository_url)
        {
            let extended = match url.path_segments_mut() {
                Ok(mut path) => {
                    path.pop_if_empty().extend(["pullrequest", id.as_str()]);
                    true
                }
                Err(()) => false,
            };
            if extended {
                return url.to_string();
            }
        }
        let project = self.client.project_for(&spec.tenant);
        let mut url = self.organization.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend([
                project.as_ref(),
                "_git",
                spec.repository.as_str(),
                "pullrequest",
                id.as_str(),
            ]);
        }
        url.to_string()
    }

    fn report(
        &self,
        spec: &PullRequestSpec,
        pull_request: GitPullRequest,
        head: String,
        created: bool,
        checks: Vec<PolicyCheck>,
    ) -> Result<OpenedPullRequest, PullRequestError> {
        let status = match pull_request.status.as_str() {
            "completed" => PullRequestStatus::Completed,
            "abandoned" => PullRequestStatus::Abandoned,
            _ => PullRequestStatus::Active,
        };
        let merge_commit = match status {
            PullRequestStatus::Completed => Some(
                pull_request
                    .last_merge_commit
                    .as_ref()
                    .map(|commit| commit.commit_id.clone())
                    .ok_or_else(|| {
                        PullRequestError::Rejected(
                            format!(
                                "completed pull request {} has no lastMergeCommit",
                                pull_request.pull_request_id
                            )
                            .into(),
                        )
                    })?,
            ),
            _ => None,
        };
        Ok(OpenedPullRequest {
            pull_request_id: pull_request.pull_request_id,
            url: self.web_url(spec, &pull_request),
            title: pull_request.title.clone(),
            head_commit: head,
            status,
            created,
            required_checks: spec.required_checks.clone(),
            auto_complete: pull_request.auto_complete_set_by.is_some(),
            merge_commit,
            checks,
        })
    }
}

/// Replaces the `api-version` the client appended (for preview APIs).
fn set_api_version(url: &mut Url, version: &str) {
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(key, _)| key != "api-version")
        .map(|(key, value)| (key.into_owned(), value.into_owned()))
        .collect();
    url.query_pairs_mut()
        .clear()
        .extend_pairs(pairs)
        .append_pair("api-version", version);
}

#[async_trait]
impl PullRequestHost for AzurePullRequests {
    async fn open(&self, spec: &PullRequestSpec) -> Result<OpenedPullRequest, PullRequestError> {
        validate::branch_name("sourceBranch", &spec.source_branch)?;
        validate::branch_name("targetBranch", &spec.target_branch)?;
        let active = self.list(spec, "active").await?.into_iter().next();
        let head = self
            .branch_head(&spec.tenant, &spec.repository, &spec.source_branch)
            .await?
            .ok_or_else(|| PullRequestError::BranchNotFound {
                branch: spec.source_branch.clone(),
            })?;
        let (pull_request, created) = match active {
            Some(existing) => (existing, false),
            None => {
                let completed = self.list(spec, "completed").await?.into_iter().find(|pr| {
                    pr.last_merge_source_commit
                        .as_ref()
                        .is_some_and(|c| c.commit_id == head)
                });
                if let Some(done) = completed {
                    let checks = self.checks(&spec.tenant, &done).await;
                    return self.report(spec, done, head, false, checks);
                }
                let title = match &spec.title {
                    Some(title) => title.clone(),
                    None => self.subject(&spec.tenant, &spec.repository, &head).await?,
                };
                let title: String = title.chars().take(MAX_TITLE_CHARS).collect();
                let title = if title.trim().is_empty() {
                    format!("Merge {} into {}", spec.source_branch, spec.target_branch)
                } else {
                    title
                };
                match self.create(spec, &title).await? {
                    Some(created) => {
                        tracing::info!(
                            repository = %spec.repository,
                            pull_request = created.pull_request_id,
                            "pull request opened"
                        );
                        (created, true)
                    }
                    None => match self.list(spec, "active").await?.into_iter().next() {
                        Some(existing) => (existing, false),
                        None => {
                            return Err(PullRequestError::Unavailable(
                                "pull request reported as existing but not found active".into(),
                            ));
                        }
                    },
                }
            }
        };
        let pull_request = if spec.auto_complete {
            self.enable_auto_complete(&spec.tenant, &spec.repository, pull_request)
                .await?
        } else {
            pull_request
        };
        let checks = self.checks(&spec.tenant, &pull_request).await;
        self.report(spec, pull_request, head, created, checks)
    }

    async fn read_file(
        &self,
        tenant: &str,
        repository: &str,
        commit: &str,
        path: &str,
    ) -> Result<Option<Vec<u8>>, PullRequestError> {
        validate::repository_path("path", path)?;
        let path = format!("/{path}");
        let url = self.repository_url(
            tenant,
            repository,
            &["items"],
            &[
                ("path", &path),
                ("versionDescriptor.version", commit),
                ("versionDescriptor.versionType", "commit"),
                ("includeContent", "true"),
                ("$format", "octetStream"),
            ],
        );
        Ok(self.client.get_bytes_opt(url).await?)
    }

    async fn find_files(
        &self,
        tenant: &str,
        repository: &str,
        commit: &str,
        file_name: &str,
    ) -> Result<Vec<String>, PullRequestError> {
        let url = self.repository_url(
            tenant,
            repository,
            &["items"],
            &[
                ("scopePath", "/"),
                ("recursionLevel", "full"),
                ("versionDescriptor.version", commit),
                ("versionDescriptor.versionType", "commit"),
            ],
        );
        let Some(items) = self.client.get_json_opt::<List<GitItem>>(url).await? else {
            return Ok(Vec::new());
        };
        let mut paths: Vec<String> = items
            .value
            .into_iter()
            .filter(|item| !item.is_folder && item.path.rsplit('/').next() == Some(file_name))
            .map(|item| item.path.trim_start_matches('/').to_owned())
            .collect();
        paths.sort();
        Ok(paths)
    }
}

/// A `{count, value}` list.
#[derive(Debug, Deserialize)]
struct List<T> {
    #[serde(default = "Vec::new")]
    value: Vec<T>,
}

/// `GitPullRequest`, the fields bosun reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GitPullRequest {
    pull_request_id: u64,
    #[serde(default)]
    status: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    created_by: Option<IdentityRef>,
    #[serde(default)]
    auto_complete_set_by: Option<IdentityRef>,
    #[serde(default)]
    last_merge_source_commit: Option<GitCommitRef>,
    #[serde(default)]
    last_merge_commit: Option<GitCommitRef>,
    #[serde(default)]
    repository: Option<PullRequestRepository>,
}

/// `IdentityRef`, the fields bosun reads.
#[derive(Debug, Clone, Deserialize)]
struct IdentityRef {
    id: String,
}

/// `GitCommitRef`, the fields bosun reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GitCommitRef {
    commit_id: String,
}

/// The repository of a pull request, the fields bosun reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PullRequestRepository {
    #[serde(default)]
    web_url: Option<String>,
    #[serde(default)]
    project: Option<ProjectRef>,
}

/// `TeamProjectReference`, the fields bosun reads.
#[derive(Debug, Clone, Deserialize)]
struct ProjectRef {
    id: String,
}

/// `GitRef`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GitRef {
    name: String,
    object_id: String,
}

/// `GitCommit`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct GitCommit {
    #[serde(default)]
    comment: String,
}

/// `GitItem`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GitItem {
    path: String,
    #[serde(default)]
    is_folder: bool,
}

/// `PolicyEvaluationRecord`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct PolicyEvaluation {
    #[serde(default)]
    status: String,
    #[serde(default)]
    configuration: Option<PolicyConfiguration>,
}

/// `PolicyConfiguration`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicyConfiguration {
    #[serde(default, rename = "type")]
    policy_type: Option<PolicyType>,
    #[serde(default)]
    is_blocking: bool,
}

/// `PolicyTypeRef`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicyType {
    #[serde(default)]
    display_name: String,
}

impl PolicyEvaluation {
    /// The check of an evaluation; policies that do not apply are left out.
    fn into_check(self) -> Option<PolicyCheck> {
        let status = match self.status.as_str() {
            "approved" => CheckStatus::Passed,
            "rejected" | "broken" => CheckStatus::Failed,
            "queued" | "running" => CheckStatus::Pending,
            _ => return None,
        };
        let configuration = self.configuration?;
        let name = configuration
            .policy_type
            .map(|policy| policy.display_name)
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "policy".to_owned());
        let blocking = if configuration.is_blocking {
            "blocking"
        } else {
            "optional"
        };
        Some(PolicyCheck {
            name,
            status,
            detail: format!("{} ({blocking})", self.status),
        })
    }
}
