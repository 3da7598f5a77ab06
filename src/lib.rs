//! bosun: saga orchestration for software delivery.
//!
//! This crate is the runtime and the binary around the pure crates
//! (`bosun-contracts`, `bosun-sagas`, `bosun-consumers`):
//!
//! - [`access`]: API keys, scopes and who a caller is;
//! - [`api`]: the HTTP API, `/metrics`, the OpenAPI document and the
//!   operator console;
//! - [`bench`]: `bosun bench`, the runtime's throughput and latency;
//! - [`claim_check`]: large payloads moved to the blob store and back;
//! - [`config`]: settings, read in one place;
//! - [`demo`]: `bosun demo`, a whole delivery of a sample module;
//! - [`describe`]: one-line descriptions of messages for people;
//! - [`gateway`]: the front door's rules (scopes, tenants, idempotency)
//!   shared by the HTTP API and the MCP server;
//! - [`transport`]: the peek-lock transport trait, in-memory and embedded
//!   (SQLite) implementations;
//! - [`store`]: idempotency, sagas, outbox, dead letters, timeline;
//! - [`postgres`]: the PostgreSQL pool and migrations shared by the
//!   PostgreSQL store and transport;
//! - [`host`]: the consumer host (receive, lock renewal, retry, idempotency,
//!   outbox, dead-letter, graceful shutdown);
//! - [`metrics`]: counters and latency distributions per consumer;
//! - [`registry`]: the one list of consumers and how each is built;
//! - [`operator`]: what operators and agents do: send commands, follow
//!   deliveries, inspect and replay dead letters, look at sagas;
//! - [`runtime`]: wiring settings to a transport, a store and a host;
//! - [`telemetry`]: structured logs and trace context.

pub mod access;
pub mod api;
pub mod bench;
pub mod claim_check;
pub mod config;
pub mod demo;
pub mod describe;
pub mod gateway;
pub mod host;
pub mod mcp;
pub mod metrics;
pub mod operator;
pub mod postgres;
pub mod registry;
pub mod runtime;
pub mod sqlite;
pub mod store;
pub mod telemetry;
pub mod transport;
