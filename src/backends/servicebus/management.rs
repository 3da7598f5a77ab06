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
    /// The namespace could not be reached (network, timeout). Transient.
    #[error("Service Bus management API unavailable: {reason}")]
    Unavailable {
        /// What happened, with the cause's text.
        reason: String,
        /// The HTTP client's or the URL parser's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
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
                source: Box::new(err),
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
                    source: Box::new(err),
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
        let response = request.send().await.map_err(|err| self.transport_error(err))?;
        let status = response.status();
        let body = response.text().await.map_err(|err| self.transport_error(err))?;
        tracing::debug!(%method, path, status = status.as_u16(), "Service Bus management request");
        Ok(Answer { status, body })
    }

    fn transport_error(&self, err: reqwest::Error) -> ManagementError {
        let reason = if err.is_timeout() {
            format!("no answer from {} within {:?}", self.base_url, self.timeout)
        } else if err.is_connect() {
            format!("cannot connect to {}: {}", self.base_url, error_chain(&err))
        } else {
            format!("{}: {}", self.base_url, error_chain(&err))
        };
        if self.endpoint.emulator && err.is_connect() {
            ManagementError::Unsupported {
                what: format!("the management API (ATOM over HTTP): {reason}"),
            }
        } else {
            ManagementError::Unavailable {
                reason,
                source: Box::new(err),
            }
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
mod tests;
