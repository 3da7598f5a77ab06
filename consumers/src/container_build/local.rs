//! The embedded registry: images built without Docker into OCI image
//! layouts on disk, one layout per tenant and repository:
//!
//! ```text
//! <root>/<tenant>/<registry>/<image>/
//!     oci-layout                  {"imageLayoutVersion":"1.0.0"}
//!     index.json                  one manifest entry per tag
//!                                 (annotations org.opencontainers.image.ref.name
//!                                 and dev.bosun.tenant)
//!     blobs/sha256/<hex>          layers, config, manifest
//! <root>/.legacy/<registry>/<image>/   layouts from before tenants,
//!                                      owner unknown (read-only)
//! ```
//!
//! `<registry>` is the module's registry host with `:` replaced by `_`
//! (`localhost:5000` → `localhost_5000`), so the path is valid everywhere.
//! Tools that read OCI layouts take it as is, e.g.
//! `skopeo copy oci:<root>/contoso/localhost/payments-api:1.4.0 docker-daemon:payments-api:1.4.0`.
//! Two tenants building the same image name and tag each get their own
//! layout: neither moves nor sees the other's tag.
//!
//! Blobs are written to a temporary file and renamed, so a reader never
//! sees half a blob; `index.json` is replaced the same way. Writing is
//! idempotent on the digest: when the tag already names the digest just
//! built and every blob is there, nothing is written and the image is
//! reported `already_present`. A tag rebuilt with different content moves
//! to the new digest (tags are mutable, digests are not); the old blobs
//! stay. A tag whose entry records another tenant is refused
//! ([`ContainerBuildError::ForeignTenant`]).
//!
//! # Layouts from before tenants
//!
//! The old layout was `<root>/<registry>/<image>`. The first build of an
//! adapter opens the root with [`TenantLayout`] (see [`crate::delivery::tenant`]):
//! old layouts move to `<root>/.legacy/`, then each whose every tag
//! records one tenant (`dev.bosun.tenant`) moves to that tenant's folder.
//! Layouts written before tenants record none (their index names tags
//! only, their config holds the Dockerfile's labels), so they stay in
//! `.legacy/`: [`LocalImageBuilder::find`] still finds their tags (for any
//! tenant, read only), and building never looks there — an old tag never
//! blocks nor is moved by a tenant's build; the owner's retry of an
//! in-flight build stores the image in its own layout.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bosun_contracts::validate;
use serde_json::{Value, json};
use time::OffsetDateTime;
use tokio::sync::OnceCell;

use super::image::build_from_context;
use super::port::{BuildProgress, BuiltImage, ContainerBuildError, ImageBuilder, ImageSpec};
use crate::delivery::atomic_file;
use crate::delivery::blob::BlobStore;
use crate::delivery::oci::{INDEX_MEDIA_TYPE, OciBlob, OciImage, json_bytes};
use crate::delivery::tenant::{ForeignTenant, LEGACY_DIR, TenantLayout, subfolders};

/// The annotation that names a tag in `index.json`.
pub const REF_NAME_ANNOTATION: &str = "org.opencontainers.image.ref.name";

/// The annotation of an `index.json` entry naming the tenant that built it.
pub const TENANT_ANNOTATION: &str = "dev.bosun.tenant";

/// Builds images into OCI layouts under a root directory.
pub struct LocalImageBuilder {
    root: PathBuf,
    blobs: Arc<dyn BlobStore>,
    /// Serializes `index.json` updates of this process.
    index_lock: tokio::sync::Mutex<()>,
    /// Set once the root has the tenant-scoped layout.
    opened: OnceCell<()>,
}

impl std::fmt::Debug for LocalImageBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalImageBuilder").field("root", &self.root).finish()
    }
}

/// A tag found by [`LocalImageBuilder::find`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundImage {
    /// The layout holding it.
    pub layout: PathBuf,
    /// The manifest digest the tag names.
    pub digest: String,
    /// `true` for a layout from before tenants whose owner is unknown
    /// (under `<root>/.legacy/`, read-only).
    pub legacy: bool,
}

impl LocalImageBuilder {
    /// A builder writing layouts under `root` (the runtime passes
    /// `<data dir>/oci`) and reading build contexts from `blobs`. The root
    /// is migrated to the tenant-scoped layout on first use (see the
    /// module documentation).
    pub fn new(root: impl Into<PathBuf>, blobs: Arc<dyn BlobStore>) -> Self {
        Self {
            root: root.into(),
            blobs,
            index_lock: tokio::sync::Mutex::new(()),
            opened: OnceCell::new(),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The layout directory of a tenant's `registry`/`image` (not checked;
    /// the builder validates all three before using it).
    pub fn layout_dir(&self, tenant: &str, registry: &str, image: &str) -> PathBuf {
        self.root.join(tenant).join(registry.replace(':', "_")).join(image)
    }

    /// Moves the root to the tenant-scoped layout (see the module
    /// documentation), once per adapter: the first build or lookup does
    /// it, and a runtime may call it at start to migrate eagerly.
    /// Idempotent, across restarts too.
    pub async fn open(&self) -> Result<(), ContainerBuildError> {
        self.opened
            .get_or_try_init(|| async {
                let root = self.root.clone();
                tokio::task::spawn_blocking(move || migrate(&root))
                    .await
                    .map_err(|err| ContainerBuildError::storage("the layout migration task failed", err))?
            })
            .await
            .map(|_| ())
    }

    /// The digest a tenant's tag names, if any: in the tenant's own layout,
    /// else in a layout from before tenants whose owner is unknown
    /// (read-only, `legacy: true`). Never another tenant's.
    pub async fn find(
        &self,
        tenant: &str,
        registry: &str,
        image: &str,
        tag: &str,
    ) -> Result<Option<FoundImage>, ContainerBuildError> {
        let invalid =
            |err: validate::FieldError| ContainerBuildError::Invalid(format!("{}: {}", err.field, err.reason));
        validate::tenant_id("tenant", tenant).map_err(invalid)?;
        validate::registry_host("registry", registry).map_err(invalid)?;
        validate::oci_repository("image", image).map_err(invalid)?;
        validate::oci_tag("tag", tag).map_err(invalid)?;
        self.open().await?;
        let candidates = [
            (self.layout_dir(tenant, registry, image), false),
            (
                self.root.join(LEGACY_DIR).join(registry.replace(':', "_")).join(image),
                true,
            ),
        ];
        let (tenant, tag) = (tenant.to_owned(), tag.to_owned());
        tokio::task::spawn_blocking(move || {
            for (layout, legacy) in candidates {
                let index_path = layout.join("index.json");
                if !index_path.is_file() {
                    continue;
                }
                let index = read_index(&index_path)?;
                let Some(entry) = tag_entry(&index, &tag) else {
                    continue;
                };
                if !legacy {
                    check_entry_tenant(entry, &index_path, &tenant)?;
                }
                if let Some(digest) = entry["digest"].as_str() {
                    return Ok(Some(FoundImage {
                        digest: digest.to_owned(),
                        layout,
                        legacy,
                    }));
                }
            }
            Ok(None)
        })
        .await
        .map_err(|err| ContainerBuildError::storage("the layout task failed", err))?
    }
}

/// The tenant-scoped layout: old layouts parked, each whose tags all
/// record one tenant moved to that tenant's folder.
fn migrate(root: &Path) -> Result<(), ContainerBuildError> {
    let layout = TenantLayout::open(root).map_err(|err| storage("opening the registry root", root, err))?;
    let legacy = layout.legacy_dir();
    let (mut adopted, mut kept) = (0usize, 0usize);
    for (registry, registry_dir) in subfolders(&legacy).map_err(|err| storage("reading", &legacy, err))? {
        let mut layouts = layouts_under(&registry_dir, "")?;
        // Deepest first: the layout of `a/b` may sit inside the one of `a`.
        layouts.sort_by_key(|(image, _)| std::cmp::Reverse(image.matches('/').count()));
        for (image, dir) in layouts {
            // A layout still holding another (of unknown owner) stays, so
            // the other does not move with it.
            let holds_another = !layouts_under(&dir, "")?.is_empty();
            match layout_tenant(&dir)?.filter(|_| !holds_another) {
                Some(tenant) => {
                    let target = root.join(&tenant).join(&registry).join(&image);
                    if layout
                        .adopt(&dir, &target)
                        .map_err(|err| storage("moving", &dir, err))?
                    {
                        adopted += 1;
                    } else {
                        tracing::warn!(from = %dir.display(), to = %target.display(), "an old image layout is also in its tenant's folder; left in .legacy/");
                        kept += 1;
                    }
                }
                None => kept += 1,
            }
        }
    }
    if adopted + kept > 0 {
        tracing::info!(root = %root.display(), adopted, kept, "old image layouts sorted by tenant");
    }
    Ok(())
}

/// The OCI layouts under `dir` (an image name may have several `/`
/// components), with their image names.
fn layouts_under(dir: &Path, prefix: &str) -> Result<Vec<(String, PathBuf)>, ContainerBuildError> {
    let mut found = Vec::new();
    for (name, path) in subfolders(dir).map_err(|err| storage("reading", dir, err))? {
        if name == "blobs" && dir.join("oci-layout").is_file() {
            continue;
        }
        let image = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if path.join("oci-layout").is_file() {
            found.push((image.clone(), path.clone()));
        }
        found.extend(layouts_under(&path, &image)?);
    }
    Ok(found)
}

/// The one tenant every tag of a layout records, if they all record the
/// same one.
fn layout_tenant(dir: &Path) -> Result<Option<String>, ContainerBuildError> {
    let index_path = dir.join("index.json");
    if !index_path.is_file() {
        return Ok(None);
    }
    let index = read_index(&index_path)?;
    let mut tenants = index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|entry| entry["annotations"][TENANT_ANNOTATION].as_str());
    let Some(Some(first)) = tenants.next() else {
        return Ok(None);
    };
    let one = tenants.all(|tenant| tenant == Some(first)) && validate::tenant_id("tenant", first).is_ok();
    Ok(one.then(|| first.to_owned()))
}

/// The `index.json` entry of a tag.
fn tag_entry<'a>(index: &'a Value, tag: &str) -> Option<&'a Value> {
    index["manifests"]
        .as_array()?
        .iter()
        .find(|entry| entry["annotations"][REF_NAME_ANNOTATION].as_str() == Some(tag))
}

/// Refuses a tag whose entry records another tenant (it sits in `tenant`'s
/// layout, so only a copied or edited layout can).
fn check_entry_tenant(entry: &Value, index_path: &Path, tenant: &str) -> Result<(), ContainerBuildError> {
    match entry["annotations"][TENANT_ANNOTATION].as_str() {
        Some(owner) if owner != tenant => Err(ForeignTenant::new(
            format!(
                "tag `{}` of {}",
                entry["annotations"][REF_NAME_ANNOTATION].as_str().unwrap_or_default(),
                index_path.display()
            ),
            Some(owner),
            tenant,
        )
        .into()),
        _ => Ok(()),
    }
}

impl LocalImageBuilder {
    /// Builds `spec`'s image and stores it under its tag, before it
    /// returns (the port's [`ImageBuilder::build`], which never leaves a
    /// run going).
    pub async fn build_image(&self, spec: &ImageSpec) -> Result<BuiltImage, ContainerBuildError> {
        let invalid =
            |err: validate::FieldError| ContainerBuildError::Invalid(format!("{}: {}", err.field, err.reason));
        validate::registry_host("registry", &spec.registry).map_err(invalid)?;
        validate::oci_repository("image", &spec.image).map_err(invalid)?;
        validate::oci_tag("tag", &spec.tag).map_err(invalid)?;
        validate::tenant_id("tenant", &spec.tenant).map_err(invalid)?;
        self.open().await?;
        let image = build_from_context(&*self.blobs, spec).await?;
        let dir = self.layout_dir(&spec.tenant, &spec.registry, &spec.image);
        let (tenant, repository, tag) = (spec.tenant.clone(), spec.image.clone(), spec.tag.clone());
        let _guard = self.index_lock.lock().await;
        let built = tokio::task::spawn_blocking(move || store(&dir, &image, &tenant, &repository, &tag))
            .await
            .map_err(|err| ContainerBuildError::storage("the layout task failed", err))??;
        tracing::debug!(
            tenant = %spec.tenant,
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

#[async_trait]
impl ImageBuilder for LocalImageBuilder {
    async fn build(&self, spec: &ImageSpec) -> Result<BuildProgress, ContainerBuildError> {
        self.build_image(spec).await.map(BuildProgress::Built)
    }
}

fn storage(context: &str, path: &Path, err: std::io::Error) -> ContainerBuildError {
    ContainerBuildError::storage(format!("{context} {}", path.display()), err)
}

/// Writes `tenant`'s image of `repository` into the layout at `dir` under
/// `tag`.
fn store(
    dir: &Path,
    image: &OciImage,
    tenant: &str,
    repository: &str,
    tag: &str,
) -> Result<BuiltImage, ContainerBuildError> {
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
        .ok_or_else(|| ContainerBuildError::CorruptLayout {
            path: index_path.clone(),
            problem: "has no manifests list",
            source: None,
        })?;
    let tagged = |entry: &Value| entry["annotations"][REF_NAME_ANNOTATION].as_str() == Some(tag);
    let current = manifests.iter().find(|entry| tagged(entry));
    if let Some(entry) = current {
        check_entry_tenant(entry, &index_path, tenant)?;
    }
    let already_tagged = current.is_some_and(|entry| entry["digest"].as_str() == Some(image.digest()));
    let manifest_path = blob_dir.join(image.manifest.hex());
    if already_tagged && !wrote {
        let pushed_at = std::fs::metadata(&manifest_path)
            .and_then(|meta| meta.modified())
            .map(OffsetDateTime::from)
            .unwrap_or_else(|_| OffsetDateTime::now_utc());
        return Ok(BuiltImage {
            repository: repository.to_owned(),
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
        entry["annotations"] = json!({ REF_NAME_ANNOTATION: tag, TENANT_ANNOTATION: tenant });
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
        repository: repository.to_owned(),
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
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|err| ContainerBuildError::CorruptLayout {
            path: path.to_owned(),
            problem: "is not JSON",
            source: Some(err),
        }),
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
        atomic_file::temporary_in(parent).map_err(|err| storage("creating a temporary file in", parent, err))?;
    std::io::Write::write_all(&mut temporary, bytes).map_err(|err| storage("writing", path, err))?;
    temporary
        .persist(path)
        .map_err(|err| storage("renaming into", path, err.error))?;
    Ok(())
}
