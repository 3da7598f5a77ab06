//! The Azure building blocks every `azure` adapter uses:
//!
//! - [`http`] — the one way an HTTP client is built (user agent, timeouts,
//!   redirects);
//! - [`retry`] — the one retry policy: the `Retry-After` parser and the
//!   classification of an answer into transient, permanent or retry-after
//!   ([`retry::Disposition`]);
//! - [`credential`] — Microsoft Entra ID credentials (the blob store and
//!   the Service Bus transport take tokens from them) and the cached token
//!   source of the REST adapters, which replaces a token a service refused
//!   before its expiry and sends once more;
//! - [`devops`] — the Azure DevOps REST client (repositories, pushes, pull
//!   requests, pipelines, builds) and its tenant-to-project mapping.

pub mod credential;
pub mod devops;
pub mod http;
pub mod retry;

#[cfg(test)]
pub(crate) mod test_server;

pub(crate) use crate::error_chain;

/// The scope of Entra ID tokens for Azure Resource Manager.
pub const ARM_SCOPE: &str = "https://management.azure.com/.default";

/// Azure Resource Manager in the public cloud.
pub const DEFAULT_ARM_ENDPOINT: &str = "https://management.azure.com";
