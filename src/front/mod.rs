//! The front door: the HTTP API and operator console ([`api`]), the MCP
//! server ([`mcp`]), and the rules both share ([`gateway`]: scopes, tenants,
//! idempotency; [`access`]: API keys and who a caller is), and the ops port
//! ([`ops`]: health, readiness and metrics alone).

pub mod access;
pub mod api;
pub mod gateway;
pub mod mcp;
pub mod ops;
