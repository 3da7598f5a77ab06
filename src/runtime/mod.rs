//! What every process reads and reports: settings ([`config`]), the one list
//! of consumers ([`registry`]), metrics ([`metrics`]) and structured logs
//! with trace context ([`telemetry`]), and the name of the host it runs
//! on ([`host_name`]).

pub mod config;
pub mod metrics;
pub mod receiving;
pub mod registry;
pub mod telemetry;

/// The host name (the pod's name on Kubernetes), for naming this process
/// in logs, leases and the fleet.
pub fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|name| name.trim().to_owned())
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}
