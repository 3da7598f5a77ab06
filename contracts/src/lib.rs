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
//! - [`schema_rules`]: the same rules as JSON Schema keywords, attached to
//!   the fields so the schemas refuse what [`validate`] refuses.
//! - [`versions`]: the schema versions of each message type, the steps
//!   that read an older payload as the current one (and write it back), and
//!   the wire version of the catalogue.
//! - [`samples`]: one realistic, valid sample of every message, for tests.

pub mod envelope;
pub mod error;
pub mod messages;
pub mod routing;
pub mod samples;
pub mod schema;
pub mod schema_rules;
pub mod validate;
pub mod versions;

pub use envelope::{Envelope, MAX_MESSAGE_BYTES};
pub use error::ContractError;
pub use messages::{CATALOGUE, Message, MessageKind, MessageSpec};
pub use routing::{CONSUMERS, ConsumerName, Destination, EVENTS_TOPIC};
pub use versions::WIRE_VERSION;
