//! bosun: saga orchestration for software delivery.
//!
//! This crate is the runtime and the binary around the pure crates
//! (`bosun-contracts`, `bosun-sagas`, `bosun-consumers`). Its folders are
//! layers; each uses only the layers below it (`tests/layers.rs` checks
//! it). `docs/ARCHITECTURE.md` is the map: each folder, what it may use,
//! and the flow of one message through them.

pub mod backends;
pub mod front;
pub mod host;
pub mod operator;
pub mod ports;
pub mod runtime;
pub mod tools;
pub mod wiring;
