//! A Microsoft Entra ID token endpoint (v2.0): the client credentials grant
//! with a client secret, and with a client assertion, which is how
//! workload identity exchanges a Kubernetes service-account token (a
//! federated credential) for an access token.
//!
//! Served:
//!
//! - `POST /{tenant}/oauth2/v2.0/token` (form-encoded): `grant_type=client_credentials`,
//!   `client_id`, `scope`, and either `client_secret`, or
//!   `client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer`
//!   with `client_assertion`. Answers as Entra does: `200` with
//!   `token_type`, `expires_in`, `ext_expires_in`, `access_token`; errors
//!   with `error`, `error_description` (starting `AADSTS<code>:`),
//!   `error_codes`, `timestamp`, `trace_id`, `correlation_id`, `error_uri`.
//! - `GET /{tenant}/v2.0/.well-known/openid-configuration` and
//!   `GET /common/discovery/instance`, which MSAL (under Python's
//!   `azure-identity`) asks for before its first token request.
//!
//! What it checks, per request (each failure is the AADSTS error Entra
//! answers for it):
//!
//! - the tenant is one the test registered (`AADSTS90002`);
//! - `grant_type` is present (`AADSTS900144`) and is `client_credentials`
//!   (`AADSTS70003`);
//! - `client_id` names an application registered in that tenant
//!   (`AADSTS700016`);
//! - `scope` is present and is a resource followed by `/.default`
//!   (`AADSTS1002012`), as the client credentials flow requires;
//! - a `client_secret` is one of the application's secrets
//!   (`AADSTS7000215`);
//! - a `client_secret` or a `client_assertion` is there (`AADSTS7000218`);
//! - a `client_assertion` has the jwt-bearer assertion type
//!   (`invalid_request`; its AADSTS code, 700023, is the double's guess),
//!   is a JWT (three base64url
//!   parts with JSON header and claims: `AADSTS50027`), is within its
//!   `nbf`/`exp` window (`AADSTS700024`), and its `iss`, `sub` and `aud`
//!   match one federated credential registered on the application
//!   (`AADSTS700211` issuer, `AADSTS700213` subject, `AADSTS700212`
//!   audience). Its signature is not verified: the double has no
//!   issuer's signing keys (Entra verifies it against the issuer's
//!   published keys).
//!
//! Every token issued goes into the shared [`TokenBook`] with the
//! double's token lifetime ([`EntraDouble::set_token_lifetime`]), so the
//! other doubles accept it until then, and a test can make tokens expire.

pub mod identity;
mod jwt;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::serve::lock;
use crate::{Auth, Faults, Journal, Running, ServeError, TlsIdentity, TokenBook, serve, serve_tls};

pub use jwt::{FederatedToken, unsigned_jwt};

/// The double's name in the journal and fault rules.
pub const SERVICE: &str = "entra";

/// The audience every workload-identity federated token carries.
pub const TOKEN_EXCHANGE_AUDIENCE: &str = "api://AzureADTokenExchange";

/// The client assertion type of a JWT client assertion.
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// How long issued tokens live unless a test says otherwise (Entra's
/// usual 60 to 90 minutes).
pub const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(3599);

/// A federated identity credential on an application: the tokens of this
/// issuer and subject, for this audience, may stand for the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FederatedCredential {
    /// The token issuer (an AKS cluster's OIDC issuer URL).
    pub issuer: String,
    /// The subject (`system:serviceaccount:<namespace>:<name>`).
    pub subject: String,
    /// The audience ([`TOKEN_EXCHANGE_AUDIENCE`]).
    pub audience: String,
}

/// How a token was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantKind {
    /// With a client secret.
    ClientSecret,
    /// With a federated token as client assertion.
    FederatedAssertion,
}

/// A token the double issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The tenant it was asked of.
    pub tenant: String,
    /// The application.
    pub client_id: String,
    /// The scope asked for.
    pub scope: String,
    /// How the application proved itself.
    pub kind: GrantKind,
}

#[derive(Debug, Default)]
struct Application {
    secrets: Vec<String>,
    federated: Vec<FederatedCredential>,
}

#[derive(Debug)]
struct EntraState {
    /// Tenant → client id → application.
    tenants: HashMap<String, HashMap<String, Application>>,
    lifetime: Duration,
    grants: Vec<Grant>,
}

#[derive(Clone)]
struct Shared {
    state: Arc<Mutex<EntraState>>,
    tokens: TokenBook,
}

/// The Entra token endpoint double; dropping it stops it.
#[derive(Debug)]
pub struct EntraDouble {
    running: Running,
    state: Arc<Mutex<EntraState>>,
    tokens: TokenBook,
}

impl EntraDouble {
    /// Serves the token endpoint on a loopback port, issuing tokens into
    /// `tokens` (the book the other doubles' [`Auth::entra`] reads). The
    /// endpoint itself takes no credentials in a header, as Entra's.
    pub async fn start(faults: Faults, journal: Journal, tokens: TokenBook) -> Result<Self, ServeError> {
        Self::start_with(faults, journal, tokens, None).await
    }

    /// [`EntraDouble::start`] over HTTPS with `identity`: what Microsoft's
    /// identity clients require of an authority (`azure_identity` refuses
    /// an `AZURE_AUTHORITY_HOST` that is not https).
    pub async fn start_tls(
        faults: Faults,
        journal: Journal,
        tokens: TokenBook,
        identity: TlsIdentity,
    ) -> Result<Self, ServeError> {
        Self::start_with(faults, journal, tokens, Some(identity)).await
    }

    async fn start_with(
        faults: Faults,
        journal: Journal,
        tokens: TokenBook,
        tls: Option<TlsIdentity>,
    ) -> Result<Self, ServeError> {
        let state = Arc::new(Mutex::new(EntraState {
            tenants: HashMap::new(),
            lifetime: DEFAULT_TOKEN_LIFETIME,
            grants: Vec::new(),
        }));
        let shared = Shared {
            state: state.clone(),
            tokens: tokens.clone(),
        };
        let router = Router::new()
            .route("/{tenant}/oauth2/v2.0/token", post(token))
            .route(
                "/{tenant}/v2.0/.well-known/openid-configuration",
                get(openid_configuration),
            )
            .route("/common/discovery/instance", get(instance_discovery))
            .with_state(shared);
        let running = match tls {
            None => serve(SERVICE, router, faults, journal, Auth::open()).await?,
            Some(identity) => serve_tls(SERVICE, router, faults, journal, Auth::open(), identity).await?,
        };
        Ok(Self { running, state, tokens })
    }

    /// `http://127.0.0.1:PORT` (`https://` with TLS): the authority host
    /// clients are pointed at.
    pub fn base_url(&self) -> String {
        self.running.base_url()
    }

    /// The token endpoint of `tenant`.
    pub fn token_url(&self, tenant: &str) -> String {
        format!("{}/{tenant}/oauth2/v2.0/token", self.base_url())
    }

    /// The served double (its journal and faults).
    pub fn running(&self) -> &Running {
        &self.running
    }

    /// The book tokens are issued into.
    pub fn tokens(&self) -> &TokenBook {
        &self.tokens
    }

    /// Registers the application `client_id` in `tenant` (creating both
    /// when new) with a client secret.
    pub fn add_client_secret(&self, tenant: &str, client_id: &str, secret: &str) {
        let mut state = lock(&self.state);
        let app = state
            .tenants
            .entry(tenant.to_owned())
            .or_default()
            .entry(client_id.to_owned())
            .or_default();
        app.secrets.push(secret.to_owned());
    }

    /// Registers the application `client_id` in `tenant` (creating both
    /// when new) with a federated identity credential.
    pub fn add_federated_credential(&self, tenant: &str, client_id: &str, credential: FederatedCredential) {
        let mut state = lock(&self.state);
        let app = state
            .tenants
            .entry(tenant.to_owned())
            .or_default()
            .entry(client_id.to_owned())
            .or_default();
        app.federated.push(credential);
    }

    /// How long tokens issued from now on live (`expires_in`, and in the
    /// [`TokenBook`]).
    pub fn set_token_lifetime(&self, lifetime: Duration) {
        lock(&self.state).lifetime = lifetime;
    }

    /// Every token issued, in order.
    pub fn grants(&self) -> Vec<Grant> {
        lock(&self.state).grants.clone()
    }
}

/// An Entra error answer: `AADSTS<code>: <message>` with Entra's fields.
fn aadsts(status: StatusCode, error: &str, code: u32, message: &str) -> Response {
    let trace_id = uuid::Uuid::new_v4();
    let correlation_id = uuid::Uuid::new_v4();
    let now = time::OffsetDateTime::now_utc();
    let timestamp = format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    );
    let description =
        format!("AADSTS{code}: {message} Trace ID: {trace_id} Correlation ID: {correlation_id} Timestamp: {timestamp}");
    (
        status,
        axum::Json(json!({
            "error": error,
            "error_description": description,
            "error_codes": [code],
            "timestamp": timestamp,
            "trace_id": trace_id.to_string(),
            "correlation_id": correlation_id.to_string(),
            "error_uri": format!("https://login.microsoftonline.com/error?code={code}"),
        })),
    )
        .into_response()
}

fn missing(parameter: &str) -> Response {
    aadsts(
        StatusCode::BAD_REQUEST,
        "invalid_request",
        900_144,
        &format!("The request body must contain the following parameter: '{parameter}'."),
    )
}

async fn token(State(shared): State<Shared>, Path(tenant): Path<String>, headers: HeaderMap, body: String) -> Response {
    let form_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if !form_type.starts_with("application/x-www-form-urlencoded") {
        return aadsts(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            900_144,
            "The request body must contain the following parameter: 'grant_type'.",
        );
    }
    let form: HashMap<String, String> = form_pairs(&body);
    let field = |name: &str| form.get(name).map(String::as_str).filter(|value| !value.is_empty());
    let Some(grant_type) = field("grant_type") else {
        return missing("grant_type");
    };
    if grant_type != "client_credentials" {
        return aadsts(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            70003,
            &format!("The app requested an unsupported grant type '{grant_type}'."),
        );
    }
    let Some(client_id) = field("client_id") else {
        return missing("client_id");
    };
    let Some(scope) = field("scope") else {
        return missing("scope");
    };
    let mut state = lock(&shared.state);
    let Some(apps) = state.tenants.get(&tenant) else {
        return aadsts(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            90002,
            &format!(
                "Tenant '{tenant}' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud."
            ),
        );
    };
    let Some(app) = apps.get(client_id) else {
        return aadsts(
            StatusCode::BAD_REQUEST,
            "unauthorized_client",
            700_016,
            &format!("Application with identifier '{client_id}' was not found in the directory '{tenant}'."),
        );
    };
    let scopes: Vec<&str> = scope.split(' ').filter(|part| !part.is_empty()).collect();
    if scopes.len() != 1 || !scopes[0].ends_with("/.default") {
        return aadsts(
            StatusCode::BAD_REQUEST,
            "invalid_scope",
            1_002_012,
            &format!(
                "The provided value for scope {scope} is not valid. Client credential flows must have a scope value with /.default suffixed to the resource identifier (application ID URI)."
            ),
        );
    }
    let kind = if let Some(secret) = field("client_secret") {
        if !app.secrets.iter().any(|known| known == secret) {
            return aadsts(
                StatusCode::UNAUTHORIZED,
                "invalid_client",
                7_000_215,
                "Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID.",
            );
        }
        GrantKind::ClientSecret
    } else if let Some(assertion) = field("client_assertion") {
        if field("client_assertion_type") != Some(JWT_BEARER) {
            return aadsts(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                700_023,
                "The client_assertion_type must be urn:ietf:params:oauth:client-assertion-type:jwt-bearer.",
            );
        }
        if let Err(refused) = jwt::check_assertion(assertion, &app.federated) {
            return *refused;
        }
        GrantKind::FederatedAssertion
    } else {
        return aadsts(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            7_000_218,
            "The request body must contain the following parameter: 'client_assertion' or 'client_secret'.",
        );
    };
    let lifetime = state.lifetime;
    let access_token = shared.tokens.issue(client_id, scopes[0], lifetime);
    state.grants.push(Grant {
        tenant: tenant.clone(),
        client_id: client_id.to_owned(),
        scope: scopes[0].to_owned(),
        kind,
    });
    let seconds = lifetime.as_secs();
    axum::Json(json!({
        "token_type": "Bearer",
        "expires_in": seconds,
        "ext_expires_in": seconds,
        "access_token": access_token,
    }))
    .into_response()
}

/// The pairs of an `application/x-www-form-urlencoded` body.
fn form_pairs(body: &str) -> HashMap<String, String> {
    body.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(name), percent_decode(value))
        })
        .collect()
}

/// Decodes `+` and `%XX` of a form field.
pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'+' => out.push(b' '),
            b'%' if index + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[index + 1..index + 3]).ok();
                match hex.and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        index += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The origin a client reached the double by, for the URLs it answers:
/// the `Host` header, and `https` when a TLS-terminating proxy (or a
/// client transport standing in for one) says `X-Forwarded-Proto: https`.
fn origin(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("127.0.0.1");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|value| value.to_str().ok())
        .filter(|scheme| *scheme == "https")
        .unwrap_or("http");
    format!("{scheme}://{host}")
}

async fn openid_configuration(
    State(shared): State<Shared>,
    Path(tenant): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !lock(&shared.state).tenants.contains_key(&tenant) && tenant != "organizations" && tenant != "common" {
        return aadsts(
            StatusCode::BAD_REQUEST,
            "invalid_tenant",
            90002,
            &format!(
                "Tenant '{tenant}' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud."
            ),
        );
    }
    let base = origin(&headers);
    axum::Json(json!({
        "token_endpoint": format!("{base}/{tenant}/oauth2/v2.0/token"),
        "token_endpoint_auth_methods_supported": ["client_secret_post", "private_key_jwt", "client_secret_basic"],
        "jwks_uri": format!("{base}/{tenant}/discovery/v2.0/keys"),
        "response_modes_supported": ["query", "fragment", "form_post"],
        "subject_types_supported": ["pairwise"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "response_types_supported": ["code", "id_token", "code id_token", "id_token token"],
        "scopes_supported": ["openid", "profile", "email", "offline_access"],
        "issuer": format!("{base}/{tenant}/v2.0"),
        "request_uri_parameter_supported": false,
        "userinfo_endpoint": "https://graph.microsoft.com/oidc/userinfo",
        "authorization_endpoint": format!("{base}/{tenant}/oauth2/v2.0/authorize"),
        "device_authorization_endpoint": format!("{base}/{tenant}/oauth2/v2.0/devicecode"),
        "http_logout_supported": true,
        "frontchannel_logout_supported": true,
        "end_session_endpoint": format!("{base}/{tenant}/oauth2/v2.0/logout"),
        "claims_supported": ["sub", "iss", "aud", "exp", "iat", "nbf", "tid", "ver"],
        "tenant_region_scope": "EU",
        "cloud_instance_name": "microsoftonline.com",
        "cloud_graph_host_name": "graph.windows.net",
        "msgraph_host": "graph.microsoft.com",
        "rbac_url": "https://pas.windows.net"
    }))
    .into_response()
}

async fn instance_discovery(headers: HeaderMap, Query(query): Query<HashMap<String, String>>) -> Response {
    // The authority asked about: `https://host/tenant/oauth2/v2.0/authorize`.
    let asked = query
        .get("authorization_endpoint")
        .map(String::as_str)
        .unwrap_or_default();
    let parts: Vec<&str> = asked.split('/').collect();
    let (base, tenant) = match parts.as_slice() {
        [scheme, "", host, tenant, ..] if !host.is_empty() => (format!("{scheme}//{host}"), (*tenant).to_owned()),
        _ => (origin(&headers), "common".to_owned()),
    };
    let host = base.split("//").nth(1).unwrap_or_default().to_owned();
    axum::Json(json!({
        "tenant_discovery_endpoint": format!("{base}/{tenant}/v2.0/.well-known/openid-configuration"),
        "api-version": "1.1",
        "metadata": [{
            "preferred_network": host,
            "preferred_cache": host,
            "aliases": [host]
        }]
    }))
    .into_response()
}
