//! The HTTP API over real sockets, on the embedded default backends.

use std::sync::Arc;
use std::time::Duration;

use bosun_contracts::{Destination, Envelope};
use reqwest::StatusCode;
use serde_json::{Value, json};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{ApiState, router, serve};
use crate::front::access::{self, Scope};
use crate::front::gateway::Gateway;
use crate::ports::store::{
    CommitOutcome, DeadLetterRecord, DeadLetterStatus, HandledMessage, SagaWrite, TimelineEntry, TimelineStatus,
};
use crate::runtime::config::{AllowedOrigin, Origin};
use crate::runtime::config::{HttpLimits, Settings};
use crate::runtime::metrics::Metrics;
use crate::wiring::Backends;

struct Api {
    url: String,
    client: reqwest::Client,
    backends: Backends,
    draining: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Api {
    async fn start() -> Self {
        Self::start_with_limit(64 * 1024).await
    }

    async fn start_with_limit(max_body: usize) -> Self {
        Self::start_on(|listener, state| {
            tokio::spawn(async move { axum::serve(listener, router(state, max_body)).await });
        })
        .await
    }

    /// The API served as `bosun serve --http` serves it: through
    /// [`serve`], under `limits`.
    async fn start_serving(limits: HttpLimits) -> Self {
        Self::start_on(|listener, state| {
            tokio::spawn(serve(listener, state, 64 * 1024, limits, CancellationToken::new()));
        })
        .await
    }

    /// A fresh data directory and gateway, served on a loopback port by
    /// `spawn_server`.
    async fn start_on(spawn_server: impl FnOnce(tokio::net::TcpListener, ApiState)) -> Self {
        Self::start_with_settings(|_| {}, spawn_server).await
    }

    /// [`Api::start_on`], with settings changed by `change`.
    async fn start_with_settings(
        change: impl FnOnce(&mut Settings),
        spawn_server: impl FnOnce(tokio::net::TcpListener, ApiState),
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::with_data_dir(dir.path());
        change(&mut settings);
        let backends = Backends::open(&settings).await.unwrap();
        let draining = CancellationToken::new();
        let gateway = Gateway::new(backends.clone(), draining.clone());
        // As `bosun serve --http` does: stored bulk replay jobs run here.
        gateway.spawn_replay_runner(CancellationToken::new());
        let state = ApiState::new(gateway, Arc::new(Metrics::new()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        spawn_server(listener, state);
        Self {
            url,
            client: reqwest::Client::new(),
            backends,
            draining,
            _dir: dir,
        }
    }

    /// The Prometheus text of `/metrics`.
    async fn metrics(&self) -> String {
        let response = self.client.get(format!("{}/metrics", self.url)).send().await.unwrap();
        response.text().await.unwrap()
    }

    async fn key(&self, tenant: &str, scopes: &[Scope]) -> String {
        let made = access::generate(tenant, scopes, "test", None, access::DEFAULT_MAX_KEY_LIFETIME).unwrap();
        self.backends.access.insert_api_key(made.record).await.unwrap();
        made.key
    }

    fn get(&self, key: &str, path: &str) -> reqwest::RequestBuilder {
        self.client.get(format!("{}{path}", self.url)).bearer_auth(key)
    }

    fn post(&self, key: &str, path: &str) -> reqwest::RequestBuilder {
        self.client.post(format!("{}{path}", self.url)).bearer_auth(key)
    }

    async fn send_commit(&self, key: &str, repository: &str) -> Value {
        let response = self
            .post(key, "/v1/commands/CreateCommit")
            .json(&commit(repository))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        response.json().await.unwrap()
    }

    /// A dead letter of `tenant`'s commit command, as the host records one.
    async fn dead_letter(&self, tenant: &str, reason: &str) -> (Uuid, Envelope) {
        let message = bosun_contracts::Message::from_type_and_payload("CreateCommit", &commit("payments-api")).unwrap();
        let envelope = Envelope::new(&message, Uuid::now_v7(), tenant, "test");
        let record = DeadLetterRecord {
            id: Uuid::now_v7(),
            consumer: Some("commit".into()),
            entity: "commit".into(),
            transport_sequence: None,
            broker_message_id: envelope.message_id.to_string(),
            message_id: Some(envelope.message_id.to_string()),
            message_type: Some("CreateCommit".into()),
            correlation_id: Some(envelope.correlation_id.to_string()),
            tenant_id: Some(tenant.into()),
            body: envelope.to_vec(),
            reason: reason.into(),
            description: format!("{reason}: the repository does not exist"),
            error_chain: vec![reason.into()],
            attempts: vec![],
            dead_lettered_at: OffsetDateTime::now_utc(),
            origin: "host".into(),
            status: DeadLetterStatus::Dead,
            replays: vec![],
        };
        let id = record.id;
        self.backends.store.record_dead_letter(record, None).await.unwrap();
        (id, envelope)
    }

    /// Seeds the GitOps saga of `environment` of `tenant` with
    /// [`environment_state`].
    async fn seed_environment(&self, tenant: &str, environment: &str) {
        self.seed_gitops(tenant, environment, environment_state(environment))
            .await;
    }

    /// Stores `state` as the GitOps saga of `environment` of `tenant`.
    async fn seed_gitops(&self, tenant: &str, environment: &str, state: Value) {
        let outcome = self
            .backends
            .store
            .commit_handled(HandledMessage {
                consumer: "gitops".into(),
                message_id: Uuid::now_v7().to_string(),
                message_type: "ReleaseVerified".into(),
                saga: Some(SagaWrite {
                    kind: "gitops".into(),
                    key: format!("{tenant}/{environment}"),
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

    async fn queue_depth(&self, queue: &str) -> u64 {
        self.backends
            .transport
            .depth(&Destination::Queue(queue.into()))
            .await
            .unwrap()
    }
}

/// An environment where module payments-api runs payments-api-2,
/// payments-api-1 and payments-api-2 were verified (in that order), and
/// payments-api-3 is queued.
fn environment_state(environment: &str) -> Value {
    let promotion = |release: &str| {
        json!({"releaseId": release, "moduleId": "payments-api", "environment": environment,
            "environmentRepository": "environments", "desiredCommitSha": "a".repeat(40),
            "approvedBy": "cli:alice", "promotedAt": "2026-12-01T10:00:00Z"})
    };
    let verified =
        |release: &str, at: &str| json!({"releaseId": release, "promotion": promotion(release), "verifiedAt": at});
    json!({
        "environment": environment,
        "repository": "environments",
        "phase": "synced",
        "apps": {"payments-api": {"releaseId": "payments-api-2", "promotedAt": "2026-12-02T10:00:00Z"}},
        "verified": {"payments-api": [
            verified("payments-api-1", "2026-12-01T11:00:00Z"),
            verified("payments-api-2", "2026-12-02T11:00:00Z")
        ]},
        "queued": [promotion("payments-api-3")]
    })
}

fn commit(repository: &str) -> Value {
    json!({"repository": repository, "branch": "main", "message": "m", "files": [{"path": "README.md", "content": "x"}]})
}

async fn error_of(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    (status, body["error"].clone())
}

#[tokio::test]
async fn health_readiness_and_draining() {
    let api = Api::start().await;
    let health: Value = api
        .client
        .get(format!("{}/healthz", api.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    let ready = api.client.get(format!("{}/readyz", api.url)).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["checks"]["transport"], "ok");
    assert_eq!(body["checks"]["store"], "ok");
    assert_eq!(body["checks"]["schema"], "ok");
    api.draining.cancel();
    let ready = api.client.get(format!("{}/readyz", api.url)).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ready.json::<Value>().await.unwrap()["checks"]["draining"], true);
}

#[tokio::test]
async fn keys_are_required_and_scopes_enforced() {
    let api = Api::start().await;
    let path = "/v1/commands/CreateCommit";
    let response = api
        .client
        .post(format!("{}{path}", api.url))
        .json(&commit("r"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(response.headers().contains_key("www-authenticate"));
    let (_, error) = error_of(response).await;
    assert_eq!(error["code"], "unauthorized");

    let garbage = format!("bsn_{}_{}", "0".repeat(12), "0".repeat(64));
    for key in ["nonsense", garbage.as_str()] {
        let response = api.post(key, path).json(&commit("r")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{key}");
    }

    let reader = api.key("contoso", &[Scope::DeliveriesRead]).await;
    let (status, error) = error_of(api.post(&reader, path).json(&commit("r")).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(error["message"].as_str().unwrap().contains("commands:send"), "{error}");

    // X-Api-Key works as well, and a revoked key stops at once.
    let sender = api.key("contoso", &[Scope::CommandsSend]).await;
    let response = api
        .client
        .post(format!("{}{path}", api.url))
        .header("x-api-key", &sender)
        .json(&commit("r"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let id = access::parse_key(&sender).unwrap().0.to_owned();
    api.backends
        .access
        .revoke_api_key(&id, OffsetDateTime::now_utc())
        .await
        .unwrap();
    let response = api.post(&sender, path).json(&commit("r")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    // Purge needs admin; replay scope is not enough.
    let replayer = api.key("contoso", &[Scope::DeadLettersReplay]).await;
    let (dead, _) = api.dead_letter("contoso", "invalid-field").await;
    let response = api
        .client
        .delete(format!("{}/v1/dead-letters/{dead}", api.url))
        .bearer_auth(&replayer)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let admin = api.key("contoso", &[Scope::Admin]).await;
    let response = api
        .client
        .delete(format!("{}/v1/dead-letters/{dead}", api.url))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        api.get(&admin, &format!("/v1/dead-letters/{dead}"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn commands_are_validated_and_record_the_key() {
    let api = Api::start_with_limit(4096).await;
    let key = api.key("contoso", &[Scope::CommandsSend, Scope::DeliveriesRead]).await;
    let accepted = api.send_commit(&key, "payments-api").await;
    assert_eq!(accepted["tenantId"], "contoso");
    assert_eq!(accepted["destination"], "commit");
    assert_eq!(api.queue_depth("commit").await, 1);
    let correlation = accepted["correlationId"].as_str().unwrap();
    let delivery: Value = api
        .get(&key, &format!("/v1/deliveries/{correlation}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(delivery["status"], "in-progress");
    assert_eq!(delivery["tenantId"], "contoso");
    let key_id = access::parse_key(&key).unwrap().0.to_owned();
    let detail = delivery["messages"][0]["events"][0]["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("api:{key_id}")), "{detail}");
    let listed: Value = api
        .get(&key, "/v1/deliveries")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["deliveries"][0]["startedBy"], format!("api:{key_id}"));

    // Malformed JSON: 400. An invalid field: 422 naming it. Unknown type
    // and events: 404. Too large: 413. Empty: 422.
    let path = "/v1/commands/CreateCommit";
    let (status, error) = error_of(
        api.post(&key, path)
            .header("content-type", "application/json")
            .body("{\"repository\": ")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, error["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("malformed-json"))
    );
    let (status, error) = error_of(
        api.post(&key, path)
            .json(&json!({"repository": "r", "message": "m", "files": []}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(error["code"], "invalid-field");
    assert!(error["field"].as_str().unwrap().starts_with("payload"), "{error}");
    assert!(error["message"].as_str().unwrap().contains("branch"), "{error}");
    let (status, error) = error_of(
        api.post(&key, "/v1/commands/Nope")
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, error["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("unknown-type"))
    );
    let (status, error) = error_of(
        api.post(&key, "/v1/commands/CommitCreated")
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(error["message"].as_str().unwrap().contains("event"), "{error}");
    let big = json!({"repository": "r", "branch": "main", "message": "m",
                     "files": [{"path": "a", "content": "x".repeat(5000)}]});
    let (status, error) = error_of(api.post(&key, path).json(&big).send().await.unwrap()).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload-too-large"))
    );
    let response = api.post(&key, path).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(api.queue_depth("commit").await, 1, "nothing invalid was sent");
}

#[tokio::test]
async fn idempotency_key_returns_the_first_answer_even_under_concurrency() {
    let api = Api::start().await;
    let key = api.key("contoso", &[Scope::CommandsSend]).await;
    let send = |body: Value, idempotency: &'static str| {
        api.post(&key, "/v1/commands/CreateCommit")
            .header("idempotency-key", idempotency)
            .json(&body)
            .send()
    };
    let responses = futures_util::future::join_all((0..12).map(|_| send(commit("payments-api"), "same-request"))).await;
    let mut message_ids = Vec::new();
    let mut replayed = 0;
    for response in responses {
        let response = response.unwrap();
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        if response.headers().get("idempotent-replayed").is_some() {
            replayed += 1;
        }
        let body: Value = response.json().await.unwrap();
        message_ids.push(body["messageId"].as_str().unwrap().to_owned());
    }
    message_ids.dedup();
    assert_eq!(message_ids.len(), 1, "every answer names the same message");
    assert_eq!(replayed, 11, "one request sent, eleven got its answer");
    assert_eq!(api.queue_depth("commit").await, 1, "exactly one command was sent");

    // The same key with another body is refused.
    let (status, error) = error_of(send(commit("other-repo"), "same-request").await.unwrap()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(error["code"], "idempotency-key-reused");
    // A failed validation does not use the key up.
    let response = send(json!({"repository": "r"}), "fresh-key").await.unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let response = send(commit("payments-api"), "fresh-key").await.unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert!(response.headers().get("idempotent-replayed").is_none());
    assert_eq!(api.queue_depth("commit").await, 2);
}

#[tokio::test]
async fn tenants_never_see_each_other() {
    let api = Api::start().await;
    let contoso = api.key("contoso", &[Scope::Admin]).await;
    let fabrikam = api.key("fabrikam", &[Scope::Admin]).await;
    let platform = api
        .key(access::ALL_TENANTS, &[Scope::DeliveriesRead, Scope::CommandsSend])
        .await;

    let accepted = api.send_commit(&contoso, "payments-api").await;
    let correlation = accepted["correlationId"].as_str().unwrap().to_owned();
    let (dead, _) = api.dead_letter("contoso", "invalid-field").await;

    let delivery = format!("/v1/deliveries/{correlation}");
    assert_eq!(
        api.get(&fabrikam, &delivery).send().await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.get(&fabrikam, &format!("{delivery}/events"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.get(&platform, &delivery).send().await.unwrap().status(),
        StatusCode::OK
    );
    let listed: Value = api
        .get(&fabrikam, "/v1/deliveries")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["deliveries"], json!([]));
    let listed: Value = api
        .get(&fabrikam, "/v1/dead-letters")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["deadLetters"], json!([]));
    let groups: Value = api
        .get(&fabrikam, "/v1/dead-letters/groups")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(groups["groups"], json!([]));
    for path in [
        format!("/v1/dead-letters/{dead}"),
        format!("/v1/dead-letters/{}", &dead.to_string()[..8]),
    ] {
        assert_eq!(
            api.get(&fabrikam, &path).send().await.unwrap().status(),
            StatusCode::NOT_FOUND
        );
    }
    let response = api
        .post(&fabrikam, &format!("/v1/dead-letters/{dead}/replay"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let response = api
        .post(&fabrikam, "/v1/dead-letters/replays")
        .json(&json!({"ids": [dead]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    // Joining another tenant's delivery is refused as if it did not exist.
    let response = api
        .post(&fabrikam, "/v1/commands/CreateCommit")
        .header("x-correlation-id", &correlation)
        .json(&commit("r"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    // A tenant key cannot act for another tenant (403: it is a matter of
    // authority, whichever tenant is named); a platform key must name one.
    let (status, error) = error_of(
        api.post(&contoso, "/v1/commands/CreateCommit")
            .header("x-bosun-tenant", "fabrikam")
            .json(&commit("r"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, error["code"].as_str(), error["field"].as_str()),
        (
            StatusCode::FORBIDDEN,
            Some("tenant-not-allowed"),
            Some("X-Bosun-Tenant")
        )
    );
    let response = api
        .post(&platform, "/v1/commands/CreateCommit")
        .json(&commit("r"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let response = api
        .post(&platform, "/v1/commands/CreateCommit")
        .header("x-bosun-tenant", "fabrikam")
        .json(&commit("r"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(response.json::<Value>().await.unwrap()["tenantId"], "fabrikam");

    // Sagas: a saga belongs to the tenant whose message started it.
    let saga = |tenant: &str, key: &str| HandledMessage {
        consumer: "release-orchestration".into(),
        message_id: Uuid::now_v7().to_string(),
        message_type: "ReleasePlanned".into(),
        saga: Some(SagaWrite {
            kind: "release".into(),
            key: key.into(),
            expected_version: 0,
            state: json!({"stage": "planned"}),
            tenant_id: Some(tenant.into()),
        }),
        outbox: vec![],
        timeline: vec![],
    };
    assert_eq!(
        api.backends
            .store
            .commit_handled(saga("contoso", "rel-1"))
            .await
            .unwrap(),
        CommitOutcome::Committed
    );
    api.backends
        .store
        .commit_handled(saga("fabrikam", "rel-2"))
        .await
        .unwrap();
    let listed: Value = api
        .get(&fabrikam, "/v1/sagas")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let keys: Vec<&str> = listed["sagas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["rel-2"]);
    assert_eq!(
        api.get(&fabrikam, "/v1/sagas/release/rel-1")
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::NOT_FOUND
    );
    let saga: Value = api
        .get(&contoso, "/v1/sagas/release/rel-1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(saga["tenantId"], "contoso");
}

#[tokio::test]
async fn a_saga_diagram_has_its_machine_current_state_and_the_way_its_history_went() {
    let api = Api::start().await;
    let contoso = api.key("contoso", &[Scope::DeliveriesRead]).await;
    let fabrikam = api.key("fabrikam", &[Scope::DeliveriesRead]).await;
    // Four saves of a release: collected, provisioned, synced.
    for (version, (message_type, phase)) in [
        ("BuildCompleted", "collecting"),
        ("ContainerImageBuilt", "provisioning"),
        ("InfrastructureProvisioned", "syncing"),
        ("GitOpsSynced", "completed"),
    ]
    .into_iter()
    .enumerate()
    {
        let outcome = api
            .backends
            .store
            .commit_handled(HandledMessage {
                consumer: "release-orchestration".into(),
                message_id: Uuid::now_v7().to_string(),
                message_type: message_type.into(),
                saga: Some(SagaWrite {
                    kind: "release".into(),
                    key: "contoso/rel-9".into(),
                    expected_version: version as i64,
                    state: json!({"releaseId": "rel-9", "phase": phase}),
                    tenant_id: Some("contoso".into()),
                }),
                outbox: vec![],
                timeline: vec![],
            })
            .await
            .unwrap();
        assert_eq!(outcome, CommitOutcome::Committed);
    }
    let response = api
        .get(&contoso, "/v1/sagas/release/rel-9/diagram")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let diagram: Value = response.json().await.unwrap();
    assert_eq!(diagram["current"], "completed");
    assert_eq!(diagram["pathFound"], true);
    assert_eq!(diagram["machine"]["initial"], "collecting");
    assert_eq!(diagram["machine"]["states"].as_array().unwrap().len(), 7);
    assert_eq!(
        diagram["visited"],
        json!(["collecting", "provisioning", "syncing", "completed"])
    );
    let transitions = diagram["machine"]["transitions"].as_array().unwrap();
    let taken: Vec<(String, String)> = diagram["taken"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let edge = &transitions[t["transition"].as_u64().unwrap() as usize];
            (
                edge["from"].as_str().unwrap().to_owned(),
                edge["to"].as_str().unwrap().to_owned(),
            )
        })
        .filter(|(from, to)| from != to)
        .collect();
    assert_eq!(taken.len(), 3, "{taken:?}");
    let recent = diagram["recent"].as_array().unwrap();
    assert_eq!(recent.len(), 4);
    assert_eq!(recent[3]["messageType"], "GitOpsSynced");
    assert_eq!(
        (recent[3]["from"].as_str(), recent[3]["to"].as_str()),
        (Some("syncing"), Some("completed"))
    );
    // Another tenant's saga reads as not found; an unknown kind names the field.
    let other = api
        .get(&fabrikam, "/v1/sagas/release/rel-9/diagram")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::NOT_FOUND);
    let unknown = api
        .get(&contoso, "/v1/sagas/billing/rel-9/diagram")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(unknown.json::<Value>().await.unwrap()["error"]["field"], "kind");
}

#[tokio::test]
async fn dead_letters_group_replay_edit_and_bulk_with_progress() {
    let api = Api::start().await;
    let key = api
        .key("contoso", &[Scope::DeliveriesRead, Scope::DeadLettersReplay])
        .await;
    let key_id = access::parse_key(&key).unwrap().0.to_owned();
    let (first, envelope) = api.dead_letter("contoso", "invalid-field").await;
    let mut group = vec![first];
    for _ in 0..3 {
        group.push(api.dead_letter("contoso", "invalid-field").await.0);
    }
    let (other, _) = api.dead_letter("contoso", "transient-exhausted").await;

    let groups: Value = api
        .get(&key, "/v1/dead-letters/groups")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(groups["groups"][0]["reason"], "invalid-field");
    assert_eq!(groups["groups"][0]["count"], 4);
    assert_eq!(groups["groups"][1]["count"], 1);
    let listed: Value = api
        .get(&key, "/v1/dead-letters?reason=transient-exhausted")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["deadLetters"].as_array().unwrap().len(), 1);
    let (status, error) = error_of(api.get(&key, "/v1/dead-letters?since=yesterday").send().await.unwrap()).await;
    assert_eq!(
        (status, error["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("since"))
    );

    let detail: Value = api
        .get(&key, &format!("/v1/dead-letters/{other}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detail["envelope"]["type"], "CreateCommit");
    assert_eq!(detail["reason"], "transient-exhausted");

    // Edit-and-replay: a bad payload names the field and sends nothing.
    let replay = format!("/v1/dead-letters/{other}/replay");
    let (status, error) = error_of(
        api.post(&key, &replay)
            .json(&json!({"payload": {"repository": "payments-api"}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(error["field"].as_str().unwrap().starts_with("payload"), "{error}");
    assert_eq!(api.queue_depth("commit").await, 0);
    let mut fixed = commit("payments-api-fixed");
    fixed["message"] = json!("edited");
    let done: Value = api
        .post(&key, &replay)
        .json(&json!({"payload": fixed}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["edited"], true);
    assert_eq!(done["by"], format!("key:{key_id}"));
    let received = api
        .backends
        .transport
        .receive(&Destination::Queue("commit".into()), 1, Duration::from_secs(30))
        .await
        .unwrap();
    let replayed = Envelope::from_slice(&received[0].body).unwrap();
    assert_eq!(replayed.payload["repository"], "payments-api-fixed");
    api.backends.transport.complete(&received[0].lock).await.unwrap();

    // Bulk replay of the group, 20 per second, followed to the end.
    let response = api
        .post(&key, "/v1/dead-letters/replays")
        .json(&json!({"filter": {"reason": "invalid-field"}, "rate": 20.0}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let job: Value = response.json().await.unwrap();
    assert_eq!(job["total"], 4);
    let finished = loop {
        let job: Value = api.get(&key, &location).send().await.unwrap().json().await.unwrap();
        if job["status"] == "finished" {
            break job;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(finished["done"], 4);
    assert_eq!(finished["replayed"].as_array().unwrap().len(), 4);
    assert_eq!(finished["failed"], json!([]));
    assert_eq!(api.queue_depth("commit").await, 4);
    let shown: Value = api
        .get(&key, &format!("/v1/dead-letters/{first}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shown["status"], "replayed");
    assert_eq!(shown["replays"][0]["by"], format!("key:{key_id}"));
    let received = api
        .backends
        .transport
        .receive(&Destination::Queue("commit".into()), 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(
        received
            .iter()
            .any(|m| Envelope::from_slice(&m.body).unwrap().message_id == envelope.message_id)
    );
    let groups: Value = api
        .get(&key, "/v1/dead-letters/groups")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(groups["groups"], json!([]), "all replayed");

    let (status, error) = error_of(
        api.post(&key, "/v1/dead-letters/replays")
            .json(&json!({"ids": ["not-a-uuid"]}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, error["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("ids[0]"))
    );
}

/// The status and `error.field` of an answer.
async fn refusal(request: reqwest::RequestBuilder) -> (StatusCode, String) {
    let (status, error) = error_of(request.send().await.unwrap()).await;
    (status, error["field"].as_str().unwrap_or("(none)").to_owned())
}

#[tokio::test]
async fn bodies_queries_and_headers_are_strict_and_name_what_they_refuse() {
    let api = Api::start().await;
    let key = api.key("contoso", &[Scope::Admin]).await;
    let (dead, _) = api.dead_letter("contoso", "invalid-field").await;
    let (other, _) = api.dead_letter("contoso", "transient-exhausted").await;
    let invalid = StatusCode::UNPROCESSABLE_ENTITY;
    let bulk = |body: Value| api.post(&key, "/v1/dead-letters/replays").json(&body);

    // A filter with a wrong type and a misspelt key replayed every dead
    // letter of the tenant before; now each is refused by name.
    for (body, field) in [
        (
            json!({"filter": {"consumer": ["commit"], "consumr": "x"}}),
            "filter.consumer",
        ),
        (json!({"filter": {"consumr": "x"}}), "filter.consumr"),
        (json!({"filter": {"consumer": null}}), "filter.consumer"),
        (json!({"filter": {"consumer": ""}}), "filter.consumer"),
        (json!({"filter": {"since": ""}}), "filter.since"),
        (json!({"filter": {"since": "yesterday"}}), "filter.since"),
        (json!({"filter": "commit"}), "filter"),
        (json!({"ids": [dead], "tenantId": "evil"}), "tenantId"),
        (json!({"ids": ["not-a-uuid"]}), "ids[0]"),
        (json!({"ids": [dead.simple().to_string()]}), "ids[0]"),
        (json!({"ids": []}), "ids"),
        (json!({"ids": [dead], "rate": 0.0001}), "rate"),
        (json!({"ids": [dead], "rate": "fast"}), "rate"),
        (json!({"ids": [dead], "filter": {"reason": "invalid-field"}}), "ids"),
        (json!([dead]), "body"),
        (json!({}), "ids"),
        // Everything is asked for explicitly, and only alone.
        (json!({"filter": {}}), "all"),
        (json!({"all": false}), "ids"),
        (json!({"all": true, "filter": {"reason": "invalid-field"}}), "all"),
        (json!({"all": true, "filter": {}}), "all"),
        (json!({"all": true, "ids": [dead]}), "all"),
        (json!({"all": "yes"}), "all"),
    ] {
        assert_eq!(refusal(bulk(body.clone())).await, (invalid, field.to_owned()), "{body}");
    }
    let (status, error) = error_of(
        api.post(&key, "/v1/dead-letters/replays")
            .header("content-type", "application/json")
            .body("{\"ids\": [")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, error["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("malformed-json"))
    );
    assert_eq!(api.queue_depth("commit").await, 0, "nothing was replayed");
    let job: Value = bulk(json!({"all": true, "rate": 50}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (job["total"].as_u64(), &job["request"]),
        (Some(2), &json!({"all": true})),
        "{job}"
    );

    // One replay: only `payload`, an object.
    let replay = format!("/v1/dead-letters/{other}/replay");
    for (body, field) in [
        (json!({"tenantId": "evil"}), "tenantId"),
        (
            json!({"payload": commit("r"), "messageType": "CreateCommit"}),
            "messageType",
        ),
        (json!({"payload": null}), "payload"),
        (json!({"payload": "text"}), "payload"),
    ] {
        assert_eq!(
            refusal(api.post(&key, &replay).json(&body)).await,
            (invalid, field.to_owned()),
            "{body}"
        );
    }
    let group = "/v1/dead-letters/groups/0123456789abcdef/replay";
    for (body, field) in [(json!({"rate": 1, "all": true}), "all"), (json!({"rate": 0}), "rate")] {
        assert_eq!(
            refusal(api.post(&key, group).json(&body)).await,
            (invalid, field.to_owned()),
            "{body}"
        );
    }

    // Query strings: unknown, repeated, empty or out-of-range parameters.
    let delivery = format!("/v1/deliveries/{}", Uuid::now_v7());
    for (path, field) in [
        ("/v1/dead-letters?consumr=commit", "consumr"),
        ("/v1/dead-letters?consumer=", "consumer"),
        ("/v1/dead-letters?since=", "since"),
        ("/v1/dead-letters?limit=501", "limit"),
        ("/v1/dead-letters/groups?limit=1&limit=2", "limit"),
        ("/v1/deliveries?limit=501", "limit"),
        ("/v1/deliveries?tenant=fabrikam", "tenant"),
        ("/v1/sagas?kind=billing", "kind"),
        ("/v1/replays?limit=201", "limit"),
        (&format!("{delivery}?verbose=true"), "verbose"),
    ] {
        assert_eq!(
            refusal(api.get(&key, path)).await,
            (invalid, field.to_owned()),
            "{path}"
        );
    }

    // Command headers, as the document describes them.
    let send = |name: &str, value: &str| {
        api.post(&key, "/v1/commands/CreateCommit")
            .header(name, value)
            .json(&commit("r"))
    };
    for (name, value) in [
        ("x-bosun-tenant", ""),
        ("x-bosun-tenant", "Contoso"),
        ("idempotency-key", "two words"),
        ("x-correlation-id", "0193a0c27c1e7d2a9b5e3f1d2c4b5a69"),
    ] {
        let (status, field) = refusal(send(name, value)).await;
        assert_eq!(status, invalid, "{name}: {value}");
        assert!(field.eq_ignore_ascii_case(name), "{name}: {field}");
    }
    assert_eq!(
        send("x-bosun-tenant", "contoso").send().await.unwrap().status(),
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn events_stream_ends_when_the_delivery_completes() {
    let api = Api::start().await;
    let key = api.key("contoso", &[Scope::CommandsSend, Scope::DeliveriesRead]).await;
    let accepted = api.send_commit(&key, "payments-api").await;
    let correlation = accepted["correlationId"].as_str().unwrap().to_owned();
    let message_id = accepted["messageId"].as_str().unwrap().to_owned();
    let mut stream = api
        .get(&key, &format!("/v1/deliveries/{correlation}/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    assert!(
        stream.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    // The commit consumer handles the command (as the host would record it).
    let store = Arc::clone(&api.backends.store);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        store
            .append_timeline(vec![TimelineEntry {
                correlation_id: correlation,
                message_id,
                message_type: "CreateCommit".into(),
                consumer: Some("commit".into()),
                status: TimelineStatus::Completed,
                attempt: 0,
                at: OffsetDateTime::now_utc(),
                detail: None,
            }])
            .await
            .unwrap();
    });
    let mut text = String::new();
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(chunk) = stream.chunk().await.unwrap() {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(read.is_ok(), "the stream closes by itself; got so far:\n{text}");
    assert_eq!(text.matches("event: timeline").count(), 2, "{text}");
    assert!(text.contains("event: end\ndata: {\"status\":\"completed\"}"), "{text}");
}

/// The store's fallback poll is a minute here, so only the write's own
/// signal can wake the stream in time: the stream is woken by what it
/// waits for, not by a timer.
#[tokio::test]
async fn events_stream_is_woken_by_the_timeline_write_not_a_poll() {
    let api = Api::start_with_settings(
        |settings| settings.poll_interval = Duration::from_secs(60),
        |listener, state| {
            tokio::spawn(serve(
                listener,
                state,
                64 * 1024,
                HttpLimits::default(),
                CancellationToken::new(),
            ));
        },
    )
    .await;
    let key = api.key("contoso", &[Scope::CommandsSend, Scope::DeliveriesRead]).await;
    let accepted = api.send_commit(&key, "payments-api").await;
    let correlation = accepted["correlationId"].as_str().unwrap().to_owned();
    let message_id = accepted["messageId"].as_str().unwrap().to_owned();
    let mut stream = api
        .get(&key, &format!("/v1/deliveries/{correlation}/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    // The stream has read the timeline (the `sent` line) before the
    // command is handled: it waits, in progress.
    let mut text = String::new();
    while !text.contains("event: timeline") {
        let chunk = tokio::time::timeout(Duration::from_secs(20), stream.chunk())
            .await
            .expect("the first line within 20 s")
            .unwrap()
            .expect("the stream stays open");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(!text.contains("event: end"), "{text}");
    api.backends
        .store
        .append_timeline(vec![TimelineEntry {
            correlation_id: correlation,
            message_id,
            message_type: "CreateCommit".into(),
            consumer: Some("commit".into()),
            status: TimelineStatus::Completed,
            attempt: 0,
            at: OffsetDateTime::now_utc(),
            detail: None,
        }])
        .await
        .unwrap();
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(chunk) = stream.chunk().await.unwrap() {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(read.is_ok(), "woken well before the 60 s fallback; got so far:\n{text}");
    assert_eq!(text.matches("event: timeline").count(), 2, "{text}");
    assert!(text.contains("event: end\ndata: {\"status\":\"completed\"}"), "{text}");
}

#[tokio::test]
async fn the_browser_s_favicon_request_is_answered_204_without_a_key_and_left_out_of_the_document() {
    let api = Api::start().await;
    for _ in 0..2 {
        let response = api.client.get(format!("{}/favicon.ico", api.url)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
        assert!(
            response.headers()["cache-control"]
                .to_str()
                .unwrap()
                .contains("max-age="),
            "kept by the browser"
        );
        assert!(response.bytes().await.unwrap().is_empty());
    }
    let metrics = api.metrics().await;
    assert!(
        metrics.contains("bosun_http_requests_total{method=\"GET\",route=\"/favicon.ico\",status=\"204\"} 2"),
        "{metrics}"
    );
    assert!(!metrics.contains("status=\"404\""), "{metrics}");
    let doc: Value = api
        .client
        .get(format!("{}/openapi.json", api.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["paths"].get("/favicon.ico").is_none(), "undocumented");
}

#[tokio::test]
async fn metrics_openapi_and_console_are_served_and_every_documented_route_exists() {
    let api = Api::start().await;
    let key = api.key("contoso", &[Scope::Admin]).await;
    api.send_commit(&key, "payments-api").await;
    let metrics = api.metrics().await;
    assert!(
        metrics.contains("bosun_http_requests_total{method=\"POST\",route=\"/v1/commands/{type}\",status=\"202\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("bosun_outbox_backlog"), "{metrics}");
    let console = api.client.get(format!("{}/", api.url)).send().await.unwrap();
    assert_eq!(console.status(), StatusCode::OK, "/ redirects to the console");
    assert!(console.text().await.unwrap().contains("<html"));
    for asset in ["/console/app.js", "/console/app.css"] {
        let response = api.client.get(format!("{}{asset}", api.url)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{asset}");
    }

    let doc: Value = api
        .client
        .get(format!("{}/openapi.json", api.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() > 20);
    for (path, operations) in paths {
        let concrete = path
            .split('/')
            .map(|segment| if segment.starts_with('{') { "x" } else { segment })
            .collect::<Vec<_>>()
            .join("/");
        for method in operations.as_object().unwrap().keys() {
            let request = match method.as_str() {
                "get" => api.client.get(format!("{}{concrete}", api.url)),
                "post" => api.client.post(format!("{}{concrete}", api.url)),
                "delete" => api.client.delete(format!("{}{concrete}", api.url)),
                "put" => api.client.put(format!("{}{concrete}", api.url)),
                other => panic!("undocumented method {other}"),
            };
            let response = request.bearer_auth(&key).send().await.unwrap();
            let status = response.status();
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            if status == StatusCode::NOT_FOUND {
                let body: Value = response.json().await.unwrap_or(Value::Null);
                assert_ne!(
                    body["error"]["message"], "no such route",
                    "{method} {path} is documented but not routed"
                );
            }
        }
    }
}

/// The id part of a key (`bsn_<id>_<secret>`), as `/metrics` names it.
fn key_id(key: &str) -> &str {
    key.split('_').nth(1).unwrap()
}

#[tokio::test]
async fn a_key_over_its_budget_gets_429_with_retry_after_and_other_keys_do_not() {
    let api = Api::start_serving(HttpLimits {
        rate_limit_per_second: 1,
        rate_limit_burst: 5,
        ..HttpLimits::default()
    })
    .await;
    let busy = api.key("contoso", &[Scope::DeliveriesRead]).await;
    let quiet = api.key("contoso", &[Scope::DeliveriesRead]).await;

    // Twelve at once from one key, three from another at the same time.
    let burst = futures_util::future::join_all((0..12).map(|_| api.get(&busy, "/v1/deliveries").send()));
    let others = futures_util::future::join_all((0..3).map(|_| api.get(&quiet, "/v1/deliveries").send()));
    let (burst, others) = tokio::join!(burst, others);
    let mut passed = 0;
    let mut refused = Vec::new();
    for response in burst {
        let response = response.unwrap();
        match response.status() {
            StatusCode::OK => passed += 1,
            StatusCode::TOO_MANY_REQUESTS => refused.push(response),
            other => panic!("unexpected {other}"),
        }
    }
    // The burst of 5 passes (one more per second the requests took).
    assert!(passed >= 5, "{passed} passed");
    assert!(!refused.is_empty(), "nothing was refused ({passed} passed)");
    let refused_count = refused.len();
    for response in refused {
        let retry_after: u64 = response
            .headers()
            .get("retry-after")
            .expect("a 429 says when to retry")
            .to_str()
            .unwrap()
            .parse()
            .expect("Retry-After is whole seconds");
        assert!(retry_after >= 1);
        let (_, error) = error_of(response).await;
        assert_eq!(error["code"], "rate-limited");
        assert!(error["message"].as_str().unwrap().contains("retry in"), "{error}");
    }
    for response in others {
        assert_eq!(
            response.unwrap().status(),
            StatusCode::OK,
            "the other key is unaffected"
        );
    }

    // Every authenticated route shares the budget, `/mcp` included; the
    // unauthenticated ones do not have one.
    let mcp = api
        .post(&busy, "/mcp")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), StatusCode::TOO_MANY_REQUESTS);
    let refused_count = refused_count + 1;
    for _ in 0..10 {
        let health = api.client.get(format!("{}/healthz", api.url)).send().await.unwrap();
        assert_eq!(health.status(), StatusCode::OK);
    }

    let metrics = api.metrics().await;
    let line = format!(
        "bosun_http_rate_limited_total{{key=\"{}\"}} {refused_count}",
        key_id(&busy)
    );
    assert!(metrics.contains(&line), "no `{line}` in:\n{metrics}");
    assert!(!metrics.contains(&format!("key=\"{}\"", key_id(&quiet))), "{metrics}");
    assert!(metrics.contains("bosun_http_requests_total{method=\"GET\",route=\"/v1/deliveries\",status=\"429\"}"));
}

#[tokio::test]
async fn mcp_refuses_a_foreign_origin_before_anything_else() {
    let api = Api::start_serving(HttpLimits {
        allowed_origins: vec![
            AllowedOrigin::Loopback,
            AllowedOrigin::Exact(Origin::parse("https://console.example.com").unwrap()),
        ],
        ..HttpLimits::default()
    })
    .await;
    let key = api.key("contoso", &[Scope::Admin]).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});

    // A foreign origin is refused even with a good key, and even without
    // one (before the 401): nothing about the request is answered.
    for with_key in [true, false] {
        let mut request = api
            .client
            .post(format!("{}/mcp", api.url))
            .header("origin", "http://evil.example")
            .json(&ping);
        if with_key {
            request = request.bearer_auth(&key);
        }
        let (status, error) = error_of(request.send().await.unwrap()).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(error["code"], "origin-not-allowed");
    }
    for origin in ["null", "http://console.example.com", "http://localhost.evil.example"] {
        let response = api
            .post(&key, "/mcp")
            .header("origin", origin)
            .json(&ping)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{origin}");
    }
    let get = api
        .get(&key, "/mcp")
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), StatusCode::FORBIDDEN);

    // No Origin (an agent), a loopback page, the configured origin and the
    // server's own address are answered.
    let own = api.url.clone();
    for origin in [
        None,
        Some("http://localhost:5173"),
        Some("https://console.example.com"),
        Some(own.as_str()),
    ] {
        // A Streamable HTTP client accepts both JSON and an event stream.
        let mut request = api
            .post(&key, "/mcp")
            .header("accept", "application/json, text/event-stream")
            .json(&ping);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{origin:?}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["result"], json!({}), "{answer}");
    }
    let get = api.get(&key, "/mcp").send().await.unwrap();
    assert_eq!(get.status(), StatusCode::METHOD_NOT_ALLOWED);
    // The Origin check is /mcp's (as the MCP specification asks): the REST
    // API takes keys in headers, never cookies, so a foreign page cannot
    // act as anyone there.
    let rest = api
        .get(&key, "/v1/deliveries")
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_failure_group_is_shown_replayed_and_purged_over_http() {
    let api = Api::start().await;
    let (first, _) = api.dead_letter("contoso", "retries-exhausted").await;
    let (second, _) = api.dead_letter("contoso", "retries-exhausted").await;
    let (theirs, _) = api.dead_letter("fabrikam", "retries-exhausted").await;
    let reader = api.key("contoso", &[Scope::DeliveriesRead]).await;
    let replayer = api.key("contoso", &[Scope::DeadLettersReplay]).await;
    let admin = api.key("contoso", &[Scope::Admin]).await;
    let fabrikam = api.key("fabrikam", &[Scope::Admin]).await;

    let groups: Value = api
        .get(&reader, "/v1/dead-letters/groups")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let group = &groups["groups"][0];
    assert_eq!(group["count"], 2, "{groups}");
    assert_eq!(group["ids"], json!([second, first]), "newest first");
    assert_eq!(group["sample"], json!(second));
    assert_eq!(group["trend"]["counts"].as_array().unwrap().len(), 24);
    let fingerprint = group["fingerprint"].as_str().unwrap().to_owned();
    let path = format!("/v1/dead-letters/groups/{fingerprint}");
    let shown: Value = api.get(&reader, &path).send().await.unwrap().json().await.unwrap();
    assert_eq!(shown["fingerprint"], fingerprint.as_str());
    assert_eq!(
        api.get(&reader, "/v1/dead-letters/groups/0000000000000000")
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::NOT_FOUND
    );

    // Rights: reading is not replaying, replaying is not purging.
    let replay = format!("{path}/replay");
    assert_eq!(
        api.post(&reader, &replay).send().await.unwrap().status(),
        StatusCode::FORBIDDEN
    );
    let purge = |key: &str| {
        api.client
            .delete(format!("{}{path}", api.url))
            .bearer_auth(key.to_owned())
    };
    assert_eq!(purge(&replayer).send().await.unwrap().status(), StatusCode::FORBIDDEN);
    let refused = api
        .post(&replayer, &replay)
        .json(&json!({"rate": "fast"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(refused["error"]["field"], "rate", "{refused}");

    // Purging the group purges the caller's tenant's dead letters only.
    let purged = purge(&admin).send().await.unwrap();
    assert_eq!(purged.status(), StatusCode::OK);
    let purged: Value = purged.json().await.unwrap();
    assert_eq!(purged["purged"], json!([second, first]), "{purged}");
    assert!(api.backends.store.dead_letter(&theirs.to_string(), None).await.is_ok());

    // The other tenant replays its own group of the same cause.
    let accepted = api
        .post(&fabrikam, &replay)
        .json(&json!({"rate": 20}))
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
    let location = accepted.headers()["location"].to_str().unwrap().to_owned();
    let job: Value = accepted.json().await.unwrap();
    assert_eq!(job["total"], 1, "{job}");
    assert_eq!(location, format!("/v1/replays/{}", job["id"].as_str().unwrap()));
}

#[tokio::test]
async fn an_edited_replay_is_audited_and_the_original_bytes_are_kept() {
    let api = Api::start().await;
    let (id, envelope) = api.dead_letter("contoso", "retries-exhausted").await;
    let original = api
        .backends
        .store
        .dead_letter(&id.to_string(), None)
        .await
        .unwrap()
        .body;
    let key = api.key("contoso", &[Scope::DeadLettersReplay]).await;
    let mut payload = envelope.payload.clone();
    payload["branch"] = json!("hotfix");
    payload["files"][0]["content"] = json!("# fixed\n");
    let replayed = api
        .post(&key, &format!("/v1/dead-letters/{id}/replay"))
        .json(&json!({"payload": payload}))
        .send()
        .await
        .unwrap();
    assert_eq!(replayed.status(), StatusCode::OK);
    let replayed: Value = replayed.json().await.unwrap();
    assert_eq!(replayed["edited"], true, "{replayed}");

    let shown: Value = api
        .get(&key, &format!("/v1/dead-letters/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let replay = &shown["replays"][0];
    assert!(replay["by"].as_str().unwrap().starts_with("key:"), "who: {replay}");
    assert!(replay["at"].is_string(), "when: {replay}");
    assert_eq!(
        replay["edit"]["diff"],
        json!([
            {"path": "/branch", "before": "main", "after": "hotfix"},
            {"path": "/files/0/content", "before": "x", "after": "# fixed\n"}
        ]),
        "{replay}"
    );
    assert_eq!(replay["edit"]["originalPayload"]["branch"], "main");
    assert_eq!(replay["edit"]["editedPayload"]["branch"], "hotfix");
    assert_eq!(
        shown["envelope"]["payload"]["branch"], "main",
        "the original is shown as received"
    );
    let kept = api
        .backends
        .store
        .dead_letter(&id.to_string(), None)
        .await
        .unwrap()
        .body;
    assert_eq!(kept, original, "the original bytes are unchanged");
    // The copy sent is the edited one.
    let sent = api
        .backends
        .transport
        .receive(&Destination::Queue("commit".into()), 1, Duration::from_secs(30))
        .await
        .unwrap();
    let copy = Envelope::from_slice(&sent[0].body).unwrap();
    assert_eq!(copy.payload["branch"], "hotfix");
    assert_eq!(copy.message_id, envelope.message_id);
}

#[tokio::test]
async fn replay_jobs_are_paused_resumed_cancelled_and_listed_with_who_did_it() {
    let api = Api::start().await;
    let key = api
        .key("contoso", &[Scope::DeliveriesRead, Scope::DeadLettersReplay])
        .await;
    let reader = api.key("contoso", &[Scope::DeliveriesRead]).await;
    let other = api.key("fabrikam", &[Scope::DeadLettersReplay]).await;
    let key_id = access::parse_key(&key).unwrap().0.to_owned();
    for _ in 0..6 {
        api.dead_letter("contoso", "invalid-field").await;
    }
    // One replay a second: the job is still running when it is paused.
    let job: Value = api
        .post(&key, "/v1/dead-letters/replays")
        .json(&json!({"filter": {"reason": "invalid-field"}, "rate": 1.0}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = job["id"].as_str().unwrap().to_owned();
    assert_eq!(job["request"], json!({"filter": {"reason": "invalid-field"}}));
    assert_eq!(job["by"], format!("key:{key_id}"));

    let control = |who: &str, action: &str| api.post(who, &format!("/v1/replays/{id}/{action}")).send();
    // A reader may look but not pause; another tenant does not find it.
    assert_eq!(control(&reader, "pause").await.unwrap().status(), StatusCode::FORBIDDEN);
    assert_eq!(control(&other, "pause").await.unwrap().status(), StatusCode::NOT_FOUND);
    assert_eq!(
        api.get(&other, &format!("/v1/replays/{id}"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::NOT_FOUND
    );
    let paused: Value = control(&key, "pause").await.unwrap().json().await.unwrap();
    assert_eq!(paused["status"], "paused");
    assert_eq!(paused["controls"][0]["action"], "pause");
    assert_eq!(paused["controls"][0]["by"], format!("key:{key_id}"));
    let (status, error) = error_of(control(&key, "pause").await.unwrap()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(error["message"].as_str().unwrap().contains("paused"), "{error}");
    // Paused: nothing more is replayed.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let held: Value = api
        .get(&key, &format!("/v1/replays/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let still: Value = api
        .get(&key, &format!("/v1/replays/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(held["done"], still["done"], "a paused job replays nothing");
    assert!(still["done"].as_u64().unwrap() < 6);
    assert_eq!(still["runningOn"], Value::Null, "a paused job is let go of");

    let resumed: Value = control(&key, "resume").await.unwrap().json().await.unwrap();
    assert_eq!(resumed["status"], "running");
    let moved = loop {
        let job: Value = api
            .get(&key, &format!("/v1/replays/{id}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if job["done"].as_u64() > still["done"].as_u64() {
            break job;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(moved["status"], "running");
    let cancelled: Value = control(&key, "cancel").await.unwrap().json().await.unwrap();
    assert_eq!(cancelled["status"], "cancelled");
    assert!(cancelled["finishedAt"].is_string());
    let actions: Vec<&str> = cancelled["controls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|control| control["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["pause", "resume", "cancel"]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after: Value = api
        .get(&key, &format!("/v1/replays/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(after["done"].as_u64().unwrap() < 6, "a cancelled job stops: {after}");
    assert_eq!(
        api.queue_depth("commit").await,
        after["replayedCount"].as_u64().unwrap(),
        "what the job says it replayed is what was sent"
    );
    assert_eq!(control(&key, "resume").await.unwrap().status(), StatusCode::CONFLICT);

    let listed: Value = api
        .get(&reader, "/v1/replays")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["jobs"][0]["id"], id.as_str());
    assert_eq!(listed["jobs"][0]["status"], "cancelled");
    let others: Value = api
        .get(&other, "/v1/replays")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(others["jobs"], json!([]));
    let (status, error) = error_of(api.get(&key, "/v1/replays?limit=none").send().await.unwrap()).await;
    assert_eq!(
        (status, error["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("limit"))
    );
}

#[tokio::test]
async fn a_replay_under_a_fixed_id_is_sent_and_recorded_once_even_when_retried() {
    let api = Api::start().await;
    let (dead_letter, _) = api.dead_letter("contoso", "invalid-field").await;
    let operator = api.backends.operator("alice");
    let replay_id = Uuid::now_v7();
    let first = operator.replay_as(&dead_letter.to_string(), replay_id).await.unwrap();
    // A runner that died after the send and before recording its progress
    // replays the item again: found recorded, nothing is sent twice.
    let again = operator.replay_as(&dead_letter.to_string(), replay_id).await.unwrap();
    assert_eq!(first, again);
    assert_eq!(api.queue_depth("commit").await, 1);
    let record = api
        .backends
        .store
        .dead_letter(&dead_letter.to_string(), None)
        .await
        .unwrap();
    assert_eq!(record.replays.len(), 1);

    // Killed between the send and the record: the send is repeated under
    // the same broker message id and the transport drops the copy.
    let (crashed, envelope) = api.dead_letter("contoso", "invalid-field").await;
    let replay_id = Uuid::now_v7();
    api.backends
        .transport
        .send(vec![crate::ports::transport::OutboundMessage {
            destination: Destination::Queue("commit".into()),
            broker_message_id: format!("{}.replay-{replay_id}", envelope.message_id),
            message_type: Some("CreateCommit".into()),
            correlation_id: Some(envelope.correlation_id.to_string()),
            body: envelope.to_vec(),
            scheduled_at: None,
        }])
        .await
        .unwrap();
    assert_eq!(api.queue_depth("commit").await, 2);
    operator.replay_as(&crashed.to_string(), replay_id).await.unwrap();
    assert_eq!(api.queue_depth("commit").await, 2, "the repeated send is dropped");
    let record = api
        .backends
        .store
        .dead_letter(&crashed.to_string(), None)
        .await
        .unwrap();
    assert_eq!(record.replays.len(), 1);
}

mod conformance;
mod environments;
mod outcome;
