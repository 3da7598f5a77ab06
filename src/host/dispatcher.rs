//! The outbox dispatcher: sends what handlers committed to the outbox.
//!
//! Entries are claimed with a lease (so several processes sharing a store do
//! not send the same entry at once), sent as a batch, then marked sent. If
//! the process dies after sending and before marking, the entry is sent
//! again after the lease; the transport drops the copy by its broker message
//! id (duplicate detection) and consumers are idempotent on messageId, so
//! the message takes effect once.
//!
//! `send_pending` is where every message this process sends becomes the
//! bytes on the wire (a handler's outputs, retries, and commands accepted
//! at the front door: HTTP API, MCP, `bosun send`): with
//! `BOSUN_COMPAT_VERSION` set, each is written there at the newest version
//! that wire had ([`bosun_contracts::envelope::bytes_for_wire`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bosun_contracts::Envelope;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::Runtime;
use super::claim_check::{ClaimCheck, ClaimCheckError};
use crate::ports::store::{
    OutboxPurpose, OutboxStore, PendingOutbox, StoreError, TimelineEntry, TimelineStatus, TimelineStore,
};
use crate::ports::transport::{OutboundMessage, Transport, TransportError};

const BATCH: usize = 100;
/// How long a claimed entry is left to the process that claimed it (or, for
/// a command accepted at the front door, to the process that accepted it)
/// before any dispatcher may send it.
pub const LEASE: Duration = Duration::from_secs(30);
const IDLE_POLL: Duration = Duration::from_millis(500);
/// The longest an idle dispatcher waits before it looks again (it doubles
/// from [`IDLE_POLL`] while it finds nothing): well inside the 30 s lease
/// after which a dead process's entries may be taken over.
const IDLE_POLL_MAX: Duration = Duration::from_secs(5);

/// Why a dispatch pass failed. Every entry it claimed and did not mark sent
/// is sent again once its lease has passed.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// The outbox could not be read.
    #[error("could not claim outbox entries; the dispatcher tries again")]
    Claim(#[source] StoreError),
    /// A payload over the claim-check threshold could not be stored.
    #[error("could not move a payload to the blob store; its entries are sent after their lease")]
    Offload(#[source] ClaimCheckError),
    /// Not one entry of the batch could be sent.
    #[error("could not send any of {count} outbox entries; they are sent again after their lease")]
    Send {
        /// Entries in the batch.
        count: usize,
        /// The batch send's error.
        #[source]
        source: TransportError,
    },
    /// Sent, but not marked sent.
    #[error("sent, but could not mark outbox entries sent; they are sent again and dropped as duplicates")]
    Mark(#[source] StoreError),
}

/// Runs until `stop`, then sends what is left once more.
pub(crate) async fn run(runtime: Arc<Runtime>, stop: CancellationToken) {
    let mut failures = 0u32;
    let mut idle = IDLE_POLL;
    loop {
        if runtime.frozen.load(Ordering::SeqCst) {
            stop.cancelled().await;
            return;
        }
        // Read before dispatching: a pass that started after the stop saw
        // everything in-flight handlers committed, so an empty pass then
        // means the outbox is flushed.
        let stopping = stop.is_cancelled();
        match dispatch_once(&runtime).await {
            Ok(0) => {
                failures = 0;
                if stopping {
                    return;
                }
                // This process's commits wake it; the poll only finds what
                // others left (a dead process's entries, after their
                // lease), so an idle dispatcher asks less and less often.
                tokio::select! {
                    () = runtime.outbox_ready.notified() => idle = IDLE_POLL,
                    () = tokio::time::sleep(idle) => idle = (idle * 2).min(IDLE_POLL_MAX),
                    () = stop.cancelled() => {},
                }
            }
            Ok(_) => {
                failures = 0;
                idle = IDLE_POLL;
            }
            Err(err) => {
                failures = failures.saturating_add(1);
                let backoff = Duration::from_millis(100u64.saturating_mul(2u64.saturating_pow(failures.min(7))));
                tracing::warn!(error = %crate::host::error_chain(&err).join(": "), ?backoff, "outbox dispatch failed");
                if stopping {
                    tracing::warn!("stopping with undispatched outbox entries; the next start sends them");
                    return;
                }
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {},
                    () = stop.cancelled() => {},
                }
            }
        }
    }
}

/// Claims and sends one batch; returns how many entries were sent.
pub(crate) async fn dispatch_once(runtime: &Runtime) -> Result<usize, DispatchError> {
    let pending = runtime
        .store
        .claim_outbox(BATCH, LEASE)
        .await
        .map_err(DispatchError::Claim)?;
    if pending.is_empty() {
        return Ok(0);
    }
    if runtime.frozen.load(Ordering::SeqCst) {
        return Ok(0);
    }
    send_pending(
        runtime.transport.as_ref(),
        runtime.store.as_ref(),
        runtime.claim_check.as_ref(),
        runtime.options.message_versions.wire(),
        pending,
    )
    .await
}

/// Sends claimed outbox entries and marks them sent (payloads over the
/// claim-check threshold go to the blob store first), with their `sent`
/// lines where they are not on the timeline yet; returns how many were
/// sent. The dispatcher sends what it claimed; the front door sends the
/// command it just accepted. Each message is written for `wire` (the wire
/// version this process writes, `BOSUN_COMPAT_VERSION`) before anything
/// else: the outbox keeps what was committed, the wire gets what every
/// running consumer reads.
pub(crate) async fn send_pending(
    transport: &dyn Transport,
    store: &(impl OutboxStore + TimelineStore + ?Sized),
    claim_check: Option<&ClaimCheck>,
    wire: u32,
    mut pending: Vec<PendingOutbox>,
) -> Result<usize, DispatchError> {
    for entry in &mut pending {
        write_for_wire(&mut entry.message, wire);
    }
    // The outbox keeps the whole message, so a redispatch writes the same
    // blob again (idempotent).
    if let Some(claim_check) = claim_check {
        for entry in &mut pending {
            let body = std::mem::take(&mut entry.message.body);
            entry.message.body = claim_check.offload(body).await.map_err(DispatchError::Offload)?;
        }
    }
    let ids: Vec<i64> = pending.iter().map(|p| p.id).collect();
    let messages = pending.iter().map(|p| p.message.clone()).collect();
    if let Err(batch_err) = transport.send(messages).await {
        // One bad entry must not hold back the rest: send one by one.
        tracing::warn!(error = %batch_err, "batch send failed; sending entries one by one");
        let mut sent = Vec::new();
        for entry in &pending {
            match transport.send(vec![entry.message.clone()]).await {
                Ok(()) => sent.push(entry),
                Err(err) => tracing::error!(
                    outbox_id = entry.id,
                    destination = %entry.message.destination,
                    error = %err,
                    "outbox entry could not be sent; it will be tried again"
                ),
            }
        }
        if sent.is_empty() {
            return Err(DispatchError::Send {
                count: pending.len(),
                source: batch_err,
            });
        }
        let ids: Vec<i64> = sent.iter().map(|p| p.id).collect();
        store.mark_dispatched(&ids).await.map_err(DispatchError::Mark)?;
        record_sent(store, sent.into_iter()).await;
        return Ok(ids.len());
    }
    store.mark_dispatched(&ids).await.map_err(DispatchError::Mark)?;
    record_sent(store, pending.iter()).await;
    Ok(ids.len())
}

/// Rewrites `message` for `wire` (see [`bosun_contracts::versions`]); a
/// message that cannot be rewritten is sent as it is, with an error logged
/// (the consumers that read its version still handle it).
pub(crate) fn write_for_wire(message: &mut OutboundMessage, wire: u32) {
    match bosun_contracts::envelope::bytes_for_wire(&message.body, wire) {
        Ok(Some(body)) => message.body = body,
        Ok(None) => {}
        Err(err) => tracing::error!(
            error = %err,
            wire,
            message_type = message.message_type.as_deref(),
            "could not write the message for the compat wire version; sent as it is"
        ),
    }
}

async fn record_sent<'a>(store: &(impl TimelineStore + ?Sized), sent: impl Iterator<Item = &'a PendingOutbox>) {
    let now = OffsetDateTime::now_utc();
    let lines: Vec<TimelineEntry> = sent
        .filter_map(|entry| {
            let envelope = Envelope::from_slice(&entry.message.body).ok()?;
            let detail = match entry.message.scheduled_at {
                Some(at) if at > now => format!("to {} (scheduled for {at})", entry.message.destination),
                _ => format!("to {}", entry.message.destination),
            };
            // Retries are already on the timeline as `retry-scheduled`, and
            // commands accepted at the front door as `sent`.
            if matches!(entry.purpose, OutboxPurpose::Retry | OutboxPurpose::Sent) {
                return None;
            }
            Some(TimelineEntry {
                correlation_id: envelope.correlation_id.to_string(),
                message_id: envelope.message_id.to_string(),
                message_type: envelope.message_type.clone(),
                consumer: None,
                status: TimelineStatus::Sent,
                attempt: envelope.attempt,
                at: now,
                detail: Some(detail),
            })
        })
        .collect();
    if lines.is_empty() {
        return;
    }
    if let Err(err) = store.append_timeline(lines).await {
        tracing::warn!(error = %err, "could not record sent messages on the timeline");
    }
}
