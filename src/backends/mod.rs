//! One folder per technology, each holding that technology's transport and
//! store and the connection they share:
//!
//! - [`sqlite`]: the embedded default, one SQLite file under the data
//!   directory;
//! - [`postgres`]: PostgreSQL, shared by every replica, woken by
//!   LISTEN/NOTIFY;
//! - [`servicebus`]: Azure Service Bus over AMQP 1.0 (transport only; its
//!   store is PostgreSQL or SQLite);
//! - [`memory`]: in-memory, for unit tests.

pub mod memory;
pub mod postgres;
pub mod servicebus;
pub mod sqlite;
