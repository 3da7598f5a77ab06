//! The Service Bus management API (ATOM/XML over HTTPS, api-version
//! 2021-05): reads what a namespace has, plans what bosun needs
//! ([`super::plan`]), creates what is missing, and checks at start that
//! everything is there.
//!
//! - `GET {path}`: an ATOM entry when the entity exists; 404, or an empty
//!   feed, when it does not. `GET {topic}/Subscriptions/{s}/Rules` lists a
//!   subscription's rules.
//! - `PUT {path}` with `Content-Type: application/atom+xml;type=entry;charset=utf-8`
//!   creates (201; 409 when it already exists); with `If-Match: *` it
//!   replaces (bosun replaces only its own rules).
//! - `DELETE {path}`: bosun deletes nothing but a subscription's `$Default`
//!   rule.
//!
//! Every request carries `Authorization` (a shared access signature for
//! `sb://host/<path>`, or `Bearer <Entra ID token>`) and gives up after 10
//! seconds. Reading needs the `Manage` right (or the Azure Service Bus Data
//! Owner role); so does creating.

use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use reqwest::{Method, StatusCode};
use serde::Serialize;

use super::connection::ServiceBusEndpoint;
use super::credential::{CredentialError, TokenSource};
use super::plan::{
    AtomDocument, AtomEntry, DEFAULT_RULE, EntityKind, EntitySpec, Observed, Plan, PlanAction, TopologyOptions,
    desired_entities, diff, parse_atom, parse_xml,
};
use crate::ports::topology::Topology;

/// The management API version bosun speaks.
pub const API_VERSION: &str = "2021-05";
/// The content type of an ATOM entry sent to the management API.
pub const ATOM_CONTENT_TYPE: &str = "application/atom+xml;type=entry;charset=utf-8";
/// How long one request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How many requests a plan has in flight at once.
const CONCURRENT_REQUESTS: usize = 8;
/// How much of an error body an error keeps.
const BODY_LIMIT: usize = 400;

/// The rights bosun's identity needs for the management API.
const MANAGE_RIGHTS: &str = "the Manage right (a shared access policy with Manage, or the \
                             `Azure Service Bus Data Owner` role for Entra ID)";

/// Why a management operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ManagementError {
    /// The namespace refused the identity.
    #[error("Service Bus refused {detail}: the identity needs {needs} on the namespace")]
    Unauthorized {
        /// The rights the operation needs.
        needs: String,
        /// The refused request and what Service Bus said.
        detail: String,
    },
    /// Entities bosun needs are missing or wrong (what `serve` refuses to start with).
    #[error(
        "the Service Bus namespace is not ready for bosun:\n  - {}\nrun `bosun topology apply` with an identity that has Manage rights",
        .entities.join("\n  - ")
    )]
    Missing {
        /// Each entity and its problem.
        entities: Vec<String>,
    },
    /// The endpoint has no management API (the local emulator, for one).
    #[error("not supported by this endpoint: {what}")]
    Unsupported {
        /// What is missing, and how it showed.
        what: String,
    },
    /// Service Bus answered with an error.
    #[error("Service Bus answered {method} {path} with HTTP {status}: {body}")]
    Http {
        /// The request method.
        method: String,
        /// The entity path.
        path: String,
        /// The HTTP status.
        status: u16,
        /// The error text (trimmed, signatures removed).
        body: String,
    },
    /// The answer was not the ATOM bosun expects.
    #[error("Service Bus answered {path} with something bosun cannot read: {reason}")]
    InvalidResponse {
        /// The entity path.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No token for the request.
    #[error(transparent)]
    Credential(#[from] CredentialError),
    /// The namespace could not be reached (network, timeout).
    #[error("Service Bus management API unavailable: {reason}")]
    Unavailable {
        /// What happened.
        reason: String,
    },
}

/// What [`ManagementClient::apply`] did. Entries are `"<kind> <path>"`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ApplyReport {
    /// Entities created.
    pub created: Vec<String>,
    /// Entities found already there on create (made meanwhile by someone else).
    pub already_present: Vec<String>,
    /// Rules replaced because their filter differed.
    pub updated: Vec<String>,
    /// `$Default` rules deleted.
    pub deleted: Vec<String>,
    /// Entities that differ and that apply leaves as they are, with why.
    pub left_differing: Vec<String>,
    /// Plan items apply refused (a deletion of anything but `$Default`, an
    /// item without an ATOM entry), with why.
    pub refused: Vec<String>,
    /// Entities that were already as bosun needs them.
    pub unchanged: usize,
}

impl std::fmt::Display for ApplyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (label, entries) in [
            ("created", &self.created),
            ("already present", &self.already_present),
            ("replaced", &self.updated),
            ("deleted", &self.deleted),
            ("left as is (differs)", &self.left_differing),
            ("refused", &self.refused),
        ] {
            for entry in entries {
                writeln!(f, "{label}: {entry}")?;
            }
        }
        write!(
            f,
            "{} created, {} replaced, {} deleted, {} unchanged, {} left differing",
            self.created.len() + self.already_present.len(),
            self.updated.len(),
            self.deleted.len(),
            self.unchanged,
            self.left_differing.len()
        )
    }
}

/// An answer to one request.
struct Answer {
    status: StatusCode,
    body: String,
}

/// What a `GET` of one entity found.
enum Lookup {
    /// It exists.
    Found(AtomEntry),
    /// It does not; `answered` is false for a bare 404 (no sign of Service Bus).
    Missing { answered: bool },
}

/// A client of one namespace's management API.
#[derive(Debug, Clone)]
pub struct ManagementClient {
    http: reqwest::Client,
    base_url: String,
    endpoint: ServiceBusEndpoint,
    tokens: TokenSource,
    timeout: Duration,
}

impl ManagementClient {
    /// A client for `endpoint`'s management API at
    /// [`ServiceBusEndpoint::management_url`], authenticating with `tokens`.
    pub fn new(endpoint: &ServiceBusEndpoint, tokens: TokenSource) -> Result<Self, ManagementError> {
        Self::with_timeout(endpoint, tokens, REQUEST_TIMEOUT)
    }

    fn with_timeout(
        endpoint: &ServiceBusEndpoint,
        tokens: TokenSource,
        timeout: Duration,
    ) -> Result<Self, ManagementError> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|err| ManagementError::Unavailable {
                reason: format!("cannot build an HTTP client: {err}"),
            })?;
        Ok(Self {
            http,
            base_url: endpoint.management_url(),
            endpoint: endpoint.clone(),
            tokens,
            timeout,
        })
    }

    /// Sends requests to `base_url` (`http://127.0.0.1:5300`) instead of the
    /// endpoint's management URL: an emulator's HTTP port, a test server.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into().trim_end_matches('/').to_owned();
        self
    }

    /// The URL requests go to.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// What the namespace needs for `topology`: every entity with
    /// [`PlanAction::Create`], `Exists`, `Differs` or (`$Default`) `Delete`.
    /// Changes nothing.
    pub async fn plan(&self, topology: &Topology, options: &TopologyOptions) -> Result<Plan, ManagementError> {
        let specs = desired_entities(topology, options);
        let mut observed = Observed::default();
        let mut answered = false;

        let mut record = |observed: &mut Observed, path: &str, lookup: Lookup| match lookup {
            Lookup::Found(entry) => {
                answered = true;
                observed.entities.insert(path.to_owned(), entry);
            }
            Lookup::Missing { answered: sign } => answered |= sign,
        };

        let first: Vec<&EntitySpec> = specs
            .iter()
            .filter(|spec| matches!(spec.kind, EntityKind::Queue | EntityKind::Topic))
            .collect();
        for (spec, lookup) in self.lookup_all(&first).await? {
            record(&mut observed, &spec.path, lookup);
        }
        if observed.entities.contains_key(&topology.topic) {
            let subscriptions: Vec<&EntitySpec> = specs
                .iter()
                .filter(|spec| spec.kind == EntityKind::Subscription)
                .collect();
            for (spec, lookup) in self.lookup_all(&subscriptions).await? {
                record(&mut observed, &spec.path, lookup);
            }
            let existing: Vec<&str> = subscriptions
                .iter()
                .map(|spec| spec.path.as_str())
                .filter(|path| observed.entities.contains_key(*path))
                .collect();
            let rules: Vec<Result<(&str, Vec<AtomEntry>), ManagementError>> = stream::iter(existing)
                .map(|path| async move { Ok((path, self.rules_of(path).await?)) })
                .buffered(CONCURRENT_REQUESTS)
                .collect()
                .await;
            for result in rules {
                let (path, rules) = result?;
                observed.rules.insert(path.to_owned(), rules);
            }
        }
        if self.endpoint.emulator && !answered {
            return Err(ManagementError::Unsupported {
                what: format!(
                    "the management API at {} answered 404 to every entity; the emulator creates \
                     entities from its own configuration",
                    self.base_url
                ),
            });
        }
        Ok(diff(&specs, &observed))
    }

    /// Carries out `plan` in its order (queues, topic, subscriptions, rules,
    /// `$Default` removal): creates what is missing, replaces bosun's rules
    /// whose filter differs, deletes `$Default` rules. Never deletes
    /// anything else and never changes queue, topic or subscription
    /// settings (those are reported in [`ApplyReport::left_differing`]).
    pub async fn apply(&self, plan: &Plan) -> Result<ApplyReport, ManagementError> {
        let mut report = ApplyReport::default();
        for item in &plan.items {
            let label = format!("{} {}", item.kind, item.path);
            match &item.action {
                PlanAction::Exists => report.unchanged += 1,
                PlanAction::Differs {
                    what,
                    fixed_by_apply: false,
                } => report.left_differing.push(format!("{label}: {}", what.join("; "))),
                PlanAction::Recreate { what } => {
                    tracing::warn!(kind = %item.kind, path = %item.path, differences = %what.join("; "), "must be recreated by hand; apply leaves it");
                    report
                        .left_differing
                        .push(format!("{label}: must be recreated: {}", what.join("; ")));
                }
                PlanAction::Create
                | PlanAction::Differs {
                    fixed_by_apply: true, ..
                } => {
                    let replace = item.action != PlanAction::Create;
                    let Some(entry) = item.entry.as_deref() else {
                        tracing::warn!(kind = %item.kind, path = %item.path, "refused: the plan item has no ATOM entry");
                        report.refused.push(format!(
                            "{label}: no ATOM entry (make plans with ManagementClient::plan)"
                        ));
                        continue;
                    };
                    match (self.put(&item.path, entry, replace).await?, replace) {
                        (true, false) => {
                            tracing::info!(kind = %item.kind, path = %item.path, "created");
                            report.created.push(label);
                        }
                        (true, true) => {
                            tracing::info!(kind = %item.kind, path = %item.path, "replaced");
                            report.updated.push(label);
                        }
                        (false, _) => {
                            tracing::info!(kind = %item.kind, path = %item.path, "already present");
                            report.already_present.push(label);
                        }
                    }
                }
                PlanAction::Delete => {
                    if item.kind != EntityKind::Rule || !item.path.ends_with(&format!("/Rules/{DEFAULT_RULE}")) {
                        tracing::warn!(kind = %item.kind, path = %item.path, "refused to delete: bosun only deletes $Default rules");
                        report.refused.push(format!(
                            "{label}: bosun only ever deletes a subscription's $Default rule"
                        ));
                        continue;
                    }
                    self.delete(&item.path).await?;
                    tracing::info!(kind = %item.kind, path = %item.path, "deleted");
                    report.deleted.push(label);
                }
            }
        }
        Ok(report)
    }

    /// What `serve` runs at start: fails with [`ManagementError::Missing`]
    /// listing every missing entity, wrong bosun rule and remaining
    /// `$Default` rule. Settings that differ (lock duration, max delivery
    /// count, ...) are logged as warnings and do not fail.
    pub async fn verify(&self, topology: &Topology, options: &TopologyOptions) -> Result<(), ManagementError> {
        let plan = self.plan(topology, options).await?;
        for item in &plan.items {
            if let PlanAction::Differs {
                what,
                fixed_by_apply: false,
            } = &item.action
            {
                tracing::warn!(
                    kind = %item.kind,
                    path = %item.path,
                    differences = %what.join("; "),
                    "Service Bus entity differs from what bosun would create; bosun topology apply leaves it as is"
                );
            }
        }
        let problems = plan.blocking_problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ManagementError::Missing { entities: problems })
        }
    }

    /// `GET`s several entities, a few at a time, in order.
    async fn lookup_all<'s>(&self, specs: &[&'s EntitySpec]) -> Result<Vec<(&'s EntitySpec, Lookup)>, ManagementError> {
        let results: Vec<Result<(&EntitySpec, Lookup), ManagementError>> = stream::iter(specs.iter().copied())
            .map(|spec| async move { Ok((spec, self.lookup(&spec.path).await?)) })
            .buffered(CONCURRENT_REQUESTS)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// `GET`s one entity.
    async fn lookup(&self, path: &str) -> Result<Lookup, ManagementError> {
        let answer = self.send(Method::GET, path, &[], None).await?;
        match answer.status {
            StatusCode::OK => match parse_atom(&answer.body) {
                Ok(AtomDocument::Entry(entry)) => Ok(Lookup::Found(entry)),
                Ok(AtomDocument::Feed(_)) => Ok(Lookup::Missing { answered: true }),
                Err(err) => Err(ManagementError::InvalidResponse {
                    path: path.to_owned(),
                    reason: err.to_string(),
                }),
            },
            StatusCode::NOT_FOUND => Ok(Lookup::Missing {
                answered: looks_like_service_bus(&answer.body),
            }),
            _ => Err(self.failure(Method::GET, path, answer)),
        }
    }

    /// The rules of an existing subscription.
    async fn rules_of(&self, subscription_path: &str) -> Result<Vec<AtomEntry>, ManagementError> {
        let path = format!("{subscription_path}/Rules");
        let answer = self
            .send(Method::GET, &path, &[("$skip", "0"), ("$top", "100")], None)
            .await?;
        match answer.status {
            StatusCode::OK => match parse_atom(&answer.body) {
                Ok(AtomDocument::Feed(entries)) => Ok(entries),
                Ok(AtomDocument::Entry(entry)) => Ok(vec![entry]),
                Err(err) => Err(ManagementError::InvalidResponse {
                    path,
                    reason: err.to_string(),
                }),
            },
            StatusCode::NOT_FOUND => Ok(Vec::new()),
            _ => Err(self.failure(Method::GET, &path, answer)),
        }
    }

    /// `PUT`s an entry: `true` when created or replaced, `false` when a
    /// create found it already there.
    async fn put(&self, path: &str, entry: &str, replace: bool) -> Result<bool, ManagementError> {
        let answer = self
            .send(Method::PUT, path, &[], Some((entry.to_owned(), replace)))
            .await?;
        match answer.status {
            StatusCode::OK | StatusCode::CREATED => Ok(true),
            StatusCode::CONFLICT if !replace => Ok(false),
            _ => Err(self.failure(Method::PUT, path, answer)),
        }
    }

    /// `DELETE`s an entity; one already gone is fine.
    async fn delete(&self, path: &str) -> Result<(), ManagementError> {
        let answer = self.send(Method::DELETE, path, &[], None).await?;
        match answer.status {
            status if status.is_success() => Ok(()),
            StatusCode::NOT_FOUND if looks_like_service_bus(&answer.body) || !self.endpoint.emulator => Ok(()),
            _ => Err(self.failure(Method::DELETE, path, answer)),
        }
    }

    /// The error for an unexpected answer.
    fn failure(&self, method: Method, path: &str, answer: Answer) -> ManagementError {
        let body = trimmed_body(&answer.body);
        let status = answer.status.as_u16();
        let quota = body.to_ascii_lowercase().contains("quota");
        match answer.status {
            StatusCode::UNAUTHORIZED => ManagementError::Unauthorized {
                needs: MANAGE_RIGHTS.to_owned(),
                detail: format!("{method} {path} (HTTP {status}: {body})"),
            },
            StatusCode::FORBIDDEN if !quota => ManagementError::Unauthorized {
                needs: MANAGE_RIGHTS.to_owned(),
                detail: format!("{method} {path} (HTTP {status}: {body})"),
            },
            StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_IMPLEMENTED
                if self.endpoint.emulator =>
            {
                ManagementError::Unsupported {
                    what: format!(
                        "the management API at {} answered {method} {path} with HTTP {status}",
                        self.base_url
                    ),
                }
            }
            _ => ManagementError::Http {
                method: method.to_string(),
                path: path.to_owned(),
                status,
                body,
            },
        }
    }

    /// Sends one request with its token, `api-version` and timeout.
    async fn send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        entry: Option<(String, bool)>,
    ) -> Result<Answer, ManagementError> {
        let mut url =
            reqwest::Url::parse(&format!("{}/{}", self.base_url, path.trim_start_matches('/'))).map_err(|err| {
                ManagementError::Unavailable {
                    reason: format!("bad management URL {}/{path}: {err}", self.base_url),
                }
            })?;
        url.query_pairs_mut()
            .append_pair("api-version", API_VERSION)
            .extend_pairs(query);
        let token = self.tokens.token(&self.endpoint.audience(path)).await?;
        let mut request = self
            .http
            .request(method.clone(), url)
            .header(reqwest::header::AUTHORIZATION, token.authorization());
        if let Some((body, replace)) = entry {
            request = request
                .header(reqwest::header::CONTENT_TYPE, ATOM_CONTENT_TYPE)
                .body(body);
            if replace {
                request = request.header(reqwest::header::IF_MATCH, "*");
            }
        }
        let response = request.send().await.map_err(|err| self.transport_error(&err))?;
        let status = response.status();
        let body = response.text().await.map_err(|err| self.transport_error(&err))?;
        tracing::debug!(%method, path, status = status.as_u16(), "Service Bus management request");
        Ok(Answer { status, body })
    }

    fn transport_error(&self, err: &reqwest::Error) -> ManagementError {
        let reason = if err.is_timeout() {
            format!("no answer from {} within {:?}", self.base_url, self.timeout)
        } else if err.is_connect() {
            format!("cannot connect to {}: {}", self.base_url, error_chain(err))
        } else {
            format!("{}: {}", self.base_url, error_chain(err))
        };
        if self.endpoint.emulator && err.is_connect() {
            ManagementError::Unsupported {
                what: format!("the management API (ATOM over HTTP): {reason}"),
            }
        } else {
            ManagementError::Unavailable { reason }
        }
    }
}

/// An error and its sources, on one line.
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// A 404 body from Service Bus itself (an `<Error>` document) rather than
/// from a server without the management API.
fn looks_like_service_bus(body: &str) -> bool {
    parse_xml(body).is_ok_and(|root| root.name == "Error" || root.name == "feed" || root.name == "entry")
}

/// An error body fit for a message: Service Bus's `<Detail>` when there is
/// one, whitespace collapsed, signatures removed, at most [`BODY_LIMIT`]
/// characters.
fn trimmed_body(body: &str) -> String {
    let detail = parse_xml(body)
        .ok()
        .filter(|root| root.name == "Error")
        .and_then(|root| root.child_text("Detail").map(str::to_owned));
    let text = detail.as_deref().unwrap_or(body);
    let mut words: Vec<&str> = Vec::new();
    let mut secret_follows = false;
    for word in text.split_whitespace() {
        let lower = word.to_ascii_lowercase();
        let secret = secret_follows
            || lower.contains("sig=")
            || lower.contains("sharedaccesskey=")
            || (lower.starts_with("eyj") && word.matches('.').count() >= 2);
        words.push(if secret { "<redacted>" } else { word });
        secret_follows = lower == "bearer" || lower == "sharedaccesssignature";
    }
    let text = words.join(" ");
    if text.is_empty() {
        return "(no body)".to_owned();
    }
    if text.chars().count() > BODY_LIMIT {
        let cut: String = text.chars().take(BODY_LIMIT).collect();
        format!("{cut}…")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, VecDeque};
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::backends::servicebus::connection::ServiceBusAuth;
    use crate::ports::topology::Subscription;

    const SUB: &str = "bosun-events/Subscriptions/release-orchestration";

    /// A request the scripted server received.
    #[derive(Debug, Clone)]
    struct Recorded {
        method: String,
        path: String,
        query: Vec<(String, String)>,
        headers: Vec<(String, String)>,
        body: String,
    }

    impl Recorded {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.as_str())
        }

        fn query(&self, name: &str) -> Option<&str> {
            self.query
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.as_str())
        }
    }

    #[derive(Default)]
    struct State {
        /// Replies per `METHOD path`, in the order they are to be given.
        script: HashMap<String, VecDeque<(u16, String)>>,
        recorded: Vec<Recorded>,
        problems: Vec<String>,
    }

    /// A server answering like the management API: scripted replies per
    /// `METHOD path` (requests of a plan run concurrently, so there is no
    /// global order), every request recorded.
    struct ScriptedServiceBus {
        addr: SocketAddr,
        state: Arc<Mutex<State>>,
        task: tokio::task::JoinHandle<()>,
    }

    impl ScriptedServiceBus {
        async fn start(script: &[(&str, &str, u16, &str)]) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().expect("address");
            let mut state = State::default();
            for (method, path, status, body) in script {
                state
                    .script
                    .entry(format!("{method} {path}"))
                    .or_default()
                    .push_back((*status, (*body).to_owned()));
            }
            let state = Arc::new(Mutex::new(state));
            let shared = Arc::clone(&state);
            let task = tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let state = Arc::clone(&shared);
                    tokio::spawn(async move {
                        if let Err(err) = serve(stream, &state).await {
                            state.lock().unwrap().problems.push(format!("I/O: {err}"));
                        }
                    });
                }
            });
            Self { addr, state, task }
        }

        fn url(&self) -> String {
            format!("http://{}", self.addr)
        }

        /// Stops; fails on unexpected requests or unused replies.
        fn finish(self) -> Vec<Recorded> {
            self.task.abort();
            let state = self.state.lock().unwrap();
            assert!(state.problems.is_empty(), "{:#?}", state.problems);
            let unused: Vec<&String> = state
                .script
                .iter()
                .filter(|(_, replies)| !replies.is_empty())
                .map(|(key, _)| key)
                .collect();
            assert!(unused.is_empty(), "replies never asked for: {unused:?}");
            state.recorded.clone()
        }
    }

    async fn serve(mut stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
        loop {
            let mut buffer = Vec::new();
            let mut chunk = [0u8; 8192];
            let header_end = loop {
                if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                    break end;
                }
                let read = stream.read(&mut chunk).await?;
                if read == 0 {
                    return Ok(());
                }
                buffer.extend_from_slice(&chunk[..read]);
            };
            let head = String::from_utf8_lossy(&buffer[..header_end]).into_owned();
            let mut lines = head.split("\r\n");
            let mut request_line = lines.next().unwrap_or_default().split(' ');
            let method = request_line.next().unwrap_or_default().to_owned();
            let target = request_line.next().unwrap_or_default().to_owned();
            let headers: Vec<(String, String)> = lines
                .filter_map(|line| line.split_once(':'))
                .map(|(key, value)| (key.trim().to_ascii_lowercase(), value.trim().to_owned()))
                .collect();
            let length: usize = headers
                .iter()
                .find(|(key, _)| key == "content-length")
                .and_then(|(_, value)| value.parse().ok())
                .unwrap_or(0);
            let mut body = buffer[header_end + 4..].to_vec();
            while body.len() < length {
                let read = stream.read(&mut chunk).await?;
                if read == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..read]);
            }
            let url = reqwest::Url::parse(&format!("http://mock{target}")).expect("target");
            let recorded = Recorded {
                method: method.clone(),
                path: url.path().trim_start_matches('/').to_owned(),
                query: url
                    .query_pairs()
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect(),
                headers,
                body: String::from_utf8_lossy(&body).into_owned(),
            };
            let (status, reply) = {
                let mut state = state.lock().unwrap();
                let key = format!("{} {}", recorded.method, recorded.path);
                let reply = state.script.get_mut(&key).and_then(VecDeque::pop_front);
                let reply = reply.unwrap_or_else(|| {
                    state.problems.push(format!("unexpected {key}"));
                    (418, String::new())
                });
                state.recorded.push(recorded);
                reply
            };
            let response = format!(
                "HTTP/1.1 {status} Scripted\r\nContent-Type: application/atom+xml;type=entry;charset=utf-8\r\n\
                 Content-Length: {}\r\n\r\n{reply}",
                reply.len()
            );
            stream.write_all(response.as_bytes()).await?;
        }
    }

    fn endpoint(emulator: bool) -> ServiceBusEndpoint {
        ServiceBusEndpoint {
            host: "contoso.servicebus.windows.net".into(),
            amqp_port: 5671,
            emulator,
            auth: ServiceBusAuth::SharedAccessKey {
                key_name: "RootManageSharedAccessKey".into(),
                key: "c2VjcmV0".into(),
            },
        }
    }

    fn client(server_url: &str, emulator: bool) -> ManagementClient {
        let endpoint = endpoint(emulator);
        let tokens = TokenSource::for_endpoint(&endpoint).unwrap();
        ManagementClient::new(&endpoint, tokens)
            .unwrap()
            .with_base_url(server_url)
    }

    fn topology() -> Topology {
        Topology {
            queues: vec!["commit".into()],
            topic: "bosun-events".into(),
            subscriptions: vec![Subscription {
                name: "release-orchestration".into(),
                event_types: vec!["BuildCompleted".into(), "ImagePublished".into()],
            }],
            sessions: Vec::new(),
        }
    }

    fn entry(title: &str, description: &str) -> String {
        format!(
            "<entry xmlns=\"http://www.w3.org/2005/Atom\"><id>https://contoso.servicebus.windows.net/{title}</id>\
             <title type=\"text\">{title}</title><content type=\"application/xml\">{description}</content></entry>"
        )
    }

    fn rule(name: &str, filter_type: &str, sql: &str) -> String {
        format!(
            "<entry><title type=\"text\">{name}</title><content type=\"application/xml\">\
             <RuleDescription xmlns=\"http://schemas.microsoft.com/netservices/2010/10/servicebus/connect\" \
             xmlns:i=\"http://www.w3.org/2001/XMLSchema-instance\"><Filter i:type=\"{filter_type}\">\
             <SqlExpression>{sql}</SqlExpression><CompatibilityLevel>20</CompatibilityLevel></Filter>\
             <Action i:type=\"EmptyRuleAction\"/><Name>{name}</Name></RuleDescription></content></entry>"
        )
    }

    const EMPTY_FEED: &str =
        "<feed xmlns=\"http://www.w3.org/2005/Atom\"><title type=\"text\">Publicly Listed Services</title></feed>";
    const NOT_FOUND: &str =
        "<Error><Code>404</Code><Detail>The messaging entity could not be found. TrackingId:1</Detail></Error>";

    #[tokio::test]
    async fn plans_and_creates_a_topology_in_an_empty_namespace() {
        let created = |path: &str| entry(path, "<QueueDescription/>");
        let server = ScriptedServiceBus::start(&[
            ("GET", "commit", 404, NOT_FOUND),
            ("GET", "bosun-events", 200, EMPTY_FEED),
            ("PUT", "commit", 201, &created("commit")),
            ("PUT", "bosun-events", 201, &created("bosun-events")),
            ("PUT", SUB, 201, &created("release-orchestration")),
            ("PUT", &format!("{SUB}/Rules/bosun-types"), 201, &created("bosun-types")),
            ("PUT", &format!("{SUB}/Rules/bosun-replay"), 409, NOT_FOUND),
            ("DELETE", &format!("{SUB}/Rules/$Default"), 200, ""),
        ])
        .await;
        let client = client(&server.url(), false);
        let plan = client.plan(&topology(), &TopologyOptions::default()).await.unwrap();
        assert_eq!(plan.items.len(), 6);
        assert!(plan.items[..5].iter().all(|i| i.action == PlanAction::Create), "{plan}");
        assert_eq!(plan.items[5].action, PlanAction::Delete);

        let report = client.apply(&plan).await.unwrap();
        assert_eq!(
            report.created,
            [
                "queue commit",
                "topic bosun-events",
                &format!("subscription {SUB}"),
                &format!("rule {SUB}/Rules/bosun-types")
            ]
        );
        assert_eq!(report.already_present, [format!("rule {SUB}/Rules/bosun-replay")]);
        assert_eq!(report.deleted, [format!("rule {SUB}/Rules/$Default")]);

        let requests = server.finish();
        for request in &requests {
            assert_eq!(request.query("api-version"), Some("2021-05"), "{request:?}");
            let authorization = request.header("authorization").unwrap();
            let audience = format!(
                "sr=sb%3A%2F%2Fcontoso.servicebus.windows.net%2F{}",
                request.path.replace('/', "%2F")
            )
            .replace('$', "%24");
            assert!(
                authorization.starts_with("SharedAccessSignature ") && authorization.contains(&audience),
                "{authorization} for {}",
                request.path
            );
        }
        let writes: Vec<(&str, &str)> = requests
            .iter()
            .filter(|r| r.method != "GET")
            .map(|r| (r.method.as_str(), r.path.as_str()))
            .collect();
        let types = format!("{SUB}/Rules/bosun-types");
        let replay = format!("{SUB}/Rules/bosun-replay");
        let default = format!("{SUB}/Rules/$Default");
        assert_eq!(
            writes,
            [
                ("PUT", "commit"),
                ("PUT", "bosun-events"),
                ("PUT", SUB),
                ("PUT", types.as_str()),
                ("PUT", replay.as_str()),
                ("DELETE", default.as_str()),
            ],
            "topic, then subscriptions, then rules, then $Default"
        );
        for put in requests.iter().filter(|r| r.method == "PUT") {
            assert_eq!(put.header("content-type"), Some(ATOM_CONTENT_TYPE));
            assert_eq!(put.header("if-match"), None, "a create is not a replace");
            assert!(put.body.starts_with("<?xml version=\"1.0\" encoding=\"utf-8\"?><entry"));
        }
        let queue = requests
            .iter()
            .find(|r| r.method == "PUT" && r.path == "commit")
            .unwrap();
        assert!(
            queue.body.contains("<MaxDeliveryCount>10</MaxDeliveryCount>"),
            "{}",
            queue.body
        );
        assert!(queue.body.contains("<LockDuration>PT1M</LockDuration>"));
        let types_put = requests.iter().find(|r| r.path == types).unwrap();
        assert!(
            types_put.body.contains(
                "<SqlExpression>sys.Label IN ('BuildCompleted','ImagePublished') AND NOT EXISTS(replayTo)</SqlExpression>"
            ),
            "{}",
            types_put.body
        );
        let replay_put = requests.iter().find(|r| r.path == replay).unwrap();
        assert!(
            replay_put
                .body
                .contains("<SqlExpression>replayTo = 'release-orchestration'</SqlExpression>")
        );
    }

    #[tokio::test]
    async fn verify_names_every_problem_and_apply_fixes_rules_only() {
        let queue = entry(
            "commit",
            "<QueueDescription xmlns=\"http://schemas.microsoft.com/netservices/2010/10/servicebus/connect\">\
             <LockDuration>PT1M</LockDuration><MaxDeliveryCount>5</MaxDeliveryCount><Status>Active</Status>\
             </QueueDescription>",
        );
        let topic = entry(
            "bosun-events",
            "<TopicDescription><RequiresDuplicateDetection>true</RequiresDuplicateDetection></TopicDescription>",
        );
        let subscription = entry(
            "release-orchestration",
            "<SubscriptionDescription><LockDuration>PT1M</LockDuration><MaxDeliveryCount>10</MaxDeliveryCount>\
             </SubscriptionDescription>",
        );
        let rules = format!(
            "<feed xmlns=\"http://www.w3.org/2005/Atom\"><title>Rules</title>{}{}</feed>",
            rule("$Default", "TrueFilter", "1=1"),
            rule(
                "bosun-types",
                "SqlFilter",
                "sys.Label IN ('BuildCompleted') AND NOT EXISTS(replayTo)"
            ),
        );
        let mut script = Vec::new();
        for _ in 0..2 {
            script.extend([
                ("GET", "commit".to_owned(), 200, queue.clone()),
                ("GET", "bosun-events".to_owned(), 200, topic.clone()),
                ("GET", SUB.to_owned(), 200, subscription.clone()),
                ("GET", format!("{SUB}/Rules"), 200, rules.clone()),
            ]);
        }
        script.extend([
            (
                "PUT",
                format!("{SUB}/Rules/bosun-types"),
                200,
                rule("bosun-types", "SqlFilter", "x"),
            ),
            (
                "PUT",
                format!("{SUB}/Rules/bosun-replay"),
                201,
                rule("bosun-replay", "SqlFilter", "x"),
            ),
            ("DELETE", format!("{SUB}/Rules/$Default"), 200, String::new()),
        ]);
        let script: Vec<(&str, &str, u16, &str)> = script
            .iter()
            .map(|(m, p, s, b)| (*m, p.as_str(), *s, b.as_str()))
            .collect();
        let server = ScriptedServiceBus::start(&script).await;
        let client = client(&server.url(), false);

        let err = client
            .verify(&topology(), &TopologyOptions::default())
            .await
            .unwrap_err();
        let ManagementError::Missing { entities } = &err else {
            panic!("{err}")
        };
        assert_eq!(entities.len(), 3, "{err}");
        let message = err.to_string();
        assert!(
            message.contains(&format!("rule {SUB}/Rules/bosun-replay is missing")),
            "{message}"
        );
        assert!(message.contains("$Default must be removed"), "{message}");
        assert!(message.contains("'ImagePublished'"), "{message}");
        assert!(message.contains("run `bosun topology apply`"), "{message}");
        assert!(
            !message.contains("commit"),
            "a differing max delivery count only warns: {message}"
        );

        let plan = client.plan(&topology(), &TopologyOptions::default()).await.unwrap();
        let report = client.apply(&plan).await.unwrap();
        assert_eq!(report.updated, [format!("rule {SUB}/Rules/bosun-types")]);
        assert_eq!(report.created, [format!("rule {SUB}/Rules/bosun-replay")]);
        assert_eq!(report.deleted, [format!("rule {SUB}/Rules/$Default")]);
        assert_eq!(report.unchanged, 2);
        assert_eq!(report.left_differing.len(), 1);
        assert!(report.left_differing[0].starts_with("queue commit: MaxDeliveryCount is 5"));
        assert!(
            report
                .to_string()
                .ends_with("1 created, 1 replaced, 1 deleted, 2 unchanged, 1 left differing")
        );

        let requests = server.finish();
        let rules_get = requests.iter().find(|r| r.path.ends_with("/Rules")).unwrap();
        assert_eq!(rules_get.query("$top"), Some("100"));
        let replaced = requests
            .iter()
            .find(|r| r.method == "PUT" && r.path.ends_with("bosun-types"))
            .unwrap();
        assert_eq!(replaced.header("if-match"), Some("*"));
        let created = requests
            .iter()
            .find(|r| r.method == "PUT" && r.path.ends_with("bosun-replay"))
            .unwrap();
        assert_eq!(created.header("if-match"), None);
        assert!(
            requests.iter().filter(|r| r.method == "DELETE").count() == 1,
            "nothing but $Default is deleted"
        );
    }

    #[tokio::test]
    async fn apply_refuses_to_delete_anything_but_default_rules() {
        let server = ScriptedServiceBus::start(&[]).await;
        let client = client(&server.url(), false);
        let plan = Plan {
            items: vec![super::super::plan::PlanItem {
                kind: EntityKind::Queue,
                path: "commit".into(),
                action: PlanAction::Delete,
                entry: None,
            }],
        };
        let report = client.apply(&plan).await.unwrap();
        assert_eq!(report.refused.len(), 1);
        assert!(report.refused[0].starts_with("queue commit: "));
        assert!(server.finish().is_empty());
    }

    #[tokio::test]
    async fn missing_rights_say_manage_is_needed() {
        let server = ScriptedServiceBus::start(&[
            (
                "GET",
                "commit",
                401,
                "<Error><Code>401</Code><Detail>Manage,EntityRead claims required for this operation. \
                 SharedAccessSignature sr=x&amp;sig=abc TrackingId:2</Detail></Error>",
            ),
            ("GET", "bosun-events", 200, EMPTY_FEED),
        ])
        .await;
        let err = client(&server.url(), false)
            .plan(&topology(), &TopologyOptions::default())
            .await
            .unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, ManagementError::Unauthorized { .. }), "{message}");
        assert!(message.contains("needs the Manage right"), "{message}");
        assert!(message.contains("Manage,EntityRead claims required"), "{message}");
        assert!(!message.contains("sig=abc"), "{message}");
        server.finish();
    }

    #[tokio::test]
    async fn errors_keep_a_trimmed_body_without_secrets() {
        let long = format!("Bearer eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl {}", "x ".repeat(400));
        let server =
            ScriptedServiceBus::start(&[("GET", "commit", 500, &long), ("GET", "bosun-events", 200, EMPTY_FEED)]).await;
        let err = client(&server.url(), false)
            .plan(&topology(), &TopologyOptions::default())
            .await
            .unwrap_err();
        let ManagementError::Http { status, body, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(*status, 500);
        assert!(body.chars().count() <= BODY_LIMIT + 1, "{body}");
        assert!(!body.contains("eyJ"), "{body}");
        server.finish();
    }

    #[tokio::test]
    async fn an_emulator_without_the_management_api_is_reported_as_unsupported() {
        // Nothing listens on the port.
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let err = client(&format!("http://127.0.0.1:{port}"), true)
            .verify(&topology(), &TopologyOptions::default())
            .await
            .unwrap_err();
        assert!(matches!(err, ManagementError::Unsupported { .. }), "{err}");
        assert!(err.to_string().contains("not supported by this endpoint"), "{err}");

        // Something answers 404 to everything.
        let server = ScriptedServiceBus::start(&[("GET", "commit", 404, ""), ("GET", "bosun-events", 404, "")]).await;
        let err = client(&server.url(), true)
            .plan(&topology(), &TopologyOptions::default())
            .await
            .unwrap_err();
        assert!(matches!(err, ManagementError::Unsupported { .. }), "{err}");
        server.finish();

        // A real namespace that cannot be reached is unavailable, not unsupported.
        let err = client(&format!("http://127.0.0.1:{port}"), false)
            .plan(&topology(), &TopologyOptions::default())
            .await
            .unwrap_err();
        assert!(matches!(err, ManagementError::Unavailable { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_silent_server_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hold = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                open.push(stream);
            }
        });
        let endpoint = endpoint(false);
        let tokens = TokenSource::for_endpoint(&endpoint).unwrap();
        let client = ManagementClient::with_timeout(&endpoint, tokens, Duration::from_millis(200))
            .unwrap()
            .with_base_url(url);
        let err = client.plan(&topology(), &TopologyOptions::default()).await.unwrap_err();
        assert!(matches!(err, ManagementError::Unavailable { .. }), "{err}");
        hold.abort();
    }

    #[test]
    fn trimmed_bodies_prefer_the_detail() {
        assert_eq!(
            trimmed_body("<Error><Code>400</Code><Detail>Bad  request.\n TrackingId:3</Detail></Error>"),
            "Bad request. TrackingId:3"
        );
        assert_eq!(trimmed_body(""), "(no body)");
        assert_eq!(
            trimmed_body("token SharedAccessSignature sr=a&sig=b&se=1"),
            "token SharedAccessSignature <redacted>"
        );
    }
}
