//! Handler tests over an in-memory [`Environments`] port (the saga state
//! carried from one message to the next as the runtime does), tests of the
//! local adapter (real commits in a bare environment repository and a real
//! environment directory in a temporary folder), and of the Azure adapter
//! (Argo CD and Azure DevOps against a scripted local HTTP server).

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{DeploymentPromoted, GitOpsSynced, ReconcileEnvironment, ReconcileReason, SyncAction};
use bosun_contracts::{Envelope, Message, samples};
use bosun_sagas::gitops::{GitOpsPhase, GitOpsSaga, GitOpsState};
use serde_json::Value;
use time::macros::datetime;
use uuid::Uuid;

use super::local::{LocalEnvironments, SYNCED_COMMIT_FILE};
use super::*;
use crate::SagaInstance;

mod rollback;

const SHA_1: &str = "1111111111111111111111111111111111111111";
const SHA_2: &str = "2222222222222222222222222222222222222222";
const BASE: Duration = Duration::from_secs(2);
const MAX: Duration = Duration::from_secs(60);

fn promoted(release: &str, minute: i64) -> DeploymentPromoted {
    let mut promoted = samples::deployment_promoted();
    promoted.environment = "dev".to_owned();
    promoted.release_id = release.to_owned();
    promoted.environment_repository = "environments".to_owned();
    promoted.promoted_at = datetime!(2026-11-29 14:00 UTC) + time::Duration::minutes(minute);
    promoted
}

/// Runs a message through the consumer as the runtime does: with the saga
/// as stored (`Null` when new), storing the state the handler returns.
async fn deliver<P: Environments>(
    consumer: &GitOpsSync<P>,
    stored: &mut Value,
    message: impl Into<Message>,
) -> Result<Outcome, HandlerError> {
    deliver_as(consumer, "contoso", stored, message).await
}

/// [`deliver`] for a message of `tenant`.
async fn deliver_as<P: Environments>(
    consumer: &GitOpsSync<P>,
    tenant: &str,
    stored: &mut Value,
    message: impl Into<Message>,
) -> Result<Outcome, HandlerError> {
    let message = message.into();
    let envelope = Envelope::new(&message, Uuid::now_v7(), tenant, "agent:test");
    let (kind, key) = consumer.saga_of(&envelope, &message).expect("a GitOps message");
    let saga = SagaInstance {
        kind,
        key,
        version: 0,
        state: stored.clone(),
    };
    let outcome = consumer
        .handle(Inbound {
            envelope: &envelope,
            message: &message,
            saga: Some(&saga),
        })
        .await?;
    if let Some(state) = &outcome.saga_state {
        *stored = state.clone();
    }
    Ok(outcome)
}

fn synced(outcome: &Outcome) -> Vec<&GitOpsSynced> {
    outcome
        .messages
        .iter()
        .filter_map(|m| match &m.message {
            Message::GitOpsSynced(event) => Some(event),
            _ => None,
        })
        .collect()
}

fn scheduled(outcome: &Outcome) -> Vec<(&ReconcileEnvironment, Duration)> {
    outcome
        .messages
        .iter()
        .filter_map(|m| match (&m.message, m.delay) {
            (Message::ReconcileEnvironment(timer), Some(delay)) => Some((timer, delay)),
            _ => None,
        })
        .collect()
}

fn state_of(stored: &Value) -> GitOpsState {
    serde_json::from_value(stored.clone()).unwrap()
}

/// An in-memory port: each write returns the next scripted commit (or the
/// same one when the manifest is unchanged); the environment runs what it
/// is asked to unless it is lagging.
#[derive(Default)]
struct FakeEnvironments {
    writes: Mutex<Vec<DesiredStateWrite>>,
    commits: Mutex<VecDeque<&'static str>>,
    head: Mutex<Option<(String, Vec<u8>)>>,
    running: Mutex<Option<String>>,
    lagging: Mutex<bool>,
    reconciles: Mutex<Vec<ReconcileRequest>>,
    fail_writes: bool,
}

impl FakeEnvironments {
    fn with_commits(commits: &[&'static str]) -> Self {
        Self {
            commits: Mutex::new(commits.iter().copied().collect()),
            ..Self::default()
        }
    }
}

#[async_trait]
impl Environments for FakeEnvironments {
    async fn write_desired_state(&self, write: &DesiredStateWrite) -> Result<DesiredStateCommit, GitOpsError> {
        if self.fail_writes {
            return Err(GitOpsError::Unavailable("git host down".into()));
        }
        self.writes.lock().unwrap().push(write.clone());
        let mut head = self.head.lock().unwrap();
        if let Some((commit, manifest)) = head.as_ref()
            && *manifest == write.manifest
        {
            return Ok(DesiredStateCommit {
                commit_sha: commit.clone(),
                no_op: true,
            });
        }
        let commit = self.commits.lock().unwrap().pop_front().expect("a scripted commit");
        *head = Some((commit.to_owned(), write.manifest.clone()));
        Ok(DesiredStateCommit {
            commit_sha: commit.to_owned(),
            no_op: false,
        })
    }

    async fn reconcile(&self, request: &ReconcileRequest) -> Result<EnvironmentReport, GitOpsError> {
        self.reconciles.lock().unwrap().push(request.clone());
        let mut running = self.running.lock().unwrap();
        if !*self.lagging.lock().unwrap() {
            running.clone_from(&request.commit_sha);
        }
        Ok(EnvironmentReport {
            commit_sha: running.clone(),
            applied: vec![AppliedResourceFixture::app()],
            healthy: true,
            observed_at: datetime!(2026-11-29 14:30 UTC),
        })
    }
}

struct AppliedResourceFixture;

impl AppliedResourceFixture {
    fn app() -> bosun_contracts::messages::AppliedResource {
        bosun_contracts::messages::AppliedResource {
            kind: "app".to_owned(),
            name: "payments-api".to_owned(),
            namespace: None,
            action: SyncAction::Configured,
        }
    }
}

fn consumer(port: FakeEnvironments) -> GitOpsSync<FakeEnvironments> {
    GitOpsSync::new(port, GitOpsSaga::new(), BASE, MAX)
}

#[test]
fn name_retry_policy_and_saga_key_follow_the_design() {
    let consumer = consumer(FakeEnvironments::default());
    assert_eq!(consumer.name(), "gitops-sync");
    let route = bosun_contracts::routing::consumer(consumer.name()).unwrap();
    assert!(route.commands.contains(&"ReconcileEnvironment"));
    assert!(route.subscribes_to("DeploymentPromoted"));
    assert!(route.subscribes_to("InfrastructureProvisioned"));
    assert_eq!(consumer.retry_policy(), RetryPolicy::exponential(5));
    let key = |message: Message, tenant: &str| {
        let envelope = Envelope::new(&message, Uuid::now_v7(), tenant, "agent:test");
        consumer.saga_of(&envelope, &message)
    };
    assert_eq!(
        key(promoted("r-1.0.0-aaaaaaa", 0).into(), "contoso"),
        Some(("gitops", "contoso/dev".to_owned()))
    );
    assert_eq!(
        key(promoted("r-1.0.0-aaaaaaa", 0).into(), "fabrikam"),
        Some(("gitops", "fabrikam/dev".to_owned())),
        "two tenants' environments are two sagas"
    );
    assert_eq!(
        key(samples::reconcile_environment().into(), "contoso"),
        Some(("gitops", "contoso/prod".to_owned()))
    );
    assert_eq!(key(samples::release_approved().into(), "contoso"), None);
}

#[test]
fn the_manifest_is_deterministic_and_pins_the_image_digest() {
    let promotion = promoted("payments-api-1.4.0-7f3c2a1", 0);
    let (path, bytes) = desired_state_manifest(&promotion).unwrap();
    assert_eq!(path, "dev/apps/payments-api/release.json");
    assert_eq!(desired_state_manifest(&promotion).unwrap().1, bytes);
    let manifest: Value = serde_json::from_slice(&bytes).unwrap();
    let image = promotion.image.as_ref().unwrap();
    assert_eq!(manifest["image"]["reference"], image.reference());
    assert_eq!(manifest["image"]["digest"], image.digest.as_str());
    let package = promotion.package.as_ref().unwrap();
    assert_eq!(manifest["package"]["id"], package.package_id.as_str());
    assert_eq!(manifest["package"]["version"], package.version.as_str());
    assert_eq!(manifest["releaseId"], "payments-api-1.4.0-7f3c2a1");
    assert_eq!(manifest["promotedAt"], "2026-11-29T14:00:00Z");
    assert!(bytes.ends_with(b"}\n"));
}

#[tokio::test]
async fn a_promotion_is_written_reconciled_and_reported() {
    let consumer = consumer(FakeEnvironments::with_commits(&[SHA_1]));
    let mut stored = Value::Null;
    let promotion = promoted("payments-api-1.4.0-7f3c2a1", 0);
    let outcome = deliver(&consumer, &mut stored, promotion.clone()).await.unwrap();

    let events = synced(&outcome);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].environment, "dev");
    assert_eq!(events[0].commit_sha, SHA_1);
    assert_eq!(events[0].release_id.as_deref(), Some("payments-api-1.4.0-7f3c2a1"));
    assert!(events[0].healthy);
    assert_eq!(Message::from(events[0].clone()).validate(), Ok(()));

    let port = consumer.environments();
    let writes = port.writes.lock().unwrap();
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].tenant, "contoso");
    assert_eq!(writes[0].repository, "environments");
    assert_eq!(writes[0].path, "dev/apps/payments-api/release.json");
    assert_eq!(writes[0].date, promotion.promoted_at);
    let reconciles = port.reconciles.lock().unwrap();
    assert_eq!(reconciles[0].commit_sha.as_deref(), Some(SHA_1));
    assert_eq!(reconciles[0].repository, "environments");

    let state = state_of(&stored);
    assert_eq!(state.phase, GitOpsPhase::Synced);
    assert_eq!(state.desired_commit(), Some(SHA_1));
    assert!(state.was_reported(SHA_1));
}

#[tokio::test]
async fn the_same_deployment_promoted_twice_gives_one_write_and_one_gitops_synced() {
    let consumer = consumer(FakeEnvironments::with_commits(&[SHA_1]));
    let mut stored = Value::Null;
    let promotion = promoted("payments-api-1.4.0-7f3c2a1", 0);
    let first = deliver(&consumer, &mut stored, promotion.clone()).await.unwrap();
    let second = deliver(&consumer, &mut stored, promotion).await.unwrap();
    assert_eq!(synced(&first).len(), 1);
    assert!(second.messages.is_empty(), "{second:?}");
    assert_eq!(consumer.environments().writes.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn an_environment_not_yet_at_the_desired_commit_is_reconciled_again_with_backoff() {
    let port = FakeEnvironments::with_commits(&[SHA_1]);
    *port.lagging.lock().unwrap() = true;
    let consumer = consumer(port);
    let mut stored = Value::Null;
    let outcome = deliver(&consumer, &mut stored, promoted("payments-api-1.4.0-7f3c2a1", 0))
        .await
        .unwrap();
    assert!(synced(&outcome).is_empty());
    let timers = scheduled(&outcome);
    assert_eq!(timers.len(), 1);
    assert_eq!(timers[0].1, BASE);
    assert_eq!(timers[0].0.desired_commit_sha.as_deref(), Some(SHA_1));
    assert_eq!(timers[0].0.reason, ReconcileReason::Schedule);
    let timer = timers[0].0.clone();

    // Still lagging: the next retry waits twice as long.
    let outcome = deliver(&consumer, &mut stored, timer.clone()).await.unwrap();
    let timers = scheduled(&outcome);
    assert_eq!(timers[0].1, BASE * 2);
    let timer = timers[0].0.clone();

    // The environment catches up.
    *consumer.environments().lagging.lock().unwrap() = false;
    let outcome = deliver(&consumer, &mut stored, timer).await.unwrap();
    assert_eq!(synced(&outcome).len(), 1);
    assert!(scheduled(&outcome).is_empty());
    assert_eq!(state_of(&stored).phase, GitOpsPhase::Synced);
}

#[tokio::test]
async fn a_promotion_waits_for_the_one_in_flight_then_goes_in_its_own_turn() {
    let port = FakeEnvironments::with_commits(&[SHA_1, SHA_2]);
    *port.lagging.lock().unwrap() = true;
    let consumer = consumer(port);
    let mut stored = Value::Null;
    let first = deliver(&consumer, &mut stored, promoted("payments-api-1.4.0-7f3c2a1", 0))
        .await
        .unwrap();
    let timer = scheduled(&first)[0].0.clone();
    // The next release queues: nothing written, nothing scheduled.
    let second = deliver(&consumer, &mut stored, promoted("payments-api-1.5.0-8a8a8a8", 10))
        .await
        .unwrap();
    assert!(second.messages.is_empty(), "{:?}", second.messages);
    assert_eq!(consumer.environments().writes.lock().unwrap().len(), 1);
    assert_eq!(state_of(&stored).desired_commit(), Some(SHA_1));
    assert_eq!(state_of(&stored).queued.len(), 1);
    assert_eq!(stored["stateVersion"], 2, "a queue is saved as version 2");

    // The first syncs; the saga sends itself the next one's turn.
    *consumer.environments().lagging.lock().unwrap() = false;
    let done = deliver(&consumer, &mut stored, timer).await.unwrap();
    let events = synced(&done);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].commit_sha, SHA_1);
    assert_eq!(events[0].release_id.as_deref(), Some("payments-api-1.4.0-7f3c2a1"));
    let turn = done
        .messages
        .iter()
        .find_map(|m| match (&m.message, m.delay) {
            (Message::ReconcileEnvironment(request), None) => Some(request.clone()),
            _ => None,
        })
        .expect("the next promotion's turn");
    assert_eq!(turn.reason, ReconcileReason::Promotion);
    let next = deliver(&consumer, &mut stored, turn).await.unwrap();
    let events = synced(&next);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].commit_sha, SHA_2);
    assert_eq!(events[0].release_id.as_deref(), Some("payments-api-1.5.0-8a8a8a8"));
    assert!(state_of(&stored).queued.is_empty());
    assert_eq!(stored["stateVersion"], 1);

    // A late promotion of the older release does not roll back.
    let late = deliver(&consumer, &mut stored, promoted("payments-api-1.4.0-7f3c2a1", 0))
        .await
        .unwrap();
    assert!(late.messages.is_empty());
    assert_eq!(consumer.environments().writes.lock().unwrap().len(), 2);
    assert_eq!(state_of(&stored).desired_commit(), Some(SHA_2));
}

#[tokio::test]
async fn infrastructure_changes_resync_a_known_environment_only() {
    let consumer = consumer(FakeEnvironments::with_commits(&[SHA_1]));
    let mut stored = Value::Null;
    let mut provisioned = samples::infrastructure_provisioned();
    provisioned.environment = "dev".to_owned();
    let outcome = deliver(&consumer, &mut stored, provisioned.clone()).await.unwrap();
    assert!(outcome.messages.is_empty());
    assert!(outcome.saga_state.is_some());
    assert!(consumer.environments().reconciles.lock().unwrap().is_empty());

    deliver(&consumer, &mut stored, promoted("payments-api-1.4.0-7f3c2a1", 0))
        .await
        .unwrap();
    let outcome = deliver(&consumer, &mut stored, provisioned).await.unwrap();
    assert!(outcome.messages.is_empty(), "no second GitOpsSynced");
    assert_eq!(consumer.environments().reconciles.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn failures_map_to_retry_decisions() {
    let port = FakeEnvironments {
        fail_writes: true,
        ..FakeEnvironments::default()
    };
    let consumer = consumer(port);
    let mut stored = Value::Null;
    let err = deliver(&consumer, &mut stored, promoted("payments-api-1.4.0-7f3c2a1", 0))
        .await
        .unwrap_err();
    assert!(err.is_retryable());
    assert_eq!(stored, Value::Null, "nothing saved on failure");

    let message = Message::from(samples::release_approved());
    let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "agent:test");
    let err = consumer.handle(Inbound::new(&envelope, &message)).await.unwrap_err();
    assert!(!err.is_retryable());

    let mut corrupt = serde_json::json!({"phase": 42});
    let err = deliver(&consumer, &mut corrupt, promoted("payments-api-1.4.0-7f3c2a1", 0))
        .await
        .unwrap_err();
    assert!(!err.is_retryable());
}

// ---- the local adapter ----

fn git(repo: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .env("GIT_DIR", repo)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

struct Local {
    _root: tempfile::TempDir,
    git_root: std::path::PathBuf,
    consumer: GitOpsSync<LocalEnvironments>,
}

impl Local {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let git_root = root.path().join("git");
        let port = LocalEnvironments::new(&git_root, root.path().join("environments"));
        Self {
            consumer: GitOpsSync::new(port, GitOpsSaga::new(), BASE, MAX),
            git_root,
            _root: root,
        }
    }

    fn repo(&self) -> std::path::PathBuf {
        self.git_root.join("contoso/environments/environments.git")
    }

    fn env_dir(&self) -> std::path::PathBuf {
        self.consumer.environments().environment_dir("contoso", "dev")
    }

    fn commit_count(&self) -> usize {
        git(&self.repo(), &["rev-list", "--count", "main"]).parse().unwrap()
    }
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[tokio::test]
async fn local_promotion_commits_the_manifest_and_materializes_the_environment() {
    let local = Local::new();
    let mut stored = Value::Null;
    let promotion = promoted("payments-api-1.4.0-7f3c2a1", 0);
    let outcome = deliver(&local.consumer, &mut stored, promotion.clone()).await.unwrap();
    let events = synced(&outcome);
    assert_eq!(events.len(), 1);
    let head = git(&local.repo(), &["rev-parse", "main"]);
    assert_eq!(events[0].commit_sha, head);
    assert_eq!(events[0].applied.len(), 1);
    assert_eq!(events[0].applied[0].kind, "app");
    assert_eq!(events[0].applied[0].name, "payments-api");
    assert_eq!(events[0].applied[0].action, SyncAction::Created);
    assert!(events[0].healthy);

    // The environment repository holds the manifest.
    let (_, expected) = desired_state_manifest(&promotion).unwrap();
    let committed = git(&local.repo(), &["show", "main:dev/apps/payments-api/release.json"]);
    assert_eq!(format!("{committed}\n").as_bytes(), expected.as_slice());
    assert_eq!(
        git(&local.repo(), &["log", "-1", "--format=%s|%an|%aI", "main"]),
        "Promote payments-api-1.4.0-7f3c2a1 to dev|bosun|2026-11-29T14:00:00Z"
    );

    // The environment directory runs it.
    let dir = local.env_dir();
    assert_eq!(
        std::fs::read_to_string(dir.join(SYNCED_COMMIT_FILE)).unwrap().trim(),
        head
    );
    let manifest = read_json(&dir.join("apps/payments-api/release.json"));
    assert_eq!(manifest["releaseId"], "payments-api-1.4.0-7f3c2a1");
}

#[tokio::test]
async fn local_same_deployment_promoted_twice_is_one_environment_commit_and_one_gitops_synced() {
    let local = Local::new();
    let mut stored = Value::Null;
    let promotion = promoted("payments-api-1.4.0-7f3c2a1", 0);
    let first = deliver(&local.consumer, &mut stored, promotion.clone()).await.unwrap();
    let second = deliver(&local.consumer, &mut stored, promotion.clone()).await.unwrap();
    assert_eq!(synced(&first).len(), 1);
    assert!(synced(&second).is_empty());
    assert_eq!(local.commit_count(), 1);

    // Even with the saga lost (a rebuilt data dir), the write is a no-op
    // on the same tree and the environment reports the same commit.
    let mut fresh = Value::Null;
    let third = deliver(&local.consumer, &mut fresh, promotion).await.unwrap();
    assert_eq!(local.commit_count(), 1);
    assert_eq!(synced(&third)[0].commit_sha, synced(&first)[0].commit_sha);
    assert_eq!(synced(&third)[0].applied[0].action, SyncAction::Unchanged);
}

#[tokio::test]
async fn local_newer_promotion_supersedes_and_late_older_one_is_ignored() {
    let local = Local::new();
    let mut stored = Value::Null;
    deliver(&local.consumer, &mut stored, promoted("payments-api-1.4.0-7f3c2a1", 0))
        .await
        .unwrap();
    let newer = deliver(&local.consumer, &mut stored, promoted("payments-api-1.5.0-8a8a8a8", 10))
        .await
        .unwrap();
    let event = synced(&newer)[0].clone();
    assert_eq!(event.release_id.as_deref(), Some("payments-api-1.5.0-8a8a8a8"));
    assert_eq!(event.applied[0].action, SyncAction::Configured);
    let head = git(&local.repo(), &["rev-parse", "main"]);
    assert_eq!(event.commit_sha, head);

    let late = deliver(&local.consumer, &mut stored, promoted("payments-api-1.4.0-7f3c2a1", 0))
        .await
        .unwrap();
    assert!(late.messages.is_empty());
    assert_eq!(git(&local.repo(), &["rev-parse", "main"]), head);
    assert_eq!(local.commit_count(), 2);
    let manifest = read_json(&local.env_dir().join("apps/payments-api/release.json"));
    assert_eq!(manifest["releaseId"], "payments-api-1.5.0-8a8a8a8");
}

#[tokio::test]
async fn two_tenants_reconcile_the_same_environment_name_each_their_own() {
    let local = Local::new();
    let (mut contoso_saga, mut fabrikam_saga) = (Value::Null, Value::Null);
    let contoso = deliver_as(
        &local.consumer,
        "contoso",
        &mut contoso_saga,
        promoted("payments-api-1.4.0-7f3c2a1", 0),
    )
    .await
    .unwrap();
    let contoso_dir = local.env_dir();
    let contoso_manifest = std::fs::read(contoso_dir.join("apps/payments-api/release.json")).unwrap();

    // Same environment, environment repository and module; another release.
    let fabrikam = deliver_as(
        &local.consumer,
        "fabrikam",
        &mut fabrikam_saga,
        promoted("payments-api-2.0.0-9b9b9b9", 0),
    )
    .await
    .unwrap();
    let (contoso, fabrikam) = (synced(&contoso)[0], synced(&fabrikam)[0]);
    assert_eq!(
        fabrikam.applied[0].action,
        SyncAction::Created,
        "fabrikam's dev starts empty"
    );
    assert_ne!(contoso.commit_sha, fabrikam.commit_sha);
    let theirs = local.git_root.join("fabrikam/environments/environments.git");
    assert_eq!(git(&theirs, &["rev-parse", "main"]), fabrikam.commit_sha);
    assert_eq!(git(&local.repo(), &["rev-parse", "main"]), contoso.commit_sha);
    assert_eq!(
        local.commit_count(),
        1,
        "contoso's repository has only its own promotion"
    );

    let their_dir = local.consumer.environments().environment_dir("fabrikam", "dev");
    assert_eq!(
        read_json(&their_dir.join("apps/payments-api/release.json"))["releaseId"],
        "payments-api-2.0.0-9b9b9b9"
    );
    assert_eq!(
        std::fs::read(contoso_dir.join("apps/payments-api/release.json")).unwrap(),
        contoso_manifest,
        "contoso's environment is untouched"
    );
    assert_eq!(
        std::fs::read_to_string(contoso_dir.join(SYNCED_COMMIT_FILE))
            .unwrap()
            .trim(),
        contoso.commit_sha
    );
}

#[tokio::test]
async fn local_reconcile_prunes_what_is_gone_and_reports_each_app() {
    let local = Local::new();
    let port = local.consumer.environments();
    let mut stored = Value::Null;
    let mut billing = promoted("billing-2.0.0-bbbbbbb", 1);
    billing.module_id = "billing".to_owned();
    deliver(&local.consumer, &mut stored, promoted("payments-api-1.4.0-7f3c2a1", 0))
        .await
        .unwrap();
    let both = deliver(&local.consumer, &mut stored, billing).await.unwrap();
    let actions: Vec<(String, SyncAction)> = synced(&both)[0]
        .applied
        .iter()
        .map(|r| (r.name.clone(), r.action))
        .collect();
    assert_eq!(
        actions,
        vec![
            ("billing".to_owned(), SyncAction::Created),
            ("payments-api".to_owned(), SyncAction::Unchanged)
        ]
    );

    // Remove billing from the repository and drop a stray file into the
    // environment: a reconcile of the new head prunes both.
    let writer = crate::delivery::git::commit::LocalCommitWriter::new(&local.git_root);
    let removed = crate::delivery::git::commit::CommitWriter::commit(
        &writer,
        &crate::delivery::git::commit::CommitSpec {
            tenant: "contoso".into(),
            repository: "environments".into(),
            branch: "main".into(),
            base_branch: None,
            message: "Retire billing".into(),
            author: bosun_contracts::messages::GitIdentity {
                name: "ops".into(),
                email: "ops@example.com".into(),
            },
            date: datetime!(2026-11-29 15:00 UTC),
            files: vec![],
            delete: vec!["dev/apps/billing".into()],
        },
    )
    .await
    .unwrap();
    std::fs::write(local.env_dir().join("stray.txt"), "x").unwrap();
    let report = port
        .reconcile(&ReconcileRequest {
            tenant: "contoso".into(),
            environment: "dev".into(),
            repository: "environments".into(),
            commit_sha: None,
        })
        .await
        .unwrap();
    assert_eq!(report.commit_sha.as_deref(), Some(removed.commit_sha.as_str()));
    let actions: Vec<(String, String, SyncAction)> = report
        .applied
        .iter()
        .map(|r| (r.kind.clone(), r.name.clone(), r.action))
        .collect();
    assert_eq!(
        actions,
        vec![
            ("app".to_owned(), "billing".to_owned(), SyncAction::Pruned),
            ("app".to_owned(), "payments-api".to_owned(), SyncAction::Unchanged),
            ("file".to_owned(), "stray.txt".to_owned(), SyncAction::Pruned),
        ]
    );
    assert!(!local.env_dir().join("apps/billing").exists());
    assert!(!local.env_dir().join("stray.txt").exists());
    assert!(local.env_dir().join("apps/payments-api/release.json").exists());

    // A commit the repository does not have is transient.
    let err = port
        .reconcile(&ReconcileRequest {
            tenant: "contoso".into(),
            environment: "dev".into(),
            repository: "environments".into(),
            commit_sha: Some("f".repeat(40)),
        })
        .await
        .unwrap_err();
    assert!(matches!(err, GitOpsError::CommitNotFound { .. }), "{err}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn a_local_file_failure_is_transient_and_keeps_its_cause() {
    let local = Local::new();
    let dir = local.env_dir();
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    std::fs::write(&dir, "a file where the environment folder goes").unwrap();
    let err = local
        .consumer
        .environments()
        .reconcile(&ReconcileRequest {
            tenant: "contoso".into(),
            environment: "dev".into(),
            repository: "environments".into(),
            commit_sha: None,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GitOpsError::Io { context, .. } if context.starts_with("reading ")),
        "{err}"
    );
    assert!(err.is_retryable(), "a disk failure is not the caller's fault: {err}");
    let source = std::error::Error::source(&err).expect("the I/O error is kept");
    assert!(source.downcast_ref::<std::io::Error>().is_some());
    assert!(matches!(HandlerError::from(err), HandlerError::Transient(_)));
}

#[tokio::test]
async fn local_reconcile_of_an_unknown_environment_changes_nothing() {
    let local = Local::new();
    let mut stored = Value::Null;
    let outcome = deliver(
        &local.consumer,
        &mut stored,
        ReconcileEnvironment {
            environment: "dev".to_owned(),
            desired_commit_sha: None,
            reason: ReconcileReason::Manual,
            requested_by: Some("alice@contoso.com".to_owned()),
        },
    )
    .await
    .unwrap();
    assert!(outcome.messages.is_empty());
    assert!(!local.env_dir().exists());
}

// ---- the Azure adapter ----

mod azure {
    use super::*;
    use crate::delivery::azure::devops::{AzureDevOpsAuth, AzureDevOpsConfig};
    use crate::delivery::azure::test_server::{MockAzure, Reply};
    use crate::gitops_sync::azure::{ArgoCdConfig, AzureEnvironments, AzureGitOpsConfig};

    const APP: &str = "/api/v1/applications/bosun-contoso.dev";
    const OLD_APP: &str = "/api/v1/applications/bosun-dev";

    fn adapter(server: &MockAzure) -> AzureEnvironments {
        let mut argo_cd = ArgoCdConfig::new(server.url(""), "argo-token");
        argo_cd.application_prefix = "bosun-".to_owned();
        assert!(!format!("{argo_cd:?}").contains("argo-token"));
        AzureEnvironments::new(&AzureGitOpsConfig {
            azure_devops: AzureDevOpsConfig::new(
                server.url("/contoso"),
                "Delivery",
                AzureDevOpsAuth::Pat("pat".into()),
            ),
            argo_cd,
        })
        .unwrap()
    }

    fn request(commit: Option<&str>) -> ReconcileRequest {
        ReconcileRequest {
            tenant: "contoso".into(),
            environment: "dev".into(),
            repository: "environments".into(),
            commit_sha: commit.map(str::to_owned),
        }
    }

    fn application(phase: &str, sync: &str, revision: &str, health: &str) -> String {
        serde_json::json!({
            "metadata": {"name": "bosun-contoso.dev", "namespace": "argocd"},
            "spec": {"source": {"repoURL": "https://dev.azure.com/contoso/Delivery/_git/environments", "path": "dev", "targetRevision": "main"}},
            "status": {
                "sync": {"status": sync, "revision": revision},
                "health": {"status": health},
                "operationState": {
                    "phase": phase,
                    "message": "successfully synced (all tasks run)",
                    "syncResult": {
                        "revision": revision,
                        "resources": [
                            {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "payments", "name": "payments-api",
                             "status": "Synced", "message": "deployment.apps/payments-api configured", "hookPhase": "Running", "syncPhase": "Sync"},
                            {"group": "", "version": "v1", "kind": "Service", "namespace": "payments", "name": "payments-api",
                             "status": "Synced", "message": "service/payments-api unchanged", "syncPhase": "Sync"},
                            {"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "payments", "name": "legacy",
                             "status": "Pruned", "message": "pruned", "syncPhase": "Sync"}
                        ]
                    }
                }
            }
        })
        .to_string()
    }

    #[tokio::test]
    async fn argo_cd_sync_to_the_commit_and_report_what_runs() {
        let server = MockAzure::start(vec![
            Reply::json("GET", APP, 200, &application("Succeeded", "Synced", SHA_1, "Healthy")),
            Reply::json(
                "POST",
                &format!("{APP}/sync"),
                200,
                r#"{"metadata":{"name":"bosun-dev"}}"#,
            ),
            Reply::json("GET", APP, 200, &application("Succeeded", "Synced", SHA_2, "Healthy")),
        ])
        .await;
        let report = adapter(&server).reconcile(&request(Some(SHA_2))).await;
        let requests = server.finish().await;
        let report = report.unwrap();
        assert_eq!(report.commit_sha.as_deref(), Some(SHA_2));
        assert!(report.healthy);
        let actions: Vec<(&str, SyncAction)> = report.applied.iter().map(|r| (r.kind.as_str(), r.action)).collect();
        assert_eq!(
            actions,
            vec![
                ("Deployment", SyncAction::Configured),
                ("Service", SyncAction::Unchanged),
                ("ConfigMap", SyncAction::Pruned)
            ]
        );
        assert_eq!(report.applied[0].namespace.as_deref(), Some("payments"));
        assert_eq!(
            requests[1].json(),
            serde_json::json!({"prune": true, "revision": SHA_2})
        );
        for request in &requests {
            assert_eq!(request.header("authorization"), Some("Bearer argo-token"));
        }
    }

    #[tokio::test]
    async fn argo_cd_sync_in_progress_reports_nothing_yet() {
        // A sync runs: it is observed, no second one is asked for, and what
        // the previous sync left (Synced at SHA_1) is not reported.
        let server = MockAzure::start(vec![Reply::json(
            "GET",
            APP,
            200,
            &application("Running", "Synced", SHA_1, "Progressing"),
        )])
        .await;
        let report = adapter(&server).reconcile(&request(Some(SHA_2))).await;
        let requests = server.finish().await;
        let report = report.unwrap();
        assert_eq!(report.commit_sha, None);
        assert!(!report.healthy);
        assert_eq!(requests.len(), 1, "no sync asked while one runs");

        // The sync was asked for between the read and the request (by
        // another reconcile): Argo CD's "already in progress" is observed.
        let server = MockAzure::start(vec![
            Reply::json("GET", APP, 200, &application("Succeeded", "Synced", SHA_1, "Healthy")),
            Reply::json(
                "POST",
                &format!("{APP}/sync"),
                400,
                r#"{"error":"another operation is already in progress","code":9,"message":"another operation is already in progress"}"#,
            ),
            Reply::json("GET", APP, 200, &application("Running", "OutOfSync", SHA_1, "Progressing")),
        ])
        .await;
        let report = adapter(&server).reconcile(&request(Some(SHA_2))).await;
        server.finish().await;
        assert_eq!(report.unwrap().commit_sha, None);
    }

    #[tokio::test]
    async fn argo_cd_already_running_the_commit_is_not_synced_again() {
        let server = MockAzure::start(vec![Reply::json(
            "GET",
            APP,
            200,
            &application("Succeeded", "Synced", SHA_2, "Healthy"),
        )])
        .await;
        let report = adapter(&server).reconcile(&request(Some(SHA_2))).await;
        let requests = server.finish().await;
        let report = report.unwrap();
        assert_eq!(report.commit_sha.as_deref(), Some(SHA_2));
        assert!(report.healthy);
        assert_eq!(report.applied.len(), 3, "what the sync applied");
        assert_eq!(requests.len(), 1, "no second sync");
    }

    #[tokio::test]
    async fn argo_cd_errors_map_to_retry_decisions() {
        let app = application("Succeeded", "Synced", SHA_1, "Healthy");
        let server = MockAzure::start(vec![
            Reply::json("GET", APP, 200, &app),
            Reply::json(
                "POST",
                &format!("{APP}/sync"),
                403,
                r#"{"error":"permission denied","code":7,"message":"permission denied"}"#,
            ),
        ])
        .await;
        let err = adapter(&server).reconcile(&request(Some(SHA_2))).await.unwrap_err();
        server.finish().await;
        assert!(!err.is_retryable(), "{err}");

        let server = MockAzure::start(vec![
            Reply::json("GET", APP, 200, &app),
            Reply::json("POST", &format!("{APP}/sync"), 503, "{}"),
        ])
        .await;
        let err = adapter(&server).reconcile(&request(None)).await.unwrap_err();
        let requests = server.finish().await;
        assert!(err.is_retryable(), "{err}");
        assert_eq!(requests[1].json(), serde_json::json!({"prune": true}));

        let server = MockAzure::start(vec![Reply::json("GET", APP, 503, "{}")]).await;
        let err = adapter(&server).reconcile(&request(None)).await.unwrap_err();
        server.finish().await;
        assert!(
            err.is_retryable(),
            "an unreachable Argo CD is no missing application: {err}"
        );
    }

    #[tokio::test]
    async fn azure_repos_write_of_an_unchanged_manifest_is_a_no_op() {
        const REPO_ID: &str = "5febef5a-833d-4e14-b9c0-14cb638f91e6";
        let repo = |rest: &str| format!("/contoso/Delivery/_apis/git/repositories/{REPO_ID}{rest}");
        let promotion = promoted("payments-api-1.4.0-7f3c2a1", 0);
        let (path, manifest) = desired_state_manifest(&promotion).unwrap();
        let server = MockAzure::start(vec![
            Reply::json(
                "GET",
                "/contoso/Delivery/_apis/git/repositories/environments",
                200,
                &format!(r#"{{"id":"{REPO_ID}","name":"environments","defaultBranch":"refs/heads/main"}}"#),
            ),
            Reply::json(
                "GET",
                &repo("/refs"),
                200,
                &format!(r#"{{"value":[{{"name":"refs/heads/main","objectId":"{SHA_1}"}}],"count":1}}"#),
            ),
            Reply::bytes("GET", &repo("/items"), 200, &manifest),
            Reply::json(
                "GET",
                &repo(&format!("/commits/{SHA_1}")),
                200,
                &format!(r#"{{"commitId":"{SHA_1}","treeId":"{SHA_2}","parents":[]}}"#),
            ),
        ])
        .await;
        let written = adapter(&server)
            .write_desired_state(&DesiredStateWrite {
                tenant: "contoso".into(),
                environment: "dev".into(),
                repository: "environments".into(),
                module_id: promotion.module_id.clone(),
                release_id: promotion.release_id.clone(),
                path: path.clone(),
                manifest,
                message: "Promote".into(),
                date: promotion.promoted_at,
            })
            .await;
        let requests = server.finish().await;
        let written = written.unwrap();
        assert!(written.no_op);
        assert_eq!(written.commit_sha, SHA_1);
        assert_eq!(requests[2].query("path"), Some(format!("/{path}").as_str()));
    }

    fn labelled(tenant: Option<&str>) -> String {
        let mut app: serde_json::Value =
            serde_json::from_str(&application("Succeeded", "Synced", SHA_2, "Healthy")).unwrap();
        if let Some(tenant) = tenant {
            app["metadata"]["labels"] = serde_json::json!({ "bosun.dev/tenant": tenant });
        }
        app.to_string()
    }

    #[tokio::test]
    async fn two_tenants_reconcile_the_same_environment_name_through_their_own_applications() {
        assert_eq!(
            crate::gitops_sync::azure::application_name("bosun-", "fabrikam", "dev"),
            "bosun-fabrikam.dev"
        );
        let theirs = "/api/v1/applications/bosun-fabrikam.dev";
        let server = MockAzure::start(vec![Reply::json("GET", theirs, 200, &labelled(Some("fabrikam")))]).await;
        let mut fabrikam = request(Some(SHA_2));
        fabrikam.tenant = "fabrikam".into();
        let report = adapter(&server).reconcile(&fabrikam).await;
        let requests = server.finish().await;
        assert_eq!(report.unwrap().commit_sha.as_deref(), Some(SHA_2));
        assert!(
            requests.iter().all(|r| r.path.starts_with(theirs)),
            "contoso's application is never touched"
        );
    }

    #[tokio::test]
    async fn an_application_labelled_for_another_tenant_is_refused_naming_both() {
        let server = MockAzure::start(vec![Reply::json("GET", APP, 200, &labelled(Some("fabrikam")))]).await;
        let err = adapter(&server).reconcile(&request(Some(SHA_2))).await.unwrap_err();
        let requests = server.finish().await;
        assert!(!err.is_retryable());
        let text = err.to_string();
        assert!(text.contains("`contoso`") && text.contains("`fabrikam`"), "{text}");
        assert_eq!(requests.len(), 1, "no sync is asked for");
    }

    #[tokio::test]
    async fn an_application_named_before_tenants_is_used_only_when_labelled_for_the_tenant() {
        // Labelled for this tenant: the in-flight promotion completes.
        let server = MockAzure::start(vec![
            Reply::json(
                "GET",
                APP,
                404,
                r#"{"message":"applications.argoproj.io \"bosun-contoso.dev\" not found"}"#,
            ),
            Reply::json("GET", OLD_APP, 200, &labelled(Some("contoso"))),
        ])
        .await;
        let report = adapter(&server).reconcile(&request(Some(SHA_2))).await;
        server.finish().await;
        assert_eq!(report.unwrap().commit_sha.as_deref(), Some(SHA_2));

        // Unlabelled: whose it is cannot be known; refused with what to do.
        let server = MockAzure::start(vec![
            Reply::json("GET", APP, 403, r#"{"message":"permission denied"}"#),
            Reply::json("GET", OLD_APP, 200, &labelled(None)),
        ])
        .await;
        let err = adapter(&server).reconcile(&request(Some(SHA_2))).await.unwrap_err();
        let requests = server.finish().await;
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("bosun.dev/tenant=contoso"), "{err}");
        assert_eq!(requests.len(), 2, "nothing is synced");

        // Labelled for another tenant: refused.
        let server = MockAzure::start(vec![
            Reply::json("GET", APP, 404, "{}"),
            Reply::json("GET", OLD_APP, 200, &labelled(Some("fabrikam"))),
        ])
        .await;
        let err = adapter(&server).reconcile(&request(Some(SHA_2))).await.unwrap_err();
        server.finish().await;
        assert!(err.to_string().contains("`fabrikam`"), "{err}");

        // Neither exists: the tenant's application is the one named.
        let server = MockAzure::start(vec![
            Reply::json("GET", APP, 404, r#"{"message":"not found"}"#),
            Reply::json("GET", OLD_APP, 404, r#"{"message":"not found"}"#),
        ])
        .await;
        let err = adapter(&server).reconcile(&request(Some(SHA_2))).await.unwrap_err();
        server.finish().await;
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("bosun-contoso.dev"), "{err}");
    }
}
