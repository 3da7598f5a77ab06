//! package-publishing: packs and pushes NuGet packages to a feed.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::package_publishing::azure::{AzureArtifactsConfig, AzureArtifactsFeed};
use bosun_consumers::package_publishing::{NAME, PackagePublishing, local};

use super::{Registration, RegistryError, Shared, adapter_error};
use crate::runtime::config::{AdapterKind, Settings};

pub(super) const REGISTRATION: Registration = Registration {
    name: NAME,
    build,
    keeps_blobs: true,
    // It reads the artifacts a build names and writes to its feed, in no
    // container of its own.
    blob_containers: &[],
    settings: &["BOSUN_ARTIFACTS_URL", "BOSUN_ARTIFACTS_PROJECT", "BOSUN_ARTIFACTS_PAT"],
    saga: None,
};

fn build(settings: &Settings, shared: &Shared) -> Result<Arc<dyn Consumer>, RegistryError> {
    let azure = match &settings.adapters {
        AdapterKind::Local => {
            return Ok(Arc::new(PackagePublishing::new(local::LocalNugetFeed::new(
                settings.data_dir.join("nuget"),
                Arc::clone(&shared.blobs),
            ))));
        }
        AdapterKind::Azure(azure) => azure,
    };
    let artifacts = azure.artifacts.as_ref().ok_or(RegistryError::MissingSetting {
        consumer: NAME,
        settings: &["BOSUN_ARTIFACTS_URL"],
        what: "the Azure Artifacts host packages are pushed to (https://pkgs.dev.azure.com/<org>), with \
               BOSUN_ARTIFACTS_PROJECT for a project-scoped feed and BOSUN_ARTIFACTS_PAT (else BOSUN_AZURE_DEVOPS_PAT)",
    })?;
    let config = AzureArtifactsConfig::new(
        artifacts.url.clone(),
        artifacts.project.clone(),
        artifacts.pat.expose().to_owned(),
    );
    let feed = AzureArtifactsFeed::new(&config, Arc::clone(&shared.blobs)).map_err(|err| adapter_error(NAME, &err))?;
    Ok(Arc::new(PackagePublishing::new(feed)))
}
