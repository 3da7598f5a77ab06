//! Handler tests over an in-memory [`InfrastructureEngine`], tests of the
//! local engine (real state files, journal and resources in a temporary
//! folder, including an apply that fails halfway) and of the Pulumi
//! adapter (against a fake `pulumi` script).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use async_trait::async_trait;
use bosun_contracts::messages::{
    DriftKind, DriftedResource, InfrastructureDriftDetected, InfrastructureProvisioned, ProvisionInfrastructure,
    ResourceChanges, ResourceSpec,
};
use bosun_contracts::{Envelope, Message, samples};
use serde_json::{Value, json};
use time::macros::datetime;
use uuid::Uuid;

use super::local::{Journal, LocalInfrastructure, StackState};
use super::*;

fn envelope(message: &Message) -> Envelope {
    Envelope::new(message, Uuid::now_v7(), "contoso", "agent:test")
}

async fn handle<P: InfrastructureEngine>(
    consumer: &IacProvisioning<P>,
    message: impl Into<Message>,
) -> Result<Outcome, HandlerError> {
    let message = message.into();
    let envelope = envelope(&message);
    consumer.handle(Inbound::new(&envelope, &message)).await
}

fn provisioned(outcome: &Outcome) -> &InfrastructureProvisioned {
    match outcome.messages.last().map(|m| &m.message) {
        Some(Message::InfrastructureProvisioned(event)) => event,
        other => panic!("expected InfrastructureProvisioned, got {other:?}"),
    }
}

fn drift_event(outcome: &Outcome) -> Option<&InfrastructureDriftDetected> {
    outcome.messages.iter().find_map(|m| match &m.message {
        Message::InfrastructureDriftDetected(event) => Some(event),
        _ => None,
    })
}

fn resource(resource_type: &str, name: &str, properties: Value) -> ResourceSpec {
    ResourceSpec {
        resource_type: resource_type.to_owned(),
        name: name.to_owned(),
        properties: serde_json::from_value(properties).unwrap(),
    }
}

fn command(plan_id: &str, resources: Vec<ResourceSpec>) -> ProvisionInfrastructure {
    ProvisionInfrastructure {
        plan_id: plan_id.to_owned(),
        stack: "payments/dev".to_owned(),
        environment: "dev".to_owned(),
        release_id: None,
        config: BTreeMap::new(),
        resources,
        preview_only: false,
        repository: None,
        commit_sha: None,
    }
}

fn four_resources() -> Vec<ResourceSpec> {
    vec![
        resource("local:namespace", "payments", json!({"labels": {"team": "payments"}})),
        resource("local:storage", "receipts", json!({"sizeGb": 5})),
        resource("local:queue", "payouts", json!({"partitions": 2})),
        resource("local:settings", "payments-settings", json!({"logLevel": "info"})),
    ]
}

/// An in-memory engine: records requests, answers a fixed report or a
/// scripted error.
struct FakeEngine {
    requests: Mutex<Vec<ProvisionRequest>>,
    drift: Vec<DriftedResource>,
    fail_with: Option<fn() -> IacError>,
}

impl FakeEngine {
    fn new() -> Self {
        Self {
            requests: Mutex::new(Vec::new()),
            drift: Vec::new(),
            fail_with: None,
        }
    }
}

#[async_trait]
impl InfrastructureEngine for FakeEngine {
    async fn provision(&self, request: &ProvisionRequest) -> Result<ProvisionReport, IacError> {
        self.requests.lock().unwrap().push(request.clone());
        if let Some(fail) = self.fail_with {
            return Err(fail());
        }
        Ok(ProvisionReport {
            changes: ResourceChanges {
                created: 2,
                unchanged: 1,
                ..ResourceChanges::default()
            },
            outputs: BTreeMap::from([("endpoint".to_owned(), json!("https://x"))]),
            provisioned_at: datetime!(2026-11-29 14:09:12 UTC),
            preview_hash: "h".repeat(64),
            drift: self.drift.clone(),
            drift_plan_id: Some("previous-plan".to_owned()),
            previewed_after_interruption: false,
            replayed: false,
        })
    }
}

#[test]
fn name_and_retry_policy_follow_the_design() {
    let consumer = IacProvisioning::new(FakeEngine::new());
    assert_eq!(consumer.name(), "iac-provisioning");
    let route = bosun_contracts::routing::consumer(consumer.name()).unwrap();
    assert!(route.commands.contains(&"ProvisionInfrastructure"));
    assert!(route.subscribes_to("ReleaseApproved"));
    assert_eq!(consumer.retry_policy(), RetryPolicy::exponential(3));
}

#[tokio::test]
async fn a_command_is_provisioned_and_reported() {
    let consumer = IacProvisioning::new(FakeEngine::new());
    let mut cmd = samples::provision_infrastructure();
    cmd.preview_only = false;
    let outcome = handle(&consumer, cmd.clone()).await.unwrap();
    assert_eq!(outcome.messages.len(), 1);
    let event = provisioned(&outcome);
    assert_eq!(event.plan_id, cmd.plan_id);
    assert_eq!(event.stack, cmd.stack);
    assert_eq!(event.environment, cmd.environment);
    assert_eq!(event.release_id, cmd.release_id);
    assert_eq!(event.changes.created, 2);
    assert_eq!(event.outputs["endpoint"], json!("https://x"));
    assert_eq!(Message::from(event.clone()).validate(), Ok(()));
    let requests = consumer.engine().requests.lock().unwrap();
    assert_eq!(requests[0].tenant, "contoso");
    assert_eq!(requests[0].resources, cmd.resources);
    assert_eq!(requests[0].config, cmd.config);
}

#[tokio::test]
async fn a_release_approval_provisions_the_module_default_stack() {
    let consumer = IacProvisioning::new(FakeEngine::new());
    let mut approved = samples::release_approved();
    approved.environment = "dev".to_owned();
    let outcome = handle(&consumer, approved.clone()).await.unwrap();
    let event = provisioned(&outcome);
    assert_eq!(event.plan_id, format!("{}-dev", approved.release_id));
    assert_eq!(event.stack, format!("{}/dev", approved.module_id));
    assert_eq!(event.release_id.as_deref(), Some(approved.release_id.as_str()));
    let requests = consumer.engine().requests.lock().unwrap();
    let names: Vec<&str> = requests[0].resources.iter().map(|r| r.name.as_str()).collect();
    let module = approved.module_id.as_str();
    assert_eq!(
        names,
        vec![
            module.to_owned(),
            format!("{module}-data"),
            format!("{module}-settings")
        ]
    );
}

#[tokio::test]
async fn drift_is_reported_before_the_provisioning() {
    let mut engine = FakeEngine::new();
    engine.drift = vec![DriftedResource {
        urn: "local:storage/receipts".to_owned(),
        resource_type: "local:storage".to_owned(),
        name: "receipts".to_owned(),
        drift: DriftKind::Modified,
        properties: vec!["sizeGb".to_owned()],
    }];
    let consumer = IacProvisioning::new(engine);
    let outcome = handle(&consumer, command("plan-2", four_resources())).await.unwrap();
    assert_eq!(outcome.messages.len(), 2);
    let drift = drift_event(&outcome).unwrap();
    assert_eq!(drift.plan_id, "previous-plan");
    assert_eq!(drift.drifted.len(), 1);
    assert!(matches!(
        outcome.messages[0].message,
        Message::InfrastructureDriftDetected(_)
    ));
    assert_eq!(provisioned(&outcome).plan_id, "plan-2");
}

#[tokio::test]
async fn errors_map_to_retry_decisions() {
    let cases: [(fn() -> IacError, bool); 4] = [
        (
            || IacError::ApplyInterrupted {
                plan_id: "p".into(),
                done: 1,
                total: 2,
                source: "boom".into(),
            },
            true,
        ),
        (|| IacError::Unavailable("disk".into()), true),
        (|| IacError::Invalid("bad".into()), false),
        (
            || IacError::ResourceConflict {
                urn: "a/b".into(),
                owner: "other".into(),
            },
            false,
        ),
    ];
    for (fail, retryable) in cases {
        let mut engine = FakeEngine::new();
        engine.fail_with = Some(fail);
        let consumer = IacProvisioning::new(engine);
        let err = handle(&consumer, command("p", vec![])).await.unwrap_err();
        assert_eq!(err.is_retryable(), retryable, "{err}");
    }
    let mut engine = FakeEngine::new();
    engine.fail_with = Some(|| IacError::Throttled {
        after: std::time::Duration::from_secs(30),
        source: "locked".into(),
    });
    let err = handle(&IacProvisioning::new(engine), command("p", vec![]))
        .await
        .unwrap_err();
    assert!(matches!(err, HandlerError::RetryAfter { .. }));
}

#[tokio::test]
async fn bad_input_is_permanent() {
    let consumer = IacProvisioning::new(FakeEngine::new());
    let err = handle(&consumer, samples::gitops_synced()).await.unwrap_err();
    assert!(!err.is_retryable());

    let message = Message::from(command("p", vec![]));
    let mut envelope = envelope(&message);
    envelope.tenant_id = "Bad Tenant".to_owned();
    let err = consumer.handle(Inbound::new(&envelope, &message)).await.unwrap_err();
    assert!(!err.is_retryable());
    assert!(consumer.engine().requests.lock().unwrap().is_empty());
}

// ---- the local engine ----

fn read<T: for<'de> serde::Deserialize<'de>>(path: &Path) -> T {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn stack_dir(engine: &LocalInfrastructure) -> std::path::PathBuf {
    engine.stack_dir("contoso", "dev", "payments/dev")
}

fn resource_file(engine: &LocalInfrastructure, folder: &str, name: &str) -> std::path::PathBuf {
    engine
        .resources_dir("contoso", "dev")
        .join(folder)
        .join(format!("{name}.json"))
}

#[tokio::test]
async fn local_engine_previews_and_applies_resources_as_files() {
    let root = tempfile::tempdir().unwrap();
    let consumer = IacProvisioning::new(LocalInfrastructure::new(root.path()));
    let outcome = handle(&consumer, command("plan-1", four_resources())).await.unwrap();
    let event = provisioned(&outcome);
    assert_eq!(
        event.changes,
        ResourceChanges {
            created: 4,
            ..ResourceChanges::default()
        }
    );
    assert_eq!(event.outputs["resourceCount"], json!(4));
    assert!(drift_event(&outcome).is_none());

    let engine = consumer.engine();
    let storage: Value = read(&resource_file(engine, "local.storage", "receipts"));
    assert_eq!(storage["properties"]["sizeGb"], json!(5));
    assert_eq!(storage["stack"], json!("payments/dev"));
    let state: StackState = read(&stack_dir(engine).join("state.json"));
    assert_eq!(state.resources.len(), 4);
    assert_eq!(state.last_plan_id.as_deref(), Some("plan-1"));
    assert!(state.resources.values().all(|r| r.hash.len() == 64));
    assert!(!stack_dir(engine).join("apply.journal").exists());
    let journal: Journal = read(&stack_dir(engine).join("last-apply.json"));
    assert!(journal.finished);
    assert_eq!(journal.plan_id, "plan-1");
    assert_eq!(journal.steps.len(), 4);
    assert!(!journal.previewed_after_interruption);

    // A new plan updating one resource and dropping another.
    let mut resources = four_resources();
    resources[1].properties.insert("sizeGb".to_owned(), json!(10));
    resources.remove(2);
    let outcome = handle(&consumer, command("plan-2", resources)).await.unwrap();
    assert_eq!(
        provisioned(&outcome).changes,
        ResourceChanges {
            updated: 1,
            deleted: 1,
            unchanged: 2,
            ..ResourceChanges::default()
        }
    );
    assert!(!resource_file(engine, "local.queue", "payouts").exists());
    let storage: Value = read(&resource_file(engine, "local.storage", "receipts"));
    assert_eq!(storage["properties"]["sizeGb"], json!(10));
}

fn request_for(plan_id: &str) -> ProvisionRequest {
    let command = command(plan_id, four_resources());
    ProvisionRequest {
        tenant: "contoso".to_owned(),
        plan_id: command.plan_id,
        stack: command.stack,
        environment: command.environment,
        release_id: None,
        config: BTreeMap::new(),
        resources: command.resources,
        preview_only: false,
        program: None,
    }
}

#[tokio::test]
async fn an_unreadable_local_state_is_retried_and_keeps_its_cause() {
    let root = tempfile::tempdir().unwrap();
    let consumer = IacProvisioning::new(LocalInfrastructure::new(root.path()));
    handle(&consumer, command("plan-1", four_resources())).await.unwrap();
    let state_path = stack_dir(consumer.engine()).join("state.json");

    std::fs::write(&state_path, "{ not json").unwrap();
    let err = consumer.engine().provision(&request_for("plan-2")).await.unwrap_err();
    assert!(
        matches!(&err, IacError::Json { context, .. } if context.ends_with("state.json is not valid")),
        "{err}"
    );
    assert!(err.is_retryable(), "{err}");
    let source = std::error::Error::source(&err).expect("the parser's error is kept");
    assert!(source.downcast_ref::<serde_json::Error>().is_some());

    std::fs::remove_file(&state_path).unwrap();
    std::fs::create_dir(&state_path).unwrap();
    let err = handle(&consumer, command("plan-2", four_resources()))
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "a disk failure is not the caller's fault: {err}");
    let err = consumer.engine().provision(&request_for("plan-2")).await.unwrap_err();
    assert!(
        matches!(&err, IacError::Io { context, .. } if context.starts_with("reading ")),
        "{err}"
    );
    let source = std::error::Error::source(&err).expect("the I/O error is kept");
    assert!(source.downcast_ref::<std::io::Error>().is_some());
}

#[tokio::test]
async fn the_same_plan_twice_is_applied_once_and_reports_the_same_result() {
    let root = tempfile::tempdir().unwrap();
    let consumer = IacProvisioning::new(LocalInfrastructure::new(root.path()));
    let mut approved = samples::release_approved();
    approved.environment = "dev".to_owned();
    let first = handle(&consumer, approved.clone()).await.unwrap();
    let state_path = consumer
        .engine()
        .stack_dir("contoso", "dev", &format!("{}/dev", approved.module_id))
        .join("state.json");
    let state_before = std::fs::read(&state_path).unwrap();
    let second = handle(&consumer, approved).await.unwrap();
    assert_eq!(first, second, "the replay reports the recorded result");
    assert_eq!(provisioned(&first).changes.created, 3);
    assert_eq!(std::fs::read(&state_path).unwrap(), state_before, "nothing changed");
    let state: StackState = serde_json::from_slice(&state_before).unwrap();
    assert_eq!(state.plans.len(), 1);
}

#[tokio::test]
async fn an_iac_apply_that_fails_halfway_is_re_previewed_before_it_is_applied_again() {
    let root = tempfile::tempdir().unwrap();
    let consumer = IacProvisioning::new(LocalInfrastructure::new(root.path()));
    let engine = consumer.engine();
    engine.fail_next_apply_after(2);

    // The first attempt stops after two of four resources.
    let err = handle(&consumer, command("plan-1", four_resources()))
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("interrupted after 2 of 4"), "{err}");
    let journal_path = stack_dir(engine).join("apply.journal");
    let unfinished: Journal = read(&journal_path);
    assert!(!unfinished.finished);
    assert_eq!(unfinished.steps.iter().filter(|s| s.done).count(), 2);
    assert!(!unfinished.previewed_after_interruption);
    let state: StackState = read(&stack_dir(engine).join("state.json"));
    assert_eq!(state.resources.len(), 2, "the state is written after each step");
    assert!(state.plans.is_empty());

    // The retry previews again against the actual resources and applies
    // only the two that are missing.
    let outcome = handle(&consumer, command("plan-1", four_resources())).await.unwrap();
    let event = provisioned(&outcome);
    assert_eq!(event.changes.created, 4, "the plan created four resources in all");
    assert_eq!(event.changes.unchanged, 0);
    assert!(!journal_path.exists());
    let finished: Journal = read(&stack_dir(engine).join("last-apply.json"));
    assert!(finished.finished);
    assert!(finished.previewed_after_interruption);
    assert_eq!(finished.carried.created, 2);
    assert_eq!(finished.steps.len(), 2, "only the remaining changes were applied");
    assert_ne!(finished.preview_hash, unfinished.preview_hash, "a fresh preview");
    for step in &finished.steps {
        assert!(!unfinished.steps.iter().any(|s| s.done && s.urn == step.urn));
    }
    let state: StackState = read(&stack_dir(engine).join("state.json"));
    assert_eq!(state.resources.len(), 4);
    assert!(state.plans[0].previewed_after_interruption);
    for (folder, name) in [
        ("local.namespace", "payments"),
        ("local.storage", "receipts"),
        ("local.queue", "payouts"),
        ("local.settings", "payments-settings"),
    ] {
        assert!(resource_file(engine, folder, name).exists(), "{name}");
    }

    // And the plan is now applied once: a third delivery replays it.
    let again = handle(&consumer, command("plan-1", four_resources())).await.unwrap();
    assert_eq!(again, outcome);
}

#[tokio::test]
async fn drift_is_detected_reported_and_put_back() {
    let root = tempfile::tempdir().unwrap();
    let consumer = IacProvisioning::new(LocalInfrastructure::new(root.path()));
    let engine = consumer.engine();
    handle(&consumer, command("plan-1", four_resources())).await.unwrap();

    // Someone changes one resource by hand and deletes another.
    let storage_path = resource_file(engine, "local.storage", "receipts");
    let mut storage: Value = read(&storage_path);
    storage["properties"]["sizeGb"] = json!(50);
    storage["properties"]["public"] = json!(true);
    std::fs::write(&storage_path, serde_json::to_vec(&storage).unwrap()).unwrap();
    std::fs::remove_file(resource_file(engine, "local.queue", "payouts")).unwrap();

    let outcome = handle(&consumer, command("plan-2", four_resources())).await.unwrap();
    let drift = drift_event(&outcome).expect("drift reported");
    assert_eq!(drift.plan_id, "plan-1");
    assert_eq!(drift.environment, "dev");
    let mut drifted = drift.drifted.clone();
    drifted.sort_by(|a, b| a.urn.cmp(&b.urn));
    assert_eq!(drifted[0].urn, "local:queue/payouts");
    assert_eq!(drifted[0].drift, DriftKind::Deleted);
    assert_eq!(drifted[1].urn, "local:storage/receipts");
    assert_eq!(drifted[1].drift, DriftKind::Modified);
    assert_eq!(drifted[1].properties, vec!["public".to_owned(), "sizeGb".to_owned()]);
    assert_eq!(Message::from(drift.clone()).validate(), Ok(()));

    // The apply put both back.
    assert_eq!(
        provisioned(&outcome).changes,
        ResourceChanges {
            created: 1,
            updated: 1,
            unchanged: 2,
            ..ResourceChanges::default()
        }
    );
    let storage: Value = read(&storage_path);
    assert_eq!(storage["properties"]["sizeGb"], json!(5));
    assert!(storage["properties"].get("public").is_none());
    assert!(resource_file(engine, "local.queue", "payouts").exists());
}

#[tokio::test]
async fn a_preview_changes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let consumer = IacProvisioning::new(LocalInfrastructure::new(root.path()));
    let mut cmd = command("plan-preview", four_resources());
    cmd.preview_only = true;
    let outcome = handle(&consumer, cmd).await.unwrap();
    let event = provisioned(&outcome);
    assert!(event.preview_only);
    assert_eq!(event.changes.created, 4);
    assert!(!consumer.engine().resources_dir("contoso", "dev").exists());
    assert!(!stack_dir(consumer.engine()).join("state.json").exists());
}

#[tokio::test]
async fn a_resource_of_another_stack_is_a_permanent_conflict() {
    let root = tempfile::tempdir().unwrap();
    let consumer = IacProvisioning::new(LocalInfrastructure::new(root.path()));
    handle(&consumer, command("plan-1", four_resources())).await.unwrap();
    let mut other = command("plan-9", vec![resource("local:storage", "receipts", json!({}))]);
    other.stack = "billing/dev".to_owned();
    let err = handle(&consumer, other).await.unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains("payments/dev"), "{err}");
}

// ---- tenants: walls between them ----

async fn handle_as<P: InfrastructureEngine>(
    consumer: &IacProvisioning<P>,
    tenant: &str,
    message: impl Into<Message>,
) -> Result<Outcome, HandlerError> {
    let message = message.into();
    let envelope = Envelope::new(&message, Uuid::now_v7(), tenant, "agent:test");
    consumer.handle(Inbound::new(&envelope, &message)).await
}

#[tokio::test]
async fn two_tenants_provision_the_same_stack_and_plan_each_their_own() {
    let root = tempfile::tempdir().unwrap();
    let consumer = IacProvisioning::new(LocalInfrastructure::new(root.path()));
    let contoso = handle_as(&consumer, "contoso", command("plan-1", four_resources()))
        .await
        .unwrap();
    let engine = consumer.engine();
    let contoso_state = std::fs::read(stack_dir(engine).join("state.json")).unwrap();

    // Same stack, environment and plan id, other resources.
    let fabrikam_resources = vec![resource("local:storage", "receipts", json!({"sizeGb": 50}))];
    let fabrikam = handle_as(&consumer, "fabrikam", command("plan-1", fabrikam_resources))
        .await
        .unwrap();
    assert_eq!(provisioned(&contoso).changes.created, 4);
    let event = provisioned(&fabrikam);
    assert_eq!(
        event.changes,
        ResourceChanges {
            created: 1,
            ..ResourceChanges::default()
        },
        "fabrikam's plan-1 is not contoso's replayed"
    );
    assert!(drift_event(&fabrikam).is_none());
    assert_eq!(
        std::fs::read(stack_dir(engine).join("state.json")).unwrap(),
        contoso_state,
        "contoso's state is untouched"
    );
    let theirs: Value = read(
        &engine
            .resources_dir("fabrikam", "dev")
            .join("local.storage/receipts.json"),
    );
    assert_eq!(theirs["properties"]["sizeGb"], json!(50));
    let ours: Value = read(&resource_file(engine, "local.storage", "receipts"));
    assert_eq!(ours["properties"]["sizeGb"], json!(5));
    let state: StackState = read(&engine.stack_dir("fabrikam", "dev", "payments/dev").join("state.json"));
    assert_eq!(state.tenant.as_deref(), Some("fabrikam"));
    assert_eq!(state.resources.len(), 1);

    // Each replays its own plan.
    let again = handle_as(&consumer, "contoso", command("plan-1", four_resources()))
        .await
        .unwrap();
    assert_eq!(provisioned(&again).changes, provisioned(&contoso).changes);
}

#[tokio::test]
async fn a_state_from_before_tenants_is_adopted_and_one_of_another_tenant_refused() {
    let root = tempfile::tempdir().unwrap();
    let consumer = IacProvisioning::new(LocalInfrastructure::new(root.path()));
    handle(&consumer, command("plan-1", four_resources())).await.unwrap();
    let state_path = stack_dir(consumer.engine()).join("state.json");

    // The state as the engine wrote it before it recorded the tenant.
    let mut old: Value = read(&state_path);
    old.as_object_mut().unwrap().remove("tenant");
    std::fs::write(&state_path, serde_json::to_vec_pretty(&old).unwrap()).unwrap();
    let replay = handle(&consumer, command("plan-1", four_resources())).await.unwrap();
    assert_eq!(
        provisioned(&replay).changes.created,
        4,
        "the in-flight plan is found again"
    );
    handle(&consumer, command("plan-2", four_resources())).await.unwrap();
    let state: StackState = read(&state_path);
    assert_eq!(
        state.tenant.as_deref(),
        Some("contoso"),
        "the folder's tenant is recorded"
    );

    // A state naming another tenant (a copied folder) is not applied.
    let mut foreign: Value = read(&state_path);
    foreign["tenant"] = json!("fabrikam");
    std::fs::write(&state_path, serde_json::to_vec_pretty(&foreign).unwrap()).unwrap();
    let before = std::fs::read(&state_path).unwrap();
    let err = handle(&consumer, command("plan-3", four_resources()))
        .await
        .unwrap_err();
    let HandlerError::Permanent(source) = &err else {
        panic!("expected a permanent error, got {err}");
    };
    let text = source.to_string();
    assert!(text.contains("`contoso`") && text.contains("`fabrikam`"), "{text}");
    assert_eq!(std::fs::read(&state_path).unwrap(), before);
}

// ---- the Pulumi adapter ----

#[cfg(unix)]
pub(super) mod pulumi {
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    use super::*;
    use crate::iac_provisioning::azure::{PulumiConfig, PulumiEngine, tenant_stack};

    pub(in crate::iac_provisioning) const FAKE: &str = r#"#!/bin/sh
echo "$*" >> "$FAKE_PULUMI_DIR/args.log"
case "$1 $2" in
  "stack select")
    name=""; prev=""; create=""
    for arg in "$@"; do
      if [ "$prev" = "--stack" ]; then name="$arg"; fi
      if [ "$arg" = "--create" ]; then create=1; fi
      prev="$arg"
    done
    if [ -n "$create" ]; then echo "$name" >> "$FAKE_PULUMI_DIR/stacks"; exit 0; fi
    if [ -f "$FAKE_PULUMI_DIR/stacks" ] && grep -qxF "$name" "$FAKE_PULUMI_DIR/stacks"; then exit 0; fi
    echo "error: no stack named '$name' found" >&2; exit 255 ;;
  "stack history") if [ -f "$FAKE_PULUMI_DIR/history.json" ]; then cat "$FAKE_PULUMI_DIR/history.json"; else echo "[]"; fi; exit 0 ;;
  "stack output") cat "$FAKE_PULUMI_DIR/outputs.json"; exit 0 ;;
esac
case "$1" in
  refresh) if [ -f "$FAKE_PULUMI_DIR/refresh.json" ]; then cat "$FAKE_PULUMI_DIR/refresh.json"; else echo '{"steps":[],"changeSummary":{"same":2}}'; fi ;;
  preview) cat "$FAKE_PULUMI_DIR/preview.json" ;;
  up)
    if [ -f "$FAKE_PULUMI_DIR/up.fail" ]; then
      echo "error: update failed: resource receipts: 500 Internal Server Error" >&2
      exit 255
    fi
    cat "$FAKE_PULUMI_DIR/up.json" ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
"#;

    pub(in crate::iac_provisioning) const PREVIEW: &str = r#"{
  "config": {"azure-native:location": "westeurope"},
  "steps": [
    {"op": "same", "urn": "urn:pulumi:dev::payments::pulumi:pulumi:Stack::payments-dev", "provider": ""},
    {"op": "create", "urn": "urn:pulumi:dev::payments::azure-native:storage:StorageAccount::receipts",
     "newState": {"urn": "urn:pulumi:dev::payments::azure-native:storage:StorageAccount::receipts", "custom": true,
                  "type": "azure-native:storage:StorageAccount", "inputs": {"kind": "StorageV2"}}},
    {"op": "update", "urn": "urn:pulumi:dev::payments::azure-native:web:WebApp::api", "diffReasons": ["siteConfig"]}
  ],
  "duration": 2100000000,
  "changeSummary": {"create": 1, "update": 1, "same": 1}
}"#;

    pub(in crate::iac_provisioning) const UP: &str = r#"{
  "steps": [
    {"op": "create", "urn": "urn:pulumi:dev::payments::azure-native:storage:StorageAccount::receipts"},
    {"op": "update", "urn": "urn:pulumi:dev::payments::azure-native:web:WebApp::api"}
  ],
  "duration": 48000000000,
  "changeSummary": {"create": 1, "update": 1, "same": 1}
}"#;

    pub(in crate::iac_provisioning) const OUTPUTS: &str =
        r#"{"receiptsEndpoint": "https://receipts.blob.core.windows.net/", "databasePassword": "[secret]"}"#;

    struct Fake {
        dir: tempfile::TempDir,
        engine: PulumiEngine,
    }

    impl Fake {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let binary = dir.path().join("pulumi");
            std::fs::write(&binary, FAKE).unwrap();
            std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::write(dir.path().join("preview.json"), PREVIEW).unwrap();
            std::fs::write(dir.path().join("up.json"), UP).unwrap();
            std::fs::write(dir.path().join("outputs.json"), OUTPUTS).unwrap();
            let program = dir.path().join("program");
            std::fs::create_dir(&program).unwrap();
            let mut config = PulumiConfig::new(&program, dir.path().join("plans"));
            config.binary = binary;
            config
                .environment
                .insert("FAKE_PULUMI_DIR".to_owned(), dir.path().display().to_string());
            config
                .environment
                .insert("PULUMI_CONFIG_PASSPHRASE".to_owned(), "not-logged".to_owned());
            assert!(!format!("{config:?}").contains("not-logged"));
            let engine = PulumiEngine::new(&config).unwrap();
            Self { dir, engine }
        }

        fn file(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }

        fn calls(&self) -> Vec<String> {
            std::fs::read_to_string(self.file("args.log"))
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect()
        }
    }

    fn request() -> ProvisionRequest {
        ProvisionRequest {
            tenant: "contoso".to_owned(),
            plan_id: "payments-api-1.4.0-7f3c2a1-dev".to_owned(),
            stack: "payments/dev".to_owned(),
            environment: "dev".to_owned(),
            release_id: None,
            config: BTreeMap::from([
                ("azure-native:location".to_owned(), json!("westeurope")),
                ("payments:replicas".to_owned(), json!(3)),
            ]),
            resources: vec![],
            preview_only: false,
            program: None,
        }
    }

    #[tokio::test]
    async fn previews_then_applies_the_saved_plan() {
        let fake = Fake::new();
        let report = fake.engine.provision(&request()).await.unwrap();
        assert_eq!(
            report.changes,
            ResourceChanges {
                created: 1,
                updated: 1,
                unchanged: 1,
                ..ResourceChanges::default()
            }
        );
        assert_eq!(report.outputs["databasePassword"], json!("[secret]"));
        assert!(!report.replayed && !report.previewed_after_interruption);
        let calls = fake.calls();
        let verbs: Vec<String> = calls
            .iter()
            .map(|c| c.split(' ').take(2).collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(
            verbs,
            vec![
                "stack select",
                "stack select",
                "stack select",
                "stack history",
                "refresh --preview-only",
                "preview --json",
                "up --yes",
                "stack output"
            ]
        );
        let plan = fake
            .dir
            .path()
            .join("plans")
            .join("payments+contoso.dev-payments-api-1.4.0-7f3c2a1-dev.plan.json");
        assert_eq!(calls[0], "stack select --stack payments/contoso.dev --non-interactive");
        assert_eq!(calls[1], "stack select --stack payments/dev --non-interactive");
        assert_eq!(
            calls[2],
            "stack select --create --stack payments/contoso.dev --non-interactive"
        );
        assert!(
            calls[5].contains(&format!("--save-plan={}", plan.display())),
            "{}",
            calls[5]
        );
        assert!(calls[6].contains(&format!("--plan={}", plan.display())), "{}", calls[6]);
        for call in &calls[5..7] {
            assert!(call.contains("--stack payments/contoso.dev"), "{call}");
            assert!(
                call.contains("--message bosun plan payments-api-1.4.0-7f3c2a1-dev"),
                "{call}"
            );
            assert!(call.contains("--config azure-native:location=westeurope"), "{call}");
            assert!(call.contains("--config payments:replicas=3"), "{call}");
            assert!(call.contains("--non-interactive"), "{call}");
        }
        assert!(!calls[5].contains("--refresh"));
    }

    #[tokio::test]
    async fn a_plan_already_applied_is_replayed_from_the_stack_history() {
        let fake = Fake::new();
        std::fs::write(
            fake.file("history.json"),
            r#"[{"kind": "update", "startTime": "2026-11-29T14:08:00Z", "message": "bosun plan payments-api-1.4.0-7f3c2a1-dev",
                 "environment": {"exec.kind": "cli"}, "config": {}, "result": "succeeded", "endTime": "2026-11-29T14:09:12Z",
                 "resourceChanges": {"create": 1, "update": 1, "same": 1}}]"#,
        )
        .unwrap();
        let report = fake.engine.provision(&request()).await.unwrap();
        assert!(report.replayed);
        assert_eq!(report.changes.created, 1);
        assert_eq!(report.provisioned_at, datetime!(2026-11-29 14:09:12 UTC));
        let calls = fake.calls();
        assert!(
            calls.iter().all(|c| !c.starts_with("up") && !c.starts_with("preview")),
            "{calls:?}"
        );
    }

    #[tokio::test]
    async fn an_interrupted_update_is_refreshed_and_previewed_again() {
        let fake = Fake::new();
        std::fs::write(fake.file("up.fail"), "").unwrap();
        let err = fake.engine.provision(&request()).await.unwrap_err();
        assert!(matches!(err, IacError::ApplyInterrupted { .. }), "{err}");
        assert!(err.is_retryable());

        // Pulumi now records the failed update.
        std::fs::remove_file(fake.file("up.fail")).unwrap();
        std::fs::write(
            fake.file("history.json"),
            r#"[{"kind": "update", "startTime": "2026-11-29T14:08:00Z", "message": "bosun plan payments-api-1.4.0-7f3c2a1-dev",
                 "result": "failed", "endTime": "2026-11-29T14:08:30Z", "resourceChanges": {"create": 1}}]"#,
        )
        .unwrap();
        std::fs::remove_file(fake.file("args.log")).unwrap();
        let report = fake.engine.provision(&request()).await.unwrap();
        assert!(report.previewed_after_interruption);
        let calls = fake.calls();
        let refresh = calls
            .iter()
            .position(|c| c.starts_with("refresh --yes --skip-preview"))
            .unwrap();
        let preview = calls.iter().position(|c| c.starts_with("preview")).unwrap();
        let up = calls.iter().position(|c| c.starts_with("up")).unwrap();
        assert!(refresh < preview && preview < up, "{calls:?}");
    }

    #[tokio::test]
    async fn drift_found_by_a_refresh_preview_is_reported_and_refreshed() {
        let fake = Fake::new();
        std::fs::write(
            fake.file("refresh.json"),
            r#"{"steps": [
                 {"op": "refresh", "urn": "urn:pulumi:dev::payments::azure-native:storage:StorageAccount::receipts",
                  "oldState": {"type": "azure-native:storage:StorageAccount", "outputs": {"allowBlobPublicAccess": false}},
                  "newState": {"type": "azure-native:storage:StorageAccount", "outputs": {"allowBlobPublicAccess": true}}},
                 {"op": "delete", "urn": "urn:pulumi:dev::payments::azure-native:web:WebApp::api",
                  "oldState": {"type": "azure-native:web:WebApp", "outputs": {}}},
                 {"op": "same", "urn": "urn:pulumi:dev::payments::pulumi:pulumi:Stack::payments-dev"}
               ], "changeSummary": {"update": 1, "delete": 1, "same": 1}}"#,
        )
        .unwrap();
        let report = fake.engine.provision(&request()).await.unwrap();
        assert_eq!(report.drift.len(), 2);
        assert_eq!(report.drift[0].drift, DriftKind::Modified);
        assert_eq!(report.drift[0].name, "receipts");
        assert_eq!(report.drift[0].properties, vec!["allowBlobPublicAccess".to_owned()]);
        assert_eq!(report.drift[1].drift, DriftKind::Deleted);
        assert_eq!(report.drift[1].resource_type, "azure-native:web:WebApp");
        let calls = fake.calls();
        assert!(
            calls
                .iter()
                .any(|c| c.starts_with("preview") && c.contains("--refresh"))
        );
        assert!(calls.iter().any(|c| c.starts_with("up") && c.contains("--refresh")));
    }

    #[tokio::test]
    async fn a_preview_only_request_never_runs_up() {
        let fake = Fake::new();
        let mut request = request();
        request.preview_only = true;
        let report = fake.engine.provision(&request).await.unwrap();
        assert_eq!(report.changes.created, 1);
        let calls = fake.calls();
        assert!(calls.iter().all(|c| !c.starts_with("up")), "{calls:?}");
        assert!(calls.iter().all(|c| !c.contains("--save-plan")), "{calls:?}");
    }

    #[tokio::test]
    async fn two_tenants_with_the_same_stack_get_a_pulumi_stack_each() {
        assert_eq!(tenant_stack("contoso", "payments/dev"), "payments/contoso.dev");
        assert_eq!(
            tenant_stack("contoso", "acme/payments/dev"),
            "acme/payments/contoso.dev"
        );
        assert_eq!(tenant_stack("contoso", "dev"), "contoso.dev");

        let fake = Fake::new();
        fake.engine.provision(&request()).await.unwrap();
        let mut fabrikam = request();
        fabrikam.tenant = "fabrikam".into();
        let report = fake.engine.provision(&fabrikam).await.unwrap();
        assert!(!report.replayed, "fabrikam does not see contoso's plan");
        let stacks = std::fs::read_to_string(fake.file("stacks")).unwrap();
        assert_eq!(stacks, "payments/contoso.dev\npayments/fabrikam.dev\n");
        let calls = fake.calls();
        let ups: Vec<&String> = calls.iter().filter(|c| c.starts_with("up")).collect();
        assert_eq!(ups.len(), 2, "{calls:?}");
        assert!(ups[0].contains("--stack payments/contoso.dev "), "{}", ups[0]);
        assert!(ups[1].contains("--stack payments/fabrikam.dev "), "{}", ups[1]);
    }

    #[tokio::test]
    async fn a_stack_from_before_tenants_is_refused_until_an_operator_gives_it_an_owner() {
        let fake = Fake::new();
        std::fs::write(fake.file("stacks"), "payments/dev\n").unwrap();
        let err = fake.engine.provision(&request()).await.unwrap_err();
        assert!(matches!(err, IacError::UnscopedStack { .. }), "{err}");
        assert!(!err.is_retryable());
        assert!(
            err.to_string()
                .contains("pulumi stack rename --stack payments/dev payments/contoso.dev"),
            "{err}"
        );
        let calls = fake.calls();
        assert!(
            calls
                .iter()
                .all(|c| !c.contains("--create") && !c.starts_with("up") && !c.starts_with("preview")),
            "nothing is created or applied: {calls:?}"
        );

        // Renamed to its owner, the stack is used again.
        std::fs::write(fake.file("stacks"), "payments/contoso.dev\n").unwrap();
        fake.engine.provision(&request()).await.unwrap();
    }
}
