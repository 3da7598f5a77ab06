//! The receiver pump: one task per peek-lock link (an entity's, or one
//! session's of a session entity) that keeps the link, holds what arrives,
//! hands it out, renews and settles it on that same link, and abandons
//! what its local lock let lapse.
//!
//! A session's pump ([`SessionState`]) hands out one message at a time (the
//! next only once the one out is settled: that is what sessions are for),
//! takes its messages' broker lock to be the session's, gives the session
//! up (releases what it holds and closes the link) when it has had nothing
//! to do for its idle time or its session lock is about to end with no
//! message out, and says on its entity's `ready` signal when it has a
//! message to take.

use super::*;

/// How a held message is settled.
#[derive(Debug)]
pub(super) enum Settlement {
    Complete,
    Abandon,
    DeadLetter { reason: String, description: String },
}

#[derive(Debug)]
pub(super) enum SettleError {
    LockLost,
    Failed(AmqpFailure),
}

#[derive(Debug)]
pub(super) enum Extension {
    /// Renewed locally, within the broker's lock.
    Local(OffsetDateTime),
    /// The broker's lock ends first: renew it through `$management`.
    NeedsBroker,
}

pub(super) enum PumpCommand {
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
    /// Whether the message of `token` is held and its local lock unexpired.
    Holds {
        token: Uuid,
        reply: oneshot::Sender<bool>,
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

/// What a session's pump keeps about its session.
pub(super) struct SessionState {
    /// The session id the broker locked for this link.
    pub(super) id: String,
    /// When the session lock ends, as the broker last said (a message's
    /// `x-opt-locked-until`, a renewal).
    pub(super) until: Option<OffsetDateTime>,
    /// How long the link stays open with no message buffered or out, once
    /// a message came (before, at least [`FIRST_MESSAGE_WAIT`]: the broker
    /// locked the session for a message it is sending).
    pub(super) idle: Duration,
    /// Whether a message came on the link.
    pub(super) received: bool,
    /// Bumped when this session has a message to take.
    pub(super) entity_ready: watch::Sender<u64>,
    /// Notified when the pump ends (room for another session).
    pub(super) ended: Arc<tokio::sync::Notify>,
}

/// How long a session's link waits for its first message before it is
/// given up (the broker granted the session because it has one).
pub(super) const FIRST_MESSAGE_WAIT: Duration = Duration::from_secs(2);

/// How long a session's link, given up, waits for a delivery already on
/// its way (to release it rather than leave it locked until its lock ends).
const IN_FLIGHT_WAIT: Duration = Duration::from_millis(100);

/// The handle of a receiver link's pump task.
pub(super) struct ReceiverPump {
    pub(super) generation: u64,
    pub(super) commands: mpsc::Sender<PumpCommand>,
    pub(super) ready: watch::Receiver<usize>,
    pub(super) _task: AbortOnDropHandle<()>,
}

impl ReceiverPump {
    pub(super) fn start(
        entity: Destination,
        receiver: Receiver,
        prefetch: u32,
        generation: u64,
        session: Option<SessionState>,
    ) -> Self {
        let (commands, inbox) = mpsc::channel(64);
        let (ready_tx, ready) = watch::channel(0);
        let state = PumpState {
            entity,
            receiver,
            prefetch: prefetch.max(1),
            buffer: VecDeque::new(),
            held: HashMap::new(),
            ready: ready_tx,
            session,
        };
        let task = AbortOnDropHandle::new(tokio::spawn(state.run(inbox)));
        Self {
            generation,
            commands,
            ready,
            _task: task,
        }
    }

    pub(super) fn is_closed(&self) -> bool {
        self.commands.is_closed()
    }

    pub(super) async fn request<R>(&self, make: impl FnOnce(oneshot::Sender<R>) -> PumpCommand) -> Option<R> {
        let (reply, answer) = oneshot::channel();
        self.commands.send(make(reply)).await.ok()?;
        answer.await.ok()
    }

    /// Waits until a message is buffered, the pump stops, or `limit` passes.
    /// True when messages are buffered.
    pub(super) async fn wait_ready(&self, limit: Duration) -> bool {
        let mut ready = self.ready.clone();
        matches!(
            tokio::time::timeout(limit, ready.wait_for(|count| *count > 0)).await,
            Ok(Ok(_))
        )
    }
}

pub(super) struct Buffered {
    pub(super) info: DeliveryInfo,
    pub(super) incoming: Incoming,
}

pub(super) struct Held {
    pub(super) info: DeliveryInfo,
    pub(super) broker_until: Option<OffsetDateTime>,
    pub(super) local_until: OffsetDateTime,
}

pub(super) struct PumpState {
    pub(super) entity: Destination,
    pub(super) receiver: Receiver,
    pub(super) prefetch: u32,
    pub(super) buffer: VecDeque<Buffered>,
    pub(super) held: HashMap<Uuid, Held>,
    pub(super) ready: watch::Sender<usize>,
    /// Set on a session's link.
    pub(super) session: Option<SessionState>,
}

pub(super) fn instant_at(at: OffsetDateTime) -> Instant {
    let left = at - OffsetDateTime::now_utc();
    Instant::now() + Duration::try_from(left).unwrap_or(Duration::ZERO)
}

impl PumpState {
    pub(super) async fn run(mut self, mut inbox: mpsc::Receiver<PumpCommand>) {
        let path = self.entity.path();
        let mut idle_since: Option<Instant> = None;
        let reason = loop {
            if let Err(failure) = self.top_up_credit().await {
                break failure;
            }
            let deadline = self.next_deadline();
            // A session with nothing buffered or out is given up after its idle time.
            let idle = match &self.session {
                Some(session) if self.held.is_empty() && self.buffer.is_empty() => {
                    let idle = match session.received {
                        true => session.idle,
                        false => session.idle.max(FIRST_MESSAGE_WAIT),
                    };
                    Some(*idle_since.get_or_insert_with(Instant::now) + idle)
                }
                _ => {
                    idle_since = None;
                    None
                }
            };
            tokio::select! {
                biased;
                command = inbox.recv() => match command {
                    Some(command) => {
                        if let Err(failure) = self.handle(command).await {
                            break failure;
                        }
                    }
                    None => break AmqpFailure::link("the transport was dropped"),
                },
                delivery = self.receiver.recv::<Body<Value>>() => match delivery {
                    Ok(delivery) => self.buffer_delivery(delivery),
                    Err(err) => break from_recv(&format!("receive from `{path}`"), err),
                },
                () = tokio::time::sleep_until(deadline.map_or_else(far_future, instant_at)), if deadline.is_some() => {
                    if let Err(failure) = self.expire().await {
                        break failure;
                    }
                }
                () = tokio::time::sleep_until(idle.unwrap_or_else(far_future)), if idle.is_some() => {
                    break AmqpFailure::link("the session had nothing more to receive; given up");
                }
            }
        };
        match self.session.take() {
            None => tracing::info!(path, reason = %reason, held = self.held.len(), "receiver link closed"),
            Some(session) => {
                // Give the session up: no more credit, then what is buffered
                // or was already on its way goes back uncounted, and closing
                // the link frees the session for any receiver.
                let _ = self.receiver.set_credit(0).await;
                while let Ok(Ok(delivery)) =
                    tokio::time::timeout(IN_FLIGHT_WAIT, self.receiver.recv::<Body<Value>>()).await
                {
                    self.buffer_delivery(delivery);
                }
                let buffered: Vec<Buffered> = self.buffer.drain(..).collect();
                for buffered in buffered {
                    let _ = self.dispose_released(&buffered.info).await;
                }
                self.ready.send_replace(0);
                let _ = tokio::time::timeout(Duration::from_secs(5), self.receiver.close()).await;
                tracing::debug!(path, session = %session.id, reason = %reason, held = self.held.len(), "session link closed");
                session.ended.notify_waiters();
                session.ended.notify_one();
            }
        }
    }

    /// Gives the link credit up to `prefetch` minus what is buffered or held.
    pub(super) async fn top_up_credit(&mut self) -> Result<(), AmqpFailure> {
        let outstanding = u32::try_from(self.buffer.len() + self.held.len()).unwrap_or(u32::MAX);
        let desired = self.prefetch.saturating_sub(outstanding);
        let current = self.receiver.credit();
        if desired > current && (current == 0 || desired - current >= (self.prefetch / 2).max(1)) {
            self.receiver
                .set_credit(desired)
                .await
                .map_err(|err| AmqpFailure::Link {
                    text: format!("give credit on `{}`: {err}", self.entity),
                    source: cause(err),
                })?;
        }
        Ok(())
    }

    pub(super) fn publish_ready(&self) {
        match &self.session {
            None => {
                self.ready.send_replace(self.buffer.len());
            }
            Some(session) => {
                // One message of a session out at a time.
                let takeable = self.held.is_empty() && !self.buffer.is_empty();
                self.ready.send_replace(usize::from(takeable));
                if takeable {
                    session.entity_ready.send_modify(|count| *count = count.wrapping_add(1));
                }
            }
        }
    }

    /// The broker's lock on a buffered message: in a session, the session's.
    fn broker_until(&self, incoming: &Incoming) -> Option<OffsetDateTime> {
        let session = self.session.as_ref().and_then(|session| session.until);
        match (incoming.broker_locked_until, session) {
            (Some(own), Some(session)) => Some(own.max(session)),
            (own, session) => own.or(session),
        }
    }

    pub(super) fn buffer_delivery(&mut self, delivery: Delivery<Body<Value>>) {
        let info = DeliveryInfo::from(&delivery);
        let tag = delivery.delivery_tag().to_vec();
        let message = delivery.into_message();
        let token = mapping::lock_token(&message, &tag).unwrap_or_else(Uuid::new_v4);
        let incoming = mapping::received_message(&self.entity, token, &message, OffsetDateTime::now_utc());
        if let Some(session) = &mut self.session {
            session.received = true;
            if let Some(until) = incoming.broker_locked_until {
                session.until = Some(session.until.map_or(until, |known| known.max(until)));
            }
        }
        self.buffer.push_back(Buffered { info, incoming });
        self.publish_ready();
    }

    /// The next time a lock needs attention.
    pub(super) fn next_deadline(&self) -> Option<OffsetDateTime> {
        let held = self.held.values().map(|held| held.local_until);
        let buffered = self
            .buffer
            .iter()
            .filter_map(|buffered| self.broker_until(&buffered.incoming))
            .map(|until| until - STALE_LOCK_MARGIN);
        held.chain(buffered).min()
    }

    pub(super) async fn handle(&mut self, command: PumpCommand) -> Result<(), AmqpFailure> {
        let now = OffsetDateTime::now_utc();
        match command {
            PumpCommand::Take {
                max,
                lock_duration,
                reply,
            } => {
                let mut taken = Vec::new();
                // A session hands out its next message once the last is settled.
                let max = match &self.session {
                    Some(_) if !self.held.is_empty() => 0,
                    Some(_) => max.min(1),
                    None => max,
                };
                while taken.len() < max {
                    let Some(buffered) = self.buffer.pop_front() else { break };
                    let broker_until = self.broker_until(&buffered.incoming);
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
                    let failure = AmqpFailure::Link {
                        text: format!("settle on `{}`: {err}", self.entity),
                        source: cause(err),
                    };
                    let _ = reply.send(Err(SettleError::Failed(failure.clone())));
                    return Err(failure);
                }
                let _ = reply.send(Ok(()));
                // The session's next message may go now.
                self.publish_ready();
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
            PumpCommand::Holds { token, reply } => {
                let held = self.held.get(&token).is_some_and(|held| held.local_until > now);
                let _ = reply.send(held);
            }
            PumpCommand::Renewed {
                token,
                broker_until,
                until,
                reply,
            } => {
                if let Some(session) = &mut self.session {
                    // A session lock renewal renews its every message's lock.
                    session.until = Some(broker_until);
                }
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

    pub(super) async fn dispose_released(&self, info: &DeliveryInfo) -> Result<(), AmqpFailure> {
        self.receiver
            .release(info.clone())
            .await
            .map_err(|err| AmqpFailure::Link {
                text: format!("release on `{}`: {err}", self.entity),
                source: cause(err),
            })
    }

    /// A held lock that ran out: abandon it at the broker while the broker
    /// still holds it (bosun's shorter lock), else just forget it.
    pub(super) async fn expire_one(&self, held: &Held, now: OffsetDateTime) -> Result<(), AmqpFailure> {
        if held.broker_until.is_none_or(|until| until > now) {
            self.receiver
                .modify(held.info.clone(), abandon_outcome())
                .await
                .map_err(|err| AmqpFailure::Link {
                    text: format!("abandon on `{}`: {err}", self.entity),
                    source: cause(err),
                })
        } else {
            self.dispose_released(&held.info).await
        }
    }

    pub(super) async fn expire(&mut self) -> Result<(), AmqpFailure> {
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
        if self.session.is_some()
            && self.held.is_empty()
            && self
                .buffer
                .front()
                .and_then(|buffered| self.broker_until(&buffered.incoming))
                .is_some_and(|until| until <= now + STALE_LOCK_MARGIN)
        {
            // The session lock ends with no message out: give the session
            // up (the run loop releases what is buffered) rather than let
            // its messages' deliveries be counted.
            return Err(AmqpFailure::link("the session lock ends; the session is given up"));
        }
        let mut kept = VecDeque::with_capacity(self.buffer.len());
        while let Some(buffered) = self.buffer.pop_front() {
            if self
                .broker_until(&buffered.incoming)
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

pub(super) fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(24 * 3600)
}
