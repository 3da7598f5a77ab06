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

/// What failed stays the error's source; the answer (503, `unavailable`,
/// the message) is what it was when the cause was a string.
#[test]
fn unavailable_keeps_its_cause_and_its_answer() {
    use std::error::Error as _;

    let err = GatewayError::from(StoreError::unavailable("reading a saga", "connection reset"));
    assert_eq!(err.status(), 503);
    assert_eq!(err.code(), "unavailable");
    let store_text = StoreError::unavailable("reading a saga", "connection reset").to_string();
    assert_eq!(err.to_json()["error"]["message"], format!("unavailable: {store_text}"));
    assert!(err.to_json()["error"].get("field").is_none());
    let source = err.source().expect("the outage is the source");
    assert!(matches!(source.downcast_ref::<Outage>(), Some(Outage::Store(_))));
    // The store's own cause is still there, one step further.
    assert_eq!(
        source.source().map(ToString::to_string).as_deref(),
        Some("connection reset")
    );
}

/// A blob store that may come back is 503, to retry; a message the claim
/// check cannot work on is 422, as before.
#[test]
fn a_blob_store_outage_is_503_a_bad_claim_check_is_422() {
    use bosun_consumers::delivery::blob::BlobError;
    use std::error::Error as _;

    use crate::host::claim_check::ClaimCheckError;

    let outage = ClaimCheckError::Blob {
        reference: "payloads/contoso/m1.json".into(),
        source: BlobError::Unavailable("503 from the storage account".into()),
    };
    let operator = OperatorError::from(outage);
    assert!(matches!(operator, OperatorError::BlobUnavailable(_)), "{operator:?}");
    let err = GatewayError::from(operator);
    assert_eq!(err.status(), 503);
    assert_eq!(err.code(), "unavailable");
    assert!(
        err.to_string()
            .starts_with("unavailable: claim check: claim-checked payload payloads/contoso/m1.json"),
        "{err}"
    );
    let blob = err
        .source()
        .and_then(|outage| outage.source())
        .and_then(|claim_check| claim_check.source())
        .and_then(|blob| blob.downcast_ref::<BlobError>());
    assert!(matches!(blob, Some(BlobError::Unavailable(_))), "{blob:?}");

    let invalid = OperatorError::from(ClaimCheckError::Malformed("no payload".into()));
    assert!(matches!(invalid, OperatorError::ClaimCheck(_)), "{invalid:?}");
    let err = GatewayError::from(invalid);
    assert_eq!(err.status(), 422);
    assert_eq!(err.code(), "invalid-field");
    assert_eq!(
        err.to_string(),
        "claim check: cannot claim-check this message: no payload"
    );
}
