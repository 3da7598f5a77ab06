//! Tests of `src/wiring.rs`.

use std::time::Duration;

use sqlx_core::query::query;

use super::*;
use crate::backends::postgres::{SCHEMA_VERSION, testing};

fn process() -> ProcessRecord {
    this_process("serve", bosun_contracts::WIRE_VERSION)
}

/// Records a migration a newer bosun applied, running with `runs_with`.
async fn newer_migration(test: &testing::TestDatabase, version: i64, runs_with: i64) {
    query("INSERT INTO bosun_schema_migrations (version, name, checksum, runs_with) VALUES ($1, 'newer', '', $2)")
        .bind(version)
        .bind(runs_with)
        .execute(test.database.pool())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_serving_process_stops_once_the_database_moves_past_its_window_and_not_before() {
    let test = testing::migrated().await;
    let store: Arc<dyn Store> = Arc::new(PostgresStore::new(test.database.clone()));
    let stop = CancellationToken::new();
    let watch = tokio::spawn(watch_schema(store, process(), Duration::from_millis(50), stop.clone()));

    // A compatible migration of the next release: this bosun runs on it.
    newer_migration(&test, SCHEMA_VERSION + 1, SCHEMA_VERSION).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!watch.is_finished(), "a compatible migration stopped the process");
    assert!(!stop.is_cancelled());

    // A breaking one: this bosun must stop taking work.
    newer_migration(&test, SCHEMA_VERSION + 2, SCHEMA_VERSION + 2).await;
    let moved = tokio::time::timeout(Duration::from_secs(10), watch)
        .await
        .expect("the watch noticed within its interval")
        .unwrap();
    assert!(
        matches!(moved, Some(StoreError::SchemaTooNew { built_for, .. }) if built_for == SCHEMA_VERSION),
        "{moved:?}"
    );
    assert!(stop.is_cancelled(), "the host is told to stop");
    test.finish().await;
}

#[tokio::test]
async fn a_watch_ends_quietly_when_the_process_stops() {
    let test = testing::migrated().await;
    let store: Arc<dyn Store> = Arc::new(PostgresStore::new(test.database.clone()));
    let stop = CancellationToken::new();
    let me = process();
    let watch = tokio::spawn(watch_schema(
        Arc::clone(&store),
        me.clone(),
        Duration::from_secs(3600),
        stop.clone(),
    ));
    // It is in the fleet while it runs, and leaves when it stops.
    let listed = || async {
        store
            .fleet(Duration::from_secs(60))
            .await
            .unwrap()
            .expect("PostgreSQL keeps a fleet")
            .iter()
            .any(|p| p.id == me.id)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !listed().await {
        assert!(std::time::Instant::now() < deadline, "never listed in the fleet");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    assert!(watch.await.unwrap().is_none());
    assert!(!listed().await, "still listed after it stopped");
    test.finish().await;
}

/// `serve` and `api` on Service Bus without `BOSUN_DATABASE_URL` refuse to
/// start, naming the setting, instead of each keeping its own SQLite
/// state; `BOSUN_ALLOW_LOCAL_STORE=true` allows it for a trial, and a
/// database or another transport never meets the rule.
#[test]
fn service_bus_without_a_shared_database_is_refused_unless_allowed() {
    let emulator = "Endpoint=sb://127.0.0.1:5673;SharedAccessKeyName=RootManageSharedAccessKey;\
                    SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true";
    let settings = |extra: &[(&str, &str)]| {
        let mut pairs: std::collections::BTreeMap<String, String> = [
            ("BOSUN_TRANSPORT", "servicebus"),
            ("BOSUN_SERVICEBUS_CONNECTION_STRING", emulator),
        ]
        .iter()
        .chain(extra)
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        pairs.retain(|_, v| !v.is_empty());
        Settings::from_sources(&pairs, &Default::default()).unwrap()
    };
    let refused = check_shared_state(&settings(&[]), "serve").unwrap_err();
    let text = refused.to_string();
    assert!(
        text.contains("BOSUN_DATABASE_URL is not set")
            && text.contains("BOSUN_ALLOW_LOCAL_STORE=true")
            && text.contains("state.db"),
        "{text}"
    );
    check_shared_state(&settings(&[("BOSUN_ALLOW_LOCAL_STORE", "true")]), "api").unwrap();
    check_shared_state(&settings(&[("BOSUN_DATABASE_URL", "postgres://db/bosun")]), "serve").unwrap();
    let embedded = Settings::from_sources(&std::collections::BTreeMap::new(), &Default::default()).unwrap();
    check_shared_state(&embedded, "serve").unwrap();
    let typo = std::collections::BTreeMap::from([
        ("BOSUN_TRANSPORT".to_owned(), "servicebus".to_owned()),
        ("BOSUN_SERVICEBUS_CONNECTION_STRING".to_owned(), emulator.to_owned()),
        ("BOSUN_ALLOW_LOCAL_STORE".to_owned(), "yes".to_owned()),
    ]);
    let err = Settings::from_sources(&typo, &Default::default()).unwrap_err();
    assert!(err.to_string().contains("BOSUN_ALLOW_LOCAL_STORE"), "{err}");
}
