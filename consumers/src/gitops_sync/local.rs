//! The embedded adapter: the environment repository lives on the local Git
//! host, and each environment is a directory the reconciler keeps equal to
//! the environment's folder of a commit of that repository.
//!
//! - Writing a promotion: the tenant's repository named by the promotion
//!   (`DeploymentPromoted.environmentRepository`) is created on first use
//!   in the project folder [`ENVIRONMENTS_PROJECT`], then the manifest is
//!   committed onto `main` with the delivery layer's local commit writer
//!   ([`LocalCommitWriter`]): the same manifest on the same head is a
//!   no-op returning the head.
//! - Reconciling: the commit's files under `<environment>/` are
//!   materialized into `<environments root>/<tenant>/<environment>/`
//!   (written to a temporary file and renamed), files no longer in the tree
//!   are removed with their empty folders, and `.bosun-synced-commit` is
//!   written last with the commit id: it is what the environment reports.
//!   Applied resources are reported per app (`apps/<moduleId>/…`, kind
//!   `app`) and per other file (kind `file`): created, configured, pruned
//!   or unchanged. The environment is healthy when every
//!   `apps/*/release.json` is a JSON object.
//!
//! The runtime passes `<data dir>/git` as the Git root and
//! `<data dir>/environments` as the environments root. Reconciles of one
//! environment are serialised within the process.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};

use async_trait::async_trait;
use bosun_contracts::messages::{AppliedResource, GitIdentity, SyncAction};
use bosun_contracts::validate;
use time::OffsetDateTime;
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;

use super::port::{
    DesiredStateCommit, DesiredStateWrite, EnvironmentReport, Environments, GitOpsError, ReconcileRequest,
};
use crate::delivery::atomic_file;
use crate::delivery::git::commit::{
    CommitSpec, CommitWriter, DEFAULT_AUTHOR_EMAIL, DEFAULT_AUTHOR_NAME, FileWrite, LocalCommitWriter,
};
use crate::delivery::git::{LocalGitError, LocalGitHost, NewRepository, TreeEntries};

/// The project folder environment repositories are created in.
pub const ENVIRONMENTS_PROJECT: &str = "environments";

/// The branch holding the desired state.
pub const ENVIRONMENT_BRANCH: &str = "main";

/// The file in an environment directory naming the commit it runs.
pub const SYNCED_COMMIT_FILE: &str = ".bosun-synced-commit";

/// The local environment repositories and environment directories.
#[derive(Debug)]
pub struct LocalEnvironments {
    host: Arc<LocalGitHost>,
    environments_root: PathBuf,
    locks: StdMutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
}

impl From<LocalGitError> for GitOpsError {
    fn from(err: LocalGitError) -> Self {
        if err.is_invalid_input() {
            Self::Invalid(err.to_string())
        } else {
            Self::Unavailable(Box::new(err))
        }
    }
}

/// An I/O failure while `context` was being done: transient.
fn io_error(context: String) -> impl FnOnce(std::io::Error) -> GitOpsError {
    move |source| GitOpsError::Io { context, source }
}

impl LocalEnvironments {
    /// Environment repositories on the local Git host under `git_root`
    /// (the runtime passes `<data dir>/git`), environment directories under
    /// `environments_root` (the runtime passes `<data dir>/environments`).
    pub fn new(git_root: impl Into<PathBuf>, environments_root: impl Into<PathBuf>) -> Self {
        Self::with_host(Arc::new(LocalGitHost::new(git_root)), environments_root)
    }

    /// Shares a Git host with the other local adapters. Opening the
    /// environments removes the temporary files of writes a killed process
    /// never finished ([`atomic_file::remove_leftovers`]).
    pub fn with_host(host: Arc<LocalGitHost>, environments_root: impl Into<PathBuf>) -> Self {
        let root = environments_root.into();
        let environments_root = std::path::absolute(&root).unwrap_or(root);
        atomic_file::remove_leftovers(&environments_root);
        Self {
            host,
            environments_root,
            locks: StdMutex::new(HashMap::new()),
        }
    }

    /// The directory an environment is materialized in.
    pub fn environment_dir(&self, tenant: &str, environment: &str) -> PathBuf {
        self.environments_root.join(tenant).join(environment)
    }

    fn lock_for(&self, dir: &Path) -> Arc<Mutex<()>> {
        match self.locks.lock() {
            Ok(mut locks) => Arc::clone(locks.entry(dir.to_path_buf()).or_default()),
            Err(_) => Arc::new(Mutex::new(())),
        }
    }
}

/// Reads blobs with one `git cat-file --batch`.
async fn read_blobs(git_dir: &Path, oids: &[String]) -> Result<Vec<Vec<u8>>, GitOpsError> {
    if oids.is_empty() {
        return Ok(Vec::new());
    }
    let null_device = if cfg!(windows) { "NUL" } else { "/dev/null" };
    let mut command = tokio::process::Command::new("git");
    for var in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_CONFIG",
    ] {
        command.env_remove(var);
    }
    let mut child = command
        .env("GIT_DIR", git_dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", null_device)
        .env("LC_ALL", "C")
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(io_error("starting `git cat-file`".to_owned()))?;
    let mut input = oids.join("\n");
    input.push('\n');
    let stdin = child.stdin.take();
    let feed = async move {
        if let Some(mut stdin) = stdin {
            stdin.write_all(input.as_bytes()).await?;
            stdin.shutdown().await?;
        }
        Ok::<(), std::io::Error>(())
    };
    let (fed, output) = tokio::join!(feed, child.wait_with_output());
    let output = output.map_err(io_error("running `git cat-file`".to_owned()))?;
    fed.map_err(io_error("writing to `git cat-file`".to_owned()))?;
    if !output.status.success() {
        return Err(GitOpsError::Unavailable(
            format!(
                "`git cat-file` failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )
            .into(),
        ));
    }
    let bad = |reason: &str| GitOpsError::Unavailable(format!("`git cat-file --batch`: {reason}").into());
    let mut blobs = Vec::with_capacity(oids.len());
    let mut rest = output.stdout.as_slice();
    for _ in oids {
        let newline = rest
            .iter()
            .position(|b| *b == b'\n')
            .ok_or_else(|| bad("short output"))?;
        let header = std::str::from_utf8(&rest[..newline]).map_err(|_| bad("header is not UTF-8"))?;
        let mut fields = header.split(' ');
        let (Some(_oid), Some(kind), Some(size)) = (fields.next(), fields.next(), fields.next()) else {
            return Err(bad(&format!("unexpected header `{header}`")));
        };
        if kind != "blob" {
            return Err(bad(&format!("expected a blob, got `{header}`")));
        }
        let size: usize = size.parse().map_err(|_| bad("bad size"))?;
        let start = newline + 1;
        let end = start + size;
        if rest.len() < end + 1 {
            return Err(bad("short content"));
        }
        blobs.push(rest[start..end].to_vec());
        rest = &rest[end + 1..];
    }
    Ok(blobs)
}

/// Every file under `dir`, by `/`-separated relative path, leaving out the
/// synced-commit marker and temporary files.
async fn current_files(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>, GitOpsError> {
    let mut files = BTreeMap::new();
    let mut pending = vec![(dir.to_path_buf(), String::new())];
    while let Some((folder, prefix)) = pending.pop() {
        let mut entries = match tokio::fs::read_dir(&folder).await {
            Ok(entries) => entries,
            Err(err) if err.kind() == ErrorKind::NotFound => continue,
            Err(err) => return Err(io_error(format!("reading {}", folder.display()))(err)),
        };
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(io_error(format!("reading {}", folder.display())))?
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if (prefix.is_empty() && name == SYNCED_COMMIT_FILE) || name.starts_with(atomic_file::TEMPORARY_PREFIX) {
                continue;
            }
            let relative = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let file_type = entry
                .file_type()
                .await
                .map_err(io_error(format!("reading {}", entry.path().display())))?;
            if file_type.is_dir() {
                pending.push((entry.path(), relative));
            } else {
                let bytes = tokio::fs::read(entry.path())
                    .await
                    .map_err(io_error(format!("reading {}", entry.path().display())))?;
                files.insert(relative, bytes);
            }
        }
    }
    Ok(files)
}

/// Writes a file through a temporary file and a rename.
async fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), GitOpsError> {
    let parent = path
        .parent()
        .ok_or_else(|| GitOpsError::Invalid(format!("{} has no folder", path.display())))?;
    tokio::fs::create_dir_all(parent)
        .await
        .map_err(io_error(format!("creating {}", parent.display())))?;
    let temp = atomic_file::temporary_path(parent);
    tokio::fs::write(&temp, bytes)
        .await
        .map_err(io_error(format!("writing {}", temp.display())))?;
    tokio::fs::rename(&temp, path)
        .await
        .map_err(io_error(format!("renaming into {}", path.display())))
}

/// Removes a file and then its folders up to `root` while they are empty.
async fn remove_with_empty_folders(root: &Path, path: &Path) -> Result<(), GitOpsError> {
    match tokio::fs::remove_file(path).await {
        Ok(()) => {}
        Err(err) if err.kind() == ErrorKind::NotFound => {}
        Err(err) => return Err(io_error(format!("removing {}", path.display()))(err)),
    }
    let mut folder = path.parent();
    while let Some(dir) = folder {
        if dir == root || !dir.starts_with(root) {
            break;
        }
        // Fails (and stops) when the folder is not empty.
        if tokio::fs::remove_dir(dir).await.is_err() {
            break;
        }
        folder = dir.parent();
    }
    Ok(())
}

/// The resource a file belongs to: `(app, <moduleId>)` for
/// `apps/<moduleId>/…`, `(file, <path>)` otherwise.
fn resource_of(path: &str) -> (&'static str, String) {
    let mut parts = path.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("apps"), Some(module), Some(_)) => ("app", module.to_owned()),
        _ => ("file", path.to_owned()),
    }
}

/// What a sync did to each resource.
fn applied_resources(before: &BTreeMap<String, Vec<u8>>, after: &BTreeMap<String, Vec<u8>>) -> Vec<AppliedResource> {
    #[derive(Default)]
    struct Seen {
        before: bool,
        after: bool,
        changed: bool,
    }
    let mut resources: BTreeMap<(&'static str, String), Seen> = BTreeMap::new();
    for path in before.keys().chain(after.keys()).collect::<BTreeSet<_>>() {
        let seen = resources.entry(resource_of(path)).or_default();
        let old = before.get(path);
        let new = after.get(path);
        seen.before |= old.is_some();
        seen.after |= new.is_some();
        seen.changed |= old != new;
    }
    resources
        .into_iter()
        .map(|((kind, name), seen)| AppliedResource {
            kind: kind.to_owned(),
            // `GitOpsSynced` allows names of up to 253 characters.
            name: name.chars().take(253).collect(),
            namespace: None,
            action: match (seen.before, seen.after, seen.changed) {
                (false, true, _) => SyncAction::Created,
                (true, false, _) => SyncAction::Pruned,
                (_, _, true) => SyncAction::Configured,
                _ => SyncAction::Unchanged,
            },
        })
        .collect()
}

fn healthy(files: &BTreeMap<String, Vec<u8>>) -> bool {
    files
        .iter()
        .filter(|(path, _)| matches!(resource_of(path), ("app", _)) && path.ends_with("/release.json"))
        .all(|(_, bytes)| {
            matches!(
                serde_json::from_slice::<serde_json::Value>(bytes),
                Ok(serde_json::Value::Object(_))
            )
        })
}

#[async_trait]
impl Environments for LocalEnvironments {
    async fn write_desired_state(&self, write: &DesiredStateWrite) -> Result<DesiredStateCommit, GitOpsError> {
        validate::tenant_id("tenant", &write.tenant)?;
        validate::repository_name("repository", &write.repository)?;
        validate::repository_path("path", &write.path)?;
        self.host
            .find_or_create(NewRepository {
                tenant: &write.tenant,
                project: ENVIRONMENTS_PROJECT,
                name: &write.repository,
                default_branch: ENVIRONMENT_BRANCH,
                description: Some("bosun: the desired state of the tenant's environments"),
                minimum_reviewers: 0,
            })
            .await?;
        let writer = LocalCommitWriter::with_host(Arc::clone(&self.host));
        let result = writer
            .commit(&CommitSpec {
                tenant: write.tenant.clone(),
                repository: write.repository.clone(),
                branch: ENVIRONMENT_BRANCH.to_owned(),
                base_branch: None,
                message: write.message.clone(),
                author: GitIdentity {
                    name: DEFAULT_AUTHOR_NAME.to_owned(),
                    email: DEFAULT_AUTHOR_EMAIL.to_owned(),
                },
                date: write.date,
                files: vec![FileWrite {
                    path: write.path.clone(),
                    content: write.manifest.clone(),
                    executable: false,
                }],
                delete: vec![],
            })
            .await?;
        Ok(DesiredStateCommit {
            commit_sha: result.commit_sha,
            no_op: result.no_op,
        })
    }

    async fn reconcile(&self, request: &ReconcileRequest) -> Result<EnvironmentReport, GitOpsError> {
        validate::tenant_id("tenant", &request.tenant)?;
        validate::environment_name("environment", &request.environment)?;
        validate::repository_name("repository", &request.repository)?;
        if let Some(commit) = &request.commit_sha {
            validate::git_sha("commitSha", commit)?;
        }
        let dir = self.environment_dir(&request.tenant, &request.environment);
        let lock = self.lock_for(&dir);
        let _guard = lock.lock().await;

        let repository = self.host.find(&request.tenant, &request.repository).await?;
        let commit = match (&repository, &request.commit_sha) {
            (None, Some(_)) => {
                return Err(GitOpsError::RepositoryNotFound {
                    repository: request.repository.clone(),
                });
            }
            (None, None) => None,
            (Some(repository), Some(commit)) => {
                let found = repository.git().resolve_commit(commit).await?;
                if found.as_deref() != Some(commit.as_str()) {
                    return Err(GitOpsError::CommitNotFound { commit: commit.clone() });
                }
                Some(commit.clone())
            }
            (Some(repository), None) => {
                repository
                    .git()
                    .resolve_commit(&format!("refs/heads/{ENVIRONMENT_BRANCH}"))
                    .await?
            }
        };

        let before = current_files(&dir).await?;
        let Some(commit) = commit else {
            // Nothing desired anywhere: report what runs, change nothing.
            let marker = match tokio::fs::read_to_string(dir.join(SYNCED_COMMIT_FILE)).await {
                Ok(text) => Some(text.trim().to_owned()).filter(|c| validate::git_sha("c", c).is_ok()),
                Err(_) => None,
            };
            return Ok(EnvironmentReport {
                commit_sha: marker,
                applied: Vec::new(),
                healthy: healthy(&before),
                observed_at: OffsetDateTime::now_utc(),
            });
        };
        let Some(repository) = repository else {
            return Err(GitOpsError::RepositoryNotFound {
                repository: request.repository.clone(),
            });
        };

        let git = repository.git();
        let prefix = format!("{}/", request.environment);
        let entries: TreeEntries = git
            .tree_entries(&commit)
            .await?
            .into_iter()
            .filter_map(|(path, entry)| path.strip_prefix(&prefix).map(|rest| (rest.to_owned(), entry)))
            .filter(|(_, entry)| entry.mode.starts_with("100"))
            .collect();
        for path in entries.keys() {
            validate::repository_path("path", path)?;
        }
        let oids: Vec<String> = entries.values().map(|entry| entry.oid.clone()).collect();
        let blobs = read_blobs(&repository.path, &oids).await?;
        let after: BTreeMap<String, Vec<u8>> = entries.into_keys().zip(blobs).collect();

        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(io_error(format!("creating {}", dir.display())))?;
        for (path, bytes) in &after {
            if before.get(path) != Some(bytes) {
                write_atomically(&dir.join(path), bytes).await?;
            }
        }
        for path in before.keys().filter(|path| !after.contains_key(*path)) {
            remove_with_empty_folders(&dir, &dir.join(path)).await?;
        }
        write_atomically(&dir.join(SYNCED_COMMIT_FILE), format!("{commit}\n").as_bytes()).await?;

        let reported = tokio::fs::read_to_string(dir.join(SYNCED_COMMIT_FILE))
            .await
            .map_err(io_error(format!("reading {}", dir.join(SYNCED_COMMIT_FILE).display())))?;
        Ok(EnvironmentReport {
            commit_sha: Some(reported.trim().to_owned()),
            applied: applied_resources(&before, &after),
            healthy: healthy(&after),
            observed_at: OffsetDateTime::now_utc(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(entries: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        entries
            .iter()
            .map(|(path, content)| ((*path).to_owned(), content.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn resources_are_grouped_per_app_and_file() {
        let before = files(&[
            ("apps/a/release.json", "{}"),
            ("apps/b/release.json", "{}"),
            ("apps/c/release.json", "{}"),
            ("README.md", "x"),
        ]);
        let after = files(&[
            ("apps/a/release.json", "{}"),
            ("apps/b/release.json", "{\"v\":2}"),
            ("apps/d/release.json", "{}"),
            ("README.md", "x"),
        ]);
        let applied: Vec<(String, String, SyncAction)> = applied_resources(&before, &after)
            .into_iter()
            .map(|r| (r.kind, r.name, r.action))
            .collect();
        assert_eq!(
            applied,
            vec![
                ("app".into(), "a".into(), SyncAction::Unchanged),
                ("app".into(), "b".into(), SyncAction::Configured),
                ("app".into(), "c".into(), SyncAction::Pruned),
                ("app".into(), "d".into(), SyncAction::Created),
                ("file".into(), "README.md".into(), SyncAction::Unchanged),
            ]
        );
        assert!(healthy(&after));
        assert!(!healthy(&files(&[("apps/a/release.json", "not json")])));
    }
}
