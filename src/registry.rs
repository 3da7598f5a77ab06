//! The one list of consumers bosun can run, and how each is built from the
//! settings: the adapter behind each port is chosen by
//! [`AdapterKind`](crate::config::AdapterKind), not by `if` chains in the
//! consumers.
//!
//! The routing table in `bosun-contracts` names eleven consumers; this
//! build runs the ones listed in [`AVAILABLE`]. Asking for another is an
//! error that says so.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::azure_devops::{AzureDevOpsAuth, AzureDevOpsConfig, AzureDevOpsError};
use bosun_consumers::commit::{self, Commit};
use bosun_consumers::repository_provisioning::{self, RepositoryProvisioning};

use crate::config::{AdapterKind, AzureDevOpsSettings, Settings};

/// Consumers this build can run.
pub const AVAILABLE: &[&str] = &[repository_provisioning::NAME, commit::NAME];

/// Why consumers could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A consumer in the routing table that this build does not run yet.
    #[error("consumer `{0}` is not available in this build (available: {available})", available = AVAILABLE.join(", "))]
    NotAvailable(String),
    /// The Azure adapters could not be configured.
    #[error("azure adapters: {0}")]
    Azure(#[from] AzureDevOpsError),
}

fn azure_config(settings: &AzureDevOpsSettings) -> AzureDevOpsConfig {
    let auth = match (&settings.bearer_token, &settings.pat) {
        (Some(token), _) => AzureDevOpsAuth::Bearer(token.expose().to_owned()),
        (None, Some(pat)) => AzureDevOpsAuth::Pat(pat.expose().to_owned()),
        // Settings validation requires one of the two.
        (None, None) => AzureDevOpsAuth::Pat(String::new()),
    };
    AzureDevOpsConfig::new(settings.organization_url.clone(), settings.project.clone(), auth)
}

/// Builds one consumer by name.
pub fn build_one(name: &str, settings: &Settings) -> Result<Arc<dyn Consumer>, RegistryError> {
    let consumer: Arc<dyn Consumer> = match (name, &settings.adapters) {
        (repository_provisioning::NAME, AdapterKind::Local) => Arc::new(RepositoryProvisioning::new(
            repository_provisioning::local::LocalRepositoryHost::new(settings.git_root()),
        )),
        (repository_provisioning::NAME, AdapterKind::Azure(azure)) => Arc::new(RepositoryProvisioning::new(
            repository_provisioning::azure::AzureRepositoryHost::new(&azure_config(azure))?,
        )),
        (commit::NAME, AdapterKind::Local) => {
            Arc::new(Commit::new(commit::local::LocalCommitWriter::new(settings.git_root())))
        }
        (commit::NAME, AdapterKind::Azure(azure)) => Arc::new(Commit::new(commit::azure::AzureCommitWriter::new(
            &azure_config(azure),
        )?)),
        (other, _) => return Err(RegistryError::NotAvailable(other.to_owned())),
    };
    Ok(consumer)
}

/// Builds the consumers the settings select (all available ones by default).
pub fn build(settings: &Settings) -> Result<Vec<Arc<dyn Consumer>>, RegistryError> {
    let names: Vec<String> = match &settings.consumers {
        Some(names) => names.clone(),
        None => AVAILABLE.iter().map(|n| (*n).to_owned()).collect(),
    };
    names.iter().map(|name| build_one(name, settings)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_available_consumer_is_in_the_routing_table() {
        for name in AVAILABLE {
            assert!(bosun_contracts::routing::consumer(name).is_some(), "{name}");
        }
    }

    #[test]
    fn the_default_builds_every_available_consumer_with_local_adapters() {
        let dir = tempfile::tempdir().unwrap();
        let consumers = build(&Settings::with_data_dir(dir.path())).unwrap();
        let names: Vec<_> = consumers.iter().map(|c| c.name()).collect();
        assert_eq!(names, AVAILABLE);
    }

    #[test]
    fn an_unavailable_consumer_is_an_error_that_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::with_data_dir(dir.path());
        settings.consumers = Some(vec!["gitops-sync".into()]);
        let err = build(&settings).err().unwrap();
        assert!(err.to_string().contains("gitops-sync"), "{err}");
    }
}
