//! The one list of consumers bosun runs, and how each is built from the
//! settings: the adapter behind each port is chosen by
//! [`AdapterKind`](crate::config::AdapterKind), not by `if` chains in the
//! consumers. Local adapters share one Git host, one blob store and one
//! pipeline runner under the data directory.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::build_ingestion::{self, BuildIngestion};
use bosun_consumers::commit::{self, Commit};
use bosun_consumers::container_build::azure::{AcrAuth, AzureContainerRegistryConfig};
use bosun_consumers::container_build::{self, ContainerBuild};
use bosun_consumers::delivery::azure::credential::EntraIdCredential;
use bosun_consumers::delivery::azure::devops::{AzureDevOpsAuth, AzureDevOpsConfig, AzureDevOpsError};
use bosun_consumers::delivery::blob::{AzureBlobAuth, AzureBlobConfigError, AzureBlobSettings, AzureBlobStore};
use bosun_consumers::delivery::blob::{BlobStore, FilesystemBlobStore};
use bosun_consumers::delivery::git::LocalGitHost;
use bosun_consumers::delivery::pipeline::{LocalPipelines, RunnerSettings};
use bosun_consumers::gitops_sync::azure::{ArgoCdConfig, AzureGitOpsConfig};
use bosun_consumers::gitops_sync::{self, GitOpsSync};
use bosun_consumers::iac_provisioning::azure::PulumiConfig;
use bosun_consumers::iac_provisioning::{self, IacProvisioning};
use bosun_consumers::package_publishing::azure::AzureArtifactsConfig;
use bosun_consumers::package_publishing::{self, PackagePublishing};
use bosun_consumers::pipeline_generation::{self, PipelineGeneration};
use bosun_consumers::pipeline_monitor::{self, PipelineMonitor};
use bosun_consumers::probe::{self, ProbeConsumer};
use bosun_consumers::pull_request::{self, PullRequests};
use bosun_consumers::release_orchestration::{self, ReleaseOrchestration};
use bosun_consumers::repository_provisioning::{self, RepositoryProvisioning};
use bosun_sagas::gitops::GitOpsSaga;
use bosun_sagas::release::{ReleasePolicy, ReleaseSaga};

use crate::config::{AcrCredential, AdapterKind, AzureDevOpsSettings, BlobAuth, BlobBackend, Settings};

/// Every consumer, in the order of the delivery, then the built-in probe.
pub const AVAILABLE: &[&str] = &[
    repository_provisioning::NAME,
    commit::NAME,
    pull_request::NAME,
    pipeline_generation::NAME,
    pipeline_monitor::NAME,
    build_ingestion::NAME,
    container_build::NAME,
    package_publishing::NAME,
    release_orchestration::NAME,
    iac_provisioning::NAME,
    gitops_sync::NAME,
    probe::NAME,
];

/// Why consumers could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A consumer name this build does not know.
    #[error("consumer `{0}` is not available in this build (available: {available})", available = AVAILABLE.join(", "))]
    NotAvailable(String),
    /// A setting the chosen adapter needs is missing.
    #[error("consumer `{consumer}` with BOSUN_ADAPTERS=azure needs {setting}")]
    MissingSetting {
        /// The consumer.
        consumer: &'static str,
        /// The setting(s).
        setting: &'static str,
    },
    /// The release policy is invalid.
    #[error("release policy: {0}")]
    Policy(String),
    /// An Azure adapter could not be configured.
    #[error("{consumer}: {reason}")]
    Adapter {
        /// The consumer.
        consumer: &'static str,
        /// Why.
        reason: String,
    },
}

impl From<AzureDevOpsError> for RegistryError {
    fn from(err: AzureDevOpsError) -> Self {
        Self::Adapter {
            consumer: "azure-devops",
            reason: err.to_string(),
        }
    }
}

fn adapter_error(consumer: &'static str) -> impl FnOnce(&dyn std::fmt::Display) -> RegistryError {
    move |err| RegistryError::Adapter {
        consumer,
        reason: err.to_string(),
    }
}

fn azure_config(settings: &AzureDevOpsSettings) -> AzureDevOpsConfig {
    let auth = match (&settings.bearer_token, &settings.pat) {
        (Some(token), _) => AzureDevOpsAuth::Bearer(token.expose().to_owned()),
        (None, Some(pat)) => AzureDevOpsAuth::Pat(pat.expose().to_owned()),
        // Settings validation requires one of the two.
        (None, None) => AzureDevOpsAuth::Pat(String::new()),
    };
    AzureDevOpsConfig::new(settings.organization_url.clone(), settings.project.clone(), auth)
}

/// The release saga under the configured policy.
pub fn release_saga(settings: &Settings) -> ReleaseSaga {
    ReleaseSaga::new(release_policy(settings))
}

fn release_policy(settings: &Settings) -> ReleasePolicy {
    ReleasePolicy {
        environments: settings.delivery.environments.clone(),
        auto_approve: settings.delivery.auto_approve.clone(),
        approval_timeout: settings.delivery.approval_timeout,
        ..ReleasePolicy::default()
    }
}

/// The GitOps saga with the configured reconcile backoff.
pub fn gitops_saga(settings: &Settings) -> GitOpsSaga {
    GitOpsSaga::new().with_reconcile_backoff(settings.delivery.reconcile, settings.delivery.reconcile_max)
}

/// The blob store the settings choose: the filesystem under the data
/// directory, or Azure Blob Storage.
pub fn blob_store(settings: &Settings) -> Result<Arc<dyn BlobStore>, RegistryError> {
    let azure = |result: Result<AzureBlobStore, _>| -> Result<Arc<dyn BlobStore>, RegistryError> {
        result
            .map(|store| Arc::new(store) as Arc<dyn BlobStore>)
            .map_err(|err: AzureBlobConfigError| RegistryError::Adapter {
                consumer: "blob store",
                reason: err.to_string(),
            })
    };
    match &settings.blob {
        BlobBackend::Filesystem => Ok(Arc::new(FilesystemBlobStore::new(settings.blob_root()))),
        BlobBackend::AzureConnectionString(connection) => {
            let blob_settings = AzureBlobSettings::from_connection_string(connection.expose()).map_err(|err| {
                RegistryError::Adapter {
                    consumer: "blob store",
                    reason: err.to_string(),
                }
            })?;
            azure(AzureBlobStore::new(blob_settings))
        }
        BlobBackend::Azure { url, auth } => {
            let auth = match auth {
                BlobAuth::SharedKey { account, key } => AzureBlobAuth::SharedKey {
                    account: account.clone(),
                    key: key.expose().to_owned(),
                },
                BlobAuth::Sas(sas) => AzureBlobAuth::Sas(sas.expose().to_owned()),
                BlobAuth::EntraDefault => AzureBlobAuth::EntraId(EntraIdCredential::Default),
                BlobAuth::WorkloadIdentity => AzureBlobAuth::EntraId(EntraIdCredential::WorkloadIdentity),
                BlobAuth::ManagedIdentity { client_id } => AzureBlobAuth::EntraId(EntraIdCredential::ManagedIdentity {
                    client_id: client_id.clone(),
                }),
                BlobAuth::AzureCli => AzureBlobAuth::EntraId(EntraIdCredential::DeveloperTools),
            };
            azure(AzureBlobStore::new(AzureBlobSettings::new(url.clone(), auth)))
        }
    }
}

/// What the local adapters share: one Git host, one blob store, one
/// pipeline runner.
struct Shared {
    git: Arc<LocalGitHost>,
    blobs: Arc<dyn BlobStore>,
    pipelines: Arc<LocalPipelines>,
}

impl Shared {
    fn new(settings: &Settings) -> Result<Self, RegistryError> {
        let git = Arc::new(LocalGitHost::new(settings.git_root()));
        let blobs = blob_store(settings)?;
        let pipelines = Arc::new(LocalPipelines::with_host(
            settings.data_dir.join("pipelines"),
            Arc::clone(&git),
            Arc::clone(&blobs),
            RunnerSettings::default(),
        ));
        Ok(Self { git, blobs, pipelines })
    }
}

/// Builds one consumer by name.
pub fn build_one(name: &str, settings: &Settings) -> Result<Arc<dyn Consumer>, RegistryError> {
    build_with(name, settings, &Shared::new(settings)?)
}

fn build_with(name: &str, settings: &Settings, shared: &Shared) -> Result<Arc<dyn Consumer>, RegistryError> {
    use repository_provisioning::local::LocalRepositoryHost;
    let data = &settings.data_dir;
    let delivery = &settings.delivery;
    let consumer: Arc<dyn Consumer> = match (name, &settings.adapters) {
        (repository_provisioning::NAME, AdapterKind::Local) => Arc::new(RepositoryProvisioning::new(
            LocalRepositoryHost::with_host(Arc::clone(&shared.git)),
        )),
        (repository_provisioning::NAME, AdapterKind::Azure(azure)) => Arc::new(RepositoryProvisioning::new(
            repository_provisioning::azure::AzureRepositoryHost::new(&azure_config(azure))?,
        )),
        (commit::NAME, AdapterKind::Local) => Arc::new(Commit::new(commit::local::LocalCommitWriter::with_host(
            Arc::clone(&shared.git),
        ))),
        (commit::NAME, AdapterKind::Azure(azure)) => Arc::new(Commit::new(commit::azure::AzureCommitWriter::new(
            &azure_config(azure),
        )?)),
        (pull_request::NAME, AdapterKind::Local) => Arc::new(PullRequests::new(
            pull_request::local::LocalPullRequests::with_host(Arc::clone(&shared.git)),
        )),
        (pull_request::NAME, AdapterKind::Azure(azure)) => Arc::new(PullRequests::new(
            pull_request::azure::AzurePullRequests::new(&azure_config(azure))?,
        )),
        (pipeline_generation::NAME, AdapterKind::Local) => Arc::new(PipelineGeneration::new(
            pipeline_generation::local::LocalPipelineGenerator::with_host(
                Arc::clone(&shared.git),
                Arc::clone(&shared.pipelines),
            ),
        )),
        (pipeline_generation::NAME, AdapterKind::Azure(azure)) => Arc::new(PipelineGeneration::new(
            pipeline_generation::azure::AzurePipelineGenerator::new(&azure_config(azure))?,
        )),
        (pipeline_monitor::NAME, AdapterKind::Local) => Arc::new(PipelineMonitor::new(
            pipeline_monitor::local::LocalRunStatus::new(Arc::clone(&shared.pipelines)),
            delivery.pipeline_poll,
            delivery.pipeline_poll_max,
            delivery.pipeline_max_polls,
        )),
        (pipeline_monitor::NAME, AdapterKind::Azure(azure)) => Arc::new(PipelineMonitor::new(
            pipeline_monitor::azure::AzureRunStatus::new(&azure_config(azure), Arc::clone(&shared.blobs))?,
            delivery.pipeline_poll,
            delivery.pipeline_poll_max,
            delivery.pipeline_max_polls,
        )),
        (build_ingestion::NAME, AdapterKind::Local) => Arc::new(BuildIngestion::new(
            build_ingestion::local::LocalBuildResults::new(Arc::clone(&shared.blobs)),
        )),
        (build_ingestion::NAME, AdapterKind::Azure(azure)) => Arc::new(BuildIngestion::new(
            build_ingestion::azure::AzureBuildResults::new(&azure_config(azure), Arc::clone(&shared.blobs))?,
        )),
        (container_build::NAME, AdapterKind::Local) => Arc::new(ContainerBuild::new(
            container_build::local::LocalImageBuilder::new(data.join("oci"), Arc::clone(&shared.blobs)),
        )),
        (container_build::NAME, AdapterKind::Azure(azure)) => {
            let acr = azure.acr.as_ref().ok_or(RegistryError::MissingSetting {
                consumer: container_build::NAME,
                setting: "BOSUN_ACR_REGISTRY and a credential",
            })?;
            let auth = match &acr.credential {
                AcrCredential::Basic { username, password } => AcrAuth::Basic {
                    username: username.clone(),
                    password: password.expose().to_owned(),
                },
                AcrCredential::RefreshToken(token) => AcrAuth::RefreshToken(token.expose().to_owned()),
                AcrCredential::EntraToken { token, tenant } => AcrAuth::EntraToken {
                    token: token.expose().to_owned(),
                    tenant: tenant.clone(),
                },
            };
            let config = AzureContainerRegistryConfig::new(acr.registry.clone(), auth);
            Arc::new(ContainerBuild::new(
                container_build::azure::AzureContainerRegistry::new(&config, Arc::clone(&shared.blobs))
                    .map_err(|err| adapter_error(container_build::NAME)(&err))?,
            ))
        }
        (package_publishing::NAME, AdapterKind::Local) => Arc::new(PackagePublishing::new(
            package_publishing::local::LocalNugetFeed::new(data.join("nuget"), Arc::clone(&shared.blobs)),
        )),
        (package_publishing::NAME, AdapterKind::Azure(azure)) => {
            let artifacts = azure.artifacts.as_ref().ok_or(RegistryError::MissingSetting {
                consumer: package_publishing::NAME,
                setting: "BOSUN_ARTIFACTS_URL",
            })?;
            let config = AzureArtifactsConfig::new(
                artifacts.url.clone(),
                artifacts.project.clone(),
                artifacts.pat.expose().to_owned(),
            );
            Arc::new(PackagePublishing::new(
                package_publishing::azure::AzureArtifactsFeed::new(&config, Arc::clone(&shared.blobs))
                    .map_err(|err| adapter_error(package_publishing::NAME)(&err))?,
            ))
        }
        (release_orchestration::NAME, _) => {
            let policy = release_policy(settings);
            policy
                .validate()
                .map_err(|err| RegistryError::Policy(err.to_string()))?;
            Arc::new(ReleaseOrchestration::new(ReleaseSaga::new(policy)))
        }
        (iac_provisioning::NAME, AdapterKind::Local) => Arc::new(IacProvisioning::new(
            iac_provisioning::local::LocalInfrastructure::new(data.join("infra")),
        )),
        (iac_provisioning::NAME, AdapterKind::Azure(azure)) => {
            let pulumi = azure.pulumi.as_ref().ok_or(RegistryError::MissingSetting {
                consumer: iac_provisioning::NAME,
                setting: "BOSUN_PULUMI_PROGRAM_DIR",
            })?;
            let mut config = PulumiConfig::new(pulumi.program_dir.clone(), data.join("pulumi"));
            if let Some(binary) = &pulumi.binary {
                config.binary = binary.clone();
            }
            Arc::new(IacProvisioning::new(
                iac_provisioning::azure::PulumiEngine::new(&config)
                    .map_err(|err| adapter_error(iac_provisioning::NAME)(&err))?,
            ))
        }
        (gitops_sync::NAME, AdapterKind::Local) => Arc::new(GitOpsSync::new(
            gitops_sync::local::LocalEnvironments::with_host(Arc::clone(&shared.git), data.join("environments")),
            gitops_saga(settings),
            delivery.reconcile,
            delivery.reconcile_max,
        )),
        (gitops_sync::NAME, AdapterKind::Azure(azure)) => {
            let argo = azure.argo_cd.as_ref().ok_or(RegistryError::MissingSetting {
                consumer: gitops_sync::NAME,
                setting: "BOSUN_ARGOCD_URL and BOSUN_ARGOCD_TOKEN",
            })?;
            let config = AzureGitOpsConfig {
                azure_devops: azure_config(azure),
                argo_cd: ArgoCdConfig::new(argo.url.clone(), argo.token.expose().to_owned()),
            };
            Arc::new(GitOpsSync::new(
                gitops_sync::azure::AzureEnvironments::new(&config)
                    .map_err(|err| adapter_error(gitops_sync::NAME)(&err))?,
                gitops_saga(settings),
                delivery.reconcile,
                delivery.reconcile_max,
            ))
        }
        (probe::NAME, _) => Arc::new(ProbeConsumer::new()),
        (other, _) => return Err(RegistryError::NotAvailable(other.to_owned())),
    };
    Ok(consumer)
}

/// Builds the consumers the settings select (all by default).
pub fn build(settings: &Settings) -> Result<Vec<Arc<dyn Consumer>>, RegistryError> {
    let names: Vec<String> = match &settings.consumers {
        Some(names) => names.clone(),
        None => AVAILABLE.iter().map(|n| (*n).to_owned()).collect(),
    };
    let shared = Shared::new(settings)?;
    names.iter().map(|name| build_with(name, settings, &shared)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_consumer_of_the_routing_table_is_available() {
        let mut available: Vec<_> = AVAILABLE.to_vec();
        available.sort_unstable();
        let mut routed: Vec<_> = bosun_contracts::CONSUMERS.iter().map(|c| c.name).collect();
        routed.sort_unstable();
        assert_eq!(available, routed);
    }

    #[test]
    fn the_default_builds_every_consumer_with_local_adapters() {
        let dir = tempfile::tempdir().unwrap();
        let consumers = build(&Settings::with_data_dir(dir.path())).unwrap();
        let names: Vec<_> = consumers.iter().map(|c| c.name()).collect();
        assert_eq!(names, AVAILABLE);
    }

    #[test]
    fn an_unknown_consumer_is_an_error_that_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::with_data_dir(dir.path());
        settings.consumers = Some(vec!["billing".into()]);
        let err = build(&settings).err().unwrap();
        assert!(err.to_string().contains("billing"), "{err}");
    }

    #[test]
    fn an_azure_consumer_without_its_service_settings_names_them() {
        let env: std::collections::BTreeMap<String, String> = [
            ("BOSUN_ADAPTERS", "azure"),
            ("BOSUN_AZURE_DEVOPS_ORG_URL", "https://dev.azure.com/contoso"),
            ("BOSUN_AZURE_DEVOPS_PROJECT", "delivery"),
            ("BOSUN_AZURE_DEVOPS_PAT", "pat"),
            ("BOSUN_CONSUMERS", "container-build"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let settings = Settings::from_sources(&env, &std::collections::BTreeMap::new()).unwrap();
        let err = build(&settings).err().unwrap();
        assert!(err.to_string().contains("BOSUN_ACR_REGISTRY"), "{err}");
    }
}
