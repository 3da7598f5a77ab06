//! `script:` and `bash:` steps: a shell in its own process group, with a
//! cleared environment but for a few machine variables and the pipeline's.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

use super::INHERITED_ENV;
use super::definition::{Shell, Step};
use super::step_error::StepError;
use super::variables::Variables;
use super::workspace::{RunLog, Workspace};

pub(super) async fn run_script(
    body: &str,
    shell: Shell,
    step: &Step,
    variables: &Variables,
    workspace: &Workspace,
    log: &mut RunLog,
) -> Result<(), StepError> {
    let script = variables.expand(body);
    let directory = match &step.working_directory {
        Some(dir) => resolve(&workspace.sources, &variables.expand(dir)),
        None => workspace.sources.clone(),
    };
    if !tokio::fs::metadata(&directory).await.is_ok_and(|meta| meta.is_dir()) {
        return Err(StepError::NoWorkingDirectory(directory));
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
    let output = log.output().map_err(StepError::OpenLog)?;
    let errors = log.output().map_err(StepError::OpenLog)?;
    command.stdout(output).stderr(errors);
    #[cfg(unix)]
    command.process_group(0);
    let mut child = command
        .spawn()
        .map_err(|source| StepError::StartShell { program, source })?;
    let _group = ProcessGroup(child.id());
    let status = match step.timeout {
        Some(limit) => match tokio::time::timeout(limit, child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                return Err(StepError::TimedOut {
                    minutes: limit.as_secs() / 60,
                });
            }
        },
        None => child.wait().await,
    }
    .map_err(|source| StepError::WaitShell { program, source })?;
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => Err(StepError::ScriptExited(code)),
        None => Err(StepError::ScriptSignalled(status)),
    }
}

/// Kills a step's whole process group (background children included) when
/// the step ends, like an agent cleaning up after a job.
pub(super) struct ProcessGroup(Option<u32>);

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
pub(super) fn resolve(base: &Path, path: &str) -> PathBuf {
    let path = Path::new(path.trim());
    if path.is_absolute() {
        path.to_owned()
    } else {
        base.join(path)
    }
}
