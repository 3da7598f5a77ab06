//! container-build: builds OCI images and pushes them to a registry.
//!
//! Local adapters: buildah ([`buildah::BuildahBuilder`]) when
//! `BOSUN_CONTAINER_BUILDER` allows it, the executable runs and a push
//! registry is set; else the built-in builder into the local OCI layouts
//! ([`local::LocalImageBuilder`]). Azure: Azure Container Registry.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::container_build::azure::{
    ACR_SCOPE, AcrAuth, AzureContainerRegistry, AzureContainerRegistryConfig,
};
use bosun_consumers::container_build::buildah::{BuildahBuilder, BuildahConfig};
use bosun_consumers::container_build::{ContainerBuild, NAME, local};

use super::{Registration, RegistryError, Shared, adapter_error, refreshing_token};
use crate::runtime::config::{AcrCredential, AdapterKind, ContainerBuilderChoice, Settings};

pub(super) const REGISTRATION: Registration = Registration {
    name: NAME,
    build,
    keeps_blobs: true,
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
    Ok(Arc::new(ContainerBuild::new(registry)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Settings::from_sources(&map, &BTreeMap::new()).unwrap()
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
