//! What the Azure DevOps double keeps: projects, Git repositories with
//! their commits and refs, pull requests, policy configurations, pipelines
//! and their runs (builds, timelines, logs, test runs).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::objects::{ObjectError, Objects};
use super::script::{PipelineScript, RunScript};

/// The id of a commit or a ref that does not exist.
pub(crate) const ZERO_ID: &str = "0000000000000000000000000000000000000000";

/// The identity every write is made by (the PAT's owner).
pub(crate) const USER_ID: &str = "5a0a2f1e-0d2f-4c53-9d0e-6f0b1b8e7d11";

/// The identity as an `IdentityRef`.
pub(crate) fn identity() -> Value {
    json!({
        "id": USER_ID,
        "displayName": "Bosun Service",
        "uniqueName": "bosun@contoso.example",
        "descriptor": "aad.NWEwYTJmMWUtMGQyZi00YzUzLTlkMGUtNmYwYjFiOGU3ZDEx",
    })
}

/// A 40-hex id of `parts` (SHA-256 cut to Git's SHA-1 length) for what is
/// not a Git object of the repository (items' object ids, merge ids);
/// commits and trees have Git's own ids ([`Objects`]).
pub(crate) fn object_id(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    let digest = hasher.finalize();
    digest.iter().take(20).map(|byte| format!("{byte:02x}")).collect()
}

/// A team project.
#[derive(Debug, Clone)]
pub(crate) struct Project {
    pub(crate) id: String,
    pub(crate) name: String,
}

/// A commit: its whole tree (path → bytes) is kept with it; `id` and
/// `tree_id` are the Git objects' ids in the repository's [`Objects`].
#[derive(Debug, Clone)]
pub(crate) struct Commit {
    pub(crate) id: String,
    pub(crate) tree_id: String,
    pub(crate) parents: Vec<String>,
    pub(crate) comment: String,
    pub(crate) author: Value,
    pub(crate) committer: Value,
    pub(crate) files: BTreeMap<String, Vec<u8>>,
}

/// A Git repository.
#[derive(Debug, Clone)]
pub(crate) struct Repository {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) project_id: String,
    pub(crate) default_branch: Option<String>,
    pub(crate) commits: BTreeMap<String, Commit>,
    /// `refs/heads/main` → commit id.
    pub(crate) refs: BTreeMap<String, String>,
    pub(crate) pushes: u64,
    /// The bare repository holding every commit, whose refs follow `refs`.
    pub(crate) objects: Objects,
}

impl Repository {
    /// Points ref `name` at commit `id` (deletes it for `None`), in `refs`
    /// and in the bare repository; the first branch set becomes the
    /// default branch (and the bare repository's `HEAD`).
    pub(crate) fn set_ref(&mut self, name: &str, id: Option<&str>) -> Result<(), ObjectError> {
        let default_branch = match &self.default_branch {
            None if id.is_some() && name.starts_with("refs/heads/") => Some(name.to_owned()),
            _ => None,
        };
        self.objects.set_ref(name, id, default_branch.as_deref())?;
        match id {
            Some(id) => {
                self.refs.insert(name.to_owned(), id.to_owned());
            }
            None => {
                self.refs.remove(name);
            }
        }
        if default_branch.is_some() {
            self.default_branch = default_branch;
        }
        Ok(())
    }
}

/// A pull request.
#[derive(Debug, Clone)]
pub(crate) struct PullRequest {
    pub(crate) id: u64,
    pub(crate) repository_id: String,
    pub(crate) source: String,
    pub(crate) target: String,
    pub(crate) title: String,
    pub(crate) description: String,
    /// `active`, `completed` or `abandoned`.
    pub(crate) status: String,
    pub(crate) created: String,
    pub(crate) auto_complete_set_by: Option<Value>,
    pub(crate) completion_options: Option<Value>,
    pub(crate) last_merge_source_commit: Option<String>,
    pub(crate) last_merge_target_commit: Option<String>,
    pub(crate) last_merge_commit: Option<String>,
    pub(crate) statuses: Vec<Value>,
}

/// A policy configuration.
#[derive(Debug, Clone)]
pub(crate) struct PolicyConfiguration {
    pub(crate) id: u64,
    pub(crate) project_id: String,
    pub(crate) body: Value,
}

/// A pipeline (a YAML build definition).
#[derive(Debug, Clone)]
pub(crate) struct Pipeline {
    pub(crate) id: u64,
    pub(crate) project_id: String,
    pub(crate) name: String,
    pub(crate) folder: String,
    pub(crate) yaml_path: String,
    pub(crate) repository_id: String,
}

/// A run of a pipeline, which is also a build of the same id.
#[derive(Debug, Clone)]
pub(crate) struct Build {
    pub(crate) id: u64,
    pub(crate) project_id: String,
    pub(crate) pipeline_id: u64,
    pub(crate) source_branch: String,
    pub(crate) source_version: String,
    pub(crate) queue_time: String,
    pub(crate) start_time: String,
    pub(crate) finish_time: Option<String>,
    /// What the test's script said about this run.
    pub(crate) script: RunScript,
    /// Whether the run has finished (`completed`).
    pub(crate) completed: bool,
}

/// A test run published for a build.
#[derive(Debug, Clone)]
pub(crate) struct TestRun {
    pub(crate) id: u64,
    pub(crate) project_id: String,
    pub(crate) build_id: u64,
    pub(crate) name: String,
    pub(crate) results: Vec<super::script::ScriptedTest>,
    pub(crate) completed_date: String,
}

/// Everything the double holds.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) organization: String,
    pub(crate) base_url: String,
    /// Where the repositories' bare Git repositories are made (a directory
    /// the [`super::DevOpsDouble`] owns and removes).
    pub(crate) git_root: PathBuf,
    pub(crate) projects: Vec<Project>,
    pub(crate) repositories: Vec<Repository>,
    pub(crate) pull_requests: Vec<PullRequest>,
    pub(crate) policies: Vec<PolicyConfiguration>,
    /// Policy evaluation status by (pull request id, configuration id),
    /// when a test set one; otherwise `queued`.
    pub(crate) evaluation_status: BTreeMap<(u64, u64), String>,
    pub(crate) pipelines: Vec<Pipeline>,
    pub(crate) builds: Vec<Build>,
    pub(crate) test_runs: Vec<TestRun>,
    pub(crate) next_id: u64,
    pub(crate) script: Option<Arc<PipelineScript>>,
}

impl State {
    /// A fresh number for pull requests, policies, pipelines, builds and
    /// test runs (one counter, as ids only need to be unique).
    pub(crate) fn next(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// `{base}/{organization}`.
    pub(crate) fn org_url(&self) -> String {
        format!("{}/{}", self.base_url, self.organization)
    }

    /// A project by name (ignoring case) or id.
    pub(crate) fn project(&self, name_or_id: &str) -> Option<&Project> {
        self.projects
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name_or_id) || p.id.eq_ignore_ascii_case(name_or_id))
    }

    /// A `TeamProjectReference`.
    pub(crate) fn project_json(&self, project: &Project) -> Value {
        json!({
            "id": project.id,
            "name": project.name,
            "url": format!("{}/_apis/projects/{}", self.org_url(), project.id),
            "state": "wellFormed",
            "revision": 1,
            "visibility": "private",
            "lastUpdateTime": "2026-01-01T00:00:00Z",
        })
    }

    /// A repository of `project_id` by name (ignoring case) or id.
    pub(crate) fn repository_index(&self, project_id: &str, name_or_id: &str) -> Option<usize> {
        self.repositories.iter().position(|r| {
            r.project_id == project_id
                && (r.name.eq_ignore_ascii_case(name_or_id) || r.id.eq_ignore_ascii_case(name_or_id))
        })
    }

    /// A `GitRepository`.
    pub(crate) fn repository_json(&self, repository: &Repository) -> Value {
        let project = self
            .projects
            .iter()
            .find(|p| p.id == repository.project_id)
            .map(|p| self.project_json(p))
            .unwrap_or(Value::Null);
        let project_name = project["name"].as_str().unwrap_or_default().to_owned();
        let org = self.org_url();
        let mut value = json!({
            "id": repository.id,
            "name": repository.name,
            "url": format!("{org}/{}/_apis/git/repositories/{}", repository.project_id, repository.id),
            "project": project,
            "size": 0,
            "remoteUrl": format!("{org}/{project_name}/_git/{}", repository.name),
            "sshUrl": format!("git@ssh.dev.azure.com:v3/{}/{project_name}/{}", self.organization, repository.name),
            "webUrl": format!("{org}/{project_name}/_git/{}", repository.name),
            "isDisabled": false,
            "isInMaintenance": false,
        });
        if let Some(branch) = &repository.default_branch {
            value["defaultBranch"] = json!(branch);
        }
        value
    }
}
