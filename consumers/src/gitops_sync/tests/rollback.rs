//! Rollbacks through the consumer: a person's rollback obeys the tenant's
//! promotion gate (read through the governance port) unless it gives an
//! override reason; the release saga's own rollback went through the gate
//! already; a sender cannot pass for it; the door of each decision.

use std::sync::Arc;

use bosun_contracts::messages::{ReleaseDecision, ReleaseVerified, RollbackEnvironment};
use bosun_sagas::release::{AUTO_ROLLBACK, ApprovalPolicy, Hold};

use super::*;
use crate::delivery::governance::{GovernanceError, ReleaseGovernance, VersionedApprovalPolicy};

/// A tenant whose policy holds dev.
#[derive(Debug)]
struct DevOnHold;

#[async_trait]
impl ReleaseGovernance for DevOnHold {
    async fn approval_policy(&self, _tenant: &str) -> Result<Option<VersionedApprovalPolicy>, GovernanceError> {
        let policy = ApprovalPolicy {
            holds: [(
                "dev".to_owned(),
                Hold {
                    reason: "INC-7 under way".to_owned(),
                    until: None,
                },
            )]
            .into(),
            ..ApprovalPolicy::default()
        };
        Ok(Some(VersionedApprovalPolicy { version: 4, policy }))
    }

    async fn requesters(&self, _tenant: &str, _correlation_id: &str) -> Result<Vec<String>, GovernanceError> {
        Ok(Vec::new())
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

fn verified(release: &str, minute: i64) -> ReleaseVerified {
    let promotion = promoted(release, minute);
    ReleaseVerified {
        release_id: release.to_owned(),
        environment: "dev".to_owned(),
        verified_at: promotion.promoted_at,
        promotion,
        summary: "healthy sync".to_owned(),
    }
}

fn rollback(requested_by: &str, failed: Option<&str>, override_reason: Option<&str>) -> RollbackEnvironment {
    RollbackEnvironment {
        environment: "dev".to_owned(),
        module_id: samples::deployment_promoted().module_id,
        to_release_id: None,
        failed_release_id: failed.map(str::to_owned),
        reason: "errors up".to_owned(),
        override_reason: override_reason.map(str::to_owned),
        on_behalf_of: None,
        requested_by: Some(requested_by.to_owned()),
        requester_identities: vec![requested_by.to_owned()],
        requested_at: datetime!(2026-11-29 15:00 UTC),
    }
}

fn decisions(outcome: &Outcome) -> Vec<(ReleaseDecision, Option<String>, String)> {
    outcome
        .messages
        .iter()
        .filter_map(|outgoing| match &outgoing.message {
            Message::ReleaseDecisionRecorded(recorded) => Some(
                recorded
                    .decisions
                    .iter()
                    .map(|entry| {
                        (
                            entry.decision,
                            recorded.door.clone(),
                            entry.reason.clone().unwrap_or_default(),
                        )
                    })
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .flatten()
        .collect()
}

/// r1 and r2 promoted and verified in dev; dev runs r2.
async fn two_verified(consumer: &GitOpsSync<FakeEnvironments>) -> Value {
    let mut stored = Value::Null;
    for (release, minute) in [("r1", 0), ("r2", 10)] {
        deliver(consumer, &mut stored, promoted(release, minute)).await.unwrap();
        deliver(consumer, &mut stored, verified(release, minute)).await.unwrap();
    }
    assert_eq!(state_of(&stored).apps["payments-api"].release_id, "r2");
    stored
}

#[tokio::test]
async fn a_persons_rollback_obeys_a_hold_unless_overridden_and_cannot_pass_for_the_sagas() {
    let consumer = GitOpsSync::new(
        FakeEnvironments::with_commits(&[SHA_1, SHA_2, SHA_1]),
        GitOpsSaga::new(),
        BASE,
        MAX,
    )
    .with_governance(Arc::new(DevOnHold));
    let mut stored = two_verified(&consumer).await;
    // Refused, the hold named, nothing written.
    let outcome = deliver(&consumer, &mut stored, rollback("cli:carol", None, None))
        .await
        .unwrap();
    let recorded = decisions(&outcome);
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].0, ReleaseDecision::RollbackRefused);
    assert_eq!(recorded[0].1.as_deref(), Some("agent:test"));
    assert!(
        recorded[0].2.contains("INC-7") && recorded[0].2.contains("hold"),
        "{}",
        recorded[0].2
    );
    assert_eq!(state_of(&stored).apps["payments-api"].release_id, "r2");
    // Naming a failed release does not make it the saga's own.
    let outcome = deliver(&consumer, &mut stored, rollback("cli:carol", Some("r2"), None))
        .await
        .unwrap();
    assert_eq!(decisions(&outcome)[0].0, ReleaseDecision::RollbackRefused);
    assert_eq!(state_of(&stored).apps["payments-api"].release_id, "r2");
    // With an override reason it goes, and says so.
    let outcome = deliver(
        &consumer,
        &mut stored,
        rollback("cli:carol", None, Some("INC-7: r2 is the cause")),
    )
    .await
    .unwrap();
    let recorded = decisions(&outcome);
    assert_eq!(recorded[0].0, ReleaseDecision::RolledBack, "{recorded:?}");
    assert!(
        recorded[0].2.contains("overridden: INC-7: r2 is the cause"),
        "{}",
        recorded[0].2
    );
    assert_eq!(state_of(&stored).apps["payments-api"].release_id, "r1");
}

#[tokio::test]
async fn the_release_sagas_rollback_is_not_gated_again_and_its_door_is_bosun() {
    let consumer = GitOpsSync::new(
        FakeEnvironments::with_commits(&[SHA_1, SHA_2, SHA_1]),
        GitOpsSaga::new(),
        BASE,
        MAX,
    )
    .with_governance(Arc::new(DevOnHold));
    let mut stored = Value::Null;
    deliver(&consumer, &mut stored, promoted("r1", 0)).await.unwrap();
    deliver(&consumer, &mut stored, verified("r1", 0)).await.unwrap();
    deliver(&consumer, &mut stored, promoted("r2", 10)).await.unwrap();
    let outcome = deliver(&consumer, &mut stored, rollback(AUTO_ROLLBACK, Some("r2"), None))
        .await
        .unwrap();
    let recorded = decisions(&outcome);
    assert_eq!(recorded[0].0, ReleaseDecision::RolledBack, "{recorded:?}");
    assert_eq!(recorded[0].1.as_deref(), Some("bosun"));
    assert_eq!(state_of(&stored).apps["payments-api"].release_id, "r1");
    let writes = consumer.environments().writes.lock().unwrap();
    assert!(
        writes
            .last()
            .unwrap()
            .message
            .starts_with("Roll payments-api in dev back to r1"),
        "{}",
        writes.last().unwrap().message
    );
}
