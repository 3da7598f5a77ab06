//! Azure credentials: which Microsoft Entra ID identity bosun
//! authenticates as ([`EntraIdCredential`]), built into an `azure_identity`
//! token credential by [`entra_id_credential`]. Shared by every Azure
//! client that takes Entra ID tokens (the blob store, the Service Bus
//! transport, the PostgreSQL pool), so they all pick an identity the same
//! way.
//!
//! The REST adapters (Azure DevOps, ACR Tasks' ARM calls, the registry's
//! token exchange) take their tokens from a [`RefreshingToken`]: cached,
//! fetched again before expiry, and, when a service answers 401 to a token
//! still valid by its expiry (revoked, a signing-key rollover), dropped and
//! replaced by a new one for one more try
//! ([`RefreshingToken::send_with_token`]); a second 401 is permanent
//! ([`FRESH_TOKEN_REFUSED`]).

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

/// What an adapter's error says when a service refused a token, and then
/// the new token [`RefreshingToken::send_with_token`] fetched for it: the
/// identity, not an expired token, is what the service refuses.
pub const FRESH_TOKEN_REFUSED: &str = "a new Entra ID token, fetched after the first was refused, was refused too: \
     the service does not accept this identity (check its role assignments and federated credential)";

/// Makes the credential a [`RefreshingToken`] asks for tokens.
type BuildCredential = dyn Fn() -> Result<Arc<dyn TokenCredential>, CredentialError> + Send + Sync;

/// An Entra ID token for one scope, from a credential (workload identity on
/// AKS, managed identity, the Azure CLI), cached and fetched again once it
/// is within [`REFRESH_BEFORE_EXPIRY`] of its expiry, so a long-running
/// adapter never sends an expired token. `Debug` never shows the token.
///
/// # A token refused before its expiry
///
/// A service may refuse a token that is valid by its expiry (revoked, a
/// signing-key rollover, `invalid_token`). Adapters send through
/// [`Self::send_with_token`]: on a refusal (a 401) it drops the token
/// ([`Self::invalidate`]), fetches a new one and sends once more; a second
/// refusal is the adapter's permanent error, naming
/// [`FRESH_TOKEN_REFUSED`], so a wrong identity is never retried for ever.
///
/// `azure_identity`'s credentials keep their own cache until five minutes
/// before expiry, and `azure_core` 1.1's `TokenRequestOptions` has no way
/// around it, so asking the same credential again gives the refused token
/// back. A source made by [`Self::from_identity`] or [`Self::rebuilding`]
/// therefore makes its credential again after a refusal (its cache goes
/// with it); one made by [`Self::new`] can only ask its one credential
/// again.
pub struct RefreshingToken {
    scope: String,
    /// The credential it was made with: what equality compares.
    origin: Arc<dyn TokenCredential>,
    /// Makes the credential again after a refusal; `None`: keep `origin`.
    rebuild: Option<Arc<BuildCredential>>,
    state: tokio::sync::Mutex<TokenState>,
}

/// The credential in use and its last token.
struct TokenState {
    credential: Arc<dyn TokenCredential>,
    cached: Option<AccessToken>,
    /// A token was refused: the credential is made again before the next
    /// token is asked of it.
    refused: bool,
}

/// The answer [`RefreshingToken::send_with_token`] got.
#[derive(Debug)]
pub struct TokenAnswer<A> {
    /// The last answer: to the first token, or to the new one fetched
    /// after the first was refused.
    pub answer: A,
    /// The service refused the first token and the new one too: the
    /// adapter's error is permanent and says [`FRESH_TOKEN_REFUSED`].
    pub fresh_token_refused: bool,
}

impl fmt::Debug for RefreshingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefreshingToken")
            .field("scope", &self.scope)
            .field("rebuilds", &self.rebuild.is_some())
            .finish_non_exhaustive()
    }
}

/// Two sources are the same when they were made with the same credential
/// and scope.
impl PartialEq for RefreshingToken {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.origin, &other.origin) && self.scope == other.scope
    }
}

impl Eq for RefreshingToken {}

impl RefreshingToken {
    /// Tokens for `scope` (e.g. `499b84ac-1321-427f-aa17-267ca6975798/.default`
    /// for Azure DevOps) from `credential`. After a refused token the same
    /// credential is asked again: one that caches its tokens (every
    /// `azure_identity` credential but the Azure CLI's) gives the refused
    /// token back until it nears its expiry. Production sources are made by
    /// [`Self::from_identity`].
    pub fn new(credential: Arc<dyn TokenCredential>, scope: impl Into<String>) -> Self {
        Self::with(credential, None, scope.into())
    }

    /// Tokens for `scope` from the credential `build` makes: now, and again
    /// each time a service refuses one of its tokens, so the new token
    /// cannot come from the old credential's cache. Fails when `build`
    /// fails now.
    pub fn rebuilding(
        build: impl Fn() -> Result<Arc<dyn TokenCredential>, CredentialError> + Send + Sync + 'static,
        scope: impl Into<String>,
    ) -> Result<Self, CredentialError> {
        let credential = build()?;
        Ok(Self::with(credential, Some(Arc::new(build)), scope.into()))
    }

    /// Tokens for `scope` as `identity` ([`entra_id_credential`]), whose
    /// credential is built again from the same settings after a refused
    /// token ([`Self::rebuilding`]; a [`EntraIdCredential::Credential`]
    /// the caller built stays that one credential).
    pub fn from_identity(identity: EntraIdCredential, scope: impl Into<String>) -> Result<Self, CredentialError> {
        Self::rebuilding(move || entra_id_credential(identity.clone()), scope)
    }

    fn with(credential: Arc<dyn TokenCredential>, rebuild: Option<Arc<BuildCredential>>, scope: String) -> Self {
        Self {
            scope,
            origin: Arc::clone(&credential),
            rebuild,
            state: tokio::sync::Mutex::new(TokenState {
                credential,
                cached: None,
                refused: false,
            }),
        }
    }

    /// A token valid for at least [`REFRESH_BEFORE_EXPIRY`]: the cached one,
    /// or a new one from the credential (made again first when a token was
    /// refused since). Fails when the credential cannot be made or fails,
    /// or gives a token that has already expired.
    pub async fn token(&self) -> Result<String, CredentialError> {
        self.token_until().await.map(|(token, _)| token)
    }

    /// [`token`](Self::token) and when it expires, for a caller that
    /// must act before then (the PostgreSQL pool puts the token into its
    /// connect options and replaces it ahead of its expiry).
    pub async fn token_until(&self) -> Result<(String, time::OffsetDateTime), CredentialError> {
        let mut state = self.state.lock().await;
        let fresh = |token: &AccessToken| token.expires_on - REFRESH_BEFORE_EXPIRY > time::OffsetDateTime::now_utc();
        if let Some(token) = state.cached.as_ref().filter(|token| fresh(token)) {
            return Ok((token.token.secret().to_owned(), token.expires_on));
        }
        if state.refused {
            if let Some(rebuild) = &self.rebuild {
                state.credential = rebuild().map_err(|err| {
                    CredentialError(format!(
                        "a new credential for {} after a refused token: {}",
                        self.scope, err.0
                    ))
                })?;
                tracing::debug!(scope = %self.scope, "Entra ID credential made again after a refused token");
            }
            state.refused = false;
        }
        let token = state
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
        state.cached = Some(token);
        Ok((text, expires_on))
    }

    /// A service refused `rejected` (a 401) although it is valid by its
    /// expiry: drops it, when it is still the cached token, so the next
    /// [`Self::token`] fetches a new one (from a credential made again,
    /// see the type's docs). Returns whether it did; `false` when another
    /// request already replaced it, so concurrent refusals of one token
    /// fetch one new token, not one each.
    pub async fn invalidate(&self, rejected: &str) -> bool {
        let mut state = self.state.lock().await;
        let still_cached = state
            .cached
            .as_ref()
            .is_some_and(|token| token.token.secret() == rejected);
        if !still_cached {
            return false;
        }
        state.cached = None;
        state.refused = true;
        true
    }

    /// Sends a request with a token: `send` sends it with the token it is
    /// given, `refused` says whether its answer refused the token (a 401).
    /// A refused token is dropped ([`Self::invalidate`]) and `send` called
    /// once more with a new one; whether that one was refused too is
    /// [`TokenAnswer::fresh_token_refused`]. Fails when no token can be had
    /// (`E` from [`CredentialError`]) or `send` fails.
    pub async fn send_with_token<A, E, Fut>(
        &self,
        mut send: impl FnMut(String) -> Fut,
        refused: impl Fn(&A) -> bool,
    ) -> Result<TokenAnswer<A>, E>
    where
        Fut: Future<Output = Result<A, E>>,
        E: From<CredentialError>,
    {
        let token = self.token().await?;
        let answer = send(token.clone()).await?;
        if !refused(&answer) {
            return Ok(TokenAnswer {
                answer,
                fresh_token_refused: false,
            });
        }
        tracing::warn!(scope = %self.scope, "the service refused an Entra ID token before its expiry; sending once more with a new one");
        self.invalidate(&token).await;
        let answer = send(self.token().await?).await?;
        let fresh_token_refused = refused(&answer);
        if fresh_token_refused {
            tracing::warn!(scope = %self.scope, "the service refused the new Entra ID token too");
        }
        Ok(TokenAnswer {
            answer,
            fresh_token_refused,
        })
    }
}

#[cfg(test)]
mod tests;
