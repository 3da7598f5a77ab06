//! The git plumbing merging needs beyond [`Git`]'s: `merge-tree`,
//! ancestry checks, two-parent commits, blobs at a commit.

use std::ffi::OsStr;
use std::path::Path;

use bosun_contracts::validate;

use crate::delivery::git::commit::{DEFAULT_AUTHOR_EMAIL, DEFAULT_AUTHOR_NAME};
use crate::delivery::git::{Git, GitOutput, LocalGitError, check_oid};

/// What `git merge-tree --write-tree` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum MergeTree {
    /// The branches merge cleanly into this tree.
    Clean {
        /// The merged tree.
        tree: String,
    },
    /// The branches conflict in these paths.
    Conflicts {
        /// Conflicting paths.
        paths: Vec<String>,
    },
    /// The branches share no history.
    Unrelated,
}

/// The git commands this adapter needs beyond [`Git`]'s (merge-tree,
/// ancestry, two-parent commits), run through [`Git::output`] with the same
/// isolation.
pub(super) struct GitCli {
    pub(super) git: Git,
}

impl GitCli {
    pub(super) fn new(git_dir: &Path) -> Self {
        Self { git: Git::new(git_dir) }
    }

    pub(super) async fn output(
        &self,
        args: &[&str],
        input: Option<&[u8]>,
        env: &[(&str, &OsStr)],
    ) -> Result<GitOutput, LocalGitError> {
        self.git.output(args, input, env).await
    }

    pub(super) async fn run(
        &self,
        args: &[&str],
        input: Option<&[u8]>,
        env: &[(&str, &OsStr)],
    ) -> Result<String, LocalGitError> {
        let command = args.first().copied().unwrap_or("git");
        let output = self.output(args, input, env).await?;
        if !output.status.success() {
            return Err(output.error(command));
        }
        output.text(command)
    }

    /// The subject line of a commit.
    pub(super) async fn subject(&self, commit: &str) -> Result<String, LocalGitError> {
        self.run(&["log", "-1", "--format=%s", "--end-of-options", commit], None, &[])
            .await
    }

    /// Points `refname` at `commit`, whatever it pointed at before.
    pub(super) async fn set_ref(&self, refname: &str, commit: &str) -> Result<(), LocalGitError> {
        self.run(&["update-ref", "-m", "bosun pull request", refname, commit], None, &[])
            .await
            .map(drop)
    }

    /// Whether `ancestor` is reachable from `descendant`.
    pub(super) async fn is_ancestor(&self, ancestor: &str, descendant: &str) -> Result<bool, LocalGitError> {
        let output = self
            .output(&["merge-base", "--is-ancestor", ancestor, descendant], None, &[])
            .await?;
        match output.status.code() {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(output.error("merge-base")),
        }
    }

    /// The oldest commit of the target's first-parent history that contains
    /// `head` (the merge that brought it in), or `head` itself when the
    /// target fast-forwarded to it.
    pub(super) async fn first_containing(
        &self,
        head: &str,
        target_head: &str,
        target: &str,
    ) -> Result<String, LocalGitError> {
        let range = format!("{head}..{target_head}");
        let listing = self
            .run(
                &[
                    "rev-list",
                    "--first-parent",
                    "--ancestry-path",
                    "--reverse",
                    &range,
                    "--",
                ],
                None,
                &[],
            )
            .await?;
        let commit = listing.lines().next().unwrap_or(head).trim().to_owned();
        check_oid("rev-list", &commit)?;
        tracing::debug!(head, target, merge = %commit, "pull request head already in the target");
        Ok(commit)
    }

    /// Merges `head` into `base` without touching any ref.
    pub(super) async fn merge_tree(&self, base: &str, head: &str) -> Result<MergeTree, LocalGitError> {
        let output = self
            .output(
                &[
                    "merge-tree",
                    "--write-tree",
                    "--name-only",
                    "--no-messages",
                    "-z",
                    base,
                    head,
                ],
                None,
                &[],
            )
            .await?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        if stderr.contains("unrelated histories") {
            return Ok(MergeTree::Unrelated);
        }
        let mut fields = output.stdout.split(|b| *b == 0).filter(|field| !field.is_empty());
        let tree = fields
            .next()
            .map(|tree| String::from_utf8_lossy(tree).trim().to_owned())
            .unwrap_or_default();
        match output.status.code() {
            Some(0) => {
                check_oid("merge-tree", &tree)?;
                Ok(MergeTree::Clean { tree })
            }
            Some(1) if validate::git_sha("tree", &tree).is_ok() => {
                let mut paths: Vec<String> = fields.map(|path| String::from_utf8_lossy(path).into_owned()).collect();
                paths.dedup();
                Ok(MergeTree::Conflicts { paths })
            }
            _ => Err(output.error("merge-tree")),
        }
    }

    /// Writes a merge commit of `tree` with parents `base` and `head`.
    pub(super) async fn commit_merge(
        &self,
        tree: &str,
        base: &str,
        head: &str,
        message: &str,
        date: &str,
    ) -> Result<String, LocalGitError> {
        let mut message = message.to_owned();
        if !message.ends_with('\n') {
            message.push('\n');
        }
        let env = [
            ("GIT_AUTHOR_NAME", OsStr::new(DEFAULT_AUTHOR_NAME)),
            ("GIT_AUTHOR_EMAIL", OsStr::new(DEFAULT_AUTHOR_EMAIL)),
            ("GIT_AUTHOR_DATE", OsStr::new(date)),
            ("GIT_COMMITTER_NAME", OsStr::new(DEFAULT_AUTHOR_NAME)),
            ("GIT_COMMITTER_EMAIL", OsStr::new(DEFAULT_AUTHOR_EMAIL)),
            ("GIT_COMMITTER_DATE", OsStr::new(date)),
        ];
        let oid = self
            .run(
                &["commit-tree", tree, "-p", base, "-p", head, "-F", "-"],
                Some(message.as_bytes()),
                &env,
            )
            .await?;
        check_oid("commit-tree", &oid)?;
        Ok(oid)
    }

    /// The blob at `path` in `commit`, `None` when there is no file there.
    pub(super) async fn blob_at(&self, commit: &str, path: &str) -> Result<Option<String>, LocalGitError> {
        let stdout = self
            .output(
                &["ls-tree", "-z", "--full-tree", "--end-of-options", commit, "--", path],
                None,
                &[],
            )
            .await?;
        if !stdout.status.success() {
            return Err(stdout.error("ls-tree"));
        }
        for record in stdout.stdout.split(|b| *b == 0).filter(|record| !record.is_empty()) {
            let Some(tab) = record.iter().position(|b| *b == b'\t') else {
                continue;
            };
            if &record[tab + 1..] != path.as_bytes() {
                continue;
            }
            let meta = String::from_utf8_lossy(&record[..tab]);
            let mut fields = meta.split(' ');
            if let (Some(mode), Some("blob"), Some(oid)) = (fields.next(), fields.next(), fields.next())
                && mode.starts_with("100")
            {
                return Ok(Some(oid.to_owned()));
            }
        }
        Ok(None)
    }

    /// A blob's bytes.
    pub(super) async fn cat_blob(&self, oid: &str) -> Result<Vec<u8>, LocalGitError> {
        let output = self.output(&["cat-file", "blob", oid], None, &[]).await?;
        if !output.status.success() {
            return Err(output.error("cat-file"));
        }
        Ok(output.stdout)
    }
}
