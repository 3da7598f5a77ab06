//! Which browser origins may call `/mcp`: the `Origin` check that the MCP
//! specification makes a MUST for the Streamable HTTP transport.
//!
//! The specification (revision 2025-11-25, Transports, Streamable HTTP,
//! "Security Warning") says:
//!
//! > When implementing Streamable HTTP transport:
//! >
//! > 1. Servers **MUST** validate the `Origin` header on all incoming
//! >    connections to prevent DNS rebinding attacks
//! >    - If the `Origin` header is present and invalid, servers **MUST**
//! >      respond with HTTP 403 Forbidden. The HTTP response body **MAY**
//! >      comprise a JSON-RPC _error response_ that has no `id`
//! > 2. When running locally, servers **SHOULD** bind only to localhost
//! >    (127.0.0.1) rather than all network interfaces (0.0.0.0)
//! > 3. Servers **SHOULD** implement proper authentication for all connections
//! >
//! > Without these protections, attackers could use DNS rebinding to
//! > interact with local MCP servers from remote websites.
//!
//! (<https://modelcontextprotocol.io/specification/2025-11-25/basic/transports>)
//!
//! A DNS-rebinding page runs in a browser, and browsers always send the
//! page's own origin (`http://evil.example`) on a cross-origin POST, even
//! when the name now resolves to 127.0.0.1. So: no `Origin` (an agent, a
//! script, `curl`) passes; an `Origin` passes only when it is allowed by
//! `BOSUN_HTTP_ALLOWED_ORIGINS` (default `loopback`: any port on
//! `localhost`, `127.0.0.0/8` or `[::1]`) or is the server's own bound
//! address; anything else, `Origin: null` included, gets 403 before the
//! key is even looked at. The `Host` header is not consulted: a rebinding
//! page controls it too.
//!
//! What an origin is and how `BOSUN_HTTP_ALLOWED_ORIGINS` reads are settings
//! ([`crate::runtime::config::Origin`], [`AllowedOrigin`]); this module is
//! the check.

use std::net::SocketAddr;

use axum::http::HeaderMap;
use axum::http::header::ORIGIN;

use crate::runtime::config::{AllowedOrigin, Origin};

/// The decision for one request's `Origin`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginVerdict {
    /// No `Origin` header, or an allowed one.
    Allowed,
    /// An `Origin` that may not call: answer 403. Holds the header's text
    /// (shortened) for the message.
    Refused(String),
}

/// The allowed origins plus the server's own address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginPolicy {
    allowed: Vec<AllowedOrigin>,
    own: Option<Origin>,
}

impl Default for OriginPolicy {
    fn default() -> Self {
        Self::new(vec![AllowedOrigin::Loopback], None)
    }
}

impl OriginPolicy {
    /// A policy allowing `allowed` and, when bound to a specific address
    /// (not `0.0.0.0` or `::`), pages served from that address.
    pub fn new(allowed: Vec<AllowedOrigin>, bound: Option<SocketAddr>) -> Self {
        let own = bound
            .filter(|address| !address.ip().is_unspecified())
            .map(Origin::of_address);
        Self { allowed, own }
    }

    /// Whether a request with these headers may be answered.
    pub fn check(&self, headers: &HeaderMap) -> OriginVerdict {
        let Some(value) = headers.get(ORIGIN) else {
            return OriginVerdict::Allowed;
        };
        let text = String::from_utf8_lossy(value.as_bytes());
        let shown: String = text.chars().take(120).collect();
        let Ok(origin) = Origin::parse(&text) else {
            // `null` (sandboxed frames, file: pages) and anything unparsable.
            return OriginVerdict::Refused(shown);
        };
        let allowed = self.own.as_ref() == Some(&origin)
            || self.allowed.iter().any(|entry| match entry {
                AllowedOrigin::Loopback => origin.is_loopback(),
                AllowedOrigin::Exact(exact) => *exact == origin,
            });
        if allowed {
            OriginVerdict::Allowed
        } else {
            OriginVerdict::Refused(shown)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_origin(origin: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(ORIGIN, HeaderValue::from_str(origin).unwrap());
        headers
    }

    #[test]
    fn absent_origins_pass_foreign_ones_are_refused() {
        let policy = OriginPolicy::default();
        assert_eq!(policy.check(&HeaderMap::new()), OriginVerdict::Allowed);
        for allowed in ["http://localhost:5173", "http://127.0.0.1", "https://[::1]:9"] {
            assert_eq!(policy.check(&with_origin(allowed)), OriginVerdict::Allowed, "{allowed}");
        }
        for refused in ["http://evil.example", "null", "http://localhost.evil.example:80"] {
            assert!(
                matches!(policy.check(&with_origin(refused)), OriginVerdict::Refused(_)),
                "{refused}"
            );
        }
    }

    #[test]
    fn configured_origins_and_the_own_address() {
        let allowed = crate::runtime::config::parse_allowed_origins("https://console.example.com").unwrap();
        let bound: SocketAddr = "10.1.2.3:8080".parse().unwrap();
        let policy = OriginPolicy::new(allowed.clone(), Some(bound));
        assert_eq!(
            policy.check(&with_origin("https://console.example.com")),
            OriginVerdict::Allowed
        );
        assert_eq!(
            policy.check(&with_origin("http://10.1.2.3:8080")),
            OriginVerdict::Allowed
        );
        // Without `loopback` in the list, loopback pages are not allowed.
        assert!(matches!(
            policy.check(&with_origin("http://localhost:8080")),
            OriginVerdict::Refused(_)
        ));
        assert!(matches!(
            policy.check(&with_origin("http://console.example.com")),
            OriginVerdict::Refused(_)
        ));
        // Bound to every interface: no own origin to allow.
        let everywhere = OriginPolicy::new(allowed, Some("0.0.0.0:8080".parse().unwrap()));
        assert!(matches!(
            everywhere.check(&with_origin("http://0.0.0.0:8080")),
            OriginVerdict::Refused(_)
        ));
    }
}
