//! `bosun infra identities --from-deployment FILE DIR`: the overlay's
//! `identities.yaml` from the Bicep deployment's outputs, so nobody copies
//! fourteen client ids by hand.
//!
//! The input is what `az deployment group show -g RG -n main -o json`
//! prints (the outputs under `properties.outputs`), or only its outputs
//! (`--query properties.outputs`). `clientIds` is an array of
//! `{component, clientId}`, one per identity `main.bicep` creates.

use std::collections::BTreeMap;

use serde_json::Value;

use super::bicep::KEDA_COMPONENT;
use super::kubernetes;
use super::{ConsumerInfra, RenderedFile, YamlError};

/// What the deployment's outputs give the overlay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentOutputs {
    /// Each component's client id (a consumer's name, `api`, `keda`).
    pub client_ids: BTreeMap<String, String>,
    /// `serviceBusNamespace`: `BOSUN_SERVICEBUS_NAMESPACE`, when present.
    pub service_bus_namespace: Option<String>,
    /// `blobUrl`: `BOSUN_BLOB_URL`, when present.
    pub blob_url: Option<String>,
    /// `postgresHost`: the host of `BOSUN_DATABASE_URL`, when present.
    pub postgres_host: Option<String>,
    /// `databaseClientId`: `BOSUN_DATABASE_CLIENT_ID`, the identity every
    /// component signs in to PostgreSQL as, when present.
    pub database_client_id: Option<String>,
    /// `databaseUser`: the user of `BOSUN_DATABASE_URL`, when present.
    pub database_user: Option<String>,
}

impl DeploymentOutputs {
    /// KEDA's client id (for the KEDA operator, not a ServiceAccount of
    /// bosun's).
    pub fn keda_client_id(&self) -> Option<&str> {
        self.client_ids.get(KEDA_COMPONENT).map(String::as_str)
    }
}

/// Why the outputs could not be read or used.
#[derive(Debug, thiserror::Error)]
pub enum IdentitiesError {
    /// The file is not JSON.
    #[error("not the JSON of `az deployment group show -o json`: {0}")]
    NotJson(#[from] serde_json::Error),
    /// No `clientIds` output, or not in the shape `main.bicep` writes.
    #[error(
        "no clientIds output of infra/bicep/main.bicep ({0}); give the output of \
         `az deployment group show -g RG -n DEPLOYMENT -o json`"
    )]
    NoClientIds(&'static str),
    /// Components bosun deploys that the outputs have no identity for
    /// (a deployment of an older `main.bicep`).
    #[error("the deployment has no identity for {0:?}; deploy the current infra/bicep/main.bicep, then run this again")]
    Missing(Vec<String>),
    /// The file could not be written as YAML.
    #[error(transparent)]
    Yaml(#[from] YamlError),
}

/// Reads the outputs of a deployment of `main.bicep`.
pub fn read_outputs(json: &str) -> Result<DeploymentOutputs, IdentitiesError> {
    let document: Value = serde_json::from_str(json)?;
    let outputs = match document.pointer("/properties/outputs") {
        Some(outputs) => outputs,
        None => &document,
    };
    // ARM wraps each output as {"type": ..., "value": ...}.
    let value = |name: &str| outputs.get(name).map(|output| output.get("value").unwrap_or(output));
    let text = |name: &str| value(name).and_then(Value::as_str).map(str::to_owned);
    let entries = value("clientIds")
        .ok_or(IdentitiesError::NoClientIds("missing"))?
        .as_array()
        .ok_or(IdentitiesError::NoClientIds("not an array"))?;
    let mut client_ids = BTreeMap::new();
    for entry in entries {
        match (entry["component"].as_str(), entry["clientId"].as_str()) {
            (Some(component), Some(client_id)) if !client_id.trim().is_empty() => {
                client_ids.insert(component.to_owned(), client_id.trim().to_owned());
            }
            _ => return Err(IdentitiesError::NoClientIds("an entry without component and clientId")),
        }
    }
    Ok(DeploymentOutputs {
        client_ids,
        service_bus_namespace: text("serviceBusNamespace"),
        blob_url: text("blobUrl"),
        postgres_host: text("postgresHost"),
        database_client_id: text("databaseClientId"),
        database_user: text("databaseUser"),
    })
}

/// The overlay's `identities.yaml` with the deployment's client ids; an
/// error names every component without one.
pub fn identities_file(
    consumers: &[ConsumerInfra],
    outputs: &DeploymentOutputs,
) -> Result<RenderedFile, IdentitiesError> {
    let mut missing: Vec<String> = consumers
        .iter()
        .map(|consumer| consumer.name.clone())
        .chain([super::bicep::API_COMPONENT.to_owned()])
        .filter(|component| !outputs.client_ids.contains_key(component))
        .collect();
    missing.sort();
    if !missing.is_empty() {
        return Err(IdentitiesError::Missing(missing));
    }
    let mut file = kubernetes::identities_file(consumers, &|component| {
        outputs.client_ids.get(component).cloned().unwrap_or_default()
    })?;
    // The example's header says to copy the folder; this file is the copy.
    let objects = file
        .text
        .find("---\n")
        .map_or(file.text.as_str(), |start| &file.text[start..]);
    file.text = format!(
        "# Written by `bosun infra identities --from-deployment` from the outputs of\n\
         # the deployment of infra/bicep/main.bicep; run it again after a new one.\n{objects}"
    );
    Ok(file)
}
