//! The ports the host works through: the peek-lock [`transport`], the
//! [`store`] (idempotency, sagas, outbox, dead letters, timeline), the
//! [`settle`]ment of a received message (store and transport together), the
//! [`topology`] of entities, what an [`error`] means for the work that met
//! it, and the behaviour suites every backend passes.

pub mod error;
pub mod settle;
pub mod store;
pub mod topology;
pub mod transport;

#[cfg(test)]
pub(crate) mod behaviour;

pub use error::NextStep;
