//! The verification probes: what samples a tenant's verification checks
//! ([`bosun_sagas::release::VerificationCheck`]) while a release verifies
//! in an environment. The release saga never runs a check; the consumer
//! samples each check of the environment through [`VerificationProbes`]
//! and hands the outcomes to the saga.
//!
//! A probe never fails the message: whatever goes wrong (no answer, a
//! refused connection, an unreadable answer, no credential) is a failed
//! sample whose `detail` says what was seen. A detail never carries a
//! response body or a secret.
//!
//! The adapter is [`Probes`] (`adapter.rs`), one module per kind of
//! check: `http_check.rs` (a `GET` that must answer 2xx),
//! `prometheus.rs` (an instant query whose values must be within bounds)
//! and [`azure_monitor`] (an alert rule that must have no fired alert in
//! Alerts Management).

mod adapter;
pub mod azure_monitor;
mod http_check;
mod prometheus;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use bosun_sagas::release::{CheckOutcome, VerificationCheck};

pub use adapter::{
    AzureMonitorAccess, DEFAULT_REQUEST_TIMEOUT, MAX_ANSWER_BYTES, MAX_ERROR_CHARS, Probes, ProbesError,
};

/// Samples verification checks.
#[async_trait]
pub trait VerificationProbes: Send + Sync + std::fmt::Debug {
    /// One sample of `check`, for `tenant`'s release `release_id` in
    /// `environment` (named in logs and the telemetry of the call).
    async fn sample(
        &self,
        tenant: &str,
        release_id: &str,
        environment: &str,
        check: &VerificationCheck,
    ) -> CheckOutcome;
}
