//! The embedded pipeline runner shared by the local adapters of
//! `pipeline_generation` (which queues runs) and `pipeline_monitor` (which
//! follows them): a small CI agent that executes a generated Azure
//! Pipelines YAML for real, on this machine.
//!
//! # Layout under the root (the runtime passes `<data dir>/pipelines`)
//!
//! - `runs/<tenant>/<runId>.json` — the run record ([`RunRecord`]), always
//!   replaced atomically (written to a temporary file, then renamed; the
//!   first write uses a hard link so two writers cannot both create it);
//! - `definitions/<tenant>/<pipelineId>.json` — pipeline definitions
//!   ([`PipelineDefinition`]), the local counterpart of Azure DevOps'
//!   pipeline definitions;
//! - `work/<tenant>/<runId>/` — a run's workspace while it executes, laid
//!   out like an Azure Pipelines agent's: `s` (sources, `Build.SourcesDirectory`),
//!   `a` (`Build.ArtifactStagingDirectory`), `b` (`Build.BinariesDirectory`),
//!   `TestResults`, `_temp` and `_logs`. It is removed when the run ends.
//!
//! Everything of a run is under its tenant: the record, the definition,
//! the workspace, and the blobs it uploads; a run id (derived from the
//! tenant among the rest) is looked up in the tenant's folder only, and a
//! record there naming another tenant is refused.
//!
//! # A run
//!
//! [`LocalPipelines::queue`] writes a `queued` record, hands it to an
//! executor on a background task (the record says `running`) and returns at
//! once, like a CI service handing a job to an agent — the caller never
//! waits for the run. It is idempotent on (tenant, repository, commit,
//! pipeline path): the run id is derived from them, so queueing twice
//! returns the same run. The executor:
//!
//! 1. **Checkout**: `git archive <commit>` of the local Git host's bare
//!    repository, extracted with `tar` into `s`;
//! 2. the pipeline file is read from the checkout and parsed with
//!    `yaml-rust2` (steps at the top level, or under `jobs`, or under
//!    `stages` → `jobs`, run in order; `variables` as a mapping or a list of
//!    `name`/`value`);
//! 3. each step runs in order. `script:` (and `bash:`) steps run with
//!    `sh -c` (`bash -c`) in their `workingDirectory` (default
//!    `Build.SourcesDirectory`), with `$(Variable)` macros substituted and
//!    every variable also exported as an environment variable the Azure way
//!    (`Build.SourcesDirectory` → `BUILD_SOURCESDIRECTORY`), plus the step's
//!    `env:`. The environment is otherwise cleared except for a few
//!    machine variables ([`INHERITED_ENV`]) so the service's own settings
//!    and secrets never reach a pipeline. Each script runs in its own
//!    process group, killed when the step ends. Tasks implemented:
//!    `PublishTestResults@2` (JUnit files matching the `testResultsFiles`
//!    globs under `searchFolder`, each uploaded to the blob container
//!    [`TEST_RESULTS_CONTAINER`]), `PublishPipelineArtifact@1` and the
//!    `publish:` shortcut (the target path tarred with the `tar` CLI with
//!    deterministic options — sorted names, mtime 0, owner 0, normalised
//!    modes, GNU format — uploaded to [`ARTIFACTS_CONTAINER`] under
//!    `<tenant>/<runId>/<name>`); `checkout:` steps are satisfied by step 1,
//!    and toolchain installer tasks (`UseDotNet@2`, `NodeTool@0`, ...) are
//!    skipped with a warning (the local agent uses the tools on its
//!    `PATH`). Any other task fails its step;
//! 4. step conditions follow Azure: `succeeded()` by default, so the run
//!    stops at the first failing step (its name is the run's
//!    `failedStep`), while `succeededOrFailed()` and `always()` steps (the
//!    generated test-results step) still run;
//! 5. the combined stdout/stderr of every step, between `##[section]`
//!    headers, is the run's log, uploaded to [`LOG_CONTAINER`] under
//!    `<tenant>/<runId>/log.txt`; the final record says `completed` with
//!    the result and the blob references.
//!
//! # Crashes
//!
//! While a run executes, its executor rewrites the record's `heartbeatAt`
//! every [`RunnerSettings::heartbeat_interval`]. A record that says
//! `running` with no live executor in this process and a heartbeat older
//! than [`RunnerSettings::stale_after`] belongs to an executor that died
//! (the process was killed): the next [`LocalPipelines::poll`] starts it
//! again from a fresh workspace (`attempt` + 1). An executor that finds
//! another executor's name on its record stops without writing. A record
//! write the killed process never renamed into place leaves a temporary
//! file, which opening the runner removes
//! ([`crate::delivery::atomic_file`]).
//!
//! # Files
//!
//! - `mod.rs` — [`LocalPipelines`]: queueing, polling, claiming a run;
//! - `record.rs` — [`RunRecord`] and [`PipelineDefinition`] and how they
//!   are written;
//! - `executor.rs` — one run from checkout to its final record, with its
//!   heartbeat;
//! - `definition.rs` — the pipeline YAML the runner understands;
//! - `variables.rs` — predefined variables and `$(Name)` macros;
//! - `script.rs` — script steps;
//! - `step_error.rs` — why a step failed, as its run records it;
//! - `publish.rs` — JUnit files, artifacts and the log, to the blob store;
//! - `glob.rs` — file patterns; `tools.rs` — `tar` and friends;
//! - `workspace.rs` — a run's workspace and log file.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bosun_contracts::validate;
use time::OffsetDateTime;

use crate::delivery::atomic_file;
use crate::delivery::blob::{BlobStore, sha256_hex};
use crate::delivery::git::{LocalGitError, LocalGitHost};
use crate::delivery::tenant::{ForeignTenant, check_owner};

mod definition;
mod executor;
mod glob;
mod publish;
mod record;
mod script;
mod step_error;
mod tools;
mod variables;
mod workspace;

pub use publish::artifact_kind;
pub use record::{PipelineDefinition, RunRecord, RunRequest, RunStatus};
use record::{create_atomic, read_record, to_json, write_atomic};

/// The runner's reading of a pipeline file, for tests of the files other
/// modules generate.
#[cfg(test)]
pub(crate) use definition::parse_pipeline;

/// Blob container of run logs.
pub const LOG_CONTAINER: &str = "build-logs";
/// Blob container of the JUnit files `PublishTestResults@2` uploads.
pub const TEST_RESULTS_CONTAINER: &str = "test-results";
/// Blob container of the archives `PublishPipelineArtifact@1` uploads.
pub const ARTIFACTS_CONTAINER: &str = "artifacts";
/// The artifact name container build looks for.
pub const CONTAINER_CONTEXT_ARTIFACT: &str = "container-context.tar";
/// The artifact name package publishing looks for.
pub const PACKAGE_CONTENT_ARTIFACT: &str = "package-content.tar";

/// Environment variables of the service passed on to pipeline steps; every
/// other variable is cleared.
pub const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Tasks that install a toolchain on a hosted agent; the local runner skips
/// them with a warning and uses the tools on its `PATH`.
pub const TOOLCHAIN_TASKS: &[&str] = &[
    "UseDotNet",
    "NodeTool",
    "UseNode",
    "UsePythonVersion",
    "GoTool",
    "JavaToolInstaller",
];

/// Attempts at uploading a blob before the step (or the log) gives up.
const UPLOAD_ATTEMPTS: u32 = 3;

/// Longest stderr excerpt of a failed tool kept in an error.
const MAX_STDERR: usize = 1000;

/// Timings of the runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunnerSettings {
    /// How often a running executor rewrites its heartbeat.
    pub heartbeat_interval: Duration,
    /// A `running` record whose heartbeat is older than this, with no live
    /// executor in this process, is started again.
    pub stale_after: Duration,
    /// Longest a run may take (Azure's default job timeout is 60 minutes);
    /// a run past it is stopped and fails.
    pub job_timeout: Duration,
}

impl Default for RunnerSettings {
    /// Heartbeat every 5 s, stale after 30 s, job timeout 60 minutes.
    fn default() -> Self {
        Self {
            heartbeat_interval: Duration::from_secs(5),
            stale_after: Duration::from_secs(30),
            job_timeout: Duration::from_secs(60 * 60),
        }
    }
}

/// Why the runner could not do what was asked (a failing pipeline is not
/// an error: it is a run whose result is `failed`).
#[derive(Debug, thiserror::Error)]
pub enum LocalPipelineError {
    /// A tenant, repository, path or id is not acceptable. Permanent.
    #[error("invalid run request: {0}")]
    Invalid(String),
    /// No run of that id for the tenant. Permanent.
    #[error("pipeline run `{run_id}` not found")]
    RunNotFound {
        /// The run id.
        run_id: String,
    },
    /// A run record could not be read. Permanent until an operator fixes it.
    #[error("run record {path} is unreadable: {reason}")]
    CorruptRecord {
        /// The record's file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A file-system operation failed. Transient.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The local Git host failed. Transient unless the input was invalid.
    #[error(transparent)]
    Git(#[from] LocalGitError),
    /// The run record in the tenant's folder names another tenant (a
    /// copied or edited folder). Permanent.
    #[error(transparent)]
    ForeignTenant(#[from] ForeignTenant),
}

impl LocalPipelineError {
    /// Whether retrying may help.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Io { .. } => true,
            Self::Git(err) => !err.is_invalid_input(),
            Self::Invalid(_) | Self::RunNotFound { .. } | Self::CorruptRecord { .. } | Self::ForeignTenant(_) => false,
        }
    }

    fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

/// The local pipeline runner: run records, definitions and executors under
/// one root. Share it in an [`Arc`] between the generation and monitor
/// adapters.
pub struct LocalPipelines {
    root: PathBuf,
    git: Arc<LocalGitHost>,
    blobs: Arc<dyn BlobStore>,
    settings: RunnerSettings,
    /// This runner instance's name, written on the records it executes.
    instance: String,
    /// Runs with a live executor in this process (`tenant/runId`).
    live: std::sync::Mutex<HashSet<String>>,
}

impl std::fmt::Debug for LocalPipelines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalPipelines")
            .field("root", &self.root)
            .field("git_root", &self.git.root())
            .field("settings", &self.settings)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl LocalPipelines {
    /// A runner keeping its records and workspaces under `root` (the runtime
    /// passes `<data dir>/pipelines`), checking out from the local Git host
    /// at `git_root` (`<data dir>/git`) and uploading logs, JUnit files and
    /// artifacts to `blobs`. Default [`RunnerSettings`].
    pub fn new(root: impl Into<PathBuf>, git_root: impl Into<PathBuf>, blobs: Arc<dyn BlobStore>) -> Self {
        Self::with_host(
            root,
            Arc::new(LocalGitHost::new(git_root)),
            blobs,
            RunnerSettings::default(),
        )
    }

    /// A runner sharing a Git host with other adapters, with its own timings.
    /// Opening the runner removes the temporary files of record writes a
    /// killed process never finished ([`atomic_file::remove_leftovers`]);
    /// a run the killed process was executing is started again by its next
    /// poll (see the crashes section above).
    pub fn with_host(
        root: impl Into<PathBuf>,
        git: Arc<LocalGitHost>,
        blobs: Arc<dyn BlobStore>,
        settings: RunnerSettings,
    ) -> Self {
        let root = root.into();
        let root = std::path::absolute(&root).unwrap_or(root);
        for records in ["runs", "definitions"] {
            atomic_file::remove_leftovers(&root.join(records));
        }
        Self {
            root,
            git,
            blobs,
            settings,
            instance: format!("bosun-local-{}", uuid::Uuid::new_v4()),
            live: std::sync::Mutex::new(HashSet::new()),
        }
    }

    /// The same runner with other timings.
    pub fn with_settings(mut self, settings: RunnerSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The Git host runs check out from.
    pub fn git_host(&self) -> &Arc<LocalGitHost> {
        &self.git
    }

    /// The id of the run of (tenant, repository, commit, pipeline path).
    pub fn run_id(tenant: &str, repository: &str, commit_sha: &str, pipeline_path: &str) -> String {
        let key = format!("{tenant}\n{repository}\n{commit_sha}\n{pipeline_path}");
        format!("run-{}", &sha256_hex(key.as_bytes())[..20])
    }

    /// A `file://` URL of a run's record, shown as the run's address.
    pub fn run_url(&self, tenant: &str, run_id: &str) -> String {
        crate::delivery::git::host::file_url(&self.record_path(tenant, run_id))
    }

    fn record_path(&self, tenant: &str, run_id: &str) -> PathBuf {
        self.root.join("runs").join(tenant).join(format!("{run_id}.json"))
    }

    fn workspace_path(&self, tenant: &str, run_id: &str) -> PathBuf {
        self.root.join("work").join(tenant).join(run_id)
    }

    /// Creates or updates a pipeline definition (idempotent: an unchanged
    /// definition is not rewritten).
    pub async fn ensure_definition(
        &self,
        tenant: &str,
        definition: &PipelineDefinition,
    ) -> Result<(), LocalPipelineError> {
        check_tenant(tenant)?;
        validate::identifier("pipelineId", &definition.pipeline_id).map_err(invalid)?;
        validate::repository_name("repository", &definition.repository).map_err(invalid)?;
        validate::repository_path("pipelinePath", &definition.pipeline_path).map_err(invalid)?;
        let path = self
            .root
            .join("definitions")
            .join(tenant)
            .join(format!("{}.json", definition.pipeline_id));
        let bytes = to_json(definition)?;
        if let Ok(existing) = tokio::fs::read(&path).await
            && existing == bytes
        {
            return Ok(());
        }
        write_atomic(&path, &bytes).await
    }

    /// Queues a run of a commit's pipeline file and starts executing it in
    /// the background; returns its record (`running` once an executor has
    /// it) without waiting for the run. Idempotent on
    /// (tenant, repository, commit, pipeline path): the same request
    /// returns the existing run, whatever its status.
    pub async fn queue(self: &Arc<Self>, request: &RunRequest) -> Result<RunRecord, LocalPipelineError> {
        check_tenant(&request.tenant)?;
        validate::repository_name("repository", &request.repository).map_err(invalid)?;
        validate::branch_name("branch", &request.branch).map_err(invalid)?;
        validate::git_sha("commitSha", &request.commit_sha).map_err(invalid)?;
        validate::repository_path("pipelinePath", &request.pipeline_path).map_err(invalid)?;
        validate::identifier("pipelineId", &request.pipeline_id).map_err(invalid)?;

        let run_id = Self::run_id(
            &request.tenant,
            &request.repository,
            &request.commit_sha,
            &request.pipeline_path,
        );
        let path = self.record_path(&request.tenant, &run_id);
        let record = RunRecord {
            run_id: run_id.clone(),
            pipeline_id: request.pipeline_id.clone(),
            tenant: request.tenant.clone(),
            repository: request.repository.clone(),
            branch: request.branch.clone(),
            commit_sha: request.commit_sha.clone(),
            pipeline_path: request.pipeline_path.clone(),
            status: RunStatus::Queued,
            result: None,
            attempt: 0,
            queued_at: now_seconds(),
            started_at: None,
            finished_at: None,
            heartbeat_at: None,
            executor: None,
            current_step: None,
            failed_step: None,
            error: None,
            log: None,
            test_results: Vec::new(),
            artifacts: Vec::new(),
        };
        let record = if create_atomic(&path, &to_json(&record)?).await? {
            tracing::info!(tenant = %request.tenant, run = %run_id, repository = %request.repository, commit = %request.commit_sha, "pipeline run queued");
            record
        } else {
            tracing::debug!(tenant = %request.tenant, run = %run_id, "pipeline run already queued");
            read_record(&path).await?
        };
        self.start_if_needed(record).await
    }

    /// A run's record, as stored.
    pub async fn get(&self, tenant: &str, run_id: &str) -> Result<RunRecord, LocalPipelineError> {
        check_tenant(tenant)?;
        validate::identifier("runId", run_id).map_err(invalid)?;
        let record = read_record(&self.record_path(tenant, run_id)).await?;
        check_owner(|| format!("pipeline run `{run_id}`"), &record.tenant, tenant)?;
        Ok(record)
    }

    /// A run's record, after starting it when it is queued or was
    /// interrupted by a crash (running, no live executor here, stale
    /// heartbeat). Never waits for the run.
    pub async fn poll(self: &Arc<Self>, tenant: &str, run_id: &str) -> Result<RunRecord, LocalPipelineError> {
        let record = self.get(tenant, run_id).await?;
        self.start_if_needed(record).await
    }

    /// Polls until the run is finished or `timeout` passes; the last record
    /// either way. For tests and tools: handlers never wait for a run.
    pub async fn wait_for_completion(
        self: &Arc<Self>,
        tenant: &str,
        run_id: &str,
        timeout: Duration,
    ) -> Result<RunRecord, LocalPipelineError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let record = self.poll(tenant, run_id).await?;
            if record.is_finished() || tokio::time::Instant::now() >= deadline {
                return Ok(record);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether this process runs an executor for the run now.
    pub fn is_live(&self, tenant: &str, run_id: &str) -> bool {
        self.live_set().contains(&live_key(tenant, run_id))
    }

    fn live_set(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a record needs an executor (ignoring live executors).
    fn needs_executor(&self, record: &RunRecord) -> bool {
        match record.status {
            RunStatus::Queued => true,
            RunStatus::Completed => false,
            RunStatus::Running => match record.heartbeat_at {
                None => true,
                Some(heartbeat) => {
                    let age = OffsetDateTime::now_utc() - heartbeat;
                    age > time::Duration::try_from(self.settings.stale_after).unwrap_or(time::Duration::MAX)
                }
            },
        }
    }

    /// Claims the run and spawns its executor, unless it needs none or one
    /// is live here; returns the record as it is now (claimed: `running`).
    async fn start_if_needed(self: &Arc<Self>, record: RunRecord) -> Result<RunRecord, LocalPipelineError> {
        if !self.needs_executor(&record) {
            return Ok(record);
        }
        let key = live_key(&record.tenant, &record.run_id);
        if !self.live_set().insert(key.clone()) {
            return Ok(record);
        }
        let guard = LiveGuard {
            runner: Arc::clone(self),
            key,
        };
        let path = self.record_path(&record.tenant, &record.run_id);
        let Some(claimed) = self.claim(&path).await? else {
            return read_record(&path).await;
        };
        if claimed.attempt > 1 {
            tracing::warn!(
                tenant = %claimed.tenant,
                run = %claimed.run_id,
                previous_executor = record.executor.as_deref().unwrap_or("none"),
                attempt = claimed.attempt,
                "pipeline run was interrupted (stale heartbeat); starting it again"
            );
        }
        let runner = Arc::clone(self);
        let started = claimed.clone();
        tokio::spawn(async move {
            let _guard = guard;
            let (tenant, run_id) = (started.tenant.clone(), started.run_id.clone());
            if let Err(err) = runner.execute(started).await {
                tracing::warn!(tenant = %tenant, run = %run_id, error = %err, "pipeline executor stopped early; the run will be started again");
            }
        });
        Ok(claimed)
    }

    /// Claims the run (status running, attempt + 1, this instance as its
    /// executor); `None` when it no longer needs an executor.
    async fn claim(&self, path: &Path) -> Result<Option<RunRecord>, LocalPipelineError> {
        let mut record = read_record(path).await?;
        if !self.needs_executor(&record) {
            return Ok(None);
        }
        let now = now_seconds();
        record.status = RunStatus::Running;
        record.attempt = record.attempt.saturating_add(1);
        record.started_at = Some(now.max(record.queued_at));
        record.heartbeat_at = Some(OffsetDateTime::now_utc());
        record.executor = Some(self.instance.clone());
        record.result = None;
        record.finished_at = None;
        record.current_step = None;
        record.failed_step = None;
        record.error = None;
        record.log = None;
        record.test_results.clear();
        record.artifacts.clear();
        write_atomic(path, &to_json(&record)?).await?;
        Ok(Some(record))
    }
}

fn live_key(tenant: &str, run_id: &str) -> String {
    format!("{tenant}/{run_id}")
}

/// Removes a run from the live set when its executor task ends, however
/// it ends.
struct LiveGuard {
    runner: Arc<LocalPipelines>,
    key: String,
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.runner.live_set().remove(&self.key);
    }
}

fn check_tenant(tenant: &str) -> Result<(), LocalPipelineError> {
    validate::tenant_id("tenant", tenant).map_err(invalid)
}

fn invalid(err: validate::FieldError) -> LocalPipelineError {
    LocalPipelineError::Invalid(format!("{}: {}", err.field, err.reason))
}

/// Now, to the second: records and messages carry whole seconds.
fn now_seconds() -> OffsetDateTime {
    let now = OffsetDateTime::now_utc();
    now.replace_nanosecond(0).unwrap_or(now)
}

#[cfg(test)]
pub(crate) mod test_support;

#[cfg(test)]
mod tests;
