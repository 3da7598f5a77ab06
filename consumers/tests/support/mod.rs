//! What the Azure adapter tests share: `azure_identity`'s own
//! `WorkloadIdentityCredential` against the Entra double, and bosun's ACR
//! Tasks adapter assembled against the ACR double.
//!
//! The credential reaches the double through the client options of
//! `bosun_azure_doubles::entra::identity` (an https authority name, a
//! loopback transport).

#![allow(dead_code)] // each test binary uses its part

use std::path::{Path, PathBuf};
use std::sync::Arc;

use azure_core::http::ClientOptions;
use azure_identity::{ClientAssertionCredentialOptions, WorkloadIdentityCredential, WorkloadIdentityCredentialOptions};
use bosun_azure_doubles::acr::AcrDouble;
use bosun_azure_doubles::entra::{self, EntraDouble, FederatedCredential, FederatedToken};
use bosun_consumers::container_build::acr_tasks::{ARM_SCOPE, AcrTasks, AcrTasksConfig};
use bosun_consumers::container_build::azure::{
    ACR_SCOPE, AcrAuth, AzureContainerRegistry, AzureContainerRegistryConfig,
};
use bosun_consumers::delivery::azure::credential::{CredentialError, RefreshingToken, TokenCredential};
use bosun_consumers::delivery::blob::BlobStore;

/// The Entra tenant of the tests' identity.
pub const TENANT_ID: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
/// The application (client) id of the tests' identity.
pub const CLIENT_ID: &str = "6c3c2b4e-7a8d-4c1e-9f0a-1b2c3d4e5f60";
/// The issuer of the projected service-account token.
pub const ISSUER: &str = "https://oidc.prod-aks.azure.com/cluster/";
/// The service account the federated credential trusts.
pub const SUBJECT: &str = "system:serviceaccount:bosun:bosun";

/// `azure_identity`'s client options for the Entra double
/// ([`bosun_azure_doubles::entra::identity`]).
pub fn entra_options(entra: &EntraDouble) -> ClientOptions {
    entra::identity::client_options(entra)
}

/// Registers the tests' workload identity with `entra` (a federated
/// credential for [`ISSUER`] and [`SUBJECT`]) and writes the projected
/// service-account token into `dir`, as the webhook does; returns its path.
pub fn workload_identity(entra: &EntraDouble, dir: &Path) -> PathBuf {
    entra.add_federated_credential(
        TENANT_ID,
        CLIENT_ID,
        FederatedCredential {
            issuer: ISSUER.into(),
            subject: SUBJECT.into(),
            audience: entra::TOKEN_EXCHANGE_AUDIENCE.into(),
        },
    );
    let token_file = dir.join("azure-identity-token");
    std::fs::write(&token_file, FederatedToken::new(ISSUER, SUBJECT).jwt()).unwrap();
    token_file
}

/// `azure_identity`'s `WorkloadIdentityCredential` for the identity
/// [`workload_identity`] registered, with `options` (from [`entra_options`]).
fn workload_identity_with(options: ClientOptions, token_file: &Path) -> azure_core::Result<Arc<dyn TokenCredential>> {
    let credential = WorkloadIdentityCredential::new(Some(WorkloadIdentityCredentialOptions {
        credential_options: ClientAssertionCredentialOptions {
            client_options: options,
        },
        client_id: Some(CLIENT_ID.into()),
        tenant_id: Some(TENANT_ID.into()),
        token_file_path: Some(token_file.to_owned()),
    }))?;
    Ok(credential)
}

/// Tokens for `scope` as the runtime makes them
/// (`RefreshingToken::from_identity`): from a workload identity credential
/// made again from the same settings after a refused token.
pub fn refreshing_token(entra: &EntraDouble, token_file: &Path, scope: &str) -> RefreshingToken {
    let options = entra_options(entra);
    let token_file = token_file.to_owned();
    RefreshingToken::rebuilding(
        move || {
            workload_identity_with(options.clone(), &token_file)
                .map_err(|err| CredentialError(format!("workload identity: {err}")))
        },
        scope,
    )
    .unwrap()
}

/// The ACR double's subscription and resource group in the tests.
pub const ACR_SUBSCRIPTION: &str = "4385cf00-2d3a-425a-832f-f4285b1c9dce";
/// The registry's login server (`contoso` in `delivery-rg`).
pub const ACR_REGISTRY: &str = "contoso.azurecr.io";

/// bosun's ACR Tasks adapter against `acr`, as the runtime assembles it:
/// the registry at the double's login server and ARM at the double's, each
/// with workload-identity tokens (from `token_file`) for its scope.
pub fn acr_tasks(entra: &EntraDouble, token_file: &Path, acr: &AcrDouble, blobs: Arc<dyn BlobStore>) -> AcrTasks {
    let mut registry_config = AzureContainerRegistryConfig::new(
        ACR_REGISTRY,
        AcrAuth::Entra {
            tokens: Arc::new(refreshing_token(entra, token_file, ACR_SCOPE)),
            tenant: Some(TENANT_ID.into()),
        },
    );
    registry_config.endpoint = Some(acr.registry_url());
    let registry = AzureContainerRegistry::new(&registry_config, Arc::clone(&blobs)).unwrap();
    let mut tasks_config = AcrTasksConfig::new(ACR_SUBSCRIPTION, "delivery-rg", "contoso");
    tasks_config.arm_endpoint = Some(acr.base_url());
    AcrTasks::new(
        &tasks_config,
        Arc::new(refreshing_token(entra, token_file, ARM_SCOPE)),
        registry,
        blobs,
    )
    .unwrap()
}
