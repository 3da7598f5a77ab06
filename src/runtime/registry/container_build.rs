//! container-build: builds OCI images and pushes them to a registry.
//!
//! The builder is chosen once at start ([`choose_builder`]) and logged with
//! why: buildah ([`buildah::BuildahBuilder`]) when `BOSUN_CONTAINER_BUILDER`
//! allows it, the executable runs and a push registry is set; with the
//! local adapters, else the built-in builder into the local OCI layouts
//! ([`local::LocalImageBuilder`]). With the Azure adapters `auto` never
//! falls back to the built-in builder: `BOSUN_CONTAINER_BUILDER=layout`
//! builds with it and pushes to Azure Container Registry over the OCI
//! distribution API, `acr-tasks` has the registry build the image (ACR
//! Tasks, [`AcrTasks`]), and without buildah bosun does not start.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::container_build::acr_tasks::{ARM_SCOPE, AcrTasks, AcrTasksConfig};
use bosun_consumers::container_build::azure::{
    ACR_SCOPE, AcrAuth, AzureContainerRegistry, AzureContainerRegistryConfig,
};
use bosun_consumers::container_build::buildah::{BuildahBuilder, BuildahConfig};
use bosun_consumers::container_build::{ContainerBuild, NAME, local};
use bosun_consumers::delivery::pipeline::LOG_CONTAINER;

use super::{Registration, RegistryError, Shared, adapter_error, refreshing_token};
use crate::runtime::config::{AcrCredential, AdapterKind, AzureDevOpsSettings, ContainerBuilderChoice, Settings};

pub(super) const REGISTRATION: Registration = Registration {
    name: NAME,
    build,
    keeps_blobs: true,
    // Its build logs. ACR Tasks' run records (`acr_tasks::RUNS_CONTAINER`)
    // are not created up front: the store creates that container on the
    // first write (this identity has rights on the whole account).
    blob_containers: &[LOG_CONTAINER],
    settings: &[
        "BOSUN_CONTAINER_BUILDER",
        "BOSUN_BUILDAH_BINARY",
        "BOSUN_CONTAINER_REGISTRY",
        "BOSUN_CONTAINER_INSECURE_REGISTRIES",
        "BOSUN_CONTAINER_REGISTRY_USERNAME",
        "BOSUN_CONTAINER_REGISTRY_PASSWORD",
        "BOSUN_CONTAINER_BUILD_TIMEOUT_MS",
        "BOSUN_ACR_REGISTRY",
        "BOSUN_ACR_ENDPOINT",
        "BOSUN_ACR_USERNAME",
        "BOSUN_ACR_PASSWORD",
        "BOSUN_ACR_REFRESH_TOKEN",
        "BOSUN_ACR_ENTRA_TOKEN",
        "BOSUN_ACR_TENANT",
        "BOSUN_ACR_AUTH",
        "BOSUN_ACR_SUBSCRIPTION",
        "BOSUN_ACR_RESOURCE_GROUP",
        "BOSUN_ACR_REGISTRY_NAME",
        "BOSUN_ACR_ARM_ENDPOINT",
        "BOSUN_ACR_ARM_AUTH",
        "BOSUN_ACR_RUN_TIMEOUT_MS",
    ],
    saga: None,
};

/// The builder container-build uses, chosen once at start ([`choose_builder`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Builder {
    /// buildah, pushing to `BOSUN_CONTAINER_REGISTRY`, with its version line.
    Buildah(String),
    /// The built-in builder (`FROM scratch`, no `RUN`): into the local OCI
    /// layouts with the local adapters, pushed to `BOSUN_ACR_REGISTRY`
    /// with the Azure ones.
    Layout,
    /// ACR Tasks: the registry builds the image (Azure adapters only).
    AcrTasks,
}

/// The builder chosen, and why (logged at start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuilderChoice {
    /// The builder.
    pub builder: Builder,
    /// Why this one: the setting, or what `auto` found.
    pub why: String,
}

/// What to set when `auto` finds no builder against real services.
const CHOOSE_A_BUILDER: &str = "set BOSUN_CONTAINER_BUILDER to acr-tasks (the registry builds any Dockerfile: with \
     BOSUN_ACR_REGISTRY, BOSUN_ACR_SUBSCRIPTION and BOSUN_ACR_RESOURCE_GROUP), buildah (any Dockerfile: with \
     BOSUN_CONTAINER_REGISTRY and the buildah executable, or BOSUN_BUILDAH_BINARY), or layout (the built-in \
     builder, FROM scratch only, no RUN, pushed to BOSUN_ACR_REGISTRY) to accept it";

/// Decides the builder from `BOSUN_CONTAINER_BUILDER` and the machine:
/// an explicit choice is taken (buildah must run); `auto` takes buildah
/// when a push registry is set and the executable runs, else the built-in
/// builder with the local adapters (the demo works with nothing
/// installed), but never with the Azure ones: a deployment against real
/// services would build only `FROM scratch` images without saying so, so
/// it refuses to start, naming `BOSUN_CONTAINER_BUILDER`.
pub fn choose_builder(settings: &Settings) -> Result<BuilderChoice, RegistryError> {
    let container = &settings.container;
    let choice = |builder, why: &str| {
        Ok(BuilderChoice {
            builder,
            why: why.to_owned(),
        })
    };
    match container.builder {
        ContainerBuilderChoice::AcrTasks => return choice(Builder::AcrTasks, "BOSUN_CONTAINER_BUILDER=acr-tasks"),
        ContainerBuilderChoice::Layout => return choice(Builder::Layout, "BOSUN_CONTAINER_BUILDER=layout"),
        ContainerBuilderChoice::Buildah | ContainerBuilderChoice::Auto => {}
    }
    let required = container.builder == ContainerBuilderChoice::Buildah;
    let no_buildah = match (&container.registry, required) {
        // Settings validation requires a registry with buildah.
        (None, _) => "no push registry is set (BOSUN_CONTAINER_REGISTRY)".to_owned(),
        (Some(_), _) => match BuildahBuilder::detect(&container.buildah_binary) {
            Ok(version) => {
                let why = if required {
                    "BOSUN_CONTAINER_BUILDER=buildah"
                } else {
                    "BOSUN_CONTAINER_BUILDER=auto, a push registry is set and buildah runs"
                };
                return choice(Builder::Buildah(version.0), why);
            }
            Err(reason) if required => {
                return Err(RegistryError::Adapter {
                    consumer: NAME,
                    reason: format!(
                        "BOSUN_CONTAINER_BUILDER=buildah, but {reason} (install Debian's buildah, or set BOSUN_BUILDAH_BINARY)"
                    ),
                });
            }
            Err(reason) => format!("buildah is not available: {reason}"),
        },
    };
    match settings.adapters {
        AdapterKind::Local => choice(
            Builder::Layout,
            &format!("BOSUN_CONTAINER_BUILDER=auto with the local adapters and {no_buildah}"),
        ),
        AdapterKind::Azure(_) => Err(RegistryError::Adapter {
            consumer: NAME,
            reason: format!(
                "BOSUN_CONTAINER_BUILDER is auto (or unset) with BOSUN_ADAPTERS=azure, and {no_buildah}; bosun does \
                 not fall back to the built-in builder (FROM scratch only, no RUN) against real services: \
                 {CHOOSE_A_BUILDER}"
            ),
        }),
    }
}

fn build(settings: &Settings, shared: &Shared) -> Result<Arc<dyn Consumer>, RegistryError> {
    let BuilderChoice { builder, why } = choose_builder(settings)?;
    let container = &settings.container;
    match (builder, &settings.adapters) {
        (Builder::Buildah(version), _) => {
            // Settings validation and `choose_builder` require a registry with buildah.
            let registry = container.registry.clone().ok_or(RegistryError::MissingSetting {
                consumer: NAME,
                settings: &["BOSUN_CONTAINER_REGISTRY"],
                what: "the registry buildah pushes images to",
            })?;
            let config = BuildahConfig {
                binary: container.buildah_binary.clone(),
                work_dir: settings.data_dir.join("buildah"),
                registry: registry.clone(),
                insecure_registries: container.insecure_registries.clone(),
                timeout: container.build_timeout,
                credential: container
                    .credential
                    .as_ref()
                    .map(|(user, password)| (user.clone(), password.expose().to_owned())),
            };
            let builder =
                BuildahBuilder::new(config, Arc::clone(&shared.blobs)).map_err(|err| adapter_error(NAME, &err))?;
            tracing::info!(%version, %registry, %why, "container-build uses buildah");
            Ok(Arc::new(ContainerBuild::new(builder)))
        }
        (Builder::Layout, AdapterKind::Local) => {
            tracing::info!(%why, "container-build uses the built-in builder (FROM scratch, no RUN) into local OCI layouts");
            Ok(Arc::new(ContainerBuild::new(local::LocalImageBuilder::new(
                settings.data_dir.join("oci"),
                Arc::clone(&shared.blobs),
            ))))
        }
        (Builder::Layout, AdapterKind::Azure(azure)) => {
            let registry = acr_registry(azure, shared)?;
            tracing::info!(registry = %registry.registry(), %why, "container-build uses the built-in builder (FROM scratch, no RUN), pushed to Azure Container Registry");
            Ok(Arc::new(ContainerBuild::new(registry)))
        }
        (Builder::AcrTasks, AdapterKind::Azure(azure)) => acr_tasks(azure, shared, &why),
        // Settings validation refuses acr-tasks without the Azure adapters.
        (Builder::AcrTasks, AdapterKind::Local) => Err(RegistryError::Adapter {
            consumer: NAME,
            reason: "BOSUN_CONTAINER_BUILDER=acr-tasks needs BOSUN_ADAPTERS=azure and BOSUN_ACR_REGISTRY".to_owned(),
        }),
    }
}

/// The Azure Container Registry of `BOSUN_ACR_REGISTRY`, with its credential.
fn acr_registry(azure: &AzureDevOpsSettings, shared: &Shared) -> Result<AzureContainerRegistry, RegistryError> {
    let acr = azure.acr.as_ref().ok_or(RegistryError::MissingSetting {
        consumer: NAME,
        settings: &["BOSUN_ACR_REGISTRY"],
        what: "the Azure Container Registry images are pushed to (contoso.azurecr.io), with a credential: \
               BOSUN_ACR_AUTH, BOSUN_ACR_USERNAME and BOSUN_ACR_PASSWORD, BOSUN_ACR_REFRESH_TOKEN or BOSUN_ACR_ENTRA_TOKEN",
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
        AcrCredential::Entra { identity, tenant } => AcrAuth::Entra {
            tokens: Arc::new(refreshing_token(NAME, *identity, ACR_SCOPE)?),
            tenant: tenant.clone(),
        },
    };
    let mut config = AzureContainerRegistryConfig::new(acr.registry.clone(), auth);
    config.endpoint = acr.endpoint.clone();
    AzureContainerRegistry::new(&config, Arc::clone(&shared.blobs)).map_err(|err| adapter_error(NAME, &err))
}

/// ACR Tasks over the registry of `BOSUN_ACR_REGISTRY`.
fn acr_tasks(azure: &AzureDevOpsSettings, shared: &Shared, why: &str) -> Result<Arc<dyn Consumer>, RegistryError> {
    let registry = acr_registry(azure, shared)?;
    // Settings validation reads the ARM settings with acr-tasks.
    let tasks = azure.acr.as_ref().and_then(|acr| acr.tasks.as_ref()).ok_or(RegistryError::MissingSetting {
        consumer: NAME,
        settings: &["BOSUN_ACR_SUBSCRIPTION", "BOSUN_ACR_RESOURCE_GROUP"],
        what: "the registry's place in Azure Resource Manager, where ACR Tasks runs",
    })?;
    let mut config = AcrTasksConfig::new(
        tasks.subscription.clone(),
        tasks.resource_group.clone(),
        tasks.registry_name.clone(),
    );
    config.arm_endpoint = tasks.arm_endpoint.clone();
    config.run_timeout = tasks.run_timeout;
    let tokens = Arc::new(refreshing_token(NAME, tasks.identity, ARM_SCOPE)?);
    let login_server = registry.registry().to_owned();
    let builder =
        AcrTasks::new(&config, tokens, registry, Arc::clone(&shared.blobs)).map_err(|err| adapter_error(NAME, &err))?;
    tracing::info!(
        registry = %login_server,
        resource_group = %tasks.resource_group,
        registry_name = %tasks.registry_name,
        %why,
        "container-build uses ACR Tasks"
    );
    Ok(Arc::new(ContainerBuild::new(builder)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Settings::from_sources(&map, &BTreeMap::new()).unwrap()
    }

    const AZURE: &[(&str, &str)] = &[
        ("BOSUN_ADAPTERS", "azure"),
        ("BOSUN_AZURE_DEVOPS_ORG_URL", "https://dev.azure.com/contoso"),
        ("BOSUN_AZURE_DEVOPS_PROJECT", "delivery"),
        ("BOSUN_AZURE_DEVOPS_PAT", "pat"),
        ("BOSUN_ACR_REGISTRY", "contoso.azurecr.io"),
        ("BOSUN_ACR_AUTH", "workload-identity"),
    ];

    fn try_settings(pairs: &[(&str, &str)]) -> Result<Settings, crate::runtime::config::ConfigError> {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Settings::from_sources(&map, &BTreeMap::new())
    }

    #[test]
    fn acr_tasks_reads_the_registrys_place_in_arm_and_takes_the_acr_identity() {
        let mut pairs = AZURE.to_vec();
        pairs.extend([
            ("BOSUN_CONTAINER_BUILDER", "acr-tasks"),
            ("BOSUN_ACR_SUBSCRIPTION", "4385cf00-2d3a-425a-832f-f4285b1c9dce"),
            ("BOSUN_ACR_RESOURCE_GROUP", "delivery-rg"),
        ]);
        let settings = try_settings(&pairs).unwrap();
        assert_eq!(settings.container.builder, ContainerBuilderChoice::AcrTasks);
        let AdapterKind::Azure(azure) = &settings.adapters else {
            panic!("azure adapters")
        };
        let tasks = azure.acr.as_ref().and_then(|acr| acr.tasks.clone()).unwrap();
        assert_eq!(tasks.registry_name, "contoso", "the login server's first label");
        assert_eq!(tasks.identity, crate::runtime::config::EntraIdentity::WorkloadIdentity);
        assert_eq!(tasks.run_timeout, std::time::Duration::from_secs(3600));
        assert_eq!(tasks.arm_endpoint, None);

        let without_tasks = try_settings(AZURE).unwrap();
        let AdapterKind::Azure(azure) = &without_tasks.adapters else {
            panic!("azure adapters")
        };
        assert_eq!(azure.acr.as_ref().and_then(|acr| acr.tasks.clone()), None);
    }

    #[test]
    fn bad_acr_tasks_settings_name_the_variable() {
        let base: Vec<(&str, &str)> = AZURE
            .iter()
            .copied()
            .chain([("BOSUN_CONTAINER_BUILDER", "acr-tasks")])
            .collect();
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = base.clone();
            pairs.extend_from_slice(extra);
            try_settings(&pairs)
                .err()
                .map(|err| err.to_string())
                .unwrap_or_default()
        };
        assert!(with(&[]).contains("BOSUN_ACR_SUBSCRIPTION"));
        let sub = ("BOSUN_ACR_SUBSCRIPTION", "4385cf00-2d3a-425a-832f-f4285b1c9dce");
        assert!(with(&[sub]).contains("BOSUN_ACR_RESOURCE_GROUP"));
        let group = ("BOSUN_ACR_RESOURCE_GROUP", "delivery-rg");
        assert!(with(&[("BOSUN_ACR_SUBSCRIPTION", "prod"), group]).contains("BOSUN_ACR_SUBSCRIPTION"));
        assert!(with(&[sub, group, ("BOSUN_ACR_REGISTRY_NAME", "my-registry")]).contains("BOSUN_ACR_REGISTRY_NAME"));
        assert!(with(&[sub, group, ("BOSUN_ACR_RUN_TIMEOUT_MS", "1000")]).contains("BOSUN_ACR_RUN_TIMEOUT_MS"));
        assert!(
            with(&[sub, group, ("BOSUN_ACR_ARM_ENDPOINT", "management.azure.com")]).contains("BOSUN_ACR_ARM_ENDPOINT")
        );
        assert!(with(&[sub, group, ("BOSUN_ACR_ARM_AUTH", "token")]).contains("BOSUN_ACR_ARM_AUTH"));
        let local = try_settings(&[("BOSUN_CONTAINER_BUILDER", "acr-tasks")]).unwrap_err();
        assert!(local.to_string().contains("BOSUN_ADAPTERS=azure"), "{local}");
    }

    /// A `buildah` that answers `--version` (and nothing else is asked of
    /// it at start).
    fn fake_buildah(dir: &std::path::Path) -> String {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join("buildah");
        std::fs::write(&path, "#!/bin/sh\necho 'buildah version 1.28.2 (image-spec 1.0.2-dev)'\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.to_str().unwrap().to_owned()
    }

    fn with_azure(extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        AZURE
            .iter()
            .chain(extra)
            .map(|(name, value)| (*name, (*value).to_owned()))
            .collect()
    }

    fn owned_settings(pairs: &[(&str, String)]) -> Settings {
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(name, value)| (*name, value.as_str())).collect();
        settings(&pairs)
    }

    #[test]
    fn the_local_builder_is_buildah_only_when_it_runs_and_has_a_registry() {
        let absent = "/nonexistent/buildah";
        let cases = [
            (vec![], "no push registry"),
            (
                vec![("BOSUN_CONTAINER_BUILDER", "layout")],
                "BOSUN_CONTAINER_BUILDER=layout",
            ),
            (
                vec![
                    ("BOSUN_CONTAINER_REGISTRY", "127.0.0.1:5000"),
                    ("BOSUN_BUILDAH_BINARY", absent),
                ],
                "buildah is not available",
            ),
        ];
        for (pairs, reason) in cases {
            let choice = choose_builder(&settings(&pairs)).unwrap();
            assert_eq!(choice.builder, Builder::Layout, "{pairs:?}");
            assert!(choice.why.contains(reason), "{pairs:?}: {}", choice.why);
        }
        let required = settings(&[
            ("BOSUN_CONTAINER_BUILDER", "buildah"),
            ("BOSUN_CONTAINER_REGISTRY", "127.0.0.1:5000"),
            ("BOSUN_BUILDAH_BINARY", absent),
        ]);
        let err = choose_builder(&required).unwrap_err();
        assert!(err.to_string().contains("BOSUN_CONTAINER_BUILDER=buildah"), "{err}");
        assert!(err.to_string().contains(absent), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let buildah = fake_buildah(dir.path());
        let runs = settings(&[
            ("BOSUN_CONTAINER_REGISTRY", "127.0.0.1:5000"),
            ("BOSUN_BUILDAH_BINARY", &buildah),
        ]);
        let choice = choose_builder(&runs).unwrap();
        assert!(
            matches!(&choice.builder, Builder::Buildah(version) if version.contains("1.28.2")),
            "{choice:?}"
        );
        assert!(choice.why.contains("auto"), "{}", choice.why);
    }

    #[test]
    fn on_azure_auto_takes_buildah_when_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let buildah = fake_buildah(dir.path());
        for builder in [None, Some("auto")] {
            let mut extra = vec![
                ("BOSUN_CONTAINER_REGISTRY", "contoso.azurecr.io"),
                ("BOSUN_BUILDAH_BINARY", buildah.as_str()),
            ];
            extra.extend(builder.map(|value| ("BOSUN_CONTAINER_BUILDER", value)));
            let choice = choose_builder(&owned_settings(&with_azure(&extra))).unwrap();
            assert!(matches!(choice.builder, Builder::Buildah(_)), "{builder:?}: {choice:?}");
        }
    }

    #[test]
    fn on_azure_auto_never_falls_back_to_the_built_in_builder() {
        let absent = "/nonexistent/buildah";
        let cases: [(&[(&str, &str)], &str); 4] = [
            (&[], "no push registry is set (BOSUN_CONTAINER_REGISTRY)"),
            (&[("BOSUN_CONTAINER_BUILDER", "auto")], "no push registry is set"),
            (
                &[
                    ("BOSUN_CONTAINER_REGISTRY", "contoso.azurecr.io"),
                    ("BOSUN_BUILDAH_BINARY", absent),
                ],
                absent,
            ),
            (
                &[
                    ("BOSUN_CONTAINER_BUILDER", "auto"),
                    ("BOSUN_CONTAINER_REGISTRY", "contoso.azurecr.io"),
                    ("BOSUN_BUILDAH_BINARY", absent),
                ],
                "buildah is not available",
            ),
        ];
        for (extra, why) in cases {
            let settings = owned_settings(&with_azure(extra));
            let err = choose_builder(&settings).unwrap_err().to_string();
            assert!(err.contains(why), "{extra:?}: {err}");
            for named in [
                "BOSUN_CONTAINER_BUILDER",
                "acr-tasks",
                "buildah",
                "layout",
                "FROM scratch",
            ] {
                assert!(err.contains(named), "{extra:?}: names {named}: {err}");
            }
            // And the consumer is not built: bosun does not start.
            let dir = tempfile::tempdir().unwrap();
            let mut settings = settings;
            settings.data_dir = dir.path().to_owned();
            let built = super::super::build_one(NAME, &settings);
            assert!(built.is_err(), "{extra:?}: container-build was built");
        }
    }

    #[test]
    fn on_azure_an_explicit_layout_still_builds_and_pushes_to_acr() {
        let settings = owned_settings(&with_azure(&[
            ("BOSUN_CONTAINER_BUILDER", "layout"),
            ("BOSUN_BUILDAH_BINARY", "/nonexistent/buildah"),
        ]));
        let choice = choose_builder(&settings).unwrap();
        assert_eq!(choice.builder, Builder::Layout);
        assert_eq!(choice.why, "BOSUN_CONTAINER_BUILDER=layout");
        let dir = tempfile::tempdir().unwrap();
        let mut settings = owned_settings(&with_azure(&[
            ("BOSUN_CONTAINER_BUILDER", "layout"),
            ("BOSUN_ACR_AUTH", "default"),
        ]));
        settings.data_dir = dir.path().to_owned();
        let built = super::super::build_one(NAME, &settings);
        assert!(built.is_ok(), "{:?}", built.err());
    }

    #[test]
    fn on_azure_acr_tasks_is_taken_as_set() {
        let settings = owned_settings(&with_azure(&[
            ("BOSUN_CONTAINER_BUILDER", "acr-tasks"),
            ("BOSUN_ACR_SUBSCRIPTION", "4385cf00-2d3a-425a-832f-f4285b1c9dce"),
            ("BOSUN_ACR_RESOURCE_GROUP", "delivery-rg"),
        ]));
        let choice = choose_builder(&settings).unwrap();
        assert_eq!(choice.builder, Builder::AcrTasks);
        assert_eq!(choice.why, "BOSUN_CONTAINER_BUILDER=acr-tasks");
    }
}
