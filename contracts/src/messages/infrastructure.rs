//! Infrastructure as code (consumer `iac-provisioning`): preview then apply a
//! stack (`ProvisionInfrastructure`, `InfrastructureProvisioned`) and report
//! drift (`InfrastructureDriftDetected`).
//!
//! Idempotent on `planId`; a partly applied change is never retried without
//! a fresh preview. Configuration values travel in messages, which are logged
//! and kept in dead letters: never put secrets in them, reference them (e.g.
//! a Key Vault secret name) instead.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use super::blob::BlobRef;
use crate::schema_rules as rule;
use crate::validate::{self, FieldError, Validate};

/// Longest resource type.
pub const MAX_TYPE_CHARS: usize = 256;
/// Longest stack configuration key.
pub const MAX_CONFIG_KEY_CHARS: usize = 256;
/// Longest resource id in the engine (a Pulumi URN).
pub const MAX_URN_CHARS: usize = 1024;
/// Longest name of a drifted resource or of one of its properties.
pub const MAX_DRIFT_NAME_CHARS: usize = 256;

/// A resource declared for engines that take their desired resources in the
/// request (the local engine). A Pulumi program declares its own and ignores
/// these.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSpec {
    /// Resource type, e.g. `azure-native:storage:StorageAccount` or the local
    /// engine's `local:directory`.
    #[serde(rename = "type")]
    #[schemars(transform = rule::text(MAX_TYPE_CHARS))]
    pub resource_type: String,
    /// Logical name, unique per type within the stack.
    #[schemars(transform = rule::identifier)]
    pub name: String,
    /// Desired properties.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, Value>,
}

impl Validate for ResourceSpec {
    fn validate(&self) -> Result<(), FieldError> {
        validate::text("type", &self.resource_type, MAX_TYPE_CHARS)?;
        validate::identifier("name", &self.name)
    }
}

/// Provision (preview, then apply) an environment's infrastructure stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionInfrastructure {
    /// Id of this change (the idempotency key), e.g.
    /// `<releaseId>-<environment>` for a release.
    #[schemars(transform = rule::identifier)]
    pub plan_id: String,
    /// The stack, `[organization/][project/]stack`, e.g. `payments/prod`.
    #[schemars(transform = rule::stack_name)]
    pub stack: String,
    /// The environment the stack belongs to.
    #[schemars(transform = rule::environment_name)]
    pub environment: String,
    /// The release this change serves, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::identifier)]
    pub release_id: Option<String>,
    /// Stack configuration (`namespace:key` to value). No secrets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = rule::keys(rule::text(MAX_CONFIG_KEY_CHARS)), transform = rule::keys(rule::no_whitespace))]
    pub config: BTreeMap<String, Value>,
    /// Desired resources, for declarative engines (the local engine).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = rule::also_checked("each `type` and `name` pair at most once"))]
    pub resources: Vec<ResourceSpec>,
    /// Only preview: report the changes without applying them.
    #[serde(default)]
    pub preview_only: bool,
    /// The repository holding the Pulumi program (with `commitSha`): the
    /// Pulumi engine takes the program from it at that commit. When
    /// absent, the engine's configured program is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::repository_name, transform = rule::also_checked("given only with `commitSha`"))]
    pub repository: Option<String>,
    /// The commit of `repository` the program is taken at; required with
    /// `repository`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::git_sha, transform = rule::also_checked("given only with `repository`"))]
    pub commit_sha: Option<String>,
}

impl Validate for ProvisionInfrastructure {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("planId", &self.plan_id)?;
        validate::stack_name("stack", &self.stack)?;
        validate::environment_name("environment", &self.environment)?;
        if let Some(release_id) = &self.release_id {
            validate::identifier("releaseId", release_id)?;
        }
        for key in self.config.keys() {
            let field = format!("config.{key}");
            validate::text(&field, key, MAX_CONFIG_KEY_CHARS)?;
            if key.chars().any(char::is_whitespace) {
                return Err(FieldError::new(field, "keys must not contain whitespace"));
            }
        }
        for (index, resource) in self.resources.iter().enumerate() {
            resource
                .validate()
                .map_err(|err| validate::nested_item("resources", index, err))?;
        }
        let keys: Vec<String> = self
            .resources
            .iter()
            .map(|r| format!("{}/{}", r.resource_type, r.name))
            .collect();
        validate::unique("resources", keys.iter().map(String::as_str))?;
        match (&self.repository, &self.commit_sha) {
            (Some(repository), Some(commit_sha)) => {
                validate::repository_name("repository", repository)?;
                validate::git_sha("commitSha", commit_sha)
            }
            (None, None) => Ok(()),
            (Some(_), None) => Err(FieldError::new("commitSha", "is required with repository")),
            (None, Some(_)) => Err(FieldError::new("repository", "is required with commitSha")),
        }
    }
}

/// Counts of resource changes, as a preview plans them or an apply made them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceChanges {
    /// Resources created.
    pub created: u32,
    /// Resources updated in place.
    pub updated: u32,
    /// Resources replaced (deleted and created again).
    pub replaced: u32,
    /// Resources deleted.
    pub deleted: u32,
    /// Resources left as they were.
    pub unchanged: u32,
}

impl ResourceChanges {
    /// Whether anything changed (or would change).
    pub fn any(&self) -> bool {
        self.created + self.updated + self.replaced + self.deleted > 0
    }
}

/// A stack is provisioned (or, with `previewOnly`, its changes are
/// previewed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfrastructureProvisioned {
    /// Id of the change.
    #[schemars(transform = rule::identifier)]
    pub plan_id: String,
    /// The stack.
    #[schemars(transform = rule::stack_name)]
    pub stack: String,
    /// The environment.
    #[schemars(transform = rule::environment_name)]
    pub environment: String,
    /// The release the change served, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::identifier)]
    pub release_id: Option<String>,
    /// `true` when only previewed: `changes` are planned, not made.
    #[serde(default)]
    pub preview_only: bool,
    /// Resource changes.
    pub changes: ResourceChanges,
    /// Stack outputs (name to value); secret outputs are replaced by
    /// `"[secret]"`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = rule::keys(rule::identifier))]
    pub outputs: BTreeMap<String, Value>,
    /// The engine's preview/apply log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<BlobRef>,
    /// When the apply (or preview) finished.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub provisioned_at: OffsetDateTime,
}

impl Validate for InfrastructureProvisioned {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("planId", &self.plan_id)?;
        validate::stack_name("stack", &self.stack)?;
        validate::environment_name("environment", &self.environment)?;
        if let Some(release_id) = &self.release_id {
            validate::identifier("releaseId", release_id)?;
        }
        for name in self.outputs.keys() {
            validate::identifier(&format!("outputs.{name}"), name)?;
        }
        if let Some(log) = &self.log {
            log.validate().map_err(|err| validate::nested("log", err))?;
        }
        Ok(())
    }
}

/// How a resource drifted from the stack's recorded state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum DriftKind {
    /// It exists but some properties differ.
    Modified,
    /// It is in the state but no longer exists.
    Deleted,
}

/// One resource that drifted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftedResource {
    /// The resource's id in the engine (a Pulumi URN, or `type/name` for the
    /// local engine).
    #[schemars(transform = rule::text(MAX_URN_CHARS))]
    pub urn: String,
    /// Resource type.
    #[serde(rename = "type")]
    #[schemars(transform = rule::text(MAX_TYPE_CHARS))]
    pub resource_type: String,
    /// Logical name.
    #[schemars(transform = rule::text(MAX_DRIFT_NAME_CHARS))]
    pub name: String,
    /// How it drifted.
    pub drift: DriftKind,
    /// Names of the properties that differ (for `modified`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = rule::each(rule::text(MAX_DRIFT_NAME_CHARS)))]
    pub properties: Vec<String>,
}

impl Validate for DriftedResource {
    fn validate(&self) -> Result<(), FieldError> {
        validate::text("urn", &self.urn, MAX_URN_CHARS)?;
        validate::text("type", &self.resource_type, MAX_TYPE_CHARS)?;
        validate::text("name", &self.name, MAX_DRIFT_NAME_CHARS)?;
        for (index, property) in self.properties.iter().enumerate() {
            validate::text(&format!("properties[{index}]"), property, MAX_DRIFT_NAME_CHARS)?;
        }
        Ok(())
    }
}

/// A refresh found resources that differ from the stack's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfrastructureDriftDetected {
    /// The change last applied to the stack.
    #[schemars(transform = rule::identifier)]
    pub plan_id: String,
    /// The stack.
    #[schemars(transform = rule::stack_name)]
    pub stack: String,
    /// The environment.
    #[schemars(transform = rule::environment_name)]
    pub environment: String,
    /// The resources that drifted (at least one).
    #[schemars(transform = rule::non_empty_list)]
    pub drifted: Vec<DriftedResource>,
    /// When the drift was found.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub detected_at: OffsetDateTime,
}

impl Validate for InfrastructureDriftDetected {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("planId", &self.plan_id)?;
        validate::stack_name("stack", &self.stack)?;
        validate::environment_name("environment", &self.environment)?;
        validate::non_empty_list("drifted", &self.drifted)?;
        for (index, resource) in self.drifted.iter().enumerate() {
            resource
                .validate()
                .map_err(|err| validate::nested_item("drifted", index, err))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;
    use crate::samples;

    #[test]
    fn samples_are_valid() {
        assert_eq!(samples::provision_infrastructure().validate(), Ok(()));
        assert_eq!(samples::infrastructure_provisioned().validate(), Ok(()));
        assert_eq!(samples::infrastructure_drift_detected().validate(), Ok(()));
    }

    #[test]
    fn provision_bad_fields_are_named() {
        let mut command = samples::provision_infrastructure();
        command.stack = "a/b/c/d".into();
        assert_eq!(command.validate().unwrap_err().field, "stack");

        let mut command = samples::provision_infrastructure();
        command.config.insert("bad key".into(), Value::Null);
        assert_eq!(command.validate().unwrap_err().field, "config.bad key");

        let mut command = samples::provision_infrastructure();
        command.resources[0].name = String::new();
        assert_eq!(command.validate().unwrap_err().field, "resources[0].name");

        let mut command = samples::provision_infrastructure();
        let first = command.resources[0].clone();
        command.resources.push(first);
        assert!(command.validate().unwrap_err().field.starts_with("resources["));
    }

    #[test]
    fn event_bad_fields_are_named() {
        let mut event = samples::infrastructure_provisioned();
        event.outputs.insert("bad name".into(), Value::Null);
        assert_eq!(event.validate().unwrap_err().field, "outputs.bad name");

        let mut drift = samples::infrastructure_drift_detected();
        drift.drifted.clear();
        assert_eq!(drift.validate().unwrap_err().field, "drifted");

        let mut drift = samples::infrastructure_drift_detected();
        drift.drifted[0].urn = String::new();
        assert_eq!(drift.validate().unwrap_err().field, "drifted[0].urn");
    }

    #[test]
    fn resource_type_is_named_type_on_the_wire() {
        let payload = Message::from(samples::provision_infrastructure()).to_payload();
        assert!(payload["resources"][0]["type"].is_string());
        assert!(samples::infrastructure_provisioned().changes.any());
        assert!(!ResourceChanges::default().any());
    }
}
