//! The ports the host works through: the peek-lock [`transport`], the
//! [`store`] (idempotency, sagas, outbox, dead letters, timeline), the
//! [`topology`] of entities, and the behaviour suites every backend passes.

pub mod store;
pub mod topology;
pub mod transport;

#[cfg(test)]
pub(crate) mod behaviour;
