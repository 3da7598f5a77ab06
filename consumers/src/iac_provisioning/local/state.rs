//! What the embedded engine keeps on disk: a stack's state (recorded
//! resources, applied plans), the journal of an apply, the actual resource
//! files, where each lives, and how they are read and written (whole,
//! through a temporary file: [`crate::delivery::atomic_file`]).

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use bosun_contracts::messages::{DriftedResource, ResourceChanges, ResourceSpec};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::{JOURNAL_FILE, LAST_JOURNAL_FILE, STATE_FILE};
use crate::delivery::atomic_file;
use crate::delivery::blob::sha256_hex;
use crate::iac_provisioning::port::IacError;

/// One resource as recorded in the state or found on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedResource {
    /// Resource type.
    #[serde(rename = "type")]
    pub resource_type: String,
    /// Logical name.
    pub name: String,
    /// Properties.
    #[serde(default)]
    pub properties: BTreeMap<String, Value>,
    /// sha256 of the canonical JSON of type, name and properties.
    #[serde(default)]
    pub hash: String,
}

impl RecordedResource {
    pub(super) fn from_spec(spec: &ResourceSpec) -> Self {
        Self::new(&spec.resource_type, &spec.name, spec.properties.clone())
    }

    pub(super) fn new(resource_type: &str, name: &str, properties: BTreeMap<String, Value>) -> Self {
        let canonical = canonical(&json!({ "type": resource_type, "name": name, "properties": properties }));
        Self {
            resource_type: resource_type.to_owned(),
            name: name.to_owned(),
            hash: sha256_hex(canonical.to_string().as_bytes()),
            properties,
        }
    }
}

/// A plan applied to the stack, kept to replay its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanRecord {
    /// The plan.
    pub plan_id: String,
    /// The preview the apply executed.
    pub preview_hash: String,
    /// What the plan changed.
    pub changes: ResourceChanges,
    /// Stack outputs.
    #[serde(default)]
    pub outputs: BTreeMap<String, Value>,
    /// When it finished.
    #[serde(with = "time::serde::rfc3339")]
    pub provisioned_at: OffsetDateTime,
    /// Whether it re-previewed after an interrupted apply.
    #[serde(default)]
    pub previewed_after_interruption: bool,
    /// Drift found before it ran.
    #[serde(default)]
    pub drift: Vec<DriftedResource>,
    /// The plan applied before, when drift was found.
    #[serde(default)]
    pub drift_plan_id: Option<String>,
}

/// A stack's `state.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StackState {
    /// The tenant owning the stack. States written before the tenant was
    /// recorded have none: their folder is the tenant's, so the next
    /// apply records it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The stack.
    pub stack: String,
    /// The environment.
    pub environment: String,
    /// Recorded resources by `type/name`.
    pub resources: BTreeMap<String, RecordedResource>,
    /// The plan applied last.
    pub last_plan_id: Option<String>,
    /// Applied plans, oldest first.
    pub plans: Vec<PlanRecord>,
}

/// What a step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StepOp {
    /// Create a resource.
    Create,
    /// Update a resource in place.
    Update,
    /// Delete a resource.
    Delete,
}

/// One step of an apply, as the journal lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JournalStep {
    /// What it does.
    pub op: StepOp,
    /// The resource, `type/name`.
    pub urn: String,
    /// Whether it was carried out.
    pub done: bool,
}

/// The apply journal: written before the first step, updated after each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Journal {
    /// The plan being applied.
    pub plan_id: String,
    /// The preview being executed.
    pub preview_hash: String,
    /// When the apply started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// Whether this apply re-previewed after an interrupted one.
    pub previewed_after_interruption: bool,
    /// Changes made by earlier, interrupted attempts of the same plan.
    #[serde(default)]
    pub carried: ResourceChanges,
    /// The steps, in order.
    pub steps: Vec<JournalStep>,
    /// Whether every step was carried out.
    #[serde(default)]
    pub finished: bool,
}

impl Journal {
    pub(super) fn done_changes(&self) -> ResourceChanges {
        let mut changes = self.carried;
        for step in self.steps.iter().filter(|step| step.done) {
            match step.op {
                StepOp::Create => changes.created += 1,
                StepOp::Update => changes.updated += 1,
                StepOp::Delete => changes.deleted += 1,
            }
        }
        changes
    }
}

/// A planned step with what it needs.
#[derive(Debug, Clone)]
pub(super) struct Step {
    pub(super) op: StepOp,
    pub(super) urn: String,
    pub(super) desired: Option<RecordedResource>,
}

/// The result of a preview.
#[derive(Debug, Clone)]
pub(super) struct Preview {
    pub(super) steps: Vec<Step>,
    pub(super) same: u32,
    pub(super) hash: String,
}

impl Preview {
    pub(super) fn changes(&self) -> ResourceChanges {
        let count = |op| u32::try_from(self.steps.iter().filter(|step| step.op == op).count()).unwrap_or(u32::MAX);
        ResourceChanges {
            created: count(StepOp::Create),
            updated: count(StepOp::Update),
            replaced: 0,
            deleted: count(StepOp::Delete),
            unchanged: self.same,
        }
    }
}

/// An actual resource file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ActualResource {
    #[serde(rename = "type")]
    pub(super) resource_type: String,
    pub(super) name: String,
    pub(super) stack: String,
    #[serde(default)]
    pub(super) properties: BTreeMap<String, Value>,
}

/// The stack's files.
#[derive(Debug, Clone)]
pub(super) struct StackPaths {
    pub(super) dir: PathBuf,
    pub(super) resources: PathBuf,
}

impl StackPaths {
    pub(super) fn state(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    pub(super) fn journal(&self) -> PathBuf {
        self.dir.join(JOURNAL_FILE)
    }

    pub(super) fn last_journal(&self) -> PathBuf {
        self.dir.join(LAST_JOURNAL_FILE)
    }

    pub(super) fn resource(&self, resource_type: &str, name: &str) -> PathBuf {
        self.resources
            .join(type_folder(resource_type))
            .join(format!("{name}.json"))
    }
}

pub(super) fn urn(resource_type: &str, name: &str) -> String {
    format!("{resource_type}/{name}")
}

/// The folder name of a resource type: `:` as `.`, `[A-Za-z0-9_-]` kept,
/// every other byte percent-encoded.
pub fn type_folder(resource_type: &str) -> String {
    let mut folder = String::with_capacity(resource_type.len());
    for byte in resource_type.bytes() {
        match byte {
            b':' => folder.push('.'),
            b if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' => folder.push(char::from(b)),
            b => folder.push_str(&format!("%{b:02X}")),
        }
    }
    folder
}

/// JSON with every object's keys sorted, so equal values hash alike.
pub(super) fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, Value> = map.iter().map(|(k, v)| (k, canonical(v))).collect();
            Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// An I/O failure while `context` was being done: transient.
pub(super) fn io_error(context: String) -> impl FnOnce(std::io::Error) -> IacError {
    move |source| IacError::Io { context, source }
}

pub(super) async fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, IacError> {
    match tokio::fs::read(path).await {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| IacError::Json {
                context: format!("{} is not valid", path.display()),
                source,
            }),
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
        Err(err) => Err(io_error(format!("reading {}", path.display()))(err)),
    }
}

/// Writes JSON to a temporary file beside `path` and renames it into place.
pub(super) async fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), IacError> {
    let parent = path
        .parent()
        .ok_or_else(|| IacError::Invalid(format!("{} has no folder", path.display())))?;
    tokio::fs::create_dir_all(parent)
        .await
        .map_err(io_error(format!("creating {}", parent.display())))?;
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| IacError::Json {
        context: format!("encoding {}", path.display()),
        source,
    })?;
    bytes.push(b'\n');
    let temp = atomic_file::temporary_path(parent);
    tokio::fs::write(&temp, &bytes)
        .await
        .map_err(io_error(format!("writing {}", temp.display())))?;
    tokio::fs::rename(&temp, path)
        .await
        .map_err(io_error(format!("renaming into {}", path.display())))
}

pub(super) async fn remove_file(path: &Path) -> Result<(), IacError> {
    match tokio::fs::remove_file(path).await {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(()),
        Err(err) => Err(io_error(format!("removing {}", path.display()))(err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_folders_are_safe_and_distinct() {
        assert_eq!(type_folder("local:namespace"), "local.namespace");
        assert_eq!(
            type_folder("azure-native:storage:StorageAccount"),
            "azure-native.storage.StorageAccount"
        );
        assert_eq!(type_folder("../x"), "%2E%2E%2Fx");
        assert_ne!(type_folder("a.b"), type_folder("a:b"));
    }

    #[test]
    fn canonical_json_sorts_keys() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"d":2,"c":3}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"c":3,"d":2},"b":1}"#).unwrap();
        assert_eq!(canonical(&a).to_string(), canonical(&b).to_string());
    }
}
