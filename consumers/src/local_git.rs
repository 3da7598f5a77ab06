//! The embedded Git host shared by the local adapters of the Git consumers
//! (`repository_provisioning::local`, `commit::local`).
//!
//! Bare repositories live under `<root>/<tenant>/<project>/<name>.git`; the
//! runtime passes `<data dir>/git` as the root. A repository is found by its
//! natural key, tenant + name, whatever project folder it sits in.
//!
//! All Git work goes through the `git` CLI's plumbing (`hash-object`,
//! `update-index --index-info` on a throw-away index, `write-tree`,
//! `commit-tree`, `update-ref` with compare-and-swap), never a work tree and
//! never libgit2, to keep the build lean. Every command runs with
//! `GIT_DIR` set explicitly, without system or global configuration
//! (`GIT_CONFIG_NOSYSTEM=1`, `GIT_CONFIG_GLOBAL` pointed at the null
//! device), without `HOME`-dependent behaviour, with literal pathspecs and
//! the C locale, so the same input gives the same objects on any machine.
//!
//! A repository's configuration holds bosun's metadata: `bosun.id` (a UUID v5
//! of tenant/project/name, stable across data-dir rebuilds), `bosun.tenant`,
//! `bosun.project`, `bosun.name` and `bosun.minimumReviewers`.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use bosun_contracts::validate::{self, FieldError};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::Mutex;
use uuid::Uuid;

/// Namespace of the UUID v5 repository ids (`bosun.id`).
const REPOSITORY_ID_NAMESPACE: Uuid = Uuid::from_u128(0x5b0f_3c1e_8d7a_4e52_9c61_b05a_7e2d_4f10);

/// Folder under a tenant's directory where new repositories are initialised
/// before being renamed into place (never a project: projects start with a
/// letter or digit).
const STAGING_DIR: &str = ".staging";

/// Environment variables that would redirect git away from the repository
/// we name, removed from every command.
const INHERITED_GIT_VARS: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_COMMON_DIR",
    "GIT_CEILING_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_COMMITTER_DATE",
];

/// Longest stderr excerpt kept in an error.
const MAX_STDERR: usize = 2000;

/// Why the local Git host failed.
#[derive(Debug, thiserror::Error)]
pub enum LocalGitError {
    /// The `git` executable could not be started (not installed, no
    /// resources). Retrying may help once the machine is fixed.
    #[error("could not run `git {command}`: {source}")]
    Spawn {
        /// The git subcommand.
        command: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A git command exited with an error.
    #[error("`git {command}` failed ({status}): {stderr}")]
    Command {
        /// The git subcommand.
        command: String,
        /// Its exit status.
        status: String,
        /// What it wrote to stderr (trimmed, shortened).
        stderr: String,
    },
    /// git printed something we could not read.
    #[error("unexpected output from `git {command}`: {reason}")]
    UnexpectedOutput {
        /// The git subcommand.
        command: String,
        /// What was wrong.
        reason: String,
    },
    /// A file-system operation on the repository root failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A tenant, project, repository, branch or path is not acceptable as a
    /// path or ref component. Retrying cannot help.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// Which input.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl LocalGitError {
    /// Whether the error comes from the input (retrying cannot help) rather
    /// than from the machine.
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, Self::Invalid { .. })
    }

    fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<FieldError> for LocalGitError {
    fn from(err: FieldError) -> Self {
        Self::Invalid {
            field: err.field,
            reason: err.reason,
        }
    }
}

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
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let root = std::path::absolute(&root).unwrap_or(root);
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
        let staging_root = tenant_dir.join(STAGING_DIR);
        let project_dir = tenant_dir.join(spec.project);
        for dir in [&staging_root, &project_dir] {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|err| LocalGitError::io(format!("creating {}", dir.display()), err))?;
        }
        let staging = tempfile::Builder::new()
            .prefix("init-")
            .tempdir_in(&staging_root)
            .map_err(|err| LocalGitError::io(format!("creating a folder in {}", staging_root.display()), err))?;
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
fn file_url(path: &Path) -> String {
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

/// One entry of a commit's tree, as `git ls-tree -r` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    /// Git file mode: `100644`, `100755`, `120000` (symlink), `160000`
    /// (submodule).
    pub mode: String,
    /// Object id of the blob (or commit, for a submodule).
    pub oid: String,
}

/// The files of a tree, by path.
pub type TreeEntries = BTreeMap<String, TreeEntry>;

/// What `git update-ref` with an expected old value did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefUpdate {
    /// The ref now points at the new commit.
    Updated,
    /// The ref was not where we expected (another writer moved it); nothing
    /// was changed.
    Moved,
}

/// Captured output of one git command, for commands whose exit code means
/// something (`merge-base --is-ancestor`, `merge-tree`).
#[derive(Debug)]
pub struct GitOutput {
    /// How git exited.
    pub status: std::process::ExitStatus,
    /// What it printed.
    pub stdout: Vec<u8>,
    /// What it complained about.
    pub stderr: Vec<u8>,
}

impl GitOutput {
    /// The error for a failed `command`, with a bounded stderr excerpt.
    pub fn error(&self, command: &str) -> LocalGitError {
        self.failure(command)
    }

    /// Stdout as trimmed UTF-8 text.
    pub fn text(&self, command: &str) -> Result<String, LocalGitError> {
        String::from_utf8(self.stdout.clone())
            .map(|text| text.trim().to_owned())
            .map_err(|_| LocalGitError::UnexpectedOutput {
                command: command.to_owned(),
                reason: "not UTF-8".to_owned(),
            })
    }

    fn success(self, command: &str) -> Result<Vec<u8>, LocalGitError> {
        if self.status.success() {
            Ok(self.stdout)
        } else {
            Err(self.failure(command))
        }
    }

    fn failure(&self, command: &str) -> LocalGitError {
        let stderr = String::from_utf8_lossy(&self.stderr);
        let mut stderr = stderr.trim().to_owned();
        if stderr.len() > MAX_STDERR {
            let mut cut = MAX_STDERR;
            while !stderr.is_char_boundary(cut) {
                cut -= 1;
            }
            stderr.truncate(cut);
            stderr.push('…');
        }
        LocalGitError::Command {
            command: command.to_owned(),
            status: self.status.to_string(),
            stderr,
        }
    }
}

/// Runs git plumbing commands against one bare repository.
#[derive(Debug, Clone)]
pub struct Git {
    git_dir: PathBuf,
}

impl Git {
    /// A runner for the bare repository at `git_dir`.
    pub fn new(git_dir: impl Into<PathBuf>) -> Self {
        Self {
            git_dir: git_dir.into(),
        }
    }

    /// Runs any git command against the repository with bosun's isolation
    /// (no inherited `GIT_*` variables, no system or global configuration,
    /// the C locale, literal pathspecs) and returns its output whatever the
    /// exit code; for adapters that need plumbing beyond this type's methods.
    pub async fn output(
        &self,
        args: &[&str],
        input: Option<&[u8]>,
        env: &[(&str, &OsStr)],
    ) -> Result<GitOutput, LocalGitError> {
        let mut cmd = base_command();
        cmd.env("GIT_DIR", &self.git_dir).args(args);
        for (key, value) in env {
            cmd.env(key, value);
        }
        execute(cmd, args.first().copied().unwrap_or("git"), input).await
    }

    /// Runs a command and returns its stdout; a non-zero exit is an error.
    async fn run(&self, args: &[&str], input: Option<&[u8]>, env: &[(&str, &OsStr)]) -> Result<Vec<u8>, LocalGitError> {
        let command = args.first().copied().unwrap_or("git");
        self.output(args, input, env).await?.success(command)
    }

    /// Runs a command and returns its stdout as trimmed text.
    async fn run_text(
        &self,
        args: &[&str],
        input: Option<&[u8]>,
        env: &[(&str, &OsStr)],
    ) -> Result<String, LocalGitError> {
        let command = args.first().copied().unwrap_or("git");
        let stdout = self.run(args, input, env).await?;
        let text = String::from_utf8(stdout).map_err(|_| LocalGitError::UnexpectedOutput {
            command: command.to_owned(),
            reason: "not UTF-8".to_owned(),
        })?;
        Ok(text.trim().to_owned())
    }

    /// bosun's keys in the repository's config (`bosun.*`, lowercased keys
    /// as git reports them, e.g. `bosun.minimumreviewers`).
    pub async fn bosun_config(&self) -> Result<BTreeMap<String, String>, LocalGitError> {
        let output = self
            .output(&["config", "--local", "-z", "--get-regexp", r"^bosun\."], None, &[])
            .await?;
        // Exit code 1: no key matched.
        if output.status.code() == Some(1) {
            return Ok(BTreeMap::new());
        }
        let stdout = output.success("config")?;
        let text = String::from_utf8_lossy(&stdout);
        Ok(text
            .split('\0')
            .filter(|record| !record.is_empty())
            .map(|record| match record.split_once('\n') {
                Some((key, value)) => (key.to_owned(), value.to_owned()),
                None => (record.to_owned(), String::new()),
            })
            .collect())
    }

    /// Writes a blob and returns its object id.
    pub async fn write_blob(&self, content: &[u8]) -> Result<String, LocalGitError> {
        let oid = self
            .run_text(&["hash-object", "-w", "-t", "blob", "--stdin"], Some(content), &[])
            .await?;
        check_oid("hash-object", &oid)?;
        Ok(oid)
    }

    /// The commit a ref (`refs/heads/main`) points at, `None` when it does
    /// not exist.
    pub async fn resolve_commit(&self, refname: &str) -> Result<Option<String>, LocalGitError> {
        let spec = format!("{refname}^{{commit}}");
        let output = self
            .output(
                &["rev-parse", "--verify", "--quiet", "--end-of-options", &spec],
                None,
                &[],
            )
            .await?;
        if !output.status.success() && output.stderr.is_empty() {
            return Ok(None);
        }
        let stdout = output.success("rev-parse")?;
        let oid = String::from_utf8_lossy(&stdout).trim().to_owned();
        check_oid("rev-parse", &oid)?;
        Ok(Some(oid))
    }

    /// Whether the repository has any branch at all.
    pub async fn has_branches(&self) -> Result<bool, LocalGitError> {
        let listing = self
            .run(
                &["for-each-ref", "--count=1", "--format=%(refname)", "refs/heads/"],
                None,
                &[],
            )
            .await?;
        Ok(!listing.iter().all(u8::is_ascii_whitespace))
    }

    /// The tree of a commit.
    pub async fn tree_of(&self, commit: &str) -> Result<String, LocalGitError> {
        let oid = self
            .run_text(
                &[
                    "rev-parse",
                    "--verify",
                    "--end-of-options",
                    &format!("{commit}^{{tree}}"),
                ],
                None,
                &[],
            )
            .await?;
        check_oid("rev-parse", &oid)?;
        Ok(oid)
    }

    /// The first parent of a commit, `None` for a root commit.
    pub async fn first_parent(&self, commit: &str) -> Result<Option<String>, LocalGitError> {
        let listing = self
            .run_text(
                &["rev-list", "--parents", "-n", "1", "--end-of-options", commit],
                None,
                &[],
            )
            .await?;
        Ok(listing.split_whitespace().nth(1).map(str::to_owned))
    }

    /// Every file of a commit's tree, recursively, by path.
    pub async fn tree_entries(&self, commit: &str) -> Result<TreeEntries, LocalGitError> {
        let stdout = self
            .run(
                &["ls-tree", "-r", "-z", "--full-tree", "--end-of-options", commit],
                None,
                &[],
            )
            .await?;
        let mut entries = TreeEntries::new();
        for record in stdout.split(|b| *b == 0).filter(|record| !record.is_empty()) {
            let bad = |reason: &str| LocalGitError::UnexpectedOutput {
                command: "ls-tree".to_owned(),
                reason: reason.to_owned(),
            };
            let tab = record.iter().position(|b| *b == b'\t').ok_or_else(|| bad("no tab"))?;
            let (meta, path) = (&record[..tab], &record[tab + 1..]);
            let meta = std::str::from_utf8(meta).map_err(|_| bad("entry is not UTF-8"))?;
            let path = std::str::from_utf8(path).map_err(|_| bad("a path is not UTF-8"))?;
            let mut fields = meta.split(' ');
            let (Some(mode), Some(_kind), Some(oid)) = (fields.next(), fields.next(), fields.next()) else {
                return Err(bad("entry has fewer than three fields"));
            };
            entries.insert(
                path.to_owned(),
                TreeEntry {
                    mode: mode.to_owned(),
                    oid: oid.to_owned(),
                },
            );
        }
        Ok(entries)
    }

    /// Writes the tree holding exactly these files (nested directories
    /// included) and returns its id. Uses a throw-away index file, never
    /// the repository's own index.
    pub async fn write_tree(&self, entries: &TreeEntries) -> Result<String, LocalGitError> {
        let scratch = tempfile::Builder::new()
            .prefix("bosun-index-")
            .tempdir()
            .map_err(|err| LocalGitError::io("creating a temporary index folder", err))?;
        let index = scratch.path().join("index");
        let env = [("GIT_INDEX_FILE", index.as_os_str())];
        let mut listing = Vec::new();
        for (path, entry) in entries {
            listing.extend_from_slice(format!("{} {}\t{path}", entry.mode, entry.oid).as_bytes());
            listing.push(0);
        }
        if !listing.is_empty() {
            self.run(&["update-index", "-z", "--index-info"], Some(&listing), &env)
                .await?;
        }
        let oid = self.run_text(&["write-tree"], None, &env).await?;
        check_oid("write-tree", &oid)?;
        Ok(oid)
    }

    /// Writes a commit object and returns its id. `date` is a git date
    /// (`@<unix seconds> +0000`) used for author and committer alike, so the
    /// same input gives the same commit.
    pub async fn commit_tree(
        &self,
        tree: &str,
        parent: Option<&str>,
        message: &str,
        author: &Identity<'_>,
        date: &str,
    ) -> Result<String, LocalGitError> {
        let mut args = vec!["commit-tree", tree];
        if let Some(parent) = parent {
            args.extend(["-p", parent]);
        }
        args.extend(["-F", "-"]);
        let mut message = message.to_owned();
        if !message.ends_with('\n') {
            message.push('\n');
        }
        let env = [
            ("GIT_AUTHOR_NAME", OsStr::new(author.name)),
            ("GIT_AUTHOR_EMAIL", OsStr::new(author.email)),
            ("GIT_AUTHOR_DATE", OsStr::new(date)),
            ("GIT_COMMITTER_NAME", OsStr::new(author.name)),
            ("GIT_COMMITTER_EMAIL", OsStr::new(author.email)),
            ("GIT_COMMITTER_DATE", OsStr::new(date)),
        ];
        let oid = self.run_text(&args, Some(message.as_bytes()), &env).await?;
        check_oid("commit-tree", &oid)?;
        Ok(oid)
    }

    /// Moves `refname` to `new` only if it is at `old` (`None`: only if it
    /// does not exist yet). Another writer having moved it is reported as
    /// [`RefUpdate::Moved`], not as an error.
    pub async fn update_ref(&self, refname: &str, new: &str, old: Option<&str>) -> Result<RefUpdate, LocalGitError> {
        let zero = "0".repeat(new.len());
        let expected = old.unwrap_or(&zero);
        let output = self
            .output(&["update-ref", "-m", "bosun commit", refname, new, expected], None, &[])
            .await?;
        if output.status.success() {
            return Ok(RefUpdate::Updated);
        }
        // Tell a lost compare-and-swap from a real failure by looking again.
        let now = self.resolve_commit(refname).await?;
        if now.as_deref() != old {
            return Ok(RefUpdate::Moved);
        }
        Err(output.failure("update-ref"))
    }
}

/// Who a commit is attributed to (author and committer).
#[derive(Debug, Clone, Copy)]
pub struct Identity<'a> {
    /// Display name.
    pub name: &'a str,
    /// E-mail address.
    pub email: &'a str,
}

/// Checks that git printed a full object id.
pub(crate) fn check_oid(command: &str, oid: &str) -> Result<(), LocalGitError> {
    if validate::git_sha("oid", oid).is_ok() {
        Ok(())
    } else {
        Err(LocalGitError::UnexpectedOutput {
            command: command.to_owned(),
            reason: format!("`{oid}` is not an object id"),
        })
    }
}

/// A `git` command isolated from the caller's environment and configuration.
fn base_command() -> Command {
    let mut cmd = Command::new("git");
    for var in INHERITED_GIT_VARS {
        cmd.env_remove(var);
    }
    let null_device = if cfg!(windows) { "NUL" } else { "/dev/null" };
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", null_device)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_LITERAL_PATHSPECS", "1")
        .env("LC_ALL", "C")
        .env("LANGUAGE", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

async fn execute(mut cmd: Command, command: &str, input: Option<&[u8]>) -> Result<GitOutput, LocalGitError> {
    if input.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let spawn_error = |source| LocalGitError::Spawn {
        command: command.to_owned(),
        source,
    };
    let mut child = cmd.spawn().map_err(spawn_error)?;
    let stdin = child.stdin.take();
    let feed = async move {
        if let (Some(mut stdin), Some(input)) = (stdin, input) {
            stdin.write_all(input).await?;
            stdin.shutdown().await?;
        }
        Ok::<(), std::io::Error>(())
    };
    let (fed, output) = tokio::join!(feed, child.wait_with_output());
    let output = output.map_err(spawn_error)?;
    let output = GitOutput {
        status: output.status,
        stdout: output.stdout,
        stderr: output.stderr,
    };
    // A write error (broken pipe) means git exited early: its status and
    // stderr say why.
    if let Err(err) = fed
        && output.status.success()
    {
        return Err(LocalGitError::io(format!("writing to `git {command}`"), err));
    }
    Ok(output)
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
