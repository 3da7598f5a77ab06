//! The local Git host: bare repositories on disk, found by tenant and
//! name, created through a staging folder (see [`super::staging`]).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use bosun_contracts::validate;
use tokio::sync::Mutex;
use uuid::Uuid;

use super::LocalGitError;
use super::plumbing::{Git, base_command, execute};
use super::staging::{self, Staging};
use crate::delivery::atomic_file;

/// Namespace of the UUID v5 repository ids (`bosun.id`).
const REPOSITORY_ID_NAMESPACE: Uuid = Uuid::from_u128(0x5b0f_3c1e_8d7a_4e52_9c61_b05a_7e2d_4f10);

/// A bare repository of the local Git host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalRepository {
    /// Stable id (`bosun.id` in the repository's config).
    pub id: String,
    /// Tenant owning it.
    pub tenant: String,
    /// Project folder it lives in.
    pub project: String,
    /// Repository name.
    pub name: String,
    /// The branch `HEAD` points at (the default branch).
    pub default_branch: String,
    /// The bare repository's directory.
    pub path: PathBuf,
}

impl LocalRepository {
    /// The clone URL: a `file://` URL of the bare repository.
    pub fn url(&self) -> String {
        file_url(&self.path)
    }

    /// A git runner for this repository.
    pub fn git(&self) -> Git {
        Git::new(&self.path)
    }
}

/// What to create when a repository does not exist yet.
#[derive(Debug, Clone, Copy)]
pub struct NewRepository<'a> {
    /// Tenant owning it (a path component: validated as a tenant id).
    pub tenant: &'a str,
    /// Project folder (validated as an identifier).
    pub project: &'a str,
    /// Repository name (validated with the Azure DevOps naming rules).
    pub name: &'a str,
    /// Branch `HEAD` points at.
    pub default_branch: &'a str,
    /// Written to the repository's `description` file.
    pub description: Option<&'a str>,
    /// Recorded as `bosun.minimumReviewers` (the local pull-request consumer
    /// reads it).
    pub minimum_reviewers: u32,
}

/// Bare Git repositories on disk, under `<root>/<tenant>/<project>/<name>.git`.
#[derive(Debug)]
pub struct LocalGitHost {
    root: PathBuf,
    /// Serialises provisioning inside this process, so that the tenant-wide
    /// "one repository per name" check and the creation are one step.
    /// Across processes, the rename into place is atomic per project.
    provisioning: Mutex<()>,
}

impl LocalGitHost {
    /// A host keeping its repositories under `root` (created on first use).
    /// The runtime passes `<data dir>/git`. A relative root is made absolute
    /// against the current directory now, so clone URLs are absolute.
    ///
    /// Opening the host is the start-up of the Git host in this process: it
    /// removes what provisionings interrupted by a killed process left in
    /// the staging folders ([`staging::remove_leftovers`]; a staging folder
    /// an unfinished provisioning still uses, in this process or another,
    /// is left alone) and the temporary files of record writes that were
    /// never renamed into place ([`atomic_file::remove_leftovers`]: pull
    /// request records).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let root = std::path::absolute(&root).unwrap_or(root);
        staging::remove_leftovers(&root);
        atomic_file::remove_leftovers(&root);
        Self {
            root,
            provisioning: Mutex::new(()),
        }
    }

    /// The directory holding the tenants' repositories.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Finds a tenant's repository by name, in whichever project folder it
    /// lives. `None` when the tenant has no repository of that name.
    pub async fn find(&self, tenant: &str, name: &str) -> Result<Option<LocalRepository>, LocalGitError> {
        validate::tenant_id("tenant", tenant)?;
        validate::repository_name("repository", name)?;
        let tenant_dir = self.root.join(tenant);
        let mut projects = match tokio::fs::read_dir(&tenant_dir).await {
            Ok(entries) => entries,
            Err(err) if err.kind() == ErrorKind::NotFound => return Ok(None),
            Err(err) => {
                return Err(LocalGitError::io(format!("reading {}", tenant_dir.display()), err));
            }
        };
        let mut candidates = Vec::new();
        while let Some(entry) = projects
            .next_entry()
            .await
            .map_err(|err| LocalGitError::io(format!("reading {}", tenant_dir.display()), err))?
        {
            let Some(project) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if project.starts_with('.') {
                continue;
            }
            let path = entry.path().join(format!("{name}.git"));
            if tokio::fs::metadata(path.join("HEAD")).await.is_ok() {
                candidates.push((project, path));
            }
        }
        candidates.sort();
        if candidates.len() > 1 {
            tracing::warn!(
                tenant,
                repository = name,
                projects = candidates.len(),
                "repository name found in several project folders; using the first"
            );
        }
        match candidates.into_iter().next() {
            Some((project, path)) => Ok(Some(open(path, tenant, &project, name).await?)),
            None => Ok(None),
        }
    }

    /// Returns the tenant's repository of this name, creating it when it
    /// does not exist; the flag says whether this call created it.
    ///
    /// An existing repository is returned as it is (its project, default
    /// branch and settings are not changed). Concurrent calls for the same
    /// name create one repository: the repository is initialised in a
    /// staging folder and renamed into place, and a caller that loses the
    /// race returns the winner's repository.
    pub async fn find_or_create(&self, spec: NewRepository<'_>) -> Result<(LocalRepository, bool), LocalGitError> {
        validate::tenant_id("tenant", spec.tenant)?;
        validate::identifier("project", spec.project)?;
        validate::repository_name("name", spec.name)?;
        validate::branch_name("defaultBranch", spec.default_branch)?;
        let default_branch = short_branch(spec.default_branch);

        let _guard = self.provisioning.lock().await;
        if let Some(existing) = self.find(spec.tenant, spec.name).await? {
            return Ok((existing, false));
        }

        let tenant_dir = self.root.join(spec.tenant);
        let project_dir = tenant_dir.join(spec.project);
        tokio::fs::create_dir_all(&project_dir)
            .await
            .map_err(|err| LocalGitError::io(format!("creating {}", project_dir.display()), err))?;
        let staging = Staging::create(&tenant_dir).await?;
        let staged = staging.path().join(format!("{}.git", spec.name));
        init_bare(&staged, default_branch).await?;

        let id = repository_id(spec.tenant, spec.project, spec.name);
        let git = Git::new(&staged);
        let minimum_reviewers = spec.minimum_reviewers.to_string();
        for (key, value) in [
            ("bosun.id", id.as_str()),
            ("bosun.tenant", spec.tenant),
            ("bosun.project", spec.project),
            ("bosun.name", spec.name),
            ("bosun.minimumReviewers", minimum_reviewers.as_str()),
            ("core.logAllRefUpdates", "true"),
        ] {
            git.run(&["config", "--local", key, value], None, &[]).await?;
        }
        if let Some(description) = spec.description {
            let path = staged.join("description");
            tokio::fs::write(&path, format!("{}\n", description.trim_end()))
                .await
                .map_err(|err| LocalGitError::io(format!("writing {}", path.display()), err))?;
        }

        let target = project_dir.join(format!("{}.git", spec.name));
        match tokio::fs::rename(&staged, &target).await {
            Ok(()) => {
                let repository = open(target, spec.tenant, spec.project, spec.name).await?;
                Ok((repository, true))
            }
            // Another process won the race for this project folder.
            Err(err) if tokio::fs::metadata(target.join("HEAD")).await.is_ok() => {
                tracing::debug!(tenant = spec.tenant, repository = spec.name, error = %err, "repository created concurrently");
                let repository = open(target, spec.tenant, spec.project, spec.name).await?;
                Ok((repository, false))
            }
            Err(err) => Err(LocalGitError::io(
                format!("moving the new repository to {}", target.display()),
                err,
            )),
        }
    }
}

/// The stable id of a repository: a UUID v5 of `tenant/project/name`.
pub fn repository_id(tenant: &str, project: &str, name: &str) -> String {
    Uuid::new_v5(
        &REPOSITORY_ID_NAMESPACE,
        format!("{tenant}/{project}/{name}").as_bytes(),
    )
    .to_string()
}

/// A branch name without its `refs/heads/` prefix.
pub fn short_branch(branch: &str) -> &str {
    branch.strip_prefix("refs/heads/").unwrap_or(branch)
}

/// Reads an existing bare repository's metadata.
async fn open(path: PathBuf, tenant: &str, project: &str, name: &str) -> Result<LocalRepository, LocalGitError> {
    let git = Git::new(&path);
    let config = git.bosun_config().await?;
    let id = config
        .get("bosun.id")
        .cloned()
        .unwrap_or_else(|| repository_id(tenant, project, name));
    let head = git.run_text(&["symbolic-ref", "-q", "HEAD"], None, &[]).await?;
    let default_branch = short_branch(&head).to_owned();
    Ok(LocalRepository {
        id,
        tenant: tenant.to_owned(),
        project: project.to_owned(),
        name: name.to_owned(),
        default_branch,
        path,
    })
}

/// `git init --bare` into `path` with `HEAD` on `default_branch`.
async fn init_bare(path: &Path, default_branch: &str) -> Result<(), LocalGitError> {
    let mut cmd = base_command();
    cmd.arg("-c")
        .arg(format!("init.defaultBranch={default_branch}"))
        .args(["init", "--bare", "--quiet"])
        .arg(path);
    execute(cmd, "init", None)
        .await
        .and_then(|output| output.success("init"))?;
    Ok(())
}

/// A `file://` URL for a path, percent-encoding what a URL path cannot hold.
pub(crate) fn file_url(path: &Path) -> String {
    let text = path.to_string_lossy();
    let mut url = String::from("file://");
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            url.push(char::from(byte));
        } else {
            url.push_str(&format!("%{byte:02X}"));
        }
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_urls_are_percent_encoded() {
        assert_eq!(
            file_url(Path::new("/data/git/a b/r.git")),
            "file:///data/git/a%20b/r.git"
        );
    }

    #[test]
    fn repository_ids_are_stable_and_distinct() {
        assert_eq!(repository_id("t", "p", "r"), repository_id("t", "p", "r"));
        assert_ne!(repository_id("t", "p", "r"), repository_id("t", "p", "s"));
    }

    #[tokio::test]
    async fn invalid_tenant_is_rejected_before_touching_disk() {
        let dir = tempfile::tempdir().unwrap();
        let host = LocalGitHost::new(dir.path());
        let err = host.find("../escape", "repo").await.unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
    }
}
