//! Tenant walls, shared by the consumers: every key that names something a
//! tenant owns includes the tenant, and a message never acts on another
//! tenant's state.
//!
//! - [`ForeignTenant`] — the permanent error of a message that names a
//!   resource of another tenant (or one whose owner is not recorded where
//!   it must be); it names both tenants;
//! - [`check_owner`] — compares the tenant a resource records with the
//!   message's;
//! - [`check_blob`] — a blob a message names must be under the message
//!   tenant's keys (`<tenant>/...`), as every blob bosun writes is;
//! - [`TenantLayout`] — the one-time, crash-safe move of a local adapter's
//!   root from a layout without tenants to `<root>/<tenant>/...`, shared by
//!   the folder NuGet feed and the OCI registry.
//!
//! # The layout migration
//!
//! Before tenants were walls, the NuGet folder feed kept
//! `<root>/<feed>/<id>/<version>` and the OCI registry
//! `<root>/<registry>/<image>`. The first level of the old layouts (a feed
//! name, a registry host) can look exactly like a tenant id, so the two
//! layouts cannot share one level by guessing. When an adapter opens its
//! root it takes [`TenantLayout::open`]:
//!
//! 1. an exclusive lock on `<root>/.bosun-layout.lock` (an OS file lock,
//!    released when the process dies), so two processes sharing a data
//!    directory migrate one at a time;
//! 2. without the marker `<root>/.bosun-layout`, every top-level entry not
//!    starting with `.` is old data: each is renamed (one atomic rename
//!    per entry) into `<root>/.legacy/`, then the marker is written
//!    (temporary file + rename). A crash midway leaves entries either
//!    still at the top or already under `.legacy/`; the next open moves
//!    the rest. Nothing is copied;
//! 3. the adapter then sorts `.legacy/` under the same lock
//!    ([`TenantLayout::adopt`]): each legacy entry whose tenant the entry
//!    itself shows is renamed to its place under `<root>/<tenant>/...`
//!    (never over an existing entry); the others stay in `.legacy/`,
//!    read-only. Sorting is idempotent: an entry moved is gone from
//!    `.legacy/`, an entry left is left again.
//!
//! Tenant ids never start with `.`, so `.legacy`, `.bosun-layout` and the
//! lock file cannot be a tenant's folder.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use bosun_contracts::messages::BlobRef;
use bosun_contracts::validate;

use super::atomic_file;

/// The file whose presence says a root has the tenant-scoped layout.
pub const LAYOUT_MARKER: &str = ".bosun-layout";

/// The lock file serializing layout migrations across processes.
pub const LAYOUT_LOCK: &str = ".bosun-layout.lock";

/// The folder holding entries of the layout without tenants.
pub const LEGACY_DIR: &str = ".legacy";

/// What the marker file holds.
const LAYOUT_MARKER_CONTENT: &[u8] = b"tenant-scoped 1\n";

/// A message named a resource it may not act on: another tenant's, or one
/// that does not show it is the message tenant's. Retrying cannot help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tenant `{tenant}` may not act on {resource}: {}",
    match owner {
        Some(owner) => format!("it belongs to tenant `{owner}`"),
        None => "it does not belong to this tenant".to_owned(),
    }
)]
pub struct ForeignTenant {
    /// What was named, for people (`blob artifacts/x/y`, `run run-1`).
    pub resource: String,
    /// The tenant that owns it, when recorded.
    pub owner: Option<String>,
    /// The message's tenant.
    pub tenant: String,
}

impl ForeignTenant {
    /// The error for `tenant` naming `resource`, owned by `owner`.
    pub fn new(resource: impl Into<String>, owner: Option<&str>, tenant: &str) -> Self {
        Self {
            resource: resource.into(),
            owner: owner.map(str::to_owned),
            tenant: tenant.to_owned(),
        }
    }
}

/// `Ok` when `owner`, the tenant a resource records, is `tenant`.
pub fn check_owner(resource: impl FnOnce() -> String, owner: &str, tenant: &str) -> Result<(), ForeignTenant> {
    if owner == tenant {
        Ok(())
    } else {
        Err(ForeignTenant::new(resource(), Some(owner), tenant))
    }
}

/// The tenant a blob key is under: its first segment, when that is a
/// tenant id.
pub fn blob_owner(key: &str) -> Option<&str> {
    let first = key.split('/').next()?;
    (key.contains('/') && validate::tenant_id("tenant", first).is_ok()).then_some(first)
}

/// `Ok` when `blob` is under `tenant`'s keys (`<tenant>/...`). Every blob
/// bosun writes is (run logs, test results, artifacts, reports, claim
/// checks), so a message naming another key is refused: it would read
/// another tenant's content.
pub fn check_blob(blob: &BlobRef, tenant: &str) -> Result<(), ForeignTenant> {
    match blob_owner(&blob.key) {
        Some(owner) if owner == tenant => Ok(()),
        owner => Err(ForeignTenant::new(
            format!("blob {}/{}", blob.container, blob.key),
            owner,
            tenant,
        )),
    }
}

/// A local adapter's root with the tenant-scoped layout, held under the
/// layout lock while the adapter sorts its legacy entries (see the module
/// documentation). Dropping it releases the lock.
#[derive(Debug)]
pub struct TenantLayout {
    root: PathBuf,
    _lock: std::fs::File,
}

impl TenantLayout {
    /// Takes the layout lock of `root` (creating `root`), removes the
    /// temporary files of writes a killed process never finished
    /// ([`atomic_file::remove_leftovers`]) and, the first time, moves the
    /// old layout's entries into `.legacy/` and writes the marker. Adapters
    /// open their root once per process. Blocking: call it from
    /// `spawn_blocking`.
    pub fn open(root: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(root)?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(root.join(LAYOUT_LOCK))?;
        lock.lock()?;
        atomic_file::remove_leftovers(root);
        let layout = Self {
            root: root.to_path_buf(),
            _lock: lock,
        };
        if !root.join(LAYOUT_MARKER).is_file() {
            layout.park_legacy()?;
        }
        Ok(layout)
    }

    /// `<root>/.legacy`.
    pub fn legacy_dir(&self) -> PathBuf {
        self.root.join(LEGACY_DIR)
    }

    fn park_legacy(&self) -> std::io::Result<()> {
        let legacy = self.legacy_dir();
        let mut moved = 0usize;
        for entry in std::fs::read_dir(&self.root)? {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_string_lossy().starts_with('.') {
                continue;
            }
            std::fs::create_dir_all(&legacy)?;
            let target = legacy.join(&name);
            if target.exists() {
                return Err(std::io::Error::new(
                    ErrorKind::AlreadyExists,
                    format!(
                        "cannot move {} to {}: the target exists; an operator must merge them",
                        entry.path().display(),
                        target.display()
                    ),
                ));
            }
            std::fs::rename(entry.path(), &target)?;
            moved += 1;
        }
        atomic_file::write(&self.root.join(LAYOUT_MARKER), LAYOUT_MARKER_CONTENT)?;
        if moved > 0 {
            tracing::info!(root = %self.root.display(), moved, "moved the layout without tenants to .legacy/");
        }
        Ok(())
    }

    /// Moves the legacy entry `from` (a path under `.legacy/`) to `to`
    /// (under the tenant's folder) with one rename, creating `to`'s
    /// parents. Returns `false`, leaving `from` in place, when `to` already
    /// exists. Removes folders of `.legacy/` left empty.
    pub fn adopt(&self, from: &Path, to: &Path) -> std::io::Result<bool> {
        if to.exists() {
            return Ok(false);
        }
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::rename(from, to)?;
        let legacy = self.legacy_dir();
        let mut folder = from.parent();
        while let Some(dir) = folder {
            if !dir.starts_with(&legacy) || std::fs::remove_dir(dir).is_err() {
                break;
            }
            folder = dir.parent();
        }
        Ok(true)
    }
}

/// The sub-folders of `dir` (names not starting with `.`), sorted; none
/// when `dir` does not exist.
pub fn subfolders(dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let mut folders = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !name.starts_with('.') && entry.file_type()?.is_dir() {
            folders.push((name, entry.path()));
        }
    }
    folders.sort();
    Ok(folders)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(key: &str) -> BlobRef {
        BlobRef {
            container: "artifacts".into(),
            key: key.into(),
            size_bytes: 1,
            sha256: "0".repeat(64),
            content_type: "application/x-tar".into(),
        }
    }

    #[test]
    fn a_blob_is_the_tenant_whose_prefix_it_has() {
        assert_eq!(check_blob(&blob("contoso/run-1/a.tar"), "contoso"), Ok(()));
        let err = check_blob(&blob("fabrikam/run-1/a.tar"), "contoso").unwrap_err();
        assert_eq!(err.owner.as_deref(), Some("fabrikam"));
        let text = err.to_string();
        assert!(text.contains("`contoso`") && text.contains("`fabrikam`"), "{text}");
        for key in ["a.tar", "Contoso/a.tar", "-x/a.tar"] {
            let err = check_blob(&blob(key), "contoso").unwrap_err();
            assert_eq!(err.owner, None, "{key}");
        }
    }

    #[test]
    fn the_old_layout_is_parked_once_and_the_marker_written() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("internal/pkg/1.0.0")).unwrap();
        std::fs::write(root.join("internal/pkg/1.0.0/pkg.1.0.0.nupkg"), b"x").unwrap();
        let layout = TenantLayout::open(&root).unwrap();
        assert!(root.join(LAYOUT_MARKER).is_file());
        assert!(!root.join("internal").exists());
        assert!(layout.legacy_dir().join("internal/pkg/1.0.0/pkg.1.0.0.nupkg").is_file());

        let from = layout.legacy_dir().join("internal/pkg/1.0.0");
        let to = root.join("contoso/internal/pkg/1.0.0");
        assert!(layout.adopt(&from, &to).unwrap());
        assert!(to.join("pkg.1.0.0.nupkg").is_file());
        assert!(!layout.legacy_dir().exists(), "empty legacy folders are removed");
        drop(layout);

        // Opening again moves nothing: the tenant folder is not old data.
        let _again = TenantLayout::open(&root).unwrap();
        assert!(to.join("pkg.1.0.0.nupkg").is_file());
    }

    #[test]
    fn an_interrupted_park_is_finished_by_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        // As a crash would leave it: one entry moved, one not, no marker.
        std::fs::create_dir_all(root.join(LEGACY_DIR).join("a")).unwrap();
        std::fs::create_dir_all(root.join("b")).unwrap();
        let layout = TenantLayout::open(&root).unwrap();
        assert!(layout.legacy_dir().join("a").is_dir());
        assert!(layout.legacy_dir().join("b").is_dir());
        assert!(!root.join("b").exists());
        assert!(root.join(LAYOUT_MARKER).is_file());
    }
}
