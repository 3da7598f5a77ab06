//! A tenant's approval policy through the front door: reading it (and its
//! history) needs `deliveries:read`, changing it `admin`, placing and
//! lifting a hold `releases:override`; a tenant's key
//! names only its own tenant, and another tenant's policy reads as "not
//! found", as one that does not exist.

use crate::operator::audit::{self, PolicyAction};
use crate::operator::policies::{self, HoldChange, PolicyChange};

use super::*;
use crate::ports::store::ReleasePolicyRecord;

impl Gateway {
    /// The approval policy in force for `tenant`.
    pub async fn release_policy(&self, caller: &Caller, tenant: &str) -> Result<ReleasePolicyRecord, GatewayError> {
        Self::require(caller, Scope::DeliveriesRead)?;
        let not_found = || GatewayError::not_found("approval policy of tenant", tenant);
        if !caller.sees(Some(tenant)) {
            return Err(not_found());
        }
        policies::current(self.backends.policies.as_ref(), tenant)
            .await?
            .ok_or_else(not_found)
    }

    /// Every version of `tenant`'s approval policy, oldest first (empty
    /// when it never stored one).
    pub async fn release_policy_history(
        &self,
        caller: &Caller,
        tenant: &str,
    ) -> Result<Vec<ReleasePolicyRecord>, GatewayError> {
        Self::require(caller, Scope::DeliveriesRead)?;
        if !caller.sees(Some(tenant)) {
            return Err(GatewayError::not_found("approval policy of tenant", tenant));
        }
        Ok(policies::history(self.backends.policies.as_ref(), tenant).await?)
    }

    /// Stores a new version of `tenant`'s approval policy, made against
    /// version `expected` (`None`: the one in force now), as the caller.
    pub async fn set_release_policy(
        &self,
        caller: &Caller,
        tenant: &str,
        document: &serde_json::Value,
        reason: Option<&str>,
        expected: Option<u64>,
    ) -> Result<ReleasePolicyRecord, GatewayError> {
        Self::require(caller, Scope::Admin)?;
        if !caller.sees(Some(tenant)) {
            return Err(GatewayError::not_found("approval policy of tenant", tenant));
        }
        let store = self.backends.policies.as_ref();
        let expected = policies::expected_or_current(store, tenant, expected).await?;
        let changed_by = caller.principal();
        let record = policies::store_change(
            store,
            PolicyChange {
                tenant,
                document,
                changed_by: &changed_by,
                reason,
                expected,
            },
        )
        .await?;
        audit::record_policy_change(
            self.backends.audit.as_ref(),
            &record,
            &PolicyAction::Changed,
            &format!("api:{}", caller.key_id),
        )
        .await?;
        Ok(record)
    }

    /// Places a hold on `environment` of `tenant` (`Some`), or lifts it
    /// (`None`): a new policy version, as the caller. Needs
    /// `releases:override`; lifting a hold that is not there is "not
    /// found", as is an invalid environment name.
    pub async fn change_release_hold(
        &self,
        caller: &Caller,
        tenant: &str,
        environment: &str,
        hold: Option<bosun_sagas::release::Hold>,
    ) -> Result<ReleasePolicyRecord, GatewayError> {
        Self::require(caller, Scope::ReleasesOverride)?;
        if !caller.sees(Some(tenant)) {
            return Err(GatewayError::not_found("approval policy of tenant", tenant));
        }
        if bosun_contracts::validate::environment_name("environment", environment).is_err() {
            return Err(GatewayError::not_found("hold on environment", environment));
        }
        let changed_by = caller.principal();
        let action = if hold.is_some() {
            PolicyAction::HoldPlaced(environment.to_owned())
        } else {
            PolicyAction::HoldLifted(environment.to_owned())
        };
        let record = policies::change_hold(
            self.backends.policies.as_ref(),
            HoldChange {
                tenant,
                environment,
                hold,
                changed_by: &changed_by,
            },
        )
        .await?
        .ok_or_else(|| GatewayError::not_found("hold on environment", environment))?;
        audit::record_policy_change(
            self.backends.audit.as_ref(),
            &record,
            &action,
            &format!("api:{}", caller.key_id),
        )
        .await?;
        Ok(record)
    }

    /// A page of `tenant`'s release audit log (`deliveries:read`): entries
    /// at or after `since`, after the cursor `after`, at most `limit`; of
    /// one release only when `release` names it.
    pub async fn audit_log(
        &self,
        caller: &Caller,
        tenant: &str,
        page: AuditPage<'_>,
    ) -> Result<Vec<crate::ports::store::AuditEntry>, GatewayError> {
        Self::require(caller, Scope::DeliveriesRead)?;
        if !caller.sees(Some(tenant)) {
            return Err(GatewayError::not_found("audit log of tenant", tenant));
        }
        let store = self.backends.audit.as_ref();
        let AuditPage {
            since,
            after,
            release,
            limit,
        } = page;
        let Some(release) = release else {
            return Ok(audit::entries(store, tenant, since, after, limit).await?);
        };
        // A release's decisions are few: read them all, then the page.
        let mut entries = audit::release_entries(store, tenant, release, audit::MAX_AUDIT_PAGE).await?;
        entries.retain(|entry| {
            since.is_none_or(|since| entry.at >= since) && after.is_none_or(|after| entry.sequence > after)
        });
        entries.truncate(limit);
        Ok(entries)
    }
}

/// Which part of an audit log to read.
#[derive(Debug, Clone, Copy, Default)]
pub struct AuditPage<'a> {
    /// Only entries made at or after this time.
    pub since: Option<OffsetDateTime>,
    /// Only entries after this sequence (the last of the page before).
    pub after: Option<u64>,
    /// Only entries about this release.
    pub release: Option<&'a str>,
    /// At most this many.
    pub limit: usize,
}
