//! [`FilesystemBlobStore`]: the embedded default blob store, one file per
//! blob under `<root>/<container>/<key>`, written to a temporary file and
//! renamed so a reader never sees half a blob
//! ([`crate::delivery::atomic_file`]; opening the store removes the
//! temporaries a killed process left).

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bosun_contracts::messages::BlobRef;

use super::{BlobError, BlobStore, check_name, reference, verify};
use crate::delivery::atomic_file;

/// Blobs as files under a root directory.
#[derive(Debug, Clone)]
pub struct FilesystemBlobStore {
    root: PathBuf,
}

impl FilesystemBlobStore {
    /// A store rooted at `root` (the runtime passes `<data dir>/blobs`).
    /// Opening it removes the temporary files of writes a killed process
    /// never finished ([`atomic_file::remove_leftovers`]).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        atomic_file::remove_leftovers(&root);
        Self { root }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, container: &str, key: &str) -> Result<PathBuf, BlobError> {
        check_name(container, key)?;
        Ok(self.root.join(container).join(key))
    }
}

/// A file-system operation of the store that failed.
#[derive(Debug, thiserror::Error)]
#[error("{action} {}: {source}", path.display())]
struct FileError {
    /// What was being done: `reading`, `writing`, ...
    action: &'static str,
    /// The file or folder.
    path: PathBuf,
    /// What the OS said.
    #[source]
    source: std::io::Error,
}

/// A file-system failure as a transient [`BlobError`] that keeps the
/// operation, the path and the OS error.
fn unavailable(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> BlobError {
    let path = path.to_owned();
    move |source| BlobError::Unavailable(Box::new(FileError { action, path, source }))
}

#[async_trait]
impl BlobStore for FilesystemBlobStore {
    async fn put(
        &self,
        container: &str,
        key: &str,
        content: Vec<u8>,
        content_type: &str,
    ) -> Result<BlobRef, BlobError> {
        let path = self.path(container, key)?;
        let reference = reference(container, key, &content, content_type);
        let parent = path.parent().unwrap_or(&self.root);
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(unavailable("creating", parent))?;
        let temporary = atomic_file::temporary_path(parent);
        tokio::fs::write(&temporary, &content)
            .await
            .map_err(unavailable("writing", &temporary))?;
        tokio::fs::rename(&temporary, &path)
            .await
            .map_err(unavailable("renaming into place", &path))?;
        Ok(reference)
    }

    async fn get(&self, blob: &BlobRef) -> Result<Vec<u8>, BlobError> {
        let path = self.path(&blob.container, &blob.key)?;
        let content = match tokio::fs::read(&path).await {
            Ok(content) => content,
            // A directory is where keys below it live, not a blob.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound || path.is_dir() => {
                return Err(BlobError::NotFound {
                    container: blob.container.clone(),
                    key: blob.key.clone(),
                });
            }
            Err(err) => return Err(unavailable("reading", &path)(err)),
        };
        verify(blob, &content)?;
        Ok(content)
    }

    async fn exists(&self, container: &str, key: &str) -> Result<bool, BlobError> {
        let path = self.path(container, key)?;
        match tokio::fs::metadata(&path).await {
            Ok(metadata) => Ok(metadata.is_file()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(err) => Err(unavailable("looking up", &path)(err)),
        }
    }

    async fn read(&self, container: &str, key: &str) -> Result<Option<Vec<u8>>, BlobError> {
        let path = self.path(container, key)?;
        match tokio::fs::read(&path).await {
            Ok(content) => Ok(Some(content)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound || path.is_dir() => Ok(None),
            Err(err) => Err(unavailable("reading", &path)(err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn blobs_round_trip_and_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let store = FilesystemBlobStore::new(dir.path());
        let blob = store
            .put(
                "build-logs",
                "contoso/payments-api/1/log.txt",
                b"hello".to_vec(),
                "text/plain",
            )
            .await
            .unwrap();
        assert_eq!(blob.size_bytes, 5);
        assert_eq!(
            blob.sha256,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(store.get(&blob).await.unwrap(), b"hello");
        assert!(
            store
                .exists("build-logs", "contoso/payments-api/1/log.txt")
                .await
                .unwrap()
        );
        std::fs::write(dir.path().join("build-logs/contoso/payments-api/1/log.txt"), b"hellO").unwrap();
        assert!(matches!(store.get(&blob).await, Err(BlobError::Corrupt { .. })));
        let mut missing = blob.clone();
        missing.key = "contoso/none.txt".into();
        assert!(matches!(store.get(&missing).await, Err(BlobError::NotFound { .. })));
        assert!(matches!(
            store.put("build-logs", "../escape", vec![], "text/plain").await,
            Err(BlobError::InvalidName(_))
        ));
    }

    #[tokio::test]
    async fn opening_the_store_removes_half_written_blobs_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = FilesystemBlobStore::new(dir.path());
        let blob = store
            .put("artifacts", "contoso/run-1/drop", b"tar".to_vec(), "application/x-tar")
            .await
            .unwrap();
        let folder = dir.path().join("artifacts/contoso/run-1");
        let killed = folder.join(format!("{}killed", atomic_file::TEMPORARY_PREFIX));
        let writing = folder.join(format!("{}writing", atomic_file::TEMPORARY_PREFIX));
        std::fs::write(&killed, b"ta").unwrap();
        std::fs::write(&writing, b"t").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&killed)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - atomic_file::LEFTOVER_AGE * 2)
            .unwrap();

        let reopened = FilesystemBlobStore::new(dir.path());
        assert!(!killed.exists(), "the temporary of a killed write is gone");
        assert!(
            writing.exists(),
            "a write that may still be running keeps its temporary"
        );
        assert_eq!(reopened.get(&blob).await.unwrap(), b"tar");
    }

    #[tokio::test]
    async fn a_file_system_failure_is_transient_and_names_the_operation() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("not-a-folder");
        std::fs::write(&root, b"").unwrap();
        let store = FilesystemBlobStore::new(&root);
        let err = store
            .put("build-logs", "contoso/log.txt", b"x".to_vec(), "text/plain")
            .await
            .unwrap_err();
        assert!(err.is_transient(), "{err}");
        let cause = std::error::Error::source(&err).expect("the operation is the source");
        assert!(cause.to_string().starts_with("creating "), "{cause}");
        assert!(
            std::error::Error::source(cause).is_some_and(|os| os.is::<std::io::Error>()),
            "the OS error is kept: {cause:?}"
        );
    }
}
