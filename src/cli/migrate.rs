//! `bosun migrate`: create or upgrade bosun's PostgreSQL schema.

use std::io::Write;

use anyhow::{Context, Result};
use clap::Args;

use bosun::backends::postgres::{MigrationPlan, MigrationReport, PoolSettings, SCHEMA_VERSION};
use bosun::runtime::config::Settings;

use super::output::print_json;

/// `bosun migrate`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct MigrateArgs {
    /// The database (default: BOSUN_DATABASE_URL).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Say what would be applied and which bosuns could then run, changing
    /// nothing.
    #[arg(long)]
    pub check: bool,
    /// Apply only what the running release survives: the compatible
    /// migrations before the first breaking one (everything on a database
    /// with no schema yet). What each pod's init container runs on AKS; a
    /// breaking migration then waits for a plain `bosun migrate`.
    #[arg(long, conflicts_with = "check")]
    pub compatible_only: bool,
    /// Apply a breaking migration too: one after which every bosun built
    /// for an earlier schema stops serving. Without it a plain `migrate`
    /// refuses such a run, naming the migration, and applies nothing.
    #[arg(long, conflicts_with_all = ["check", "compatible_only"])]
    pub force: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Applies the migrations the database lacks and says what it did.
pub async fn run(args: MigrateArgs, settings: &Settings) -> Result<()> {
    let url = args
        .database_url
        .or_else(|| settings.database_url.as_ref().map(|url| url.expose().to_owned()))
        .context("no database: pass --database-url or set BOSUN_DATABASE_URL")?;
    // Signs in as `serve` does (BOSUN_DATABASE_AUTH): with Entra ID, the
    // same identity and token path as the pods' own connections.
    let database = bosun::wiring::open_database(&url, settings, PoolSettings::default()).await?;
    if args.check {
        let plan = database.plan().await?;
        return if args.json {
            print_json(&serde_json::json!({
                "builtFor": SCHEMA_VERSION,
                "version": plan.from.version,
                "runsWith": plan.from.runs_with,
                "pending": plan.pending.iter().map(|m| serde_json::json!({
                    "version": m.version, "name": m.name, "runsWith": m.runs_with,
                    "breaking": m.is_breaking() && plan.from.version > 0,
                })).collect::<Vec<_>>(),
                "after": {"version": plan.to.version, "runsWith": plan.to.runs_with},
            }))
        } else {
            write_plan(&mut std::io::stdout().lock(), &plan)
        };
    }
    let report = if args.compatible_only {
        database.migrate_compatible().await?
    } else if args.force {
        database.migrate().await?
    } else {
        database.migrate_unless_breaking().await?
    };
    if args.json {
        print_json(&serde_json::json!({"applied": report.applied, "version": report.version}))
    } else {
        write_report(&mut std::io::stdout().lock(), &report)
    }
}

/// The text of `--check`: where the schema stands, what would be applied,
/// and the oldest bosun that runs on it before and after.
fn write_plan(out: &mut impl Write, plan: &MigrationPlan) -> Result<()> {
    writeln!(
        out,
        "schema at version {}; runs with bosun built for schema {} or later (this one: {SCHEMA_VERSION})",
        plan.from.version, plan.from.runs_with
    )?;
    if plan.pending.is_empty() {
        writeln!(out, "nothing to apply")?;
        return Ok(());
    }
    for migration in &plan.pending {
        let kind = if !migration.is_breaking() {
            "compatible: the previous release keeps running"
        } else if plan.from.version == 0 {
            "breaking, but nothing runs on a database with no schema yet"
        } else {
            "breaking: the previous release stops (needs --force)"
        };
        writeln!(out, "would apply {} ({}): {kind}", migration.version, migration.name)?;
    }
    writeln!(
        out,
        "then at version {}; runs with bosun built for schema {} or later",
        plan.to.version, plan.to.runs_with
    )?;
    Ok(())
}

/// The text report: what was applied and the version the schema is at.
fn write_report(out: &mut impl Write, report: &MigrationReport) -> Result<()> {
    if report.applied.is_empty() {
        writeln!(out, "schema already at version {}", report.version)?;
    } else {
        writeln!(
            out,
            "applied migrations {:?}; schema at version {}",
            report.applied, report.version
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(applied: &[i64], version: i64) -> String {
        let report = MigrationReport {
            applied: applied.to_vec(),
            version,
        };
        let mut out = Vec::new();
        write_report(&mut out, &report).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_check_says_what_would_be_applied_and_who_runs_on_it() {
        use bosun::backends::postgres::{PlannedMigration, SchemaWindow};
        let plan = MigrationPlan {
            from: SchemaWindow {
                version: 12,
                runs_with: 12,
            },
            pending: vec![
                PlannedMigration {
                    version: 13,
                    name: "wide",
                    runs_with: 12,
                },
                PlannedMigration {
                    version: 14,
                    name: "narrow",
                    runs_with: 14,
                },
            ],
            to: SchemaWindow {
                version: 14,
                runs_with: 14,
            },
        };
        let mut out = Vec::new();
        write_plan(&mut out, &plan).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                "schema at version 12; runs with bosun built for schema 12 or later (this one: {SCHEMA_VERSION})\n\
                 would apply 13 (wide): compatible: the previous release keeps running\n\
                 would apply 14 (narrow): breaking: the previous release stops (needs --force)\n\
                 then at version 14; runs with bosun built for schema 14 or later\n"
            )
        );
    }

    #[test]
    fn says_whether_anything_was_applied() {
        assert_eq!(report(&[], 7), "schema already at version 7\n");
        assert_eq!(report(&[6, 7], 7), "applied migrations [6, 7]; schema at version 7\n");
    }
}
