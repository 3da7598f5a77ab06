//! Where the local Git host initialises new repositories, and the removal
//! of what a killed process left there.
//!
//! A new repository is initialised in `<root>/<tenant>/.staging/init-*/`
//! and renamed into its project folder once it is complete, so a reader
//! never sees half a repository. A process killed in between (SIGKILL, a
//! power cut) leaves its `init-*` folder behind: nothing ever renames or
//! removes it, since the temporary folder's own clean-up runs only when
//! the process lives on.
//!
//! While a provisioning stages a repository it holds a shared OS lock on
//! the tenant's `<root>/<tenant>/.staging.lock` (released when the process
//! dies, however it dies). When the host is opened at start-up, [`remove_leftovers`]
//! takes that lock exclusively, without waiting: when it gets it, no
//! provisioning of this or another process is staging anything for the
//! tenant, so every `init-*` entry there is a leftover and is removed;
//! when it does not, the tenant's staging folder is left as it is (the
//! next start-up cleans it).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::LocalGitError;

/// Folder under a tenant's directory where new repositories are initialised
/// before being renamed into place (never a project: projects start with a
/// letter or digit).
pub const STAGING_DIR: &str = ".staging";

/// Prefix of the folder one provisioning stages its repository in.
pub const STAGING_PREFIX: &str = "init-";

/// The lock file beside a tenant's staging folder: shared while a
/// provisioning stages, exclusive while leftovers are removed.
pub const STAGING_LOCK: &str = ".staging.lock";

/// The staging folder of one provisioning: removed when dropped (a
/// repository moved out of it first is kept), and the tenant's staging
/// lock, held shared until then.
#[derive(Debug)]
pub(super) struct Staging {
    /// Declared first, so it is removed before the lock is released.
    dir: tempfile::TempDir,
    _lock: File,
}

impl Staging {
    /// Takes the tenant's staging lock (shared) and creates a fresh
    /// `init-*` folder under `<tenant_dir>/.staging`.
    pub(super) async fn create(tenant_dir: &Path) -> Result<Self, LocalGitError> {
        let staging_root = tenant_dir.join(STAGING_DIR);
        let lock_path = tenant_dir.join(STAGING_LOCK);
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&staging_root)
                .map_err(|err| LocalGitError::io(format!("creating {}", staging_root.display()), err))?;
            let lock = open_lock(&lock_path)
                .and_then(|lock| lock.lock_shared().map(|()| lock))
                .map_err(|err| LocalGitError::io(format!("locking {}", lock_path.display()), err))?;
            let dir = tempfile::Builder::new()
                .prefix(STAGING_PREFIX)
                .tempdir_in(&staging_root)
                .map_err(|err| LocalGitError::io(format!("creating a folder in {}", staging_root.display()), err))?;
            Ok(Self { dir, _lock: lock })
        })
        .await
        .map_err(|err| LocalGitError::io("staging a repository", std::io::Error::other(err)))?
    }

    /// The staging folder.
    pub(super) fn path(&self) -> &Path {
        self.dir.path()
    }
}

fn open_lock(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).truncate(false).write(true).open(path)
}

/// Removes, for every tenant under `root`, the `init-*` entries of its
/// staging folder that no running provisioning holds (see the module
/// documentation); logs each removal. Returns the paths removed. Errors are
/// logged, never returned: a leftover that cannot be removed now is tried
/// again at the next start-up.
pub fn remove_leftovers(root: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let tenants = match std::fs::read_dir(root) {
        Ok(tenants) => tenants,
        Err(err) if err.kind() == ErrorKind::NotFound => return removed,
        Err(err) => {
            tracing::warn!(root = %root.display(), error = %err, "could not look for leftover staging folders");
            return removed;
        }
    };
    for tenant in tenants.flatten() {
        let tenant_dir = tenant.path();
        if !tenant_dir.join(STAGING_DIR).is_dir() {
            continue;
        }
        remove_tenant_leftovers(&tenant_dir, &mut removed);
    }
    removed
}

fn remove_tenant_leftovers(tenant_dir: &Path, removed: &mut Vec<PathBuf>) {
    let staging_root = tenant_dir.join(STAGING_DIR);
    let lock_path = tenant_dir.join(STAGING_LOCK);
    let lock = match open_lock(&lock_path) {
        Ok(lock) => lock,
        Err(err) => {
            tracing::warn!(lock = %lock_path.display(), error = %err, "could not open the staging lock; leftovers stay");
            return;
        }
    };
    match lock.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            tracing::debug!(
                staging = %staging_root.display(),
                "a provisioning is staging a repository; its staging folder is left until the next start-up"
            );
            return;
        }
        Err(TryLockError::Error(err)) => {
            tracing::warn!(lock = %lock_path.display(), error = %err, "could not take the staging lock; leftovers stay");
            return;
        }
    }
    let entries = match std::fs::read_dir(&staging_root) {
        Ok(entries) => entries,
        Err(err) => {
            tracing::warn!(staging = %staging_root.display(), error = %err, "could not list the staging folder");
            return;
        }
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(STAGING_PREFIX) {
            continue;
        }
        let path = entry.path();
        let result = match entry.file_type() {
            Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
        match result {
            Ok(()) => {
                tracing::info!(
                    path = %path.display(),
                    reason = "a repository provisioning that never finished (its process was killed) staged it",
                    "removed a leftover staging folder"
                );
                removed.push(path);
            }
            Err(err) if err.kind() == ErrorKind::NotFound => {}
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err, "could not remove a leftover staging folder");
            }
        }
    }
    // Dropping the lock file releases the exclusive lock.
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::delivery::atomic_file::{LEFTOVER_AGE, TEMPORARY_PREFIX};
    use crate::delivery::git::{LocalGitHost, NewRepository};

    fn new_repository<'a>(tenant: &'a str, name: &'a str) -> NewRepository<'a> {
        NewRepository {
            tenant,
            project: tenant,
            name,
            default_branch: "main",
            description: None,
            minimum_reviewers: 0,
        }
    }

    /// What `git init` left before the process was killed: a half-made
    /// bare repository in a staging folder.
    fn fake_leftover(root: &Path, tenant: &str, name: &str) -> PathBuf {
        let staged = root.join(tenant).join(STAGING_DIR).join(name);
        std::fs::create_dir_all(staged.join("payments-api.git/objects/info")).unwrap();
        std::fs::write(staged.join("payments-api.git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(staged.join("payments-api.git/config"), "[core]\n\tbare = true\n").unwrap();
        staged
    }

    #[tokio::test]
    async fn opening_the_host_removes_what_a_killed_provisioning_left_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("git");
        let (real, created) = LocalGitHost::new(&root)
            .find_or_create(new_repository("contoso", "payments-api"))
            .await
            .unwrap();
        assert!(created);
        let contoso_leftover = fake_leftover(&root, "contoso", "init-xyz");
        let fabrikam_leftover = fake_leftover(&root, "fabrikam", "init-abc");
        // A pull request record whose write was never renamed into place.
        let records = real.path.join("bosun/pull-requests");
        std::fs::create_dir_all(&records).unwrap();
        let half_record = records.join(format!("{TEMPORARY_PREFIX}killed"));
        std::fs::write(&half_record, b"{\"id\":").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&half_record)
            .unwrap()
            .set_modified(SystemTime::now() - LEFTOVER_AGE - Duration::from_secs(1))
            .unwrap();
        let record = records.join("1.json");
        std::fs::write(&record, b"{}").unwrap();

        // The process starts again.
        let host = LocalGitHost::new(&root);
        assert!(
            !contoso_leftover.exists(),
            "the staging folder of the killed provisioning is gone"
        );
        assert!(!fabrikam_leftover.exists(), "every tenant's staging folder is cleaned");
        assert!(!half_record.exists(), "the half-written record is gone");
        assert!(
            root.join("contoso").join(STAGING_DIR).is_dir(),
            "the staging folder itself stays"
        );

        // Real repositories are untouched.
        assert!(record.exists());
        let found = host
            .find("contoso", "payments-api")
            .await
            .unwrap()
            .expect("the repository");
        assert_eq!(found, real);
        assert!(real.path.join("HEAD").is_file());
        let (again, created) = host
            .find_or_create(new_repository("contoso", "payments-api"))
            .await
            .unwrap();
        assert!(!created);
        assert_eq!(again, real);
        // And provisioning still works where the leftover was.
        let (_, created) = host
            .find_or_create(new_repository("fabrikam", "payments-api"))
            .await
            .unwrap();
        assert!(created);
        assert_eq!(
            std::fs::read_dir(root.join("fabrikam").join(STAGING_DIR))
                .unwrap()
                .count(),
            0
        );
    }

    #[tokio::test]
    async fn a_staging_folder_in_use_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("git");
        let tenant_dir = root.join("contoso");
        // A provisioning (of this process, or another sharing the data
        // directory) is staging a repository right now.
        let staging = Staging::create(&tenant_dir).await.unwrap();
        let in_use = staging.path().to_path_buf();
        std::fs::write(in_use.join("half"), b"x").unwrap();

        let _host = LocalGitHost::new(&root);
        assert!(
            in_use.join("half").exists(),
            "a running provisioning keeps its staging folder"
        );
        assert!(remove_leftovers(&root).is_empty());

        // Once it is done (or its process is gone), its folder goes with it.
        drop(staging);
        assert!(!in_use.exists());
        let leftover = fake_leftover(&root, "contoso", "init-after");
        assert_eq!(remove_leftovers(&root), vec![leftover]);
    }
}
