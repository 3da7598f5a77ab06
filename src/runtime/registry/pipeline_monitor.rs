//! pipeline-monitor: follows a pipeline run to its end without holding a
//! lock, polling with backoff.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::delivery::pipeline::{ARTIFACTS_CONTAINER, LOG_CONTAINER, TEST_RESULTS_CONTAINER};
use bosun_consumers::pipeline_monitor::{NAME, PipelineMonitor, azure, local};

use super::{Registration, RegistryError, Shared, azure_config};
use crate::runtime::config::{AdapterKind, Settings};

pub(super) const REGISTRATION: Registration = Registration {
    name: NAME,
    build,
    keeps_blobs: true,
    // The Azure adapter stores a run's log and test results; the local one
    // follows the local runner, which also stores its artifacts.
    blob_containers: &[LOG_CONTAINER, TEST_RESULTS_CONTAINER, ARTIFACTS_CONTAINER],
    settings: &[
        "BOSUN_PIPELINE_POLL_MS",
        "BOSUN_PIPELINE_POLL_MAX_MS",
        "BOSUN_PIPELINE_MAX_POLLS",
    ],
    saga: None,
};

fn build(settings: &Settings, shared: &Shared) -> Result<Arc<dyn Consumer>, RegistryError> {
    let delivery = &settings.delivery;
    let (poll, poll_max, max_polls) = (
        delivery.pipeline_poll,
        delivery.pipeline_poll_max,
        delivery.pipeline_max_polls,
    );
    Ok(match &settings.adapters {
        AdapterKind::Local => Arc::new(PipelineMonitor::new(
            local::LocalRunStatus::new(Arc::clone(&shared.pipelines)),
            poll,
            poll_max,
            max_polls,
        )),
        AdapterKind::Azure(settings) => Arc::new(PipelineMonitor::new(
            azure::AzureRunStatus::new(&azure_config(settings)?, Arc::clone(&shared.blobs))?,
            poll,
            poll_max,
            max_polls,
        )),
    })
}
