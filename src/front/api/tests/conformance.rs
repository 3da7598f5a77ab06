//! The OpenAPI document against the real API: every operation the document
//! has is called, for real, on one API with data (a delivery, a saga, dead
//! letters, a failure group, a replay job), at least once with an answer
//! it declares a success and once (when it declares errors) with an error,
//! and each body is validated against the schema the document declares for
//! its status (`jsonschema`, draft 2020-12, formats checked, `$ref`s into
//! the document's components). The schemas are checked closed: a field an
//! answer has and its schema lacks fails too.
//!
//! The table is the test's `cases`, one line per call: an operation without
//! its cases fails the test. The router and the document are both built
//! from `routes::routes`, so a route cannot be served and not documented
//! (or the other way round); a new route is one entry there and a success
//! and an error case here.

use std::collections::{BTreeMap, BTreeSet};

use jsonschema::Draft;
use reqwest::RequestBuilder;

use super::*;

/// One call and the status it must answer.
struct Case {
    operation: String,
    status: u16,
    request: RequestBuilder,
}

fn case(operation: &str, status: u16, request: RequestBuilder) -> Case {
    Case {
        operation: operation.to_owned(),
        status,
        request,
    }
}

/// The document's operations by id, and its components as they are and
/// checked closed.
struct Document {
    operations: BTreeMap<String, Value>,
    components: Value,
    closed_components: Value,
}

impl Document {
    fn new(doc: &Value) -> Self {
        let mut operations = BTreeMap::new();
        for (path, methods) in doc["paths"].as_object().expect("paths") {
            for (method, operation) in methods.as_object().expect("methods") {
                let id = operation["operationId"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{method} {path} has no operationId"));
                operations.insert(id.to_owned(), operation.clone());
            }
        }
        Self {
            operations,
            components: doc["components"].clone(),
            closed_components: closed(doc["components"].clone()),
        }
    }

    /// Checks an answer against what the operation declares for its status.
    async fn check(&self, case: Case) {
        let Case {
            operation: id,
            status: expected,
            request,
        } = case;
        let operation = self
            .operations
            .get(&id)
            .unwrap_or_else(|| panic!("no operation {id} in the document"));
        // What a success was sent is valid against the documented request body.
        let request_schema = &operation["requestBody"]["content"]["application/json"]["schema"];
        if (200..300).contains(&expected) && request_schema.is_object() {
            let sent = request.try_clone().and_then(|r| r.build().ok());
            let sent = sent.as_ref().and_then(|r| r.body()).and_then(|b| b.as_bytes());
            if let Some(sent) = sent {
                let sent: Value = serde_json::from_slice(sent).unwrap();
                let errors = self.errors(request_schema.clone(), &sent, false);
                assert!(
                    errors.is_empty(),
                    "{id}: the body sent is not its requestBody: {errors:#?}\n{sent:#}"
                );
            }
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        // An event stream stays open: read only its head.
        let body = if operation["responses"][status.to_string()]["content"]
            .get("text/event-stream")
            .is_some()
        {
            Vec::new()
        } else {
            response.bytes().await.unwrap().to_vec()
        };
        assert_eq!(status, expected, "{id}: {}", String::from_utf8_lossy(&body));
        let declared = &operation["responses"][status.to_string()];
        assert!(
            declared.is_object(),
            "{id} answered {status}, which it does not declare"
        );
        let content = declared["content"].as_object();
        let Some((media, media_type)) = content.and_then(|content| content.iter().next()) else {
            assert!(body.is_empty(), "{id} {status} declares no body but has one");
            return;
        };
        let content_type = headers
            .get("content-type")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        assert!(
            content_type.starts_with(media.as_str()),
            "{id} {status}: content-type `{content_type}`, the document says {media}"
        );
        if let Some(names) = declared["headers"].as_object() {
            for name in names.keys() {
                assert!(headers.contains_key(name.as_str()), "{id} {status} lacks header {name}");
            }
        }
        if media != "application/json" {
            return;
        }
        let body: Value = serde_json::from_slice(&body).unwrap_or_else(|err| panic!("{id} {status}: not JSON: {err}"));
        let errors = self.errors(closed(media_type["schema"].clone()), &body, true);
        assert!(errors.is_empty(), "{id} {status}: {errors:#?}\n{body:#}");
    }

    /// Why `instance` is not valid against `schema` (its `$ref`s into the
    /// document's components, checked closed when `closed`: an answer has
    /// no field its schema lacks; a request is checked as documented).
    fn errors(&self, mut schema: Value, instance: &Value, closed: bool) -> Vec<String> {
        let components = if closed {
            &self.closed_components
        } else {
            &self.components
        };
        if let Some(object) = schema.as_object_mut() {
            object.insert("components".into(), components.clone());
        }
        let validator = jsonschema::options()
            .with_draft(Draft::Draft202012)
            .should_validate_formats(true)
            .build(&schema)
            .unwrap_or_else(|err| panic!("the schema does not compile: {err}"));
        validator
            .iter_errors(instance)
            .map(|err| format!("{} at `{}`", err, err.instance_path()))
            .collect()
    }
}

/// `schema` with every object schema that lists its properties closed
/// (`unevaluatedProperties: false` unless it says otherwise), so a field an
/// answer has and the document lacks is an error.
fn closed(schema: Value) -> Value {
    match schema {
        Value::Object(mut map) => {
            let lists_properties = map.get("properties").is_some_and(Value::is_object);
            let open = map.contains_key("additionalProperties") || map.contains_key("unevaluatedProperties");
            let keys = map.keys().cloned().collect::<Vec<_>>();
            for key in keys {
                if let Some(value) = map.remove(&key) {
                    // A map of schemas, not a schema.
                    let value = if key == "properties" || key == "schemas" || key == "$defs" {
                        match value {
                            Value::Object(entries) => {
                                Value::Object(entries.into_iter().map(|(name, s)| (name, closed(s))).collect())
                            }
                            other => other,
                        }
                    } else {
                        closed(value)
                    };
                    map.insert(key, value);
                }
            }
            if lists_properties && !open {
                map.insert("unevaluatedProperties".into(), Value::Bool(false));
            }
            Value::Object(map)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(closed).collect()),
        other => other,
    }
}

#[tokio::test]
async fn every_operation_answers_what_the_openapi_document_says() {
    let api = Api::start().await;
    let admin = api.key("contoso", &[Scope::Admin]).await;
    let reader = api.key("contoso", &[Scope::DeliveriesRead]).await;
    let platform = api.key("*", &[Scope::ConsumersPause, Scope::DeliveriesRead]).await;
    let doc: Value = api
        .client
        .get(format!("{}/openapi.json", api.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let document = Document::new(&doc);

    // Data for every operation to find.
    let sent = api.send_commit(&admin, "payments-api").await;
    let delivery = sent["correlationId"].as_str().unwrap().to_owned();
    let outcome = api
        .backends
        .store
        .commit_handled(HandledMessage {
            consumer: "release-orchestration".into(),
            message_id: Uuid::now_v7().to_string(),
            message_type: "BuildCompleted".into(),
            saga: Some(SagaWrite {
                kind: "release".into(),
                key: "contoso/rel-1".into(),
                expected_version: 0,
                state: json!({"releaseId": "rel-1", "phase": "collecting"}),
                tenant_id: Some("contoso".into()),
            }),
            outbox: vec![],
            timeline: vec![],
        })
        .await
        .unwrap();
    assert_eq!(outcome, CommitOutcome::Committed);
    api.seed_environment("contoso", "staging").await;
    let (shown, _) = api.dead_letter("contoso", "repository-missing").await;
    let (replayed, _) = api.dead_letter("contoso", "repository-missing").await;
    let (purged, _) = api.dead_letter("contoso", "repository-missing").await;
    let (bulk, _) = api.dead_letter("contoso", "repository-missing").await;
    api.dead_letter("contoso", "quota-exceeded").await;
    let groups: Value = api
        .get(&admin, "/v1/dead-letters/groups")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let fingerprint_of = |reason: &str| {
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|group| group["reason"] == reason)
            .and_then(|group| group["fingerprint"].as_str())
            .unwrap_or_else(|| panic!("no {reason} group in {groups}"))
            .to_owned()
    };
    let replay_group = fingerprint_of("repository-missing");
    let purge_group = fingerprint_of("quota-exceeded");
    let job: Value = api
        .post(&admin, "/v1/dead-letters/replays")
        .json(&json!({"ids": [bulk], "rate": 50}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let job = job["id"].as_str().unwrap().to_owned();
    // A job slow enough (one replay per 100 s) to be paused, resumed and
    // cancelled while it runs.
    let mut slow_ids = Vec::new();
    for _ in 0..3 {
        slow_ids.push(api.dead_letter("contoso", "slow-replay").await.0);
    }
    let slow: Value = api
        .post(&admin, "/v1/dead-letters/replays")
        .json(&json!({"ids": slow_ids, "rate": 0.01}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let slow = slow["id"].as_str().unwrap().to_owned();

    let url = |path: &str| format!("{}{path}", api.url);
    let get = |path: &str| api.get(&admin, path);
    let post = |path: &str| api.post(&admin, path);
    let delete = |path: &str| api.client.delete(url(path)).bearer_auth(&admin);
    let anonymous = |path: &str| api.client.get(url(path));
    let missing = Uuid::now_v7();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let mut cases = vec![
        case("getHealth", 200, api.client.get(url("/healthz"))),
        case("getReadiness", 200, api.client.get(url("/readyz"))),
        case("getMetrics", 200, api.client.get(url("/metrics"))),
        case("getOpenApiDocument", 200, api.client.get(url("/openapi.json"))),
        case("getConsole", 200, api.client.get(url("/console"))),
        case("listDeliveries", 200, get("/v1/deliveries?limit=10")),
        case("listDeliveries", 422, get("/v1/deliveries?limit=0")),
        case("listDeliveries", 401, anonymous("/v1/deliveries")),
        case("getDelivery", 200, get(&format!("/v1/deliveries/{delivery}"))),
        case("getDelivery", 404, get(&format!("/v1/deliveries/{missing}"))),
        case(
            "streamDeliveryEvents",
            200,
            get(&format!("/v1/deliveries/{delivery}/events")),
        ),
        case(
            "streamDeliveryEvents",
            404,
            get(&format!("/v1/deliveries/{missing}/events")),
        ),
        case("listSagas", 200, get("/v1/sagas?kind=release")),
        case("listSagas", 401, anonymous("/v1/sagas")),
        case(
            "setReleasePolicy",
            200,
            api.client
                .put(url("/v1/tenants/contoso/release-policy"))
                .bearer_auth(&admin)
                .json(&json!({"document": {"environments": {"prod": {"requiredApprovals": 2}}}, "reason": "CAB"})),
        ),
        case(
            "setReleasePolicy",
            409,
            api.client
                .put(url("/v1/tenants/contoso/release-policy"))
                .bearer_auth(&admin)
                .json(&json!({"document": {}, "expectedVersion": 7})),
        ),
        case(
            "setReleasePolicy",
            422,
            api.client
                .put(url("/v1/tenants/contoso/release-policy"))
                .bearer_auth(&admin)
                .json(&json!({"document": {"environments": {"prod": {"required": 2}}}})),
        ),
        case(
            "placeReleaseHold",
            200,
            api.client
                .put(url("/v1/tenants/contoso/release-policy/holds/prod"))
                .bearer_auth(&admin)
                .json(&json!({"reason": "INC-42 under way", "until": "2030-01-01T00:00:00Z"})),
        ),
        case(
            "placeReleaseHold",
            422,
            api.client
                .put(url("/v1/tenants/contoso/release-policy/holds/prod"))
                .bearer_auth(&admin)
                .json(&json!({"reason": "INC-42", "until": "tomorrow"})),
        ),
        case(
            "placeReleaseHold",
            404,
            api.client
                .put(url("/v1/tenants/contoso/release-policy/holds/Prod!"))
                .bearer_auth(&admin)
                .json(&json!({"reason": "INC-42"})),
        ),
        case(
            "liftReleaseHold",
            200,
            delete("/v1/tenants/contoso/release-policy/holds/prod"),
        ),
        case(
            "liftReleaseHold",
            404,
            delete("/v1/tenants/contoso/release-policy/holds/prod"),
        ),
        case(
            "acknowledgeFailureGroup",
            200,
            api.client
                .put(url(&format!("/v1/dead-letters/groups/{replay_group}/acknowledgement")))
                .bearer_auth(&admin)
                .json(&json!({"note": "INC-5"})),
        ),
        case(
            "acknowledgeFailureGroup",
            404,
            api.client
                .put(url("/v1/dead-letters/groups/ffffffffffffffff/acknowledgement"))
                .bearer_auth(&admin),
        ),
        case(
            "unacknowledgeFailureGroup",
            200,
            delete(&format!("/v1/dead-letters/groups/{replay_group}/acknowledgement")),
        ),
        case(
            "unacknowledgeFailureGroup",
            404,
            delete(&format!("/v1/dead-letters/groups/{replay_group}/acknowledgement")),
        ),
        case("listConsumers", 200, get("/v1/consumers")),
        case("listConsumers", 401, api.client.get(url("/v1/consumers"))),
        case(
            "pauseConsumer",
            200,
            api.client
                .post(url("/v1/consumers/commit/pause"))
                .bearer_auth(&platform)
                .json(&json!({"reason": "INC-9: Azure DevOps is down"})),
        ),
        case(
            "pauseConsumer",
            403,
            post("/v1/consumers/commit/pause").json(&json!({"reason": "a tenant's key"})),
        ),
        case(
            "resumeConsumer",
            200,
            api.client
                .post(url("/v1/consumers/commit/resume"))
                .bearer_auth(&platform),
        ),
        case(
            "resumeConsumer",
            422,
            api.client
                .post(url("/v1/consumers/nope/resume"))
                .bearer_auth(&platform)
                .json(&json!({})),
        ),
        case(
            "listConsumerControls",
            200,
            api.client
                .get(url("/v1/consumers/controls?limit=5"))
                .bearer_auth(&platform),
        ),
        case("listConsumerControls", 403, get("/v1/consumers/controls")),
        case("getEnvironment", 200, get("/v1/tenants/contoso/environments/staging")),
        case("getEnvironment", 404, get("/v1/tenants/contoso/environments/nowhere")),
        case(
            "rollbackEnvironment",
            202,
            post("/v1/tenants/contoso/environments/staging/rollback").json(&json!({"reason": "INC-7"})),
        ),
        case(
            "rollbackEnvironment",
            422,
            post("/v1/tenants/contoso/environments/staging/rollback")
                .json(&json!({"reason": "INC-7", "toReleaseId": "payments-api-9"})),
        ),
        case(
            "rollbackEnvironment",
            404,
            post("/v1/tenants/contoso/environments/nowhere/rollback").json(&json!({"reason": "INC-7"})),
        ),
        case(
            "rollbackEnvironment",
            403,
            api.client
                .post(url("/v1/tenants/contoso/environments/staging/rollback"))
                .bearer_auth(&reader)
                .json(&json!({"reason": "INC-7"})),
        ),
        case("getAuditLog", 200, get("/v1/tenants/contoso/audit?limit=5")),
        case("getAuditLog", 422, get("/v1/tenants/contoso/audit?after=-1")),
        case("getAuditLog", 404, get("/v1/tenants/nobody/audit")),
        case("getReleasePolicy", 200, get("/v1/tenants/contoso/release-policy")),
        case("getReleasePolicy", 404, get("/v1/tenants/nobody/release-policy")),
        case(
            "getReleasePolicyHistory",
            200,
            get("/v1/tenants/contoso/release-policy/history"),
        ),
        case(
            "getReleasePolicyHistory",
            401,
            anonymous("/v1/tenants/contoso/release-policy/history"),
        ),
        case("getSaga", 200, get("/v1/sagas/release/rel-1")),
        case("getSaga", 404, get("/v1/sagas/release/rel-404")),
        case("getSagaDiagram", 200, get("/v1/sagas/release/rel-1/diagram")),
        case("getSagaDiagram", 422, get("/v1/sagas/billing/rel-1/diagram")),
        case(
            "listDeadLetters",
            200,
            get("/v1/dead-letters?consumer=commit&includeReplayed=true&limit=10"),
        ),
        case("listDeadLetters", 422, get("/v1/dead-letters?since=yesterday")),
        case(
            "listFailureGroups",
            200,
            get("/v1/dead-letters/groups?type=CreateCommit"),
        ),
        case(
            "listFailureGroups",
            422,
            get("/v1/dead-letters/groups?includeReplayed=maybe"),
        ),
        case(
            "getFailureGroup",
            200,
            get(&format!("/v1/dead-letters/groups/{replay_group}")),
        ),
        case("getFailureGroup", 404, get("/v1/dead-letters/groups/0000000000000000")),
        case("getDeadLetter", 200, get(&format!("/v1/dead-letters/{shown}"))),
        case("getDeadLetter", 404, get(&format!("/v1/dead-letters/{missing}"))),
        // Ids made together share their leading (time) digits.
        case(
            "getDeadLetter",
            409,
            get(&format!("/v1/dead-letters/{}", &shown.to_string()[..6])),
        ),
        case(
            "replayDeadLetter",
            422,
            post(&format!("/v1/dead-letters/{replayed}/replay")).json(&json!({"edited": {}})),
        ),
        case(
            "replayDeadLetter",
            400,
            post(&format!("/v1/dead-letters/{replayed}/replay"))
                .header("content-type", "application/json")
                .body("{"),
        ),
        case(
            "replayDeadLetter",
            200,
            post(&format!("/v1/dead-letters/{replayed}/replay")).json(&json!({"payload": commit("payments-api")})),
        ),
        case(
            "purgeDeadLetter",
            403,
            api.client
                .delete(url(&format!("/v1/dead-letters/{purged}")))
                .bearer_auth(&reader),
        ),
        case("purgeDeadLetter", 200, delete(&format!("/v1/dead-letters/{purged}"))),
        case("purgeDeadLetter", 404, delete(&format!("/v1/dead-letters/{purged}"))),
        case(
            "startBulkReplay",
            422,
            post("/v1/dead-letters/replays").json(&json!({"ids": ["not-an-id"]})),
        ),
        case(
            "startBulkReplay",
            202,
            post("/v1/dead-letters/replays")
                .json(&json!({"filter": {"consumer": "commit", "reason": "nothing-like-it"}})),
        ),
        case("getReplayJob", 200, get(&format!("/v1/replays/{job}"))),
        case("getReplayJob", 404, get(&format!("/v1/replays/{missing}"))),
        case("listReplayJobs", 200, get("/v1/replays")),
        case("listReplayJobs", 422, get("/v1/replays?limit=0")),
        case("pauseReplayJob", 200, post(&format!("/v1/replays/{slow}/pause"))),
        case("pauseReplayJob", 409, post(&format!("/v1/replays/{slow}/pause"))),
        case("resumeReplayJob", 200, post(&format!("/v1/replays/{slow}/resume"))),
        case("resumeReplayJob", 409, post(&format!("/v1/replays/{slow}/resume"))),
        case("cancelReplayJob", 200, post(&format!("/v1/replays/{slow}/cancel"))),
        case("cancelReplayJob", 404, post(&format!("/v1/replays/{missing}/cancel"))),
        case(
            "replayFailureGroup",
            422,
            post(&format!("/v1/dead-letters/groups/{replay_group}/replay")).json(&json!({"rate": "fast"})),
        ),
        case(
            "replayFailureGroup",
            202,
            post(&format!("/v1/dead-letters/groups/{replay_group}/replay")).json(&json!({"rate": 100})),
        ),
        case(
            "purgeFailureGroup",
            200,
            delete(&format!("/v1/dead-letters/groups/{purge_group}")),
        ),
        case(
            "purgeFailureGroup",
            404,
            delete(&format!("/v1/dead-letters/groups/{purge_group}")),
        ),
        case(
            "callMcp",
            200,
            post("/mcp")
                .header("accept", "application/json, text/event-stream")
                .json(&ping),
        ),
        case("callMcp", 401, api.client.post(url("/mcp")).json(&ping)),
        // Refused before the MCP SDK, as JSON-RPC errors.
        case("callMcp", 406, post("/mcp").json(&ping)),
        case(
            "callMcp",
            400,
            post("/mcp")
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .body("{\"jsonrpc\": "),
        ),
        case(
            "callMcp",
            415,
            post("/mcp")
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "text/plain")
                .body(ping.to_string()),
        ),
        case(
            "startBulkReplay",
            202,
            post("/v1/dead-letters/replays").json(&json!({"all": true, "rate": 1000})),
        ),
        case(
            "startBulkReplay",
            422,
            post("/v1/dead-letters/replays").json(&json!({"filter": {}})),
        ),
        case("listSagas", 422, get("/v1/sagas?kind=billing")),
    ];
    // Over the body limit (64 KiB here).
    let mut oversized = commit("payments-api");
    oversized["files"][0]["content"] = json!("x".repeat(80 * 1024));
    cases.push(case(
        "sendCreateCommit",
        413,
        post("/v1/commands/CreateCommit").json(&oversized),
    ));
    // Every command, with its sample payload, and refused without one.
    for sample in bosun_contracts::samples::samples() {
        let spec = sample.spec();
        if !spec.is_sendable() {
            continue;
        }
        let path = format!("/v1/commands/{}", spec.message_type);
        let operation = format!("send{}", spec.message_type);
        cases.push(case(&operation, 202, post(&path).json(&sample.to_payload())));
        cases.push(case(&operation, 422, post(&path).json(&json!({}))));
    }

    // Sent last, once the process drains.
    let drained = case("getReadiness", 503, api.client.get(url("/readyz")));

    // The table covers the document: a success and, where it declares
    // errors, an error of every operation.
    let mut uncovered = Vec::new();
    for (id, operation) in &document.operations {
        let statuses: BTreeSet<u16> = cases
            .iter()
            .chain([&drained])
            .filter(|case| &case.operation == id)
            .map(|case| case.status)
            .collect();
        let declared = operation["responses"].as_object().unwrap();
        let declares_errors = declared
            .keys()
            .any(|status| status.starts_with('4') || status.starts_with('5'));
        if !statuses.iter().any(|status| (200..300).contains(status)) {
            uncovered.push(format!("{id}: no success case"));
        }
        if declares_errors && !statuses.iter().any(|status| *status >= 400) {
            uncovered.push(format!("{id}: no error case"));
        }
    }
    assert!(uncovered.is_empty(), "cases missing: {uncovered:#?}");

    for case in cases {
        document.check(case).await;
    }
    api.draining.cancel();
    document.check(drained).await;
}
