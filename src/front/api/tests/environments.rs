//! `GET /v1/tenants/{tenant}/environments/{environment}` and
//! `POST .../rollback`: the rights (releases:rollback; releases:override
//! too with an override reason), the tenant walls, refusals with their
//! reason, and a rollback checked and sent as the caller.

use super::*;

const ROLLBACK: &str = "/v1/tenants/contoso/environments/prod/rollback";

#[tokio::test]
async fn a_rollback_needs_its_right_and_an_override_needs_releases_override_too() {
    let api = Api::start().await;
    api.seed_environment("contoso", "prod").await;
    let reader = api.key("contoso", &[Scope::DeliveriesRead, Scope::CommandsSend]).await;
    let roller = api.key("contoso", &[Scope::ReleasesRollback]).await;
    let overrider = api.key("contoso", &[Scope::ReleasesOverride]).await;

    // commands:send is not the right to roll back.
    let response = api
        .post(&reader, ROLLBACK)
        .json(&json!({"reason": "INC-7"}))
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("releases:rollback"),
        "{error}"
    );
    // Nor is releases:override alone.
    let response = api
        .post(&overrider, ROLLBACK)
        .json(&json!({"reason": "INC-7", "overrideReason": "sev1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    // An override reason needs releases:override besides.
    let response = api
        .post(&roller, ROLLBACK)
        .json(&json!({"reason": "INC-7", "overrideReason": "sev1"}))
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("releases:override"),
        "{error}"
    );
    // Nothing was sent.
    assert_eq!(api.queue_depth("gitops-sync").await, 0);
}

/// The status and body of a rollback `path` asks as `key`.
async fn post_as(api: &Api, key: &str, path: &str) -> (StatusCode, String) {
    let response = api
        .post(key, path)
        .json(&json!({"reason": "INC-7"}))
        .send()
        .await
        .unwrap();
    (response.status(), response.text().await.unwrap())
}

/// The status and body of `GET path` as `key`.
async fn get_as(api: &Api, key: &str, path: &str) -> (StatusCode, String) {
    let response = api.get(key, path).send().await.unwrap();
    (response.status(), response.text().await.unwrap())
}

#[tokio::test]
async fn another_tenants_environment_reads_as_one_that_does_not_exist() {
    let api = Api::start().await;
    api.seed_environment("contoso", "prod").await;
    let fabrikam = api
        .key("fabrikam", &[Scope::ReleasesRollback, Scope::DeliveriesRead])
        .await;
    let (status, theirs) = post_as(&api, &fabrikam, ROLLBACK).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{theirs}");
    let (_, missing) = post_as(&api, &fabrikam, "/v1/tenants/fabrikam/environments/prod/rollback").await;
    assert_eq!(theirs, missing, "byte for byte");
    let (status, theirs) = get_as(&api, &fabrikam, "/v1/tenants/contoso/environments/prod").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{theirs}");
    let (_, missing) = get_as(&api, &fabrikam, "/v1/tenants/fabrikam/environments/prod").await;
    assert_eq!(theirs, missing, "byte for byte");
    // A name that is not an environment's reads the same way.
    let (status, _) = get_as(&api, &fabrikam, "/v1/tenants/fabrikam/environments/Prod!").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(api.queue_depth("gitops-sync").await, 0);
}

#[tokio::test]
async fn a_rollback_with_nothing_verified_to_go_back_to_is_refused_with_why() {
    let api = Api::start().await;
    let mut state = environment_state("prod");
    state["verified"] = json!({});
    api.seed_gitops("contoso", "prod", state).await;
    api.seed_environment("contoso", "staging").await;
    let roller = api.key("contoso", &[Scope::ReleasesRollback]).await;

    let response = api
        .post(&roller, ROLLBACK)
        .json(&json!({"reason": "INC-7"}))
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    assert_eq!(error["code"], "invalid-field");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("no release of payments-api verified in prod"),
        "{message}"
    );
    // A release never verified there.
    let response = api
        .post(&roller, "/v1/tenants/contoso/environments/staging/rollback")
        .json(&json!({"reason": "INC-7", "toReleaseId": "payments-api-9"}))
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("payments-api-9 was never verified in staging"),
        "{error}"
    );
    // An unknown field of the body, named.
    let response = api
        .post(&roller, ROLLBACK)
        .json(&json!({"reason": "INC-7", "release": "payments-api-1"}))
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    assert_eq!(api.queue_depth("gitops-sync").await, 0);
}

#[tokio::test]
async fn a_rollback_is_checked_then_sent_as_the_caller() {
    let api = Api::start().await;
    api.seed_environment("contoso", "prod").await;
    let roller = api.key("contoso", &[Scope::ReleasesRollback]).await;
    let response = api
        .post(&roller, ROLLBACK)
        .json(&json!({"reason": "INC-7: errors after payments-api-2", "onBehalfOf": "dana"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let accepted: Value = response.json().await.unwrap();
    let correlation = accepted["correlationId"].as_str().unwrap();
    assert_eq!(location, format!("/v1/deliveries/{correlation}"));
    assert_eq!(
        accepted["plan"],
        json!({"environment": "prod", "moduleId": "payments-api", "fromReleaseId": "payments-api-2",
            "toReleaseId": "payments-api-1", "verifiedAt": "2026-12-01T11:00:00Z"}),
        "{accepted}"
    );
    // The command sent: stamped with who asked, whatever the body says.
    let sent = api.backends.store.emitted(correlation).await.unwrap();
    let envelope = Envelope::from_slice(sent.first().expect("the command")).unwrap();
    assert_eq!(envelope.message_type, "RollbackEnvironment");
    assert_eq!(envelope.tenant_id, "contoso");
    assert_eq!(envelope.message_id.to_string(), accepted["messageId"].as_str().unwrap());
    let payload = &envelope.payload;
    assert_eq!(payload["toReleaseId"], "payments-api-1", "{payload}");
    assert_eq!(payload["onBehalfOf"], "dana", "{payload}");
    assert!(
        payload["requestedBy"].as_str().unwrap().starts_with("key:"),
        "{payload}"
    );
    assert!(payload.get("overrideReason").is_none(), "{payload}");
}

#[tokio::test]
async fn a_rollback_obeys_a_hold_unless_given_an_override_reason() {
    let api = Api::start().await;
    api.seed_environment("contoso", "prod").await;
    let admin = api.key("contoso", &[Scope::Admin]).await;
    let both = api
        .key("contoso", &[Scope::ReleasesRollback, Scope::ReleasesOverride])
        .await;
    let held = api
        .client
        .put(format!("{}/v1/tenants/contoso/release-policy/holds/prod", api.url))
        .bearer_auth(&admin)
        .json(&json!({"reason": "freeze"}))
        .send()
        .await
        .unwrap();
    assert_eq!(held.status(), StatusCode::OK);
    let response = api
        .post(&both, ROLLBACK)
        .json(&json!({"reason": "INC-7"}))
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    assert!(error["message"].as_str().unwrap().contains("hold"), "{error}");
    let response = api
        .post(&both, ROLLBACK)
        .json(&json!({"reason": "INC-7", "overrideReason": "sev1 under way"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let accepted: Value = response.json().await.unwrap();
    let sent = api
        .backends
        .store
        .emitted(accepted["correlationId"].as_str().unwrap())
        .await
        .unwrap();
    let envelope = Envelope::from_slice(&sent[0]).unwrap();
    assert_eq!(envelope.payload["overrideReason"], "sev1 under way");
}

#[tokio::test]
async fn an_environment_shows_each_modules_current_and_verified_releases() {
    let api = Api::start().await;
    api.seed_environment("contoso", "prod").await;
    let reader = api.key("contoso", &[Scope::DeliveriesRead]).await;
    let response = api
        .get(&reader, "/v1/tenants/contoso/environments/prod")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let view: Value = response.json().await.unwrap();
    assert_eq!(view["tenantId"], "contoso");
    assert_eq!(view["environment"], "prod");
    assert_eq!(view["phase"], "synced");
    assert_eq!(view["repository"], "environments");
    assert_eq!(
        view["modules"],
        json!([{
            "moduleId": "payments-api",
            "current": {"releaseId": "payments-api-2", "promotedAt": "2026-12-02T10:00:00Z"},
            "verified": [
                {"releaseId": "payments-api-2", "verifiedAt": "2026-12-02T11:00:00Z"},
                {"releaseId": "payments-api-1", "verifiedAt": "2026-12-01T11:00:00Z"}
            ],
            "queued": ["payments-api-3"]
        }]),
        "{view}"
    );
    // Reading needs deliveries:read.
    let roller = api.key("contoso", &[Scope::ReleasesRollback]).await;
    let response = api
        .get(&roller, "/v1/tenants/contoso/environments/prod")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    // Nothing promoted there: not found.
    let response = api
        .get(&reader, "/v1/tenants/contoso/environments/dev")
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error["message"], "no environment `dev`");
}
