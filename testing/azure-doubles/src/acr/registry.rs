//! The registry's login server: ACR's token endpoints and the read side of
//! the OCI distribution API, over the images the runs built.
//!
//! - `POST /oauth2/exchange` (`grant_type=access_token`, `service`,
//!   `access_token`, optional `tenant`): the Entra token must be valid in
//!   the [`crate::TokenBook`] the registry was given and be for ARM or the
//!   registry (`https://management.azure.com/.default`,
//!   `https://containerregistry.azure.net/.default`); `service` must be the
//!   login server. Answers `{"refresh_token"}`.
//! - `POST /oauth2/token` (`grant_type=refresh_token`, `service`, `scope`,
//!   `refresh_token`): the refresh token must be one the exchange issued.
//!   `GET /oauth2/token?service=&scope=` with the admin user's Basic
//!   credentials. Both answer `{"access_token"}` for the one
//!   `repository:<name>:<actions>` scope asked.
//! - `GET`/`HEAD /v2/<name>/manifests/<tag or digest>`,
//!   `/v2/<name>/blobs/<digest>`, `GET /v2/<name>/tags/list`: only with an
//!   access token whose scope is that repository with `pull` (`401
//!   UNAUTHORIZED` with the `WWW-Authenticate: Bearer realm=..,service=..,scope=..`
//!   challenge otherwise); unknown ones are `404 MANIFEST_UNKNOWN`,
//!   `BLOB_UNKNOWN`, `NAME_UNKNOWN` in the distribution API's error shape.

use std::collections::{BTreeMap, HashMap};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;

use super::{AcrBackend, Shared};
use crate::entra::percent_decode;
use crate::serve::lock;

/// The Entra scopes `/oauth2/exchange` accepts tokens of.
const EXCHANGE_SCOPES: [&str; 2] = [
    "https://management.azure.com/.default",
    "https://containerregistry.azure.net/.default",
];

/// An image the registry holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// `sha256:<hex>` of the manifest.
    pub digest: String,
    /// The manifest's media type.
    pub media_type: String,
    /// The manifest's bytes.
    pub manifest: Vec<u8>,
}

/// What a build stores: a manifest under tags, and the blobs it names.
#[derive(Debug, Clone)]
pub(crate) struct Artifact {
    pub(crate) repository: String,
    pub(crate) tags: Vec<String>,
    pub(crate) image: Image,
    pub(crate) blobs: Vec<(String, Vec<u8>)>,
}

#[derive(Debug, Default)]
struct Repository {
    tags: BTreeMap<String, String>,
    manifests: HashMap<String, Image>,
}

/// The images, blobs and ACR tokens.
#[derive(Debug, Default)]
pub(super) struct Store {
    repositories: HashMap<String, Repository>,
    blobs: HashMap<String, Vec<u8>>,
    refresh_tokens: Vec<String>,
    /// Access token → (repository, actions).
    access_tokens: HashMap<String, (String, Vec<String>)>,
}

impl Store {
    pub(super) fn store(&mut self, artifact: &Artifact) {
        for (digest, bytes) in &artifact.blobs {
            self.blobs.insert(digest.clone(), bytes.clone());
        }
        let repository = self.repositories.entry(artifact.repository.clone()).or_default();
        repository
            .manifests
            .insert(artifact.image.digest.clone(), artifact.image.clone());
        for tag in &artifact.tags {
            repository.tags.insert(tag.clone(), artifact.image.digest.clone());
        }
    }

    pub(super) fn image(&self, repository: &str, reference: &str) -> Option<Image> {
        let repository = self.repositories.get(repository)?;
        let digest = if reference.starts_with("sha256:") {
            reference
        } else {
            repository.tags.get(reference)?
        };
        repository.manifests.get(digest).cloned()
    }

    pub(super) fn tags(&self, repository: &str) -> Vec<String> {
        self.repositories
            .get(repository)
            .map(|repository| repository.tags.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub(super) fn manifest_count(&self) -> usize {
        self.repositories
            .values()
            .map(|repository| repository.manifests.len())
            .sum()
    }
}

pub(super) fn router(state: Shared) -> Router {
    Router::new()
        .route("/oauth2/exchange", post(exchange))
        .route("/oauth2/token", post(refresh_to_access).get(basic_to_access))
        .route("/v2/", get(base))
        .route("/v2/{*rest}", get(read))
        .with_state(state)
}

fn oci_error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"errors": [{"code": code, "message": message, "detail": null}]})),
    )
        .into_response()
}

fn form(body: &str) -> HashMap<String, String> {
    body.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| (percent_decode(name), percent_decode(value)))
        .collect()
}

fn new_token(kind: &str) -> String {
    format!("acr-{kind}.{}", uuid::Uuid::new_v4().simple())
}

async fn exchange(State(shared): State<Shared>, body: String) -> Response {
    let form = form(&body);
    let field = |name: &str| form.get(name).map(String::as_str).unwrap_or_default();
    if field("grant_type") != "access_token" {
        return oci_error(
            StatusCode::BAD_REQUEST,
            "UNSUPPORTED",
            "grant_type must be access_token",
        );
    }
    let mut state = lock(&shared);
    if field("service") != state.config.login_server {
        return oci_error(
            StatusCode::BAD_REQUEST,
            "DENIED",
            &format!("service must be {}", state.config.login_server),
        );
    }
    let accepted = state
        .config
        .entra
        .as_ref()
        .map(|book| book.check(field("access_token")))
        .is_some_and(|grant| grant.is_ok_and(|grant| EXCHANGE_SCOPES.contains(&grant.scope.as_str())));
    if !accepted {
        return oci_error(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "the access token is not valid for this registry",
        );
    }
    let refresh = new_token("refresh");
    state.registry.refresh_tokens.push(refresh.clone());
    axum::Json(json!({"refresh_token": refresh})).into_response()
}

/// `repository:<name>:<actions>` → (name, actions).
fn parse_scope(scope: &str) -> Option<(String, Vec<String>)> {
    let scope = scope.split(' ').next()?;
    let rest = scope.strip_prefix("repository:")?;
    let (name, actions) = rest.rsplit_once(':')?;
    Some((name.to_owned(), actions.split(',').map(str::to_owned).collect()))
}

fn grant_access(shared: &Shared, scope: &str) -> Response {
    let Some(scope) = parse_scope(scope) else {
        return oci_error(
            StatusCode::BAD_REQUEST,
            "UNSUPPORTED",
            "scope must be repository:<name>:<actions>",
        );
    };
    let token = new_token("access");
    lock(shared).registry.access_tokens.insert(token.clone(), scope);
    axum::Json(json!({"access_token": token})).into_response()
}

async fn refresh_to_access(State(shared): State<Shared>, body: String) -> Response {
    let form = form(&body);
    let field = |name: &str| form.get(name).map(String::as_str).unwrap_or_default();
    if field("grant_type") != "refresh_token" {
        return oci_error(
            StatusCode::BAD_REQUEST,
            "UNSUPPORTED",
            "grant_type must be refresh_token",
        );
    }
    {
        let state = lock(&shared);
        if field("service") != state.config.login_server {
            return oci_error(
                StatusCode::BAD_REQUEST,
                "DENIED",
                &format!("service must be {}", state.config.login_server),
            );
        }
        if !state
            .registry
            .refresh_tokens
            .iter()
            .any(|known| known == field("refresh_token"))
        {
            return oci_error(
                StatusCode::UNAUTHORIZED,
                "UNAUTHORIZED",
                "the refresh token is not valid",
            );
        }
    }
    grant_access(&shared, field("scope"))
}

async fn basic_to_access(
    State(shared): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Basic "))
        .and_then(|encoded| STANDARD.decode(encoded.trim()).ok())
        .and_then(|raw| String::from_utf8(raw).ok());
    let admin = lock(&shared)
        .config
        .admin
        .as_ref()
        .map(|(user, password)| format!("{user}:{password}"));
    if presented.is_none() || presented != admin {
        return oci_error(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", "authentication required");
    }
    grant_access(&shared, query.get("scope").map(String::as_str).unwrap_or_default())
}

/// `401` with the challenge telling a client where to get a token.
fn challenge(shared: &Shared, headers: &HeaderMap, repository: Option<&str>) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("127.0.0.1");
    let service = lock(shared).config.login_server.clone();
    let mut value = format!("Bearer realm=\"http://{host}/oauth2/token\",service=\"{service}\"");
    if let Some(repository) = repository {
        value.push_str(&format!(",scope=\"repository:{repository}:pull\""));
    }
    let mut response = oci_error(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", "authentication required");
    if let Ok(value) = value.parse() {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// The repository the request's access token may pull, if any.
fn pullable(shared: &Shared, headers: &HeaderMap) -> Option<String> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))?;
    let state = lock(shared);
    let (repository, actions) = state.registry.access_tokens.get(token.trim())?;
    actions
        .iter()
        .any(|action| action == "pull" || action == "*")
        .then(|| repository.clone())
}

async fn base(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    match pullable(&shared, &headers) {
        Some(_) => axum::Json(json!({})).into_response(),
        None => challenge(&shared, &headers, None),
    }
}

async fn read(State(shared): State<Shared>, Path(rest): Path<String>, method: Method, headers: HeaderMap) -> Response {
    let (repository, kind, reference) = if let Some((repository, reference)) = rest.rsplit_once("/manifests/") {
        (repository, "manifests", reference)
    } else if let Some((repository, reference)) = rest.rsplit_once("/blobs/") {
        (repository, "blobs", reference)
    } else if let Some(repository) = rest.strip_suffix("/tags/list") {
        (repository, "tags", "")
    } else {
        return oci_error(StatusCode::NOT_FOUND, "NAME_UNKNOWN", "no such API");
    };
    if pullable(&shared, &headers).as_deref() != Some(repository) {
        return challenge(&shared, &headers, Some(repository));
    }
    let upstream = {
        let state = lock(&shared);
        match &state.config.backend {
            AcrBackend::Buildah(config) => Some((config.registry.clone(), state.http.clone())),
            AcrBackend::Builtin => None,
        }
    };
    if let Some((registry, client)) = upstream {
        return proxy(&client, &registry, method, &rest, &headers).await;
    }
    let state = lock(&shared);
    match kind {
        "manifests" => match state.registry.image(repository, reference) {
            Some(image) => (
                StatusCode::OK,
                [
                    (header::CONTENT_TYPE, image.media_type.clone()),
                    (
                        header::HeaderName::from_static("docker-content-digest"),
                        image.digest.clone(),
                    ),
                ],
                image.manifest,
            )
                .into_response(),
            None => oci_error(
                StatusCode::NOT_FOUND,
                "MANIFEST_UNKNOWN",
                &format!("manifest tagged by \"{reference}\" is not found"),
            ),
        },
        "blobs" => {
            let known = state
                .registry
                .repositories
                .get(repository)
                .is_some_and(|repo| !repo.manifests.is_empty());
            match state.registry.blobs.get(reference).filter(|_| known) {
                Some(bytes) => (
                    StatusCode::OK,
                    [
                        (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
                        (
                            header::HeaderName::from_static("docker-content-digest"),
                            reference.to_owned(),
                        ),
                    ],
                    bytes.clone(),
                )
                    .into_response(),
                None => oci_error(StatusCode::NOT_FOUND, "BLOB_UNKNOWN", "blob unknown to registry"),
            }
        }
        _ => {
            if !state.registry.repositories.contains_key(repository) {
                return oci_error(
                    StatusCode::NOT_FOUND,
                    "NAME_UNKNOWN",
                    &format!("repository \"{repository}\" is not found"),
                );
            }
            axum::Json(json!({"name": repository, "tags": state.registry.tags(repository)})).into_response()
        }
    }
}

/// The headers of the registry's answer passed on to the client.
const PASSED_ON: [&str; 4] = ["content-type", "content-length", "docker-content-digest", "etag"];

/// Reads `/v2/<rest>` from the real registry (buildah backend), with the
/// client's `Accept`; its status, headers of [`PASSED_ON`] and body are the
/// answer. A registry that cannot be reached is `503`.
async fn proxy(client: &reqwest::Client, registry: &str, method: Method, rest: &str, headers: &HeaderMap) -> Response {
    let method = if method == Method::HEAD {
        reqwest::Method::HEAD
    } else {
        reqwest::Method::GET
    };
    let mut request = client.request(method, format!("http://{registry}/v2/{rest}"));
    for accept in headers.get_all(header::ACCEPT) {
        if let Ok(accept) = accept.to_str() {
            request = request.header(reqwest::header::ACCEPT, accept);
        }
    }
    let answer = match request.send().await {
        Ok(answer) => answer,
        Err(err) => {
            tracing::warn!(%registry, error = %err, "the ACR double's registry cannot be reached");
            return oci_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "UNAVAILABLE",
                &format!("the registry behind the login server cannot be reached: {err}"),
            );
        }
    };
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut passed = HeaderMap::new();
    for name in PASSED_ON {
        if let Some(value) = answer
            .headers()
            .get(name)
            .and_then(|value| header::HeaderValue::from_bytes(value.as_bytes()).ok())
        {
            passed.insert(header::HeaderName::from_static(name), value);
        }
    }
    match answer.bytes().await {
        Ok(body) => (status, passed, body.to_vec()).into_response(),
        Err(err) => oci_error(
            StatusCode::BAD_GATEWAY,
            "UNAVAILABLE",
            &format!("the registry's answer was cut: {err}"),
        ),
    }
}
