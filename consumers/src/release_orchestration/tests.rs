//! Release-orchestration tests: the consumer glues the saga to the runtime.

use bosun_contracts::{Envelope, Message, samples};
use bosun_sagas::release::{ReleasePolicy, ReleaseSaga};
use uuid::Uuid;

use super::*;
use crate::SagaInstance;

fn consumer() -> ReleaseOrchestration {
    ReleaseOrchestration::new(ReleaseSaga::new(ReleasePolicy::default()))
}

async fn run(
    consumer: &ReleaseOrchestration,
    state: serde_json::Value,
    version: i64,
    message: Message,
) -> (Outcome, SagaInstance) {
    let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "test");
    let (kind, key) = consumer.saga_of(&envelope, &message).expect("a release message");
    let saga = SagaInstance {
        kind,
        key,
        version,
        state,
    };
    let outcome = consumer
        .handle(Inbound {
            envelope: &envelope,
            message: &message,
            saga: Some(&saga),
        })
        .await
        .expect("handled");
    (outcome, saga)
}

fn types(outcome: &Outcome) -> Vec<&'static str> {
    outcome.messages.iter().map(|m| m.message.message_type()).collect()
}

#[tokio::test]
async fn a_build_with_its_artifacts_is_planned_and_auto_approved_for_dev() {
    let consumer = consumer();
    let (first, _) = run(&consumer, serde_json::Value::Null, 0, samples::build_completed().into()).await;
    let state = first.saga_state.clone().expect("state saved");
    let (second, _) = run(&consumer, state, 1, samples::container_image_built().into()).await;
    let state = second.saga_state.clone().expect("state saved");
    let (third, _) = run(&consumer, state, 2, samples::package_published().into()).await;
    let emitted: Vec<_> = [&first, &second, &third].iter().flat_map(|o| types(o)).collect();
    assert!(emitted.contains(&"ReleasePlanned"), "{emitted:?}");
    assert!(emitted.contains(&"ReleaseApproved"), "{emitted:?}");
    assert!(
        !emitted.contains(&"DeploymentPromoted"),
        "promoted before infrastructure: {emitted:?}"
    );
}

#[tokio::test]
async fn a_duplicate_changes_nothing_and_saves_nothing() {
    let consumer = consumer();
    let (first, _) = run(&consumer, serde_json::Value::Null, 0, samples::build_completed().into()).await;
    let state = first.saga_state.clone().expect("state saved");
    let (again, _) = run(&consumer, state, 1, samples::build_completed().into()).await;
    assert!(again.messages.is_empty());
    assert_eq!(again.saga_state, None);
}

#[tokio::test]
async fn messages_of_no_release_are_ignored() {
    let consumer = consumer();
    let message: Message = samples::commit_created().into();
    let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "test");
    assert_eq!(consumer.saga_of(&envelope, &message), None);
    let outcome = consumer.handle(Inbound::new(&envelope, &message)).await.unwrap();
    assert_eq!(outcome, Outcome::default());
}

#[tokio::test]
async fn corrupt_state_is_a_permanent_error() {
    let consumer = consumer();
    let message: Message = samples::build_completed().into();
    let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "test");
    let saga = SagaInstance {
        kind: SAGA_KIND,
        key: "x".into(),
        version: 3,
        state: serde_json::json!({"phase": 42}),
    };
    let err = consumer
        .handle(Inbound {
            envelope: &envelope,
            message: &message,
            saga: Some(&saga),
        })
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(matches!(err, HandlerError::Permanent(_)), "{err:?}");
}

#[tokio::test]
async fn the_saga_key_names_the_tenant() {
    let consumer = consumer();
    let message: Message = samples::approve_release().into();
    for tenant in ["contoso", "fabrikam"] {
        let envelope = Envelope::new(&message, Uuid::now_v7(), tenant, "test");
        let (kind, key) = consumer.saga_of(&envelope, &message).expect("a release message");
        assert_eq!(kind, SAGA_KIND);
        assert_eq!(key, format!("{tenant}/{}", samples::RELEASE_ID));
    }
}

#[tokio::test]
async fn a_decision_on_a_release_the_tenant_does_not_have_is_refused() {
    let consumer = consumer();
    let decisions: [Message; 3] = [
        samples::approve_release().into(),
        samples::reject_release().into(),
        samples::override_release_window().into(),
    ];
    for message in decisions {
        let envelope = Envelope::new(&message, Uuid::now_v7(), "evil", "test");
        let (kind, key) = consumer.saga_of(&envelope, &message).expect("a release message");
        let saga = SagaInstance {
            kind,
            key,
            version: 0,
            state: serde_json::Value::Null,
        };
        let err = consumer
            .handle(Inbound {
                envelope: &envelope,
                message: &message,
                saga: Some(&saga),
            })
            .await
            .expect_err("refused");
        assert!(!err.is_retryable(), "{err}");
        assert_eq!(
            err.to_string(),
            format!(
                "permanent: {} refused: tenant `evil` has no release `{}`",
                message.message_type(),
                samples::RELEASE_ID
            )
        );
    }
}

#[tokio::test]
async fn a_timeout_before_its_deadline_waits_for_it() {
    let consumer = consumer();
    let (first, _) = run(&consumer, serde_json::Value::Null, 0, samples::build_completed().into()).await;
    let timeout = bosun_contracts::messages::ReleaseApprovalTimeout {
        deadline: time::OffsetDateTime::now_utc() + time::Duration::hours(1),
        ..samples::release_approval_timeout()
    };
    let state = first.saga_state.clone().expect("state saved");
    let (outcome, _) = run(&consumer, state, 1, timeout.clone().into()).await;
    assert_eq!(outcome.saga_state, None, "the saga is not touched");
    let [again] = &outcome.messages[..] else {
        panic!("expected the timeout scheduled again: {outcome:?}");
    };
    assert_eq!(again.message, Message::ReleaseApprovalTimeout(timeout));
    let delay = again.delay.expect("scheduled, not sent now");
    assert!(
        delay > std::time::Duration::from_secs(3500) && delay <= std::time::Duration::from_secs(3600),
        "{delay:?}"
    );
}

#[tokio::test]
async fn a_window_check_before_its_time_waits_for_it() {
    let consumer = consumer();
    let (first, _) = run(&consumer, serde_json::Value::Null, 0, samples::build_completed().into()).await;
    let check = bosun_contracts::messages::ReleaseWindowCheck {
        check_at: time::OffsetDateTime::now_utc() + time::Duration::hours(2),
        ..samples::release_window_check()
    };
    let state = first.saga_state.clone().expect("state saved");
    let (outcome, _) = run(&consumer, state, 1, check.clone().into()).await;
    assert_eq!(outcome.saga_state, None, "the saga is not touched");
    let [again] = &outcome.messages[..] else {
        panic!("expected the check scheduled again: {outcome:?}");
    };
    assert_eq!(again.message, Message::ReleaseWindowCheck(check));
    let delay = again.delay.expect("scheduled, not sent now");
    assert!(
        delay > std::time::Duration::from_secs(7100) && delay <= std::time::Duration::from_secs(7200),
        "{delay:?}"
    );
}

#[tokio::test]
async fn decisions_go_to_the_audit_log_stamped_with_their_door() {
    let consumer = consumer();
    let (first, _) = run(&consumer, serde_json::Value::Null, 0, samples::build_completed().into()).await;
    let state = first.saga_state.clone().expect("state saved");
    let (second, _) = run(&consumer, state, 1, samples::container_image_built().into()).await;
    let state = second.saga_state.clone().expect("state saved");
    let (third, _) = run(&consumer, state, 2, samples::package_published().into()).await;
    let recorded: Vec<_> = third
        .messages
        .iter()
        .filter_map(|outgoing| match &outgoing.message {
            Message::ReleaseDecisionRecorded(recorded) => Some(recorded.clone()),
            _ => None,
        })
        .collect();
    let [recorded] = &recorded[..] else {
        panic!("one ReleaseDecisionRecorded per message that decided: {recorded:#?}");
    };
    // Planned and dev approved by the policy, reacting to an event.
    assert_eq!(recorded.door.as_deref(), Some("bosun"));
    let decisions: Vec<&str> = recorded.decisions.iter().map(|d| d.decision.as_str()).collect();
    assert_eq!(decisions, ["requested", "approved"]);
    // A decision a command brought carries the command's source.
    let state = third.saga_state.clone().expect("state saved");
    let reject: Message = bosun_contracts::messages::RejectRelease {
        environment: None,
        ..samples::reject_release()
    }
    .into();
    let (rejected, _) = run(&consumer, state, 3, reject).await;
    let door = rejected.messages.iter().find_map(|outgoing| match &outgoing.message {
        Message::ReleaseDecisionRecorded(recorded) => recorded.door.clone(),
        _ => None,
    });
    assert_eq!(door.as_deref(), Some("test"));
    // Handling the record itself touches no saga, sends nothing, and
    // appends to the tenant's audit log, named by the message.
    let audited = Arc::new(Audited::default());
    let consumer = consumer.with_governance(Arc::clone(&audited) as Arc<dyn ReleaseGovernance>);
    let envelope = Envelope::new(
        &Message::ReleaseDecisionRecorded(recorded.clone()),
        Uuid::now_v7(),
        "contoso",
        "test",
    );
    let message = Message::ReleaseDecisionRecorded(recorded.clone());
    // Keyed by its release, so a release's decisions keep their order.
    let (kind, key) = consumer.saga_of(&envelope, &message).expect("keyed by the release");
    assert_eq!(
        (kind, key.clone()),
        (SAGA_KIND, format!("contoso/{}", samples::RELEASE_ID))
    );
    let instance = SagaInstance {
        kind,
        key,
        version: 4,
        state: rejected.saga_state.clone().expect("state saved"),
    };
    let outcome = consumer
        .handle(Inbound {
            envelope: &envelope,
            message: &message,
            saga: Some(&instance),
        })
        .await
        .expect("recorded");
    assert!(outcome.messages.is_empty() && outcome.saga_state.is_none());
    assert_eq!(
        *audited.kept.lock().unwrap(),
        [("contoso".to_owned(), envelope.message_id.to_string(), 2)]
    );
}

#[tokio::test]
async fn the_state_it_saves_carries_its_version() {
    let consumer = consumer();
    let (first, _) = run(&consumer, serde_json::Value::Null, 0, samples::build_completed().into()).await;
    let state = first.saga_state.expect("state saved");
    assert_eq!(state["stateVersion"], 1, "{state}");
}

#[tokio::test]
async fn a_state_a_later_release_saved_waits_for_that_release_and_is_not_overwritten() {
    let consumer = consumer();
    let (first, _) = run(&consumer, serde_json::Value::Null, 0, samples::build_completed().into()).await;
    let mut newer = first.saga_state.expect("state saved");
    newer["stateVersion"] = serde_json::json!(2);
    newer["approvals"] = serde_json::json!({"shape": "of a later release"});
    let message: Message = samples::container_image_built().into();
    let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "test");
    let (kind, key) = consumer.saga_of(&envelope, &message).expect("a release message");
    let saga = SagaInstance {
        kind,
        key,
        version: 1,
        state: newer,
    };
    let err = consumer
        .handle(Inbound {
            envelope: &envelope,
            message: &message,
            saga: Some(&saga),
        })
        .await
        .unwrap_err();
    // Not dead-lettered as corrupt: it waits; and a handler error writes
    // no state.
    assert!(matches!(err, HandlerError::NeedsNewer(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("version 2") && text.contains(&saga.key), "{text}");
}

/// An approval written by the previous release (version 1, `approver`)
/// still waiting in a queue is read as version 2: the release records the
/// authenticated caller, and the sender's name as the note.
#[tokio::test]
async fn a_version_one_approval_is_upcast_and_handled() {
    let policy = ReleasePolicy {
        environments: vec!["prod".to_owned()],
        auto_approve: Vec::new(),
        ..ReleasePolicy::default()
    };
    let consumer = ReleaseOrchestration::new(ReleaseSaga::new(policy));
    let mut state = serde_json::Value::Null;
    let mut version = 0;
    for message in [
        samples::build_completed().into(),
        samples::container_image_built().into(),
        samples::package_published().into(),
    ] {
        let (outcome, _) = run(&consumer, state.clone(), version, message).await;
        if let Some(next) = outcome.saga_state {
            state = next;
            version += 1;
        }
    }
    let envelope = serde_json::json!({
        "messageId": Uuid::now_v7(),
        "type": "ApproveRelease",
        "kind": "command",
        "schemaVersion": 1,
        "correlationId": Uuid::now_v7(),
        "tenantId": "contoso",
        "source": "bosun-previous-release",
        "occurredAt": "2026-11-29T10:00:00Z",
        "payload": {
            "releaseId": samples::RELEASE_ID,
            "environment": "prod",
            "approver": "alice",
            "approvedBy": "key:0123456789ab (release board)"
        }
    });
    let (envelope, message) = Envelope::parse(&serde_json::to_vec(&envelope).unwrap()).expect("a v1 approval is read");
    assert_eq!(envelope.schema_version, 1);
    let Message::ApproveRelease(approve) = &message else {
        panic!("{message:?}")
    };
    assert_eq!(approve.on_behalf_of.as_deref(), Some("alice"));
    let (kind, key) = consumer.saga_of(&envelope, &message).expect("a release message");
    let saga = SagaInstance {
        kind,
        key,
        version,
        state,
    };
    let outcome = consumer
        .handle(Inbound {
            envelope: &envelope,
            message: &message,
            saga: Some(&saga),
        })
        .await
        .expect("handled");
    let approved = outcome
        .messages
        .iter()
        .find_map(|m| match &m.message {
            Message::ReleaseApproved(approved) => Some(approved.clone()),
            _ => None,
        })
        .expect("ReleaseApproved");
    assert_eq!(approved.environment, "prod");
    assert_eq!(approved.approver, "key:0123456789ab (release board)");
    let state = outcome.saga_state.expect("state saved");
    assert_eq!(state["approvals"]["prod"]["note"], "alice", "{state:#}");
}

/// A tenant with a stored policy (prod: two approvals) whose deliveries
/// were all fired by one agent key.
#[derive(Debug)]
struct Governed {
    unreadable: bool,
}

#[async_trait]
impl ReleaseGovernance for Governed {
    async fn approval_policy(&self, tenant: &str) -> Result<Option<VersionedApprovalPolicy>, GovernanceError> {
        if self.unreadable {
            return Err(GovernanceError::Unreadable {
                tenant: tenant.to_owned(),
                version: 9,
                reason: "unknown field `freezeWindows`".to_owned(),
            });
        }
        let policy: bosun_sagas::release::ApprovalPolicy =
            serde_json::from_value(serde_json::json!({"environments": {"prod": {"requiredApprovals": 2}}})).unwrap();
        Ok(Some(VersionedApprovalPolicy { version: 7, policy }))
    }

    async fn requesters(&self, _tenant: &str, _correlation_id: &str) -> Result<Vec<String>, GovernanceError> {
        Ok(vec!["key:0a0a0a0a0a0a".to_owned(), "cli:dana".to_owned()])
    }

    async fn record_decisions(
        &self,
        _tenant: &str,
        _message_id: &str,
        _recorded: &bosun_contracts::messages::ReleaseDecisionRecorded,
    ) -> Result<(), GovernanceError> {
        Ok(())
    }
}

/// The default governance, keeping the decisions it is given.
#[derive(Debug, Default)]
struct Audited {
    kept: std::sync::Mutex<Vec<(String, String, usize)>>,
}

#[async_trait]
impl ReleaseGovernance for Audited {
    async fn approval_policy(&self, _tenant: &str) -> Result<Option<VersionedApprovalPolicy>, GovernanceError> {
        Ok(None)
    }

    async fn requesters(&self, _tenant: &str, _correlation_id: &str) -> Result<Vec<String>, GovernanceError> {
        Ok(Vec::new())
    }

    async fn record_decisions(
        &self,
        tenant: &str,
        message_id: &str,
        recorded: &bosun_contracts::messages::ReleaseDecisionRecorded,
    ) -> Result<(), GovernanceError> {
        self.kept
            .lock()
            .unwrap()
            .push((tenant.to_owned(), message_id.to_owned(), recorded.decisions.len()));
        Ok(())
    }
}

#[tokio::test]
async fn the_tenants_policy_and_the_deliverys_requester_are_read_when_handling() {
    let consumer = ReleaseOrchestration::new(ReleaseSaga::new(ReleasePolicy {
        environments: vec!["prod".to_owned()],
        auto_approve: Vec::new(),
        ..ReleasePolicy::default()
    }))
    .with_governance(Arc::new(Governed { unreadable: false }));
    let mut state = serde_json::Value::Null;
    for (version, message) in [
        samples::build_completed().into(),
        samples::container_image_built().into(),
        samples::package_published().into(),
    ]
    .into_iter()
    .enumerate()
    {
        let (outcome, _) = run(&consumer, state, i64::try_from(version).unwrap(), message).await;
        state = outcome.saga_state.expect("state saved");
    }
    assert_eq!(
        state["requestedBy"],
        serde_json::json!(["key:0a0a0a0a0a0a", "cli:dana"])
    );
    assert_eq!(state["waitingFor"]["required"], 2, "{state:#}");
    assert_eq!(state["waitingFor"]["policyVersion"], 7, "{state:#}");
    // The agent's sponsor approves: refused, recorded, nothing sent but
    // the refusal for the audit log.
    let approve = bosun_contracts::messages::ApproveRelease {
        approver_identities: vec!["cli:dana".to_owned()],
        approved_by: Some("cli:dana".to_owned()),
        ..samples::approve_release()
    };
    let (outcome, _) = run(&consumer, state, 3, approve.into()).await;
    assert_eq!(types(&outcome), ["ReleaseDecisionRecorded"]);
    let state = outcome.saga_state.expect("the refusal is recorded");
    assert_eq!(
        state["refusedApprovals"][0]["rule"], "requester-cannot-approve",
        "{state:#}"
    );
}

#[tokio::test]
async fn a_policy_a_later_release_wrote_waits_for_that_release() {
    let consumer = consumer().with_governance(Arc::new(Governed { unreadable: true }));
    let message: Message = samples::build_completed().into();
    let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "test");
    let (kind, key) = consumer.saga_of(&envelope, &message).unwrap();
    let saga = SagaInstance {
        kind,
        key,
        version: 0,
        state: serde_json::Value::Null,
    };
    let err = consumer
        .handle(Inbound {
            envelope: &envelope,
            message: &message,
            saga: Some(&saga),
        })
        .await
        .unwrap_err();
    assert!(matches!(err, HandlerError::NeedsNewer(_)), "{err:?}");
}
