//! The embedded adapter: commits into the local Git host's bare
//! repositories (see [`crate::delivery::git`]) with git plumbing, never a work
//! tree.
//!
//! Blobs are written with `git hash-object -w`; the new tree is the head's
//! files with the deletions and writes applied, written through a
//! throw-away index (`update-index --index-info`, `write-tree`, nested
//! folders included); the commit is made with `git commit-tree` using the
//! request's author and date for author and committer alike, so the same
//! request on the same head gives the same commit id. The branch moves with
//! `git update-ref <branch> <new> <old>`, a compare-and-swap: when another
//! writer moved it first, the commit is rebuilt on the new head (up to
//! [`MAX_ATTEMPTS`] times), so no writer loses a commit.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bosun_contracts::validate;

use super::{CommitError, CommitResult, CommitSpec, CommitWriter};
use crate::delivery::git::{
    Git, Identity, LocalGitError, LocalGitHost, LocalRepository, RefUpdate, TreeEntries, TreeEntry,
};

/// Compare-and-swap attempts before giving up with
/// [`CommitError::BranchContended`].
pub const MAX_ATTEMPTS: u32 = 10;

/// Commits into bare repositories of the local Git host.
#[derive(Debug, Clone)]
pub struct LocalCommitWriter {
    host: Arc<LocalGitHost>,
}

impl LocalCommitWriter {
    /// Commits into repositories under `root` (the runtime passes
    /// `<data dir>/git`, the same root as the provisioning adapter).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self::with_host(Arc::new(LocalGitHost::new(root)))
    }

    /// Shares a Git host with the other local adapters.
    pub fn with_host(host: Arc<LocalGitHost>) -> Self {
        Self { host }
    }
}

impl From<LocalGitError> for CommitError {
    fn from(err: LocalGitError) -> Self {
        if err.is_invalid_input() {
            Self::Invalid(err.to_string())
        } else {
            Self::Unavailable(Box::new(err))
        }
    }
}

/// The commit a missing branch starts from: the base branch's head, or
/// `None` for an empty repository (the commit becomes a root commit).
async fn start_of_new_branch(
    git: &Git,
    repository: &LocalRepository,
    spec: &CommitSpec,
) -> Result<Option<String>, CommitError> {
    let base = spec.base_branch.as_deref().unwrap_or(&repository.default_branch);
    validate::branch_name("baseBranch", base)?;
    if let Some(commit) = git.resolve_commit(&format!("refs/heads/{base}")).await? {
        return Ok(Some(commit));
    }
    if git.has_branches().await? {
        return Err(CommitError::BaseBranchNotFound {
            branch: base.to_owned(),
        });
    }
    Ok(None)
}

/// The files of `old` with `deletes` (files or folders) removed, then
/// `writes` applied. A written file replaces a folder of the same path and
/// a file standing where its folder must be.
fn apply(old: &TreeEntries, writes: &TreeEntries, deletes: &[String]) -> TreeEntries {
    let mut entries = old.clone();
    for path in deletes {
        entries.remove(path);
        remove_folder(&mut entries, path);
    }
    for (path, entry) in writes {
        remove_folder(&mut entries, path);
        let mut end = 0;
        while let Some(slash) = path[end..].find('/') {
            end += slash;
            entries.remove(&path[..end]);
            end += 1;
        }
        entries.insert(path.clone(), entry.clone());
    }
    entries
}

/// Removes every file under `folder/`.
fn remove_folder(entries: &mut TreeEntries, folder: &str) {
    let prefix = format!("{folder}/");
    let inside: Vec<String> = entries
        .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
        .take_while(|(path, _)| path.starts_with(&prefix))
        .map(|(path, _)| path.clone())
        .collect();
    for path in inside {
        entries.remove(&path);
    }
}

/// Paths added, changed (content or mode) or removed between two trees.
fn count_changes(old: &TreeEntries, new: &TreeEntries) -> u32 {
    let changed_or_removed = old.iter().filter(|(path, entry)| new.get(*path) != Some(entry)).count();
    let added = new.keys().filter(|path| !old.contains_key(*path)).count();
    u32::try_from(changed_or_removed + added).unwrap_or(u32::MAX)
}

#[async_trait]
impl CommitWriter for LocalCommitWriter {
    async fn commit(&self, spec: &CommitSpec) -> Result<CommitResult, CommitError> {
        // The handler checked these already; an adapter never trusts a path
        // it is about to write.
        validate::branch_name("branch", &spec.branch)?;
        for (field, path) in spec
            .files
            .iter()
            .map(|file| ("files.path", &file.path))
            .chain(spec.delete.iter().map(|path| ("delete", path)))
        {
            validate::repository_path(field, path)?;
        }
        let repository =
            self.host
                .find(&spec.tenant, &spec.repository)
                .await?
                .ok_or_else(|| CommitError::RepositoryNotFound {
                    repository: spec.repository.clone(),
                })?;
        let git = repository.git();

        let mut writes = BTreeMap::new();
        for file in &spec.files {
            let oid = git.write_blob(&file.content).await?;
            let mode = if file.executable { "100755" } else { "100644" };
            writes.insert(
                file.path.clone(),
                TreeEntry {
                    mode: mode.to_owned(),
                    oid,
                },
            );
        }

        let branch_ref = format!("refs/heads/{}", spec.branch);
        let date = format!("@{} +0000", spec.date.unix_timestamp());
        let author = Identity {
            name: &spec.author.name,
            email: &spec.author.email,
        };
        for attempt in 1..=MAX_ATTEMPTS {
            let head = git.resolve_commit(&branch_ref).await?;
            let start = match &head {
                Some(head) => Some(head.clone()),
                None => start_of_new_branch(&git, &repository, spec).await?,
            };
            let old = match &start {
                Some(commit) => git.tree_entries(commit).await?,
                None => TreeEntries::new(),
            };
            let new = apply(&old, &writes, &spec.delete);
            let files_changed = count_changes(&old, &new);

            if let Some(start) = &start
                && files_changed == 0
            {
                // Nothing to change: the branch (created at its base if
                // missing) already holds the tree.
                if head.is_none() && git.update_ref(&branch_ref, start, None).await? == RefUpdate::Moved {
                    continue;
                }
                return Ok(CommitResult {
                    repository_id: repository.id.clone(),
                    commit_sha: start.clone(),
                    tree_sha: git.tree_of(start).await?,
                    parent_sha: git.first_parent(start).await?,
                    files_changed: 0,
                    no_op: true,
                });
            }

            let tree = git.write_tree(&new).await?;
            let commit = git
                .commit_tree(&tree, start.as_deref(), &spec.message, &author, &date)
                .await?;
            match git.update_ref(&branch_ref, &commit, head.as_deref()).await? {
                RefUpdate::Updated => {
                    return Ok(CommitResult {
                        repository_id: repository.id.clone(),
                        commit_sha: commit,
                        tree_sha: tree,
                        parent_sha: start,
                        files_changed,
                        no_op: false,
                    });
                }
                RefUpdate::Moved => {
                    tracing::debug!(
                        repository = %spec.repository,
                        branch = %spec.branch,
                        attempt,
                        "branch moved by another writer; rebuilding on the new head"
                    );
                }
            }
        }
        Err(CommitError::BranchContended {
            branch: spec.branch.clone(),
            attempts: MAX_ATTEMPTS,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(oid: char) -> TreeEntry {
        TreeEntry {
            mode: "100644".to_owned(),
            oid: oid.to_string().repeat(40),
        }
    }

    fn tree(paths: &[(&str, char)]) -> TreeEntries {
        paths
            .iter()
            .map(|(path, oid)| ((*path).to_owned(), entry(*oid)))
            .collect()
    }

    #[test]
    fn deletes_remove_files_and_folders() {
        let old = tree(&[("a/x", '1'), ("a/y", '2'), ("ab", '3'), ("b", '4')]);
        let new = apply(
            &old,
            &TreeEntries::new(),
            &["a".to_owned(), "b".to_owned(), "missing".to_owned()],
        );
        assert_eq!(new, tree(&[("ab", '3')]));
        assert_eq!(count_changes(&old, &new), 3);
    }

    #[test]
    fn writes_replace_folders_and_files_in_the_way() {
        let old = tree(&[("a/x", '1'), ("f", '2'), ("keep", '3')]);
        let new = apply(&old, &tree(&[("a", '5'), ("f/inner", '6')]), &[]);
        assert_eq!(new, tree(&[("a", '5'), ("f/inner", '6'), ("keep", '3')]));
        assert_eq!(count_changes(&old, &new), 4);
    }

    #[test]
    fn same_content_changes_nothing() {
        let old = tree(&[("a", '1')]);
        assert_eq!(count_changes(&old, &apply(&old, &tree(&[("a", '1')]), &[])), 0);
    }
}
