//! An environment of a tenant through the front door: its release view
//! (`deliveries:read`), read from the environment's GitOps saga, and
//! rolling one of its modules back to a release verified there
//! (`releases:rollback`, and `releases:override` too with an override
//! reason). Both doors (the HTTP API and MCP) come here; the rollback is
//! checked by [`Operator::plan_rollback`], as `bosun releases rollback`
//! checks it, then sent as the caller, who is stamped as `requestedBy`.
//!
//! A tenant's key names only its own tenant: another tenant's environment,
//! one that does not exist and a name that is not an environment's all
//! read "no environment `NAME`", byte for byte.

use bosun_sagas::gitops::{GitOpsPhase, GitOpsState};
use bosun_sagas::versioned::load_state;

use super::*;
use crate::operator::rollback::RollbackRequest;
use crate::runtime::telemetry::TraceContext;

/// What a person asks of a rollback (the body of
/// `POST /v1/tenants/{tenant}/environments/{environment}/rollback`).
#[derive(Debug, Clone, Copy)]
pub struct RollbackAsk<'a> {
    /// Why.
    pub reason: &'a str,
    /// The module; none: the environment's only one.
    pub module_id: Option<&'a str>,
    /// The verified release to go back to; none: the newest verified one
    /// before the module's current release.
    pub to_release_id: Option<&'a str>,
    /// Why it goes through a closed promotion window or a hold (needs
    /// `releases:override` too).
    pub override_reason: Option<&'a str>,
    /// The person the caller acts for (a note).
    pub on_behalf_of: Option<&'a str>,
}

/// An environment's releases, as its GitOps saga keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentView {
    /// The tenant.
    pub tenant_id: String,
    /// The environment.
    pub environment: String,
    /// Where the environment stands: `idle` (nothing promoted yet),
    /// `reconciling` (a promotion not yet reported by the environment) or
    /// `synced`.
    #[schemars(extend("enum" = ["idle", "reconciling", "synced"]))]
    pub phase: String,
    /// The environment repository, once a promotion named it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Every module promoted or verified there, by module id.
    pub modules: Vec<ModuleView>,
    /// The GitOps saga's version (it changes at every step).
    pub version: i64,
}

/// One module of an environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModuleView {
    /// The module.
    pub module_id: String,
    /// The release it runs (the newest promoted), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current: Option<CurrentRelease>,
    /// The releases verified there, newest first: what a rollback can go
    /// back to.
    pub verified: Vec<VerifiedView>,
    /// Promotions of the module waiting for the environment (release ids,
    /// oldest first).
    pub queued: Vec<String>,
}

/// The release a module runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CurrentRelease {
    /// The release.
    pub release_id: String,
    /// When it was promoted.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub promoted_at: OffsetDateTime,
    /// The environment repository commit that promoted it, once written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit_sha: Option<String>,
}

/// A release verified in an environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifiedView {
    /// The release.
    pub release_id: String,
    /// When it was verified there.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub verified_at: OffsetDateTime,
}

/// A rollback checked and sent: the 202 of
/// `POST /v1/tenants/{tenant}/environments/{environment}/rollback`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackAccepted {
    /// The `RollbackEnvironment` command's messageId.
    pub message_id: Uuid,
    /// Its delivery (`/v1/deliveries/{correlationId}`).
    pub correlation_id: Uuid,
    /// What it does.
    pub plan: RollbackPlanView,
}

/// What a rollback does, as checked before it was sent (the GitOps saga
/// checks again when it carries it out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackPlanView {
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
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub verified_at: OffsetDateTime,
}

impl Gateway {
    /// `environment` of `tenant`: per module the release it runs, the
    /// releases verified there (newest first) and the promotions queued.
    pub async fn environment(
        &self,
        caller: &Caller,
        tenant: &str,
        environment: &str,
    ) -> Result<EnvironmentView, GatewayError> {
        Self::require(caller, Scope::DeliveriesRead)?;
        Self::environment_named(caller, tenant, environment)?;
        let record = self
            .backends
            .store
            .load_saga("gitops", &format!("{tenant}/{environment}"))
            .await?
            .ok_or_else(|| GatewayError::not_found("environment", environment))?;
        let state: GitOpsState = load_state(&record.state).map_err(|err| GatewayError::Invalid {
            field: None,
            message: format!("environment {environment}: {err}"),
        })?;
        Ok(view(tenant, environment, record.version, state))
    }

    /// Rolls one module of `environment` of `tenant` back to a release
    /// verified there, as the caller: checked first (something verified to
    /// go back to; the promotion gate open, unless `override_reason`), then
    /// sent as `RollbackEnvironment` in the trace `trace` names. A refusal
    /// of the check is `invalid-field` (422) with its reason.
    pub async fn rollback_environment(
        &self,
        caller: &Caller,
        tenant: &str,
        environment: &str,
        ask: RollbackAsk<'_>,
        trace: Option<&TraceContext>,
    ) -> Result<RollbackAccepted, GatewayError> {
        Self::require(caller, Scope::ReleasesRollback)?;
        // Going through a closed window or a hold is releases:override's
        // too, as `access::override_scope` says of the command.
        if ask.override_reason.is_some() {
            Self::require(caller, Scope::ReleasesOverride)?;
        }
        Self::environment_named(caller, tenant, environment)?;
        let operator = self.operator(caller);
        let plan = operator
            .plan_rollback(
                self.backends.policies.as_ref(),
                RollbackRequest {
                    tenant,
                    environment,
                    module_id: ask.module_id,
                    to_release_id: ask.to_release_id,
                    reason: ask.reason,
                    override_reason: ask.override_reason,
                },
                OffsetDateTime::now_utc(),
            )
            .await?;
        let mut payload = plan.payload;
        if let (Some(who), Some(object)) = (ask.on_behalf_of, payload.as_object_mut()) {
            object.insert("onBehalfOf".to_owned(), Value::String(who.to_owned()));
        }
        let accepted = self
            .send_command(
                caller,
                "RollbackEnvironment",
                &payload,
                Some(tenant),
                CommandRouting {
                    trace,
                    ..CommandRouting::default()
                },
            )
            .await?;
        let id = |field: &str| {
            accepted.body[field]
                .as_str()
                .and_then(|text| Uuid::parse_str(text).ok())
                .unwrap_or_default()
        };
        Ok(RollbackAccepted {
            message_id: id("messageId"),
            correlation_id: id("correlationId"),
            plan: RollbackPlanView {
                environment: plan.environment,
                module_id: plan.module_id,
                from_release_id: plan.from_release_id,
                to_release_id: plan.to_release_id,
                verified_at: plan.verified_at,
            },
        })
    }

    /// "No environment `NAME`" unless `caller` sees `tenant` and both are
    /// valid names: another tenant's environment reads as one that does not
    /// exist.
    fn environment_named(caller: &Caller, tenant: &str, environment: &str) -> Result<(), GatewayError> {
        let valid = bosun_contracts::validate::tenant_id("tenant", tenant).is_ok()
            && bosun_contracts::validate::environment_name("environment", environment).is_ok();
        if valid && caller.sees(Some(tenant)) {
            Ok(())
        } else {
            Err(GatewayError::not_found("environment", environment))
        }
    }
}

/// The view of a GitOps saga's state.
fn view(tenant: &str, environment: &str, version: i64, state: GitOpsState) -> EnvironmentView {
    let mut modules: Vec<&String> = state.apps.keys().chain(state.verified.keys()).collect();
    modules.extend(state.queued.iter().map(|queued| &queued.module_id));
    modules.sort();
    modules.dedup();
    let modules = modules
        .into_iter()
        .map(|module| ModuleView {
            module_id: module.clone(),
            current: state.apps.get(module).map(|app| CurrentRelease {
                release_id: app.release_id.clone(),
                promoted_at: app.promoted_at,
                commit_sha: app.commit_sha.clone(),
            }),
            verified: state
                .verified
                .get(module)
                .into_iter()
                .flatten()
                .rev()
                .map(|known| VerifiedView {
                    release_id: known.release_id.clone(),
                    verified_at: known.verified_at,
                })
                .collect(),
            queued: state
                .queued
                .iter()
                .filter(|queued| &queued.module_id == module)
                .map(|queued| queued.release_id.clone())
                .collect(),
        })
        .collect();
    EnvironmentView {
        tenant_id: tenant.to_owned(),
        environment: environment.to_owned(),
        phase: match state.phase {
            GitOpsPhase::Idle => "idle",
            GitOpsPhase::Reconciling => "reconciling",
            GitOpsPhase::Synced => "synced",
        }
        .to_owned(),
        repository: state.repository,
        modules,
        version,
    }
}
