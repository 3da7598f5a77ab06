//! Running the tools a step needs (`tar`, `git`) to completion, with a
//! bounded stderr excerpt as the error.

use std::process::Stdio;

use tokio::process::Command;

use super::MAX_STDERR;
use super::step_error::StepError;

pub(super) fn tar_command() -> Command {
    let mut command = Command::new("tar");
    command
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs a tool to completion; its stderr is the error.
pub(super) async fn run_tool(mut command: Command, name: &str) -> Result<(), StepError> {
    let output = command.output().await.map_err(|source| StepError::RunTool {
        tool: name.to_owned(),
        source,
    })?;
    check_output(&output, name)
}

pub(super) async fn run_tool_with_input(mut command: Command, name: &str, input: Vec<u8>) -> Result<(), StepError> {
    use tokio::io::AsyncWriteExt as _;
    command.stdin(Stdio::piped());
    let mut child = command.spawn().map_err(|source| StepError::RunTool {
        tool: name.to_owned(),
        source,
    })?;
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
    let output = child.wait_with_output().await.map_err(|source| StepError::WaitTool {
        tool: name.to_owned(),
        source,
    })?;
    check_output(&output, name)
}

/// `Ok` when the tool succeeded, else its exit status and stderr.
fn check_output(output: &std::process::Output, name: &str) -> Result<(), StepError> {
    if output.status.success() {
        Ok(())
    } else {
        Err(StepError::ToolFailed {
            tool: name.to_owned(),
            status: output.status,
            stderr: shorten(&String::from_utf8_lossy(&output.stderr)),
        })
    }
}

pub(super) fn shorten(text: &str) -> String {
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
