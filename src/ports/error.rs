//! What a failure means for the work that met it: [`NextStep`], shared by
//! the [`StoreError`](crate::ports::store::StoreError),
//! [`TransportError`](crate::ports::transport::TransportError) and
//! [`SettleError`](crate::ports::settle::SettleError) of the ports.

/// The cause a port error carries: the backend's own error (a SQLite,
/// PostgreSQL, JSON or AMQP error), kept whole so its chain can be walked.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What to do with the work that met an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStep {
    /// Transient (a database or broker that is down, busy or timed out, a
    /// lock lost, a concurrent change): try again later. For a received
    /// message, abandon it so it is delivered again.
    Retry,
    /// This message (or request) can never succeed as it is: for example,
    /// the saga it names is stored corrupt, or the record it asks for does
    /// not exist. Dead-letter the message at once, with the error chain as
    /// its reason, instead of retrying until the broker gives up.
    DeadLetter,
    /// The process cannot work at all: the database schema is not the one
    /// this bosun needs, or the backend is misconfigured (credentials,
    /// endpoint, missing entity). Stop taking work and say why.
    Stop,
}
