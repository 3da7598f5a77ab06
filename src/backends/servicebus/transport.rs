//! [`ServiceBusTransport`]: the [`Transport`] on Azure Service Bus over
//! AMQP 1.0.
//!
//! - One AMQP connection (TLS to `<namespace>:5671`, plain to the emulator),
//!   reopened after a drop with exponential backoff: while the connection
//!   is down, calls fail at once with [`TransportError::Unavailable`] until
//!   the next attempt is due, and the host retries.
//! - A token per entity audience is put on `$cbs` before a link attaches and
//!   refreshed before it expires.
//! - One sender link per entity, cached. Every send waits for the broker's
//!   outcome under [`ServiceBusOptions::send_timeout`]; a send that times out
//!   or fails drops its link (the next send attaches a new one) and returns
//!   `Unavailable`, so the host sends again. A message that did arrive is
//!   then dropped by the entity's duplicate detection (same message id) and,
//!   failing that, by the consumer's idempotency record. A rejected message
//!   is always an error. Messages to one entity go as Service Bus batches of
//!   up to [`ServiceBusOptions::max_batch_bytes`], each accepted or rejected
//!   as a whole; scheduled messages go one by one.
//! - One peek-lock receiver link per entity, kept by a pump task that gives
//!   the link credit for [`ServiceBusOptions::prefetch`] messages, holds what
//!   arrives, and settles on that same link (Service Bus accepts a
//!   settlement only there): complete = accepted, abandon = modified with
//!   delivery-failed (the delivery is counted), dead-letter = rejected with
//!   `com.microsoft:dead-letter` and the reason and description. A
//!   settlement for a lock the pump no longer holds (expired, already
//!   settled, or its link was lost) is [`TransportError::LockLost`].
//! - Lock duration is an entity property on Service Bus. The transport keeps
//!   the shorter `lock_duration` a receive asks for itself: when it passes
//!   without a renewal the pump abandons the message, as the broker would.
//!   A renewal within the broker's lock stays local; beyond it the transport
//!   calls `com.microsoft:renew-lock` on the entity's `$management` node.
//! - Depth and dead-letter listing use `com.microsoft:peek-message` on
//!   `$management` (runtime counts are only in the management REST API).
//!   Without `$management`, listing dead letters falls back to receiving
//!   them under a lock and releasing them; depth is then unavailable.
//! - Entities are not created here: [`Transport::ensure_topology`] does
//!   nothing, and `serve` verifies the namespace through the management
//!   client at start.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::Destination;
use fe2o3_amqp::link::delivery::DeliveryInfo;
use fe2o3_amqp::types::messaging::{Body, Message, Outcome};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Delivery, Receiver, Sendable, Sender};
use fe2o3_amqp_management::client::MgmtClient;
use fe2o3_amqp_management::request::Request;
use fe2o3_amqp_management::response::Response;
use time::OffsetDateTime;
use tokio::sync::{Mutex, mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;
use uuid::Uuid;

use super::amqp::{
    AmqpConnection, AmqpFailure, AmqpSettings, PeekRequest, PeekResponse, RenewLockRequest, RenewLockResponse,
    ResponseError, abandon_outcome, classify_remote, dead_letter_outcome, from_management, from_recv, from_send,
    is_no_content,
};
use super::connection::ServiceBusEndpoint;
use super::credential::TokenSource;
use super::mapping::{self, AmqpMessage, BATCH_MESSAGE_FORMAT, Incoming};
use crate::ports::transport::{
    DeadLetteredMessage, LockToken, OutboundMessage, ReceivedMessage, Topology, Transport, TransportError,
};

/// A buffered message whose broker lock ends within this is not handed out.
const STALE_LOCK_MARGIN: Duration = Duration::from_secs(1);
/// A local renewal must end this much before the broker's lock, else the
/// broker's lock is renewed.
const BROKER_RENEW_MARGIN: Duration = Duration::from_secs(2);
/// After the first message of a receive arrives, how long to let a burst land.
const GATHER: Duration = Duration::from_millis(50);
/// Messages per `$management` peek.
const PEEK_PAGE: i32 = 100;
/// Depth stops counting here (it pages through `$management` peeks).
const DEPTH_LIMIT: u64 = 100_000;
/// A dead-letter removal looks at most this many dead letters.
const DEAD_LETTER_SCAN_LIMIT: usize = 10_000;

/// Tuning of the Service Bus transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceBusOptions {
    /// Messages each receiver link is given credit for ahead of the
    /// handlers (`BOSUN_SERVICEBUS_PREFETCH`).
    pub prefetch: u32,
    /// The longest a send may wait for the broker's outcome before its link
    /// is dropped and the send reported failed
    /// (`BOSUN_SERVICEBUS_SEND_TIMEOUT_MS`).
    pub send_timeout: Duration,
    /// The longest a connect, attach, put-token or `$management` call may take.
    pub operation_timeout: Duration,
    /// How long a receive waits for a first message when none is buffered.
    pub receive_wait: Duration,
    /// The largest batch bosun sends (the link's own limit applies too).
    pub max_batch_bytes: usize,
    /// The AMQP idle timeout announced to the broker.
    pub idle_timeout: Duration,
    /// First wait before reconnecting after a failed connect; it doubles up
    /// to `reconnect_max`.
    pub reconnect_min: Duration,
    /// Longest wait between reconnection attempts.
    pub reconnect_max: Duration,
}

impl Default for ServiceBusOptions {
    fn default() -> Self {
        Self {
            prefetch: 16,
            send_timeout: Duration::from_secs(30),
            operation_timeout: Duration::from_secs(20),
            receive_wait: Duration::from_secs(1),
            max_batch_bytes: 256 * 1024,
            idle_timeout: Duration::from_secs(120),
            reconnect_min: Duration::from_millis(250),
            reconnect_max: Duration::from_secs(30),
        }
    }
}

/// The Service Bus transport. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct ServiceBusTransport {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ServiceBusTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceBusTransport")
            .field("host", &self.inner.endpoint.host)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

struct Inner {
    endpoint: ServiceBusEndpoint,
    tokens: TokenSource,
    options: ServiceBusOptions,
    settings: AmqpSettings,
    state: Mutex<ConnectionState>,
    senders: SyncMutex<HashMap<String, Arc<SenderSlot>>>,
    receivers: SyncMutex<HashMap<String, Arc<ReceiverPump>>>,
    management: SyncMutex<HashMap<String, Arc<ManagementSlot>>>,
    /// The connection generation on which `$management` did not answer (the
    /// emulator keeps the node open and ignores requests); `0` for none.
    management_silent: AtomicU64,
}

#[derive(Default)]
struct ConnectionState {
    current: Option<Arc<AmqpConnection>>,
    generation: u64,
    failures: u32,
    retry_at: Option<Instant>,
}

struct SenderSlot {
    generation: u64,
    sender: Mutex<Sender>,
    max_message_size: Option<u64>,
}

struct ManagementSlot {
    generation: u64,
    client: Mutex<MgmtClient>,
}

impl ServiceBusTransport {
    /// Connects to the namespace (or emulator) of `endpoint` with tokens from
    /// `tokens`. Fails when the first connection cannot be opened.
    pub async fn connect(
        endpoint: ServiceBusEndpoint,
        tokens: TokenSource,
        options: ServiceBusOptions,
    ) -> Result<Self, TransportError> {
        let settings = AmqpSettings {
            operation_timeout: options.operation_timeout,
            idle_timeout: options.idle_timeout,
        };
        let transport = Self {
            inner: Arc::new(Inner {
                endpoint,
                tokens,
                options,
                settings,
                state: Mutex::new(ConnectionState::default()),
                senders: SyncMutex::new(HashMap::new()),
                receivers: SyncMutex::new(HashMap::new()),
                management: SyncMutex::new(HashMap::new()),
                management_silent: AtomicU64::new(0),
            }),
        };
        transport.inner.connection().await?;
        Ok(transport)
    }

    /// Releases every message this transport holds or has prefetched (so
    /// other receivers get them at once) and closes the connection.
    pub async fn close(&self) {
        let pumps: Vec<Arc<ReceiverPump>> = lock(&self.inner.receivers).drain().map(|(_, pump)| pump).collect();
        for pump in pumps {
            let _ = tokio::time::timeout(
                Duration::from_secs(5),
                pump.request(|reply| PumpCommand::Release { reply }),
            )
            .await;
        }
        lock(&self.inner.senders).clear();
        lock(&self.inner.management).clear();
        let current = self.inner.state.lock().await.current.take();
        if let Some(connection) = current {
            connection.close().await;
        }
    }

    /// Renews a lock at the broker through `$management`, whatever the
    /// local lock (to check that the endpoint can); returns the broker's new
    /// expiry.
    #[cfg(test)]
    pub(crate) async fn renew_lock_at_broker(&self, lock: &LockToken) -> Result<OffsetDateTime, TransportError> {
        let unbounded = OffsetDateTime::now_utc() + Duration::from_secs(24 * 3600);
        self.inner.broker_renew(lock, unbounded).await
    }

    /// Completes every message of an entity path (test setup).
    #[cfg(test)]
    pub(crate) async fn drain(&self, path: &str) -> Result<usize, TransportError> {
        let connection = self.inner.connection().await?;
        let mut receiver = connection.receiver(path).await.map_err(|f| transport_error(path, f))?;
        let mut drained = 0;
        loop {
            let batch = take_deliveries(&mut receiver, 256, self.inner.options.receive_wait)
                .await
                .map_err(|f| transport_error(path, f))?;
            if batch.is_empty() {
                break;
            }
            for delivery in &batch {
                receiver
                    .accept(delivery)
                    .await
                    .map_err(|err| TransportError::Unavailable(format!("drain `{path}`: {err}")))?;
            }
            drained += batch.len();
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), receiver.close()).await;
        Ok(drained)
    }
}

fn lock<T>(mutex: &SyncMutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The transport error for a failure on entity `path`.
fn transport_error(path: &str, failure: AmqpFailure) -> TransportError {
    match failure {
        AmqpFailure::NotFound(_) => TransportError::NoSuchEntity(path.to_owned()),
        other => TransportError::Unavailable(other.to_string()),
    }
}

fn lock_lost(lock: &LockToken) -> TransportError {
    TransportError::LockLost {
        entity: lock.entity.path(),
        sequence: lock.sequence,
    }
}

/// The path of the entity a destination is received from; a topic has none.
fn receive_path(entity: &Destination) -> Result<String, TransportError> {
    match entity {
        Destination::Topic(topic) => Err(TransportError::Unavailable(format!(
            "`{topic}` is a topic: receive from one of its subscriptions"
        ))),
        other => Ok(other.path()),
    }
}

impl Inner {
    /// The open connection, reopening it after a drop (with backoff).
    async fn connection(&self) -> Result<Arc<AmqpConnection>, TransportError> {
        let mut state = self.state.lock().await;
        if let Some(current) = &state.current {
            if current.is_open() {
                return Ok(Arc::clone(current));
            }
            tracing::warn!(host = %self.endpoint.host, generation = current.generation, "Service Bus connection lost; reconnecting");
            state.current = None;
            lock(&self.senders).clear();
            lock(&self.receivers).clear();
            lock(&self.management).clear();
        }
        if let Some(at) = state.retry_at {
            let now = Instant::now();
            if now < at {
                return Err(TransportError::Unavailable(format!(
                    "Service Bus connection is down; next attempt in {} ms",
                    (at - now).as_millis()
                )));
            }
        }
        state.generation += 1;
        match AmqpConnection::open(&self.endpoint, &self.tokens, &self.settings, state.generation).await {
            Ok(connection) => {
                state.failures = 0;
                state.retry_at = None;
                state.current = Some(Arc::clone(&connection));
                Ok(connection)
            }
            Err(failure) => {
                state.failures = state.failures.saturating_add(1);
                let delay = backoff(&self.options, state.failures);
                state.retry_at = Some(Instant::now() + delay);
                tracing::warn!(host = %self.endpoint.host, error = %failure, retry_in_ms = delay.as_millis(), "Service Bus connection failed");
                Err(TransportError::Unavailable(format!(
                    "Service Bus connection: {failure}"
                )))
            }
        }
    }

    async fn sender(&self, connection: &AmqpConnection, path: &str) -> Result<Arc<SenderSlot>, TransportError> {
        if let Some(slot) = lock(&self.senders).get(path)
            && slot.generation == connection.generation
        {
            return Ok(Arc::clone(slot));
        }
        let sender = connection.sender(path).await.map_err(|f| transport_error(path, f))?;
        let slot = Arc::new(SenderSlot {
            generation: connection.generation,
            max_message_size: sender.max_message_size().filter(|size| *size > 0),
            sender: Mutex::new(sender),
        });
        lock(&self.senders).insert(path.to_owned(), Arc::clone(&slot));
        Ok(slot)
    }

    fn drop_sender(&self, path: &str, slot: &Arc<SenderSlot>) {
        let mut senders = lock(&self.senders);
        if senders.get(path).is_some_and(|current| Arc::ptr_eq(current, slot)) {
            senders.remove(path);
        }
    }

    /// The receiver pump of `entity`, attaching one when there is none.
    async fn pump(&self, entity: &Destination) -> Result<Arc<ReceiverPump>, TransportError> {
        let path = receive_path(entity)?;
        let connection = self.connection().await?;
        if let Some(pump) = lock(&self.receivers).get(&path)
            && pump.generation == connection.generation
            && !pump.is_closed()
        {
            return Ok(Arc::clone(pump));
        }
        let receiver = connection
            .receiver(&path)
            .await
            .map_err(|f| transport_error(&path, f))?;
        let pump = Arc::new(ReceiverPump::start(
            entity.clone(),
            receiver,
            self.options.prefetch,
            connection.generation,
        ));
        lock(&self.receivers).insert(path, Arc::clone(&pump));
        Ok(pump)
    }

    /// The pump that holds `lock`, if it still runs.
    /// (The map holds only pumps of the current connection: a reconnection
    /// clears it, and a pump whose link failed has stopped.)
    async fn holder(&self, lock_token: &LockToken) -> Option<Arc<ReceiverPump>> {
        let path = lock_token.entity.path();
        let pump = lock(&self.receivers).get(&path).cloned()?;
        (!pump.is_closed()).then_some(pump)
    }

    /// Calls a `$management` operation on `path`; `None` for "no content".
    async fn management_call<Req, Res>(&self, path: &str, request: Req) -> Result<Option<Res>, AmqpFailure>
    where
        Req: Request<Response = Res> + Send,
        Res: Response<Body = Body<Value>, Error = ResponseError> + Send,
    {
        let what = format!("`{}` on `{path}/$management`", Req::OPERATION);
        let connection = self
            .connection()
            .await
            .map_err(|err| AmqpFailure::Connection(err.to_string()))?;
        if self.management_silent.load(Ordering::SeqCst) == connection.generation {
            return Err(AmqpFailure::Unsupported(what));
        }
        let slot = {
            let existing = lock(&self.management)
                .get(path)
                .filter(|slot| slot.generation == connection.generation)
                .cloned();
            match existing {
                Some(slot) => slot,
                None => {
                    let client = connection.management(path).await?;
                    let slot = Arc::new(ManagementSlot {
                        generation: connection.generation,
                        client: Mutex::new(client),
                    });
                    lock(&self.management).insert(path.to_owned(), Arc::clone(&slot));
                    slot
                }
            }
        };
        let result = {
            let mut client = slot.client.lock().await;
            tokio::time::timeout(self.options.operation_timeout, client.call(request)).await
        };
        match result {
            Ok(Ok(response)) => Ok(Some(response)),
            Ok(Err(err)) if is_no_content(&err) => Ok(None),
            Ok(Err(err)) => {
                let failure = connection.note(from_management(&what, &err));
                if matches!(failure, AmqpFailure::Link(_) | AmqpFailure::Connection(_)) {
                    self.drop_management(path, &slot);
                }
                Err(failure)
            }
            Err(_) => {
                // A late answer would pair with the next request: never reuse.
                self.drop_management(path, &slot);
                if self.endpoint.emulator {
                    self.management_silent.store(connection.generation, Ordering::SeqCst);
                    Err(AmqpFailure::Unsupported(format!("{what} (no answer)")))
                } else {
                    Err(AmqpFailure::Timeout(format!(
                        "{what}: no answer within {} ms",
                        self.options.operation_timeout.as_millis()
                    )))
                }
            }
        }
    }

    fn drop_management(&self, path: &str, slot: &Arc<ManagementSlot>) {
        let mut management = lock(&self.management);
        if management.get(path).is_some_and(|current| Arc::ptr_eq(current, slot)) {
            management.remove(path);
        }
    }

    /// Peeks up to `max` messages of `path` from its first.
    async fn peek(&self, path: &str, max: usize) -> Result<Vec<AmqpMessage>, AmqpFailure> {
        let mut messages = Vec::new();
        let mut from_sequence = 0;
        while messages.len() < max {
            let want = i32::try_from(max - messages.len()).unwrap_or(PEEK_PAGE).min(PEEK_PAGE);
            let request = PeekRequest {
                from_sequence,
                count: want,
                server_timeout: self.options.operation_timeout,
            };
            let Some(page) = self.management_call::<_, PeekResponse>(path, request).await? else {
                break;
            };
            let page: Vec<AmqpMessage> = page
                .messages
                .iter()
                .filter_map(|bytes| match mapping::decode(bytes) {
                    Ok(message) => Some(message),
                    Err(err) => {
                        tracing::warn!(path, error = %err, "a peeked message could not be decoded; skipped");
                        None
                    }
                })
                .collect();
            let last = page.iter().filter_map(mapping::sequence_number).max();
            let full = page.len() >= usize::try_from(want).unwrap_or(usize::MAX);
            messages.extend(page);
            match last {
                Some(last) if full => from_sequence = last + 1,
                _ => break,
            }
        }
        Ok(messages)
    }

    async fn broker_renew(
        &self,
        lock_token: &LockToken,
        until: OffsetDateTime,
    ) -> Result<OffsetDateTime, TransportError> {
        let path = lock_token.entity.path();
        let request = RenewLockRequest {
            lock_tokens: vec![lock_token.token],
            server_timeout: self.options.operation_timeout,
        };
        let renewed = match self.management_call::<_, RenewLockResponse>(&path, request).await {
            Ok(Some(response)) => response.expirations.first().copied(),
            Ok(None) => None,
            Err(AmqpFailure::LockLost(_)) => return Err(lock_lost(lock_token)),
            Err(AmqpFailure::Unsupported(what)) => {
                return Err(TransportError::Unavailable(format!(
                    "renewing a lock at the broker ({what}) is not supported by this endpoint"
                )));
            }
            Err(failure) => return Err(transport_error(&path, failure)),
        };
        let Some(broker_until) = renewed else {
            return Err(TransportError::Unavailable(format!(
                "`com.microsoft:renew-lock` on `{path}` returned no expiry"
            )));
        };
        match self.holder(lock_token).await {
            Some(pump) => match pump
                .request(|reply| PumpCommand::Renewed {
                    token: lock_token.token,
                    broker_until,
                    until,
                    reply,
                })
                .await
            {
                Some(Ok(local)) => Ok(local),
                _ => Err(lock_lost(lock_token)),
            },
            None => Err(lock_lost(lock_token)),
        }
    }

    /// A prefetched message may have waited so long that the broker's lock
    /// ends before the host's first renewal (a third of `lock_duration`):
    /// renew those at the broker now, best effort.
    async fn lengthen_short_locks(&self, messages: &mut [ReceivedMessage], lock_duration: Duration) {
        let now = OffsetDateTime::now_utc();
        let wanted = now + lock_duration;
        let too_soon = now + lock_duration / 3 + BROKER_RENEW_MARGIN;
        for message in messages
            .iter_mut()
            .filter(|message| message.locked_until < too_soon && message.locked_until + BROKER_RENEW_MARGIN < wanted)
        {
            match self.broker_renew(&message.lock, wanted).await {
                Ok(until) => message.locked_until = until,
                Err(err) => tracing::debug!(
                    entity = %message.lock.entity,
                    sequence = message.lock.sequence,
                    error = %err,
                    "could not lengthen a short broker lock"
                ),
            }
        }
    }

    async fn settle(&self, lock_token: &LockToken, settlement: Settlement) -> Result<(), TransportError> {
        let Some(pump) = self.holder(lock_token).await else {
            return Err(lock_lost(lock_token));
        };
        match pump
            .request(|reply| PumpCommand::Settle {
                token: lock_token.token,
                settlement,
                reply,
            })
            .await
        {
            Some(Ok(())) => Ok(()),
            Some(Err(SettleError::LockLost)) | None => Err(lock_lost(lock_token)),
            Some(Err(SettleError::Failed(failure))) => Err(transport_error(&lock_token.entity.path(), failure)),
        }
    }

    /// Lists dead letters by receiving them under a lock and releasing them
    /// (for endpoints without `$management`).
    async fn browse_dead_letters(
        &self,
        entity: &Destination,
        max: usize,
    ) -> Result<Vec<DeadLetteredMessage>, TransportError> {
        let path = mapping::dead_letter_path(entity);
        let connection = self.connection().await?;
        let mut receiver = connection
            .receiver(&path)
            .await
            .map_err(|f| transport_error(&path, f))?;
        let deliveries = take_deliveries(&mut receiver, max, self.options.receive_wait).await;
        let mut dead = Vec::new();
        if let Ok(deliveries) = &deliveries {
            for delivery in deliveries {
                dead.push(mapping::dead_lettered_message(entity, delivery.message()));
                let _ = receiver.release(delivery).await;
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), receiver.close()).await;
        deliveries.map_err(|f| transport_error(&path, f))?;
        dead.sort_by_key(|message| message.sequence);
        Ok(dead)
    }
}

/// Exponential backoff with full jitter between `reconnect_min` and the cap.
fn backoff(options: &ServiceBusOptions, failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(16);
    let ceiling = options
        .reconnect_min
        .saturating_mul(2u32.saturating_pow(exponent))
        .min(options.reconnect_max)
        .max(options.reconnect_min);
    let spread = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
    let floor = u64::try_from(options.reconnect_min.as_millis()).unwrap_or_default();
    Duration::from_millis(fastrand::u64(floor.min(spread)..=spread))
}

/// Receives up to `max` deliveries from a link of our own, waiting `wait`
/// for each next one.
async fn take_deliveries(
    receiver: &mut Receiver,
    max: usize,
    wait: Duration,
) -> Result<Vec<Delivery<Body<Value>>>, AmqpFailure> {
    let mut deliveries = Vec::new();
    let credit = u32::try_from(max.min(256)).unwrap_or(256);
    receiver
        .set_credit(credit)
        .await
        .map_err(|err| AmqpFailure::Link(format!("give credit: {err}")))?;
    let mut outstanding = credit;
    while deliveries.len() < max {
        if outstanding == 0 {
            let more = u32::try_from((max - deliveries.len()).min(256)).unwrap_or(256);
            receiver
                .set_credit(more)
                .await
                .map_err(|err| AmqpFailure::Link(format!("give credit: {err}")))?;
            outstanding = more;
        }
        match tokio::time::timeout(wait, receiver.recv::<Body<Value>>()).await {
            Ok(Ok(delivery)) => {
                deliveries.push(delivery);
                outstanding -= 1;
            }
            Ok(Err(err)) => return Err(from_recv("receive", &err)),
            Err(_) => break,
        }
    }
    Ok(deliveries)
}

#[async_trait]
impl Transport for ServiceBusTransport {
    async fn close(&self) {
        ServiceBusTransport::close(self).await;
    }

    async fn ensure_topology(&self, _topology: &Topology) -> Result<(), TransportError> {
        // Entities are created by `bosun topology apply` through the
        // management API and verified by `serve` at start, not over AMQP.
        Ok(())
    }

    async fn send(&self, messages: Vec<OutboundMessage>) -> Result<(), TransportError> {
        if messages.is_empty() {
            return Ok(());
        }
        let mut groups: Vec<(String, Vec<OutboundMessage>)> = Vec::new();
        for message in messages {
            let path = mapping::send_target(&message.destination).entity_path;
            match groups.iter_mut().find(|(existing, _)| *existing == path) {
                Some((_, group)) => group.push(message),
                None => groups.push((path, vec![message])),
            }
        }
        let connection = self.inner.connection().await?;
        for (path, group) in groups {
            let slot = self.inner.sender(&connection, &path).await?;
            let limit = slot
                .max_message_size
                .and_then(|size| usize::try_from(size).ok())
                .map_or(self.inner.options.max_batch_bytes, |size| {
                    size.min(self.inner.options.max_batch_bytes)
                });
            for chunk in chunks(&group, limit).map_err(|err| TransportError::Unavailable(err.to_string()))? {
                let what = format!("send {} message(s) to `{path}`", chunk.count());
                let result = {
                    let mut sender = slot.sender.lock().await;
                    tokio::time::timeout(self.inner.options.send_timeout, chunk.send(&mut sender)).await
                };
                match result {
                    Ok(Ok(Outcome::Accepted(_))) => {}
                    Ok(Ok(Outcome::Rejected(rejected))) => {
                        let failure = match &rejected.error {
                            Some(error) => classify_remote(&format!("Service Bus rejected {what}"), error),
                            None => AmqpFailure::Rejected(format!("Service Bus rejected {what}")),
                        };
                        return Err(transport_error(&path, failure));
                    }
                    Ok(Ok(other)) => {
                        return Err(TransportError::Unavailable(format!(
                            "Service Bus did not accept {what}: {other:?}"
                        )));
                    }
                    Ok(Err(err)) => {
                        self.inner.drop_sender(&path, &slot);
                        return Err(transport_error(&path, connection.note(from_send(&what, &err))));
                    }
                    Err(_) => {
                        self.inner.drop_sender(&path, &slot);
                        tracing::warn!(
                            path,
                            timeout_ms = self.inner.options.send_timeout.as_millis(),
                            "send timed out; the sender link is recreated"
                        );
                        return Err(TransportError::Unavailable(format!(
                            "{what}: no outcome within {} ms; the link is recreated and the send must be retried",
                            self.inner.options.send_timeout.as_millis()
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    async fn receive(
        &self,
        entity: &Destination,
        max: usize,
        lock_duration: Duration,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let pump = self.inner.pump(entity).await?;
        let take = |pump: Arc<ReceiverPump>| async move {
            pump.request(|reply| PumpCommand::Take {
                max,
                lock_duration,
                reply,
            })
            .await
            .ok_or_else(|| TransportError::Unavailable(format!("the receiver link of `{entity}` closed")))
        };
        let mut taken = take(Arc::clone(&pump)).await?;
        if taken.is_empty() && pump.wait_ready(self.inner.options.receive_wait).await {
            tokio::time::sleep(GATHER).await;
            taken = take(pump).await?;
        }
        self.inner.lengthen_short_locks(&mut taken, lock_duration).await;
        Ok(taken)
    }

    async fn wait_for_messages(&self, entity: &Destination, timeout: Duration) {
        match self.inner.pump(entity).await {
            Ok(pump) => {
                pump.wait_ready(timeout).await;
            }
            Err(_) => tokio::time::sleep(timeout).await,
        }
    }

    async fn renew_lock(
        &self,
        lock_token: &LockToken,
        lock_duration: Duration,
    ) -> Result<OffsetDateTime, TransportError> {
        let until = OffsetDateTime::now_utc() + lock_duration;
        let Some(pump) = self.inner.holder(lock_token).await else {
            return Err(lock_lost(lock_token));
        };
        match pump
            .request(|reply| PumpCommand::Extend {
                token: lock_token.token,
                until,
                reply,
            })
            .await
        {
            Some(Ok(Extension::Local(until))) => Ok(until),
            Some(Ok(Extension::NeedsBroker)) => self.inner.broker_renew(lock_token, until).await,
            Some(Err(_)) | None => Err(lock_lost(lock_token)),
        }
    }

    async fn complete(&self, lock_token: &LockToken) -> Result<(), TransportError> {
        self.inner.settle(lock_token, Settlement::Complete).await
    }

    async fn abandon(&self, lock_token: &LockToken) -> Result<(), TransportError> {
        self.inner.settle(lock_token, Settlement::Abandon).await
    }

    async fn dead_letter(&self, lock_token: &LockToken, reason: &str, description: &str) -> Result<(), TransportError> {
        self.inner
            .settle(
                lock_token,
                Settlement::DeadLetter {
                    reason: reason.to_owned(),
                    description: description.to_owned(),
                },
            )
            .await
    }

    async fn peek_dead_letters(
        &self,
        entity: &Destination,
        max: usize,
    ) -> Result<Vec<DeadLetteredMessage>, TransportError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let path = mapping::dead_letter_path(entity);
        match self.inner.peek(&path, max).await {
            Ok(messages) => {
                let mut dead: Vec<DeadLetteredMessage> = messages
                    .iter()
                    .map(|message| mapping::dead_lettered_message(entity, message))
                    .collect();
                dead.sort_by_key(|message| message.sequence);
                dead.truncate(max);
                Ok(dead)
            }
            Err(AmqpFailure::Unsupported(what)) => {
                tracing::debug!(
                    what,
                    "no $management peek here; dead letters are listed by receive and release"
                );
                self.inner.browse_dead_letters(entity, max).await
            }
            Err(failure) => Err(transport_error(&path, failure)),
        }
    }

    async fn remove_dead_letter(&self, entity: &Destination, sequence: i64) -> Result<bool, TransportError> {
        // Receive the sub-queue under a lock, complete the one message and
        // release the others once it is found (or the sub-queue is done).
        let path = mapping::dead_letter_path(entity);
        let connection = self.inner.connection().await?;
        let mut receiver = connection
            .receiver(&path)
            .await
            .map_err(|f| transport_error(&path, f))?;
        let mut others = Vec::new();
        let mut found = false;
        let mut failure = None;
        while !found && others.len() < DEAD_LETTER_SCAN_LIMIT {
            match take_deliveries(&mut receiver, 64, self.inner.options.receive_wait).await {
                Ok(batch) if batch.is_empty() => break,
                Ok(batch) => {
                    for delivery in batch {
                        if !found && mapping::sequence_number(delivery.message()) == Some(sequence) {
                            if let Err(err) = receiver.accept(&delivery).await {
                                failure = Some(TransportError::Unavailable(format!(
                                    "complete dead letter {sequence} of `{path}`: {err}"
                                )));
                            } else {
                                found = true;
                            }
                        } else {
                            others.push(delivery);
                        }
                    }
                }
                Err(err) => {
                    failure = Some(transport_error(&path, err));
                    break;
                }
            }
        }
        for delivery in &others {
            let _ = receiver.release(delivery).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), receiver.close()).await;
        match failure {
            Some(err) => Err(err),
            None => Ok(found),
        }
    }

    async fn depth(&self, entity: &Destination) -> Result<u64, TransportError> {
        let path = match entity {
            // A topic keeps nothing of its own: its subscriptions do.
            Destination::Topic(_) => return Ok(0),
            other => other.path(),
        };
        let mut count = 0u64;
        let mut from_sequence = 0;
        loop {
            let request = PeekRequest {
                from_sequence,
                count: PEEK_PAGE,
                server_timeout: self.inner.options.operation_timeout,
            };
            let page = match self.inner.management_call::<_, PeekResponse>(&path, request).await {
                Ok(Some(page)) => page,
                Ok(None) => break,
                Err(AmqpFailure::Unsupported(what)) => {
                    return Err(TransportError::Unavailable(format!(
                        "depth of `{path}` counts a `$management` peek ({what}), which is not supported by this endpoint"
                    )));
                }
                Err(failure) => return Err(transport_error(&path, failure)),
            };
            let last = page
                .messages
                .iter()
                .filter_map(|bytes| mapping::decode(bytes).ok())
                .filter_map(|message| mapping::sequence_number(&message))
                .max();
            count += u64::try_from(page.messages.len()).unwrap_or_default();
            match last {
                Some(last)
                    if page.messages.len() >= usize::try_from(PEEK_PAGE).unwrap_or_default() && count < DEPTH_LIMIT =>
                {
                    from_sequence = last + 1;
                }
                _ => break,
            }
        }
        Ok(count)
    }
}

/// Messages to one entity, ready to send: batches, and scheduled messages
/// alone.
enum Chunk {
    Single(Message<fe2o3_amqp::types::messaging::Data>),
    Batch(
        Message<fe2o3_amqp::types::messaging::Batch<fe2o3_amqp::types::messaging::Data>>,
        usize,
    ),
}

impl Chunk {
    fn count(&self) -> usize {
        match self {
            Self::Single(_) => 1,
            Self::Batch(_, count) => *count,
        }
    }

    async fn send(self, sender: &mut Sender) -> Result<Outcome, fe2o3_amqp::link::SendError> {
        match self {
            Self::Single(message) => sender.send(Sendable::builder().message(message).build()).await,
            Self::Batch(message, _) => {
                sender
                    .send(
                        Sendable::builder()
                            .message(message)
                            .message_format(BATCH_MESSAGE_FORMAT)
                            .build(),
                    )
                    .await
            }
        }
    }
}

/// Splits messages to one entity into sends: consecutive unscheduled
/// messages share a batch up to `limit` bytes.
fn chunks(messages: &[OutboundMessage], limit: usize) -> Result<Vec<Chunk>, serde_amqp::Error> {
    // Section overhead per batched message, and room for the envelope.
    const PER_MESSAGE: usize = 16;
    const ENVELOPE: usize = 512;
    let mut out = Vec::new();
    let mut pending: Vec<(Message<fe2o3_amqp::types::messaging::Data>, Vec<u8>)> = Vec::new();
    let mut pending_bytes = 0;
    let flush =
        |pending: &mut Vec<(Message<fe2o3_amqp::types::messaging::Data>, Vec<u8>)>, out: &mut Vec<Chunk>| match pending
            .len()
        {
            0 => {}
            1 => {
                if let Some((message, _)) = pending.pop() {
                    out.push(Chunk::Single(message));
                }
            }
            count => {
                let first = pending[0].0.clone();
                let encoded = pending.drain(..).map(|(_, bytes)| bytes).collect();
                out.push(Chunk::Batch(mapping::batch_message(&first, encoded), count));
            }
        };
    for message in messages {
        let amqp = mapping::outbound_message(message);
        if message.scheduled_at.is_some() {
            flush(&mut pending, &mut out);
            pending_bytes = 0;
            out.push(Chunk::Single(amqp));
            continue;
        }
        let encoded = mapping::encode(&amqp)?;
        let size = encoded.len() + PER_MESSAGE;
        if !pending.is_empty() && pending_bytes + size + ENVELOPE > limit {
            flush(&mut pending, &mut out);
            pending_bytes = 0;
        }
        pending_bytes += size;
        pending.push((amqp, encoded));
    }
    flush(&mut pending, &mut out);
    Ok(out)
}

/// How a held message is settled.
#[derive(Debug)]
enum Settlement {
    Complete,
    Abandon,
    DeadLetter { reason: String, description: String },
}

#[derive(Debug)]
enum SettleError {
    LockLost,
    Failed(AmqpFailure),
}

#[derive(Debug)]
enum Extension {
    /// Renewed locally, within the broker's lock.
    Local(OffsetDateTime),
    /// The broker's lock ends first: renew it through `$management`.
    NeedsBroker,
}

enum PumpCommand {
    Take {
        max: usize,
        lock_duration: Duration,
        reply: oneshot::Sender<Vec<ReceivedMessage>>,
    },
    Settle {
        token: Uuid,
        settlement: Settlement,
        reply: oneshot::Sender<Result<(), SettleError>>,
    },
    Extend {
        token: Uuid,
        until: OffsetDateTime,
        reply: oneshot::Sender<Result<Extension, SettleError>>,
    },
    Renewed {
        token: Uuid,
        broker_until: OffsetDateTime,
        until: OffsetDateTime,
        reply: oneshot::Sender<Result<OffsetDateTime, SettleError>>,
    },
    Release {
        reply: oneshot::Sender<()>,
    },
}

/// The handle of a receiver link's pump task.
struct ReceiverPump {
    generation: u64,
    commands: mpsc::Sender<PumpCommand>,
    ready: watch::Receiver<usize>,
    _task: AbortOnDropHandle<()>,
}

impl ReceiverPump {
    fn start(entity: Destination, receiver: Receiver, prefetch: u32, generation: u64) -> Self {
        let (commands, inbox) = mpsc::channel(64);
        let (ready_tx, ready) = watch::channel(0);
        let state = PumpState {
            entity,
            receiver,
            prefetch: prefetch.max(1),
            buffer: VecDeque::new(),
            held: HashMap::new(),
            ready: ready_tx,
        };
        let task = AbortOnDropHandle::new(tokio::spawn(state.run(inbox)));
        Self {
            generation,
            commands,
            ready,
            _task: task,
        }
    }

    fn is_closed(&self) -> bool {
        self.commands.is_closed()
    }

    async fn request<R>(&self, make: impl FnOnce(oneshot::Sender<R>) -> PumpCommand) -> Option<R> {
        let (reply, answer) = oneshot::channel();
        self.commands.send(make(reply)).await.ok()?;
        answer.await.ok()
    }

    /// Waits until a message is buffered, the pump stops, or `limit` passes.
    /// True when messages are buffered.
    async fn wait_ready(&self, limit: Duration) -> bool {
        let mut ready = self.ready.clone();
        matches!(
            tokio::time::timeout(limit, ready.wait_for(|count| *count > 0)).await,
            Ok(Ok(_))
        )
    }
}

struct Buffered {
    info: DeliveryInfo,
    incoming: Incoming,
}

struct Held {
    info: DeliveryInfo,
    broker_until: Option<OffsetDateTime>,
    local_until: OffsetDateTime,
}

struct PumpState {
    entity: Destination,
    receiver: Receiver,
    prefetch: u32,
    buffer: VecDeque<Buffered>,
    held: HashMap<Uuid, Held>,
    ready: watch::Sender<usize>,
}

fn instant_at(at: OffsetDateTime) -> Instant {
    let left = at - OffsetDateTime::now_utc();
    Instant::now() + Duration::try_from(left).unwrap_or(Duration::ZERO)
}

impl PumpState {
    async fn run(mut self, mut inbox: mpsc::Receiver<PumpCommand>) {
        let path = self.entity.path();
        let reason = loop {
            if let Err(failure) = self.top_up_credit().await {
                break failure;
            }
            let deadline = self.next_deadline();
            tokio::select! {
                biased;
                command = inbox.recv() => match command {
                    Some(command) => {
                        if let Err(failure) = self.handle(command).await {
                            break failure;
                        }
                    }
                    None => break AmqpFailure::Link("the transport was dropped".into()),
                },
                delivery = self.receiver.recv::<Body<Value>>() => match delivery {
                    Ok(delivery) => self.buffer_delivery(delivery),
                    Err(err) => break from_recv(&format!("receive from `{path}`"), &err),
                },
                () = tokio::time::sleep_until(deadline.map_or_else(far_future, instant_at)), if deadline.is_some() => {
                    if let Err(failure) = self.expire().await {
                        break failure;
                    }
                }
            }
        };
        tracing::info!(path, reason = %reason, held = self.held.len(), "receiver link closed");
    }

    /// Gives the link credit up to `prefetch` minus what is buffered or held.
    async fn top_up_credit(&mut self) -> Result<(), AmqpFailure> {
        let outstanding = u32::try_from(self.buffer.len() + self.held.len()).unwrap_or(u32::MAX);
        let desired = self.prefetch.saturating_sub(outstanding);
        let current = self.receiver.credit();
        if desired > current && (current == 0 || desired - current >= (self.prefetch / 2).max(1)) {
            self.receiver
                .set_credit(desired)
                .await
                .map_err(|err| AmqpFailure::Link(format!("give credit on `{}`: {err}", self.entity)))?;
        }
        Ok(())
    }

    fn publish_ready(&self) {
        self.ready.send_replace(self.buffer.len());
    }

    fn buffer_delivery(&mut self, delivery: Delivery<Body<Value>>) {
        let info = DeliveryInfo::from(&delivery);
        let tag = delivery.delivery_tag().to_vec();
        let message = delivery.into_message();
        let token = mapping::lock_token(&message, &tag).unwrap_or_else(Uuid::new_v4);
        let incoming = mapping::received_message(&self.entity, token, &message, OffsetDateTime::now_utc());
        self.buffer.push_back(Buffered { info, incoming });
        self.publish_ready();
    }

    /// The next time a lock needs attention.
    fn next_deadline(&self) -> Option<OffsetDateTime> {
        let held = self.held.values().map(|held| held.local_until);
        let buffered = self
            .buffer
            .iter()
            .filter_map(|buffered| buffered.incoming.broker_locked_until)
            .map(|until| until - STALE_LOCK_MARGIN);
        held.chain(buffered).min()
    }

    async fn handle(&mut self, command: PumpCommand) -> Result<(), AmqpFailure> {
        let now = OffsetDateTime::now_utc();
        match command {
            PumpCommand::Take {
                max,
                lock_duration,
                reply,
            } => {
                let mut taken = Vec::new();
                while taken.len() < max {
                    let Some(buffered) = self.buffer.pop_front() else { break };
                    let broker_until = buffered.incoming.broker_locked_until;
                    if broker_until.is_some_and(|until| until <= now + STALE_LOCK_MARGIN) {
                        self.dispose_released(&buffered.info).await?;
                        continue;
                    }
                    let mut local_until = now + lock_duration;
                    if let Some(until) = broker_until {
                        local_until = local_until.min(until);
                    }
                    let mut message = buffered.incoming.message;
                    message.locked_until = local_until;
                    self.held.insert(
                        message.lock.token,
                        Held {
                            info: buffered.info,
                            broker_until,
                            local_until,
                        },
                    );
                    taken.push(message);
                }
                self.publish_ready();
                let _ = reply.send(taken);
            }
            PumpCommand::Settle {
                token,
                settlement,
                reply,
            } => {
                let Some(held) = self.held.remove(&token) else {
                    let _ = reply.send(Err(SettleError::LockLost));
                    return Ok(());
                };
                if held.local_until <= now {
                    self.expire_one(&held, now).await?;
                    let _ = reply.send(Err(SettleError::LockLost));
                    return Ok(());
                }
                let result = match settlement {
                    Settlement::Complete => self.receiver.accept(held.info.clone()).await,
                    Settlement::Abandon => self.receiver.modify(held.info.clone(), abandon_outcome()).await,
                    Settlement::DeadLetter { reason, description } => {
                        self.receiver
                            .reject(held.info.clone(), dead_letter_outcome(&reason, &description).error)
                            .await
                    }
                };
                if let Err(err) = result {
                    let failure = AmqpFailure::Link(format!("settle on `{}`: {err}", self.entity));
                    let _ = reply.send(Err(SettleError::Failed(failure.clone())));
                    return Err(failure);
                }
                let _ = reply.send(Ok(()));
            }
            PumpCommand::Extend { token, until, reply } => {
                let answer = match self.held.get_mut(&token) {
                    Some(held) if held.local_until > now => match held.broker_until {
                        Some(broker) if until > broker - BROKER_RENEW_MARGIN => Ok(Extension::NeedsBroker),
                        _ => {
                            held.local_until = until;
                            Ok(Extension::Local(until))
                        }
                    },
                    _ => Err(SettleError::LockLost),
                };
                let _ = reply.send(answer);
            }
            PumpCommand::Renewed {
                token,
                broker_until,
                until,
                reply,
            } => {
                let answer = match self.held.get_mut(&token) {
                    Some(held) => {
                        held.broker_until = Some(broker_until);
                        held.local_until = until.min(broker_until);
                        Ok(held.local_until)
                    }
                    None => Err(SettleError::LockLost),
                };
                let _ = reply.send(answer);
            }
            PumpCommand::Release { reply } => {
                let buffered: Vec<Buffered> = self.buffer.drain(..).collect();
                for buffered in buffered {
                    self.dispose_released(&buffered.info).await?;
                }
                let held: Vec<Held> = self.held.drain().map(|(_, held)| held).collect();
                for held in held {
                    self.dispose_released(&held.info).await?;
                }
                self.publish_ready();
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    async fn dispose_released(&self, info: &DeliveryInfo) -> Result<(), AmqpFailure> {
        self.receiver
            .release(info.clone())
            .await
            .map_err(|err| AmqpFailure::Link(format!("release on `{}`: {err}", self.entity)))
    }

    /// A held lock that ran out: abandon it at the broker while the broker
    /// still holds it (bosun's shorter lock), else just forget it.
    async fn expire_one(&self, held: &Held, now: OffsetDateTime) -> Result<(), AmqpFailure> {
        if held.broker_until.is_none_or(|until| until > now) {
            self.receiver
                .modify(held.info.clone(), abandon_outcome())
                .await
                .map_err(|err| AmqpFailure::Link(format!("abandon on `{}`: {err}", self.entity)))
        } else {
            self.dispose_released(&held.info).await
        }
    }

    async fn expire(&mut self) -> Result<(), AmqpFailure> {
        let now = OffsetDateTime::now_utc();
        let expired: Vec<Uuid> = self
            .held
            .iter()
            .filter(|(_, held)| held.local_until <= now)
            .map(|(token, _)| *token)
            .collect();
        for token in expired {
            if let Some(held) = self.held.remove(&token) {
                self.expire_one(&held, now).await?;
            }
        }
        let mut kept = VecDeque::with_capacity(self.buffer.len());
        while let Some(buffered) = self.buffer.pop_front() {
            if buffered
                .incoming
                .broker_locked_until
                .is_some_and(|until| until <= now + STALE_LOCK_MARGIN)
            {
                self.dispose_released(&buffered.info).await?;
            } else {
                kept.push_back(buffered);
            }
        }
        self.buffer = kept;
        self.publish_ready();
        Ok(())
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(24 * 3600)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bosun_contracts::routing::EVENTS_TOPIC;

    use super::*;
    use crate::ports::behaviour::transport as behaviour;

    fn outbound(id: &str, scheduled: bool, size: usize) -> OutboundMessage {
        OutboundMessage {
            destination: Destination::Queue("commit".into()),
            broker_message_id: id.into(),
            message_type: Some("CreateCommit".into()),
            correlation_id: None,
            body: vec![b'x'; size],
            scheduled_at: scheduled.then(OffsetDateTime::now_utc),
        }
    }

    #[test]
    fn sends_are_batched_by_size_and_scheduled_messages_go_alone() {
        let messages = vec![
            outbound("a", false, 100),
            outbound("b", false, 100),
            outbound("later", true, 100),
            outbound("c", false, 100),
        ];
        let sent = chunks(&messages, 64 * 1024).unwrap();
        assert_eq!(sent.iter().map(Chunk::count).collect::<Vec<_>>(), [2, 1, 1]);
        assert!(matches!(sent[0], Chunk::Batch(..)));
        let big = vec![
            outbound("a", false, 40_000),
            outbound("b", false, 40_000),
            outbound("c", false, 40_000),
        ];
        let sent = chunks(&big, 100 * 1024).unwrap();
        assert_eq!(sent.iter().map(Chunk::count).collect::<Vec<_>>(), [2, 1]);
        let huge = vec![outbound("a", false, 300_000)];
        assert_eq!(
            chunks(&huge, 256 * 1024).unwrap().len(),
            1,
            "sent alone, the broker decides"
        );
    }

    #[test]
    fn reconnect_backoff_grows_to_its_cap() {
        let options = ServiceBusOptions::default();
        for failures in 1..40 {
            let delay = backoff(&options, failures);
            assert!(
                delay >= options.reconnect_min && delay <= options.reconnect_max,
                "{failures}: {delay:?}"
            );
        }
        assert!(backoff(&options, 1) <= options.reconnect_min);
    }

    /// The tests below share the namespace's entities: one at a time.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

    /// The namespace or emulator under test: `BOSUN_TEST_SERVICEBUS` holds
    /// its connection string. Opt-in: without it (CI included) the suite
    /// does not run.
    fn service_bus_under_test() -> Option<(ServiceBusEndpoint, TokenSource)> {
        let Some(text) = std::env::var("BOSUN_TEST_SERVICEBUS")
            .ok()
            .filter(|text| !text.trim().is_empty())
        else {
            eprintln!(
                "skipped: BOSUN_TEST_SERVICEBUS is not set; the behaviour suite runs against Service Bus only when it \\
                 holds a namespace or emulator connection string"
            );
            return None;
        };
        let endpoint = ServiceBusEndpoint::from_connection_string(&text)
            .unwrap_or_else(|err| panic!("BOSUN_TEST_SERVICEBUS is not a usable connection string: {err}"));
        let tokens = TokenSource::for_endpoint(&endpoint).unwrap_or_else(|err| panic!("BOSUN_TEST_SERVICEBUS: {err}"));
        Some((endpoint, tokens))
    }

    fn test_options() -> ServiceBusOptions {
        ServiceBusOptions {
            send_timeout: Duration::from_secs(10),
            operation_timeout: Duration::from_secs(10),
            ..ServiceBusOptions::default()
        }
    }

    /// The entities the behaviours use, and the dead-letter sub-queue they fill.
    fn suite_paths() -> Vec<String> {
        let mut paths = vec!["commit".to_owned(), "commit/$DeadLetterQueue".to_owned()];
        for subscription in [
            "release-orchestration",
            "container-build",
            "package-publishing",
            "pull-request",
            "gitops-sync",
        ] {
            paths.push(format!("{EVENTS_TOPIC}/subscriptions/{subscription}"));
        }
        paths
    }

    /// The suite's message ids are the same in every behaviour and every
    /// run, and a namespace remembers ids for duplicate detection: this
    /// wrapper gives each behaviour run ids of its own and hides them again.
    struct RunScoped {
        inner: ServiceBusTransport,
        suffix: String,
    }

    impl RunScoped {
        fn strip(&self, id: String) -> String {
            id.strip_suffix(&self.suffix).map(str::to_owned).unwrap_or(id)
        }
    }

    #[async_trait]
    impl Transport for RunScoped {
        async fn ensure_topology(&self, topology: &Topology) -> Result<(), TransportError> {
            self.inner.ensure_topology(topology).await
        }

        async fn send(&self, messages: Vec<OutboundMessage>) -> Result<(), TransportError> {
            let messages = messages
                .into_iter()
                .map(|mut message| {
                    message.broker_message_id.push_str(&self.suffix);
                    message
                })
                .collect();
            self.inner.send(messages).await
        }

        async fn receive(
            &self,
            entity: &Destination,
            max: usize,
            lock_duration: Duration,
        ) -> Result<Vec<ReceivedMessage>, TransportError> {
            let mut received = self.inner.receive(entity, max, lock_duration).await?;
            for message in &mut received {
                message.broker_message_id = self.strip(std::mem::take(&mut message.broker_message_id));
            }
            Ok(received)
        }

        async fn wait_for_messages(&self, entity: &Destination, timeout: Duration) {
            self.inner.wait_for_messages(entity, timeout).await;
        }

        async fn renew_lock(
            &self,
            lock: &LockToken,
            lock_duration: Duration,
        ) -> Result<OffsetDateTime, TransportError> {
            self.inner.renew_lock(lock, lock_duration).await
        }

        async fn complete(&self, lock: &LockToken) -> Result<(), TransportError> {
            self.inner.complete(lock).await
        }

        async fn abandon(&self, lock: &LockToken) -> Result<(), TransportError> {
            self.inner.abandon(lock).await
        }

        async fn dead_letter(&self, lock: &LockToken, reason: &str, description: &str) -> Result<(), TransportError> {
            self.inner.dead_letter(lock, reason, description).await
        }

        async fn peek_dead_letters(
            &self,
            entity: &Destination,
            max: usize,
        ) -> Result<Vec<DeadLetteredMessage>, TransportError> {
            let mut dead = self.inner.peek_dead_letters(entity, max).await?;
            for message in &mut dead {
                message.broker_message_id = self.strip(std::mem::take(&mut message.broker_message_id));
            }
            Ok(dead)
        }

        async fn remove_dead_letter(&self, entity: &Destination, sequence: i64) -> Result<bool, TransportError> {
            self.inner.remove_dead_letter(entity, sequence).await
        }

        async fn depth(&self, entity: &Destination) -> Result<u64, TransportError> {
            self.inner.depth(entity).await
        }
    }

    #[derive(Debug)]
    enum Verdict {
        Passed,
        NotSupported(String),
        NotRun(String),
        Failed(String),
    }

    fn verdict_of(result: Result<Result<(), tokio::task::JoinError>, tokio::time::error::Elapsed>) -> Verdict {
        match result {
            Ok(Ok(())) => Verdict::Passed,
            Ok(Err(join)) => {
                let message = match join.try_into_panic() {
                    Ok(panic) => panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
                        .unwrap_or_else(|| "panicked".to_owned()),
                    Err(join) => join.to_string(),
                };
                if message.contains("not supported by this endpoint") {
                    Verdict::NotSupported(message)
                } else {
                    Verdict::Failed(message)
                }
            }
            Err(_) => Verdict::Failed("no result within 120 s".to_owned()),
        }
    }

    async fn fresh_transport(
        endpoint: &ServiceBusEndpoint,
        tokens: &TokenSource,
    ) -> Result<ServiceBusTransport, String> {
        let transport = ServiceBusTransport::connect(endpoint.clone(), tokens.clone(), test_options())
            .await
            .map_err(|err| format!("connect: {err}"))?;
        for path in suite_paths() {
            transport
                .drain(&path)
                .await
                .map_err(|err| format!("empty `{path}` first: {err}"))?;
        }
        Ok(transport)
    }

    async fn run_behaviour(endpoint: &ServiceBusEndpoint, tokens: &TokenSource, name: &'static str) -> Verdict {
        let transport = match fresh_transport(endpoint, tokens).await {
            Ok(transport) => transport,
            Err(err) => return Verdict::Failed(err),
        };
        let scoped = Arc::new(RunScoped {
            inner: transport.clone(),
            suffix: format!("@{}", &Uuid::new_v4().simple().to_string()[..8]),
        });
        let task = tokio::spawn(async move { behaviour::run_one(name, scoped.as_ref()).await });
        let verdict = verdict_of(tokio::time::timeout(Duration::from_secs(120), task).await);
        transport.close().await;
        verdict
    }

    /// A renewal that must reach the broker's `$management` node.
    async fn broker_renewal(endpoint: &ServiceBusEndpoint, tokens: &TokenSource) -> Verdict {
        let transport = match fresh_transport(endpoint, tokens).await {
            Ok(transport) => transport,
            Err(err) => return Verdict::Failed(err),
        };
        let probe = transport.clone();
        let task = tokio::spawn(async move {
            let queue = Destination::Queue("commit".into());
            let id = format!("renew@{}", Uuid::new_v4().simple());
            probe
                .send(vec![behaviour::outbound(queue.clone(), &id, "CreateCommit")])
                .await
                .unwrap();
            let received = probe.receive(&queue, 1, Duration::from_secs(30)).await.unwrap();
            assert_eq!(received.len(), 1, "the probe message arrives");
            let until = probe.renew_lock_at_broker(&received[0].lock).await.unwrap();
            assert!(
                until > OffsetDateTime::now_utc(),
                "the broker's lock was extended: {until}"
            );
            probe.complete(&received[0].lock).await.unwrap();
        });
        let verdict = verdict_of(tokio::time::timeout(Duration::from_secs(120), task).await);
        transport.close().await;
        verdict
    }

    /// The behaviour suite against the namespace or emulator named by
    /// `BOSUN_TEST_SERVICEBUS`, one behaviour at a time on emptied
    /// entities, with a report. An operation the endpoint lacks is reported
    /// as not supported by this endpoint, not counted as passed; any other
    /// failure fails the test. `BOSUN_TEST_SERVICEBUS_MAX_DELIVERY_COUNT`
    /// (default 10) is the maximum delivery count the entities were created
    /// with: a behaviour that needs another is reported, not run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn service_bus_passes_the_behaviour_suite() {
        let Some((endpoint, tokens)) = service_bus_under_test() else {
            return;
        };
        let _serial = ONE_AT_A_TIME.lock().await;
        let entity_max_delivery_count: u32 = std::env::var("BOSUN_TEST_SERVICEBUS_MAX_DELIVERY_COUNT")
            .ok()
            .map(|text| {
                text.parse()
                    .expect("BOSUN_TEST_SERVICEBUS_MAX_DELIVERY_COUNT is a number")
            })
            .unwrap_or(10);
        let mut report: Vec<(&str, Verdict)> = Vec::new();
        for (name, max_delivery_count) in behaviour::BEHAVIOURS {
            let verdict = if *max_delivery_count == entity_max_delivery_count {
                run_behaviour(&endpoint, &tokens, name).await
            } else {
                Verdict::NotRun(format!(
                    "needs entities with max delivery count {max_delivery_count}; these have \
                     {entity_max_delivery_count} (an entity property; set \
                     BOSUN_TEST_SERVICEBUS_MAX_DELIVERY_COUNT to what they have)"
                ))
            };
            eprintln!("service bus behaviour {name}: {verdict:?}");
            report.push((name, verdict));
        }
        let verdict = broker_renewal(&endpoint, &tokens).await;
        eprintln!("service bus behaviour broker_renew_lock: {verdict:?}");
        report.push(("broker_renew_lock", verdict));
        eprintln!("\nService Bus behaviour suite against {}:", endpoint.host);
        for (name, verdict) in &report {
            let line = match verdict {
                Verdict::Passed => "passed".to_owned(),
                Verdict::NotSupported(why) => format!("NOT SUPPORTED by this endpoint: {why}"),
                Verdict::NotRun(why) => format!("not run: {why}"),
                Verdict::Failed(why) => format!("FAILED: {why}"),
            };
            eprintln!("  {name:<36} {line}");
        }
        let failed: Vec<&str> = report
            .iter()
            .filter(|(_, verdict)| matches!(verdict, Verdict::Failed(_)))
            .map(|(name, _)| *name)
            .collect();
        assert!(failed.is_empty(), "behaviours failed against Service Bus: {failed:?}");
    }

    /// A TCP proxy in front of the emulator that can hold back what the
    /// broker sends (a send then hangs) or cut every connection.
    struct Proxy {
        port: u16,
        hold: watch::Sender<bool>,
        cut: watch::Sender<u64>,
        _accept: AbortOnDropHandle<()>,
    }

    async fn forward(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        mut hold: Option<watch::Receiver<bool>>,
        mut cut: watch::Receiver<u64>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = tokio::select! {
                read = from.read(&mut buffer) => read,
                _ = cut.changed() => return,
            };
            let Ok(read) = read else { return };
            if read == 0 {
                return;
            }
            if let Some(hold) = hold.as_mut() {
                tokio::select! {
                    _ = hold.wait_for(|held| !*held) => {},
                    _ = cut.changed() => return,
                }
            }
            if to.write_all(&buffer[..read]).await.is_err() {
                return;
            }
        }
    }

    async fn proxy(target: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (hold, _) = watch::channel(false);
        let (cut, _) = watch::channel(0u64);
        let (hold_for_loop, cut_for_loop) = (hold.clone(), cut.clone());
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                    continue;
                };
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                let (client_read, client_write) = inbound.into_split();
                let (broker_read, broker_write) = outbound.into_split();
                tokio::spawn(forward(client_read, broker_write, None, cut_for_loop.subscribe()));
                tokio::spawn(forward(
                    broker_read,
                    client_write,
                    Some(hold_for_loop.subscribe()),
                    cut_for_loop.subscribe(),
                ));
            }
        });
        Proxy {
            port,
            hold,
            cut,
            _accept: AbortOnDropHandle::new(accept),
        }
    }

    /// The send hazard and a dropped connection, through a proxy in front of
    /// the emulator: a send whose outcome never comes fails within the send
    /// timeout (not hanging), the retry goes out on a new link, a cut
    /// connection is reopened, and duplicate detection leaves each message
    /// once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hung_send_times_out_and_a_dropped_connection_is_reopened() {
        let Some((endpoint, tokens)) = service_bus_under_test() else {
            return;
        };
        if !endpoint.emulator {
            eprintln!("skipped: the proxy test needs the plain-AMQP emulator");
            return;
        }
        let _serial = ONE_AT_A_TIME.lock().await;
        let proxy = proxy(format!("{}:{}", endpoint.host, endpoint.amqp_port)).await;
        let proxied = ServiceBusEndpoint {
            amqp_port: proxy.port,
            ..endpoint.clone()
        };
        let options = ServiceBusOptions {
            send_timeout: Duration::from_secs(2),
            operation_timeout: Duration::from_secs(5),
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_millis(500),
            ..ServiceBusOptions::default()
        };
        let transport = ServiceBusTransport::connect(proxied, tokens, options).await.unwrap();
        transport.drain("commit").await.unwrap();
        let queue = Destination::Queue("commit".into());
        let run = Uuid::new_v4().simple().to_string();
        let id = |n: u32| format!("hazard-{n}@{run}");
        transport
            .send(vec![behaviour::outbound(queue.clone(), &id(1), "CreateCommit")])
            .await
            .unwrap();

        // The broker's answers are held back: the send must give up in time.
        proxy.hold.send_replace(true);
        let started = std::time::Instant::now();
        let hung = transport
            .send(vec![behaviour::outbound(queue.clone(), &id(2), "CreateCommit")])
            .await;
        let waited = started.elapsed();
        assert!(matches!(hung, Err(TransportError::Unavailable(_))), "{hung:?}");
        assert!(waited < Duration::from_secs(6), "the send waited {waited:?}");
        proxy.hold.send_replace(false);
        // The host's retry: same message id, new link.
        transport
            .send(vec![behaviour::outbound(queue.clone(), &id(2), "CreateCommit")])
            .await
            .unwrap();

        // Every connection is cut: the transport reconnects with backoff.
        proxy.cut.send_modify(|generation| *generation += 1);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            match transport
                .send(vec![behaviour::outbound(queue.clone(), &id(3), "CreateCommit")])
                .await
            {
                Ok(()) => break,
                Err(err) => {
                    assert!(std::time::Instant::now() < deadline, "no reconnection: {err}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }

        let generation = transport.inner.state.lock().await.generation;
        assert!(generation >= 2, "a new connection was opened (generation {generation})");

        let mut ids = Vec::new();
        for _ in 0..10 {
            let received = transport.receive(&queue, 10, Duration::from_secs(30)).await.unwrap();
            if received.is_empty() && ids.len() >= 3 {
                break;
            }
            for message in received {
                ids.push(message.broker_message_id.clone());
                transport.complete(&message.lock).await.unwrap();
            }
        }
        ids.sort();
        assert_eq!(ids, [id(1), id(2), id(3)], "each message once, none lost");
        transport.close().await;
    }
}
