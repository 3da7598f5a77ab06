//! A tenant's approval policy, as the CLI and the HTTP API manage it: read
//! the version in force and every earlier one, and store a new version
//! after checking it as the release saga will read it. Versions are never
//! changed nor deleted: the history is the audit trail of who changed the
//! policy, when and why.

use serde_json::Value;
use time::OffsetDateTime;

use bosun_contracts::validate;

use crate::operator::OperatorError;
use crate::ports::store::{PolicyStore, ReleasePolicyRecord};

/// The most characters of the reason given with a policy change.
pub const MAX_POLICY_REASON_CHARS: usize = 1000;

/// The latest version a policy can have (stores keep a signed 64-bit
/// version).
pub const MAX_POLICY_VERSION: u64 = i64::MAX as u64;

/// The largest policy document, in bytes of its JSON.
pub const MAX_POLICY_BYTES: usize = 256 * 1024;

/// A policy change to store.
#[derive(Debug, Clone)]
pub struct PolicyChange<'a> {
    /// The tenant whose policy it is.
    pub tenant: &'a str,
    /// The new document.
    pub document: &'a Value,
    /// Who changes it (`cli:<operator>`, `key:<id>`).
    pub changed_by: &'a str,
    /// Why.
    pub reason: Option<&'a str>,
    /// The version the change was made against (`None`: the tenant has
    /// none yet); a change against an older version is refused, so two
    /// people editing at once do not silently overwrite each other.
    pub expected: Option<u64>,
}

/// The approval policy in force for `tenant`, if it stored one.
pub async fn current(store: &dyn PolicyStore, tenant: &str) -> Result<Option<ReleasePolicyRecord>, OperatorError> {
    check_tenant(tenant)?;
    Ok(store.release_policy(tenant).await?)
}

/// The version a change is made against: `expected` when the changer
/// named one, else the version in force now (`None`: the tenant has none).
pub async fn expected_or_current(
    store: &dyn PolicyStore,
    tenant: &str,
    expected: Option<u64>,
) -> Result<Option<u64>, OperatorError> {
    match expected {
        Some(version) => Ok(Some(version)),
        None => Ok(current(store, tenant).await?.map(|record| record.version)),
    }
}

/// Every version of `tenant`'s approval policy, oldest first.
pub async fn history(store: &dyn PolicyStore, tenant: &str) -> Result<Vec<ReleasePolicyRecord>, OperatorError> {
    check_tenant(tenant)?;
    Ok(store.release_policy_history(tenant).await?)
}

/// Checks `change.document` as the release saga reads it and stores it as
/// the tenant's next version.
pub async fn store_change(
    store: &dyn PolicyStore,
    change: PolicyChange<'_>,
) -> Result<ReleasePolicyRecord, OperatorError> {
    check_tenant(change.tenant)?;
    check(change.document)?;
    if change.expected.is_some_and(|version| version > MAX_POLICY_VERSION) {
        return Err(OperatorError::Contract(bosun_contracts::ContractError::InvalidField {
            field: "expectedVersion".to_owned(),
            reason: format!("at most {MAX_POLICY_VERSION}; no policy has a later version"),
        }));
    }
    if let Some(reason) = change.reason {
        validate::max_chars("reason", reason, MAX_POLICY_REASON_CHARS).map_err(|err| {
            OperatorError::Contract(bosun_contracts::ContractError::InvalidField {
                field: err.field,
                reason: err.reason,
            })
        })?;
    }
    let record = store
        .put_release_policy(
            change.tenant,
            change.document,
            change.changed_by,
            change.reason,
            change.expected,
            OffsetDateTime::now_utc(),
        )
        .await?;
    tracing::info!(
        tenant = %record.tenant_id,
        version = record.version,
        changed_by = %record.changed_by,
        "approval policy changed"
    );
    Ok(record)
}

/// Checks a policy document: JSON of at most [`MAX_POLICY_BYTES`] that
/// reads as an approval policy and is valid, as the release saga reads it
/// ([`ApprovalPolicy::from_document`](bosun_sagas::release::ApprovalPolicy::from_document));
/// the error names the field (`document.<path>`).
pub fn check(document: &Value) -> Result<(), OperatorError> {
    let invalid = |field: String, reason: String| {
        OperatorError::Contract(bosun_contracts::ContractError::InvalidField {
            field: format!(
                "document{}",
                if field.is_empty() {
                    String::new()
                } else {
                    format!(".{field}")
                }
            ),
            reason,
        })
    };
    let size = serde_json::to_vec(document).map_or(usize::MAX, |bytes| bytes.len());
    if size > MAX_POLICY_BYTES {
        return Err(invalid(
            String::new(),
            format!("the approval policy is {size} bytes; at most {MAX_POLICY_BYTES} are allowed"),
        ));
    }
    // The one reader the release saga's governance uses too.
    bosun_sagas::release::ApprovalPolicy::from_document(document).map_err(|err| invalid(err.field, err.reason))?;
    Ok(())
}

fn check_tenant(tenant: &str) -> Result<(), OperatorError> {
    validate::tenant_id("tenantId", tenant)
        .map_err(|err| OperatorError::Invalid(format!("`{}`: {}", err.field, err.reason)))
}

/// A hold to place on an environment, or to lift.
#[derive(Debug, Clone)]
pub struct HoldChange<'a> {
    /// The tenant whose environment it is.
    pub tenant: &'a str,
    /// The environment.
    pub environment: &'a str,
    /// The hold to place (`None`: lift the one in force).
    pub hold: Option<bosun_sagas::release::Hold>,
    /// Who places or lifts it.
    pub changed_by: &'a str,
}

/// How many times a hold is written again when someone else changed the
/// policy meanwhile.
const HOLD_ATTEMPTS: usize = 5;

/// Places or lifts a hold on one environment: a new version of the
/// tenant's policy with only that hold changed (written again on the
/// version in force if another change lands meanwhile), so who held what,
/// when and why is in the policy's history. Returns the version stored,
/// or `None` when lifting a hold that is not there (nothing is stored).
pub async fn change_hold(
    store: &dyn PolicyStore,
    change: HoldChange<'_>,
) -> Result<Option<ReleasePolicyRecord>, OperatorError> {
    check_tenant(change.tenant)?;
    validate::environment_name("environment", change.environment).map_err(|err| {
        OperatorError::Contract(bosun_contracts::ContractError::InvalidField {
            field: err.field,
            reason: err.reason,
        })
    })?;
    let reason = match &change.hold {
        Some(hold) => format!("hold {}: {}", change.environment, hold.reason),
        None => format!("hold on {} lifted", change.environment),
    };
    let reason: String = reason.chars().take(MAX_POLICY_REASON_CHARS).collect();
    let mut last = None;
    for _ in 0..HOLD_ATTEMPTS {
        let current = store.release_policy(change.tenant).await?;
        let mut document = current.as_ref().map_or_else(
            || Value::Object(serde_json::Map::new()),
            |record| record.document.clone(),
        );
        let Some(object) = document.as_object_mut() else {
            return Err(OperatorError::Invalid(format!(
                "tenant {}'s policy in force is not a JSON object; store a valid one first",
                change.tenant
            )));
        };
        let holds = object
            .entry("holds")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        let Some(holds) = holds.as_object_mut() else {
            return Err(OperatorError::Invalid(format!(
                "tenant {}'s policy in force has `holds` that is not an object; store a valid one first",
                change.tenant
            )));
        };
        match &change.hold {
            Some(hold) => {
                let value = serde_json::to_value(hold).map_err(|err| OperatorError::Invalid(err.to_string()))?;
                holds.insert(change.environment.to_owned(), value);
            }
            None => {
                if holds.remove(change.environment).is_none() {
                    return Ok(None);
                }
            }
        }
        if holds.is_empty() {
            object.remove("holds");
        }
        let stored = store_change(
            store,
            PolicyChange {
                tenant: change.tenant,
                document: &document,
                changed_by: change.changed_by,
                reason: Some(&reason),
                expected: current.as_ref().map(|record| record.version),
            },
        )
        .await;
        match stored {
            Ok(record) => return Ok(Some(record)),
            Err(OperatorError::Store(err @ crate::ports::store::StoreError::PolicyChanged { .. })) => {
                last = Some(err);
            }
            Err(err) => return Err(err),
        }
    }
    Err(last.map_or_else(
        || OperatorError::Invalid("the policy kept changing; try again".to_owned()),
        OperatorError::Store,
    ))
}
