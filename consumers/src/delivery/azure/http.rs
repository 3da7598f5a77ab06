//! The one way bosun builds an HTTP client for an Azure service (Azure
//! DevOps, Azure Artifacts, Azure Container Registry, Argo CD, Blob
//! Storage): the workspace's `reqwest` with native TLS, the user agent
//! `bosun/<version>`, a connect timeout of at most
//! [`MAX_CONNECT_TIMEOUT`], and the caller's request [`Timeout`],
//! default headers and [`Redirects`].
//!
//! What an answer means for a retry is the other half of the policy:
//! [`super::retry`].

use std::time::Duration;

use reqwest::header::HeaderMap;

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
