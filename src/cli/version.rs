//! `bosun version [--json]`: the release, the wire version it writes and
//! the range it reads, and each message type's versions read.

use anyhow::Result;
use bosun::runtime::config::Settings;
use bosun_contracts::{CATALOGUE, WIRE_VERSION, versions};
use clap::Args;
use serde_json::{Value, json};

use super::output::{outln, print_json};

/// `bosun version`
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct VersionArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `bosun version --json` prints.
fn report(settings: &Settings) -> Value {
    let types: Vec<Value> = CATALOGUE
        .iter()
        .map(|spec| {
            json!({
                "type": spec.message_type,
                "schemaVersion": spec.schema_version,
                "oldestRead": spec.oldest_read,
                "writes": versions::version_for_wire(spec, settings.message_versions.wire()),
            })
        })
        .collect();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "wireVersion": WIRE_VERSION,
        "reads": {"oldestWire": versions::oldest_wire_read(), "newestWire": WIRE_VERSION},
        "writesWire": settings.message_versions.wire(),
        "compatVersion": settings.message_versions.compat_version,
        "messages": types,
    })
}

/// Prints the version report.
pub fn run(args: &VersionArgs, settings: &Settings) -> Result<()> {
    let report = report(settings);
    if args.json {
        return print_json(&report);
    }
    outln!("bosun {}", env!("CARGO_PKG_VERSION"))?;
    outln!(
        "wire version {WIRE_VERSION}; reads wire {}..={WIRE_VERSION}",
        versions::oldest_wire_read()
    )?;
    match settings.message_versions.compat_version {
        Some(wire) => outln!("writes wire {wire} (BOSUN_COMPAT_VERSION)")?,
        None => outln!("writes wire {WIRE_VERSION}")?,
    }
    for spec in CATALOGUE.iter().filter(|spec| spec.oldest_read != spec.schema_version) {
        outln!(
            "  {} versions {}..={}",
            spec.message_type,
            spec.oldest_read,
            spec.schema_version
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_the_wire_versions_and_what_compat_writes() {
        let mut settings = Settings::with_data_dir("/tmp/bosun-version-test");
        let current = report(&settings);
        assert_eq!(current["wireVersion"], WIRE_VERSION);
        assert_eq!(current["reads"]["oldestWire"], 1);
        assert_eq!(current["writesWire"], WIRE_VERSION);
        let approve = |report: &Value| {
            report["messages"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["type"] == "ApproveRelease")
                .cloned()
                .unwrap()
        };
        assert_eq!(approve(&current)["oldestRead"], 1);
        assert_eq!(approve(&current)["writes"], 2);
        settings.message_versions.compat_version = Some(1);
        let compat = report(&settings);
        assert_eq!(compat["writesWire"], 1);
        assert_eq!(approve(&compat)["writes"], 1);
    }
}
