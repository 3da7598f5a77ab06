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
