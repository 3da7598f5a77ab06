//! bosun's consumers, and the delivery layer they are built on.
//!
//! The eleven consumers are peers: one folder each, always the same files,
//! and none imports another.
//!
//! - `mod.rs` — the consumer: its handler, generic over its port;
//! - `port.rs` — the port trait the handler needs;
//! - `local.rs` — the embedded adapter, doing the work for real on this
//!   machine;
//! - `azure.rs` — the adapter for the real Azure service;
//! - `tests.rs` — handler tests over an in-memory port, adapter tests.
//!
//! What several consumers (or both adapters of one) need lives below them
//! in [`delivery`]: the Git hosts and commit writers, archives, OCI image
//! building, the Azure HTTP client with its one retry policy, Azure
//! credentials, the blob store, the local pipeline runner, tenant walls
//! and crash-safe files. Consumers depend on `delivery`; `delivery`
//! depends on no consumer (`tests/layering.rs` holds both rules).
//!
//! `release_orchestration` and `probe` (a built-in canary) have no port and
//! no adapters: they run pure sagas and talk to no outside service.
//!
//! A handler receives one decoded message and returns the messages it wants
//! sent ([`Outcome`]); it never touches the broker or the stores. The runtime
//! (`src/` of the `bosun` package) does idempotency, the outbox, retry and
//! dead-lettering around it.

use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::{ConsumerName, Envelope, Message};

/// The two conversions every port error over Azure DevOps shares, in one
/// place:
/// - `From<AzureDevOpsError>`: by the error's disposition, `Unavailable`
///   (transient), `Rejected` (permanent) or `Throttled { after, source }`;
/// - `From<$error> for HandlerError` (unless `azure_devops_only`): the
///   host's verdict, `RetryAfter` for `Throttled`, `Transient` when
///   `is_retryable()`, else `Permanent`.
///
/// The port error needs those three variants and an `is_retryable(&self)`.
macro_rules! port_error_conversions {
    ($error:ident) => {
        port_error_conversions!($error, azure_devops_only);

        impl From<$error> for $crate::HandlerError {
            fn from(err: $error) -> Self {
                match err {
                    $error::Throttled { after, .. } => $crate::HandlerError::RetryAfter {
                        after,
                        source: Box::new(err),
                    },
                    err if err.is_retryable() => $crate::HandlerError::Transient(Box::new(err)),
                    err => $crate::HandlerError::Permanent(Box::new(err)),
                }
            }
        }
    };
    ($error:ident, azure_devops_only) => {
        impl From<$crate::delivery::azure::devops::AzureDevOpsError> for $error {
            fn from(err: $crate::delivery::azure::devops::AzureDevOpsError) -> Self {
                match err.disposition() {
                    $crate::delivery::azure::retry::Disposition::Transient => Self::Unavailable(Box::new(err)),
                    $crate::delivery::azure::retry::Disposition::Permanent => Self::Rejected(Box::new(err)),
                    $crate::delivery::azure::retry::Disposition::RetryAfter(after) => Self::Throttled {
                        after,
                        source: Box::new(err),
                    },
                }
            }
        }
    };
}

pub mod build_ingestion;
pub mod commit;
pub mod container_build;
pub mod delivery;
pub mod gitops_sync;
pub mod iac_provisioning;
pub mod package_publishing;
pub mod pipeline_generation;
pub mod pipeline_monitor;
pub mod probe;
pub mod pull_request;
pub mod release_orchestration;
pub mod repository_provisioning;

/// A boxed error, kept whole so the runtime can record its chain.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error and its sources on one line, `: `-separated. Errors of this
/// crate name their cause in their message and keep it as their source, so
/// a cause whose text the line already holds is not repeated.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(next) = source {
        let text = next.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = next.source();
    }
    message
}

/// One message handed to a consumer.
#[derive(Debug, Clone, Copy)]
pub struct Inbound<'a> {
    /// The envelope as received (correlation, tenant, attempt ...).
    pub envelope: &'a Envelope,
    /// The decoded, validated payload.
    pub message: &'a Message,
    /// The saga this message belongs to, loaded by the runtime, when the
    /// consumer runs one ([`Consumer::saga_of`]).
    pub saga: Option<&'a SagaInstance>,
}

impl<'a> Inbound<'a> {
    /// A message that belongs to no saga.
    pub fn new(envelope: &'a Envelope, message: &'a Message) -> Self {
        Self {
            envelope,
            message,
            saga: None,
        }
    }
}

/// A saga as the runtime loaded it for one message.
#[derive(Debug, Clone, PartialEq)]
pub struct SagaInstance {
    /// `release` or `gitops`.
    pub kind: &'static str,
    /// The key (releaseId or environment).
    pub key: String,
    /// The version loaded; 0 when the saga does not exist yet.
    pub version: i64,
    /// The state loaded; `Null` when the saga does not exist yet.
    pub state: serde_json::Value,
}

/// A message a handler wants sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// The message.
    pub message: Message,
    /// Deliver it this long from now instead of at once (scheduled message).
    pub delay: Option<Duration>,
}

impl Outgoing {
    /// A message to send at once.
    pub fn now(message: impl Into<Message>) -> Self {
        Self {
            message: message.into(),
            delay: None,
        }
    }

    /// A message to deliver after `delay`.
    pub fn after(message: impl Into<Message>, delay: Duration) -> Self {
        Self {
            message: message.into(),
            delay: Some(delay),
        }
    }
}

/// What a handler decided: the messages to send and, for a saga consumer,
/// the saga's new state. The runtime writes both to the store in the same
/// atomic unit as the idempotency record, checking the saga's version; on a
/// conflict it reloads the saga and runs the handler again.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Messages to send, in order.
    pub messages: Vec<Outgoing>,
    /// The saga's new state (only for a message with an [`Inbound::saga`]);
    /// `None` leaves the saga unchanged.
    pub saga_state: Option<serde_json::Value>,
}

impl Outcome {
    /// An outcome that sends these messages at once.
    pub fn send(messages: impl IntoIterator<Item = Message>) -> Self {
        Self {
            messages: messages.into_iter().map(Outgoing::now).collect(),
            saga_state: None,
        }
    }
}

/// Why a handler did not finish, and so what the runtime does next.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// Worth retrying with backoff (network, throttling, a dependency not
    /// there yet).
    #[error("transient: {0}")]
    Transient(#[source] BoxError),
    /// Retrying cannot help (invalid request, forbidden); dead-letter at once.
    #[error("permanent: {0}")]
    Permanent(#[source] BoxError),
    /// Retry no sooner than `after` (e.g. HTTP 429 with Retry-After).
    #[error("retry after {after:?}: {source}")]
    RetryAfter {
        /// Earliest retry.
        after: Duration,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The message needs a newer bosun than this one: its saga state (or
    /// its payload) was written by a later release. Nothing is written; the
    /// message waits for a process of that release (it is delivered again
    /// later, counted, and dead-lettered only once its wait runs out).
    #[error("needs a newer bosun: {0}")]
    NeedsNewer(#[source] BoxError),
}

impl HandlerError {
    /// A transient error from anything that converts to a boxed error.
    pub fn transient(err: impl Into<BoxError>) -> Self {
        Self::Transient(err.into())
    }

    /// A permanent error from anything that converts to a boxed error.
    pub fn permanent(err: impl Into<BoxError>) -> Self {
        Self::Permanent(err.into())
    }

    /// The message needs a newer release than this process (see
    /// [`HandlerError::NeedsNewer`]).
    pub fn needs_newer(err: impl Into<BoxError>) -> Self {
        Self::NeedsNewer(err.into())
    }

    /// Whether retrying may help.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::Permanent(_))
    }
}

/// A saga state a later release saved waits for that release
/// ([`HandlerError::NeedsNewer`]); one that cannot be read at all is
/// permanent (dead-lettered, for an operator to repair).
impl From<bosun_sagas::versioned::StateError> for HandlerError {
    fn from(err: bosun_sagas::versioned::StateError) -> Self {
        match err {
            bosun_sagas::versioned::StateError::Newer { .. } => Self::NeedsNewer(err.into()),
            _ => Self::Permanent(err.into()),
        }
    }
}

/// A consumer was handed a message type it does not handle: a routing
/// mistake, so retrying cannot help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("consumer `{consumer}` does not handle `{message_type}` messages")]
pub struct UnexpectedMessage {
    /// The consumer.
    pub consumer: ConsumerName,
    /// The type it received.
    pub message_type: String,
}

impl UnexpectedMessage {
    /// The permanent handler error for `message` reaching `consumer`.
    pub fn handler_error(consumer: ConsumerName, message: &Message) -> HandlerError {
        HandlerError::permanent(Self {
            consumer,
            message_type: message.message_type().to_owned(),
        })
    }
}

/// How a consumer's transient failures are retried: exponential backoff with
/// full jitter, `delay(n) = random(0, min(max_delay, base_delay * 2^n))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (DESIGN.md's "5x").
    pub max_retries: u32,
    /// Delay ceiling of the first retry.
    pub base_delay: Duration,
    /// Largest delay ceiling.
    pub max_delay: Duration,
}

impl RetryPolicy {
    /// Exponential backoff with `max_retries` retries, 1 s base, 5 min cap.
    pub const fn exponential(max_retries: u32) -> Self {
        Self {
            max_retries,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(300),
        }
    }

    /// The delay ceiling before retry number `retry` (1-based).
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.saturating_sub(1));
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }
}

/// A consumer: a name (also its queue and subscription), a retry policy and
/// a handler.
#[async_trait]
pub trait Consumer: Send + Sync {
    /// The consumer's name, as in `bosun_contracts::routing::CONSUMERS`.
    fn name(&self) -> ConsumerName;

    /// How transient failures are retried.
    fn retry_policy(&self) -> RetryPolicy;

    /// The saga (kind, key) a message belongs to, for consumers that run a
    /// saga; the runtime loads it and passes it in [`Inbound::saga`]. The
    /// envelope is there for keys scoped to a tenant.
    fn saga_of(&self, _envelope: &Envelope, _message: &Message) -> Option<(&'static str, String)> {
        None
    }

    /// Handles one message.
    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_ceiling_doubles_and_caps() {
        let policy = RetryPolicy::exponential(5);
        assert_eq!(policy.ceiling(1), Duration::from_secs(1));
        assert_eq!(policy.ceiling(2), Duration::from_secs(2));
        assert_eq!(policy.ceiling(4), Duration::from_secs(8));
        assert_eq!(policy.ceiling(40), Duration::from_secs(300));
    }
}
