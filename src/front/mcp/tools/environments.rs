//! `get_environment`: an environment's releases (the module's current
//! release, the releases verified there, the queue), as
//! `GET /v1/tenants/{tenant}/environments/{environment}`; and
//! `rollback_environment`: roll a module back to a release verified there,
//! as `POST /v1/tenants/{tenant}/environments/{environment}/rollback`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{McpTool, invalid, required, to_json};
use crate::front::access::{ALL_TENANTS, Caller};
use crate::front::gateway::{Gateway, GatewayError, RollbackAsk};
use crate::runtime::telemetry::TraceContext;

/// The `get_environment` tool.
pub struct GetEnvironment;

/// `get_environment`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetEnvironmentArguments {
    /// The environment, e.g. prod.
    #[schemars(length(min = 1, max = 63))]
    environment: String,
    /// Only for platform keys (tenant `*`): the environment's tenant. A tenant's key reads its own; leave it out.
    tenant: Option<String>,
}

impl McpTool for GetEnvironment {
    const NAME: &'static str = "get_environment";
    const TITLE: &'static str = "Get an environment";
    const READ_ONLY: bool = true;
    const OPEN_WORLD: bool = false;
    type Arguments = GetEnvironmentArguments;

    fn description() -> String {
        "One environment of your tenant: its GitOps phase, and per module the release it runs (current), the \
         releases verified there, newest first (what rollback_environment can go back to), and the promotions \
         queued. Not found when nothing was ever promoted there. Needs deliveries:read."
            .to_owned()
    }

    async fn run(
        gateway: &Gateway,
        caller: &Caller,
        arguments: GetEnvironmentArguments,
    ) -> Result<Value, GatewayError> {
        let environment = required("environment", &arguments.environment)?;
        let tenant = tenant_of(caller, arguments.tenant.as_deref())?;
        to_json(&gateway.environment(caller, &tenant, environment).await?)
    }
}

/// The `rollback_environment` tool.
pub struct RollbackEnvironment;

/// `rollback_environment`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RollbackEnvironmentArguments {
    /// The environment, e.g. prod.
    #[schemars(length(min = 1, max = 63))]
    environment: String,
    /// Why (kept on the command and in the environment's history).
    #[schemars(length(min = 1, max = 4000))]
    reason: String,
    /// The module to roll back; leave it out when the environment runs one module.
    module_id: Option<String>,
    /// The verified release to go back to (see get_environment); leave it out for the newest one verified before
    /// the module's current release.
    to_release_id: Option<String>,
    /// Why the rollback goes through a closed promotion window or a hold (an incident): needs releases:override too.
    #[schemars(length(min = 1, max = 4000))]
    override_reason: Option<String>,
    /// The person you act for, as you name them (a note: the rollback is recorded as your key's).
    #[schemars(length(min = 1, max = 256))]
    on_behalf_of: Option<String>,
    /// Only for platform keys (tenant `*`): the environment's tenant. A tenant's key acts for its own; leave it out.
    tenant: Option<String>,
}

impl McpTool for RollbackEnvironment {
    const NAME: &'static str = "rollback_environment";
    const TITLE: &'static str = "Roll an environment back";
    const READ_ONLY: bool = false;
    // The GitOps consumer writes the release's promotion again to the
    // environment repository.
    const OPEN_WORLD: bool = true;
    type Arguments = RollbackEnvironmentArguments;

    fn description() -> String {
        "Rolls one module of an environment of your tenant back to a release verified there, as your key \
         (recorded as requestedBy): checked first (something verified before the current release to go back to; \
         the environment's promotion windows and holds open, unless overrideReason), then sent as \
         RollbackEnvironment; follow it with get_delivery on the returned correlationId. A refusal says why \
         (invalid-field). Needs the releases:rollback scope, and releases:override too with overrideReason; \
         neither lets an agent approve a release."
            .to_owned()
    }

    async fn run(
        gateway: &Gateway,
        caller: &Caller,
        arguments: RollbackEnvironmentArguments,
    ) -> Result<Value, GatewayError> {
        Self::run_traced(gateway, caller, None, arguments).await
    }

    /// The command continues the tool call's trace.
    async fn run_traced(
        gateway: &Gateway,
        caller: &Caller,
        trace: Option<&TraceContext>,
        arguments: RollbackEnvironmentArguments,
    ) -> Result<Value, GatewayError> {
        let environment = required("environment", &arguments.environment)?;
        let tenant = tenant_of(caller, arguments.tenant.as_deref())?;
        let ask = RollbackAsk {
            reason: &arguments.reason,
            module_id: arguments.module_id.as_deref(),
            to_release_id: arguments.to_release_id.as_deref(),
            override_reason: arguments.override_reason.as_deref(),
            on_behalf_of: arguments.on_behalf_of.as_deref(),
        };
        to_json(
            &gateway
                .rollback_environment(caller, &tenant, environment, ask, trace)
                .await?,
        )
    }
}

/// The tenant a call is about: a tenant's key's own (naming another reads
/// as its environment not found, in the gateway), or the one a platform
/// key names.
fn tenant_of(caller: &Caller, named: Option<&str>) -> Result<String, GatewayError> {
    match (caller.tenant_id.as_str(), named) {
        (_, Some(named)) => Ok(named.to_owned()),
        (ALL_TENANTS, None) => Err(invalid(
            "tenant",
            "a platform key (tenant `*`) must name the environment's tenant in `tenant`",
        )),
        (own, None) => Ok(own.to_owned()),
    }
}
