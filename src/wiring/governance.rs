//! The release saga's governance over bosun's stores: a tenant's approval
//! policy is its latest stored version ([`PolicyStore`]); who requested a
//! delivery is who started it ([`DeliveryStore`]), and for an API key, the
//! key and the person it acts for, its sponsor ([`AccessStore`]); the
//! release's decisions are appended to the tenant's audit log
//! ([`AuditStore`]).

use std::sync::Arc;

use async_trait::async_trait;
use bosun_consumers::release_orchestration::{GovernanceError, ReleaseGovernance, VersionedApprovalPolicy};
use bosun_contracts::messages::ReleaseDecisionRecorded;
use bosun_sagas::release::ApprovalPolicy;

use crate::ports::store::{AccessStore, AuditEntry, AuditStore, DeliveryStore, PolicyStore, StoreError};

/// [`ReleaseGovernance`] over the stores.
#[derive(Clone)]
pub struct StoreGovernance {
    policies: Arc<dyn PolicyStore>,
    deliveries: Arc<dyn DeliveryStore>,
    keys: Arc<dyn AccessStore>,
    audit: Arc<dyn AuditStore>,
}

impl std::fmt::Debug for StoreGovernance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreGovernance").finish_non_exhaustive()
    }
}

impl StoreGovernance {
    /// Governance reading policies, deliveries and keys from these stores,
    /// and appending release decisions to `audit`.
    pub fn new(
        policies: Arc<dyn PolicyStore>,
        deliveries: Arc<dyn DeliveryStore>,
        keys: Arc<dyn AccessStore>,
        audit: Arc<dyn AuditStore>,
    ) -> Self {
        Self {
            policies,
            deliveries,
            keys,
            audit,
        }
    }
}

fn unavailable(what: &'static str, tenant: &str, err: StoreError) -> GovernanceError {
    GovernanceError::Unavailable {
        what,
        tenant: tenant.to_owned(),
        source: Box::new(err),
    }
}

/// Reads a stored approval policy document as this release reads it
/// ([`ApprovalPolicy::from_document`]): one it cannot read is
/// [`GovernanceError::Unreadable`] (a later release wrote it).
fn read_policy(tenant: &str, version: u64, document: &serde_json::Value) -> Result<ApprovalPolicy, GovernanceError> {
    ApprovalPolicy::from_document(document).map_err(|err| GovernanceError::Unreadable {
        tenant: tenant.to_owned(),
        version,
        reason: format!("`{}`: {}", err.field, err.reason),
    })
}

#[async_trait]
impl ReleaseGovernance for StoreGovernance {
    async fn approval_policy(&self, tenant: &str) -> Result<Option<VersionedApprovalPolicy>, GovernanceError> {
        let Some(record) = self
            .policies
            .release_policy(tenant)
            .await
            .map_err(|err| unavailable("the approval policy", tenant, err))?
        else {
            return Ok(None);
        };
        let policy = read_policy(tenant, record.version, &record.document)?;
        Ok(Some(VersionedApprovalPolicy {
            version: record.version,
            policy,
        }))
    }

    async fn requesters(&self, tenant: &str, correlation_id: &str) -> Result<Vec<String>, GovernanceError> {
        let record = self
            .deliveries
            .delivery_record(correlation_id)
            .await
            .map_err(|err| unavailable("who requested the delivery", tenant, err))?;
        let Some(record) = record.filter(|record| record.tenant_id == tenant) else {
            return Ok(Vec::new());
        };
        // A delivery the HTTP API or MCP started names the key as
        // `api:<id>`; the command line as `cli:<operator>`.
        let Some(key_id) = record.started_by.strip_prefix("api:") else {
            return Ok(vec![record.started_by]);
        };
        let mut identities = vec![format!("key:{key_id}")];
        let key = self
            .keys
            .api_key(key_id)
            .await
            .map_err(|err| unavailable("the key that requested the delivery", tenant, err))?;
        if let Some(sponsor) = key
            .and_then(|key| key.sponsor)
            .filter(|sponsor| !sponsor.trim().is_empty())
            && !identities.contains(&sponsor)
        {
            identities.push(sponsor);
        }
        Ok(identities)
    }

    async fn record_decisions(
        &self,
        tenant: &str,
        message_id: &str,
        recorded: &ReleaseDecisionRecorded,
    ) -> Result<(), GovernanceError> {
        for (index, entry) in recorded.decisions.iter().enumerate() {
            let mut detail = serde_json::Map::new();
            if !entry.identities.is_empty() {
                detail.insert("identities".to_owned(), serde_json::json!(entry.identities));
            }
            if let Some(rule) = &entry.rule {
                detail.insert("rule".to_owned(), serde_json::json!(rule));
            }
            if let Some(version) = entry.policy_version {
                detail.insert("policyVersion".to_owned(), serde_json::json!(version));
            }
            if let Some(until) = entry.until {
                detail.insert("until".to_owned(), serde_json::json!(rfc3339(until)));
            }
            let audit = AuditEntry {
                id: format!("{message_id}/{index}"),
                tenant_id: tenant.to_owned(),
                sequence: 0,
                at: entry.decided_at,
                action: entry.decision.as_str().to_owned(),
                release_id: Some(recorded.release_id.clone()),
                environment: entry.environment.clone(),
                by: entry.by.clone(),
                door: recorded.door.clone(),
                reason: entry.reason.clone(),
                detail: serde_json::Value::Object(detail),
            };
            self.audit
                .append_audit(&audit)
                .await
                .map_err(|err| unavailable("the audit log", tenant, err))?;
        }
        Ok(())
    }
}

fn rfc3339(at: time::OffsetDateTime) -> String {
    at.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| at.to_string())
}
