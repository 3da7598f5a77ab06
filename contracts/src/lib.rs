//! bosun's message contracts: pure data, no I/O.
//!
//! - [`envelope`]: the JSON envelope every message travels in.
//! - [`messages`]: the payload of every command and event of the eleven
//!   consumers, and the [`Message`] enum that ties a `type` name to its payload.
//! - [`routing`]: which queue a command goes to and which consumers subscribe
//!   to an event on the events topic.
//! - [`schema`]: the JSON Schemas generated from these types (checked in under
//!   `contracts/schemas/`).
//! - [`validate`]: field rules (names, branches, paths) with errors that name
//!   the field.

pub mod envelope;
pub mod error;
pub mod messages;
pub mod routing;
pub mod schema;
pub mod validate;

pub use envelope::{Envelope, MessageKind, MAX_MESSAGE_BYTES};
pub use error::ContractError;
pub use messages::{Message, MessageSpec, CATALOGUE};
pub use routing::{ConsumerName, Destination, CONSUMERS, EVENTS_TOPIC};
