//! `bosun releases rollback ENV` and its HTTP twin: what a rollback of an
//! environment would do, checked before anything is sent. The environment's
//! GitOps saga says which releases were verified there and which one each
//! module runs; the tenant's policy says whether the promotion gate is open.
//! The door then sends the `RollbackEnvironment` this returns (stamped
//! with who asks), which the GitOps saga carries out, checking again.

use serde::Serialize;
use serde_json::{Value, json};
use time::OffsetDateTime;

use bosun_contracts::validate;
use bosun_sagas::gitops::{GitOpsState, before_current};
use bosun_sagas::release::ApprovalPolicy;
use bosun_sagas::versioned::load_state;

use crate::operator::{Operator, OperatorError};
use crate::ports::store::{PolicyStore, StoreError};

/// What a person asks for.
#[derive(Debug, Clone, Copy)]
pub struct RollbackRequest<'a> {
    /// The tenant.
    pub tenant: &'a str,
    /// The environment.
    pub environment: &'a str,
    /// The module; none: the environment's only one.
    pub module_id: Option<&'a str>,
    /// The release to go back to; none: the newest verified one before the
    /// module's current release.
    pub to_release_id: Option<&'a str>,
    /// Why.
    pub reason: &'a str,
    /// Why it goes through closed promotion windows and holds, if it does
    /// (needs `releases:override`).
    pub override_reason: Option<&'a str>,
}

/// A rollback checked and ready to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RollbackPlan {
    /// The environment.
    pub environment: String,
    /// The module rolled back.
    pub module_id: String,
    /// The release it runs now, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_release_id: Option<String>,
    /// The verified release it goes back to.
    pub to_release_id: String,
    /// When that release was verified there.
    #[serde(with = "time::serde::rfc3339")]
    pub verified_at: OffsetDateTime,
    /// The `RollbackEnvironment` payload to send.
    pub payload: Value,
}

impl Operator {
    /// Checks `request` against the environment's verified releases and the
    /// tenant's promotion gate at `now`. "No environment" reads the same
    /// whether or not another tenant has one of that name.
    pub async fn plan_rollback(
        &self,
        policies: &dyn PolicyStore,
        request: RollbackRequest<'_>,
        now: OffsetDateTime,
    ) -> Result<RollbackPlan, OperatorError> {
        let invalid = |err: validate::FieldError| OperatorError::Invalid(format!("`{}` {}", err.field, err.reason));
        validate::tenant_id("tenant", request.tenant).map_err(invalid)?;
        validate::environment_name("environment", request.environment).map_err(invalid)?;
        if let Some(module) = request.module_id {
            validate::identifier("moduleId", module).map_err(invalid)?;
        }
        if let Some(to) = request.to_release_id {
            validate::identifier("toReleaseId", to).map_err(invalid)?;
        }
        let key = format!("{}/{}", request.tenant, request.environment);
        let record = self
            .store
            .load_saga("gitops", &key)
            .await?
            .ok_or_else(|| StoreError::NotFound {
                what: "environment",
                id: request.environment.to_owned(),
            })?;
        let state: GitOpsState = load_state(&record.state)
            .map_err(|err| OperatorError::Invalid(format!("environment {}: {err}", request.environment)))?;
        let module_id = match request.module_id {
            Some(module) => module.to_owned(),
            None => {
                let mut modules: Vec<&String> = state.apps.keys().chain(state.verified.keys()).collect();
                modules.sort();
                modules.dedup();
                match modules.as_slice() {
                    [only] => (*only).clone(),
                    [] => {
                        return Err(OperatorError::Invalid(format!(
                            "nothing was ever promoted to {}: there is nothing to roll back",
                            request.environment
                        )));
                    }
                    many => {
                        return Err(OperatorError::Invalid(format!(
                            "{} runs several modules ({}): name one with `moduleId` (--module)",
                            request.environment,
                            many.iter().map(|module| module.as_str()).collect::<Vec<_>>().join(", ")
                        )));
                    }
                }
            }
        };
        let current = state.apps.get(&module_id).map(|app| app.release_id.clone());
        let verified = state.verified.get(&module_id).cloned().unwrap_or_default();
        let target = match request.to_release_id {
            Some(wanted) => verified.iter().rev().find(|known| known.release_id == wanted),
            None => before_current(&verified, current.as_deref()).last(),
        };
        let listed = || {
            if verified.is_empty() {
                "none".to_owned()
            } else {
                verified
                    .iter()
                    .map(|known| known.release_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let Some(target) = target else {
            return Err(OperatorError::Invalid(match request.to_release_id {
                Some(wanted) => format!(
                    "{wanted} was never verified in {} (verified releases of {module_id}: {})",
                    request.environment,
                    listed()
                ),
                None => format!(
                    "no release of {module_id} verified in {} before the current one, {}, to go back to \
                     (verified, oldest first: {})",
                    request.environment,
                    current.as_deref().unwrap_or("none"),
                    listed()
                ),
            }));
        };
        if current.as_deref() == Some(target.release_id.as_str()) {
            return Err(OperatorError::Invalid(format!(
                "{} is the current release of {module_id} in {} already",
                target.release_id, request.environment
            )));
        }
        if request.override_reason.is_none() {
            let policy = match policies.release_policy(request.tenant).await? {
                Some(stored) => ApprovalPolicy::from_document(&stored.document).map_err(|err| {
                    OperatorError::Invalid(format!(
                        "tenant {}'s approval policy version {} does not read here: `{}` {}",
                        request.tenant, stored.version, err.field, err.reason
                    ))
                })?,
                None => ApprovalPolicy::default(),
            };
            if let Some(closure) = policy.promotion_gate(request.environment, now) {
                return Err(OperatorError::Invalid(format!(
                    "refused by rule `{}`: {}; a rollback obeys the promotion windows and holds of {} unless \
                     given an override reason (--override-reason, `overrideReason`), which needs releases:override",
                    closure.rule.name(),
                    closure.reason,
                    request.environment
                )));
            }
        }
        let mut payload = json!({
            "environment": request.environment,
            "moduleId": module_id,
            "toReleaseId": target.release_id,
            "reason": request.reason,
            "requestedAt": now
                .format(&time::format_description::well_known::Rfc3339)
                .map_err(|err| OperatorError::Invalid(err.to_string()))?,
        });
        if let Some(overriding) = request.override_reason {
            payload["overrideReason"] = Value::String(overriding.to_owned());
        }
        Ok(RollbackPlan {
            environment: request.environment.to_owned(),
            module_id,
            from_release_id: current,
            to_release_id: target.release_id.clone(),
            verified_at: target.verified_at,
            payload,
        })
    }
}
