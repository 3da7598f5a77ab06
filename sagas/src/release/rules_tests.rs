//! Approval policies in the release saga: N of M, groups, the requester,
//! comment patterns and expiry, one by one and as properties over any
//! sequence of approvals.

use std::collections::BTreeMap;

use bosun_contracts::Message;
use bosun_contracts::messages::ApproveRelease;
use bosun_contracts::samples;
use proptest::prelude::*;
use time::macros::datetime;

use super::*;
use crate::Action;

const NOW: OffsetDateTime = datetime!(2026-11-29 12:00:00 UTC);

/// The agent's key that fired the delivery, and the person who made it.
const AGENT: &str = "key:0a0a0a0a0a0a";
const SPONSOR: &str = "cli:dana";

fn requesters() -> Vec<String> {
    vec![AGENT.to_owned(), SPONSOR.to_owned()]
}

/// dev on its own, prod by two of the release board with a change ticket.
fn governed(expiry: Option<u64>) -> ReleaseSaga {
    let approval = ApprovalPolicy {
        groups: BTreeMap::from([(
            "release-board".to_owned(),
            vec![
                "cli:alice".to_owned(),
                "cli:bob".to_owned(),
                "cli:carol".to_owned(),
                SPONSOR.to_owned(),
            ],
        )]),
        environments: BTreeMap::from([(
            "prod".to_owned(),
            ApprovalRule {
                required_approvals: 2,
                approver_groups: vec!["release-board".to_owned()],
                expires_after_seconds: expiry,
                comment_pattern: Some("^CHG-[0-9]+".to_owned()),
            },
        )]),
        ..ApprovalPolicy::default()
    };
    let policy = ReleasePolicy {
        environments: vec!["dev".to_owned(), "prod".to_owned()],
        auto_approve: vec!["dev".to_owned()],
        approval,
        approval_version: Some(3),
        ..ReleasePolicy::default()
    };
    policy.validate().unwrap();
    ReleaseSaga::new(policy)
}

/// An approval of prod by `identities` (the first is the authenticated
/// caller), with `comment`.
fn approval(identities: &[&str], comment: Option<&str>) -> Message {
    ApproveRelease {
        environment: "prod".to_owned(),
        on_behalf_of: None,
        comment: comment.map(str::to_owned),
        approved_by: identities.first().map(|first| (*first).to_owned()),
        approver_identities: identities.iter().map(|identity| (*identity).to_owned()).collect(),
        ..samples::approve_release()
    }
    .into()
}

fn ticketed(identities: &[&str]) -> Message {
    approval(identities, Some("CHG-1234 approved by CAB"))
}

/// Applies `messages` from `state` at `at`, with the delivery's requesters.
fn run_at(
    saga: &ReleaseSaga,
    state: ReleaseState,
    messages: &[Message],
    at: OffsetDateTime,
) -> (ReleaseState, Vec<Action>) {
    let mut state = state;
    let mut actions = Vec::new();
    for message in messages {
        let transition = saga.apply_with(&state, message, at, &requesters()).unwrap();
        state = transition.state;
        actions.extend(transition.actions);
    }
    (state, actions)
}

fn run(saga: &ReleaseSaga, state: ReleaseState, messages: &[Message]) -> (ReleaseState, Vec<Action>) {
    run_at(saga, state, messages, NOW)
}

/// After the build: its artifacts, then dev provisioned and synced.
fn artifacts_and_dev() -> Vec<Message> {
    vec![
        samples::container_image_built().into(),
        samples::package_published().into(),
        bosun_contracts::messages::InfrastructureProvisioned {
            environment: "dev".to_owned(),
            ..samples::infrastructure_provisioned()
        }
        .into(),
        bosun_contracts::messages::GitOpsSynced {
            environment: "dev".to_owned(),
            ..samples::gitops_synced()
        }
        .into(),
    ]
}

/// The release deployed to dev and waiting for prod's approval.
fn waiting_for_prod(saga: &ReleaseSaga) -> ReleaseState {
    let mut inputs: Vec<Message> = vec![samples::build_completed().into()];
    inputs.extend(artifacts_and_dev());
    let (state, _) = run(saga, ReleaseState::default(), &inputs);
    assert_eq!(state.phase, ReleasePhase::AwaitingApproval, "{state:#?}");
    assert_eq!(state.current_environment.as_deref(), Some("prod"));
    state
}

fn approved(actions: &[Action]) -> Vec<bosun_contracts::messages::ReleaseApproved> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Send(Message::ReleaseApproved(approved)) if approved.environment == "prod" => {
                Some(approved.clone())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn the_release_records_who_requested_it_from_the_delivery() {
    let saga = governed(None);
    let state = waiting_for_prod(&saga);
    assert_eq!(state.requested_by, requesters());
    let waiting = state.waiting_for.as_ref().unwrap();
    assert_eq!(waiting.required, 2);
    assert_eq!(waiting.still_needed, 2);
    assert_eq!(waiting.approver_groups, ["release-board"]);
    assert_eq!(waiting.excluded, requesters());
    assert_eq!(waiting.policy_version, Some(3));
}

#[test]
fn the_agent_and_its_sponsor_never_approve_what_the_agent_asked_for() {
    let saga = governed(None);
    let state = waiting_for_prod(&saga);
    // The agent's own key; the sponsor through the command line; another
    // key the sponsor made (its identities name the sponsor).
    for identities in [&[AGENT][..], &[SPONSOR], &["key:0b0b0b0b0b0b", SPONSOR]] {
        let (after, actions) = run(&saga, state.clone(), &[ticketed(identities)]);
        assert!(approved(&actions).is_empty(), "{identities:?}");
        let refused = after.refused_approvals.last().unwrap();
        assert_eq!(refused.rule, Rule::RequesterCannotApprove, "{identities:?}");
        assert_eq!(refused.policy_version, Some(3));
        assert!(after.approvals_given.is_empty());
        assert!(after.history.last().unwrap().note.contains("requester-cannot-approve"));
    }
}

#[test]
fn two_of_three_approve_and_the_approval_names_both() {
    let saga = governed(None);
    let state = waiting_for_prod(&saga);
    let (state, actions) = run(&saga, state, &[ticketed(&["cli:alice"])]);
    assert!(approved(&actions).is_empty());
    let waiting = state.waiting_for.as_ref().unwrap();
    assert_eq!(
        (waiting.approved_by.as_slice(), waiting.still_needed),
        (&["cli:alice".to_owned()][..], 1)
    );
    // Alice again, through a key she sponsors: the same person, not counted.
    let (state, actions) = run(&saga, state, &[ticketed(&["key:0c0c0c0c0c0c", "cli:alice"])]);
    assert!(approved(&actions).is_empty());
    assert_eq!(state.waiting_for.as_ref().unwrap().still_needed, 1);
    let (state, actions) = run(&saga, state, &[ticketed(&["cli:bob"])]);
    let approvals = approved(&actions);
    assert_eq!(approvals.len(), 1, "{actions:?}");
    assert_eq!(approvals[0].approver, "cli:bob");
    assert_eq!(approvals[0].approvers, ["cli:alice", "cli:bob"]);
    assert_eq!(state.phase, ReleasePhase::Provisioning);
    assert!(state.waiting_for.is_none());
    assert_eq!(state.approvals["prod"].approvers, ["cli:alice", "cli:bob"]);
}

#[test]
fn outsiders_and_approvals_without_the_ticket_are_refused_with_the_rule_named() {
    let saga = governed(None);
    let state = waiting_for_prod(&saga);
    let (state, _) = run(
        &saga,
        state,
        &[
            ticketed(&["cli:mallory"]),
            approval(&["cli:alice"], Some("looks fine")),
            approval(&["cli:bob"], None),
        ],
    );
    let rules: Vec<Rule> = state.refused_approvals.iter().map(|refused| refused.rule).collect();
    assert_eq!(rules, [Rule::ApproverGroup, Rule::CommentPattern, Rule::CommentPattern]);
    assert_eq!(state.waiting_for.as_ref().unwrap().still_needed, 2);
}

#[test]
fn an_expired_approval_no_longer_counts() {
    let saga = governed(Some(3600));
    let state = waiting_for_prod(&saga);
    let (state, _) = run(&saga, state, &[ticketed(&["cli:alice"])]);
    // Bob approves two hours later: Alice's approval has expired.
    let later = NOW + time::Duration::hours(2);
    let (state, actions) = run_at(&saga, state, &[ticketed(&["cli:bob"])], later);
    assert!(approved(&actions).is_empty(), "{actions:?}");
    let waiting = state.waiting_for.as_ref().unwrap();
    assert_eq!(waiting.approved_by, ["cli:bob"]);
    assert!(
        state.history.last().unwrap().note.contains("expired"),
        "{:?}",
        state.history.last()
    );
    // Carol within the hour: approved.
    let (_, actions) = run_at(
        &saga,
        state,
        &[ticketed(&["cli:carol"])],
        later + time::Duration::minutes(10),
    );
    assert_eq!(approved(&actions)[0].approvers, ["cli:bob", "cli:carol"]);
}

#[test]
fn approvals_given_ahead_of_time_count_when_the_release_gets_there() {
    let saga = governed(None);
    let (state, _) = run(
        &saga,
        ReleaseState::default(),
        &[
            samples::build_completed().into(),
            ticketed(&["cli:alice"]),
            ticketed(&["cli:carol"]),
        ],
    );
    assert_eq!(state.approvals_given["prod"].len(), 2);
    let (state, actions) = run(&saga, state, &artifacts_and_dev());
    assert_eq!(approved(&actions)[0].approvers, ["cli:alice", "cli:carol"]);
    assert_eq!(state.phase, ReleasePhase::Provisioning);
}

#[test]
fn the_default_policy_still_keeps_the_requester_out() {
    let saga = ReleaseSaga::new(ReleasePolicy {
        environments: vec!["prod".to_owned()],
        auto_approve: Vec::new(),
        ..ReleasePolicy::default()
    });
    let (state, _) = run(
        &saga,
        ReleaseState::default(),
        &[
            samples::build_completed().into(),
            samples::container_image_built().into(),
            samples::package_published().into(),
        ],
    );
    let (state, actions) = run(&saga, state, &[approval(&[AGENT], None)]);
    assert!(approved(&actions).is_empty());
    assert_eq!(state.refused_approvals[0].rule, Rule::RequesterCannotApprove);
    let (_, actions) = run(&saga, state, &[approval(&["cli:erin"], None)]);
    assert_eq!(approved(&actions).len(), 1);
}

#[test]
fn a_policy_that_no_release_could_satisfy_is_refused_with_the_field_named() {
    let mut policy = governed(None).policy().approval.clone();
    policy.environments.get_mut("prod").unwrap().required_approvals = 5;
    assert_eq!(
        policy.validate().unwrap_err().field,
        "environments.prod.requiredApprovals"
    );
    let mut policy = governed(None).policy().approval.clone();
    policy.environments.get_mut("prod").unwrap().approver_groups = vec!["cab".to_owned()];
    assert_eq!(policy.validate().unwrap_err().field, "environments.prod.approverGroups");
    let mut policy = governed(None).policy().approval.clone();
    policy.environments.get_mut("prod").unwrap().comment_pattern = Some("CHG-(".to_owned());
    assert_eq!(policy.validate().unwrap_err().field, "environments.prod.commentPattern");
    let mut policy = governed(None).policy().approval.clone();
    policy.environments.get_mut("prod").unwrap().expires_after_seconds = Some(1_000_000_000_000);
    assert_eq!(
        policy.validate().unwrap_err().field,
        "environments.prod.expiresAfterSeconds"
    );
    let mut policy = governed(None).policy().approval.clone();
    policy.groups.insert("empty".to_owned(), Vec::new());
    assert_eq!(policy.validate().unwrap_err().field, "groups.empty");
    let err = serde_json::from_value::<ApprovalPolicy>(serde_json::json!({"environments": {"prod": {"required": 2}}}))
        .unwrap_err();
    assert!(err.to_string().contains("unknown field `required`"), "{err}");
}

/// Who may send an approval in the property tests: the requesters, the
/// board, an outsider, and keys sponsored by each of the first three.
const PEOPLE: [&[&str]; 7] = [
    &[AGENT],
    &[SPONSOR],
    &["cli:alice"],
    &["cli:bob"],
    &["cli:mallory"],
    &["key:0d0d0d0d0d0d", "cli:alice"],
    &["key:0e0e0e0e0e0e", SPONSOR],
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever approvals arrive, in whatever order: prod is approved only
    /// by two distinct board members with a ticket, never counting a
    /// requester, and never promoted without that approval.
    #[test]
    fn no_promotion_without_a_satisfied_policy(
        sends in proptest::collection::vec((0..PEOPLE.len(), any::<bool>()), 0..10)
    ) {
        let saga = governed(None);
        let mut state = waiting_for_prod(&saga);
        let mut all = Vec::new();
        for (who, with_ticket) in sends {
            let message = if with_ticket { ticketed(PEOPLE[who]) } else { approval(PEOPLE[who], None) };
            let (next, actions) = run(&saga, state, &[message]);
            state = next;
            all.extend(actions);
        }
        let approvals = approved(&all);
        prop_assert!(approvals.len() <= 1);
        if let Some(approval) = approvals.first() {
            prop_assert_eq!(approval.approvers.len(), 2);
            prop_assert!(approval.approvers.iter().all(|approver| approver != AGENT && approver != SPONSOR));
            prop_assert_ne!(&approval.approvers[0], &approval.approvers[1]);
            let record = &state.approvals["prod"];
            prop_assert!(record.comment.as_deref().is_some_and(|comment| comment.starts_with("CHG-")));
        }
        for record in state.approvals_given.values().flatten() {
            prop_assert!(!record.who().iter().any(|identity| requesters().contains(identity)));
        }
        let promoted = all.iter().any(|action| matches!(action, Action::Send(Message::DeploymentPromoted(p)) if p.environment == "prod"));
        prop_assert!(!promoted || state.approvals.contains_key("prod"));
    }
}

/// Applies `messages` with `requesters` as who fired their delivery.
fn run_for(
    saga: &ReleaseSaga,
    state: ReleaseState,
    messages: &[Message],
    requesters: &[String],
) -> (ReleaseState, Vec<Action>) {
    let mut state = state;
    let mut actions = Vec::new();
    for message in messages {
        let transition = saga.apply_with(&state, message, NOW, requesters).unwrap();
        state = transition.state;
        actions.extend(transition.actions);
    }
    (state, actions)
}

#[test]
fn a_rerun_fired_by_someone_else_makes_them_a_requester_too() {
    let saga = governed(None);
    let state = waiting_for_prod(&saga);
    // Another build of the same release (same commit), fired by Alice's key.
    let mut rerun = samples::build_completed();
    rerun.build_id = "build-rerun".to_owned();
    let alice = vec!["key:0f0f0f0f0f0f".to_owned(), "cli:alice".to_owned()];
    let (state, _) = run_for(&saga, state, &[rerun.into()], &alice);
    assert_eq!(
        state.requested_by,
        ["key:0a0a0a0a0a0a", "cli:dana", "key:0f0f0f0f0f0f", "cli:alice"]
    );
    let (state, _) = run(&saga, state, &[ticketed(&["cli:alice"])]);
    assert_eq!(
        state.refused_approvals.last().unwrap().rule,
        Rule::RequesterCannotApprove
    );
}

#[test]
fn an_approval_given_before_the_requester_was_known_is_checked_again() {
    let saga = governed(None);
    // The agent (acting for Dana, a board member) approves prod ahead of
    // time, before anything of its delivery told the release who
    // requested it.
    let (state, _) = run_for(
        &saga,
        ReleaseState::default(),
        &[ticketed(&[AGENT, SPONSOR]), ticketed(&["cli:alice"])],
        &[],
    );
    assert_eq!(state.approvals_given["prod"].len(), 2, "{state:#?}");
    let mut inputs: Vec<Message> = vec![samples::build_completed().into()];
    inputs.extend(artifacts_and_dev());
    let (state, actions) = run(&saga, state, &inputs);
    assert!(approved(&actions).is_empty(), "{actions:?}");
    assert_eq!(state.phase, ReleasePhase::AwaitingApproval);
    assert_eq!(
        state.refused_approvals.last().unwrap().rule,
        Rule::RequesterCannotApprove
    );
    assert_eq!(state.waiting_for.as_ref().unwrap().approved_by, ["cli:alice"]);
}

#[test]
fn an_expired_approval_is_renewed_by_approving_again_and_no_longer_blocks_a_rejection() {
    let saga = governed(Some(3600));
    let state = waiting_for_prod(&saga);
    let (state, _) = run(&saga, state, &[ticketed(&["cli:alice"])]);
    let later = NOW + time::Duration::hours(2);
    // Alice again, after hers expired: counted, not "already approved".
    let (state, _) = run_at(&saga, state, &[ticketed(&["cli:alice"])], later);
    let waiting = state.waiting_for.as_ref().unwrap();
    assert_eq!(
        (waiting.approved_by.as_slice(), waiting.still_needed),
        (&["cli:alice".to_owned()][..], 1)
    );

    // Given ahead of time and expired by now: prod's approval is not
    // given, so a rejection of prod still applies.
    let (ahead, _) = run_for(
        &saga,
        ReleaseState::default(),
        &[ticketed(&["cli:alice"]), ticketed(&["cli:bob"])],
        &[],
    );
    let mut inputs: Vec<Message> = vec![samples::build_completed().into()];
    inputs.extend(artifacts_and_dev());
    let (ahead, _) = run_at(&saga, ahead, &inputs[..1], NOW);
    let reject: Message = bosun_contracts::messages::RejectRelease {
        environment: Some("prod".to_owned()),
        ..samples::reject_release()
    }
    .into();
    let transition = saga.apply_with(&ahead, &reject, later, &[]).unwrap();
    assert_eq!(transition.state.phase, ReleasePhase::Rejected);
}

#[test]
fn an_approval_the_previous_release_recorded_ahead_of_time_is_checked_on_arrival() {
    let saga = governed(None);
    let (mut state, _) = run(&saga, ReleaseState::default(), &[samples::build_completed().into()]);
    // As the previous release records one approval given ahead of time.
    state.approvals.insert(
        "prod".to_owned(),
        ApprovalRecord {
            approver: format!("{AGENT} (release agent)"),
            note: None,
            comment: Some("CHG-1".to_owned()),
            auto: false,
            at: NOW,
            identities: Vec::new(),
            approvers: Vec::new(),
        },
    );
    let (state, actions) = run(&saga, state, &artifacts_and_dev()[..]);
    assert!(approved(&actions).is_empty(), "{actions:?}");
    assert_eq!(state.phase, ReleasePhase::AwaitingApproval);
    assert_eq!(
        state.refused_approvals.last().unwrap().rule,
        Rule::RequesterCannotApprove
    );
    assert!(!state.approvals.contains_key("prod"));
}

/// One recorded decision: (decision, environment, by, rule).
type Recorded = (String, Option<String>, Option<String>, Option<String>);

/// The decisions a transition records for the audit log.
fn decisions(actions: &[Action]) -> Vec<Recorded> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Send(Message::ReleaseDecisionRecorded(recorded)) => Some(&recorded.decisions),
            _ => None,
        })
        .flatten()
        .map(|entry| {
            (
                entry.decision.as_str().to_owned(),
                entry.environment.clone(),
                entry.by.clone(),
                entry.rule.clone(),
            )
        })
        .collect()
}

#[test]
fn every_decision_is_recorded_for_the_audit_log_in_order_and_once() {
    let saga = governed(None);
    let mut inputs: Vec<Message> = vec![samples::build_completed().into()];
    inputs.extend(artifacts_and_dev());
    let (state, actions) = run(&saga, ReleaseState::default(), &inputs);
    let recorded = decisions(&actions);
    let names: Vec<&str> = recorded.iter().map(|(decision, ..)| decision.as_str()).collect();
    assert_eq!(
        names,
        ["requested", "approved", "promoted", "deployed", "verified"],
        "{recorded:#?}"
    );
    assert_eq!(recorded[0].2.as_deref(), Some(AGENT), "the requester");
    assert_eq!(recorded[1].2.as_deref(), Some(AUTO_APPROVER));
    // The same inputs again record nothing more.
    let (_, again) = run(&saga, state.clone(), &inputs);
    assert!(decisions(&again).is_empty(), "{again:#?}");
    // prod: the agent refused (rule named), two of the board, completion.
    let (_, actions) = run(
        &saga,
        state,
        &[
            ticketed(&[AGENT]),
            ticketed(&["cli:alice"]),
            ticketed(&["cli:bob"]),
            bosun_contracts::messages::InfrastructureProvisioned {
                environment: "prod".to_owned(),
                ..samples::infrastructure_provisioned()
            }
            .into(),
            bosun_contracts::messages::GitOpsSynced {
                environment: "prod".to_owned(),
                ..samples::gitops_synced()
            }
            .into(),
        ],
    );
    let recorded = decisions(&actions);
    let names: Vec<&str> = recorded.iter().map(|(decision, ..)| decision.as_str()).collect();
    assert_eq!(
        names,
        [
            "approval-refused",
            "approval-given",
            "approval-given",
            "approved",
            "promoted",
            "deployed",
            "verified",
            "completed"
        ],
        "{recorded:#?}"
    );
    assert_eq!(recorded[0].3.as_deref(), Some("requester-cannot-approve"));
    assert!(
        recorded[1..6]
            .iter()
            .all(|(_, environment, ..)| environment.as_deref() == Some("prod"))
    );
    assert_eq!(recorded[2].2.as_deref(), Some("cli:bob"));
}
