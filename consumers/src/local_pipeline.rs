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
//! another executor's name on its record stops without writing.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bosun_contracts::messages::{ArtifactKind, ArtifactRef, BlobRef, PipelineResult};
use bosun_contracts::validate;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use tokio::process::Command;
use yaml_rust2::{Yaml, YamlLoader};

use crate::blob::{BlobStore, sha256_hex};
use crate::local_git::{LocalGitError, LocalGitHost};
use crate::tenant::{ForeignTenant, check_owner};

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

/// Environment variables that would redirect git away from the repository
/// we name, removed from every git command.
const INHERITED_GIT_VARS: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_COMMON_DIR",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
];

/// Attempts at uploading a blob before the step (or the log) gives up.
const UPLOAD_ATTEMPTS: u32 = 3;

/// Longest stderr excerpt of a failed tool kept in an error.
const MAX_STDERR: usize = 1000;

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
    pub fn with_host(
        root: impl Into<PathBuf>,
        git: Arc<LocalGitHost>,
        blobs: Arc<dyn BlobStore>,
        settings: RunnerSettings,
    ) -> Self {
        let root = root.into();
        let root = std::path::absolute(&root).unwrap_or(root);
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
        file_url(&self.record_path(tenant, run_id))
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

    /// Executes a claimed run from checkout to its final record.
    async fn execute(self: &Arc<Self>, record: RunRecord) -> Result<(), LocalPipelineError> {
        let (tenant, run_id) = (record.tenant.as_str(), record.run_id.as_str());
        let path = self.record_path(tenant, run_id);
        tracing::info!(tenant, run = run_id, attempt = record.attempt, "pipeline run started");
        let handle = Arc::new(RunHandle {
            path,
            instance: self.instance.clone(),
            record: tokio::sync::Mutex::new(record.clone()),
            lost: AtomicBool::new(false),
        });
        let heartbeat = AbortOnDrop(tokio::spawn(heartbeat(
            Arc::clone(&handle),
            self.settings.heartbeat_interval,
        )));

        let workspace = Workspace::prepare(self.workspace_path(tenant, run_id)).await?;
        let mut log = RunLog::create(&workspace.logs.join("log.txt"))?;
        log.line(&format!(
            "bosun local pipeline runner — run {run_id} (attempt {}) of {}@{} ({}), pipeline {}",
            record.attempt, record.repository, record.commit_sha, record.branch, record.pipeline_path
        ));
        if record.attempt > 1 {
            log.line("##[warning]The previous attempt of this run was interrupted; running it again from the start.");
        }

        let mut state = JobState::default();
        let job = self.run_job(&record, &workspace, &mut log, &handle, &mut state);
        if tokio::time::timeout(self.settings.job_timeout, job).await.is_err() {
            let minutes = self.settings.job_timeout.as_secs().div_ceil(60);
            let step = handle.record.lock().await.current_step.clone();
            log.line(&format!(
                "##[error]The job exceeded its time limit of {minutes} minutes and was cancelled."
            ));
            state.fail(
                step.as_deref().unwrap_or("Job"),
                format!("timed out after {minutes} minutes"),
            );
        }
        drop(heartbeat);
        if handle.lost.load(Ordering::SeqCst) {
            tracing::warn!(tenant, run = run_id, "another executor took this run over; stopping");
            return Ok(());
        }

        let result = if state.failed {
            PipelineResult::Failed
        } else {
            PipelineResult::Succeeded
        };
        log.line(&format!("##[section]Finishing: Job — {}", result_word(result)));
        let log_key = format!("{tenant}/{run_id}/log.txt");
        let log_blob = match log.finish(&workspace.logs.join("log.txt")).await {
            Ok(content) => upload(
                &*self.blobs,
                LOG_CONTAINER,
                &log_key,
                content,
                "text/plain; charset=utf-8",
            )
            .await
            .map_err(|err| tracing::warn!(tenant, run = run_id, error = %err, "could not upload the run log"))
            .ok(),
            Err(err) => {
                tracing::warn!(tenant, run = run_id, error = %err, "could not read the run log");
                None
            }
        };

        // Everything is uploaded: the workspace goes before the record says
        // `completed`, so a finished run never leaves one behind.
        workspace.remove().await;
        let finished = handle
            .update(|record| {
                let finished_at = now_seconds().max(record.queued_at);
                record.status = RunStatus::Completed;
                record.result = Some(result);
                record.finished_at = Some(finished_at);
                record.heartbeat_at = Some(OffsetDateTime::now_utc());
                record.current_step = None;
                record.failed_step = state.failed_step.clone();
                record.error = state.error.clone();
                record.log = log_blob.clone();
                record.test_results = state.test_results.clone();
                record.artifacts = state.artifacts.clone();
            })
            .await?;
        tracing::info!(
            tenant,
            run = run_id,
            result = result_word(result),
            failed_step = finished.failed_step.as_deref().unwrap_or(""),
            test_results = finished.test_results.len(),
            artifacts = finished.artifacts.len(),
            "pipeline run finished"
        );
        Ok(())
    }

    /// Checkout, parse, then every step in order.
    async fn run_job(
        &self,
        record: &RunRecord,
        workspace: &Workspace,
        log: &mut RunLog,
        handle: &RunHandle,
        state: &mut JobState,
    ) {
        log.section_start("Checkout");
        if let Err(reason) = self.checkout(record, workspace).await {
            log.line(&format!("##[error]{reason}"));
            state.fail("Checkout", reason);
            log.section_end("Checkout");
            return;
        }
        log.line(&format!(
            "Checked out {} at {} into {}",
            record.repository,
            record.commit_sha,
            workspace.sources.display()
        ));
        log.section_end("Checkout");

        let pipeline = match read_pipeline(&workspace.sources, &record.pipeline_path).await {
            Ok(pipeline) => pipeline,
            Err(reason) => {
                log.section_start("Parse pipeline");
                log.line(&format!("##[error]{}: {reason}", record.pipeline_path));
                state.fail("Parse pipeline", format!("{}: {reason}", record.pipeline_path));
                log.section_end("Parse pipeline");
                return;
            }
        };
        let mut variables =
            Variables::predefined(record, workspace, &self.root, &self.git_repository_url(record).await);
        for (name, value) in &pipeline.variables {
            let value = variables.expand(value);
            variables.set(name, value);
        }

        for job in &pipeline.jobs {
            let mut job_variables = variables.clone();
            job_variables.set("Agent.JobName", job.name.clone());
            for (name, value) in &job.variables {
                let value = job_variables.expand(value);
                job_variables.set(name, value);
            }
            log.line(&format!("##[section]Job: {}", job.name));
            for step in &job.steps {
                if handle.lost.load(Ordering::SeqCst) {
                    return;
                }
                if !step.enabled {
                    log.line(&format!("##[section]Skipping: {} (disabled)", step.name));
                    continue;
                }
                if let Condition::Other(text) = &step.condition {
                    log.line(&format!(
                        "##[warning]Condition `{text}` is not supported by the local runner; using succeeded()."
                    ));
                }
                if !step.condition.allows(state.failed) {
                    log.line(&format!(
                        "##[section]Skipping: {} (condition {} is false)",
                        step.name,
                        step.condition.text()
                    ));
                    continue;
                }
                let name = step.name.clone();
                if let Err(err) = handle.update(|record| record.current_step = Some(name.clone())).await {
                    tracing::warn!(run = %record.run_id, error = %err, "could not record the current step");
                }
                log.section_start(&step.name);
                let outcome = self.run_step(step, &job_variables, record, workspace, log, state).await;
                if let Err(reason) = outcome {
                    log.line(&format!("##[error]{reason}"));
                    state.fail(&step.name, reason);
                }
                log.section_end(&step.name);
            }
        }
    }

    async fn git_repository_url(&self, record: &RunRecord) -> String {
        match self.git.find(&record.tenant, &record.repository).await {
            Ok(Some(repository)) => repository.url(),
            _ => String::new(),
        }
    }

    /// `git archive <commit> | tar -x` into the sources folder.
    async fn checkout(&self, record: &RunRecord, workspace: &Workspace) -> Result<(), String> {
        let repository = self
            .git
            .find(&record.tenant, &record.repository)
            .await
            .map_err(|err| format!("could not open repository {}: {err}", record.repository))?
            .ok_or_else(|| format!("repository {} not found", record.repository))?;
        let archive = workspace.temp.join("sources.tar");
        let mut git = git_command(&repository.path);
        git.args(["archive", "--format=tar", "-o"])
            .arg(&archive)
            .arg("--end-of-options")
            .arg(&record.commit_sha);
        run_tool(git, "git archive").await?;
        let mut tar = tar_command();
        tar.args(["--extract", "--no-same-owner", "--file"])
            .arg(&archive)
            .arg("--directory")
            .arg(&workspace.sources);
        run_tool(tar, "tar --extract").await?;
        tokio::fs::remove_file(&archive)
            .await
            .map_err(|err| format!("removing {}: {err}", archive.display()))
    }

    async fn run_step(
        &self,
        step: &Step,
        variables: &Variables,
        record: &RunRecord,
        workspace: &Workspace,
        log: &mut RunLog,
        state: &mut JobState,
    ) -> Result<(), String> {
        match &step.kind {
            StepKind::Checkout(repository) => {
                if repository == "none" {
                    log.line("Checkout is disabled for this job; the sources folder is left as it is.");
                } else {
                    log.line(&format!(
                        "The sources of `{repository}` are checked out in {}.",
                        workspace.sources.display()
                    ));
                }
                Ok(())
            }
            StepKind::Script { body, shell } => run_script(body, *shell, step, variables, workspace, log).await,
            StepKind::Task { task, inputs } => {
                let inputs: BTreeMap<String, String> = inputs
                    .iter()
                    .map(|(key, value)| (key.to_ascii_lowercase(), variables.expand(value)))
                    .collect();
                let (name, _version) = task.split_once('@').unwrap_or((task.as_str(), ""));
                match task.as_str() {
                    "PublishTestResults@2" => {
                        let published = self
                            .publish_test_results(&inputs, variables, record, workspace, log)
                            .await?;
                        state.test_results.extend(published);
                        Ok(())
                    }
                    "PublishPipelineArtifact@1" => {
                        let artifact = self
                            .publish_artifact(&inputs, variables, record, workspace, log, &state.artifacts)
                            .await?;
                        state.artifacts.push(artifact);
                        Ok(())
                    }
                    _ if TOOLCHAIN_TASKS.contains(&name) => {
                        log.line(&format!(
                            "##[warning]{task} is not run by the local runner: the tools on the agent's PATH are used."
                        ));
                        Ok(())
                    }
                    _ => Err(format!("task {task} is not supported by the local runner")),
                }
            }
        }
    }

    /// `PublishTestResults@2`: uploads the JUnit files matching the globs.
    async fn publish_test_results(
        &self,
        inputs: &BTreeMap<String, String>,
        variables: &Variables,
        record: &RunRecord,
        workspace: &Workspace,
        log: &mut RunLog,
    ) -> Result<Vec<BlobRef>, String> {
        let format = inputs
            .get("testresultsformat")
            .or_else(|| inputs.get("testrunner"))
            .map(String::as_str)
            .unwrap_or("JUnit");
        if !format.eq_ignore_ascii_case("junit") {
            return Err(format!(
                "testResultsFormat `{format}` is not supported by the local runner (JUnit only)"
            ));
        }
        let patterns = inputs
            .get("testresultsfiles")
            .cloned()
            .unwrap_or_else(|| "**/TEST-*.xml".to_owned());
        let search = inputs
            .get("searchfolder")
            .cloned()
            .unwrap_or_else(|| variables.expand("$(System.DefaultWorkingDirectory)"));
        let search = resolve(&workspace.sources, &search);
        let files = find_files(&search, &patterns).await?;
        if files.is_empty() {
            log.line(&format!(
                "##[warning]No test result files matching '{}' were found under {}.",
                patterns.replace('\n', ", "),
                search.display()
            ));
            return Ok(Vec::new());
        }
        let mut published = Vec::with_capacity(files.len());
        for (relative, path) in files {
            let key = format!("{}/{}/{relative}", record.tenant, record.run_id);
            if validate::blob_key("key", &key).is_err() {
                log.line(&format!(
                    "##[warning]Skipping {relative}: the name cannot be a blob key."
                ));
                continue;
            }
            let content = tokio::fs::read(&path)
                .await
                .map_err(|err| format!("reading {}: {err}", path.display()))?;
            let blob = upload(&*self.blobs, TEST_RESULTS_CONTAINER, &key, content, "application/xml")
                .await
                .map_err(|err| format!("uploading {relative}: {err}"))?;
            log.line(&format!(
                "Published test results {relative} ({} bytes).",
                blob.size_bytes
            ));
            published.push(blob);
        }
        Ok(published)
    }

    /// `PublishPipelineArtifact@1`: tars the target path and uploads it.
    async fn publish_artifact(
        &self,
        inputs: &BTreeMap<String, String>,
        variables: &Variables,
        record: &RunRecord,
        workspace: &Workspace,
        log: &mut RunLog,
        published: &[ArtifactRef],
    ) -> Result<ArtifactRef, String> {
        let name = inputs
            .get("artifact")
            .or_else(|| inputs.get("artifactname"))
            .cloned()
            .unwrap_or_else(|| "drop".to_owned());
        validate::identifier("artifact", &name).map_err(|err| err.reason)?;
        if published.iter().any(|artifact| artifact.name == name) {
            return Err(format!("an artifact named `{name}` was already published by this run"));
        }
        let target = inputs
            .get("targetpath")
            .or_else(|| inputs.get("path"))
            .cloned()
            .unwrap_or_else(|| variables.expand("$(Pipeline.Workspace)"));
        let target = resolve(&workspace.sources, &target);
        let archive = workspace.temp.join(format!("artifact-{name}"));
        tar_path(&target, &archive).await?;
        let content = tokio::fs::read(&archive)
            .await
            .map_err(|err| format!("reading {}: {err}", archive.display()))?;
        // The archive is in memory now; a failed removal only costs disk
        // until the workspace goes.
        let _ = tokio::fs::remove_file(&archive).await;
        let key = format!("{}/{}/{name}", record.tenant, record.run_id);
        let blob = upload(&*self.blobs, ARTIFACTS_CONTAINER, &key, content, "application/x-tar")
            .await
            .map_err(|err| format!("uploading artifact {name}: {err}"))?;
        log.line(&format!(
            "Published artifact {name} from {} ({} bytes, sha256 {}).",
            target.display(),
            blob.size_bytes,
            blob.sha256
        ));
        Ok(ArtifactRef {
            kind: artifact_kind(&name),
            name,
            blob,
        })
    }
}

/// The kind of an artifact, from its name.
pub fn artifact_kind(name: &str) -> ArtifactKind {
    if name == CONTAINER_CONTEXT_ARTIFACT {
        ArtifactKind::ContainerContext
    } else if name.ends_with(".nupkg") {
        ArtifactKind::Package
    } else {
        ArtifactKind::Archive
    }
}

fn result_word(result: PipelineResult) -> &'static str {
    match result {
        PipelineResult::Succeeded => "succeeded",
        PipelineResult::Failed => "failed",
        PipelineResult::Canceled => "canceled",
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

/// Aborts a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The record of a run being executed; every write goes through here so
/// the heartbeat and the executor never overwrite each other.
struct RunHandle {
    path: PathBuf,
    instance: String,
    record: tokio::sync::Mutex<RunRecord>,
    /// Set when the record names another executor: this one must stop.
    lost: AtomicBool,
}

impl RunHandle {
    /// Applies a change and writes the record, unless another executor
    /// took the run over.
    async fn update(&self, change: impl FnOnce(&mut RunRecord)) -> Result<RunRecord, LocalPipelineError> {
        let mut current = self.record.lock().await;
        if let Ok(stored) = read_record(&self.path).await
            && stored.executor.as_deref() != Some(self.instance.as_str())
        {
            self.lost.store(true, Ordering::SeqCst);
            return Ok(stored);
        }
        let mut next = current.clone();
        change(&mut next);
        write_atomic(&self.path, &to_json(&next)?).await?;
        *current = next.clone();
        Ok(next)
    }
}

async fn heartbeat(handle: Arc<RunHandle>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let result = handle
            .update(|record| record.heartbeat_at = Some(OffsetDateTime::now_utc()))
            .await;
        if let Err(err) = result {
            tracing::warn!(error = %err, "could not write a pipeline run heartbeat");
        }
        if handle.lost.load(Ordering::SeqCst) {
            return;
        }
    }
}

/// What a job has done so far; kept by the caller so a timed-out job's
/// published results are not lost.
#[derive(Debug, Default)]
struct JobState {
    failed: bool,
    failed_step: Option<String>,
    error: Option<String>,
    test_results: Vec<BlobRef>,
    artifacts: Vec<ArtifactRef>,
}

impl JobState {
    /// Records a failure; the first failing step is the run's.
    fn fail(&mut self, step: &str, reason: String) {
        if !self.failed {
            self.failed_step = Some(step.to_owned());
            self.error = Some(reason);
        }
        self.failed = true;
    }
}

/// A run's workspace, laid out like an agent's.
struct Workspace {
    root: PathBuf,
    sources: PathBuf,
    staging: PathBuf,
    binaries: PathBuf,
    test_results: PathBuf,
    temp: PathBuf,
    logs: PathBuf,
}

impl Workspace {
    /// Creates the workspace afresh (a previous attempt's is removed).
    async fn prepare(root: PathBuf) -> Result<Self, LocalPipelineError> {
        match tokio::fs::remove_dir_all(&root).await {
            Ok(()) => {}
            Err(err) if err.kind() == ErrorKind::NotFound => {}
            Err(err) => return Err(LocalPipelineError::io(format!("removing {}", root.display()), err)),
        }
        let workspace = Self {
            sources: root.join("s"),
            staging: root.join("a"),
            binaries: root.join("b"),
            test_results: root.join("TestResults"),
            temp: root.join("_temp"),
            logs: root.join("_logs"),
            root,
        };
        for dir in [
            &workspace.sources,
            &workspace.staging,
            &workspace.binaries,
            &workspace.test_results,
            &workspace.temp,
            &workspace.logs,
        ] {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|err| LocalPipelineError::io(format!("creating {}", dir.display()), err))?;
        }
        Ok(workspace)
    }

    async fn remove(&self) {
        if let Err(err) = tokio::fs::remove_dir_all(&self.root).await {
            tracing::warn!(workspace = %self.root.display(), error = %err, "could not remove a run workspace");
        }
    }
}

/// The run's log file: section headers written here, step output appended
/// by the step processes themselves.
struct RunLog {
    file: std::fs::File,
    failed: bool,
}

impl RunLog {
    fn create(path: &Path) -> Result<Self, LocalPipelineError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(path)
            .map_err(|err| LocalPipelineError::io(format!("creating {}", path.display()), err))?;
        Ok(Self { file, failed: false })
    }

    fn line(&mut self, text: &str) {
        if let Err(err) = writeln!(self.file, "{text}")
            && !self.failed
        {
            self.failed = true;
            tracing::warn!(error = %err, "could not write to a run log");
        }
    }

    fn section_start(&mut self, name: &str) {
        self.line(&format!("##[section]Starting: {name}"));
    }

    fn section_end(&mut self, name: &str) {
        self.line(&format!("##[section]Finishing: {name}"));
    }

    /// A handle step processes write their output to.
    fn output(&self) -> std::io::Result<Stdio> {
        Ok(Stdio::from(self.file.try_clone()?))
    }

    async fn finish(mut self, path: &Path) -> std::io::Result<Vec<u8>> {
        self.file.flush()?;
        drop(self.file);
        tokio::fs::read(path).await
    }
}

// ---- variables ----

/// Pipeline variables: case-insensitive names, `$(Name)` macros.
#[derive(Debug, Clone, Default)]
struct Variables {
    /// Lowercased name → (name as written, value), in name order.
    values: BTreeMap<String, (String, String)>,
}

impl Variables {
    /// The variables an Azure Pipelines agent defines for a job.
    fn predefined(record: &RunRecord, workspace: &Workspace, root: &Path, repository_url: &str) -> Self {
        let path = |path: &Path| path.display().to_string();
        let branch_name = record.branch.rsplit('/').next().unwrap_or(&record.branch).to_owned();
        let os = match std::env::consts::OS {
            "linux" => "Linux",
            "macos" => "Darwin",
            "windows" => "Windows_NT",
            other => other,
        };
        let arch = match std::env::consts::ARCH {
            "x86_64" => "X64",
            "aarch64" => "ARM64",
            "x86" => "X86",
            other => other,
        };
        let mut variables = Self::default();
        for (name, value) in [
            ("Agent.BuildDirectory", path(&workspace.root)),
            ("Agent.HomeDirectory", path(root)),
            ("Agent.Name", "bosun-local".to_owned()),
            ("Agent.OS", os.to_owned()),
            ("Agent.OSArchitecture", arch.to_owned()),
            ("Agent.TempDirectory", path(&workspace.temp)),
            ("Agent.WorkFolder", path(&root.join("work"))),
            ("Build.ArtifactStagingDirectory", path(&workspace.staging)),
            ("Build.BinariesDirectory", path(&workspace.binaries)),
            ("Build.BuildId", record.run_id.clone()),
            ("Build.BuildNumber", record.run_id.clone()),
            ("Build.DefinitionName", record.pipeline_id.clone()),
            ("Build.Reason", "Manual".to_owned()),
            ("Build.Repository.LocalPath", path(&workspace.sources)),
            ("Build.Repository.Name", record.repository.clone()),
            ("Build.Repository.Provider", "TfsGit".to_owned()),
            ("Build.Repository.Uri", repository_url.to_owned()),
            ("Build.SourceBranch", format!("refs/heads/{}", record.branch)),
            ("Build.SourceBranchName", branch_name),
            ("Build.SourceVersion", record.commit_sha.clone()),
            ("Build.SourcesDirectory", path(&workspace.sources)),
            ("Build.StagingDirectory", path(&workspace.staging)),
            ("Common.TestResultsDirectory", path(&workspace.test_results)),
            ("Pipeline.Workspace", path(&workspace.root)),
            ("System.DefaultWorkingDirectory", path(&workspace.sources)),
            ("System.DefinitionId", record.pipeline_id.clone()),
            ("System.JobAttempt", record.attempt.to_string()),
            ("System.TeamProject", record.tenant.clone()),
            ("TF_BUILD", "True".to_owned()),
        ] {
            variables.set(name, value);
        }
        variables
    }

    fn set(&mut self, name: &str, value: String) {
        self.values.insert(name.to_ascii_lowercase(), (name.to_owned(), value));
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.values
            .get(&name.to_ascii_lowercase())
            .map(|(_, value)| value.as_str())
    }

    /// Replaces `$(Name)` macros of known variables; unknown ones are left
    /// as written (as Azure Pipelines does).
    fn expand(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("$(") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let replaced = after.find(')').and_then(|end| {
                let name = &after[..end];
                let valid = !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
                if valid {
                    self.get(name).map(|value| (value, end))
                } else {
                    None
                }
            });
            match replaced {
                Some((value, end)) => {
                    out.push_str(value);
                    rest = &after[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// Every variable as an environment variable, the Azure way:
    /// upper-cased, `.` and spaces turned into `_`.
    fn environment(&self) -> impl Iterator<Item = (String, &str)> {
        self.values.values().map(|(name, value)| {
            let name: String = name
                .chars()
                .map(|c| {
                    if c == '.' || c == ' ' {
                        '_'
                    } else {
                        c.to_ascii_uppercase()
                    }
                })
                .collect();
            (name, value.as_str())
        })
    }
}

// ---- the pipeline file ----

/// A parsed pipeline: variables and jobs of steps, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pipeline {
    variables: Vec<(String, String)>,
    jobs: Vec<Job>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Job {
    name: String,
    variables: Vec<(String, String)>,
    steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Step {
    name: String,
    kind: StepKind,
    condition: Condition,
    working_directory: Option<String>,
    env: Vec<(String, String)>,
    timeout: Option<Duration>,
    enabled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shell {
    Sh,
    Bash,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum StepKind {
    Script {
        body: String,
        shell: Shell,
    },
    Checkout(String),
    Task {
        task: String,
        inputs: Vec<(String, String)>,
    },
}

/// A step's `condition:`, the forms the local runner understands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Condition {
    Succeeded,
    SucceededOrFailed,
    Always,
    Failed,
    Never,
    Other(String),
}

impl Condition {
    fn parse(text: &str) -> Self {
        let compact: String = text
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .to_ascii_lowercase();
        match compact.as_str() {
            "" | "succeeded()" => Self::Succeeded,
            "succeededorfailed()" => Self::SucceededOrFailed,
            "always()" | "true" => Self::Always,
            "failed()" => Self::Failed,
            "false" => Self::Never,
            _ => Self::Other(text.to_owned()),
        }
    }

    /// Whether the step runs, given whether an earlier step failed.
    fn allows(&self, failed: bool) -> bool {
        match self {
            Self::Succeeded | Self::Other(_) => !failed,
            Self::SucceededOrFailed | Self::Always => true,
            Self::Failed => failed,
            Self::Never => false,
        }
    }

    fn text(&self) -> &str {
        match self {
            Self::Succeeded => "succeeded()",
            Self::SucceededOrFailed => "succeededOrFailed()",
            Self::Always => "always()",
            Self::Failed => "failed()",
            Self::Never => "false",
            Self::Other(text) => text,
        }
    }
}

async fn read_pipeline(sources: &Path, pipeline_path: &str) -> Result<Pipeline, String> {
    validate::repository_path("pipelinePath", pipeline_path).map_err(|err| err.reason)?;
    let path = sources.join(pipeline_path);
    let text = match tokio::fs::read_to_string(&path).await {
        Ok(text) => text,
        Err(err) if err.kind() == ErrorKind::NotFound => {
            return Err("the pipeline file is not in the commit".to_owned());
        }
        Err(err) => return Err(format!("could not read the pipeline file: {err}")),
    };
    parse_pipeline(&text)
}

/// Parses an Azure Pipelines YAML document.
fn parse_pipeline(text: &str) -> Result<Pipeline, String> {
    let documents = YamlLoader::load_from_str(text).map_err(|err| format!("invalid YAML: {err}"))?;
    let document = documents.first().ok_or("the file is empty")?;
    if document.as_hash().is_none() {
        return Err("the document is not a mapping".to_owned());
    }
    if !document["extends"].is_badvalue() {
        return Err("`extends` templates are not supported by the local runner".to_owned());
    }
    let variables = parse_variables(&document["variables"], "variables")?;
    let mut jobs = Vec::new();
    if !document["steps"].is_badvalue() {
        jobs.push(parse_job(document, "Job", "")?);
    } else if let Some(list) = document["jobs"].as_vec() {
        for (index, job) in list.iter().enumerate() {
            jobs.push(parse_job(
                job,
                &format!("Job {}", index + 1),
                &format!("jobs[{index}]."),
            )?);
        }
    } else if let Some(stages) = document["stages"].as_vec() {
        for (stage_index, stage) in stages.iter().enumerate() {
            let list = stage["jobs"]
                .as_vec()
                .ok_or_else(|| format!("stages[{stage_index}]: a stage needs `jobs`"))?;
            for (index, job) in list.iter().enumerate() {
                let prefix = format!("stages[{stage_index}].jobs[{index}].");
                jobs.push(parse_job(job, &format!("Job {}", jobs.len() + 1), &prefix)?);
            }
        }
    } else {
        return Err("the pipeline has no `steps`, `jobs` or `stages`".to_owned());
    }
    Ok(Pipeline { variables, jobs })
}

fn parse_job(job: &Yaml, default_name: &str, prefix: &str) -> Result<Job, String> {
    if !job["template"].is_badvalue() {
        return Err(format!(
            "{prefix}template: templates are not supported by the local runner"
        ));
    }
    let name = scalar(&job["displayName"])
        .or_else(|| scalar(&job["job"]))
        .or_else(|| scalar(&job["deployment"]))
        .unwrap_or_else(|| default_name.to_owned());
    let variables = parse_variables(&job["variables"], &format!("{prefix}variables"))?;
    let steps = match &job["steps"] {
        Yaml::Array(steps) => steps
            .iter()
            .enumerate()
            .map(|(index, step)| parse_step(step, &format!("{prefix}steps[{index}]")))
            .collect::<Result<Vec<_>, _>>()?,
        Yaml::Null | Yaml::BadValue => Vec::new(),
        _ => return Err(format!("{prefix}steps: must be a list")),
    };
    Ok(Job { name, variables, steps })
}

fn parse_variables(node: &Yaml, field: &str) -> Result<Vec<(String, String)>, String> {
    match node {
        Yaml::BadValue | Yaml::Null => Ok(Vec::new()),
        Yaml::Hash(map) => map
            .iter()
            .map(|(key, value)| {
                let name = scalar(key).ok_or_else(|| format!("{field}: a name is not text"))?;
                Ok((name, scalar(value).unwrap_or_default()))
            })
            .collect(),
        Yaml::Array(list) => {
            let mut variables = Vec::new();
            for (index, entry) in list.iter().enumerate() {
                if !entry["group"].is_badvalue() || !entry["template"].is_badvalue() {
                    return Err(format!(
                        "{field}[{index}]: variable groups and templates are not supported by the local runner"
                    ));
                }
                let name = scalar(&entry["name"]).ok_or_else(|| format!("{field}[{index}]: `name` is missing"))?;
                variables.push((name, scalar(&entry["value"]).unwrap_or_default()));
            }
            Ok(variables)
        }
        _ => Err(format!("{field}: must be a mapping or a list")),
    }
}

fn parse_step(step: &Yaml, field: &str) -> Result<Step, String> {
    if step.as_hash().is_none() {
        return Err(format!("{field}: a step must be a mapping"));
    }
    if !step["template"].is_badvalue() {
        return Err(format!("{field}: templates are not supported by the local runner"));
    }
    let text = |key: &str| scalar(&step[key]);
    let (kind, default_name) = if let Some(body) = text("script") {
        (StepKind::Script { body, shell: Shell::Sh }, "CmdLine".to_owned())
    } else if let Some(body) = text("bash") {
        (
            StepKind::Script {
                body,
                shell: Shell::Bash,
            },
            "Bash".to_owned(),
        )
    } else if let Some(repository) = text("checkout") {
        (StepKind::Checkout(repository), "Checkout".to_owned())
    } else if let Some(task) = text("task") {
        let inputs = match &step["inputs"] {
            Yaml::Hash(map) => map
                .iter()
                .filter_map(|(key, value)| Some((scalar(key)?, scalar(value).unwrap_or_default())))
                .collect(),
            Yaml::BadValue | Yaml::Null => Vec::new(),
            _ => return Err(format!("{field}.inputs: must be a mapping")),
        };
        let name = task.split('@').next().unwrap_or(&task).to_owned();
        (StepKind::Task { task, inputs }, name)
    } else if let Some(path) = text("publish") {
        let mut inputs = vec![("targetPath".to_owned(), path)];
        if let Some(artifact) = text("artifact") {
            inputs.push(("artifact".to_owned(), artifact));
        }
        (
            StepKind::Task {
                task: "PublishPipelineArtifact@1".to_owned(),
                inputs,
            },
            "PublishPipelineArtifact".to_owned(),
        )
    } else {
        return Err(format!(
            "{field}: a step needs one of `script`, `bash`, `checkout`, `task` or `publish`"
        ));
    };
    let env = match &step["env"] {
        Yaml::Hash(map) => map
            .iter()
            .filter_map(|(key, value)| Some((scalar(key)?, scalar(value).unwrap_or_default())))
            .collect(),
        Yaml::BadValue | Yaml::Null => Vec::new(),
        _ => return Err(format!("{field}.env: must be a mapping")),
    };
    let timeout = match &step["timeoutInMinutes"] {
        Yaml::Integer(minutes) if *minutes > 0 => Some(Duration::from_secs(u64::try_from(*minutes).unwrap_or(0) * 60)),
        Yaml::Integer(_) | Yaml::BadValue | Yaml::Null => None,
        _ => return Err(format!("{field}.timeoutInMinutes: must be a whole number")),
    };
    Ok(Step {
        name: text("displayName").or_else(|| text("name")).unwrap_or(default_name),
        kind,
        condition: text("condition")
            .map(|c| Condition::parse(&c))
            .unwrap_or(Condition::Succeeded),
        working_directory: text("workingDirectory"),
        env,
        timeout,
        enabled: step["enabled"].as_bool().unwrap_or(true),
    })
}

/// A scalar as text (`true`, `42` and `1.5` included); `None` for
/// mappings, lists and missing keys.
fn scalar(node: &Yaml) -> Option<String> {
    match node {
        Yaml::String(text) | Yaml::Real(text) => Some(text.clone()),
        Yaml::Integer(number) => Some(number.to_string()),
        Yaml::Boolean(flag) => Some(flag.to_string()),
        Yaml::Null => Some(String::new()),
        _ => None,
    }
}

// ---- steps ----

async fn run_script(
    body: &str,
    shell: Shell,
    step: &Step,
    variables: &Variables,
    workspace: &Workspace,
    log: &mut RunLog,
) -> Result<(), String> {
    let script = variables.expand(body);
    let directory = match &step.working_directory {
        Some(dir) => resolve(&workspace.sources, &variables.expand(dir)),
        None => workspace.sources.clone(),
    };
    if !tokio::fs::metadata(&directory).await.is_ok_and(|meta| meta.is_dir()) {
        return Err(format!("working directory {} does not exist", directory.display()));
    }
    let (program, args): (&str, &[&str]) = match shell {
        Shell::Sh => ("sh", &["-c"]),
        Shell::Bash => ("bash", &["--noprofile", "--norc", "-c"]),
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .arg(&script)
        .current_dir(&directory)
        .env_clear()
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for name in INHERITED_ENV {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    if std::env::var_os("PATH").is_none() {
        command.env("PATH", "/usr/local/bin:/usr/bin:/bin");
    }
    command.env("CI", "true").env("TMPDIR", &workspace.temp);
    for (name, value) in variables.environment() {
        command.env(name, value);
    }
    for (name, value) in &step.env {
        command.env(name, variables.expand(value));
    }
    let output = log.output().map_err(|err| format!("opening the log: {err}"))?;
    let errors = log.output().map_err(|err| format!("opening the log: {err}"))?;
    command.stdout(output).stderr(errors);
    #[cfg(unix)]
    command.process_group(0);
    let mut child = command
        .spawn()
        .map_err(|err| format!("could not start `{program}`: {err}"))?;
    let _group = ProcessGroup(child.id());
    let status = match step.timeout {
        Some(limit) => match tokio::time::timeout(limit, child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                return Err(format!(
                    "the step exceeded its time limit of {} minutes and was cancelled",
                    limit.as_secs() / 60
                ));
            }
        },
        None => child.wait().await,
    }
    .map_err(|err| format!("waiting for `{program}`: {err}"))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => Err(format!("Script exited with code '{code}'.")),
        None => Err(format!("Script was stopped by a signal ({status}).")),
    }
}

/// Kills a step's whole process group (background children included) when
/// the step ends, like an agent cleaning up after a job.
struct ProcessGroup(Option<u32>);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.0 {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// `path` if absolute, else `base/path`.
fn resolve(base: &Path, path: &str) -> PathBuf {
    let path = Path::new(path.trim());
    if path.is_absolute() {
        path.to_owned()
    } else {
        base.join(path)
    }
}

// ---- globs ----

/// Files under `base` matching the newline-separated minimatch-style
/// patterns (`**`, `*`, `?`, `[...]`; `!` excludes; `#` comments), as
/// (path relative to `base` with `/`, full path), sorted.
async fn find_files(base: &Path, patterns: &str) -> Result<Vec<(String, PathBuf)>, String> {
    let base = base.to_owned();
    let patterns = patterns.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut include = Vec::new();
        let mut exclude = Vec::new();
        for pattern in patterns.lines().flat_map(|line| line.split(';')) {
            let pattern = pattern.trim();
            if pattern.is_empty() || pattern.starts_with('#') {
                continue;
            }
            match pattern.strip_prefix('!') {
                Some(negated) => exclude.push(negated.trim().to_owned()),
                None => include.push(pattern.to_owned()),
            }
        }
        let mut files = Vec::new();
        walk(&base, &base, &mut files).map_err(|err| format!("listing {}: {err}", base.display()))?;
        let matches = |pattern: &str, relative: &str, full: &Path| {
            if pattern.starts_with('/') {
                glob_match(pattern, &full.to_string_lossy())
            } else {
                glob_match(pattern.trim_start_matches("./"), relative)
            }
        };
        let mut found: Vec<(String, PathBuf)> = files
            .into_iter()
            .filter(|(relative, full)| {
                include.iter().any(|p| matches(p, relative, full))
                    && !exclude.iter().any(|p| matches(p, relative, full))
            })
            .collect();
        found.sort();
        Ok(found)
    })
    .await
    .map_err(|err| format!("searching for files: {err}"))?
}

/// Every regular file under `dir` (symlinked folders not followed).
fn walk(base: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == ErrorKind::NotFound && dir == base => return Ok(()),
        Err(err) => return Err(err),
    };
    for entry in entries {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = entry.path();
        if kind.is_dir() {
            walk(base, &path, files)?;
        } else if kind.is_file()
            && let Ok(relative) = path.strip_prefix(base)
        {
            let relative = relative
                .components()
                .map(|part| part.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            files.push((relative, path));
        }
    }
    Ok(())
}

/// Whether a `/`-separated path matches a glob (`**` spans folders).
pub(crate) fn glob_match(pattern: &str, path: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('/').filter(|part| !part.is_empty()).collect();
    let path: Vec<&str> = path.split('/').filter(|part| !part.is_empty()).collect();
    match_segments(&pattern, &path)
}

fn match_segments(pattern: &[&str], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => (0..=path.len()).any(|skip| match_segments(rest, &path[skip..])),
        Some((first, rest)) => match path.split_first() {
            Some((name, others)) => {
                let pattern: Vec<char> = first.chars().collect();
                let name: Vec<char> = name.chars().collect();
                match_name(&pattern, &name) && match_segments(rest, others)
            }
            None => false,
        },
    }
}

/// One path segment against one glob segment (`*`, `?`, `[a-z]`, `[!x]`).
fn match_name(pattern: &[char], name: &[char]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some(('*', rest)) => (0..=name.len()).any(|skip| match_name(rest, &name[skip..])),
        Some(('?', rest)) => !name.is_empty() && match_name(rest, &name[1..]),
        Some(('[', rest)) => {
            let Some(close) = rest.iter().skip(1).position(|c| *c == ']').map(|i| i + 1) else {
                return name.first() == Some(&'[') && match_name(rest, &name[1..]);
            };
            let Some(c) = name.first() else {
                return false;
            };
            let (negated, set) = match rest[..close].split_first() {
                Some(('!' | '^', set)) => (true, set),
                _ => (false, &rest[..close]),
            };
            let mut hit = false;
            let mut index = 0;
            while index < set.len() {
                if index + 2 < set.len() && set[index + 1] == '-' {
                    hit |= (set[index]..=set[index + 2]).contains(c);
                    index += 3;
                } else {
                    hit |= set[index] == *c;
                    index += 1;
                }
            }
            hit != negated && match_name(&rest[close + 1..], &name[1..])
        }
        Some((literal, rest)) => name.first() == Some(literal) && match_name(rest, &name[1..]),
    }
}

// ---- tar and git ----

/// Tars `target` (a folder's contents, or one file) into `archive` with
/// deterministic options: names sorted, mtime 0, owner and group 0, modes
/// normalised to 644/755, GNU format (no access or change times).
async fn tar_path(target: &Path, archive: &Path) -> Result<(), String> {
    let meta = tokio::fs::metadata(target)
        .await
        .map_err(|err| format!("artifact path {} is not there: {err}", target.display()))?;
    let (directory, names) = if meta.is_dir() {
        let root = target.to_owned();
        let names = tokio::task::spawn_blocking(move || tar_entries(&root))
            .await
            .map_err(|err| format!("listing {}: {err}", target.display()))?
            .map_err(|err| format!("listing {}: {err}", target.display()))?;
        (target.to_owned(), names)
    } else {
        let parent = target
            .parent()
            .map(Path::to_owned)
            .unwrap_or_else(|| PathBuf::from("/"));
        let name = target
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        (parent, vec![name])
    };
    let mut list = Vec::new();
    for name in &names {
        list.extend_from_slice(name.as_bytes());
        list.push(0);
    }
    let mut tar = tar_command();
    tar.args(["--create", "--file"])
        .arg(archive)
        .arg("--directory")
        .arg(&directory)
        .args([
            "--format=gnu",
            "--mtime=@0",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "--mode=u+rw,go+r,go-w,a+X",
            "--no-recursion",
            "--null",
            "--files-from=-",
        ]);
    run_tool_with_input(tar, "tar --create", list).await
}

/// Paths under `root` (folders and files, symlinks as links), relative,
/// sorted byte-wise so every machine lists them in the same order.
fn tar_entries(root: &Path) -> std::io::Result<Vec<String>> {
    fn visit(root: &Path, dir: &Path, names: &mut Vec<String>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            let relative = path
                .strip_prefix(root)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            names.push(relative);
            if entry.file_type()?.is_dir() {
                visit(root, &path, names)?;
            }
        }
        Ok(())
    }
    let mut names = Vec::new();
    visit(root, root, &mut names)?;
    names.sort();
    Ok(names)
}

fn tar_command() -> Command {
    let mut command = Command::new("tar");
    command
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// A `git` command on a bare repository, isolated from the caller's
/// configuration (as in [`crate::local_git`]).
pub(crate) fn git_command(git_dir: &Path) -> Command {
    let mut command = Command::new("git");
    for var in INHERITED_GIT_VARS {
        command.env_remove(var);
    }
    let null_device = if cfg!(windows) { "NUL" } else { "/dev/null" };
    command
        .env("GIT_DIR", git_dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", null_device)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_LITERAL_PATHSPECS", "1")
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// The bytes of a file at a commit of a bare repository; `None` when the
/// commit has no file at that path.
pub(crate) async fn read_file_at(git_dir: &Path, commit: &str, path: &str) -> Result<Option<Vec<u8>>, LocalGitError> {
    validate::git_sha("commit", commit)?;
    validate::repository_path("path", path)?;
    let mut command = git_command(git_dir);
    command.args(["ls-tree", "-z", "--full-tree", "--end-of-options", commit, "--", path]);
    let listing = git_output(command, "ls-tree").await?;
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
    let mut command = git_command(git_dir);
    command.args(["cat-file", "blob", oid]);
    git_output(command, "cat-file").await.map(Some)
}

async fn git_output(mut command: Command, name: &str) -> Result<Vec<u8>, LocalGitError> {
    let output = command.output().await.map_err(|source| LocalGitError::Spawn {
        command: name.to_owned(),
        source,
    })?;
    if output.status.success() {
        Ok(output.stdout)
    } else {
        Err(LocalGitError::Command {
            command: name.to_owned(),
            status: output.status.to_string(),
            stderr: shorten(&String::from_utf8_lossy(&output.stderr)),
        })
    }
}

/// Runs a tool to completion; its stderr is the error.
async fn run_tool(mut command: Command, name: &str) -> Result<(), String> {
    let output = command
        .output()
        .await
        .map_err(|err| format!("could not run `{name}`: {err}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{name}` failed ({}): {}",
            output.status,
            shorten(&String::from_utf8_lossy(&output.stderr))
        ))
    }
}

async fn run_tool_with_input(mut command: Command, name: &str, input: Vec<u8>) -> Result<(), String> {
    use tokio::io::AsyncWriteExt as _;
    command.stdin(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|err| format!("could not run `{name}`: {err}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let written = async {
            stdin.write_all(&input).await?;
            stdin.shutdown().await
        }
        .await;
        drop(stdin);
        if let Err(err) = written {
            tracing::debug!(tool = name, error = %err, "could not write the whole input");
        }
    }
    let output = child
        .wait_with_output()
        .await
        .map_err(|err| format!("waiting for `{name}`: {err}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{name}` failed ({}): {}",
            output.status,
            shorten(&String::from_utf8_lossy(&output.stderr))
        ))
    }
}

fn shorten(text: &str) -> String {
    let mut text = text.trim().to_owned();
    if text.len() > MAX_STDERR {
        let mut cut = MAX_STDERR;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

// ---- records on disk ----

async fn upload(
    blobs: &dyn BlobStore,
    container: &str,
    key: &str,
    content: Vec<u8>,
    content_type: &str,
) -> Result<BlobRef, crate::blob::BlobError> {
    let mut attempt = 1;
    loop {
        match blobs.put(container, key, content.clone(), content_type).await {
            Ok(blob) => return Ok(blob),
            Err(err) if err.is_transient() && attempt < UPLOAD_ATTEMPTS => {
                tracing::debug!(container, attempt, error = %err, "blob upload failed; retrying");
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                attempt += 1;
            }
            Err(err) => return Err(err),
        }
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

fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>, LocalPipelineError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|err| LocalPipelineError::CorruptRecord {
        path: String::new(),
        reason: err.to_string(),
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

async fn read_record(path: &Path) -> Result<RunRecord, LocalPipelineError> {
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
async fn write_temporary(path: &Path, bytes: &[u8]) -> Result<PathBuf, LocalPipelineError> {
    let parent = path.parent().unwrap_or(Path::new("."));
    tokio::fs::create_dir_all(parent)
        .await
        .map_err(|err| LocalPipelineError::io(format!("creating {}", parent.display()), err))?;
    let mut name = OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(format!(".{}.tmp", uuid::Uuid::new_v4().simple()));
    let temporary = parent.join(name);
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
async fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), LocalPipelineError> {
    let temporary = write_temporary(path, bytes).await?;
    tokio::fs::rename(&temporary, path)
        .await
        .map_err(|err| LocalPipelineError::io(format!("moving {} into place", path.display()), err))
}

/// Creates `path` atomically unless it exists; says whether it created it.
async fn create_atomic(path: &Path, bytes: &[u8]) -> Result<bool, LocalPipelineError> {
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

#[cfg(test)]
pub(crate) mod test_support;

#[cfg(test)]
mod tests;
