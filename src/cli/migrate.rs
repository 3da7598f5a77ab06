//! `bosun migrate`: create or upgrade bosun's PostgreSQL schema.

use std::io::Write;

use anyhow::{Context, Result};
use clap::Args;

use bosun::backends::postgres::{MigrationReport, PostgresDatabase};
use bosun::runtime::config::Settings;

use super::output::print_json;

/// `bosun migrate`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct MigrateArgs {
    /// The database (default: BOSUN_DATABASE_URL).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
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
    let database = PostgresDatabase::connect(&url).await?;
    let report = database.migrate().await?;
    if args.json {
        print_json(&serde_json::json!({"applied": report.applied, "version": report.version}))
    } else {
        write_report(&mut std::io::stdout().lock(), &report)
    }
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
    fn says_whether_anything_was_applied() {
        assert_eq!(report(&[], 7), "schema already at version 7\n");
        assert_eq!(report(&[6, 7], 7), "applied migrations [6, 7]; schema at version 7\n");
    }
}
