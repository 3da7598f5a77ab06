//! The embedded NuGet feed: folder feeds in NuGet's hierarchical (v3)
//! layout, one per tenant and feed name, as `nuget add` writes them:
//!
//! ```text
//! <root>/<tenant>/<feed>/<id>/<version>/
//!     <id>.<version>.nupkg
//!     <id>.<version>.nupkg.sha512    base64 SHA-512 of the .nupkg
//!     <id>.nuspec
//!     .bosun-tenant                  the tenant that published it
//! <root>/.legacy/<feed>/<id>/<version>/   versions from before tenants,
//!                                         owner unknown (read-only)
//! ```
//!
//! `<id>` and `<version>` are lower case, the version without build
//! metadata. `dotnet restore` and `nuget install` take `<root>/<tenant>/<feed>`
//! as a package source. Two tenants publishing the same id and version each
//! get their own version: neither sees nor blocks the other's.
//!
//! Each file is written to a temporary file and renamed; the `.sha512` is
//! written last and marks the version complete, so a publish interrupted
//! midway is finished by the retry. Versions are immutable: a complete
//! version with the same SHA-512 is reported `already_published` without
//! writing anything; different content for it is a
//! [`PublishError::VersionConflict`]. A version whose `.bosun-tenant`
//! names another tenant is refused ([`PublishError::ForeignTenant`]).
//!
//! # Versions from before tenants
//!
//! The old layout was `<root>/<feed>/<id>/<version>`. The first publish of
//! an adapter opens the root with [`TenantLayout`] (see
//! [`crate::delivery::tenant`]): old feeds move to `<root>/.legacy/`, then each old
//! version whose tenant it shows moves to `<root>/<tenant>/<feed>/...`.
//! A version shows its tenant by its `.bosun-tenant` (written by an
//! earlier, interrupted migration, before the move), or by its `.nuspec`:
//! bosun packs packages with the tenant as `<authors>`
//! ([`super::nupkg::packed_tenant`]). A ready `.nupkg` a build made names
//! its own authors, so its tenant cannot be known: it stays in `.legacy/`,
//! where [`LocalNugetFeed::find`] still finds it (for any tenant, read
//! only). Publishing never looks there, so an old version of unknown owner
//! never blocks a tenant's publish; the owner's retry of an in-flight
//! publish writes the version into its own feed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use time::OffsetDateTime;
use tokio::sync::OnceCell;

use super::nupkg::{Nupkg, check_spec, normalized_version, packed_tenant, part_name, prepare, sha512_hex};
use super::port::{PackageFeed, PackageSpec, PublishError, PublishedPackage};
use crate::delivery::atomic_file;
use crate::delivery::blob::BlobStore;
use crate::delivery::tenant::{ForeignTenant, TenantLayout, subfolders};

/// The file in a version's folder naming the tenant that published it.
pub const TENANT_FILE: &str = ".bosun-tenant";

/// Folder feeds under a root directory.
pub struct LocalNugetFeed {
    root: PathBuf,
    blobs: Arc<dyn BlobStore>,
    /// Serializes check-and-write of this process.
    write_lock: tokio::sync::Mutex<()>,
    /// Set once the root has the tenant-scoped layout.
    opened: OnceCell<()>,
}

impl std::fmt::Debug for LocalNugetFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalNugetFeed").field("root", &self.root).finish()
    }
}

/// Where one version lives in a feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionPaths {
    /// `<root>/<tenant>/<feed>/<id>/<version>`.
    pub dir: PathBuf,
    /// The `.nupkg`.
    pub nupkg: PathBuf,
    /// The `.nupkg.sha512`.
    pub sha512: PathBuf,
    /// The `.nuspec`.
    pub nuspec: PathBuf,
    /// The `.bosun-tenant`.
    pub tenant: PathBuf,
}

impl VersionPaths {
    fn in_dir(dir: PathBuf, package_id: &str, version: &str) -> Self {
        let id = package_id.to_ascii_lowercase();
        let version = normalized_version(version);
        Self {
            nupkg: dir.join(format!("{id}.{version}.nupkg")),
            sha512: dir.join(format!("{id}.{version}.nupkg.sha512")),
            nuspec: dir.join(format!("{id}.nuspec")),
            tenant: dir.join(TENANT_FILE),
            dir,
        }
    }
}

/// A complete version found by [`LocalNugetFeed::find`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundVersion {
    /// Its files.
    pub paths: VersionPaths,
    /// SHA-512 of its `.nupkg`, 128 lowercase hex digits.
    pub sha512: String,
    /// `true` for a version from before tenants whose owner is unknown
    /// (under `<root>/.legacy/`, read-only).
    pub legacy: bool,
}

impl LocalNugetFeed {
    /// Feeds under `root` (the runtime passes `<data dir>/nuget`), reading
    /// package content from `blobs`. The root is migrated to the
    /// tenant-scoped layout on first use (see the module documentation).
    pub fn new(root: impl Into<PathBuf>, blobs: Arc<dyn BlobStore>) -> Self {
        Self {
            root: root.into(),
            blobs,
            write_lock: tokio::sync::Mutex::new(()),
            opened: OnceCell::new(),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder of one tenant's feed: a NuGet package source.
    pub fn feed_dir(&self, tenant: &str, feed: &str) -> PathBuf {
        self.root.join(tenant).join(feed)
    }

    /// The files of one version of a tenant's feed (names not checked;
    /// [`PackageFeed::publish`] checks them first).
    pub fn version_paths(&self, tenant: &str, feed: &str, package_id: &str, version: &str) -> VersionPaths {
        let dir = self
            .feed_dir(tenant, feed)
            .join(package_id.to_ascii_lowercase())
            .join(normalized_version(version));
        VersionPaths::in_dir(dir, package_id, version)
    }

    /// Where a version from before tenants lives: `<root>/.legacy/<feed>/<id>/<version>`.
    fn legacy_paths(&self, feed: &str, package_id: &str, version: &str) -> VersionPaths {
        let dir = self
            .root
            .join(crate::delivery::tenant::LEGACY_DIR)
            .join(feed)
            .join(package_id.to_ascii_lowercase())
            .join(normalized_version(version));
        VersionPaths::in_dir(dir, package_id, version)
    }

    /// Moves the root to the tenant-scoped layout (see the module
    /// documentation), once per adapter: the first publish or lookup does
    /// it, and a runtime may call it at start to migrate eagerly.
    /// Idempotent, across restarts too.
    pub async fn open(&self) -> Result<(), PublishError> {
        self.opened
            .get_or_try_init(|| async {
                let root = self.root.clone();
                tokio::task::spawn_blocking(move || migrate(&root))
                    .await
                    .map_err(|err| PublishError::storage("running the feed migration task", err))?
            })
            .await
            .map(|_| ())
    }

    /// A tenant's complete version of a package, if any: the tenant's own,
    /// else one from before tenants whose owner is unknown (read-only,
    /// `legacy: true`). Never another tenant's.
    pub async fn find(
        &self,
        tenant: &str,
        feed: &str,
        package_id: &str,
        version: &str,
    ) -> Result<Option<FoundVersion>, PublishError> {
        bosun_contracts::validate::tenant_id("tenant", tenant)
            .map_err(|err| PublishError::Invalid(format!("{}: {}", err.field, err.reason)))?;
        bosun_contracts::validate::identifier("feed", feed)
            .map_err(|err| PublishError::Invalid(format!("{}: {}", err.field, err.reason)))?;
        bosun_contracts::validate::nuget_package_id("packageId", package_id)
            .map_err(|err| PublishError::Invalid(format!("{}: {}", err.field, err.reason)))?;
        self.open().await?;
        let candidates = [
            (self.version_paths(tenant, feed, package_id, version), false),
            (self.legacy_paths(feed, package_id, version), true),
        ];
        let tenant = tenant.to_owned();
        tokio::task::spawn_blocking(move || {
            for (paths, legacy) in candidates {
                if !paths.sha512.is_file() {
                    continue;
                }
                match std::fs::read(&paths.nupkg) {
                    Ok(bytes) => {
                        if !legacy {
                            check_recorded_tenant(&paths, &tenant)?;
                        }
                        return Ok(Some(FoundVersion {
                            sha512: sha512_hex(&bytes),
                            paths,
                            legacy,
                        }));
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                    Err(err) => return Err(storage("reading", &paths.nupkg, err)),
                }
            }
            Ok(None)
        })
        .await
        .map_err(|err| PublishError::storage("running the feed task", err))?
    }
}

/// The tenant-scoped layout: old feeds parked, each old version whose
/// tenant it shows moved to that tenant's feed.
fn migrate(root: &Path) -> Result<(), PublishError> {
    let layout = TenantLayout::open(root).map_err(|err| storage("opening the feed root", root, err))?;
    let legacy = layout.legacy_dir();
    let listing = |dir: &Path| subfolders(dir).map_err(|err| storage("reading", dir, err));
    let (mut adopted, mut kept) = (0usize, 0usize);
    for (feed, feed_dir) in listing(&legacy)? {
        for (id, id_dir) in listing(&feed_dir)? {
            for (version, version_dir) in listing(&id_dir)? {
                let paths = VersionPaths::in_dir(version_dir.clone(), &id, &version);
                let Some(tenant) = legacy_tenant(&paths)? else {
                    kept += 1;
                    continue;
                };
                // Record the decision first: a crash before the move leaves
                // the version telling its tenant to the next open.
                if !paths.tenant.is_file() {
                    write_atomically(&paths.tenant, format!("{tenant}\n").as_bytes())?;
                }
                let target = root.join(&tenant).join(&feed).join(&id).join(&version);
                let moved = layout
                    .adopt(&version_dir, &target)
                    .map_err(|err| storage("moving", &version_dir, err))?;
                if moved {
                    adopted += 1;
                } else {
                    tracing::warn!(
                        from = %version_dir.display(),
                        to = %target.display(),
                        "an old feed version is also in its tenant's feed; left in .legacy/"
                    );
                    kept += 1;
                }
            }
        }
    }
    if adopted + kept > 0 {
        tracing::info!(root = %root.display(), adopted, kept, "old feed versions sorted by tenant");
    }
    Ok(())
}

/// The tenant an old version shows: its `.bosun-tenant`, else the author
/// of a `.nuspec` bosun packed; `None` when it shows none.
fn legacy_tenant(paths: &VersionPaths) -> Result<Option<String>, PublishError> {
    if let Some(tenant) = recorded_tenant(paths)? {
        return Ok(Some(tenant));
    }
    match std::fs::read(&paths.nuspec) {
        Ok(nuspec) => Ok(packed_tenant(&nuspec)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(storage("reading", &paths.nuspec, err)),
    }
}

/// The tenant a version's `.bosun-tenant` names, if it has a valid one.
fn recorded_tenant(paths: &VersionPaths) -> Result<Option<String>, PublishError> {
    match std::fs::read_to_string(&paths.tenant) {
        Ok(text) => {
            let tenant = text.trim();
            Ok(bosun_contracts::validate::tenant_id("tenant", tenant)
                .is_ok()
                .then(|| tenant.to_owned()))
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(storage("reading", &paths.tenant, err)),
    }
}

/// Refuses a version whose `.bosun-tenant` names another tenant (it sits
/// in `tenant`'s folder, so only a copied or edited folder can).
fn check_recorded_tenant(paths: &VersionPaths, tenant: &str) -> Result<(), PublishError> {
    match recorded_tenant(paths)? {
        Some(owner) if owner != tenant => {
            Err(ForeignTenant::new(format!("feed version {}", paths.dir.display()), Some(&owner), tenant).into())
        }
        _ => Ok(()),
    }
}

#[async_trait]
impl PackageFeed for LocalNugetFeed {
    async fn publish(&self, spec: &PackageSpec) -> Result<PublishedPackage, PublishError> {
        check_spec(spec)?;
        self.open().await?;
        let nupkg = prepare(&*self.blobs, spec).await?;
        let paths = self.version_paths(&spec.tenant, &spec.feed, &spec.package_id, &spec.version);
        let (tenant, package_id, version) = (spec.tenant.clone(), spec.package_id.clone(), spec.version.clone());
        let _guard = self.write_lock.lock().await;
        let published = tokio::task::spawn_blocking(move || store(&paths, &nupkg, &tenant, &package_id, &version))
            .await
            .map_err(|err| PublishError::storage("running the feed task", err))??;
        tracing::debug!(
            tenant = %spec.tenant,
            feed = %spec.feed,
            package_id = %spec.package_id,
            version = %spec.version,
            already_published = published.already_published,
            "package in the folder feed"
        );
        Ok(published)
    }
}

/// A storage failure on `path`: `<context> <path>` and the I/O error.
fn storage(context: &str, path: &Path, err: std::io::Error) -> PublishError {
    PublishError::storage(format!("{context} {}", path.display()), err)
}

fn store(
    paths: &VersionPaths,
    nupkg: &Nupkg,
    tenant: &str,
    package_id: &str,
    version: &str,
) -> Result<PublishedPackage, PublishError> {
    let url = file_url(&paths.nupkg);
    check_recorded_tenant(paths, tenant)?;
    if paths.sha512.is_file() {
        match std::fs::read(&paths.nupkg) {
            Ok(existing) => {
                let existing_sha512 = sha512_hex(&existing);
                if existing_sha512 != nupkg.sha512 {
                    return Err(PublishError::VersionConflict {
                        package_id: package_id.to_owned(),
                        version: version.to_owned(),
                        existing_sha512,
                        new_sha512: nupkg.sha512.clone(),
                    });
                }
                let published_at = std::fs::metadata(&paths.sha512)
                    .and_then(|meta| meta.modified())
                    .map(OffsetDateTime::from)
                    .unwrap_or_else(|_| OffsetDateTime::now_utc());
                return Ok(PublishedPackage {
                    sha512: existing_sha512,
                    size_bytes: existing.len() as u64,
                    url: Some(url),
                    already_published: true,
                    published_at,
                });
            }
            // A marker without its package: an incomplete version; write it.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(storage("reading", &paths.nupkg, err)),
        }
    }
    std::fs::create_dir_all(&paths.dir).map_err(|err| storage("creating", &paths.dir, err))?;
    write_atomically(&paths.nuspec, &nupkg.nuspec)?;
    write_atomically(&paths.tenant, format!("{tenant}\n").as_bytes())?;
    write_atomically(&paths.nupkg, &nupkg.bytes)?;
    write_atomically(&paths.sha512, nupkg.sha512_base64().as_bytes())?;
    Ok(PublishedPackage {
        sha512: nupkg.sha512.clone(),
        size_bytes: nupkg.size(),
        url: Some(url),
        already_published: false,
        published_at: OffsetDateTime::now_utc(),
    })
}

/// A `file://` URL of a path (made absolute, percent-encoded).
fn file_url(path: &Path) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let text = absolute.to_string_lossy().replace('\\', "/");
    let text = if text.starts_with('/') {
        text
    } else {
        format!("/{text}")
    };
    format!("file://{}", part_name(&text))
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), PublishError> {
    let parent = path.parent().unwrap_or_else(|| Path::new("."));
    let mut temporary =
        atomic_file::temporary_in(parent).map_err(|err| storage("creating a temporary file in", parent, err))?;
    std::io::Write::write_all(&mut temporary, bytes).map_err(|err| storage("writing", path, err))?;
    temporary
        .persist(path)
        .map_err(|err| storage("renaming into", path, err.error))?;
    Ok(())
}
