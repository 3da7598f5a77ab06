//! What the Azure adapter tests share: `azure_identity`'s own
//! `WorkloadIdentityCredential` against the Entra double.
//!
//! `azure_identity` 1.0 refuses an authority host that is not https
//! (`get_authority_host`), so the credential is given a custom cloud
//! (`https://login.entra.test`) and a transport that sends its requests to
//! the double's loopback port over http: every other line of the
//! credential (reading the token file, the form, parsing the answer,
//! caching) is Microsoft's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use azure_core::cloud::{CloudConfiguration, CustomConfiguration};
use azure_core::http::{AsyncRawResponse, ClientOptions, HttpClient, Request, Transport};
use azure_identity::{ClientAssertionCredentialOptions, WorkloadIdentityCredential, WorkloadIdentityCredentialOptions};
use bosun_azure_doubles::entra::{self, EntraDouble, FederatedCredential, FederatedToken};
use bosun_consumers::delivery::azure::credential::{CredentialError, RefreshingToken, TokenCredential};

/// The Entra tenant of the tests' identity.
pub const TENANT_ID: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
/// The application (client) id of the tests' identity.
pub const CLIENT_ID: &str = "6c3c2b4e-7a8d-4c1e-9f0a-1b2c3d4e5f60";
/// The issuer of the projected service-account token.
pub const ISSUER: &str = "https://oidc.prod-aks.azure.com/cluster/";
/// The service account the federated credential trusts.
pub const SUBJECT: &str = "system:serviceaccount:bosun:bosun";

/// Sends the credential's https requests to the Entra double over http.
#[derive(Debug)]
struct Loopback {
    port: u16,
    inner: Arc<dyn HttpClient>,
}

#[async_trait]
impl HttpClient for Loopback {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
        let mut request = request.clone();
        let url = request.url_mut();
        assert_eq!(url.host_str(), Some("login.entra.test"), "only the authority is asked");
        url.set_scheme("http").unwrap();
        url.set_host(Some("127.0.0.1")).unwrap();
        url.set_port(Some(self.port)).unwrap();
        self.inner.execute_request(&request).await
    }
}

/// `azure_identity`'s client options for the Entra double: a custom cloud
/// whose authority host is `https://login.entra.test`, and the
/// [`Loopback`] transport.
pub fn entra_options(entra: &EntraDouble) -> ClientOptions {
    let mut cloud = CustomConfiguration::default();
    cloud.authority_host = "https://login.entra.test".into();
    ClientOptions {
        transport: Some(Transport::new(Arc::new(Loopback {
            port: entra.running().addr().port(),
            inner: azure_core::http::new_http_client(None),
        }))),
        cloud: Some(Arc::new(CloudConfiguration::Custom(cloud))),
        ..ClientOptions::default()
    }
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
