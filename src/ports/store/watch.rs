//! Waiting for a delivery's timeline to change, woken by the write itself.
//!
//! Every store owns one [`TimelineWatch`]: a signal per correlation id that
//! somebody waits on. The store wakes it when it writes timeline lines
//! (in-process: SQLite after its transaction commits; across processes:
//! PostgreSQL's `NOTIFY bosun_timeline`, sent by the inserting transaction
//! and fed into the watch by a LISTEN task). A waiter
//! ([`TimelineWait`], from [`Store::watch_timeline`](super::Store::watch_timeline))
//! subscribes *before* it reads the timeline, so a line written between
//! its read and its wait still wakes it; and it keeps a fallback timeout
//! (the store's: the poll interval where writes of other processes cannot
//! be heard, as with SQLite), so a lost notification costs one fallback,
//! never a hang.
//!
//! Why on the store rather than a port of its own: the store is what writes
//! timeline lines, on every path (commits, retries, dead letters, replays,
//! the dispatcher's `sent` lines), so no writer can forget to signal and no
//! wiring can pair a store with the wrong signal.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

/// The signals of the correlation ids somebody waits on.
pub struct TimelineWatch {
    keys: Mutex<HashMap<String, watch::Sender<u64>>>,
    fallback: Duration,
}

impl std::fmt::Debug for TimelineWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimelineWatch")
            .field("waited_on", &self.lock().len())
            .field("fallback", &self.fallback)
            .finish()
    }
}

impl TimelineWatch {
    /// A watch whose waits look again after `fallback` when nothing woke
    /// them.
    pub fn new(fallback: Duration) -> Arc<Self> {
        Arc::new(Self {
            keys: Mutex::new(HashMap::new()),
            fallback,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<u64>>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long a wait lasts when nothing wakes it.
    pub fn fallback(&self) -> Duration {
        self.fallback
    }

    /// Starts waiting for `correlation_id`: changes from now on wake the
    /// returned wait.
    pub fn subscribe(self: &Arc<Self>, correlation_id: &str) -> TimelineWait {
        let receiver = self
            .lock()
            .entry(correlation_id.to_owned())
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe();
        TimelineWait {
            watched: Some((Arc::clone(self), correlation_id.to_owned(), receiver)),
            fallback: self.fallback,
        }
    }

    /// Wakes the waits of `correlation_id` (nothing when nobody waits).
    pub fn notify(&self, correlation_id: &str) {
        if let Some(sender) = self.lock().get(correlation_id) {
            sender.send_modify(|version| *version = version.wrapping_add(1));
        }
    }

    /// Wakes the waits of each of `correlation_ids`.
    pub fn notify_each<'a>(&self, correlation_ids: impl IntoIterator<Item = &'a str>) {
        let keys = self.lock();
        if keys.is_empty() {
            return;
        }
        for id in correlation_ids {
            if let Some(sender) = keys.get(id) {
                sender.send_modify(|version| *version = version.wrapping_add(1));
            }
        }
    }

    /// Wakes every wait (after notifications may have been lost, e.g. a
    /// LISTEN connection was re-established).
    pub fn notify_all(&self) {
        for sender in self.lock().values() {
            sender.send_modify(|version| *version = version.wrapping_add(1));
        }
    }

    /// How many correlation ids are waited on (tests).
    pub fn waited_on(&self) -> usize {
        self.lock().len()
    }
}

/// What ended a [`TimelineWait::changed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// The store signalled a change of the timeline.
    Notified,
    /// The fallback timeout passed: look again, something may have changed
    /// where the store cannot hear it.
    Fallback,
}

/// One waiter on one delivery's timeline; stops waiting when dropped.
#[derive(Debug)]
pub struct TimelineWait {
    watched: Option<(Arc<TimelineWatch>, String, watch::Receiver<u64>)>,
    fallback: Duration,
}

impl TimelineWait {
    /// A wait nothing wakes but its fallback (a store without signals).
    pub fn poll_only(fallback: Duration) -> Self {
        Self {
            watched: None,
            fallback,
        }
    }

    /// How long [`TimelineWait::changed`] waits when nothing wakes it.
    pub fn fallback(&self) -> Duration {
        self.fallback
    }

    /// Waits until the timeline changed since the wait was made (or since
    /// the last call returned), or the fallback passes.
    pub async fn changed(&mut self) -> Woken {
        let fallback = tokio::time::sleep(self.fallback);
        tokio::pin!(fallback);
        if let Some((_, _, receiver)) = &mut self.watched {
            tokio::select! {
                // An error means the signal is gone (it cannot be while
                // this wait holds it): wait the fallback.
                Ok(()) = receiver.changed() => return Woken::Notified,
                () = &mut fallback => return Woken::Fallback,
            }
        }
        fallback.await;
        Woken::Fallback
    }
}

impl Drop for TimelineWait {
    fn drop(&mut self) {
        if let Some((watch, key, _receiver)) = self.watched.take() {
            let mut keys = watch.lock();
            // Receivers are made under this lock, so the count is exact:
            // this wait's receiver is the last one, forget the key.
            if keys.get(&key).is_some_and(|sender| sender.receiver_count() <= 1) {
                keys.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn a_notification_wakes_the_wait_of_its_correlation_id_only() {
        let watch = TimelineWatch::new(LONG);
        let mut one = watch.subscribe("one");
        let mut two = watch.subscribe("two");
        watch.notify("one");
        let woken = tokio::time::timeout(Duration::from_secs(30), one.changed()).await;
        assert_eq!(woken, Ok(Woken::Notified));
        let still = tokio::time::timeout(Duration::from_millis(50), two.changed()).await;
        assert!(still.is_err(), "two was not notified");
    }

    #[tokio::test]
    async fn a_change_between_subscribing_and_waiting_is_not_lost() {
        let watch = TimelineWatch::new(LONG);
        let mut wait = watch.subscribe("one");
        watch.notify_each(["one", "other"]);
        let woken = tokio::time::timeout(Duration::from_secs(30), wait.changed()).await;
        assert_eq!(woken, Ok(Woken::Notified));
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_notification_the_fallback_ends_the_wait() {
        let watch = TimelineWatch::new(Duration::from_secs(5));
        let mut wait = watch.subscribe("one");
        assert_eq!(wait.changed().await, Woken::Fallback);
        assert_eq!(
            TimelineWait::poll_only(Duration::from_secs(1)).changed().await,
            Woken::Fallback
        );
    }

    #[tokio::test]
    async fn dropping_the_last_wait_forgets_the_key() {
        let watch = TimelineWatch::new(LONG);
        let first = watch.subscribe("one");
        let second = watch.subscribe("one");
        assert_eq!(watch.waited_on(), 1);
        drop(first);
        assert_eq!(watch.waited_on(), 1, "second still waits");
        drop(second);
        assert_eq!(watch.waited_on(), 0);
        watch.notify_all();
    }
}
