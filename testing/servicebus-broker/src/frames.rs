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
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use fe2o3_amqp::types::definitions::Handle;
    use fe2o3_amqp::types::definitions::{self, ErrorCondition};
    use fe2o3_amqp::types::messaging::message::__private::{Deserializable, Serializable};
    use fe2o3_amqp::types::messaging::{Accepted, AmqpValue, Body, Message, Received};
    use fe2o3_amqp::types::primitives::Symbol;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn transfer(tag: &[u8]) -> Transfer {
        Transfer {
            handle: Handle(1),
            delivery_id: Some(7),
            delivery_tag: Some(DeliveryTag::from(tag.to_vec())),
            message_format: Some(0),
            settled: Some(false),
            more: false,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        }
    }

    /// A frame on channel 3 (data offset 2, AMQP type) of `performative`.
    fn frame(performative: impl serde::Serialize, payload: &[u8]) -> Vec<u8> {
        let encoded = serde_amqp::to_vec(&performative).unwrap();
        frame_with(&[0, 0, 0, 0, 2, 0, 0, 3], &encoded, payload).unwrap()
    }

    fn message_bytes(token: Option<Uuid>) -> Vec<u8> {
        let mut annotations = MessageAnnotations::default();
        annotations
            .0
            .insert(OwnedKey::from("x-opt-sequence-number"), Value::Long(5));
        if let Some(token) = token {
            annotations.0.insert(
                OwnedKey::from("x-opt-lock-token"),
                Value::Uuid(token.into_bytes().into()),
            );
        }
        let message = Message::builder()
            .header(Header::default())
            .message_annotations(annotations)
            .body(Body::<Value>::Value(AmqpValue(Value::String("hello".into()))))
            .build();
        serde_amqp::to_vec(&Serializable(message)).unwrap()
    }

    fn decoded(frame: &[u8]) -> (Transfer, Vec<u8>) {
        let parts = parts(frame).unwrap();
        (
            serde_amqp::from_slice(parts.performative).unwrap(),
            parts.payload.to_vec(),
        )
    }

    #[test]
    fn a_peek_locked_transfer_carries_its_lock_token_in_dotnet_order() {
        let token = Uuid::parse_str("00112233-4455-6677-8899-aabbccddeeff").unwrap();
        let payload = message_bytes(Some(token));
        let rewritten = outgoing_frame(&frame(transfer(&[0, 0, 0, 9]), &payload)).unwrap();
        let (sent, sent_payload) = decoded(&rewritten);
        let tag = sent.delivery_tag.unwrap().into_vec();
        assert_eq!(
            tag,
            [
                0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff
            ],
            "the first three groups little-endian, as .NET's Guid.ToByteArray"
        );
        assert_eq!(Uuid::from_bytes_le(tag.try_into().unwrap()), token);
        assert_eq!(sent.delivery_id, Some(7), "the delivery id stays");
        let message: Deserializable<Message<Body<Value>>> = serde_amqp::from_slice(&sent_payload).unwrap();
        assert_eq!(message.0.header.unwrap().delivery_count, 0);
        let annotations = message.0.message_annotations.unwrap();
        assert_eq!(
            annotations.0.get(&OwnedKey::from("x-opt-sequence-number")),
            Some(&Value::Long(5))
        );
        assert_eq!(
            annotations.0.get(&OwnedKey::from(LOCK_TOKEN)),
            None,
            "the tag is the only lock token"
        );
        let (header, _) = described(&payload).unwrap();
        assert_eq!(header, HEADER);
        let (_, header_length) = described(&sent_payload).unwrap();
        assert_eq!(
            &sent_payload[..header_length],
            explicit_header(&payload[..described(&payload).unwrap().1]).unwrap(),
            "the header written out in full"
        );
        assert_eq!(message.0.body, Body::Value(AmqpValue(Value::String("hello".into()))));
        let size = u32::from_be_bytes(rewritten[..4].try_into().unwrap()) as usize;
        assert_eq!(size, rewritten.len());
    }

    #[test]
    fn other_frames_pass_unchanged() {
        let unlocked = frame(transfer(&[0, 0, 0, 9]), &message_bytes(None));
        let (sent, _) = decoded(&outgoing_frame(&unlocked).unwrap());
        assert_eq!(
            sent.delivery_tag.unwrap().into_vec(),
            [0, 0, 0, 9],
            "receive-and-delete keeps its tag"
        );
        let mut continuation = transfer(&[]);
        continuation.delivery_tag = None;
        let continuation = frame(continuation, b"rest of a message");
        assert_eq!(outgoing_frame(&continuation).unwrap(), continuation);
        let heartbeat = [0, 0, 0, 8, 2, 0, 0, 0];
        assert_eq!(outgoing_frame(&heartbeat).unwrap(), heartbeat);
    }

    #[test]
    fn the_explicit_header_keeps_every_field() {
        let header = Header {
            durable: true,
            priority: 7.into(),
            ttl: Some(60_000),
            first_acquirer: true,
            delivery_count: 3,
        };
        let message = Message::builder()
            .header(header.clone())
            .body(Body::<Value>::Value(AmqpValue(Value::Int(1))))
            .build();
        let payload = serde_amqp::to_vec(&Serializable(message)).unwrap();
        let (_, length) = described(&payload).unwrap();
        let explicit = explicit_header(&payload[..length]).unwrap();
        assert_eq!(described(&explicit).unwrap().1, explicit.len());
        let read: Header = serde_amqp::from_slice(&explicit).unwrap();
        assert_eq!(read, header);
        assert_eq!(
            service_bus_payload(b"\x00\x53\x73\x45"),
            None,
            "no header, nothing to write"
        );
    }

    #[test]
    fn the_engine_sees_the_clients_frames_headroom_smaller() {
        let open = Open {
            container_id: "client".into(),
            hostname: None,
            max_frame_size: MaxFrameSize(65_536),
            channel_max: Default::default(),
            idle_time_out: None,
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        let shown = incoming_open(&parts(&frame(open.clone(), &[])).unwrap()).unwrap();
        let parts = parts(&shown).unwrap();
        let shown: Open = serde_amqp::from_slice(parts.performative).unwrap();
        assert_eq!(shown.max_frame_size.0, 65_536 - HEADROOM);
        assert_eq!(shown.container_id, "client");
    }

    #[tokio::test]
    async fn bytes_cut_anywhere_arrive_rewritten_and_whole() {
        let token = Uuid::new_v4();
        let header = *b"AMQP\x00\x01\x00\x00";
        let first = frame(transfer(&[0, 0, 0, 1]), &message_bytes(Some(token)));
        let second = frame(transfer(&[0, 0, 0, 2]), &message_bytes(None));
        let mut stream = Vec::new();
        stream.extend_from_slice(&header);
        stream.extend_from_slice(&first);
        stream.extend_from_slice(&second);

        let (near, mut far) = tokio::io::duplex(1 << 16);
        let mut tags = LockTokenTags::new(near, Arc::default());
        for piece in stream.chunks(5) {
            tags.write_all(piece).await.unwrap();
        }
        tags.flush().await.unwrap();
        drop(tags);
        let mut sent = Vec::new();
        far.read_to_end(&mut sent).await.unwrap();

        let mut expected = header.to_vec();
        expected.extend_from_slice(&outgoing_frame(&first).unwrap());
        expected.extend_from_slice(&outgoing_frame(&second).unwrap());
        assert_eq!(sent, expected);
        assert_ne!(outgoing_frame(&first).unwrap(), first);
    }

    fn open(max_frame_size: u32) -> Open {
        Open {
            container_id: "c".into(),
            hostname: None,
            max_frame_size: MaxFrameSize(max_frame_size),
            channel_max: Default::default(),
            idle_time_out: None,
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }
    }

    fn disposition(settled: bool, state: Option<DeliveryState>) -> Disposition {
        Disposition {
            role: Role::Receiver,
            first: 4,
            last: Some(5),
            settled,
            state,
            batchable: false,
        }
    }

    fn begin(remote_channel: Option<u16>) -> Begin {
        Begin {
            remote_channel,
            next_outgoing_id: 0,
            incoming_window: 100,
            outgoing_window: 100,
            handle_max: Default::default(),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }
    }

    /// `frame` on another channel.
    fn on_channel(mut frame: Vec<u8>, channel: u16) -> Vec<u8> {
        frame[6..8].copy_from_slice(&channel.to_be_bytes());
        frame
    }

    #[test]
    fn only_unsettled_terminal_dispositions_of_the_receiver_are_settled_back() {
        let accepted = Some(DeliveryState::Accepted(Accepted {}));
        let unsettled = frame(disposition(false, accepted.clone()), &[]);
        let (shown, echo) = settle_second(&parts(&unsettled).unwrap()).unwrap();
        let shown: Disposition = serde_amqp::from_slice(parts(&shown).unwrap().performative).unwrap();
        assert!(shown.settled, "the engine sees it settled");
        assert_eq!((shown.first, shown.last), (4, Some(5)));
        assert!(echo.settled);
        assert!(matches!(echo.role, Role::Sender));
        assert_eq!((echo.first, echo.last), (4, Some(5)));
        assert!(matches!(echo.state, Some(DeliveryState::Accepted(_))));

        let settled = frame(disposition(true, accepted.clone()), &[]);
        assert!(settle_second(&parts(&settled).unwrap()).is_none(), "already settled");
        let received = Some(DeliveryState::Received(Received {
            section_number: 0,
            section_offset: 0,
        }));
        let not_terminal = frame(disposition(false, received), &[]);
        assert!(
            settle_second(&parts(&not_terminal).unwrap()).is_none(),
            "not an outcome"
        );
        let dead_letter = Some(DeliveryState::Rejected(Rejected {
            error: Some(definitions::Error::new(
                ErrorCondition::Custom(Symbol::from("com.microsoft:dead-letter")),
                Some("field x is missing".to_owned()),
                None,
            )),
        }));
        let rejected = frame(disposition(false, dead_letter), &[]);
        let (shown, echo) = settle_second(&parts(&rejected).unwrap()).unwrap();
        let shown: Disposition = serde_amqp::from_slice(parts(&shown).unwrap().performative).unwrap();
        assert!(
            matches!(&shown.state, Some(DeliveryState::Rejected(Rejected { error: Some(_) }))),
            "the engine keeps the reason"
        );
        assert!(
            matches!(echo.state, Some(DeliveryState::Rejected(Rejected { error: None }))),
            "the client is told it worked"
        );

        let mut from_a_sender = disposition(false, accepted);
        from_a_sender.role = Role::Sender;
        let from_a_sender = frame(from_a_sender, &[]);
        assert!(
            settle_second(&parts(&from_a_sender).unwrap()).is_none(),
            "about deliveries the client sent"
        );
    }

    #[tokio::test]
    async fn a_settlement_owed_goes_back_on_the_brokers_channel_for_the_session() {
        let header = *b"AMQP\x00\x01\x00\x00";
        let client_open = frame(open(1_000), &[]);
        let client_begin = on_channel(frame(begin(None), &[]), 7);
        let accepted = Some(DeliveryState::Accepted(Accepted {}));
        let client_disposition = on_channel(frame(disposition(false, accepted), &[]), 7);
        let other = on_channel(frame(transfer(&[1, 2, 3, 4]), b"payload"), 7);

        let (mut client, near) = tokio::io::duplex(1 << 16);
        let mut tags = LockTokenTags::new(near, Arc::default());
        let mut from_client = header.to_vec();
        from_client.extend_from_slice(&client_open);
        from_client.extend_from_slice(&client_begin);
        client.write_all(&from_client).await.unwrap();
        let mut seen = vec![0; header.len() + client_open.len() - 1 + client_begin.len()];
        // The open is shown re-encoded; read what the engine gets up to the begin.
        let mut got = Vec::new();
        while got.len() < header.len() + 8 || next_unit(&got[header.len()..]).unwrap().is_none() {
            let count = tags.read(&mut seen).await.unwrap();
            got.extend_from_slice(&seen[..count]);
        }
        // The broker answers the client's channel 7 on its channel 2.
        let broker_begin = on_channel(frame(begin(Some(7)), &[]), 2);
        tags.write_all(&broker_begin).await.unwrap();
        tags.flush().await.unwrap();
        let mut answer = vec![0; broker_begin.len()];
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(answer, broker_begin);

        let mut rest = client_disposition.clone();
        rest.extend_from_slice(&other);
        client.write_all(&rest).await.unwrap();
        let (shown, echo) = settle_second(&parts(&client_disposition).unwrap()).unwrap();
        let mut expected: Vec<u8> = Vec::new();
        expected.extend_from_slice(&client_begin);
        expected.extend_from_slice(&shown);
        expected.extend_from_slice(&other);
        while got.len() < header.len() + incoming_open(&parts(&client_open).unwrap()).unwrap().len() + expected.len() {
            let count = tags.read(&mut seen).await.unwrap();
            got.extend_from_slice(&seen[..count]);
        }
        assert!(
            got.ends_with(&expected),
            "the engine sees the begin, the disposition settled, then the rest"
        );
        let echo = frame_on(2, &echo).unwrap();
        let mut settled_back = vec![0; echo.len()];
        client.read_exact(&mut settled_back).await.unwrap();
        assert_eq!(
            settled_back, echo,
            "the client gets its settlement on the broker's channel 2"
        );
    }
}
