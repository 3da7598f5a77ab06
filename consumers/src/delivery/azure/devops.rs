//! The Azure DevOps REST client shared by the `azure` adapters that talk to
//! Azure DevOps (repositories, pushes, pull requests, pipelines, builds).
//!
//! [`AzureDevOpsConfig`] names the organization, the project (or a project
//! per tenant, see [Tenants](#tenants)) and the
//! credential (a personal access token sent as Basic auth with an empty user,
//! or an Entra ID bearer token). The credential is never logged: its `Debug`
//! output is redacted and the header built from it is marked sensitive.
//!
//! [`AzureDevOpsClient`] builds the request URLs (REST API version
//! [`API_VERSION`]), sends JSON (GET, POST, PATCH) through bosun's one HTTP
//! client policy ([`super::http`]), and turns HTTP failures into
//! [`AzureDevOpsError`], whose [`Disposition`] ([`super::retry`], the one
//! classification every Azure adapter uses) says what the runtime does
//! next: 408, 409, 429 and 5xx with `Retry-After` → retry after that delay,
//! without → transient, as are timeouts and connection failures; 400, 401,
//! 403, 203 (the sign-in page Azure DevOps serves for a bad token) and other
//! 4xx → permanent.
//!
//! With Entra ID tokens from a credential ([`AzureDevOpsAuth::Entra`]), a
//! 401 or 203 to a token still valid by its expiry (revoked, a signing-key
//! rollover) is not final: the token is dropped, a new one fetched (from the
//! credential made again, whose own cache would give the refused one back)
//! and the request sent once more
//! ([`RefreshingToken::send_with_token`]). Refused again, it is permanent,
//! and its message says the new token was refused too
//! ([`FRESH_TOKEN_REFUSED`]).
//! A PAT or a static token is refused for good at the first 401.
//!
//! # Tenants
//!
//! The project setting ([`AzureDevOpsConfig::project`],
//! `BOSUN_AZURE_DEVOPS_PROJECT`) says which project a tenant's
//! repositories, pushes, pull requests, pipeline definitions and builds live
//! in; [`AzureDevOpsClient::project_for`] resolves it for a message's tenant
//! and every adapter builds its URLs from that:
//!
//! - **a template with [`TENANT_VARIABLE`]** (e.g. `delivery-{tenant}`):
//!   each tenant has its own project (`delivery-contoso`,
//!   `delivery-fabrikam`), so two tenants' repositories of one name are two
//!   repositories, and their pushes, pull requests, definitions and builds
//!   never mix. The projects are not created by bosun: an operator creates
//!   each tenant's project (a missing one answers 404, reported as a
//!   missing repository or project). A `ProvisionRepository` naming another
//!   project than the tenant's is refused (permanent): a tenant cannot
//!   reach into another project. Tenant ids are validated lowercase names,
//!   so the substitution cannot make a path of its own, and each URL
//!   segment is percent-encoded as always. `{tenant}` is the only known
//!   template variable; any other `{...}` is a configuration error
//!   ([`check_project_template`]);
//! - **a plain project name**: every tenant maps to that one project, by
//!   configuration. A repository is found by its name in that project (or
//!   in the project a `ProvisionRepository` names), so repository names —
//!   and with them their pull requests, pushes and builds — are unique per
//!   project, not per tenant: two tenants' `payments-api` are one Azure
//!   repository. Keeping tenants apart then means a per-tenant project (the
//!   template above) or a bosun deployment per tenant.
//!
//! Either way, what bosun creates in a project is also scoped by tenant
//! where the name would otherwise collide: pipeline definitions live in a
//! folder per tenant ([`PIPELINE_FOLDER`]`\<tenant>`,
//! [`tenant_pipeline_folder`]), and the pipeline monitor refuses a run of
//! another tenant's folder ([`check_pipeline_folder`]), as build ingestion
//! refuses a build of one.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::credential::{CredentialError, FRESH_TOKEN_REFUSED, RefreshingToken};
use super::http::{self, Redirects, Timeout};
use super::retry::Disposition;
use super::retry::retry_after;
use crate::HandlerError;
use crate::delivery::tenant::ForeignTenant;

/// The Azure DevOps REST API version bosun speaks.
pub const API_VERSION: &str = "7.1";

/// The folder bosun's pipeline definitions are created under; definitions
/// made before tenant folders sit in it directly.
pub const PIPELINE_FOLDER: &str = "\\bosun";

/// The folder of a tenant's pipeline definitions, `\bosun\<tenant>`.
pub fn tenant_pipeline_folder(tenant: &str) -> String {
    format!("{PIPELINE_FOLDER}\\{tenant}")
}

/// `Ok` when a pipeline (its definition's folder, `folder`) is `tenant`'s:
/// in `\bosun\<tenant>`, or in `\bosun` (made before tenant folders; whose
/// it is cannot be told, so its runs and builds stay readable by their id,
/// as before). Another tenant's folder, or a pipeline bosun did not make,
/// is refused: run and build ids are project-wide, so a message of one
/// tenant could otherwise name another's.
pub fn check_pipeline_folder(
    resource: impl FnOnce() -> String,
    folder: Option<&str>,
    tenant: &str,
) -> Result<(), ForeignTenant> {
    let folder = folder.unwrap_or_default().trim_end_matches('\\');
    if folder.eq_ignore_ascii_case(&tenant_pipeline_folder(tenant)) || folder.eq_ignore_ascii_case(PIPELINE_FOLDER) {
        return Ok(());
    }
    let owner = folder
        .strip_prefix(PIPELINE_FOLDER)
        .and_then(|rest| rest.strip_prefix('\\'))
        .filter(|owner| bosun_contracts::validate::tenant_id("tenant", owner).is_ok());
    Err(ForeignTenant::new(resource(), owner, tenant))
}

/// The template variable of the project setting that each message's tenant
/// replaces: `delivery-{tenant}` is `delivery-contoso` for tenant `contoso`.
pub const TENANT_VARIABLE: &str = "{tenant}";

/// Why a project setting cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectTemplateError {
    /// The setting is empty (or only spaces).
    #[error("must not be empty")]
    Empty,
    /// A `{...}` other than `{tenant}`.
    #[error("`{variable}` is not a known template variable (only `{{tenant}}` is)")]
    UnknownTemplateVariable {
        /// The template variable as written, braces included.
        variable: String,
    },
    /// A `{` without its `}`, or a `}` without its `{` (neither may appear
    /// in an Azure DevOps project name).
    #[error("has an unmatched `{brace}`; only the template variable `{{tenant}}` may use braces")]
    UnmatchedBrace {
        /// The brace.
        brace: char,
    },
}

/// Checks a project setting: a project name, or a template in which
/// [`TENANT_VARIABLE`] is the only template variable.
pub fn check_project_template(project: &str) -> Result<(), ProjectTemplateError> {
    if project.trim().is_empty() {
        return Err(ProjectTemplateError::Empty);
    }
    let mut rest = project;
    while let Some(index) = rest.find(['{', '}']) {
        let tail = &rest[index..];
        if tail.starts_with('}') {
            return Err(ProjectTemplateError::UnmatchedBrace { brace: '}' });
        }
        let Some(end) = tail.find('}') else {
            return Err(ProjectTemplateError::UnmatchedBrace { brace: '{' });
        };
        let variable = &tail[..=end];
        if variable != TENANT_VARIABLE {
            return Err(ProjectTemplateError::UnknownTemplateVariable {
                variable: variable.to_owned(),
            });
        }
        rest = &tail[end + 1..];
    }
    Ok(())
}

/// Default timeout of one HTTP request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest error message kept from a response body.
const MAX_ERROR_MESSAGE: usize = 500;

/// How bosun authenticates to Azure DevOps. `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub enum AzureDevOpsAuth {
    /// A personal access token, sent as HTTP Basic auth with an empty user.
    Pat(String),
    /// An Entra ID (Azure AD) access token, sent as a bearer token.
    Bearer(String),
    /// Entra ID tokens from a credential (workload identity, managed
    /// identity, the Azure CLI), sent as bearer tokens and fetched again
    /// before they expire.
    Entra(Arc<RefreshingToken>),
}

/// The scope of Entra ID tokens for Azure DevOps (its application id).
pub const AZURE_DEVOPS_SCOPE: &str = "499b84ac-1321-427f-aa17-267ca6975798/.default";

impl fmt::Debug for AzureDevOpsAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pat(_) => f.write_str("Pat(<redacted>)"),
            Self::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Self::Entra(source) => write!(f, "Entra({source:?})"),
        }
    }
}

impl AzureDevOpsAuth {
    /// The `Authorization` header of a PAT or a static token; `None` for
    /// [`Self::Entra`], whose header is made per request.
    fn static_header(&self) -> Option<Result<HeaderValue, AzureDevOpsError>> {
        let value = match self {
            Self::Pat(token) => basic_pat(token),
            Self::Bearer(token) => format!("Bearer {token}"),
            Self::Entra(_) => return None,
        };
        Some(sensitive_header(&value))
    }
}

impl AzureDevOpsAuth {
    /// The value of the `Authorization` header this credential sends now
    /// (`Basic …` for a PAT, `Bearer …` for a token, a fresh Entra ID
    /// token when the cached one is near expiry), for clients other than
    /// [`AzureDevOpsClient`] (`git fetch`'s `http.extraHeader`). Never log
    /// it.
    pub async fn authorization(&self) -> Result<String, AzureDevOpsError> {
        match self {
            Self::Pat(token) => Ok(basic_pat(token)),
            Self::Bearer(token) => Ok(format!("Bearer {token}")),
            Self::Entra(source) => Ok(format!("Bearer {}", source.token().await?)),
        }
    }
}

/// HTTP Basic auth of a PAT: an empty user name and the token.
fn basic_pat(token: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!(":{token}"))
    )
}

/// A header value that is never logged.
fn sensitive_header(value: &str) -> Result<HeaderValue, AzureDevOpsError> {
    let mut header = HeaderValue::from_str(value)
        .map_err(|_| AzureDevOpsError::Config("the token contains characters not allowed in a header".to_owned()))?;
    header.set_sensitive(true);
    Ok(header)
}

/// Where and how to reach Azure DevOps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzureDevOpsConfig {
    /// The organization URL, e.g. `https://dev.azure.com/contoso` (or an
    /// Azure DevOps Server collection URL).
    pub organization_url: String,
    /// The project of every tenant (`delivery`), or a template naming a
    /// project per tenant (`delivery-{tenant}`, see [`TENANT_VARIABLE`]
    /// and the tenants section of this module).
    pub project: String,
    /// The credential.
    pub auth: AzureDevOpsAuth,
    /// Timeout of one HTTP request.
    pub request_timeout: Duration,
}

impl AzureDevOpsConfig {
    /// A configuration with the default request timeout.
    pub fn new(organization_url: impl Into<String>, project: impl Into<String>, auth: AzureDevOpsAuth) -> Self {
        Self {
            organization_url: organization_url.into(),
            project: project.into(),
            auth,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// A failed call to Azure DevOps.
#[derive(Debug, thiserror::Error)]
pub enum AzureDevOpsError {
    /// The configuration cannot work (bad URL, unusable token).
    #[error("invalid Azure DevOps configuration: {0}")]
    Config(String),
    /// No Entra ID token could be had now (the identity endpoint is
    /// unreachable or refused); the work is retried.
    #[error("no Azure DevOps token: {0}; retrying")]
    Credential(String),
    /// Azure DevOps answered with an error status.
    #[error("{operation}: HTTP {status}: {message}")]
    Status {
        /// Method and URL path of the request (no query, no credential).
        operation: String,
        /// The HTTP status.
        status: u16,
        /// Azure DevOps' `typeKey` (e.g. `GitRepositoryNotFoundException`),
        /// when the body had one.
        type_key: Option<String>,
        /// The error message from the body (shortened).
        message: String,
        /// The `Retry-After` delay, when the response had one.
        retry_after: Option<Duration>,
    },
    /// The request did not get an answer (connection refused, timeout ...).
    #[error("{operation}: {source}")]
    Transport {
        /// Method and URL path of the request.
        operation: String,
        /// What the HTTP client said.
        #[source]
        source: reqwest::Error,
    },
    /// The answer was not what the API documents.
    #[error("{operation}: unexpected response: {reason}")]
    UnexpectedResponse {
        /// Method and URL path of the request.
        operation: String,
        /// What was wrong.
        reason: String,
    },
}

impl AzureDevOpsError {
    /// What the runtime should do about this error.
    pub fn disposition(&self) -> Disposition {
        match self {
            Self::Config(_) | Self::UnexpectedResponse { .. } => Disposition::Permanent,
            Self::Credential(_) => Disposition::Transient,
            Self::Transport { source, .. } => Disposition::of_transport(source),
            Self::Status {
                status, retry_after, ..
            } => Disposition::of_status(*status, *retry_after),
        }
    }

    /// The HTTP status, when Azure DevOps answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

impl From<AzureDevOpsError> for HandlerError {
    fn from(err: AzureDevOpsError) -> Self {
        err.disposition().handler_error(Box::new(err))
    }
}

/// An authenticated Azure DevOps REST client for one organization.
#[derive(Debug, Clone)]
pub struct AzureDevOpsClient {
    http: reqwest::Client,
    organization: Url,
    project: String,
    /// Set for Entra ID tokens from a credential: each request gets its
    /// header from it (a PAT or a static token is a default header).
    tokens: Option<Arc<RefreshingToken>>,
}

impl AzureDevOpsClient {
    /// A client for the configured organization. Fails when the URL is not
    /// an absolute http(s) URL or the token cannot be sent in a header.
    pub fn new(config: &AzureDevOpsConfig) -> Result<Self, AzureDevOpsError> {
        let organization = Url::parse(config.organization_url.trim())
            .map_err(|err| AzureDevOpsError::Config(format!("organization URL: {err}")))?;
        if !matches!(organization.scheme(), "http" | "https") || organization.cannot_be_a_base() {
            return Err(AzureDevOpsError::Config(
                "organization URL must be an http(s) URL such as https://dev.azure.com/contoso".to_owned(),
            ));
        }
        check_project_template(&config.project)
            .map_err(|err| AzureDevOpsError::Config(format!("project `{}`: {err}", config.project)))?;
        let mut headers = HeaderMap::new();
        let tokens = match (&config.auth, config.auth.static_header()) {
            (_, Some(header)) => {
                headers.insert(AUTHORIZATION, header?);
                None
            }
            (AzureDevOpsAuth::Entra(source), None) => Some(Arc::clone(source)),
            (_, None) => None,
        };
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        let http = http::client(Timeout::Total(config.request_timeout), headers, Redirects::Follow)
            .map_err(|err| AzureDevOpsError::Config(format!("HTTP client: {err}")))?;
        Ok(Self {
            http,
            organization,
            project: config.project.clone(),
            tokens,
        })
    }

    /// The project of `tenant`'s repositories, pipelines and builds: the
    /// configured project with [`TENANT_VARIABLE`] replaced by the
    /// tenant, or the one configured project when it has no template variable.
    pub fn project_for(&self, tenant: &str) -> Cow<'_, str> {
        if self.project_per_tenant() {
            Cow::Owned(self.project.replace(TENANT_VARIABLE, tenant))
        } else {
            Cow::Borrowed(&self.project)
        }
    }

    /// Whether each tenant has its own project (the setting has
    /// [`TENANT_VARIABLE`]).
    pub fn project_per_tenant(&self) -> bool {
        self.project.contains(TENANT_VARIABLE)
    }

    /// `{organization}/{tenant's project}/_apis/{rest...}?{query}&api-version=7.1`,
    /// each segment percent-encoded.
    pub fn project_url(&self, tenant: &str, rest: &[&str], query: &[(&str, &str)]) -> Url {
        let project = self.project_for(tenant);
        let mut segments = vec![project.as_ref(), "_apis"];
        segments.extend_from_slice(rest);
        self.url(&segments, query)
    }

    /// `{organization}/{segments...}?{query}&api-version=7.1`, each segment
    /// percent-encoded.
    pub fn url(&self, segments: &[&str], query: &[(&str, &str)]) -> Url {
        let mut url = self.organization.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        {
            let mut pairs = url.query_pairs_mut();
            for (key, value) in query {
                pairs.append_pair(key, value);
            }
            pairs.append_pair("api-version", API_VERSION);
        }
        url
    }

    /// GETs JSON.
    pub async fn get_json<T: DeserializeOwned>(&self, url: Url) -> Result<T, AzureDevOpsError> {
        let (operation, body) = self.send(Method::GET, url, None::<&()>, None).await?;
        parse_json(&operation, &body)
    }

    /// GETs JSON; `None` when the resource does not exist (HTTP 404).
    pub async fn get_json_opt<T: DeserializeOwned>(&self, url: Url) -> Result<Option<T>, AzureDevOpsError> {
        match self.send(Method::GET, url, None::<&()>, None).await {
            Ok((operation, body)) => parse_json(&operation, &body).map(Some),
            Err(err) if err.status() == Some(404) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// GETs raw bytes (`Accept: application/octet-stream`); `None` on 404.
    pub async fn get_bytes_opt(&self, url: Url) -> Result<Option<Vec<u8>>, AzureDevOpsError> {
        match self
            .send(Method::GET, url, None::<&()>, Some("application/octet-stream"))
            .await
        {
            Ok((_, body)) => Ok(Some(body)),
            Err(err) if err.status() == Some(404) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// GETs a download Azure DevOps named in an answer (a pipeline
    /// artifact's `downloadUrl`), with this client's credential. The URL
    /// must be the organization's own host or an Azure DevOps service host
    /// over HTTPS (`dev.azure.com`, `*.dev.azure.com`,
    /// `*.visualstudio.com`): the credential goes nowhere else, and any
    /// other URL is a permanent [`AzureDevOpsError::UnexpectedResponse`].
    /// Redirects to storage are followed without the credential (reqwest
    /// drops `Authorization` when the host changes).
    pub async fn download(&self, url: &str) -> Result<Vec<u8>, AzureDevOpsError> {
        let refused = |reason: String| AzureDevOpsError::UnexpectedResponse {
            operation: "GET (a download URL)".to_owned(),
            reason,
        };
        let url = Url::parse(url).map_err(|err| refused(format!("the download URL is not a URL: {err}")))?;
        let same_origin = url.origin() == self.organization.origin();
        let azure_devops = url.scheme() == "https"
            && url.host_str().is_some_and(|host| {
                let host = host.to_ascii_lowercase();
                host == "dev.azure.com" || host.ends_with(".dev.azure.com") || host.ends_with(".visualstudio.com")
            });
        if !same_origin && !azure_devops {
            return Err(refused(format!(
                "the download URL's host `{}` is not Azure DevOps; bosun sends its credential only there",
                url.host_str().unwrap_or_default()
            )));
        }
        let (_, body) = self
            .send(
                Method::GET,
                url,
                None::<&()>,
                Some("application/zip, application/octet-stream"),
            )
            .await?;
        Ok(body)
    }

    /// POSTs a JSON body and reads a JSON answer.
    pub async fn post_json<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        url: Url,
        body: &B,
    ) -> Result<T, AzureDevOpsError> {
        let (operation, response) = self.send(Method::POST, url, Some(body), None).await?;
        parse_json(&operation, &response)
    }

    /// PATCHes a JSON body and reads a JSON answer.
    pub async fn patch_json<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        url: Url,
        body: &B,
    ) -> Result<T, AzureDevOpsError> {
        let (operation, response) = self.send(Method::PATCH, url, Some(body), None).await?;
        parse_json(&operation, &response)
    }

    /// Sends a request and returns the body of a 2xx answer (other than 203).
    /// With Entra ID tokens from a credential, an answer refusing the token
    /// (401, or the 203 sign-in page) before its expiry is sent once more
    /// with a new token ([`RefreshingToken::send_with_token`]); refused
    /// again, the error says so and stays permanent.
    async fn send<B: Serialize + ?Sized>(
        &self,
        method: Method,
        url: Url,
        body: Option<&B>,
        accept: Option<&'static str>,
    ) -> Result<(String, Vec<u8>), AzureDevOpsError> {
        let operation = format!("{method} {}", url.path());
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|err| AzureDevOpsError::UnexpectedResponse {
                operation: operation.clone(),
                reason: format!("could not encode the request: {err}"),
            })?;
        let attempt = |token: Option<String>| Attempt {
            method: method.clone(),
            url: url.clone(),
            operation: &operation,
            accept,
            body: body.clone(),
            token,
        };
        let (reply, fresh_token_refused) = match &self.tokens {
            Some(tokens) => {
                let answered = tokens
                    .send_with_token(
                        |token| self.attempt(attempt(Some(token))),
                        |reply: &Reply| refuses_token(reply.status),
                    )
                    .await?;
                (answered.answer, answered.fresh_token_refused)
            }
            None => (self.attempt(attempt(None)).await?, false),
        };
        let Reply {
            status,
            retry_after,
            body,
        } = reply;
        if status.is_success() && status != StatusCode::NON_AUTHORITATIVE_INFORMATION {
            return Ok((operation, body));
        }
        let (type_key, mut message) = error_details(status, &body);
        if fresh_token_refused {
            message = format!("{message}; {FRESH_TOKEN_REFUSED}");
        }
        Err(AzureDevOpsError::Status {
            operation,
            status: status.as_u16(),
            type_key,
            message,
            retry_after,
        })
    }

    /// Sends one request and reads its whole answer, whatever its status.
    async fn attempt(&self, attempt: Attempt<'_>) -> Result<Reply, AzureDevOpsError> {
        let Attempt {
            method,
            url,
            operation,
            accept,
            body,
            token,
        } = attempt;
        let mut request = self.http.request(method, url);
        if let Some(token) = token {
            request = request.header(AUTHORIZATION, sensitive_header(&format!("Bearer {token}"))?);
        }
        if let Some(accept) = accept {
            request = request.header(ACCEPT, accept);
        }
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let transport = |source| AzureDevOpsError::Transport {
            operation: operation.to_owned(),
            source,
        };
        let response = http::send(request).await.map_err(transport)?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let body = response.bytes().await.map_err(transport)?.to_vec();
        tracing::debug!(%operation, status = status.as_u16(), "azure devops call");
        Ok(Reply {
            status,
            retry_after,
            body,
        })
    }
}

/// One request [`AzureDevOpsClient::send`] sends: the same for a retry
/// with a new token, but the token.
struct Attempt<'a> {
    method: Method,
    url: Url,
    operation: &'a str,
    accept: Option<&'static str>,
    body: Option<Vec<u8>>,
    /// The Entra ID token; `None` when the credential is a default header.
    token: Option<String>,
}

/// An answer, read whole.
struct Reply {
    status: StatusCode,
    retry_after: Option<Duration>,
    body: Vec<u8>,
}

/// Whether Azure DevOps refused the bearer token: 401, or the 203 sign-in
/// page it serves for a token it does not take.
fn refuses_token(status: StatusCode) -> bool {
    status == StatusCode::UNAUTHORIZED || status == StatusCode::NON_AUTHORITATIVE_INFORMATION
}

impl From<CredentialError> for AzureDevOpsError {
    fn from(err: CredentialError) -> Self {
        Self::Credential(err.to_string())
    }
}

fn parse_json<T: DeserializeOwned>(operation: &str, body: &[u8]) -> Result<T, AzureDevOpsError> {
    serde_json::from_slice(body).map_err(|err| AzureDevOpsError::UnexpectedResponse {
        operation: operation.to_owned(),
        reason: err.to_string(),
    })
}

/// The `typeKey` and `message` of an Azure DevOps error body.
fn error_details(status: StatusCode, body: &[u8]) -> (Option<String>, String) {
    if status == StatusCode::NON_AUTHORITATIVE_INFORMATION {
        return (
            None,
            "sign-in page returned: the token is missing, expired or invalid".to_owned(),
        );
    }
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| {
        parsed
            .as_ref()
            .and_then(|value| value.get(name))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    let mut message = field("message").unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_owned());
    if message.len() > MAX_ERROR_MESSAGE {
        let mut cut = MAX_ERROR_MESSAGE;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    (field("typeKey"), message)
}

#[cfg(test)]
mod tests;
