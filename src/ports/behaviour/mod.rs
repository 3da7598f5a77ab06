//! The behaviour suites every backend's transport and store pass.

pub(crate) mod store;
pub(crate) mod transport;
