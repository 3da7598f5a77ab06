//! The transport's links to the broker: the connection (reopened with
//! backoff), a cached sender per entity, a receiver pump per entity, the
//! `$management` clients, and the broker-side lock operations.

use super::*;

impl Inner {
    /// The open connection, reopening it after a drop (with backoff).
    pub(super) async fn connection(&self) -> Result<Arc<AmqpConnection>, TransportError> {
        let mut state = self.state.lock().await;
        if let Some(current) = &state.current {
            if current.is_open() {
                return Ok(Arc::clone(current));
            }
            tracing::warn!(host = %self.endpoint.host, generation = current.generation, "Service Bus connection lost; reconnecting");
            state.current = None;
            lock(&self.senders).clear();
            lock(&self.receivers).clear();
            lock(&self.sessions).clear();
            lock(&self.session_locks).clear();
            lock(&self.management).clear();
        }
        if let Some(at) = state.retry_at {
            let now = Instant::now();
            if now < at {
                return Err(TransportError::unavailable(
                    "connecting to Service Bus",
                    format!("the connection is down; next attempt in {} ms", (at - now).as_millis()),
                ));
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
                Err(TransportError::unavailable("connecting to Service Bus", failure))
            }
        }
    }

    pub(super) async fn sender(
        &self,
        connection: &AmqpConnection,
        path: &str,
    ) -> Result<Arc<SenderSlot>, TransportError> {
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

    pub(super) fn drop_sender(&self, path: &str, slot: &Arc<SenderSlot>) {
        let mut senders = lock(&self.senders);
        if senders.get(path).is_some_and(|current| Arc::ptr_eq(current, slot)) {
            senders.remove(path);
        }
    }

    /// The receiver pump of `entity`, attaching one when there is none.
    pub(super) async fn pump(&self, entity: &Destination) -> Result<Arc<ReceiverPump>, TransportError> {
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
            None,
        ));
        lock(&self.receivers).insert(path, Arc::clone(&pump));
        Ok(pump)
    }

    /// The pump that holds `lock`, if it still runs.
    /// (The map holds only pumps of the current connection: a reconnection
    /// clears it, and a pump whose link failed has stopped.)
    pub(super) async fn holder(&self, lock_token: &LockToken) -> Option<Arc<ReceiverPump>> {
        if self.options.topology.requires_session(&lock_token.entity) {
            let held = self.session_lock(lock_token.token)?;
            return (!held.pump.is_closed()).then_some(held.pump);
        }
        let path = lock_token.entity.path();
        let pump = lock(&self.receivers).get(&path).cloned()?;
        (!pump.is_closed()).then_some(pump)
    }

    /// Calls a `$management` operation on `path`; `None` for "no content".
    pub(super) async fn management_call<Req, Res>(&self, path: &str, request: Req) -> Result<Option<Res>, AmqpFailure>
    where
        Req: Request<Response = Res> + Send,
        Res: Response<Body = Body<Value>, Error = ResponseError> + Send,
    {
        let what = format!("`{}` on `{path}/$management`", Req::OPERATION);
        let connection = self.connection().await.map_err(|err| AmqpFailure::Connection {
            text: err.to_string(),
            source: cause(err),
        })?;
        if self.management_silent.load(Ordering::SeqCst) == connection.generation {
            return Err(AmqpFailure::unsupported(what));
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
                let failure = connection.note(from_management(&what, err));
                if matches!(failure, AmqpFailure::Link { .. } | AmqpFailure::Connection { .. }) {
                    self.drop_management(path, &slot);
                }
                Err(failure)
            }
            Err(_) => {
                // A late answer would pair with the next request: never reuse.
                self.drop_management(path, &slot);
                if self.endpoint.emulator {
                    self.management_silent.store(connection.generation, Ordering::SeqCst);
                    Err(AmqpFailure::unsupported(format!("{what} (no answer)")))
                } else {
                    Err(AmqpFailure::Timeout {
                        text: format!(
                            "{what}: no answer within {} ms",
                            self.options.operation_timeout.as_millis()
                        ),
                    })
                }
            }
        }
    }

    pub(super) fn drop_management(&self, path: &str, slot: &Arc<ManagementSlot>) {
        let mut management = lock(&self.management);
        if management.get(path).is_some_and(|current| Arc::ptr_eq(current, slot)) {
            management.remove(path);
        }
    }

    /// Peeks up to `max` messages of `path` from its first.
    pub(super) async fn peek(&self, path: &str, max: usize) -> Result<Vec<AmqpMessage>, AmqpFailure> {
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

    pub(super) async fn broker_renew(
        &self,
        lock_token: &LockToken,
        until: OffsetDateTime,
    ) -> Result<OffsetDateTime, TransportError> {
        let path = lock_token.entity.path();
        let renewed = match self.session_lock(lock_token.token) {
            // A message's lock in a session is the session's.
            Some(held) => {
                let request = RenewSessionLockRequest {
                    session_id: held.session_id,
                    server_timeout: self.options.operation_timeout,
                };
                self.management_call::<_, RenewSessionLockResponse>(&path, request)
                    .await
                    .map(|response| response.and_then(|response| response.expiration))
            }
            None => {
                let request = RenewLockRequest {
                    lock_tokens: vec![lock_token.token],
                    server_timeout: self.options.operation_timeout,
                };
                self.management_call::<_, RenewLockResponse>(&path, request)
                    .await
                    .map(|response| response.and_then(|response| response.expirations.first().copied()))
            }
        };
        let renewed = match renewed {
            Ok(renewed) => renewed,
            Err(AmqpFailure::LockLost { .. }) => {
                self.forget_session_lock(lock_token.token);
                return Err(lock_lost(lock_token));
            }
            Err(failure @ AmqpFailure::Unsupported { .. }) => {
                return Err(TransportError::misconfigured(
                    format!("renewing a lock on `{path}` at the broker"),
                    failure,
                ));
            }
            Err(failure) => return Err(transport_error(&path, failure)),
        };
        let Some(broker_until) = renewed else {
            return Err(TransportError::unavailable(
                format!("renewing a lock on `{path}` at the broker"),
                "the broker's renewal returned no expiry",
            ));
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
    pub(super) async fn lengthen_short_locks(&self, messages: &mut [ReceivedMessage], lock_duration: Duration) {
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

    pub(super) async fn settle(&self, lock_token: &LockToken, settlement: Settlement) -> Result<(), TransportError> {
        let holder = self.holder(lock_token).await;
        // Settled or not, a session lock is used once.
        self.forget_session_lock(lock_token.token);
        let Some(pump) = holder else {
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
    pub(super) async fn browse_dead_letters(
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
        let taken = take_deliveries(&mut receiver, max, self.options.receive_wait).await;
        let (deliveries, failure) = match taken {
            Ok(deliveries) => (deliveries, None),
            Err(failure) => (Vec::new(), Some(failure)),
        };
        let mut dead: Vec<DeadLetteredMessage> = deliveries
            .iter()
            .map(|delivery| mapping::dead_lettered_message(entity, delivery.message()))
            .collect();
        give_back(receiver, deliveries).await;
        if let Some(failure) = failure {
            return Err(transport_error(&path, failure));
        }
        dead.truncate(max);
        dead.sort_by_key(|message| message.sequence);
        Ok(dead)
    }
}
