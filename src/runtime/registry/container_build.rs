//! container-build: builds OCI images and pushes them to a registry.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::container_build::azure::{
    ACR_SCOPE, AcrAuth, AzureContainerRegistry, AzureContainerRegistryConfig,
};
use bosun_consumers::container_build::{ContainerBuild, NAME, local};

use super::{Registration, RegistryError, Shared, adapter_error, refreshing_token};
use crate::runtime::config::{AcrCredential, AdapterKind, Settings};

pub(super) const REGISTRATION: Registration = Registration {
    name: NAME,
    build,
    keeps_blobs: true,
};

fn build(settings: &Settings, shared: &Shared) -> Result<Arc<dyn Consumer>, RegistryError> {
    let azure = match &settings.adapters {
        AdapterKind::Local => {
            return Ok(Arc::new(ContainerBuild::new(local::LocalImageBuilder::new(
                settings.data_dir.join("oci"),
                Arc::clone(&shared.blobs),
            ))));
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
