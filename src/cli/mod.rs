//! The `bosun` command line: argument parsing and printing. Each command is
//! a thin call into [`bosun::wiring`] or [`bosun::operator`]; `--json`
//! prints machine-readable output for agents and scripts.
//!
//! This file holds the top-level [`Cli`] and [`Command`] and dispatches;
//! each command group has its own file with its clap arguments, its runner
//! and its printers, which write to any `Write` so their tests read what a
//! user sees:
//!
//! - `serve.rs`: `serve`, `api`, `mcp` (the long-running servers);
//! - `migrate.rs`, `topology.rs`, `keys.rs`: setting up PostgreSQL, Service
//!   Bus and API keys; `infra.rs`: rendering the AKS deployment;
//!   `prune.rs`: retention on demand;
//! - `send.rs`, `deliveries.rs`, `dead_letters.rs`, `sagas.rs`: what an
//!   operator does day to day;
//! - `demo.rs`, `bench.rs`, `schema.rs`: the demo, the benchmark and the
//!   contracts' JSON Schemas;
//! - `output.rs`: `--json` output and times, shared by all of them.

mod audit;
mod bench;
mod consumers;
mod dead_letters;
mod deliveries;
mod demo;
mod fleet;
mod infra;
mod keys;
mod migrate;
pub mod output;
mod prune;
mod releases;
mod sagas;
mod schema;
mod send;
mod serve;
mod topology;
mod version;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

use bosun::runtime::config::Settings;
use bosun::runtime::telemetry;

use bench::BenchArgs;
use dead_letters::DeadLettersCommand;
use deliveries::DeliveriesCommand;
use demo::DemoArgs;
use fleet::FleetArgs;
use infra::InfraCommand;
use keys::KeysCommand;
use migrate::MigrateArgs;
use prune::PruneArgs;
use releases::ReleasesCommand;
use sagas::SagasCommand;
use schema::SchemaCommand;
use send::SendArgs;
use serve::{ApiArgs, ServeArgs};
use topology::TopologyCommand;
use version::VersionArgs;

/// bosun: saga orchestration for software delivery.
#[derive(Debug, Clone, PartialEq, Parser)]
#[command(name = "bosun", version, about, long_about = None)]
pub struct Cli {
    /// Settings file (default: $BOSUN_CONFIG, else ./bosun.toml if present).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory (overrides BOSUN_DATA_DIR; default ./.bosun).
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Clone, PartialEq, Subcommand)]
pub enum Command {
    /// Run the consumers on the embedded transport until SIGTERM or Ctrl-C.
    Serve(ServeArgs),
    /// Serve only the HTTP API, console and MCP endpoint (no consumers).
    Api(ApiArgs),
    /// Serve the MCP tools to an agent over stdio, acting as the API key
    /// in BOSUN_API_KEY.
    Mcp,
    /// The Service Bus entities bosun needs (queues, the events topic,
    /// subscriptions and their filter rules).
    Topology {
        /// What to do.
        #[command(subcommand)]
        command: TopologyCommand,
    },
    /// The deployment on AKS: `bosun infra render [DIR]`, `bosun infra
    /// identities --from-deployment FILE DIR`.
    Infra {
        /// What to do.
        #[command(subcommand)]
        command: InfraCommand,
    },
    /// Create, list and revoke API keys.
    Keys {
        /// What to do.
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Run one whole delivery of a sample module on the embedded default, in a
    /// temporary data directory (or --data-dir), with live progress and a
    /// summary. Exits non-zero if the delivery does not complete.
    Demo(DemoArgs),
    /// Measure the runtime: messages per second and p50/p99 latencies of a
    /// no-op consumer and a saga consumer, per backend and number of
    /// concurrent handlers, printed as a table.
    Bench(BenchArgs),
    /// Create or upgrade bosun's PostgreSQL schema (safe to run
    /// concurrently and repeatedly).
    Migrate(MigrateArgs),
    /// List the serve and api processes running on the shared PostgreSQL
    /// store: the release each runs and the message wire versions it
    /// writes and reads.
    Fleet(FleetArgs),
    /// Pause and resume consumers (their messages wait while paused), list
    /// which are paused, and the log of pauses and resumes.
    Consumers {
        /// What to do.
        #[command(subcommand)]
        command: consumers::ConsumersCommand,
    },
    /// Delete what is past its retention (BOSUN_RETENTION_*) now, batch
    /// after batch, as `serve` does every BOSUN_RETENTION_INTERVAL_MS.
    Prune(PruneArgs),
    /// Fire a command (or event): validate the payload and send it.
    Send(SendArgs),
    /// Follow deliveries.
    Deliveries {
        /// What to do.
        #[command(subcommand)]
        command: DeliveriesCommand,
    },
    /// Inspect, replay and purge dead letters.
    #[command(name = "dead-letters")]
    DeadLetters {
        /// What to do.
        #[command(subcommand)]
        command: DeadLettersCommand,
    },
    /// The release audit log: every release decision of a tenant.
    Audit {
        /// What to do.
        #[command(subcommand)]
        command: audit::AuditCommand,
    },
    /// Releases: one release's state, approve and reject it, override its
    /// promotion windows, hold environments, and the tenant's policy.
    Releases {
        /// What to do.
        #[command(subcommand)]
        command: ReleasesCommand,
    },
    /// Inspect sagas.
    Sagas {
        /// What to do.
        #[command(subcommand)]
        command: SagasCommand,
    },
    /// JSON Schemas of the contracts.
    Schema {
        /// What to do.
        #[command(subcommand)]
        command: SchemaCommand,
    },
    /// The release, the wire version of its messages, the range it reads,
    /// and what it writes (BOSUN_COMPAT_VERSION).
    Version(VersionArgs),
}

impl Command {
    /// `demo` and `bench` set up their own, quieter logging: their output
    /// is the progress.
    fn sets_up_its_own_logging(&self) -> bool {
        matches!(self, Self::Demo(_) | Self::Bench(_))
    }
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> Result<()> {
    let known = bosun::runtime::config::known_settings(bosun::runtime::registry::setting_names());
    let mut settings = Settings::load(cli.config.as_deref(), &known)?;
    let explicit_data_dir = cli.data_dir.is_some();
    if let Some(dir) = cli.data_dir {
        settings.data_dir = dir;
    }
    let telemetry =
        (!cli.command.sets_up_its_own_logging()).then(|| telemetry::init(settings.log_format, &settings.telemetry));
    let result = match cli.command {
        Command::Serve(args) => serve::serve(args, settings).await,
        Command::Api(args) => serve::api(args, &settings).await,
        Command::Mcp => serve::mcp(&settings).await,
        Command::Topology { command } => topology::run(command, &settings).await,
        Command::Infra { command } => infra::run(command, &settings),
        Command::Keys { command } => keys::run(command, &settings).await,
        Command::Demo(args) => demo::run(args, settings, explicit_data_dir).await,
        Command::Bench(args) => bench::run(args, settings).await,
        Command::Migrate(args) => migrate::run(args, &settings).await,
        Command::Fleet(args) => fleet::run(args, &settings).await,
        Command::Consumers { command } => consumers::run(command, &settings).await,
        Command::Prune(args) => prune::run(args, &settings).await,
        Command::Send(args) => send::run(args, &settings).await,
        Command::Deliveries { command } => deliveries::run(command, &settings).await,
        Command::DeadLetters { command } => dead_letters::run(command, &settings).await,
        Command::Audit { command } => audit::run(command, &settings).await,
        Command::Releases { command } => releases::run(command, &settings).await,
        Command::Sagas { command } => sagas::run(command, &settings).await,
        Command::Schema { command } => schema::run(command),
        Command::Version(args) => version::run(&args, &settings),
    };
    // The spans still queued are exported before the process exits.
    if let Some(telemetry) = telemetry {
        telemetry.shutdown().await;
    }
    result
}

#[cfg(test)]
mod tests;
