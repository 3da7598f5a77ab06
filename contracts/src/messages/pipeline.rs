//! Pipelines: generation (`GeneratePipeline`, `PipelineGenerated`, consumer
//! `pipeline-generation`) and runs (`PipelineRunStarted`, `PollPipelineRun`,
//! `PipelineRunCompleted`, consumer `pipeline-monitor`).
//!
//! The run messages each carry the whole run (repository, commit, release,
//! module), so the monitor can follow a run with self-scheduled
//! `PollPipelineRun` commands and report `PipelineRunCompleted` without
//! keeping state of its own.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::blob::{ArtifactRef, BlobRef};
use super::module::ModuleMetadata;
use crate::schema_rules as rule;
use crate::validate::{self, FieldError, Validate};

/// Longest name of a failed step.
pub const MAX_STEP_CHARS: usize = 256;

/// Generate the YAML pipeline of a module from its metadata and commit it to
/// a branch. Idempotent on (repository, moduleId, templateVersion).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GeneratePipeline {
    /// Repository name.
    #[schemars(transform = rule::repository_name)]
    pub repository: String,
    /// Branch to commit the pipeline file to.
    #[schemars(transform = rule::branch_name)]
    pub branch: String,
    /// The module the pipeline builds.
    pub module: ModuleMetadata,
    /// Version of bosun's pipeline template to render (semantic version).
    #[schemars(transform = rule::semantic_version)]
    pub template_version: String,
    /// Where to write the pipeline file in the repository; the generator's
    /// default location when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::repository_path)]
    pub pipeline_path: Option<String>,
}

impl Validate for GeneratePipeline {
    fn validate(&self) -> Result<(), FieldError> {
        validate::repository_name("repository", &self.repository)?;
        validate::branch_name("branch", &self.branch)?;
        self.module.validate().map_err(|err| validate::nested("module", err))?;
        validate::semantic_version("templateVersion", &self.template_version)?;
        if let Some(path) = &self.pipeline_path {
            validate::repository_path("pipelinePath", path)?;
        }
        Ok(())
    }
}

/// A module's pipeline file is committed and its pipeline definition exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PipelineGenerated {
    /// Repository name.
    #[schemars(transform = rule::repository_name)]
    pub repository: String,
    /// Branch holding the pipeline file.
    #[schemars(transform = rule::branch_name)]
    pub branch: String,
    /// Path of the pipeline file in the repository.
    #[schemars(transform = rule::repository_path)]
    pub pipeline_path: String,
    /// The module the pipeline builds.
    #[schemars(transform = rule::identifier)]
    pub module_id: String,
    /// Template version the file was rendered from.
    #[schemars(transform = rule::semantic_version)]
    pub template_version: String,
    /// The commit holding the pipeline file.
    #[schemars(transform = rule::git_sha)]
    pub commit_sha: String,
    /// Id of the pipeline definition (an Azure DevOps pipeline id, or the
    /// local runner's id).
    #[schemars(transform = rule::identifier)]
    pub pipeline_id: String,
    /// `true` when the branch already held this exact file and nothing was
    /// committed.
    #[serde(default)]
    pub no_op: bool,
}

impl Validate for PipelineGenerated {
    fn validate(&self) -> Result<(), FieldError> {
        validate::repository_name("repository", &self.repository)?;
        validate::branch_name("branch", &self.branch)?;
        validate::repository_path("pipelinePath", &self.pipeline_path)?;
        validate::identifier("moduleId", &self.module_id)?;
        validate::semantic_version("templateVersion", &self.template_version)?;
        validate::git_sha("commitSha", &self.commit_sha)?;
        validate::identifier("pipelineId", &self.pipeline_id)?;
        Ok(())
    }
}

/// How a pipeline run ended. Azure DevOps' `partiallySucceeded` is reported
/// as `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PipelineResult {
    /// Every step passed.
    Succeeded,
    /// A step failed.
    Failed,
    /// The run was canceled before it finished.
    Canceled,
}

impl PipelineResult {
    /// Whether the run succeeded.
    pub fn is_success(self) -> bool {
        self == Self::Succeeded
    }
}

/// A pipeline run has started for a release candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PipelineRunStarted {
    /// Id of the run (an Azure DevOps build id, or the local runner's id).
    #[schemars(transform = rule::identifier)]
    pub pipeline_run_id: String,
    /// Id of the pipeline definition.
    #[schemars(transform = rule::identifier)]
    pub pipeline_id: String,
    /// Repository name.
    #[schemars(transform = rule::repository_name)]
    pub repository: String,
    /// Branch being built.
    #[schemars(transform = rule::branch_name)]
    pub branch: String,
    /// Commit being built.
    #[schemars(transform = rule::git_sha)]
    pub commit_sha: String,
    /// The release this run is a candidate for (the release saga's key).
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The module being built (its id is `module.moduleId`).
    pub module: ModuleMetadata,
    /// When the run started.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub started_at: OffsetDateTime,
    /// Web address of the run, when the runner has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::url)]
    pub url: Option<String>,
}

impl Validate for PipelineRunStarted {
    fn validate(&self) -> Result<(), FieldError> {
        validate_run(&RunFields {
            pipeline_run_id: &self.pipeline_run_id,
            pipeline_id: &self.pipeline_id,
            repository: &self.repository,
            branch: &self.branch,
            commit_sha: &self.commit_sha,
            release_id: &self.release_id,
            module: &self.module,
            url: self.url.as_deref(),
        })
    }
}

/// The pipeline monitor's self-scheduled check of a run. It carries the
/// whole run so the monitor holds no lock and no state between polls; when
/// the run is still going it schedules poll `poll + 1` with backoff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PollPipelineRun {
    /// Id of the run to check.
    #[schemars(transform = rule::identifier)]
    pub pipeline_run_id: String,
    /// Id of the pipeline definition.
    #[schemars(transform = rule::identifier)]
    pub pipeline_id: String,
    /// Repository name.
    #[schemars(transform = rule::repository_name)]
    pub repository: String,
    /// Branch being built.
    #[schemars(transform = rule::branch_name)]
    pub branch: String,
    /// Commit being built.
    #[schemars(transform = rule::git_sha)]
    pub commit_sha: String,
    /// The release this run is a candidate for.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The module being built.
    pub module: ModuleMetadata,
    /// When the run started.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub started_at: OffsetDateTime,
    /// Number of this poll, 1 for the first. Distinct from the envelope's
    /// `attempt`, which counts retries of one poll.
    #[schemars(transform = rule::positive)]
    pub poll: u32,
    /// Web address of the run, when the runner has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::url)]
    pub url: Option<String>,
}

impl PollPipelineRun {
    /// The first poll of a run that just started.
    pub fn first(started: &PipelineRunStarted) -> Self {
        Self {
            pipeline_run_id: started.pipeline_run_id.clone(),
            pipeline_id: started.pipeline_id.clone(),
            repository: started.repository.clone(),
            branch: started.branch.clone(),
            commit_sha: started.commit_sha.clone(),
            release_id: started.release_id.clone(),
            module: started.module.clone(),
            started_at: started.started_at,
            poll: 1,
            url: started.url.clone(),
        }
    }

    /// The poll after this one.
    pub fn next(&self) -> Self {
        Self {
            poll: self.poll.saturating_add(1),
            ..self.clone()
        }
    }
}

impl Validate for PollPipelineRun {
    fn validate(&self) -> Result<(), FieldError> {
        validate_run(&RunFields {
            pipeline_run_id: &self.pipeline_run_id,
            pipeline_id: &self.pipeline_id,
            repository: &self.repository,
            branch: &self.branch,
            commit_sha: &self.commit_sha,
            release_id: &self.release_id,
            module: &self.module,
            url: self.url.as_deref(),
        })?;
        validate::positive("poll", u64::from(self.poll))
    }
}

/// A pipeline run has finished. Logs and JUnit files are in the blob store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PipelineRunCompleted {
    /// Id of the run.
    #[schemars(transform = rule::identifier)]
    pub pipeline_run_id: String,
    /// Id of the pipeline definition.
    #[schemars(transform = rule::identifier)]
    pub pipeline_id: String,
    /// Repository name.
    #[schemars(transform = rule::repository_name)]
    pub repository: String,
    /// Branch built.
    #[schemars(transform = rule::branch_name)]
    pub branch: String,
    /// Commit built.
    #[schemars(transform = rule::git_sha)]
    pub commit_sha: String,
    /// The release this run is a candidate for.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The module built.
    pub module: ModuleMetadata,
    /// How the run ended.
    pub result: PipelineResult,
    /// When the run started.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub started_at: OffsetDateTime,
    /// When the run finished.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    #[schemars(transform = rule::also_checked("not earlier than `startedAt`"))]
    pub finished_at: OffsetDateTime,
    /// Milliseconds the run waited for an agent before starting.
    #[serde(default)]
    pub queued_ms: u64,
    /// Milliseconds from start to finish.
    pub duration_ms: u64,
    /// Name of the first step that failed, when `result` is `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_STEP_CHARS))]
    pub failed_step: Option<String>,
    /// The run's log; absent when the run was canceled before it logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<BlobRef>,
    /// The JUnit XML files the tests wrote, one blob per file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub test_results: Vec<BlobRef>,
    /// Artifacts the run published (`PublishPipelineArtifact`), passed on
    /// to `BuildCompleted`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<ArtifactRef>,
    /// Web address of the run, when the runner has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::url)]
    pub url: Option<String>,
}

impl Validate for PipelineRunCompleted {
    fn validate(&self) -> Result<(), FieldError> {
        validate_run(&RunFields {
            pipeline_run_id: &self.pipeline_run_id,
            pipeline_id: &self.pipeline_id,
            repository: &self.repository,
            branch: &self.branch,
            commit_sha: &self.commit_sha,
            release_id: &self.release_id,
            module: &self.module,
            url: self.url.as_deref(),
        })?;
        validate::not_before("finishedAt", self.finished_at, "startedAt", self.started_at)?;
        if let Some(step) = &self.failed_step {
            validate::text("failedStep", step, MAX_STEP_CHARS)?;
        }
        if let Some(log) = &self.log {
            log.validate().map_err(|err| validate::nested("log", err))?;
        }
        for (index, blob) in self.test_results.iter().enumerate() {
            blob.validate()
                .map_err(|err| validate::nested_item("testResults", index, err))?;
        }
        for (index, artifact) in self.artifacts.iter().enumerate() {
            artifact
                .validate()
                .map_err(|err| validate::nested_item("artifacts", index, err))?;
        }
        Ok(())
    }
}

/// The fields every run message shares, validated the same way.
struct RunFields<'a> {
    pipeline_run_id: &'a str,
    pipeline_id: &'a str,
    repository: &'a str,
    branch: &'a str,
    commit_sha: &'a str,
    release_id: &'a str,
    module: &'a ModuleMetadata,
    url: Option<&'a str>,
}

fn validate_run(run: &RunFields<'_>) -> Result<(), FieldError> {
    validate::identifier("pipelineRunId", run.pipeline_run_id)?;
    validate::identifier("pipelineId", run.pipeline_id)?;
    validate::repository_name("repository", run.repository)?;
    validate::branch_name("branch", run.branch)?;
    validate::git_sha("commitSha", run.commit_sha)?;
    validate::identifier("releaseId", run.release_id)?;
    run.module.validate().map_err(|err| validate::nested("module", err))?;
    if let Some(url) = run.url {
        validate::url("url", url)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;
    use crate::samples;

    #[test]
    fn samples_are_valid() {
        assert_eq!(samples::generate_pipeline().validate(), Ok(()));
        assert_eq!(samples::pipeline_generated().validate(), Ok(()));
        assert_eq!(samples::pipeline_run_started().validate(), Ok(()));
        assert_eq!(samples::poll_pipeline_run().validate(), Ok(()));
        assert_eq!(samples::pipeline_run_completed().validate(), Ok(()));
    }

    #[test]
    fn generation_bad_fields_are_named() {
        let mut command = samples::generate_pipeline();
        command.template_version = "latest".into();
        assert_eq!(command.validate().unwrap_err().field, "templateVersion");

        let mut command = samples::generate_pipeline();
        command.pipeline_path = Some("../azure-pipelines.yml".into());
        assert_eq!(command.validate().unwrap_err().field, "pipelinePath");

        let mut event = samples::pipeline_generated();
        event.commit_sha = "HEAD".into();
        assert_eq!(event.validate().unwrap_err().field, "commitSha");
    }

    #[test]
    fn run_bad_fields_are_named() {
        let mut started = samples::pipeline_run_started();
        started.release_id = String::new();
        assert_eq!(started.validate().unwrap_err().field, "releaseId");

        let mut poll = samples::poll_pipeline_run();
        poll.poll = 0;
        assert_eq!(poll.validate().unwrap_err().field, "poll");

        let mut completed = samples::pipeline_run_completed();
        completed.finished_at = completed.started_at - time::Duration::minutes(1);
        assert_eq!(completed.validate().unwrap_err().field, "finishedAt");

        let mut completed = samples::pipeline_run_completed();
        completed.test_results[0].sha256 = "nope".into();
        assert_eq!(completed.validate().unwrap_err().field, "testResults[0].sha256");
    }

    #[test]
    fn polls_carry_the_run_forward() {
        let started = samples::pipeline_run_started();
        let first = PollPipelineRun::first(&started);
        assert_eq!(first.poll, 1);
        assert_eq!(first.pipeline_run_id, started.pipeline_run_id);
        assert_eq!(first.next().poll, 2);
        assert_eq!(first.next().release_id, started.release_id);
    }

    #[test]
    fn result_is_lowercase_on_the_wire() {
        let payload = Message::from(samples::pipeline_run_completed()).to_payload();
        assert_eq!(payload["result"], "succeeded");
        let mut bad = payload.clone();
        bad["result"] = serde_json::json!("partiallySucceeded");
        let err = Message::from_type_and_payload("PipelineRunCompleted", &bad).unwrap_err();
        assert_eq!(err.field(), Some("payload.result"), "{err}");
    }
}
