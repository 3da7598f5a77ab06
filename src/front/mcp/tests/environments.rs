//! `get_environment`, `rollback_environment` and the verification that
//! `get_release` shows, as callers with keys of their own see them.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use uuid::Uuid;

use super::{Fixture, call, caller, fixture};
use crate::front::access::{ALL_TENANTS, Scope};
use crate::front::mcp::tools;
use crate::ports::store::{CommitOutcome, HandledMessage, SagaWrite};

/// Stores `state` as the `kind` saga `key` of `tenant`.
async fn seed(f: &Fixture, kind: &str, tenant: &str, key: &str, state: Value) {
    let outcome = f
        .backends
        .store
        .commit_handled(HandledMessage {
            consumer: "test".into(),
            message_id: Uuid::now_v7().to_string(),
            message_type: "ReleaseVerified".into(),
            saga: Some(SagaWrite {
                kind: kind.into(),
                key: format!("{tenant}/{key}"),
                expected_version: 0,
                state,
                tenant_id: Some(tenant.into()),
            }),
            outbox: vec![],
            timeline: vec![],
        })
        .await
        .unwrap();
    assert_eq!(outcome, CommitOutcome::Committed);
}

/// Module payments-api of contoso's prod runs payments-api-2; payments-api-1
/// and payments-api-2 were verified there.
async fn seed_prod(f: &Fixture) {
    let promotion = |release: &str| {
        json!({"releaseId": release, "moduleId": "payments-api", "environment": "prod",
            "environmentRepository": "environments", "desiredCommitSha": "b".repeat(40),
            "approvedBy": "cli:alice", "promotedAt": "2026-12-01T10:00:00Z"})
    };
    let verified =
        |release: &str, at: &str| json!({"releaseId": release, "promotion": promotion(release), "verifiedAt": at});
    let state = json!({
        "environment": "prod",
        "phase": "synced",
        "apps": {"payments-api": {"releaseId": "payments-api-2", "promotedAt": "2026-12-02T10:00:00Z"}},
        "verified": {"payments-api": [
            verified("payments-api-1", "2026-12-01T11:00:00Z"),
            verified("payments-api-2", "2026-12-02T11:00:00Z")
        ]}
    });
    seed(f, "gitops", "contoso", "prod", state).await;
}

#[tokio::test]
async fn get_environment_shows_current_and_verified_releases_to_its_tenant_only() {
    let f = fixture().await;
    seed_prod(&f).await;
    let reader = caller("contoso", &[Scope::DeliveriesRead]);
    let (failed, view) = call(&f.tools, &reader, "get_environment", json!({"environment": "prod"})).await;
    assert!(!failed, "{view}");
    let module = &view["modules"][0];
    assert_eq!(module["moduleId"], "payments-api", "{view}");
    assert_eq!(module["current"]["releaseId"], "payments-api-2");
    assert_eq!(module["verified"][0]["releaseId"], "payments-api-2", "newest first");
    assert_eq!(module["verified"][1]["releaseId"], "payments-api-1");
    // Another tenant's key, naming contoso or not: not found.
    let fabrikam = caller("fabrikam", &[Scope::DeliveriesRead]);
    for arguments in [
        json!({"environment": "prod"}),
        json!({"environment": "prod", "tenant": "contoso"}),
    ] {
        let (failed, error) = call(&f.tools, &fabrikam, "get_environment", arguments).await;
        assert!(failed);
        assert_eq!(error["error"]["code"], "not-found", "{error}");
    }
    // A platform key names the tenant.
    let platform = caller(ALL_TENANTS, &[Scope::DeliveriesRead]);
    let (failed, error) = call(&f.tools, &platform, "get_environment", json!({"environment": "prod"})).await;
    assert!(failed);
    assert_eq!(error["error"]["field"], "tenant", "{error}");
    let (failed, view) = call(
        &f.tools,
        &platform,
        "get_environment",
        json!({"environment": "prod", "tenant": "contoso"}),
    )
    .await;
    assert!(!failed, "{view}");
    assert_eq!(view["tenantId"], "contoso");
}

#[tokio::test]
async fn rollback_environment_needs_its_right_and_is_sent_as_the_agents_key() {
    let f = fixture().await;
    seed_prod(&f).await;
    let arguments = json!({"environment": "prod", "reason": "error rate after payments-api-2"});
    // commands:send and releases:approve are not the right to roll back.
    let sender = caller("contoso", &[Scope::CommandsSend, Scope::ReleasesApprove]);
    let (failed, error) = call(&f.tools, &sender, "rollback_environment", arguments.clone()).await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "forbidden", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("releases:rollback")
    );
    // An override reason needs releases:override besides.
    let roller = caller("contoso", &[Scope::ReleasesRollback]);
    let mut overriding = arguments.clone();
    overriding["overrideReason"] = json!("sev1");
    let (failed, error) = call(&f.tools, &roller, "rollback_environment", overriding).await;
    assert!(failed);
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("releases:override"),
        "{error}"
    );
    // Another tenant's environment: not found.
    let fabrikam = caller("fabrikam", &[Scope::ReleasesRollback]);
    let mut theirs = arguments.clone();
    theirs["tenant"] = json!("contoso");
    let (failed, error) = call(&f.tools, &fabrikam, "rollback_environment", theirs).await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "not-found", "{error}");
    // A release never verified there: refused with why.
    let mut unknown = arguments.clone();
    unknown["toReleaseId"] = json!("payments-api-9");
    let (failed, error) = call(&f.tools, &roller, "rollback_environment", unknown).await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "invalid-field", "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains("never verified"));
    // With the right: checked, then sent as the agent's key.
    let (failed, accepted) = call(&f.tools, &roller, "rollback_environment", arguments).await;
    assert!(!failed, "{accepted}");
    assert_eq!(accepted["plan"]["toReleaseId"], "payments-api-1", "{accepted}");
    assert_eq!(accepted["plan"]["fromReleaseId"], "payments-api-2");
    let sent = f
        .backends
        .store
        .emitted(accepted["correlationId"].as_str().unwrap())
        .await
        .unwrap();
    let envelope = bosun_contracts::Envelope::from_slice(&sent[0]).unwrap();
    assert_eq!(envelope.message_type, "RollbackEnvironment");
    assert_eq!(
        envelope.payload["requestedBy"], "key:contoso-key",
        "{}",
        envelope.payload
    );
}

#[tokio::test]
async fn the_tools_say_what_they_need_and_which_only_read() {
    let listed = tools::list().unwrap();
    let tool = |name: &str| listed.iter().find(|tool| tool.name == name).expect(name);
    let get = serde_json::to_value(tool("get_environment")).unwrap();
    assert_eq!(get["annotations"]["readOnlyHint"], true, "{get}");
    assert!(get["description"].as_str().unwrap().contains("deliveries:read"));
    let rollback = serde_json::to_value(tool("rollback_environment")).unwrap();
    assert_eq!(rollback["annotations"]["readOnlyHint"], false, "{rollback}");
    assert_eq!(rollback["annotations"]["destructiveHint"], false, "{rollback}");
    let description = rollback["description"].as_str().unwrap();
    assert!(description.contains("releases:rollback") && description.contains("releases:override"));
    let mut required: Vec<&str> = rollback["inputSchema"]["required"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    required.sort_unstable();
    assert_eq!(required, ["environment", "reason"]);
}

#[tokio::test]
async fn get_release_shows_the_verification_and_what_waits_for_a_window() {
    let f = fixture().await;
    let state = json!({
        "releaseId": "payments-api-2",
        "phase": "promoting",
        "windowWait": {"environment": "prod", "rule": "hold", "reason": "freeze", "checkAt": "2026-12-05T03:00:00Z"},
        "overrides": {"staging": {"by": "cli:alice", "reason": "INC-1"}},
        "verifying": {"environment": "staging", "startedAt": "2026-12-05T03:00:00Z", "soakUntil": "2026-12-05T03:10:00Z",
            "attempt": 3, "checkAt": "2026-12-05T03:03:00Z", "samples": 2, "failures": 1,
            "last": [{"check": "health", "passed": false, "detail": "HTTP 503"}]},
        "verified": {"dev": {"at": "2026-12-04T03:00:00Z", "summary": "healthy sync"}},
        "verificationFailed": {"environment": "qa", "reason": "health failed 3 times", "at": "2026-12-04T04:00:00Z",
            "rollBack": true, "rollbackRequested": true},
        "emitted": ["ReleasePlanned"]
    });
    seed(&f, "release", "contoso", "payments-api-2", state.clone()).await;
    let reader = caller("contoso", &[Scope::DeliveriesRead]);
    let (failed, release) = call(&f.tools, &reader, "get_release", json!({"releaseId": "payments-api-2"})).await;
    assert!(!failed, "{release}");
    for field in ["windowWait", "overrides", "verifying", "verified", "verificationFailed"] {
        assert_eq!(release[field], state[field], "{field}: {release}");
    }
    assert!(release.get("emitted").is_none());
}
