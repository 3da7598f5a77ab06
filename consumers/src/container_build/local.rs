//! The embedded registry: images built without Docker into OCI image
//! layouts on disk, one layout per repository:
//!
//! ```text
//! <root>/<registry>/<image>/
//!     oci-layout                  {"imageLayoutVersion":"1.0.0"}
//!     index.json                  one manifest entry per tag
//!                                 (annotation org.opencontainers.image.ref.name)
//!     blobs/sha256/<hex>          layers, config, manifest
//! ```
//!
//! `<registry>` is the module's registry host with `:` replaced by `_`
//! (`localhost:5000` → `localhost_5000`), so the path is valid everywhere.
//! Tools that read OCI layouts take it as is, e.g.
//! `skopeo copy oci:<root>/localhost/payments-api:1.4.0 docker-daemon:payments-api:1.4.0`.
//!
//! Blobs are written to a temporary file and renamed, so a reader never
//! sees half a blob; `index.json` is replaced the same way. Writing is
//! idempotent on the digest: when the tag already names the digest just
//! built and every blob is there, nothing is written and the image is
//! reported `already_present`. A tag rebuilt with different content moves
//! to the new digest (tags are mutable, digests are not); the old blobs
//! stay.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bosun_contracts::validate;
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::image::{INDEX_MEDIA_TYPE, OciBlob, OciImage, build_from_context, json_bytes};
use super::port::{BuiltImage, ContainerBuildError, ImageBuilder, ImageSpec};
use crate::blob::BlobStore;

/// The annotation that names a tag in `index.json`.
pub const REF_NAME_ANNOTATION: &str = "org.opencontainers.image.ref.name";

/// Builds images into OCI layouts under a root directory.
pub struct LocalImageBuilder {
    root: PathBuf,
    blobs: Arc<dyn BlobStore>,
    /// Serializes `index.json` updates of this process.
    index_lock: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for LocalImageBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalImageBuilder").field("root", &self.root).finish()
    }
}

impl LocalImageBuilder {
    /// A builder writing layouts under `root` (the runtime passes
    /// `<data dir>/oci`) and reading build contexts from `blobs`.
    pub fn new(root: impl Into<PathBuf>, blobs: Arc<dyn BlobStore>) -> Self {
        Self {
            root: root.into(),
            blobs,
            index_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The layout directory of `registry`/`image` (not checked; the builder
    /// validates both before using it).
    pub fn layout_dir(&self, registry: &str, image: &str) -> PathBuf {
        self.root.join(registry.replace(':', "_")).join(image)
    }
}

#[async_trait]
impl ImageBuilder for LocalImageBuilder {
    async fn build(&self, spec: &ImageSpec) -> Result<BuiltImage, ContainerBuildError> {
        let invalid =
            |err: validate::FieldError| ContainerBuildError::Invalid(format!("{}: {}", err.field, err.reason));
        validate::registry_host("registry", &spec.registry).map_err(invalid)?;
        validate::oci_repository("image", &spec.image).map_err(invalid)?;
        validate::oci_tag("tag", &spec.tag).map_err(invalid)?;
        let image = build_from_context(&*self.blobs, spec).await?;
        let dir = self.layout_dir(&spec.registry, &spec.image);
        let tag = spec.tag.clone();
        let _guard = self.index_lock.lock().await;
        let built = tokio::task::spawn_blocking(move || store(&dir, &image, &tag))
            .await
            .map_err(|err| ContainerBuildError::Storage(format!("the layout task failed: {err}")))??;
        tracing::debug!(
            registry = %spec.registry,
            image = %spec.image,
            tag = %spec.tag,
            digest = %built.digest,
            already_present = built.already_present,
            "image stored in the local OCI layout"
        );
        Ok(built)
    }
}

fn storage(context: &str, path: &Path, err: std::io::Error) -> ContainerBuildError {
    ContainerBuildError::Storage(format!("{context} {}: {err}", path.display()))
}

/// Writes the image into the layout at `dir` under `tag`.
fn store(dir: &Path, image: &OciImage, tag: &str) -> Result<BuiltImage, ContainerBuildError> {
    let blob_dir = dir.join("blobs").join("sha256");
    std::fs::create_dir_all(&blob_dir).map_err(|err| storage("creating", &blob_dir, err))?;
    let layout_file = dir.join("oci-layout");
    if !layout_file.is_file() {
        write_atomically(&layout_file, br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    }

    let mut wrote = false;
    for blob in image.blobs().chain(std::iter::once(&image.manifest)) {
        wrote |= write_blob(&blob_dir, blob)?;
    }

    let index_path = dir.join("index.json");
    let mut index = read_index(&index_path)?;
    let manifests = index
        .get_mut("manifests")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| ContainerBuildError::CorruptLayout(format!("{} has no manifests list", index_path.display())))?;
    let tagged = |entry: &Value| entry["annotations"][REF_NAME_ANNOTATION].as_str() == Some(tag);
    let current = manifests.iter().find(|entry| tagged(entry));
    let already_tagged = current.is_some_and(|entry| entry["digest"].as_str() == Some(image.digest()));
    let manifest_path = blob_dir.join(image.manifest.hex());
    if already_tagged && !wrote {
        let pushed_at = std::fs::metadata(&manifest_path)
            .and_then(|meta| meta.modified())
            .map(OffsetDateTime::from)
            .unwrap_or_else(|_| OffsetDateTime::now_utc());
        return Ok(BuiltImage {
            digest: image.digest().to_owned(),
            size_bytes: image.size_bytes(),
            already_present: true,
            pushed_at,
        });
    }
    if !already_tagged {
        manifests.retain(|entry| !tagged(entry));
        let mut entry = image.manifest.descriptor();
        entry["platform"] = image.platform_json();
        entry["annotations"] = json!({ REF_NAME_ANNOTATION: tag });
        manifests.push(entry);
        manifests.sort_by(|a, b| {
            let name = |v: &Value| {
                v["annotations"][REF_NAME_ANNOTATION]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            };
            name(a).cmp(&name(b))
        });
        write_atomically(&index_path, &json_bytes(&index))?;
    }
    Ok(BuiltImage {
        digest: image.digest().to_owned(),
        size_bytes: image.size_bytes(),
        already_present: false,
        pushed_at: OffsetDateTime::now_utc(),
    })
}

/// Writes a blob unless it is already there; returns whether it wrote.
fn write_blob(blob_dir: &Path, blob: &OciBlob) -> Result<bool, ContainerBuildError> {
    let path = blob_dir.join(blob.hex());
    if std::fs::metadata(&path).is_ok_and(|meta| meta.is_file() && meta.len() == blob.size()) {
        return Ok(false);
    }
    write_atomically(&path, &blob.bytes)?;
    Ok(true)
}

fn read_index(path: &Path) -> Result<Value, ContainerBuildError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|err| ContainerBuildError::CorruptLayout(format!("{} is not JSON: {err}", path.display()))),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(json!({
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": [],
        })),
        Err(err) => Err(storage("reading", path, err)),
    }
}

/// Writes `bytes` to a temporary file beside `path` and renames it.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ContainerBuildError> {
    let parent = path.parent().unwrap_or_else(|| Path::new("."));
    let mut temporary =
        tempfile::NamedTempFile::new_in(parent).map_err(|err| storage("creating a temporary file in", parent, err))?;
    std::io::Write::write_all(&mut temporary, bytes).map_err(|err| storage("writing", path, err))?;
    temporary
        .persist(path)
        .map_err(|err| storage("renaming into", path, err.error))?;
    Ok(())
}
