//! The embedded infrastructure engine: a stack's desired resources are
//! previewed against its recorded state and applied, resource by resource,
//! to "actual" resources kept as files — a local stand-in for the cloud.
//!
//! Layout under the root (the runtime passes `<data dir>/infra`):
//!
//! ```text
//! <root>/<tenant>/<environment>/
//!   resources/<type>/<name>.json          the actual resources (any stack)
//!   stacks/<stack>/state.json             recorded resources and applied plans
//!   stacks/<stack>/apply.journal          the apply in progress (if any)
//!   stacks/<stack>/last-apply.json        the journal of the last finished apply
//! ```
//!
//! Everything of a stack is under its tenant's folder, so two tenants
//! provisioning the same stack in the same environment name never meet;
//! the state also records the tenant (`tenant`), and a state naming
//! another tenant is refused ([`IacError::ForeignTenant`]). A state from
//! before the tenant was recorded is adopted by the tenant whose folder
//! holds it, on its next apply. Plans are looked up in the stack's state,
//! so a plan id is the tenant's too.
//!
//! `<stack>` is the stack name with `/` written as `+`; `<type>` is the
//! resource type with `:` written as `.` and any character other than
//! `[A-Za-z0-9_-]` percent-encoded. An actual resource file holds its type,
//! name, owning stack and properties; the state records the same with a
//! sha256 of the canonical JSON.
//!
//! A provisioning, under a per-stack lock:
//!
//! 1. a plan already recorded in the state is replayed (its recorded
//!    report, nothing changed);
//! 2. if `apply.journal` exists, an earlier apply was interrupted: the
//!    state is refreshed from the actual resources and the preview is
//!    computed afresh (`previewedAfterInterruption: true` in the result and
//!    the new journal, and a warning in the log); otherwise the actual
//!    resources are compared with the state (drift: modified or deleted
//!    resources), and drifted resources are refreshed before previewing,
//!    so the apply puts them back;
//! 3. the preview diffs the desired resources with the (refreshed) state:
//!    create, update, delete or same, with a sha256 preview hash;
//! 4. the apply writes the journal (plan id, preview hash, steps), then
//!    executes the steps (creates and updates in name order, then
//!    deletes), writing the actual resource, the state and the journal
//!    after each step; at the end the plan is recorded in the state and the
//!    journal becomes `last-apply.json`.
//!
//! [`LocalInfrastructure::fail_next_apply_after`] makes the next apply stop
//! after N steps, as a crash would, for tests and failure drills.
//!
//! Files are written to a temporary file and renamed. The lock is per
//! process; one bosun process drives a data directory.

use std::collections::{BTreeMap, HashMap};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex as StdMutex};

use async_trait::async_trait;
use bosun_contracts::messages::{DriftKind, DriftedResource, ResourceChanges, ResourceSpec};
use bosun_contracts::validate;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use time::OffsetDateTime;
use tokio::sync::Mutex;

use super::port::{IacError, InfrastructureEngine, ProvisionReport, ProvisionRequest};
use crate::blob::sha256_hex;
use crate::tenant::check_owner;

/// Applied plans remembered per stack (the newest).
pub const PLAN_HISTORY: usize = 200;

/// The journal of the apply in progress.
pub const JOURNAL_FILE: &str = "apply.journal";

/// The journal of the last finished apply.
pub const LAST_JOURNAL_FILE: &str = "last-apply.json";

/// The stack's recorded state.
pub const STATE_FILE: &str = "state.json";

/// The embedded engine, keeping stacks and resources under a root folder.
#[derive(Debug)]
pub struct LocalInfrastructure {
    root: PathBuf,
    locks: StdMutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
    fail_after: StdMutex<Option<usize>>,
}

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
    fn from_spec(spec: &ResourceSpec) -> Self {
        Self::new(&spec.resource_type, &spec.name, spec.properties.clone())
    }

    fn new(resource_type: &str, name: &str, properties: BTreeMap<String, Value>) -> Self {
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
    fn done_changes(&self) -> ResourceChanges {
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
struct Step {
    op: StepOp,
    urn: String,
    desired: Option<RecordedResource>,
}

/// The result of a preview.
#[derive(Debug, Clone)]
struct Preview {
    steps: Vec<Step>,
    same: u32,
    hash: String,
}

impl Preview {
    fn changes(&self) -> ResourceChanges {
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
struct ActualResource {
    #[serde(rename = "type")]
    resource_type: String,
    name: String,
    stack: String,
    #[serde(default)]
    properties: BTreeMap<String, Value>,
}

/// The stack's files.
#[derive(Debug, Clone)]
struct StackPaths {
    dir: PathBuf,
    resources: PathBuf,
}

impl StackPaths {
    fn state(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    fn journal(&self) -> PathBuf {
        self.dir.join(JOURNAL_FILE)
    }

    fn last_journal(&self) -> PathBuf {
        self.dir.join(LAST_JOURNAL_FILE)
    }

    fn resource(&self, resource_type: &str, name: &str) -> PathBuf {
        self.resources
            .join(type_folder(resource_type))
            .join(format!("{name}.json"))
    }
}

fn urn(resource_type: &str, name: &str) -> String {
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
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, Value> = map.iter().map(|(k, v)| (k, canonical(v))).collect();
            Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

fn io_error(context: String) -> impl FnOnce(std::io::Error) -> IacError {
    move |err| IacError::Unavailable(format!("{context}: {err}").into())
}

async fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, IacError> {
    match tokio::fs::read(path).await {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|err| IacError::Unavailable(format!("{} is not valid: {err}", path.display()).into())),
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
        Err(err) => Err(io_error(format!("reading {}", path.display()))(err)),
    }
}

/// Writes JSON to a temporary file beside `path` and renames it into place.
async fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), IacError> {
    let parent = path
        .parent()
        .ok_or_else(|| IacError::Invalid(format!("{} has no folder", path.display())))?;
    tokio::fs::create_dir_all(parent)
        .await
        .map_err(io_error(format!("creating {}", parent.display())))?;
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|err| IacError::Unavailable(format!("encoding {}: {err}", path.display()).into()))?;
    bytes.push(b'\n');
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let temp = parent.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    tokio::fs::write(&temp, &bytes)
        .await
        .map_err(io_error(format!("writing {}", temp.display())))?;
    tokio::fs::rename(&temp, path)
        .await
        .map_err(io_error(format!("renaming into {}", path.display())))
}

async fn remove_file(path: &Path) -> Result<(), IacError> {
    match tokio::fs::remove_file(path).await {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(()),
        Err(err) => Err(io_error(format!("removing {}", path.display()))(err)),
    }
}

impl LocalInfrastructure {
    /// An engine keeping its stacks and resources under `root` (created on
    /// first use; the runtime passes `<data dir>/infra`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let root = std::path::absolute(&root).unwrap_or(root);
        Self {
            root,
            locks: StdMutex::new(HashMap::new()),
            fail_after: StdMutex::new(None),
        }
    }

    /// The root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Fault injection for tests and failure drills: the next apply stops
    /// after `steps` resource changes, as if the process died there (the
    /// journal stays behind, unfinished). Applies after that one run
    /// normally.
    pub fn fail_next_apply_after(&self, steps: usize) {
        if let Ok(mut fail_after) = self.fail_after.lock() {
            *fail_after = Some(steps);
        }
    }

    /// The folder of a stack's state and journal.
    pub fn stack_dir(&self, tenant: &str, environment: &str, stack: &str) -> PathBuf {
        self.root
            .join(tenant)
            .join(environment)
            .join("stacks")
            .join(stack.replace('/', "+"))
    }

    /// The folder of an environment's actual resources.
    pub fn resources_dir(&self, tenant: &str, environment: &str) -> PathBuf {
        self.root.join(tenant).join(environment).join("resources")
    }

    fn paths(&self, request: &ProvisionRequest) -> StackPaths {
        StackPaths {
            dir: self.stack_dir(&request.tenant, &request.environment, &request.stack),
            resources: self.resources_dir(&request.tenant, &request.environment),
        }
    }

    fn lock_for(&self, dir: &Path) -> Arc<Mutex<()>> {
        match self.locks.lock() {
            Ok(mut locks) => Arc::clone(locks.entry(dir.to_path_buf()).or_default()),
            // A poisoned map only means another thread panicked while
            // inserting; a fresh lock is still correct within this call.
            Err(_) => Arc::new(Mutex::new(())),
        }
    }

    fn take_fault(&self) -> Option<usize> {
        self.fail_after.lock().ok().and_then(|mut fail_after| fail_after.take())
    }
}

/// Checks what becomes a path component.
fn check(request: &ProvisionRequest) -> Result<(), IacError> {
    validate::tenant_id("tenant", &request.tenant)?;
    validate::environment_name("environment", &request.environment)?;
    validate::stack_name("stack", &request.stack)?;
    validate::identifier("planId", &request.plan_id)?;
    let mut seen = std::collections::BTreeSet::new();
    for (index, resource) in request.resources.iter().enumerate() {
        validate::identifier(&format!("resources[{index}].name"), &resource.name)?;
        validate::text(&format!("resources[{index}].type"), &resource.resource_type, 256)?;
        if !seen.insert(urn(&resource.resource_type, &resource.name)) {
            return Err(IacError::Invalid(format!(
                "resources[{index}]: `{}` is declared twice",
                urn(&resource.resource_type, &resource.name)
            )));
        }
    }
    Ok(())
}

/// Every actual resource file of the environment, by `type/name`.
async fn actual_resources(resources_dir: &Path) -> Result<BTreeMap<String, ActualResource>, IacError> {
    let mut found = BTreeMap::new();
    let mut types = match tokio::fs::read_dir(resources_dir).await {
        Ok(types) => types,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(found),
        Err(err) => return Err(io_error(format!("reading {}", resources_dir.display()))(err)),
    };
    while let Some(type_dir) = types
        .next_entry()
        .await
        .map_err(io_error(format!("reading {}", resources_dir.display())))?
    {
        if !type_dir.file_type().await.map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        let type_path = type_dir.path();
        let mut files = tokio::fs::read_dir(&type_path)
            .await
            .map_err(io_error(format!("reading {}", type_path.display())))?;
        while let Some(file) = files
            .next_entry()
            .await
            .map_err(io_error(format!("reading {}", type_path.display())))?
        {
            let path = file.path();
            let is_resource = path.extension().is_some_and(|ext| ext == "json")
                && !file.file_name().to_string_lossy().starts_with('.');
            if !is_resource {
                continue;
            }
            if let Some(resource) = read_json::<ActualResource>(&path).await? {
                found.insert(urn(&resource.resource_type, &resource.name), resource);
            }
        }
    }
    Ok(found)
}

/// Resources of the state that differ from the actual ones.
fn drift_of(state: &StackState, actual: &BTreeMap<String, ActualResource>) -> Vec<DriftedResource> {
    let mut drifted = Vec::new();
    for (key, recorded) in &state.resources {
        let found = actual.get(key).filter(|resource| resource.stack == state.stack);
        match found {
            None => drifted.push(DriftedResource {
                urn: key.clone(),
                resource_type: recorded.resource_type.clone(),
                name: recorded.name.clone(),
                drift: DriftKind::Deleted,
                properties: Vec::new(),
            }),
            Some(resource) if resource.properties != recorded.properties => {
                let mut names: Vec<String> = recorded
                    .properties
                    .keys()
                    .chain(resource.properties.keys())
                    .filter(|name| recorded.properties.get(*name) != resource.properties.get(*name))
                    .cloned()
                    .collect();
                names.sort();
                names.dedup();
                drifted.push(DriftedResource {
                    urn: key.clone(),
                    resource_type: recorded.resource_type.clone(),
                    name: recorded.name.clone(),
                    drift: DriftKind::Modified,
                    properties: names,
                });
            }
            Some(_) => {}
        }
    }
    drifted
}

/// The state's resources replaced by what actually exists for the stack.
fn refreshed(state: &StackState, actual: &BTreeMap<String, ActualResource>) -> BTreeMap<String, RecordedResource> {
    actual
        .iter()
        .filter(|(_, resource)| resource.stack == state.stack)
        .map(|(key, resource)| {
            (
                key.clone(),
                RecordedResource::new(&resource.resource_type, &resource.name, resource.properties.clone()),
            )
        })
        .collect()
}

fn preview(desired: &[ResourceSpec], current: &BTreeMap<String, RecordedResource>) -> Preview {
    let desired: BTreeMap<String, RecordedResource> = desired
        .iter()
        .map(|spec| (urn(&spec.resource_type, &spec.name), RecordedResource::from_spec(spec)))
        .collect();
    let mut steps = Vec::new();
    let mut same = 0u32;
    for (key, resource) in &desired {
        match current.get(key) {
            None => steps.push(Step {
                op: StepOp::Create,
                urn: key.clone(),
                desired: Some(resource.clone()),
            }),
            Some(existing) if existing.hash != resource.hash => steps.push(Step {
                op: StepOp::Update,
                urn: key.clone(),
                desired: Some(resource.clone()),
            }),
            Some(_) => same += 1,
        }
    }
    for key in current.keys().filter(|key| !desired.contains_key(*key)) {
        steps.push(Step {
            op: StepOp::Delete,
            urn: key.clone(),
            desired: None,
        });
    }
    let listing: Vec<Value> = steps
        .iter()
        .map(|step| {
            json!({
                "op": step.op,
                "urn": step.urn,
                "hash": step.desired.as_ref().map(|resource| resource.hash.clone()),
            })
        })
        .collect();
    let hash = sha256_hex(json!({ "steps": listing, "same": same }).to_string().as_bytes());
    Preview { steps, same, hash }
}

fn outputs(state: &StackState) -> BTreeMap<String, Value> {
    BTreeMap::from([
        ("stack".to_owned(), json!(state.stack)),
        ("resourceCount".to_owned(), json!(state.resources.len())),
    ])
}

impl LocalInfrastructure {
    async fn run(&self, request: &ProvisionRequest, paths: &StackPaths) -> Result<ProvisionReport, IacError> {
        let mut state: StackState = read_json(&paths.state()).await?.unwrap_or_default();
        if let Some(owner) = &state.tenant {
            check_owner(
                || format!("stack `{}` in `{}`", request.stack, request.environment),
                owner,
                &request.tenant,
            )?;
        }
        state.tenant = Some(request.tenant.clone());
        state.stack.clone_from(&request.stack);
        state.environment.clone_from(&request.environment);
        let journal: Option<Journal> = read_json(&paths.journal()).await?;

        if let Some(plan) = state.plans.iter().find(|plan| plan.plan_id == request.plan_id).cloned() {
            if journal.as_ref().is_some_and(|journal| journal.plan_id == plan.plan_id) {
                // Finished, but stopped before the journal was put away.
                remove_file(&paths.journal()).await?;
            }
            tracing::info!(plan_id = %plan.plan_id, stack = %request.stack, "plan already applied; replaying its result");
            return Ok(ProvisionReport {
                changes: plan.changes,
                outputs: plan.outputs,
                provisioned_at: plan.provisioned_at,
                preview_hash: plan.preview_hash,
                drift: plan.drift,
                drift_plan_id: plan.drift_plan_id,
                previewed_after_interruption: plan.previewed_after_interruption,
                replayed: true,
            });
        }

        let actual = actual_resources(&paths.resources).await?;
        for spec in &request.resources {
            let key = urn(&spec.resource_type, &spec.name);
            if let Some(found) = actual.get(&key)
                && found.stack != request.stack
            {
                return Err(IacError::ResourceConflict {
                    urn: key,
                    owner: found.stack.clone(),
                });
            }
        }

        let interrupted = journal.is_some();
        let mut drift = Vec::new();
        let drift_plan_id = state.last_plan_id.clone();
        let current = if let Some(journal) = &journal {
            tracing::warn!(
                stack = %request.stack,
                environment = %request.environment,
                interrupted_plan = %journal.plan_id,
                done = journal.steps.iter().filter(|step| step.done).count(),
                total = journal.steps.len(),
                "found the journal of an interrupted apply; previewing again against the actual resources"
            );
            refreshed(&state, &actual)
        } else {
            drift = drift_of(&state, &actual);
            if drift.is_empty() {
                state.resources.clone()
            } else {
                tracing::warn!(
                    stack = %request.stack,
                    environment = %request.environment,
                    drifted = drift.len(),
                    "actual resources differ from the recorded state; refreshing before the preview"
                );
                refreshed(&state, &actual)
            }
        };
        let preview = preview(&request.resources, &current);
        tracing::info!(
            plan_id = %request.plan_id,
            stack = %request.stack,
            preview_hash = %preview.hash,
            steps = preview.steps.len(),
            unchanged = preview.same,
            "previewed"
        );

        if request.preview_only {
            return Ok(ProvisionReport {
                changes: preview.changes(),
                outputs: outputs(&state),
                provisioned_at: OffsetDateTime::now_utc(),
                preview_hash: preview.hash,
                drift,
                drift_plan_id,
                previewed_after_interruption: interrupted,
                replayed: false,
            });
        }

        // Changes an interrupted attempt of this same plan already made.
        let carried = journal
            .as_ref()
            .filter(|journal| journal.plan_id == request.plan_id)
            .map(Journal::done_changes)
            .unwrap_or_default();
        let mut journal = Journal {
            plan_id: request.plan_id.clone(),
            preview_hash: preview.hash.clone(),
            started_at: OffsetDateTime::now_utc(),
            previewed_after_interruption: interrupted,
            carried,
            steps: preview
                .steps
                .iter()
                .map(|step| JournalStep {
                    op: step.op,
                    urn: step.urn.clone(),
                    done: false,
                })
                .collect(),
            finished: false,
        };
        write_json(&paths.journal(), &journal).await?;
        if state.resources != current {
            state.resources = current;
            write_json(&paths.state(), &state).await?;
        }

        let fault = self.take_fault();
        let total = preview.steps.len();
        for (index, step) in preview.steps.iter().enumerate() {
            if fault == Some(index) {
                return Err(IacError::ApplyInterrupted {
                    plan_id: request.plan_id.clone(),
                    done: index,
                    total,
                    source: "fault injected: the engine stopped midway".into(),
                });
            }
            match (&step.op, &step.desired) {
                (StepOp::Create | StepOp::Update, Some(resource)) => {
                    let file = ActualResource {
                        resource_type: resource.resource_type.clone(),
                        name: resource.name.clone(),
                        stack: request.stack.clone(),
                        properties: resource.properties.clone(),
                    };
                    write_json(&paths.resource(&resource.resource_type, &resource.name), &file).await?;
                    state.resources.insert(step.urn.clone(), resource.clone());
                }
                _ => {
                    if let Some(recorded) = state.resources.remove(&step.urn) {
                        remove_file(&paths.resource(&recorded.resource_type, &recorded.name)).await?;
                    }
                }
            }
            write_json(&paths.state(), &state).await?;
            if let Some(entry) = journal.steps.get_mut(index) {
                entry.done = true;
            }
            write_json(&paths.journal(), &journal).await?;
            tracing::debug!(plan_id = %request.plan_id, op = ?step.op, urn = %step.urn, "applied");
        }

        let mut changes = journal.done_changes();
        let carried_total = carried.created + carried.updated;
        changes.unchanged = preview.same.saturating_sub(carried_total);
        let provisioned_at = OffsetDateTime::now_utc();
        let record = PlanRecord {
            plan_id: request.plan_id.clone(),
            preview_hash: preview.hash.clone(),
            changes,
            outputs: outputs(&state),
            provisioned_at,
            previewed_after_interruption: interrupted,
            drift: drift.clone(),
            drift_plan_id: drift_plan_id.clone(),
        };
        state.plans.push(record.clone());
        if state.plans.len() > PLAN_HISTORY {
            let excess = state.plans.len() - PLAN_HISTORY;
            state.plans.drain(..excess);
        }
        state.last_plan_id = Some(request.plan_id.clone());
        write_json(&paths.state(), &state).await?;
        journal.finished = true;
        write_json(&paths.last_journal(), &journal).await?;
        remove_file(&paths.journal()).await?;

        Ok(ProvisionReport {
            changes,
            outputs: record.outputs,
            provisioned_at,
            preview_hash: preview.hash,
            drift,
            drift_plan_id,
            previewed_after_interruption: interrupted,
            replayed: false,
        })
    }
}

#[async_trait]
impl InfrastructureEngine for LocalInfrastructure {
    async fn provision(&self, request: &ProvisionRequest) -> Result<ProvisionReport, IacError> {
        check(request)?;
        let paths = self.paths(request);
        let lock = self.lock_for(&paths.dir);
        let _guard = lock.lock().await;
        self.run(request, &paths).await
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
