//! GitOps (consumer `gitops-sync`, the GitOps saga keyed by `environment`):
//! reconcile an environment with the desired state in its Git repository
//! (`ReconcileEnvironment`) and report it (`GitOpsSynced`). Idempotent on
//! (environment, commitSha).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::schema_rules as rule;
use crate::validate::{self, FieldError, Validate};

/// Longest `requestedBy`.
pub const MAX_REQUESTER_CHARS: usize = 256;
/// Longest resource kind.
pub const MAX_KIND_CHARS: usize = 128;
/// Longest resource name (a Kubernetes name).
pub const MAX_RESOURCE_NAME_CHARS: usize = 253;

/// Why a reconcile was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ReconcileReason {
    /// The periodic reconcile.
    Schedule,
    /// A person or agent asked.
    Manual,
    /// A promotion changed the desired state.
    Promotion,
    /// The environment's infrastructure changed.
    Infrastructure,
    /// Drift was detected and the environment is to be put back.
    Drift,
}

/// Reconcile an environment with its desired state in Git.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReconcileEnvironment {
    /// The environment.
    #[schemars(transform = rule::environment_name)]
    pub environment: String,
    /// The commit of the environment repository to reconcile to; its
    /// branch head when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::git_sha)]
    pub desired_commit_sha: Option<String>,
    /// Why.
    pub reason: ReconcileReason,
    /// Who asked, for a manual reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_REQUESTER_CHARS))]
    pub requested_by: Option<String>,
}

impl Validate for ReconcileEnvironment {
    fn validate(&self) -> Result<(), FieldError> {
        validate::environment_name("environment", &self.environment)?;
        if let Some(sha) = &self.desired_commit_sha {
            validate::git_sha("desiredCommitSha", sha)?;
        }
        if let Some(who) = &self.requested_by {
            validate::text("requestedBy", who, MAX_REQUESTER_CHARS)?;
        }
        Ok(())
    }
}

/// What a reconcile did to one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SyncAction {
    /// Created.
    Created,
    /// Changed to match the desired state.
    Configured,
    /// Already as desired.
    Unchanged,
    /// Removed: no longer in the desired state.
    Pruned,
}

/// One resource a reconcile applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedResource {
    /// Kind, e.g. `Deployment` (Kubernetes) or the local environment's
    /// `service`.
    #[schemars(transform = rule::text(MAX_KIND_CHARS))]
    pub kind: String,
    /// Name.
    #[schemars(transform = rule::text(MAX_RESOURCE_NAME_CHARS))]
    pub name: String,
    /// Namespace, for namespaced Kubernetes resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::environment_name)]
    pub namespace: Option<String>,
    /// What was done.
    pub action: SyncAction,
}

impl Validate for AppliedResource {
    fn validate(&self) -> Result<(), FieldError> {
        validate::text("kind", &self.kind, MAX_KIND_CHARS)?;
        validate::text("name", &self.name, MAX_RESOURCE_NAME_CHARS)?;
        if let Some(namespace) = &self.namespace {
            validate::environment_name("namespace", namespace)?;
        }
        Ok(())
    }
}

/// An environment matches the desired state at a commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitOpsSynced {
    /// The environment.
    #[schemars(transform = rule::environment_name)]
    pub environment: String,
    /// The commit of the environment repository now applied.
    #[schemars(transform = rule::git_sha)]
    pub commit_sha: String,
    /// The release whose promotion this sync applied, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::identifier)]
    pub release_id: Option<String>,
    /// Resources applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<AppliedResource>,
    /// Whether every applied resource reported ready.
    pub healthy: bool,
    /// When the reconcile finished.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub synced_at: OffsetDateTime,
}

impl GitOpsSynced {
    /// Whether the reconcile changed anything.
    pub fn changed(&self) -> bool {
        self.applied.iter().any(|r| r.action != SyncAction::Unchanged)
    }
}

impl Validate for GitOpsSynced {
    fn validate(&self) -> Result<(), FieldError> {
        validate::environment_name("environment", &self.environment)?;
        validate::git_sha("commitSha", &self.commit_sha)?;
        if let Some(release_id) = &self.release_id {
            validate::identifier("releaseId", release_id)?;
        }
        for (index, resource) in self.applied.iter().enumerate() {
            resource
                .validate()
                .map_err(|err| validate::nested_item("applied", index, err))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samples;

    #[test]
    fn samples_are_valid() {
        assert_eq!(samples::reconcile_environment().validate(), Ok(()));
        assert_eq!(samples::gitops_synced().validate(), Ok(()));
    }

    #[test]
    fn bad_fields_are_named() {
        let mut command = samples::reconcile_environment();
        command.environment = "Prod".into();
        assert_eq!(command.validate().unwrap_err().field, "environment");

        let mut command = samples::reconcile_environment();
        command.desired_commit_sha = Some("main".into());
        assert_eq!(command.validate().unwrap_err().field, "desiredCommitSha");

        let mut event = samples::gitops_synced();
        event.applied[1].namespace = Some("Payments".into());
        assert_eq!(event.validate().unwrap_err().field, "applied[1].namespace");
    }

    #[test]
    fn changed_ignores_unchanged_resources() {
        let mut event = samples::gitops_synced();
        assert!(event.changed());
        for resource in &mut event.applied {
            resource.action = SyncAction::Unchanged;
        }
        assert!(!event.changed());
    }
}
