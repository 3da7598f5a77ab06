//! Test-only doubles, with state, of the Azure services bosun's Azure
//! adapters call, beside the Service Bus test broker: one HTTP server per
//! service on its own loopback port.
//!
//! - [`devops`]: Azure DevOps (Git repositories, refs, pushes, items; pull
//!   requests and their statuses; branch policies; pipelines and runs;
//!   builds, timelines, logs; test runs and results; the location and
//!   resource-area discovery Microsoft's clients use).
//! - [`artifacts`]: an Azure Artifacts NuGet feed (push, flat container,
//!   immutable versions).
//! - [`acr`]: the Azure Resource Manager operations of ACR Tasks (build
//!   source upload URL, schedule run, runs, log SAS URL), with images landing
//!   in a real OCI registry.
//! - [`argocd`]: Argo CD's application API.
//! - [`entra`]: a Microsoft Entra token endpoint (client credentials and the
//!   workload-identity federated token exchange).
//! - [`monitor`]: Azure Monitor's Alerts Management (the alerts each alert
//!   rule fired, fired and resolved by the test).
//!
//! Every double shares the same machinery ([`serve`]): a [`Faults`] plan
//! that makes chosen requests fail as the real services fail (429 with
//! `Retry-After`, 5xx, an answer that never comes, a token that has
//! expired), a [`Journal`] of every request and its answer, and a
//! [`TokenBook`] of the bearer tokens the Entra double issued.

pub mod acr;
pub mod argocd;
pub mod artifacts;
pub mod devops;
pub mod entra;
pub mod monitor;
mod serve;

pub use serve::{
    Auth, Entry, Fault, FaultRule, Faults, Issued, Journal, Running, ServeError, TlsIdentity, TokenBook, TokenProblem,
    serve, serve_tls,
};
