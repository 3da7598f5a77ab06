//! What a run publishes: JUnit files (`PublishTestResults@2`), artifacts
//! (`PublishPipelineArtifact@1`, tarred with deterministic options) and
//! its log, uploaded to the blob store with a few quick retries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_contracts::messages::{ArtifactKind, ArtifactRef, BlobRef};
use bosun_contracts::validate;

use super::glob::find_files;
use super::record::RunRecord;
use super::script::resolve;
use super::step_error::StepError;
use super::tools::{run_tool_with_input, tar_command};
use super::variables::Variables;
use super::workspace::{RunLog, Workspace};
use super::{ARTIFACTS_CONTAINER, CONTAINER_CONTEXT_ARTIFACT, LocalPipelines, TEST_RESULTS_CONTAINER, UPLOAD_ATTEMPTS};
use crate::delivery::blob::{BlobError, BlobStore};

impl LocalPipelines {
    /// `PublishTestResults@2`: uploads the JUnit files matching the globs.
    pub(super) async fn publish_test_results(
        &self,
        inputs: &BTreeMap<String, String>,
        variables: &Variables,
        record: &RunRecord,
        workspace: &Workspace,
        log: &mut RunLog,
    ) -> Result<Vec<BlobRef>, StepError> {
        let format = inputs
            .get("testresultsformat")
            .or_else(|| inputs.get("testrunner"))
            .map(String::as_str)
            .unwrap_or("JUnit");
        if !format.eq_ignore_ascii_case("junit") {
            return Err(StepError::Unsupported(format!(
                "testResultsFormat `{format}` is not supported by the local runner (JUnit only)"
            )));
        }
        let patterns = inputs
            .get("testresultsfiles")
            .cloned()
            .unwrap_or_else(|| "**/TEST-*.xml".to_owned());
        let search = inputs
            .get("searchfolder")
            .cloned()
            .unwrap_or_else(|| variables.expand("$(System.DefaultWorkingDirectory)"));
        let search = resolve(&workspace.sources, &search);
        let files = find_files(&search, &patterns).await?;
        if files.is_empty() {
            log.line(&format!(
                "##[warning]No test result files matching '{}' were found under {}.",
                patterns.replace('\n', ", "),
                search.display()
            ));
            return Ok(Vec::new());
        }
        let mut published = Vec::with_capacity(files.len());
        for (relative, path) in files {
            let key = format!("{}/{}/{relative}", record.tenant, record.run_id);
            if validate::blob_key("key", &key).is_err() {
                log.line(&format!(
                    "##[warning]Skipping {relative}: the name cannot be a blob key."
                ));
                continue;
            }
            let content = tokio::fs::read(&path)
                .await
                .map_err(|err| StepError::file("reading", &path, err))?;
            let blob = upload(&*self.blobs, TEST_RESULTS_CONTAINER, &key, content, "application/xml")
                .await
                .map_err(|source| StepError::Upload {
                    what: relative.clone(),
                    source,
                })?;
            log.line(&format!(
                "Published test results {relative} ({} bytes).",
                blob.size_bytes
            ));
            published.push(blob);
        }
        Ok(published)
    }

    /// `PublishPipelineArtifact@1`: tars the target path and uploads it.
    pub(super) async fn publish_artifact(
        &self,
        inputs: &BTreeMap<String, String>,
        variables: &Variables,
        record: &RunRecord,
        workspace: &Workspace,
        log: &mut RunLog,
        published: &[ArtifactRef],
    ) -> Result<ArtifactRef, StepError> {
        let name = inputs
            .get("artifact")
            .or_else(|| inputs.get("artifactname"))
            .cloned()
            .unwrap_or_else(|| "drop".to_owned());
        validate::identifier("artifact", &name).map_err(|err| StepError::Unsupported(err.reason))?;
        if published.iter().any(|artifact| artifact.name == name) {
            return Err(StepError::Unsupported(format!(
                "an artifact named `{name}` was already published by this run"
            )));
        }
        let target = inputs
            .get("targetpath")
            .or_else(|| inputs.get("path"))
            .cloned()
            .unwrap_or_else(|| variables.expand("$(Pipeline.Workspace)"));
        let target = resolve(&workspace.sources, &target);
        let archive = workspace.temp.join(format!("artifact-{name}"));
        tar_path(&target, &archive).await?;
        let content = tokio::fs::read(&archive)
            .await
            .map_err(|err| StepError::file("reading", &archive, err))?;
        // The archive is in memory now; a failed removal only costs disk
        // until the workspace goes.
        let _ = tokio::fs::remove_file(&archive).await;
        let key = format!("{}/{}/{name}", record.tenant, record.run_id);
        let blob = upload(&*self.blobs, ARTIFACTS_CONTAINER, &key, content, "application/x-tar")
            .await
            .map_err(|source| StepError::Upload {
                what: format!("artifact {name}"),
                source,
            })?;
        log.line(&format!(
            "Published artifact {name} from {} ({} bytes, sha256 {}).",
            target.display(),
            blob.size_bytes,
            blob.sha256
        ));
        Ok(ArtifactRef {
            kind: artifact_kind(&name),
            name,
            blob,
        })
    }
}

/// The kind of an artifact, from its name.
pub fn artifact_kind(name: &str) -> ArtifactKind {
    if name == CONTAINER_CONTEXT_ARTIFACT {
        ArtifactKind::ContainerContext
    } else if name.ends_with(".nupkg") {
        ArtifactKind::Package
    } else {
        ArtifactKind::Archive
    }
}

/// Tars `target` (a folder's contents, or one file) into `archive` with
/// deterministic options: names sorted, mtime 0, owner and group 0, modes
/// normalised to 644/755, GNU format (no access or change times).
pub(super) async fn tar_path(target: &Path, archive: &Path) -> Result<(), StepError> {
    let meta = tokio::fs::metadata(target)
        .await
        .map_err(|source| StepError::ArtifactMissing {
            path: target.to_owned(),
            source,
        })?;
    let (directory, names) = if meta.is_dir() {
        let root = target.to_owned();
        let names = tokio::task::spawn_blocking(move || tar_entries(&root))
            .await
            .map_err(|source| StepError::Task {
                action: format!("listing {}", target.display()),
                source,
            })?
            .map_err(|err| StepError::file("listing", target, err))?;
        (target.to_owned(), names)
    } else {
        let parent = target
            .parent()
            .map(Path::to_owned)
            .unwrap_or_else(|| PathBuf::from("/"));
        let name = target
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        (parent, vec![name])
    };
    let mut list = Vec::new();
    for name in &names {
        list.extend_from_slice(name.as_bytes());
        list.push(0);
    }
    let mut tar = tar_command();
    tar.args(["--create", "--file"])
        .arg(archive)
        .arg("--directory")
        .arg(&directory)
        .args([
            "--format=gnu",
            "--mtime=@0",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "--mode=u+rw,go+r,go-w,a+X",
            "--no-recursion",
            "--null",
            "--files-from=-",
        ]);
    run_tool_with_input(tar, "tar --create", list).await
}

/// Paths under `root` (folders and files, symlinks as links), relative,
/// sorted byte-wise so every machine lists them in the same order.
pub(super) fn tar_entries(root: &Path) -> std::io::Result<Vec<String>> {
    fn visit(root: &Path, dir: &Path, names: &mut Vec<String>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            let relative = path
                .strip_prefix(root)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            names.push(relative);
            if entry.file_type()?.is_dir() {
                visit(root, &path, names)?;
            }
        }
        Ok(())
    }
    let mut names = Vec::new();
    visit(root, root, &mut names)?;
    names.sort();
    Ok(names)
}

pub(super) async fn upload(
    blobs: &dyn BlobStore,
    container: &str,
    key: &str,
    content: Vec<u8>,
    content_type: &str,
) -> Result<BlobRef, BlobError> {
    let mut attempt = 1;
    loop {
        match blobs.put(container, key, content.clone(), content_type).await {
            Ok(blob) => return Ok(blob),
            Err(err) if err.is_transient() && attempt < UPLOAD_ATTEMPTS => {
                tracing::debug!(container, attempt, error = %err, "blob upload failed; retrying");
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                attempt += 1;
            }
            Err(err) => return Err(err),
        }
    }
}
