//! Verification after promotion and rollback (the release saga and the
//! GitOps saga): the release saga's scheduled sample of an environment's
//! checks, a release verified in an environment (what a rollback goes back
//! to), and a rollback of an environment to its last verified release.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::release::{DeploymentPromoted, MAX_APPROVER_CHARS, MAX_REASON_CHARS, validate_identities};
use crate::schema_rules as rule;
use crate::validate::{self, FieldError, Validate};

/// The release saga's scheduled sample of the verification checks of the
/// environment it was synced in: the consumer runs the checks the tenant's
/// policy names and the saga counts the outcome. Ignored unless the release
/// still verifies there and `attempt` is the sample it waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseVerificationCheck {
    /// The release.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The environment being verified.
    #[schemars(transform = rule::environment_name)]
    pub environment: String,
    /// Which sample this is (1, 2, ...).
    #[schemars(range(min = 1))]
    pub attempt: u32,
    /// When it is due.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub check_at: OffsetDateTime,
}

impl Validate for ReleaseVerificationCheck {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("releaseId", &self.release_id)?;
        validate::environment_name("environment", &self.environment)?;
        if self.attempt == 0 {
            return Err(FieldError::new("attempt", "must be at least 1"));
        }
        Ok(())
    }
}

/// A release passed verification in one environment (its soak time and
/// checks, or, where the policy asks for none, a healthy sync): the GitOps
/// saga of the environment keeps it as a release a rollback may go back to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseVerified {
    /// The release.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// The environment.
    #[schemars(transform = rule::environment_name)]
    pub environment: String,
    /// The promotion verified, as the release saga emitted it (its
    /// `desiredCommitSha` is not meaningful): what a rollback writes again.
    pub promotion: DeploymentPromoted,
    /// What was verified, for a person (`soak 600s, 3 checks, 20 samples`).
    #[schemars(transform = rule::max_chars(MAX_REASON_CHARS))]
    pub summary: String,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub verified_at: OffsetDateTime,
}

impl Validate for ReleaseVerified {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("releaseId", &self.release_id)?;
        validate::environment_name("environment", &self.environment)?;
        self.promotion
            .validate()
            .map_err(|err| validate::nested("promotion", err))?;
        if self.promotion.release_id != self.release_id || self.promotion.environment != self.environment {
            return Err(FieldError::new(
                "promotion",
                "must be the promotion of `releaseId` to `environment`",
            ));
        }
        validate::max_chars("summary", &self.summary, MAX_REASON_CHARS)
    }
}

/// Roll one module of an environment back to a release verified there:
/// the GitOps saga of the environment writes that release's promotion again
/// (one release at a time, as any promotion). Sent by the release saga when
/// a verification fails and the policy rolls back (`requestedBy`
/// `policy:auto-rollback`, `failedReleaseId` set), or by a person holding
/// `releases:rollback` (`bosun releases rollback ENV`).
///
/// `requestedBy` and `requesterIdentities` are set by bosun's front door,
/// as `approvedBy` is on `ApproveRelease`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackEnvironment {
    /// The environment.
    #[schemars(transform = rule::environment_name)]
    pub environment: String,
    /// The module rolled back.
    #[schemars(transform = rule::identifier)]
    pub module_id: String,
    /// The release to go back to; none: the newest release verified there
    /// that is not the module's current one (nor `failedReleaseId`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::identifier)]
    pub to_release_id: Option<String>,
    /// The release whose verification failed, for an automatic rollback:
    /// never gone back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::identifier)]
    pub failed_release_id: Option<String>,
    /// Why.
    #[schemars(transform = rule::text(MAX_REASON_CHARS))]
    pub reason: String,
    /// Why the rollback goes through a closed promotion window or a hold of
    /// the environment (an incident); needs `releases:override` besides
    /// `releases:rollback`. Without it, a rollback into a closed window is
    /// refused, the rule named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_REASON_CHARS))]
    pub override_reason: Option<String>,
    /// The person the sender acts for, as the sender names them (a note).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_APPROVER_CHARS))]
    pub on_behalf_of: Option<String>,
    /// Who asked for it: the authenticated caller, set by bosun's front
    /// door, or `policy:auto-rollback`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_APPROVER_CHARS))]
    pub requested_by: Option<String>,
    /// The identities the caller answers to, set by bosun's front door with
    /// `requestedBy`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = rule::each(rule::text(MAX_APPROVER_CHARS)), transform = rule::unique)]
    pub requester_identities: Vec<String>,
    /// When it was asked for (orders the rollback after the promotions it
    /// undoes).
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub requested_at: OffsetDateTime,
}

impl Validate for RollbackEnvironment {
    fn validate(&self) -> Result<(), FieldError> {
        validate::environment_name("environment", &self.environment)?;
        validate::identifier("moduleId", &self.module_id)?;
        if let Some(to) = &self.to_release_id {
            validate::identifier("toReleaseId", to)?;
        }
        if let Some(failed) = &self.failed_release_id {
            validate::identifier("failedReleaseId", failed)?;
        }
        validate::text("reason", &self.reason, MAX_REASON_CHARS)?;
        if let Some(override_reason) = &self.override_reason {
            validate::text("overrideReason", override_reason, MAX_REASON_CHARS)?;
        }
        if let Some(on_behalf_of) = &self.on_behalf_of {
            validate::text("onBehalfOf", on_behalf_of, MAX_APPROVER_CHARS)?;
        }
        if let Some(requested_by) = &self.requested_by {
            validate::text("requestedBy", requested_by, MAX_APPROVER_CHARS)?;
        }
        validate_identities("requesterIdentities", &self.requester_identities)
    }
}
