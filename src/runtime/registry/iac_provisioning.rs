//! iac-provisioning: Pulumi preview then apply.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::iac_provisioning::azure::{PulumiConfig, PulumiEngine};
use bosun_consumers::iac_provisioning::{IacProvisioning, NAME, local};

use super::{Registration, RegistryError, Shared, adapter_error};
use crate::runtime::config::{AdapterKind, Settings};

pub(super) const REGISTRATION: Registration = Registration {
    name: NAME,
    build,
    keeps_blobs: false,
    blob_containers: &[],
    settings: &["BOSUN_PULUMI_PROGRAM_DIR", "BOSUN_PULUMI_BINARY"],
    saga: None,
};

fn build(settings: &Settings, _shared: &Shared) -> Result<Arc<dyn Consumer>, RegistryError> {
    let data = &settings.data_dir;
    let azure = match &settings.adapters {
        AdapterKind::Local => {
            return Ok(Arc::new(IacProvisioning::new(local::LocalInfrastructure::new(
                data.join("infra"),
            ))));
        }
        AdapterKind::Azure(azure) => azure,
    };
    let pulumi = azure.pulumi.as_ref().ok_or(RegistryError::MissingSetting {
        consumer: NAME,
        settings: &["BOSUN_PULUMI_PROGRAM_DIR"],
        what: "the directory of the Pulumi program it previews and applies (a path in the container, e.g. a \
               mounted volume; BOSUN_PULUMI_BINARY names the pulumi executable if it is not on PATH)",
    })?;
    let mut config = PulumiConfig::new(pulumi.program_dir.clone(), data.join("pulumi"));
    if let Some(binary) = &pulumi.binary {
        config.binary = binary.clone();
    }
    let engine = PulumiEngine::new(&config).map_err(|err| adapter_error(NAME, &err))?;
    Ok(Arc::new(IacProvisioning::new(engine)))
}
