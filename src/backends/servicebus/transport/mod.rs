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
//! - Readiness ([`Transport::reachable`]) asks only whether the connection
//!   is open (reconnecting when an attempt is due), never `$management`.
//! - Entities are not created here: [`Transport::ensure_topology`] does
//!   nothing, and `serve` verifies the namespace through the management
//!   client at start.
//! - Sessions: the transport is given the topology
//!   ([`ServiceBusOptions::topology`], the registry's in `serve`) and with
//!   it the session-keyed consumers. A message to one of their entities
//!   carries its saga key as its session id, and an event is sent as one
//!   copy per session subscription beside the untargeted one
//!   (`super::addressing`); their entities are received session by
//!   session, one message of a session at a time (`sessions`).
//!
//! This file holds the transport and its [`Transport`] operations; `links`
//! the connection, sender and receiver links and `$management` calls,
//! `pump` the receiver pump of a link, `sessions` the session receivers,
//! `batch` the cutting of sends into batches.

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

use super::addressing::{self, Addressed};
use super::amqp::{
    AmqpConnection, AmqpFailure, AmqpSettings, PeekRequest, PeekResponse, RenewLockRequest, RenewLockResponse,
    RenewSessionLockRequest, RenewSessionLockResponse, ResponseError, abandon_outcome, cause, classify_remote,
    dead_letter_outcome, from_management, from_recv, from_send, is_no_content,
};
use super::connection::ServiceBusEndpoint;
use super::credential::TokenSource;
use super::mapping::{self, AmqpMessage, BATCH_MESSAGE_FORMAT, Incoming};
use crate::ports::transport::{
    DeadLetteredMessage, LockToken, OutboundMessage, ReceivedMessage, Topology, Transport, TransportAdmin,
    TransportError,
};
use batch::*;
use pump::*;
use sessions::*;

mod batch;
mod links;
mod pump;
mod sessions;

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
    /// The entities and the session-keyed consumers: which sends carry a
    /// session id (and which events are copied per session subscription),
    /// which entities are received session by session. `serve` passes the
    /// registry's (`runtime::registry::topology`); the default
    /// ([`Topology::from_routing`]) has no sessions.
    pub topology: Topology,
    /// Sessions of one entity a process holds at once
    /// (`BOSUN_CONCURRENCY` in `serve`): at most this many of its messages
    /// are out, one per session.
    pub max_sessions: usize,
    /// How long the broker may wait for a session to become available
    /// before an accept comes back empty (and is made again).
    pub session_accept_wait: Duration,
    /// A session with nothing buffered or out for this long is given up,
    /// so other receivers (and other sessions) get served.
    pub session_idle: Duration,
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
            topology: Topology::from_routing(),
            max_sessions: 8,
            session_accept_wait: Duration::from_secs(5),
            session_idle: Duration::from_millis(500),
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
    /// The receivers of each session entity, by path.
    sessions: SyncMutex<HashMap<String, Arc<SessionReceivers>>>,
    /// Locks taken in a session: where they are held.
    session_locks: SyncMutex<HashMap<Uuid, SessionLock>>,
    /// The AMQP sessions begun for session receivers on a connection
    /// (its generation), not yet taken by an acceptor.
    accept_sessions: Mutex<(u64, HashMap<String, fe2o3_amqp::session::SessionHandle<()>>)>,
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
                sessions: SyncMutex::new(HashMap::new()),
                session_locks: SyncMutex::new(HashMap::new()),
                accept_sessions: Mutex::new((0, HashMap::new())),
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
        self.inner.release_sessions().await;
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

    /// The session a lock taken in one belongs to (tests).
    #[cfg(test)]
    pub(crate) fn session_of(&self, lock: &LockToken) -> Option<String> {
        self.inner.session_lock(lock.token).map(|held| held.session_id)
    }

    /// Completes every message of an entity path (test setup), session by
    /// session on an entity that requires sessions.
    #[cfg(test)]
    pub(crate) async fn drain(&self, path: &str) -> Result<usize, TransportError> {
        let connection = self.inner.connection().await?;
        if self.inner.options.topology.requires_session(&Destination::parse(path)) {
            let mut session = connection.begin_session().await.map_err(|f| transport_error(path, f))?;
            let mut drained = 0;
            while let Some((mut receiver, _)) = connection
                .session_receiver(&mut session, path, self.inner.options.receive_wait)
                .await
                .map_err(|f| transport_error(path, f))?
            {
                let batch = take_deliveries(&mut receiver, 256, self.inner.options.receive_wait)
                    .await
                    .map_err(|f| transport_error(path, f))?;
                for delivery in &batch {
                    let _ = receiver.accept(delivery).await;
                }
                drained += batch.len();
                let _ = tokio::time::timeout(Duration::from_secs(5), receiver.close()).await;
            }
            return Ok(drained);
        }
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
                    .map_err(|err| TransportError::unavailable(format!("draining `{path}`"), err))?;
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
        AmqpFailure::NotFound { .. } => TransportError::NoSuchEntity(path.to_owned()),
        failure @ (AmqpFailure::Unauthorized { .. } | AmqpFailure::Unsupported { .. }) => {
            TransportError::misconfigured(format!("using `{path}`"), failure)
        }
        other => TransportError::unavailable(format!("using `{path}`"), other),
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
        Destination::Topic(topic) => Err(TransportError::misconfigured(
            format!("receiving from `{topic}`"),
            "it is a topic: receive from one of its subscriptions",
        )),
        other => Ok(other.path()),
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
    receiver.set_credit(credit).await.map_err(|err| AmqpFailure::Link {
        text: format!("give credit: {err}"),
        source: cause(err),
    })?;
    let mut outstanding = credit;
    while deliveries.len() < max {
        if outstanding == 0 {
            let more = u32::try_from((max - deliveries.len()).min(256)).unwrap_or(256);
            receiver.set_credit(more).await.map_err(|err| AmqpFailure::Link {
                text: format!("give credit: {err}"),
                source: cause(err),
            })?;
            outstanding = more;
        }
        match tokio::time::timeout(wait, receiver.recv::<Body<Value>>()).await {
            Ok(Ok(delivery)) => {
                deliveries.push(delivery);
                outstanding -= 1;
            }
            Ok(Err(err)) => return Err(from_recv("receive", err)),
            Err(_) => break,
        }
    }
    Ok(deliveries)
}

/// Gives a scanning receiver's messages back and closes it. The credit
/// goes to zero first, and what was already on its way is taken too:
/// released with credit left, a message would be sent straight back to
/// this receiver, and closed with it, stay locked until its lock expired
/// (or, on some brokers, count a delivery).
async fn give_back(mut receiver: Receiver, mut deliveries: Vec<Delivery<Body<Value>>>) {
    /// How long messages already sent under the old credit get to arrive.
    const IN_FLIGHT: Duration = Duration::from_millis(200);
    if receiver.set_credit(0).await.is_ok() {
        while let Ok(Ok(delivery)) = tokio::time::timeout(IN_FLIGHT, receiver.recv::<Body<Value>>()).await {
            deliveries.push(delivery);
        }
    }
    for delivery in &deliveries {
        let _ = receiver.release(delivery).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), receiver.close()).await;
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
        let mut groups: Vec<(String, Vec<Addressed>)> = Vec::new();
        for message in messages
            .into_iter()
            .flat_map(|message| addressing::address(&self.inner.options.topology, message))
        {
            let path = mapping::send_target(&message.message.destination).entity_path;
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
            for chunk in
                chunks(&group, limit).map_err(|err| TransportError::unavailable(format!("sending to `{path}`"), err))?
            {
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
                            None => AmqpFailure::Rejected {
                                text: format!("Service Bus rejected {what}"),
                                source: None,
                            },
                        };
                        return Err(transport_error(&path, failure));
                    }
                    Ok(Ok(other)) => {
                        return Err(TransportError::unavailable(
                            what,
                            format!("Service Bus did not accept it: {other:?}"),
                        ));
                    }
                    Ok(Err(err)) => {
                        self.inner.drop_sender(&path, &slot);
                        return Err(transport_error(&path, connection.note(from_send(&what, err))));
                    }
                    Err(_) => {
                        self.inner.drop_sender(&path, &slot);
                        tracing::warn!(
                            path,
                            timeout_ms = self.inner.options.send_timeout.as_millis(),
                            "send timed out; the sender link is recreated"
                        );
                        return Err(TransportError::unavailable(
                            what,
                            format!(
                                "no outcome within {} ms; the link is recreated and the send must be retried",
                                self.inner.options.send_timeout.as_millis()
                            ),
                        ));
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
        if self.inner.options.topology.requires_session(entity) {
            let mut taken = self.inner.receive_sessions(entity, max, lock_duration).await?;
            self.inner.lengthen_short_locks(&mut taken, lock_duration).await;
            return Ok(taken);
        }
        let pump = self.inner.pump(entity).await?;
        let take = |pump: Arc<ReceiverPump>| async move {
            pump.request(|reply| PumpCommand::Take {
                max,
                lock_duration,
                reply,
            })
            .await
            .ok_or_else(|| {
                TransportError::unavailable(format!("receiving from `{entity}`"), "the receiver link closed")
            })
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
        if self.inner.options.topology.requires_session(entity) {
            return self.inner.wait_for_sessions(entity, timeout).await;
        }
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

    async fn is_locked(&self, lock_token: &LockToken) -> Result<bool, TransportError> {
        let Some(pump) = self.inner.holder(lock_token).await else {
            return Ok(false);
        };
        Ok(pump
            .request(|reply| PumpCommand::Holds {
                token: lock_token.token,
                reply,
            })
            .await
            .unwrap_or(false))
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

    async fn reachable(&self) -> Result<(), TransportError> {
        // The open connection, or a reconnect when one is due: no
        // `$management` call, which an endpoint may not even offer.
        self.inner.connection().await.map(|_| ())
    }
}

#[async_trait]
impl TransportAdmin for ServiceBusTransport {
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
            Err(AmqpFailure::Unsupported { text: what, .. }) => {
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
        // Credit sized to the job: a few first (the one wanted is often
        // near the front), doubling up to 64 while it is not found.
        let mut batch = 8;
        while !found && others.len() < DEAD_LETTER_SCAN_LIMIT {
            let take = take_deliveries(&mut receiver, batch, self.inner.options.receive_wait).await;
            batch = (batch * 2).min(64);
            match take {
                Ok(batch) if batch.is_empty() => break,
                Ok(batch) => {
                    for delivery in batch {
                        if !found && mapping::sequence_number(delivery.message()) == Some(sequence) {
                            if let Err(err) = receiver.accept(&delivery).await {
                                failure = Some(TransportError::unavailable(
                                    format!("completing dead letter {sequence} of `{path}`"),
                                    err,
                                ));
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
        give_back(receiver, others).await;
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
                Err(failure @ AmqpFailure::Unsupported { .. }) => {
                    return Err(TransportError::misconfigured(
                        format!("counting the messages of `{path}` (a `$management` peek)"),
                        failure,
                    ));
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

#[cfg(test)]
mod session_tests;
#[cfg(test)]
mod tests;
