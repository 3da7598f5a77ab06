//! The embedded adapter: pull requests on the local Git host (see
//! [`crate::local_git`]), opened, checked and merged for real.
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

use std::ffi::OsStr;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bosun_contracts::messages::PullRequestStatus;
use bosun_contracts::messages::pull_request::MAX_TITLE_CHARS;
use bosun_contracts::validate;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use tokio::sync::Mutex;

use super::port::{CheckStatus, OpenedPullRequest, PolicyCheck, PullRequestError, PullRequestHost, PullRequestSpec};
use crate::blob::sha256_hex;
use crate::commit::{DEFAULT_AUTHOR_EMAIL, DEFAULT_AUTHOR_NAME};
use crate::local_git::{Git, GitOutput, LocalGitError, LocalGitHost, LocalRepository, RefUpdate, check_oid};

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

fn io_error(context: String, source: std::io::Error) -> PullRequestError {
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

/// The pull request records of one repository.
struct RecordStore {
    dir: PathBuf,
}

/// The claim file of the open pull request between two branches.
fn claim_name(source: &str, target: &str) -> String {
    sha256_hex(format!("{source}\0{target}").as_bytes())
}

/// Writes `content` to a temporary file in `path`'s folder, then moves it
/// to `path`: replacing what is there, or — with `no_clobber` — only if
/// nothing is (returns `false` when something was).
async fn write_atomically(path: PathBuf, content: Vec<u8>, no_clobber: bool) -> Result<bool, PullRequestError> {
    let context = format!("writing {}", path.display());
    let written = tokio::task::spawn_blocking(move || -> std::io::Result<bool> {
        use std::io::Write as _;
        let dir = path.parent().unwrap_or_else(|| Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut file = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?;
        file.write_all(&content)?;
        file.as_file().sync_all()?;
        if no_clobber {
            match file.persist_noclobber(&path) {
                Ok(_) => Ok(true),
                Err(err) if err.error.kind() == ErrorKind::AlreadyExists => Ok(false),
                Err(err) => Err(err.error),
            }
        } else {
            file.persist(&path).map(|_| true).map_err(|err| err.error)
        }
    })
    .await
    .map_err(|err| io_error(context.clone(), std::io::Error::other(err)))?;
    written.map_err(|err| io_error(context, err))
}

impl RecordStore {
    fn of(repository: &LocalRepository) -> Self {
        Self {
            dir: repository.path.join(PULL_REQUESTS_DIR),
        }
    }

    fn record_path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    fn claim_path(&self, source: &str, target: &str) -> PathBuf {
        self.dir.join("open").join(claim_name(source, target))
    }

    async fn load(&self, id: u64) -> Result<Option<PullRequestRecord>, PullRequestError> {
        let path = self.record_path(id);
        match tokio::fs::read(&path).await {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|err| {
                PullRequestError::Unavailable(
                    format!("pull request record {} is unreadable: {err}", path.display()).into(),
                )
            }),
            Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
            Err(err) => Err(io_error(format!("reading {}", path.display()), err)),
        }
    }

    /// The ids of every record, ascending.
    async fn ids(&self) -> Result<Vec<u64>, PullRequestError> {
        let mut entries = match tokio::fs::read_dir(&self.dir).await {
            Ok(entries) => entries,
            Err(err) if err.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(io_error(format!("reading {}", self.dir.display()), err)),
        };
        let mut ids = Vec::new();
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(|err| io_error(format!("reading {}", self.dir.display()), err))?
        {
            let name = entry.file_name();
            if let Some(id) = name
                .to_str()
                .and_then(|name| name.strip_suffix(".json"))
                .and_then(|id| id.parse::<u64>().ok())
            {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    async fn list(&self) -> Result<Vec<PullRequestRecord>, PullRequestError> {
        let mut records = Vec::new();
        for id in self.ids().await? {
            if let Some(record) = self.load(id).await? {
                records.push(record);
            }
        }
        Ok(records)
    }

    async fn save(&self, record: &PullRequestRecord) -> Result<(), PullRequestError> {
        let bytes = serde_json::to_vec_pretty(record).map_err(|err| PullRequestError::Unavailable(Box::new(err)))?;
        write_atomically(self.record_path(record.id), bytes, false).await?;
        Ok(())
    }

    /// The open pull request between two branches: the claimed one, or an
    /// active record left without a claim (a crash between writing the
    /// record and claiming), which is claimed now.
    async fn find_open(&self, source: &str, target: &str) -> Result<Option<PullRequestRecord>, PullRequestError> {
        let claim = self.claim_path(source, target);
        match tokio::fs::read_to_string(&claim).await {
            Ok(text) => {
                if let Ok(id) = text.trim().parse::<u64>()
                    && let Some(record) = self.load(id).await?
                    && record.status == PullRequestStatus::Active
                {
                    return Ok(Some(record));
                }
                // A stale claim: its pull request completed (the claim is
                // released right after). Removed unless it changed meanwhile.
                if self.claimed_id(&claim).await?.map(|id| id.to_string()) == Some(text.trim().to_owned())
                    && let Err(err) = tokio::fs::remove_file(&claim).await
                    && err.kind() != ErrorKind::NotFound
                {
                    return Err(io_error(format!("removing {}", claim.display()), err));
                }
            }
            Err(err) if err.kind() == ErrorKind::NotFound => {}
            Err(err) => return Err(io_error(format!("reading {}", claim.display()), err)),
        }
        let orphan = self.list().await?.into_iter().find(|record| {
            record.status == PullRequestStatus::Active
                && record.source_branch == source
                && record.target_branch == target
        });
        match orphan {
            Some(record) => {
                if write_atomically(claim, record.id.to_string().into_bytes(), true).await? {
                    Ok(Some(record))
                } else {
                    // Someone claimed meanwhile: theirs is the open one.
                    Box::pin(self.find_open(source, target)).await
                }
            }
            None => Ok(None),
        }
    }

    /// The id a claim file names, `None` when there is no claim.
    async fn claimed_id(&self, claim: &Path) -> Result<Option<u64>, PullRequestError> {
        match tokio::fs::read_to_string(claim).await {
            Ok(text) => Ok(text.trim().parse::<u64>().ok()),
            Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
            Err(err) => Err(io_error(format!("reading {}", claim.display()), err)),
        }
    }

    /// A completed pull request between two branches whose head was `head`.
    async fn find_completed_at(
        &self,
        source: &str,
        target: &str,
        head: &str,
    ) -> Result<Option<PullRequestRecord>, PullRequestError> {
        Ok(self.list().await?.into_iter().rev().find(|record| {
            record.status == PullRequestStatus::Completed
                && record.source_branch == source
                && record.target_branch == target
                && record.head_commit == head
        }))
    }

    /// Stores a new record under the next free id and claims its branch
    /// pair. When another writer claimed the pair first, the new record is
    /// withdrawn and the other's returned (`created: false`).
    async fn create(&self, mut record: PullRequestRecord) -> Result<(PullRequestRecord, bool), PullRequestError> {
        let mut id = self.ids().await?.last().copied().unwrap_or(0) + 1;
        loop {
            record.id = id;
            let bytes =
                serde_json::to_vec_pretty(&record).map_err(|err| PullRequestError::Unavailable(Box::new(err)))?;
            if write_atomically(self.record_path(id), bytes, true).await? {
                break;
            }
            id += 1;
        }
        let claim = self.claim_path(&record.source_branch, &record.target_branch);
        if write_atomically(claim.clone(), id.to_string().into_bytes(), true).await? {
            tracing::info!(
                repository = %record.repository,
                pull_request = id,
                source = %record.source_branch,
                target = %record.target_branch,
                "pull request opened"
            );
            return Ok((record, true));
        }
        // The pair is claimed: by another writer, or — when a reader
        // adopted our record as unclaimed before we claimed it — for us.
        if self.claimed_id(&claim).await? == Some(id) {
            return Ok((record, true));
        }
        let path = self.record_path(id);
        tokio::fs::remove_file(&path)
            .await
            .map_err(|err| io_error(format!("removing {}", path.display()), err))?;
        match self.find_open(&record.source_branch, &record.target_branch).await? {
            Some(existing) => Ok((existing, false)),
            None => Err(PullRequestError::Unavailable(
                "the pull request was claimed concurrently but is not open".into(),
            )),
        }
    }

    /// Releases a closed pull request's claim on its branch pair.
    async fn release(&self, record: &PullRequestRecord) -> Result<(), PullRequestError> {
        let claim = self.claim_path(&record.source_branch, &record.target_branch);
        match tokio::fs::read_to_string(&claim).await {
            Ok(text) if text.trim() == record.id.to_string() => match tokio::fs::remove_file(&claim).await {
                Ok(()) => Ok(()),
                Err(err) if err.kind() == ErrorKind::NotFound => Ok(()),
                Err(err) => Err(io_error(format!("removing {}", claim.display()), err)),
            },
            Ok(_) => Ok(()),
            Err(err) if err.kind() == ErrorKind::NotFound => Ok(()),
            Err(err) => Err(io_error(format!("reading {}", claim.display()), err)),
        }
    }
}

/// What `git merge-tree --write-tree` found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum MergeTree {
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
struct GitCli {
    git: Git,
}

impl GitCli {
    fn new(git_dir: &Path) -> Self {
        Self { git: Git::new(git_dir) }
    }

    async fn output(
        &self,
        args: &[&str],
        input: Option<&[u8]>,
        env: &[(&str, &OsStr)],
    ) -> Result<GitOutput, LocalGitError> {
        self.git.output(args, input, env).await
    }

    async fn run(&self, args: &[&str], input: Option<&[u8]>, env: &[(&str, &OsStr)]) -> Result<String, LocalGitError> {
        let command = args.first().copied().unwrap_or("git");
        let output = self.output(args, input, env).await?;
        if !output.status.success() {
            return Err(output.error(command));
        }
        output.text(command)
    }

    /// The subject line of a commit.
    async fn subject(&self, commit: &str) -> Result<String, LocalGitError> {
        self.run(&["log", "-1", "--format=%s", "--end-of-options", commit], None, &[])
            .await
    }

    /// Points `refname` at `commit`, whatever it pointed at before.
    async fn set_ref(&self, refname: &str, commit: &str) -> Result<(), LocalGitError> {
        self.run(&["update-ref", "-m", "bosun pull request", refname, commit], None, &[])
            .await
            .map(drop)
    }

    /// Whether `ancestor` is reachable from `descendant`.
    async fn is_ancestor(&self, ancestor: &str, descendant: &str) -> Result<bool, LocalGitError> {
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
    async fn first_containing(&self, head: &str, target_head: &str, target: &str) -> Result<String, LocalGitError> {
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
    async fn merge_tree(&self, base: &str, head: &str) -> Result<MergeTree, LocalGitError> {
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
    async fn commit_merge(
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
    async fn blob_at(&self, commit: &str, path: &str) -> Result<Option<String>, LocalGitError> {
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
    async fn cat_blob(&self, oid: &str) -> Result<Vec<u8>, LocalGitError> {
        let output = self.output(&["cat-file", "blob", oid], None, &[]).await?;
        if !output.status.success() {
            return Err(output.error("cat-file"));
        }
        Ok(output.stdout)
    }
}

#[cfg(test)]
mod tests {
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
