//! How releases are promoted: [`ReleasePolicy`], and [`ReleasePolicyError`]
//! for what can be wrong with one.

use std::collections::BTreeSet;
use std::time::Duration;

use bosun_contracts::messages::PlannedEnvironment;
use bosun_contracts::validate;

use super::rules::ApprovalPolicy;
use super::{DEFAULT_APPROVAL_TIMEOUT, DEFAULT_ENVIRONMENT_REPOSITORY};

/// How releases are promoted: the path, what approves on its own, how long
/// a person has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleasePolicy {
    /// The environments a release is promoted through, in order (default
    /// `["dev"]`).
    pub environments: Vec<String>,
    /// The environments approved without a person (default `["dev"]`).
    pub auto_approve: Vec<String>,
    /// How long a person has to approve an environment before the release
    /// is rejected as timed out (default 24 hours).
    pub approval_timeout: Duration,
    /// The repository holding the environments' desired state, named on
    /// `DeploymentPromoted` (default [`DEFAULT_ENVIRONMENT_REPOSITORY`]).
    pub environment_repository: String,
    /// Who may approve each environment and how many must: the tenant's
    /// stored approval policy, else the default (one approval by anyone
    /// with the right, never the requester).
    pub approval: ApprovalPolicy,
    /// The stored version of [`ReleasePolicy::approval`], if it is one
    /// (named in the saga's notes and refusals).
    pub approval_version: Option<u64>,
}

impl Default for ReleasePolicy {
    fn default() -> Self {
        Self {
            environments: vec!["dev".to_owned()],
            auto_approve: vec!["dev".to_owned()],
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            environment_repository: DEFAULT_ENVIRONMENT_REPOSITORY.to_owned(),
            approval: ApprovalPolicy::default(),
            approval_version: None,
        }
    }
}

impl ReleasePolicy {
    /// Whether the policy approves `environment` without a person.
    pub fn auto_approves(&self, environment: &str) -> bool {
        self.auto_approve.iter().any(|name| name == environment)
    }

    /// Checks the policy: at least one environment, valid and unique names,
    /// auto-approval only for environments on the path, a valid repository
    /// name, a non-zero timeout and a valid approval policy
    /// ([`ApprovalPolicy::validate`]). The saga refuses to plan a release under
    /// an invalid policy ([`SagaError::Rejected`](crate::SagaError::Rejected)).
    pub fn validate(&self) -> Result<(), ReleasePolicyError> {
        if self.environments.is_empty() {
            return Err(ReleasePolicyError::NoEnvironments);
        }
        let mut seen = BTreeSet::new();
        for environment in &self.environments {
            validate::environment_name("environments", environment).map_err(|err| {
                ReleasePolicyError::InvalidEnvironment {
                    environment: environment.clone(),
                    reason: err.reason,
                }
            })?;
            if !seen.insert(environment.as_str()) {
                return Err(ReleasePolicyError::DuplicateEnvironment(environment.clone()));
            }
        }
        if let Some(unknown) = self.auto_approve.iter().find(|name| !seen.contains(name.as_str())) {
            return Err(ReleasePolicyError::UnknownAutoApprove(unknown.clone()));
        }
        validate::repository_name("environmentRepository", &self.environment_repository).map_err(|err| {
            ReleasePolicyError::InvalidEnvironmentRepository {
                name: self.environment_repository.clone(),
                reason: err.reason,
            }
        })?;
        if self.approval_timeout.is_zero() {
            return Err(ReleasePolicyError::ZeroApprovalTimeout);
        }
        self.approval.validate().map_err(ReleasePolicyError::Approval)
    }

    pub(super) fn planned_environments(&self) -> Vec<PlannedEnvironment> {
        self.environments
            .iter()
            .map(|environment| PlannedEnvironment {
                environment: environment.clone(),
                requires_approval: !self.auto_approves(environment),
            })
            .collect()
    }
}

/// What is wrong with a [`ReleasePolicy`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReleasePolicyError {
    /// The promotion path is empty.
    #[error("the release policy names no environment")]
    NoEnvironments,
    /// An environment name is not valid.
    #[error("release policy environment `{environment}`: {reason}")]
    InvalidEnvironment {
        /// The name.
        environment: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An environment is on the path twice.
    #[error("the release policy names environment `{0}` twice")]
    DuplicateEnvironment(String),
    /// An auto-approved environment is not on the path (a typo, most likely).
    #[error("the release policy auto-approves `{0}`, which is not one of its environments")]
    UnknownAutoApprove(String),
    /// The environment repository name is not valid.
    #[error("release policy environment repository `{name}`: {reason}")]
    InvalidEnvironmentRepository {
        /// The name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A zero timeout would reject every release that needs a person.
    #[error("the release policy's approval timeout is zero")]
    ZeroApprovalTimeout,
    /// The approval policy is not valid.
    #[error("approval policy `{}`: {}", .0.field, .0.reason)]
    Approval(bosun_contracts::validate::FieldError),
}
