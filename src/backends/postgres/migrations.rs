//! The schema's migrations and its compatibility window: which migrations
//! exist, which bosun runs on a database they were applied to, what
//! `migrate` would apply and how it applies it.

use sqlx_core::executor::Executor;
use sqlx_core::query::query;
use sqlx_core::raw_sql::raw_sql;
use sqlx_core::row::Row;
use sqlx_postgres::PgConnection;

use super::{DatabaseError, MigrationReport, SCHEMA_VERSION};

/// One migration: a version, a name, its SQL, and the oldest bosun that
/// can run on a database it has been applied to.
#[derive(Debug, Clone, Copy)]
pub(super) struct Migration {
    pub(super) version: i64,
    pub(super) name: &'static str,
    pub(super) sql: &'static str,
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
    pub(super) runs_with: i64,
}

/// Every migration, in order. Never edit one that has shipped; add a new one
/// and raise [`SCHEMA_VERSION`].
pub(super) const MIGRATIONS: &[Migration] = &[
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
    Migration {
        version: 14,
        name: "fleet",
        sql: include_str!("../../../migrations/postgres/0014_fleet.sql"),
        runs_with: 13,
    },
    // A new table only: the release built for schema 13 (the previous
    // release, `.ci/previous-release`) never reads it, so it runs with 13,
    // like migration 14 that ships in the same release (`version - 1`
    // would stop the previous release).
    Migration {
        version: 15,
        name: "release_policies",
        sql: include_str!("../../../migrations/postgres/0015_release_policies.sql"),
        runs_with: 13,
    },
    // A new table only, shipping in the same release as 14 and 15: the
    // previous release (built for schema 13) never reads it, so it runs
    // with 13 too.
    Migration {
        version: 16,
        name: "release_audit",
        sql: include_str!("../../../migrations/postgres/0016_release_audit.sql"),
        runs_with: 13,
    },
    // Two indexes the previous release never relies on: it runs with 13
    // too.
    Migration {
        version: 17,
        name: "retention_indexes",
        sql: include_str!("../../../migrations/postgres/0017_retention_indexes.sql"),
        runs_with: 13,
    },
    // A new table only, which the previous release never reads: it runs
    // with 13 too.
    Migration {
        version: 18,
        name: "consumer_controls",
        sql: include_str!("../../../migrations/postgres/0018_consumer_controls.sql"),
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
    /// The first pending migration that stops the bosuns running on the
    /// database now, if any (none on a database with no schema yet:
    /// nothing runs on it).
    pub fn first_breaking(&self) -> Option<&PlannedMigration> {
        if self.from.version == 0 {
            return None;
        }
        self.pending.iter().find(|m| m.is_breaking())
    }

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
            .take_while(|m| !m.is_breaking())
            .last()
            .map_or(self.from.version, |m| m.version)
    }
}

/// Whether a migration run applies a breaking migration it meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Breaking {
    /// Apply it (`migrate --force`, a database with no schema yet, tests).
    Apply,
    /// Refuse the whole run, applying nothing (a plain `migrate`).
    Refuse,
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

impl PlannedMigration {
    /// Whether the release before it stops once it is applied.
    pub fn is_breaking(&self) -> bool {
        self.runs_with >= self.version
    }
}

/// The applied migrations as the database records them.
pub(super) struct Applied {
    /// Version and checksum of each.
    pub(super) rows: Vec<(i64, String)>,
    pub(super) window: SchemaWindow,
}

impl Applied {
    /// Fails when an applied migration this bosun knows has other SQL than
    /// its copy, or when the database is past what this bosun runs with.
    pub(super) fn verify(&self) -> Result<(), DatabaseError> {
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
    pub(super) fn plan(&self, target: i64) -> MigrationPlan {
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
pub(super) async fn read_applied(conn: &mut PgConnection) -> Result<Applied, DatabaseError> {
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

/// Within the migration transaction: takes the advisory lock, reads the
/// applied versions, checks them against this build's, applies the rest.
/// A database a newer bosun migrated within this one's window needs
/// nothing from it: the report says so and nothing is written.
pub(super) async fn apply_migrations(
    conn: &mut PgConnection,
    target: i64,
    breaking: Breaking,
) -> Result<MigrationReport, DatabaseError> {
    (&mut *conn).execute(MIGRATION_LOCK).await?;
    (&mut *conn).execute(CREATE_MIGRATIONS_TABLE).await?;
    (&mut *conn).execute(ADD_RUNS_WITH).await?;
    let applied = read_applied(conn).await?;
    applied.verify()?;
    let plan = applied.plan(target);
    if breaking == Breaking::Refuse
        && let Some(first) = plan.first_breaking()
    {
        return Err(DatabaseError::BreakingMigration {
            version: first.version,
            name: first.name,
        });
    }
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
