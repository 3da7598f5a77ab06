//! The executor of one claimed run: checkout, the pipeline file, every
//! step in order under the job's time limit, the heartbeat that tells a
//! live executor from a dead one, and the final record.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bosun_contracts::messages::{ArtifactRef, BlobRef, PipelineResult};
use time::OffsetDateTime;

use super::definition::{Condition, Step, StepKind, read_pipeline};
use super::publish::upload;
use super::record::{RunRecord, RunStatus, read_record, to_json, write_atomic};
use super::script::run_script;
use super::step_error::StepError;
use super::tools::{run_tool, tar_command};
use super::variables::Variables;
use super::workspace::{RunLog, Workspace};
use super::{LOG_CONTAINER, LocalPipelineError, LocalPipelines, TOOLCHAIN_TASKS, now_seconds};

impl LocalPipelines {
    /// Executes a claimed run from checkout to its final record.
    pub(super) async fn execute(self: &Arc<Self>, record: RunRecord) -> Result<(), LocalPipelineError> {
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
            state.record_failure(
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
    pub(super) async fn run_job(
        &self,
        record: &RunRecord,
        workspace: &Workspace,
        log: &mut RunLog,
        handle: &RunHandle,
        state: &mut JobState,
    ) {
        log.section_start("Checkout");
        if let Err(err) = self.checkout(record, workspace).await {
            state.fail(log, "Checkout", &err);
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
            Err(source) => {
                log.section_start("Parse pipeline");
                let err = StepError::Pipeline {
                    pipeline_path: record.pipeline_path.clone(),
                    source,
                };
                state.fail(log, "Parse pipeline", &err);
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
                if let Err(err) = outcome {
                    state.fail(log, &step.name, &err);
                }
                log.section_end(&step.name);
            }
        }
    }

    pub(super) async fn git_repository_url(&self, record: &RunRecord) -> String {
        match self.git.find(&record.tenant, &record.repository).await {
            Ok(Some(repository)) => repository.url(),
            _ => String::new(),
        }
    }

    /// `git archive <commit> | tar -x` into the sources folder.
    pub(super) async fn checkout(&self, record: &RunRecord, workspace: &Workspace) -> Result<(), StepError> {
        let repository = self
            .git
            .find(&record.tenant, &record.repository)
            .await
            .map_err(|source| StepError::OpenRepository {
                repository: record.repository.clone(),
                source,
            })?
            .ok_or_else(|| StepError::RepositoryNotFound {
                repository: record.repository.clone(),
            })?;
        let archive = workspace.temp.join("sources.tar");
        let mut git = crate::delivery::git::plumbing::command(&repository.path);
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
            .map_err(|err| StepError::file("removing", &archive, err))
    }

    pub(super) async fn run_step(
        &self,
        step: &Step,
        variables: &Variables,
        record: &RunRecord,
        workspace: &Workspace,
        log: &mut RunLog,
        state: &mut JobState,
    ) -> Result<(), StepError> {
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
                    _ => Err(StepError::Unsupported(format!(
                        "task {task} is not supported by the local runner"
                    ))),
                }
            }
        }
    }
}

pub(super) fn result_word(result: PipelineResult) -> &'static str {
    match result {
        PipelineResult::Succeeded => "succeeded",
        PipelineResult::Failed => "failed",
        PipelineResult::Canceled => "canceled",
    }
}

/// Aborts a background task when dropped.
pub(super) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The record of a run being executed; every write goes through here so
/// the heartbeat and the executor never overwrite each other.
pub(super) struct RunHandle {
    pub(super) path: PathBuf,
    pub(super) instance: String,
    pub(super) record: tokio::sync::Mutex<RunRecord>,
    /// Set when the record names another executor: this one must stop.
    pub(super) lost: AtomicBool,
}

impl RunHandle {
    /// Applies a change and writes the record, unless another executor
    /// took the run over.
    pub(super) async fn update(&self, change: impl FnOnce(&mut RunRecord)) -> Result<RunRecord, LocalPipelineError> {
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

pub(super) async fn heartbeat(handle: Arc<RunHandle>, interval: Duration) {
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
pub(super) struct JobState {
    pub(super) failed: bool,
    pub(super) failed_step: Option<String>,
    pub(super) error: Option<String>,
    pub(super) test_results: Vec<BlobRef>,
    pub(super) artifacts: Vec<ArtifactRef>,
}

impl JobState {
    /// Logs a step's error with its causes and records the failure.
    pub(super) fn fail(&mut self, log: &mut RunLog, step: &str, err: &StepError) {
        let reason = err.report();
        log.line(&format!("##[error]{reason}"));
        self.record_failure(step, reason);
    }

    /// Records a failure; the first failing step is the run's.
    pub(super) fn record_failure(&mut self, step: &str, reason: String) {
        if !self.failed {
            self.failed_step = Some(step.to_owned());
            self.error = Some(reason);
        }
        self.failed = true;
    }
}
