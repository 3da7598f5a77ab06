//! The HTTP plumbing both of the front door's servers stand on: bosun's
//! accept loop over hyper ([`server`]: header and idle timeouts, the
//! connection cap, graceful shutdown) and the HTTP metrics with their
//! Prometheus exposition ([`prometheus`]). The API ([`super::api`]) and the
//! ops port ([`super::ops`]) serve through it; it uses neither.

pub mod prometheus;
pub mod server;
