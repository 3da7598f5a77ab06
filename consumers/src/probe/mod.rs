//! The probe consumer: a built-in canary that checks the runtime end to end
//! without touching any outside service.
//!
//! Hop 1: `Probe` (command) — optionally simulates `workMs` of work, then
//! passes the probe on to its own queue while `relays` is above 0 (one hop
//! each, `relays` one less), then emits `ProbeEchoed` when `echo` is set. Hop 2: `ProbeEchoed` (event) —
//! counted in the probe saga keyed by `<tenant>/<group>`. Because the
//! runtime handles each message once (idempotency by messageId) and saves
//! sagas with optimistic concurrency, a group's `count` equals the number
//! of distinct echoes sent: operators use it as a canary
//! (`bosun send Probe --payload '{"group":"canary"}'`, then
//! `bosun sagas show probe <tenant>/canary`), and the scale test and
//! `bosun bench` use it to load the runtime.
//!
//! Like release-orchestration it has no port and no adapters: there is no
//! outside service to talk to.

use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{Probe, ProbeEchoed};
use bosun_contracts::{ConsumerName, Envelope, Message};
use bosun_sagas::SagaKind;
use bosun_sagas::versioned::{Upcast, VersionedState, load_state, save_state};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::{Consumer, HandlerError, Inbound, Outcome, RetryPolicy, UnexpectedMessage};

#[cfg(test)]
mod tests;

/// The consumer's name: its queue and subscription.
pub const NAME: ConsumerName = "probe";

/// The saga kind of the tally.
pub const SAGA_KIND: &str = "probe";

/// A probe group's tally.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProbeTally {
    /// Echoes counted.
    pub count: u64,
    /// Highest sequence number seen.
    pub highest_sequence: u64,
    /// When the first echo was counted.
    #[serde(with = "time::serde::rfc3339::option")]
    pub first_at: Option<OffsetDateTime>,
    /// When the last echo was counted.
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_at: Option<OffsetDateTime>,
}

/// Version 1: the tally as it was when states were first versioned.
impl VersionedState for ProbeTally {
    const KIND: SagaKind = SagaKind::Probe;
    const VERSION: u32 = 1;
    const UPCASTS: &'static [Upcast] = &[];
}

/// The probe consumer.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProbeConsumer;

impl ProbeConsumer {
    /// The consumer.
    pub fn new() -> Self {
        Self
    }
}

/// The probe saga (kind, `<tenant>/<group>`) an echo belongs to (a
/// `Probe` command has none): pure, so the registry computes it without
/// building the consumer (a Service Bus session id); [`Consumer::saga_of`]
/// calls it.
pub fn saga_of(envelope: &Envelope, message: &Message) -> Option<(&'static str, String)> {
    match message {
        Message::ProbeEchoed(echo) => Some((SAGA_KIND, format!("{}/{}", envelope.tenant_id, echo.group))),
        _ => None,
    }
}

#[async_trait]
impl Consumer for ProbeConsumer {
    fn name(&self) -> ConsumerName {
        NAME
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(5)
    }

    fn saga_of(&self, envelope: &Envelope, message: &Message) -> Option<(&'static str, String)> {
        saga_of(envelope, message)
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        match inbound.message {
            Message::Probe(probe) => {
                if probe.work_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(u64::from(probe.work_ms))).await;
                }
                if probe.relays > 0 {
                    // One more hop through this queue before the echo.
                    return Ok(Outcome::send([Message::Probe(Probe {
                        relays: probe.relays - 1,
                        ..probe.clone()
                    })]));
                }
                if !probe.echo {
                    return Ok(Outcome::default());
                }
                Ok(Outcome::send([Message::ProbeEchoed(ProbeEchoed {
                    group: probe.group.clone(),
                    sequence: probe.sequence,
                })]))
            }
            Message::ProbeEchoed(echo) => {
                let saga = inbound
                    .saga
                    .ok_or_else(|| HandlerError::permanent("no probe saga was loaded for the echo"))?;
                let mut tally: ProbeTally = load_state(&saga.state)?;
                let at = inbound.envelope.occurred_at;
                tally.count += 1;
                tally.highest_sequence = tally.highest_sequence.max(echo.sequence);
                tally.first_at = Some(tally.first_at.map_or(at, |first| first.min(at)));
                tally.last_at = Some(tally.last_at.map_or(at, |last| last.max(at)));
                let state = save_state(&tally)?;
                Ok(Outcome {
                    messages: Vec::new(),
                    saga_state: Some(state),
                })
            }
            other => Err(UnexpectedMessage::handler_error(NAME, other)),
        }
    }
}
