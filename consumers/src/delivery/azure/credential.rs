//! Azure credentials: which Microsoft Entra ID identity bosun
//! authenticates as ([`EntraIdCredential`]), built into an `azure_identity`
//! token credential by [`entra_id_credential`]. Shared by every Azure
//! client that takes Entra ID tokens (the blob store, the Service Bus
//! transport), so they all pick an identity the same way.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use azure_core::error::ErrorKind;
use azure_identity::{
    DeveloperToolsCredential, ManagedIdentityCredential, ManagedIdentityCredentialOptions, UserAssignedId,
    WorkloadIdentityCredential,
};

pub use azure_core::credentials::{AccessToken, TokenCredential, TokenRequestOptions};

use super::error_chain;

/// An Entra ID credential could not be built here; the message names the
/// credential and never holds a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CredentialError(pub String);

/// Which Entra ID credential authenticates bosun to an Azure service
/// (Blob Storage, Service Bus).
#[derive(Clone)]
pub enum EntraIdCredential {
    /// Tries, in order: workload identity (when its environment is set),
    /// the Azure CLI / Azure Developer CLI, then the managed identity. The
    /// first that gives a token is used from then on.
    Default,
    /// AKS workload identity: `AZURE_CLIENT_ID`, `AZURE_TENANT_ID` and
    /// `AZURE_FEDERATED_TOKEN_FILE`, as the webhook injects them.
    WorkloadIdentity,
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
