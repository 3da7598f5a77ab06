//! [`AzureBlobStore`]: the blob store on Azure Blob Storage (or Azurite),
//! through the official `azure_storage_blob` 1.x crate.
//!
//! [`AzureBlobSettings`] names the Blob service endpoint and how to
//! authenticate ([`AzureBlobAuth`]):
//!
//! - **Entra ID** in production ([`EntraIdCredential`], from
//!   [`crate::delivery::azure::credential`]): AKS workload
//!   identity, a managed identity, the developer's Azure CLI / azd sign-in
//!   (all from `azure_identity`), or the default chain that tries them in
//!   that order. Tokens are sent by `azure_core`'s bearer policy, which
//!   refuses anything but `https`;
//! - **a shared key** (Azurite, teams that use account keys), signed by this
//!   crate's `SharedKeyPolicy` since the 1.x crate has none;
//! - **a SAS token**, appended to every request URL.
//!
//! HTTP goes through the workspace's `reqwest` (native TLS); the SDK's own
//! retries are kept short ([`AzureBlobSettings::max_retries`]) because the
//! consumer host retries whole messages with backoff.
//!
//! Blob names keep their `/` separators in the URL path (the SDK's
//! `blob_client(name)` would send them as `%2F`). Secrets never appear in
//! `Debug` output or in error messages.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use azure_core::Bytes;
use azure_core::error::ErrorKind;
use azure_core::http::policies::Policy;
use azure_core::http::policies::auth::BearerTokenAuthorizationPolicy;
use azure_core::http::{ClientOptions, ExponentialRetryOptions, RetryOptions, StatusCode, Transport, Url};
use azure_storage_blob::models::{BlobClientUploadOptions, StorageErrorCode};
use azure_storage_blob::{
    BlobClient, BlobClientOptions, BlobContainerClient, BlobContainerClientOptions, StorageError,
};
use bosun_contracts::messages::BlobRef;

use super::shared_key::SharedKeyPolicy;
use super::{BlobError, BlobStore, check_name, reference, verify};
use crate::delivery::azure::credential::{EntraIdCredential, entra_id_credential};
use crate::delivery::azure::error_chain;
use crate::delivery::azure::http::{self, Redirects, Timeout};
use crate::delivery::azure::retry::Disposition;

/// The OAuth scope of Azure Storage.
const STORAGE_SCOPE: &str = "https://storage.azure.com/.default";

/// Longest wait between two reads of an answer.
pub const BLOB_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Default number of retries the SDK makes inside one operation.
pub const DEFAULT_MAX_RETRIES: u32 = 3;

/// How bosun authenticates to Blob Storage. `Debug` never shows a secret.
#[derive(Clone)]
pub enum AzureBlobAuth {
    /// An Entra ID bearer token (production).
    EntraId(EntraIdCredential),
    /// The storage account's shared key (Azurite, or teams that use keys).
    SharedKey {
        /// The account name; `None` takes it from the endpoint: the first
        /// label of `<account>.blob.<suffix>`, else the first path segment
        /// (Azurite's `http://127.0.0.1:10000/devstoreaccount1`).
        account: Option<String>,
        /// The base64 account key.
        key: String,
    },
    /// A SAS token (`sv=...&sig=...`, with or without the leading `?`),
    /// appended to every request.
    Sas(String),
}

impl fmt::Debug for AzureBlobAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EntraId(credential) => f.debug_tuple("EntraId").field(credential).finish(),
            Self::SharedKey { account, .. } => f
                .debug_struct("SharedKey")
                .field("account", account)
                .field("key", &"<redacted>")
                .finish(),
            Self::Sas(_) => f.write_str("Sas(<redacted>)"),
        }
    }
}

/// Where Blob Storage is and how to reach it.
#[derive(Debug, Clone)]
pub struct AzureBlobSettings {
    /// The Blob service endpoint: `https://<account>.blob.core.windows.net`,
    /// or path-style for Azurite: `http://127.0.0.1:10000/devstoreaccount1`.
    pub account_url: String,
    /// How to authenticate.
    pub auth: AzureBlobAuth,
    /// Retries the SDK makes inside one operation (exponential backoff from
    /// 200 ms, at most 10 s in all) before the error reaches the host,
    /// which retries the whole message.
    pub max_retries: u32,
}

impl AzureBlobSettings {
    /// Settings for `account_url` with `auth` and the default retries.
    pub fn new(account_url: impl Into<String>, auth: AzureBlobAuth) -> Self {
        Self {
            account_url: account_url.into(),
            auth,
            max_retries: DEFAULT_MAX_RETRIES,
        }
    }

    /// Reads an Azure Storage connection string
    /// (`DefaultEndpointsProtocol=https;AccountName=...;AccountKey=...;EndpointSuffix=core.windows.net`,
    /// or with `BlobEndpoint=...` and/or `SharedAccessSignature=...`;
    /// `UseDevelopmentStorage=true` means Azurite on its default port).
    pub fn from_connection_string(connection_string: &str) -> Result<Self, AzureBlobConfigError> {
        let mut protocol = "https".to_owned();
        let mut account = None;
        let mut key = None;
        let mut sas = None;
        let mut endpoint = None;
        let mut suffix = "core.windows.net".to_owned();
        for part in connection_string
            .split(';')
            .map(str::trim)
            .filter(|part| !part.is_empty())
        {
            let Some((name, value)) = part.split_once('=') else {
                return Err(AzureBlobConfigError(
                    "the connection string has a part without `=`".to_owned(),
                ));
            };
            match name.trim().to_ascii_lowercase().as_str() {
                "defaultendpointsprotocol" => protocol = value.to_owned(),
                "accountname" => account = Some(value.to_owned()),
                "accountkey" => key = Some(value.to_owned()),
                "sharedaccesssignature" => sas = Some(value.to_owned()),
                "blobendpoint" => endpoint = Some(value.to_owned()),
                "endpointsuffix" => suffix = value.to_owned(),
                "usedevelopmentstorage" if value.eq_ignore_ascii_case("true") => {
                    account = Some(AZURITE_ACCOUNT.to_owned());
                    key = Some(AZURITE_KEY.to_owned());
                    endpoint = Some(format!("http://127.0.0.1:10000/{AZURITE_ACCOUNT}"));
                }
                _ => {}
            }
        }
        let account_url = match (endpoint, &account) {
            (Some(endpoint), _) => endpoint,
            (None, Some(account)) => format!("{protocol}://{account}.blob.{suffix}"),
            (None, None) => {
                return Err(AzureBlobConfigError(
                    "the connection string has neither BlobEndpoint nor AccountName".to_owned(),
                ));
            }
        };
        let auth = match (key, sas) {
            (Some(key), _) => AzureBlobAuth::SharedKey { account, key },
            (None, Some(sas)) => AzureBlobAuth::Sas(sas),
            (None, None) => AzureBlobAuth::EntraId(EntraIdCredential::Default),
        };
        Ok(Self::new(account_url, auth))
    }
}

/// Azurite's well-known development account.
const AZURITE_ACCOUNT: &str = "devstoreaccount1";
/// Azurite's published development key (not a secret).
const AZURITE_KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Blob Storage settings that cannot work; the message names the problem
/// and never repeats a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Azure Blob Storage settings: {0}")]
pub struct AzureBlobConfigError(pub String);

/// Blobs in Azure Blob Storage (or Azurite). `Debug` shows the endpoint
/// only.
#[derive(Clone)]
pub struct AzureBlobStore {
    /// The endpoint, without query and without a trailing `/`.
    account_url: Url,
    /// The SAS query, when authenticating with a SAS.
    sas: Option<String>,
    /// Transport, retry and authorization policy shared by every client.
    options: ClientOptions,
    /// Secrets to scrub from error messages.
    secrets: Vec<String>,
}

impl fmt::Debug for AzureBlobStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AzureBlobStore")
            .field("account_url", &self.account_url.as_str())
            .field("sas", &self.sas.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl AzureBlobStore {
    /// A store with its own HTTP client, built by bosun's one HTTP policy
    /// ([`crate::delivery::azure::http`]): native TLS, 10 s connect
    /// timeout, [`BLOB_READ_TIMEOUT`] between reads, no redirects.
    pub fn new(settings: AzureBlobSettings) -> Result<Self, AzureBlobConfigError> {
        let client = http::client(
            Timeout::BetweenReads(BLOB_READ_TIMEOUT),
            reqwest::header::HeaderMap::new(),
            Redirects::Refuse,
        )
        .map_err(|err| AzureBlobConfigError(format!("cannot build the HTTP client: {err}")))?;
        Self::with_http_client(settings, client)
    }

    /// A store sending through `client` (a proxy, extra root certificates,
    /// other timeouts). The client must not decompress responses: `get`
    /// checks the bytes as stored.
    pub fn with_http_client(
        settings: AzureBlobSettings,
        client: reqwest::Client,
    ) -> Result<Self, AzureBlobConfigError> {
        let mut account_url = Url::parse(settings.account_url.trim())
            .map_err(|err| AzureBlobConfigError(format!("account URL `{}`: {err}", settings.account_url)))?;
        if !matches!(account_url.scheme(), "https" | "http") || account_url.cannot_be_a_base() {
            return Err(AzureBlobConfigError(format!(
                "account URL `{}` is not an http(s) URL",
                settings.account_url
            )));
        }
        if account_url.query().is_some() {
            return Err(AzureBlobConfigError(
                "put the SAS token in the SAS setting, not in the account URL".to_owned(),
            ));
        }
        let trimmed = account_url.path().trim_end_matches('/').to_owned();
        account_url.set_path(&trimmed);

        let mut secrets = Vec::new();
        let mut sas = None;
        let policy: Option<Arc<dyn Policy>> = match settings.auth {
            AzureBlobAuth::EntraId(credential) => {
                if account_url.scheme() != "https" {
                    return Err(AzureBlobConfigError(format!(
                        "Entra ID tokens are only sent over https, and the account URL `{account_url}` is not"
                    )));
                }
                Some(Arc::new(BearerTokenAuthorizationPolicy::new(
                    entra_id_credential(credential).map_err(|err| AzureBlobConfigError(err.0))?,
                    [STORAGE_SCOPE],
                )))
            }
            AzureBlobAuth::SharedKey { account, key } => {
                let account = match account.filter(|account| !account.is_empty()) {
                    Some(account) => account,
                    None => account_name(&account_url).ok_or_else(|| {
                        AzureBlobConfigError(format!(
                            "cannot tell the storage account from `{account_url}`; set the account name"
                        ))
                    })?,
                };
                let policy = SharedKeyPolicy::new(&account, &key).map_err(AzureBlobConfigError)?;
                secrets.push(key);
                Some(Arc::new(policy))
            }
            AzureBlobAuth::Sas(token) => {
                let token = token.trim().trim_start_matches('?').to_owned();
                if token.is_empty() || !token.contains("sig=") {
                    return Err(AzureBlobConfigError("the SAS token has no `sig=`".to_owned()));
                }
                secrets.push(token.clone());
                sas = Some(token);
                None
            }
        };

        // The span first, so the authorization policy signs what is sent.
        let trace: Arc<dyn Policy> = Arc::new(super::trace::TracePolicy);
        let options = ClientOptions {
            per_try_policies: std::iter::once(trace).chain(policy).collect(),
            retry: RetryOptions::exponential(ExponentialRetryOptions {
                initial_delay: azure_core::time::Duration::milliseconds(200),
                max_retries: settings.max_retries,
                max_total_elapsed: azure_core::time::Duration::seconds(10),
                max_delay: azure_core::time::Duration::seconds(5),
            }),
            transport: Some(Transport::new(Arc::new(client))),
            ..ClientOptions::default()
        };
        Ok(Self {
            account_url,
            sas,
            options,
            secrets,
        })
    }

    /// The Blob service endpoint this store talks to.
    pub fn account_url(&self) -> &str {
        self.account_url.as_str()
    }

    fn url(&self, container: &str, key: Option<&str>) -> Result<Url, BlobError> {
        let mut url = self.account_url.clone();
        {
            let mut segments = url
                .path_segments_mut()
                .map_err(|_| BlobError::InvalidName(format!("`{}` cannot take a path", self.account_url)))?;
            segments.pop_if_empty().push(container);
            if let Some(key) = key {
                segments.extend(key.split('/'));
            }
        }
        if let Some(sas) = &self.sas {
            url.set_query(Some(sas));
        }
        Ok(url)
    }

    fn blob_client(&self, container: &str, key: &str) -> Result<BlobClient, BlobError> {
        let options = BlobClientOptions {
            client_options: self.options.clone(),
            ..BlobClientOptions::default()
        };
        BlobClient::new(self.url(container, Some(key))?, None, Some(options)).map_err(|err| self.error(err))
    }

    fn container_client(&self, container: &str) -> Result<BlobContainerClient, BlobError> {
        let options = BlobContainerClientOptions {
            client_options: self.options.clone(),
            ..BlobContainerClientOptions::default()
        };
        BlobContainerClient::new(self.url(container, None)?, None, Some(options)).map_err(|err| self.error(err))
    }

    /// Creates `container`; one that already exists is fine.
    async fn create_container(&self, container: &str) -> Result<(), BlobError> {
        match self.container_client(container)?.create(None).await {
            Ok(_) => Ok(()),
            Err(err) if err.http_status() == Some(StatusCode::Conflict) => Ok(()),
            Err(err) => Err(self.error(err)),
        }
    }

    async fn upload(&self, client: &BlobClient, content: &Bytes, content_type: &str) -> azure_core::Result<()> {
        let options = BlobClientUploadOptions {
            blob_content_type: Some(content_type.to_owned()),
            ..BlobClientUploadOptions::default()
        };
        client.upload(content.clone().into(), Some(options)).await.map(|_| ())
    }

    /// Turns an SDK error into a [`BlobError`], without secrets.
    fn error(&self, err: azure_core::Error) -> BlobError {
        let status = err.http_status();
        let message = match (status, StorageError::try_from(err)) {
            (Some(_), Ok(storage)) => {
                let mut message = format!("HTTP {}", u16::from(storage.status_code));
                if let Some(code) = &storage.error_code {
                    message.push(' ');
                    message.push_str(code.as_ref());
                }
                if let Some(detail) = storage
                    .message
                    .as_deref()
                    .or(storage.authentication_error_detail.as_deref())
                    .and_then(|text| text.lines().next())
                {
                    message.push_str(": ");
                    message.push_str(detail);
                }
                message
            }
            (_, Ok(storage)) => storage.to_string(),
            (_, Err(err)) => error_chain(&err),
        };
        let message = self.redact(message);
        // Blob errors carry no Retry-After: the SDK's own retry policy has
        // already waited; what is left is transient or not.
        match status.map(|status| Disposition::of_status(u16::from(status), None)) {
            Some(Disposition::Permanent) => BlobError::Denied(message),
            // The redacted text, not the SDK error: that may carry a SAS.
            _ => BlobError::Unavailable(message.into()),
        }
    }

    fn redact(&self, mut message: String) -> String {
        for secret in &self.secrets {
            if !secret.is_empty() {
                message = message.replace(secret.as_str(), "<redacted>");
            }
        }
        // Any other signature that found its way into a URL.
        let mut from = 0;
        while let Some(start) = message[from..].find("sig=").map(|at| from + at + 4) {
            let end = message[start..]
                .find(['&', ')', ' ', '"', '\''])
                .map_or(message.len(), |at| start + at);
            message.replace_range(start..end, "<redacted>");
            from = start + "<redacted>".len();
        }
        message
    }
}

/// Whether the error says the blob (or its container) is not there.
fn is_not_found(err: &azure_core::Error) -> bool {
    err.http_status() == Some(StatusCode::NotFound)
}

/// Whether the error says the container is not there.
fn is_container_not_found(err: &azure_core::Error) -> bool {
    match err.kind() {
        ErrorKind::HttpResponse {
            status: StatusCode::NotFound,
            error_code: Some(code),
            ..
        } => code == StorageErrorCode::ContainerNotFound.as_ref(),
        _ => false,
    }
}

/// The storage account named by an endpoint: `<account>.blob.<suffix>`,
/// else the first path segment (path-style endpoints such as Azurite's).
fn account_name(url: &Url) -> Option<String> {
    if let Some(host) = url.host_str()
        && let Some((account, rest)) = host.split_once('.')
        && rest.starts_with("blob.")
    {
        return Some(account.to_owned());
    }
    url.path_segments()?
        .find(|segment| !segment.is_empty())
        .map(str::to_owned)
}

#[async_trait]
impl BlobStore for AzureBlobStore {
    async fn put(
        &self,
        container: &str,
        key: &str,
        content: Vec<u8>,
        content_type: &str,
    ) -> Result<BlobRef, BlobError> {
        check_name(container, key)?;
        let reference = reference(container, key, &content, content_type);
        let client = self.blob_client(container, key)?;
        let content = Bytes::from(content);
        match self.upload(&client, &content, content_type).await {
            Ok(()) => {}
            Err(err) if is_container_not_found(&err) => {
                self.create_container(container).await?;
                self.upload(&client, &content, content_type)
                    .await
                    .map_err(|err| self.error(err))?;
            }
            Err(err) => return Err(self.error(err)),
        }
        Ok(reference)
    }

    async fn get(&self, blob: &BlobRef) -> Result<Vec<u8>, BlobError> {
        check_name(&blob.container, &blob.key)?;
        let client = self.blob_client(&blob.container, &blob.key)?;
        let not_found = || BlobError::NotFound {
            container: blob.container.clone(),
            key: blob.key.clone(),
        };
        let content = match client.download(None).await {
            Ok(download) => download.body.collect().await.map_err(|err| self.error(err))?,
            Err(err) if is_not_found(&err) => return Err(not_found()),
            Err(err) => return Err(self.error(err)),
        };
        verify(blob, &content)?;
        Ok(content.to_vec())
    }

    async fn exists(&self, container: &str, key: &str) -> Result<bool, BlobError> {
        check_name(container, key)?;
        match self.blob_client(container, key)?.get_properties(None).await {
            Ok(_) => Ok(true),
            Err(err) if is_not_found(&err) => Ok(false),
            Err(err) => Err(self.error(err)),
        }
    }

    async fn read(&self, container: &str, key: &str) -> Result<Option<Vec<u8>>, BlobError> {
        check_name(container, key)?;
        match self.blob_client(container, key)?.download(None).await {
            Ok(download) => Ok(Some(
                download.body.collect().await.map_err(|err| self.error(err))?.to_vec(),
            )),
            Err(err) if is_not_found(&err) || is_container_not_found(&err) => Ok(None),
            Err(err) => Err(self.error(err)),
        }
    }
}

#[cfg(test)]
mod tests;
