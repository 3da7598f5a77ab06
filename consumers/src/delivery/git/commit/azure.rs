//! The Azure DevOps adapter: commits are pushes to Azure Repos, through REST
//! API 7.1.
//!
//! 1. `GET {org}/{project}/_apis/git/repositories/{name}` — a missing
//!    repository is [`CommitError::RepositoryNotFound`] (transient);
//! 2. `GET .../refs?filter=heads/{branch}` for the branch head (the filter is
//!    a prefix, so the exact name is picked out); a missing branch starts
//!    from `baseBranch` or the repository's default branch;
//! 3. for each file, `GET .../items?path=...&versionDescriptor.versionType=commit`
//!    with `includeContent` as raw bytes, and for each deletion the item's
//!    metadata: unchanged files and absent deletions are left out, a missing
//!    file is an `add`, a different one an `edit`;
//! 4. nothing left to change is a no-op returning the head commit (a missing
//!    branch is first created at its base with `POST .../refs`); otherwise
//!    `POST .../pushes` with `refUpdates[].oldObjectId` set to the head (or
//!    the base for a new branch, or zeros for an empty repository) and one
//!    commit whose changes carry `rawtext` (UTF-8) or `base64encoded`
//!    content; a 409 (the branch moved) starts over from the new head;
//! 5. `GET .../commits/{id}` for the tree and parent of the result.
//!
//! The project is the tenant's ([`AzureDevOpsClient::project_for`];
//! `CreateCommit` names none): its own project when the setting has
//! `{tenant}`, else the one configured project every tenant maps to, where
//! the repository is the project's of that name (see the tenants section
//! of [`crate::delivery::azure::devops`]). The push
//! API cannot set a file mode, so the executable bit is not carried to Azure
//! Repos (a warning is logged). Author and committer are the request's
//! identity with the request's date.

use async_trait::async_trait;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;

use super::{CommitError, CommitResult, CommitSpec, CommitWriter};
use crate::delivery::azure::devops::{AzureDevOpsClient, AzureDevOpsConfig, AzureDevOpsError};
use crate::delivery::git::short_branch;

/// Attempts when the branch moves between reading its head and pushing.
pub const MAX_ATTEMPTS: u32 = 5;

/// The object id Azure DevOps uses for "no commit" (a ref that does not
/// exist yet).
const ZERO_OBJECT_ID: &str = "0000000000000000000000000000000000000000";

/// Pushes commits to Azure Repos.
#[derive(Debug, Clone)]
pub struct AzureCommitWriter {
    client: AzureDevOpsClient,
}

/// One entry of a push's `changes`.
#[derive(Debug)]
struct Change {
    change_type: &'static str,
    path: String,
    content: Option<(String, &'static str)>,
}

impl Change {
    fn to_json(&self) -> Value {
        let mut change = json!({ "changeType": self.change_type, "item": { "path": self.path } });
        if let Some((content, content_type)) = &self.content {
            change["newContent"] = json!({ "content": content, "contentType": content_type });
        }
        change
    }
}

impl AzureCommitWriter {
    /// An adapter for the configured organization and project.
    pub fn new(config: &AzureDevOpsConfig) -> Result<Self, AzureDevOpsError> {
        Ok(Self::from_client(AzureDevOpsClient::new(config)?))
    }

    /// An adapter sharing an existing client.
    pub fn from_client(client: AzureDevOpsClient) -> Self {
        Self { client }
    }

    /// A URL of a repository in `tenant`'s project (see
    /// [`AzureDevOpsClient::project_for`]).
    fn repository_url(&self, tenant: &str, repository_id: &str, rest: &[&str], query: &[(&str, &str)]) -> reqwest::Url {
        let mut segments = vec!["git", "repositories", repository_id];
        segments.extend_from_slice(rest);
        self.client.project_url(tenant, &segments, query)
    }

    /// The commit a branch points at, `None` when it does not exist.
    async fn branch_head(
        &self,
        tenant: &str,
        repository_id: &str,
        branch: &str,
    ) -> Result<Option<String>, AzureDevOpsError> {
        let filter = format!("heads/{branch}");
        let url = self.repository_url(tenant, repository_id, &["refs"], &[("filter", &filter)]);
        let refs: RefList = self.client.get_json(url).await?;
        let wanted = format!("refs/heads/{branch}");
        Ok(refs.value.into_iter().find(|r| r.name == wanted).map(|r| r.object_id))
    }

    /// Whether the repository has any branch.
    async fn has_branches(&self, tenant: &str, repository_id: &str) -> Result<bool, AzureDevOpsError> {
        let url = self.repository_url(tenant, repository_id, &["refs"], &[("filter", "heads/"), ("$top", "1")]);
        let refs: RefList = self.client.get_json(url).await?;
        Ok(!refs.value.is_empty())
    }

    /// The file's bytes at a commit, `None` when it does not exist.
    async fn file_at(
        &self,
        tenant: &str,
        repository_id: &str,
        commit: &str,
        path: &str,
    ) -> Result<Option<Vec<u8>>, AzureDevOpsError> {
        let url = self.repository_url(
            tenant,
            repository_id,
            &["items"],
            &[
                ("path", path),
                ("versionDescriptor.version", commit),
                ("versionDescriptor.versionType", "commit"),
                ("includeContent", "true"),
                ("$format", "octetStream"),
            ],
        );
        self.client.get_bytes_opt(url).await
    }

    /// Whether an item (file or folder) exists at a commit.
    async fn item_exists(
        &self,
        tenant: &str,
        repository_id: &str,
        commit: &str,
        path: &str,
    ) -> Result<bool, AzureDevOpsError> {
        let url = self.repository_url(
            tenant,
            repository_id,
            &["items"],
            &[
                ("path", path),
                ("versionDescriptor.version", commit),
                ("versionDescriptor.versionType", "commit"),
            ],
        );
        Ok(self.client.get_json_opt::<Value>(url).await?.is_some())
    }

    /// The changes that bring the tree at `start` to the requested files.
    async fn changes(
        &self,
        repository_id: &str,
        start: Option<&str>,
        spec: &CommitSpec,
    ) -> Result<Vec<Change>, AzureDevOpsError> {
        let mut changes = Vec::new();
        for path in &spec.delete {
            // A file written at the same path replaces it: no delete needed.
            if spec.files.iter().any(|file| file.path == *path) {
                continue;
            }
            let path = format!("/{path}");
            if let Some(start) = start
                && self.item_exists(&spec.tenant, repository_id, start, &path).await?
            {
                changes.push(Change {
                    change_type: "delete",
                    path,
                    content: None,
                });
            }
        }
        for file in &spec.files {
            let path = format!("/{}", file.path);
            let current = match start {
                Some(start) => self.file_at(&spec.tenant, repository_id, start, &path).await?,
                None => None,
            };
            // A file inside a folder deleted by this same push is added anew.
            let deleted_with_folder = spec
                .delete
                .iter()
                .any(|folder| file.path.starts_with(&format!("{folder}/")));
            let change_type = match current {
                Some(bytes) if bytes == file.content && !deleted_with_folder => continue,
                Some(_) if !deleted_with_folder => "edit",
                _ => "add",
            };
            if file.executable {
                tracing::warn!(
                    repository = %spec.repository,
                    path = %file.path,
                    "Azure DevOps pushes cannot set the executable bit; written as a regular file"
                );
            }
            let content = match std::str::from_utf8(&file.content) {
                Ok(text) => (text.to_owned(), "rawtext"),
                Err(_) => (
                    base64::engine::general_purpose::STANDARD.encode(&file.content),
                    "base64encoded",
                ),
            };
            changes.push(Change {
                change_type,
                path,
                content: Some(content),
            });
        }
        Ok(changes)
    }

    async fn commit_details(
        &self,
        tenant: &str,
        repository_id: &str,
        commit: &str,
    ) -> Result<GitCommit, AzureDevOpsError> {
        let url = self.repository_url(tenant, repository_id, &["commits", commit], &[]);
        self.client.get_json(url).await
    }

    /// Creates `refs/heads/{branch}` at `commit`; `false` when it appeared
    /// meanwhile.
    async fn create_branch(
        &self,
        tenant: &str,
        repository_id: &str,
        branch: &str,
        commit: &str,
    ) -> Result<bool, AzureDevOpsError> {
        let url = self.repository_url(tenant, repository_id, &["refs"], &[]);
        let body =
            json!([{ "name": format!("refs/heads/{branch}"), "oldObjectId": ZERO_OBJECT_ID, "newObjectId": commit }]);
        let updates: RefUpdateList = match self.client.post_json(url, &body).await {
            Ok(updates) => updates,
            Err(err) if err.status() == Some(409) => return Ok(false),
            Err(err) => return Err(err),
        };
        Ok(updates.value.iter().all(|update| update.success))
    }

    async fn push(
        &self,
        repository_id: &str,
        spec: &CommitSpec,
        old_object_id: &str,
        changes: &[Change],
    ) -> Result<Option<String>, CommitError> {
        let date = spec
            .date
            .format(&Rfc3339)
            .map_err(|err| CommitError::Invalid(format!("occurredAt: {err}")))?;
        let identity = json!({ "name": spec.author.name, "email": spec.author.email, "date": date });
        let body = json!({
            "refUpdates": [{ "name": format!("refs/heads/{}", spec.branch), "oldObjectId": old_object_id }],
            "commits": [{
                "comment": spec.message,
                "author": identity,
                "committer": identity,
                "changes": changes.iter().map(Change::to_json).collect::<Vec<_>>(),
            }],
        });
        let url = self.repository_url(&spec.tenant, repository_id, &["pushes"], &[]);
        match self.client.post_json::<_, GitPush>(url, &body).await {
            Ok(push) => {
                let commit = push
                    .ref_updates
                    .first()
                    .and_then(|update| update.new_object_id.clone())
                    .or_else(|| push.commits.last().map(|commit| commit.commit_id.clone()));
                match commit {
                    Some(commit) => Ok(Some(commit)),
                    None => Err(CommitError::Rejected("the push response names no commit".into())),
                }
            }
            // TF401028: the reference was updated by another client.
            Err(err) if err.status() == Some(409) => Ok(None),
            Err(err) => Err(err.into()),
        }
    }
}

#[async_trait]
impl CommitWriter for AzureCommitWriter {
    async fn commit(&self, spec: &CommitSpec) -> Result<CommitResult, CommitError> {
        let url = self
            .client
            .project_url(&spec.tenant, &["git", "repositories", &spec.repository], &[]);
        let Some(repository) = self.client.get_json_opt::<GitRepository>(url).await? else {
            return Err(CommitError::RepositoryNotFound {
                repository: spec.repository.clone(),
            });
        };
        let repository_id = repository.id.as_str();

        for attempt in 1..=MAX_ATTEMPTS {
            let head = self.branch_head(&spec.tenant, repository_id, &spec.branch).await?;
            let start = match &head {
                Some(head) => Some(head.clone()),
                None => {
                    let base = spec
                        .base_branch
                        .clone()
                        .or_else(|| repository.default_branch.as_deref().map(|b| short_branch(b).to_owned()))
                        .unwrap_or_else(|| "main".to_owned());
                    match self.branch_head(&spec.tenant, repository_id, &base).await? {
                        Some(commit) => Some(commit),
                        None if self.has_branches(&spec.tenant, repository_id).await? => {
                            return Err(CommitError::BaseBranchNotFound { branch: base });
                        }
                        None => None,
                    }
                }
            };
            let changes = self.changes(repository_id, start.as_deref(), spec).await?;

            let commit = match (&start, changes.is_empty()) {
                (Some(start), true) => {
                    if head.is_none()
                        && !self
                            .create_branch(&spec.tenant, repository_id, &spec.branch, start)
                            .await?
                    {
                        continue;
                    }
                    let details = self.commit_details(&spec.tenant, repository_id, start).await?;
                    return Ok(CommitResult {
                        repository_id: repository_id.to_owned(),
                        commit_sha: start.clone(),
                        tree_sha: details.tree_id,
                        parent_sha: details.parents.into_iter().next(),
                        files_changed: 0,
                        no_op: true,
                    });
                }
                _ => {
                    let old_object_id = start.as_deref().unwrap_or(ZERO_OBJECT_ID);
                    match self.push(repository_id, spec, old_object_id, &changes).await? {
                        Some(commit) => commit,
                        None => {
                            tracing::debug!(
                                repository = %spec.repository,
                                branch = %spec.branch,
                                attempt,
                                "branch moved by another writer; starting over"
                            );
                            continue;
                        }
                    }
                }
            };
            let details = self.commit_details(&spec.tenant, repository_id, &commit).await?;
            return Ok(CommitResult {
                repository_id: repository_id.to_owned(),
                commit_sha: commit,
                tree_sha: details.tree_id,
                parent_sha: details.parents.into_iter().next(),
                files_changed: u32::try_from(changes.len()).unwrap_or(u32::MAX),
                no_op: false,
            });
        }
        Err(CommitError::BranchContended {
            branch: spec.branch.clone(),
            attempts: MAX_ATTEMPTS,
        })
    }
}

/// `GitRepository`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GitRepository {
    id: String,
    #[serde(default)]
    default_branch: Option<String>,
}

/// A list of `GitRef`s.
#[derive(Debug, Deserialize)]
struct RefList {
    #[serde(default)]
    value: Vec<GitRef>,
}

/// `GitRef`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GitRef {
    name: String,
    object_id: String,
}

/// A list of `GitRefUpdateResult`s.
#[derive(Debug, Deserialize)]
struct RefUpdateList {
    #[serde(default)]
    value: Vec<GitRefUpdateResult>,
}

/// `GitRefUpdateResult`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct GitRefUpdateResult {
    #[serde(default)]
    success: bool,
}

/// `GitPush`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GitPush {
    #[serde(default)]
    commits: Vec<GitCommitRef>,
    #[serde(default)]
    ref_updates: Vec<GitRefUpdate>,
}

/// `GitCommitRef`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GitCommitRef {
    commit_id: String,
}

/// `GitRefUpdate`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GitRefUpdate {
    #[serde(default)]
    new_object_id: Option<String>,
}

/// `GitCommit`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GitCommit {
    tree_id: String,
    #[serde(default)]
    parents: Vec<String>,
}
