//! The embedded NuGet feed: folder feeds in NuGet's hierarchical (v3)
//! layout, one per feed name, as `nuget add` writes them:
//!
//! ```text
//! <root>/<feed>/<id>/<version>/
//!     <id>.<version>.nupkg
//!     <id>.<version>.nupkg.sha512    base64 SHA-512 of the .nupkg
//!     <id>.nuspec
//! ```
//!
//! `<id>` and `<version>` are lower case, the version without build
//! metadata. `dotnet restore` and `nuget install` take `<root>/<feed>` as a
//! package source.
//!
//! Each file is written to a temporary file and renamed; the `.sha512` is
//! written last and marks the version complete, so a publish interrupted
//! midway is finished by the retry. Versions are immutable: a complete
//! version with the same SHA-512 is reported `already_published` without
//! writing anything; different content for it is a
//! [`PublishError::VersionConflict`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use time::OffsetDateTime;

use super::nupkg::{Nupkg, check_spec, normalized_version, part_name, prepare, sha512_hex};
use super::port::{PackageFeed, PackageSpec, PublishError, PublishedPackage};
use crate::blob::BlobStore;

/// Folder feeds under a root directory.
pub struct LocalNugetFeed {
    root: PathBuf,
    blobs: Arc<dyn BlobStore>,
    /// Serializes check-and-write of this process.
    write_lock: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for LocalNugetFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalNugetFeed").field("root", &self.root).finish()
    }
}

/// Where one version lives in a feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionPaths {
    /// `<root>/<feed>/<id>/<version>`.
    pub dir: PathBuf,
    /// The `.nupkg`.
    pub nupkg: PathBuf,
    /// The `.nupkg.sha512`.
    pub sha512: PathBuf,
    /// The `.nuspec`.
    pub nuspec: PathBuf,
}

impl LocalNugetFeed {
    /// Feeds under `root` (the runtime passes `<data dir>/nuget`), reading
    /// package content from `blobs`.
    pub fn new(root: impl Into<PathBuf>, blobs: Arc<dyn BlobStore>) -> Self {
        Self {
            root: root.into(),
            blobs,
            write_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder of one feed: a NuGet package source.
    pub fn feed_dir(&self, feed: &str) -> PathBuf {
        self.root.join(feed)
    }

    /// The files of one version (names not checked; [`PackageFeed::publish`]
    /// checks them first).
    pub fn version_paths(&self, feed: &str, package_id: &str, version: &str) -> VersionPaths {
        let id = package_id.to_ascii_lowercase();
        let version = normalized_version(version);
        let dir = self.feed_dir(feed).join(&id).join(&version);
        let nupkg = dir.join(format!("{id}.{version}.nupkg"));
        VersionPaths {
            sha512: dir.join(format!("{id}.{version}.nupkg.sha512")),
            nuspec: dir.join(format!("{id}.nuspec")),
            nupkg,
            dir,
        }
    }
}

#[async_trait]
impl PackageFeed for LocalNugetFeed {
    async fn publish(&self, spec: &PackageSpec) -> Result<PublishedPackage, PublishError> {
        check_spec(spec)?;
        let nupkg = prepare(&*self.blobs, spec).await?;
        let paths = self.version_paths(&spec.feed, &spec.package_id, &spec.version);
        let (package_id, version) = (spec.package_id.clone(), spec.version.clone());
        let _guard = self.write_lock.lock().await;
        let published = tokio::task::spawn_blocking(move || store(&paths, &nupkg, &package_id, &version))
            .await
            .map_err(|err| PublishError::Storage(format!("the feed task failed: {err}")))??;
        tracing::debug!(
            feed = %spec.feed,
            package_id = %spec.package_id,
            version = %spec.version,
            already_published = published.already_published,
            "package in the folder feed"
        );
        Ok(published)
    }
}

fn storage(context: &str, path: &Path, err: std::io::Error) -> PublishError {
    PublishError::Storage(format!("{context} {}: {err}", path.display()))
}

fn store(
    paths: &VersionPaths,
    nupkg: &Nupkg,
    package_id: &str,
    version: &str,
) -> Result<PublishedPackage, PublishError> {
    let url = file_url(&paths.nupkg);
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
        tempfile::NamedTempFile::new_in(parent).map_err(|err| storage("creating a temporary file in", parent, err))?;
    std::io::Write::write_all(&mut temporary, bytes).map_err(|err| storage("writing", path, err))?;
    temporary
        .persist(path)
        .map_err(|err| storage("renaming into", path, err.error))?;
    Ok(())
}
