//! The `git` CLI's plumbing against one bare repository, isolated from the
//! caller's environment and configuration.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use bosun_contracts::validate;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::LocalGitError;

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

    pub(super) fn success(self, command: &str) -> Result<Vec<u8>, LocalGitError> {
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
    pub(super) async fn run(
        &self,
        args: &[&str],
        input: Option<&[u8]>,
        env: &[(&str, &OsStr)],
    ) -> Result<Vec<u8>, LocalGitError> {
        let command = args.first().copied().unwrap_or("git");
        self.output(args, input, env).await?.success(command)
    }

    /// Runs a command and returns its stdout as trimmed text.
    pub(crate) async fn run_text(
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

    /// The bytes of a file at a commit; `None` when the commit has no file
    /// (blob) at that path.
    pub async fn read_file_at(&self, commit: &str, path: &str) -> Result<Option<Vec<u8>>, LocalGitError> {
        validate::git_sha("commit", commit)?;
        validate::repository_path("path", path)?;
        let listing = self
            .run(
                &["ls-tree", "-z", "--full-tree", "--end-of-options", commit, "--", path],
                None,
                &[],
            )
            .await?;
        let Some(entry) = listing.split(|b| *b == 0).find(|entry| !entry.is_empty()) else {
            return Ok(None);
        };
        let entry = String::from_utf8_lossy(entry);
        let mut fields = entry.split(['\t', ' ']);
        let (Some(_mode), Some(kind), Some(oid)) = (fields.next(), fields.next(), fields.next()) else {
            return Err(LocalGitError::UnexpectedOutput {
                command: "ls-tree".to_owned(),
                reason: "entry has fewer than three fields".to_owned(),
            });
        };
        if kind != "blob" {
            return Ok(None);
        }
        self.run(&["cat-file", "blob", oid], None, &[]).await.map(Some)
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

/// A `git` command against the bare repository at `git_dir`, with the same
/// isolation as [`Git`]'s, for callers that pass it paths or stream its
/// output themselves (a checkout's `git archive`).
pub(crate) fn command(git_dir: &Path) -> Command {
    let mut cmd = base_command();
    cmd.env("GIT_DIR", git_dir);
    cmd
}

/// A `git` command isolated from the caller's environment and configuration.
pub(super) fn base_command() -> Command {
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

pub(super) async fn execute(mut cmd: Command, command: &str, input: Option<&[u8]>) -> Result<GitOutput, LocalGitError> {
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
