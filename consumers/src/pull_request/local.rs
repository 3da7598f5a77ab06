//! The embedded adapter: pull requests on the local Git host (see
//! [`crate::delivery::git`]), opened, checked and merged for real.
//!
//! A pull request is a JSON record inside its bare repository,
//! `<name>.git/bosun/pull-requests/<id>.json` ([`PullRequestRecord`]), plus
//! the ref `refs/pull/<id>/head` at its head commit (and
//! `refs/pull/<id>/merge` at its merge commit once completed). Ids count up
//! from 1 per repository. Records are written to a temporary file and
//! renamed into place; a new id is taken by linking the new record to
//! `<id>.json` without replacing (the next id is tried when another writer
//! took it), and the one open pull request of a (source, target) pair is
//! claimed the same way in `open/<sha256 of the pair>`, so concurrent
//! writers — tasks or processes — never open two. Within a process, an
//! adapter serialises its operations, so ids are dense; across processes
//! racing for the same pair, the loser withdraws its record and its id
//! stays unused (ids are unique, not necessarily consecutive).
//!
//! Checks, evaluated on every request:
//!
//! - `mergeable` — `git merge-tree --write-tree` of the target's head and
//!   the pull request's head: passed when it merges cleanly, failed on
//!   conflicts (the conflicting paths are named) or unrelated histories;
//! - `minimum-reviewers` — the repository's `bosun.minimumReviewers`
//!   (stored by repository provisioning) against the approvals recorded
//!   with [`LocalPullRequests::approve`]: pending until enough;
//! - each required check — pending until a status is posted with
//!   [`LocalPullRequests::post_status`] (the local host runs no build
//!   validation of its own).
//!
//! With auto-complete on and every check passed, the pull request is merged
//! at once: the merge tree becomes a commit with the target's head and the
//! pull request's head as parents (`git commit-tree`, author and committer
//! bosun, dated by the request so a retry makes the same commit), and the
//! target moves by compare-and-swap (`git update-ref <target> <new> <old>`);
//! when another writer moved the target first, the merge is redone on the
//! new head (up to [`MAX_MERGE_ATTEMPTS`] times). A pull request whose head
//! is already in the target (a merge that landed before its record was
//! saved) is completed without a second merge commit.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bosun_contracts::messages::PullRequestStatus;
use bosun_contracts::messages::pull_request::MAX_TITLE_CHARS;
use bosun_contracts::validate;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use tokio::sync::Mutex;

use super::port::{CheckStatus, OpenedPullRequest, PolicyCheck, PullRequestError, PullRequestHost, PullRequestSpec};

mod merge;
mod records;

use crate::delivery::git::{LocalGitError, LocalGitHost, LocalRepository, RefUpdate};
use merge::{GitCli, MergeTree};
use records::RecordStore;

/// Folder inside a bare repository holding its pull request records.
pub const PULL_REQUESTS_DIR: &str = "bosun/pull-requests";

/// Compare-and-swap attempts at moving the target branch before giving up
/// with [`PullRequestError::TargetContended`].
pub const MAX_MERGE_ATTEMPTS: u32 = 10;

/// Name of the mergeability check.
pub const CHECK_MERGEABLE: &str = "mergeable";

/// Name of the minimum-reviewers check.
pub const CHECK_MINIMUM_REVIEWERS: &str = "minimum-reviewers";

/// A pull request of the local Git host, as stored in its record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PullRequestRecord {
    /// Number of the pull request in its repository (from 1).
    pub id: u64,
    /// Repository name.
    pub repository: String,
    /// Branch with the changes, without `refs/heads/`.
    pub source_branch: String,
    /// Branch to merge into, without `refs/heads/`.
    pub target_branch: String,
    /// Title.
    pub title: String,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Active, completed or abandoned.
    pub status: PullRequestStatus,
    /// Head commit of the source branch, last seen.
    pub head_commit: String,
    /// Head of the target branch the checks were last evaluated against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluated_target: Option<String>,
    /// Status checks required before completion.
    #[serde(default)]
    pub required_checks: Vec<String>,
    /// Statuses posted for required checks, by check name.
    #[serde(default)]
    pub statuses: Vec<PolicyCheck>,
    /// Whether the pull request completes on its own once checks pass.
    #[serde(default)]
    pub auto_complete: bool,
    /// Reviewers who approved.
    #[serde(default)]
    pub approvals: Vec<String>,
    /// Checks as last evaluated.
    #[serde(default)]
    pub checks: Vec<PolicyCheck>,
    /// The merge commit on the target branch, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_commit: Option<String>,
    /// When it was opened.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it was last changed.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// When it completed.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub completed_at: Option<OffsetDateTime>,
}

/// Pull requests on the local Git host's bare repositories.
#[derive(Debug, Clone)]
pub struct LocalPullRequests {
    host: Arc<LocalGitHost>,
    serial: Arc<Mutex<()>>,
}

impl LocalPullRequests {
    /// Pull requests of the repositories under `git_root` (the runtime
    /// passes `<data dir>/git`, the same root as the other Git adapters).
    pub fn new(git_root: impl Into<PathBuf>) -> Self {
        Self::with_host(Arc::new(LocalGitHost::new(git_root)))
    }

    /// Shares a Git host with the other local adapters.
    pub fn with_host(host: Arc<LocalGitHost>) -> Self {
        Self {
            host,
            serial: Arc::new(Mutex::new(())),
        }
    }

    async fn repository(&self, tenant: &str, repository: &str) -> Result<LocalRepository, PullRequestError> {
        self.host
            .find(tenant, repository)
            .await?
            .ok_or_else(|| PullRequestError::RepositoryNotFound {
                repository: repository.to_owned(),
            })
    }

    /// A pull request's record; `None` when the repository has no pull
    /// request of that id.
    pub async fn pull_request(
        &self,
        tenant: &str,
        repository: &str,
        id: u64,
    ) -> Result<Option<PullRequestRecord>, PullRequestError> {
        let repository = self.repository(tenant, repository).await?;
        RecordStore::of(&repository).load(id).await
    }

    /// Every pull request of a repository, by id.
    pub async fn pull_requests(
        &self,
        tenant: &str,
        repository: &str,
    ) -> Result<Vec<PullRequestRecord>, PullRequestError> {
        let repository = self.repository(tenant, repository).await?;
        RecordStore::of(&repository).list().await
    }

    /// Records a reviewer's approval (counted by the minimum-reviewers
    /// check on the next evaluation).
    pub async fn approve(
        &self,
        tenant: &str,
        repository: &str,
        id: u64,
        reviewer: &str,
    ) -> Result<PullRequestRecord, PullRequestError> {
        validate::non_empty("reviewer", reviewer)?;
        self.update(tenant, repository, id, |record| {
            if !record.approvals.iter().any(|r| r == reviewer) {
                record.approvals.push(reviewer.to_owned());
            }
        })
        .await
    }

    /// Records the status of a required check (as a build validation would
    /// post it), used by the next evaluation.
    pub async fn post_status(
        &self,
        tenant: &str,
        repository: &str,
        id: u64,
        check: &str,
        status: CheckStatus,
        detail: &str,
    ) -> Result<PullRequestRecord, PullRequestError> {
        validate::non_empty("check", check)?;
        self.update(tenant, repository, id, |record| {
            record.statuses.retain(|posted| posted.name != check);
            record.statuses.push(PolicyCheck {
                name: check.to_owned(),
                status,
                detail: detail.to_owned(),
            });
        })
        .await
    }

    async fn update(
        &self,
        tenant: &str,
        repository: &str,
        id: u64,
        change: impl FnOnce(&mut PullRequestRecord),
    ) -> Result<PullRequestRecord, PullRequestError> {
        let _serial = self.serial.lock().await;
        let repository = self.repository(tenant, repository).await?;
        let store = RecordStore::of(&repository);
        let mut record = store
            .load(id)
            .await?
            .ok_or_else(|| PullRequestError::Invalid(format!("pull request {id} not found")))?;
        change(&mut record);
        record.updated_at = OffsetDateTime::now_utc();
        store.save(&record).await?;
        Ok(record)
    }
}

impl From<LocalGitError> for PullRequestError {
    fn from(err: LocalGitError) -> Self {
        if err.is_invalid_input() {
            Self::Invalid(err.to_string())
        } else {
            Self::Unavailable(Box::new(err))
        }
    }
}

pub(super) fn io_error(context: String, source: std::io::Error) -> PullRequestError {
    PullRequestError::Unavailable(Box::new(LocalGitError::Io { context, source }))
}

/// What the port reports for a record.
fn report(repository: &LocalRepository, record: PullRequestRecord, created: bool) -> OpenedPullRequest {
    OpenedPullRequest {
        pull_request_id: record.id,
        url: format!("{}/{PULL_REQUESTS_DIR}/{}.json", repository.url(), record.id),
        title: record.title,
        head_commit: record.head_commit,
        status: record.status,
        created,
        required_checks: record.required_checks,
        auto_complete: record.auto_complete,
        merge_commit: record.merge_commit,
        checks: record.checks,
    }
}

/// A title cut to the contract's limit, on a character boundary.
fn clip_title(title: &str) -> String {
    title
        .chars()
        .take(MAX_TITLE_CHARS)
        .collect::<String>()
        .trim()
        .to_owned()
}

/// The checks of a record against a merge attempt's result.
fn evaluate_checks(record: &PullRequestRecord, merge: &MergeTree, minimum_reviewers: u32) -> Vec<PolicyCheck> {
    let mut checks = Vec::with_capacity(2 + record.required_checks.len());
    let (status, detail) = match merge {
        MergeTree::Clean { .. } => (
            CheckStatus::Passed,
            format!("merges cleanly into `{}`", record.target_branch),
        ),
        MergeTree::Conflicts { paths } => {
            let mut listed: Vec<&str> = paths.iter().take(20).map(String::as_str).collect();
            if paths.len() > listed.len() {
                listed.push("…");
            }
            (
                CheckStatus::Failed,
                format!("conflicts with `{}` in {}", record.target_branch, listed.join(", ")),
            )
        }
        MergeTree::Unrelated => (
            CheckStatus::Failed,
            format!(
                "`{}` and `{}` share no history",
                record.source_branch, record.target_branch
            ),
        ),
    };
    checks.push(PolicyCheck {
        name: CHECK_MERGEABLE.to_owned(),
        status,
        detail,
    });
    let approvals = u32::try_from(record.approvals.len()).unwrap_or(u32::MAX);
    let (status, detail) = if minimum_reviewers == 0 {
        (CheckStatus::Passed, "no reviewers required".to_owned())
    } else if approvals >= minimum_reviewers {
        (
            CheckStatus::Passed,
            format!("{approvals} of {minimum_reviewers} approvals"),
        )
    } else {
        (
            CheckStatus::Pending,
            format!("{approvals} of {minimum_reviewers} approvals"),
        )
    };
    checks.push(PolicyCheck {
        name: CHECK_MINIMUM_REVIEWERS.to_owned(),
        status,
        detail,
    });
    for name in &record.required_checks {
        let posted = record.statuses.iter().find(|posted| posted.name == *name);
        checks.push(match posted {
            Some(posted) => posted.clone(),
            None => PolicyCheck {
                name: name.clone(),
                status: CheckStatus::Pending,
                detail: "no status posted yet".to_owned(),
            },
        });
    }
    checks
}

#[async_trait]
impl PullRequestHost for LocalPullRequests {
    async fn open(&self, spec: &PullRequestSpec) -> Result<OpenedPullRequest, PullRequestError> {
        validate::branch_name("sourceBranch", &spec.source_branch)?;
        validate::branch_name("targetBranch", &spec.target_branch)?;
        if spec.source_branch == spec.target_branch {
            return Err(PullRequestError::Invalid(
                "targetBranch: must differ from sourceBranch".to_owned(),
            ));
        }
        let _serial = self.serial.lock().await;
        let repository = self.repository(&spec.tenant, &spec.repository).await?;
        let git = repository.git();
        let cli = GitCli::new(&repository.path);
        let source_ref = format!("refs/heads/{}", spec.source_branch);
        let target_ref = format!("refs/heads/{}", spec.target_branch);
        let head = git
            .resolve_commit(&source_ref)
            .await?
            .ok_or_else(|| PullRequestError::BranchNotFound {
                branch: spec.source_branch.clone(),
            })?;
        let target_missing = || PullRequestError::BranchNotFound {
            branch: spec.target_branch.clone(),
        };
        git.resolve_commit(&target_ref).await?.ok_or_else(target_missing)?;

        let store = RecordStore::of(&repository);
        let now = OffsetDateTime::now_utc();
        let (mut record, created) = match store.find_open(&spec.source_branch, &spec.target_branch).await? {
            Some(mut record) => {
                if record.head_commit != head {
                    tracing::info!(
                        repository = %spec.repository,
                        pull_request = record.id,
                        old = %record.head_commit,
                        new = %head,
                        "source branch moved; pull request head updated"
                    );
                    record.head_commit.clone_from(&head);
                }
                for check in &spec.required_checks {
                    if !record.required_checks.contains(check) {
                        record.required_checks.push(check.clone());
                    }
                }
                record.auto_complete |= spec.auto_complete;
                (record, false)
            }
            None => {
                if let Some(done) = store
                    .find_completed_at(&spec.source_branch, &spec.target_branch, &head)
                    .await?
                {
                    return Ok(report(&repository, done, false));
                }
                let title = match &spec.title {
                    Some(title) => clip_title(title),
                    None => clip_title(&cli.subject(&head).await?),
                };
                let title = if title.is_empty() {
                    format!("Merge {} into {}", spec.source_branch, spec.target_branch)
                } else {
                    title
                };
                let record = PullRequestRecord {
                    id: 0,
                    repository: spec.repository.clone(),
                    source_branch: spec.source_branch.clone(),
                    target_branch: spec.target_branch.clone(),
                    title,
                    description: spec.description.clone(),
                    status: PullRequestStatus::Active,
                    head_commit: head.clone(),
                    evaluated_target: None,
                    required_checks: spec.required_checks.clone(),
                    statuses: Vec::new(),
                    auto_complete: spec.auto_complete,
                    approvals: Vec::new(),
                    checks: Vec::new(),
                    merge_commit: None,
                    created_at: now,
                    updated_at: now,
                    completed_at: None,
                };
                store.create(record).await?
            }
        };
        cli.set_ref(&format!("refs/pull/{}/head", record.id), &record.head_commit)
            .await?;

        let minimum_reviewers = git
            .bosun_config()
            .await?
            .get("bosun.minimumreviewers")
            .and_then(|value| value.trim().parse::<u32>().ok())
            .unwrap_or(0);
        let date = format!("@{} +0000", spec.date.unix_timestamp());
        let mut attempt = 0;
        loop {
            attempt += 1;
            let target_head = git.resolve_commit(&target_ref).await?.ok_or_else(target_missing)?;
            if record.auto_complete && cli.is_ancestor(&record.head_commit, &target_head).await? {
                // Already in the target: a merge of ours that landed before
                // its record was saved, or one made outside bosun.
                let merge = cli
                    .first_containing(&record.head_commit, &target_head, &spec.target_branch)
                    .await?;
                record.checks = evaluate_checks(&record, &MergeTree::Clean { tree: String::new() }, minimum_reviewers);
                record.evaluated_target = Some(target_head);
                record.status = PullRequestStatus::Completed;
                record.merge_commit = Some(merge);
                record.completed_at = Some(now);
                break;
            }
            let merge = cli.merge_tree(&target_head, &record.head_commit).await?;
            record.checks = evaluate_checks(&record, &merge, minimum_reviewers);
            record.evaluated_target = Some(target_head.clone());
            let complete = record.auto_complete && record.checks.iter().all(|c| c.status == CheckStatus::Passed);
            let MergeTree::Clean { tree } = merge else { break };
            if !complete {
                break;
            }
            let mut message = format!("Merged PR {}: {}", record.id, record.title);
            if let Some(description) = record.description.as_deref().filter(|d| !d.trim().is_empty()) {
                message.push_str("\n\n");
                message.push_str(description.trim_end());
            }
            let commit = cli
                .commit_merge(&tree, &target_head, &record.head_commit, &message, &date)
                .await?;
            match git.update_ref(&target_ref, &commit, Some(&target_head)).await? {
                RefUpdate::Updated => {
                    tracing::info!(
                        repository = %spec.repository,
                        pull_request = record.id,
                        target = %spec.target_branch,
                        merge_commit = %commit,
                        "pull request merged"
                    );
                    record.status = PullRequestStatus::Completed;
                    record.merge_commit = Some(commit);
                    record.completed_at = Some(now);
                    break;
                }
                RefUpdate::Moved if attempt < MAX_MERGE_ATTEMPTS => {
                    tracing::debug!(
                        repository = %spec.repository,
                        pull_request = record.id,
                        attempt,
                        "target branch moved while merging; merging again on the new head"
                    );
                }
                RefUpdate::Moved => {
                    store.save(&record).await?;
                    return Err(PullRequestError::TargetContended {
                        branch: spec.target_branch.clone(),
                        attempts: MAX_MERGE_ATTEMPTS,
                    });
                }
            }
        }
        if let Some(merge) = &record.merge_commit {
            cli.set_ref(&format!("refs/pull/{}/merge", record.id), merge).await?;
        }
        record.updated_at = now;
        store.save(&record).await?;
        if record.status != PullRequestStatus::Active {
            store.release(&record).await?;
        }
        Ok(report(&repository, record, created))
    }

    async fn read_file(
        &self,
        tenant: &str,
        repository: &str,
        commit: &str,
        path: &str,
    ) -> Result<Option<Vec<u8>>, PullRequestError> {
        validate::git_sha("commit", commit)?;
        validate::repository_path("path", path)?;
        let repository = self.repository(tenant, repository).await?;
        let cli = GitCli::new(&repository.path);
        match cli.blob_at(commit, path).await? {
            Some(oid) => Ok(Some(cli.cat_blob(&oid).await?)),
            None => Ok(None),
        }
    }

    async fn find_files(
        &self,
        tenant: &str,
        repository: &str,
        commit: &str,
        file_name: &str,
    ) -> Result<Vec<String>, PullRequestError> {
        validate::git_sha("commit", commit)?;
        let repository = self.repository(tenant, repository).await?;
        let entries = repository.git().tree_entries(commit).await?;
        Ok(entries
            .into_iter()
            .filter(|(path, entry)| entry.mode.starts_with("100") && path.rsplit('/').next() == Some(file_name))
            .map(|(path, _)| path)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::records::claim_name;
    use super::*;

    #[test]
    fn claims_are_per_branch_pair() {
        assert_eq!(claim_name("feature/x", "main"), claim_name("feature/x", "main"));
        assert_ne!(claim_name("feature/x", "main"), claim_name("feature/x", "develop"));
        assert_ne!(claim_name("a/b", "c"), claim_name("a", "b/c"));
    }

    #[test]
    fn titles_are_clipped_on_characters() {
        let long = "é".repeat(MAX_TITLE_CHARS + 5);
        assert_eq!(clip_title(&long).chars().count(), MAX_TITLE_CHARS);
    }
}
