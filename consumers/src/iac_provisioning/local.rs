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
//! Files are written to a temporary file and renamed
//! ([`crate::delivery::atomic_file`]). The lock is per
//! process; one bosun process drives a data directory.

use std::collections::{BTreeMap, HashMap};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex as StdMutex};

use async_trait::async_trait;
use bosun_contracts::messages::{DriftKind, DriftedResource, ResourceSpec};
use bosun_contracts::validate;
use serde_json::{Value, json};
use time::OffsetDateTime;
use tokio::sync::Mutex;

use super::port::{IacError, InfrastructureEngine, ProvisionReport, ProvisionRequest};

mod state;

use crate::delivery::atomic_file;
use crate::delivery::blob::sha256_hex;
use crate::delivery::tenant::check_owner;
use state::{ActualResource, Preview, StackPaths, Step, io_error, read_json, remove_file, urn, write_json};
pub use state::{Journal, JournalStep, PlanRecord, RecordedResource, StackState, StepOp, type_folder};

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

impl LocalInfrastructure {
    /// An engine keeping its stacks and resources under `root` (created on
    /// first use; the runtime passes `<data dir>/infra`). Opening it removes
    /// the temporary files of writes a killed process never finished
    /// ([`atomic_file::remove_leftovers`]; an interrupted apply itself is
    /// picked up by its journal).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let root = std::path::absolute(&root).unwrap_or(root);
        atomic_file::remove_leftovers(&root);
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
