//! probe: the built-in consumer that echoes, for health checks and
//! benchmarks.

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::probe::{NAME, ProbeConsumer, SAGA_KIND, saga_of};

use super::{Registration, RegistryError, SagaRegistration, Shared};
use crate::runtime::config::Settings;

pub(super) const REGISTRATION: Registration = Registration {
    name: NAME,
    build,
    keeps_blobs: false,
    blob_containers: &[],
    settings: &[],
    // Its messages are handled one saga key at a time (Service Bus sessions).
    // A probe group's tally never finishes: it is never pruned.
    saga: Some(SagaRegistration {
        kind: SAGA_KIND,
        key: saga_of,
        diagram: |_| DIAGRAM.to_owned(),
        finished: None,
    }),
};

/// The probe saga is a counter with no state machine of its own.
const DIAGRAM: &str = "stateDiagram-v2\n    [*] --> Counting : ProbeEchoed\n    \
                       Counting --> Counting : ProbeEchoed (count + 1)\n";

fn build(_settings: &Settings, _shared: &Shared) -> Result<Arc<dyn Consumer>, RegistryError> {
    Ok(Arc::new(ProbeConsumer::new()))
}
