//! Wake-ups sent after commit, batched, off the hot path.
//!
//! Receivers wait for `NOTIFY bosun_messages, '<entity>'` and timeline
//! waits (the event stream, MCP waits) for `NOTIFY bosun_timeline,
//! '<correlation id>'` (see `listen`). PostgreSQL serialises the commits of
//! all transactions that sent a NOTIFY on one lock, held until each commit
//! record is flushed; a NOTIFY inside every handled message's commit would
//! make concurrent handlers queue for each other's WAL flush instead of
//! sharing one. So no transaction that writes sends a NOTIFY: it collects
//! what it woke in [`Wakes`], and after it commits the caller hands them to
//! the database's [`Notifier`]. One task per database sends everything
//! pending in one statement, in a transaction of its own with
//! `synchronous_commit` off (it writes nothing else: a wake-up lost to a
//! crash only delays a receiver until its fallback poll). While one batch
//! is on its way the next gathers, so the cost per message falls as the
//! load rises.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use sqlx_core::query::query;
use sqlx_postgres::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The channel receivers listen on; the payload is an entity path.
pub(crate) const MESSAGES_CHANNEL: &str = "bosun_messages";
/// The channel timeline waits listen on; the payload is a correlation id.
pub(crate) const TIMELINE_CHANNEL: &str = "bosun_timeline";

/// What one transaction woke: sent by [`Notifier::send`] once it committed.
#[derive(Debug, Default)]
#[must_use = "wake-ups are sent only when handed to the notifier after commit"]
pub(crate) struct Wakes {
    pending: BTreeSet<(&'static str, String)>,
}

impl Wakes {
    /// `entity` got a message that can be received now.
    pub(crate) fn entity(&mut self, entity: impl Into<String>) {
        self.pending.insert((MESSAGES_CHANNEL, entity.into()));
    }

    /// Delivery `correlation_id` got a timeline line.
    pub(crate) fn timeline(&mut self, correlation_id: impl Into<String>) {
        self.pending.insert((TIMELINE_CHANNEL, correlation_id.into()));
    }

    /// Whether nothing was woken.
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// What the sending task and the notifier share.
#[derive(Debug, Default)]
struct Shared {
    pending: Mutex<BTreeSet<(&'static str, String)>>,
    ready: Notify,
}

/// Sends the wake-ups of committed transactions (one per database; its
/// task starts with the first send and ends when the notifier is dropped or
/// the pool closed).
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    shared: Arc<Shared>,
    task: Mutex<Option<CancellationToken>>,
}

impl Drop for Notifier {
    fn drop(&mut self) {
        if let Some(stop) = self.task.lock().unwrap_or_else(PoisonError::into_inner).take() {
            stop.cancel();
        }
    }
}

impl Notifier {
    /// Sends `wakes` soon (call it after their transaction committed).
    pub(crate) fn send(&self, pool: &PgPool, wakes: Wakes) {
        if wakes.is_empty() {
            return;
        }
        self.shared
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(wakes.pending);
        self.start(pool);
        self.shared.ready.notify_one();
    }

    fn start(&self, pool: &PgPool) {
        let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        if task.is_some() {
            return;
        }
        let stop = CancellationToken::new();
        tokio::spawn(run(pool.clone(), Arc::clone(&self.shared), stop.clone()));
        *task = Some(stop);
    }
}

async fn run(pool: PgPool, shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = shared.ready.notified() => {},
            () = stop.cancelled() => return,
        }
        if pool.is_closed() {
            return;
        }
        let batch = std::mem::take(&mut *shared.pending.lock().unwrap_or_else(PoisonError::into_inner));
        if batch.is_empty() {
            continue;
        }
        let (channels, payloads): (Vec<&str>, Vec<String>) = batch.into_iter().unzip();
        let sent = query(
            "WITH sent AS (SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS n(c, p))
             SELECT set_config('synchronous_commit', 'off', true), (SELECT count(*) FROM sent)",
        )
        .bind(&channels)
        .bind(&payloads)
        .execute(&pool)
        .await;
        if let Err(err) = sent {
            // Waiting receivers and timeline waits find the work at their
            // next fallback poll.
            tracing::warn!(error = %err, wake_ups = channels.len(), "could not send wake-ups; waiters poll");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakes_keep_each_wake_up_once_per_channel() {
        let mut wakes = Wakes::default();
        assert!(wakes.is_empty());
        wakes.entity("commit");
        wakes.entity("commit");
        wakes.timeline("commit");
        wakes.timeline("c-1");
        let pending: Vec<_> = wakes.pending.iter().cloned().collect();
        assert_eq!(
            pending,
            [
                (MESSAGES_CHANNEL, "commit".to_owned()),
                (TIMELINE_CHANNEL, "c-1".to_owned()),
                (TIMELINE_CHANNEL, "commit".to_owned()),
            ]
        );
    }
}
