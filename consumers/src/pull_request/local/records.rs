//! The pull request records of one repository, inside its bare repository
//! (`bosun/pull-requests/<id>.json`, and `open/<sha256 of the pair>` for
//! the claim of the one open pull request of a branch pair), written whole
//! through a temporary file ([`crate::delivery::atomic_file`]).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use bosun_contracts::messages::PullRequestStatus;

use super::{PULL_REQUESTS_DIR, PullRequestRecord, io_error};
use crate::delivery::atomic_file;
use crate::delivery::blob::sha256_hex;
use crate::delivery::git::LocalRepository;
use crate::pull_request::port::PullRequestError;

/// The pull request records of one repository.
pub(super) struct RecordStore {
    pub(super) dir: PathBuf,
}

/// The claim file of the open pull request between two branches.
pub(super) fn claim_name(source: &str, target: &str) -> String {
    sha256_hex(format!("{source}\0{target}").as_bytes())
}

/// Writes `content` to a temporary file in `path`'s folder, then moves it
/// to `path`: replacing what is there, or — with `no_clobber` — only if
/// nothing is (returns `false` when something was).
pub(super) async fn write_atomically(
    path: PathBuf,
    content: Vec<u8>,
    no_clobber: bool,
) -> Result<bool, PullRequestError> {
    let context = format!("writing {}", path.display());
    let written = tokio::task::spawn_blocking(move || -> std::io::Result<bool> {
        use std::io::Write as _;
        let dir = path.parent().unwrap_or_else(|| Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut file = atomic_file::temporary_in(dir)?;
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
    pub(super) fn of(repository: &LocalRepository) -> Self {
        Self {
            dir: repository.path.join(PULL_REQUESTS_DIR),
        }
    }

    pub(super) fn record_path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    pub(super) fn claim_path(&self, source: &str, target: &str) -> PathBuf {
        self.dir.join("open").join(claim_name(source, target))
    }

    pub(super) async fn load(&self, id: u64) -> Result<Option<PullRequestRecord>, PullRequestError> {
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
    pub(super) async fn ids(&self) -> Result<Vec<u64>, PullRequestError> {
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

    pub(super) async fn list(&self) -> Result<Vec<PullRequestRecord>, PullRequestError> {
        let mut records = Vec::new();
        for id in self.ids().await? {
            if let Some(record) = self.load(id).await? {
                records.push(record);
            }
        }
        Ok(records)
    }

    pub(super) async fn save(&self, record: &PullRequestRecord) -> Result<(), PullRequestError> {
        let bytes = serde_json::to_vec_pretty(record).map_err(|err| PullRequestError::Unavailable(Box::new(err)))?;
        write_atomically(self.record_path(record.id), bytes, false).await?;
        Ok(())
    }

    /// The open pull request between two branches: the claimed one, or an
    /// active record left without a claim (a crash between writing the
    /// record and claiming), which is claimed now.
    pub(super) async fn find_open(
        &self,
        source: &str,
        target: &str,
    ) -> Result<Option<PullRequestRecord>, PullRequestError> {
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
    pub(super) async fn claimed_id(&self, claim: &Path) -> Result<Option<u64>, PullRequestError> {
        match tokio::fs::read_to_string(claim).await {
            Ok(text) => Ok(text.trim().parse::<u64>().ok()),
            Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
            Err(err) => Err(io_error(format!("reading {}", claim.display()), err)),
        }
    }

    /// A completed pull request between two branches whose head was `head`.
    pub(super) async fn find_completed_at(
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
    pub(super) async fn create(
        &self,
        mut record: PullRequestRecord,
    ) -> Result<(PullRequestRecord, bool), PullRequestError> {
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
    pub(super) async fn release(&self, record: &PullRequestRecord) -> Result<(), PullRequestError> {
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
