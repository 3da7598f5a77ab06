//! What the release saga needs beyond its messages, read when a message is
//! handled (and the GitOps saga, for the promotion gate a person's rollback
//! obeys): the tenant's approval policy in force
//! ([`ReleaseGovernance::approval_policy`]) and who requested a delivery
//! ([`ReleaseGovernance::requesters`]). The runtime implements it over its
//! store; [`DefaultGovernance`] (no stored policy, requesters unknown) is
//! what the consumer uses when it is given none.

use async_trait::async_trait;
use bosun_contracts::messages::ReleaseDecisionRecorded;
use bosun_sagas::release::ApprovalPolicy;

use crate::BoxError;

/// A tenant's stored approval policy, with its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedApprovalPolicy {
    /// The version (1, 2, ...).
    pub version: u64,
    /// The policy.
    pub policy: ApprovalPolicy,
}

/// Why the tenant's approval policy or a delivery's requester could not be
/// read.
#[derive(Debug, thiserror::Error)]
pub enum GovernanceError {
    /// The store did not answer: the message is retried.
    #[error("reading {what} of tenant `{tenant}` failed; the message is retried")]
    Unavailable {
        /// What was being read.
        what: &'static str,
        /// The tenant.
        tenant: String,
        /// The store's error.
        #[source]
        source: BoxError,
    },
    /// The stored policy does not read as this release's policy (a later
    /// release wrote a field this one does not know): the message waits
    /// for a process that reads it.
    #[error(
        "tenant `{tenant}`'s approval policy version {version} does not read here ({reason}); \
         the message waits for a bosun that reads it"
    )]
    Unreadable {
        /// The tenant.
        tenant: String,
        /// The version stored.
        version: u64,
        /// What did not read.
        reason: String,
    },
}

/// What the release saga reads besides its messages.
#[async_trait]
pub trait ReleaseGovernance: Send + Sync + std::fmt::Debug {
    /// The approval policy of `tenant` in force, `None` when it has not
    /// stored one (the default applies).
    async fn approval_policy(&self, tenant: &str) -> Result<Option<VersionedApprovalPolicy>, GovernanceError>;

    /// The identities of who started delivery `correlation_id` of
    /// `tenant`: the principal (`key:<id>`, `cli:<operator>`) and, for a
    /// key, its sponsor (who made the key). Empty when the delivery is not
    /// known (another tenant's reads the same).
    async fn requesters(&self, tenant: &str, correlation_id: &str) -> Result<Vec<String>, GovernanceError>;

    /// Appends the decisions `recorded` carries to `tenant`'s audit log,
    /// in order, once: `message_id` (the message that carried them) names
    /// them, and appending what the log already has stores nothing.
    async fn record_decisions(
        &self,
        tenant: &str,
        message_id: &str,
        recorded: &ReleaseDecisionRecorded,
    ) -> Result<(), GovernanceError>;
}

/// No stored policies, requesters unknown: the default policy applies and
/// only an approval's own identities are checked.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultGovernance;

#[async_trait]
impl ReleaseGovernance for DefaultGovernance {
    async fn approval_policy(&self, _tenant: &str) -> Result<Option<VersionedApprovalPolicy>, GovernanceError> {
        Ok(None)
    }

    async fn requesters(&self, _tenant: &str, _correlation_id: &str) -> Result<Vec<String>, GovernanceError> {
        Ok(Vec::new())
    }

    /// No audit log to append to: the decisions are logged and dropped.
    async fn record_decisions(
        &self,
        tenant: &str,
        message_id: &str,
        recorded: &ReleaseDecisionRecorded,
    ) -> Result<(), GovernanceError> {
        tracing::info!(
            %tenant,
            %message_id,
            release_id = %recorded.release_id,
            decisions = recorded.decisions.len(),
            "no audit log configured; release decisions not kept"
        );
        Ok(())
    }
}
