//! Azure Service Bus: the production transport (AMQP 1.0 through
//! `fe2o3-amqp`, the engine of Microsoft's `azure_core_amqp`; `amqp.rs`
//! says why not `azure_core_amqp` itself), its topology (entities, filter
//! rules) and the management client that plans and creates them.

pub(crate) mod addressing;
pub(crate) mod amqp;
pub mod connection;
pub mod credential;
pub mod management;
pub(crate) mod mapping;
pub mod plan;
pub(crate) mod requests;
pub mod transport;

pub use transport::{ServiceBusOptions, ServiceBusTransport};
