//! Tests of `src/backends/postgres/transport.rs`.

use std::collections::HashSet;
use std::time::Instant;

use bosun_contracts::Destination;

use super::*;
use crate::backends::postgres::testing::{self, TestDatabase};
use crate::ports::behaviour::transport::{self as behaviour, outbound};
use crate::ports::topology::Subscription;

const LOCK: Duration = Duration::from_secs(30);

async fn transport(test: &TestDatabase) -> PostgresTransport {
    let transport = PostgresTransport::new(test.database.clone(), 10);
    transport.ensure_topology(&Topology::from_routing()).await.unwrap();
    transport
}

fn queue() -> Destination {
    Destination::Queue("commit".into())
}

#[tokio::test]
async fn postgres_transport_passes_the_behaviour_suite() {
    let first = testing::migrated().await;
    let schemas = Arc::new(Mutex::new(vec![first]));
    let used = AtomicU64::new(0);
    behaviour::run_all(|max| {
        let schemas = Arc::clone(&schemas);
        // The first call reuses the schema made to find out whether
        // PostgreSQL is there; every later one gets a fresh schema.
        let reuse = used.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            let database = if reuse {
                schemas.lock().unwrap()[0].database.clone()
            } else {
                let test = testing::migrated().await;
                let database = test.database.clone();
                schemas.lock().unwrap().push(test);
                database
            };
            PostgresTransport::new(database, max)
        }
    })
    .await;
    let schemas = std::mem::take(&mut *schemas.lock().unwrap());
    for test in schemas {
        test.finish().await;
    }
}

#[tokio::test]
async fn postgres_transport_prunes_duplicate_records_in_batches() {
    let test = testing::migrated().await;
    behaviour::duplicate_records_are_pruned_in_batches(&transport(&test).await).await;
    test.finish().await;
}

/// Appends `count` ready messages to `entity`, straight into the table.
async fn backlog(test: &TestDatabase, entity: &str, count: i32) {
    query(
        "INSERT INTO bosun_messages (entity, broker_message_id, message_type, body, enqueued_at, visible_at)
         SELECT $1, $1 || '-' || g, 'CreateCommit', '\\x00'::bytea, now(), now() FROM generate_series(1, $2) AS g",
    )
    .bind(entity)
    .bind(count)
    .execute(test.database.pool())
    .await
    .unwrap();
}

/// Rows and index entries the server read for one claim, per table.
struct Reads {
    messages: i64,
    handled: i64,
}

/// Claims up to `max` messages of `entity` (with the idempotency check
/// of `consumer`, if any) in a transaction that is rolled back, and
/// returns each claimed message's broker id and whether it was handled,
/// and how many rows and index entries of `bosun_messages` and of
/// `bosun_handled` the server read for it (its own counters for the
/// transaction).
async fn claim_reading(
    test: &TestDatabase,
    entity: &str,
    max: i64,
    consumer: Option<&str>,
) -> (Vec<(String, Option<bool>)>, Reads) {
    let mut tx = test.database.pool().begin().await.unwrap();
    let claimed = query("SELECT r_broker_message_id, r_handled FROM bosun_claim($1, 10, $2, $3, 30000, $4)")
        .bind(entity)
        .bind(max)
        .bind(Uuid::now_v7())
        .bind(consumer)
        .fetch_all(&mut *tx)
        .await
        .unwrap()
        .into_iter()
        .map(|row| (row.get::<String, _>(0), row.get::<Option<bool>, _>(1)))
        .collect();
    let reads = Reads {
        messages: read_in(&mut tx, "bosun_messages").await,
        handled: read_in(&mut tx, "bosun_handled").await,
    };
    tx.rollback().await.unwrap();
    (claimed, reads)
}

/// Index entries returned by every index of `table`, and rows read by
/// sequential scans of it, in this transaction so far.
async fn read_in(tx: &mut sqlx_core::transaction::Transaction<'_, sqlx_postgres::Postgres>, table: &str) -> i64 {
    sqlx_core::query_scalar::query_scalar(
        "SELECT (SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(indexrelid)), 0) FROM pg_index
                 WHERE indrelid = $1::regclass)::bigint
              + pg_stat_get_xact_tuples_returned($1::regclass)",
    )
    .bind(table)
    .fetch_one(&mut **tx)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_handled_check_in_a_claim_reads_one_record_per_message_whatever_the_history() {
    let test = testing::migrated().await;
    // A consumer with a long history: 20,000 idempotency records, two
    // of them for messages now in the queue (one under a retry's id).
    query(
        "INSERT INTO bosun_handled (consumer, message_id, handled_at)
         SELECT 'commit', 'old-' || g, now() FROM generate_series(1, 20000) AS g
         UNION ALL VALUES ('commit', 'commit-2', now()), ('commit', 'commit-4', now())",
    )
    .execute(test.database.pool())
    .await
    .unwrap();
    backlog(&test, "commit", 5).await;
    query("UPDATE bosun_messages SET broker_message_id = 'commit-4.retry-1' WHERE broker_message_id = 'commit-4'")
        .execute(test.database.pool())
        .await
        .unwrap();
    // And a busy table: a plan made for any values expects many claimed
    // rows, the case where hashing every record looks cheap.
    backlog(&test, "pull-request", 20_000).await;
    for analyzed in [false, true] {
        if analyzed {
            query("ANALYZE bosun_handled, bosun_messages")
                .execute(test.database.pool())
                .await
                .unwrap();
        }
        let (claimed, reads) = claim_reading(&test, "commit", 5, Some("commit")).await;
        assert_eq!(
            claimed,
            [
                ("commit-1".to_owned(), Some(false)),
                ("commit-2".to_owned(), Some(true)),
                ("commit-3".to_owned(), Some(false)),
                ("commit-4.retry-1".to_owned(), Some(true)),
                ("commit-5".to_owned(), Some(false)),
            ]
        );
        assert!(
            reads.handled <= 10,
            "5 messages checked against 20,000 records (analyzed: {analyzed}) read {} of them",
            reads.handled
        );
        assert!(reads.messages <= 40, "5 claimed read {} rows", reads.messages);
    }
    test.finish().await;
}

#[tokio::test]
async fn a_claim_reads_the_rows_it_claims_whatever_the_backlog_and_the_statistics() {
    let test = testing::migrated().await;
    // Written after the table's statistics were taken (none: a burst
    // after a quiet spell, before autoanalyze).
    backlog(&test, "commit", 20_000).await;
    backlog(&test, "pull-request", 5000).await;
    let (claimed, Reads { messages: read, .. }) = claim_reading(&test, "commit", 10, None).await;
    assert_eq!(claimed.len(), 10);
    assert!(read <= 40, "10 claimed of 20,000 without statistics read {read} rows");
    // With statistics, the small queue behind the other one's backlog
    // (earlier sequences) is not found by walking that backlog.
    query("ANALYZE bosun_messages")
        .execute(test.database.pool())
        .await
        .unwrap();
    let (claimed, Reads { messages: read, .. }) = claim_reading(&test, "pull-request", 10, None).await;
    assert_eq!(claimed.len(), 10);
    assert!(
        read <= 40,
        "10 claimed behind 20,000 of another entity read {read} rows"
    );
    // Behind the ten claimed before: their index entries (two each
    // when an update was not HOT) are walked past too, so the bound is
    // looser here; a walk of the backlog reads 20,000.
    let (claimed, Reads { messages: read, .. }) = claim_reading(&test, "commit", 10, None).await;
    assert_eq!(claimed.len(), 10);
    assert!(read <= 100, "10 claimed of 20,000 with statistics read {read} rows");
    test.finish().await;
}

#[tokio::test]
async fn messages_are_delivered_in_the_order_they_became_visible() {
    let test = testing::migrated().await;
    let transport = transport(&test).await;
    let mut later = outbound(queue(), "scheduled-first", "CreateCommit");
    later.scheduled_at = Some(OffsetDateTime::now_utc() + Duration::from_millis(300));
    transport.send(vec![later]).await.unwrap();
    transport
        .send(vec![outbound(queue(), "sent-second", "CreateCommit")])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    transport
        .send(vec![outbound(queue(), "sent-third", "CreateCommit")])
        .await
        .unwrap();
    let order: Vec<String> = transport
        .receive(&queue(), 10, LOCK)
        .await
        .unwrap()
        .into_iter()
        .map(|message| message.broker_message_id)
        .collect();
    assert_eq!(order, ["sent-second", "scheduled-first", "sent-third"]);
    test.finish().await;
}

#[tokio::test]
async fn competing_receivers_never_get_the_same_message() {
    let test = testing::migrated().await;
    let sender = transport(&test).await;
    let total = 300;
    let messages = (0..total)
        .map(|i| outbound(queue(), &format!("m-{i}"), "CreateCommit"))
        .collect();
    sender.send(messages).await.unwrap();

    // Two transports on two pools: two bosun processes.
    let mut workers = Vec::new();
    for _ in 0..2 {
        let receiver = PostgresTransport::new(test.connect_again().await, 10);
        workers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = receiver.receive(&queue(), 7, LOCK).await.unwrap();
                if batch.is_empty() {
                    return got;
                }
                for message in batch {
                    receiver.complete(&message.lock).await.unwrap();
                    got.push(message.broker_message_id);
                }
            }
        }));
    }
    let mut seen = HashSet::new();
    let mut counts = Vec::new();
    for worker in workers {
        let got = worker.await.unwrap();
        counts.push(got.len());
        for id in got {
            assert!(seen.insert(id.clone()), "{id} was received twice");
        }
    }
    assert_eq!(seen.len(), total, "every message received once");
    assert!(counts.iter().all(|&n| n > 0), "both receivers got work: {counts:?}");
    assert_eq!(sender.depth(&queue()).await.unwrap(), 0);
    test.finish().await;
}

#[tokio::test]
async fn a_send_from_another_process_wakes_a_waiting_receiver() {
    let test = testing::migrated().await;
    // An entity of its own, so other tests' notifications do not count.
    let name = format!("wake-{}", Uuid::new_v4().simple());
    let topology = Topology {
        queues: vec![name.clone()],
        topic: "events".into(),
        subscriptions: vec![Subscription {
            name: "watcher".into(),
            event_types: vec!["BuildCompleted".into()],
        }],
        sessions: Vec::new(),
    };
    let entity = Destination::Queue(name.clone());
    let receiver = PostgresTransport::new(test.database.clone(), 10);
    receiver.ensure_topology(&topology).await.unwrap();
    receiver.start_listening().await.unwrap();
    assert!(receiver.receive(&entity, 1, LOCK).await.unwrap().is_empty());

    let timeout = Duration::from_secs(30);
    let waiter = {
        let receiver = receiver.clone();
        let entity = entity.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            receiver.wait_for_messages(&entity, timeout).await;
            started.elapsed()
        })
    };
    let sender = PostgresTransport::new(test.connect_again().await, 10);
    sender
        .send(vec![outbound(entity.clone(), "wake-1", "CreateCommit")])
        .await
        .unwrap();
    let waited = waiter.await.unwrap();
    assert!(waited < timeout, "woken by NOTIFY, not by the timeout ({waited:?})");
    let received = receiver.receive(&entity, 1, LOCK).await.unwrap();
    assert_eq!(received.len(), 1);

    // An abandon wakes receivers too.
    let waiter = {
        let receiver = receiver.clone();
        let entity = entity.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            receiver.wait_for_messages(&entity, timeout).await;
            started.elapsed()
        })
    };
    sender.abandon(&received[0].lock).await.unwrap();
    let waited = waiter.await.unwrap();
    assert!(waited < timeout, "woken by the abandon's NOTIFY ({waited:?})");
    test.finish().await;
}

#[tokio::test]
async fn scheduled_messages_are_found_by_the_fallback_timeout() {
    let test = testing::migrated().await;
    let transport = transport(&test).await;
    transport.start_listening().await.unwrap();
    let mut later = outbound(queue(), "later", "CreateCommit");
    later.scheduled_at = Some(OffsetDateTime::now_utc() + Duration::from_millis(200));
    transport.send(vec![later]).await.unwrap();
    let started = Instant::now();
    let mut received = Vec::new();
    while received.is_empty() && started.elapsed() < Duration::from_secs(10) {
        received = transport.receive(&queue(), 1, LOCK).await.unwrap();
        if received.is_empty() {
            transport.wait_for_messages(&queue(), Duration::from_millis(100)).await;
        }
    }
    assert_eq!(received.len(), 1, "the scheduled message arrived");
    test.finish().await;
}

#[tokio::test]
async fn a_failed_batch_sends_nothing() {
    let test = testing::migrated().await;
    let transport = transport(&test).await;
    let result = transport
        .send(vec![
            outbound(queue(), "ok", "CreateCommit"),
            outbound(Destination::Queue("no-such-queue".into()), "bad", "CreateCommit"),
        ])
        .await;
    assert!(matches!(result, Err(TransportError::NoSuchEntity(_))), "{result:?}");
    assert_eq!(transport.depth(&queue()).await.unwrap(), 0);
    // Its broker message id was not remembered either.
    transport
        .send(vec![outbound(queue(), "ok", "CreateCommit")])
        .await
        .unwrap();
    assert_eq!(transport.depth(&queue()).await.unwrap(), 1);
    test.finish().await;
}

#[tokio::test]
async fn ensure_topology_is_idempotent_across_processes() {
    let test = testing::migrated().await;
    let mut runs = Vec::new();
    for _ in 0..3 {
        let transport = PostgresTransport::new(test.connect_again().await, 10);
        runs.push(tokio::spawn(async move {
            transport.ensure_topology(&Topology::from_routing()).await
        }));
    }
    for run in runs {
        run.await.unwrap().unwrap();
    }
    let transport = PostgresTransport::new(test.database.clone(), 10);
    transport
        .send(vec![outbound(queue(), "a", "CreateCommit")])
        .await
        .unwrap();
    assert_eq!(transport.depth(&queue()).await.unwrap(), 1);
    test.finish().await;
}
