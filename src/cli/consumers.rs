//! `bosun consumers`: which consumers are paused, pausing and resuming one
//! (every replica stops taking its messages within a few seconds; they
//! wait in its queue), and the log of pauses and resumes.

use std::io::Write;

use anyhow::Result;
use clap::Subcommand;

use bosun::operator::controls::{self, Actor, ConsumerControlOutcome, ConsumerView};
use bosun::ports::store::{ConsumerControl, ControlAction};
use bosun::runtime::config::Settings;
use bosun::wiring::Backends;

use super::output::{Align, Table, print_json, short_time};

/// `bosun consumers ...`.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum ConsumersCommand {
    /// Every consumer and whether it is paused.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Pause a consumer for every tenant: within a few seconds every
    /// replica stops taking its messages, which wait in its queue (none is
    /// dead-lettered by the pause). Recorded with who, when and why.
    Pause {
        /// The consumer (`bosun consumers list` names them).
        consumer: String,
        /// Why (recorded, and shown wherever it is seen paused).
        #[arg(long)]
        reason: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Resume a paused consumer: its replicas take messages again within a
    /// few seconds.
    Resume {
        /// The consumer.
        consumer: String,
        /// Why (recorded).
        #[arg(long)]
        reason: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The log of pauses and resumes, newest first.
    Log {
        /// At most this many entries.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `command`.
pub async fn run(command: ConsumersCommand, settings: &Settings) -> Result<()> {
    let backends = Backends::open_existing(settings).await?;
    let controls = backends.controls.as_ref();
    let by = format!("cli:{}", settings.operator);
    let actor = Actor { by: &by, door: &by };
    let mut out = std::io::stdout().lock();
    match command {
        ConsumersCommand::List { json } => {
            let consumers = controls::consumers(controls).await?;
            if json {
                return print_json(&consumers);
            }
            write_consumers(&mut out, &consumers)
        }
        ConsumersCommand::Pause { consumer, reason, json } => {
            let outcome = controls::control(controls, &consumer, ControlAction::Pause, actor, Some(&reason)).await?;
            if json {
                return print_json(&outcome);
            }
            write_outcome(&mut out, &outcome)
        }
        ConsumersCommand::Resume { consumer, reason, json } => {
            let outcome =
                controls::control(controls, &consumer, ControlAction::Resume, actor, reason.as_deref()).await?;
            if json {
                return print_json(&outcome);
            }
            write_outcome(&mut out, &outcome)
        }
        ConsumersCommand::Log { limit, json } => {
            let log = controls::log(controls, limit).await?;
            if json {
                return print_json(&log);
            }
            for control in &log {
                writeln!(out, "{}", describe(control))?;
            }
            Ok(())
        }
    }
}

fn describe(control: &ConsumerControl) -> String {
    let reason = control.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
    format!(
        "{}  {} {}d by {} ({}){reason}",
        short_time(control.at),
        control.consumer,
        control.action.as_str(),
        control.by,
        control.door
    )
}

fn write_consumers(out: &mut impl Write, consumers: &[ConsumerView]) -> Result<()> {
    let mut table = Table::new([
        ("CONSUMER", Align::Left),
        ("STATE", Align::Left),
        ("SINCE", Align::Left),
    ]);
    for consumer in consumers {
        let state = if consumer.paused { "paused" } else { "running" };
        let since = match (&consumer.last_control, consumer.paused) {
            (Some(control), true) => describe(control),
            _ => String::new(),
        };
        table.row([consumer.name.clone(), state.to_owned(), since]);
    }
    table.write(out)?;
    Ok(())
}

fn write_outcome(out: &mut impl Write, outcome: &ConsumerControlOutcome) -> Result<()> {
    let control = &outcome.control;
    match (outcome.changed, control.action) {
        (true, ControlAction::Pause) => writeln!(
            out,
            "{} paused: every replica stops taking its messages within a few seconds; they wait in its queue",
            control.consumer
        )?,
        (true, ControlAction::Resume) => writeln!(
            out,
            "{} resumed: its replicas take messages again within a few seconds",
            control.consumer
        )?,
        (false, ControlAction::Pause) => {
            writeln!(out, "{} was paused already: {}", control.consumer, describe(control))?
        }
        (false, ControlAction::Resume) => writeln!(out, "{} is not paused: nothing changed", control.consumer)?,
    }
    Ok(())
}
