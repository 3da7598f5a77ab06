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
//! The password is the URL's, or an Entra ID access token per new
//! connection ([`PasswordSource`], see `entra`).

mod entra;
mod listen;
mod migrations;
mod notify;
mod queue;
pub mod settle;
pub mod store;
pub mod transport;

use std::str::FromStr;
use std::time::Duration;

use sqlx_core::executor::Executor;
use sqlx_postgres::{PgConnectOptions, PgPool, PgPoolOptions};

pub use self::entra::{EntraUrlProblem, OSSRDBMS_SCOPE, PasswordSource, check_entra_url};
#[cfg(test)]
use self::migrations::MIGRATIONS;
use self::migrations::{Breaking, apply_migrations, read_applied};
pub use self::migrations::{MigrationPlan, PlannedMigration, SchemaWindow};

use crate::ports::store::{SOME_STORE_OPERATION, StoreError};
use crate::ports::transport::{SOME_TRANSPORT_OPERATION, TransportError};

/// The schema version this build of bosun works with: the number of the
/// last migration in `migrations/postgres/`.
pub const SCHEMA_VERSION: i64 = 18;

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
    /// The URL does not suit Entra ID sign-in (the URL itself is not
    /// repeated). Nothing was connected; fix the URL.
    #[error("the PostgreSQL URL cannot be used with Entra ID tokens: {0}")]
    EntraUrl(#[source] EntraUrlProblem),
    /// No Entra ID token for PostgreSQL could be had (the identity's
    /// environment, or Entra itself); connecting is tried again.
    #[error("no Entra ID token for PostgreSQL: {0}")]
    Token(#[source] bosun_consumers::delivery::azure::credential::CredentialError),
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
    /// A plain `migrate` (without `--force`) reached a breaking migration
    /// on a database that already has a schema: once applied, every bosun
    /// built for an earlier schema stops serving.
    #[error(
        "migration {version} ({name}) is breaking: once it is applied, every bosun built for a schema before \
         {version} stops serving. Nothing was applied. Replace or stop every older process first, then run \
         `bosun migrate --force` (see docs/UPGRADING.md)"
    )]
    BreakingMigration {
        /// Its version.
        version: i64,
        /// Its name.
        name: &'static str,
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
            Self::Token(_) => true,
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
    /// With Entra ID sign-in, the task that renews the token of new
    /// connections (stopped with the last clone).
    token_refresh: Option<std::sync::Arc<entra::TokenRefresh>>,
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
        Self::connect_as(url, settings, &PasswordSource::Url).await
    }

    /// Connects to `url` with `settings`, each new connection signing in
    /// with the password `password` gives: the URL's, or a fresh Entra ID
    /// token (then the URL names the principal as its user and holds no
    /// password: [`DatabaseError::EntraUrl`] otherwise).
    pub async fn connect_as(
        url: &str,
        settings: PoolSettings,
        password: &PasswordSource,
    ) -> Result<Self, DatabaseError> {
        let (options, tokens) = entra::connect_options(url, password).await?;
        let options = named(options);
        let mut database = Self::connect_options(options.clone(), settings).await?;
        if let Some((tokens, expires_on)) = tokens {
            let refresh = entra::TokenRefresh::start(database.pool.clone(), options, tokens, expires_on);
            database.token_refresh = Some(std::sync::Arc::new(refresh));
        }
        Ok(database)
    }

    /// Connects with already parsed options (tests use this to pin the
    /// `search_path` to a schema of their own).
    pub async fn connect_options(options: PgConnectOptions, settings: PoolSettings) -> Result<Self, DatabaseError> {
        let options = named(options);
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
            token_refresh: None,
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

    /// Applies every pending migration unless one of them is breaking on a
    /// database that already has a schema ([`DatabaseError::BreakingMigration`],
    /// nothing applied): what a plain `bosun migrate` does; `--force` is
    /// [`PostgresDatabase::migrate`]. Decided under the migration lock, so
    /// the answer holds for the schema it applies to.
    pub async fn migrate_unless_breaking(&self) -> Result<MigrationReport, DatabaseError> {
        self.migrate_within(SCHEMA_VERSION, Breaking::Refuse).await
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
        self.migrate_within(target, Breaking::Apply).await
    }

    async fn migrate_within(&self, target: i64, breaking: Breaking) -> Result<MigrationReport, DatabaseError> {
        let mut tx = self.pool.begin().await?;
        match apply_migrations(&mut tx, target, breaking).await {
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

/// `options` with bosun's `application_name` unless they name one.
fn named(options: PgConnectOptions) -> PgConnectOptions {
    match options.get_application_name() {
        Some(_) => options,
        None => options.application_name("bosun"),
    }
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
