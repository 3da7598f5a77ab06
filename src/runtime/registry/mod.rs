//! The one list of consumers bosun runs. Each consumer declares itself
//! once, in its own file here (a [`Registration`]): its name (which is also
//! its queue, its subscription and its entry in the contracts' routing
//! table, where its routes are declared for every language), how it is
//! built from the settings, with the adapter behind each port chosen by
//! [`AdapterKind`](crate::runtime::config::AdapterKind), not by `if` chains
//! in the consumers, the blob containers it writes, the settings only it
//! reads, and its saga: the saga's kind and key, its state machine's
//! diagram and when one is finished. Its retry policy is declared by the
//! consumer itself (`Consumer::retry_policy`). Local adapters share one Git
//! host, one blob store and one pipeline runner under the data directory.
//!
//! What the rest of bosun knows about consumers is built from [`CONSUMERS`]:
//! the Service Bus [`topology`] (sessions), the saga kinds and diagrams of
//! `bosun sagas` ([`saga`]), which sagas retention may prune
//! ([`finished_sagas`]), the blob containers `bosun infra render` creates
//! ([`blob_containers`]) and the consumers' part of the settings a file may
//! set ([`setting_names`]).
//!
//! To add a consumer: write its file (a [`Registration`]) and add its
//! name to the `consumers!` list (one line, which declares the module and
//! lists it in [`CONSUMERS`]); a test checks the list against the routing
//! table.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::delivery::azure::credential::{EntraIdCredential, RefreshingToken};
use bosun_consumers::delivery::azure::devops::{
    AZURE_DEVOPS_SCOPE, AzureDevOpsAuth, AzureDevOpsConfig, AzureDevOpsError,
};
use bosun_consumers::delivery::blob::{AzureBlobAuth, AzureBlobConfigError, AzureBlobSettings, AzureBlobStore};
use bosun_consumers::delivery::blob::{BlobStore, FilesystemBlobStore};
use bosun_consumers::delivery::git::LocalGitHost;
use bosun_consumers::delivery::pipeline::{LocalPipelines, RunnerSettings};
use bosun_consumers::release_orchestration::{DefaultGovernance, ReleaseGovernance};
use bosun_contracts::ConsumerName;

use crate::ports::store::FinishedSaga;
use crate::ports::topology::{SagaKeyFn, SessionKeyed, Topology};
use crate::runtime::config::{AzureDevOpsSettings, BlobAuth, BlobBackend, EntraIdentity, Settings};

/// How a consumer is built: from the settings and what local adapters share.
type Build = fn(&Settings, &Shared) -> Result<Arc<dyn Consumer>, RegistryError>;

/// One consumer, declared once: its name, how it is built from the
/// settings, and what the rest of bosun knows about it without building it.
#[derive(Clone, Copy)]
pub struct Registration {
    /// The consumer's name, as in `bosun_contracts::routing::CONSUMERS`.
    pub name: ConsumerName,
    build: Build,
    /// Whether its adapters keep build logs, results, packages or image
    /// contexts in the blob store (beyond the claim check every consumer
    /// uses): `bosun infra render` gives only these consumers' identities
    /// blob rights on the whole storage account.
    pub keeps_blobs: bool,
    /// The blob containers its adapters write to (beyond the claim
    /// check's), which `bosun infra render` creates in the storage account
    /// ([`blob_containers`]). Only a consumer that [keeps
    /// blobs](Self::keeps_blobs) has any.
    pub blob_containers: &'static [&'static str],
    /// The names of the settings only it reads (`BOSUN_PIPELINE_POLL_MS`),
    /// parsed with the others in `runtime::config`: with the generic ones,
    /// the names a settings file may set ([`setting_names`]).
    pub settings: &'static [&'static str],
    /// The saga it keeps (`None`: it keeps none).
    pub saga: Option<SagaRegistration>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("name", &self.name)
            .field("keeps_blobs", &self.keeps_blobs)
            .field("blob_containers", &self.blob_containers)
            .field("settings", &self.settings)
            .field("saga", &self.saga)
            .finish_non_exhaustive()
    }
}

/// The saga a consumer keeps: its kind, its key, its state machine and
/// when one is over.
#[derive(Clone, Copy)]
pub struct SagaRegistration {
    /// The kind its sagas are stored under (`release`): what `key` returns
    /// first, and what `bosun sagas` and the API take.
    pub kind: &'static str,
    /// The saga (kind, key) a message belongs to: the pure function its
    /// `Consumer::saga_of` calls. Its messages are session-keyed by it: on
    /// Service Bus its queue and subscription require sessions, and every
    /// message sent to them carries this key as its session id, so the
    /// broker hands out one message of a saga at a time ([`topology`]).
    pub key: SagaKeyFn,
    /// Its state machine as a Mermaid `stateDiagram-v2`, under the
    /// settings' policy (`bosun sagas diagram`).
    pub diagram: fn(&Settings) -> String,
    /// When one of its sagas is over, so retention may prune it
    /// ([`finished_sagas`]); `None`: its sagas never finish and are never
    /// pruned.
    pub finished: Option<Finished>,
}

impl std::fmt::Debug for SagaRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SagaRegistration")
            .field("kind", &self.kind)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

/// When a saga is over: the state's `field` holds one of `values`.
#[derive(Clone, Copy)]
pub struct Finished {
    /// The state's field naming where the saga is (`phase`).
    pub field: &'static str,
    /// The values of that field that mean the saga is over.
    pub values: fn() -> Vec<String>,
}

impl std::fmt::Debug for Finished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Finished")
            .field("field", &self.field)
            .field("values", &(self.values)())
            .finish()
    }
}

/// Declares each consumer's registration module (a file of the same
/// name beside this one, holding its `REGISTRATION`) and lists it in
/// [`CONSUMERS`]: one line per consumer.
macro_rules! consumers {
    ($($module:ident),* $(,)?) => {
        $(mod $module;)*

        /// Every consumer, in the order of the delivery, then the built-in probe.
        pub const CONSUMERS: &[Registration] = &[$($module::REGISTRATION),*];
    };
}

consumers![
    repository_provisioning,
    commit,
    pull_request,
    pipeline_generation,
    pipeline_monitor,
    build_ingestion,
    container_build,
    package_publishing,
    release_orchestration,
    iac_provisioning,
    gitops_sync,
    probe,
];

/// The names of every consumer this build has, in [`CONSUMERS`]' order.
pub fn available() -> impl Iterator<Item = ConsumerName> {
    CONSUMERS.iter().map(|registration| registration.name)
}

/// The entities every consumer needs, with the session-keyed consumers'
/// (those keeping a saga: [`SagaRegistration::key`]): the topology Service
/// Bus is planned, verified, rendered and sent on with.
pub fn topology() -> Topology {
    Topology::from_routing().with_sessions(CONSUMERS.iter().filter_map(|registration| {
        registration.saga.map(|saga| SessionKeyed {
            consumer: registration.name,
            key: saga.key,
        })
    }))
}

/// The sagas the consumers keep, in [`CONSUMERS`]' order.
pub fn sagas() -> impl Iterator<Item = &'static SagaRegistration> {
    CONSUMERS.iter().filter_map(|registration| registration.saga.as_ref())
}

/// The saga of `kind` (`release`).
pub fn saga(kind: &str) -> Result<&'static SagaRegistration, UnknownSagaKind> {
    sagas()
        .find(|saga| saga.kind == kind)
        .ok_or_else(|| UnknownSagaKind(kind.to_owned()))
}

/// A saga kind no consumer keeps.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown saga kind `{0}` (expected {expected})", expected = saga_kinds_list())]
pub struct UnknownSagaKind(pub String);

/// `release, gitops or probe`.
fn saga_kinds_list() -> String {
    let kinds: Vec<&str> = sagas().map(|saga| saga.kind).collect();
    match kinds.split_last() {
        None => "none".to_owned(),
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// How each saga kind that can finish says so: what retention prunes
/// (`RetentionPolicy::finished`). Sagas of the other kinds are never pruned.
pub fn finished_sagas() -> Vec<FinishedSaga> {
    sagas()
        .filter_map(|saga| {
            saga.finished.map(|finished| FinishedSaga {
                kind: saga.kind.to_owned(),
                field: finished.field.to_owned(),
                values: (finished.values)(),
            })
        })
        .collect()
}

/// The blob containers the consumers write to, each once, in [`CONSUMERS`]'
/// order (the claim check's is the host's, not among them).
pub fn blob_containers() -> Vec<&'static str> {
    let mut containers: Vec<&'static str> = Vec::new();
    for container in CONSUMERS.iter().flat_map(|registration| registration.blob_containers) {
        if !containers.contains(container) {
            containers.push(container);
        }
    }
    containers
}

/// The names of the settings the consumers read, each their own
/// ([`Registration::settings`]), in [`CONSUMERS`]' order.
pub fn setting_names() -> impl Iterator<Item = &'static str> {
    CONSUMERS
        .iter()
        .flat_map(|registration| registration.settings.iter().copied())
}

fn available_list() -> String {
    available().collect::<Vec<_>>().join(", ")
}

/// Why consumers could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A consumer name this build does not know.
    #[error("consumer `{0}` is not available in this build (available: {available})", available = available_list())]
    NotAvailable(String),
    /// A setting the chosen adapter needs is missing: bosun does not start
    /// until it is set.
    #[error(
        "consumer `{consumer}` with BOSUN_ADAPTERS=azure needs {names}: {what}; set it, or leave `{consumer}` out of BOSUN_CONSUMERS",
        names = .settings.join(" and ")
    )]
    MissingSetting {
        /// The consumer.
        consumer: &'static str,
        /// The settings it needs, each named.
        settings: &'static [&'static str],
        /// What they give it, and how to set them.
        what: &'static str,
    },
    /// The release policy is invalid.
    #[error("release policy: {0}")]
    Policy(#[source] bosun_sagas::release::ReleasePolicyError),
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

fn adapter_error(consumer: &'static str, err: &dyn std::fmt::Display) -> RegistryError {
    RegistryError::Adapter {
        consumer,
        reason: err.to_string(),
    }
}

/// The Azure DevOps connection of the `azure` adapters: Entra ID tokens
/// from `BOSUN_AZURE_DEVOPS_AUTH`'s identity (refreshed before expiry), else
/// the static token, else the PAT.
fn azure_config(settings: &AzureDevOpsSettings) -> Result<AzureDevOpsConfig, RegistryError> {
    let auth = match (settings.entra, &settings.bearer_token, &settings.pat) {
        (Some(identity), _, _) => AzureDevOpsAuth::Entra(Arc::new(refreshing_token(
            "azure-devops",
            identity,
            AZURE_DEVOPS_SCOPE,
        )?)),
        (None, Some(token), _) => AzureDevOpsAuth::Bearer(token.expose().to_owned()),
        (None, None, Some(pat)) => AzureDevOpsAuth::Pat(pat.expose().to_owned()),
        // Settings validation requires one of the three.
        (None, None, None) => AzureDevOpsAuth::Pat(String::new()),
    };
    Ok(AzureDevOpsConfig::new(
        settings.organization_url.clone(),
        settings.project.clone(),
        auth,
    ))
}

/// Tokens for `scope` from `identity`, for `user` (named in errors); its
/// credential is made again after a refused token.
fn refreshing_token(
    user: &'static str,
    identity: EntraIdentity,
    scope: &str,
) -> Result<RefreshingToken, RegistryError> {
    let credential = match identity {
        EntraIdentity::Default => EntraIdCredential::Default,
        EntraIdentity::WorkloadIdentity => EntraIdCredential::WorkloadIdentity,
        EntraIdentity::ManagedIdentity => EntraIdCredential::ManagedIdentity { client_id: None },
        EntraIdentity::AzureCli => EntraIdCredential::DeveloperTools,
    };
    // Made again from the same settings after a refused token, so the new
    // token does not come from the old credential's own cache.
    RefreshingToken::from_identity(credential, scope).map_err(|err| adapter_error(user, &err))
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
/// pipeline runner (built once per process).
struct Shared {
    git: Arc<LocalGitHost>,
    blobs: Arc<dyn BlobStore>,
    pipelines: Arc<LocalPipelines>,
    /// Tenants' approval policies and deliveries' requesters, for the
    /// release saga.
    governance: Arc<dyn ReleaseGovernance>,
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
        Ok(Self {
            git,
            blobs,
            pipelines,
            governance: Arc::new(DefaultGovernance),
        })
    }
}

/// Builds one consumer by name.
pub fn build_one(name: &str, settings: &Settings) -> Result<Arc<dyn Consumer>, RegistryError> {
    build_with(name, settings, &Shared::new(settings)?)
}

fn build_with(name: &str, settings: &Settings, shared: &Shared) -> Result<Arc<dyn Consumer>, RegistryError> {
    let registration = CONSUMERS
        .iter()
        .find(|registration| registration.name == name)
        .ok_or_else(|| RegistryError::NotAvailable(name.to_owned()))?;
    (registration.build)(settings, shared)
}

/// Builds the consumers the settings select (all by default), the release
/// saga reading tenants' approval policies and deliveries' requesters from
/// `governance`.
pub fn build(
    settings: &Settings,
    governance: Arc<dyn ReleaseGovernance>,
) -> Result<Vec<Arc<dyn Consumer>>, RegistryError> {
    let names: Vec<String> = match &settings.consumers {
        Some(names) => names.clone(),
        None => available().map(str::to_owned).collect(),
    };
    let shared = Shared {
        governance,
        ..Shared::new(settings)?
    };
    names.iter().map(|name| build_with(name, settings, &shared)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_consumer_of_the_routing_table_is_available() {
        let mut available: Vec<_> = available().collect();
        available.sort_unstable();
        let mut routed: Vec<_> = bosun_contracts::CONSUMERS.iter().map(|c| c.name).collect();
        routed.sort_unstable();
        assert_eq!(available, routed);
    }

    #[test]
    fn a_session_key_is_the_saga_key_its_consumer_computes() {
        let dir = tempfile::tempdir().unwrap();
        let consumers = build(&Settings::with_data_dir(dir.path()), Arc::new(DefaultGovernance)).unwrap();
        let keyed: Vec<_> = CONSUMERS
            .iter()
            .filter(|registration| registration.saga.is_some())
            .map(|registration| registration.name)
            .collect();
        assert_eq!(keyed, ["release-orchestration", "gitops-sync", "probe"]);
        for registration in CONSUMERS {
            let consumer = consumers.iter().find(|c| c.name() == registration.name).unwrap();
            for message in bosun_contracts::samples::samples() {
                let envelope = bosun_contracts::Envelope::new(&message, uuid::Uuid::now_v7(), "acme", "test");
                let saga = consumer.saga_of(&envelope, &message);
                match registration.saga {
                    Some(declared) => {
                        assert_eq!((declared.key)(&envelope, &message), saga, "{}", registration.name);
                        if let Some((kind, _)) = saga {
                            assert_eq!(kind, declared.kind, "{} declares another kind", registration.name);
                        }
                    }
                    None => assert_eq!(saga, None, "{} keeps a saga: declare it", registration.name),
                }
            }
        }
        let topology = topology();
        for name in keyed {
            assert!(topology.requires_session(&bosun_contracts::Destination::Queue(name.into())));
        }
        assert!(!topology.requires_session(&bosun_contracts::Destination::Queue("commit".into())));
    }

    #[test]
    fn the_saga_kinds_are_the_sagas_crates() {
        // The API's gateway reads a saga's machine through `SagaKind`: the
        // registered kinds and its kinds are one list.
        let kinds: Vec<_> = sagas().map(|saga| saga.kind).collect();
        let crate_kinds: Vec<_> = bosun_sagas::SagaKind::ALL.iter().map(|kind| kind.as_str()).collect();
        assert_eq!(kinds, crate_kinds);
    }

    #[test]
    fn a_saga_kind_is_found_and_an_unknown_one_names_the_kinds() {
        assert_eq!(saga("gitops").unwrap().kind, "gitops");
        assert_eq!(
            saga("billing").unwrap_err().to_string(),
            "unknown saga kind `billing` (expected release, gitops or probe)"
        );
    }

    #[test]
    fn every_saga_draws_its_diagram() {
        let settings = Settings::with_data_dir("unused");
        for saga in sagas() {
            let diagram = (saga.diagram)(&settings);
            assert!(diagram.starts_with("stateDiagram-v2\n"), "{}: {diagram}", saga.kind);
        }
    }

    #[test]
    fn only_a_release_finishes_when_its_phase_is_final() {
        let finished = finished_sagas();
        assert_eq!(finished.len(), 1);
        assert_eq!(finished[0].kind, "release");
        assert_eq!(finished[0].field, "phase");
        assert_eq!(finished[0].values, ["completed", "rejected"]);
    }

    #[test]
    fn blob_containers_are_declared_by_consumers_that_keep_blobs_each_once() {
        for registration in CONSUMERS {
            assert!(
                registration.blob_containers.is_empty() || registration.keeps_blobs,
                "{} writes blob containers: it keeps blobs",
                registration.name
            );
        }
        assert_eq!(
            blob_containers(),
            [
                "build-logs",
                "test-results",
                "artifacts",
                "build-reports",
                "build-results"
            ]
        );
    }

    #[test]
    fn a_setting_belongs_to_one_consumer() {
        let mut names: Vec<_> = setting_names().collect();
        let declared = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), declared, "a setting name is declared twice");
        assert!(names.iter().all(|name| name.starts_with("BOSUN_")), "{names:?}");
    }

    #[test]
    fn the_default_builds_every_consumer_with_local_adapters() {
        let dir = tempfile::tempdir().unwrap();
        let consumers = build(&Settings::with_data_dir(dir.path()), Arc::new(DefaultGovernance)).unwrap();
        let names: Vec<_> = consumers.iter().map(|c| c.name()).collect();
        assert_eq!(names, available().collect::<Vec<_>>());
    }

    #[test]
    fn an_unknown_consumer_is_an_error_that_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::with_data_dir(dir.path());
        settings.consumers = Some(vec!["billing".into()]);
        let err = build(&settings, Arc::new(DefaultGovernance)).err().unwrap();
        assert!(err.to_string().contains("billing"), "{err}");
    }

    /// What a consumer needs of its own on `BOSUN_ADAPTERS=azure`, beyond
    /// the Azure DevOps connection.
    struct AzureNeeds {
        consumer: &'static str,
        /// The settings its error must name when they are missing.
        required: &'static [&'static str],
        /// Values that let it start.
        enough: &'static [(&'static str, &'static str)],
    }

    /// Every consumer's [`AzureNeeds`], in [`CONSUMERS`]' order.
    const AZURE_NEEDS: &[AzureNeeds] = &[
        AzureNeeds {
            consumer: "repository-provisioning",
            required: &[],
            enough: &[],
        },
        AzureNeeds {
            consumer: "commit",
            required: &[],
            enough: &[],
        },
        AzureNeeds {
            consumer: "pull-request",
            required: &[],
            enough: &[],
        },
        AzureNeeds {
            consumer: "pipeline-generation",
            required: &[],
            enough: &[],
        },
        AzureNeeds {
            consumer: "pipeline-monitor",
            required: &[],
            enough: &[],
        },
        AzureNeeds {
            consumer: "build-ingestion",
            required: &[],
            enough: &[],
        },
        AzureNeeds {
            consumer: "container-build",
            // The builder, and where each choice builds or pushes.
            required: &[
                "BOSUN_CONTAINER_BUILDER",
                "BOSUN_ACR_REGISTRY",
                "BOSUN_CONTAINER_REGISTRY",
            ],
            enough: &[
                ("BOSUN_CONTAINER_BUILDER", "layout"),
                ("BOSUN_ACR_REGISTRY", "contoso.azurecr.io"),
                ("BOSUN_ACR_USERNAME", "contoso"),
                ("BOSUN_ACR_PASSWORD", "secret"),
            ],
        },
        AzureNeeds {
            consumer: "package-publishing",
            required: &["BOSUN_ARTIFACTS_URL"],
            enough: &[("BOSUN_ARTIFACTS_URL", "https://pkgs.dev.azure.com/contoso")],
        },
        AzureNeeds {
            consumer: "release-orchestration",
            required: &[],
            enough: &[],
        },
        AzureNeeds {
            consumer: "iac-provisioning",
            // The program comes from the module's repository by default.
            required: &[],
            enough: &[],
        },
        AzureNeeds {
            consumer: "gitops-sync",
            required: &["BOSUN_ARGOCD_URL", "BOSUN_ARGOCD_TOKEN"],
            enough: &[
                ("BOSUN_ARGOCD_URL", "https://argocd.contoso.example"),
                ("BOSUN_ARGOCD_TOKEN", "token"),
            ],
        },
        AzureNeeds {
            consumer: "probe",
            required: &[],
            enough: &[],
        },
    ];

    /// Builds `consumer` from these settings (and a fresh data directory),
    /// as `bosun serve --consumers <consumer>` does at start; a panic is
    /// reported as such.
    fn build_azure_consumer(consumer: &str, own: &[(&str, &str)]) -> Result<(), String> {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().to_str().unwrap().to_owned();
        let env: std::collections::BTreeMap<String, String> = [
            ("BOSUN_ADAPTERS", "azure"),
            ("BOSUN_AZURE_DEVOPS_ORG_URL", "https://dev.azure.com/contoso"),
            ("BOSUN_AZURE_DEVOPS_PROJECT", "delivery"),
            ("BOSUN_AZURE_DEVOPS_PAT", "pat"),
            ("BOSUN_CONSUMERS", consumer),
            ("BOSUN_DATA_DIR", &data_dir),
            // No buildah on this machine, whatever is installed.
            ("BOSUN_BUILDAH_BINARY", "/nonexistent/buildah"),
        ]
        .iter()
        .chain(own)
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let settings = Settings::from_sources(&env, &std::collections::BTreeMap::new())
            .map_err(|err| format!("settings: {err}"))?;
        match std::panic::catch_unwind(|| build(&settings, Arc::new(DefaultGovernance))) {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(err)) => Err(err.to_string()),
            Err(_) => panic!("{consumer}: building it panicked"),
        }
    }

    #[test]
    fn an_azure_consumer_without_its_own_settings_does_not_start_and_names_each() {
        let listed: Vec<_> = AZURE_NEEDS.iter().map(|needs| needs.consumer).collect();
        assert_eq!(listed, available().collect::<Vec<_>>(), "every consumer is listed");
        for (registration, needs) in CONSUMERS.iter().zip(AZURE_NEEDS) {
            let (name, required, enough) = (registration.name, needs.required, needs.enough);
            for setting in required {
                assert!(
                    registration.settings.contains(setting),
                    "{name} needs {setting}: it declares it"
                );
            }
            match build_azure_consumer(name, &[]) {
                Ok(()) => assert!(required.is_empty(), "{name} started without {required:?}"),
                Err(err) => {
                    assert!(!required.is_empty(), "{name} needs nothing of its own, yet: {err}");
                    assert!(err.contains(name), "{name}: the error names the consumer: {err}");
                    for setting in required {
                        assert!(err.contains(setting), "{name}: the error names {setting}: {err}");
                    }
                }
            }
            if let Err(err) = build_azure_consumer(name, enough) {
                panic!("{name} with {enough:?}: {err}");
            }
        }
    }
}
