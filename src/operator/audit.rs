//! A tenant's release audit log as the CLI and the HTTP API read it, and
//! the entries the operator's own decisions add to it (policy changes,
//! holds). The release saga's decisions reach it through the
//! release-orchestration consumer (`ReleaseDecisionRecorded`); every entry
//! says what was decided, when, by whom, through which door and why, and
//! none is ever changed or deleted.

use serde_json::json;

use bosun_contracts::validate;

use crate::operator::OperatorError;
use crate::ports::store::{AuditEntry, AuditStore, ReleasePolicyRecord};

/// The most entries one read returns.
pub const MAX_AUDIT_PAGE: usize = 1000;

/// What an operator's change of a tenant's policy was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyAction {
    /// A new version of the whole document.
    Changed,
    /// A hold placed on an environment.
    HoldPlaced(String),
    /// The hold on an environment lifted.
    HoldLifted(String),
}

/// A page of `tenant`'s audit log in log order: entries at or after
/// `since`, after the cursor `after` (the last `sequence` read), at most
/// `limit` (1 to [`MAX_AUDIT_PAGE`]).
pub async fn entries(
    store: &dyn AuditStore,
    tenant: &str,
    since: Option<time::OffsetDateTime>,
    after: Option<u64>,
    limit: usize,
) -> Result<Vec<AuditEntry>, OperatorError> {
    check_read(tenant, limit)?;
    Ok(store.audit_entries(tenant, since, after, limit).await?)
}

/// `tenant`'s entries about release `release_id`, in log order, at most
/// `limit` (1 to [`MAX_AUDIT_PAGE`]).
pub async fn release_entries(
    store: &dyn AuditStore,
    tenant: &str,
    release_id: &str,
    limit: usize,
) -> Result<Vec<AuditEntry>, OperatorError> {
    check_read(tenant, limit)?;
    Ok(store.release_audit(tenant, release_id, limit).await?)
}

/// Checks a read of `tenant`'s log of at most `limit` entries.
fn check_read(tenant: &str, limit: usize) -> Result<(), OperatorError> {
    validate::tenant_id("tenantId", tenant)
        .map_err(|err| OperatorError::Invalid(format!("`{}`: {}", err.field, err.reason)))?;
    if !(1..=MAX_AUDIT_PAGE).contains(&limit) {
        return Err(OperatorError::Invalid(format!(
            "`limit`: must be between 1 and {MAX_AUDIT_PAGE}"
        )));
    }
    Ok(())
}

/// Adds the policy version `record` (stored through `door`) to its
/// tenant's audit log, once (its id is `policy:<version>`). The policy's
/// own history stays the record of its versions; this entry puts the
/// change among the release decisions it governs.
pub async fn record_policy_change(
    store: &dyn AuditStore,
    record: &ReleasePolicyRecord,
    action: &PolicyAction,
    door: &str,
) -> Result<(), OperatorError> {
    let (name, environment) = match action {
        PolicyAction::Changed => ("policy-changed", None),
        PolicyAction::HoldPlaced(environment) => ("hold-placed", Some(environment.clone())),
        PolicyAction::HoldLifted(environment) => ("hold-lifted", Some(environment.clone())),
    };
    let entry = AuditEntry {
        id: format!("policy:{}", record.version),
        tenant_id: record.tenant_id.clone(),
        sequence: 0,
        at: record.changed_at,
        action: name.to_owned(),
        release_id: None,
        environment,
        by: Some(record.changed_by.clone()),
        door: Some(door.to_owned()),
        reason: record.reason.clone(),
        detail: json!({"policyVersion": record.version}),
    };
    store.append_audit(&entry).await.map_err(|err| {
        OperatorError::Invalid(format!(
            "policy version {} of tenant {} is stored, but its audit entry could not be written ({err}); \
             the policy's history has it (`bosun releases policy history`)",
            record.version, record.tenant_id
        ))
    })?;
    Ok(())
}
