//! Azure Container Registry settings: the registry's endpoint, and where
//! ACR Tasks schedules runs (`BOSUN_CONTAINER_BUILDER=acr-tasks`).

use std::time::Duration;

use super::types::invalid;
use super::*;

/// `BOSUN_ACR_ENDPOINT`: the registry's URL when it is not
/// `https://<BOSUN_ACR_REGISTRY>` (a private endpoint, a test registry).
pub(super) fn endpoint(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<String>, ConfigError> {
    let endpoint = get("BOSUN_ACR_ENDPOINT").map(|url| url.trim().trim_end_matches('/').to_owned());
    if let Some(url) = &endpoint
        && !url.starts_with("https://")
        && !url.starts_with("http://")
    {
        return Err(invalid(
            "BOSUN_ACR_ENDPOINT",
            "must be an http(s) URL such as https://contoso.azurecr.io",
        ));
    }
    Ok(endpoint)
}

/// The ACR Tasks settings (`BOSUN_CONTAINER_BUILDER=acr-tasks`): the
/// registry's place in Azure Resource Manager, checked against Azure's
/// naming rules, and the identity whose ARM tokens schedule the runs
/// (`BOSUN_ACR_ARM_AUTH`, else the identity of `BOSUN_ACR_AUTH`, else the
/// default chain).
pub(super) fn acr_tasks_settings(
    get: &dyn Fn(&str) -> Option<String>,
    registry: &str,
    credential: &AcrCredential,
    millis: &dyn Fn(&str, u64) -> Result<Duration, ConfigError>,
) -> Result<AcrTasksSettings, ConfigError> {
    use bosun_consumers::container_build::acr_tasks::{AcrTasksConfig, check_config};
    let required = |name: &str| {
        get(name).map(|text| text.trim().to_owned()).filter(|text| !text.is_empty()).ok_or_else(|| {
            invalid(name, "is required with BOSUN_CONTAINER_BUILDER=acr-tasks (the registry's place in Azure Resource Manager)")
        })
    };
    let subscription = required("BOSUN_ACR_SUBSCRIPTION")?;
    let resource_group = required("BOSUN_ACR_RESOURCE_GROUP")?;
    let registry_name = get("BOSUN_ACR_REGISTRY_NAME")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|| registry.split('.').next().unwrap_or_default().to_owned());
    let arm_endpoint = get("BOSUN_ACR_ARM_ENDPOINT").map(|url| url.trim().trim_end_matches('/').to_owned());
    if let Some(url) = &arm_endpoint
        && !url.starts_with("https://")
        && !url.starts_with("http://")
    {
        return Err(invalid(
            "BOSUN_ACR_ARM_ENDPOINT",
            "must be an http(s) URL such as https://management.azure.com",
        ));
    }
    let identity = match (get("BOSUN_ACR_ARM_AUTH"), credential) {
        (Some(text), _) => EntraIdentity::parse("BOSUN_ACR_ARM_AUTH", &text)?,
        (None, AcrCredential::Entra { identity, .. }) => *identity,
        (None, _) => EntraIdentity::Default,
    };
    let run_timeout = millis("BOSUN_ACR_RUN_TIMEOUT_MS", 3_600_000)?;
    let mut config = AcrTasksConfig::new(subscription.clone(), resource_group.clone(), registry_name.clone());
    config.run_timeout = run_timeout;
    check_config(&config).map_err(|err| {
        let setting = match err.field {
            "subscription" => "BOSUN_ACR_SUBSCRIPTION",
            "resourceGroup" => "BOSUN_ACR_RESOURCE_GROUP",
            "registryName" => "BOSUN_ACR_REGISTRY_NAME",
            _ => "BOSUN_ACR_RUN_TIMEOUT_MS",
        };
        invalid(setting, err.reason)
    })?;
    Ok(AcrTasksSettings {
        subscription,
        resource_group,
        registry_name,
        arm_endpoint,
        identity,
        run_timeout,
    })
}
