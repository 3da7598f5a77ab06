//! iac-provisioning: Pulumi preview then apply.
//!
//! With `azure` adapters the Pulumi program comes, first match wins, from
//! `BOSUN_PULUMI_PROGRAM_DIR` (a folder in the container, as before), from
//! `BOSUN_PULUMI_PROGRAM_REPOSITORY` at `BOSUN_PULUMI_PROGRAM_REF`, or from
//! the module's own repository at the release's commit; in Git, the folder
//! `BOSUN_PULUMI_PROGRAM_PATH` (default `infra`). Repository names are
//! Azure Repos repositories of the tenant's project, fetched with the Azure
//! DevOps credential.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::iac_provisioning::azure::{PulumiConfig, PulumiEngine};
use bosun_consumers::iac_provisioning::program::{ConfiguredRepository, GitProgram, ProgramSource, RepositoryUrls};
use bosun_consumers::iac_provisioning::{IacProvisioning, NAME, local};

use super::{Registration, RegistryError, Shared, adapter_error, azure_config};
use crate::runtime::config::{AdapterKind, Settings};

pub(super) const REGISTRATION: Registration = Registration {
    name: NAME,
    build,
    keeps_blobs: false,
    blob_containers: &[],
    settings: &[
        "BOSUN_PULUMI_PROGRAM_DIR",
        "BOSUN_PULUMI_PROGRAM_REPOSITORY",
        "BOSUN_PULUMI_PROGRAM_REF",
        "BOSUN_PULUMI_PROGRAM_PATH",
        "BOSUN_PULUMI_BINARY",
    ],
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
    let pulumi = &azure.pulumi;
    let program = match &pulumi.program_dir {
        Some(dir) => ProgramSource::Folder(dir.clone()),
        None => {
            let devops = azure_config(azure)?;
            let mut git = GitProgram::new(
                RepositoryUrls::AzureRepos {
                    organization_url: devops.organization_url.clone(),
                    project: devops.project.clone(),
                },
                pulumi.path.clone(),
            );
            git.repository = pulumi.repository.as_ref().map(|repository| ConfiguredRepository {
                repository: repository.clone(),
                reference: pulumi.reference.clone(),
            });
            // The credential goes to the organization's repositories only.
            git.credential_scope = format!("{}/", devops.organization_url.trim_end_matches('/'));
            git.auth = Some(devops.auth);
            ProgramSource::Git(git)
        }
    };
    let mut config = PulumiConfig::with_program(program, data.join("pulumi"));
    if let Some(binary) = &pulumi.binary {
        config.binary = binary.clone();
    }
    let engine = PulumiEngine::new(&config).map_err(|err| adapter_error(NAME, &err))?;
    Ok(Arc::new(IacProvisioning::new(engine)))
}
