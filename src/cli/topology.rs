//! `bosun topology plan|apply`: the Service Bus entities bosun needs.
//! Off Service Bus, `plan` lists what a new namespace would need without
//! contacting one.

use anyhow::{Result, bail};
use clap::Subcommand;

use bosun::backends::servicebus::plan::{self as servicebus_plan, Plan, PlanAction, PlanItem};
use bosun::runtime::config::Settings;
use bosun::runtime::registry;
use bosun::wiring;

use super::output::{out, print_json};

/// `bosun topology ...`
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum TopologyCommand {
    /// What the namespace needs, entity by entity (create, exists,
    /// differs, delete). Without BOSUN_TRANSPORT=servicebus it lists what a
    /// namespace would need, without contacting one.
    Plan {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create what the plan says is missing (needs Manage rights on the
    /// namespace); never deletes anything but `$Default` rules.
    Apply {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a topology command against the configured namespace.
pub async fn run(command: TopologyCommand, settings: &Settings) -> Result<()> {
    // The registry's: with the session-keyed consumers' entities.
    let topology = registry::topology();
    let options = wiring::topology_options(settings)?;
    let Some(servicebus) = &settings.servicebus else {
        return match command {
            TopologyCommand::Plan { json } => {
                let plan = Plan {
                    items: servicebus_plan::desired_entities(&topology, &options)
                        .into_iter()
                        .map(|spec| PlanItem {
                            entry: spec.atom_entry(),
                            kind: spec.kind,
                            path: spec.path,
                            action: PlanAction::Create,
                        })
                        .filter(|item| item.entry.is_some())
                        .collect(),
                };
                if json {
                    print_json(&plan)?;
                } else {
                    eprintln!(
                        "bosun: not on Service Bus (BOSUN_TRANSPORT={:?}); what a new namespace needs:",
                        settings.transport
                    );
                    out!("{plan}")?;
                }
                Ok(())
            }
            TopologyCommand::Apply { .. } => {
                bail!("bosun topology apply works on Service Bus: set BOSUN_TRANSPORT=servicebus and its namespace")
            }
        };
    };
    let client = wiring::management_client(servicebus)?;
    match command {
        TopologyCommand::Plan { json } => {
            let plan = client.plan(&topology, &options).await?;
            if json {
                print_json(&plan)?;
            } else {
                out!("{plan}")?;
            }
        }
        TopologyCommand::Apply { json } => {
            let plan = client.plan(&topology, &options).await?;
            let report = client.apply(&plan).await?;
            if json {
                print_json(&report)?;
            } else {
                out!("{report}")?;
            }
        }
    }
    Ok(())
}
