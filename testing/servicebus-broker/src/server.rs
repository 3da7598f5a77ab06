//! The AMQP side of the broker: the accept loop, one task per connection,
//! session and link, on `fe2o3-amqp`'s listener (`ConnectionAcceptor`,
//! `SessionAcceptor`, `LinkAcceptor`).
//!
//! - SASL: ANONYMOUS and MSSBCBS (the token comes later on `$cbs`), or
//!   PLAIN with the key name and key.
//! - A link to `$cbs` or `<entity>/$management` is a request/response
//!   node ([`crate::requests`]); a response goes to the session's link whose
//!   target is the request's `reply-to`, or without one (pyamqp) the link
//!   whose target is the node.
//! - A link the client sends on enqueues to a queue or topic; a batch
//!   (message format `0x80013700`) is enqueued as its messages, all or none.
//! - A link the client receives on (receiver settle mode second, peek-lock)
//!   gets messages under a lock and waits for the outcome of each: accepted
//!   completes, modified abandons, released gives back, rejected
//!   dead-letters. A pre-settled receiver (sender settle mode settled) is
//!   receive-and-delete.
//! - A receiver with the source filter `com.microsoft:session-filter` gets
//!   a session locked before its attach is answered (with the session id
//!   in the filter and `com.microsoft:locked-until-utc`), then only that
//!   session's messages; the link is closed with
//!   `com.microsoft:session-lock-lost` when the lock expires.
//! - An attach to an entity that does not exist, or without a put token
//!   when the broker has a key, is answered and then closed with
//!   `amqp:not-found` / `amqp:unauthorized-access`.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex as SyncMutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use fe2o3_amqp::acceptor::{
    ConnectionAcceptor, LinkAcceptor, LinkEndpoint, ListenerSessionHandle, SaslAcceptor, SessionAcceptor,
    SupportedReceiverSettleModes, sasl_acceptor::SaslServerFrame,
};
use fe2o3_amqp::link::SendError;
use fe2o3_amqp::link::delivery::DeliveryFut;
use fe2o3_amqp::types::definitions::{self, AmqpError, ErrorCondition, ReceiverSettleMode, SenderSettleMode};
use fe2o3_amqp::types::messaging::message::__private::Deserializable;
use fe2o3_amqp::types::messaging::{Body, Outcome, TargetArchetype};
use fe2o3_amqp::types::performatives::Attach;
use fe2o3_amqp::types::primitives::{Array, Symbol, Value};
use fe2o3_amqp::types::sasl::{SaslCode, SaslInit, SaslOutcome, SaslResponse};
use fe2o3_amqp::{Receiver, Sendable, Sender};
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;
use time::OffsetDateTime;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

use crate::Shared;
use crate::frames::LockTokenTags;
use crate::namespace::{AmqpMessage, Refusal, Settlement, entity_key};
use crate::requests;
use crate::sas::SharedAccessKey;

/// Message format of a Service Bus batch.
pub(crate) const BATCH_MESSAGE_FORMAT: u32 = 0x8001_3700;
/// How often an idle peek-lock link looks again (besides being woken).
const POLL: Duration = Duration::from_millis(25);
/// How long a delivery waits for link credit before its lock is given back.
const CREDIT_WAIT: Duration = Duration::from_millis(100);

/// The audiences a connection has put tokens for, as entity keys.
#[derive(Debug, Default)]
pub(crate) struct Authorized(SyncMutex<Vec<String>>);

impl Authorized {
    pub(crate) fn add(&self, audience: &str) {
        lock(&self.0).push(entity_key(audience));
    }

    fn covers(&self, key: &str) -> bool {
        lock(&self.0)
            .iter()
            .any(|path| path.is_empty() || key == path || key.starts_with(&format!("{path}/")))
    }
}

/// Where a session's responses go: the client node address → its link.
pub(crate) type Replies = Arc<SyncMutex<HashMap<String, mpsc::UnboundedSender<AmqpMessage>>>>;

pub(crate) fn lock<T>(mutex: &SyncMutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// SASL as Service Bus offers it.
#[derive(Debug, Clone)]
struct ServiceBusSasl {
    key: Option<SharedAccessKey>,
}

fn outcome(code: SaslCode) -> SaslServerFrame {
    SaslServerFrame::Outcome(SaslOutcome {
        code,
        additional_data: None,
    })
}

impl SaslAcceptor for ServiceBusSasl {
    fn mechanisms(&self) -> Array<Symbol> {
        Array::from(vec![
            Symbol::from("MSSBCBS"),
            Symbol::from("PLAIN"),
            Symbol::from("ANONYMOUS"),
        ])
    }

    fn on_init(&mut self, init: SaslInit) -> SaslServerFrame {
        match init.mechanism.0.as_str() {
            "ANONYMOUS" | "MSSBCBS" => outcome(SaslCode::Ok),
            "PLAIN" => {
                let Some(key) = &self.key else {
                    return outcome(SaslCode::Ok);
                };
                let response = init.initial_response.map(|r| r.into_vec()).unwrap_or_default();
                let parts: Vec<&[u8]> = response.split(|byte| *byte == 0).collect();
                let good = parts.len() == 3 && parts[1] == key.key_name.as_bytes() && parts[2] == key.key.as_bytes();
                outcome(if good { SaslCode::Ok } else { SaslCode::Auth })
            }
            _ => outcome(SaslCode::Auth),
        }
    }

    fn on_response(&mut self, _response: SaslResponse) -> SaslServerFrame {
        outcome(SaslCode::Auth)
    }
}

/// Accepts connections until `stop` changes.
pub(crate) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let (shared, stop) = (Arc::clone(&shared), stop.clone());
                    // The management REST API shares the port: a connection
                    // that does not start with the AMQP header is HTTP.
                    tokio::spawn(async move {
                        if crate::rest::is_http(&stream).await {
                            crate::rest::serve(stream, shared, stop).await;
                        } else {
                            connection(stream, shared, stop).await;
                        }
                    });
                }
                Err(err) => tracing::warn!(error = %err, "accept failed"),
            },
            _ = stop.changed() => return,
        }
    }
}

async fn connection(stream: TcpStream, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    let acceptor = ConnectionAcceptor::builder()
        .container_id("bosun-servicebus-broker")
        .max_frame_size(65_536u32)
        .sasl_acceptor(ServiceBusSasl {
            key: shared.key.clone(),
        })
        .build();
    let mut cut = shared.cut.subscribe();
    let Ok(mut connection) = acceptor
        .accept(LockTokenTags::new(stream, Arc::clone(&shared.held)))
        .await
    else {
        return;
    };
    let authorized = Arc::new(Authorized::default());
    let (stop_sessions, sessions_stop) = watch::channel(false);
    let session_acceptor = SessionAcceptor::new();
    loop {
        tokio::select! {
            session = session_acceptor.accept(&mut connection) => match session {
                Ok(session) => {
                    let (shared, authorized) = (Arc::clone(&shared), Arc::clone(&authorized));
                    tokio::spawn(session_task(session, shared, authorized, sessions_stop.clone()));
                }
                Err(_) => break,
            },
            _ = cut.changed() => {
                let _ = stop_sessions.send(true);
                // A dropped connection: no close frame, the socket just goes.
                drop(connection);
                return;
            }
            _ = stop.changed() => break,
        }
    }
    let _ = stop_sessions.send(true);
    let _ = connection.close().await;
}

fn address_of_target(attach: &Attach) -> Option<String> {
    match attach.target.as_deref()? {
        TargetArchetype::Target(target) => target.address.clone(),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

async fn session_task(
    mut session: ListenerSessionHandle,
    shared: Arc<Shared>,
    authorized: Arc<Authorized>,
    mut stopped: watch::Receiver<bool>,
) {
    let replies: Replies = Arc::default();
    let acceptor = LinkAcceptor::builder().build();
    // The links the client sends on: Service Bus settles what it receives
    // at once (receiver settle mode first), whatever the client asks;
    // Microsoft's pyamqp asks for second and waits for a settled outcome.
    let sends_acceptor = LinkAcceptor::builder()
        .supported_receiver_settle_modes(SupportedReceiverSettleModes::First)
        .fallback_receiver_settle_mode(ReceiverSettleMode::First)
        .build();
    loop {
        let attach = tokio::select! {
            attach = session.next_incoming_attach() => attach,
            _ = stopped.changed() => return,
        };
        let Some(attach) = attach else { break };
        // Remote receiver: its source is the entity; remote sender: its target.
        let remote_sends = matches!(attach.role, definitions::Role::Sender);
        let address = if remote_sends {
            address_of_target(&attach)
        } else {
            attach.source.as_ref().and_then(|source| source.address.clone())
        };
        let client_node = address_of_target(&attach);
        let settled = matches!(attach.snd_settle_mode, SenderSettleMode::Settled);
        let key = entity_key(address.as_deref().unwrap_or_default());
        let mut attach = attach;
        // A session receiver: the session is chosen (and locked) before
        // the attach is answered, with its id in the source filter.
        let mut session_link = None;
        let mut session_acceptor = None;
        if !remote_sends
            && !is_request_node(&key)
            && let Some(requested) = session_filter(&attach)
        {
            let timeout = session_timeout(&attach);
            let chosen = tokio::select! {
                chosen = choose_session(&shared, &authorized, &key, requested, timeout) => chosen,
                _ = stopped.changed() => return,
            };
            session_link = Some(match chosen {
                Ok(locked) => {
                    set_session_filter(&mut attach, &locked.session_id);
                    let mut properties = definitions::Fields::new();
                    properties.insert(
                        Symbol::from(SESSION_LOCKED_UNTIL),
                        Value::Long(dotnet_ticks(locked.until)),
                    );
                    session_acceptor = Some(LinkAcceptor::builder().properties(properties).build());
                    SessionLink::Locked(locked)
                }
                Err(error) => SessionLink::Refused(error),
            });
        }
        let link_acceptor = match &session_acceptor {
            Some(session_acceptor) => session_acceptor,
            None if remote_sends => &sends_acceptor,
            None => &acceptor,
        };
        let Ok(endpoint) = link_acceptor.accept_incoming_attach(attach, &mut session).await else {
            if let Some(SessionLink::Locked(locked)) = &session_link {
                lock(&shared.namespace).release_session(&key, &locked.session_id, locked.owner);
            }
            continue;
        };
        let shared = Arc::clone(&shared);
        let authorized = Arc::clone(&authorized);
        let replies = Arc::clone(&replies);
        match endpoint {
            LinkEndpoint::Receiver(receiver) => {
                tokio::spawn(incoming_link(receiver, key, shared, authorized, replies));
            }
            LinkEndpoint::Sender(sender) => {
                if is_request_node(&key) {
                    // Registered here, before the next attach is read, so a
                    // request that follows at once finds its reply link.
                    // Microsoft's pyamqp sends requests without a
                    // `reply-to` and takes the answers on its link whose
                    // target is the node itself: such a link is also
                    // registered under the node's key, which
                    // `requests::serve` falls back to.
                    let client_node = client_node.unwrap_or_default();
                    let mut names = vec![client_node.clone()];
                    let node_key = entity_key(&client_node);
                    if is_request_node(&node_key) && node_key != client_node {
                        names.push(node_key);
                    }
                    let (tx, rx) = mpsc::unbounded_channel();
                    for name in &names {
                        lock(&replies).insert(name.clone(), tx.clone());
                    }
                    tokio::spawn(reply_link(sender, names, rx, tx, replies));
                } else {
                    tokio::spawn(outgoing_link(sender, key, settled, shared, authorized, session_link));
                }
            }
        }
    }
    let _ = session.end().await;
}

fn is_request_node(key: &str) -> bool {
    key == "$cbs" || key == "$management" || key.ends_with("/$management")
}

/// The AMQP error for a refusal.
pub(crate) fn amqp_error(condition: &str, description: String) -> definitions::Error {
    let condition = match condition {
        "amqp:not-found" => ErrorCondition::AmqpError(AmqpError::NotFound),
        "amqp:not-allowed" => ErrorCondition::AmqpError(AmqpError::NotAllowed),
        "amqp:unauthorized-access" => ErrorCondition::AmqpError(AmqpError::UnauthorizedAccess),
        "amqp:invalid-field" => ErrorCondition::AmqpError(AmqpError::InvalidField),
        "amqp:internal-error" => ErrorCondition::AmqpError(AmqpError::InternalError),
        other => ErrorCondition::Custom(Symbol::from(other)),
    };
    definitions::Error::new(condition, Some(description), None)
}

/// Whether a link to the entity at `key` may be used; the error to close it with if not.
fn attach_check(shared: &Shared, authorized: &Authorized, key: &str, sending: bool) -> Option<definitions::Error> {
    if let Err(refusal) = lock(&shared.namespace).check_attach(key, sending) {
        return Some(amqp_error(refusal.condition(), refusal.to_string()));
    }
    if shared.key.is_some() && !authorized.covers(key) {
        return Some(amqp_error(
            "amqp:unauthorized-access",
            format!("no token was put on $cbs for `{key}`"),
        ));
    }
    None
}

/// A link the client sends on: requests to a node, or messages to an entity.
async fn incoming_link(
    mut receiver: Receiver,
    key: String,
    shared: Arc<Shared>,
    authorized: Arc<Authorized>,
    replies: Replies,
) {
    if is_request_node(&key) {
        requests::serve(receiver, key, shared, authorized, replies).await;
        return;
    }
    if let Some(error) = attach_check(&shared, &authorized, &key, true) {
        let _ = receiver.close_with_error(error).await;
        return;
    }
    loop {
        let delivery = match receiver.recv::<Body<Value>>().await {
            Ok(delivery) => delivery,
            Err(_) => return,
        };
        let batch = *delivery.message_format() == Some(BATCH_MESSAGE_FORMAT);
        let messages = if batch {
            match unbatch(delivery.body()) {
                Ok(messages) => messages,
                Err(error) => {
                    let _ = receiver.reject(&delivery, error).await;
                    continue;
                }
            }
        } else {
            vec![delivery.message().clone()]
        };
        let result = lock(&shared.namespace).enqueue(&key, messages, OffsetDateTime::now_utc());
        match result {
            Ok(()) => {
                shared.changed.notify_waiters();
                if receiver.accept(&delivery).await.is_err() {
                    return;
                }
            }
            Err(refusal) => {
                let error = amqp_error(refusal.condition(), refusal.to_string());
                if receiver.reject(&delivery, error).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The messages of a batch: each data section is an encoded message.
fn unbatch(body: &Body<Value>) -> Result<Vec<AmqpMessage>, definitions::Error> {
    let Body::Data(sections) = body else {
        return Err(amqp_error(
            "amqp:invalid-field",
            "a batch's body must be data sections".to_owned(),
        ));
    };
    sections
        .iter()
        .map(|data| {
            serde_amqp::from_slice::<Deserializable<AmqpMessage>>(&data.0)
                .map(|decoded| decoded.0)
                .map_err(|err| amqp_error("amqp:decode-error", format!("a batched message does not decode: {err}")))
        })
        .collect()
}

/// A link responses of a request/response node go out on.
async fn reply_link(
    mut sender: Sender,
    names: Vec<String>,
    mut rx: mpsc::UnboundedReceiver<AmqpMessage>,
    own: mpsc::UnboundedSender<AmqpMessage>,
    replies: Replies,
) {
    loop {
        tokio::select! {
            response = rx.recv() => {
                let Some(response) = response else { break };
                // Not waiting for the client's outcome: pyamqp never
                // settles a response, and the next one must not wait for it.
                if sender.send_batchable(response).await.is_err() {
                    break;
                }
            }
            _ = sender.on_detach() => break,
        }
    }
    {
        let mut replies = lock(&replies);
        for name in &names {
            // Only this link's own entry: a later link may have taken the name.
            if replies.get(name).is_some_and(|tx| tx.same_channel(&own)) {
                replies.remove(name);
            }
        }
    }
    let _ = sender.close().await;
}

/// The source filter a session receiver attaches with.
const SESSION_FILTER: &str = "com.microsoft:session-filter";
/// The descriptor of Service Bus's session filter (`0x00000137:0x0000000C`).
const SESSION_FILTER_CODE: u64 = 0x0000_0137_0000_000C;
/// The attach property with the session lock's expiry (.NET ticks).
const SESSION_LOCKED_UNTIL: &str = "com.microsoft:locked-until-utc";
/// The attach property with the client's operation timeout (milliseconds).
const OPERATION_TIMEOUT: &str = "com.microsoft:timeout";
/// How long a next-available-session attach waits without a timeout given.
const DEFAULT_SESSION_WAIT: Duration = Duration::from_secs(60);
/// .NET ticks (100 ns) at the Unix epoch, as `DateTimeOffset` counts them.
const DOTNET_TICKS_AT_UNIX_EPOCH: i64 = 621_355_968_000_000_000;

/// A session receiver link's session.
#[derive(Debug)]
enum SessionLink {
    /// Locked for this link.
    Locked(LockedSession),
    /// The attach is answered and then closed with this error.
    Refused(definitions::Error),
}

#[derive(Debug)]
struct LockedSession {
    session_id: String,
    owner: Uuid,
    until: OffsetDateTime,
}

/// The session a receiver asks for: `Some(Some(id))`, `Some(None)` for the
/// next available one, `None` without a session filter.
fn session_filter(attach: &Attach) -> Option<Option<String>> {
    let filter = attach.source.as_ref()?.filter.as_ref()?;
    let value = filter.get(&Symbol::from(SESSION_FILTER))?;
    let value = match value {
        Value::Described(described) => &described.value,
        other => other,
    };
    Some(match value {
        Value::String(id) => Some(id.clone()),
        Value::Symbol(id) => Some(id.0.clone()),
        _ => None,
    })
}

/// Answers with the chosen session id in the source filter, described as
/// Service Bus's session filter.
fn set_session_filter(attach: &mut Attach, session_id: &str) {
    if let Some(source) = attach.source.as_mut() {
        source.filter.get_or_insert_with(Default::default).insert(
            Symbol::from(SESSION_FILTER),
            Value::Described(Box::new(Described {
                descriptor: Descriptor::Code(SESSION_FILTER_CODE),
                value: Value::String(session_id.to_owned()),
            })),
        );
    }
}

fn session_timeout(attach: &Attach) -> Duration {
    let timeout = attach
        .properties
        .as_ref()
        .and_then(|properties| properties.get(&Symbol::from(OPERATION_TIMEOUT)));
    match timeout {
        Some(Value::Uint(ms)) => Duration::from_millis(u64::from(*ms)),
        Some(Value::Ulong(ms)) => Duration::from_millis(*ms),
        Some(Value::Int(ms)) => Duration::from_millis(u64::try_from(*ms).unwrap_or(0)),
        Some(Value::Long(ms)) => Duration::from_millis(u64::try_from(*ms).unwrap_or(0)),
        _ => DEFAULT_SESSION_WAIT,
    }
}

fn dotnet_ticks(at: OffsetDateTime) -> i64 {
    let ticks = at.unix_timestamp_nanos() / 100;
    i64::try_from(ticks).map_or(i64::MAX, |ticks| ticks.saturating_add(DOTNET_TICKS_AT_UNIX_EPOCH))
}

/// Locks the requested session, or waits up to `timeout` for a session
/// with messages that no one holds (then `com.microsoft:timeout`, as
/// Service Bus answers).
async fn choose_session(
    shared: &Shared,
    authorized: &Authorized,
    key: &str,
    requested: Option<String>,
    timeout: Duration,
) -> Result<LockedSession, definitions::Error> {
    if let Some(error) = attach_check(shared, authorized, key, false) {
        return Err(error);
    }
    let owner = Uuid::new_v4();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        apply_outcomes(shared);
        let woken = shared.changed.notified();
        let now = OffsetDateTime::now_utc();
        let accepted = {
            let mut namespace = lock(&shared.namespace);
            namespace.expire_locks(now);
            namespace.accept_session(key, requested.as_deref(), owner, now)
        };
        match accepted {
            Ok(Some(grant)) => {
                return Ok(LockedSession {
                    session_id: grant.session_id,
                    owner,
                    until: grant.until,
                });
            }
            Ok(None) => {}
            Err(refusal) => return Err(amqp_error(refusal.condition(), refusal.to_string())),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(amqp_error(
                "com.microsoft:timeout",
                format!("no session of `{key}` with messages became available within {timeout:?}"),
            ));
        }
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep(POLL) => {}
            _ = tokio::time::sleep_until(deadline) => {}
        }
    }
}

/// A link the client receives an entity's messages on: with a session
/// locked, only that session's messages.
async fn outgoing_link(
    mut sender: Sender,
    key: String,
    settled: bool,
    shared: Arc<Shared>,
    authorized: Arc<Authorized>,
    session: Option<SessionLink>,
) {
    if let Some(error) = attach_check(&shared, &authorized, &key, false) {
        let _ = sender.close_with_error(error).await;
        if let Some(SessionLink::Locked(locked)) = &session {
            lock(&shared.namespace).release_session(&key, &locked.session_id, locked.owner);
        }
        return;
    }
    let locked = match session {
        Some(SessionLink::Refused(error)) => {
            let _ = sender.close_with_error(error).await;
            return;
        }
        Some(SessionLink::Locked(locked)) => Some(locked),
        None => {
            if lock(&shared.namespace).requires_session(&key) {
                let error = amqp_error(
                    "amqp:not-allowed",
                    format!(
                        "It is not possible for an entity that requires sessions to create a non-sessionful message receiver: `{key}`"
                    ),
                );
                let _ = sender.close_with_error(error).await;
                return;
            }
            None
        }
    };
    let lost = deliver(&mut sender, &key, settled, &shared, locked.as_ref()).await;
    if let Some(error) = lost {
        let _ = sender.close_with_error(error).await;
    }
    if let Some(locked) = &locked {
        lock(&shared.namespace).release_session(&key, &locked.session_id, locked.owner);
        shared.changed.notify_waiters();
    }
}

/// Delivers messages of `key` (of the locked session, if any) until the
/// link ends or, for a session, its lock is lost (then the link is closed
/// with `com.microsoft:session-lock-lost`).
async fn deliver(
    sender: &mut Sender,
    key: &str,
    settled: bool,
    shared: &Shared,
    session: Option<&LockedSession>,
) -> Option<definitions::Error> {
    loop {
        apply_outcomes(shared);
        let now = OffsetDateTime::now_utc();
        let next = match session {
            None => lock(&shared.namespace).lock_next(key, now),
            Some(locked) => {
                let next = lock(&shared.namespace).lock_next_in_session(key, &locked.session_id, locked.owner, now);
                match next {
                    Ok(next) => next,
                    Err(refusal) => {
                        return Some(amqp_error(refusal.condition(), refusal.to_string()));
                    }
                }
            }
        };
        let Some(locked) = next else {
            let woken = shared.changed.notified();
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep(POLL) => {}
                _ = sender.on_detach() => return None,
            }
            continue;
        };
        let token = locked.token;
        let sendable = Sendable::builder().message(locked.message).build();
        match tokio::time::timeout(CREDIT_WAIT, sender.send_batchable(sendable)).await {
            Ok(Ok(delivery)) => {
                if settled {
                    // Receive-and-delete: sent pre-settled, so it is gone.
                    settle(shared, token, Settlement::Complete);
                } else {
                    lock(&shared.pending).push((token, Box::pin(delivery)));
                }
            }
            Ok(Err(_)) => {
                settle(shared, token, Settlement::Release);
                return None;
            }
            Err(_) => {
                // No credit: the lock is given back, uncounted, until there is.
                settle(shared, token, Settlement::Release);
                let woken = shared.changed.notified();
                tokio::select! {
                    _ = woken => {}
                    _ = tokio::time::sleep(POLL) => {}
                }
            }
        }
    }
}

fn settle(shared: &Shared, token: uuid::Uuid, settlement: Settlement) {
    let result = lock(&shared.namespace).settle(token, settlement, OffsetDateTime::now_utc());
    if let Err(Refusal::LockLost) = result {
        tracing::debug!(%token, "a settlement came after the lock was lost; ignored");
    }
    shared.changed.notify_waiters();
}

/// A delivery under a lock whose outcome has not come yet.
pub(crate) type PendingDelivery = (uuid::Uuid, Pin<Box<DeliveryFut<Result<Outcome, SendError>>>>);

/// Applies every outcome that has come. fe2o3 completes a delivery's
/// outcome before it sends the settlement back (receiver settle mode
/// second), so whatever a client asks after seeing its settlement
/// confirmed sees the settlement applied, as on Service Bus: every read
/// of the namespace calls this first.
pub(crate) fn apply_outcomes(shared: &Shared) {
    let mut context = Context::from_waker(Waker::noop());
    let settled: Vec<(uuid::Uuid, Settlement)> = {
        let mut pending = lock(&shared.pending);
        let mut settled = Vec::new();
        pending.retain_mut(|(token, delivery)| match delivery.as_mut().poll(&mut context) {
            Poll::Ready(result) => {
                settled.push((*token, settlement_of(result)));
                false
            }
            Poll::Pending => true,
        });
        settled
    };
    if settled.is_empty() {
        return;
    }
    let now = OffsetDateTime::now_utc();
    let mut namespace = lock(&shared.namespace);
    for (token, settlement) in settled {
        if let Err(Refusal::LockLost) = namespace.settle(token, settlement, now) {
            tracing::debug!(%token, "a settlement came after the lock was lost; ignored");
        }
    }
    drop(namespace);
    shared.changed.notify_waiters();
}

/// What Service Bus does with a receiver's outcome.
fn settlement_of(result: Result<Outcome, SendError>) -> Settlement {
    match result {
        Ok(Outcome::Accepted(_)) => Settlement::Complete,
        Ok(Outcome::Released(_)) => Settlement::Release,
        Ok(Outcome::Modified(modified)) => {
            if modified.undeliverable_here == Some(true) {
                Settlement::Defer
            } else {
                Settlement::Abandon {
                    counted: modified.delivery_failed == Some(true),
                }
            }
        }
        Ok(Outcome::Rejected(rejected)) => dead_letter_settlement(rejected.error.as_ref()),
        #[allow(unreachable_patterns)]
        Ok(_) => Settlement::Abandon { counted: true },
        // The link went away with the message locked: the lock is given up.
        Err(_) => Settlement::Abandon { counted: true },
    }
}

/// `rejected`: Service Bus dead-letters, with the reason and description
/// from the error's info (`DeadLetterReason`, `DeadLetterErrorDescription`).
fn dead_letter_settlement(error: Option<&definitions::Error>) -> Settlement {
    let info = |name: &str| {
        error
            .and_then(|error| error.info.as_ref())
            .and_then(|info| info.get(&Symbol::from(name)))
            .and_then(|value| match value {
                Value::String(text) => Some(text.clone()),
                Value::Symbol(symbol) => Some(symbol.0.clone()),
                _ => None,
            })
    };
    let reason = info("DeadLetterReason").unwrap_or_else(|| {
        error
            .map(|error| requests::condition_text(&error.condition))
            .unwrap_or_default()
    });
    let description = info("DeadLetterErrorDescription")
        .or_else(|| error.and_then(|error| error.description.clone()))
        .unwrap_or_default();
    Settlement::DeadLetter { reason, description }
}
