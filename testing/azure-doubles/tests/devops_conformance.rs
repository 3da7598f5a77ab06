//! The Azure DevOps double driven by Microsoft's official Node.js client,
//! azure-devops-node-api (pinned in scripts/azure-devops-sdk):
//! conformance/devops.mjs finds every route through the client's own
//! location discovery (resource areas, `OPTIONS` per area) and performs
//! each operation bosun's adapters use (project, repository create and
//! get, refs, pushes, items, commits, pull requests and their statuses,
//! policy configurations and evaluations, pipelines and runs, builds,
//! timelines, logs, pipeline artifacts, test runs and results), checking the client parses
//! each answer into the fields bosun reads and that the errors bosun
//! relies on (409 TF400948, TF401028, TF401179) come back as Azure DevOps
//! sends them. Ignored unless the client is installed; scripts/test
//! installs it and runs this with --ignored.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use bosun_azure_doubles::devops::{DevOpsDouble, RunScript, ScriptedTest};
use bosun_azure_doubles::{Auth, Faults, Journal};

const NODE_PATH_VAR: &str = "BOSUN_TEST_AZURE_DEVOPS_SDK_NODE_PATH";
const PAT: &str = "conformance-pat";
const PROJECT: &str = "delivery";
/// The `ok` lines conformance/devops.mjs prints when every check passes.
const CHECKS: usize = 27;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs azure-devops-node-api: scripts/azure-devops-sdk install (scripts/test runs it)"]
async fn microsofts_node_client_conforms() {
    let node_path = std::env::var(NODE_PATH_VAR).unwrap_or_else(|_| {
        panic!(
            "{NODE_PATH_VAR} is not set: set it to the node_modules that has azure-devops-node-api, \
             {NODE_PATH_VAR}=\"$(scripts/azure-devops-sdk node-path)\" (scripts/test does this)"
        )
    });
    assert!(
        Path::new(&node_path)
            .join("azure-devops-node-api/package.json")
            .is_file(),
        "{NODE_PATH_VAR}={node_path} has no azure-devops-node-api"
    );
    let journal = Journal::default();
    let double = DevOpsDouble::start(
        Faults::default(),
        journal.clone(),
        Auth::default().basic_password(PAT),
        "contoso",
    )
    .await
    .unwrap();
    double.add_project(PROJECT);
    double.on_run(|_| {
        RunScript::failed("Unit tests")
            .with_test_run(
                "unit",
                vec![
                    ScriptedTest::passed("Payments.Tests.Pays", "Payments.Tests.dll"),
                    ScriptedTest::failed("Payments.Tests.Refunds", "Payments.Tests.dll", "expected 1, got 2"),
                ],
            )
            .with_artifact(
                "drop",
                [("out/payments".to_owned(), b"#!/bin/sh\n".to_vec())]
                    .into_iter()
                    .collect(),
            )
    });

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance/devops.mjs");
    let mut command = tokio::process::Command::new("node");
    command
        .arg(&script)
        .env("NODE_PATH", &node_path)
        .env("DEVOPS_ORG_URL", double.organization_url())
        .env("DEVOPS_PAT", PAT)
        .env("DEVOPS_PROJECT", PROJECT);
    let stdout = common::run_script(command, "devops.mjs", CHECKS).await;
    assert!(
        stdout.contains("all checks passed"),
        "devops.mjs did not finish its checks:\n{stdout}"
    );
    // The client found its routes through the location service, as it
    // does against Azure DevOps.
    assert!(
        journal.succeeded("devops", "GET", "/_apis/ResourceAreas") >= 1,
        "no resource areas asked"
    );
    assert!(
        journal.succeeded("devops", "OPTIONS", "/_apis/git") >= 1,
        "no git locations asked"
    );
    // And what it did is the double's state.
    let pulls = double.pull_requests(PROJECT);
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    assert_eq!(pulls[0].status, "completed");
    assert_eq!(
        double.file(PROJECT, "payments-api", "main", "README.md").as_deref(),
        Some(&b"hello, world\n"[..])
    );
    assert_eq!(double.test_run_count(PROJECT), 1);
}
