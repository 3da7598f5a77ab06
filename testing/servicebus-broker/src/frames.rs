//! A frame-level adapter between `fe2o3-amqp` and the socket, for the one
//! thing Service Bus does that `fe2o3-amqp`'s sender cannot: a peek-locked
//! delivery's **delivery tag is its lock token**, 16 bytes in .NET GUID
//! byte order (Microsoft's SDKs read `lock_token` from the tag:
//! `uuid.UUID(bytes_le=delivery_tag)` in Python), where `fe2o3-amqp`
//! always numbers its deliveries with a 4-byte tag of its own.
//!
//! [`LockTokenTags`] wraps the connection's stream:
//! - **Outgoing**: it cuts the bytes the engine writes into protocol
//!   headers and frames; in the first `transfer` frame of a delivery that
//!   carries the `x-opt-lock-token` message annotation (the broker's
//!   namespace sets it on every peek-locked delivery) it takes the
//!   annotation out and makes that token's .NET bytes the tag, so a client
//!   can only learn the lock token as it does from Service Bus. Nothing
//!   else about settlement changes: dispositions name deliveries by
//!   delivery id, which stays; a receive-and-delete delivery has no lock
//!   token and keeps its tag.
//! - **Incoming**: the client's `open` is shown to the engine with a
//!   `max-frame-size` [`HEADROOM`] bytes smaller than the client's, so a
//!   frame the engine fills to the limit still fits once its tag has grown
//!   by 12 bytes.
//! - **Settlement in receiver settle mode second** (peek-lock as the SDKs
//!   do it): the client sends an unsettled terminal disposition and waits
//!   for the broker to settle it. `fe2o3-amqp` 0.18's session never sends
//!   that settlement for the last run of delivery ids in a disposition
//!   (its `consecutive_chunk_indices` leaves the last chunk out), so
//!   the adapter does: the engine is shown the disposition settled (it
//!   applies the outcome exactly as for settle mode first), and the client
//!   gets the settled disposition back with the same outcome, on the
//!   broker's channel for that session (learnt from the broker's `begin`).
//!   Anything the client sends after seeing it comes later on the same
//!   connection, so the engine has applied the outcome first.
//!
//! It also writes each delivery's message header out in full, delivery
//! count 0 included, where the engine leaves default fields out.
//!
//! The engine's own tag stays in its books (settlement goes by delivery
//! id), so it never learns of the change.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use fe2o3_amqp::types::definitions::{DeliveryTag, Role};
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::{DeliveryState, Header, MessageAnnotations, Rejected};
use fe2o3_amqp::types::performatives::{Begin, Disposition, MaxFrameSize, Open, Transfer};
use fe2o3_amqp::types::primitives::Value;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use uuid::Uuid;

/// How much smaller the engine believes the client's frames must be.
pub(crate) const HEADROOM: u32 = 64;
/// AMQP's smallest allowed `max-frame-size`.
const MIN_MAX_FRAME_SIZE: u32 = 512;
/// Outgoing bytes held before a write waits for the socket.
const WRITE_HIGH_WATER: usize = 1 << 20;

/// The performatives' descriptor codes this adapter reads.
const OPEN: u64 = 0x10;
const BEGIN: u64 = 0x11;
const TRANSFER: u64 = 0x14;
const DISPOSITION: u64 = 0x15;
/// The annotation the broker's namespace puts the lock token in.
const LOCK_TOKEN: &str = "x-opt-lock-token";
/// The header section's descriptor code.
const HEADER: u64 = 0x70;
/// The message-annotations section's descriptor code; later sections
/// (properties, application properties, body) end the search.
const MESSAGE_ANNOTATIONS: u64 = 0x72;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct LockTokenTags<S> {
    inner: S,
    /// Incoming bytes not yet cut into units.
    incoming: Vec<u8>,
    /// Incoming bytes ready for the engine, and how many it has taken.
    readable: Vec<u8>,
    read_from: usize,
    /// Whether the client's `open` has been seen.
    opened: bool,
    /// The broker's channel for each of the client's sessions (the
    /// client's channel → the broker's).
    channels: HashMap<u16, u16>,
    /// Outgoing bytes not yet cut into units.
    outgoing: Vec<u8>,
    /// Outgoing bytes ready for the socket, and how many it has taken.
    writable: Vec<u8>,
    written: usize,
    /// While set, nothing goes out (fault injection); looked at again
    /// every [`HELD_POLL`].
    held: Arc<AtomicBool>,
    recheck: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// How often held output looks whether it may go.
const HELD_POLL: std::time::Duration = std::time::Duration::from_millis(10);

impl<S> LockTokenTags<S> {
    pub(crate) fn new(inner: S, held: Arc<AtomicBool>) -> Self {
        Self {
            held,
            recheck: None,
            inner,
            incoming: Vec::new(),
            readable: Vec::new(),
            read_from: 0,
            opened: false,
            channels: HashMap::new(),
            outgoing: Vec::new(),
            writable: Vec::new(),
            written: 0,
        }
    }
}

/// One unit of the byte stream: a protocol header or a whole frame.
#[derive(Debug, PartialEq, Eq)]
enum Unit {
    Header(usize),
    Frame(usize),
}

/// The first complete unit at the start of `bytes`, if one is there.
fn next_unit(bytes: &[u8]) -> io::Result<Option<Unit>> {
    if bytes.len() < 8 {
        return Ok(None);
    }
    if bytes.starts_with(b"AMQP") {
        return Ok(Some(Unit::Header(8)));
    }
    let size = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
    if size < 8 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("an AMQP frame of {size} bytes (at least 8)"),
        ));
    }
    Ok((bytes.len() >= size).then_some(Unit::Frame(size)))
}

/// A frame's parts: everything before the performative (size, data
/// offset, type, channel, extended header), the performative's
/// descriptor code and encoded bytes, and the payload after it.
struct Parts<'a> {
    head: &'a [u8],
    code: u64,
    performative: &'a [u8],
    payload: &'a [u8],
}

/// The descriptor code and total length of the described value at the
/// start of `bytes` (`0x00`, a `smallulong`/`ulong` code, then a list or a
/// map), or `None` when it is not one or is cut short.
fn described(bytes: &[u8]) -> Option<(u64, usize)> {
    if bytes.first() != Some(&0x00) {
        return None;
    }
    let (code, value_at) = match bytes.get(1)? {
        0x53 => (u64::from(*bytes.get(2)?), 3),
        0x80 => (u64::from_be_bytes(bytes.get(2..10)?.try_into().ok()?), 10),
        _ => return None,
    };
    let length = match bytes.get(value_at)? {
        0x45 => 1,
        0xc0 | 0xc1 => 2 + usize::from(*bytes.get(value_at + 1)?),
        0xd0 | 0xd1 => 5 + u32::from_be_bytes(bytes.get(value_at + 1..value_at + 5)?.try_into().ok()?) as usize,
        _ => return None,
    };
    let end = value_at + length;
    (bytes.len() >= end).then_some((code, end))
}

/// The parts of an AMQP-type frame with a performative.
fn parts(frame: &[u8]) -> Option<Parts<'_>> {
    let body_at = usize::from(frame[4]) * 4;
    if frame[5] != 0x00 || body_at < 8 || frame.len() <= body_at {
        return None;
    }
    let body = &frame[body_at..];
    let (code, length) = described(body)?;
    Some(Parts {
        head: &frame[..body_at],
        code,
        performative: &body[..length],
        payload: &body[length..],
    })
}

/// A frame of `head`'s kind with a new performative and payload.
fn frame_with(head: &[u8], performative: &[u8], payload: &[u8]) -> io::Result<Vec<u8>> {
    let size = head.len() + performative.len() + payload.len();
    let size = u32::try_from(size).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "frame too large"))?;
    let mut frame = Vec::with_capacity(size as usize);
    frame.extend_from_slice(&size.to_be_bytes());
    frame.extend_from_slice(&head[4..]);
    frame.extend_from_slice(performative);
    frame.extend_from_slice(payload);
    Ok(frame)
}

/// The lock token the broker put in a delivery's `x-opt-lock-token`
/// message annotation, and the message annotations section without it
/// (Service Bus gives the lock token as the delivery tag only).
fn take_lock_token(section: &[u8]) -> Option<(Uuid, Vec<u8>)> {
    let mut annotations: MessageAnnotations = serde_amqp::from_slice(section).ok()?;
    let token = match annotations.0.shift_remove(&OwnedKey::from(LOCK_TOKEN))? {
        Value::Uuid(uuid) => Uuid::from_bytes(*uuid.as_inner()),
        _ => return None,
    };
    Some((token, serde_amqp::to_vec(&annotations).ok()?))
}

/// A header section written out in full, as Service Bus writes it
/// (`fe2o3-amqp` leaves out fields at their default, and Microsoft's SDKs
/// then read `delivery_count` as `None`, not 0).
fn explicit_header(section: &[u8]) -> Option<Vec<u8>> {
    let header: Header = serde_amqp::from_slice(section).ok()?;
    let boolean = |value: bool| if value { 0x41 } else { 0x42 };
    let mut fields = vec![boolean(header.durable), 0x50, header.priority.0];
    match header.ttl {
        Some(ttl) => {
            fields.push(0x70);
            fields.extend_from_slice(&ttl.to_be_bytes());
        }
        None => fields.push(0x40),
    }
    fields.push(boolean(header.first_acquirer));
    fields.push(0x70);
    fields.extend_from_slice(&header.delivery_count.to_be_bytes());
    // described, smallulong 0x70, list8 of size (count byte + fields), 5 fields
    let mut written = vec![0x00, 0x53, 0x70, 0xc0, u8::try_from(fields.len() + 1).ok()?, 5];
    written.extend_from_slice(&fields);
    Some(written)
}

/// A first transfer's payload as Service Bus sends it: the header written
/// out in full, the lock token taken out of the message annotations (for
/// the delivery tag). `None` when nothing changes.
fn service_bus_payload(payload: &[u8]) -> Option<(Vec<u8>, Option<Uuid>)> {
    let mut rewritten = Vec::with_capacity(payload.len() + 16);
    let mut token = None;
    let mut changed = false;
    let mut rest = payload;
    while let Some((code, length)) = described(rest) {
        if code > MESSAGE_ANNOTATIONS {
            break;
        }
        let section = &rest[..length];
        let replaced = match code {
            HEADER => explicit_header(section),
            MESSAGE_ANNOTATIONS => take_lock_token(section).map(|(found, without)| {
                token = Some(found);
                without
            }),
            _ => None,
        };
        changed |= replaced.is_some();
        rewritten.extend_from_slice(replaced.as_deref().unwrap_or(section));
        rest = &rest[length..];
    }
    rewritten.extend_from_slice(rest);
    changed.then_some((rewritten, token))
}

/// An outgoing frame as Service Bus would send it: in the first
/// `transfer` of a delivery, the message header is written out in full,
/// and a peek-locked delivery's lock token moves from the
/// `x-opt-lock-token` annotation to the delivery tag.
fn outgoing_frame(frame: &[u8]) -> io::Result<Vec<u8>> {
    let Some(parts) = parts(frame).filter(|parts| parts.code == TRANSFER) else {
        return Ok(frame.to_vec());
    };
    let Ok(mut transfer) = serde_amqp::from_slice::<Transfer>(parts.performative) else {
        return Ok(frame.to_vec());
    };
    if transfer.delivery_tag.is_none() {
        // A continuation of a delivery begun in an earlier frame.
        return Ok(frame.to_vec());
    }
    let Some((payload, token)) = service_bus_payload(parts.payload) else {
        return Ok(frame.to_vec());
    };
    if let Some(token) = token {
        transfer.delivery_tag = Some(DeliveryTag::from(token.to_bytes_le().to_vec()));
    }
    let performative = serde_amqp::to_vec(&transfer).map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?;
    frame_with(parts.head, &performative, &payload)
}

/// The client's `open` as the engine is shown it: [`HEADROOM`] bytes less
/// room per frame.
fn incoming_open(parts: &Parts<'_>) -> io::Result<Vec<u8>> {
    let mut open: Open = serde_amqp::from_slice(parts.performative)
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, format!("the client's open frame: {err}")))?;
    let limit = open.max_frame_size.0;
    open.max_frame_size = MaxFrameSize(limit.saturating_sub(HEADROOM).max(MIN_MAX_FRAME_SIZE));
    let performative = serde_amqp::to_vec(&open).map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?;
    frame_with(parts.head, &performative, parts.payload)
}

/// A client's unsettled terminal disposition of deliveries the broker
/// sent: the frame the engine is shown (the same disposition, settled)
/// and the settled disposition the client is owed, still without its
/// channel.
fn settle_second(parts: &Parts<'_>) -> Option<(Vec<u8>, Disposition)> {
    let mut disposition: Disposition = serde_amqp::from_slice(parts.performative).ok()?;
    let terminal = disposition.state.as_ref().is_some_and(DeliveryState::is_terminal);
    if disposition.settled || !terminal || !matches!(disposition.role, Role::Receiver) {
        return None;
    }
    disposition.settled = true;
    let performative = serde_amqp::to_vec(&disposition).ok()?;
    let shown = frame_with(parts.head, &performative, parts.payload).ok()?;
    // Service Bus confirms a dead-letter as `rejected` without an error:
    // an error in the echo is how it reports a settlement it refused.
    let state = match disposition.state {
        Some(DeliveryState::Rejected(_)) => Some(DeliveryState::Rejected(Rejected { error: None })),
        state => state,
    };
    let echo = Disposition {
        role: Role::Sender,
        batchable: false,
        state,
        ..disposition
    };
    Some((shown, echo))
}

/// A frame's channel.
fn channel(frame: &[u8]) -> u16 {
    u16::from_be_bytes([frame[6], frame[7]])
}

/// A frame of `disposition` on `channel`, with no extended header.
fn frame_on(channel: u16, disposition: &Disposition) -> io::Result<Vec<u8>> {
    let encoded = serde_amqp::to_vec(disposition).map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?;
    let [high, low] = channel.to_be_bytes();
    frame_with(&[0, 0, 0, 0, 2, 0, high, low], &encoded, &[])
}

impl<S: AsyncRead + AsyncWrite + Unpin> LockTokenTags<S> {
    /// Moves every complete incoming unit to `readable`, as the engine
    /// is to see it.
    fn cut_incoming(&mut self) -> io::Result<()> {
        let mut at = 0;
        while let Some(unit) = next_unit(&self.incoming[at..])? {
            let length = match unit {
                Unit::Header(length) | Unit::Frame(length) => length,
            };
            let bytes = &self.incoming[at..at + length];
            at += length;
            let parts = match unit {
                Unit::Header(_) => None,
                Unit::Frame(_) => parts(bytes),
            };
            let Some(parts) = parts else {
                self.readable.extend_from_slice(bytes);
                continue;
            };
            match parts.code {
                OPEN if !self.opened => {
                    self.opened = true;
                    let shown = incoming_open(&parts)?;
                    self.readable.extend_from_slice(&shown);
                }
                DISPOSITION => {
                    let ours = self.channels.get(&channel(bytes)).copied();
                    match ours.zip(settle_second(&parts)) {
                        Some((ours, (shown, echo))) => {
                            self.readable.extend_from_slice(&shown);
                            let echo = frame_on(ours, &echo)?;
                            self.writable.extend_from_slice(&echo);
                        }
                        None => self.readable.extend_from_slice(bytes),
                    }
                }
                _ => self.readable.extend_from_slice(bytes),
            }
        }
        self.incoming.drain(..at);
        Ok(())
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for LockTokenTags<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        // Settlements owed to the client go out as soon as the socket takes them.
        if let Poll::Ready(Err(err)) = this.poll_drain(cx) {
            return Poll::Ready(Err(err));
        }
        loop {
            if this.read_from < this.readable.len() {
                let ready = &this.readable[this.read_from..];
                let taken = ready.len().min(out.remaining());
                out.put_slice(&ready[..taken]);
                this.read_from += taken;
                if this.read_from == this.readable.len() {
                    this.readable.clear();
                    this.read_from = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16 * 1024];
            let mut chunk = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut chunk) {
                Poll::Ready(Ok(())) if chunk.filled().is_empty() => {
                    // End of stream: a cut-off frame goes as it is.
                    let rest = std::mem::take(&mut this.incoming);
                    if rest.is_empty() {
                        return Poll::Ready(Ok(()));
                    }
                    this.readable.extend_from_slice(&rest);
                }
                Poll::Ready(Ok(())) => {
                    this.incoming.extend_from_slice(chunk.filled());
                    this.cut_incoming()?;
                    if let Poll::Ready(Err(err)) = this.poll_drain(cx) {
                        return Poll::Ready(Err(err));
                    }
                }
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> LockTokenTags<S> {
    /// Moves every complete outgoing unit, rewritten, to `writable`.
    fn cut_outgoing(&mut self) -> io::Result<()> {
        let mut at = 0;
        while let Some(unit) = next_unit(&self.outgoing[at..])? {
            match unit {
                Unit::Header(length) => self.writable.extend_from_slice(&self.outgoing[at..at + length]),
                Unit::Frame(length) => {
                    let bytes = &self.outgoing[at..at + length];
                    if let Some(parts) = parts(bytes).filter(|parts| parts.code == BEGIN)
                        && let Ok(begin) = serde_amqp::from_slice::<Begin>(parts.performative)
                        && let Some(theirs) = begin.remote_channel
                    {
                        self.channels.insert(theirs, channel(bytes));
                    }
                    let frame = outgoing_frame(bytes)?;
                    self.writable.extend_from_slice(&frame);
                }
            }
            at += match unit {
                Unit::Header(length) | Unit::Frame(length) => length,
            };
        }
        self.outgoing.drain(..at);
        Ok(())
    }

    /// Writes `writable` to the socket until it is empty or the socket
    /// is not ready.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.writable.len() && self.held.load(Ordering::SeqCst) {
            let recheck = self
                .recheck
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(HELD_POLL)));
            match recheck.as_mut().poll(cx) {
                Poll::Ready(()) => self.recheck = None,
                Poll::Pending => return Poll::Pending,
            }
        }
        while self.written < self.writable.len() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.writable[self.written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(count)) => self.written += count,
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.writable.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for LockTokenTags<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.writable.len() - this.written >= WRITE_HIGH_WATER {
            match this.poll_drain(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Pending => return Poll::Pending,
            }
        }
        this.outgoing.extend_from_slice(bytes);
        this.cut_outgoing()?;
        // Start sending now; a socket that is not ready is flushed later.
        if let Poll::Ready(Err(err)) = this.poll_drain(cx) {
            return Poll::Ready(Err(err));
        }
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match this.poll_drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.inner).poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match this.poll_drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.inner).poll_shutdown(cx),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests;
