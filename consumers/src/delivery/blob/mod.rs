//! The blob store port: where large content lives (build logs, JUnit
//! reports, artifacts, claim-checked payloads). Messages carry a
//! [`BlobRef`] (container, key, size, sha256, content type) instead of the
//! content.
//!
//! Two implementations, chosen by configuration:
//!
//! - [`FilesystemBlobStore`] (`filesystem.rs`), the embedded default: one
//!   file per blob under `<root>/<container>/<key>`, written to a temporary
//!   file and renamed so a reader never sees half a blob;
//! - [`AzureBlobStore`] (`azure.rs`): Azure Blob Storage (or Azurite)
//!   through the official `azure_storage_blob` crate, authenticated with
//!   Entra ID ([`crate::delivery::azure::credential`]), a shared key
//!   (`shared_key.rs`) or a SAS token.
//!
//! Both behave the same, and `tests/blob_behaviour.rs` holds them to it:
//! `put` replaces what was there (so putting the same content twice is a
//! no-op), containers are created when missing, names follow the Azure
//! Storage rules (checked before anything is sent), and `get` checks the
//! size and the sha256 of what it read against the reference.

use async_trait::async_trait;
use bosun_contracts::messages::BlobRef;
use bosun_contracts::validate;
use sha2::{Digest, Sha256};

mod azure;
mod filesystem;
mod shared_key;
mod trace;

pub use azure::{AzureBlobAuth, AzureBlobConfigError, AzureBlobSettings, AzureBlobStore, BLOB_READ_TIMEOUT};
pub use filesystem::FilesystemBlobStore;

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
    /// The store refused the credentials or the operation (HTTP 401/403, a
    /// request it will never accept); retrying will not help until the
    /// configuration is fixed.
    #[error("blob store refused the request: {0}")]
    Denied(String),
    /// Storage failure (a file-system error, an HTTP 5xx, a network
    /// failure); worth retrying. The cause is the source.
    #[error("blob store unavailable: {0}")]
    Unavailable(#[source] crate::BoxError),
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
    /// Stores `content` under `container`/`key` (replacing what was there,
    /// creating the container when missing) and returns its reference.
    async fn put(&self, container: &str, key: &str, content: Vec<u8>, content_type: &str)
    -> Result<BlobRef, BlobError>;

    /// Reads a blob, checking its size and sha256 against the reference.
    async fn get(&self, blob: &BlobRef) -> Result<Vec<u8>, BlobError>;

    /// Whether a blob exists.
    async fn exists(&self, container: &str, key: &str) -> Result<bool, BlobError>;

    /// A small record the caller wrote itself under a name it knows (no
    /// reference to check it against); `None` when there is none.
    async fn read(&self, container: &str, key: &str) -> Result<Option<Vec<u8>>, BlobError>;
}

/// Checks a container and a key against the Azure Storage naming rules
/// bosun uses everywhere (see `bosun_contracts::validate`).
pub(crate) fn check_name(container: &str, key: &str) -> Result<(), BlobError> {
    validate::blob_container("container", container).map_err(|err| BlobError::InvalidName(err.reason))?;
    validate::blob_key("key", key).map_err(|err| BlobError::InvalidName(err.reason))?;
    // blob_key rejects absolute paths and `..`; check again before any I/O.
    if key
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(BlobError::InvalidName(format!(
            "`{key}` has an empty, '.' or '..' segment"
        )));
    }
    Ok(())
}

/// The reference of `content` stored at `container`/`key`.
pub(crate) fn reference(container: &str, key: &str, content: &[u8], content_type: &str) -> BlobRef {
    BlobRef {
        container: container.to_owned(),
        key: key.to_owned(),
        size_bytes: content.len() as u64,
        sha256: sha256_hex(content),
        content_type: content_type.to_owned(),
    }
}

/// Checks content read back against its reference.
pub(crate) fn verify(blob: &BlobRef, content: &[u8]) -> Result<(), BlobError> {
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
    let sha256 = sha256_hex(content);
    if sha256 != blob.sha256 {
        return Err(corrupt(format!("sha256 {sha256}, expected {}", blob.sha256)));
    }
    Ok(())
}
