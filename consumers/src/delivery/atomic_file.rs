//! Files replaced whole, and what a killed process leaves of them.
//!
//! Every local adapter writes a file it replaces (a run record, a feed's
//! package, an OCI index, a stack's state, an environment's manifest, a
//! pull request record, a blob, a layout marker) to a temporary file in
//! the same folder and renames it into place, so a reader sees the old
//! file or the new one, never half of one. The temporary is named
//! [`TEMPORARY_PREFIX`]`<random>` ([`temporary_in`], [`temporary_path`]):
//! one name for all of them, which nothing else bosun writes starts with.
//!
//! A process killed between writing a temporary and renaming it leaves the
//! temporary behind. An adapter opening its folder at start-up calls
//! [`remove_leftovers`], which removes every temporary under it older than
//! [`LEFTOVER_AGE`]: a temporary lives for the milliseconds between its
//! creation and its rename, so one that old belongs to no running write,
//! in this process or another sharing the data directory.

use std::ffi::OsStr;
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The start of every temporary file name of a write in progress.
pub const TEMPORARY_PREFIX: &str = ".bosun-tmp-";

/// Age past which a temporary file is a leftover of a killed process.
pub const LEFTOVER_AGE: Duration = Duration::from_secs(10 * 60);

/// A new temporary file in `dir` (removed when dropped unless persisted).
pub fn temporary_in(dir: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    tempfile::Builder::new().prefix(TEMPORARY_PREFIX).tempfile_in(dir)
}

/// A fresh temporary file name in `dir`, for writers that create the file
/// themselves (asynchronously) before renaming it into place.
pub fn temporary_path(dir: &Path) -> PathBuf {
    dir.join(format!("{TEMPORARY_PREFIX}{}", uuid::Uuid::new_v4().simple()))
}

/// Whether a file name is one of a temporary file.
pub fn is_temporary(name: &OsStr) -> bool {
    name.to_string_lossy().starts_with(TEMPORARY_PREFIX)
}

/// Replaces `path` with `bytes` through a temporary file beside it (the
/// folder must exist). Blocking.
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let parent = path.parent().unwrap_or_else(|| Path::new("."));
    let mut temporary = temporary_in(parent)?;
    temporary.write_all(bytes)?;
    temporary.persist(path).map_err(|err| err.error)?;
    Ok(())
}

/// Removes the temporary files under `root` (at any depth) older than
/// [`LEFTOVER_AGE`], logging each one; returns the paths removed. Errors are
/// logged, never returned: a leftover that cannot be removed now is tried
/// again at the next start-up. Blocking.
pub fn remove_leftovers(root: &Path) -> Vec<PathBuf> {
    remove_leftovers_older_than(root, LEFTOVER_AGE)
}

/// [`remove_leftovers`] with another age (`Duration::ZERO`: every
/// temporary; only when no write can be in progress).
pub fn remove_leftovers_older_than(root: &Path, age: Duration) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let cutoff = SystemTime::now().checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH);
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let entries = match std::fs::read_dir(&folder) {
            Ok(entries) => entries,
            Err(err) if err.kind() == ErrorKind::NotFound => continue,
            Err(err) => {
                tracing::warn!(folder = %folder.display(), error = %err, "could not look for leftover temporary files");
                continue;
            }
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                folders.push(path);
                continue;
            }
            if !kind.is_file() || !is_temporary(&entry.file_name()) {
                continue;
            }
            let modified = entry.metadata().and_then(|meta| meta.modified());
            if !modified.is_ok_and(|modified| modified <= cutoff) {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    tracing::info!(
                        path = %path.display(),
                        reason = "the temporary file of a write that was never renamed into place (its process was killed)",
                        "removed a leftover temporary file"
                    );
                    removed.push(path);
                }
                Err(err) if err.kind() == ErrorKind::NotFound => {}
                Err(err) => {
                    tracing::warn!(path = %path.display(), error = %err, "could not remove a leftover temporary file");
                }
            }
        }
    }
    removed.sort();
    removed
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use super::*;

    fn age(path: &Path, by: Duration) {
        let file = File::options().write(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - by).unwrap();
    }

    #[test]
    fn writes_replace_the_file_and_leave_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("record.json");
        write(&path, b"one").unwrap();
        write(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names, ["record.json"]);
        assert!(is_temporary(temporary_path(dir.path()).file_name().unwrap()));
        assert!(!is_temporary(OsStr::new("record.json")));
    }

    #[test]
    fn old_temporaries_are_removed_and_everything_else_kept() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("contoso/feed/pkg");
        std::fs::create_dir_all(&nested).unwrap();
        let old = nested.join(".bosun-tmp-killed");
        let fresh = nested.join(".bosun-tmp-writing");
        let real = nested.join("pkg.1.0.0.nupkg");
        let hidden = nested.join(".bosun-layout");
        for path in [&old, &fresh, &real, &hidden] {
            std::fs::write(path, b"x").unwrap();
        }
        for path in [&old, &real, &hidden] {
            age(path, LEFTOVER_AGE + Duration::from_secs(60));
        }
        assert_eq!(remove_leftovers(dir.path()), vec![old.clone()]);
        assert!(!old.exists());
        assert!(fresh.exists(), "a write in progress keeps its temporary");
        assert!(real.exists() && hidden.exists());
        assert!(remove_leftovers(&dir.path().join("missing")).is_empty());
    }
}
