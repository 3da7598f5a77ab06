//! The pipeline artifacts of a finished Azure Pipelines run, copied into
//! bosun's blob store so the consumers after the build find them where the
//! local runner puts them: `container-context.tar` for container-build,
//! `package-content.tar` (or a `*.nupkg`) for package-publishing.
//!
//! 1. Artifacts - List (`GET {project}/_apis/build/builds/{runId}/artifacts`,
//!    REST 7.1): the run's artifacts, each with a `resource.downloadUrl`;
//!    a build without artifacts (404 or an empty list) copies nothing, and
//!    artifacts of other names (the module's own `drop` ...) are left
//!    where they are;
//! 2. each wanted artifact is downloaded from its `downloadUrl` as a zip
//!    ([`AzureDevOpsClient::download`](crate::delivery::azure::devops::AzureDevOpsClient::download): only from Azure DevOps hosts, with
//!    the adapter's credential), whose entries are the artifact's files
//!    under a folder of its name;
//! 3. the files become a tar as the local runner makes one (names sorted,
//!    parent folders first, mtime 0, owner 0; modes 644/755): Azure
//!    Pipelines keeps no Unix permissions in pipeline artifacts, so every
//!    file is 644 here. A pipeline that needs executable files in the
//!    context publishes a tar it made itself: an artifact whose only file
//!    is named like the artifact (`container-context.tar/container-context.tar`)
//!    and reads as a tar is stored as it is;
//! 4. the tar is uploaded to [`ARTIFACTS_CONTAINER`] under
//!    `<tenant>/<runId>/<name>`, the local runner's key, so copying again
//!    (a poll retried after a failure) writes the same blob.
//!
//! An artifact over [`MAX_ARTIFACT_BYTES`], or a zip that cannot be read,
//! is permanent ([`MonitorError::Artifact`]): the same run gives the same
//! bytes again.

use std::collections::BTreeSet;

use bosun_contracts::messages::ArtifactRef;
use serde::Deserialize;

use super::AzureRunStatus;
use crate::delivery::archive::tar::{TarWriter, read_archive};
use crate::delivery::archive::zip::{extract, read_central_directory};
use crate::delivery::pipeline::{
    ARTIFACTS_CONTAINER, CONTAINER_CONTEXT_ARTIFACT, PACKAGE_CONTENT_ARTIFACT, artifact_kind,
};
use crate::pipeline_monitor::port::MonitorError;

/// Largest artifact copied (the zip as downloaded, and the tar made of it).
pub const MAX_ARTIFACT_BYTES: usize = 512 * 1024 * 1024;

/// Whether the consumers after the build read an artifact of this name.
fn wanted(name: &str) -> bool {
    name == CONTAINER_CONTEXT_ARTIFACT || name == PACKAGE_CONTENT_ARTIFACT || name.ends_with(".nupkg")
}

/// Artifacts - List, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct ArtifactList {
    #[serde(default)]
    value: Vec<BuildArtifact>,
}

/// `BuildArtifact`, the fields bosun reads.
#[derive(Debug, Deserialize)]
struct BuildArtifact {
    name: String,
    #[serde(default)]
    resource: Option<ArtifactResource>,
}

/// `ArtifactResource`, the fields bosun reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArtifactResource {
    #[serde(default)]
    download_url: Option<String>,
}

impl AzureRunStatus {
    /// Copies the run's wanted artifacts into the blob store.
    pub(super) async fn artifacts(&self, tenant: &str, run_id: &str) -> Result<Vec<ArtifactRef>, MonitorError> {
        let url = self.project_url(tenant, &["build", "builds", run_id, "artifacts"], &[]);
        let Some(list) = self.client.get_json_opt::<ArtifactList>(url).await? else {
            return Ok(Vec::new());
        };
        let mut seen = BTreeSet::new();
        let mut copied = Vec::new();
        for artifact in list.value {
            if !wanted(&artifact.name) || !seen.insert(artifact.name.clone()) {
                continue;
            }
            let failed = |reason: String| MonitorError::Artifact {
                run_id: run_id.to_owned(),
                name: artifact.name.clone(),
                reason,
            };
            let Some(download) = artifact.resource.and_then(|resource| resource.download_url) else {
                return Err(failed("Azure DevOps gave no downloadUrl".to_owned()));
            };
            let zip = self.client.download(&download).await?;
            if zip.len() > MAX_ARTIFACT_BYTES {
                return Err(failed(format!(
                    "{} bytes, over the {MAX_ARTIFACT_BYTES} bytes bosun copies",
                    zip.len()
                )));
            }
            let tar = tar_of_zip(&artifact.name, &zip).map_err(failed)?;
            let key = format!("{tenant}/{run_id}/{}", artifact.name);
            let blob = self
                .blobs
                .put(ARTIFACTS_CONTAINER, &key, tar, "application/x-tar")
                .await?;
            tracing::info!(run_id, artifact = %artifact.name, key = %blob.key, "pipeline artifact copied");
            copied.push(ArtifactRef {
                kind: artifact_kind(&artifact.name),
                name: artifact.name,
                blob,
            });
        }
        Ok(copied)
    }
}

/// The tar of an artifact downloaded as a zip (see the module docs).
pub(super) fn tar_of_zip(name: &str, zip: &[u8]) -> Result<Vec<u8>, String> {
    let entries = read_central_directory(zip).map_err(|err| format!("the zip cannot be read: {err}"))?;
    let prefix = format!("{name}/");
    let mut files = Vec::new();
    for entry in &entries {
        if entry.name.ends_with('/') {
            continue;
        }
        let path = entry.name.strip_prefix(&prefix).unwrap_or(&entry.name);
        files.push((path.to_owned(), entry));
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut total = 0usize;
    let mut contents = Vec::with_capacity(files.len());
    for (path, entry) in files {
        let bytes = extract(zip, entry).map_err(|err| format!("`{}`: {err}", entry.name))?;
        total = total.saturating_add(bytes.len());
        if total > MAX_ARTIFACT_BYTES {
            return Err(format!(
                "its files are over the {MAX_ARTIFACT_BYTES} bytes bosun copies"
            ));
        }
        contents.push((path, bytes));
    }
    if let [(path, bytes)] = contents.as_slice()
        && path == name
        && read_archive(bytes).is_ok()
    {
        return Ok(bytes.clone());
    }
    let mut writer = TarWriter::new();
    let mut folders = BTreeSet::new();
    for (path, bytes) in &contents {
        let mut parent = String::new();
        for part in path.split('/').take(path.split('/').count().saturating_sub(1)) {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(part);
            if folders.insert(parent.clone()) {
                writer
                    .directory(&parent, 0o755, 0, 0)
                    .map_err(|err| format!("`{path}`: {err}"))?;
            }
        }
        writer
            .file(path, 0o644, 0, 0, bytes)
            .map_err(|err| format!("`{path}`: {err}"))?;
    }
    writer.finish().map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zip(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut writer = ::zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = ::zip::write::SimpleFileOptions::default().compression_method(::zip::CompressionMethod::Deflated);
        for (name, bytes) in entries {
            if name.ends_with('/') {
                writer.add_directory(*name, options).unwrap();
            } else {
                writer.start_file(*name, options).unwrap();
                std::io::Write::write_all(&mut writer, bytes).unwrap();
            }
        }
        writer.finish().unwrap().into_inner()
    }

    #[test]
    fn a_folder_artifact_becomes_a_sorted_tar_under_no_prefix() {
        let bytes = zip(&[
            ("package-content.tar/", b""),
            ("package-content.tar/src/calc.sh", b"echo 3\n"),
            ("package-content.tar/README.md", b"# hi\n"),
        ]);
        let tar = tar_of_zip("package-content.tar", &bytes).unwrap();
        let entries = read_archive(&tar).unwrap();
        let names: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(names, ["README.md", "src", "src/calc.sh"]);
        assert_eq!(entries[2].data, b"echo 3\n");
        assert_eq!(tar, tar_of_zip("package-content.tar", &bytes).unwrap(), "deterministic");
    }

    #[test]
    fn a_tar_the_pipeline_made_is_kept_as_it_is() {
        let mut inner = TarWriter::new();
        inner.file("build.sh", 0o755, 0, 0, b"#!/bin/sh\n").unwrap();
        let inner = inner.finish().unwrap();
        let bytes = zip(&[("container-context.tar/container-context.tar", &inner)]);
        assert_eq!(tar_of_zip("container-context.tar", &bytes).unwrap(), inner);
    }

    #[test]
    fn an_unsafe_path_or_a_broken_zip_is_refused_with_the_reason() {
        let bytes = zip(&[("package-content.tar/../escape", b"x")]);
        let err = tar_of_zip("package-content.tar", &bytes).unwrap_err();
        assert!(err.contains("../escape"), "{err}");
        let err = tar_of_zip("package-content.tar", b"PK not a zip").unwrap_err();
        assert!(err.contains("zip cannot be read"), "{err}");
    }
}
