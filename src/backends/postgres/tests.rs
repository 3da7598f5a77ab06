//! Tests of `src/backends/postgres/mod.rs`.

use serde_json::Value;
use sqlx_core::query::query;

use super::*;

/// The last migration from before the compatibility window (breaking,
/// as they all are); the ones after it are compatible.
const BEFORE_THE_WINDOW: i64 = 13;

/// The schema the previous release (`.ci/previous-release`) was built
/// for: every migration since must let it run. Raise it with that file
/// when a release is cut.
const PREVIOUS_RELEASE: i64 = 13;

#[tokio::test]
async fn migrations_apply_once_and_are_idempotent() {
    let test = testing::fresh().await;
    let database = &test.database;
    assert_eq!(database.schema_version().await.unwrap(), 0);
    let first = database.migrate().await.unwrap();
    assert_eq!(first.applied, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    assert_eq!(first.version, SCHEMA_VERSION);
    let second = database.migrate().await.unwrap();
    assert!(second.applied.is_empty(), "{second:?}");
    assert_eq!(second.version, SCHEMA_VERSION);
    database.check_schema().await.unwrap();
    test.finish().await;
}

#[tokio::test]
async fn concurrent_migrations_apply_each_version_once() {
    let test = testing::fresh().await;
    let mut runs = Vec::new();
    for _ in 0..4 {
        let database = test.connect_again().await;
        runs.push(tokio::spawn(async move { database.migrate().await }));
    }
    let mut applied = Vec::new();
    for run in runs {
        let report = run.await.unwrap().unwrap();
        assert_eq!(report.version, SCHEMA_VERSION);
        applied.extend(report.applied);
    }
    applied.sort_unstable();
    assert_eq!(
        applied,
        (1..=SCHEMA_VERSION).collect::<Vec<_>>(),
        "each version applied exactly once"
    );
    let recorded: Vec<i64> =
        sqlx_core::query_scalar::query_scalar("SELECT version FROM bosun_schema_migrations ORDER BY version")
            .fetch_all(test.database.pool())
            .await
            .unwrap();
    assert_eq!(recorded, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    test.finish().await;
}

#[tokio::test]
async fn check_schema_refuses_another_version() {
    let test = testing::fresh().await;
    let database = &test.database;
    let never = database.check_schema().await.unwrap_err();
    assert!(matches!(
        never,
        DatabaseError::SchemaMismatch {
            found: 0,
            expected: SCHEMA_VERSION
        }
    ));

    database.migrate_to(1).await.unwrap();
    let old = database.check_schema().await.unwrap_err();
    assert_eq!(
        old.to_string(),
        format!("database schema is at version 1, this bosun needs {SCHEMA_VERSION}; run `bosun migrate`")
    );
    let as_store = StoreError::from(old);
    assert!(
        matches!(as_store, StoreError::SchemaMismatch { found: 1, .. }),
        "{as_store:?}"
    );

    assert_eq!(
        database.migrate().await.unwrap().applied,
        (2..=SCHEMA_VERSION).collect::<Vec<_>>()
    );
    database.check_schema().await.unwrap();

    // A newer bosun migrated this database and did not say this one runs
    // on it (no runs_with: as a bosun from before the window records it):
    // refuse to serve and to migrate.
    query("INSERT INTO bosun_schema_migrations (version, name, checksum) VALUES ($1, 'future', '')")
        .bind(SCHEMA_VERSION + 1)
        .execute(database.pool())
        .await
        .unwrap();
    let newer = database.check_schema().await.unwrap_err();
    assert!(newer.to_string().contains("newer"), "{newer}");
    assert!(matches!(
        database.migrate().await,
        Err(DatabaseError::SchemaTooNew { found, .. }) if found == SCHEMA_VERSION + 1
    ));
    test.finish().await;
}

#[test]
fn every_migration_declares_which_bosuns_run_on_it() {
    for migration in MIGRATIONS {
        if migration.version <= 13 {
            // Before the window, bosun needed its exact version.
            assert_eq!(migration.runs_with, migration.version, "{}", migration.name);
        } else {
            // Compatible (the previous release keeps running: `version -
            // 1`, or the previous release's schema when this release adds
            // more than one migration) or breaking (it stops); never a
            // bosun older than the previous release.
            assert!(
                (PREVIOUS_RELEASE.min(migration.version - 1)..=migration.version).contains(&migration.runs_with),
                "migration {} ({}) runs with {}",
                migration.version,
                migration.name,
                migration.runs_with
            );
        }
    }
    assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(SCHEMA_VERSION));
}

#[tokio::test]
async fn a_newer_schema_within_the_window_serves_and_one_past_it_is_refused() {
    let test = testing::fresh().await;
    let database = &test.database;
    database.migrate().await.unwrap();
    let window = database.schema_window().await.unwrap();
    // The last breaking migration is the one before the window.
    assert_eq!(
        window,
        SchemaWindow {
            version: SCHEMA_VERSION,
            runs_with: BEFORE_THE_WINDOW
        }
    );

    // A newer bosun applied a compatible migration: this one still serves,
    // and its migrate has nothing to do and writes nothing.
    query("INSERT INTO bosun_schema_migrations (version, name, checksum, runs_with) VALUES ($1, 'compatible', '', $2)")
        .bind(SCHEMA_VERSION + 1)
        .bind(SCHEMA_VERSION)
        .execute(database.pool())
        .await
        .unwrap();
    database.check_schema().await.unwrap();
    let report = database.migrate().await.unwrap();
    assert!(report.applied.is_empty(), "{report:?}");
    assert_eq!(report.version, SCHEMA_VERSION + 1);
    let plan = database.plan().await.unwrap();
    assert!(plan.pending.is_empty(), "{plan:?}");

    // Then a breaking one: this bosun stops, saying why.
    query("INSERT INTO bosun_schema_migrations (version, name, checksum, runs_with) VALUES ($1, 'breaking', '', $1)")
        .bind(SCHEMA_VERSION + 2)
        .execute(database.pool())
        .await
        .unwrap();
    let refused = database.check_schema().await.unwrap_err();
    assert!(
        matches!(
            refused,
            DatabaseError::SchemaTooNew { found, runs_with, built_for }
                if found == SCHEMA_VERSION + 2 && runs_with == SCHEMA_VERSION + 2 && built_for == SCHEMA_VERSION
        ),
        "{refused:?}"
    );
    assert_eq!(
        refused.to_string(),
        format!(
            "database schema is at version {}, which runs with bosun built for schema {} or later; \
             this bosun is built for {SCHEMA_VERSION}: run a newer bosun",
            SCHEMA_VERSION + 2,
            SCHEMA_VERSION + 2
        )
    );
    assert!(matches!(StoreError::from(refused), StoreError::SchemaTooNew { .. }));
    assert!(matches!(
        database.migrate().await,
        Err(DatabaseError::SchemaTooNew { .. })
    ));
    assert!(matches!(database.plan().await, Err(DatabaseError::SchemaTooNew { .. })));
    test.finish().await;
}

#[tokio::test]
async fn a_database_migrated_before_the_window_reads_as_needing_its_exact_version() {
    let test = testing::fresh().await;
    let database = &test.database;
    database.migrate_to(BEFORE_THE_WINDOW - 1).await.unwrap();
    // What a bosun from before the window leaves: no runs_with column.
    query("ALTER TABLE bosun_schema_migrations DROP COLUMN runs_with")
        .execute(database.pool())
        .await
        .unwrap();
    assert_eq!(
        database.schema_window().await.unwrap(),
        SchemaWindow {
            version: BEFORE_THE_WINDOW - 1,
            runs_with: BEFORE_THE_WINDOW - 1
        }
    );
    let plan = database.plan().await.unwrap();
    assert_eq!(
        plan.pending.iter().map(|m| m.version).collect::<Vec<_>>(),
        (BEFORE_THE_WINDOW..=SCHEMA_VERSION).collect::<Vec<_>>()
    );
    assert_eq!(plan.to.version, SCHEMA_VERSION);
    // --check changed nothing.
    assert_eq!(database.schema_version().await.unwrap(), BEFORE_THE_WINDOW - 1);
    assert_eq!(
        database.migrate().await.unwrap().applied,
        (BEFORE_THE_WINDOW..=SCHEMA_VERSION).collect::<Vec<_>>()
    );
    let recorded: Option<i64> =
        sqlx_core::query_scalar::query_scalar("SELECT runs_with FROM bosun_schema_migrations WHERE version = $1")
            .bind(BEFORE_THE_WINDOW)
            .fetch_one(database.pool())
            .await
            .unwrap();
    assert_eq!(recorded, Some(BEFORE_THE_WINDOW));
    database.check_schema().await.unwrap();
    test.finish().await;
}

#[test]
fn compatible_only_stops_before_the_first_breaking_migration() {
    let planned = |version, runs_with| PlannedMigration {
        version,
        name: "m",
        runs_with,
    };
    let plan = |from: i64, pending: Vec<PlannedMigration>| {
        let to = pending.last().map_or(from, |m| m.version);
        MigrationPlan {
            from: SchemaWindow {
                version: from,
                runs_with: from,
            },
            to: SchemaWindow {
                version: to,
                runs_with: to,
            },
            pending,
        }
    };
    // Two compatible steps, then a breaking one: the two.
    assert_eq!(
        plan(
            14,
            vec![planned(15, 14), planned(16, 15), planned(17, 17), planned(18, 17)]
        )
        .compatible_target(),
        16
    );
    // A breaking one first: nothing.
    assert_eq!(plan(14, vec![planned(15, 15), planned(16, 15)]).compatible_target(), 14);
    // Nothing pending.
    assert_eq!(plan(14, vec![]).compatible_target(), 14);
    // No schema yet: everything, breaking ones included.
    assert_eq!(plan(0, vec![planned(1, 1), planned(2, 2)]).compatible_target(), 2);
}

#[tokio::test]
async fn compatible_only_makes_a_new_schema_whole_and_leaves_a_breaking_one_for_a_full_migrate() {
    let test = testing::fresh().await;
    let database = &test.database;
    let fresh = database.migrate_compatible().await.unwrap();
    assert_eq!(fresh.applied, (1..=SCHEMA_VERSION).collect::<Vec<_>>());

    let test2 = testing::fresh().await;
    let database = &test2.database;
    database.migrate_to(BEFORE_THE_WINDOW - 1).await.unwrap();
    // The last migration before the window breaks (every one before it
    // does): an init container leaves it and what follows, and this
    // bosun waits for it.
    let left = database.migrate_compatible().await.unwrap();
    assert!(left.applied.is_empty(), "{left:?}");
    assert!(matches!(
        database.check_schema().await,
        Err(DatabaseError::SchemaMismatch { .. })
    ));
    assert_eq!(
        database.migrate().await.unwrap().applied,
        (BEFORE_THE_WINDOW..=SCHEMA_VERSION).collect::<Vec<_>>()
    );
    test.finish().await;
    test2.finish().await;
}

/// The first release with the window (built for schema 13) and this one
/// on one database: `--compatible-only` applies migrations 14 (the fleet),
/// 15 (release policies) and 16 (the release audit), after which both
/// serve (the path `tests/upgrade.rs` runs with real binaries).
#[tokio::test]
async fn compatible_only_applies_the_fleet_and_the_first_release_with_the_window_still_serves() {
    let test = testing::fresh().await;
    let database = &test.database;
    database.migrate_to(BEFORE_THE_WINDOW).await.unwrap();
    let applied = database.migrate_compatible().await.unwrap();
    assert_eq!(
        applied.applied,
        (BEFORE_THE_WINDOW + 1..=SCHEMA_VERSION).collect::<Vec<_>>()
    );
    let window = database.schema_window().await.unwrap();
    window.check(BEFORE_THE_WINDOW).unwrap();
    window.check(SCHEMA_VERSION).unwrap();
    // What the previous release's `migrate` finds there: nothing to do.
    assert!(database.migrate_unless_breaking().await.unwrap().applied.is_empty());
    test.finish().await;
}

#[tokio::test]
async fn a_plain_migrate_refuses_a_breaking_migration_naming_it_and_force_applies_it() {
    let test = testing::fresh().await;
    let database = &test.database;
    // Nothing runs on a database with no schema yet: nothing to refuse.
    let whole = database.migrate_unless_breaking().await.unwrap();
    assert_eq!(whole.applied, (1..=SCHEMA_VERSION).collect::<Vec<_>>());

    let test2 = testing::fresh().await;
    let database = &test2.database;
    database.migrate_to(BEFORE_THE_WINDOW - 1).await.unwrap();
    // The last migration before the window breaks (every one before it does).
    let refused = database.migrate_unless_breaking().await.unwrap_err();
    let DatabaseError::BreakingMigration { version, name } = &refused else {
        panic!("expected a refusal, got {refused:?}");
    };
    assert_eq!(*version, BEFORE_THE_WINDOW);
    let text = refused.to_string();
    assert!(text.contains(name) && text.contains("--force"), "{text}");
    assert_eq!(
        database.schema_version().await.unwrap(),
        BEFORE_THE_WINDOW - 1,
        "nothing applied, not even what comes before it"
    );
    // --force applies it.
    assert_eq!(
        database.migrate().await.unwrap().applied,
        (BEFORE_THE_WINDOW..=SCHEMA_VERSION).collect::<Vec<_>>()
    );
    // Nothing pending: nothing to refuse.
    assert!(database.migrate_unless_breaking().await.unwrap().applied.is_empty());

    // A compatible migration needs no --force.
    let test3 = testing::fresh().await;
    let database = &test3.database;
    database.migrate_to(BEFORE_THE_WINDOW).await.unwrap();
    assert_eq!(
        database.migrate_unless_breaking().await.unwrap().applied,
        (BEFORE_THE_WINDOW + 1..=SCHEMA_VERSION).collect::<Vec<_>>()
    );
    test.finish().await;
    test2.finish().await;
    test3.finish().await;
}

#[tokio::test]
async fn release_sagas_move_under_their_tenant() {
    let test = testing::fresh().await;
    let database = &test.database;
    database.migrate_to(3).await.unwrap();
    let pool = database.pool();
    // Schema 3 data: a release saga with its tenant, one saved before
    // tenants were kept (its delivery says whose it is), one whose
    // tenant nothing records, and a GitOps saga already keyed by tenant.
    for (kind, key, tenant) in [
        ("release", "rel-1", Some("contoso")),
        ("release", "rel-2", None),
        ("release", "rel-3", None),
        ("gitops", "contoso/prod", Some("contoso")),
    ] {
        query(
            "INSERT INTO bosun_sagas (kind, key, version, state, created_at, updated_at, tenant_id)
             VALUES ($1, $2, 1, '{}', now(), now(), $3)",
        )
        .bind(kind)
        .bind(key)
        .bind(tenant)
        .execute(pool)
        .await
        .unwrap();
        query(
            "INSERT INTO bosun_saga_history (kind, key, version, message_id, message_type, at)
             VALUES ($1, $2, 1, $3, 'BuildCompleted', now())",
        )
        .bind(kind)
        .bind(key)
        .bind(format!("m-{key}"))
        .execute(pool)
        .await
        .unwrap();
    }
    query(
        "INSERT INTO bosun_timeline (correlation_id, message_id, message_type, status, attempt, at)
         VALUES ('c-2', 'm-rel-2', 'BuildCompleted', 'completed', 0, now())",
    )
    .execute(pool)
    .await
    .unwrap();
    query(
        "INSERT INTO bosun_deliveries (correlation_id, tenant_id, started_by, message_type, message_id, started_at)
         VALUES ('c-2', 'fabrikam', 'cli:test', 'ProvisionRepository', 'm-0', now())",
    )
    .execute(pool)
    .await
    .unwrap();

    assert_eq!(
        database.migrate().await.unwrap().applied,
        (4..=SCHEMA_VERSION).collect::<Vec<_>>()
    );
    let keys: Vec<(String, String, Option<String>)> =
        sqlx_core::query_as::query_as("SELECT kind, key, tenant_id FROM bosun_sagas ORDER BY kind, key")
            .fetch_all(pool)
            .await
            .unwrap();
    let owned =
        |kind: &str, key: &str, tenant: Option<&str>| (kind.to_owned(), key.to_owned(), tenant.map(str::to_owned));
    assert_eq!(
        keys,
        [
            owned("gitops", "contoso/prod", Some("contoso")),
            owned("release", "contoso/rel-1", Some("contoso")),
            owned("release", "fabrikam/rel-2", Some("fabrikam")),
            owned("release", "rel-3", None),
        ]
    );
    let history: Vec<String> = sqlx_core::query_scalar::query_scalar("SELECT key FROM bosun_saga_history ORDER BY key")
        .fetch_all(pool)
        .await
        .unwrap();
    assert_eq!(history, ["contoso/prod", "contoso/rel-1", "fabrikam/rel-2", "rel-3"]);
    test.finish().await;
}

#[tokio::test]
async fn keys_made_before_keys_expired_keep_working_after_migration_13() {
    let test = testing::fresh().await;
    let database = &test.database;
    database.migrate_to(12).await.unwrap();
    // A key as schema 12 stored it: no expiry, no last use.
    query(
        "INSERT INTO bosun_api_keys (id, tenant_id, scopes, secret_hash, description, created_by, created_at)
         VALUES ('0123456789ab', 'contoso', '[\"deliveries:read\"]', 'h', 'ci', 'alice', now())",
    )
    .execute(database.pool())
    .await
    .unwrap();
    assert_eq!(database.migrate_to(13).await.unwrap().applied, vec![13]);
    // This release reads keys at its own schema (the key's sponsor came
    // with 15); the key stays as 13 left it.
    database.migrate().await.unwrap();
    let store = crate::backends::postgres::store::PostgresStore::new(database.clone());
    let key = crate::ports::store::AccessStore::api_key(&store, "0123456789ab")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            key.expires_at,
            key.last_used_at,
            key.rotated_to.as_deref(),
            key.sponsor.as_deref()
        ),
        (None, None, None, None)
    );
    assert!(crate::front::access::check(&key, time::OffsetDateTime::now_utc()).is_ok());
    test.finish().await;
}

#[tokio::test]
async fn a_changed_migration_is_refused() {
    let test = testing::migrated().await;
    query("UPDATE bosun_schema_migrations SET checksum = 'edited' WHERE version = 1")
        .execute(test.database.pool())
        .await
        .unwrap();
    assert!(matches!(
        test.database.migrate().await,
        Err(DatabaseError::MigrationChanged { version: 1, .. })
    ));
    test.finish().await;
}

#[test]
fn migrations_are_numbered_in_order_up_to_the_schema_version() {
    let versions: Vec<i64> = MIGRATIONS.iter().map(|m| m.version).collect();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
}

/// Data in flight on every older schema survives every migration after
/// it: a saga of every kind in the corpus (a release waiting for its prod
/// approval among them) and, once the transport has its tables, a
/// scheduled message (an approval timeout) still waiting in its queue.
/// After `migrate` each saga state is byte for byte what was saved and
/// loads with this build; the message is still queued with its bytes.
#[tokio::test]
async fn data_in_flight_on_every_older_schema_survives_the_migrations_and_reads_with_this_build() {
    use bosun_sagas::versioned::load_state;

    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let read = |path: &str| std::fs::read_to_string(corpus.join(path)).expect("a corpus file");
    let sagas: Vec<(&str, Value)> = [
        ("release", "sagas/release.v1.awaitingApproval-prod.json"),
        ("gitops", "sagas/gitops.v1.reconciling.json"),
        ("probe", "sagas/probe.v1.counting.json"),
    ]
    .into_iter()
    .map(|(kind, path)| (kind, serde_json::from_str(&read(path)).expect("corpus JSON")))
    .collect();
    let timeout = read("messages/ReleaseApprovalTimeout.v1.json");

    for from in 1..SCHEMA_VERSION {
        let test = testing::fresh().await;
        let database = &test.database;
        database.migrate_to(from).await.unwrap();
        let pool = database.pool();
        for (kind, state) in &sagas {
            query(
                "INSERT INTO bosun_sagas (kind, key, version, state, created_at, updated_at)
                 VALUES ($1, $2, 3, $3, now(), now())",
            )
            .bind(*kind)
            .bind(format!("contoso/in-flight-{kind}"))
            .bind(state)
            .execute(pool)
            .await
            .unwrap_or_else(|err| panic!("schema {from}: saving a {kind} saga: {err}"));
        }
        if from >= 2 {
            query(
                "INSERT INTO bosun_messages (entity, broker_message_id, message_type, body, enqueued_at, visible_at)
                 VALUES ('release-orchestration', 'in-flight-timeout', 'ReleaseApprovalTimeout', $1, now(), \
                 now() + interval '3 days')",
            )
            .bind(timeout.as_bytes())
            .execute(pool)
            .await
            .unwrap_or_else(|err| panic!("schema {from}: queueing a message: {err}"));
        }

        database
            .migrate()
            .await
            .unwrap_or_else(|err| panic!("migrating from schema {from}: {err}"));

        for (kind, state) in &sagas {
            let stored: Value = sqlx_core::query_scalar::query_scalar(
                "SELECT state FROM bosun_sagas WHERE kind = $1 AND key LIKE '%in-flight-' || $1",
            )
            .bind(*kind)
            .fetch_one(pool)
            .await
            .unwrap_or_else(|err| panic!("schema {from}: the {kind} saga after migrating: {err}"));
            assert_eq!(&stored, state, "schema {from}: the {kind} saga's state changed");
            let loaded = match *kind {
                "release" => load_state::<bosun_sagas::release::ReleaseState>(&stored).map(|_| ()),
                "gitops" => load_state::<bosun_sagas::gitops::GitOpsState>(&stored).map(|_| ()),
                _ => load_state::<bosun_consumers::probe::ProbeTally>(&stored).map(|_| ()),
            };
            loaded.unwrap_or_else(|err| panic!("schema {from}: the {kind} saga does not load: {err}"));
        }
        if from >= 2 {
            let body: Vec<u8> = sqlx_core::query_scalar::query_scalar(
                "SELECT body FROM bosun_messages WHERE broker_message_id = 'in-flight-timeout' AND NOT dead_lettered",
            )
            .fetch_one(pool)
            .await
            .unwrap_or_else(|err| panic!("schema {from}: the queued timeout after migrating: {err}"));
            assert_eq!(
                body,
                timeout.as_bytes(),
                "schema {from}: the queued message's bytes changed"
            );
            bosun_contracts::Envelope::parse(&body).unwrap_or_else(|err| panic!("schema {from}: {err}"));
        }
        test.finish().await;
    }
}
