//! What every double shares: serving a router on a loopback port
//! ([`serve`]), the faults a test injects ([`Faults`]), the record of every
//! request ([`Journal`]), and who may call ([`Auth`], with the bearer
//! tokens the Entra double issued in a [`TokenBook`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long a [`Fault::Hang`] holds a request before it gives up with 504:
/// longer than any client timeout bosun sets.
const HANG_FOR: Duration = Duration::from_secs(120);

/// A double could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The loopback listener could not be bound; the test cannot run.
    #[error("the {service} double could not listen on 127.0.0.1: {source}")]
    Bind {
        /// Which double.
        service: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS identity could not be loaded; the test cannot run.
    #[error("the {service} double cannot serve TLS: {source}")]
    Tls {
        /// Which double.
        service: &'static str,
        /// Why.
        source: native_tls::Error,
    },
    /// A double's files could not be prepared; the test cannot run.
    #[error("the {service} double could not start: {what}: {source}")]
    Io {
        /// Which double.
        service: &'static str,
        /// What was being done.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
}

/// The certificate and key a double serves HTTPS with: a self-signed
/// certificate for `127.0.0.1` and `localhost` (a CA, valid until 2126),
/// made for these tests only and kept in `testdata/`. A client trusts it by
/// [`TlsIdentity::certificate`], written to a file a client's trust store
/// names (OpenSSL reads `SSL_CERT_FILE`).
#[derive(Debug, Clone, Copy)]
pub struct TlsIdentity {
    certificate: &'static [u8],
    key: &'static [u8],
}

impl TlsIdentity {
    /// The loopback certificate of `testdata/`.
    pub fn loopback() -> Self {
        Self {
            certificate: include_bytes!("../testdata/loopback.crt"),
            key: include_bytes!("../testdata/loopback.key"),
        }
    }

    /// The certificate, PEM.
    pub fn certificate(&self) -> &'static [u8] {
        self.certificate
    }
}

/// Locks a mutex whose data stays consistent even if a holder panicked
/// (every critical section here is a plain read or write).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A fault the real service has, answered instead of the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// `429 Too Many Requests` with `Retry-After` in seconds.
    Throttle {
        /// The `Retry-After` header's value, in seconds.
        retry_after_secs: u64,
    },
    /// A server error (500, 502, 503, 504).
    Status(u16),
    /// No answer within any client's timeout (held two minutes, then 504).
    Hang,
    /// `401` saying the bearer token presented has expired; the token is
    /// marked expired in the [`TokenBook`] too, so only a new one works.
    /// The client's token still says it is valid for as long as it was
    /// issued for: to the client, it is a token revoked before its expiry.
    TokenExpired,
}

impl Fault {
    fn label(&self) -> String {
        match self {
            Self::Throttle { retry_after_secs } => format!("429 Retry-After {retry_after_secs}"),
            Self::Status(status) => status.to_string(),
            Self::Hang => "hang".to_owned(),
            Self::TokenExpired => "token expired".to_owned(),
        }
    }
}

/// Which requests a fault answers, and how many times.
#[derive(Debug, Clone)]
pub struct FaultRule {
    /// Only this double (its name as given to [`serve`]); `None` for any.
    pub service: Option<&'static str>,
    /// Only this method (`"POST"`); `None` for any.
    pub method: Option<String>,
    /// Only paths (with the query) containing this; empty for any.
    pub path_contains: String,
    /// Matching requests this rule passes over before its fault starts
    /// (counted whether or not another rule answers them).
    pub skip: usize,
    /// How many matching requests get the fault.
    pub times: usize,
    /// The answer.
    pub fault: Fault,
}

impl FaultRule {
    /// `fault` for the next `times` requests to `service` whose path contains
    /// `path_contains`, of any method.
    pub fn new(service: &'static str, path_contains: &str, fault: Fault, times: usize) -> Self {
        Self {
            service: Some(service),
            method: None,
            path_contains: path_contains.to_owned(),
            skip: 0,
            times,
            fault,
        }
    }

    /// Only requests of `method`.
    #[must_use]
    pub fn method(mut self, method: &str) -> Self {
        self.method = Some(method.to_owned());
        self
    }

    /// Lets `skip` matching requests through first.
    #[must_use]
    pub fn after(mut self, skip: usize) -> Self {
        self.skip = skip;
        self
    }

    fn matches(&self, service: &str, method: &str, path: &str) -> bool {
        self.service.is_none_or(|wanted| wanted == service)
            && self
                .method
                .as_deref()
                .is_none_or(|wanted| wanted.eq_ignore_ascii_case(method))
            && path.contains(&self.path_contains)
    }
}

/// The faults planned for one or more doubles; share one between doubles
/// to plan a whole delivery's faults in one place.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    rules: Arc<Mutex<Vec<FaultRule>>>,
}

impl Faults {
    /// Plans a fault.
    pub fn add(&self, rule: FaultRule) {
        lock(&self.rules).push(rule);
    }

    /// Drops every planned fault not yet used.
    pub fn clear(&self) {
        lock(&self.rules).clear();
    }

    /// Planned faults that have not fired as many times as planned.
    pub fn pending(&self) -> Vec<FaultRule> {
        lock(&self.rules)
            .iter()
            .filter(|rule| rule.times > 0)
            .cloned()
            .collect()
    }

    /// The fault this request gets, if any (counting it used).
    fn take(&self, service: &str, method: &str, path: &str) -> Option<Fault> {
        let mut rules = lock(&self.rules);
        let mut chosen = None;
        for rule in rules.iter_mut() {
            if rule.times == 0 || !rule.matches(service, method, path) {
                continue;
            }
            if rule.skip > 0 {
                rule.skip -= 1;
            } else if chosen.is_none() {
                rule.times -= 1;
                chosen = Some(rule.fault.clone());
            }
        }
        chosen
    }
}

/// One request a double received and how it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The double's name.
    pub service: &'static str,
    /// The method.
    pub method: String,
    /// The path with its query.
    pub path: String,
    /// The status answered.
    pub status: u16,
    /// The injected fault that answered, if one did.
    pub fault: Option<String>,
}

/// Every request the doubles sharing it received, in order.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl Journal {
    /// Everything so far.
    pub fn entries(&self) -> Vec<Entry> {
        lock(&self.entries).clone()
    }

    /// Requests of `method` (any when empty) to `service` whose path contains
    /// `path_contains` that were answered with a success status.
    pub fn succeeded(&self, service: &str, method: &str, path_contains: &str) -> usize {
        lock(&self.entries)
            .iter()
            .filter(|entry| {
                entry.service == service
                    && (method.is_empty() || entry.method.eq_ignore_ascii_case(method))
                    && entry.path.contains(path_contains)
                    && (200..300).contains(&entry.status)
            })
            .count()
    }

    /// The faults each double answered with, as `(service, fault)`.
    pub fn faults(&self) -> Vec<(&'static str, String)> {
        lock(&self.entries)
            .iter()
            .filter_map(|entry| entry.fault.clone().map(|fault| (entry.service, fault)))
            .collect()
    }

    fn push(&self, entry: Entry) {
        lock(&self.entries).push(entry);
    }
}

/// A bearer token the Entra double issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The client (application) id it was issued to.
    pub client_id: String,
    /// The scope it was asked for (`https://management.azure.com/.default`).
    pub scope: String,
    /// When it stops being accepted.
    pub expires_at: Instant,
}

/// Why a bearer token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenProblem {
    /// Never issued here.
    Unknown,
    /// Issued, and past its expiry.
    Expired,
}

/// The bearer tokens the Entra double issued, which the other doubles
/// accept until they expire.
#[derive(Debug, Clone, Default)]
pub struct TokenBook {
    tokens: Arc<Mutex<HashMap<String, Issued>>>,
}

impl TokenBook {
    /// Issues a token to `client_id` for `scope`, valid for `lifetime`.
    pub fn issue(&self, client_id: &str, scope: &str, lifetime: Duration) -> String {
        let token = format!("double.{}", uuid::Uuid::new_v4().simple());
        let issued = Issued {
            client_id: client_id.to_owned(),
            scope: scope.to_owned(),
            expires_at: Instant::now() + lifetime,
        };
        lock(&self.tokens).insert(token.clone(), issued);
        token
    }

    /// The token's grant when it is valid now.
    pub fn check(&self, token: &str) -> Result<Issued, TokenProblem> {
        let tokens = lock(&self.tokens);
        let issued = tokens.get(token).ok_or(TokenProblem::Unknown)?;
        if issued.expires_at <= Instant::now() {
            return Err(TokenProblem::Expired);
        }
        Ok(issued.clone())
    }

    /// Makes `token` expired from now on.
    pub fn expire(&self, token: &str) {
        if let Some(issued) = lock(&self.tokens).get_mut(token) {
            issued.expires_at = Instant::now();
        }
    }

    /// Makes every token issued so far expired from now on, whatever its
    /// lifetime said, as a revocation or a signing-key rollover leaves them:
    /// a client still holds tokens it believes valid, and only new ones
    /// work. Unlike [`Fault::TokenExpired`], it also reaches tokens sent in
    /// a form rather than a header (ACR's `/oauth2/exchange`).
    pub fn expire_all(&self) {
        let now = Instant::now();
        for issued in lock(&self.tokens).values_mut() {
            issued.expires_at = issued.expires_at.min(now);
        }
    }

    /// How many tokens were issued.
    pub fn issued(&self) -> usize {
        lock(&self.tokens).len()
    }
}

/// Who may call a double. Nothing is accepted until something is allowed;
/// [`Auth::open`] accepts every request.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    open: bool,
    passwords: Vec<String>,
    bearers: Vec<String>,
    tokens: Option<TokenBook>,
}

impl Auth {
    /// Every request, with or without credentials.
    pub fn open() -> Self {
        Self {
            open: true,
            ..Self::default()
        }
    }

    /// HTTP Basic auth whose password is `password` (an Azure DevOps personal
    /// access token, any user name).
    #[must_use]
    pub fn basic_password(mut self, password: &str) -> Self {
        self.passwords.push(password.to_owned());
        self
    }

    /// A fixed bearer token (an Argo CD API token).
    #[must_use]
    pub fn bearer(mut self, token: &str) -> Self {
        self.bearers.push(token.to_owned());
        self
    }

    /// Bearer tokens the Entra double issued, while they are valid.
    #[must_use]
    pub fn entra(mut self, tokens: TokenBook) -> Self {
        self.tokens = Some(tokens);
        self
    }

    /// `None` when the request may go on, otherwise the answer refusing it.
    fn refuse(&self, headers: &HeaderMap) -> Option<Response> {
        if self.open {
            return None;
        }
        let value = headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok());
        let Some(value) = value else {
            return Some(unauthorized("no Authorization header", false));
        };
        if let Some(encoded) = value.strip_prefix("Basic ") {
            let decoded = STANDARD
                .decode(encoded.trim())
                .ok()
                .and_then(|raw| String::from_utf8(raw).ok());
            let password = decoded
                .as_deref()
                .and_then(|pair| pair.split_once(':'))
                .map(|(_, pw)| pw);
            return match password {
                Some(password) if self.passwords.iter().any(|known| known == password) => None,
                _ => Some(unauthorized("the Basic credentials are not accepted", false)),
            };
        }
        let Some(token) = value.strip_prefix("Bearer ").map(str::trim) else {
            return Some(unauthorized("the Authorization scheme is not Basic or Bearer", false));
        };
        if self.bearers.iter().any(|known| known == token) {
            return None;
        }
        match self.tokens.as_ref().map(|book| book.check(token)) {
            Some(Ok(_)) => None,
            Some(Err(TokenProblem::Expired)) => Some(unauthorized("the access token has expired", true)),
            _ => Some(unauthorized("the bearer token is not accepted", false)),
        }
    }
}

/// `401` as Azure answers it: `WWW-Authenticate: Bearer` (with
/// `error="invalid_token"` for an expired token) and a JSON message.
fn unauthorized(message: &str, expired: bool) -> Response {
    let challenge = if expired {
        format!("Bearer error=\"invalid_token\", error_description=\"{message}\"")
    } else {
        "Bearer".to_owned()
    };
    let mut response = (
        StatusCode::UNAUTHORIZED,
        axum::Json(serde_json::json!({ "error": { "code": "InvalidAuthenticationToken", "message": message } })),
    )
        .into_response();
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// What the middleware in front of every double holds.
#[derive(Clone)]
struct Front {
    service: &'static str,
    faults: Faults,
    journal: Journal,
    auth: Auth,
    tokens: Option<TokenBook>,
}

/// A double being served; dropping it stops it.
#[derive(Debug)]
pub struct Running {
    service: &'static str,
    scheme: &'static str,
    addr: SocketAddr,
    faults: Faults,
    journal: Journal,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Running {
    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (`https://` when served with TLS), without
    /// a trailing slash.
    pub fn base_url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// The double's name.
    pub fn service(&self) -> &'static str {
        self.service
    }

    /// Its fault plan.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Its journal.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Stops serving and waits for the server to end.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Serves `router` as the double named `service` on `127.0.0.1:0`, in front
/// of it the fault plan, the journal and `auth`. `tokens`, when given, is
/// the book [`Fault::TokenExpired`] marks the presented token expired in.
pub async fn serve(
    service: &'static str,
    router: Router,
    faults: Faults,
    journal: Journal,
    auth: Auth,
) -> Result<Running, ServeError> {
    start(service, router, faults, journal, auth, None).await
}

/// [`serve`] over HTTPS with `identity`.
pub async fn serve_tls(
    service: &'static str,
    router: Router,
    faults: Faults,
    journal: Journal,
    auth: Auth,
    identity: TlsIdentity,
) -> Result<Running, ServeError> {
    let identity = native_tls::Identity::from_pkcs8(identity.certificate, identity.key)
        .map_err(|source| ServeError::Tls { service, source })?;
    let acceptor = native_tls::TlsAcceptor::new(identity).map_err(|source| ServeError::Tls { service, source })?;
    let acceptor = tokio_native_tls::TlsAcceptor::from(acceptor);
    start(service, router, faults, journal, auth, Some(acceptor)).await
}

async fn start(
    service: &'static str,
    router: Router,
    faults: Faults,
    journal: Journal,
    auth: Auth,
    tls: Option<tokio_native_tls::TlsAcceptor>,
) -> Result<Running, ServeError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|source| ServeError::Bind { service, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { service, source })?;
    let tokens = auth.tokens.clone();
    let front = Front {
        service,
        faults: faults.clone(),
        journal: journal.clone(),
        auth,
        tokens,
    };
    let app = router.layer(middleware::from_fn_with_state(front, in_front));
    let (stop, stopped) = oneshot::channel::<()>();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let task = match tls {
        None => tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            if let Err(error) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
                tracing::warn!(service, %error, "a double stopped serving");
            }
        }),
        Some(acceptor) => tokio::spawn(serve_tls_connections(listener, app, acceptor, stopped)),
    };
    Ok(Running {
        service,
        scheme,
        addr,
        faults,
        journal,
        stop: Some(stop),
        task: Some(task),
    })
}

/// Accepts TLS connections until `stopped`, each served by `app` over
/// HTTP/1.1 on its own task.
async fn serve_tls_connections(
    listener: TcpListener,
    app: Router,
    acceptor: tokio_native_tls::TlsAcceptor,
    mut stopped: oneshot::Receiver<()>,
) {
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else {
            continue;
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(stream).await else {
                return;
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Journal, then faults, then auth, then the double.
async fn in_front(State(front): State<Front>, request: Request, next: Next) -> Response {
    let method = request.method().as_str().to_owned();
    let path = request
        .uri()
        .path_and_query()
        .map_or_else(|| request.uri().path().to_owned(), |pq| pq.as_str().to_owned());
    let fault = front.faults.take(front.service, &method, &path);
    let response = match &fault {
        Some(fault) => answer_fault(fault, &front, request.headers()).await,
        None => match front.auth.refuse(request.headers()) {
            Some(refused) => refused,
            None => next.run(request).await,
        },
    };
    front.journal.push(Entry {
        service: front.service,
        method,
        path,
        status: response.status().as_u16(),
        fault: fault.as_ref().map(Fault::label),
    });
    response
}

async fn answer_fault(fault: &Fault, front: &Front, headers: &HeaderMap) -> Response {
    match fault {
        Fault::Throttle { retry_after_secs } => {
            let mut response = (
                StatusCode::TOO_MANY_REQUESTS,
                axum::Json(serde_json::json!({
                    "error": { "code": "TooManyRequests", "message": "the request was throttled; retry after the time given" }
                })),
            )
                .into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
            response
        }
        Fault::Status(status) => {
            let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (
                status,
                axum::Json(serde_json::json!({
                    "error": { "code": "InternalServerError", "message": "an injected server error" }
                })),
            )
                .into_response()
        }
        Fault::Hang => {
            tokio::time::sleep(HANG_FOR).await;
            Response::builder()
                .status(StatusCode::GATEWAY_TIMEOUT)
                .body(Body::empty())
                .unwrap_or_default()
        }
        Fault::TokenExpired => {
            let presented = headers
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.strip_prefix("Bearer "));
            if let (Some(book), Some(token)) = (&front.tokens, presented) {
                book.expire(token.trim());
            }
            unauthorized("the access token has expired", true)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use axum::routing::get;

    async fn hello() -> &'static str {
        "hello"
    }

    async fn start(auth: Auth) -> Running {
        let router = Router::new().route("/hello", get(hello));
        serve("test", router, Faults::default(), Journal::default(), auth)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn faults_fire_as_planned_then_the_double_answers() {
        let running = start(Auth::open()).await;
        running
            .faults()
            .add(FaultRule::new("test", "/hello", Fault::Throttle { retry_after_secs: 2 }, 1).after(1));
        running
            .faults()
            .add(FaultRule::new("test", "/hello", Fault::Status(503), 1).after(3));
        let client = reqwest::Client::new();
        let url = format!("{}/hello", running.base_url());
        let mut seen = Vec::new();
        for _ in 0..4 {
            let answer = client.get(&url).send().await.unwrap();
            seen.push((answer.status().as_u16(), answer.headers().get("retry-after").cloned()));
        }
        assert_eq!(seen[0].0, 200, "both rules let the first through");
        assert_eq!(seen[1], (429, Some(HeaderValue::from(2u64))));
        assert_eq!(seen[2].0, 200, "the second rule passes over its third");
        assert_eq!(seen[3].0, 503);
        assert!(running.faults().pending().is_empty());
        assert_eq!(running.journal().faults().len(), 2);
        assert_eq!(running.journal().succeeded("test", "GET", "/hello"), 2);
    }

    #[tokio::test]
    async fn auth_accepts_a_pat_and_issued_tokens_until_they_expire() {
        let book = TokenBook::default();
        let running = start(Auth::default().basic_password("pat").entra(book.clone())).await;
        let client = reqwest::Client::new();
        let url = format!("{}/hello", running.base_url());
        let status = |request: reqwest::RequestBuilder| async move { request.send().await.unwrap().status().as_u16() };
        assert_eq!(status(client.get(&url)).await, 401);
        assert_eq!(status(client.get(&url).basic_auth("", Some("pat"))).await, 200);
        assert_eq!(status(client.get(&url).basic_auth("", Some("other"))).await, 401);
        let token = book.issue("app", "scope", Duration::from_secs(60));
        assert_eq!(status(client.get(&url).bearer_auth(&token)).await, 200);
        assert_eq!(status(client.get(&url).bearer_auth("made-up")).await, 401);
        running.faults().add(FaultRule::new("test", "", Fault::TokenExpired, 1));
        let expired = client.get(&url).bearer_auth(&token).send().await.unwrap();
        assert_eq!(expired.status().as_u16(), 401);
        let challenge = expired
            .headers()
            .get("www-authenticate")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        assert!(challenge.contains("invalid_token"), "{challenge}");
        assert_eq!(
            status(client.get(&url).bearer_auth(&token)).await,
            401,
            "the token stays expired"
        );
        let fresh = book.issue("app", "scope", Duration::from_secs(60));
        assert_eq!(status(client.get(&url).bearer_auth(&fresh)).await, 200);
    }

    #[tokio::test]
    async fn expiring_all_tokens_refuses_those_issued_before_and_accepts_new_ones() {
        let book = TokenBook::default();
        let running = start(Auth::default().entra(book.clone())).await;
        let client = reqwest::Client::new();
        let url = format!("{}/hello", running.base_url());
        let status = |token: String| {
            let request = client.get(&url).bearer_auth(token);
            async move { request.send().await.unwrap().status().as_u16() }
        };
        let old = book.issue("app", "scope", Duration::from_secs(3600));
        assert_eq!(status(old.clone()).await, 200);
        book.expire_all();
        assert_eq!(book.check(&old).unwrap_err(), TokenProblem::Expired);
        assert_eq!(status(old).await, 401);
        let new = book.issue("app", "scope", Duration::from_secs(3600));
        assert_eq!(status(new).await, 200);
    }
}
