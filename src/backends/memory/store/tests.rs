//! Tests of the memory store: the store behaviour suite, the settle suite
//! with the memory transport, and the timeline waits the suites do not cover.

use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

use super::MemoryStore;
use crate::backends::memory::MemoryTransport;
use crate::ports::behaviour::settle::Pairing;
use crate::ports::settle::StoreThenSettle;
use crate::ports::store::{Store, TimelineEntry, TimelineStatus, TimelineStore, Woken};
use crate::ports::transport::{Broker, Transport};

#[tokio::test]
async fn memory_store_passes_the_behaviour_suite() {
    crate::ports::behaviour::store::run_all(|| async { MemoryStore::new() }).await;
}

#[tokio::test]
async fn the_memory_store_with_the_memory_transport_passes_the_commit_suite() {
    crate::ports::behaviour::settle::run_all(|| async {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let transport: Arc<dyn Broker> = Arc::new(MemoryTransport::new(10));
        Pairing {
            settle: Arc::new(StoreThenSettle::new(
                Arc::clone(&store),
                Arc::clone(&transport) as Arc<dyn Transport>,
            )),
            store,
            transport,
        }
    })
    .await;
}

fn line(correlation_id: &str) -> TimelineEntry {
    TimelineEntry {
        correlation_id: correlation_id.into(),
        message_id: "m-1".into(),
        message_type: "CreateCommit".into(),
        consumer: None,
        status: TimelineStatus::Sent,
        attempt: 0,
        at: OffsetDateTime::now_utc(),
        detail: None,
    }
}

#[tokio::test]
async fn a_line_written_after_the_wait_was_made_wakes_it_and_only_its_delivery() {
    // A fallback no test waits out: only a write can end these waits in time.
    let store = MemoryStore::new().with_timeline_fallback(Duration::from_secs(600));
    let mut waited = store.watch_timeline("c-1");
    let mut other = store.watch_timeline("c-2");
    assert!(store.timeline("c-1").await.unwrap().is_empty());
    // Written before `changed` is called: still not lost.
    store.append_timeline(vec![line("c-1")]).await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(30), waited.changed()).await;
    assert_eq!(woken, Ok(Woken::Notified));
    assert_eq!(store.timeline("c-1").await.unwrap().len(), 1);
    let still = tokio::time::timeout(Duration::from_millis(50), other.changed()).await;
    assert!(still.is_err(), "c-2 had no line");
}

#[tokio::test(start_paused = true)]
async fn without_a_line_the_wait_ends_at_its_fallback() {
    let store = MemoryStore::new();
    let mut wait = store.watch_timeline("c-1");
    assert_eq!(wait.changed().await, Woken::Fallback);
}
