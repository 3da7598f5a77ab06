//! Verification after promotion in the release saga: soak time and sampled
//! checks, a failure that blocks the release and asks for a rollback
//! (through the promotion gate), the promotion graph, and a property over
//! any sequence of sample outcomes.

use std::collections::BTreeMap;

use bosun_contracts::Message;
use bosun_contracts::messages::{GitOpsSynced, InfrastructureProvisioned, ReleaseStep, ReleaseVerificationCheck};
use bosun_contracts::samples;
use proptest::prelude::*;
use time::macros::datetime;

use super::*;
use crate::Action;

const START: OffsetDateTime = datetime!(2026-12-01 10:00:00 UTC);

fn health(successes: u32) -> VerificationCheck {
    VerificationCheck::Http(HttpCheck {
        name: "health".to_owned(),
        url: "http://127.0.0.1:9/healthz".to_owned(),
        successes,
        timeout_seconds: 5,
    })
}

fn verification(soak: u64, checks: Vec<VerificationCheck>) -> Verification {
    Verification {
        soak_seconds: soak,
        interval_seconds: 10,
        failure_limit: 0,
        checks,
        roll_back: true,
        verify_rollbacks: true,
        requires_verified_in: Vec::new(),
    }
}

/// dev and staging on their own, prod by a person; `verification` by
/// environment, `windows` the tenant's windows.
fn saga_with(verification: BTreeMap<String, Verification>, windows: Vec<PromotionWindow>) -> ReleaseSaga {
    let approval = ApprovalPolicy {
        verification,
        windows,
        ..ApprovalPolicy::default()
    };
    approval.validate().unwrap();
    let policy = ReleasePolicy {
        environments: vec!["dev".to_owned(), "staging".to_owned(), "prod".to_owned()],
        auto_approve: vec!["dev".to_owned(), "staging".to_owned()],
        approval,
        approval_version: Some(3),
        ..ReleasePolicy::default()
    };
    policy.validate().unwrap();
    ReleaseSaga::new(policy)
}

fn provisioned(environment: &str) -> Message {
    InfrastructureProvisioned {
        environment: environment.to_owned(),
        ..samples::infrastructure_provisioned()
    }
    .into()
}

fn synced(environment: &str) -> Message {
    GitOpsSynced {
        environment: environment.to_owned(),
        ..samples::gitops_synced()
    }
    .into()
}

fn run_at(
    saga: &ReleaseSaga,
    state: ReleaseState,
    messages: &[Message],
    at: OffsetDateTime,
) -> (ReleaseState, Vec<Action>) {
    let mut state = state;
    let mut actions = Vec::new();
    for message in messages {
        let transition = saga.apply_observed(&state, message, at, Some(at), &[]).unwrap();
        state = transition.state;
        actions.extend(transition.actions);
    }
    (state, actions)
}

/// Built, artifacts in, dev provisioned and synced healthy at `START`.
fn synced_in_dev(saga: &ReleaseSaga) -> (ReleaseState, Vec<Action>) {
    run_at(
        saga,
        ReleaseState::default(),
        &[
            samples::build_completed().into(),
            samples::container_image_built().into(),
            samples::package_published().into(),
            provisioned("dev"),
            synced("dev"),
        ],
        START,
    )
}

fn sample_checks(actions: &[Action]) -> Vec<ReleaseVerificationCheck> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Schedule {
                message: Message::ReleaseVerificationCheck(check),
                ..
            } => Some(check.clone()),
            _ => None,
        })
        .collect()
}

fn sent<'a>(actions: &'a [Action], message_type: &str) -> Vec<&'a Message> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Send(message) if message.message_type() == message_type => Some(message),
            _ => None,
        })
        .collect()
}

fn outcome(passed: bool) -> CheckOutcome {
    CheckOutcome {
        check: "health".to_owned(),
        passed,
        detail: if passed {
            "GET http://127.0.0.1:9/healthz answered 200 OK".to_owned()
        } else {
            "GET http://127.0.0.1:9/healthz answered 500 Internal Server Error".to_owned()
        },
    }
}

/// Applies one sample of `check` with `passed`, at its time.
fn sample(
    saga: &ReleaseSaga,
    state: &ReleaseState,
    check: &ReleaseVerificationCheck,
    passed: bool,
) -> (ReleaseState, Vec<Action>) {
    let transition = saga
        .apply_samples(state, check, &[outcome(passed)], check.check_at)
        .unwrap();
    (transition.state, transition.actions)
}

#[test]
fn without_a_verification_policy_a_healthy_sync_verifies() {
    let saga = saga_with(BTreeMap::new(), Vec::new());
    let (state, actions) = synced_in_dev(&saga);
    assert_eq!(sent(&actions, "ReleaseVerified").len(), 1);
    assert_eq!(state.verified["dev"].summary, "healthy sync");
    assert!(sample_checks(&actions).is_empty());
    assert_eq!(state.current_environment.as_deref(), Some("staging"));
}

#[test]
fn a_release_is_verified_once_soaked_and_its_checks_passed_enough_times() {
    let saga = saga_with(
        BTreeMap::from([("dev".to_owned(), verification(25, vec![health(2)]))]),
        Vec::new(),
    );
    let (mut state, actions) = synced_in_dev(&saga);
    assert!(sent(&actions, "ReleaseVerified").is_empty());
    assert_eq!(state.phase, ReleasePhase::Syncing);
    assert_eq!(state.deployed, ["dev"]);
    let mut check = sample_checks(&actions).pop().unwrap();
    assert_eq!((check.attempt, check.check_at), (1, START));
    // Two passes at 0s and 10s: the soak time (25s) is not over yet, so
    // the next sample is at its end.
    let mut samples_taken = 0;
    loop {
        let (next, actions) = sample(&saga, &state, &check, true);
        samples_taken += 1;
        state = next;
        if !sent(&actions, "ReleaseVerified").is_empty() {
            break;
        }
        assert!(samples_taken < 10, "never verified");
        check = sample_checks(&actions).pop().unwrap();
    }
    assert_eq!(samples_taken, 3);
    assert_eq!(check.check_at, START + time::Duration::seconds(25));
    assert!(state.verified.contains_key("dev"));
    assert_eq!(state.verifying, None);
    assert_eq!(state.current_environment.as_deref(), Some("staging"));
    // A duplicate of a sample already counted changes nothing.
    let (again, actions) = sample(&saga, &state, &check, false);
    assert_eq!(again, state);
    assert!(actions.is_empty());
}

#[test]
fn a_failed_verification_blocks_the_release_and_asks_for_a_rollback() {
    let saga = saga_with(
        BTreeMap::from([("dev".to_owned(), verification(60, vec![health(3)]))]),
        Vec::new(),
    );
    let (state, actions) = synced_in_dev(&saga);
    let check = sample_checks(&actions).pop().unwrap();
    let (state, actions) = sample(&saga, &state, &check, false);
    assert_eq!(state.phase, ReleasePhase::Blocked);
    let blocked = state.blocked.clone().unwrap();
    assert_eq!(blocked.failing_step, ReleaseStep::Sync);
    assert!(blocked.reason.contains("answered 500"), "{}", blocked.reason);
    let failure = state.verification_failed.clone().unwrap();
    assert!(failure.rollback_requested);
    let rollbacks = sent(&actions, "RollbackEnvironment");
    let [Message::RollbackEnvironment(rollback)] = rollbacks.as_slice() else {
        panic!("{actions:#?}");
    };
    assert_eq!(rollback.environment, "dev");
    assert_eq!(
        rollback.failed_release_id.as_deref(),
        Some(state.release_id.as_deref().unwrap())
    );
    assert_eq!(rollback.requested_by.as_deref(), Some(AUTO_ROLLBACK));
    // It is never promoted further, whatever comes.
    let (state, actions) = run_at(&saga, state, &[provisioned("staging"), synced("staging")], START);
    assert!(sent(&actions, "DeploymentPromoted").is_empty(), "{actions:#?}");
    assert_eq!(state.phase, ReleasePhase::Blocked);
}

#[test]
fn a_policy_that_does_not_roll_back_keeps_the_release_blocked() {
    let mut keep = verification(0, vec![health(1)]);
    keep.roll_back = false;
    let saga = saga_with(BTreeMap::from([("dev".to_owned(), keep)]), Vec::new());
    let (state, actions) = synced_in_dev(&saga);
    let check = sample_checks(&actions).pop().unwrap();
    let (state, actions) = sample(&saga, &state, &check, false);
    assert_eq!(state.phase, ReleasePhase::Blocked);
    assert!(sent(&actions, "RollbackEnvironment").is_empty());
}

#[test]
fn failures_within_the_limit_are_tolerated() {
    let mut tolerant = verification(0, vec![health(2)]);
    tolerant.failure_limit = 1;
    let saga = saga_with(BTreeMap::from([("dev".to_owned(), tolerant)]), Vec::new());
    let (state, actions) = synced_in_dev(&saga);
    let check = sample_checks(&actions).pop().unwrap();
    let (state, actions) = sample(&saga, &state, &check, false);
    assert_eq!(state.phase, ReleasePhase::Syncing);
    let check = sample_checks(&actions).pop().unwrap();
    let (state, actions) = sample(&saga, &state, &check, true);
    let check = sample_checks(&actions).pop().unwrap();
    let (state, actions) = sample(&saga, &state, &check, true);
    assert_eq!(sent(&actions, "ReleaseVerified").len(), 1, "{actions:#?}");
    assert!(
        state.verified["dev"].summary.contains("1 failed"),
        "{:?}",
        state.verified
    );
}

#[test]
fn a_rollback_obeys_a_deny_window_and_goes_when_it_ends_or_is_overridden() {
    // A deny window over dev from 10:00:30 for an hour: the verification
    // fails inside it.
    let freeze = PromotionWindow {
        name: "freeze".to_owned(),
        kind: WindowKind::Deny,
        environments: vec!["dev".to_owned()],
        schedule: "30 0 10 1 12 *".to_owned(),
        duration_seconds: 3600,
        time_zone: "UTC".to_owned(),
    };
    let saga = saga_with(
        BTreeMap::from([("dev".to_owned(), verification(60, vec![health(1)]))]),
        vec![freeze],
    );
    let (state, actions) = synced_in_dev(&saga);
    let first = sample_checks(&actions).pop().unwrap();
    let (state, actions) = sample(&saga, &state, &first, true);
    let mut check = sample_checks(&actions).pop().unwrap();
    check.check_at = START + time::Duration::minutes(1);
    let (blocked, actions) = sample(&saga, &state, &check, false);
    assert_eq!(blocked.phase, ReleasePhase::Blocked);
    assert!(sent(&actions, "RollbackEnvironment").is_empty(), "{actions:#?}");
    let wait = blocked.window_wait.clone().unwrap();
    assert_eq!(wait.rule, WindowRule::DenyWindow);
    assert_eq!(wait.until, Some(datetime!(2026-12-01 11:00:30 UTC)));
    let window_check = actions
        .iter()
        .find_map(|action| match action {
            Action::Schedule {
                message: Message::ReleaseWindowCheck(check),
                ..
            } => Some(check.clone()),
            _ => None,
        })
        .unwrap();
    // When the window ends, the rollback is asked for.
    let (state, actions) = run_at(&saga, blocked.clone(), &[window_check.into()], wait.until.unwrap());
    assert_eq!(sent(&actions, "RollbackEnvironment").len(), 1, "{actions:#?}");
    assert_eq!(state.window_wait, None);
    // Or at once, overridden by someone who did not request it.
    let overriding = bosun_contracts::messages::OverrideReleaseWindow {
        release_id: blocked.release_id.clone().unwrap(),
        environment: "dev".to_owned(),
        reason: "INC-7: dev is down".to_owned(),
        on_behalf_of: None,
        overridden_by: Some("cli:carol".to_owned()),
        overrider_identities: vec!["cli:carol".to_owned()],
    };
    let (_, actions) = run_at(&saga, blocked, &[overriding.into()], START + time::Duration::minutes(2));
    assert_eq!(sent(&actions, "RollbackEnvironment").len(), 1, "{actions:#?}");
}

/// A release verified in dev (the only environment), then dev rolled back
/// to it at a new commit.
fn rolled_back_to(saga: &ReleaseSaga) -> (ReleaseState, Vec<Action>) {
    let (mut state, actions) = synced_in_dev(saga);
    let mut check = sample_checks(&actions).pop().unwrap();
    loop {
        let (next, actions) = sample(saga, &state, &check, true);
        state = next;
        if !sent(&actions, "ReleaseVerified").is_empty() {
            break;
        }
        check = sample_checks(&actions).pop().unwrap();
    }
    let rollback_commit = GitOpsSynced {
        environment: "dev".to_owned(),
        commit_sha: "1111111111111111111111111111111111111111".to_owned(),
        ..samples::gitops_synced()
    };
    run_at(saga, state, &[rollback_commit.into()], START + time::Duration::hours(1))
}

fn dev_only(verification: Verification) -> ReleaseSaga {
    let approval = ApprovalPolicy {
        verification: BTreeMap::from([("dev".to_owned(), verification)]),
        ..ApprovalPolicy::default()
    };
    let policy = ReleasePolicy {
        environments: vec!["dev".to_owned()],
        auto_approve: vec!["dev".to_owned()],
        approval,
        ..ReleasePolicy::default()
    };
    policy.validate().unwrap();
    ReleaseSaga::new(policy)
}

#[test]
fn a_release_rolled_back_to_is_verified_again_and_a_failure_rolls_back_further() {
    let saga = dev_only(verification(0, vec![health(1)]));
    let (state, actions) = rolled_back_to(&saga);
    assert_eq!(state.phase, ReleasePhase::Completed);
    let check = sample_checks(&actions)
        .pop()
        .expect("a sample of the rollback scheduled");
    assert!(state.reverifying.is_some());
    // It passes: verified again, nothing else moves.
    let (passed, actions) = sample(&saga, &state, &check, true);
    assert_eq!(passed.reverifying, None);
    assert!(
        passed.verified["dev"]
            .summary
            .contains("verified again after a rollback")
    );
    assert!(sent(&actions, "RollbackEnvironment").is_empty());
    assert_eq!(passed.phase, ReleasePhase::Completed);
    // Rolled back to again later: a late copy of the earlier run's sample
    // never counts for the new run.
    let again = GitOpsSynced {
        environment: "dev".to_owned(),
        commit_sha: "3333333333333333333333333333333333333333".to_owned(),
        ..samples::gitops_synced()
    };
    let (second, _) = run_at(&saga, passed, &[again.into()], START + time::Duration::hours(3));
    assert_eq!(second.reverifying.as_ref().map(|run| run.attempt), Some(check.attempt));
    let (late, actions) = sample(&saga, &second, &check, false);
    assert_eq!(late, second);
    assert!(actions.is_empty());
    // It fails: the environment is rolled back further, from this release.
    let (failed, actions) = sample(&saga, &state, &check, false);
    let rollbacks = sent(&actions, "RollbackEnvironment");
    let [Message::RollbackEnvironment(rollback)] = rollbacks.as_slice() else {
        panic!("{actions:#?}");
    };
    assert_eq!(rollback.failed_release_id, failed.release_id);
    assert_eq!(failed.phase, ReleasePhase::Completed);
    assert!(failed.verification_failed.unwrap().rollback_requested);
    // The same sample again changes nothing.
    let (again, actions) = sample(&saga, &failed_state(&saga, &state, &check), &check, false);
    assert!(actions.is_empty());
    assert_eq!(again.reverifying, None);
}

fn failed_state(saga: &ReleaseSaga, state: &ReleaseState, check: &ReleaseVerificationCheck) -> ReleaseState {
    sample(saga, state, check, false).0
}

#[test]
fn a_rollback_to_a_release_that_syncs_unhealthy_rolls_back_further() {
    let saga = dev_only(verification(0, vec![health(1)]));
    let (state, _) = rolled_back_to(&saga);
    let unhealthy = GitOpsSynced {
        environment: "dev".to_owned(),
        commit_sha: "2222222222222222222222222222222222222222".to_owned(),
        healthy: false,
        ..samples::gitops_synced()
    };
    let (state, actions) = run_at(&saga, state, &[unhealthy.into()], START + time::Duration::hours(2));
    assert_eq!(sent(&actions, "RollbackEnvironment").len(), 1, "{actions:#?}");
    assert!(state.verification_failed.unwrap().reason.contains("not every resource"));
}

#[test]
fn a_policy_may_skip_verifying_rollbacks() {
    let mut skip = verification(0, vec![health(1)]);
    skip.verify_rollbacks = false;
    let saga = dev_only(skip);
    let (state, actions) = rolled_back_to(&saga);
    assert!(sample_checks(&actions).is_empty(), "{actions:#?}");
    assert_eq!(state.reverifying, None);
    assert!(state.history.last().unwrap().note.contains("verifyRollbacks false"));
}

#[test]
fn an_environment_that_requires_evidence_is_entered_only_with_it() {
    let mut prod = verification(0, Vec::new());
    prod.requires_verified_in = vec!["staging".to_owned(), "perf".to_owned()];
    let saga = saga_with(BTreeMap::from([("prod".to_owned(), prod)]), Vec::new());
    let (state, _) = synced_in_dev(&saga);
    let (state, actions) = run_at(&saga, state, &[provisioned("staging"), synced("staging")], START);
    assert_eq!(sent(&actions, "ReleaseVerified").len(), 1);
    // Verified in staging but never in perf (not on its path): prod is
    // refused, the rule named.
    assert_eq!(state.phase, ReleasePhase::Blocked);
    let blocked = state.blocked.unwrap();
    assert_eq!(blocked.failing_step, ReleaseStep::Promotion);
    assert_eq!(blocked.environment.as_deref(), Some("prod"));
    assert!(blocked.reason.contains("verified in perf first"), "{}", blocked.reason);
    assert!(sent(&actions, "ReleaseApprovalTimeout").is_empty());
}

#[test]
fn verification_policies_are_validated_naming_the_field() {
    let cases = [
        (
            serde_json::json!({"dev": {"soakSeconds": 9_999_999}}),
            "verification.dev.soakSeconds",
        ),
        (
            serde_json::json!({"dev": {"intervalSeconds": 0}}),
            "verification.dev.intervalSeconds",
        ),
        (
            serde_json::json!({"dev": {"checks": [{"kind": "http", "name": "h", "url": "ftp://x"}]}}),
            "verification.dev.checks[0].url",
        ),
        (
            serde_json::json!({"dev": {"checks": [{"kind": "prometheus", "name": "p", "url": "http://prom:9090", "query": "up"}]}}),
            "verification.dev.checks[0].max",
        ),
        (
            serde_json::json!({"dev": {"checks": [{"kind": "prometheus", "name": "p", "url": "http://prom:9090", "query": "up", "min": 2, "max": 1}]}}),
            "verification.dev.checks[0].max",
        ),
        (
            serde_json::json!({"dev": {"checks": [{"kind": "azureMonitor", "name": "a", "alertRuleId": "/nope"}]}}),
            "verification.dev.checks[0].alertRuleId",
        ),
        (
            serde_json::json!({"dev": {"checks": [
                {"kind": "http", "name": "h", "url": "http://a"},
                {"kind": "http", "name": "h", "url": "http://b"}
            ]}}),
            "verification.dev.checks[1]",
        ),
        (
            serde_json::json!({"prod": {"requiresVerifiedIn": ["prod"]}}),
            "verification.prod.requiresVerifiedIn[0]",
        ),
        (serde_json::json!({"Prod!": {}}), "verification.Prod!"),
    ];
    for (bad, field) in cases {
        let err = ApprovalPolicy::from_document(&serde_json::json!({ "verification": bad.clone() })).unwrap_err();
        assert_eq!(err.field, field, "{bad}: {err:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the samples say, a verification ends verified only when
    /// every sample within the limit passed enough times after the soak
    /// time, and a failure beyond the limit always ends in a blocked
    /// release that asks for a rollback and is never promoted further.
    #[test]
    fn a_verification_ends_verified_or_blocked_with_a_rollback(
        outcomes in prop::collection::vec(any::<bool>(), 1..20),
        successes in 1u32..4,
        failure_limit in 0u32..3,
        soak in 0u64..60,
    ) {
        let mut policy = verification(soak, vec![health(successes)]);
        policy.failure_limit = failure_limit;
        let saga = saga_with(BTreeMap::from([("dev".to_owned(), policy)]), Vec::new());
        let (mut state, actions) = synced_in_dev(&saga);
        let mut check = sample_checks(&actions).pop().unwrap();
        let mut passes = 0u32;
        let mut failures = 0u32;
        for passed in outcomes {
            let (next, actions) = sample(&saga, &state, &check, passed);
            state = next;
            if passed { passes += 1 } else { failures += 1 }
            prop_assert!(sent(&actions, "DeploymentPromoted").is_empty());
            if failures > failure_limit {
                prop_assert_eq!(state.phase, ReleasePhase::Blocked);
                prop_assert_eq!(sent(&actions, "RollbackEnvironment").len(), 1);
                prop_assert!(!state.verified.contains_key("dev"));
                return Ok(());
            }
            if !sent(&actions, "ReleaseVerified").is_empty() {
                prop_assert!(passes >= successes);
                prop_assert!(check.check_at >= START + time::Duration::seconds(i64::try_from(soak).unwrap()));
                prop_assert!(state.verified.contains_key("dev"));
                return Ok(());
            }
            prop_assert_eq!(state.phase, ReleasePhase::Syncing);
            check = sample_checks(&actions).pop().unwrap();
        }
        prop_assert!(state.verifying.is_some());
    }
}
