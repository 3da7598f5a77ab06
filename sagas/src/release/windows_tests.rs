//! Promotion windows and holds: the gate alone (deny, allow, time zones,
//! holds), and in the release saga (a promotion waits and goes when the
//! gate opens or is overridden), one by one and as a property over any
//! window and any time.

use std::collections::BTreeMap;

use bosun_contracts::Message;
use bosun_contracts::messages::{InfrastructureProvisioned, OverrideReleaseWindow, ReleaseWindowCheck};
use bosun_contracts::samples;
use proptest::prelude::*;
use time::macros::datetime;

use super::*;
use crate::Action;

/// A Friday, 17:00 UTC (18:00 in Berlin, winter time).
const FRIDAY_5PM: OffsetDateTime = datetime!(2026-12-04 17:00:00 UTC);

const AGENT: &str = "key:0a0a0a0a0a0a";

fn window(name: &str, kind: WindowKind, schedule: &str, seconds: u64, zone: &str) -> PromotionWindow {
    PromotionWindow {
        name: name.to_owned(),
        kind,
        environments: Vec::new(),
        schedule: schedule.to_owned(),
        duration_seconds: seconds,
        time_zone: zone.to_owned(),
    }
}

/// The weekend freeze: from Friday 18:00 Berlin time for 62 hours.
fn weekend_freeze() -> PromotionWindow {
    window(
        "weekend-freeze",
        WindowKind::Deny,
        "0 18 * * FRI",
        62 * 3600,
        "Europe/Berlin",
    )
}

fn policy_with(windows: Vec<PromotionWindow>, holds: BTreeMap<String, Hold>) -> ApprovalPolicy {
    let policy = ApprovalPolicy {
        windows,
        holds,
        ..ApprovalPolicy::default()
    };
    policy.validate().unwrap();
    policy
}

#[test]
fn a_deny_window_closes_the_gate_until_it_ends_in_its_time_zone() {
    let policy = policy_with(vec![weekend_freeze()], BTreeMap::new());
    // 17:59 Berlin: still open.
    assert_eq!(policy.promotion_gate("prod", datetime!(2026-12-04 16:59:59 UTC)), None);
    let closure = policy.promotion_gate("prod", FRIDAY_5PM).unwrap();
    assert_eq!(closure.rule, WindowRule::DenyWindow);
    assert_eq!(closure.window.as_deref(), Some("weekend-freeze"));
    // Monday 08:00 Berlin is 07:00 UTC.
    assert_eq!(closure.until, Some(datetime!(2026-12-07 07:00:00 UTC)));
    assert_eq!(policy.promotion_gate("prod", datetime!(2026-12-07 07:00:00 UTC)), None);
    // In summer Berlin is UTC+2: the freeze starts at 16:00 UTC.
    assert!(
        policy
            .promotion_gate("prod", datetime!(2026-07-03 16:00:00 UTC))
            .is_some()
    );
    assert_eq!(policy.promotion_gate("prod", datetime!(2026-07-03 15:59:00 UTC)), None);
}

#[test]
fn allow_windows_open_the_gate_only_while_one_is_open_and_deny_wins() {
    let business_hours = PromotionWindow {
        environments: vec!["prod".to_owned()],
        ..window("business-hours", WindowKind::Allow, "0 9 * * MON-FRI", 8 * 3600, "UTC")
    };
    let policy = policy_with(vec![business_hours.clone()], BTreeMap::new());
    // Other environments are not limited.
    assert_eq!(policy.promotion_gate("dev", datetime!(2026-12-05 03:00:00 UTC)), None);
    let closure = policy
        .promotion_gate("prod", datetime!(2026-12-05 03:00:00 UTC))
        .unwrap();
    assert_eq!(closure.rule, WindowRule::AllowWindow);
    // Saturday 03:00: the next opening is Monday 09:00.
    assert_eq!(closure.until, Some(datetime!(2026-12-07 09:00:00 UTC)));
    assert_eq!(policy.promotion_gate("prod", datetime!(2026-12-07 10:00:00 UTC)), None);
    // A freeze over Monday morning pushes the opening to its end.
    let monday_freeze = window("monday-freeze", WindowKind::Deny, "0 8 7 12 *", 3 * 3600, "UTC");
    let policy = policy_with(vec![business_hours, monday_freeze], BTreeMap::new());
    let closure = policy
        .promotion_gate("prod", datetime!(2026-12-05 03:00:00 UTC))
        .unwrap();
    assert_eq!(closure.until, Some(datetime!(2026-12-07 11:00:00 UTC)));
    let closure = policy
        .promotion_gate("prod", datetime!(2026-12-07 09:30:00 UTC))
        .unwrap();
    assert_eq!(closure.rule, WindowRule::DenyWindow);
}

#[test]
fn a_hold_closes_one_environment_until_lifted_or_its_end() {
    let holds = BTreeMap::from([(
        "prod".to_owned(),
        Hold {
            reason: "incident INC-42".to_owned(),
            until: None,
        },
    )]);
    let policy = policy_with(Vec::new(), holds);
    assert_eq!(policy.promotion_gate("dev", FRIDAY_5PM), None);
    let closure = policy.promotion_gate("prod", FRIDAY_5PM).unwrap();
    assert_eq!(closure.rule, WindowRule::Hold);
    assert_eq!(closure.until, None);
    assert!(closure.reason.contains("INC-42"), "{}", closure.reason);
    let ends = BTreeMap::from([(
        "prod".to_owned(),
        Hold {
            reason: "until the fix".to_owned(),
            until: Some(FRIDAY_5PM + time::Duration::HOUR),
        },
    )]);
    // A hold ending inside the freeze opens when the freeze does.
    let policy = policy_with(vec![weekend_freeze()], ends);
    let closure = policy
        .promotion_gate("prod", FRIDAY_5PM - time::Duration::HOUR)
        .unwrap();
    assert_eq!(closure.rule, WindowRule::Hold);
    assert_eq!(closure.until, Some(datetime!(2026-12-07 07:00:00 UTC)));
    assert_eq!(policy.promotion_gate("prod", datetime!(2026-12-07 07:00:00 UTC)), None);
}

#[test]
fn windows_are_validated_naming_the_field() {
    let document = |window: serde_json::Value| serde_json::json!({ "windows": [window] });
    let cases = [
        (
            serde_json::json!({"name": "f", "kind": "deny", "schedule": "not cron", "durationSeconds": 60}),
            "windows[0].schedule",
        ),
        (
            serde_json::json!({"name": "f", "kind": "deny", "schedule": "0 18 * * FRI", "durationSeconds": 60, "timeZone": "Mars/Olympus"}),
            "windows[0].timeZone",
        ),
        (
            serde_json::json!({"name": "f", "kind": "deny", "schedule": "0 18 * * FRI", "durationSeconds": 0}),
            "windows[0].durationSeconds",
        ),
        (
            serde_json::json!({"name": "f", "kind": "deny", "schedule": "0 0 31 2 *", "durationSeconds": 60}),
            "windows[0].schedule",
        ),
        (
            serde_json::json!({"name": "f", "kind": "sometimes", "schedule": "0 18 * * FRI", "durationSeconds": 60}),
            "windows[0].kind",
        ),
        (
            serde_json::json!({"name": "f", "kind": "deny", "environments": ["Prod!"], "schedule": "0 18 * * FRI", "durationSeconds": 60}),
            "windows[0].environments[0]",
        ),
    ];
    for (bad, field) in cases {
        let err = ApprovalPolicy::from_document(&document(bad.clone())).unwrap_err();
        assert_eq!(err.field, field, "{bad}: {err:?}");
    }
    let err = ApprovalPolicy::from_document(&serde_json::json!({"holds": {"prod": {"reason": ""}}})).unwrap_err();
    assert_eq!(err.field, "holds.prod.reason");
}

/// dev on its own, prod by a person; `approval` the tenant's policy.
fn saga(approval: ApprovalPolicy) -> ReleaseSaga {
    let policy = ReleasePolicy {
        environments: vec!["dev".to_owned(), "prod".to_owned()],
        auto_approve: vec!["dev".to_owned()],
        approval,
        approval_version: Some(7),
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

fn run_at(
    saga: &ReleaseSaga,
    state: ReleaseState,
    messages: &[Message],
    at: OffsetDateTime,
) -> (ReleaseState, Vec<Action>) {
    let mut state = state;
    let mut actions = Vec::new();
    for message in messages {
        let transition = saga.apply_with(&state, message, at, &[AGENT.to_owned()]).unwrap();
        state = transition.state;
        actions.extend(transition.actions);
    }
    (state, actions)
}

fn promoted_to(actions: &[Action], environment: &str) -> bool {
    actions
        .iter()
        .any(|action| matches!(action, Action::Send(Message::DeploymentPromoted(p)) if p.environment == environment))
}

fn scheduled_checks(actions: &[Action]) -> Vec<(ReleaseWindowCheck, std::time::Duration)> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Schedule {
                message: Message::ReleaseWindowCheck(check),
                after,
            } => Some((check.clone(), *after)),
            _ => None,
        })
        .collect()
}

/// Built, its artifacts in, dev approved on its own and provisioned at `at`.
fn provisioned_dev_at(saga: &ReleaseSaga, at: OffsetDateTime) -> (ReleaseState, Vec<Action>) {
    run_at(
        saga,
        ReleaseState::default(),
        &[
            samples::build_completed().into(),
            samples::container_image_built().into(),
            samples::package_published().into(),
            provisioned("dev"),
        ],
        at,
    )
}

fn override_of(environment: &str, by: &str) -> Message {
    OverrideReleaseWindow {
        release_id: samples::build_completed().release_id,
        environment: environment.to_owned(),
        reason: "hotfix for INC-42".to_owned(),
        on_behalf_of: None,
        overridden_by: Some(by.to_owned()),
        overrider_identities: vec![by.to_owned()],
    }
    .into()
}

#[test]
fn a_promotion_inside_a_deny_window_waits_and_goes_when_it_ends() {
    let saga = saga(policy_with(vec![weekend_freeze()], BTreeMap::new()));
    let (state, actions) = provisioned_dev_at(&saga, FRIDAY_5PM);
    assert!(!promoted_to(&actions, "dev"), "{actions:#?}");
    assert_eq!(state.phase, ReleasePhase::Provisioning);
    let wait = state.window_wait.clone().unwrap();
    assert_eq!(wait.environment, "dev");
    assert_eq!(wait.rule, WindowRule::DenyWindow);
    assert_eq!(wait.until, Some(datetime!(2026-12-07 07:00:00 UTC)));
    assert_eq!(wait.policy_version, Some(7));
    let checks = scheduled_checks(&actions);
    assert_eq!(checks.len(), 1, "{actions:#?}");
    let (check, after) = checks[0].clone();
    assert_eq!(check.check_at, datetime!(2026-12-07 07:00:00 UTC));
    assert_eq!(after, std::time::Duration::from_secs(62 * 3600));
    // The same provisioning again schedules nothing more.
    let (again, actions) = run_at(&saga, state.clone(), &[provisioned("dev")], FRIDAY_5PM);
    assert_eq!(again, state);
    assert!(actions.is_empty());
    // The check, whenever its envelope was written, looks at its own time.
    let (state, actions) = run_at(&saga, state, &[check.into()], FRIDAY_5PM);
    assert!(promoted_to(&actions, "dev"), "{actions:#?}");
    assert_eq!(state.phase, ReleasePhase::Syncing);
    assert_eq!(state.window_wait, None);
}

#[test]
fn an_override_lets_the_release_through_and_is_recorded() {
    let saga = saga(policy_with(vec![weekend_freeze()], BTreeMap::new()));
    let (state, _) = provisioned_dev_at(&saga, FRIDAY_5PM);
    // Who requested the release cannot override its windows.
    let refused = saga
        .apply_with(&state, &override_of("dev", AGENT), FRIDAY_5PM, &[])
        .unwrap_err();
    assert!(refused.to_string().contains("requester-cannot-approve"), "{refused}");
    let (state, actions) = run_at(&saga, state, &[override_of("dev", "cli:alice")], FRIDAY_5PM);
    assert!(promoted_to(&actions, "dev"), "{actions:#?}");
    let record = &state.overrides["dev"];
    assert_eq!(record.by, "cli:alice");
    assert_eq!(record.reason, "hotfix for INC-42");
    assert!(
        state
            .history
            .iter()
            .any(|entry| entry.note.contains("overridden by cli:alice")),
        "{:#?}",
        state.history
    );
    // An environment the release does not go to cannot be overridden.
    assert!(
        saga.apply_with(&state, &override_of("qa", "cli:alice"), FRIDAY_5PM, &[])
            .is_err()
    );
}

#[test]
fn a_hold_with_no_end_is_looked_at_again_every_few_minutes_and_a_stale_check_adds_none() {
    let holds = BTreeMap::from([(
        "dev".to_owned(),
        Hold {
            reason: "incident".to_owned(),
            until: None,
        },
    )]);
    let held = saga(policy_with(Vec::new(), holds));
    let (state, actions) = provisioned_dev_at(&held, FRIDAY_5PM);
    let checks = scheduled_checks(&actions);
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0].1, WINDOW_RECHECK);
    let wait = state.window_wait.clone().unwrap();
    assert_eq!((wait.rule, wait.until), (WindowRule::Hold, None));
    // A check that is not the one pending (an older one) schedules none.
    let stale = ReleaseWindowCheck {
        check_at: FRIDAY_5PM,
        ..checks[0].0.clone()
    };
    let (_, actions) = run_at(&held, state.clone(), &[stale.into()], FRIDAY_5PM);
    assert!(scheduled_checks(&actions).is_empty(), "{actions:#?}");
    // The pending check, still held: one more.
    let (state, actions) = run_at(&held, state, &[checks[0].0.clone().into()], FRIDAY_5PM);
    assert_eq!(scheduled_checks(&actions).len(), 1);
    assert_eq!(state.phase, ReleasePhase::Provisioning);
    // The hold lifted (the policy changed): the next check promotes.
    let lifted = saga(ApprovalPolicy::default());
    let pending = state.window_wait.clone().unwrap();
    let check = ReleaseWindowCheck {
        release_id: samples::build_completed().release_id,
        environment: "dev".to_owned(),
        check_at: pending.check_at,
    };
    let (state, actions) = run_at(&lifted, state, &[check.into()], FRIDAY_5PM);
    assert!(promoted_to(&actions, "dev"));
    assert_eq!(state.window_wait, None);
}

#[test]
fn a_hold_far_in_the_future_or_a_long_freeze_never_overflows() {
    let holds = BTreeMap::from([(
        "dev".to_owned(),
        Hold {
            reason: "until further notice".to_owned(),
            until: Some(datetime!(9999-12-31 23:59:59 UTC)),
        },
    )]);
    let policy = policy_with(
        vec![window("long", WindowKind::Deny, "0 0 1 1 *", MAX_WINDOW_SECONDS, "UTC")],
        holds,
    );
    let closure = policy.promotion_gate("dev", FRIDAY_5PM).unwrap();
    assert_eq!((closure.rule, closure.until), (WindowRule::Hold, None));
    assert!(
        policy
            .promotion_gate("dev", datetime!(9999-12-31 23:00:00 UTC))
            .is_some()
    );
    let held = saga(policy);
    let (state, actions) = provisioned_dev_at(&held, FRIDAY_5PM);
    assert_eq!(scheduled_checks(&actions)[0].1, WINDOW_RECHECK);
    assert_eq!(state.phase, ReleasePhase::Provisioning);
}

#[test]
fn looking_again_at_a_hold_leaves_no_trace_but_the_next_look() {
    let holds = BTreeMap::from([(
        "dev".to_owned(),
        Hold {
            reason: "x".repeat(3000),
            until: None,
        },
    )]);
    let held = saga(policy_with(Vec::new(), holds));
    let (mut state, actions) = provisioned_dev_at(&held, FRIDAY_5PM);
    let mut check = scheduled_checks(&actions)[0].0.clone();
    let history = state.history.len();
    let emitted = state.emitted.len();
    // A day of looks every five minutes.
    for _ in 0..288 {
        let (next, actions) = run_at(&held, state, &[check.clone().into()], check.check_at);
        let checks = scheduled_checks(&actions);
        assert_eq!(checks.len(), 1);
        check = checks[0].0.clone();
        state = next;
    }
    assert_eq!(state.history.len(), history, "{:#?}", &state.history[history..]);
    assert_eq!(state.emitted.len(), emitted);
    assert_eq!(state.window_wait.as_ref().unwrap().check_at, check.check_at);
    assert_eq!(state.window_wait.as_ref().unwrap().since, FRIDAY_5PM);
}

#[test]
fn the_gate_is_read_at_the_handling_hosts_clock_when_it_is_later() {
    let saga = saga(policy_with(vec![weekend_freeze()], BTreeMap::new()));
    let inputs: [Message; 4] = [
        samples::build_completed().into(),
        samples::container_image_built().into(),
        samples::package_published().into(),
        provisioned("dev"),
    ];
    // Provisioned just before the freeze, handled inside it: it waits.
    let occurred = FRIDAY_5PM - time::Duration::MINUTE;
    let mut state = ReleaseState::default();
    let mut actions = Vec::new();
    for message in &inputs {
        let transition = saga
            .apply_observed(&state, message, occurred, Some(FRIDAY_5PM), &[AGENT.to_owned()])
            .unwrap();
        state = transition.state;
        actions.extend(transition.actions);
    }
    assert!(!promoted_to(&actions, "dev"));
    assert_eq!(state.window_wait.as_ref().unwrap().rule, WindowRule::DenyWindow);
    // Its check, handled a little early by the host's clock: still waits.
    let check = scheduled_checks(&actions)[0].0.clone();
    let early = check.check_at - time::Duration::SECOND;
    let transition = saga
        .apply_observed(&state, &check.clone().into(), FRIDAY_5PM, Some(early), &[])
        .unwrap();
    assert!(!promoted_to(&transition.actions, "dev"));
    // On time, it goes.
    let transition = saga
        .apply_observed(&state, &check.clone().into(), FRIDAY_5PM, Some(check.check_at), &[])
        .unwrap();
    let promoted = transition
        .actions
        .iter()
        .find_map(|action| match action {
            Action::Send(Message::DeploymentPromoted(promoted)) => Some(promoted.clone()),
            _ => None,
        })
        .unwrap();
    // Stamped with when it was ready (the GitOps saga orders a module's
    // releases by it), not when the freeze let it through.
    assert_eq!(promoted.promoted_at, occurred);
}

#[test]
fn an_override_by_someone_later_known_as_a_requester_no_longer_counts() {
    let saga = saga(policy_with(vec![weekend_freeze()], BTreeMap::new()));
    // The override is given before the release knows who requested it.
    let mut state = ReleaseState::default();
    let transition = saga
        .apply_with(&state, &samples::build_completed().into(), FRIDAY_5PM, &[])
        .unwrap();
    state = transition.state;
    let transition = saga
        .apply_with(&state, &override_of("dev", "cli:dana"), FRIDAY_5PM, &[])
        .unwrap();
    state = transition.state;
    assert!(state.overrides.contains_key("dev"));
    // Then Dana's delivery brings the artifacts: she requested it.
    let mut actions = Vec::new();
    for message in [
        samples::container_image_built().into(),
        samples::package_published().into(),
        provisioned("dev"),
    ] {
        let transition = saga
            .apply_with(&state, &message, FRIDAY_5PM, &["cli:dana".to_owned()])
            .unwrap();
        state = transition.state;
        actions.extend(transition.actions);
    }
    assert!(!promoted_to(&actions, "dev"), "{actions:#?}");
    assert!(state.window_wait.is_some());
    assert!(!state.overrides.contains_key("dev"));
}

proptest! {
    /// Over any deny window and any time: nothing is promoted while the
    /// gate is closed, and the promotion happens at the check the saga
    /// scheduled, which is when the gate opens.
    #[test]
    fn nothing_promotes_inside_a_deny_window_without_an_override(
        hour in 0u32..24,
        weekday in 0u32..7,
        hours_open in 1u64..100,
        offset_minutes in 0i64..(14 * 24 * 60),
    ) {
        let freeze = window("freeze", WindowKind::Deny, &format!("0 {hour} * * {weekday}"), hours_open * 3600, "America/New_York");
        let policy = policy_with(vec![freeze], BTreeMap::new());
        let saga = saga(policy.clone());
        let at = FRIDAY_5PM + time::Duration::minutes(offset_minutes);
        let (state, actions) = provisioned_dev_at(&saga, at);
        match policy.promotion_gate("dev", at) {
            None => prop_assert!(promoted_to(&actions, "dev")),
            Some(closure) => {
                prop_assert!(!promoted_to(&actions, "dev"));
                let until = closure.until.unwrap();
                prop_assert!(until > at);
                prop_assert_eq!(policy.promotion_gate("dev", until), None);
                prop_assert!(policy.promotion_gate("dev", until - time::Duration::SECOND).is_some());
                let checks = scheduled_checks(&actions);
                prop_assert_eq!(checks.len(), 1);
                prop_assert_eq!(checks[0].0.check_at, until);
                // Checks that come early change nothing.
                let early = ReleaseWindowCheck { check_at: until - time::Duration::SECOND, ..checks[0].0.clone() };
                let (early_state, early_actions) = run_at(&saga, state.clone(), &[early.into()], at);
                prop_assert!(!promoted_to(&early_actions, "dev"));
                prop_assert_eq!(early_state.phase, ReleasePhase::Provisioning);
                let (_, actions) = run_at(&saga, state, &[checks[0].0.clone().into()], at);
                prop_assert!(promoted_to(&actions, "dev"));
            }
        }
    }
}
