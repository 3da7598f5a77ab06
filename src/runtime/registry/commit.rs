//! commit: writes an artifact bundle's files into a branch.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::commit::{Commit, NAME, azure, local};

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
        AdapterKind::Local => Arc::new(Commit::new(local::LocalCommitWriter::with_host(Arc::clone(
            &shared.git,
        )))),
        AdapterKind::Azure(settings) => Arc::new(Commit::new(azure::AzureCommitWriter::new(&azure_config(settings)?)?)),
    })
}
