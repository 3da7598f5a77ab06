//! The one way bosun builds an HTTP client for an Azure service (Azure
//! DevOps, Azure Artifacts, Azure Container Registry, Argo CD, Blob
//! Storage): the workspace's `reqwest` with native TLS, the user agent
//! `bosun/<version>`, a connect timeout of at most
//! [`MAX_CONNECT_TIMEOUT`], and the caller's request [`Timeout`],
//! default headers and [`Redirects`].
//!
//! Every request goes out through [`send`]: a client span (`GET`, `PUT`,
//! ...) under the handler's span, with the W3C trace context in its
//! `traceparent` header, so the services' own traces join the delivery's.
//!
//! What an answer means for a retry is the other half of the policy:
//! [`super::retry`].

use std::time::Duration;

use opentelemetry::propagation::Injector;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tracing::{Instrument, field};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The `User-Agent` of every request bosun sends.
pub const USER_AGENT: &str = concat!("bosun/", env!("CARGO_PKG_VERSION"));

/// Longest wait for a connection; a shorter request timeout shortens it.
pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one request may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    /// The whole request, from sending to the last byte of the answer
    /// (REST calls, pushes).
    Total(Duration),
    /// Between two reads of the answer, however long the whole transfer
    /// takes (blob transfers, whose SDK retries and bounds them itself).
    BetweenReads(Duration),
}

impl Timeout {
    fn duration(self) -> Duration {
        match self {
            Self::Total(duration) | Self::BetweenReads(duration) => duration,
        }
    }
}

/// Whether the client follows redirects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirects {
    /// Follow them (reqwest's default policy, at most 10).
    Follow,
    /// Hand the redirect back as the answer (a signed request must not be
    /// sent somewhere else).
    Refuse,
}

/// Builds a client with bosun's policy, `timeout`, `headers` sent with
/// every request, and `redirects`.
pub fn client(timeout: Timeout, headers: HeaderMap, redirects: Redirects) -> Result<reqwest::Client, reqwest::Error> {
    let mut builder = reqwest::Client::builder()
        .default_headers(headers)
        .user_agent(USER_AGENT)
        .connect_timeout(timeout.duration().min(MAX_CONNECT_TIMEOUT));
    builder = match timeout {
        Timeout::Total(duration) => builder.timeout(duration),
        Timeout::BetweenReads(duration) => builder.read_timeout(duration),
    };
    if redirects == Redirects::Refuse {
        builder = builder.redirect(reqwest::redirect::Policy::none());
    }
    builder.build()
}

/// Sends `request` inside a client span (method, server, path, answer
/// status; never the query, which may hold a signature) with the span's
/// trace context in the request's `traceparent` / `tracestate` headers.
/// With traces off there is no context and no header is added.
pub async fn send(request: reqwest::RequestBuilder) -> Result<reqwest::Response, reqwest::Error> {
    let (client, request) = request.build_split();
    let mut request = request?;
    let span = client_span(request.method().as_str(), request.url());
    inject(&span, &mut Headers(request.headers_mut()));
    let result = client.execute(request).instrument(span.clone()).await;
    match &result {
        Ok(response) => record_status(&span, response.status().as_u16()),
        Err(err) => record_failure(&span, if err.is_timeout() { "timeout" } else { "transport" }),
    }
    result
}

/// The client span of one request (HTTP semantic conventions: method,
/// server, path; never the query, which may hold a signature), a child of
/// the current span.
pub fn client_span(method: &str, url: &reqwest::Url) -> tracing::Span {
    tracing::info_span!(
        "http",
        otel.name = method,
        otel.kind = "client",
        otel.status_code = field::Empty,
        http.request.method = method,
        server.address = url.host_str().unwrap_or_default(),
        server.port = url.port_or_known_default(),
        url.path = url.path(),
        http.response.status_code = field::Empty,
        "error.type" = field::Empty,
    )
}

/// Puts `span`'s W3C trace context into a request's headers (nothing with
/// traces off).
pub fn inject(span: &tracing::Span, headers: &mut dyn Injector) {
    let context = span.context();
    opentelemetry::global::get_text_map_propagator(|propagator| propagator.inject_context(&context, headers));
}

/// Records the answer's status on a client span; 4xx and 5xx are errors.
pub fn record_status(span: &tracing::Span, status: u16) {
    span.record("http.response.status_code", status);
    if status >= 400 {
        span.record("otel.status_code", "error");
        span.record("error.type", status.to_string());
    }
}

/// Records a request that got no answer (`timeout`, `transport`).
pub fn record_failure(span: &tracing::Span, kind: &'static str) {
    span.record("otel.status_code", "error");
    span.record("error.type", kind);
}

/// Request headers as the propagator's carrier.
struct Headers<'a>(&'a mut HeaderMap);

impl Injector for Headers<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(key.as_bytes()), HeaderValue::from_str(&value)) {
            self.0.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::{ACCEPT, HeaderValue};

    use super::*;
    use crate::delivery::azure::test_server::{MockAzure, Reply};

    #[test]
    fn the_user_agent_names_bosun_and_its_version() {
        assert!(USER_AGENT.starts_with("bosun/"), "{USER_AGENT}");
        assert!(USER_AGENT.len() > "bosun/".len(), "{USER_AGENT}");
    }

    #[tokio::test]
    async fn every_request_carries_the_user_agent_and_the_default_headers() {
        let server = MockAzure::start(vec![Reply::json("GET", "/x", 200, "{}")]).await;
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        let client = client(Timeout::Total(Duration::from_secs(5)), headers, Redirects::Follow).unwrap();
        client.get(server.url("/x")).send().await.unwrap();
        let requests = server.finish().await;
        assert_eq!(requests[0].header("user-agent"), Some(USER_AGENT));
        assert_eq!(requests[0].header("accept"), Some("application/json"));
    }

    #[test]
    fn clients_build_with_every_policy() {
        for timeout in [
            Timeout::Total(Duration::from_secs(30)),
            Timeout::BetweenReads(Duration::from_secs(60)),
        ] {
            for redirects in [Redirects::Follow, Redirects::Refuse] {
                client(timeout, HeaderMap::new(), redirects).unwrap();
            }
        }
    }
}
