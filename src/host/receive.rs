//! The receive loop: per consumer entity, claims messages while the
//! consumer has room ([`Permits`]) and hands each to a task that handles it
//! once a handler slot is free; it takes nothing while the consumer is
//! paused ([`super::pause`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bosun_consumers::Consumer;
use bosun_contracts::Destination;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Runtime, lock, process};
use crate::ports::transport::ReceivedMessage;

/// How many messages of one consumer may be claimed and handled at once.
#[derive(Clone)]
pub(super) struct Permits {
    /// Claimed and not yet settled: up to twice the concurrency, so a
    /// handler that finishes finds its next message already claimed
    /// instead of waiting for a receive (one claim serves many messages).
    claimed: Arc<Semaphore>,
    /// How many claims a fast consumer waits for before it receives: a
    /// quarter of [`Permits::claimed`].
    refill: usize,
    /// Being handled: the consumer's concurrency.
    handling: Arc<Semaphore>,
    /// Handled and being settled (committed): as many as may be claimed.
    /// A handled message gives its handler slot and its claim to the next
    /// one, so the next handler runs and the next receive claims while
    /// this commit waits for its WAL flush; this bounds the commits in
    /// flight instead.
    settling: Arc<Semaphore>,
    /// How long the consumer's recent messages took to handle, in
    /// microseconds (a moving average): a consumer whose messages take
    /// longer than [`CLAIM_AHEAD_BELOW_MICROS`] claims nothing ahead, so a message
    /// never waits behind a long build in one replica while another
    /// replica could take it.
    recent_micros: Arc<AtomicU64>,
}

impl Permits {
    pub(super) fn for_concurrency(concurrency: usize) -> Self {
        let room = concurrency.saturating_mul(PREFETCH_FACTOR).max(1);
        Self {
            claimed: Arc::new(Semaphore::new(room)),
            refill: (room / 4).clamp(1, RECEIVE_BATCH),
            handling: Arc::new(Semaphore::new(concurrency.max(1))),
            settling: Arc::new(Semaphore::new(room)),
            // Until its messages prove fast, a consumer claims nothing ahead.
            recent_micros: Arc::new(AtomicU64::new(CLAIM_AHEAD_BELOW_MICROS)),
        }
    }

    /// Whether the consumer's messages are handled fast enough to claim
    /// ahead.
    fn claims_ahead(&self) -> bool {
        self.recent_micros.load(Ordering::Relaxed) < CLAIM_AHEAD_BELOW_MICROS
    }

    /// Notes how long one message took (an exponential moving average
    /// weighting the newest a quarter).
    fn handled_in(&self, took: Duration) {
        let took = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let _ = self
            .recent_micros
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |average| {
                Some(average - average / 4 + took / 4)
            });
    }
}

/// One message's places among its consumer's [`Permits`]: its claim and,
/// once its turn came, its handler slot; once handled, its place among the
/// messages being settled instead (see [`Places::settle`]).
pub(crate) struct Places {
    handling: Option<tokio::sync::OwnedSemaphorePermit>,
    claimed: Option<tokio::sync::OwnedSemaphorePermit>,
    settling_room: Arc<Semaphore>,
    settling: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Places {
    /// The handler returned: takes a place among the messages being
    /// settled (waiting, with the handler slot still held, while as many
    /// commits as the consumer may claim are in flight), then gives the
    /// handler slot and the claim to the next message. The message stays
    /// locked, its lock renewed and its saga's turn held, until it is
    /// settled. Called again (a run after a saga conflict) it keeps its
    /// place.
    pub(super) async fn settle(&mut self) {
        if self.settling.is_none() {
            // Commits in flight never wait for a handler slot, so this
            // wait always ends.
            self.settling = Arc::clone(&self.settling_room).acquire_owned().await.ok();
        }
        self.handling = None;
        self.claimed = None;
    }
}

/// Claimed messages per handler slot (see [`Permits::claimed`]).
const PREFETCH_FACTOR: usize = 2;

/// A consumer whose messages take longer than this (200 ms, in
/// microseconds) on average claims none ahead (see
/// [`Permits::recent_micros`]).
const CLAIM_AHEAD_BELOW_MICROS: u64 = 200_000;

/// Most messages one receive claims.
const RECEIVE_BATCH: usize = 32;

/// Receives from `entity` while there is room among the consumer's
/// [`Permits`], and hands each message to a task that handles it once a
/// handler slot is free.
pub(super) async fn receive_loop(
    runtime: Arc<Runtime>,
    consumer: Arc<dyn Consumer>,
    entity: Destination,
    permits: Permits,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
    in_flight: TaskTracker,
) {
    let mut failures = 0u32;
    let path = entity.path();
    loop {
        if !super::pause::wait_while_paused(&runtime, consumer.name(), &path, &shutdown).await {
            return;
        }
        // A fast consumer waits until a quarter of its room is free and
        // claims that much at once: taking one message whenever one handler
        // finishes would cost a claim per message.
        let refill = if permits.claims_ahead() { permits.refill } else { 1 };
        let mut first = tokio::select! {
            permit = Arc::clone(&permits.claimed).acquire_many_owned(u32::try_from(refill).unwrap_or(1)) => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = shutdown.cancelled() => return,
        };
        let mut held = Vec::with_capacity(refill);
        while first.num_permits() > 1 {
            match first.split(1) {
                Some(one) => held.push(one),
                None => break,
            }
        }
        held.push(first);
        // A slow consumer claims only for free handler slots, taken now
        // (waiting for one first); a fast one claims as many as there is
        // room for, in one receive.
        let mut slots = Vec::new();
        if !permits.claims_ahead() {
            let slot = tokio::select! {
                permit = Arc::clone(&permits.handling).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
                () = shutdown.cancelled() => return,
            };
            slots.push(slot);
        }
        while held.len() < RECEIVE_BATCH {
            if !slots.is_empty() {
                match Arc::clone(&permits.handling).try_acquire_owned() {
                    Ok(slot) => slots.push(slot),
                    Err(_) => break,
                }
            }
            match Arc::clone(&permits.claimed).try_acquire_owned() {
                Ok(permit) => held.push(permit),
                Err(_) => {
                    slots.truncate(held.len());
                    break;
                }
            }
        }
        if runtime.frozen.load(Ordering::SeqCst) {
            shutdown.cancelled().await;
            return;
        }
        let received = match runtime
            .transport
            .receive(&entity, held.len(), runtime.options.lock_duration)
            .await
        {
            Ok(received) => {
                failures = 0;
                runtime.metrics.receiving().received(consumer.name(), &path);
                received
            }
            Err(err) => {
                failures = failures.saturating_add(1);
                runtime
                    .metrics
                    .receiving()
                    .failed(consumer.name(), &path, &err.to_string());
                let backoff = Duration::from_millis(100u64.saturating_mul(2u64.saturating_pow(failures.min(8))));
                tracing::warn!(consumer = consumer.name(), entity = %entity, error = %err, ?backoff, "receive failed");
                drop((held, slots));
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {},
                    () = shutdown.cancelled() => return,
                }
                continue;
            }
        };
        if received.is_empty() {
            drop((held, slots));
            tokio::select! {
                () = runtime.transport.wait_for_messages(&entity, runtime.options.poll_interval) => {},
                () = shutdown.cancelled() => return,
            }
            continue;
        }
        if shutdown.is_cancelled() || runtime.halted.is_cancelled() {
            // Stopping began while this receive was under way: give the
            // messages back untouched for another process.
            for message in &received {
                let _ = runtime.transport.abandon(&message.lock).await;
            }
            return;
        }
        held.truncate(received.len());
        let mut slots = slots.into_iter();
        for (message, claimed) in received.into_iter().zip(held) {
            let slot = slots.next();
            let runtime = Arc::clone(&runtime);
            let consumer = Arc::clone(&consumer);
            let entity = entity.clone();
            let hard_stop = hard_stop.clone();
            let shutdown = shutdown.clone();
            let permits = permits.clone();
            in_flight.spawn(async move {
                let permit = match slot {
                    Some(slot) => slot,
                    None => match turn_to_handle(&runtime, &message, Arc::clone(&permits.handling), &shutdown).await {
                        Some(permit) => permit,
                        None => {
                            // Stopping before its turn came: back to the queue at once.
                            let _ = runtime.transport.abandon(&message.lock).await;
                            return;
                        }
                    },
                };
                let started = std::time::Instant::now();
                let places = Places {
                    handling: Some(permit),
                    claimed: Some(claimed),
                    settling_room: Arc::clone(&permits.settling),
                    settling: None,
                };
                process(&runtime, consumer.as_ref(), &entity, message, places, &hard_stop).await;
                permits.handled_in(started.elapsed());
            });
        }
    }
}

/// Waits for a handler slot for a claimed message, keeping its lock renewed
/// while it waits (a slot is usually free at once); `None` when the host
/// stops first.
async fn turn_to_handle(
    runtime: &Runtime,
    message: &ReceivedMessage,
    handling: Arc<Semaphore>,
    shutdown: &CancellationToken,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    if let Ok(permit) = Arc::clone(&handling).try_acquire_owned() {
        return Some(permit);
    }
    let _renewal = lock::LockRenewal::start(runtime, message);
    tokio::select! {
        permit = handling.acquire_owned() => permit.ok(),
        () = shutdown.cancelled() => None,
    }
}
