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

use async_trait::async_trait;
use bosun_sagas::release::{CheckOutcome, VerificationCheck};

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
