//! build-ingestion: normalises build and test results, stores logs.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::build_ingestion::results::{LOG_CONTAINER, RECORD_CONTAINER, REPORT_CONTAINER};
use bosun_consumers::build_ingestion::{BuildIngestion, NAME, azure, local};

use super::{Registration, RegistryError, Shared, azure_config};
use crate::runtime::config::{AdapterKind, Settings};

pub(super) const REGISTRATION: Registration = Registration {
    name: NAME,
    build,
    keeps_blobs: true,
    blob_containers: &[LOG_CONTAINER, REPORT_CONTAINER, RECORD_CONTAINER],
    settings: &[],
    saga: None,
};

fn build(settings: &Settings, shared: &Shared) -> Result<Arc<dyn Consumer>, RegistryError> {
    Ok(match &settings.adapters {
        AdapterKind::Local => Arc::new(BuildIngestion::new(local::LocalBuildResults::new(Arc::clone(
            &shared.blobs,
        )))),
        AdapterKind::Azure(settings) => Arc::new(BuildIngestion::new(azure::AzureBuildResults::new(
            &azure_config(settings)?,
            Arc::clone(&shared.blobs),
        )?)),
    })
}
