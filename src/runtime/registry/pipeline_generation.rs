//! pipeline-generation: generates and commits the YAML pipeline.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::pipeline_generation::{NAME, PipelineGeneration, azure, local};

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
        AdapterKind::Local => Arc::new(PipelineGeneration::new(local::LocalPipelineGenerator::with_host(
            Arc::clone(&shared.git),
            Arc::clone(&shared.pipelines),
        ))),
        AdapterKind::Azure(settings) => Arc::new(PipelineGeneration::new(azure::AzurePipelineGenerator::new(
            &azure_config(settings)?,
        )?)),
    })
}
