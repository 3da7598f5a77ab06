//! One Argo CD Application as the double keeps it, and what Argo CD's
//! application controller does to it: a sync operation set by the API is
//! picked up (`status.operationState.phase` `Running`), then finished
//! (`Succeeded` or `Failed`), updating `status.sync`, `status.health`,
//! `status.resources` and `status.history`, and clearing `operation`, as
//! the controller does.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// A Kubernetes resource the application manages (what its manifests
/// at the synced revision hold).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ManagedResource {
    /// API group (`apps`; empty for the core group).
    pub group: String,
    /// API version (`v1`).
    pub version: String,
    /// Kind (`Deployment`).
    pub kind: String,
    /// Namespace; empty for cluster-scoped resources.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ManagedResource {
    /// A namespaced resource.
    pub fn new(group: &str, version: &str, kind: &str, namespace: &str, name: &str) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// `deployment.apps/payments-api`, as kubectl and Argo CD's sync
    /// messages name it.
    fn label(&self) -> String {
        let kind = self.kind.to_lowercase();
        if self.group.is_empty() {
            format!("{kind}/{}", self.name)
        } else {
            format!("{kind}.{}/{}", self.group, self.name)
        }
    }

    fn identity(&self) -> Value {
        let mut value = json!({ "version": self.version, "kind": self.kind, "name": self.name });
        if !self.group.is_empty() {
            value["group"] = json!(self.group);
        }
        if !self.namespace.is_empty() {
            value["namespace"] = json!(self.namespace);
        }
        value
    }
}

/// A sync the API accepted that the controller has not finished.
#[derive(Debug, Clone)]
struct Pending {
    /// `operation.sync.revision` as asked (empty: the target revision).
    revision: String,
    prune: bool,
    /// Reads that still see it `Running`.
    reads_left: usize,
    started_at: String,
}

/// The application and the controller's knowledge of it.
#[derive(Debug, Clone)]
pub struct Managed {
    /// The Application as the API serves it.
    pub app: Value,
    pending: Option<Pending>,
    /// `status.health.status` once synced (`Healthy` unless a test says).
    pub health: String,
    /// The next sync fails with this message.
    pub fail_next: Option<String>,
    /// What the manifests hold.
    pub resources: Vec<ManagedResource>,
    /// What the target revision (`spec.source.targetRevision`) resolves to.
    pub target_commit: Option<String>,
    /// Resources applied so far, with the revision they were applied at.
    applied: BTreeMap<ManagedResource, String>,
    history_id: i64,
}

fn is_sha(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Managed {
    /// A newly created application (`status` as the controller first
    /// reports it: not compared yet, nothing deployed).
    pub fn new(mut app: Value, now: &str, uid: &str) -> Self {
        app["metadata"]["namespace"] = json!("argocd");
        app["metadata"]["uid"] = json!(uid);
        app["metadata"]["generation"] = json!(1);
        app["metadata"]["creationTimestamp"] = json!(now);
        if let Some(fields) = app.as_object_mut() {
            fields.remove("operation");
            fields.remove("status");
        }
        app["status"] = json!({
            "sync": { "status": "OutOfSync", "comparedTo": comparison(&app) },
            "health": { "status": "Missing" },
            "reconciledAt": now,
            "sourceType": "Directory",
            "controllerNamespace": "argocd",
        });
        Self {
            app,
            pending: None,
            health: "Healthy".to_owned(),
            fail_next: None,
            resources: Vec::new(),
            target_commit: None,
            applied: BTreeMap::new(),
            history_id: 0,
        }
    }

    /// Whether an operation is set and not finished.
    pub fn operation_running(&self) -> bool {
        self.pending.is_some()
    }

    /// What the API does on sync (`argo.SetAppOperation`): sets
    /// `operation` and clears `status.operationState`.
    pub fn start_sync(&mut self, revision: &str, prune: bool, reads_while_running: usize, now: &str) {
        let source = self.app["spec"]["source"].clone();
        let mut sync = json!({ "prune": prune, "source": source });
        if !revision.is_empty() {
            sync["revision"] = json!(revision);
        }
        self.app["operation"] = json!({
            "sync": sync,
            "initiatedBy": { "username": "admin" },
        });
        if let Some(status) = self.app["status"].as_object_mut() {
            status.remove("operationState");
        }
        self.pending = Some(Pending {
            revision: revision.to_owned(),
            prune,
            reads_left: reads_while_running,
            started_at: now.to_owned(),
        });
    }

    /// One reconcile of the controller between two reads: a pending
    /// operation is shown `Running`, or finished when its reads are used.
    pub fn reconcile(&mut self, now: &str) {
        self.app["status"]["reconciledAt"] = json!(now);
        let Some(pending) = self.pending.as_mut() else {
            return;
        };
        if pending.reads_left > 0 {
            pending.reads_left -= 1;
            let operation = self.app["operation"].clone();
            self.app["status"]["operationState"] = json!({
                "operation": operation,
                "phase": "Running",
                "message": "one or more tasks are running",
                "startedAt": pending.started_at,
            });
            return;
        }
        let pending = pending.clone();
        self.pending = None;
        let operation = self.app["operation"].take();
        if let Some(fields) = self.app.as_object_mut() {
            fields.remove("operation");
        }
        self.finish(&pending, operation, now);
    }

    fn resolve(&self, asked: &str) -> Result<String, String> {
        let target = self.app["spec"]["source"]["targetRevision"].as_str().unwrap_or("HEAD");
        let wanted = if asked.is_empty() { target } else { asked };
        if is_sha(wanted) {
            return Ok(wanted.to_lowercase());
        }
        match &self.target_commit {
            Some(commit) if wanted == target || (wanted == "HEAD" && target.is_empty()) => Ok(commit.clone()),
            _ => Err(format!(
                "ComparisonError: rpc error: code = Unknown desc = unable to resolve '{wanted}' to a commit SHA"
            )),
        }
    }

    fn finish(&mut self, pending: &Pending, operation: Value, now: &str) {
        let source = self.app["spec"]["source"].clone();
        let failure = match self.resolve(&pending.revision) {
            Ok(revision) => self.fail_next.take().map(|message| (Some(revision), message)),
            Err(message) => Some((None, message)),
        };
        if let Some((revision, message)) = failure {
            let mut result = json!({ "resources": [], "source": source });
            if let Some(revision) = &revision {
                result["revision"] = json!(revision);
                self.app["status"]["sync"]["revision"] = json!(revision);
            }
            self.app["status"]["sync"]["status"] = json!("OutOfSync");
            self.app["status"]["operationState"] = json!({
                "operation": operation,
                "phase": "Failed",
                "message": message,
                "startedAt": pending.started_at,
                "finishedAt": now,
                "syncResult": result,
            });
            return;
        }
        let Ok(revision) = self.resolve(&pending.revision) else {
            return;
        };
        let mut results = Vec::new();
        for resource in &self.resources {
            let action = match self.applied.get(resource) {
                None => "created",
                Some(at) if *at == revision => "unchanged",
                Some(_) => "configured",
            };
            let mut result = resource.identity();
            result["status"] = json!("Synced");
            result["message"] = json!(format!("{} {action}", resource.label()));
            result["hookPhase"] = json!("Running");
            result["syncPhase"] = json!("Sync");
            results.push(result);
        }
        let gone: Vec<ManagedResource> = self
            .applied
            .keys()
            .filter(|applied| !self.resources.contains(applied))
            .cloned()
            .collect();
        for resource in &gone {
            let mut result = resource.identity();
            if pending.prune {
                result["status"] = json!("Pruned");
                result["message"] = json!("pruned");
                self.applied.remove(resource);
            } else {
                result["status"] = json!("PruneSkipped");
                result["message"] = json!("ignored (requires pruning)");
            }
            result["syncPhase"] = json!("Sync");
            results.push(result);
        }
        for resource in &self.resources {
            self.applied.insert(resource.clone(), revision.clone());
        }
        let synced = if gone.is_empty() || pending.prune {
            "Synced"
        } else {
            "OutOfSync"
        };
        self.app["status"]["sync"] = json!({
            "status": synced,
            "revision": revision,
            "comparedTo": comparison(&self.app),
        });
        self.app["status"]["health"] = json!({ "status": self.health, "lastTransitionTime": now });
        let health = self.health.clone();
        self.app["status"]["resources"] = Value::Array(
            self.applied
                .keys()
                .map(|resource| {
                    let mut status = resource.identity();
                    status["status"] = json!(if self.resources.contains(resource) {
                        "Synced"
                    } else {
                        "OutOfSync"
                    });
                    status["health"] = json!({ "status": health });
                    status
                })
                .collect(),
        );
        self.history_id += 1;
        let entry = json!({
            "id": self.history_id,
            "revision": revision,
            "deployStartedAt": pending.started_at,
            "deployedAt": now,
            "source": source,
            "initiatedBy": { "username": "admin" },
        });
        match self.app["status"]["history"].as_array_mut() {
            Some(history) => history.push(entry),
            None => self.app["status"]["history"] = json!([entry]),
        }
        self.app["status"]["operationState"] = json!({
            "operation": operation,
            "phase": "Succeeded",
            "message": "successfully synced (all tasks run)",
            "startedAt": pending.started_at,
            "finishedAt": now,
            "syncResult": { "resources": results, "revision": revision, "source": source },
        });
    }

    /// A health a test sets: shown now, and after each sync.
    pub fn set_health(&mut self, health: &str, now: &str) {
        self.health = health.to_owned();
        self.app["status"]["health"] = json!({ "status": health, "lastTransitionTime": now });
    }

    /// What Argo CD's update does: spec, labels, annotations and
    /// finalizers replaced; the comparison is stale until the next sync.
    pub fn update(&mut self, from: &Value) {
        let changed = self.app["spec"] != from["spec"];
        for field in ["labels", "annotations", "finalizers"] {
            match from["metadata"].get(field) {
                Some(value) => self.app["metadata"][field] = value.clone(),
                None => {
                    if let Some(metadata) = self.app["metadata"].as_object_mut() {
                        metadata.remove(field);
                    }
                }
            }
        }
        self.app["spec"] = from["spec"].clone();
        if changed {
            let generation = self.app["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
            self.app["metadata"]["generation"] = json!(generation);
            self.app["status"]["sync"]["status"] = json!("OutOfSync");
            self.app["status"]["sync"]["comparedTo"] = comparison(&self.app);
        }
    }
}

fn comparison(app: &Value) -> Value {
    json!({ "source": app["spec"]["source"], "destination": app["spec"]["destination"] })
}
