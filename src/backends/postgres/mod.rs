//! Shared PostgreSQL plumbing for the PostgreSQL store and transport: the
//! connection pool, bosun's own schema migrations and the schema check that
//! `serve` runs before it takes work.
//!
//! Both the store ([`crate::backends::postgres::store`]) and the transport
//! ([`crate::backends::postgres::transport`]) live in one database and one schema
//! (the connection's `search_path`, `public` unless the URL says otherwise),
//! every table prefixed `bosun_`. Sharing one [`PostgresDatabase`] lets
//! [`settle::PostgresSettle`] settle a received message in the same
//! transaction that records its handling; the SQL of the transport's queue
//! rows that both use is in `queue`.
//!
//! Migrations are the `.sql` files of `migrations/postgres/`, embedded in the
//! binary. [`PostgresDatabase::migrate`] applies the missing ones in one
//! transaction under an advisory lock, so concurrent `bosun migrate` runs
//! (say, an init container per replica) are safe: the first applies them,
//! the others find them applied. Each applied version is recorded with a
//! checksum in `bosun_schema_migrations`.
//!
//! TLS follows the URL's `sslmode` (`?sslmode=require` for Azure Database
//! for PostgreSQL); certificates are checked by the platform's native TLS.

mod listen;
mod notify;
mod queue;
pub mod settle;
pub mod store;
pub mod transport;

use std::str::FromStr;
use std::time::Duration;

use sqlx_core::executor::Executor;
use sqlx_core::query::query;
use sqlx_core::raw_sql::raw_sql;
use sqlx_core::row::Row;
use sqlx_postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

use crate::ports::store::{SOME_STORE_OPERATION, StoreError};
use crate::ports::transport::{SOME_TRANSPORT_OPERATION, TransportError};

/// The schema version this build of bosun works with: the number of the
/// last migration in `migrations/postgres/`.
pub const SCHEMA_VERSION: i64 = 13;

/// One migration: a version, a name, its SQL, and the oldest bosun that
/// can run on a database it has been applied to.
#[derive(Debug, Clone, Copy)]
struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
    /// The oldest bosun, named by the schema version it was built for
    /// ([`SCHEMA_VERSION`]), that still runs correctly once this migration
    /// is applied. A *compatible* migration keeps the previous release
    /// running: `version - 1`. Every migration should be one: an expand
    /// step (new tables, nullable columns, functions beside the old ones),
    /// or a contract step that removes only what the previous release no
    /// longer uses, one release after the expand step it completes. A
    /// *breaking* migration (the previous release cannot run on it) says
    /// `version`. Migrations 1 to 13 predate the window (bosun then needed
    /// its exact version) and say `version`.
    runs_with: i64,
}

/// Every migration, in order. Never edit one that has shipped; add a new one
/// and raise [`SCHEMA_VERSION`].
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "store",
        sql: include_str!("../../../migrations/postgres/0001_store.sql"),
        runs_with: 1,
    },
    Migration {
        version: 2,
        name: "transport",
        sql: include_str!("../../../migrations/postgres/0002_transport.sql"),
        runs_with: 2,
    },
    Migration {
        version: 3,
        name: "front_door",
        sql: include_str!("../../../migrations/postgres/0003_front_door.sql"),
        runs_with: 3,
    },
    Migration {
        version: 4,
        name: "tenant_keys",
        sql: include_str!("../../../migrations/postgres/0004_tenant_keys.sql"),
        runs_with: 4,
    },
    Migration {
        version: 5,
        name: "outbox_purpose",
        sql: include_str!("../../../migrations/postgres/0005_outbox_purpose.sql"),
        runs_with: 5,
    },
    Migration {
        version: 6,
        name: "retention",
        sql: include_str!("../../../migrations/postgres/0006_retention.sql"),
        runs_with: 6,
    },
    Migration {
        version: 7,
        name: "one_statement_commit",
        sql: include_str!("../../../migrations/postgres/0007_one_statement_commit.sql"),
        runs_with: 7,
    },
    Migration {
        version: 8,
        name: "delivery_trace",
        sql: include_str!("../../../migrations/postgres/0008_delivery_trace.sql"),
        runs_with: 8,
    },
    Migration {
        version: 9,
        name: "replay_jobs",
        sql: include_str!("../../../migrations/postgres/0009_replay_jobs.sql"),
        runs_with: 9,
    },
    Migration {
        version: 10,
        name: "claim_in_index_order",
        sql: include_str!("../../../migrations/postgres/0010_claim_in_index_order.sql"),
        runs_with: 10,
    },
    Migration {
        version: 11,
        name: "claim_planned_once",
        sql: include_str!("../../../migrations/postgres/0011_claim_planned_once.sql"),
        runs_with: 11,
    },
    Migration {
        version: 12,
        name: "commit_in_batches",
        sql: include_str!("../../../migrations/postgres/0012_commit_in_batches.sql"),
        runs_with: 12,
    },
    Migration {
        version: 13,
        name: "key_lifecycle",
        sql: include_str!("../../../migrations/postgres/0013_key_lifecycle.sql"),
        runs_with: 13,
    },
];

/// Held for the whole migration transaction; keyed by schema so bosun
/// installations in different schemas of one database do not wait on each
/// other.
const MIGRATION_LOCK: &str =
    "SELECT pg_advisory_xact_lock(hashtext('bosun_schema_migrations:' || coalesce(current_schema(), '')))";

const CREATE_MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS bosun_schema_migrations (
    version bigint PRIMARY KEY,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

/// The bookkeeping column of the compatibility window: the oldest bosun
/// each applied migration runs with (`NULL`: written by a bosun from before
/// the window, which needed its exact version). Added beside the table, not
/// by a numbered migration, so any bosun that migrates records it; a bosun
/// from before the window inserts without it and leaves it `NULL`.
const ADD_RUNS_WITH: &str = "ALTER TABLE bosun_schema_migrations ADD COLUMN IF NOT EXISTS runs_with bigint";

/// The applied migrations, with the oldest bosun each runs with, read
/// whether or not the `runs_with` column exists yet (a database only
/// bosuns from before the window migrated lacks it).
const READ_APPLIED: &str = "SELECT version, checksum, coalesce((to_jsonb(m) ->> 'runs_with')::bigint, version) \
     FROM bosun_schema_migrations m ORDER BY version";

/// Connection pool settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// Most connections open at once. The transport's LISTEN task holds one
    /// for as long as it runs.
    pub max_connections: u32,
    /// Connections opened when the pool is created and kept open (at most
    /// `max_connections`).
    pub min_connections: u32,
    /// How long a query waits for a free connection before failing.
    pub acquire_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            max_connections: 10,
            min_connections: 0,
            acquire_timeout: Duration::from_secs(30),
        }
    }
}

/// PostgreSQL failures outside a store or transport operation: connecting,
/// migrating, checking the schema.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    /// The URL could not be read (the URL itself is not repeated: it may
    /// hold a password).
    #[error("invalid PostgreSQL URL: {0}")]
    InvalidUrl(#[source] sqlx_core::Error),
    /// A schema name that cannot be used.
    #[error("`{0}` is not a usable schema name")]
    InvalidSchemaName(String),
    /// The database is at another schema version than this bosun needs.
    #[error("{}", crate::ports::store::schema_mismatch_message(*.found, *.expected))]
    SchemaMismatch {
        /// The version recorded in the database (0: never migrated).
        found: i64,
        /// [`SCHEMA_VERSION`].
        expected: i64,
    },
    /// The database was migrated past what this bosun can run on: a
    /// migration applied by a newer bosun needs at least `runs_with`.
    #[error("{}", crate::ports::store::schema_too_new_message(*.found, *.runs_with, *.built_for))]
    SchemaTooNew {
        /// The version recorded in the database.
        found: i64,
        /// The oldest bosun (by the schema it was built for) the database runs with.
        runs_with: i64,
        /// [`SCHEMA_VERSION`].
        built_for: i64,
    },
    /// An applied migration's SQL differs from this build's.
    #[error(
        "migration {version} ({name}) in the database differs from this bosun's copy; \
         the database was migrated by another build of bosun"
    )]
    MigrationChanged {
        /// The version.
        version: i64,
        /// Its name.
        name: &'static str,
    },
    /// The database failed or could not be reached.
    #[error("PostgreSQL unavailable: {0}")]
    Unavailable(#[from] sqlx_core::Error),
}

impl DatabaseError {
    /// Whether trying again may help (the database is down or busy), as
    /// opposed to a configuration or schema that has to be fixed first.
    fn is_transient(&self) -> bool {
        match self {
            Self::Unavailable(err) => classify(err) == Failure::Unavailable,
            _ => false,
        }
    }
}

impl From<DatabaseError> for StoreError {
    fn from(err: DatabaseError) -> Self {
        match err {
            DatabaseError::SchemaMismatch { found, expected } => Self::SchemaMismatch { found, expected },
            DatabaseError::SchemaTooNew {
                found,
                runs_with,
                built_for,
            } => Self::SchemaTooNew {
                found,
                runs_with,
                built_for,
            },
            other if other.is_transient() => Self::unavailable("connecting to PostgreSQL", other),
            other => Self::Misconfigured {
                doing: "opening the PostgreSQL database".to_owned(),
                source: Box::new(other),
            },
        }
    }
}

impl From<DatabaseError> for TransportError {
    fn from(err: DatabaseError) -> Self {
        if err.is_transient() {
            Self::unavailable("connecting to PostgreSQL", err)
        } else {
            Self::misconfigured("opening the PostgreSQL database", err)
        }
    }
}

/// What a PostgreSQL error means for the work that met it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// A stored value does not decode as the column's Rust type.
    Corrupt,
    /// The connection cannot be set up as configured.
    Misconfigured,
    /// The database is down, busy, or refused the statement: try again.
    Unavailable,
}

fn classify(err: &sqlx_core::Error) -> Failure {
    match err {
        sqlx_core::Error::ColumnDecode { .. } | sqlx_core::Error::Decode(_) => Failure::Corrupt,
        sqlx_core::Error::Configuration(_) | sqlx_core::Error::Tls(_) => Failure::Misconfigured,
        _ => Failure::Unavailable,
    }
}

impl From<sqlx_core::Error> for StoreError {
    fn from(err: sqlx_core::Error) -> Self {
        match classify(&err) {
            Failure::Corrupt => Self::corrupt(SOME_STORE_OPERATION, err),
            Failure::Misconfigured => Self::Misconfigured {
                doing: SOME_STORE_OPERATION.to_owned(),
                source: Box::new(err),
            },
            Failure::Unavailable => Self::unavailable(SOME_STORE_OPERATION, err),
        }
    }
}

impl From<sqlx_core::Error> for TransportError {
    fn from(err: sqlx_core::Error) -> Self {
        match classify(&err) {
            Failure::Corrupt => Self::Corrupt {
                what: SOME_TRANSPORT_OPERATION.to_owned(),
                source: Box::new(err),
            },
            Failure::Misconfigured => Self::misconfigured(SOME_TRANSPORT_OPERATION, err),
            Failure::Unavailable => Self::unavailable(SOME_TRANSPORT_OPERATION, err),
        }
    }
}

/// What [`PostgresDatabase::migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// The versions applied now, in order (empty: already up to date).
    pub applied: Vec<i64>,
    /// The schema version after migrating.
    pub version: i64,
}

/// A pool of connections to bosun's PostgreSQL database, shared by the
/// PostgreSQL store and transport.
#[derive(Clone)]
pub struct PostgresDatabase {
    pool: PgPool,
    /// Sends the wake-ups of committed transactions (see `notify`).
    notifier: std::sync::Arc<notify::Notifier>,
    /// Saga turns held at once (each holds a connection; see `store::turns`).
    turn_slots: std::sync::Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for PostgresDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The connect options hold the password: never print them.
        f.debug_struct("PostgresDatabase")
            .field("connections", &self.pool.size())
            .finish_non_exhaustive()
    }
}

impl PostgresDatabase {
    /// Connects to `url` (`postgres://user:password@host:5432/db?sslmode=require`)
    /// with the default pool settings. Fails at once when the database cannot
    /// be reached.
    pub async fn connect(url: &str) -> Result<Self, DatabaseError> {
        Self::connect_with(url, PoolSettings::default()).await
    }

    /// Connects to `url` with `settings`.
    pub async fn connect_with(url: &str, settings: PoolSettings) -> Result<Self, DatabaseError> {
        let options = PgConnectOptions::from_str(url).map_err(DatabaseError::InvalidUrl)?;
        Self::connect_options(options, settings).await
    }

    /// Connects with already parsed options (tests use this to pin the
    /// `search_path` to a schema of their own).
    pub async fn connect_options(options: PgConnectOptions, settings: PoolSettings) -> Result<Self, DatabaseError> {
        let options = match options.get_application_name() {
            Some(_) => options,
            None => options.application_name("bosun"),
        };
        // No ping before each acquire: a connection the server dropped
        // fails its statement, which is retried as any unavailable
        // database is; a ping would be one more round trip per statement.
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections.max(2))
            .min_connections(settings.min_connections.min(settings.max_connections.max(2)))
            .acquire_timeout(settings.acquire_timeout)
            .test_before_acquire(false)
            .connect_with(options)
            .await?;
        Ok(Self {
            turn_slots: store::turns::turn_slots(settings.max_connections.max(2)),
            pool,
            notifier: std::sync::Arc::default(),
        })
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// How many saga turns may be held at once.
    pub(crate) fn turn_slots(&self) -> &std::sync::Arc<tokio::sync::Semaphore> {
        &self.turn_slots
    }

    /// Sends what a committed transaction woke (call it after the commit).
    pub(crate) fn wake(&self, wakes: notify::Wakes) {
        self.notifier.send(&self.pool, wakes);
    }

    /// Applies the migrations this database lacks, in one transaction, under
    /// an advisory lock (concurrent runs wait for each other; the later ones
    /// find nothing to do). Refuses a database migrated by a newer bosun.
    pub async fn migrate(&self) -> Result<MigrationReport, DatabaseError> {
        self.migrate_to(SCHEMA_VERSION).await
    }

    /// Applies the migrations the running release survives: every pending
    /// compatible migration up to the first breaking one (whose
    /// `runs_with` is its own version), which is left for a plain
    /// `migrate`. A database with no schema yet gets every migration:
    /// nothing runs on it to survive. What the init container of every pod
    /// runs on AKS.
    pub async fn migrate_compatible(&self) -> Result<MigrationReport, DatabaseError> {
        let plan = self.plan().await?;
        self.migrate_to(plan.compatible_target()).await
    }

    /// Applies migrations up to `target` (tests use it to build an old schema).
    pub(crate) async fn migrate_to(&self, target: i64) -> Result<MigrationReport, DatabaseError> {
        let mut tx = self.pool.begin().await?;
        match apply_migrations(&mut tx, target).await {
            Ok(report) => {
                tx.commit().await?;
                if !report.applied.is_empty() {
                    tracing::info!(applied = ?report.applied, version = report.version, "database schema migrated");
                }
                Ok(report)
            }
            Err(err) => {
                // Release the advisory lock now rather than when the pool
                // gets round to it.
                let _ = tx.rollback().await;
                Err(err)
            }
        }
    }

    /// The schema version recorded in the database (0 when never migrated).
    pub async fn schema_version(&self) -> Result<i64, DatabaseError> {
        Ok(self.schema_window().await?.version)
    }

    /// Where the database stands: its version and the oldest bosun that
    /// runs on it.
    pub async fn schema_window(&self) -> Result<SchemaWindow, DatabaseError> {
        let mut conn = self.pool.acquire().await?;
        read_applied(&mut conn).await.map(|applied| applied.window)
    }

    /// Succeeds when this bosun runs on the database: it has every
    /// migration up to [`SCHEMA_VERSION`], and any newer ones were declared
    /// to run with this bosun (the compatibility window). Otherwise says
    /// which version it found and what to do
    /// (`database schema is at version 1, this bosun needs 2; run `bosun migrate``).
    pub async fn check_schema(&self) -> Result<(), DatabaseError> {
        self.schema_window().await?.check(SCHEMA_VERSION)
    }

    /// What [`migrate`](Self::migrate) would do, changing nothing
    /// (`bosun migrate --check`).
    pub async fn plan(&self) -> Result<MigrationPlan, DatabaseError> {
        let mut conn = self.pool.acquire().await?;
        let applied = read_applied(&mut conn).await?;
        applied.verify()?;
        Ok(applied.plan(SCHEMA_VERSION))
    }
}

/// Where a database stands against the bosuns that may run on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaWindow {
    /// The last migration applied (0: never migrated).
    pub version: i64,
    /// The oldest bosun, by the schema version it was built for, that
    /// runs on the database: the largest `runs_with` of its migrations.
    pub runs_with: i64,
}

impl SchemaWindow {
    /// Whether a bosun built for schema `built_for` runs here.
    pub fn check(self, built_for: i64) -> Result<(), DatabaseError> {
        if self.version < built_for {
            Err(DatabaseError::SchemaMismatch {
                found: self.version,
                expected: built_for,
            })
        } else if self.runs_with > built_for {
            Err(DatabaseError::SchemaTooNew {
                found: self.version,
                runs_with: self.runs_with,
                built_for,
            })
        } else {
            Ok(())
        }
    }
}

/// What `bosun migrate` would apply, and where the schema would then stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationPlan {
    /// Where the database stands now.
    pub from: SchemaWindow,
    /// The migrations to apply, in order.
    pub pending: Vec<PlannedMigration>,
    /// Where it would stand after them.
    pub to: SchemaWindow,
}

impl MigrationPlan {
    /// The version `migrate --compatible-only` goes to: the last pending
    /// compatible migration before the first breaking one (where the
    /// database stands when the first pending one breaks), or every
    /// pending one on a database with no schema yet.
    pub fn compatible_target(&self) -> i64 {
        if self.from.version == 0 {
            return self.to.version;
        }
        self.pending
            .iter()
            .take_while(|m| m.runs_with < m.version)
            .last()
            .map_or(self.from.version, |m| m.version)
    }
}

/// One migration a [`MigrationPlan`] would apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedMigration {
    /// Its version.
    pub version: i64,
    /// Its name.
    pub name: &'static str,
    /// The oldest bosun that runs once it is applied.
    pub runs_with: i64,
}

/// The applied migrations as the database records them.
struct Applied {
    /// Version and checksum of each.
    rows: Vec<(i64, String)>,
    window: SchemaWindow,
}

impl Applied {
    /// Fails when an applied migration this bosun knows has other SQL than
    /// its copy, or when the database is past what this bosun runs with.
    fn verify(&self) -> Result<(), DatabaseError> {
        for (version, checksum) in &self.rows {
            if let Some(known) = MIGRATIONS.iter().find(|m| m.version == *version)
                && *checksum != checksum_of(known.sql)
            {
                return Err(DatabaseError::MigrationChanged {
                    version: *version,
                    name: known.name,
                });
            }
        }
        if self.window.runs_with > SCHEMA_VERSION {
            return Err(DatabaseError::SchemaTooNew {
                found: self.window.version,
                runs_with: self.window.runs_with,
                built_for: SCHEMA_VERSION,
            });
        }
        Ok(())
    }

    /// The migrations up to `target` the database lacks.
    fn plan(&self, target: i64) -> MigrationPlan {
        let pending: Vec<PlannedMigration> = MIGRATIONS
            .iter()
            .filter(|m| m.version > self.window.version && m.version <= target)
            .map(|m| PlannedMigration {
                version: m.version,
                name: m.name,
                runs_with: m.runs_with,
            })
            .collect();
        let to = pending.iter().fold(self.window, |window, m| SchemaWindow {
            version: m.version,
            runs_with: window.runs_with.max(m.runs_with),
        });
        MigrationPlan {
            from: self.window,
            pending,
            to,
        }
    }
}

/// Reads the applied migrations (none when the table does not exist yet).
async fn read_applied(conn: &mut PgConnection) -> Result<Applied, DatabaseError> {
    let exists: bool =
        sqlx_core::query_scalar::query_scalar("SELECT to_regclass('bosun_schema_migrations') IS NOT NULL")
            .fetch_one(&mut *conn)
            .await?;
    let mut applied = Applied {
        rows: Vec::new(),
        window: SchemaWindow {
            version: 0,
            runs_with: 0,
        },
    };
    if !exists {
        return Ok(applied);
    }
    for row in query(READ_APPLIED).fetch_all(&mut *conn).await? {
        let version: i64 = row.try_get(0)?;
        let runs_with: i64 = row.try_get(2)?;
        applied.window.version = applied.window.version.max(version);
        applied.window.runs_with = applied.window.runs_with.max(runs_with);
        applied.rows.push((version, row.try_get(1)?));
    }
    Ok(applied)
}

/// Creates the schema `schema` in the database at `url` if it does not exist
/// (for a dedicated schema: point bosun at it with
/// `?options=-c%20search_path%3D<schema>` on its URL, then `bosun migrate`).
pub async fn create_schema(url: &str, schema: &str) -> Result<(), DatabaseError> {
    let statement = format!("CREATE SCHEMA IF NOT EXISTS {}", quote_identifier(schema)?);
    run_once(url, statement).await
}

/// Drops the schema `schema` and everything in it (tests clean up with it).
pub async fn drop_schema(url: &str, schema: &str) -> Result<(), DatabaseError> {
    let statement = format!("DROP SCHEMA IF EXISTS {} CASCADE", quote_identifier(schema)?);
    run_once(url, statement).await
}

fn quote_identifier(name: &str) -> Result<String, DatabaseError> {
    if name.is_empty() || name.len() > 63 || name.contains(['"', '\0']) {
        return Err(DatabaseError::InvalidSchemaName(name.to_owned()));
    }
    Ok(format!("\"{name}\""))
}

async fn run_once(url: &str, statement: String) -> Result<(), DatabaseError> {
    let options = PgConnectOptions::from_str(url).map_err(DatabaseError::InvalidUrl)?;
    let pool = PgPoolOptions::new().max_connections(1).connect_with(options).await?;
    let result = pool.execute(sqlx_core::sql_str::AssertSqlSafe(statement)).await;
    pool.close().await;
    result?;
    Ok(())
}

/// Within the migration transaction: takes the advisory lock, reads the
/// applied versions, checks them against this build's, applies the rest.
/// A database a newer bosun migrated within this one's window needs
/// nothing from it: the report says so and nothing is written.
async fn apply_migrations(conn: &mut PgConnection, target: i64) -> Result<MigrationReport, DatabaseError> {
    (&mut *conn).execute(MIGRATION_LOCK).await?;
    (&mut *conn).execute(CREATE_MIGRATIONS_TABLE).await?;
    (&mut *conn).execute(ADD_RUNS_WITH).await?;
    let applied = read_applied(conn).await?;
    applied.verify()?;
    let plan = applied.plan(target);
    let mut report = MigrationReport {
        applied: Vec::new(),
        version: plan.from.version,
    };
    for planned in &plan.pending {
        let Some(migration) = MIGRATIONS.iter().find(|m| m.version == planned.version) else {
            continue;
        };
        (&mut *conn).execute(raw_sql(migration.sql)).await?;
        query("INSERT INTO bosun_schema_migrations (version, name, checksum, runs_with) VALUES ($1, $2, $3, $4)")
            .bind(migration.version)
            .bind(migration.name)
            .bind(checksum_of(migration.sql))
            .bind(migration.runs_with)
            .execute(&mut *conn)
            .await?;
        report.applied.push(migration.version);
        report.version = migration.version;
    }
    Ok(report)
}

fn checksum_of(sql: &str) -> String {
    bosun_consumers::delivery::blob::sha256_hex(sql.as_bytes())
}

/// Test support: a fresh schema per test in the database named by
/// `BOSUN_TEST_DATABASE_URL`.
#[cfg(test)]
pub(crate) mod testing {
    use std::str::FromStr;
    use std::time::Duration;

    use sqlx_core::connection::Connection;
    use sqlx_core::executor::Executor;
    use sqlx_core::query::query;
    use sqlx_core::query_scalar::query_scalar;
    use sqlx_core::sql_str::AssertSqlSafe;
    use sqlx_postgres::{PgConnectOptions, PgConnection};
    use tokio::sync::OnceCell;

    use super::{PoolSettings, PostgresDatabase};

    const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

    /// The test database's URL.
    pub(crate) fn url() -> String {
        std::env::var("BOSUN_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
    }

    /// A schema of its own. Call [`TestDatabase::finish`] at the end of the
    /// test to drop it; a test that panics leaves it to a detached thread
    /// (or to the sweep of schemas older than an hour).
    pub(crate) struct TestDatabase {
        /// A pool whose connections use the schema.
        pub(crate) database: PostgresDatabase,
        schema: String,
        finished: bool,
    }

    impl TestDatabase {
        /// Another pool on the same schema (a second bosun process).
        pub(crate) async fn connect_again(&self) -> PostgresDatabase {
            connect_schema(&self.schema).await
        }

        /// Closes the pool (letting pending rollbacks finish) and drops the schema.
        pub(crate) async fn finish(mut self) {
            self.finished = true;
            self.database.pool().close().await;
            if let Err(err) = super::drop_schema(&url(), &self.schema).await {
                eprintln!("could not drop test schema {}: {err}", self.schema);
            }
        }
    }

    async fn connect_schema(schema: &str) -> PostgresDatabase {
        let options = PgConnectOptions::from_str(&url())
            .expect("BOSUN_TEST_DATABASE_URL is not a PostgreSQL URL")
            .options([("search_path", schema)]);
        PostgresDatabase::connect_options(
            options,
            PoolSettings {
                max_connections: 6,
                min_connections: 0,
                acquire_timeout: Duration::from_secs(30),
            },
        )
        .await
        .expect("connect to the test schema")
    }

    impl Drop for TestDatabase {
        fn drop(&mut self) {
            if self.finished {
                return;
            }
            // A failed test: the runtime may be blocked or gone, and
            // connections may still hold locks, so do not wait here.
            let schema = self.schema.clone();
            std::thread::spawn(move || {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                    return;
                };
                let _ = runtime.block_on(super::drop_schema(&url(), &schema));
            });
        }
    }

    /// A fresh, empty schema. An unreachable database fails the test,
    /// saying how to provide one: a test that needs PostgreSQL never reports
    /// `ok` without having run.
    pub(crate) async fn fresh() -> TestDatabase {
        if let Err(reason) = PROBE.get_or_init(probe).await {
            panic!(
                "{reason}; the PostgreSQL tests need a server (trust auth, user postgres, database test on \
                 127.0.0.1:5432, or BOSUN_TEST_DATABASE_URL)"
            );
        }
        let mut admin = PgConnection::connect(&url())
            .await
            .expect("connect to the test database");
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let schema = format!("bosun_test_{now}_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        admin
            .execute(AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
            .await
            .expect("create the test schema");
        let _ = admin.close().await;
        TestDatabase {
            database: connect_schema(&schema).await,
            schema,
            finished: false,
        }
    }

    /// Whether the test database can be reached, found out once per test binary.
    static PROBE: OnceCell<Result<(), String>> = OnceCell::const_new();

    async fn probe() -> Result<(), String> {
        let unreachable = |cause: String| {
            format!("PostgreSQL at BOSUN_TEST_DATABASE_URL (default {DEFAULT_URL}) is unreachable: {cause}")
        };
        let mut admin = match tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&url())).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(err)) => return Err(unreachable(err.to_string())),
            Err(_) => return Err(unreachable("no answer within 5 s".to_owned())),
        };
        sweep_stale_schemas(&mut admin).await;
        let _ = admin.close().await;
        Ok(())
    }

    /// A fresh schema, migrated to the current version.
    pub(crate) async fn migrated() -> TestDatabase {
        let test = fresh().await;
        test.database.migrate().await.expect("migrate the test schema");
        test
    }

    /// Drops test schemas left over by killed runs (older than an hour).
    async fn sweep_stale_schemas(admin: &mut PgConnection) {
        let Ok(schemas) =
            query_scalar::<_, String>("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'bosun\\_test\\_%'")
                .fetch_all(&mut *admin)
                .await
        else {
            return;
        };
        let cutoff = time::OffsetDateTime::now_utc().unix_timestamp() - 3600;
        for schema in schemas {
            let created = schema
                .strip_prefix("bosun_test_")
                .and_then(|rest| rest.split('_').next())
                .and_then(|secs| secs.parse::<i64>().ok());
            if created.is_some_and(|created| created < cutoff) {
                let _ = query(AssertSqlSafe(format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")))
                    .execute(&mut *admin)
                    .await;
            }
        }
    }
}

#[cfg(test)]
mod tests;
