//! The ports the host works through: the peek-lock [`transport`], the
//! [`store`] (idempotency, sagas, outbox, dead letters, timeline), the
//! [`topology`] of entities, and the behaviour suites every backend passes.

pub mod store;
pub mod topology;
pub mod transport;

#[cfg(test)]
pub(crate) mod behaviour;

/// What a runtime error means for the message being handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStep {
    /// Transient (a connection, a timeout): give the message back and try
    /// again later.
    Retry,
    /// This message can never succeed as things stand (e.g. the saga it
    /// needs is stored corrupt): dead-letter it at once, with the cause.
    DeadLetter,
    /// The process cannot work (e.g. the database schema is not the one
    /// this build needs): stop taking work and say why.
    Stop,
}
