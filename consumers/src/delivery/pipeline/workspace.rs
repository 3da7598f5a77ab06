//! A run's workspace, laid out like an Azure Pipelines agent's, and its
//! log file.

use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::LocalPipelineError;

/// A run's workspace, laid out like an agent's.
pub(super) struct Workspace {
    pub(super) root: PathBuf,
    pub(super) sources: PathBuf,
    pub(super) staging: PathBuf,
    pub(super) binaries: PathBuf,
    pub(super) test_results: PathBuf,
    pub(super) temp: PathBuf,
    pub(super) logs: PathBuf,
}

impl Workspace {
    /// Creates the workspace afresh (a previous attempt's is removed).
    pub(super) async fn prepare(root: PathBuf) -> Result<Self, LocalPipelineError> {
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

    pub(super) async fn remove(&self) {
        if let Err(err) = tokio::fs::remove_dir_all(&self.root).await {
            tracing::warn!(workspace = %self.root.display(), error = %err, "could not remove a run workspace");
        }
    }
}

/// The run's log file: section headers written here, step output appended
/// by the step processes themselves.
pub(super) struct RunLog {
    pub(super) file: std::fs::File,
    pub(super) failed: bool,
}

impl RunLog {
    pub(super) fn create(path: &Path) -> Result<Self, LocalPipelineError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(path)
            .map_err(|err| LocalPipelineError::io(format!("creating {}", path.display()), err))?;
        Ok(Self { file, failed: false })
    }

    pub(super) fn line(&mut self, text: &str) {
        if let Err(err) = writeln!(self.file, "{text}")
            && !self.failed
        {
            self.failed = true;
            tracing::warn!(error = %err, "could not write to a run log");
        }
    }

    pub(super) fn section_start(&mut self, name: &str) {
        self.line(&format!("##[section]Starting: {name}"));
    }

    pub(super) fn section_end(&mut self, name: &str) {
        self.line(&format!("##[section]Finishing: {name}"));
    }

    /// A handle step processes write their output to.
    pub(super) fn output(&self) -> std::io::Result<Stdio> {
        Ok(Stdio::from(self.file.try_clone()?))
    }

    pub(super) async fn finish(mut self, path: &Path) -> std::io::Result<Vec<u8>> {
        self.file.flush()?;
        drop(self.file);
        tokio::fs::read(path).await
    }
}
