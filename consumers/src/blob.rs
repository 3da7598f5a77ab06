//! The blob store port: where large content lives (build logs, JUnit
//! reports, artifacts, claim-checked payloads). Messages carry a
//! [`BlobRef`] (container, key, size, sha256, content type) instead of the
//! content.
//!
//! [`FilesystemBlobStore`] is the embedded default: one file per blob under
//! `<root>/<container>/<key>`, written to a temporary file and renamed so a
//! reader never sees half a blob. Readers check the size and the sha256 of
//! what they read against the reference.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bosun_contracts::messages::BlobRef;
use bosun_contracts::validate;
use sha2::{Digest, Sha256};

/// Blob store failures.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// No blob at that reference.
    #[error("blob {container}/{key} not found")]
    NotFound {
        /// Container.
        container: String,
        /// Key.
        key: String,
    },
    /// The content does not match the reference's size or sha256.
    #[error("blob {container}/{key} is corrupt: {reason}")]
    Corrupt {
        /// Container.
        container: String,
        /// Key.
        key: String,
        /// What did not match.
        reason: String,
    },
    /// A container or key that breaks the naming rules.
    #[error("invalid blob name: {0}")]
    InvalidName(String),
    /// Storage failure; worth retrying.
    #[error("blob store unavailable: {0}")]
    Unavailable(String),
}

impl BlobError {
    /// Whether retrying may help.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for byte in digest.iter() {
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
    }
    hex
}

/// Where large content is kept.
#[async_trait]
pub trait BlobStore: Send + Sync {
    /// Stores `content` under `container`/`key` (replacing what was there)
    /// and returns its reference.
    async fn put(&self, container: &str, key: &str, content: Vec<u8>, content_type: &str)
    -> Result<BlobRef, BlobError>;

    /// Reads a blob, checking its size and sha256 against the reference.
    async fn get(&self, blob: &BlobRef) -> Result<Vec<u8>, BlobError>;

    /// Whether a blob exists.
    async fn exists(&self, container: &str, key: &str) -> Result<bool, BlobError>;
}

/// Blobs as files under a root directory.
#[derive(Debug, Clone)]
pub struct FilesystemBlobStore {
    root: PathBuf,
}

impl FilesystemBlobStore {
    /// A store rooted at `root` (the runtime passes `<data dir>/blobs`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, container: &str, key: &str) -> Result<PathBuf, BlobError> {
        validate::blob_container("container", container).map_err(|err| BlobError::InvalidName(err.reason))?;
        validate::blob_key("key", key).map_err(|err| BlobError::InvalidName(err.reason))?;
        // blob_key rejects absolute paths and `..`; check again before touching the disk.
        if key
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..")
        {
            return Err(BlobError::InvalidName(format!(
                "`{key}` has an empty, '.' or '..' segment"
            )));
        }
        Ok(self.root.join(container).join(key))
    }
}

fn unavailable(err: std::io::Error) -> BlobError {
    BlobError::Unavailable(err.to_string())
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
        let reference = BlobRef {
            container: container.to_owned(),
            key: key.to_owned(),
            size_bytes: content.len() as u64,
            sha256: sha256_hex(&content),
            content_type: content_type.to_owned(),
        };
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(unavailable)?;
        }
        let temporary = path.with_extension(format!("tmp-{}", uuid_like()));
        tokio::fs::write(&temporary, &content).await.map_err(unavailable)?;
        tokio::fs::rename(&temporary, &path).await.map_err(unavailable)?;
        Ok(reference)
    }

    async fn get(&self, blob: &BlobRef) -> Result<Vec<u8>, BlobError> {
        let path = self.path(&blob.container, &blob.key)?;
        let content = match tokio::fs::read(&path).await {
            Ok(content) => content,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(BlobError::NotFound {
                    container: blob.container.clone(),
                    key: blob.key.clone(),
                });
            }
            Err(err) => return Err(unavailable(err)),
        };
        let corrupt = |reason: String| BlobError::Corrupt {
            container: blob.container.clone(),
            key: blob.key.clone(),
            reason,
        };
        if content.len() as u64 != blob.size_bytes {
            return Err(corrupt(format!(
                "{} bytes, expected {}",
                content.len(),
                blob.size_bytes
            )));
        }
        let sha256 = sha256_hex(&content);
        if sha256 != blob.sha256 {
            return Err(corrupt(format!("sha256 {sha256}, expected {}", blob.sha256)));
        }
        Ok(content)
    }

    async fn exists(&self, container: &str, key: &str) -> Result<bool, BlobError> {
        let path = self.path(container, key)?;
        tokio::fs::try_exists(&path).await.map_err(unavailable)
    }
}

fn uuid_like() -> String {
    format!(
        "{}-{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    )
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
}
