//! The rendered deployment against outside validators: the Kubernetes
//! manifests of `infra/kubernetes/base/` against the Kubernetes API schemas
//! (`kubernetes-validate`), and `checkov` on `infra/` (kubernetes, bicep)
//! and the Dockerfile. Both come from PyPI through
//! `scripts/infra-validators install`, which `scripts/test` runs; the KEDA
//! and Prometheus Operator objects (custom resources) have no schema there
//! and are checked field by field in `src/tools/infra/tests.rs` and
//! `src/tools/infra/monitoring_tests.rs` (the PrometheusRule's rules by
//! promtool: `src/tools/infra/promtool_tests.rs`).

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

const VALIDATORS_VAR: &str = "BOSUN_TEST_INFRA_VALIDATORS";
/// A current Kubernetes version (the newest kubernetes-validate 1.37.0 has).
const KUBERNETES_VERSION: &str = "1.37.0";
/// The API versions of the custom resources the base renders, which
/// kubernetes-validate has no schema for: KEDA's ScaledObject and
/// TriggerAuthentication, the Prometheus Operator's PodMonitor and
/// PrometheusRule.
const CUSTOM_RESOURCES: &[&str] = &["keda.sh/v1alpha1", "monitoring.coreos.com/v1"];

fn tool(name: &str) -> PathBuf {
    let dir = std::env::var(VALIDATORS_VAR).unwrap_or_else(|_| {
        panic!(
            "{VALIDATORS_VAR} is not set: set it to the bin directory of the validators' venv, \
             {VALIDATORS_VAR}=\"$(scripts/infra-validators install)\" (scripts/test does this)"
        )
    });
    Path::new(&dir).join(name)
}

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The base's manifests (the custom resources among them only warned
/// about: [`CUSTOM_RESOURCES`]).
fn kubernetes_files() -> Vec<PathBuf> {
    let base = repository().join("infra/kubernetes/base");
    let mut files = Vec::new();
    for dir in [base.clone(), base.join("consumers")] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_file() && name.ends_with(".yaml") && name != "kustomization.yaml" {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
#[ignore = "needs kubernetes-validate: scripts/infra-validators install (scripts/test runs it)"]
fn the_manifests_validate_against_the_kubernetes_api_schemas() {
    let files = kubernetes_files();
    assert!(files.len() > 10, "the base has its manifests: {files:?}");
    let output = Command::new(tool("kubernetes-validate"))
        .args(["--kubernetes-version", KUBERNETES_VERSION, "--strict", "--quiet"])
        .args(&files)
        .output()
        .expect("kubernetes-validate runs");
    assert!(
        output.status.success(),
        "kubernetes-validate refused the manifests:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // An object without a schema is only a warning: it must be one of the
    // custom resources, never a mistyped built-in kind.
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let unchecked: Vec<&str> = text
        .lines()
        .filter(|line| {
            line.contains("Couldn't find schema")
                && !CUSTOM_RESOURCES
                    .iter()
                    .any(|api| line.contains(&format!("api version {api}")))
        })
        .collect();
    assert!(
        unchecked.is_empty(),
        "objects kubernetes-validate could not check: {unchecked:#?}"
    );
    assert!(
        !text.lines().any(|line| line.starts_with("ERROR")),
        "kubernetes-validate: {text}"
    );
}

/// Runs checkov; fails on a failed check, a
/// file it could not parse, or a framework that found nothing to check.
fn checkov(args: &[&str], frameworks: &[&str]) {
    let output = Command::new(tool("checkov"))
        .args(args)
        .args(["--compact", "--quiet", "--skip-download", "--output", "cli"])
        .current_dir(repository())
        .output()
        .expect("checkov runs");
    assert!(
        output.status.success(),
        "checkov {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        !text.contains("Parsing errors"),
        "checkov could not read a file:\n{text}"
    );
    for framework in frameworks {
        let results = text
            .split(&format!("{framework} scan results:"))
            .nth(1)
            .unwrap_or_else(|| panic!("checkov checked no {framework} file:\n{text}"));
        assert!(
            !results.trim_start().starts_with("Passed checks: 0, Failed checks: 0"),
            "checkov ran no {framework} check:\n{text}"
        );
    }
}

#[test]
#[ignore = "needs checkov: scripts/infra-validators install (scripts/test runs it)"]
fn checkov_passes_on_infra_and_the_dockerfile() {
    checkov(
        &["--directory", "infra", "--framework", "kubernetes", "bicep"],
        &["kubernetes", "bicep"],
    );
    checkov(&["--file", "Dockerfile", "--framework", "dockerfile"], &["dockerfile"]);
}
