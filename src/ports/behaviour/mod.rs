//! The behaviour suites every backend's transport, store and commit pass.

mod audit;
mod controls;
pub(crate) mod settle;
pub(crate) mod store;
pub(crate) mod transport;
