//! A run's record and a pipeline definition, as stored under the runner's
//! root, and how they are written: always whole (a temporary file and a
//! rename; the first write of a record by a hard link, so two writers
//! cannot both create it).

use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};

use bosun_contracts::messages::{ArtifactRef, BlobRef, PipelineResult};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::LocalPipelineError;
use crate::delivery::atomic_file;

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RunStatus {
    /// Waiting for an executor.
    Queued,
    /// An executor is working on it (or died; see the heartbeat).
    Running,
    /// Finished; `result` says how.
    Completed,
}

/// The record of one run, as stored in `runs/<tenant>/<runId>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    /// The run's id, derived from its idempotency key.
    pub run_id: String,
    /// The pipeline definition it runs.
    pub pipeline_id: String,
    /// Tenant owning the repository.
    pub tenant: String,
    /// Repository name.
    pub repository: String,
    /// Branch being built, without `refs/heads/`.
    pub branch: String,
    /// Commit being built.
    pub commit_sha: String,
    /// Path of the pipeline file in the repository.
    pub pipeline_path: String,
    /// Where the run is.
    pub status: RunStatus,
    /// How it ended, once `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<PipelineResult>,
    /// Executions started (more than 1 after a restart).
    #[serde(default)]
    pub attempt: u32,
    /// When it was queued.
    #[serde(with = "time::serde::rfc3339")]
    pub queued_at: OffsetDateTime,
    /// When the current (or last) execution started.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub started_at: Option<OffsetDateTime>,
    /// When it finished.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub finished_at: Option<OffsetDateTime>,
    /// Last sign of life of the executor.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub heartbeat_at: Option<OffsetDateTime>,
    /// The runner instance executing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<String>,
    /// The step executing now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step: Option<String>,
    /// The first step that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<String>,
    /// Why the run failed, in one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The run's log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<BlobRef>,
    /// JUnit files published.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub test_results: Vec<BlobRef>,
    /// Artifacts published.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<ArtifactRef>,
}

impl RunRecord {
    /// Whether the run has finished.
    pub fn is_finished(&self) -> bool {
        self.status == RunStatus::Completed
    }
}

/// What to run: one commit of a repository with one pipeline file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRequest {
    /// Tenant owning the repository.
    pub tenant: String,
    /// Repository name on the local Git host.
    pub repository: String,
    /// Branch being built, without `refs/heads/`.
    pub branch: String,
    /// Commit to build (full sha).
    pub commit_sha: String,
    /// Path of the pipeline file in the repository.
    pub pipeline_path: String,
    /// The pipeline definition.
    pub pipeline_id: String,
}

/// A pipeline definition: which file of which repository a pipeline runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PipelineDefinition {
    /// Id of the definition.
    pub pipeline_id: String,
    /// Display name.
    pub name: String,
    /// Repository name.
    pub repository: String,
    /// Path of the pipeline file in the repository.
    pub pipeline_path: String,
}

pub(super) fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>, LocalPipelineError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|err| LocalPipelineError::CorruptRecord {
        path: String::new(),
        reason: err.to_string(),
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

pub(super) async fn read_record(path: &Path) -> Result<RunRecord, LocalPipelineError> {
    let bytes = match tokio::fs::read(path).await {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == ErrorKind::NotFound => {
            let run_id = path
                .file_stem()
                .map(|stem| stem.to_string_lossy().into_owned())
                .unwrap_or_default();
            return Err(LocalPipelineError::RunNotFound { run_id });
        }
        Err(err) => return Err(LocalPipelineError::io(format!("reading {}", path.display()), err)),
    };
    serde_json::from_slice(&bytes).map_err(|err| LocalPipelineError::CorruptRecord {
        path: path.display().to_string(),
        reason: err.to_string(),
    })
}

/// Writes `bytes` to a temporary file next to `path`, flushed to disk.
pub(super) async fn write_temporary(path: &Path, bytes: &[u8]) -> Result<PathBuf, LocalPipelineError> {
    let parent = path.parent().unwrap_or(Path::new("."));
    tokio::fs::create_dir_all(parent)
        .await
        .map_err(|err| LocalPipelineError::io(format!("creating {}", parent.display()), err))?;
    let temporary = atomic_file::temporary_path(parent);
    let (target, content) = (temporary.clone(), bytes.to_vec());
    tokio::task::spawn_blocking(move || {
        let mut file = std::fs::File::create(&target)?;
        file.write_all(&content)?;
        file.sync_all()
    })
    .await
    .map_err(|err| LocalPipelineError::io("writing a record", std::io::Error::other(err)))?
    .map_err(|err| LocalPipelineError::io(format!("writing {}", temporary.display()), err))?;
    Ok(temporary)
}

/// Replaces `path` atomically.
pub(super) async fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), LocalPipelineError> {
    let temporary = write_temporary(path, bytes).await?;
    tokio::fs::rename(&temporary, path)
        .await
        .map_err(|err| LocalPipelineError::io(format!("moving {} into place", path.display()), err))
}

/// Creates `path` atomically unless it exists; says whether it created it.
pub(super) async fn create_atomic(path: &Path, bytes: &[u8]) -> Result<bool, LocalPipelineError> {
    let temporary = write_temporary(path, bytes).await?;
    let linked = tokio::fs::hard_link(&temporary, path).await;
    // The temporary name is unique; a leftover is harmless.
    let _ = tokio::fs::remove_file(&temporary).await;
    match linked {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(err) => Err(LocalPipelineError::io(format!("creating {}", path.display()), err)),
    }
}
