//! The front door: the HTTP API and operator console ([`api`]), the MCP
//! server ([`mcp`]), and the rules both share ([`gateway`]: scopes, tenants,
//! idempotency; [`access`]: API keys and who a caller is), the ops port
//! ([`ops`]: health, readiness and metrics alone), and the HTTP plumbing
//! the API and the ops port stand on ([`http`]: the accept loop, HTTP
//! metrics).
//!
//! Inside, lowest first: [`http`] and [`access`], [`ops`], [`gateway`],
//! [`mcp`], [`api`] (`tests/layers.rs` fails on two that use each other).

pub mod access;
pub mod api;
pub mod gateway;
pub mod http;
pub mod mcp;
pub mod ops;
