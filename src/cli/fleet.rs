//! `bosun fleet`: the `serve` and `api` processes running on the shared
//! PostgreSQL store, with the release each runs and the message wire
//! versions it writes and reads: during a rolling update, whether every
//! process of the older release is gone (and `BOSUN_COMPAT_VERSION` can be
//! cleared, or a contract step follow).

use std::io::Write;
use std::time::Duration;

use anyhow::Result;
use clap::Args;

use bosun::ports::store::ProcessRecord;
use bosun::runtime::config::Settings;
use bosun::wiring::Backends;

use super::keys::parse_duration;
use super::output::{Align, Table, print_json, short_time};

/// `bosun fleet`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct FleetArgs {
    /// List the processes seen within this long (every process says it
    /// runs every 30 s): e.g. 90s, 10m.
    #[arg(long, default_value = "90s", value_parser = parse_duration)]
    pub within: Duration,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Lists the fleet.
pub async fn run(args: FleetArgs, settings: &Settings) -> Result<()> {
    let backends = Backends::open_existing(settings).await?;
    let fleet = backends.store.fleet(args.within).await?;
    if args.json {
        return print_json(&serde_json::json!({
            "keptByStore": fleet.is_some(),
            "processes": fleet.unwrap_or_default(),
            "thisBuild": {
                "wireVersion": bosun_contracts::WIRE_VERSION,
                "writesWire": settings.message_versions.wire(),
            },
        }));
    }
    write_fleet(&mut std::io::stdout().lock(), fleet.as_deref(), args.within)
}

fn write_fleet(out: &mut impl Write, fleet: Option<&[ProcessRecord]>, within: Duration) -> Result<()> {
    let Some(fleet) = fleet else {
        writeln!(
            out,
            "this store belongs to one process (the embedded SQLite store): there is no fleet to list"
        )?;
        return Ok(());
    };
    if fleet.is_empty() {
        writeln!(out, "no process seen in the last {} s", within.as_secs())?;
    } else {
        let mut table = Table::new([
            ("ROLE", Align::Left),
            ("RELEASE", Align::Left),
            ("SCHEMA", Align::Right),
            ("WRITES", Align::Left),
            ("READS", Align::Left),
            ("HOST", Align::Left),
            ("STARTED", Align::Left),
            ("SEEN", Align::Left),
        ]);
        for process in fleet {
            table.row([
                process.role.clone(),
                process.release.clone(),
                process.built_for_schema.to_string(),
                format!("wire {}", process.writes_wire),
                format!("{}..={}", process.reads_wire_from, process.reads_wire_to),
                process.host.clone(),
                short_time(process.started_at),
                short_time(process.seen_at),
            ]);
        }
        table.write(out)?;
        let newest_all_read = fleet.iter().map(|p| p.reads_wire_to).min().unwrap_or_default();
        writeln!(
            out,
            "every process listed reads wire versions up to {newest_all_read}: senders may write up to it \
             (BOSUN_COMPAT_VERSION={newest_all_read}, or unset once it is this release's)"
        )?;
    }
    writeln!(
        out,
        "processes of releases built for schema 13 or earlier do not say they run: check your deployments for them"
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(role: &str, reads_wire_to: u32) -> ProcessRecord {
        ProcessRecord {
            id: uuid::Uuid::nil(),
            role: role.to_owned(),
            release: "0.1.0".to_owned(),
            built_for_schema: 14,
            writes_wire: 1,
            reads_wire_from: 1,
            reads_wire_to,
            host: "bosun-api-1".to_owned(),
            started_at: time::OffsetDateTime::UNIX_EPOCH,
            seen_at: time::OffsetDateTime::UNIX_EPOCH,
        }
    }

    fn text(fleet: Option<&[ProcessRecord]>) -> String {
        let mut out = Vec::new();
        write_fleet(&mut out, fleet, Duration::from_secs(90)).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn says_what_every_listed_process_reads_and_what_it_cannot_see() {
        let listed = text(Some(&[process("api", 2), process("serve", 1)]));
        assert!(
            listed.contains(
                "ROLE   RELEASE  SCHEMA  WRITES  READS  HOST         STARTED               SEEN\n\
                 api    0.1.0        14  wire 1  1..=2  bosun-api-1  1970-01-01T00:00:00Z  1970-01-01T00:00:00Z\n"
            ),
            "{listed}"
        );
        assert!(listed.contains("reads wire versions up to 1"), "{listed}");
        assert!(listed.contains("schema 13 or earlier"), "{listed}");
        assert!(text(Some(&[])).contains("no process seen in the last 90 s"));
        assert!(text(None).contains("belongs to one process"));
    }
}
