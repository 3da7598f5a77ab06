//! release-orchestration: the release saga (plan, approve, promote).

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::release_orchestration::{NAME, ReleaseOrchestration};
use bosun_sagas::release::{ReleasePolicy, ReleaseSaga};

use super::{Registration, RegistryError, Shared};
use crate::runtime::config::Settings;

pub(super) const REGISTRATION: Registration = Registration {
    name: NAME,
    build,
    keeps_blobs: false,
    // Its messages are handled one saga key at a time (Service Bus sessions).
    session_key: Some(bosun_consumers::release_orchestration::saga_of),
};

fn build(settings: &Settings, _shared: &Shared) -> Result<Arc<dyn Consumer>, RegistryError> {
    let policy = release_policy(settings);
    policy.validate().map_err(RegistryError::Policy)?;
    Ok(Arc::new(ReleaseOrchestration::new(ReleaseSaga::new(policy))))
}

/// The release saga under the configured policy.
pub fn release_saga(settings: &Settings) -> ReleaseSaga {
    ReleaseSaga::new(release_policy(settings))
}

fn release_policy(settings: &Settings) -> ReleasePolicy {
    ReleasePolicy {
        environments: settings.delivery.environments.clone(),
        auto_approve: settings.delivery.auto_approve.clone(),
        approval_timeout: settings.delivery.approval_timeout,
        ..ReleasePolicy::default()
    }
}
