//! Blob references (claim checks): large content such as build logs, test
//! reports and artifacts lives in the blob store and messages carry a
//! [`BlobRef`] to it; an [`ArtifactRef`] names a build artifact there (a
//! pipeline run lists them, a build ingests them).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema_rules as rule;
use crate::validate::{self, FieldError, Validate};

/// A reference to content in the blob store (the filesystem by default, Azure
/// Blob Storage when configured). Readers check `sha256` and `sizeBytes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlobRef {
    /// Blob container (Azure Storage naming rules), e.g. `build-logs`.
    #[schemars(transform = rule::blob_container)]
    pub container: String,
    /// Blob name inside the container, `/`-separated, e.g.
    /// `contoso/payments-api/4711/log.txt`.
    #[schemars(transform = rule::blob_key)]
    pub key: String,
    /// Size of the content in bytes.
    pub size_bytes: u64,
    /// SHA-256 of the content, 64 lowercase hex digits.
    #[schemars(transform = rule::sha256_hex)]
    pub sha256: String,
    /// MIME type, e.g. `text/plain; charset=utf-8`.
    #[schemars(transform = rule::media_type)]
    pub content_type: String,
}

impl Validate for BlobRef {
    fn validate(&self) -> Result<(), FieldError> {
        validate::blob_container("container", &self.container)?;
        validate::blob_key("key", &self.key)?;
        validate::sha256_hex("sha256", &self.sha256)?;
        validate::media_type("contentType", &self.content_type)?;
        Ok(())
    }
}

/// What a build artifact is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ArtifactKind {
    /// A NuGet package (`.nupkg`) for package publishing.
    Package,
    /// A tar archive of the container build context, for container build.
    ContainerContext,
    /// An archive of build output (binaries, bundles).
    Archive,
    /// A report (coverage, analysis).
    Report,
}

/// One artifact a build produced, stored in the blob store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactRef {
    /// File name, unique within the build, e.g.
    /// `Contoso.Payments.Client.1.4.0.nupkg`.
    #[schemars(transform = rule::identifier)]
    pub name: String,
    /// What the artifact is.
    pub kind: ArtifactKind,
    /// Where its content is.
    pub blob: BlobRef,
}

impl Validate for ArtifactRef {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("name", &self.name)?;
        self.blob.validate().map_err(|err| validate::nested("blob", err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samples;

    #[test]
    fn bad_fields_are_named() {
        let good = samples::build_completed().log;
        assert_eq!(good.validate(), Ok(()));
        for (field, change) in [
            (
                "container",
                (|blob: &mut BlobRef| blob.container = "Build_Logs".into()) as fn(&mut BlobRef),
            ),
            ("key", |blob| blob.key = "/etc/passwd".into()),
            ("sha256", |blob| blob.sha256 = "abc".into()),
            ("contentType", |blob| blob.content_type = "text".into()),
        ] {
            let mut blob = good.clone();
            change(&mut blob);
            assert_eq!(blob.validate().unwrap_err().field, field);
        }
    }
}
