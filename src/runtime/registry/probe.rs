//! probe: the built-in consumer that echoes, for health checks and
//! benchmarks.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::probe::{NAME, ProbeConsumer};

use super::{Registration, RegistryError, Shared};
use crate::runtime::config::Settings;

pub(super) const REGISTRATION: Registration = Registration {
    name: NAME,
    build,
    keeps_blobs: false,
    // Its messages are handled one saga key at a time (Service Bus sessions).
    session_key: Some(bosun_consumers::probe::saga_of),
};

fn build(_settings: &Settings, _shared: &Shared) -> Result<Arc<dyn Consumer>, RegistryError> {
    Ok(Arc::new(ProbeConsumer::new()))
}
