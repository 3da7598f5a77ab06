//! The tools as callers with keys of their own see them.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bosun_contracts::{Envelope, Message};
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use super::{call, caller, contoso, fixture, fixture_with, probe};
use crate::front::access::{ALL_TENANTS, Scope};
use crate::front::mcp::tools::{self, McpTool};
use crate::ports::store::{DeadLetterRecord, DeadLetterStatus};
use crate::wiring::Backends;

#[tokio::test]
async fn send_command_sends_and_get_delivery_shows_it_to_its_tenant_only() {
    let f = fixture().await;
    let (failed, sent) = call(
        &f.tools,
        &contoso(),
        "send_command",
        json!({"type": "Probe", "payload": probe("mcp")}),
    )
    .await;
    assert!(!failed, "{sent}");
    assert_eq!(sent["messageType"], "Probe");
    assert_eq!(sent["tenantId"], "contoso");
    assert_eq!(sent["replayed"], false);
    let correlation_id = sent["correlationId"].as_str().expect("correlationId").to_owned();
    Uuid::parse_str(&correlation_id).expect("a UUID");
    // It is on the probe queue.
    let depth = f
        .backends
        .transport
        .depth(&bosun_contracts::Destination::Queue("probe".into()))
        .await
        .expect("depth");
    assert_eq!(depth, 1);

    let reader = caller("contoso", &[Scope::DeliveriesRead]);
    let (failed, delivery) = call(
        &f.tools,
        &reader,
        "get_delivery",
        json!({"correlationId": correlation_id}),
    )
    .await;
    assert!(!failed, "{delivery}");
    assert_eq!(delivery["correlationId"], json!(correlation_id));
    assert_eq!(delivery["tenantId"], "contoso");
    assert_eq!(delivery["status"], "in-progress");
    assert_eq!(delivery["messages"][0]["messageType"], "Probe");

    // Another tenant is told it does not exist, not that it is forbidden.
    let other = caller("fabrikam", &[Scope::Admin]);
    let (failed, error) = call(
        &f.tools,
        &other,
        "get_delivery",
        json!({"correlationId": correlation_id}),
    )
    .await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "not-found", "{error}");
    let (failed, error) = call(
        &f.tools,
        &other,
        "wait_for_delivery",
        json!({"correlationId": correlation_id, "timeoutSeconds": 0}),
    )
    .await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "not-found");
    // ... and cannot join it either.
    let (failed, error) = call(
        &f.tools,
        &other,
        "send_command",
        json!({"type": "Probe", "payload": probe("mcp"), "correlationId": correlation_id}),
    )
    .await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "not-found");

    // A platform key sees it.
    let platform = caller(ALL_TENANTS, &[Scope::DeliveriesRead]);
    let (failed, _) = call(
        &f.tools,
        &platform,
        "get_delivery",
        json!({"correlationId": correlation_id}),
    )
    .await;
    assert!(!failed);
}

#[tokio::test]
async fn bad_arguments_are_refused_naming_the_field() {
    let f = fixture().await;
    let cases = [
        (
            "send_command",
            json!({"type": "Probe", "payload": {"group": "mcp", "workMs": 999_999}}),
            "invalid-field",
            "payload.workMs",
        ),
        (
            "send_command",
            json!({"type": "Probe", "payload": {"group": 5, "sequence": 1}}),
            "invalid-field",
            "payload.group",
        ),
        ("send_command", json!({"type": "Probe"}), "invalid-field", "payload"),
        (
            "send_command",
            json!({"type": "Probe", "payload": "{\"group\":\"x\"}"}),
            "invalid-field",
            "payload",
        ),
        (
            "send_command",
            json!({"payload": probe("mcp")}),
            "invalid-field",
            "type",
        ),
        (
            "send_command",
            json!({"type": 7, "payload": probe("mcp")}),
            "invalid-field",
            "type",
        ),
        (
            "send_command",
            json!({"type": "Frobnicate", "payload": {}}),
            "unknown-type",
            "type",
        ),
        (
            "send_command",
            json!({"type": "ProbeEchoed", "payload": {"group": "g", "sequence": 1}}),
            "unknown-type",
            "type",
        ),
        (
            "send_command",
            json!({"type": "Probe", "payload": probe("mcp"), "correlationId": "nope"}),
            "invalid-field",
            "correlationId",
        ),
        (
            "send_command",
            json!({"type": "Probe", "payload": probe("mcp"), "correlation_id": "x"}),
            "invalid-field",
            "correlation_id",
        ),
        (
            "send_command",
            json!({"type": "Probe", "payload": probe("mcp"), "tenant": "fabrikam"}),
            // A question of authority, as over HTTP: 403's code.
            "tenant-not-allowed",
            "tenant",
        ),
        (
            "send_command",
            json!({"type": "Probe", "payload": probe("mcp"), "idempotencyKey": ""}),
            "invalid-field",
            "idempotencyKey",
        ),
        ("get_delivery", json!({}), "invalid-field", "correlationId"),
        (
            "get_delivery",
            json!({"correlationId": "nope"}),
            "invalid-field",
            "correlationId",
        ),
        ("list_failures", json!({"limit": "ten"}), "invalid-field", "limit"),
        ("list_failures", json!({"limit": 0}), "invalid-field", "limit"),
        ("list_failures", json!({"grouped": "yes"}), "invalid-field", "grouped"),
        ("get_failure", json!({"id": "  "}), "invalid-field", "id"),
        (
            "replay_failure",
            json!({"id": "x", "payload": 5}),
            "invalid-field",
            "payload",
        ),
        (
            "describe_command",
            json!({"type": "CommitCreated"}),
            "unknown-type",
            "type",
        ),
    ];
    for (tool, arguments, code, field) in cases {
        let (failed, error) = call(&f.tools, &contoso(), tool, arguments.clone()).await;
        assert!(failed, "{tool} {arguments} was accepted: {error}");
        assert_eq!(error["error"]["code"], code, "{tool} {arguments}: {error}");
        assert_eq!(error["error"]["field"], field, "{tool} {arguments}: {error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(!message.contains("X-Bosun-Tenant"), "{message}");
    }
    // Nothing was sent.
    let depth = f
        .backends
        .transport
        .depth(&bosun_contracts::Destination::Queue("probe".into()))
        .await
        .expect("depth");
    assert_eq!(depth, 0);
}

#[tokio::test]
async fn scopes_and_platform_keys_are_the_gateways() {
    let f = fixture().await;
    let reader = caller("contoso", &[Scope::DeliveriesRead]);
    let (failed, error) = call(
        &f.tools,
        &reader,
        "send_command",
        json!({"type": "Probe", "payload": probe("mcp")}),
    )
    .await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "forbidden", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("commands:send"))
    );
    let sender = caller("contoso", &[Scope::CommandsSend]);
    let (failed, error) = call(&f.tools, &sender, "list_failures", json!({})).await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "forbidden");
    // Approving is its own right; internal messages are nobody's to send.
    let approve = json!({"releaseId": "payments-api-1", "environment": "prod", "onBehalfOf": "mallory"});
    let (failed, error) = call(
        &f.tools,
        &sender,
        "send_command",
        json!({"type": "ApproveRelease", "payload": approve}),
    )
    .await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "forbidden", "{error}");
    assert!(error.to_string().contains("releases:approve"), "{error}");
    let timeout = json!({"releaseId": "payments-api-1", "environment": "prod", "deadline": "2020-01-01T00:00:00Z"});
    let (failed, error) = call(
        &f.tools,
        &contoso(),
        "send_command",
        json!({"type": "ReleaseApprovalTimeout", "payload": timeout}),
    )
    .await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "unknown-type", "{error}");
    let (failed, error) = call(
        &f.tools,
        &reader,
        "replay_failure",
        json!({"id": Uuid::now_v7().to_string()}),
    )
    .await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "forbidden");

    let platform = caller(ALL_TENANTS, &[Scope::CommandsSend]);
    let (failed, error) = call(
        &f.tools,
        &platform,
        "send_command",
        json!({"type": "Probe", "payload": probe("mcp")}),
    )
    .await;
    assert!(failed);
    assert_eq!(error["error"]["field"], "tenant", "{error}");
    let (failed, sent) = call(
        &f.tools,
        &platform,
        "send_command",
        json!({"type": "Probe", "payload": probe("mcp"), "tenant": "fabrikam"}),
    )
    .await;
    assert!(!failed, "{sent}");
    assert_eq!(sent["tenantId"], "fabrikam");
}

#[tokio::test]
async fn an_idempotency_key_sends_once() {
    let f = fixture().await;
    let arguments = json!({"type": "Probe", "payload": probe("mcp"), "idempotencyKey": "run-42"});
    let (_, first) = call(&f.tools, &contoso(), "send_command", arguments.clone()).await;
    let (failed, second) = call(&f.tools, &contoso(), "send_command", arguments).await;
    assert!(!failed, "{second}");
    assert_eq!(first["replayed"], false);
    assert_eq!(second["replayed"], true);
    assert_eq!(first["correlationId"], second["correlationId"]);
    assert_eq!(first["messageId"], second["messageId"]);
    let (failed, error) = call(
        &f.tools,
        &contoso(),
        "send_command",
        json!({"type": "Probe", "payload": probe("other"), "idempotencyKey": "run-42"}),
    )
    .await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "idempotency-key-reused");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("`idempotencyKey`")),
        "{error}"
    );
}

#[tokio::test]
async fn wait_for_delivery_returns_when_the_time_is_up_and_checks_its_timeout() {
    let f = fixture().await;
    let (_, sent) = call(
        &f.tools,
        &contoso(),
        "send_command",
        json!({"type": "Probe", "payload": probe("mcp")}),
    )
    .await;
    let started = Instant::now();
    let (failed, delivery) = call(
        &f.tools,
        &contoso(),
        "wait_for_delivery",
        json!({"correlationId": sent["correlationId"], "timeoutSeconds": 0.3}),
    )
    .await;
    assert!(!failed, "{delivery}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(delivery["status"], "in-progress");
    assert_eq!(delivery["timedOut"], true);
    for timeout in [json!(601), json!(-1), json!("10")] {
        let (failed, error) = call(
            &f.tools,
            &contoso(),
            "wait_for_delivery",
            json!({"correlationId": sent["correlationId"], "timeoutSeconds": timeout}),
        )
        .await;
        assert!(failed, "{timeout}");
        assert_eq!(error["error"]["field"], "timeoutSeconds", "{error}");
    }
}

/// The store's fallback poll is a minute and the wait's timeout half of
/// it, so a wait that ends completed, not timed out, was woken by the
/// timeline write.
#[tokio::test]
async fn wait_for_delivery_is_woken_by_the_completion_not_a_poll() {
    let f = fixture_with(|settings| settings.poll_interval = Duration::from_secs(60)).await;
    let (_, sent) = call(
        &f.tools,
        &contoso(),
        "send_command",
        json!({"type": "Probe", "payload": probe("mcp")}),
    )
    .await;
    let tools = f.tools.clone();
    let arguments = json!({"correlationId": sent["correlationId"], "timeoutSeconds": 30});
    let waiting = tokio::spawn(async move { call(&tools, &contoso(), "wait_for_delivery", arguments).await });
    // Let the wait read the delivery in progress first (it is woken either
    // way: the wait is made before its first read).
    tokio::task::yield_now().await;
    f.backends
        .store
        .append_timeline(vec![crate::ports::store::TimelineEntry {
            correlation_id: sent["correlationId"].as_str().expect("correlationId").to_owned(),
            message_id: sent["messageId"].as_str().expect("messageId").to_owned(),
            message_type: "Probe".into(),
            consumer: Some("probe".into()),
            status: crate::ports::store::TimelineStatus::Completed,
            attempt: 0,
            at: OffsetDateTime::now_utc(),
            detail: None,
        }])
        .await
        .expect("appended");
    let (failed, delivery) = waiting.await.expect("the wait ends");
    assert!(!failed, "{delivery}");
    assert_eq!(delivery["status"], "completed", "{delivery}");
    assert_eq!(delivery["timedOut"], false, "{delivery}");
}

#[tokio::test]
async fn describe_command_gives_the_contracts_schema_and_a_valid_example() {
    let f = fixture().await;
    let (failed, described) = call(
        &f.tools,
        &contoso(),
        "describe_command",
        json!({"type": "CreateCommit"}),
    )
    .await;
    assert!(!failed, "{described}");
    assert_eq!(described["type"], "CreateCommit");
    assert!(
        described["payloadSchema"]["properties"]["branch"].is_object(),
        "{described}"
    );
    Message::from_type_and_payload("CreateCommit", &described["examplePayload"]).expect("the example is valid");
    let (failed, error) = call(
        &f.tools,
        &contoso(),
        "describe_command",
        json!({"type": "ReleaseApprovalTimeout"}),
    )
    .await;
    assert!(failed, "internal commands are not described");
    assert_eq!(error["error"]["code"], "unknown-type");
}

/// A dead-lettered Probe of `tenant`, as the host records one.
async fn dead_letter(backends: &Backends, tenant: &str, reason: &str) -> DeadLetterRecord {
    let message = Message::Probe(bosun_contracts::samples::probe());
    let envelope = Envelope::new(&message, Uuid::now_v7(), tenant, "test");
    let record = DeadLetterRecord {
        id: Uuid::now_v7(),
        consumer: Some("probe".into()),
        entity: "probe".into(),
        transport_sequence: None,
        broker_message_id: envelope.message_id.to_string(),
        message_id: Some(envelope.message_id.to_string()),
        message_type: Some("Probe".into()),
        correlation_id: Some(envelope.correlation_id.to_string()),
        tenant_id: Some(tenant.into()),
        body: envelope.to_vec(),
        reason: reason.into(),
        description: format!("{reason}: gave up"),
        error_chain: vec!["outer".into(), "inner".into()],
        attempts: vec![],
        dead_lettered_at: OffsetDateTime::now_utc(),
        origin: "host".into(),
        status: DeadLetterStatus::Dead,
        replays: vec![],
    };
    backends
        .store
        .record_dead_letter(record.clone(), None)
        .await
        .expect("recorded");
    record
}

#[tokio::test]
async fn failures_are_listed_grouped_shown_and_replayed_per_tenant() {
    let f = fixture().await;
    let first = dead_letter(&f.backends, "contoso", "invalid-field").await;
    dead_letter(&f.backends, "contoso", "invalid-field").await;
    dead_letter(&f.backends, "contoso", "retries-exhausted").await;
    let theirs = dead_letter(&f.backends, "fabrikam", "invalid-field").await;

    let (failed, listed) = call(&f.tools, &contoso(), "list_failures", json!({})).await;
    assert!(!failed, "{listed}");
    assert_eq!(listed["count"], 3);
    assert!(
        listed["deadLetters"]
            .as_array()
            .expect("list")
            .iter()
            .all(|d| d["tenantId"] == "contoso")
    );
    let (_, limited) = call(
        &f.tools,
        &contoso(),
        "list_failures",
        json!({"reason": "invalid-field", "limit": 1}),
    )
    .await;
    assert_eq!(limited["count"], 1);
    let (_, grouped) = call(&f.tools, &contoso(), "list_failures", json!({"grouped": true})).await;
    assert_eq!(grouped["groups"][0]["reason"], "invalid-field", "{grouped}");
    assert_eq!(grouped["groups"][0]["count"], 2);
    assert_eq!(grouped["groups"][1]["count"], 1);

    let (failed, detail) = call(&f.tools, &contoso(), "get_failure", json!({"id": first.id.to_string()})).await;
    assert!(!failed, "{detail}");
    assert_eq!(detail["envelope"]["payload"]["group"], "canary");
    let other = caller("fabrikam", &[Scope::Admin]);
    let (failed, error) = call(&f.tools, &other, "get_failure", json!({"id": first.id.to_string()})).await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "not-found");
    let (failed, error) = call(
        &f.tools,
        &contoso(),
        "replay_failure",
        json!({"id": theirs.id.to_string()}),
    )
    .await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "not-found");

    let bad = json!({"id": first.id.to_string(), "payload": {"group": "canary", "workMs": 999_999}});
    let (failed, error) = call(&f.tools, &contoso(), "replay_failure", bad).await;
    assert!(failed);
    assert_eq!(error["error"]["field"], "payload.workMs", "{error}");

    let edited = json!({"id": first.id.to_string(), "payload": {"group": "fixed"}});
    let (failed, replay) = call(&f.tools, &contoso(), "replay_failure", edited).await;
    assert!(!failed, "{replay}");
    assert_eq!(replay["edited"], true);
    assert_eq!(replay["by"], "key:contoso-key");
    assert!(replay["replayId"].is_string());
    let (_, listed) = call(&f.tools, &contoso(), "list_failures", json!({})).await;
    assert_eq!(listed["count"], 2, "a replayed dead letter leaves the default list");
    let (_, listed) = call(&f.tools, &contoso(), "list_failures", json!({"includeReplayed": true})).await;
    assert_eq!(listed["count"], 3);
}

#[test]
fn every_tool_has_an_object_schema() {
    let listed = tools::list().expect("every tool's arguments have an object schema");
    assert_eq!(listed.len(), tools::NAMES.len());
    assert_eq!(listed[0].name, tools::SendCommand::NAME);
}

#[tokio::test]
async fn a_failure_group_is_replayed_or_purged_whole_within_the_callers_tenant() {
    let f = fixture().await;
    let ours = [
        dead_letter(&f.backends, "contoso", "invalid-field").await,
        dead_letter(&f.backends, "contoso", "invalid-field").await,
    ];
    let other_cause = dead_letter(&f.backends, "contoso", "retries-exhausted").await;
    let theirs = dead_letter(&f.backends, "fabrikam", "invalid-field").await;

    let (_, grouped) = call(&f.tools, &contoso(), "list_failures", json!({"grouped": true})).await;
    let group = grouped["groups"][0].clone();
    assert_eq!(group["count"], 2, "{grouped}");
    assert_eq!(group["pattern"], "invalid-field: gave up");
    let fingerprint = group["fingerprint"].as_str().expect("a fingerprint").to_owned();
    assert_eq!(grouped["groups"][1]["ids"], json!([other_cause.id]));

    // Each action needs its right.
    let reader = caller("contoso", &[Scope::DeliveriesRead]);
    let (failed, error) = call(
        &f.tools,
        &reader,
        "replay_failure_group",
        json!({"fingerprint": fingerprint}),
    )
    .await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "forbidden", "{error}");
    let replayer = caller("contoso", &[Scope::DeadLettersReplay]);
    let (failed, error) = call(
        &f.tools,
        &replayer,
        "purge_failure_group",
        json!({"fingerprint": fingerprint}),
    )
    .await;
    assert!(failed, "purging needs admin");
    assert_eq!(error["error"]["code"], "forbidden", "{error}");

    // Replaying the group replays the caller's dead letters of that cause only.
    let (failed, job) = call(
        &f.tools,
        &replayer,
        "replay_failure_group",
        json!({"fingerprint": fingerprint, "rate": 50.0}),
    )
    .await;
    assert!(!failed, "{job}");
    assert_eq!(job["total"], 2, "{job}");
    for record in &ours {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let stored = f
                .backends
                .store
                .dead_letter(&record.id.to_string(), None)
                .await
                .expect("kept");
            if stored.status == DeadLetterStatus::Replayed {
                assert_eq!(stored.replays[0].by, "key:contoso-key", "who replayed it is recorded");
                break;
            }
            assert!(Instant::now() < deadline, "{} was not replayed", record.id);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // The job is followed by its id, and a finished job cannot be paused.
    let job_id = job["id"].as_str().expect("a job id").to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    let followed = loop {
        let (failed, followed) = call(&f.tools, &reader, "get_replay_job", json!({"id": job_id})).await;
        assert!(!failed, "{followed}");
        if followed["status"] == "finished" {
            break followed;
        }
        assert!(Instant::now() < deadline, "the job did not finish: {followed}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(followed["replayedCount"], 2, "{followed}");
    assert_eq!(followed["request"], json!({"group": fingerprint}));
    let (failed, error) = call(
        &f.tools,
        &replayer,
        "control_replay_job",
        json!({"id": job_id, "action": "pause"}),
    )
    .await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "conflict", "{error}");
    let (failed, error) = call(
        &f.tools,
        &caller("fabrikam", &[Scope::DeadLettersReplay]),
        "get_replay_job",
        json!({"id": job_id}),
    )
    .await;
    assert!(failed);
    assert_eq!(
        error["error"]["code"], "not-found",
        "another tenant does not find it: {error}"
    );
    for untouched in [&other_cause, &theirs] {
        let stored = f
            .backends
            .store
            .dead_letter(&untouched.id.to_string(), None)
            .await
            .expect("kept");
        assert_eq!(stored.status, DeadLetterStatus::Dead, "{}", untouched.id);
    }
    // Nothing of that cause is left dead in this tenant: not found, though
    // another tenant has the same cause.
    let (failed, error) = call(
        &f.tools,
        &contoso(),
        "purge_failure_group",
        json!({"fingerprint": fingerprint}),
    )
    .await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "not-found", "{error}");

    // The other tenant's admin purges its own group of the same cause.
    let (failed, purged) = call(
        &f.tools,
        &caller("fabrikam", &[Scope::Admin]),
        "purge_failure_group",
        json!({"fingerprint": fingerprint}),
    )
    .await;
    assert!(!failed, "{purged}");
    assert_eq!(purged["purged"], json!([theirs.id]));
    assert!(
        f.backends
            .store
            .dead_letter(&theirs.id.to_string(), None)
            .await
            .is_err()
    );
    assert!(
        f.backends
            .store
            .dead_letter(&other_cause.id.to_string(), None)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn get_release_shows_what_the_release_waits_for_to_its_tenant_only() {
    use crate::ports::store::{CommitOutcome, HandledMessage, SagaWrite};
    let f = fixture().await;
    let state = json!({
        "releaseId": "payments-api-71cc96bd583b",
        "phase": "awaitingApproval",
        "currentEnvironment": "prod",
        "requestedBy": ["key:0a0a0a0a0a0a", "cli:dana"],
        "waitingFor": {"environment": "prod", "required": 2, "stillNeeded": 1, "approvedBy": ["cli:alice"]},
        "refusedApprovals": [{"environment": "prod", "approver": "key:0a0a0a0a0a0a (agent)",
            "rule": "requester-cannot-approve", "reason": "…", "at": "2026-12-05T03:00:00Z"}],
        "history": [{"at": "2026-12-05T03:00:00Z", "messageType": "ApproveRelease", "phase": "awaitingApproval", "note": "refused"}],
        "emitted": ["ReleasePlanned"]
    });
    let outcome = f
        .backends
        .store
        .commit_handled(HandledMessage {
            consumer: "release-orchestration".into(),
            message_id: Uuid::now_v7().to_string(),
            message_type: "ApproveRelease".into(),
            saga: Some(SagaWrite {
                kind: "release".into(),
                key: "contoso/payments-api-71cc96bd583b".into(),
                expected_version: 0,
                state,
                tenant_id: Some("contoso".into()),
            }),
            outbox: vec![],
            timeline: vec![],
        })
        .await
        .unwrap();
    assert_eq!(outcome, CommitOutcome::Committed);
    let arguments = json!({"releaseId": "payments-api-71cc96bd583b"});
    let (failed, release) = call(&f.tools, &contoso(), "get_release", arguments.clone()).await;
    assert!(!failed, "{release}");
    assert_eq!(release["waitingFor"]["stillNeeded"], 1, "{release}");
    assert_eq!(release["refusedApprovals"][0]["rule"], "requester-cannot-approve");
    assert_eq!(release["requestedBy"][1], "cli:dana");
    assert_eq!(release["recentSteps"][0]["messageType"], "ApproveRelease");
    assert!(release.get("emitted").is_none(), "only what an agent needs: {release}");
    // Another tenant's key: not found, as a release that does not exist.
    let (failed, error) = call(
        &f.tools,
        &caller("fabrikam", &[Scope::DeliveriesRead]),
        "get_release",
        arguments,
    )
    .await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "not-found", "{error}");
    let (failed, error) = call(&f.tools, &contoso(), "get_release", json!({"releaseId": "nope"})).await;
    assert!(failed);
    assert_eq!(error["error"]["code"], "not-found", "{error}");
}
