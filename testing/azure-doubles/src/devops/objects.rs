//! The Git objects behind the double's repositories: one bare repository
//! per double repository, in a directory the double owns, written with
//! Git's plumbing (`hash-object`, `mktree`, `commit-tree`, `update-ref`),
//! so commit and tree ids are Git's own SHA-1s and `git upload-pack` can
//! serve them ([`super::smart`]).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The name and email a commit is made by when the push names none.
const DEFAULT_NAME: &str = "Bosun Service";
const DEFAULT_EMAIL: &str = "bosun@contoso.example";

/// Why the double could not write to a repository's Git objects; the
/// request that needed them is answered an error and changes nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ObjectError {
    /// `git` could not be started (not installed?).
    #[error("the Azure DevOps double could not run `git {command}`: {source}")]
    Spawn {
        /// The git subcommand.
        command: String,
        /// Why.
        source: std::io::Error,
    },
    /// `git` ran and failed.
    #[error("`git {command}` failed in the Azure DevOps double ({status}): {stderr}")]
    Failed {
        /// The git subcommand.
        command: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it said.
        stderr: String,
    },
    /// A path cannot be a Git tree entry (an empty, `.` or `..` part, or a
    /// file where another file needs a folder).
    #[error("the item path '{path}' cannot be written as a Git tree: {reason}")]
    InvalidPath {
        /// The item's path.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl ObjectError {
    /// Whether the request, not the double, is at fault.
    pub(crate) fn is_bad_request(&self) -> bool {
        matches!(self, Self::InvalidPath { .. })
    }
}

/// A `git` command on the bare repository at `git_dir`, with neither the
/// user's nor the system's configuration.
pub(crate) fn command(git_dir: &Path) -> Command {
    let mut command = Command::new("git");
    command
        .env("GIT_DIR", git_dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_OBJECT_DIRECTORY")
        .env_remove("GIT_ALTERNATE_OBJECT_DIRECTORIES")
        .env_remove("GIT_CONFIG_COUNT")
        .env_remove("GIT_CONFIG_PARAMETERS");
    command
}

/// Runs `git args` in `git_dir` with `input` on stdin; its stdout, trimmed.
fn run(git_dir: &Path, args: &[&str], env: &[(&str, String)], input: &[u8]) -> Result<String, ObjectError> {
    let name = args.join(" ");
    let mut command = command(git_dir);
    command
        .args(args)
        .envs(env.iter().map(|(key, value)| (*key, value.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let spawn = |source| ObjectError::Spawn {
        command: name.clone(),
        source,
    };
    let mut child = command.spawn().map_err(spawn)?;
    // These commands read all of stdin before writing, so writing first
    // cannot block on a full stdout pipe.
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input).map_err(spawn)?;
    }
    let output = child.wait_with_output().map_err(spawn)?;
    if !output.status.success() {
        return Err(ObjectError::Failed {
            command: name,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Makes an empty bare repository at `git_dir` that serves any commit it
/// holds by id (as Azure Repos lets `git fetch <url> <commit>` do).
pub(crate) fn init(git_dir: &Path) -> Result<(), ObjectError> {
    let path = git_dir.to_string_lossy().into_owned();
    run(git_dir, &["init", "--quiet", "--bare", &path], &[], b"")?;
    for key in ["uploadpack.allowReachableSHA1InWant", "uploadpack.allowAnySHA1InWant"] {
        run(git_dir, &["config", key, "true"], &[], b"")?;
    }
    Ok(())
}

/// One bare repository's objects, with the blobs already written (by the
/// SHA-256 of their bytes) so a push only hashes the files it changed.
#[derive(Debug, Clone)]
pub(crate) struct Objects {
    dir: std::path::PathBuf,
    blobs: BTreeMap<[u8; 32], String>,
}

/// A folder being written: its files' blob ids and its sub-folders.
#[derive(Default)]
struct Folder {
    files: BTreeMap<String, String>,
    folders: BTreeMap<String, Folder>,
}

impl Objects {
    /// The objects of the bare repository at `dir` (made by [`init`]).
    pub(crate) fn new(dir: std::path::PathBuf) -> Self {
        Self {
            dir,
            blobs: BTreeMap::new(),
        }
    }

    /// The bare repository's directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn blob(&mut self, bytes: &[u8]) -> Result<String, ObjectError> {
        let key: [u8; 32] = Sha256::digest(bytes).into();
        if let Some(id) = self.blobs.get(&key) {
            return Ok(id.clone());
        }
        let id = run(&self.dir, &["hash-object", "-w", "--stdin"], &[], bytes)?;
        self.blobs.insert(key, id.clone());
        Ok(id)
    }

    /// Writes `files` (`/folder/name` → bytes) as blobs and nested trees;
    /// the root tree's id.
    pub(crate) fn tree(&mut self, files: &BTreeMap<String, Vec<u8>>) -> Result<String, ObjectError> {
        let mut root = Folder::default();
        for (path, bytes) in files {
            let invalid = |reason| ObjectError::InvalidPath {
                path: path.clone(),
                reason,
            };
            let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            if parts
                .iter()
                .any(|p| p.is_empty() || *p == "." || *p == ".." || p.contains('\0'))
            {
                return Err(invalid("a part of it is empty, `.` or `..`"));
            }
            let Some((name, folders)) = parts.split_last() else {
                return Err(invalid("it names no file"));
            };
            let mut folder = &mut root;
            for part in folders {
                if folder.files.contains_key(*part) {
                    return Err(invalid("a file of the same name is where its folder would be"));
                }
                folder = folder.folders.entry((*part).to_owned()).or_default();
            }
            if folder.folders.contains_key(*name) {
                return Err(invalid("a folder of the same name holds other files"));
            }
            let id = self.blob(bytes)?;
            folder.files.insert((*name).to_owned(), id);
        }
        self.write_folder(&root)
    }

    fn write_folder(&self, folder: &Folder) -> Result<String, ObjectError> {
        let mut listing = Vec::new();
        for (name, sub) in &folder.folders {
            let id = self.write_folder(sub)?;
            listing.extend_from_slice(format!("040000 tree {id}\t{name}\0").as_bytes());
        }
        for (name, id) in &folder.files {
            listing.extend_from_slice(format!("100644 blob {id}\t{name}\0").as_bytes());
        }
        run(&self.dir, &["mktree", "-z"], &[], &listing)
    }

    /// Writes a commit of `tree` with `parents`; its id. `author` and
    /// `committer` are `GitUserDate`s (`name`, `email`, RFC 3339 `date`),
    /// `fallback_date` used when one has no readable date.
    pub(crate) fn commit(
        &self,
        tree: &str,
        parents: &[String],
        comment: &str,
        author: &Value,
        committer: &Value,
        fallback_date: OffsetDateTime,
    ) -> Result<String, ObjectError> {
        let mut args = vec!["commit-tree", tree];
        for parent in parents {
            args.extend(["-p", parent.as_str()]);
        }
        let mut env = Vec::new();
        for (who, role) in [(author, "AUTHOR"), (committer, "COMMITTER")] {
            let (name, email, date) = signature(who, fallback_date);
            env.push((
                if role == "AUTHOR" {
                    "GIT_AUTHOR_NAME"
                } else {
                    "GIT_COMMITTER_NAME"
                },
                name,
            ));
            env.push((
                if role == "AUTHOR" {
                    "GIT_AUTHOR_EMAIL"
                } else {
                    "GIT_COMMITTER_EMAIL"
                },
                email,
            ));
            env.push((
                if role == "AUTHOR" {
                    "GIT_AUTHOR_DATE"
                } else {
                    "GIT_COMMITTER_DATE"
                },
                date,
            ));
        }
        run(&self.dir, &args, &env, comment.as_bytes())
    }

    /// Points `name` at `id`, or deletes it when `id` is `None`; `head`
    /// (the default branch) becomes the bare repository's `HEAD`.
    pub(crate) fn set_ref(&self, name: &str, id: Option<&str>, head: Option<&str>) -> Result<(), ObjectError> {
        match id {
            Some(id) => run(&self.dir, &["update-ref", name, id], &[], b"")?,
            None => run(&self.dir, &["update-ref", "-d", name], &[], b"")?,
        };
        if let Some(head) = head {
            run(&self.dir, &["symbolic-ref", "HEAD", head], &[], b"")?;
        }
        Ok(())
    }
}

/// A `GitUserDate`'s name, email and date as Git's environment takes them
/// (`<unix seconds> <+hhmm>`).
fn signature(who: &Value, fallback_date: OffsetDateTime) -> (String, String, String) {
    let text = |key: &str, default: &str| {
        who[key]
            .as_str()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .unwrap_or(default)
            .to_owned()
    };
    let date = who["date"]
        .as_str()
        .and_then(|date| OffsetDateTime::parse(date, &Rfc3339).ok())
        .unwrap_or(fallback_date);
    let offset = date.offset();
    let (hours, minutes, _) = offset.as_hms();
    let sign = if offset.is_negative() { '-' } else { '+' };
    let date = format!(
        "{} {sign}{:02}{:02}",
        date.unix_timestamp(),
        hours.unsigned_abs(),
        minutes.unsigned_abs()
    );
    (text("name", DEFAULT_NAME), text("email", DEFAULT_EMAIL), date)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_has_git_s_own_ids() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let git_dir = dir.path().join("r.git");
        init(&git_dir).expect("git init");
        let mut objects = Objects::new(git_dir);
        let mut files = BTreeMap::new();
        files.insert("/hello.txt".to_owned(), b"hello\n".to_vec());
        files.insert("/infra/Pulumi.yaml".to_owned(), b"name: x\n".to_vec());
        let tree = objects.tree(&files).expect("tree");
        // `git hash-object` of "hello\n" is Git's well-known ce01362...
        let listing = run(objects.dir(), &["ls-tree", "-r", &tree], &[], b"").expect("ls-tree");
        assert!(
            listing.contains("ce013625030ba8dba906f756967f9e9ca394464a\thello.txt"),
            "{listing}"
        );
        assert!(listing.contains("\tinfra/Pulumi.yaml"), "{listing}");
        let who = serde_json::json!({ "name": "A", "email": "a@example.com", "date": "2026-01-02T03:04:05Z" });
        let at = OffsetDateTime::UNIX_EPOCH;
        let first = objects.commit(&tree, &[], "one", &who, &who, at).expect("commit");
        let again = objects.commit(&tree, &[], "one", &who, &who, at).expect("commit");
        assert_eq!(first, again, "the same commit has the same id");
        let shown = run(objects.dir(), &["cat-file", "-p", &first], &[], b"").expect("cat-file");
        assert!(shown.contains("author A <a@example.com> 1767323045 +0000"), "{shown}");
        objects
            .set_ref("refs/heads/main", Some(&first), Some("refs/heads/main"))
            .expect("update-ref");
        let head = run(objects.dir(), &["rev-parse", "HEAD"], &[], b"").expect("rev-parse");
        assert_eq!(head, first);
    }

    #[test]
    fn a_file_where_a_folder_is_needed_is_refused() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let git_dir = dir.path().join("r.git");
        init(&git_dir).expect("git init");
        let mut objects = Objects::new(git_dir);
        let mut files = BTreeMap::new();
        files.insert("/a".to_owned(), b"x".to_vec());
        files.insert("/a/b".to_owned(), b"y".to_vec());
        let err = objects.tree(&files).expect_err("a is both a file and a folder");
        assert!(err.is_bad_request(), "{err}");
    }
}
