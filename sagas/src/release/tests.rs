//! The release saga's tests: transitions one by one, and property tests
//! over delivery order and duplication.

use std::collections::BTreeSet;
use std::time::Duration;

use bosun_contracts::Message;
use bosun_contracts::messages::{
    ApproveRelease, BuildCompleted, DeploymentPromoted, GitOpsSynced, InfrastructureProvisioned, PipelineResult,
    RejectRelease, ReleaseApprovalTimeout, ReleaseApproved, ReleasePlanned, ReleaseRejected, ReleaseStep,
};
use bosun_contracts::samples::{self, RELEASE_ID};
use proptest::prelude::*;
use time::macros::datetime;

use super::*;
use crate::{Action, SagaError, StateMachine};

const NOW: OffsetDateTime = datetime!(2026-11-29 12:00:00 UTC);
const OTHER_RELEASE: &str = "payments-api-1.5.0-0aa11bb";

fn policy(environments: &[&str], auto_approve: &[&str]) -> ReleasePolicy {
    ReleasePolicy {
        environments: environments.iter().map(|name| (*name).to_owned()).collect(),
        auto_approve: auto_approve.iter().map(|name| (*name).to_owned()).collect(),
        ..ReleasePolicy::default()
    }
}

/// dev approves on its own; staging and prod need a person.
fn three_environments() -> ReleaseSaga {
    ReleaseSaga::new(policy(&["dev", "staging", "prod"], &["dev"]))
}

fn build() -> Message {
    samples::build_completed().into()
}

fn failed_build(build_id: &str) -> Message {
    let mut build = samples::build_completed();
    build.build_id = build_id.to_owned();
    build.result = PipelineResult::Failed;
    build.test_summary.passed -= 2;
    build.test_summary.failed = 2;
    build.failed_tests = vec![
        "Payments.Api.Tests.RetryPolicyTests.GivesUpAfterThreeAttempts".to_owned(),
        "Payments.Api.Tests.RetryPolicyTests.WaitsWithJitter".to_owned(),
    ];
    build.into()
}

fn image() -> Message {
    samples::container_image_built().into()
}

fn package() -> Message {
    samples::package_published().into()
}

fn approve(environment: &str) -> Message {
    ApproveRelease {
        environment: environment.to_owned(),
        ..samples::approve_release()
    }
    .into()
}

fn reject() -> Message {
    samples::reject_release().into()
}

fn timeout(environment: &str) -> Message {
    ReleaseApprovalTimeout {
        environment: environment.to_owned(),
        ..samples::release_approval_timeout()
    }
    .into()
}

/// The timeout the saga scheduled and waits on.
fn pending_timeout(state: &ReleaseState) -> Message {
    let pending = state.pending_timeout.as_ref().expect("the saga waits on a timeout");
    pending.message.clone().into()
}

fn provisioned(environment: &str) -> Message {
    InfrastructureProvisioned {
        plan_id: format!("{RELEASE_ID}-{environment}"),
        stack: format!("payments/{environment}"),
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

/// Applies `messages` at [`NOW`], each on the state the previous one
/// left, and returns the final state and every action in order.
fn run(saga: &ReleaseSaga, state: ReleaseState, messages: &[Message]) -> (ReleaseState, Vec<Action>) {
    let mut state = state;
    let mut actions = Vec::new();
    for message in messages {
        let transition = saga.apply_at(&state, message, NOW).unwrap();
        state = transition.state;
        actions.extend(steps(transition.actions));
    }
    (state, actions)
}

/// The release's steps among `actions`: without the decisions it records
/// for the audit log (`decisions_tests` looks at those).
fn steps(actions: Vec<Action>) -> Vec<Action> {
    actions
        .into_iter()
        .filter(|action| !matches!(action, Action::Send(Message::ReleaseDecisionRecorded(_))))
        .collect()
}

fn sends(actions: &[Action]) -> Vec<Message> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Send(message) => Some(message.clone()),
            Action::Schedule { .. } => None,
        })
        .collect()
}

fn types(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .map(|action| match action {
            Action::Send(message) => message.message_type().to_owned(),
            Action::Schedule { message, .. } => format!("schedule {}", message.message_type()),
        })
        .collect()
}

fn expected_plan(saga: &ReleaseSaga) -> ReleasePlanned {
    ReleasePlanned {
        environments: saga.policy().planned_environments(),
        planned_at: NOW,
        ..samples::release_planned()
    }
}

fn auto_approved(environment: &str) -> Message {
    ReleaseApproved {
        release_id: RELEASE_ID.to_owned(),
        module_id: "payments-api".to_owned(),
        environment: environment.to_owned(),
        approver: AUTO_APPROVER.to_owned(),
        approved_at: NOW,
        auto: true,
        comment: None,
        repository: Some(samples::release_planned().artifacts.build.repository),
        commit_sha: Some(samples::release_planned().artifacts.build.commit_sha),
        approvers: Vec::new(),
    }
    .into()
}

/// The `approvedBy` of the sample approval: the authenticated caller.
fn approving_key() -> String {
    samples::approve_release().approved_by.unwrap_or_default()
}

fn approved_by_alice(environment: &str) -> Message {
    ReleaseApproved {
        environment: environment.to_owned(),
        approved_at: NOW,
        approver: approving_key(),
        approvers: Vec::new(),
        ..samples::release_approved()
    }
    .into()
}

fn promoted(environment: &str, approved_by: &str) -> Message {
    DeploymentPromoted {
        environment: environment.to_owned(),
        environment_repository: DEFAULT_ENVIRONMENT_REPOSITORY.to_owned(),
        desired_commit_sha: PENDING_DESIRED_COMMIT.to_owned(),
        approved_by: approved_by.to_owned(),
        promoted_at: NOW,
        ..samples::deployment_promoted()
    }
    .into()
}

fn approval_timeout_of(environment: &str, after: Duration) -> Action {
    let deadline = NOW + time::Duration::try_from(after).unwrap();
    Action::Schedule {
        message: ReleaseApprovalTimeout {
            release_id: RELEASE_ID.to_owned(),
            environment: environment.to_owned(),
            deadline,
        }
        .into(),
        after,
    }
}

/// The state after the build and its artifacts under `saga`.
fn planned(saga: &ReleaseSaga) -> ReleaseState {
    run(saga, ReleaseState::default(), &[build(), image(), package()]).0
}

// --- keys ---------------------------------------------------------

#[test]
fn messages_are_keyed_by_release_id() {
    let saga = ReleaseSaga::default();
    for message in [
        build(),
        image(),
        package(),
        approve("prod"),
        reject(),
        timeout("prod"),
        provisioned("prod"),
        synced("prod"),
    ] {
        assert_eq!(
            saga.key_of(&message).as_deref(),
            Some(RELEASE_ID),
            "{}",
            message.message_type()
        );
    }
    let preview = InfrastructureProvisioned {
        preview_only: true,
        ..samples::infrastructure_provisioned()
    };
    let unattributed = GitOpsSynced {
        release_id: None,
        ..samples::gitops_synced()
    };
    for message in [
        Message::from(preview),
        unattributed.into(),
        samples::release_planned().into(),
        samples::release_approved().into(),
        samples::deployment_promoted().into(),
        samples::commit_created().into(),
    ] {
        assert_eq!(saga.key_of(&message), None, "{}", message.message_type());
    }
}

// --- collecting and planning --------------------------------------

#[test]
fn the_build_alone_plans_nothing_while_required_artifacts_are_missing() {
    let saga = ReleaseSaga::default();
    let (state, actions) = run(&saga, ReleaseState::default(), &[build(), image()]);
    assert_eq!(actions, []);
    assert_eq!(state.phase, ReleasePhase::Collecting);
    assert_eq!(state.release_id.as_deref(), Some(RELEASE_ID));
}

#[test]
fn build_and_artifacts_plan_and_auto_approve_dev() {
    let saga = ReleaseSaga::default();
    let (_, actions) = run(&saga, ReleaseState::default(), &[build(), image(), package()]);
    assert_eq!(
        actions,
        [
            Action::Send(expected_plan(&saga).into()),
            Action::Send(auto_approved("dev")),
        ]
    );
}

#[test]
fn artifacts_may_arrive_before_the_build_and_twice() {
    let saga = ReleaseSaga::default();
    let (state, actions) = run(
        &saga,
        ReleaseState::default(),
        &[package(), image(), package(), image()],
    );
    assert_eq!(actions, []);
    let (_, actions) = run(&saga, state, &[build(), build(), image()]);
    assert_eq!(types(&actions), ["ReleasePlanned", "ReleaseApproved"]);
}

#[test]
fn only_the_artifacts_the_module_declares_are_awaited() {
    let saga = ReleaseSaga::default();
    let mut without_package = samples::build_completed();
    without_package.module.package = None;
    let (_, actions) = run(&saga, ReleaseState::default(), &[without_package.into(), image()]);
    let sent = sends(&actions);
    let Message::ReleasePlanned(plan) = &sent[0] else {
        panic!("expected a plan, got {sent:?}");
    };
    assert_eq!(plan.artifacts.package, None);
    assert!(plan.artifacts.image.is_some());

    let mut without_image = samples::build_completed();
    without_image.module.container = None;
    let (_, actions) = run(&saga, ReleaseState::default(), &[without_image.into(), package()]);
    assert_eq!(types(&actions), ["ReleasePlanned", "ReleaseApproved"]);
}

#[test]
fn artifacts_of_another_build_do_not_complete_the_release() {
    let saga = ReleaseSaga::default();
    let mut other_image = samples::container_image_built();
    other_image.build_id = "build-4712".to_owned();
    let (_, actions) = run(
        &saga,
        ReleaseState::default(),
        &[build(), other_image.into(), package()],
    );
    assert_eq!(actions, []);
}

#[test]
fn a_failed_build_blocks_the_release_with_its_failing_tests() {
    let saga = ReleaseSaga::default();
    let (state, actions) = run(&saga, ReleaseState::default(), &[failed_build(samples::BUILD_ID)]);
    let sent = sends(&actions);
    assert_eq!(sent.len(), 1);
    let Message::ReleaseBlocked(blocked) = &sent[0] else {
        panic!("expected ReleaseBlocked, got {sent:?}");
    };
    assert_eq!(blocked.failing_step, ReleaseStep::Build);
    assert_eq!(blocked.environment, None);
    assert_eq!(blocked.blocked_at, NOW);
    assert!(blocked.reason.contains("build-4711"), "{}", blocked.reason);
    assert!(blocked.reason.contains("2 of 214 tests failed"), "{}", blocked.reason);
    assert!(
        blocked.reason.contains("GivesUpAfterThreeAttempts"),
        "{}",
        blocked.reason
    );
    assert_eq!(Message::from(blocked.clone()).validate(), Ok(()));

    // Its artifacts, the same failure again, approvals: nothing is promoted.
    let (state, actions) = run(
        &saga,
        state,
        &[image(), package(), failed_build(samples::BUILD_ID), provisioned("dev")],
    );
    assert_eq!(actions, []);
    assert_eq!(state.phase, ReleasePhase::Blocked);
}

#[test]
fn a_canceled_build_or_failing_tests_block_too() {
    let saga = ReleaseSaga::default();
    let mut canceled = samples::build_completed();
    canceled.result = PipelineResult::Canceled;
    let (_, actions) = run(&saga, ReleaseState::default(), &[canceled.into()]);
    assert_eq!(types(&actions), ["ReleaseBlocked"]);

    let mut red_tests = samples::build_completed();
    red_tests.test_summary.passed -= 1;
    red_tests.test_summary.failed = 1;
    let (_, actions) = run(&saga, ReleaseState::default(), &[red_tests.into(), image(), package()]);
    assert_eq!(types(&actions), ["ReleaseBlocked"]);
}

#[test]
fn a_successful_re_run_unblocks_the_release() {
    let saga = ReleaseSaga::default();
    let (state, _) = run(&saga, ReleaseState::default(), &[failed_build("build-4710"), image()]);
    let (state, actions) = run(&saga, state, &[build(), package()]);
    assert_eq!(types(&actions), ["ReleasePlanned", "ReleaseApproved"]);
    assert_eq!(state.blocked, None);
    // A failure reported after the good build changes nothing.
    let (_, actions) = run(&saga, state, &[failed_build("build-4712")]);
    assert_eq!(actions, []);
}

#[test]
fn a_module_with_nothing_to_deploy_is_blocked() {
    let saga = ReleaseSaga::default();
    let mut bare = samples::build_completed();
    bare.module.container = None;
    bare.module.package = None;
    let (state, actions) = run(&saga, ReleaseState::default(), &[bare.clone().into()]);
    let sent = sends(&actions);
    assert!(
        matches!(&sent[..], [Message::ReleaseBlocked(blocked)] if blocked.failing_step == ReleaseStep::Promotion),
        "{sent:?}"
    );
    let (_, actions) = run(&saga, state, &[bare.into()]);
    assert_eq!(actions, []);
}

#[test]
fn an_invalid_policy_refuses_to_plan() {
    let saga = ReleaseSaga::new(policy(&[], &[]));
    let (state, _) = run(&saga, ReleaseState::default(), &[build(), image()]);
    let err = saga.apply_at(&state, &package(), NOW).unwrap_err();
    assert!(
        matches!(&err, SagaError::Rejected { message_type, reason }
            if message_type == "PackagePublished" && reason.contains("no environment")),
        "{err}"
    );
}

#[test]
fn policies_are_validated() {
    assert_eq!(ReleasePolicy::default().validate(), Ok(()));
    assert_eq!(policy(&[], &[]).validate(), Err(ReleasePolicyError::NoEnvironments));
    assert_eq!(
        policy(&["dev", "dev"], &[]).validate(),
        Err(ReleasePolicyError::DuplicateEnvironment("dev".into()))
    );
    assert_eq!(
        policy(&["dev", "prod"], &["qa"]).validate(),
        Err(ReleasePolicyError::UnknownAutoApprove("qa".into()))
    );
    assert!(matches!(
        policy(&["Prod"], &[]).validate(),
        Err(ReleasePolicyError::InvalidEnvironment { environment, .. }) if environment == "Prod"
    ));
    let zero = ReleasePolicy {
        approval_timeout: Duration::ZERO,
        ..ReleasePolicy::default()
    };
    assert_eq!(zero.validate(), Err(ReleasePolicyError::ZeroApprovalTimeout));
    let bad_repository = ReleasePolicy {
        environment_repository: "env/repo".into(),
        ..ReleasePolicy::default()
    };
    assert!(matches!(
        bad_repository.validate(),
        Err(ReleasePolicyError::InvalidEnvironmentRepository { .. })
    ));
}

// --- approval -----------------------------------------------------

#[test]
fn an_environment_needing_a_person_schedules_the_approval_timeout() {
    let saga = ReleaseSaga::new(policy(&["prod"], &[]));
    let (state, actions) = run(&saga, ReleaseState::default(), &[build(), image(), package()]);
    assert_eq!(
        actions,
        [
            Action::Send(expected_plan(&saga).into()),
            approval_timeout_of("prod", DEFAULT_APPROVAL_TIMEOUT),
        ]
    );
    let pending = state.pending_timeout.as_ref().unwrap();
    assert_eq!(pending.due, datetime!(2026-11-30 12:00:00 UTC));
    assert_eq!(pending.message.environment, "prod");
}

#[test]
fn the_approval_timeout_follows_the_policy() {
    let saga = ReleaseSaga::new(ReleasePolicy {
        approval_timeout: Duration::from_secs(30 * 60),
        ..policy(&["prod"], &[])
    });
    let (_, actions) = run(&saga, ReleaseState::default(), &[build(), image(), package()]);
    assert_eq!(actions[1], approval_timeout_of("prod", Duration::from_secs(30 * 60)));
}

#[test]
fn approve_release_emits_release_approved_once() {
    let saga = ReleaseSaga::new(policy(&["prod"], &[]));
    let state = planned(&saga);
    let (state, actions) = run(&saga, state, &[approve("prod")]);
    assert_eq!(actions, [Action::Send(approved_by_alice("prod"))]);
    assert_eq!(state.pending_timeout, None);

    let mut bob = samples::approve_release();
    bob.approved_by = Some("cli:bob".to_owned());
    let (_, actions) = run(&saga, state, &[approve("prod"), bob.into()]);
    assert_eq!(actions, []);
}

#[test]
fn a_timeout_while_waiting_rejects_the_release() {
    let saga = ReleaseSaga::new(policy(&["prod"], &[]));
    let state = planned(&saga);
    let (state, actions) = run(&saga, state.clone(), &[pending_timeout(&state)]);
    let sent = sends(&actions);
    let [Message::ReleaseRejected(rejected)] = &sent[..] else {
        panic!("expected ReleaseRejected, got {sent:?}");
    };
    assert!(rejected.timed_out);
    assert_eq!(rejected.approver, None);
    assert_eq!(rejected.environment.as_deref(), Some("prod"));
    assert_eq!(Message::from(rejected.clone()).validate(), Ok(()));
    assert_eq!(state.phase, ReleasePhase::Rejected);
    assert_eq!(state.pending_timeout, None);

    // Late approval of a rejected release: the operator hears of it.
    let err = saga.apply_at(&state, &approve("prod"), NOW).unwrap_err();
    assert!(matches!(err, SagaError::Rejected { .. }), "{err}");
    // The same timeout again, infrastructure: nothing.
    let (_, actions) = run(&saga, state, &[timeout("prod"), provisioned("prod")]);
    assert_eq!(actions, []);
}

#[test]
fn a_rejection_of_one_environment_applies_only_while_its_approval_is_pending() {
    let saga = three_environments();
    let reject_of = |environment: &str| -> Message {
        RejectRelease {
            environment: Some(environment.to_owned()),
            ..samples::reject_release()
        }
        .into()
    };
    // dev is approved by policy, qa is not on the path.
    for environment in ["dev", "qa"] {
        assert!(
            saga.apply_at(&planned(&saga), &reject_of(environment), NOW).is_err(),
            "{environment}"
        );
    }
    // staging approved: a staging-only approver cannot stop the release
    // on its way to prod any more; prod's approver still can.
    let (state, _) = run(&saga, planned(&saga), &[approve("staging")]);
    assert!(saga.apply_at(&state, &reject_of("staging"), NOW).is_err());
    let (state, actions) = run(&saga, state, &[reject_of("prod")]);
    assert_eq!(types(&actions), ["ReleaseRejected"]);
    assert_eq!(state.phase, ReleasePhase::Rejected);
}

#[test]
fn only_the_timeout_the_saga_waits_on_counts() {
    let saga = ReleaseSaga::new(policy(&["prod"], &[]));
    let state = planned(&saga);
    let Message::ReleaseApprovalTimeout(real) = pending_timeout(&state) else {
        unreachable!()
    };
    // A forged timeout: the right release and environment, a deadline in
    // the past instead of the one scheduled.
    let forged = ReleaseApprovalTimeout {
        deadline: real.deadline - time::Duration::days(2),
        ..real.clone()
    };
    let (after, actions) = run(&saga, state.clone(), &[forged.into()]);
    assert_eq!(actions, []);
    assert_eq!(after, state, "a forged timeout changes nothing");
    assert_eq!(after.phase, ReleasePhase::AwaitingApproval);

    let (after, actions) = run(&saga, after, &[real.into()]);
    assert_eq!(types(&actions), ["ReleaseRejected"]);
    assert_eq!(after.phase, ReleasePhase::Rejected);
}

#[test]
fn the_approver_recorded_is_the_authenticated_caller() {
    let saga = ReleaseSaga::new(policy(&["prod"], &[]));
    let mallory = ApproveRelease {
        on_behalf_of: Some("mallory".to_owned()),
        approved_by: None,
        ..samples::approve_release()
    };
    let err = saga
        .apply_at(&planned(&saga), &mallory.clone().into(), NOW)
        .unwrap_err();
    assert!(err.to_string().contains("approvedBy"), "{err}");

    let signed = ApproveRelease {
        approved_by: Some("key:0123456789ab (release board)".to_owned()),
        ..mallory
    };
    let (state, actions) = run(&saga, planned(&saga), &[signed.into()]);
    let sent = sends(&actions);
    let Message::ReleaseApproved(approved) = &sent[0] else {
        panic!("expected ReleaseApproved, got {sent:?}");
    };
    assert_eq!(approved.approver, "key:0123456789ab (release board)");
    let record = &state.approvals["prod"];
    assert_eq!(record.approver, "key:0123456789ab (release board)");
    assert_eq!(record.note.as_deref(), Some("mallory"));
    assert!(
        state.history.iter().any(|entry| entry
            .note
            .contains("approved by key:0123456789ab (release board) (as \"mallory\")")),
        "{:?}",
        state.history
    );

    let unsigned = RejectRelease {
        rejected_by: None,
        ..samples::reject_release()
    };
    assert!(saga.apply_at(&planned(&saga), &unsigned.into(), NOW).is_err());
}

#[test]
fn a_timeout_after_the_approval_is_ignored() {
    let saga = ReleaseSaga::new(policy(&["prod"], &[]));
    let (state, _) = run(&saga, planned(&saga), &[approve("prod")]);
    let transition = saga.apply_at(&state, &timeout("prod"), NOW).unwrap();
    assert_eq!(transition.actions, []);
    assert_eq!(transition.state, state);
}

#[test]
fn a_timeout_for_an_environment_not_waited_on_is_ignored() {
    let saga = three_environments();
    let state = planned(&saga);
    let (_, actions) = run(&saga, state, &[timeout("staging"), timeout("prod")]);
    assert_eq!(actions, []);
}

#[test]
fn reject_release_stops_the_release() {
    let saga = ReleaseSaga::new(policy(&["prod"], &[]));
    let (state, actions) = run(&saga, planned(&saga), &[reject()]);
    let expected = ReleaseRejected {
        rejected_at: NOW,
        ..samples::release_rejected()
    };
    assert_eq!(actions, [Action::Send(expected.into())]);
    assert_eq!(state.phase, ReleasePhase::Rejected);
    let (_, actions) = run(&saga, state, &[reject(), timeout("prod"), synced("prod")]);
    assert_eq!(actions, []);
}

#[test]
fn a_release_can_be_rejected_before_it_is_planned_or_while_blocked() {
    let saga = ReleaseSaga::default();
    // A rejection of the whole release (no environment).
    let reject = || -> Message {
        RejectRelease {
            environment: None,
            ..samples::reject_release()
        }
        .into()
    };
    let (state, actions) = run(&saga, ReleaseState::default(), &[reject()]);
    assert_eq!(types(&actions), ["ReleaseRejected"]);
    let (_, actions) = run(&saga, state, &[build(), image(), package()]);
    assert_eq!(actions, []);

    let (state, _) = run(&saga, ReleaseState::default(), &[failed_build("build-1")]);
    let (state, actions) = run(&saga, state, &[reject()]);
    assert_eq!(types(&actions), ["ReleaseRejected"]);
    assert_eq!(state.phase, ReleasePhase::Rejected);
}

#[test]
fn an_approval_before_the_plan_is_used_when_the_plan_is_ready() {
    let saga = ReleaseSaga::new(policy(&["prod"], &[]));
    let (state, actions) = run(&saga, ReleaseState::default(), &[approve("prod")]);
    assert_eq!(actions, []);
    assert_eq!(state.approvals_given["prod"].len(), 1, "{state:#?}");
    let (_, actions) = run(&saga, state, &[build(), image(), package()]);
    assert_eq!(
        actions,
        [
            Action::Send(expected_plan(&saga).into()),
            Action::Send(approved_by_alice("prod")),
        ]
    );
}

#[test]
fn an_approval_for_an_environment_off_the_path_is_refused() {
    let saga = three_environments();
    let err = saga
        .apply_at(&ReleaseState::default(), &approve("prdo"), NOW)
        .unwrap_err();
    assert!(
        matches!(&err, SagaError::Rejected { message_type, reason }
            if message_type == "ApproveRelease" && reason.contains("prdo") && reason.contains("dev, staging, prod")),
        "{err}"
    );
}

#[test]
fn a_persons_approval_of_an_auto_approved_environment_adds_nothing() {
    let saga = ReleaseSaga::default();
    let (state, actions) = run(&saga, ReleaseState::default(), &[approve("dev")]);
    assert_eq!(actions, []);
    assert_eq!(state, ReleaseState::default());
    let (_, actions) = run(&saga, state, &[build(), image(), package()]);
    assert_eq!(actions[1], Action::Send(auto_approved("dev")));
}

// --- promotion and sync -------------------------------------------

#[test]
fn infrastructure_after_the_approval_promotes_once() {
    let saga = ReleaseSaga::default();
    let (state, actions) = run(&saga, planned(&saga), &[provisioned("dev")]);
    assert_eq!(actions, [Action::Send(promoted("dev", AUTO_APPROVER))]);
    let sent = sends(&actions);
    assert_eq!(sent[0].validate(), Ok(()));
    let Message::DeploymentPromoted(promotion) = &sent[0] else {
        panic!("expected DeploymentPromoted");
    };
    assert!(desired_commit_pending(promotion));
    let (_, actions) = run(&saga, state, &[provisioned("dev"), image(), approve("dev")]);
    assert_eq!(actions, []);
}

#[test]
fn a_preview_or_another_releases_infrastructure_does_not_promote() {
    let saga = ReleaseSaga::default();
    let preview = InfrastructureProvisioned {
        preview_only: true,
        environment: "dev".to_owned(),
        ..samples::infrastructure_provisioned()
    };
    let other = InfrastructureProvisioned {
        release_id: Some(OTHER_RELEASE.to_owned()),
        environment: "dev".to_owned(),
        ..samples::infrastructure_provisioned()
    };
    let state = planned(&saga);
    let (after, actions) = run(&saga, state.clone(), &[preview.into(), other.into()]);
    assert_eq!(actions, []);
    assert_eq!(after, state);
}

#[test]
fn infrastructure_before_the_approval_promotes_right_after_it() {
    let saga = ReleaseSaga::new(policy(&["prod"], &[]));
    let (state, actions) = run(&saga, planned(&saga), &[provisioned("prod")]);
    assert_eq!(actions, []);
    let (_, actions) = run(&saga, state, &[approve("prod")]);
    assert_eq!(
        actions,
        [
            Action::Send(approved_by_alice("prod")),
            Action::Send(promoted("prod", &approving_key())),
        ]
    );
}

#[test]
fn a_healthy_sync_completes_a_single_environment_release() {
    let saga = ReleaseSaga::default();
    let (state, _) = run(&saga, planned(&saga), &[provisioned("dev")]);
    let (state, actions) = run(&saga, state, &[synced("dev")]);
    assert_eq!(types(&actions), ["ReleaseVerified"]);
    assert_eq!(state.phase, ReleasePhase::Completed);
    assert!(state.is_finished());
    assert_eq!(state.deployed, ["dev"]);
    assert_eq!(state.current_environment, None);

    // A rejection of a completed release is refused; the rest is ignored.
    let err = saga.apply_at(&state, &reject(), NOW).unwrap_err();
    assert!(err.to_string().contains("already completed"), "{err}");
    let (_, actions) = run(&saga, state, &[synced("dev"), provisioned("dev"), build()]);
    assert_eq!(actions, []);
}

#[test]
fn a_sync_of_the_next_environment_moves_on_along_the_path() {
    let saga = three_environments();
    let (state, actions) = run(&saga, planned(&saga), &[provisioned("dev"), synced("dev")]);
    assert_eq!(
        actions[2..],
        [approval_timeout_of("staging", DEFAULT_APPROVAL_TIMEOUT)],
        "{:?}",
        types(&actions)
    );
    assert_eq!(state.phase, ReleasePhase::AwaitingApproval);
    assert_eq!(state.current_environment.as_deref(), Some("staging"));

    let auto_staging = ReleaseSaga::new(policy(&["dev", "staging"], &["dev", "staging"]));
    let (_, actions) = run(
        &auto_staging,
        planned(&auto_staging),
        &[provisioned("dev"), synced("dev")],
    );
    assert_eq!(actions[2], Action::Send(auto_approved("staging")));
}

#[test]
fn a_sync_reported_early_counts_once_promoted() {
    let saga = ReleaseSaga::default();
    let (state, actions) = run(&saga, planned(&saga), &[synced("dev")]);
    assert_eq!(actions, []);
    assert_eq!(state.phase, ReleasePhase::Provisioning);
    let (state, actions) = run(&saga, state, &[provisioned("dev")]);
    assert_eq!(types(&actions), ["DeploymentPromoted", "ReleaseVerified"]);
    assert_eq!(state.phase, ReleasePhase::Completed);
}

#[test]
fn an_unhealthy_sync_blocks_once_until_a_healthy_one() {
    let saga = ReleaseSaga::default();
    let unhealthy = GitOpsSynced {
        healthy: false,
        environment: "dev".to_owned(),
        ..samples::gitops_synced()
    };
    let (state, actions) = run(
        &saga,
        planned(&saga),
        &[provisioned("dev"), unhealthy.clone().into(), unhealthy.into()],
    );
    let sent = sends(&actions);
    assert!(
        matches!(&sent[1..], [Message::ReleaseBlocked(blocked)]
            if blocked.failing_step == ReleaseStep::Sync && blocked.environment.as_deref() == Some("dev")),
        "{sent:?}"
    );
    assert_eq!(state.phase, ReleasePhase::Syncing);
    let (state, actions) = run(&saga, state, &[synced("dev")]);
    assert_eq!(types(&actions), ["ReleaseVerified"]);
    assert_eq!(state.phase, ReleasePhase::Completed);
    assert_eq!(state.blocked, None);
}

#[test]
fn messages_of_another_release_change_nothing() {
    let saga = ReleaseSaga::default();
    let state = planned(&saga);
    let other_build = BuildCompleted {
        release_id: OTHER_RELEASE.to_owned(),
        ..samples::build_completed()
    };
    let other_approval = ApproveRelease {
        release_id: OTHER_RELEASE.to_owned(),
        ..samples::approve_release()
    };
    let other_reject = RejectRelease {
        release_id: OTHER_RELEASE.to_owned(),
        ..samples::reject_release()
    };
    let other_sync = GitOpsSynced {
        release_id: Some(OTHER_RELEASE.to_owned()),
        environment: "dev".to_owned(),
        ..samples::gitops_synced()
    };
    for message in [
        Message::from(other_build),
        other_approval.into(),
        other_reject.into(),
        other_sync.into(),
        samples::commit_created().into(),
    ] {
        let transition = saga.apply_at(&state, &message, NOW).unwrap();
        assert_eq!(transition.actions, [], "{}", message.message_type());
        assert_eq!(transition.state, state, "{}", message.message_type());
    }
}

#[test]
fn the_whole_path_through_three_environments() {
    let saga = three_environments();
    let (state, actions) = run(
        &saga,
        ReleaseState::default(),
        &[
            build(),
            image(),
            package(),
            provisioned("dev"),
            synced("dev"),
            approve("staging"),
            provisioned("staging"),
            synced("staging"),
            approve("prod"),
            provisioned("prod"),
            synced("prod"),
        ],
    );
    assert_eq!(
        types(&actions),
        [
            "ReleasePlanned",
            "ReleaseApproved",
            "DeploymentPromoted",
            "ReleaseVerified",
            "schedule ReleaseApprovalTimeout",
            "ReleaseApproved",
            "DeploymentPromoted",
            "ReleaseVerified",
            "schedule ReleaseApprovalTimeout",
            "ReleaseApproved",
            "DeploymentPromoted",
            "ReleaseVerified",
        ]
    );
    for message in sends(&actions) {
        assert_eq!(message.validate(), Ok(()), "{}", message.message_type());
    }
    assert_eq!(state.phase, ReleasePhase::Completed);
    assert_eq!(state.deployed, ["dev", "staging", "prod"]);
    assert_eq!(state.pending_timeout, None);
    let steps: Vec<_> = state.emitted.iter().map(String::as_str).collect();
    assert_eq!(
        steps,
        [
            "DeploymentPromoted/dev",
            "DeploymentPromoted/prod",
            "DeploymentPromoted/staging",
            "ReleaseApproved/dev",
            "ReleaseApproved/prod",
            "ReleaseApproved/staging",
            "ReleasePlanned",
            "ReleaseVerified/dev",
            "ReleaseVerified/prod",
            "ReleaseVerified/staging",
        ]
    );
    assert_eq!(state.history.len(), 11);
    assert!(state.history.iter().all(|entry| entry.at == NOW));
    assert_eq!(state.history[2].emitted, ["ReleasePlanned", "ReleaseApproved"]);
}

// --- time, persistence, diagram -----------------------------------

#[test]
fn apply_stamps_messages_with_the_time_they_carry() {
    let saga = ReleaseSaga::new(policy(&["prod"], &[]));
    let mut state = ReleaseState::default();
    let mut actions = Vec::new();
    for message in [build(), package(), image(), approve("prod")] {
        let transition = saga.apply(&state, &message).unwrap();
        state = transition.state;
        actions.extend(steps(transition.actions));
    }
    let pushed_at = samples::container_image_built().pushed_at;
    let sent = sends(&actions);
    let [Message::ReleasePlanned(plan), Message::ReleaseApproved(approved)] = &sent[..] else {
        panic!("unexpected {sent:?}");
    };
    assert_eq!(plan.planned_at, pushed_at);
    // ApproveRelease carries no time: the last step's time stands in.
    assert_eq!(approved.approved_at, pushed_at);
    assert_eq!(
        ReleaseSaga::time_of(&ReleaseState::default(), &reject()),
        OffsetDateTime::UNIX_EPOCH
    );
}

#[test]
fn the_state_round_trips_through_json() {
    let saga = three_environments();
    let (state, _) = run(
        &saga,
        ReleaseState::default(),
        &[build(), image(), package(), provisioned("dev")],
    );
    let json = serde_json::to_value(&state).unwrap();
    assert_eq!(json["phase"], "syncing");
    assert_eq!(json["releaseId"], RELEASE_ID);
    assert_eq!(json["history"][0]["messageType"], "BuildCompleted");
    let back: ReleaseState = serde_json::from_value(json).unwrap();
    assert_eq!(back, state);
    let empty: ReleaseState = serde_json::from_value(serde_json::json!({})).unwrap();
    assert_eq!(empty, ReleaseState::default());
}

#[test]
fn the_diagram_is_drawn_from_the_transitions() {
    let saga = three_environments();
    let diagram = saga.diagram();
    assert!(diagram.starts_with("stateDiagram-v2\n"), "{diagram}");
    assert!(diagram.contains("    [*] --> Collecting\n"), "{diagram}");
    for phase in ReleasePhase::ALL {
        assert!(diagram.contains(&format!("    {} : ", phase.name())), "{phase}");
    }
    for edge in TRANSITIONS {
        let line = format!("    {} --> {} : {}\n", edge.from.name(), edge.to.name(), edge.trigger);
        assert!(diagram.contains(&line), "{line}");
        assert!(
            !edge.trigger.contains(':') && !edge.trigger.contains(';'),
            "{}",
            edge.trigger
        );
    }
    assert!(diagram.contains("    Completed --> [*]\n"));
    assert!(diagram.contains("    Rejected --> [*]\n"));
    assert!(diagram.contains("promotion path dev then staging then prod"));
}

#[test]
fn every_phase_is_reachable_and_only_final_phases_are_dead_ends() {
    let mut reached = BTreeSet::from([ReleasePhase::Collecting]);
    loop {
        let before = reached.len();
        for edge in TRANSITIONS {
            if reached.contains(&edge.from) {
                reached.insert(edge.to);
            }
        }
        if reached.len() == before {
            break;
        }
    }
    assert_eq!(reached.len(), ReleasePhase::ALL.len());
    for phase in ReleasePhase::ALL {
        let leaves = TRANSITIONS.iter().any(|edge| edge.from == phase && edge.to != phase);
        assert_eq!(leaves, !phase.is_final(), "{phase}");
    }
}

// --- properties ---------------------------------------------------

/// What one action sends for which step: a step must never repeat.
fn step_of(action: &Action) -> String {
    let (prefix, message) = match action {
        Action::Send(message) => ("send", message),
        Action::Schedule { message, .. } => ("schedule", message),
    };
    let environment = match message {
        Message::ReleaseApproved(m) => m.environment.clone(),
        Message::DeploymentPromoted(m) => m.environment.clone(),
        Message::ReleaseVerified(m) => m.environment.clone(),
        Message::ReleaseApprovalTimeout(m) => m.environment.clone(),
        Message::ReleaseBlocked(m) => format!("{:?}/{:?}", m.failing_step, m.environment),
        _ => String::new(),
    };
    format!("{prefix} {} {environment}", message.message_type())
}

/// Governance and no-duplicate checks over every action of a run.
fn assert_safe(actions: &[Action]) {
    let mut approved = BTreeSet::new();
    let mut steps = BTreeSet::new();
    let mut stopped = false;
    for action in actions {
        assert!(steps.insert(step_of(action)), "emitted twice: {}", step_of(action));
        if let Action::Send(message) = action {
            assert!(!stopped, "{} sent after the release stopped", message.message_type());
            match message {
                Message::ReleaseApproved(m) => {
                    approved.insert(m.environment.clone());
                }
                Message::DeploymentPromoted(m) => {
                    assert!(
                        approved.contains(&m.environment),
                        "promoted {} unapproved",
                        m.environment
                    );
                }
                Message::ReleaseRejected(_) => stopped = true,
                _ => {}
            }
            assert_eq!(message.validate(), Ok(()), "{}", message.message_type());
        }
    }
}

/// Applies messages as the runtime would to the saga of [`RELEASE_ID`]:
/// messages keyed to another saga go there, the state is persisted as
/// JSON between messages, and a refused message leaves it as it was.
fn run_persisted(saga: &ReleaseSaga, messages: &[Message]) -> (ReleaseState, Vec<Action>) {
    let mut stored = serde_json::to_value(ReleaseState::default()).unwrap();
    let mut actions = Vec::new();
    for message in messages {
        if saga.key_of(message).as_deref() != Some(RELEASE_ID) {
            continue;
        }
        let state: ReleaseState = serde_json::from_value(stored.clone()).unwrap();
        match saga.apply_at(&state, message, NOW) {
            Ok(transition) => {
                stored = serde_json::to_value(&transition.state).unwrap();
                actions.extend(steps(transition.actions));
            }
            Err(SagaError::Rejected { message_type, .. }) => {
                assert!(
                    matches!(message_type.as_str(), "ApproveRelease" | "RejectRelease"),
                    "{message_type} refused"
                );
            }
            Err(err) => panic!("{err}"),
        }
    }
    (serde_json::from_value(stored).unwrap(), actions)
}

/// Everything of a state but its history (the order of arrival).
fn without_history(state: &ReleaseState) -> ReleaseState {
    ReleaseState {
        history: Vec::new(),
        ..state.clone()
    }
}

fn happy_inputs() -> Vec<Message> {
    vec![
        build(),
        image(),
        package(),
        approve("staging"),
        approve("prod"),
        provisioned("dev"),
        provisioned("staging"),
        provisioned("prod"),
        synced("dev"),
        synced("staging"),
        synced("prod"),
    ]
}

fn disruptive_inputs() -> Vec<Message> {
    let mut inputs = happy_inputs();
    inputs.extend([
        failed_build("build-4710"),
        timeout("staging"),
        timeout("prod"),
        reject(),
        approve("prdo"),
        GitOpsSynced {
            healthy: false,
            environment: "staging".to_owned(),
            ..samples::gitops_synced()
        }
        .into(),
        BuildCompleted {
            release_id: OTHER_RELEASE.to_owned(),
            ..samples::build_completed()
        }
        .into(),
        samples::release_approved().into(),
    ]);
    inputs
}

/// Every input at least once, some more than once, in any order.
fn deliveries(count: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..count, 0..count * 2).prop_flat_map(move |extra| {
        let mut all: Vec<usize> = (0..count).collect();
        all.extend(extra);
        Just(all).prop_shuffle()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_order_and_duplication_reach_the_same_completed_release(order in deliveries(happy_inputs().len())) {
        let saga = three_environments();
        let inputs = happy_inputs();
        let (expected, _) = run_persisted(&saga, &inputs);
        prop_assert_eq!(expected.phase, ReleasePhase::Completed);

        let delivered: Vec<Message> = order.iter().map(|&index| inputs[index].clone()).collect();
        let (state, actions) = run_persisted(&saga, &delivered);
        assert_safe(&actions);
        prop_assert_eq!(without_history(&state), without_history(&expected));
        let promotions = sends(&actions)
            .iter()
            .filter(|message| matches!(message, Message::DeploymentPromoted(_)))
            .count();
        prop_assert_eq!(promotions, 3);
    }

    #[test]
    fn rejections_failures_and_timeouts_never_break_governance(order in deliveries(disruptive_inputs().len())) {
        let saga = three_environments();
        let inputs = disruptive_inputs();
        let delivered: Vec<Message> = order.iter().map(|&index| inputs[index].clone()).collect();
        let (state, actions) = run_persisted(&saga, &delivered);
        assert_safe(&actions);
        // The rejection is always delivered, and only a completed release
        // refuses it.
        prop_assert!(matches!(state.phase, ReleasePhase::Rejected | ReleasePhase::Completed), "{:?}", state.phase);
        for environment in &state.deployed {
            prop_assert!(state.approvals.contains_key(environment));
        }
    }
}

#[test]
fn the_machine_as_data_has_every_phase_and_edge_and_finds_a_demo_release_path() {
    let machine = super::machine();
    assert_eq!(machine.states.len(), ReleasePhase::ALL.len());
    assert_eq!(machine.transitions.len(), TRANSITIONS.len());
    for transition in &machine.transitions {
        assert!(
            machine.states.iter().any(|s| s.value == transition.from),
            "{transition:?}"
        );
        assert!(
            machine.states.iter().any(|s| s.value == transition.to),
            "{transition:?}"
        );
        assert!(!transition.triggers.is_empty(), "{transition:?}");
    }
    // The state's `phase` serialises as the states' values.
    for phase in ReleasePhase::ALL {
        assert_eq!(serde_json::to_value(phase).unwrap(), phase.value());
    }
    // A dev release auto-approved: collected, provisioned, synced.
    let history = [
        "BuildCompleted",
        "ContainerImageBuilt",
        "PackagePublished",
        "InfrastructureProvisioned",
        "GitOpsSynced",
    ];
    let path = machine.path(&history, "completed").unwrap();
    let moves: Vec<(&str, &str)> = path.iter().filter(|s| s.from != s.to).map(|s| (s.from, s.to)).collect();
    assert_eq!(
        moves,
        [
            ("collecting", "provisioning"),
            ("provisioning", "syncing"),
            ("syncing", "completed")
        ]
    );
}
