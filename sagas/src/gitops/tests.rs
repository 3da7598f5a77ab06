//! The GitOps saga's tests: each input, and property tests over delivery
//! order, lag and drift.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bosun_contracts::messages::{
    AppliedResource, DeploymentPromoted, GitOpsSynced, InfrastructureProvisioned, ReconcileEnvironment,
    ReconcileReason, SyncAction,
};
use bosun_contracts::samples;
use proptest::prelude::*;
use time::macros::datetime;

use super::*;

const ENV: &str = "dev";

fn promoted(module: &str, release: &str, minute: i64) -> DeploymentPromoted {
    let mut promoted = samples::deployment_promoted();
    promoted.environment = ENV.to_owned();
    promoted.module_id = module.to_owned();
    promoted.release_id = release.to_owned();
    promoted.promoted_at = datetime!(2026-11-29 10:00 UTC) + time::Duration::minutes(minute);
    promoted
}

fn reconcile(reason: ReconcileReason, commit: Option<&str>) -> Message {
    Message::ReconcileEnvironment(ReconcileEnvironment {
        environment: ENV.to_owned(),
        desired_commit_sha: commit.map(str::to_owned),
        reason,
        requested_by: None,
    })
}

fn infrastructure() -> Message {
    let mut provisioned: InfrastructureProvisioned = samples::infrastructure_provisioned();
    provisioned.environment = ENV.to_owned();
    Message::InfrastructureProvisioned(provisioned)
}

/// A simulated environment repository and environment, standing in for
/// the consumer's port.
#[derive(Debug, Default)]
struct World {
    /// Content of every commit written, by commit.
    commits: BTreeMap<String, BTreeMap<String, String>>,
    /// Commits in write order.
    order: Vec<String>,
    head: Option<String>,
    running: Option<String>,
    lagging: bool,
    /// Every promotion written, in order (module, release).
    writes: Vec<(String, String)>,
}

impl World {
    fn content(&self) -> BTreeMap<String, String> {
        self.head
            .as_ref()
            .and_then(|head| self.commits.get(head))
            .cloned()
            .unwrap_or_default()
    }

    fn write(&mut self, promotion: &DeploymentPromoted) -> String {
        let mut content = self.content();
        let old = content.insert(promotion.module_id.clone(), promotion.release_id.clone());
        if let Some(head) = &self.head
            && old.as_deref() == Some(promotion.release_id.as_str())
        {
            return head.clone();
        }
        let commit = format!("{:040x}", self.order.len() + 1);
        self.writes
            .push((promotion.module_id.clone(), promotion.release_id.clone()));
        self.commits.insert(commit.clone(), content);
        self.order.push(commit.clone());
        self.head = Some(commit.clone());
        commit
    }

    fn reconcile(&mut self, commit: Option<&str>) -> EnvironmentReport {
        if !self.lagging {
            self.running = commit.map(str::to_owned).or_else(|| self.head.clone());
        }
        self.report()
    }

    fn report(&self) -> EnvironmentReport {
        EnvironmentReport {
            commit_sha: self.running.clone(),
            applied: vec![AppliedResource {
                kind: "app".to_owned(),
                name: "payments-api".to_owned(),
                namespace: None,
                action: SyncAction::Configured,
            }],
            healthy: true,
            observed_at: datetime!(2026-11-29 12:00 UTC),
        }
    }
}

/// The consumer's loop over a simulated port.
struct Driver {
    saga: GitOpsSaga,
    state: GitOpsState,
    world: World,
    synced: Vec<GitOpsSynced>,
    timers: VecDeque<ReconcileEnvironment>,
    /// Requests the saga sent itself (the next queued promotion's turn).
    requests: VecDeque<ReconcileEnvironment>,
    /// Whether the saga queues promotions (one release at a time).
    queueing: bool,
    /// Decisions recorded for the audit log (rollbacks and refusals).
    decisions: Vec<bosun_contracts::messages::ReleaseDecisionRecorded>,
}

impl Driver {
    fn new() -> Self {
        Self {
            saga: GitOpsSaga::new(),
            state: GitOpsState::default(),
            world: World::default(),
            synced: Vec::new(),
            timers: VecDeque::new(),
            requests: VecDeque::new(),
            queueing: true,
            decisions: Vec::new(),
        }
    }

    fn collect(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Send(Message::GitOpsSynced(event)) => self.synced.push(event),
                Action::Schedule {
                    message: Message::ReconcileEnvironment(timer),
                    ..
                } => self.timers.push_back(timer),
                Action::Send(Message::ReconcileEnvironment(request)) => self.requests.push_back(request),
                Action::Send(Message::ReleaseDecisionRecorded(recorded)) => self.decisions.push(recorded),
                other => panic!("unexpected action {other:?}"),
            }
        }
    }

    fn input(&mut self, input: GitOpsInput<'_>) {
        let mut transition = self.saga.step(&self.state, &input).unwrap();
        loop {
            self.collect(std::mem::take(&mut transition.actions));
            let Some(work) = transition.work.take() else {
                break;
            };
            let next = match work {
                Work::WriteDesiredState(promotion) => {
                    // One release at a time: nothing else is in flight.
                    assert!(
                        !self.queueing || transition.state.in_flight().is_none(),
                        "{} written while another release is in flight",
                        promotion.release_id
                    );
                    let commit = self.world.write(&promotion);
                    GitOpsInput::DesiredStateWritten(DesiredStateWritten {
                        module_id: promotion.module_id.clone(),
                        release_id: promotion.release_id.clone(),
                        promoted_at: promotion.promoted_at,
                        repository: promotion.environment_repository.clone(),
                        commit_sha: commit,
                    })
                }
                Work::Reconcile { commit_sha, .. } => {
                    GitOpsInput::EnvironmentReported(self.world.reconcile(commit_sha.as_deref()))
                }
            };
            transition = self.saga.step(&transition.state, &next).unwrap();
        }
        self.state = transition.state;
    }

    /// Handles `message`, then what the saga sent itself meanwhile.
    fn message(&mut self, message: impl Into<Message>) {
        let message = message.into();
        self.input(GitOpsInput::Message(&message));
        while let Some(request) = self.requests.pop_front() {
            let request = Message::ReconcileEnvironment(request);
            self.input(GitOpsInput::Message(&request));
        }
    }

    fn fire_timer(&mut self) -> bool {
        match self.timers.pop_front() {
            Some(timer) => {
                self.message(timer);
                true
            }
            None => false,
        }
    }

    fn synced_commits(&self) -> Vec<&str> {
        self.synced.iter().map(|event| event.commit_sha.as_str()).collect()
    }
}

#[test]
fn a_promotion_is_written_reconciled_and_reported_once() {
    let mut driver = Driver::new();
    driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
    let head = driver.world.head.clone().unwrap();
    assert_eq!(driver.state.desired_commit(), Some(head.as_str()));
    assert!(driver.state.is_synced());
    assert_eq!(driver.synced_commits(), vec![head.as_str()]);
    assert_eq!(
        driver.synced[0].release_id.as_deref(),
        Some("payments-api-1.0.0-aaaaaaa")
    );
    assert_eq!(driver.synced[0].environment, ENV);

    // The same promotion again: no write, no second GitOpsSynced.
    driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
    assert_eq!(driver.world.writes.len(), 1);
    assert_eq!(driver.synced.len(), 1);
    assert_eq!(
        driver.state.history.last().map(|entry| entry.event),
        Some(HistoryEvent::PromotionRepeated)
    );
}

#[test]
fn a_promotion_waits_for_the_one_in_flight_and_each_release_is_reported() {
    let mut driver = Driver::new();
    driver.world.lagging = true;
    driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
    let first = driver.world.head.clone().unwrap();
    assert_eq!(driver.state.phase, GitOpsPhase::Reconciling);
    assert_eq!(driver.state.in_flight(), Some("payments-api-1.0.0-aaaaaaa"));
    assert_eq!(driver.timers.len(), 1, "one retry scheduled");

    // The next release waits: nothing written, the queue says so.
    driver.message(promoted("payments-api", "payments-api-1.1.0-bbbbbbb", 5));
    assert_eq!(driver.world.head.as_deref(), Some(first.as_str()));
    assert_eq!(driver.state.desired_commit(), Some(first.as_str()));
    let queued: Vec<&str> = driver.state.queued.iter().map(|q| q.release_id.as_str()).collect();
    assert_eq!(queued, ["payments-api-1.1.0-bbbbbbb"]);
    let note = driver.state.history.last().unwrap().detail.clone().unwrap();
    assert_eq!(note, "queued behind payments-api-1.0.0-aaaaaaa (position 1)");
    // The same release again is not queued twice.
    driver.message(promoted("payments-api", "payments-api-1.1.0-bbbbbbb", 5));
    assert_eq!(driver.state.queued.len(), 1);
    // Saved with its queue, the state is version 2 (the previous release
    // leaves it alone); without, version 1.
    let saved = crate::versioned::save_state(&driver.state).unwrap();
    assert_eq!(saved["stateVersion"], 2);
    let loaded: GitOpsState = crate::versioned::load_state(&saved).unwrap();
    assert_eq!(loaded, driver.state);

    // The first one syncs, then the second goes in a turn of its own.
    driver.world.lagging = false;
    assert!(driver.fire_timer());
    let second = driver.world.head.clone().unwrap();
    assert_ne!(first, second);
    assert!(driver.state.is_synced());
    assert!(driver.state.queued.is_empty());
    assert_eq!(driver.synced_commits(), vec![first.as_str(), second.as_str()]);
    let releases: Vec<&str> = driver.synced.iter().map(|s| s.release_id.as_deref().unwrap()).collect();
    assert_eq!(releases, ["payments-api-1.0.0-aaaaaaa", "payments-api-1.1.0-bbbbbbb"]);
    assert_eq!(crate::versioned::save_state(&driver.state).unwrap()["stateVersion"], 1);
}

#[test]
fn without_queueing_a_newer_promotion_supersedes_the_one_in_flight() {
    // While a previous release may run beside this one.
    let mut driver = Driver::new();
    driver.saga = GitOpsSaga::new().queueing_promotions(false);
    driver.queueing = false;
    driver.world.lagging = true;
    driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
    let first = driver.world.head.clone().unwrap();
    driver.message(promoted("payments-api", "payments-api-1.1.0-bbbbbbb", 5));
    let second = driver.world.head.clone().unwrap();
    assert_ne!(first, second);
    assert!(driver.state.queued.is_empty());
    assert_eq!(driver.state.desired_commit(), Some(second.as_str()));
    driver.world.lagging = false;
    while driver.fire_timer() {}
    assert_eq!(driver.synced_commits(), vec![second.as_str()]);
    assert_eq!(crate::versioned::save_state(&driver.state).unwrap()["stateVersion"], 1);
}

#[test]
fn a_late_older_promotion_does_not_roll_back() {
    let mut driver = Driver::new();
    driver.message(promoted("payments-api", "payments-api-1.1.0-bbbbbbb", 5));
    let head = driver.world.head.clone();
    driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
    assert_eq!(driver.world.head, head);
    assert_eq!(driver.world.writes.len(), 1);
    assert_eq!(driver.synced.len(), 1);
    assert_eq!(
        driver.state.history.last().map(|entry| entry.event),
        Some(HistoryEvent::PromotionIgnored)
    );
}

#[test]
fn releases_of_two_modules_take_turns_and_each_is_reported() {
    let mut driver = Driver::new();
    driver.world.lagging = true;
    driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
    let first = driver.world.head.clone().unwrap();
    driver.message(promoted("billing", "billing-2.0.0-ccccccc", 1));
    let second = driver.world.head.clone().unwrap();
    // billing waited for payments-api: nothing was written for it yet.
    assert_eq!(second, first);
    driver.world.lagging = false;
    while driver.fire_timer() {}
    assert!(driver.state.is_synced());
    let second = driver.world.head.clone().unwrap();
    assert_ne!(second, first);
    assert_eq!(driver.synced_commits(), vec![first.as_str(), second.as_str()]);
    assert_eq!(driver.synced[1].release_id.as_deref(), Some("billing-2.0.0-ccccccc"));
}

#[test]
fn infrastructure_changes_and_manual_requests_reconcile_again_without_reporting_twice() {
    let mut driver = Driver::new();
    driver.message(infrastructure());
    assert_eq!(driver.state.phase, GitOpsPhase::Idle);

    driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
    let head = driver.world.head.clone().unwrap();
    driver.world.running = None; // drifted away
    driver.message(infrastructure());
    assert_eq!(driver.world.running.as_deref(), Some(head.as_str()));
    driver.message(reconcile(ReconcileReason::Manual, None));
    driver.message(reconcile(ReconcileReason::Drift, Some(&head)));
    assert_eq!(driver.synced.len(), 1);

    // A manual request for another commit is not a rollback.
    let other = "f".repeat(40);
    let transition = driver
        .saga
        .step(
            &driver.state,
            &GitOpsInput::Message(&reconcile(ReconcileReason::Manual, Some(&other))),
        )
        .unwrap();
    assert_eq!(transition.work, None);

    // A preview changes nothing.
    let mut preview = samples::infrastructure_provisioned();
    preview.environment = ENV.to_owned();
    preview.preview_only = true;
    let transition = driver
        .saga
        .step(&driver.state, &GitOpsInput::Message(&preview.into()))
        .unwrap();
    assert_eq!(transition.work, None);
}

#[test]
fn a_reconcile_without_a_promotion_adopts_the_branch_head() {
    let saga = GitOpsSaga::new();
    let transition = saga
        .step(
            &GitOpsState::default(),
            &GitOpsInput::Message(&reconcile(ReconcileReason::Manual, None)),
        )
        .unwrap();
    assert_eq!(
        transition.work,
        Some(Work::Reconcile {
            repository: None,
            commit_sha: None,
            reason: ReconcileReason::Manual
        })
    );
    let commit = "a".repeat(40);
    let report = EnvironmentReport {
        commit_sha: Some(commit.clone()),
        applied: vec![],
        healthy: true,
        observed_at: datetime!(2026-11-29 12:00 UTC),
    };
    let synced = saga
        .step(&transition.state, &GitOpsInput::EnvironmentReported(report))
        .unwrap();
    assert!(synced.state.is_synced());
    assert!(matches!(
        &synced.actions[..],
        [Action::Send(Message::GitOpsSynced(event))] if event.commit_sha == commit && event.release_id.is_none()
    ));
}

#[test]
fn retries_back_off_exponentially_one_timer_at_a_time() {
    let saga = GitOpsSaga::new().with_reconcile_backoff(Duration::from_secs(2), Duration::from_secs(10));
    assert_eq!(saga.reconcile_delay(1), Duration::from_secs(2));
    assert_eq!(saga.reconcile_delay(2), Duration::from_secs(4));
    assert_eq!(saga.reconcile_delay(3), Duration::from_secs(8));
    assert_eq!(saga.reconcile_delay(4), Duration::from_secs(10));
    assert_eq!(saga.reconcile_delay(400), Duration::from_secs(10));

    let mut driver = Driver::new();
    driver.saga = saga;
    driver.world.lagging = true;
    driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
    // Another reconcile while the timer is pending schedules nothing.
    driver.message(reconcile(ReconcileReason::Manual, None));
    assert_eq!(driver.timers.len(), 1);
    let mut delays = vec![driver.state.pending_reconcile.as_ref().unwrap().delay_ms];
    for _ in 0..3 {
        assert!(driver.fire_timer());
        delays.push(driver.state.pending_reconcile.as_ref().unwrap().delay_ms);
    }
    assert_eq!(delays, vec![2000, 4000, 8000, 10000]);
    assert_eq!(driver.timers.len(), 1);
}

#[test]
fn messages_of_another_environment_or_type_are_rejected() {
    let saga = GitOpsSaga::new();
    let state = saga
        .apply(&GitOpsState::default(), &promoted("a", "a-1.0.0-aaaaaaa", 0).into())
        .unwrap()
        .state;
    let mut other = promoted("a", "a-1.0.0-aaaaaaa", 0);
    other.environment = "prod".to_owned();
    assert!(saga.apply(&state, &other.into()).is_err());
    assert!(saga.apply(&state, &samples::release_approved().into()).is_err());
    assert_eq!(saga.key_of(&samples::release_approved().into()), None);
    assert_eq!(
        saga.key_of(&samples::reconcile_environment().into()).as_deref(),
        Some("prod")
    );
    assert!(
        saga.step(
            &GitOpsState::default(),
            &GitOpsInput::EnvironmentReported(World::default().report())
        )
        .is_err()
    );
}

#[test]
fn state_round_trips_through_json_and_diagram_is_mermaid() {
    let mut driver = Driver::new();
    driver.world.lagging = true;
    driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
    let json = serde_json::to_value(&driver.state).unwrap();
    assert_eq!(json["phase"], "reconciling");
    assert!(json["pendingReconcile"]["commitSha"].is_string());
    let back: GitOpsState = serde_json::from_value(json).unwrap();
    assert_eq!(back, driver.state);
    let empty: GitOpsState = serde_json::from_value(serde_json::json!({})).unwrap();
    assert_eq!(empty, GitOpsState::default());

    let diagram = GitOpsSaga::new().diagram();
    assert!(diagram.starts_with("stateDiagram-v2\n"));
    assert!(diagram.contains("Reconciling --> Synced"));
}

#[test]
fn history_is_bounded() {
    let mut driver = Driver::new();
    driver.message(promoted("payments-api", "payments-api-1.0.0-aaaaaaa", 0));
    for _ in 0..(HISTORY_LIMIT * 2) {
        driver.message(reconcile(ReconcileReason::Manual, None));
    }
    assert_eq!(driver.state.history.len(), HISTORY_LIMIT);
}

/// Releases of two modules, in promotion order within each module.
const RELEASES: &[(&str, &str, i64)] = &[
    ("payments-api", "payments-api-1.0.0-aaaaaaa", 0),
    ("payments-api", "payments-api-1.1.0-bbbbbbb", 10),
    ("payments-api", "payments-api-1.2.0-ccccccc", 20),
    ("billing", "billing-1.0.0-ddddddd", 5),
    ("billing", "billing-1.1.0-eeeeeee", 15),
];

#[derive(Debug, Clone)]
enum Op {
    Promote(usize),
    Manual,
    Infrastructure,
    FireTimer,
    Lag(bool),
    /// The environment is seen running an earlier written commit.
    ObserveEarlier(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..RELEASES.len()).prop_map(Op::Promote),
        1 => Just(Op::Manual),
        1 => Just(Op::Infrastructure),
        3 => Just(Op::FireTimer),
        2 => any::<bool>().prop_map(Op::Lag),
        1 => any::<usize>().prop_map(Op::ObserveEarlier),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_order_and_duplication_converges_to_the_newest_desired_commit(ops in prop::collection::vec(op(), 1..40)) {
        let mut driver = Driver::new();
        let mut promoted_any = BTreeSet::new();
        for op in ops {
            match op {
                Op::Promote(index) => {
                    let (module, release, minute) = RELEASES[index];
                    promoted_any.insert(index);
                    driver.message(promoted(module, release, minute));
                }
                Op::Manual => driver.message(reconcile(ReconcileReason::Manual, None)),
                Op::Infrastructure => driver.message(infrastructure()),
                Op::FireTimer => {
                    driver.fire_timer();
                }
                Op::Lag(lagging) => driver.world.lagging = lagging,
                Op::ObserveEarlier(pick) => {
                    if !driver.world.order.is_empty() {
                        let commit = driver.world.order[pick % driver.world.order.len()].clone();
                        driver.world.running = Some(commit);
                        driver.input(GitOpsInput::EnvironmentReported(driver.world.report()));
                    }
                }
            }
            // The desired commit is always the repository's head.
            prop_assert_eq!(driver.state.desired_commit(), driver.world.head.as_deref());
            // At most one retry in flight for the desired commit.
            let desired = driver.state.desired_commit().map(str::to_owned);
            let timers_for_desired = driver
                .timers
                .iter()
                .filter(|timer| timer.desired_commit_sha == desired)
                .count();
            prop_assert!(timers_for_desired <= 1, "{timers_for_desired} timers for the desired commit");
        }

        // Let the environment catch up: deliver every retry.
        driver.world.lagging = false;
        let mut deliveries = 0;
        while driver.fire_timer() {
            deliveries += 1;
            prop_assert!(deliveries < 100);
        }

        // GitOpsSynced at most once per (environment, commitSha), and
        // only for releases the commit really holds.
        let commits = driver.synced_commits();
        let unique: BTreeSet<&str> = commits.iter().copied().collect();
        prop_assert_eq!(unique.len(), commits.len(), "duplicate GitOpsSynced: {:?}", commits);
        for event in &driver.synced {
            let content = &driver.world.commits[&event.commit_sha];
            let release = event.release_id.as_deref().unwrap();
            prop_assert!(content.values().any(|r| r == release));
        }

        // Writes per module only move forward.
        let mut last: BTreeMap<&str, usize> = BTreeMap::new();
        for (module, release) in &driver.world.writes {
            let index = RELEASES.iter().position(|(_, r, _)| r == release).unwrap();
            if let Some(previous) = last.insert(module.as_str(), index) {
                prop_assert!(previous < index, "{} rolled back", module);
            }
        }

        // Every queued promotion had its turn.
        prop_assert!(driver.state.queued.is_empty(), "{:?}", driver.state.queued);
        if promoted_any.is_empty() {
            prop_assert_eq!(driver.state.phase, GitOpsPhase::Idle);
            prop_assert!(driver.synced.is_empty());
            return Ok(());
        }
        // Converged: the newest promotion of each module is desired,
        // the environment runs it, and it was reported exactly once.
        let mut newest: BTreeMap<String, String> = BTreeMap::new();
        for index in &promoted_any {
            let (module, release, _) = RELEASES[*index];
            newest.insert(module.to_owned(), release.to_owned());
        }
        prop_assert_eq!(driver.world.content(), newest.clone());
        let head = driver.world.head.clone().unwrap();
        prop_assert!(driver.state.is_synced());
        prop_assert_eq!(driver.world.running.as_deref(), Some(head.as_str()));
        prop_assert_eq!(commits.iter().filter(|c| **c == head).count(), 1);
        prop_assert!(driver.state.pending_reconcile.is_none());
        // Every module's current release was reported.
        for release in newest.values() {
            prop_assert!(
                driver.synced.iter().any(|event| event.release_id.as_deref() == Some(release.as_str())),
                "{} never reported", release
            );
        }
    }
}

// --- verified releases and rollbacks ------------------------------------

fn verified(module: &str, release: &str, minute: i64) -> bosun_contracts::messages::ReleaseVerified {
    let promotion = promoted(module, release, minute);
    bosun_contracts::messages::ReleaseVerified {
        release_id: release.to_owned(),
        environment: ENV.to_owned(),
        verified_at: promotion.promoted_at + time::Duration::minutes(1),
        promotion,
        summary: "healthy sync".to_owned(),
    }
}

fn rollback(
    module: &str,
    failed: Option<&str>,
    to: Option<&str>,
    minute: i64,
) -> bosun_contracts::messages::RollbackEnvironment {
    bosun_contracts::messages::RollbackEnvironment {
        environment: ENV.to_owned(),
        module_id: module.to_owned(),
        to_release_id: to.map(str::to_owned),
        failed_release_id: failed.map(str::to_owned),
        reason: "health check answered 500".to_owned(),
        override_reason: None,
        on_behalf_of: None,
        requested_by: Some(
            if failed.is_some() {
                crate::release::AUTO_ROLLBACK
            } else {
                "cli:carol"
            }
            .to_owned(),
        ),
        requester_identities: Vec::new(),
        requested_at: datetime!(2026-11-29 10:00 UTC) + time::Duration::minutes(minute),
    }
}

fn running(driver: &Driver, module: &str) -> Option<String> {
    driver.world.content().get(module).cloned()
}

fn last_decision(driver: &Driver) -> (String, bosun_contracts::messages::ReleaseDecision, String) {
    let recorded = driver.decisions.last().expect("a decision recorded");
    let entry = &recorded.decisions[0];
    (
        recorded.release_id.clone(),
        entry.decision,
        entry.reason.clone().unwrap_or_default(),
    )
}

#[test]
fn a_failed_release_is_rolled_back_to_the_last_verified_one() {
    use bosun_contracts::messages::ReleaseDecision;
    let mut driver = Driver::new();
    driver.message(promoted("payments-api", "r1", 0));
    driver.message(verified("payments-api", "r1", 0));
    driver.message(promoted("payments-api", "r2", 10));
    assert_eq!(running(&driver, "payments-api").as_deref(), Some("r2"));
    driver.message(rollback("payments-api", Some("r2"), None, 12));
    assert_eq!(running(&driver, "payments-api").as_deref(), Some("r1"));
    assert_eq!(driver.state.apps["payments-api"].release_id, "r1");
    let (release, decision, reason) = last_decision(&driver);
    assert_eq!((release.as_str(), decision), ("r2", ReleaseDecision::RolledBack));
    assert!(reason.contains("rolled back to r1"), "{reason}");
    // The same rollback again (a redelivery) changes nothing: r2 is no
    // longer the current release.
    let writes = driver.world.writes.len();
    driver.message(rollback("payments-api", Some("r2"), None, 12));
    assert_eq!(driver.world.writes.len(), writes);
    assert_eq!(last_decision(&driver).1, ReleaseDecision::RollbackRefused);
    // A late promotion of r2 does not bring it back.
    driver.message(promoted("payments-api", "r2", 10));
    assert_eq!(running(&driver, "payments-api").as_deref(), Some("r1"));
}

#[test]
fn a_rollback_with_nothing_verified_is_refused_and_recorded() {
    use bosun_contracts::messages::ReleaseDecision;
    let mut driver = Driver::new();
    driver.message(promoted("payments-api", "r1", 0));
    driver.message(rollback("payments-api", Some("r1"), None, 5));
    assert_eq!(running(&driver, "payments-api").as_deref(), Some("r1"));
    let (release, decision, reason) = last_decision(&driver);
    assert_eq!((release.as_str(), decision), ("r1", ReleaseDecision::RollbackRefused));
    assert!(reason.contains("no release of payments-api verified"), "{reason}");
}

#[test]
fn a_manual_rollback_goes_to_the_verified_release_before_the_current_one_or_the_one_named() {
    let mut driver = Driver::new();
    for (release, minute) in [("r1", 0), ("r2", 10), ("r3", 20)] {
        driver.message(promoted("payments-api", release, minute));
        driver.message(verified("payments-api", release, minute));
    }
    // Each rollback goes one verified release further back, never forward
    // to the one it rolled back from.
    driver.message(rollback("payments-api", None, None, 30));
    assert_eq!(running(&driver, "payments-api").as_deref(), Some("r2"));
    driver.message(rollback("payments-api", None, None, 31));
    assert_eq!(running(&driver, "payments-api").as_deref(), Some("r1"));
    driver.message(rollback("payments-api", None, None, 32));
    assert_eq!(running(&driver, "payments-api").as_deref(), Some("r1"));
    assert_eq!(
        last_decision(&driver).1,
        bosun_contracts::messages::ReleaseDecision::RollbackRefused
    );
    // The one named goes, forward too.
    driver.message(rollback("payments-api", None, Some("r3"), 33));
    assert_eq!(running(&driver, "payments-api").as_deref(), Some("r3"));
    // A release never verified here cannot be gone back to.
    driver.message(rollback("payments-api", None, Some("r9"), 34));
    assert_eq!(running(&driver, "payments-api").as_deref(), Some("r3"));
    assert!(last_decision(&driver).2.contains("r9 was not verified"));
}

#[test]
fn a_release_that_fails_after_a_rollback_to_it_is_never_gone_back_to_and_nothing_goes_forward() {
    let mut driver = Driver::new();
    for (release, minute) in [("r0", 0), ("r1", 10), ("r3", 20)] {
        driver.message(promoted("payments-api", release, minute));
        driver.message(verified("payments-api", release, minute));
    }
    // A person goes back from r3 to r1; r1 then fails there again.
    driver.message(rollback("payments-api", None, None, 30));
    assert_eq!(running(&driver, "payments-api").as_deref(), Some("r1"));
    driver.message(rollback("payments-api", Some("r1"), None, 31));
    assert_eq!(
        running(&driver, "payments-api").as_deref(),
        Some("r0"),
        "back, not forward to r3"
    );
    let kept: Vec<&str> = driver.state.verified["payments-api"]
        .iter()
        .map(|known| known.release_id.as_str())
        .collect();
    assert_eq!(kept, ["r0", "r3"]);
}

#[test]
fn a_rollback_goes_ahead_of_queued_promotions() {
    let mut driver = Driver::new();
    driver.message(promoted("payments-api", "r1", 0));
    driver.message(verified("payments-api", "r1", 0));
    driver.world.lagging = true;
    driver.message(promoted("payments-api", "r2", 10));
    driver.message(promoted("payments-api", "r3", 20));
    assert_eq!(driver.state.queued.len(), 1);
    driver.message(rollback("payments-api", None, Some("r1"), 21));
    assert_eq!(driver.state.queued[0].release_id, "r1");
    driver.world.lagging = false;
    while driver.fire_timer() {}
    // r2 synced, then r1 (the rollback); r3, promoted before the rollback
    // was asked for, is older than it and not written.
    let order: Vec<&str> = driver
        .world
        .writes
        .iter()
        .map(|(_, release)| release.as_str())
        .collect();
    assert_eq!(order, ["r1", "r2", "r1"]);
    assert!(driver.state.queued.is_empty());
    assert!(
        driver
            .state
            .history
            .iter()
            .any(|entry| entry.event == HistoryEvent::PromotionIgnored && entry.release_id.as_deref() == Some("r3"))
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Releases of one module promoted one after another, each verified or
    /// failing (and then rolled back, as the release saga asks): after a
    /// failure the environment runs the newest verified release before it,
    /// or, when there is none, keeps the failed one and a refusal is
    /// recorded.
    #[test]
    fn a_failed_verification_ends_in_the_last_verified_release_or_a_recorded_refusal(
        outcomes in prop::collection::vec(any::<bool>(), 1..12),
    ) {
        use bosun_contracts::messages::ReleaseDecision;
        let mut driver = Driver::new();
        let mut last_verified: Option<String> = None;
        for (index, passes) in outcomes.into_iter().enumerate() {
            let release = format!("r{index}");
            let minute = i64::try_from(index).unwrap() * 10;
            driver.message(promoted("payments-api", &release, minute));
            prop_assert_eq!(running(&driver, "payments-api"), Some(release.clone()));
            if passes {
                driver.message(verified("payments-api", &release, minute));
                last_verified = Some(release);
                continue;
            }
            driver.message(rollback("payments-api", Some(&release), None, minute + 5));
            let (recorded_on, decision, _) = last_decision(&driver);
            prop_assert_eq!(recorded_on, release.clone());
            match &last_verified {
                Some(good) => {
                    prop_assert_eq!(running(&driver, "payments-api"), Some(good.clone()));
                    prop_assert_eq!(decision, ReleaseDecision::RolledBack);
                }
                None => {
                    prop_assert_eq!(running(&driver, "payments-api"), Some(release.clone()));
                    prop_assert_eq!(decision, ReleaseDecision::RollbackRefused);
                }
            }
        }
    }
}
