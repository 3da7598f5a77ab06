//! Where the Pulumi engine's program comes from ([`ProgramSource`]).
//!
//! - **A folder** ([`ProgramSource::Folder`], `BOSUN_PULUMI_PROGRAM_DIR`):
//!   a program already on this machine (baked into the image, a mounted
//!   volume). Used as it is, for every request.
//! - **Git** ([`ProgramSource::Git`]): for each plan, the program is
//!   fetched into a folder of its own under the engine's work folder
//!   (`<work>/programs/<tenant>.<planId>`), the CLI runs there, and the
//!   folder is removed afterwards (and before, should a killed process have
//!   left one). Which repository and commit:
//!   1. the configured repository ([`GitProgram::repository`],
//!      `BOSUN_PULUMI_PROGRAM_REPOSITORY`) at its configured ref
//!      (`BOSUN_PULUMI_PROGRAM_REF`, default `main`), when one is set: one
//!      repository holds the programs of every module;
//!   2. otherwise the module's own repository at the release's commit, as
//!      the request names them (`ReleaseApproved.repository` and
//!      `commitSha`, carried from the release's build; the same fields of
//!      `ProvisionInfrastructure`).
//!
//!   In both, the program is the folder [`GitProgram::path`] of that
//!   commit (`BOSUN_PULUMI_PROGRAM_PATH`, default [`DEFAULT_PROGRAM_PATH`]).
//!   A commit without that folder, or whose folder holds no `Pulumi.yaml`,
//!   is a permanent error naming repository, commit and path
//!   ([`IacError::ProgramNotFound`]); a failed fetch is transient.
//!
//! The fetch drives the `git` CLI through the isolated runner of the local
//! Git host ([`Git`]): a bare repository in the plan's folder,
//! `git fetch --depth 1 --no-tags <url> <commit or ref>`, then
//! `git read-tree --reset -u <commit>:<path>` into the program folder. The
//! Azure DevOps credential goes to git as `http.<url>.extraHeader` through
//! `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_0`/`GIT_CONFIG_VALUE_0` in the
//! child's environment: never on a command line, never logged, and only
//! for URLs under the Azure DevOps organization (a configured repository
//! elsewhere is fetched without it).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_contracts::validate;

use super::port::{IacError, ProgramCommit, ProvisionRequest};
use crate::delivery::azure::devops::{AzureDevOpsAuth, TENANT_VARIABLE};
use crate::delivery::git::{Git, LocalGitError};

/// The default folder of the Pulumi program inside a repository.
pub const DEFAULT_PROGRAM_PATH: &str = "infra";

/// The default ref of a configured program repository.
pub const DEFAULT_PROGRAM_REF: &str = "main";

/// Where the Pulumi program comes from: see the module documentation.
#[derive(Debug, Clone)]
pub enum ProgramSource {
    /// A folder on this machine holding `Pulumi.yaml`, used for every
    /// request.
    Folder(PathBuf),
    /// Fetched from Git for each plan.
    Git(GitProgram),
}

/// How repository names become fetch URLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepositoryUrls {
    /// Azure Repos: `<organization>/<tenant's project>/_git/<repository>`,
    /// each segment percent-encoded; `project` may hold `{tenant}`.
    AzureRepos {
        /// `https://dev.azure.com/<organization>`.
        organization_url: String,
        /// The project, or a template with `{tenant}`.
        project: String,
    },
    /// A template with `{repository}` (and optionally `{tenant}`), e.g.
    /// `file:///srv/git/{tenant}/{repository}.git`.
    Template(String),
}

impl RepositoryUrls {
    /// The URL of `tenant`'s repository `repository`.
    pub fn url(&self, tenant: &str, repository: &str) -> Result<String, IacError> {
        match self {
            Self::AzureRepos {
                organization_url,
                project,
            } => {
                let mut url = reqwest::Url::parse(organization_url.trim())
                    .map_err(|err| IacError::Invalid(format!("organization URL `{organization_url}`: {err}")))?;
                let project = project.replace(TENANT_VARIABLE, tenant);
                url.path_segments_mut()
                    .map_err(|()| IacError::Invalid(format!("`{organization_url}` cannot hold a path")))?
                    .pop_if_empty()
                    .extend([project.as_str(), "_git", repository]);
                Ok(url.to_string())
            }
            Self::Template(template) => Ok(template
                .replace(TENANT_VARIABLE, tenant)
                .replace("{repository}", repository)),
        }
    }
}

/// A configured repository holding the programs (`BOSUN_PULUMI_PROGRAM_REPOSITORY`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredRepository {
    /// A repository name (in the tenant's Azure DevOps project) or a full
    /// Git URL (`https://…`, `file://…`; `{tenant}` is replaced).
    pub repository: String,
    /// The branch, tag or commit fetched.
    pub reference: String,
}

/// Fetching the program from Git. `Debug` never shows the credential.
#[derive(Debug, Clone)]
pub struct GitProgram {
    /// How a repository name becomes a URL.
    pub urls: RepositoryUrls,
    /// The configured repository; when `None`, the request's.
    pub repository: Option<ConfiguredRepository>,
    /// The program's folder inside the repository (`.` for its root).
    pub path: String,
    /// The credential, sent only to URLs starting with
    /// [`Self::credential_scope`].
    pub auth: Option<AzureDevOpsAuth>,
    /// The URL prefix the credential is sent to (the organization URL).
    pub credential_scope: String,
}

impl GitProgram {
    /// The module's own repository at the request's commit, program under
    /// `path`, no credential.
    pub fn new(urls: RepositoryUrls, path: impl Into<String>) -> Self {
        Self {
            urls,
            repository: None,
            path: path.into(),
            auth: None,
            credential_scope: String::new(),
        }
    }

    /// Checks the path: relative, `/`-separated, no `..`; `.` or empty is
    /// the repository's root.
    pub fn check(&self) -> Result<(), IacError> {
        let path = self.path.trim_matches('/');
        if path.is_empty() || path == "." {
            return Ok(());
        }
        validate::repository_path("BOSUN_PULUMI_PROGRAM_PATH", path).map_err(IacError::from)
    }

    /// Fetches the program for `request` into `<work_dir>/programs/…`.
    pub async fn checkout(
        &self,
        request: &ProvisionRequest,
        work_dir: &Path,
        timeout: Duration,
    ) -> Result<Checkout, IacError> {
        let (url, shown, wanted) = match (&self.repository, &request.program) {
            (Some(configured), _) => {
                let (url, shown) = if configured.repository.contains("://") {
                    let url = configured.repository.replace(TENANT_VARIABLE, &request.tenant);
                    (url.clone(), without_password(&url))
                } else {
                    let url = self.urls.url(&request.tenant, &configured.repository)?;
                    (url, configured.repository.clone())
                };
                (url, shown, configured.reference.clone())
            }
            (None, Some(ProgramCommit { repository, commit_sha })) => (
                self.urls.url(&request.tenant, repository)?,
                repository.clone(),
                commit_sha.clone(),
            ),
            (None, None) => return Err(IacError::ProgramNotConfigured),
        };
        let root = work_dir
            .join("programs")
            .join(format!("{}.{}", request.tenant, request.plan_id));
        let checkout = Checkout::fresh(root).await?;
        let git = Git::new(checkout.root.join("repository.git"));
        let fetching = |err: LocalGitError| {
            IacError::Unavailable(format!("fetching the Pulumi program from `{shown}` at `{wanted}`: {err}").into())
        };
        git.run_text(&["init", "--quiet", "--bare"], None, &[])
            .await
            .map_err(fetching)?;

        let header = match &self.auth {
            Some(auth) if !self.credential_scope.is_empty() && url.starts_with(&self.credential_scope) => Some(
                auth.authorization()
                    .await
                    .map_err(|err| IacError::Unavailable(Box::new(err)))?,
            ),
            _ => None,
        };
        let key = format!("http.{url}.extraHeader");
        let value = header.map(|header| format!("Authorization: {header}"));
        let mut env: Vec<(&str, &OsStr)> = Vec::new();
        if let Some(value) = &value {
            env.extend([
                ("GIT_CONFIG_COUNT", OsStr::new("1")),
                ("GIT_CONFIG_KEY_0", OsStr::new(&key)),
                ("GIT_CONFIG_VALUE_0", OsStr::new(value)),
            ]);
        }
        tracing::info!(repository = %shown, reference = %wanted, path = %self.path, "fetching the Pulumi program");
        tokio::time::timeout(
            timeout,
            git.run_text(
                &[
                    "fetch",
                    "--quiet",
                    "--depth",
                    "1",
                    "--no-tags",
                    "--end-of-options",
                    &url,
                    &wanted,
                ],
                None,
                &env,
            ),
        )
        .await
        .map_err(|_| {
            IacError::Unavailable(
                format!("fetching the Pulumi program from `{shown}` at `{wanted}` did not finish within {timeout:?}")
                    .into(),
            )
        })?
        .map_err(fetching)?;
        let commit = git
            .run_text(&["rev-parse", "--verify", "FETCH_HEAD^{commit}"], None, &[])
            .await
            .map_err(fetching)?;

        let path = self.path.trim_matches('/');
        let tree = if path.is_empty() || path == "." {
            format!("{commit}^{{tree}}")
        } else {
            let listing = git
                .run_text(&["ls-tree", "-d", &commit, "--", path], None, &[])
                .await
                .map_err(fetching)?;
            if !listing.contains(" tree ") {
                return Err(IacError::ProgramNotFound {
                    repository: shown,
                    commit,
                    path: path.to_owned(),
                });
            }
            format!("{commit}:{path}")
        };
        let program = checkout.program();
        tokio::fs::create_dir_all(&program)
            .await
            .map_err(|source| IacError::Io {
                context: format!("creating {}", program.display()),
                source,
            })?;
        let index = checkout.root.join("index");
        git.run_text(
            &["read-tree", "--reset", "-u", &tree],
            None,
            &[
                ("GIT_WORK_TREE", program.as_os_str()),
                ("GIT_INDEX_FILE", index.as_os_str()),
            ],
        )
        .await
        .map_err(fetching)?;
        if !["Pulumi.yaml", "Pulumi.yml"]
            .iter()
            .any(|name| program.join(name).is_file())
        {
            return Err(IacError::ProgramNotFound {
                repository: shown,
                commit,
                path: if path.is_empty() {
                    ".".to_owned()
                } else {
                    path.to_owned()
                },
            });
        }
        tracing::info!(repository = %shown, %commit, path = %self.path, "fetched the Pulumi program");
        Ok(checkout)
    }
}

/// A URL as it may be shown: without a password in it.
fn without_password(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("redacted"));
            parsed.to_string()
        }
        Ok(_) => url.to_owned(),
        Err(_) => "the configured repository URL".to_owned(),
    }
}

/// A plan's program folder, removed when dropped.
#[derive(Debug)]
pub struct Checkout {
    root: PathBuf,
}

/// The plan folders in use in this process: a second delivery of a plan
/// still running here waits rather than empty the folder under it.
static IN_USE: std::sync::Mutex<BTreeSet<PathBuf>> = std::sync::Mutex::new(BTreeSet::new());

fn in_use() -> std::sync::MutexGuard<'static, BTreeSet<PathBuf>> {
    IN_USE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Checkout {
    /// An empty folder at `root` (anything left there by a process that
    /// stopped is removed first). Throttled while this process uses it.
    async fn fresh(root: PathBuf) -> Result<Self, IacError> {
        if !in_use().insert(root.clone()) {
            return Err(IacError::Throttled {
                after: Duration::from_secs(30),
                source: format!(
                    "the plan's program folder {} is in use by a provisioning still running",
                    root.display()
                )
                .into(),
            });
        }
        // From here on, dropping the checkout releases the folder.
        let checkout = Self { root };
        let root = &checkout.root;
        let io = |context: String| move |source| IacError::Io { context, source };
        match tokio::fs::remove_dir_all(&root).await {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(io(format!("removing {}", root.display()))(err)),
        }
        tokio::fs::create_dir_all(&root)
            .await
            .map_err(io(format!("creating {}", root.display())))?;
        Ok(checkout)
    }

    /// The folder holding the program (`Pulumi.yaml`): where the CLI runs.
    pub fn program(&self) -> PathBuf {
        self.root.join("program")
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        match std::fs::remove_dir_all(&self.root) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::warn!(folder = %self.root.display(), error = %err, "could not remove the Pulumi program's folder");
            }
        }
        in_use().remove(&self.root);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[tokio::test]
    async fn a_plan_folder_in_use_is_not_emptied_under_its_provisioning() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("contoso.plan-1");
        let first = Checkout::fresh(root.clone()).await.unwrap();
        std::fs::write(root.join("marker"), "").unwrap();
        let err = Checkout::fresh(root.clone()).await.unwrap_err();
        assert!(matches!(err, IacError::Throttled { .. }), "{err}");
        assert!(
            root.join("marker").exists(),
            "the running provisioning keeps its folder"
        );
        drop(first);
        assert!(!root.exists());
        let again = Checkout::fresh(root.clone()).await.unwrap();
        assert!(root.is_dir());
        drop(again);
    }
}
