//! repository-provisioning: creates Git repositories.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::repository_provisioning::{NAME, RepositoryProvisioning, azure, local};

use super::{Registration, RegistryError, Shared, azure_config};
use crate::runtime::config::{AdapterKind, Settings};

pub(super) const REGISTRATION: Registration = Registration {
    name: NAME,
    build,
    keeps_blobs: false,
    blob_containers: &[],
    settings: &[],
    saga: None,
};

fn build(settings: &Settings, shared: &Shared) -> Result<Arc<dyn Consumer>, RegistryError> {
    Ok(match &settings.adapters {
        AdapterKind::Local => Arc::new(RepositoryProvisioning::new(local::LocalRepositoryHost::with_host(
            Arc::clone(&shared.git),
        ))),
        AdapterKind::Azure(settings) => Arc::new(RepositoryProvisioning::new(azure::AzureRepositoryHost::new(
            &azure_config(settings)?,
        )?)),
    })
}
