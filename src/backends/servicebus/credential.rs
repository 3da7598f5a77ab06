//! Tokens for Service Bus: a shared access signature per audience, or an
//! Entra ID token for `https://servicebus.azure.net/.default`. The AMQP
//! transport puts them on the `$cbs` node (claims-based security); the
//! management client sends them as the `Authorization` header.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bosun_consumers::delivery::azure::credential::{EntraIdCredential, TokenCredential, entra_id_credential};
use time::OffsetDateTime;

use super::connection::{ServiceBusAuth, ServiceBusEndpoint, shared_access_signature};

/// The Entra ID scope of Service Bus.
pub const SERVICE_BUS_SCOPE: &str = "https://servicebus.azure.net/.default";

/// How long a shared access signature bosun makes is valid.
const SAS_LIFETIME: Duration = Duration::from_secs(3600);

/// A token and what it is.
#[derive(Clone, PartialEq, Eq)]
pub struct ServiceBusToken {
    /// The token text (`SharedAccessSignature sr=...` or a JWT).
    pub value: String,
    /// The CBS token type: `servicebus.windows.net:sastoken` or `jwt`.
    pub token_type: &'static str,
    /// When it stops being valid (refresh before).
    pub expires_at: OffsetDateTime,
}

impl fmt::Debug for ServiceBusToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceBusToken")
            .field("token_type", &self.token_type)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

impl ServiceBusToken {
    /// The `Authorization` header value for the management (HTTPS) API.
    pub fn authorization(&self) -> String {
        if self.token_type == "jwt" {
            format!("Bearer {}", self.value)
        } else {
            self.value.clone()
        }
    }
}

/// A token could not be had.
#[derive(Debug, thiserror::Error)]
#[error("Service Bus credential: {doing}: {source}")]
pub struct CredentialError {
    /// What was being done (`setting up the Entra ID credential`).
    pub doing: &'static str,
    /// The identity library's error.
    #[source]
    pub source: crate::ports::error::BoxError,
}

/// Where tokens come from.
#[derive(Clone)]
pub enum TokenSource {
    /// A shared access key: a signature is made per audience.
    SharedAccessKey {
        /// The policy name.
        key_name: String,
        /// The key.
        key: String,
    },
    /// A fixed signature (it cannot be renewed; bosun uses it until it expires).
    Signature(String),
    /// Entra ID.
    EntraId(Arc<dyn TokenCredential>),
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SharedAccessKey { key_name, .. } => write!(f, "SharedAccessKey({key_name})"),
            Self::Signature(_) => f.write_str("Signature(<redacted>)"),
            Self::EntraId(_) => f.write_str("EntraId"),
        }
    }
}

impl TokenSource {
    /// The source for an endpoint's settings.
    pub fn for_endpoint(endpoint: &ServiceBusEndpoint) -> Result<Self, CredentialError> {
        Ok(match &endpoint.auth {
            ServiceBusAuth::SharedAccessKey { key_name, key } => Self::SharedAccessKey {
                key_name: key_name.clone(),
                key: key.clone(),
            },
            ServiceBusAuth::SharedAccessSignature(signature) => Self::Signature(signature.clone()),
            ServiceBusAuth::EntraId { credential, client_id } => {
                let which = match credential.as_str() {
                    "workload-identity" => EntraIdCredential::WorkloadIdentity,
                    "managed-identity" => EntraIdCredential::ManagedIdentity {
                        client_id: client_id.clone(),
                    },
                    "azure-cli" => EntraIdCredential::DeveloperTools,
                    _ => EntraIdCredential::Default,
                };
                Self::EntraId(entra_id_credential(which).map_err(|err| CredentialError {
                    doing: "setting up the Entra ID credential",
                    source: Box::new(err),
                })?)
            }
        })
    }

    /// A token for `audience` (`sb://host/entity`, or `sb://host/` for
    /// the whole namespace).
    pub async fn token(&self, audience: &str) -> Result<ServiceBusToken, CredentialError> {
        match self {
            Self::SharedAccessKey { key_name, key } => {
                let expires_at = OffsetDateTime::now_utc() + SAS_LIFETIME;
                Ok(ServiceBusToken {
                    value: shared_access_signature(audience, key_name, key, expires_at),
                    token_type: "servicebus.windows.net:sastoken",
                    expires_at,
                })
            }
            Self::Signature(signature) => Ok(ServiceBusToken {
                value: signature.clone(),
                token_type: "servicebus.windows.net:sastoken",
                expires_at: signature_expiry(signature).unwrap_or_else(|| OffsetDateTime::now_utc() + SAS_LIFETIME),
            }),
            Self::EntraId(credential) => {
                let token = credential
                    .get_token(&[SERVICE_BUS_SCOPE], None)
                    .await
                    .map_err(|err| CredentialError {
                        doing: "getting an Entra ID token for Service Bus",
                        source: Box::new(err),
                    })?;
                Ok(ServiceBusToken {
                    value: token.token.secret().to_owned(),
                    token_type: "jwt",
                    expires_at: token.expires_on,
                })
            }
        }
    }
}

/// The `se=` (expiry) of a shared access signature.
fn signature_expiry(signature: &str) -> Option<OffsetDateTime> {
    let query = signature.trim_start_matches("SharedAccessSignature").trim();
    let seconds = query
        .split('&')
        .find_map(|part| part.strip_prefix("se="))?
        .parse::<i64>()
        .ok()?;
    OffsetDateTime::from_unix_timestamp(seconds).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shared_keys_sign_per_audience_and_signatures_keep_their_expiry() {
        let source = TokenSource::SharedAccessKey {
            key_name: "RootManageSharedAccessKey".into(),
            key: "secret".into(),
        };
        let token = source.token("sb://localhost/commit").await.unwrap();
        assert!(token.value.contains("sr=sb%3A%2F%2Flocalhost%2Fcommit"), "{token:?}");
        assert_eq!(token.authorization(), token.value);
        assert!(!format!("{token:?}").contains("sig="), "Debug hides the token");
        let fixed = TokenSource::Signature("SharedAccessSignature sr=x&sig=y&se=1700000000&skn=k".into());
        let token = fixed.token("sb://localhost/commit").await.unwrap();
        assert_eq!(token.expires_at.unix_timestamp(), 1_700_000_000);
    }
}
