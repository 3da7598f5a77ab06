//! Web origins (RFC 6454) as `BOSUN_HTTP_ALLOWED_ORIGINS` names them:
//! parsed and normalised here, with the settings; the HTTP API's `Origin`
//! check that uses them is `front::api::origin`.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// A web origin: scheme, host and port (RFC 6454), normalised (lowercase,
/// the scheme's default port filled in) so that equal origins compare equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

/// Text that is not an origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    /// It does not look like `scheme://host[:port]`.
    #[error("`{0}` is not an origin: write scheme://host[:port], e.g. https://console.example.com")]
    Malformed(String),
    /// It has a path, query or user part.
    #[error("`{0}` is not an origin: an origin has no path, query or user (scheme://host[:port])")]
    HasPath(String),
    /// The list is empty.
    #[error("names no origin (write `none` to allow only the server's own address)")]
    Empty,
}

impl Origin {
    /// Parses `scheme://host[:port]` (a trailing `/` is tolerated).
    pub fn parse(text: &str) -> Result<Self, OriginError> {
        let text = text.trim();
        let malformed = || OriginError::Malformed(text.to_owned());
        let (scheme, rest) = text.split_once("://").ok_or_else(malformed)?;
        let scheme = scheme.to_ascii_lowercase();
        let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_lowercase())
            && scheme
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '+' | '-' | '.'));
        if !scheme_ok {
            return Err(malformed());
        }
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            return Err(OriginError::HasPath(text.to_owned()));
        }
        let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
            let (address, after) = bracketed.split_once(']').ok_or_else(malformed)?;
            if address.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(malformed());
            }
            let port = match after {
                "" => None,
                after => Some(after.strip_prefix(':').ok_or_else(malformed)?),
            };
            (format!("[{}]", address.to_ascii_lowercase()), port)
        } else {
            let (host, port) = match rest.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (rest, None),
            };
            let host_ok = !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
            if !host_ok {
                return Err(malformed());
            }
            (host.to_ascii_lowercase(), port)
        };
        let port = match port {
            Some(port) => Some(port.parse::<u16>().map_err(|_| malformed())?),
            None => match scheme.as_str() {
                "http" => Some(80),
                "https" => Some(443),
                _ => None,
            },
        };
        Ok(Self { scheme, host, port })
    }

    /// `http://<address>`: the origin of a page served from this address.
    pub fn of_address(address: SocketAddr) -> Self {
        let host = match address.ip() {
            IpAddr::V4(ip) => ip.to_string(),
            IpAddr::V6(ip) => format!("[{ip}]"),
        };
        Self {
            scheme: "http".into(),
            host,
            port: Some(address.port()),
        }
    }

    /// Whether the host is `localhost`, in `127.0.0.0/8` or `::1`.
    pub fn is_loopback(&self) -> bool {
        if self.host == "localhost" {
            return true;
        }
        let bare = self.host.trim_start_matches('[').trim_end_matches(']');
        bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.host)?;
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// One entry of `BOSUN_HTTP_ALLOWED_ORIGINS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedOrigin {
    /// `loopback`: any scheme and port on `localhost`, `127.0.0.0/8`, `[::1]`.
    Loopback,
    /// Exactly this origin.
    Exact(Origin),
}

/// Parses `BOSUN_HTTP_ALLOWED_ORIGINS`: a comma list of origins and
/// `loopback`, or `none` (only the server's own address).
pub fn parse_allowed_origins(list: &str) -> Result<Vec<AllowedOrigin>, OriginError> {
    if list.trim() == "none" {
        return Ok(Vec::new());
    }
    let entries: Vec<&str> = list.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
    if entries.is_empty() {
        return Err(OriginError::Empty);
    }
    entries
        .into_iter()
        .map(|entry| match entry {
            "loopback" => Ok(AllowedOrigin::Loopback),
            origin => Origin::parse(origin).map(AllowedOrigin::Exact),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_parse_and_normalise() {
        let origin = Origin::parse("HTTPS://Console.Example.com/").unwrap();
        assert_eq!(origin.to_string(), "https://console.example.com:443");
        assert_eq!(origin, Origin::parse("https://console.example.com:443").unwrap());
        assert_eq!(
            Origin::parse("http://[::1]:8080").unwrap().to_string(),
            "http://[::1]:8080"
        );
        assert!(Origin::parse("http://[::1]:8080").unwrap().is_loopback());
        assert!(Origin::parse("http://127.1.2.3").unwrap().is_loopback());
        assert!(Origin::parse("http://localhost:3000").unwrap().is_loopback());
        assert!(!Origin::parse("http://localhost.evil.example").unwrap().is_loopback());
        assert!(!Origin::parse("http://10.0.0.1").unwrap().is_loopback());
        for bad in [
            "null",
            "example.com",
            "http://",
            "http://a b",
            "http://x:99999",
            "http://[zz]:1",
            "1x://y",
        ] {
            assert!(matches!(Origin::parse(bad), Err(OriginError::Malformed(_))), "{bad}");
        }
        assert!(matches!(
            Origin::parse("https://user@example.com"),
            Err(OriginError::HasPath(_))
        ));
        assert_eq!(parse_allowed_origins(",").unwrap_err(), OriginError::Empty);
    }
}
