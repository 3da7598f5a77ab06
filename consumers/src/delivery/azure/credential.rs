//! Azure credentials: which Microsoft Entra ID identity bosun
//! authenticates as ([`EntraIdCredential`]), built into an `azure_identity`
//! token credential by [`entra_id_credential`]. Shared by every Azure
//! client that takes Entra ID tokens (the blob store, the Service Bus
//! transport, the PostgreSQL pool), so they all pick an identity the same
//! way.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use azure_core::error::ErrorKind;
use azure_identity::{
    DeveloperToolsCredential, ManagedIdentityCredential, ManagedIdentityCredentialOptions, UserAssignedId,
    WorkloadIdentityCredential, WorkloadIdentityCredentialOptions,
};

pub use azure_core::credentials::{AccessToken, TokenCredential, TokenRequestOptions};

use super::error_chain;

/// An Entra ID credential could not be built here; the message names the
/// credential and never holds a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CredentialError(pub String);

/// Which Entra ID credential authenticates bosun to an Azure service
/// (Blob Storage, Service Bus, Azure Database for PostgreSQL).
#[derive(Clone)]
pub enum EntraIdCredential {
    /// Tries, in order: workload identity (when its environment is set),
    /// the Azure CLI / Azure Developer CLI, then the managed identity. The
    /// first that gives a token is used from then on.
    Default,
    /// AKS workload identity: `AZURE_CLIENT_ID`, `AZURE_TENANT_ID` and
    /// `AZURE_FEDERATED_TOKEN_FILE`, as the webhook injects them.
    WorkloadIdentity,
    /// AKS workload identity as another identity than the pod's own: the
    /// pod's federated token (`AZURE_FEDERATED_TOKEN_FILE`, tenant
    /// `AZURE_TENANT_ID`) exchanged for a token of `client_id`, an identity
    /// with a federated credential for the pod's ServiceAccount (the
    /// database identity that every component of bosun shares).
    WorkloadIdentityFor {
        /// The client id of the identity the tokens are issued to.
        client_id: String,
    },
    /// The managed identity of the VM, App Service or container host;
    /// system-assigned, or user-assigned by client id.
    ManagedIdentity {
        /// Client id of a user-assigned identity; `None` for system-assigned.
        client_id: Option<String>,
    },
    /// The developer's `az login` (or `azd auth login`).
    DeveloperTools,
    /// A credential the caller built (another `azure_identity` credential,
    /// or a test double).
    Credential(Arc<dyn TokenCredential>),
}

impl fmt::Debug for EntraIdCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("Default"),
            Self::WorkloadIdentity => f.write_str("WorkloadIdentity"),
            Self::WorkloadIdentityFor { client_id } => f
                .debug_struct("WorkloadIdentityFor")
                .field("client_id", client_id)
                .finish(),
            Self::ManagedIdentity { client_id } => {
                f.debug_struct("ManagedIdentity").field("client_id", client_id).finish()
            }
            Self::DeveloperTools => f.write_str("DeveloperTools"),
            Self::Credential(_) => f.write_str("Credential(..)"),
        }
    }
}

/// Builds the `azure_identity` credential for `credential` (shared by the
/// blob store and the Service Bus transport, so all of bosun's Azure
/// clients pick an identity the same way).
pub fn entra_id_credential(credential: EntraIdCredential) -> Result<Arc<dyn TokenCredential>, CredentialError> {
    let failed = |which: &str, err: azure_core::Error| CredentialError(format!("{which}: {}", error_chain(&err)));
    Ok(match credential {
        EntraIdCredential::Default => Arc::new(DefaultChain::new()?),
        EntraIdCredential::WorkloadIdentity => {
            WorkloadIdentityCredential::new(None).map_err(|err| failed("workload identity", err))?
        }
        EntraIdCredential::WorkloadIdentityFor { client_id } => {
            WorkloadIdentityCredential::new(Some(WorkloadIdentityCredentialOptions {
                client_id: Some(client_id),
                ..WorkloadIdentityCredentialOptions::default()
            }))
            .map_err(|err| failed("workload identity", err))?
        }
        EntraIdCredential::ManagedIdentity { client_id } => {
            ManagedIdentityCredential::new(Some(ManagedIdentityCredentialOptions {
                user_assigned_id: client_id.map(UserAssignedId::ClientId),
                ..ManagedIdentityCredentialOptions::default()
            }))
            .map_err(|err| failed("managed identity", err))?
        }
        EntraIdCredential::DeveloperTools => {
            DeveloperToolsCredential::new(None).map_err(|err| failed("Azure CLI / azd", err))?
        }
        EntraIdCredential::Credential(credential) => credential,
    })
}

/// Workload identity (when configured), then the developer tools, then the
/// managed identity; the first that gives a token is kept.
#[derive(Debug)]
struct DefaultChain {
    sources: Vec<(&'static str, Arc<dyn TokenCredential>)>,
    chosen: AtomicUsize,
}

impl DefaultChain {
    fn new() -> Result<Self, CredentialError> {
        let mut sources: Vec<(&'static str, Arc<dyn TokenCredential>)> = Vec::new();
        // Construction fails when the workload identity environment is absent.
        if let Ok(credential) = WorkloadIdentityCredential::new(None) {
            sources.push(("workload identity", credential));
        }
        if let Ok(credential) = DeveloperToolsCredential::new(None) {
            sources.push(("Azure CLI / azd", credential));
        }
        if let Ok(credential) = ManagedIdentityCredential::new(None) {
            sources.push(("managed identity", credential));
        }
        if sources.is_empty() {
            return Err(CredentialError("no Entra ID credential can be built here".to_owned()));
        }
        Ok(Self {
            sources,
            chosen: AtomicUsize::new(usize::MAX),
        })
    }
}

#[async_trait]
impl TokenCredential for DefaultChain {
    async fn get_token(
        &self,
        scopes: &[&str],
        options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<AccessToken> {
        if let Some((_, credential)) = self.sources.get(self.chosen.load(Ordering::Relaxed)) {
            return credential.get_token(scopes, options).await;
        }
        let mut failures = Vec::new();
        for (index, (name, credential)) in self.sources.iter().enumerate() {
            match credential.get_token(scopes, options.clone()).await {
                Ok(token) => {
                    self.chosen.store(index, Ordering::Relaxed);
                    return Ok(token);
                }
                Err(err) => failures.push(format!("{name}: {err}")),
            }
        }
        Err(azure_core::Error::with_message(
            ErrorKind::Credential,
            format!("no Entra ID credential gave a token ({})", failures.join("; ")),
        ))
    }
}

/// How long before its expiry a cached token is replaced: a request never
/// leaves with a token that could expire on the way.
pub const REFRESH_BEFORE_EXPIRY: std::time::Duration = std::time::Duration::from_secs(5 * 60);

/// An Entra ID token for one scope, from a credential (workload identity on
/// AKS, managed identity, the Azure CLI), cached and fetched again once it
/// is within [`REFRESH_BEFORE_EXPIRY`] of its expiry, so a long-running
/// adapter never sends an expired token. `Debug` never shows the token.
pub struct RefreshingToken {
    credential: Arc<dyn TokenCredential>,
    scope: String,
    cached: tokio::sync::Mutex<Option<AccessToken>>,
}

impl fmt::Debug for RefreshingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefreshingToken")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// Two sources are the same when they share their credential and scope.
impl PartialEq for RefreshingToken {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.credential, &other.credential) && self.scope == other.scope
    }
}

impl Eq for RefreshingToken {}

impl RefreshingToken {
    /// Tokens for `scope` (e.g. `499b84ac-1321-427f-aa17-267ca6975798/.default`
    /// for Azure DevOps) from `credential`.
    pub fn new(credential: Arc<dyn TokenCredential>, scope: impl Into<String>) -> Self {
        Self {
            credential,
            scope: scope.into(),
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// A token valid for at least [`REFRESH_BEFORE_EXPIRY`]: the cached one,
    /// or a new one from the credential. Fails when the credential fails or
    /// gives a token that has already expired.
    pub async fn token(&self) -> Result<String, CredentialError> {
        self.token_until().await.map(|(token, _)| token)
    }

    /// [`token`](Self::token) and when it expires, for a caller that
    /// must act before then (the PostgreSQL pool puts the token into its
    /// connect options and replaces it ahead of its expiry).
    pub async fn token_until(&self) -> Result<(String, time::OffsetDateTime), CredentialError> {
        let mut cached = self.cached.lock().await;
        let fresh = |token: &AccessToken| token.expires_on - REFRESH_BEFORE_EXPIRY > time::OffsetDateTime::now_utc();
        if let Some(token) = cached.as_ref().filter(|token| fresh(token)) {
            return Ok((token.token.secret().to_owned(), token.expires_on));
        }
        let token = self
            .credential
            .get_token(&[self.scope.as_str()], None)
            .await
            .map_err(|err| CredentialError(format!("a token for {}: {}", self.scope, error_chain(&err))))?;
        if token.expires_on <= time::OffsetDateTime::now_utc() {
            return Err(CredentialError(format!(
                "the credential gave an expired token for {}",
                self.scope
            )));
        }
        tracing::debug!(scope = %self.scope, expires_on = %token.expires_on, "new Entra ID token");
        let text = token.token.secret().to_owned();
        let expires_on = token.expires_on;
        *cached = Some(token);
        Ok((text, expires_on))
    }
}
