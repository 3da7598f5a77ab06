//! The behaviour suites every backend's transport, store and commit pass.

pub(crate) mod commit;
pub(crate) mod store;
pub(crate) mod transport;
