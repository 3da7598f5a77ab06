//! [`Probes`]: the [`VerificationProbes`] adapter that samples checks over
//! the network, one kind of check per module (`http_check`, `prometheus`,
//! `azure_monitor`), and what they share: the HTTP client, how a tenant's
//! URL is read and shown, and how a failed request reads in a detail.
//!
//! # Tenants' URLs
//!
//! A check's URL is the tenant's, so bosun must not be made to call what
//! only bosun can reach: a URL whose host is a link-local address
//! (`169.254.0.0/16`, `fe80::/10`, where the cloud metadata endpoint
//! answers with bosun's own credentials) is refused without a request, and
//! so is a host *name* that resolves only to such addresses (the client's
//! resolver drops them). Redirects are never followed, so a URL cannot
//! hand the probe on to one that would be refused.
//!
//! An operator may narrow further what tenants' checks reach
//! ([`Probes::with_allowed_hosts`], `BOSUN_VERIFY_ALLOWED_HOSTS`): a URL
//! whose host none of the patterns match fails its sample without a
//! request.
//!
//! A URL's query and user info may hold secrets (a token, a password):
//! details and logs show its scheme, host, port and path only
//! ([`shown`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bosun_sagas::release::{CheckOutcome, VerificationCheck};
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{ACCEPT, HeaderMap, HeaderValue};
use tracing::Instrument;

use super::VerificationProbes;
use super::azure_monitor::AzureMonitor;
use super::{http_check, prometheus};
use crate::delivery::azure::DEFAULT_ARM_ENDPOINT;
use crate::delivery::azure::credential::RefreshingToken;
use crate::delivery::azure::http::{MAX_CONNECT_TIMEOUT, USER_AGENT};

/// How long a Prometheus query or an Alerts Management call may take when
/// [`Probes::with_request_timeout`] sets nothing else (an HTTP check has
/// its own `timeoutSeconds`).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest answer read from Prometheus or Alerts Management (4 MiB);
/// a longer one fails the sample.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// The longest text of a service's own error message kept in a detail.
pub const MAX_ERROR_CHARS: usize = 300;

/// The probes could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ProbesError {
    /// The Azure Resource Manager endpoint is not an `http(s)` URL.
    #[error("armEndpoint: `{endpoint}` is not an http(s) URL such as {DEFAULT_ARM_ENDPOINT}")]
    ArmEndpoint {
        /// The endpoint given.
        endpoint: String,
    },
    /// The HTTP client could not be built (its TLS backend failed).
    #[error("the verification probes' HTTP client cannot be built: {0}")]
    Client(#[source] reqwest::Error),
}

/// How the Azure Monitor checks reach Alerts Management: Azure Resource
/// Manager's endpoint and bosun's Azure identity, whose tokens (scope
/// [`crate::delivery::azure::ARM_SCOPE`]) need the role
/// Monitoring Reader on each alert rule's subscription.
#[derive(Debug, Clone)]
pub struct AzureMonitorAccess {
    /// Base URL of Azure Resource Manager ([`DEFAULT_ARM_ENDPOINT`] in the
    /// public cloud; another cloud's, or a test server's).
    pub endpoint: String,
    /// ARM tokens of bosun's identity.
    pub tokens: Arc<RefreshingToken>,
}

impl AzureMonitorAccess {
    /// Alerts Management in the public cloud, with tokens from `tokens`.
    pub fn new(tokens: Arc<RefreshingToken>) -> Self {
        Self {
            endpoint: DEFAULT_ARM_ENDPOINT.to_owned(),
            tokens,
        }
    }

    /// The same, through the Azure Resource Manager at `endpoint`.
    #[must_use]
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = endpoint.into();
        self
    }
}

/// Samples verification checks over the network: an HTTP check is a
/// `GET` of its URL, a Prometheus check an instant query, an Azure Monitor
/// check a listing of the rule's fired alerts in Alerts Management.
///
/// Built once by [`Probes::new`]; without [`AzureMonitorAccess`] every
/// Azure Monitor sample fails, saying that it needs bosun's Azure identity.
#[derive(Debug)]
pub struct Probes {
    http: reqwest::Client,
    request_timeout: Duration,
    azure: Option<AzureMonitor>,
    allowed_hosts: Vec<String>,
}

impl Probes {
    /// Probes with one HTTP client (bosun's user agent, redirects never
    /// followed, link-local addresses refused) and, when `azure` is given,
    /// Alerts Management for the Azure Monitor checks. Fails when
    /// `azure`'s endpoint is not an `http(s)` URL or the client cannot be
    /// built.
    pub fn new(azure: Option<AzureMonitorAccess>) -> Result<Self, ProbesError> {
        let azure = azure.map(AzureMonitor::new).transpose()?;
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json, */*;q=0.5"));
        let http = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .default_headers(headers)
            .connect_timeout(MAX_CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(NoLinkLocal)
            .build()
            .map_err(ProbesError::Client)?;
        Ok(Self {
            http,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            azure,
            allowed_hosts: Vec::new(),
        })
    }

    /// Only hosts matching one of `patterns` are probed: a host name
    /// (`payments.contoso.net`), or a domain and every host under it
    /// (`*.contoso.net`); case is ignored. Empty (the default): any host
    /// but a link-local one.
    #[must_use]
    pub fn with_allowed_hosts(mut self, patterns: Vec<String>) -> Self {
        self.allowed_hosts = patterns
            .into_iter()
            .map(|pattern| pattern.trim().to_ascii_lowercase())
            .filter(|pattern| !pattern.is_empty())
            .collect();
        self
    }

    /// Why `raw`'s host may not be probed, if it may not.
    fn refused_host(&self, raw: &str) -> Option<String> {
        if self.allowed_hosts.is_empty() {
            return None;
        }
        let url = Url::parse(raw.trim()).ok()?;
        let host = url
            .host_str()?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let allowed = self
            .allowed_hosts
            .iter()
            .any(|pattern| match pattern.strip_prefix("*.") {
                Some(domain) => host == domain || host.ends_with(&format!(".{domain}")),
                None => host == *pattern,
            });
        (!allowed).then(|| {
            format!(
                "GET {} refused: its host is not among the hosts this bosun's operator lets verification checks reach \
                 (BOSUN_VERIFY_ALLOWED_HOSTS)",
                shown(&url)
            )
        })
    }

    /// How long a Prometheus query or an Alerts Management call may take
    /// (default [`DEFAULT_REQUEST_TIMEOUT`]).
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }
}

#[async_trait]
impl VerificationProbes for Probes {
    async fn sample(
        &self,
        tenant: &str,
        release_id: &str,
        environment: &str,
        check: &VerificationCheck,
    ) -> CheckOutcome {
        let span = tracing::info_span!(
            "verification_sample",
            tenant,
            release_id,
            environment,
            check = check.name(),
            kind = check.kind(),
        );
        let refused = match check {
            VerificationCheck::Http(check) => self.refused_host(&check.url),
            VerificationCheck::Prometheus(check) => self.refused_host(&check.url),
            VerificationCheck::AzureMonitor(_) => None,
        };
        let sample = async {
            if let Some(refused) = refused {
                return Sample::fail(refused);
            }
            match check {
                VerificationCheck::Http(check) => http_check::sample(&self.http, check).await,
                VerificationCheck::Prometheus(check) => {
                    prometheus::sample(&self.http, check, self.request_timeout).await
                }
                VerificationCheck::AzureMonitor(check) => match &self.azure {
                    Some(azure) => azure.sample(&self.http, check, self.request_timeout).await,
                    None => Sample::fail(
                        "the Azure Monitor check needs bosun's Azure identity, and none is configured \
                         (an operator sets bosun's Azure credential; it needs Monitoring Reader on the rule's subscription)",
                    ),
                },
            }
        }
        .instrument(span.clone())
        .await;
        let target = match check {
            VerificationCheck::Http(check) => shown_raw(&check.url),
            VerificationCheck::Prometheus(check) => shown_raw(&check.url),
            VerificationCheck::AzureMonitor(check) => check.alert_rule_id.clone(),
        };
        span.in_scope(|| {
            if sample.passed {
                tracing::info!(%target, passed = true, detail = %sample.detail, "verification sample");
            } else {
                tracing::warn!(%target, passed = false, detail = %sample.detail, "verification sample");
            }
        });
        CheckOutcome {
            check: check.name().to_owned(),
            passed: sample.passed,
            detail: sample.detail,
        }
    }
}

/// One sample's result before it becomes a [`CheckOutcome`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Sample {
    pub(super) passed: bool,
    pub(super) detail: String,
}

impl Sample {
    pub(super) fn pass(detail: impl Into<String>) -> Self {
        Self {
            passed: true,
            detail: detail.into(),
        }
    }

    pub(super) fn fail(detail: impl Into<String>) -> Self {
        Self {
            passed: false,
            detail: detail.into(),
        }
    }
}

/// A tenant's URL, read: an `http(s)` URL with a host that is not a
/// link-local address. `Err` is the failed sample's detail, which names
/// the URL only by [`shown`].
pub(super) fn tenant_url(raw: &str) -> Result<Url, String> {
    let url = Url::parse(raw.trim()).map_err(|err| format!("the URL cannot be read: {err}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{} is not an http or https URL", shown(&url)));
    }
    let Some(host) = url.host_str().filter(|host| !host.is_empty()) else {
        return Err(format!("{} names no host", shown(&url)));
    };
    // An IP host is never resolved: it is checked here. (`url` writes IPv4
    // hosts in dotted decimal and IPv6 hosts in brackets, whatever form the
    // tenant used.)
    let ip = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>();
    if ip.is_ok_and(is_link_local) {
        return Err(format!(
            "GET {} refused: its host is a link-local address, where the cloud metadata endpoint answers; \
             bosun never probes link-local addresses",
            shown(&url)
        ));
    }
    Ok(url)
}

/// Whether `ip` is link-local: `169.254.0.0/16`, `fe80::/10`, or an IPv4
/// link-local address mapped into IPv6.
pub(super) fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => ip.is_link_local(),
        IpAddr::V6(ip) => ip.is_unicast_link_local() || ip.to_ipv4_mapped().is_some_and(|ip| ip.is_link_local()),
    }
}

/// `url` as details and logs show it: scheme, host, port and path; never
/// its user info, query or fragment.
pub(super) fn shown(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{}://{host}:{port}{}", url.scheme(), url.path()),
        None => format!("{}://{host}{}", url.scheme(), url.path()),
    }
}

/// [`shown`] of a URL not yet read (`<unreadable URL>` when it cannot be).
fn shown_raw(raw: &str) -> String {
    Url::parse(raw.trim()).map_or_else(|_| "<unreadable URL>".to_owned(), |url| shown(&url))
}

/// Why a request got no (whole) answer, for a detail: `timed out after
/// 10s`, `connection refused`, the resolver's refusal, or the innermost
/// cause. Never the URL.
pub(super) fn failure(err: &reqwest::Error, timeout: Duration) -> String {
    if err.is_timeout() {
        return format!("timed out after {}s", timeout.as_secs_f64());
    }
    let mut innermost: Option<&(dyn std::error::Error + 'static)> = None;
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<LinkLocalName>() {
            return refused.to_string();
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return "connection refused".to_owned(),
                std::io::ErrorKind::ConnectionReset => return "connection reset".to_owned(),
                std::io::ErrorKind::TimedOut => return format!("timed out after {}s", timeout.as_secs_f64()),
                _ => {}
            }
        }
        innermost = Some(cause);
        source = cause.source();
    }
    match innermost {
        Some(cause) => cause.to_string(),
        // reqwest's own text names the URL: described by its kind instead.
        None if err.is_connect() => "could not connect".to_owned(),
        None if err.is_body() => "the answer broke off".to_owned(),
        None => "the request failed".to_owned(),
    }
}

/// Reads a whole answer of at most [`MAX_ANSWER_BYTES`]; `Err` is the
/// detail's reason.
pub(super) async fn read_answer(mut response: reqwest::Response, timeout: Duration) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|err| failure(&err, timeout))? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!(
                "the answer is longer than {} MiB",
                MAX_ANSWER_BYTES / (1024 * 1024)
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// `text` cut to [`MAX_ERROR_CHARS`] characters (with `…` when cut), on
/// one line.
pub(super) fn clip(text: &str) -> String {
    let one_line: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let one_line = one_line.trim();
    if one_line.chars().count() <= MAX_ERROR_CHARS {
        return one_line.to_owned();
    }
    let mut cut: String = one_line.chars().take(MAX_ERROR_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// A host name that resolves only to link-local addresses.
#[derive(Debug, thiserror::Error)]
#[error(
    "{host} resolves only to link-local addresses, where the cloud metadata endpoint answers; bosun never probes them"
)]
struct LinkLocalName {
    host: String,
}

/// The system resolver without link-local addresses: a host name pointed
/// at the metadata endpoint cannot reach it.
#[derive(Debug, Clone, Copy)]
struct NoLinkLocal;

impl Resolve for NoLinkLocal {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = resolved
                .iter()
                .copied()
                .filter(|addr| !is_link_local(addr.ip()))
                .collect();
            if allowed.is_empty() && !resolved.is_empty() {
                return Err(Box::new(LinkLocalName { host }) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}
