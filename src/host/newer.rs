//! Messages this build cannot handle yet, left for a newer process.
//!
//! During a rolling upgrade a later release may write a message (a newer
//! schema version) or a saga state (the handler answers
//! [`HandlerError::NeedsNewer`](bosun_consumers::HandlerError::NeedsNewer))
//! that this build cannot read. Such a message is not a failure: it waits.
//! The host settles it, through the one settle port, as a scheduled copy of
//! its original bytes, delivered again after `BOSUN_NEWER_MESSAGE_WAIT`,
//! with the same `attempt` (waiting counts no attempt) and the envelope
//! extension [`WAITING_SINCE`] set to when it was first seen waiting. A
//! newer process takes the copy and handles it; an old one leaves it again.
//! Only once it has waited past `BOSUN_NEWER_MESSAGE_PATIENCE` is it
//! dead-lettered (`needs-newer`). The rule is
//! [`decide`](super::decision::decide)'s; the executor carries it out
//! (`schedule_wait`), with what this module reads and writes.
//!
//! The wait is recorded as a retry is (attempt row, scheduled copy in the
//! outbox, a `retry-scheduled` timeline line whose detail says it waits),
//! so the previous release, reading the same database, reads every row.

use std::time::Duration;

use bosun_contracts::{Envelope, MessageSpec};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::decision::Observed;
use crate::runtime::config::MessageVersionSettings;

/// The envelope extension holding when a message was first seen waiting
/// for a newer bosun (RFC 3339).
pub const WAITING_SINCE: &str = "waitingSince";

/// When `envelope` was first seen waiting, if it has waited before.
pub(super) fn waiting_since(envelope: &Envelope) -> Option<OffsetDateTime> {
    let text = envelope.extensions.get(WAITING_SINCE)?.as_str()?;
    OffsetDateTime::parse(text, &Rfc3339).ok()
}

/// What the executor observes about a delivery of `envelope` this build
/// cannot handle yet: how long it has waited, and the settings.
pub(super) fn observed(envelope: &Envelope, settings: MessageVersionSettings) -> Observed<'static> {
    let waited = waiting_since(envelope).map_or(Duration::ZERO, |since| {
        (OffsetDateTime::now_utc() - since).try_into().unwrap_or(Duration::ZERO)
    });
    Observed::NeedsNewer {
        waited,
        wait: settings.newer_message_wait,
        patience: settings.newer_message_patience,
    }
}

/// The newest schema version of the message's type this build reads.
pub(super) fn newest_read(envelope: &Envelope) -> Option<u32> {
    MessageSpec::find(&envelope.message_type).map(|spec| spec.schema_version)
}

/// The dead letter's description of a message that waited too long.
pub(super) fn gave_up(envelope: &Envelope, patience: Duration, chain: &[String]) -> String {
    let since = waiting_since(envelope)
        .and_then(|since| since.format(&Rfc3339).ok())
        .unwrap_or_else(|| "now".to_owned());
    format!(
        "waited for a newer bosun since {since}, longer than the patience of {} s (BOSUN_NEWER_MESSAGE_PATIENCE), and no process that reads it took it; upgrade bosun and replay it: {}",
        patience.as_secs(),
        chain.join(": ")
    )
}

/// The bytes of a message with its [`WAITING_SINCE`] extension set to
/// `since` (kept when already set), all else kept.
pub(super) fn with_waiting_since(body: &[u8], since: OffsetDateTime) -> Option<Vec<u8>> {
    let mut value: Value = serde_json::from_slice(body).ok()?;
    let object = value.as_object_mut()?;
    if !object.contains_key(WAITING_SINCE) {
        object.insert(WAITING_SINCE.to_owned(), Value::String(since.format(&Rfc3339).ok()?));
    }
    serde_json::to_vec(&value).ok()
}
