//! Tests of `src/front/api/openapi.rs`.

use super::*;
use crate::front::api::routes::{self, ApiRoute};

/// The document as `/openapi.json` serves it.
fn document() -> Value {
    routes::document()
}

/// Its paths and components, as [`document`] makes them.
fn parts() -> (Map<String, Value>, Vec<(String, Value)>) {
    let routes = routes::routes();
    super::parts(routes.iter().filter_map(ApiRoute::path_item))
}

#[test]
fn the_saga_kinds_are_the_sagas_crates() {
    let kinds: Vec<&str> = bosun_sagas::SagaKind::ALL.iter().map(|kind| kind.as_str()).collect();
    assert_eq!(kinds, SAGA_KINDS);
    assert_eq!(
        document()["components"]["schemas"]["SagaKind"]["enum"],
        json!(SAGA_KINDS)
    );
}

#[test]
fn the_bulk_replay_body_says_ids_a_narrowing_filter_or_all_alone() {
    let doc = document();
    let mut schema = doc["components"]["schemas"]["BulkReplayBody"].clone();
    schema["components"] = doc["components"].clone();
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(&schema)
        .unwrap();
    let id = "0193a0c2-7c1e-7d2a-9b5e-3f1d2c4b5a69";
    for (body, valid) in [
        (json!({"ids": [id], "rate": 5}), true),
        (json!({"ids": [id], "all": false}), true),
        (json!({"filter": {"consumer": "commit"}}), true),
        (
            json!({"filter": {"since": "2026-11-29T10:00:00Z"}, "rate": 0.001}),
            true,
        ),
        (json!({"all": true, "rate": 1}), true),
        (json!({}), false),
        (json!({"all": false}), false),
        (json!({"ids": []}), false),
        (json!({"ids": [id], "filter": {"consumer": "commit"}}), false),
        (json!({"filter": {}}), false),
        (json!({"filter": {"consumer": ""}}), false),
        (json!({"filter": {"consumr": "commit"}}), false),
        (json!({"filter": {"consumer": null}}), false),
        (json!({"all": true, "filter": {"consumer": "commit"}}), false),
        (json!({"all": true, "ids": [id]}), false),
        (json!({"ids": [id], "rate": 0.0001}), false),
        (json!({"ids": [id], "tenantId": "evil"}), false),
    ] {
        assert_eq!(validator.is_valid(&body), valid, "{body}");
    }
}

#[test]
fn every_command_has_an_operation_with_its_schema_and_refs_resolve() {
    let doc = document();
    let commands = CATALOGUE.iter().filter(|s| s.is_sendable()).count();
    let command_paths = doc["paths"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|p| p.starts_with("/v1/commands/"))
        .count();
    assert_eq!(command_paths, commands);
    for internal in ["ReleaseApprovalTimeout", "PollPipelineRun", "PollContainerBuild"] {
        assert!(
            doc["paths"][format!("/v1/commands/{internal}")].is_null(),
            "{internal} is internal"
        );
        assert!(
            doc["components"]["schemas"][internal].is_null(),
            "{internal} is internal"
        );
    }
    let create = &doc["paths"]["/v1/commands/CreateCommit"]["post"];
    assert_eq!(create["operationId"], "sendCreateCommit");
    assert!(
        create["responses"]["429"]["headers"]["Retry-After"].is_object(),
        "{create}"
    );
    let schema = &doc["components"]["schemas"]["CreateCommit"];
    assert!(schema["allOf"][0]["properties"]["branch"].is_object(), "{schema}");
    assert!(schema["allOf"][1]["anyOf"].is_array(), "files or delete: {schema}");
    // Every operation has a unique operationId, and answers something.
    let mut ids = std::collections::BTreeSet::new();
    for (path, operations) in doc["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            let id = operation["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path}"));
            assert!(ids.insert(id.to_owned()), "operationId {id} twice");
            assert!(!operation["responses"].as_object().unwrap().is_empty(), "{id}");
        }
    }
    assert_eq!(doc["paths"]["/v1/deliveries"]["get"]["operationId"], "listDeliveries");
    assert_eq!(
        doc["paths"]["/v1/deliveries"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/DeliveryList"
    );
    // Enums are string enums, their values explained.
    let status = &doc["components"]["schemas"]["TimelineStatus"];
    assert_eq!(status["type"], "string", "{status}");
    assert!(
        status["enum"].as_array().unwrap().contains(&json!("dead-lettered")),
        "{status}"
    );
    assert!(
        status["description"].as_str().unwrap().contains("- `sent`: "),
        "{status}"
    );
    // No two schemas were made under one name.
    let (_, parts) = parts();
    let mut seen: std::collections::BTreeMap<&str, &Value> = Default::default();
    for (name, schema) in &parts {
        if let Some(earlier) = seen.insert(name, schema) {
            assert_eq!(earlier, schema, "two schemas named {name}");
        }
    }
    // Every $ref points at a component that exists.
    let text = doc.to_string();
    for part in text.split("\"$ref\":\"").skip(1) {
        let target = part.split('"').next().unwrap();
        let name = target.strip_prefix("#/components/schemas/").expect(target);
        assert!(doc["components"]["schemas"][name].is_object(), "dangling {target}");
    }
}
