//! Claim check through the whole runtime: a command whose payload is over
//! the threshold travels with its payload in the blob store, and the
//! consumer sees the whole payload.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Server, eventually, find_repository, git, run_json};

#[test]
fn a_large_commit_travels_by_claim_check_and_lands_whole() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let mut server = Server::start(data, &[], &["--consumers", "repository-provisioning,commit"]);
    server.wait_for_line("receiving", Duration::from_secs(30));
    run_json(
        data,
        &[
            "send",
            "ProvisionRepository",
            "--tenant",
            "contoso",
            "--payload",
            r#"{"name": "assets"}"#,
        ],
    );
    let repository = eventually("the repository exists", Duration::from_secs(30), || {
        find_repository(data, "contoso", "assets")
    });
    // 230 KB of text: over the default 192 KiB threshold, under the 256 KiB
    // message limit.
    let content: String = (0..5000)
        .map(|i| format!("line {i:05} of the catalogue ..............\n"))
        .collect();
    assert!(content.len() > 200_000 && content.len() < 250_000);
    let payload = serde_json::json!({
        "repository": "assets", "branch": "main", "message": "Add the catalogue",
        "files": [{"path": "catalogue.txt", "content": content}]
    })
    .to_string();
    let file = data.join("payload.json");
    std::fs::write(&file, &payload).unwrap();
    run_json(
        data,
        &[
            "send",
            "CreateCommit",
            "--tenant",
            "contoso",
            "--payload",
            &format!("@{}", file.display()),
        ],
    );
    let landed = eventually("the commit lands", Duration::from_secs(30), || {
        let output = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(&repository)
            .args(["show", "main:catalogue.txt"])
            .output()
            .ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
    });
    assert_eq!(landed, content, "the consumer saw the whole payload");
    let offloaded: Vec<_> = std::fs::read_dir(data.join("blobs/payloads/contoso"))
        .unwrap()
        .collect();
    assert_eq!(offloaded.len(), 1, "the payload went through the blob store");
    assert!(git(&repository, &["log", "--format=%s", "main"]).contains("Add the catalogue"));
    server.terminate();
}
