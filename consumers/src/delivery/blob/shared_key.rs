//! Shared Key authorization for Azure Blob Storage, as a pipeline policy.
//!
//! The official `azure_storage_blob` 1.x crate authenticates with Entra ID
//! or a SAS in the URL only; it has no shared-key policy. Azurite, and
//! teams that use account keys, need one, so this module signs each request
//! the way the Storage service documents ("Authorize with Shared Key"):
//! an HMAC-SHA256, keyed with the base64-decoded account key, over
//!
//! ```text
//! VERB \n Content-Encoding \n Content-Language \n Content-Length \n
//! Content-MD5 \n Content-Type \n Date \n If-Modified-Since \n If-Match \n
//! If-None-Match \n If-Unmodified-Since \n Range \n
//! CanonicalizedHeaders CanonicalizedResource
//! ```
//!
//! sent as `Authorization: SharedKey <account>:<base64 signature>`. The
//! policy runs once per try (after the retry policy), so every retry gets a
//! fresh `x-ms-date` and signature.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{Context, Request};
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Signs requests with an account's shared key. `Debug` never shows the key.
pub(crate) struct SharedKeyPolicy {
    account: String,
    key: Vec<u8>,
}

impl fmt::Debug for SharedKeyPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedKeyPolicy")
            .field("account", &self.account)
            .field("key", &"<redacted>")
            .finish()
    }
}

impl SharedKeyPolicy {
    /// A policy for `account`, with its base64 account key. Fails when the
    /// key is not base64 (the error does not repeat the key).
    pub(crate) fn new(account: &str, key_base64: &str) -> Result<Self, String> {
        let key = base64::engine::general_purpose::STANDARD
            .decode(key_base64.trim())
            .map_err(|_| "the account key is not base64".to_owned())?;
        if key.is_empty() {
            return Err("the account key is empty".to_owned());
        }
        Ok(Self {
            account: account.to_owned(),
            key,
        })
    }

    /// The `Authorization` header value for `string_to_sign`.
    fn authorization(&self, string_to_sign: &str) -> String {
        // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
        let signature = match Hmac::<Sha256>::new_from_slice(&self.key) {
            Ok(mut mac) => {
                mac.update(string_to_sign.as_bytes());
                base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
            }
            Err(_) => String::new(),
        };
        format!("SharedKey {}:{signature}", self.account)
    }
}

#[async_trait]
impl Policy for SharedKeyPolicy {
    async fn send(&self, ctx: &Context, request: &mut Request, next: &[Arc<dyn Policy>]) -> PolicyResult {
        request.insert_header("x-ms-date", http_date(time::OffsetDateTime::now_utc()));
        let authorization = self.authorization(&string_to_sign(&self.account, request));
        request.insert_header("authorization", authorization);
        next[0].send(ctx, request, &next[1..]).await
    }
}

/// RFC 1123 date in GMT, as `x-ms-date` wants it.
fn http_date(now: time::OffsetDateTime) -> String {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let now = now.to_offset(time::UtcOffset::UTC);
    format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        DAYS[usize::from(now.weekday().number_days_from_monday())],
        now.day(),
        MONTHS[usize::from(u8::from(now.month()) - 1)],
        now.year(),
        now.hour(),
        now.minute(),
        now.second()
    )
}

/// The string the Blob service expects signed for `request`.
fn string_to_sign(account: &str, request: &Request) -> String {
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in request.headers().iter() {
        headers.insert(name.as_str().to_ascii_lowercase(), value.as_str().to_owned());
    }
    let standard = |name: &str| headers.get(name).map(String::as_str).unwrap_or_default();
    // Since version 2015-02-21 an empty body signs as an empty Content-Length.
    let content_length = match request.body().len() {
        Some(0) | None => String::new(),
        Some(length) => length.to_string(),
    };
    let mut out = String::new();
    for part in [
        request.method().as_str(),
        standard("content-encoding"),
        standard("content-language"),
        &content_length,
        standard("content-md5"),
        standard("content-type"),
        // `x-ms-date` is set, so `Date` signs as empty.
        "",
        standard("if-modified-since"),
        standard("if-match"),
        standard("if-none-match"),
        standard("if-unmodified-since"),
        standard("range"),
    ] {
        out.push_str(part);
        out.push('\n');
    }
    for (name, value) in headers.iter().filter(|(name, _)| name.starts_with("x-ms-")) {
        out.push_str(name);
        out.push(':');
        out.push_str(&unfold(value));
        out.push('\n');
    }
    out.push('/');
    out.push_str(account);
    out.push_str(request.url().path());
    let mut parameters: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in request.url().query_pairs() {
        parameters
            .entry(name.to_lowercase())
            .or_default()
            .push(value.into_owned());
    }
    for (name, mut values) in parameters {
        values.sort();
        out.push('\n');
        out.push_str(&name);
        out.push(':');
        out.push_str(&values.join(","));
    }
    out
}

/// A header value as the canonical form wants it: trimmed, with runs of
/// whitespace (including folded lines) replaced by one space.
fn unfold(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use azure_core::http::{Method, Url};

    fn request() -> Request {
        let url =
            Url::parse("http://127.0.0.1:10000/devstoreaccount1/payloads?restype=container&comp=list&b=2&B=1").unwrap();
        let mut request = Request::new(url, Method::Put);
        request.insert_header("x-ms-version", "2026-04-06");
        request.insert_header("x-ms-date", "Sun, 29 Nov 2026 10:00:00 GMT");
        request.insert_header("x-ms-meta-note", "  two   words ");
        request.insert_header("content-type", "application/json");
        request.set_body(b"{}".to_vec());
        request
    }

    #[test]
    fn string_to_sign_follows_the_documented_layout() {
        assert_eq!(
            string_to_sign("devstoreaccount1", &request()),
            "PUT\n\n\n2\n\napplication/json\n\n\n\n\n\n\n\
             x-ms-date:Sun, 29 Nov 2026 10:00:00 GMT\nx-ms-meta-note:two words\nx-ms-version:2026-04-06\n\
             /devstoreaccount1/devstoreaccount1/payloads\nb:1,2\ncomp:list\nrestype:container"
        );
    }

    #[test]
    fn signature_is_hmac_sha256_of_the_string_to_sign() {
        // Azurite's published development key.
        let policy = SharedKeyPolicy::new(
            "devstoreaccount1",
            "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
        )
        .unwrap();
        let header = policy.authorization("GET\n");
        assert!(header.starts_with("SharedKey devstoreaccount1:"), "{header}");
        // Known answer computed with Python: base64(hmac.new(key, b"GET\n", sha256)).
        assert_eq!(header, format!("SharedKey devstoreaccount1:{}", KNOWN_GET_SIGNATURE));
        assert!(!format!("{policy:?}").contains("Eby8"));
    }

    const KNOWN_GET_SIGNATURE: &str = "/ZZsmidvu/o1IWuAI6fRY2fmdvnXEMtMILD8Y+sZWjA=";

    #[test]
    fn keys_that_are_not_base64_are_refused_without_echoing_them() {
        let err = SharedKeyPolicy::new("acct", "not base64!!").unwrap_err();
        assert!(!err.contains("not base64!!"), "{err}");
    }

    #[test]
    fn dates_are_rfc_1123() {
        let date = time::macros::datetime!(2026-11-29 10:00:05 UTC);
        assert_eq!(http_date(date), "Sun, 29 Nov 2026 10:00:05 GMT");
    }
}
