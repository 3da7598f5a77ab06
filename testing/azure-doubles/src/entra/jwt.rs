//! Federated tokens: writing one as a Kubernetes service-account token
//! looks ([`FederatedToken`]), and checking a client assertion against an
//! application's federated credentials.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::{FederatedCredential, TOKEN_EXCHANGE_AUDIENCE, aadsts};

/// A federated token a test writes where `AZURE_FEDERATED_TOKEN_FILE`
/// points, as the AKS workload-identity webhook projects one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FederatedToken {
    /// `iss`: the cluster's OIDC issuer URL.
    pub issuer: String,
    /// `sub`: `system:serviceaccount:<namespace>:<name>`.
    pub subject: String,
    /// `aud`: [`TOKEN_EXCHANGE_AUDIENCE`].
    pub audience: String,
    /// From now until `exp`.
    pub lifetime: Duration,
}

impl FederatedToken {
    /// A token of `issuer` for `subject`, for the token exchange audience,
    /// valid for an hour.
    pub fn new(issuer: &str, subject: &str) -> Self {
        Self {
            issuer: issuer.to_owned(),
            subject: subject.to_owned(),
            audience: TOKEN_EXCHANGE_AUDIENCE.to_owned(),
            lifetime: Duration::from_secs(3600),
        }
    }

    /// The JWT (signed with nothing the double checks).
    pub fn jwt(&self) -> String {
        let now = unix_now();
        let exp = now.saturating_add(self.lifetime.as_secs());
        unsigned_jwt(&json!({
            "aud": [self.audience],
            "exp": exp,
            "iat": now,
            "nbf": now,
            "iss": self.issuer,
            "sub": self.subject,
            "kubernetes.io": {"namespace": "bosun", "serviceaccount": {"name": "bosun"}}
        }))
    }
}

/// A JWT with `claims`, an `RS256` header and a placeholder signature.
pub fn unsigned_jwt(claims: &Value) -> String {
    let header = json!({"alg": "RS256", "kid": "double", "typ": "JWT"});
    format!(
        "{}.{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string()),
        URL_SAFE_NO_PAD.encode(b"not-a-signature")
    )
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_secs())
        .unwrap_or_default()
}

fn malformed() -> Response {
    aadsts(
        StatusCode::BAD_REQUEST,
        "invalid_request",
        50027,
        "JWT token is invalid or malformed.",
    )
}

fn invalid_client(code: u32, message: String) -> Response {
    aadsts(StatusCode::BAD_REQUEST, "invalid_client", code, &message)
}

/// Checks a client assertion (a federated token) against the
/// application's federated credentials.
pub(super) fn check_assertion(assertion: &str, federated: &[FederatedCredential]) -> Result<(), Box<Response>> {
    let parts: Vec<&str> = assertion.split('.').collect();
    if parts.len() != 3 || parts.iter().any(|part| part.is_empty()) {
        return Err(Box::new(malformed()));
    }
    let decode = |part: &str| -> Option<Value> {
        let raw = URL_SAFE_NO_PAD.decode(part.trim_end_matches('=')).ok()?;
        serde_json::from_slice(&raw).ok()
    };
    let (Some(header), Some(claims)) = (decode(parts[0]), decode(parts[1])) else {
        return Err(Box::new(malformed()));
    };
    if !header["alg"].is_string() {
        return Err(Box::new(malformed()));
    }
    let now = unix_now();
    let exp = claims["exp"].as_u64();
    let nbf = claims["nbf"].as_u64().unwrap_or(0);
    if exp.is_none_or(|exp| exp <= now) || nbf > now + 300 {
        return Err(Box::new(invalid_client(
            700_024,
            "Client assertion is not within its valid time range.".to_owned(),
        )));
    }
    let issuer = claims["iss"].as_str().unwrap_or_default();
    let subject = claims["sub"].as_str().unwrap_or_default();
    let audiences: Vec<&str> = match &claims["aud"] {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let of_issuer: Vec<&FederatedCredential> = federated.iter().filter(|cred| cred.issuer == issuer).collect();
    if of_issuer.is_empty() {
        return Err(Box::new(invalid_client(
            700_211,
            format!("No matching federated identity record found for presented assertion issuer '{issuer}'."),
        )));
    }
    let of_subject: Vec<&&FederatedCredential> = of_issuer.iter().filter(|cred| cred.subject == subject).collect();
    if of_subject.is_empty() {
        return Err(Box::new(invalid_client(
            700_213,
            format!(
                "No matching federated identity record found for presented assertion subject '{subject}'. Check your federated identity credential Subject, Audience and Issuer against the presented assertion."
            ),
        )));
    }
    if !of_subject
        .iter()
        .any(|cred| audiences.contains(&cred.audience.as_str()))
    {
        return Err(Box::new(invalid_client(
            700_212,
            format!(
                "No matching federated identity record found for presented assertion audience '{}'.",
                audiences.join(",")
            ),
        )));
    }
    Ok(())
}
