//! Azure Container Registry through the OCI distribution API. The image is
//! built by the same builder as the local adapter ([`super::image`], over
//! [`crate::delivery::oci`]); this
//! adapter pushes it.
//!
//! # Authentication
//!
//! ACR hands out repository-scoped access tokens from `/oauth2/token`
//! (scope `repository:<image>:pull,push`, service = the login server). The
//! adapter gets one per push from the configured [`AcrAuth`]:
//!
//! - [`AcrAuth::Basic`]: the admin user, or a repository-scoped token's
//!   name and password: `GET /oauth2/token?service=..&scope=..` with HTTP
//!   Basic auth (the Docker token flow);
//! - [`AcrAuth::RefreshToken`]: an ACR refresh token (e.g. from
//!   `az acr login --expose-token`): `POST /oauth2/token` with
//!   `grant_type=refresh_token`;
//! - [`AcrAuth::EntraToken`]: a Microsoft Entra access token (managed
//!   identity, workload identity): `POST /oauth2/exchange` with
//!   `grant_type=access_token` gives a refresh token, then as above.
//!
//! The runtime's configuration would read, for example:
//! `BOSUN_ACR_REGISTRY=contoso.azurecr.io` and either
//! `BOSUN_ACR_USERNAME` + `BOSUN_ACR_PASSWORD`, `BOSUN_ACR_REFRESH_TOKEN`,
//! or `BOSUN_ACR_ENTRA_TOKEN` (+ optional `BOSUN_ACR_TENANT`), and
//! optionally `BOSUN_ACR_ENDPOINT` (defaults to `https://<registry>`).
//! Secrets are never logged: [`AcrAuth`]'s `Debug` is redacted.
//!
//! # Push
//!
//! The repository is the tenant's, `<tenant>/<image>` ([`tenant_repository`];
//! an image already named `<tenant>/...` is kept as it is), and the event
//! reports it.
//!
//! 1. `HEAD /v2/<image>/manifests/<tag>`: when the tag already names the
//!    digest just built, nothing is pushed (`alreadyPresent`);
//! 2. for each layer and the config, `HEAD /v2/<image>/blobs/<digest>`
//!    skips blobs the registry has; the others are uploaded monolithically:
//!    `POST /v2/<image>/blobs/uploads/` → `202` + `Location`, then
//!    `PUT <location>&digest=<digest>` with the bytes → `201`;
//! 3. `PUT /v2/<image>/manifests/<tag>` with the manifest media type → `201`,
//!    and the `Docker-Content-Digest` answered must be the digest built.
//!
//! Errors follow the one Azure retry policy
//! ([`crate::delivery::azure::retry`]): 408, 409, 429 and 5xx with
//! `Retry-After` → retry after it, without → transient, as are connection
//! failures; 401, 403, other 4xx and answers that break the protocol →
//! permanent. One exception: with [`AcrAuth::Entra`], a 401 from
//! `/oauth2/exchange` to an Entra token still valid by its expiry (revoked,
//! a signing-key rollover) is answered by one more exchange with a new
//! token ([`RefreshingToken::send_with_token`]); refused again, it is
//! permanent and says the new token was refused too. A static
//! [`AcrAuth::EntraToken`] is refused for good at the first 401.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use bosun_contracts::validate;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, LOCATION};
use reqwest::{Method, StatusCode, Url};
use time::OffsetDateTime;

use super::image::build_from_context;
use super::port::{BuildProgress, BuiltImage, ContainerBuildError, ImageBuilder, ImageSpec};
use crate::delivery::azure::credential::{CredentialError, FRESH_TOKEN_REFUSED, RefreshingToken};
use crate::delivery::azure::http::{self, Redirects, Timeout};
use crate::delivery::azure::retry::{Disposition, retry_after};
use crate::delivery::blob::BlobStore;
use crate::delivery::oci::{MANIFEST_MEDIA_TYPE, OciBlob};

/// Default timeout of one HTTP request (layers can be large).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The manifest media types asked for when checking a tag.
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
    application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json, \
    application/vnd.docker.distribution.manifest.list.v2+json";

/// How the adapter authenticates to the registry. `Debug` never shows a
/// secret.
#[derive(Clone, PartialEq, Eq)]
pub enum AcrAuth {
    /// The admin user, or a repository-scoped token's name and password.
    Basic {
        /// User (or token) name.
        username: String,
        /// Password.
        password: String,
    },
    /// An ACR refresh token.
    RefreshToken(String),
    /// A Microsoft Entra access token for the registry, exchanged for an ACR
    /// refresh token.
    EntraToken {
        /// The Entra access token.
        token: String,
        /// The Entra tenant, when the exchange needs it.
        tenant: Option<String>,
    },
    /// Microsoft Entra tokens for the registry from a credential (workload
    /// identity, managed identity, the Azure CLI), fetched again before
    /// they expire, each exchanged for an ACR refresh token.
    Entra {
        /// The token source (scope [`ACR_SCOPE`]).
        tokens: Arc<RefreshingToken>,
        /// The Entra tenant, when the exchange needs it.
        tenant: Option<String>,
    },
}

/// The scope of Entra ID tokens for Azure Container Registry.
pub const ACR_SCOPE: &str = "https://containerregistry.azure.net/.default";

impl fmt::Debug for AcrAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Basic { username, .. } => write!(f, "Basic({username}, <redacted>)"),
            Self::RefreshToken(_) => f.write_str("RefreshToken(<redacted>)"),
            Self::EntraToken { tenant, .. } => write!(f, "EntraToken(<redacted>, tenant: {tenant:?})"),
            Self::Entra { tokens, tenant } => write!(f, "Entra({tokens:?}, tenant: {tenant:?})"),
        }
    }
}

/// Where the registry is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzureContainerRegistryConfig {
    /// The login server, e.g. `contoso.azurecr.io`: the registry modules
    /// name in `container.registry`, and the token `service`.
    pub registry: String,
    /// Base URL of the registry API; `https://<registry>` when `None`.
    pub endpoint: Option<String>,
    /// The credential.
    pub auth: AcrAuth,
    /// Timeout of one HTTP request.
    pub request_timeout: Duration,
}

impl AzureContainerRegistryConfig {
    /// A configuration for `registry` with the default endpoint and timeout.
    pub fn new(registry: impl Into<String>, auth: AcrAuth) -> Self {
        Self {
            registry: registry.into(),
            endpoint: None,
            auth,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// A failed registry call.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The registry answered with an error status.
    #[error("{operation}: HTTP {status}: {message}")]
    Status {
        /// Method and URL path (no query, no credential).
        operation: String,
        /// HTTP status.
        status: u16,
        /// The OCI error code and message, when the body had them.
        message: String,
        /// The `Retry-After` delay, when given.
        retry_after: Option<Duration>,
    },
    /// No answer (connection refused, timeout ...).
    #[error("{operation}: {source}")]
    Transport {
        /// Method and URL path.
        operation: String,
        /// What the HTTP client said.
        #[source]
        source: reqwest::Error,
    },
    /// No Entra ID token could be had now; the work is retried.
    #[error("no Entra ID token for the registry: {0}; retrying")]
    Credential(String),
    /// An answer the protocol does not allow.
    #[error("{operation}: unexpected response: {reason}")]
    UnexpectedResponse {
        /// Method and URL path.
        operation: String,
        /// What was wrong.
        reason: String,
    },
}

impl RegistryError {
    /// What the runtime should do about this error (the one Azure retry
    /// policy, [`crate::delivery::azure::retry`]); an answer that breaks
    /// the protocol is permanent.
    pub fn disposition(&self) -> Disposition {
        match self {
            Self::Status {
                status, retry_after, ..
            } => Disposition::of_status(*status, *retry_after),
            Self::Transport { source, .. } => Disposition::of_transport(source),
            Self::Credential(_) => Disposition::Transient,
            Self::UnexpectedResponse { .. } => Disposition::Permanent,
        }
    }
}

impl RegistryError {
    /// The same error, saying that a new Entra ID token was refused as the
    /// first was ([`FRESH_TOKEN_REFUSED`]): still permanent, and the reader
    /// knows it is the identity, not an expired token.
    pub fn fresh_token_refused(self) -> Self {
        match self {
            Self::Status {
                operation,
                status,
                message,
                retry_after,
            } => Self::Status {
                operation,
                status,
                message: format!("{message}; {FRESH_TOKEN_REFUSED}"),
                retry_after,
            },
            other => other,
        }
    }
}

impl From<CredentialError> for RegistryError {
    fn from(err: CredentialError) -> Self {
        Self::Credential(err.to_string())
    }
}

impl From<RegistryError> for ContainerBuildError {
    fn from(err: RegistryError) -> Self {
        match err.disposition() {
            Disposition::RetryAfter(after) => Self::Throttled {
                after,
                source: Box::new(err),
            },
            Disposition::Transient => Self::Unavailable(Box::new(err)),
            Disposition::Permanent => Self::Rejected(Box::new(err)),
        }
    }
}

/// An image as the registry holds it: [`AzureContainerRegistry::manifest_summary`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestSummary {
    /// Manifest digest, `sha256:<hex>`.
    pub digest: String,
    /// Manifest, config and layers together, in bytes.
    pub size_bytes: u64,
}

/// Pushes images to Azure Container Registry.
pub struct AzureContainerRegistry {
    http: reqwest::Client,
    endpoint: Url,
    registry: String,
    auth: AcrAuth,
    blobs: Arc<dyn BlobStore>,
}

impl fmt::Debug for AzureContainerRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AzureContainerRegistry")
            .field("endpoint", &self.endpoint.as_str())
            .field("registry", &self.registry)
            .field("auth", &self.auth)
            .finish()
    }
}

/// An answer: status, headers, body.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl AzureContainerRegistry {
    /// An adapter for the configured registry, reading build contexts from
    /// `blobs`. Fails when the registry or endpoint is not usable.
    pub fn new(config: &AzureContainerRegistryConfig, blobs: Arc<dyn BlobStore>) -> Result<Self, ContainerBuildError> {
        validate::registry_host("registry", &config.registry)
            .map_err(|err| ContainerBuildError::Invalid(format!("registry: {}", err.reason)))?;
        let endpoint = config
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("https://{}", config.registry));
        let endpoint = Url::parse(endpoint.trim())
            .map_err(|err| ContainerBuildError::Invalid(format!("registry endpoint: {err}")))?;
        if !matches!(endpoint.scheme(), "http" | "https") || endpoint.cannot_be_a_base() {
            return Err(ContainerBuildError::Invalid(
                "registry endpoint must be an http(s) URL such as https://contoso.azurecr.io".to_owned(),
            ));
        }
        let http = http::client(
            Timeout::Total(config.request_timeout),
            HeaderMap::new(),
            Redirects::Follow,
        )
        .map_err(|err| ContainerBuildError::Invalid(format!("HTTP client: {err}")))?;
        Ok(Self {
            http,
            endpoint,
            registry: config.registry.clone(),
            auth: config.auth.clone(),
            blobs,
        })
    }

    fn url(&self, path: &str) -> Url {
        let mut url = self.endpoint.clone();
        url.set_path(path);
        url.set_query(None);
        url
    }

    /// Sends a request and returns the answer whatever its status.
    async fn call(
        &self,
        method: Method,
        url: Url,
        authorization: Option<&str>,
        headers: &[(reqwest::header::HeaderName, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<(String, Answer), RegistryError> {
        let operation = format!("{method} {}", url.path());
        let same_origin = url.origin() == self.endpoint.origin();
        let mut request = self.http.request(method, url);
        if let Some(value) = authorization.filter(|_| same_origin) {
            let mut header = HeaderValue::from_str(value).map_err(|_| RegistryError::UnexpectedResponse {
                operation: operation.clone(),
                reason: "the credential cannot be sent in a header".to_owned(),
            })?;
            header.set_sensitive(true);
            request = request.header(AUTHORIZATION, header);
        }
        for (name, value) in headers {
            request = request.header(name, *value);
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        let transport = |source| RegistryError::Transport {
            operation: operation.clone(),
            source,
        };
        let response = http::send(request).await.map_err(transport)?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.bytes().await.map_err(transport)?.to_vec();
        tracing::debug!(%operation, status = status.as_u16(), "registry call");
        Ok((operation, Answer { status, headers, body }))
    }

    /// A repository-scoped access token for `image`.
    async fn access_token(&self, image: &str) -> Result<String, RegistryError> {
        let scope = format!("repository:{image}:pull,push");
        match &self.auth {
            AcrAuth::Basic { username, password } => {
                let mut url = self.url("/oauth2/token");
                url.query_pairs_mut()
                    .append_pair("service", &self.registry)
                    .append_pair("scope", &scope);
                let basic = format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
                );
                let (operation, answer) = self.call(Method::GET, url, Some(&basic), &[], None).await?;
                token_field(&operation, &answer, &["access_token", "token"])
            }
            AcrAuth::RefreshToken(refresh) => self.refresh_to_access(refresh, &scope).await,
            AcrAuth::EntraToken { token, tenant } => self.exchange(token, tenant.as_deref(), &scope).await,
            AcrAuth::Entra { tokens, tenant } => {
                // A 401 to a token still valid by its expiry: once more
                // with a new one.
                let answered = tokens
                    .send_with_token(
                        |token| async move { self.post_exchange(&token, tenant.as_deref()).await },
                        |(_, answer): &(String, Answer)| answer.status == StatusCode::UNAUTHORIZED,
                    )
                    .await?;
                let (operation, answer) = answered.answer;
                let refresh = token_field(&operation, &answer, &["refresh_token"]).map_err(|err| {
                    if answered.fresh_token_refused {
                        err.fresh_token_refused()
                    } else {
                        err
                    }
                })?;
                self.refresh_to_access(&refresh, &scope).await
            }
        }
    }

    /// Exchanges an Entra access token for an ACR refresh token, then that
    /// for an access token of `scope`.
    async fn exchange(&self, token: &str, tenant: Option<&str>, scope: &str) -> Result<String, RegistryError> {
        let (operation, answer) = self.post_exchange(token, tenant).await?;
        let refresh = token_field(&operation, &answer, &["refresh_token"])?;
        self.refresh_to_access(&refresh, scope).await
    }

    /// `POST /oauth2/exchange`: an Entra access token for an ACR refresh
    /// token; the answer whatever its status.
    async fn post_exchange(&self, token: &str, tenant: Option<&str>) -> Result<(String, Answer), RegistryError> {
        let mut form = vec![
            ("grant_type", "access_token"),
            ("service", self.registry.as_str()),
            ("access_token", token),
        ];
        if let Some(tenant) = tenant {
            form.push(("tenant", tenant));
        }
        self.post_form("/oauth2/exchange", &form).await
    }

    async fn refresh_to_access(&self, refresh: &str, scope: &str) -> Result<String, RegistryError> {
        let form = [
            ("grant_type", "refresh_token"),
            ("service", self.registry.as_str()),
            ("scope", scope),
            ("refresh_token", refresh),
        ];
        let (operation, answer) = self.post_form("/oauth2/token", &form).await?;
        token_field(&operation, &answer, &["access_token"])
    }

    async fn post_form(&self, path: &str, form: &[(&str, &str)]) -> Result<(String, Answer), RegistryError> {
        let mut encoder = Url::parse("http://form.invalid/").map_err(|err| RegistryError::UnexpectedResponse {
            operation: format!("POST {path}"),
            reason: err.to_string(),
        })?;
        encoder.query_pairs_mut().extend_pairs(form);
        let body = encoder.query().unwrap_or_default().as_bytes().to_vec();
        self.call(
            Method::POST,
            self.url(path),
            None,
            &[(CONTENT_TYPE, "application/x-www-form-urlencoded")],
            Some(body),
        )
        .await
    }

    /// The login server this adapter talks to, e.g. `contoso.azurecr.io`.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// What `reference` (a tag or a digest) names in `repository`, when it
    /// exists: the manifest's digest, and the image's size (the manifest,
    /// its config and its layers; for an index, the index and the
    /// manifests it lists). ACR Tasks reads the digests and sizes of the
    /// images its runs pushed through this.
    pub async fn manifest_summary(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<Option<ManifestSummary>, RegistryError> {
        let bearer = format!("Bearer {}", self.access_token(repository).await?);
        let url = self.url(&format!("/v2/{repository}/manifests/{reference}"));
        let (operation, answer) = self
            .call(Method::GET, url, Some(&bearer), &[(ACCEPT, MANIFEST_ACCEPT)], None)
            .await?;
        match answer.status {
            StatusCode::NOT_FOUND => return Ok(None),
            status if status.is_success() => {}
            _ => return Err(failure(operation, &answer)),
        }
        let computed = format!("sha256:{}", crate::delivery::blob::sha256_hex(&answer.body));
        let digest = answer
            .header("docker-content-digest")
            .map_or_else(|| computed.clone(), str::to_owned);
        if digest != computed {
            return Err(RegistryError::UnexpectedResponse {
                operation,
                reason: format!("the manifest's bytes hash to {computed}, the registry says {digest}"),
            });
        }
        let manifest: serde_json::Value =
            serde_json::from_slice(&answer.body).map_err(|err| RegistryError::UnexpectedResponse {
                operation: operation.clone(),
                reason: format!("the manifest is not JSON: {err}"),
            })?;
        let size = |value: &serde_json::Value| value["size"].as_u64().unwrap_or(0);
        let listed: u64 = ["layers", "manifests"]
            .iter()
            .filter_map(|field| manifest[*field].as_array())
            .flatten()
            .map(size)
            .sum();
        Ok(Some(ManifestSummary {
            digest,
            size_bytes: answer.body.len() as u64 + size(&manifest["config"]) + listed,
        }))
    }

    /// The digest the tag names, when it exists.
    async fn tagged_digest(&self, bearer: &str, image: &str, tag: &str) -> Result<Option<String>, RegistryError> {
        let url = self.url(&format!("/v2/{image}/manifests/{tag}"));
        let (operation, answer) = self
            .call(Method::HEAD, url, Some(bearer), &[(ACCEPT, MANIFEST_ACCEPT)], None)
            .await?;
        match answer.status {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => Ok(answer.header("docker-content-digest").map(str::to_owned)),
            _ => Err(failure(operation, &answer)),
        }
    }

    /// Uploads a blob unless the registry has it; returns whether it did.
    async fn push_blob(&self, bearer: &str, image: &str, blob: &OciBlob) -> Result<bool, RegistryError> {
        let url = self.url(&format!("/v2/{image}/blobs/{}", blob.digest));
        let (operation, answer) = self.call(Method::HEAD, url, Some(bearer), &[], None).await?;
        match answer.status {
            status if status.is_success() => return Ok(false),
            StatusCode::NOT_FOUND => {}
            _ => return Err(failure(operation, &answer)),
        }
        let url = self.url(&format!("/v2/{image}/blobs/uploads/"));
        let (operation, answer) = self
            .call(Method::POST, url, Some(bearer), &[], Some(Vec::new()))
            .await?;
        if answer.status != StatusCode::ACCEPTED && !answer.status.is_success() {
            return Err(failure(operation, &answer));
        }
        let location = answer
            .header(LOCATION.as_str())
            .ok_or_else(|| RegistryError::UnexpectedResponse {
                operation: operation.clone(),
                reason: "no Location header for the upload".to_owned(),
            })?;
        let mut upload = self
            .endpoint
            .join(location)
            .map_err(|err| RegistryError::UnexpectedResponse {
                operation: operation.clone(),
                reason: format!("bad upload Location: {err}"),
            })?;
        upload.query_pairs_mut().append_pair("digest", &blob.digest);
        let (operation, answer) = self
            .call(
                Method::PUT,
                upload,
                Some(bearer),
                &[(CONTENT_TYPE, "application/octet-stream")],
                Some(blob.bytes.clone()),
            )
            .await?;
        if answer.status != StatusCode::CREATED && !answer.status.is_success() {
            return Err(failure(operation, &answer));
        }
        if let Some(digest) = answer.header("docker-content-digest")
            && digest != blob.digest
        {
            return Err(RegistryError::UnexpectedResponse {
                operation,
                reason: format!("the registry stored digest {digest}, expected {}", blob.digest),
            });
        }
        Ok(true)
    }
}

/// The ACR repository of a tenant's image: `<tenant>/<image>`, or the image
/// itself when it already starts with `<tenant>/`. One registry serves
/// every tenant, so the repository (and with it the tags, and the
/// repository-scoped tokens) is the tenant's: two tenants pushing
/// `payments-api:1.4.0` push `contoso/payments-api:1.4.0` and
/// `fabrikam/payments-api:1.4.0`. Images pushed before tenants, under the
/// bare name, stay where they are; deployments pin digests, and a retried
/// build pushes into the tenant's repository.
pub fn tenant_repository(tenant: &str, image: &str) -> String {
    match image.strip_prefix(tenant) {
        Some(rest) if rest.starts_with('/') => image.to_owned(),
        _ => format!("{tenant}/{image}"),
    }
}

impl AzureContainerRegistry {
    /// Builds `spec`'s image and stores it under its tag, before it
    /// returns (the port's [`ImageBuilder::build`], which never leaves a
    /// run going).
    pub async fn build_image(&self, spec: &ImageSpec) -> Result<BuiltImage, ContainerBuildError> {
        let invalid =
            |err: validate::FieldError| ContainerBuildError::Invalid(format!("{}: {}", err.field, err.reason));
        validate::tenant_id("tenant", &spec.tenant).map_err(invalid)?;
        validate::oci_repository("image", &spec.image).map_err(invalid)?;
        let repository = tenant_repository(&spec.tenant, &spec.image);
        validate::oci_repository("image", &repository).map_err(invalid)?;
        validate::oci_tag("tag", &spec.tag).map_err(invalid)?;
        if spec.registry != self.registry {
            return Err(ContainerBuildError::Invalid(format!(
                "the module names registry `{}`, but this adapter pushes to `{}`",
                spec.registry, self.registry
            )));
        }
        let image = build_from_context(&*self.blobs, spec).await?;
        let bearer = format!("Bearer {}", self.access_token(&repository).await?);
        if self.tagged_digest(&bearer, &repository, &spec.tag).await?.as_deref() == Some(image.digest()) {
            tracing::debug!(%repository, tag = %spec.tag, digest = %image.digest(), "image already in the registry");
            return Ok(BuiltImage {
                repository,
                digest: image.digest().to_owned(),
                size_bytes: image.size_bytes(),
                already_present: true,
                pushed_at: OffsetDateTime::now_utc(),
            });
        }
        let mut uploaded = 0usize;
        for blob in image.blobs() {
            if self.push_blob(&bearer, &repository, blob).await? {
                uploaded += 1;
            }
        }
        let url = self.url(&format!("/v2/{repository}/manifests/{}", spec.tag));
        let (operation, answer) = self
            .call(
                Method::PUT,
                url,
                Some(&bearer),
                &[(CONTENT_TYPE, MANIFEST_MEDIA_TYPE)],
                Some(image.manifest.bytes.clone()),
            )
            .await?;
        if !answer.status.is_success() {
            return Err(failure(operation, &answer).into());
        }
        if let Some(digest) = answer.header("docker-content-digest")
            && digest != image.digest()
        {
            return Err(RegistryError::UnexpectedResponse {
                operation,
                reason: format!("the registry stored manifest {digest}, expected {}", image.digest()),
            }
            .into());
        }
        tracing::debug!(
            %repository,
            tag = %spec.tag,
            digest = %image.digest(),
            blobs_uploaded = uploaded,
            "image pushed"
        );
        Ok(BuiltImage {
            repository,
            digest: image.digest().to_owned(),
            size_bytes: image.size_bytes(),
            already_present: false,
            pushed_at: OffsetDateTime::now_utc(),
        })
    }
}

#[async_trait]
impl ImageBuilder for AzureContainerRegistry {
    async fn build(&self, spec: &ImageSpec) -> Result<BuildProgress, ContainerBuildError> {
        self.build_image(spec).await.map(BuildProgress::Built)
    }
}

/// Reads the first of `fields` from a token endpoint's JSON answer.
fn token_field(operation: &str, answer: &Answer, fields: &[&str]) -> Result<String, RegistryError> {
    if !answer.status.is_success() {
        return Err(failure(operation.to_owned(), answer));
    }
    let json: serde_json::Value =
        serde_json::from_slice(&answer.body).map_err(|err| RegistryError::UnexpectedResponse {
            operation: operation.to_owned(),
            reason: format!("token answer is not JSON: {err}"),
        })?;
    fields
        .iter()
        .find_map(|field| json.get(*field).and_then(serde_json::Value::as_str))
        .filter(|token| !token.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| RegistryError::UnexpectedResponse {
            operation: operation.to_owned(),
            reason: format!("token answer has no {}", fields.join(" or ")),
        })
}

/// The error for a non-success answer, with the OCI error code and
/// message when the body has them (never the body itself).
fn failure(operation: String, answer: &Answer) -> RegistryError {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(&answer.body).ok();
    let first = parsed.as_ref().and_then(|v| v["errors"].get(0));
    let message = match first {
        Some(error) => {
            let code = error["code"].as_str().unwrap_or("ERROR");
            let text: String = error["message"]
                .as_str()
                .unwrap_or_default()
                .chars()
                .take(300)
                .collect();
            format!("{code}: {text}")
        }
        None => answer.status.canonical_reason().unwrap_or("error").to_owned(),
    };
    let retry_after = retry_after(&answer.headers);
    RegistryError::Status {
        operation,
        status: answer.status.as_u16(),
        message,
        retry_after,
    }
}
