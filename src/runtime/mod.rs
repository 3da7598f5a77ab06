//! What every process reads and reports: settings ([`config`]), the one list
//! of consumers ([`registry`]), metrics ([`metrics`]) and structured logs
//! with trace context ([`telemetry`]).

pub mod config;
pub mod metrics;
pub mod registry;
pub mod telemetry;
