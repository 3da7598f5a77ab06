//! `azure_identity`'s client options for the Entra double, for tests that
//! run Microsoft's own credentials in-process against it.
//!
//! `azure_identity` 1.0 refuses an authority host that is not https
//! (`get_authority_host`), so the options name a custom cloud whose
//! authority is `https://login.entra.test`, with a transport that sends
//! those requests to the double's loopback port over http: every other
//! line of the credential (reading the token file, the form, parsing the
//! answer, caching) is Microsoft's. A process started by a test trusts the
//! double over TLS instead ([`super::EntraDouble::start_tls`]).

use std::sync::Arc;

use async_trait::async_trait;
use azure_core::cloud::{CloudConfiguration, CustomConfiguration};
use azure_core::http::{AsyncRawResponse, ClientOptions, HttpClient, Request, Transport};

use super::EntraDouble;

/// The authority host the options name.
pub const AUTHORITY_HOST: &str = "https://login.entra.test";

/// Sends the credential's requests for [`AUTHORITY_HOST`] to the double's
/// port over http.
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
        if url.host_str() != Some("login.entra.test") {
            return Err(azure_core::Error::with_message(
                azure_core::error::ErrorKind::Other,
                format!("only the authority is asked through the Entra double, not {url}"),
            ));
        }
        let moved = url.set_scheme("http").is_ok()
            && url.set_host(Some("127.0.0.1")).is_ok()
            && url.set_port(Some(self.port)).is_ok();
        if !moved {
            return Err(azure_core::Error::with_message(
                azure_core::error::ErrorKind::Other,
                "cannot point the request at the Entra double",
            ));
        }
        self.inner.execute_request(&request).await
    }
}

/// `azure_identity`'s client options for `entra`: the custom cloud of
/// [`AUTHORITY_HOST`] and the loopback transport.
pub fn client_options(entra: &EntraDouble) -> ClientOptions {
    let mut cloud = CustomConfiguration::default();
    cloud.authority_host = AUTHORITY_HOST.into();
    ClientOptions {
        transport: Some(Transport::new(Arc::new(Loopback {
            port: entra.running().addr().port(),
            inner: azure_core::http::new_http_client(None),
        }))),
        cloud: Some(Arc::new(CloudConfiguration::Custom(cloud))),
        ..ClientOptions::default()
    }
}
