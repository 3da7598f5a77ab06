//! Running a conformance script (an official client driving a double) the
//! same way for every double: its lines printed as they come, a time limit,
//! and one `ok ...` line per check.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// How long a conformance script may take.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `command` (named `name` in the output) to its end, printing its
/// stdout and stderr lines, and fails the test unless it exits 0, prints no
/// `FAIL` and prints exactly `checks` lines starting `ok `. Returns stdout.
pub async fn run_script(mut command: tokio::process::Command, name: &str, checks: usize) -> String {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run {name}: {error}"));
    let stdout = tokio::spawn(lines(child.stdout.take().unwrap(), name.to_owned()));
    let stderr = tokio::spawn(lines(child.stderr.take().unwrap(), format!("{name} stderr")));
    let status = tokio::time::timeout(SCRIPT_TIMEOUT, child.wait()).await;
    if status.is_err() {
        child.kill().await.unwrap();
    }
    let stdout = stdout.await.unwrap();
    let stderr = stderr.await.unwrap();
    let status = status
        .unwrap_or_else(|_| panic!("{name} did not finish within {SCRIPT_TIMEOUT:?}:\n{stdout}\n{stderr}"))
        .unwrap();
    assert!(status.success(), "{name} failed ({status}):\n{stdout}\n{stderr}");
    assert!(!stdout.contains("FAIL"), "a check failed:\n{stdout}");
    assert_eq!(
        stdout.lines().filter(|line| line.starts_with("ok ")).count(),
        checks,
        "expected an `ok` line per check:\n{stdout}"
    );
    stdout
}

/// Prints each line of `stream` as it comes and returns them all.
async fn lines(stream: impl AsyncRead + Unpin, name: String) -> String {
    let mut lines = BufReader::new(stream).lines();
    let mut all = String::new();
    while let Ok(Some(line)) = lines.next_line().await {
        println!("{name}: {line}");
        all.push_str(&line);
        all.push('\n');
    }
    all
}
