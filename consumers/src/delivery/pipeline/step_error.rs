//! Why a step (or the checkout, or reading the pipeline file) failed. A
//! failing step is not an error of the runner: the run goes on to its
//! `succeededOrFailed()` steps and ends `failed`, with the step's name and
//! this error's whole chain ([`StepError::report`]) on its record. As
//! everywhere in this crate, a message includes its cause's text and the
//! cause stays the typed source; [`StepError::report`] leaves out what the
//! message already says.

use std::path::PathBuf;
use std::process::ExitStatus;

use crate::delivery::azure::error_chain;
use crate::delivery::blob::BlobError;
use crate::delivery::git::LocalGitError;

/// Why a step failed; the run records [`StepError::report`].
#[derive(Debug, thiserror::Error)]
pub(super) enum StepError {
    /// A tool (`git`, `tar`) could not be started.
    #[error("could not run `{tool}`: {source}")]
    RunTool {
        /// The tool, as the log names it.
        tool: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A started tool could not be waited for.
    #[error("waiting for `{tool}`: {source}")]
    WaitTool {
        /// The tool, as the log names it.
        tool: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A tool ran and failed; its stderr, shortened, says why.
    #[error("`{tool}` failed ({status}): {stderr}")]
    ToolFailed {
        /// The tool, as the log names it.
        tool: String,
        /// How it exited.
        status: ExitStatus,
        /// The start of its stderr.
        stderr: String,
    },
    /// The run's repository could not be opened on the local Git host.
    #[error("could not open repository {repository}: {source}")]
    OpenRepository {
        /// The repository.
        repository: String,
        /// What the Git host said.
        #[source]
        source: LocalGitError,
    },
    /// The run's repository is not on the local Git host.
    #[error("repository {repository} not found")]
    RepositoryNotFound {
        /// The repository.
        repository: String,
    },
    /// The pipeline file could not be read or is not one the runner
    /// understands.
    #[error("{pipeline_path}: {source}")]
    Pipeline {
        /// The pipeline file, relative to the repository.
        pipeline_path: String,
        /// What is wrong with it.
        #[source]
        source: PipelineFileError,
    },
    /// A file or folder of the workspace could not be read, listed or
    /// removed.
    #[error("{action} {}: {source}", path.display())]
    File {
        /// What was being done: `reading`, `listing`, `removing`.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The background task searching or listing files did not finish.
    #[error("{action}: {source}")]
    Task {
        /// What it was doing.
        action: String,
        /// Why it did not finish (a panic).
        #[source]
        source: tokio::task::JoinError,
    },
    /// The target path of an artifact is missing or unreadable.
    #[error("artifact path {} is not there: {source}", path.display())]
    ArtifactMissing {
        /// The target path.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A file the step publishes could not be uploaded, after the quick
    /// retries.
    #[error("uploading {what}: {source}")]
    Upload {
        /// The file or artifact.
        what: String,
        /// What the blob store said.
        #[source]
        source: BlobError,
    },
    /// The run's log could not be handed to the step's process.
    #[error("opening the log: {0}")]
    OpenLog(#[source] std::io::Error),
    /// The step's shell could not be started.
    #[error("could not start `{program}`: {source}")]
    StartShell {
        /// `sh` or `bash`.
        program: &'static str,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The step's shell could not be waited for.
    #[error("waiting for `{program}`: {source}")]
    WaitShell {
        /// `sh` or `bash`.
        program: &'static str,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The script exited with a non-zero code.
    #[error("Script exited with code '{0}'.")]
    ScriptExited(i32),
    /// The script was killed by a signal.
    #[error("Script was stopped by a signal ({0}).")]
    ScriptSignalled(ExitStatus),
    /// The step ran past its `timeoutInMinutes`.
    #[error("the step exceeded its time limit of {minutes} minutes and was cancelled")]
    TimedOut {
        /// The limit.
        minutes: u64,
    },
    /// The step's `workingDirectory` is not a folder.
    #[error("working directory {} does not exist", .0.display())]
    NoWorkingDirectory(PathBuf),
    /// The step's inputs are not ones the runner accepts (an unsupported
    /// task or format, a bad or duplicate artifact name).
    #[error("{0}")]
    Unsupported(String),
}

impl StepError {
    /// The error and its causes on one line, as the run's record and log
    /// show it.
    pub(super) fn report(&self) -> String {
        error_chain(self)
    }

    pub(super) fn file(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::File {
            action,
            path: path.into(),
            source,
        }
    }
}

/// Why the pipeline file could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PipelineFileError {
    /// The commit has no file at the pipeline path.
    #[error("the pipeline file is not in the commit")]
    NotInCommit,
    /// The file is there but could not be read.
    #[error("could not read the pipeline file: {0}")]
    Read(#[source] std::io::Error),
    /// The file is not YAML.
    #[error("invalid YAML: {0}")]
    Yaml(#[source] yaml_rust2::ScanError),
    /// The YAML is not a pipeline the runner understands; says where.
    #[error("{0}")]
    Invalid(String),
}
