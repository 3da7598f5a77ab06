//! Checking the tokens a client puts on `$cbs`: a shared access signature
//! (`SharedAccessSignature sr=<uri>&sig=<HMAC-SHA256>&se=<unix>&skn=<key
//! name>`) is checked for its key name, audience, expiry and signature; a
//! JWT is taken as it is (the broker has no identity provider).

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use time::OffsetDateTime;

/// A shared access policy the broker knows.
#[derive(Clone, PartialEq, Eq)]
pub struct SharedAccessKey {
    /// The policy name (`RootManageSharedAccessKey`).
    pub key_name: String,
    /// The key, used as text (as Service Bus does).
    pub key: String,
}

impl std::fmt::Debug for SharedAccessKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedAccessKey")
            .field("key_name", &self.key_name)
            .field("key", &"<redacted>")
            .finish()
    }
}

impl SharedAccessKey {
    /// A shared access signature for `resource` (`sb://host/entity`) valid
    /// until `expires`, as clients make them.
    pub fn signature(&self, resource: &str, expires: OffsetDateTime) -> String {
        let encoded = url_encode(resource);
        let expiry = expires.unix_timestamp();
        let signature = match Hmac::<Sha256>::new_from_slice(self.key.as_bytes()) {
            Ok(mut mac) => {
                mac.update(format!("{encoded}\n{expiry}").as_bytes());
                base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
            }
            Err(_) => String::new(),
        };
        format!(
            "SharedAccessSignature sr={encoded}&sig={}&se={expiry}&skn={}",
            url_encode(&signature),
            url_encode(&self.key_name)
        )
    }
}

fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefusal {
    /// Not `SharedAccessSignature ...` with `sr`, `sig`, `se` and `skn`.
    #[error("malformed shared access signature: {0}")]
    Malformed(&'static str),
    /// Signed with another policy.
    #[error("the token names key `{0}`, which this namespace does not have")]
    UnknownKey(String),
    /// `se` has passed.
    #[error("the token expired")]
    Expired,
    /// `sr` does not cover the audience it was put for.
    #[error("the token is for `{resource}`, not `{audience}`")]
    WrongAudience {
        /// The token's resource.
        resource: String,
        /// The audience it was put for.
        audience: String,
    },
    /// The signature does not match.
    #[error("the signature does not match")]
    BadSignature,
    /// A token type the broker does not know.
    #[error("unknown token type `{0}`")]
    UnknownType(String),
}

/// Checks a token of `token_type` put for `audience`, against `key` (none:
/// every token is taken).
pub fn check_token(
    key: Option<&SharedAccessKey>,
    token_type: &str,
    token: &str,
    audience: &str,
    now: OffsetDateTime,
) -> Result<(), TokenRefusal> {
    let Some(key) = key else { return Ok(()) };
    match token_type {
        "jwt" => return Ok(()),
        "servicebus.windows.net:sastoken" => {}
        other => return Err(TokenRefusal::UnknownType(other.to_owned())),
    }
    let query = token
        .strip_prefix("SharedAccessSignature")
        .ok_or(TokenRefusal::Malformed("does not start with SharedAccessSignature"))?
        .trim();
    let field = |name: &str| {
        query
            .split('&')
            .find_map(|part| part.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
    };
    let resource_encoded = field("sr").ok_or(TokenRefusal::Malformed("no sr"))?;
    let signature = field("sig").ok_or(TokenRefusal::Malformed("no sig"))?;
    let expiry = field("se").ok_or(TokenRefusal::Malformed("no se"))?;
    let key_name = field("skn").ok_or(TokenRefusal::Malformed("no skn"))?;
    if url_decode(key_name) != key.key_name {
        return Err(TokenRefusal::UnknownKey(url_decode(key_name)));
    }
    let expires = expiry
        .parse::<i64>()
        .map_err(|_| TokenRefusal::Malformed("se is not a number"))?;
    if expires <= now.unix_timestamp() {
        return Err(TokenRefusal::Expired);
    }
    let resource = url_decode(resource_encoded);
    if !covers(&resource, audience) {
        return Err(TokenRefusal::WrongAudience {
            resource,
            audience: audience.to_owned(),
        });
    }
    let to_sign = format!("{resource_encoded}\n{expiry}");
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key.key.as_bytes()) else {
        return Err(TokenRefusal::BadSignature);
    };
    mac.update(to_sign.as_bytes());
    let expected = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    if url_decode(signature) != expected {
        return Err(TokenRefusal::BadSignature);
    }
    Ok(())
}

/// Whether a token for `resource` is good for `audience`: the same URI, or
/// a prefix of it at a path boundary (a namespace token covers its entities).
fn covers(resource: &str, audience: &str) -> bool {
    let resource = resource.trim_end_matches('/').to_ascii_lowercase();
    let audience = audience.trim_end_matches('/').to_ascii_lowercase();
    audience == resource || audience.starts_with(&format!("{resource}/"))
}

pub(crate) fn url_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        let hex = |at: usize| bytes.get(at).and_then(|b| char::from(*b).to_digit(16));
        match (byte, hex(index + 1), hex(index + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push(u8::try_from(high * 16 + low).unwrap_or(b'?'));
                index += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                index += 1;
            }
            _ => {
                out.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    // The token of bosun's own test (credential's
    // `signatures_follow_the_documented_format`, computed independently).
    const TOKEN: &str = "SharedAccessSignature sr=sb%3A%2F%2Fcontoso.servicebus.windows.net%2Fcommit\
                         &sig=L8sUN3s7Ynfa%2Bo7i4UVloYXh%2BHJdGb1V5HppWiC3FBo%3D&se=1700000000&skn=send";

    fn key(key: &str) -> SharedAccessKey {
        SharedAccessKey {
            key_name: "send".into(),
            key: key.into(),
        }
    }

    #[test]
    fn signatures_are_checked_for_key_audience_expiry_and_hmac() {
        let before = OffsetDateTime::from_unix_timestamp(1_699_999_000).unwrap();
        let sas = "servicebus.windows.net:sastoken";
        let audience = "sb://contoso.servicebus.windows.net/commit";
        assert_eq!(check_token(Some(&key("key")), sas, TOKEN, audience, before), Ok(()));
        assert_eq!(
            check_token(
                Some(&key("key")),
                sas,
                TOKEN,
                &format!("{audience}/$management"),
                before
            ),
            Ok(())
        );
        assert_eq!(
            check_token(Some(&key("other")), sas, TOKEN, audience, before),
            Err(TokenRefusal::BadSignature)
        );
        assert!(matches!(
            check_token(
                Some(&key("key")),
                sas,
                TOKEN,
                "sb://contoso.servicebus.windows.net/commitx",
                before
            ),
            Err(TokenRefusal::WrongAudience { .. })
        ));
        let after = OffsetDateTime::from_unix_timestamp(1_700_000_001).unwrap();
        assert_eq!(
            check_token(Some(&key("key")), sas, TOKEN, audience, after),
            Err(TokenRefusal::Expired)
        );
        assert_eq!(check_token(Some(&key("key")), "jwt", "eyJ...", audience, after), Ok(()));
        assert_eq!(check_token(None, sas, "anything", audience, after), Ok(()));
        let at = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        let made = key("key").signature(audience, at);
        assert_eq!(made, TOKEN, "the same token as bosun's client makes");
    }
}
