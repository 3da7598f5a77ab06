//! Gateway unit tests: request hashing, derived ids, error shapes.

use super::commands::{derived_uuid, request_hash};
use super::*;
use serde_json::json;

#[test]
fn request_hash_ignores_key_order_but_not_values() {
    let a = json!({"b": 1, "a": {"y": [1, 2], "x": "s"}});
    let b = json!({"a": {"x": "s", "y": [1, 2]}, "b": 1});
    let c = json!({"a": {"x": "s", "y": [2, 1]}, "b": 1});
    assert_eq!(request_hash("T", "t", None, &a), request_hash("T", "t", None, &b));
    assert_ne!(request_hash("T", "t", None, &a), request_hash("T", "t", None, &c));
    assert_ne!(request_hash("T", "t", None, &a), request_hash("T", "u", None, &a));
    assert_ne!(request_hash("T", "t", None, &a), request_hash("U", "t", None, &a));
    assert_eq!(derived_uuid(&["m", "t", "k"]), derived_uuid(&["m", "t", "k"]));
    assert_ne!(derived_uuid(&["m", "t", "k"]), derived_uuid(&["m", "t", "k2"]));
}

#[test]
fn errors_carry_status_code_and_field() {
    let err = GatewayError::from(ContractError::InvalidField {
        field: "payload.branch".into(),
        reason: "missing".into(),
    });
    assert_eq!(err.status(), 422);
    assert_eq!(err.to_json()["error"]["field"], "payload.branch");
    assert_eq!(GatewayError::Forbidden { scope: Scope::Admin }.status(), 403);
    assert_eq!(GatewayError::from(StoreError::unavailable("x", "y")).status(), 503);
}
