//! The first half of both adapters: read the module's build context from
//! the blob store and build its image with the delivery layer's OCI image
//! builder ([`crate::delivery::oci`]), on a blocking thread.

use super::port::{ContainerBuildError, ImageSpec};
use crate::delivery::blob::BlobStore;
use crate::delivery::oci::{BuildInput, OciImage, Platform, build_image};

/// Reads `spec`'s context from the blob store and builds its image on a
/// blocking thread: the first half of both adapters.
pub async fn build_from_context(blobs: &dyn BlobStore, spec: &ImageSpec) -> Result<OciImage, ContainerBuildError> {
    let platform = Platform::parse(&spec.platform).map_err(ContainerBuildError::Invalid)?;
    let context = blobs.get(&spec.context).await?;
    let dockerfile = spec.dockerfile.clone();
    let build_args = spec.build_args.clone();
    let image = tokio::task::spawn_blocking(move || {
        build_image(
            &context,
            &BuildInput {
                dockerfile: &dockerfile,
                build_args: &build_args,
                platform: &platform,
            },
        )
    })
    .await
    .map_err(|err| ContainerBuildError::storage("the build task failed", err))??;
    Ok(image)
}
