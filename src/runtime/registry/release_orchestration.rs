//! release-orchestration: the release saga (plan, approve, promote).

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::delivery::azure::ARM_SCOPE;
use bosun_consumers::release_orchestration::probes::{AzureMonitorAccess, Probes};
use bosun_consumers::release_orchestration::{NAME, ReleaseOrchestration, SAGA_KIND, saga_of};
use bosun_sagas::StateMachine;
use bosun_sagas::release::{ReleasePhase, ReleasePolicy, ReleaseSaga};

use super::{Finished, Registration, RegistryError, SagaRegistration, Shared};
use crate::runtime::config::Settings;

pub(super) const REGISTRATION: Registration = Registration {
    name: NAME,
    build,
    keeps_blobs: false,
    blob_containers: &[],
    settings: &[
        "BOSUN_RELEASE_ENVIRONMENTS",
        "BOSUN_AUTO_APPROVE",
        "BOSUN_APPROVAL_TIMEOUT_MS",
        "BOSUN_VERIFY_AZURE_AUTH",
        "BOSUN_VERIFY_ARM_ENDPOINT",
        "BOSUN_VERIFY_ALLOWED_HOSTS",
    ],
    // Its messages are handled one saga key at a time (Service Bus sessions).
    saga: Some(SagaRegistration {
        kind: SAGA_KIND,
        key: saga_of,
        diagram,
        finished: Some(Finished {
            field: "phase",
            values: final_phases,
        }),
    }),
};

fn build(settings: &Settings, shared: &Shared) -> Result<Arc<dyn Consumer>, RegistryError> {
    let policy = release_policy(settings);
    policy.validate().map_err(RegistryError::Policy)?;
    Ok(Arc::new(
        ReleaseOrchestration::new(ReleaseSaga::new(policy))
            .with_governance(Arc::clone(&shared.governance))
            .with_probes(Arc::new(probes(settings)?)),
    ))
}

/// The verification probes: HTTP and Prometheus always (to the hosts of
/// `BOSUN_VERIFY_ALLOWED_HOSTS` when it names any); Azure Monitor with the
/// identity of `BOSUN_VERIFY_AZURE_AUTH`.
fn probes(settings: &Settings) -> Result<Probes, RegistryError> {
    let azure = match settings.delivery.verify_azure_identity {
        Some(identity) => {
            let tokens = Arc::new(super::refreshing_token(NAME, identity, ARM_SCOPE)?);
            let mut access = AzureMonitorAccess::new(tokens);
            if let Some(endpoint) = &settings.delivery.verify_arm_endpoint {
                access = access.with_endpoint(endpoint.clone());
            }
            Some(access)
        }
        None => None,
    };
    Ok(Probes::new(azure)
        .map_err(|err| super::adapter_error(NAME, &err))?
        .with_allowed_hosts(settings.delivery.verify_allowed_hosts.clone()))
}

/// The release saga's state machine under the configured policy.
fn diagram(settings: &Settings) -> String {
    ReleaseSaga::new(release_policy(settings)).diagram()
}

/// A release is over once its phase is final ([`ReleasePhase::is_final`]):
/// those phases as its state stores them.
fn final_phases() -> Vec<String> {
    ReleasePhase::ALL
        .iter()
        .filter(|phase| phase.is_final())
        .filter_map(|phase| serde_json::to_value(phase).ok())
        .filter_map(|value| value.as_str().map(str::to_owned))
        .collect()
}

fn release_policy(settings: &Settings) -> ReleasePolicy {
    ReleasePolicy {
        environments: settings.delivery.environments.clone(),
        auto_approve: settings.delivery.auto_approve.clone(),
        approval_timeout: settings.delivery.approval_timeout,
        ..ReleasePolicy::default()
    }
}
