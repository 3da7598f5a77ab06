//! Messages of one saga key are handled one at a time within a process:
//! a saga message waits for its key's turn before its saga is loaded, and
//! keeps it until its commit is done, so handlers of one saga never race
//! each other to a version conflict. Optimistic concurrency (the version
//! check at commit) stays as the safety net across processes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as TurnMutex, OwnedMutexGuard};

/// One turn per key; a key's entry lives while someone holds or waits for it.
#[derive(Debug, Default)]
pub(crate) struct KeyLocks {
    keys: Mutex<HashMap<String, Arc<TurnMutex<()>>>>,
}

/// A key's turn; dropping it lets the next message of the key go.
#[derive(Debug)]
pub(crate) struct Turn<'a> {
    locks: &'a KeyLocks,
    key: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl KeyLocks {
    /// Waits for `key`'s turn (first come, first served).
    pub(crate) async fn turn(&self, key: String) -> Turn<'_> {
        let mutex = {
            let mut keys = self.keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            Arc::clone(keys.entry(key.clone()).or_default())
        };
        let guard = mutex.lock_owned().await;
        Turn {
            locks: self,
            key,
            guard: Some(guard),
        }
    }

    /// How many keys are held or waited for.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.keys.lock().map_or(0, |keys| keys.len())
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        // Release first, then forget the key if nobody else holds a handle
        // to its mutex (the map's own handle and this guard's are the two).
        let guard = self.guard.take();
        let mut keys = self
            .locks
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        drop(guard);
        if keys.get(&self.key).is_some_and(|mutex| Arc::strong_count(mutex) == 1) {
            keys.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn one_key_is_handled_one_at_a_time_other_keys_at_once() {
        let locks = Arc::new(KeyLocks::default());
        let inside = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let most = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let mut tasks = Vec::new();
        for n in 0..40 {
            let (locks, inside, most) = (Arc::clone(&locks), Arc::clone(&inside), Arc::clone(&most));
            tasks.push(tokio::spawn(async move {
                let key = n % 2;
                let _turn = locks.turn(format!("release/k-{key}")).await;
                let now = inside[key].fetch_add(1, Ordering::SeqCst) + 1;
                most[key].fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside[key].fetch_sub(1, Ordering::SeqCst);
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(most[0].load(Ordering::SeqCst), 1, "two messages of one key at once");
        assert_eq!(most[1].load(Ordering::SeqCst), 1, "two messages of one key at once");
        assert_eq!(locks.len(), 0, "keys nobody holds are forgotten");
    }

    #[tokio::test]
    async fn another_key_does_not_wait() {
        let locks = KeyLocks::default();
        let _held = locks.turn("release/a".to_owned()).await;
        tokio::time::timeout(Duration::from_secs(1), locks.turn("release/b".to_owned()))
            .await
            .expect("another key's turn is not held up");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), locks.turn("release/a".to_owned()))
                .await
                .is_err(),
            "the same key waits"
        );
    }
}
