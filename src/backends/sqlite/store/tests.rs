//! Tests of the SQLite store: the behaviour suite and the upgrades of old files.

use serde_json::json;

use super::*;
use crate::ports::store::{
    AcceptedCommand, HandledMessage, HandledStore, OutboxStore, SagaStore, TimelineEntry, TimelineStore,
};
use crate::ports::store::{AccessStore, IdempotencyClaim, OutboxPurpose, SagaWrite};

#[tokio::test]
async fn sqlite_store_passes_the_behaviour_suite() {
    crate::ports::behaviour::store::run_all(|| async { SqliteStore::in_memory().unwrap() }).await;
}

/// The `sagas` table as bosun made it before sagas kept their tenant.
const OLD_SAGAS: &str = "
    CREATE TABLE sagas (
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        version INTEGER NOT NULL,
        state TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (kind, key)
    );
    INSERT INTO sagas VALUES ('release', 'r-old', 1, '{\"step\": 1}', 1, 1);
";

fn saga_columns(path: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut statement = conn.prepare("SELECT name FROM pragma_table_info('sagas')").unwrap();
    statement
        .query_map([], |row| row.get::<_, String>(0))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
}

#[tokio::test]
async fn an_old_state_db_gets_the_saga_tenant_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(OLD_SAGAS)
        .unwrap();
    assert!(!saga_columns(&path).contains(&"tenant_id".to_owned()));

    // Several processes opening the old file at once: one adds the column.
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || SqliteStore::open(&path).map(drop))
        })
        .collect();
    for open in opens {
        open.join().unwrap().unwrap();
    }
    let columns = saga_columns(&path);
    assert_eq!(
        columns.iter().filter(|name| *name == "tenant_id").count(),
        1,
        "{columns:?}"
    );

    let store = SqliteStore::open(&path).unwrap();
    let old = store.load_saga("release", "r-old").await.unwrap().unwrap();
    assert_eq!((old.version, old.tenant_id), (1, None));
    assert_eq!(old.state, json!({"step": 1}));
    let write = SagaWrite {
        kind: "release".into(),
        key: "r-old".into(),
        expected_version: 1,
        state: json!({"step": 2}),
        tenant_id: Some("contoso".into()),
    };
    let handled = HandledMessage {
        consumer: "release".into(),
        message_id: "m-2".into(),
        message_type: "CommitCreated".into(),
        saga: Some(write),
        outbox: vec![],
        timeline: vec![],
    };
    store.commit_handled(handled).await.unwrap();
    let saga = store.load_saga("release", "r-old").await.unwrap().unwrap();
    assert_eq!((saga.version, saga.tenant_id.as_deref()), (2, Some("contoso")));
}

#[tokio::test]
async fn release_sagas_of_an_old_state_db_move_under_their_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(SqliteStore::open(&path).unwrap());
    // Rows as a bosun before tenant keys wrote them.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "INSERT INTO sagas VALUES ('release', 'rel-1', 1, '{}', 1, 1, 'contoso');
             INSERT INTO saga_history VALUES ('release', 'rel-1', 1, 'm-1', 'BuildCompleted', 1);
             INSERT INTO sagas VALUES ('release', 'rel-2', 1, '{}', 1, 1, NULL);
             INSERT INTO saga_history VALUES ('release', 'rel-2', 1, 'm-2', 'BuildCompleted', 1);
             INSERT INTO timeline (correlation_id, message_id, message_type, status, attempt, at)
                 VALUES ('c-2', 'm-2', 'BuildCompleted', 'completed', 0, 1);
             INSERT INTO deliveries (correlation_id, tenant_id, started_by, message_type, message_id, started_at)
                 VALUES ('c-2', 'fabrikam', 'cli:test', 'ProvisionRepository', 'm-0', 1);
             INSERT INTO sagas VALUES ('release', 'rel-3', 1, '{}', 1, 1, NULL);
             INSERT INTO sagas VALUES ('gitops', 'contoso/prod', 1, '{}', 1, 1, 'contoso');
             PRAGMA user_version = 0;",
        )
        .unwrap();
    let store = SqliteStore::open(&path).unwrap();
    let contoso = store.load_saga("release", "contoso/rel-1").await.unwrap().unwrap();
    assert_eq!(contoso.tenant_id.as_deref(), Some("contoso"));
    assert_eq!(contoso.history.len(), 1, "the history moves with the saga");
    let fabrikam = store.load_saga("release", "fabrikam/rel-2").await.unwrap().unwrap();
    assert_eq!(fabrikam.tenant_id.as_deref(), Some("fabrikam"));
    assert!(store.load_saga("release", "rel-1").await.unwrap().is_none());
    assert!(
        store.load_saga("release", "rel-3").await.unwrap().is_some(),
        "tenant unknown: kept"
    );
    assert!(store.load_saga("gitops", "contoso/prod").await.unwrap().is_some());
    // Opening again changes nothing.
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert!(store.load_saga("release", "contoso/rel-1").await.unwrap().is_some());
}

#[tokio::test]
async fn idempotency_claims_from_several_processes_have_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    // One store (one connection) per "process".
    let stores: Vec<SqliteStore> = (0..4).map(|_| SqliteStore::open(&path).unwrap()).collect();
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(stores.len() * 2));
    let mut tasks = tokio::task::JoinSet::new();
    for (claimer, store) in stores.iter().cycle().take(stores.len() * 2).enumerate() {
        let (store, start) = (store.clone(), std::sync::Arc::clone(&start));
        tasks.spawn(async move {
            start.wait().await;
            store
                .claim_idempotency("contoso", "k", &format!("h-{claimer}"), Duration::from_secs(600))
                .await
                .unwrap()
        });
    }
    let claims = tasks.join_all().await;
    let winners = claims
        .iter()
        .filter(|claim| **claim == IdempotencyClaim::Claimed)
        .count();
    assert_eq!(winners, 1, "{claims:?}");
    assert!(
        claims
            .iter()
            .all(|claim| matches!(claim, IdempotencyClaim::Claimed | IdempotencyClaim::InProgress { .. })),
        "{claims:?}"
    );
}

#[tokio::test]
async fn outbox_rows_of_an_old_state_db_get_their_purpose_from_the_old_conventions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    // The outbox as bosun made it before the purpose was stored.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE outbox (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                source_consumer TEXT,
                source_message_id TEXT,
                destination TEXT NOT NULL,
                broker_message_id TEXT NOT NULL,
                message_type TEXT,
                correlation_id TEXT,
                body BLOB NOT NULL,
                scheduled_at INTEGER,
                created_at INTEGER NOT NULL,
                claimed_until INTEGER,
                dispatched_at INTEGER
             );
             INSERT INTO outbox (source_consumer, destination, broker_message_id, correlation_id, body, created_at)
             VALUES (NULL, 'commit', 'm-1', 'c-1', x'31', 1),
                    ('commit', 'pull-request', 'm-2', 'c-1', x'32', 1),
                    ('commit', 'commit', 'm-1.retry-1', 'c-1', x'33', 1);
             PRAGMA user_version = 1;",
        )
        .unwrap();
    let store = SqliteStore::open(&path).unwrap();
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
}

#[tokio::test]
async fn a_saga_stored_corrupt_is_a_corrupt_error_that_names_it_and_says_dead_letter() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = SqliteStore::open(&path).unwrap();
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("INSERT INTO sagas VALUES ('release', 'contoso/r-1', 1, 'not json', 1, 1, 'contoso')")
        .unwrap();
    let err = store.load_saga("release", "contoso/r-1").await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert_eq!(err.next_step(), crate::ports::error::NextStep::DeadLetter);
    assert!(err.to_string().contains("state of saga release/contoso/r-1"), "{err}");
    assert!(
        std::error::Error::source(&err).is_some(),
        "the JSON error is kept as the source"
    );
    // Listing sagas meets the same row.
    assert!(matches!(store.list_sagas(None).await, Err(StoreError::Corrupt { .. })));
}

#[tokio::test]
async fn a_database_failure_says_what_was_being_done_and_to_retry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = SqliteStore::open(&path).unwrap();
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("DROP TABLE handled")
        .unwrap();
    let err = store.is_handled("commit", "m-1").await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}");
    assert_eq!(err.next_step(), crate::ports::error::NextStep::Retry);
    assert!(
        err.to_string()
            .starts_with("store unavailable while checking whether commit handled message m-1: "),
        "{err}"
    );
}

fn timeline_line(correlation_id: &str, message_id: &str) -> TimelineEntry {
    TimelineEntry {
        correlation_id: correlation_id.into(),
        message_id: message_id.into(),
        message_type: "Probe".into(),
        consumer: Some("probe".into()),
        status: crate::ports::store::TimelineStatus::Completed,
        attempt: 0,
        at: OffsetDateTime::now_utc(),
        detail: None,
    }
}

/// The fallback is a minute, so only the write's signal can end the waits
/// within the test's timeout.
#[tokio::test]
async fn a_timeline_write_wakes_the_waits_of_its_delivery_in_process() {
    use crate::ports::store::Woken;
    let store = SqliteStore::in_memory()
        .unwrap()
        .with_timeline_fallback(Duration::from_secs(60));
    let within = Duration::from_secs(30);
    // append_timeline
    let mut wait = store.watch_timeline("delivery-1");
    let writer = store.clone();
    let writing = tokio::spawn(async move { writer.append_timeline(vec![timeline_line("delivery-1", "m-1")]).await });
    assert_eq!(tokio::time::timeout(within, wait.changed()).await, Ok(Woken::Notified));
    writing.await.unwrap().unwrap();
    assert_eq!(store.timeline("delivery-1").await.unwrap().len(), 1);
    // commit_handled, on the same wait
    let handled = HandledMessage {
        consumer: "probe".into(),
        message_id: "m-2".into(),
        message_type: "Probe".into(),
        saga: None,
        outbox: vec![],
        timeline: vec![timeline_line("delivery-1", "m-2")],
    };
    store.commit_handled(handled).await.unwrap();
    assert_eq!(tokio::time::timeout(within, wait.changed()).await, Ok(Woken::Notified));
    // accept_command (what a send writes)
    let line = timeline_line("delivery-1", "m-3");
    store
        .accept_command(
            AcceptedCommand {
                delivery: crate::ports::store::DeliveryRecord {
                    correlation_id: "delivery-1".into(),
                    tenant_id: "contoso".into(),
                    started_by: "cli:test".into(),
                    message_type: "Probe".into(),
                    message_id: "m-3".into(),
                    started_at: line.at,
                    traceparent: None,
                    tracestate: None,
                },
                message: crate::ports::transport::OutboundMessage {
                    destination: bosun_contracts::Destination::Queue("probe".into()),
                    broker_message_id: "m-3".into(),
                    message_type: Some("Probe".into()),
                    correlation_id: Some("delivery-1".into()),
                    body: b"{}".to_vec(),
                    scheduled_at: None,
                },
                timeline: line,
            },
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_eq!(tokio::time::timeout(within, wait.changed()).await, Ok(Woken::Notified));
    // Another delivery's line does not end the wait: a write to this one
    // after it does, and is the one seen.
    let mut other = store.watch_timeline("delivery-2");
    store
        .append_timeline(vec![timeline_line("delivery-1", "m-4")])
        .await
        .unwrap();
    store
        .append_timeline(vec![timeline_line("delivery-2", "m-5")])
        .await
        .unwrap();
    assert_eq!(tokio::time::timeout(within, other.changed()).await, Ok(Woken::Notified));
    assert_eq!(store.timeline("delivery-2").await.unwrap().len(), 1);
    drop((wait, other));
    assert_eq!(store.watch.waited_on(), 0, "dropped waits are forgotten");
}

#[tokio::test]
async fn a_key_of_an_old_state_db_keeps_working_without_an_expiry_and_can_be_rotated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    // The key table as bosun made it before keys expired.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE api_keys (
                id TEXT PRIMARY KEY,
                tenant_id TEXT NOT NULL,
                scopes TEXT NOT NULL,
                secret_hash TEXT NOT NULL,
                description TEXT,
                created_by TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                revoked_at INTEGER
             );
             INSERT INTO api_keys VALUES ('0123456789ab', 'contoso', '[\"deliveries:read\"]', 'h', 'ci', 'alice', 1000, NULL);",
        )
        .unwrap();
    let store = SqliteStore::open(&path).unwrap();
    let old = store.api_key("0123456789ab").await.unwrap().unwrap();
    assert_eq!(
        (
            old.expires_at,
            old.last_used_at,
            old.rotated_from.as_deref(),
            old.rotated_to.as_deref()
        ),
        (None, None, None, None)
    );
    let now = time::OffsetDateTime::now_utc();
    let caller = crate::front::access::check(&old, now).unwrap();
    assert_eq!(caller.tenant_id, "contoso");
    let successor = crate::front::access::successor(&old, "bob", Duration::from_secs(86_400)).unwrap();
    let grace_end = now + time::Duration::hours(1);
    let old = store
        .rotate_api_key(&old.id, successor.record.clone(), grace_end)
        .await
        .unwrap();
    assert_eq!(old.rotated_to, Some(successor.record.id.clone()));
    assert_eq!(
        old.expires_at.map(|at| at.unix_timestamp()),
        Some(grace_end.unix_timestamp())
    );
    // What this release wrote, the previous one's columns still read.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let scopes: String = conn
        .query_row(
            "SELECT scopes FROM api_keys WHERE id = ?1",
            [&successor.record.id],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(scopes, "[\"deliveries:read\"]");
}

/// Two stores opened on one file (two connections, as two processes
/// have) put contoso's policy over the same version at once: one wins,
/// the other is told the policy changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_policy_puts_from_two_connections_have_one_winner() {
    use crate::ports::store::PolicyStore;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let stores = [SqliteStore::open(&path).unwrap(), SqliteStore::open(&path).unwrap()];
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
        let start = std::sync::Arc::new(tokio::sync::Barrier::new(2));
        let mut puts = Vec::new();
        for (writer, store) in stores.iter().enumerate() {
            let (store, start) = (store.clone(), std::sync::Arc::clone(&start));
            puts.push(tokio::spawn(async move {
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
            }));
        }
        let mut answers = Vec::new();
        for put in puts {
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
}

/// A state.db of the previous release (no `release_policies`) gets the
/// table when this release opens it, its data version unchanged (nothing
/// the previous release would not find when it opens the file again), and
/// the table refuses to change or delete a stored version.
#[tokio::test]
async fn release_policies_are_added_to_an_older_file_and_are_append_only() {
    use crate::ports::store::PolicyStore;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(SqliteStore::open(&path).unwrap());
    let user_version = |path: &Path| -> i64 {
        rusqlite::Connection::open(path)
            .unwrap()
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap()
    };
    let before = user_version(&path);
    // What the previous release made: the same file without the table.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("DROP TABLE release_policies")
        .unwrap();

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(user_version(&path), before);
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
    let conn = rusqlite::Connection::open(&path).unwrap();
    for statement in [
        "UPDATE release_policies SET document = '{}' WHERE tenant_id = 'contoso'",
        "DELETE FROM release_policies WHERE tenant_id = 'contoso'",
    ] {
        let err = conn.execute_batch(statement).unwrap_err();
        assert!(err.to_string().contains("append-only"), "{statement}: {err}");
    }
    assert_eq!(store.release_policy_history("contoso").await.unwrap(), [stored]);
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
        by: Some("cli:alice".into()),
        door: Some("cli:alice".into()),
        reason: None,
        detail: json!({"rule": "one-approval"}),
    }
}

/// Two stores opened on one file (two connections, as two processes
/// have) append to contoso's audit log at once: every entry is numbered
/// once, the numbers run 1 to N with no gap, and each store's own appends
/// are numbered in the order it made them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_appends_from_two_connections_are_numbered_in_order() {
    use crate::ports::store::AuditStore;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let stores = [SqliteStore::open(&path).unwrap(), SqliteStore::open(&path).unwrap()];
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(2));
    let mut writers = Vec::new();
    for (writer, store) in stores.iter().enumerate() {
        let (store, start) = (store.clone(), std::sync::Arc::clone(&start));
        writers.push(tokio::spawn(async move {
            start.wait().await;
            let mut numbered = Vec::new();
            for n in 0..20 {
                let (entry, new) = store
                    .append_audit(&audit_entry(&format!("w{writer}-{n}")))
                    .await
                    .unwrap();
                assert!(new);
                numbered.push(entry.sequence);
            }
            numbered
        }));
    }
    for writer in writers {
        let numbered = writer.await.unwrap();
        assert!(numbered.windows(2).all(|pair| pair[0] < pair[1]), "{numbered:?}");
    }
    let log = stores[1].audit_entries("contoso", None, None, 100).await.unwrap();
    assert_eq!(
        log.iter().map(|entry| entry.sequence).collect::<Vec<_>>(),
        (1..=40).collect::<Vec<u64>>()
    );
}

/// A state.db of the previous release (no `release_audit`) gets the table
/// when this release opens it, its data version unchanged, and the table
/// refuses to change or delete an entry.
#[tokio::test]
async fn the_release_audit_is_added_to_an_older_file_and_is_append_only() {
    use crate::ports::store::AuditStore;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(SqliteStore::open(&path).unwrap());
    let user_version = |path: &Path| -> i64 {
        rusqlite::Connection::open(path)
            .unwrap()
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap()
    };
    let before = user_version(&path);
    // What the previous release made: the same file without the table.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("DROP TABLE release_audit")
        .unwrap();

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(user_version(&path), before);
    let (stored, new) = store.append_audit(&audit_entry("m-1")).await.unwrap();
    assert!(new);
    let conn = rusqlite::Connection::open(&path).unwrap();
    for statement in [
        "UPDATE release_audit SET action = 'rejected' WHERE tenant_id = 'contoso'",
        "DELETE FROM release_audit WHERE tenant_id = 'contoso'",
    ] {
        let err = conn.execute_batch(statement).unwrap_err();
        assert!(err.to_string().contains("append-only"), "{statement}: {err}");
    }
    assert_eq!(store.audit_entries("contoso", None, None, 10).await.unwrap(), [stored]);
}
