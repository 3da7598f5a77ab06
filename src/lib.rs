//! bosun: saga orchestration for software delivery.
//!
//! This crate is the runtime and the binary around the pure crates
//! (`bosun-contracts`, `bosun-sagas`, `bosun-consumers`). Its folders are
//! layers; each uses only the layers below it (`tests/layers.rs` checks
//! it):
//!
//! - `main.rs` and `cli/`: argument parsing and printing (in the binary);
//! - [`tools`]: `bosun demo`, `bosun bench` and `bosun infra`;
//! - [`front`]: the front door: the HTTP API and operator console, the MCP
//!   server, and their shared rules (API keys and scopes, tenants,
//!   idempotency);
//! - [`wiring`]: settings to a transport, a store and a host (the
//!   composition root);
//! - [`operator`]: what operators and agents do: send commands, follow
//!   deliveries, inspect and replay dead letters, look at sagas;
//! - [`host`]: the consumer host: receive, decide, execute, lock renewal,
//!   the outbox dispatcher and the claim check;
//! - [`runtime`]: settings, the consumer registry, metrics and telemetry;
//! - [`backends`]: one folder per technology (SQLite, PostgreSQL, Azure
//!   Service Bus, memory), each with its transport, store and connection;
//! - [`ports`]: the `Transport` and `Store` traits, the topology, and the
//!   behaviour suites every backend passes.

pub mod backends;
pub mod front;
pub mod host;
pub mod operator;
pub mod ports;
pub mod runtime;
pub mod tools;
pub mod wiring;
