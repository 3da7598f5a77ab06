//! How a test decides what a pipeline run does: a [`PipelineScript`]
//! (set with [`super::DevOpsDouble::on_run`]) answers each started run
//! with a [`RunScript`]: its result, its steps, its log lines, the test
//! runs and pipeline artifacts it publishes, and whether it finishes at
//! once or when the test says so ([`super::DevOpsDouble::finish_run`]).

use std::collections::BTreeMap;

/// A run being started, as the script sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunStart {
    /// The run's (and its build's) id.
    pub run_id: u64,
    /// The pipeline.
    pub pipeline_id: u64,
    /// The pipeline's name.
    pub pipeline_name: String,
    /// The pipeline's folder (`\bosun\contoso`).
    pub folder: String,
    /// The YAML file the pipeline runs (`/azure-pipelines.yml`).
    pub yaml_path: String,
    /// `refs/heads/main`.
    pub branch: String,
    /// The commit run.
    pub commit: String,
    /// The YAML file's text at that commit, when it is there.
    pub yaml: Option<String>,
    /// Every file of the commit (path without a leading `/` → bytes): what
    /// the run's `checkout: self` gives its steps.
    pub files: BTreeMap<String, Vec<u8>>,
}

/// A test's answer to every started run.
pub type PipelineScript = dyn Fn(&RunStart) -> RunScript + Send + Sync;

/// How a run ends, as Azure Pipelines reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunResult {
    /// `succeeded`.
    Succeeded,
    /// `partiallySucceeded`.
    PartiallySucceeded,
    /// `failed`.
    Failed,
    /// `canceled`.
    Canceled,
}

impl RunResult {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::PartiallySucceeded => "partiallySucceeded",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        }
    }
}

/// One task of the run's job, shown in its timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedStep {
    /// The task's display name.
    pub name: String,
    /// Whether it succeeded (else it failed).
    pub succeeded: bool,
}

/// One test result.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedTest {
    /// `automatedTestName`.
    pub name: String,
    /// `automatedTestStorage` (the test assembly or file).
    pub storage: String,
    /// `Passed`, `Failed`, `NotExecuted` ...
    pub outcome: String,
    /// `durationInMs`.
    pub duration_ms: f64,
    /// `errorMessage`, for a failed test.
    pub error_message: Option<String>,
}

impl ScriptedTest {
    /// A passed test.
    pub fn passed(name: &str, storage: &str) -> Self {
        Self {
            name: name.to_owned(),
            storage: storage.to_owned(),
            outcome: "Passed".to_owned(),
            duration_ms: 12.0,
            error_message: None,
        }
    }

    /// A failed test with its message.
    pub fn failed(name: &str, storage: &str, message: &str) -> Self {
        Self {
            name: name.to_owned(),
            storage: storage.to_owned(),
            outcome: "Failed".to_owned(),
            duration_ms: 30.0,
            error_message: Some(message.to_owned()),
        }
    }
}

/// A test run the pipeline publishes.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedTestRun {
    /// Its name.
    pub name: String,
    /// Its results.
    pub tests: Vec<ScriptedTest>,
}

/// A pipeline artifact the run publishes (`PublishPipelineArtifact@1`): a
/// folder of files, served as Azure DevOps serves it, a zip whose entries
/// are under a folder of the artifact's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedArtifact {
    /// The artifact's name.
    pub name: String,
    /// Its files: path inside the artifact → bytes.
    pub files: BTreeMap<String, Vec<u8>>,
}

/// What one run does.
#[derive(Debug, Clone, PartialEq)]
pub struct RunScript {
    /// How it ends.
    pub result: RunResult,
    /// Its tasks, in order.
    pub steps: Vec<ScriptedStep>,
    /// Its log lines.
    pub log: Vec<String>,
    /// The test runs it publishes when it ends.
    pub test_runs: Vec<ScriptedTestRun>,
    /// The pipeline artifacts it publishes, listed once it ends.
    pub artifacts: Vec<ScriptedArtifact>,
    /// Whether it stays `inProgress` until the test calls
    /// [`super::DevOpsDouble::finish_run`].
    pub held: bool,
}

impl RunScript {
    /// A run that succeeds at once with one task and a short log.
    pub fn succeeded() -> Self {
        Self {
            result: RunResult::Succeeded,
            steps: vec![ScriptedStep {
                name: "Build".to_owned(),
                succeeded: true,
            }],
            log: vec!["Starting: Build".to_owned(), "Finishing: Build".to_owned()],
            test_runs: Vec::new(),
            artifacts: Vec::new(),
            held: false,
        }
    }

    /// A run whose task `step` fails.
    pub fn failed(step: &str) -> Self {
        Self {
            result: RunResult::Failed,
            steps: vec![
                ScriptedStep {
                    name: "Checkout".to_owned(),
                    succeeded: true,
                },
                ScriptedStep {
                    name: step.to_owned(),
                    succeeded: false,
                },
            ],
            log: vec![format!("Starting: {step}"), format!("##[error]{step} failed")],
            test_runs: Vec::new(),
            artifacts: Vec::new(),
            held: false,
        }
    }

    /// Publishes a test run when it ends.
    #[must_use]
    pub fn with_test_run(mut self, name: &str, tests: Vec<ScriptedTest>) -> Self {
        self.test_runs.push(ScriptedTestRun {
            name: name.to_owned(),
            tests,
        });
        self
    }

    /// Publishes the pipeline artifact `name` holding `files`.
    #[must_use]
    pub fn with_artifact(mut self, name: &str, files: BTreeMap<String, Vec<u8>>) -> Self {
        self.artifacts.push(ScriptedArtifact {
            name: name.to_owned(),
            files,
        });
        self
    }

    /// Stays in progress until the test finishes it.
    #[must_use]
    pub fn held(mut self) -> Self {
        self.held = true;
        self
    }
}
