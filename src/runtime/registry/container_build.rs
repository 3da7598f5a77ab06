//! container-build: builds OCI images and pushes them to a registry.
//!
//! Local adapters: buildah ([`buildah::BuildahBuilder`]) when
//! `BOSUN_CONTAINER_BUILDER` allows it, the executable runs and a push
//! registry is set; else the built-in builder into the local OCI layouts
//! ([`local::LocalImageBuilder`]). Azure: Azure Container Registry, the
//! image built by bosun and pushed over the OCI distribution API, or, with
//! `BOSUN_CONTAINER_BUILDER=acr-tasks`, built by the registry itself (ACR
//! Tasks, [`AcrTasks`]).

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
use crate::runtime::config::{AcrCredential, AdapterKind, ContainerBuilderChoice, Settings};

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

/// Which local builder the settings and the machine give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalBuilder {
    /// buildah, with its version line.
    Buildah(String),
    /// The built-in builder into OCI layouts, and why not buildah.
    Layout(String),
}

/// Decides the local builder: buildah when `BOSUN_CONTAINER_BUILDER`
/// allows it, a push registry is set and the executable runs.
pub fn local_builder(settings: &Settings) -> Result<LocalBuilder, RegistryError> {
    let container = &settings.container;
    if container.builder == ContainerBuilderChoice::Layout {
        return Ok(LocalBuilder::Layout("BOSUN_CONTAINER_BUILDER=layout".to_owned()));
    }
    if container.registry.is_none() {
        return Ok(LocalBuilder::Layout(
            "no push registry is set (BOSUN_CONTAINER_REGISTRY)".to_owned(),
        ));
    }
    match BuildahBuilder::detect(&container.buildah_binary) {
        Ok(version) => Ok(LocalBuilder::Buildah(version.0)),
        Err(reason) if container.builder == ContainerBuilderChoice::Buildah => Err(RegistryError::Adapter {
            consumer: NAME,
            reason: format!(
                "BOSUN_CONTAINER_BUILDER=buildah, but {reason} (install Debian's buildah, or set BOSUN_BUILDAH_BINARY)"
            ),
        }),
        Err(reason) => Ok(LocalBuilder::Layout(format!("buildah is not available: {reason}"))),
    }
}

fn build(settings: &Settings, shared: &Shared) -> Result<Arc<dyn Consumer>, RegistryError> {
    let azure = match &settings.adapters {
        AdapterKind::Local => {
            let container = &settings.container;
            return match (local_builder(settings)?, &container.registry) {
                (LocalBuilder::Buildah(version), Some(registry)) => {
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
                    let builder = BuildahBuilder::new(config, Arc::clone(&shared.blobs))
                        .map_err(|err| adapter_error(NAME, &err))?;
                    tracing::info!(%version, %registry, "container-build uses buildah");
                    Ok(Arc::new(ContainerBuild::new(builder)))
                }
                (decided, _) => {
                    if let LocalBuilder::Layout(reason) = &decided {
                        tracing::info!(%reason, "container-build uses the built-in builder (FROM scratch, no RUN) into local OCI layouts");
                    }
                    Ok(Arc::new(ContainerBuild::new(local::LocalImageBuilder::new(
                        settings.data_dir.join("oci"),
                        Arc::clone(&shared.blobs),
                    ))))
                }
            };
        }
        AdapterKind::Azure(azure) => azure,
    };
    let acr = azure.acr.as_ref().ok_or(RegistryError::MissingSetting {
        consumer: NAME,
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
        AcrCredential::Entra { identity, tenant } => AcrAuth::Entra {
            tokens: Arc::new(refreshing_token(NAME, *identity, ACR_SCOPE)?),
            tenant: tenant.clone(),
        },
    };
    let config = AzureContainerRegistryConfig::new(acr.registry.clone(), auth);
    let registry =
        AzureContainerRegistry::new(&config, Arc::clone(&shared.blobs)).map_err(|err| adapter_error(NAME, &err))?;
    let Some(tasks) = &acr.tasks else {
        return Ok(Arc::new(ContainerBuild::new(registry)));
    };
    let mut config = AcrTasksConfig::new(
        tasks.subscription.clone(),
        tasks.resource_group.clone(),
        tasks.registry_name.clone(),
    );
    config.arm_endpoint = tasks.arm_endpoint.clone();
    config.run_timeout = tasks.run_timeout;
    let tokens = Arc::new(refreshing_token(NAME, tasks.identity, ARM_SCOPE)?);
    let builder =
        AcrTasks::new(&config, tokens, registry, Arc::clone(&shared.blobs)).map_err(|err| adapter_error(NAME, &err))?;
    tracing::info!(
        registry = %acr.registry,
        resource_group = %tasks.resource_group,
        registry_name = %tasks.registry_name,
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
            match local_builder(&settings(&pairs)).unwrap() {
                LocalBuilder::Layout(why) => assert!(why.contains(reason), "{pairs:?}: {why}"),
                other => panic!("{pairs:?}: expected the built-in builder, got {other:?}"),
            }
        }
        let required = settings(&[
            ("BOSUN_CONTAINER_BUILDER", "buildah"),
            ("BOSUN_CONTAINER_REGISTRY", "127.0.0.1:5000"),
            ("BOSUN_BUILDAH_BINARY", absent),
        ]);
        let err = local_builder(&required).unwrap_err();
        assert!(err.to_string().contains("BOSUN_CONTAINER_BUILDER=buildah"), "{err}");
        assert!(err.to_string().contains(absent), "{err}");
    }
}
