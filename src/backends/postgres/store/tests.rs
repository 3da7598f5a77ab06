//! Tests of the PostgreSQL store: the behaviour suite, migrations, saga listing.

use std::sync::{Arc, Mutex};

use serde_json::json;
use sqlx_core::query::query;
use time::OffsetDateTime;
use uuid::Uuid;

use super::*;
use crate::backends::postgres::testing;
use crate::ports::store::{HandledMessage, HandledStore, OutboxStore, SagaStore, TimelineEntry, TimelineStore};
use crate::ports::store::{OutboxPurpose, SagaWrite, TimelineStatus};
use crate::ports::transport::OutboundMessage;

#[tokio::test]
async fn postgres_store_passes_the_behaviour_suite() {
    let first = testing::migrated().await;
    let schemas = Arc::new(Mutex::new(vec![first]));
    let used = std::sync::atomic::AtomicUsize::new(0);
    crate::ports::behaviour::store::run_all(|| {
        let schemas = Arc::clone(&schemas);
        let reuse = used.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
        async move {
            if reuse {
                return PostgresStore::new(schemas.lock().unwrap()[0].database.clone());
            }
            // The suite runs its behaviours one after another: the schema
            // (and the connections) of the one before are done with.
            let done = std::mem::take(&mut *schemas.lock().unwrap());
            for test in done {
                test.finish().await;
            }
            let test = testing::migrated().await;
            let store = PostgresStore::new(test.database.clone());
            schemas.lock().unwrap().push(test);
            store
        }
    })
    .await;
    let schemas = std::mem::take(&mut *schemas.lock().unwrap());
    for test in schemas {
        test.finish().await;
    }
}

fn handled(
    message_id: &str,
    correlation: Uuid,
    outbox: Vec<OutboundMessage>,
    saga: Option<SagaWrite>,
) -> HandledMessage {
    HandledMessage {
        consumer: "commit".into(),
        message_id: message_id.into(),
        message_type: "CreateCommit".into(),
        saga,
        outbox,
        timeline: vec![TimelineEntry {
            correlation_id: correlation.to_string(),
            message_id: message_id.into(),
            message_type: "CreateCommit".into(),
            consumer: Some("commit".into()),
            status: TimelineStatus::Completed,
            attempt: 0,
            at: OffsetDateTime::now_utc(),
            detail: None,
        }],
    }
}

#[tokio::test]
async fn migration_3_keeps_existing_sagas_without_a_tenant() {
    let test = testing::fresh().await;
    test.database.migrate_to(2).await.unwrap();
    query(
        "INSERT INTO bosun_sagas (kind, key, version, state, created_at, updated_at)
         VALUES ('release', 'r-old', 1, '{\"step\": 1}', now(), now())",
    )
    .execute(test.database.pool())
    .await
    .unwrap();
    assert_eq!(
        test.database.migrate().await.unwrap().applied,
        (3..=crate::backends::postgres::SCHEMA_VERSION).collect::<Vec<_>>()
    );
    let store = PostgresStore::new(test.database.clone());
    store.check_schema().await.unwrap();
    let old = store.load_saga("release", "r-old").await.unwrap().unwrap();
    assert_eq!((old.version, old.tenant_id), (1, None));
    store
        .commit_handled(handled(
            "m-2",
            Uuid::now_v7(),
            vec![],
            Some(SagaWrite {
                kind: "release".into(),
                key: "r-old".into(),
                expected_version: 1,
                state: json!({"step": 2}),
                tenant_id: Some("contoso".into()),
            }),
        ))
        .await
        .unwrap();
    let saga = store.load_saga("release", "r-old").await.unwrap().unwrap();
    assert_eq!((saga.version, saga.tenant_id.as_deref()), (2, Some("contoso")));
    test.finish().await;
}

#[tokio::test]
async fn sagas_list_newest_first_with_their_history() {
    let test = testing::migrated().await;
    let store = PostgresStore::new(test.database.clone());
    let correlation = Uuid::now_v7();
    for (message, key, version) in [("m-1", "a", 0), ("m-2", "b", 0), ("m-3", "a", 1)] {
        store
            .commit_handled(handled(
                message,
                correlation,
                vec![],
                Some(SagaWrite {
                    kind: "release".into(),
                    key: key.into(),
                    expected_version: version,
                    state: json!({"last": message, "nested": {"z": 1, "a": [1, 2]}}),
                    tenant_id: None,
                }),
            ))
            .await
            .unwrap();
    }
    let sagas = store.list_sagas(None).await.unwrap();
    assert_eq!(sagas.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(
        sagas[0]
            .history
            .iter()
            .map(|h| h.message_id.as_str())
            .collect::<Vec<_>>(),
        ["m-1", "m-3"]
    );
    assert_eq!(sagas[0].state, json!({"last": "m-3", "nested": {"z": 1, "a": [1, 2]}}));
    test.finish().await;
}

#[tokio::test]
async fn migration_5_gives_existing_outbox_rows_their_purpose_from_the_old_conventions() {
    let test = testing::fresh().await;
    test.database.migrate_to(4).await.unwrap();
    query(
        "INSERT INTO bosun_outbox (source_consumer, destination, broker_message_id, correlation_id, body)
         VALUES (NULL, 'commit', 'm-1', 'c-1', '\\x31'),
                ('commit', 'pull-request', 'm-2', 'c-1', '\\x32'),
                ('commit', 'commit', 'm-1.retry-1', 'c-1', '\\x33')",
    )
    .execute(test.database.pool())
    .await
    .unwrap();
    assert_eq!(
        test.database.migrate().await.unwrap().applied,
        (5..=crate::backends::postgres::SCHEMA_VERSION).collect::<Vec<_>>()
    );
    let store = PostgresStore::new(test.database.clone());
    let purposes: Vec<_> = store
        .claim_outbox(10, Duration::from_secs(30))
        .await
        .unwrap()
        .into_iter()
        .map(|entry| (entry.message.broker_message_id, entry.purpose))
        .collect();
    assert_eq!(
        purposes,
        [
            ("m-1".to_owned(), OutboxPurpose::Sent),
            ("m-2".to_owned(), OutboxPurpose::Emitted),
            ("m-1.retry-1".to_owned(), OutboxPurpose::Retry)
        ]
    );
    assert_eq!(store.emitted("c-1").await.unwrap(), vec![b"1".to_vec(), b"2".to_vec()]);
    test.finish().await;
}

/// Two stores on two pools of one schema, as two bosun processes: a line
/// one of them writes wakes the other's wait through `NOTIFY
/// bosun_timeline`. The waiting store's fallback is a minute, so only the
/// notification can end the wait within the test's timeout.
#[tokio::test]
async fn a_timeline_write_in_another_process_wakes_a_wait_through_notify() {
    use crate::ports::store::Woken;
    let test = testing::migrated().await;
    let waiting = PostgresStore::new(test.database.clone()).with_timeline_fallback(Duration::from_secs(60));
    let other = test.connect_again().await;
    let writing = PostgresStore::new(other.clone());
    waiting.listen_for_timeline().await.unwrap();
    let within = Duration::from_secs(30);
    let correlation = Uuid::now_v7();
    let mut wait = waiting.watch_timeline(&correlation.to_string());
    // A plain append (the dispatcher's `sent` lines).
    writing
        .append_timeline(handled("m-1", correlation, vec![], None).timeline)
        .await
        .unwrap();
    assert_eq!(tokio::time::timeout(within, wait.changed()).await, Ok(Woken::Notified));
    assert_eq!(waiting.timeline(&correlation.to_string()).await.unwrap().len(), 1);
    // A handled message's commit.
    writing
        .commit_handled(handled("m-2", correlation, vec![], None))
        .await
        .unwrap();
    assert_eq!(tokio::time::timeout(within, wait.changed()).await, Ok(Woken::Notified));
    assert_eq!(waiting.timeline(&correlation.to_string()).await.unwrap().len(), 2);
    drop(wait);
    assert_eq!(waiting.timeline.watch.waited_on(), 0);
    other.pool().close().await;
    test.finish().await;
}

#[tokio::test]
async fn a_saga_turn_keeps_every_other_process_waiting_until_it_is_dropped() {
    let test = testing::migrated().await;
    let here = PostgresStore::new(test.database.clone());
    let there = PostgresStore::new(test.connect_again().await);
    let held = here
        .saga_turn("release", "r-1")
        .await
        .unwrap()
        .expect("PostgreSQL has turns");

    // Another process waits for the same key, but not for another key nor
    // for the same key in another saga kind.
    let waiting = tokio::spawn(async move {
        let turn = there.saga_turn("release", "r-1").await.unwrap();
        (there, turn)
    });
    let other_key = here.saga_turn("release", "r-2").await.unwrap();
    let other_kind = here.saga_turn("environment", "r-1").await.unwrap();
    drop((other_key, other_kind));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the second process got a turn that is held");

    drop(held);
    let (there, turn) = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the turn passes once it is dropped")
        .unwrap();
    assert!(turn.is_some());
    drop(turn);
    // Released again: the first process gets it back.
    let again = tokio::time::timeout(Duration::from_secs(30), here.saga_turn("release", "r-1"))
        .await
        .expect("released after the second drop")
        .unwrap();
    drop((again, there));
    test.finish().await;
}

#[tokio::test]
async fn a_turn_abandoned_while_waiting_never_leaves_the_key_locked() {
    let test = testing::migrated().await;
    let here = PostgresStore::new(test.database.clone());
    let there = PostgresStore::new(test.connect_again().await);
    let held = here.saga_turn("release", "r-1").await.unwrap();
    // The waiting process gives up (shutdown) before the turn is free.
    let gave_up = tokio::time::timeout(Duration::from_millis(200), there.saga_turn("release", "r-1")).await;
    assert!(gave_up.is_err(), "the turn was held");
    drop(held);
    // Had the abandoned wait's connection gone back to the pool, it would be
    // granted the lock and hold it forever.
    let turn = tokio::time::timeout(Duration::from_secs(30), here.saga_turn("release", "r-1"))
        .await
        .expect("the key is free once its holder dropped it")
        .unwrap();
    drop(turn);
    test.finish().await;
}

#[tokio::test]
async fn the_fleet_lists_processes_seen_lately_and_forgets_the_ones_long_gone() {
    use crate::ports::store::{AdminStore, ProcessRecord};
    use std::time::Duration;

    let test = testing::migrated().await;
    let store = PostgresStore::new(test.database.clone());
    let process = |role: &str, writes_wire: u32| ProcessRecord {
        id: Uuid::now_v7(),
        role: role.to_owned(),
        release: "0.1.0".to_owned(),
        built_for_schema: crate::backends::postgres::SCHEMA_VERSION,
        writes_wire,
        reads_wire_from: 1,
        reads_wire_to: 2,
        host: "bosun-api-7d9f".to_owned(),
        started_at: OffsetDateTime::now_utc(),
        seen_at: OffsetDateTime::UNIX_EPOCH,
    };
    let api = process("api", 1);
    let serve = process("serve", 2);
    store.heartbeat(&api).await.unwrap();
    store.heartbeat(&serve).await.unwrap();
    // A second heartbeat updates, never duplicates; the wire it writes may change.
    store
        .heartbeat(&ProcessRecord {
            writes_wire: 2,
            ..api.clone()
        })
        .await
        .unwrap();
    let fleet = store
        .fleet(Duration::from_secs(90))
        .await
        .unwrap()
        .expect("PostgreSQL keeps a fleet");
    assert_eq!(
        fleet.iter().map(|p| (p.id, p.writes_wire)).collect::<Vec<_>>(),
        vec![(api.id, 2), (serve.id, 2)]
    );
    assert_eq!(fleet[0].role, "api");
    assert_eq!(fleet[0].host, "bosun-api-7d9f");
    assert!(fleet[0].seen_at > OffsetDateTime::UNIX_EPOCH, "the database's clock");

    // One that stopped leaves; one not seen for long is not listed, and a
    // day later its row is gone with the next heartbeat.
    store.leave_fleet(serve.id).await.unwrap();
    query("UPDATE bosun_processes SET seen_at = now() - interval '10 minutes' WHERE id = $1")
        .bind(api.id)
        .execute(test.database.pool())
        .await
        .unwrap();
    assert_eq!(store.fleet(Duration::from_secs(90)).await.unwrap(), Some(vec![]));
    assert_eq!(
        store.fleet(Duration::from_secs(3600)).await.unwrap().map(|f| f.len()),
        Some(1)
    );
    query("UPDATE bosun_processes SET seen_at = now() - interval '25 hours' WHERE id = $1")
        .bind(api.id)
        .execute(test.database.pool())
        .await
        .unwrap();
    let another = process("serve", 2);
    store.heartbeat(&another).await.unwrap();
    let rows: i64 = sqlx_core::query_scalar::query_scalar("SELECT count(*) FROM bosun_processes")
        .fetch_one(test.database.pool())
        .await
        .unwrap();
    assert_eq!(rows, 1, "the process gone for a day is forgotten");
    test.finish().await;
}

/// Two stores on two pools of one database (two processes, as far as the
/// database can tell) put contoso's policy over the same version at once:
/// one wins, the other is told the policy changed.
#[tokio::test]
async fn release_policy_puts_from_two_pools_have_one_winner() {
    use crate::ports::store::{PolicyStore, StoreError};

    let test = testing::migrated().await;
    let stores = [
        PostgresStore::new(test.database.clone()),
        PostgresStore::new(test.connect_again().await),
    ];
    stores[0]
        .put_release_policy(
            "contoso",
            &json!({"n": 0}),
            "cli:alice",
            None,
            None,
            OffsetDateTime::now_utc(),
        )
        .await
        .unwrap();
    for round in 1..=5u64 {
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let puts = stores.iter().enumerate().map(|(writer, store)| {
            let (store, start) = (store.clone(), Arc::clone(&start));
            tokio::spawn(async move {
                start.wait().await;
                store
                    .put_release_policy(
                        "contoso",
                        &json!({"round": round, "writer": writer}),
                        "cli:alice",
                        None,
                        Some(round),
                        OffsetDateTime::now_utc(),
                    )
                    .await
            })
        });
        let mut answers = Vec::new();
        for put in puts.collect::<Vec<_>>() {
            answers.push(put.await.unwrap());
        }
        let won: Vec<_> = answers.iter().filter_map(|answer| answer.as_ref().ok()).collect();
        assert_eq!(won.len(), 1, "round {round}: {answers:?}");
        assert_eq!(won[0].version, round + 1);
        assert!(
            answers.iter().any(|answer| matches!(
                answer,
                Err(StoreError::PolicyChanged { expected, found, .. })
                    if *expected == Some(round) && *found == Some(round + 1)
            )),
            "round {round}: {answers:?}"
        );
    }
    let history = stores[1].release_policy_history("contoso").await.unwrap();
    assert_eq!(
        history.iter().map(|record| record.version).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    test.finish().await;
}

/// The table itself refuses to change or delete a stored version.
#[tokio::test]
async fn a_stored_release_policy_version_cannot_be_updated_or_deleted() {
    use crate::ports::store::PolicyStore;

    let test = testing::migrated().await;
    let store = PostgresStore::new(test.database.clone());
    let stored = store
        .put_release_policy(
            "contoso",
            &json!({"n": 1}),
            "cli:alice",
            Some("first"),
            None,
            OffsetDateTime::now_utc(),
        )
        .await
        .unwrap();
    for statement in [
        "UPDATE bosun_release_policies SET document = '{}' WHERE tenant_id = 'contoso'",
        "DELETE FROM bosun_release_policies WHERE tenant_id = 'contoso'",
    ] {
        let err = query(statement).execute(test.database.pool()).await.unwrap_err();
        assert!(err.to_string().contains("append-only"), "{statement}: {err}");
    }
    assert_eq!(store.release_policy_history("contoso").await.unwrap(), [stored]);
    test.finish().await;
}

/// Contoso's release audit entry `id`, approved now.
fn audit_entry(id: &str) -> crate::ports::store::AuditEntry {
    crate::ports::store::AuditEntry {
        id: id.into(),
        tenant_id: "contoso".into(),
        sequence: 0,
        at: OffsetDateTime::now_utc(),
        action: "approved".into(),
        release_id: Some("r-1".into()),
        environment: Some("prod".into()),
        by: Some("key:k1 (deploy key)".into()),
        door: Some("api:k1".into()),
        reason: None,
        detail: json!({"rule": "one-approval"}),
    }
}

/// Two stores on two pools of one database (two processes, as far as the
/// database can tell) append to contoso's audit log at once while a third
/// pages through it by sequence: the numbers run 1 to N with no gap, and
/// the reader, reading after the last sequence it saw, never finds an
/// entry numbered past one it has not seen (entries become visible in
/// the order they are numbered, so no page skips one).
#[tokio::test]
async fn audit_appends_from_two_pools_become_visible_in_sequence_order() {
    use crate::ports::store::AuditStore;

    const EACH: u64 = 40;
    let test = testing::migrated().await;
    let stores = [
        PostgresStore::new(test.database.clone()),
        PostgresStore::new(test.connect_again().await),
    ];
    let reader = PostgresStore::new(test.connect_again().await);
    let start = Arc::new(tokio::sync::Barrier::new(2));
    let writers: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(writer, store)| {
            let (store, start) = (store.clone(), Arc::clone(&start));
            tokio::spawn(async move {
                start.wait().await;
                for n in 0..EACH {
                    let (_, new) = store
                        .append_audit(&audit_entry(&format!("w{writer}-{n}")))
                        .await
                        .unwrap();
                    assert!(new);
                }
            })
        })
        .collect();
    let mut seen = 0u64;
    while seen < 2 * EACH {
        for entry in reader.audit_entries("contoso", None, Some(seen), 7).await.unwrap() {
            assert_eq!(entry.sequence, seen + 1, "an entry after {seen} was skipped");
            seen = entry.sequence;
        }
        tokio::task::yield_now().await;
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let log = reader.audit_entries("contoso", None, None, 1000).await.unwrap();
    assert_eq!(
        log.iter().map(|entry| entry.sequence).collect::<Vec<_>>(),
        (1..=2 * EACH).collect::<Vec<_>>()
    );
    test.finish().await;
}

/// The table itself refuses to change or delete an audit entry.
#[tokio::test]
async fn a_release_audit_entry_cannot_be_updated_or_deleted() {
    use crate::ports::store::AuditStore;

    let test = testing::migrated().await;
    let store = PostgresStore::new(test.database.clone());
    let (stored, new) = store.append_audit(&audit_entry("m-1")).await.unwrap();
    assert!(new);
    for statement in [
        "UPDATE bosun_release_audit SET action = 'rejected' WHERE tenant_id = 'contoso'",
        "DELETE FROM bosun_release_audit WHERE tenant_id = 'contoso'",
    ] {
        let err = query(statement).execute(test.database.pool()).await.unwrap_err();
        assert!(err.to_string().contains("append-only"), "{statement}: {err}");
    }
    assert_eq!(store.audit_entries("contoso", None, None, 10).await.unwrap(), [stored]);
    test.finish().await;
}
