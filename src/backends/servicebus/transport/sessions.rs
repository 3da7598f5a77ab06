//! Session receivers: how the transport receives from an entity that
//! requires sessions (a session-keyed consumer's queue or subscription).
//!
//! Per such entity, an acceptor task attaches session receivers to the
//! next available session (`com.microsoft:session-filter` null, the broker
//! waiting up to [`ServiceBusOptions::session_accept_wait`] for one), on an
//! AMQP session of its own (an attach that waits holds up the attaches
//! after it on its AMQP session), while the process holds fewer than
//! [`ServiceBusOptions::max_sessions`] sessions of the entity. Each accepted
//! session gets a pump ([`SessionState`]) that hands out one message at a
//! time, so a process may work on several sessions at once but never on
//! two messages of one: the broker gives a session to one receiver at a
//! time, so no other process does either. A session with nothing to do
//! for [`ServiceBusOptions::session_idle`] (at once for a message's own
//! session, `~m/<id>`, which will have no other) is given up, so other
//! sessions get served.
//!
//! A receive takes one message from each of the entity's sessions that
//! has one to take, waiting up to [`ServiceBusOptions::receive_wait`] for
//! one. Locks are the session's: a renewal beyond the broker's lock renews
//! the session lock (`com.microsoft:renew-session-lock` on `$management`),
//! and settlements go through the session's link; a session lock that is
//! gone (`com.microsoft:session-lock-lost`, or the link closed) is
//! [`TransportError::LockLost`].

use std::sync::Weak;

use fe2o3_amqp::session::SessionHandle;
use tokio::sync::Notify;

use super::*;
use crate::ports::topology::OWN_SESSION_PREFIX;

/// A session entity's receivers in this process.
pub(super) struct SessionReceivers {
    /// The connection they were accepted on.
    pub(super) generation: u64,
    /// The open sessions, each with its pump.
    pub(super) sessions: SyncMutex<Vec<SessionSlot>>,
    /// Bumped when a session has a message to take.
    pub(super) ready: watch::Sender<u64>,
    /// Notified when a session's pump ends.
    pub(super) ended: Arc<Notify>,
    /// What the acceptor last failed with (cleared by a session accepted).
    pub(super) failure: SyncMutex<Option<TransportError>>,
    /// Accepts that came back (with a session or none).
    pub(super) accepts: AtomicU64,
    /// When a session was last accepted (its first message is on its way).
    pub(super) accepted_at: SyncMutex<Option<Instant>>,
    /// The task accepting sessions for these receivers (aborted with them).
    pub(super) acceptor: SyncMutex<Option<AbortOnDropHandle<()>>>,
}

/// One open session.
pub(super) struct SessionSlot {
    /// Its session id.
    pub(super) id: String,
    pub(super) pump: Arc<ReceiverPump>,
}

/// Where a lock taken in a session is held.
#[derive(Clone)]
pub(super) struct SessionLock {
    pub(super) session_id: String,
    pub(super) pump: Arc<ReceiverPump>,
}

impl SessionReceivers {
    /// The open sessions' pumps (closed ones forgotten).
    fn open(&self) -> Vec<(String, Arc<ReceiverPump>)> {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|slot| !slot.pump.is_closed());
        sessions
            .iter()
            .map(|slot| (slot.id.clone(), Arc::clone(&slot.pump)))
            .collect()
    }
}

impl Inner {
    /// The receivers of session entity `entity`, starting its acceptor when
    /// there is none on the current connection.
    pub(super) async fn session_receivers(
        self: &Arc<Self>,
        entity: &Destination,
    ) -> Result<Arc<SessionReceivers>, TransportError> {
        let path = receive_path(entity)?;
        let connection = self.connection().await?;
        if let Some(existing) = lock(&self.sessions).get(&path)
            && existing.generation == connection.generation
        {
            return Ok(Arc::clone(existing));
        }
        let amqp_session = self.accept_session_for(&connection, &path).await;
        let receivers = Arc::new(SessionReceivers {
            generation: connection.generation,
            sessions: SyncMutex::new(Vec::new()),
            ready: watch::channel(0).0,
            ended: Arc::new(Notify::new()),
            failure: SyncMutex::new(None),
            accepts: AtomicU64::new(0),
            accepted_at: SyncMutex::new(None),
            acceptor: SyncMutex::new(None),
        });
        // Started once the receivers exist: an acceptor spawned while they
        // were being made could run at once on another thread, find its
        // weak handle not yet alive and end, so the entity would never get
        // a session (seen under load in the session tests).
        let acceptor = tokio::spawn(accept_sessions(
            Arc::downgrade(self),
            Arc::clone(&connection),
            entity.clone(),
            Arc::downgrade(&receivers),
            amqp_session,
        ));
        *lock(&receivers.acceptor) = Some(AbortOnDropHandle::new(acceptor));
        lock(&self.sessions).insert(path, Arc::clone(&receivers));
        Ok(receivers)
    }

    /// The AMQP session `path`'s acceptor attaches on. The first time on a
    /// connection, one is begun for every session entity of the topology
    /// at once: a begin made while another entity's accept waits for a
    /// session can be held up behind it (the test broker holds it), so
    /// none is begun once accepts run. `None` when it could not be begun
    /// (the acceptor begins one itself).
    async fn accept_session_for(&self, connection: &AmqpConnection, path: &str) -> Option<SessionHandle<()>> {
        let mut begun = self.accept_sessions.lock().await;
        if begun.0 != connection.generation {
            begun.0 = connection.generation;
            begun.1.clear();
            let topology = &self.options.topology;
            for entity in topology.receive_entities() {
                if !topology.requires_session(&entity) {
                    continue;
                }
                match connection.begin_session().await {
                    Ok(session) => {
                        begun.1.insert(entity.path(), session);
                    }
                    Err(failure) => {
                        tracing::warn!(path = %entity, error = %failure, "could not begin an AMQP session for session receivers");
                        break;
                    }
                }
            }
        }
        begun.1.remove(path)
    }

    /// Receives up to `max` messages of session entity `entity`, one per
    /// session, waiting up to the receive wait for one.
    pub(super) async fn receive_sessions(
        self: &Arc<Self>,
        entity: &Destination,
        max: usize,
        lock_duration: Duration,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        let receivers = self.session_receivers(entity).await?;
        let mut ready = receivers.ready.subscribe();
        let started = Instant::now();
        let mut deadline = started + self.options.receive_wait;
        // Before its first accept came back the entity's sessions are not
        // known yet: wait for it (an accept waits for a session at most
        // this long).
        let first_accept = started + self.options.session_accept_wait + self.options.operation_timeout;
        loop {
            ready.borrow_and_update();
            let mut taken = Vec::new();
            for (session_id, pump) in receivers.open() {
                if taken.len() >= max {
                    break;
                }
                let Some(messages) = pump
                    .request(|reply| PumpCommand::Take {
                        max: 1,
                        lock_duration,
                        reply,
                    })
                    .await
                else {
                    continue;
                };
                let mut locks = lock(&self.session_locks);
                for message in messages {
                    locks.insert(
                        message.lock.token,
                        SessionLock {
                            session_id: session_id.clone(),
                            pump: Arc::clone(&pump),
                        },
                    );
                    taken.push(message);
                }
            }
            if !taken.is_empty() {
                return Ok(taken);
            }
            if let Some(failure) = lock(&receivers.failure).take() {
                return Err(failure);
            }
            if tokio::time::timeout_at(deadline, ready.changed()).await.is_err() {
                if receivers.accepts.load(Ordering::SeqCst) == 0 && deadline < first_accept {
                    deadline = (deadline + self.options.receive_wait).min(first_accept);
                    continue;
                }
                // A session accepted just now: its first message gets the
                // receive wait to arrive.
                let fresh = lock(&receivers.accepted_at).map(|at| at + self.options.receive_wait);
                if let Some(until) = fresh.filter(|until| *until > deadline) {
                    deadline = until;
                    continue;
                }
                if let Some(failure) = lock(&receivers.failure).take() {
                    return Err(failure);
                }
                return Ok(Vec::new());
            }
        }
    }

    /// Waits until a session of `entity` has a message to take, or `timeout`.
    pub(super) async fn wait_for_sessions(self: &Arc<Self>, entity: &Destination, timeout: Duration) {
        match self.session_receivers(entity).await {
            Ok(receivers) => {
                let mut ready = receivers.ready.subscribe();
                ready.borrow_and_update();
                let _ = tokio::time::timeout(timeout, ready.changed()).await;
            }
            Err(_) => tokio::time::sleep(timeout).await,
        }
    }

    /// The session a lock taken in one is held in.
    pub(super) fn session_lock(&self, token: Uuid) -> Option<SessionLock> {
        lock(&self.session_locks).get(&token).cloned()
    }

    /// Forgets a settled (or lost) session lock.
    pub(super) fn forget_session_lock(&self, token: Uuid) {
        lock(&self.session_locks).remove(&token);
    }

    /// Gives every session up (what is buffered or out goes back).
    pub(super) async fn release_sessions(&self) {
        let all: Vec<Arc<SessionReceivers>> = lock(&self.sessions).drain().map(|(_, r)| r).collect();
        for receivers in all {
            for (_, pump) in receivers.open() {
                let _ = tokio::time::timeout(
                    Duration::from_secs(5),
                    pump.request(|reply| PumpCommand::Release { reply }),
                )
                .await;
            }
        }
        lock(&self.session_locks).clear();
    }
}

/// The acceptor of a session entity: keeps up to `max_sessions` sessions
/// of it, attaching receivers to the next available session.
async fn accept_sessions(
    inner: Weak<Inner>,
    connection: Arc<AmqpConnection>,
    entity: Destination,
    receivers: Weak<SessionReceivers>,
    mut amqp_session: Option<SessionHandle<()>>,
) {
    let path = entity.path();
    let mut failures = 0u32;
    loop {
        let (Some(inner), Some(state)) = (inner.upgrade(), receivers.upgrade()) else {
            return;
        };
        if !connection.is_open() {
            return;
        }
        let options = inner.options.clone();
        if state.open().len() >= options.max_sessions.max(1) {
            let ended = Arc::clone(&state.ended);
            drop((inner, state));
            let _ = tokio::time::timeout(Duration::from_secs(1), ended.notified()).await;
            continue;
        }
        let ended = Arc::clone(&state.ended);
        let ready = state.ready.clone();
        drop((inner, state));
        let session = match &mut amqp_session {
            Some(session) => session,
            None => match connection.begin_session().await {
                Ok(session) => amqp_session.insert(session),
                Err(failure) => {
                    if !note_failure(&receivers, &path, failure, &mut failures).await {
                        return;
                    }
                    continue;
                }
            },
        };
        match connection
            .session_receiver(session, &path, options.session_accept_wait)
            .await
        {
            Ok(Some((receiver, session_id))) => {
                failures = 0;
                let Some(state) = receivers.upgrade() else { return };
                let idle = if session_id.starts_with(OWN_SESSION_PREFIX) {
                    // A message's own session has no other message.
                    Duration::ZERO
                } else {
                    options.session_idle
                };
                tracing::debug!(path, session = %session_id, "session accepted");
                let pump = Arc::new(ReceiverPump::start(
                    entity.clone(),
                    receiver,
                    options.prefetch,
                    connection.generation,
                    Some(SessionState {
                        id: session_id.clone(),
                        until: None,
                        idle,
                        received: false,
                        entity_ready: ready,
                        ended,
                    }),
                ));
                lock(&state.sessions).push(SessionSlot { id: session_id, pump });
                *lock(&state.accepted_at) = Some(Instant::now());
                lock(&state.failure).take();
                state.accepts.fetch_add(1, Ordering::SeqCst);
                // Its first message may have been signalled before it was listed.
                state.ready.send_modify(|count| *count = count.wrapping_add(1));
            }
            Ok(None) => {
                failures = 0;
                if let Some(state) = receivers.upgrade() {
                    // No session has a message, and the entity answered.
                    lock(&state.failure).take();
                    state.accepts.fetch_add(1, Ordering::SeqCst);
                    state.ready.send_modify(|count| *count = count.wrapping_add(1));
                }
            }
            Err(failure) => {
                if failure.breaks_connection() {
                    amqp_session = None;
                }
                if !note_failure(&receivers, &path, failure, &mut failures).await {
                    return;
                }
            }
        }
    }
}

/// Records an acceptor's failure for the next receive to report and waits
/// before the next attempt; false when the receivers are gone.
async fn note_failure(
    receivers: &Weak<SessionReceivers>,
    path: &str,
    failure: AmqpFailure,
    failures: &mut u32,
) -> bool {
    *failures = failures.saturating_add(1);
    let error = match failure {
        AmqpFailure::Rejected { text, .. } if text.contains("amqp:not-allowed") => TransportError::misconfigured(
            format!("receiving from `{path}` through sessions"),
            format!(
                "{text}; the entity does not require sessions: it was made before bosun keyed this consumer's \
                 messages by saga, and must be drained and recreated (`bosun topology plan` lists it)"
            ),
        ),
        other => transport_error(path, other),
    };
    tracing::warn!(path, error = %error, "could not accept a session");
    let Some(state) = receivers.upgrade() else {
        return false;
    };
    *lock(&state.failure) = Some(error);
    // A receive waiting for a session reports the failure now, not after
    // its wait: the host sees each failed accept, and readiness with it.
    state.ready.send_modify(|count| *count = count.wrapping_add(1));
    drop(state);
    let delay = Duration::from_millis(100u64.saturating_mul(2u64.saturating_pow((*failures).min(6))));
    tokio::time::sleep(delay).await;
    true
}
