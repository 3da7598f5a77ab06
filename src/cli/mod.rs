//! The `bosun` command line: argument parsing and printing. Each command is
//! a thin call into [`crate::wiring`] or [`crate::operator`]; `--json`
//! prints machine-readable output for agents and scripts.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use std::sync::Arc;

use bosun::backends::servicebus::plan as servicebus_plan;
use bosun::front::access;
use bosun::front::api::{self, ApiState};
use bosun::front::gateway::Gateway;
use bosun::front::mcp::McpServer;
use bosun::operator::Delivery;
use bosun::ports::store::{DeadLetterFilter, DeadLetterRecord, SagaRecord};
use bosun::ports::transport::Topology;
use bosun::runtime::config::{Settings, parse_consumer_list};
use bosun::runtime::metrics::Metrics;
use bosun::runtime::telemetry;
use bosun::wiring::{self, Backends};

/// bosun: saga orchestration for software delivery.
#[derive(Debug, Parser)]
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
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the consumers on the embedded transport until SIGTERM or Ctrl-C.
    Serve {
        /// Comma-separated consumers to run (default: all available).
        #[arg(long, value_name = "LIST")]
        consumers: Option<String>,
        /// Also serve the HTTP API, console and MCP endpoint on this
        /// address, e.g. 0.0.0.0:8080 (port 0 picks a free one).
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
    },
    /// Serve only the HTTP API, console and MCP endpoint (no consumers).
    Api {
        /// The address, e.g. 0.0.0.0:8080.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
        http: String,
    },
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
    /// Create, list and revoke API keys.
    Keys {
        /// What to do.
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Run one whole delivery of a sample module on the embedded default, in a
    /// temporary data directory (or --data-dir), with live progress and a
    /// summary. Exits non-zero if the delivery does not complete.
    Demo {
        /// Break the sample's unit test: the pipeline fails and the release
        /// stops before promotion.
        #[arg(long)]
        failing_test: bool,
        /// Keep the temporary data directory and print its path.
        #[arg(long)]
        keep: bool,
        /// Give up after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 300)]
        timeout: u64,
        /// The tenant the delivery belongs to.
        #[arg(long, value_name = "TENANT", default_value = bosun::tools::demo::TENANT)]
        tenant: String,
        /// Print the summary as JSON (progress goes to stderr).
        #[arg(long)]
        json: bool,
    },
    /// Measure the runtime: messages per second and p50/p99 latencies of a
    /// no-op consumer and a saga consumer, per backend and number of
    /// concurrent handlers, printed as a table.
    Bench {
        /// Messages per run.
        #[arg(long, default_value_t = 2000)]
        messages: usize,
        /// Concurrent handlers to try (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
        concurrency: Vec<usize>,
        /// Workloads (comma-separated: noop, saga).
        #[arg(long, value_delimiter = ',', default_value = "noop,saga")]
        scenarios: Vec<String>,
        /// Give up on one run after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Also measure on PostgreSQL (a fresh schema per run, dropped after).
        #[arg(long, value_name = "URL")]
        database_url: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create or upgrade bosun's PostgreSQL schema (safe to run
    /// concurrently and repeatedly).
    Migrate {
        /// The database (default: BOSUN_DATABASE_URL).
        #[arg(long, value_name = "URL")]
        database_url: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Fire a command (or event): validate the payload and send it.
    Send {
        /// Message type, e.g. ProvisionRepository.
        #[arg(value_name = "TYPE")]
        message_type: String,
        /// The payload as JSON, or @FILE to read it from a file (@- for stdin).
        #[arg(long, value_name = "JSON|@FILE")]
        payload: String,
        /// Join an existing delivery instead of starting a new one.
        #[arg(long, value_name = "ID")]
        correlation_id: Option<Uuid>,
        /// Tenant the delivery belongs to.
        #[arg(long, value_name = "ID", default_value = "default")]
        tenant: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
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
}

/// `bosun topology ...`
#[derive(Debug, Subcommand)]
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

/// `bosun keys ...`
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key bound to a tenant and scopes; prints it once.
    Create {
        /// The tenant it acts for (`*`: a platform key for every tenant).
        #[arg(long, value_name = "TENANT")]
        tenant: String,
        /// Comma-separated: commands:send, deliveries:read,
        /// dead-letters:replay, releases:approve (or
        /// releases:approve:<environment>, once per environment), admin.
        #[arg(long, value_name = "S1,S2")]
        scopes: String,
        /// Free text to tell keys apart; recorded with the approvals the
        /// key gives (`key:<id> (<description>)`).
        #[arg(long)]
        description: Option<String>,
        /// Print `{"key": ..., "id": ...}`.
        #[arg(long)]
        json: bool,
    },
    /// Every key (never the secrets).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key: it stops working at once.
    Revoke {
        /// The key's id (the part after `bsn_`).
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `bosun deliveries ...`
#[derive(Debug, Subcommand)]
pub enum DeliveriesCommand {
    /// The timeline of one delivery: every message, its consumer, status,
    /// attempts and times.
    Show {
        /// The delivery's correlation id.
        correlation_id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Filters shared by the dead-letter commands.
#[derive(Debug, Clone, Default, Args)]
pub struct DeadLetterFilterArgs {
    /// Only this consumer.
    #[arg(long, value_name = "C")]
    pub consumer: Option<String>,
    /// Only this message type.
    #[arg(long = "type", value_name = "T")]
    pub message_type: Option<String>,
    /// Only dead-lettered since TIME (RFC 3339, or a duration ago: 30m, 2h, 7d).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
}

impl DeadLetterFilterArgs {
    fn to_filter(&self, include_replayed: bool) -> Result<DeadLetterFilter> {
        Ok(DeadLetterFilter {
            consumer: self.consumer.clone(),
            message_type: self.message_type.clone(),
            since: self.since.as_deref().map(parse_since).transpose()?,
            include_replayed,
            ..Default::default()
        })
    }
}

/// `bosun dead-letters ...`
#[derive(Debug, Subcommand)]
pub enum DeadLettersCommand {
    /// List dead letters (native ones of the transport included).
    List {
        /// Filters.
        #[command(flatten)]
        filter: DeadLetterFilterArgs,
        /// Include dead letters already replayed.
        #[arg(long)]
        include_replayed: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Everything about one dead letter: original message, error chain,
    /// attempts, replays.
    Show {
        /// Id (or a unique prefix of at least 4 characters).
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Send dead letters back to their consumer.
    Replay {
        /// Ids to replay.
        ids: Vec<String>,
        /// Replay every dead letter matching the filters.
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// Filters (with --all).
        #[command(flatten)]
        filter: DeadLetterFilterArgs,
        /// At most N replays per second.
        #[arg(long, value_name = "N")]
        rate: Option<f64>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete dead letters.
    Purge {
        /// Ids to purge.
        ids: Vec<String>,
        /// Purge every dead letter matching the filters.
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// Filters (with --all).
        #[command(flatten)]
        filter: DeadLetterFilterArgs,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `bosun sagas ...`
#[derive(Debug, Subcommand)]
pub enum SagasCommand {
    /// List sagas.
    List {
        /// Only `release` or `gitops` sagas.
        #[arg(long, value_name = "KIND")]
        kind: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a saga's state machine as a Mermaid diagram.
    Diagram {
        /// `release` or `gitops`.
        kind: String,
    },
    /// One saga's state, history and pending timeouts.
    Show {
        /// `release` or `gitops`.
        kind: String,
        /// The release id or environment.
        key: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `bosun schema ...`
#[derive(Debug, Subcommand)]
pub enum SchemaCommand {
    /// Write every JSON Schema into DIR.
    Export {
        /// Target directory (created if missing).
        dir: PathBuf,
    },
}

/// Parses `--since`: RFC 3339 or `<n>s|m|h|d` ago.
pub fn parse_since(text: &str) -> Result<OffsetDateTime> {
    if let Ok(at) = OffsetDateTime::parse(text, &Rfc3339) {
        return Ok(at);
    }
    let (number, unit) = text.split_at(text.len().saturating_sub(1));
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => bail!("--since `{text}` is neither RFC 3339 nor a duration like 30m, 2h, 7d"),
    };
    let amount: u64 = number
        .parse()
        .with_context(|| format!("--since `{text}` is neither RFC 3339 nor a duration like 30m, 2h, 7d"))?;
    Ok(OffsetDateTime::now_utc() - Duration::from_secs(amount.saturating_mul(seconds)))
}

/// Binds the HTTP API and serves it in the background until the returned
/// token is cancelled; readiness turns false when `draining` is cancelled.
async fn start_api(
    settings: &Settings,
    backends: &Backends,
    address: &str,
    draining: &CancellationToken,
    metrics: Arc<Metrics>,
) -> Result<(CancellationToken, tokio::task::JoinHandle<Result<()>>)> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("--http {address}: cannot listen"))?;
    let bound = listener.local_addr().context("--http: no local address")?;
    // Scripts and tests read the port from here (port 0 picks a free one).
    eprintln!("bosun: HTTP API on http://{bound}");
    let state = ApiState::new(Gateway::new(backends.clone(), draining.clone()), metrics);
    let stop = CancellationToken::new();
    let max_body = settings.http_max_body_bytes;
    let limits = settings.http_limits.clone();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move {
            api::serve(listener, state, max_body, limits, stop)
                .await
                .context("HTTP API")
        }
    });
    Ok((stop, task))
}

async fn run_topology(command: TopologyCommand, settings: &Settings) -> Result<()> {
    let topology = Topology::from_routing();
    let options = wiring::topology_options(settings)?;
    let Some(servicebus) = &settings.servicebus else {
        return match command {
            TopologyCommand::Plan { json } => {
                let plan = servicebus_plan::Plan {
                    items: servicebus_plan::desired_entities(&topology, &options)
                        .into_iter()
                        .map(|spec| servicebus_plan::PlanItem {
                            entry: spec.atom_entry(),
                            kind: spec.kind,
                            path: spec.path,
                            action: servicebus_plan::PlanAction::Create,
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
                    print!("{plan}");
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
                print!("{plan}");
            }
        }
        TopologyCommand::Apply { json } => {
            let plan = client.plan(&topology, &options).await?;
            let report = client.apply(&plan).await?;
            if json {
                print_json(&report)?;
            } else {
                print!("{report}");
            }
        }
    }
    Ok(())
}

async fn run_keys(command: KeysCommand, backends: &Backends, operator: &str) -> Result<()> {
    match command {
        KeysCommand::Create {
            tenant,
            scopes,
            description,
            json,
        } => {
            let scopes = access::parse_scopes(&scopes)?;
            let made = access::generate(&tenant, &scopes, operator, description)?;
            backends.access.insert_api_key(made.record.clone()).await?;
            if json {
                print_json(&serde_json::json!({
                    "key": made.key,
                    "id": made.record.id,
                    "tenantId": made.record.tenant_id,
                    "scopes": made.record.scopes,
                }))?;
            } else {
                println!("{}", made.key);
                eprintln!(
                    "key {} for tenant {} with {}: shown once, store it now",
                    made.record.id,
                    made.record.tenant_id,
                    made.record.scopes.join(",")
                );
            }
        }
        KeysCommand::List { json } => {
            let keys = backends.access.list_api_keys().await?;
            if json {
                print_json(&keys)?;
            } else if keys.is_empty() {
                println!("no keys (make one with `bosun keys create --tenant T --scopes S`)");
            } else {
                println!(
                    "{:<14} {:<16} {:<52} {:<22} status",
                    "id", "tenant", "scopes", "created"
                );
                for key in keys {
                    let status = match key.revoked_at {
                        Some(at) => format!("revoked {}", short_time(at)),
                        None => "active".to_owned(),
                    };
                    println!(
                        "{:<14} {:<16} {:<52} {:<22} {status}",
                        key.id,
                        key.tenant_id,
                        key.scopes.join(","),
                        short_time(key.created_at)
                    );
                }
            }
        }
        KeysCommand::Revoke { id, json } => {
            let id = id.trim().trim_start_matches("bsn_");
            let id = id.split('_').next().unwrap_or(id);
            let key = backends.access.revoke_api_key(id, OffsetDateTime::now_utc()).await?;
            if json {
                print_json(&key)?;
            } else {
                println!("revoked key {} (tenant {})", key.id, key.tenant_id);
            }
        }
    }
    Ok(())
}

fn print_json(value: &impl Serialize) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut stdout, value)?;
    writeln!(stdout)?;
    Ok(())
}

fn short_time(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_else(|_| at.to_string())
}

fn read_payload(payload: &str) -> Result<serde_json::Value> {
    let text = match payload.strip_prefix('@') {
        Some("-") => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .context("reading the payload from stdin")?;
            text
        }
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading the payload from {path}"))?,
        None => payload.to_owned(),
    };
    serde_json::from_str(&text).context("--payload is not valid JSON")
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> Result<()> {
    let mut settings = Settings::load(cli.config.as_deref())?;
    let explicit_data_dir = cli.data_dir.is_some();
    if let Some(dir) = cli.data_dir {
        settings.data_dir = dir;
    }
    if let Command::Demo {
        failing_test,
        keep,
        timeout,
        tenant,
        json,
    } = cli.command
    {
        let options = bosun::tools::demo::DemoOptions {
            failing_test,
            timeout: Duration::from_secs(timeout),
            tenant,
        };
        return demo(settings, explicit_data_dir, options, keep, json).await;
    }
    if let Command::Bench {
        messages,
        concurrency,
        scenarios,
        timeout,
        database_url,
        json,
    } = cli.command
    {
        let plan = BenchArgs {
            messages,
            concurrency,
            scenarios,
            timeout,
            database_url,
        };
        return bench(settings, plan, json).await;
    }
    telemetry::init(settings.log_format);
    match cli.command {
        Command::Demo { .. } | Command::Bench { .. } => unreachable!("handled above"),
        Command::Serve { consumers, http } => {
            if let Some(list) = consumers {
                settings.consumers = Some(parse_consumer_list(&list)?);
            }
            let backends = Backends::open(&settings).await?;
            let shutdown = CancellationToken::new();
            wiring::cancel_on_signals(shutdown.clone());
            let metrics = Arc::new(Metrics::new());
            let api = match http {
                Some(address) => {
                    Some(start_api(&settings, &backends, &address, &shutdown, Arc::clone(&metrics)).await?)
                }
                None => None,
            };
            let served = wiring::serve_with_metrics(&settings, &backends, shutdown, metrics).await;
            // The API answers (not ready) while the consumers drain, then stops.
            if let Some((stop, task)) = api {
                stop.cancel();
                task.await.context("HTTP API task")??;
            }
            // Prefetched messages go back to the broker at once, not when
            // their locks expire.
            backends.transport.close().await;
            served?;
        }
        Command::Api { http } => {
            let backends = Backends::open(&settings).await?;
            let shutdown = CancellationToken::new();
            wiring::cancel_on_signals(shutdown.clone());
            let (stop, task) = start_api(&settings, &backends, &http, &shutdown, Arc::new(Metrics::new())).await?;
            shutdown.cancelled().await;
            stop.cancel();
            task.await.context("HTTP API task")??;
        }
        Command::Mcp => {
            let key = std::env::var("BOSUN_API_KEY")
                .context("bosun mcp acts as an API key: set BOSUN_API_KEY (make one with `bosun keys create`)")?;
            let backends = Backends::open(&settings).await?;
            let gateway = Gateway::new(backends, CancellationToken::new());
            let caller = gateway
                .authenticate(&key)
                .await
                .map_err(|err| anyhow::anyhow!("BOSUN_API_KEY: {err}"))?;
            let server = McpServer::new(gateway).with_max_message_bytes(settings.http_max_body_bytes);
            let stdin = tokio::io::BufReader::new(tokio::io::stdin());
            server
                .serve_stdio(caller, stdin, tokio::io::stdout())
                .await
                .context("MCP stdio")?;
        }
        Command::Topology { command } => run_topology(command, &settings).await?,
        Command::Keys { command } => {
            let backends = Backends::open(&settings).await?;
            run_keys(command, &backends, &settings.operator).await?;
        }
        Command::Send {
            message_type,
            payload,
            correlation_id,
            tenant,
            json,
        } => {
            let payload = read_payload(&payload)?;
            let backends = Backends::open(&settings).await?;
            let sent = backends
                .operator(&settings.operator)
                .send(&message_type, &payload, correlation_id, &tenant)
                .await?;
            if json {
                print_json(&sent)?;
            } else {
                println!("messageId     {}", sent.message_id);
                println!("correlationId {}", sent.correlation_id);
                println!("sent {} to {}", sent.message_type, sent.destination);
            }
        }
        Command::Deliveries {
            command: DeliveriesCommand::Show { correlation_id, json },
        } => {
            let backends = Backends::open(&settings).await?;
            let delivery = backends.operator(&settings.operator).delivery(&correlation_id).await?;
            if json {
                print_json(&delivery)?;
            } else {
                print_delivery(&delivery);
            }
        }
        Command::DeadLetters { command } => dead_letters(&settings, command).await?,
        Command::Sagas { command } => {
            let backends = Backends::open(&settings).await?;
            let operator = backends.operator(&settings.operator);
            match command {
                SagasCommand::List { kind, json } => {
                    if let Some(kind) = &kind {
                        bosun_sagas::SagaKind::parse(kind)?;
                    }
                    let sagas = operator.sagas(kind.as_deref()).await?;
                    if json {
                        print_json(&sagas)?;
                    } else if sagas.is_empty() {
                        println!("no sagas");
                    } else {
                        println!("{:<8} {:<40} {:>7}  UPDATED", "KIND", "KEY", "VERSION");
                        for saga in &sagas {
                            println!(
                                "{:<8} {:<40} {:>7}  {}",
                                saga.kind,
                                saga.key,
                                saga.version,
                                short_time(saga.updated_at)
                            );
                        }
                    }
                }
                SagasCommand::Diagram { kind } => {
                    let diagram = match bosun_sagas::SagaKind::parse(&kind)? {
                        bosun_sagas::SagaKind::Release => {
                            bosun_sagas::StateMachine::diagram(&bosun::runtime::registry::release_saga(&settings))
                        }
                        bosun_sagas::SagaKind::Gitops => {
                            bosun_sagas::StateMachine::diagram(&bosun::runtime::registry::gitops_saga(&settings))
                        }
                        bosun_sagas::SagaKind::Probe => "stateDiagram-v2\n    [*] --> Counting : ProbeEchoed\n    \
                                                         Counting --> Counting : ProbeEchoed (count + 1)\n"
                            .to_owned(),
                    };
                    print!("{diagram}");
                }
                SagasCommand::Show { kind, key, json } => {
                    bosun_sagas::SagaKind::parse(&kind)?;
                    let saga = operator.saga(&kind, &key).await?;
                    if json {
                        print_json(&saga)?;
                    } else {
                        print_saga(&saga)?;
                    }
                }
            }
        }
        Command::Migrate { database_url, json } => {
            let url = database_url
                .or_else(|| settings.database_url.as_ref().map(|url| url.expose().to_owned()))
                .context("no database: pass --database-url or set BOSUN_DATABASE_URL")?;
            let database = bosun::backends::postgres::PostgresDatabase::connect(&url).await?;
            let report = database.migrate().await?;
            if json {
                print_json(&serde_json::json!({"applied": report.applied, "version": report.version}))?;
            } else if report.applied.is_empty() {
                println!("schema already at version {}", report.version);
            } else {
                println!(
                    "applied migrations {:?}; schema at version {}",
                    report.applied, report.version
                );
            }
        }
        Command::Schema {
            command: SchemaCommand::Export { dir },
        } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let files = bosun_contracts::schema::schema_files();
            for (name, text) in &files {
                std::fs::write(dir.join(name), text).with_context(|| format!("writing {name}"))?;
            }
            println!("wrote {} schema files to {}", files.len(), dir.display());
        }
    }
    Ok(())
}

struct BenchArgs {
    messages: usize,
    concurrency: Vec<usize>,
    scenarios: Vec<String>,
    timeout: u64,
    database_url: Option<String>,
}

async fn bench(settings: Settings, args: BenchArgs, json: bool) -> Result<()> {
    use bosun::tools::bench::Scenario;
    let BenchArgs {
        messages,
        concurrency,
        scenarios,
        timeout,
        database_url,
    } = args;
    telemetry::init_with_filter(settings.log_format, "error");
    let scenarios = scenarios
        .iter()
        .map(|name| match name.as_str() {
            "noop" => Ok(Scenario::Noop),
            "saga" => Ok(Scenario::Saga),
            other => bail!("--scenarios: `{other}` is not noop or saga"),
        })
        .collect::<Result<Vec<_>>>()?;
    if messages == 0 || concurrency.contains(&0) {
        bail!("--messages and --concurrency must be more than 0");
    }
    let scratch = tempfile::Builder::new().prefix("bosun-bench-").tempdir()?;
    eprintln!(
        "bosun bench: {messages} messages per run, handlers {concurrency:?}, scenarios {:?}",
        scenarios.iter().map(|s| s.as_str()).collect::<Vec<_>>()
    );

    let plan = bosun::tools::bench::BenchPlan {
        scenarios,
        concurrency,
        messages,
        timeout: Duration::from_secs(timeout),
    };
    let done = |row: &bosun::tools::bench::BenchRow| {
        eprintln!(
            "  done: {:.0} msg/s, processing p50 {:.2} ms p99 {:.2} ms",
            row.per_second, row.processing_p50_ms, row.processing_p99_ms
        )
    };
    let start = |backend: &str, scenario: Scenario, handlers: usize| {
        eprintln!("running {backend} {} with {handlers} handlers ...", scenario.as_str())
    };
    let mut rows = bosun::tools::bench::run_embedded(scratch.path(), &settings, &plan, done, start).await?;
    if let Some(url) = &database_url {
        rows.extend(bosun::tools::bench::run_postgres(url, &settings, &plan, done, start).await?);
    }
    if json {
        print_json(&rows)?;
    } else {
        print!("{}", bosun::tools::bench::table(&rows));
    }
    Ok(())
}

async fn demo(
    mut settings: Settings,
    explicit_data_dir: bool,
    options: bosun::tools::demo::DemoOptions,
    keep: bool,
    json: bool,
) -> Result<()> {
    // The demo's own lines are the progress; only warnings from the runtime.
    if std::env::var_os("RUST_LOG").is_none() {
        telemetry::init_with_filter(settings.log_format, "warn");
    } else {
        telemetry::init(settings.log_format);
    }
    let temporary = if explicit_data_dir {
        None
    } else {
        let dir = tempfile::Builder::new().prefix("bosun-demo-").tempdir()?;
        settings.data_dir = dir.path().to_path_buf();
        Some(dir)
    };
    settings.consumers = None;
    settings.retry_base_delay = settings.retry_base_delay.min(Duration::from_millis(200));
    settings.poll_interval = settings.poll_interval.min(Duration::from_millis(50));
    settings.delivery.pipeline_poll = settings.delivery.pipeline_poll.min(Duration::from_millis(200));
    settings.delivery.pipeline_poll_max = settings.delivery.pipeline_poll_max.min(Duration::from_secs(2));
    settings.delivery.reconcile = settings.delivery.reconcile.min(Duration::from_millis(200));
    settings.delivery.reconcile_max = settings.delivery.reconcile_max.min(Duration::from_secs(2));
    let say = |text: String| {
        if json {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    };
    say(format!(
        "bosun demo: one delivery of the sample module `{}`",
        bosun::tools::demo::REPOSITORY
    ));
    say(format!("data directory: {}", settings.data_dir.display()));
    say(String::new());
    let report = bosun::tools::demo::run(&settings, &options, |seconds, line| {
        let arrow = match line.status {
            bosun::ports::store::TimelineStatus::Sent => "->",
            bosun::ports::store::TimelineStatus::Completed => "ok",
            bosun::ports::store::TimelineStatus::RetryScheduled => "..",
            bosun::ports::store::TimelineStatus::DeadLettered => "XX",
            bosun::ports::store::TimelineStatus::Duplicate => "==",
            bosun::ports::store::TimelineStatus::Replayed => "<>",
        };
        say(format!(
            "[{seconds:7.2}s] {arrow} {:<26} {:<15} {:<22} {}",
            line.message_type,
            line.status.as_str(),
            line.consumer.as_deref().unwrap_or(""),
            line.detail.as_deref().unwrap_or("")
        ));
    })
    .await?;
    if json {
        print_json(&report)?;
    } else {
        println!();
        println!(
            "{:<26} {:<15} {:>8} {:>9}  CONSUMERS",
            "HOP", "STATUS", "ATTEMPTS", "LATENCY"
        );
        for hop in &report.hops {
            println!(
                "{:<26} {:<15} {:>8} {:>7}ms  {}",
                hop.message_type,
                hop.status.as_str(),
                hop.attempts,
                hop.latency_ms,
                hop.consumers.join(",")
            );
        }
        println!();
        for (label, value) in &report.results {
            println!("{label:<32} {value}");
        }
        println!();
        match &report.failure {
            None => println!(
                "delivery {} completed ({}) in {:.1}s",
                report.correlation_id, report.goal, report.seconds
            ),
            Some(reason) => println!("delivery {} FAILED: {reason}", report.correlation_id),
        }
    }
    if let Some(dir) = temporary {
        if keep {
            let path = dir.keep();
            eprintln!("kept the data directory {}", path.display());
        } else {
            eprintln!("removed the temporary data directory (pass --keep to keep it, or --data-dir DIR)");
        }
    }
    if let Some(reason) = report.failure {
        bail!("the delivery did not complete: {reason}");
    }
    Ok(())
}

fn print_delivery(delivery: &Delivery) {
    println!("delivery {}  ({})", delivery.correlation_id, delivery.status);
    for message in &delivery.messages {
        println!(
            "\n{}  {}  status={}  attempts={}  consumers={}",
            message.message_type,
            message.message_id,
            message.status.as_str(),
            message.attempts,
            if message.consumers.is_empty() {
                "-".to_owned()
            } else {
                message.consumers.join(",")
            }
        );
        if let Some(summary) = &message.summary {
            println!("  {summary}");
        }
        for event in &message.events {
            println!(
                "  {}  {:<16} {:<24} attempt {}  {}",
                short_time(event.at),
                event.status.as_str(),
                event.consumer.as_deref().unwrap_or("-"),
                event.attempt,
                event.detail.as_deref().unwrap_or("")
            );
        }
    }
}

fn print_saga(saga: &SagaRecord) -> Result<()> {
    println!("{} saga {}  version {}", saga.kind, saga.key, saga.version);
    println!(
        "created {}  updated {}",
        short_time(saga.created_at),
        short_time(saga.updated_at)
    );
    if let Some(phase) = saga.state.get("phase").and_then(|p| p.as_str()) {
        println!("phase {phase}");
    }
    let pending: Vec<_> = saga
        .state
        .as_object()
        .map(|state| {
            state
                .iter()
                .filter(|(key, value)| key.starts_with("pending") && !value.is_null())
                .collect()
        })
        .unwrap_or_default();
    println!("pending timeouts:");
    if pending.is_empty() {
        println!("  none");
    }
    for (key, value) in pending {
        println!("  {key}: {}", serde_json::to_string(value)?);
    }
    println!("state:\n{}", serde_json::to_string_pretty(&saga.state)?);
    println!("history:");
    for entry in &saga.history {
        println!(
            "  v{:<4} {}  {}  {}",
            entry.version,
            short_time(entry.at),
            entry.message_type,
            entry.message_id
        );
    }
    Ok(())
}

fn print_dead_letter_list(records: &[DeadLetterRecord]) {
    if records.is_empty() {
        println!("no dead letters");
        return;
    }
    println!(
        "{:<36}  {:<20}  {:<24}  {:<22}  {:<8}  REASON",
        "ID", "DEAD-LETTERED", "CONSUMER", "TYPE", "STATUS"
    );
    for record in records {
        println!(
            "{:<36}  {:<20}  {:<24}  {:<22}  {:<8}  {}",
            record.id,
            short_time(record.dead_lettered_at),
            record.consumer.as_deref().unwrap_or("-"),
            record.message_type.as_deref().unwrap_or("-"),
            format!("{:?}", record.status).to_lowercase(),
            record.reason
        );
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DeadLetterView<'a> {
    #[serde(flatten)]
    record: &'a DeadLetterRecord,
    /// The original message: JSON when it parses, else text.
    original: serde_json::Value,
}

fn view(record: &DeadLetterRecord) -> DeadLetterView<'_> {
    let original = serde_json::from_slice(&record.body)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&record.body).into_owned()));
    DeadLetterView { record, original }
}

fn print_dead_letter(record: &DeadLetterRecord) -> Result<()> {
    println!("dead letter    {}", record.id);
    println!("status         {}", format!("{:?}", record.status).to_lowercase());
    println!("consumer       {}", record.consumer.as_deref().unwrap_or("-"));
    println!("entity         {}", record.entity);
    println!(
        "message        {} {}",
        record.message_type.as_deref().unwrap_or("-"),
        record.message_id.as_deref().unwrap_or("-")
    );
    println!("correlation    {}", record.correlation_id.as_deref().unwrap_or("-"));
    println!("tenant         {}", record.tenant_id.as_deref().unwrap_or("-"));
    println!("origin         {}", record.origin);
    println!("dead-lettered  {}", short_time(record.dead_lettered_at));
    println!("reason         {}", record.reason);
    println!("description    {}", record.description);
    println!("error chain:");
    for (depth, error) in record.error_chain.iter().enumerate() {
        println!("  {}{}", "  ".repeat(depth), error);
    }
    println!("attempts:");
    for attempt in &record.attempts {
        println!(
            "  #{} {}  {}",
            attempt.attempt,
            short_time(attempt.at),
            attempt.error_chain.join(": ")
        );
    }
    println!("replays:");
    if record.replays.is_empty() {
        println!("  none");
    }
    for replay in &record.replays {
        println!(
            "  {} by {} to {} ({})",
            short_time(replay.at),
            replay.by,
            replay.destination,
            replay.replay_id
        );
    }
    println!("original message ({} bytes):", record.body.len());
    match serde_json::from_slice::<serde_json::Value>(&record.body) {
        Ok(value) => println!("{}", serde_json::to_string_pretty(&value)?),
        Err(_) => println!("{}", String::from_utf8_lossy(&record.body)),
    }
    Ok(())
}

async fn select_ids(
    operator: &bosun::operator::Operator,
    ids: Vec<String>,
    all: bool,
    filter: &DeadLetterFilterArgs,
) -> Result<Vec<Uuid>> {
    if all {
        let records = operator.dead_letters(&filter.to_filter(false)?).await?;
        return Ok(records.into_iter().rev().map(|r| r.id).collect());
    }
    if ids.is_empty() {
        bail!("name at least one dead letter id, or use --all");
    }
    let mut resolved = Vec::new();
    for id in ids {
        resolved.push(operator.dead_letter(&id).await?.id);
    }
    Ok(resolved)
}

async fn dead_letters(settings: &Settings, command: DeadLettersCommand) -> Result<()> {
    let backends = Backends::open(settings).await?;
    let operator = backends.operator(&settings.operator);
    match command {
        DeadLettersCommand::List {
            filter,
            include_replayed,
            json,
        } => {
            let records = operator.dead_letters(&filter.to_filter(include_replayed)?).await?;
            if json {
                print_json(&records.iter().map(view).collect::<Vec<_>>())?;
            } else {
                print_dead_letter_list(&records);
            }
        }
        DeadLettersCommand::Show { id, json } => {
            let record = operator.dead_letter(&id).await?;
            if json {
                print_json(&view(&record))?;
            } else {
                print_dead_letter(&record)?;
            }
        }
        DeadLettersCommand::Replay {
            ids,
            all,
            filter,
            rate,
            json,
        } => {
            if rate.is_some_and(|r| r.is_nan() || r <= 0.0) {
                bail!("--rate must be more than 0");
            }
            let ids = select_ids(&operator, ids, all, &filter).await?;
            let total = ids.len();
            let summary = operator
                .replay_many(&ids, rate, |done, total, id, result| match result {
                    Ok(_) => eprintln!("[{done}/{total}] replayed {id}"),
                    Err(err) => eprintln!("[{done}/{total}] FAILED {id}: {err}"),
                })
                .await;
            if json {
                print_json(&summary)?;
            } else {
                println!("replayed {} of {total}", summary.replayed.len());
            }
            if !summary.failed.is_empty() {
                bail!("{} of {total} replays failed", summary.failed.len());
            }
        }
        DeadLettersCommand::Purge {
            ids,
            all,
            filter,
            yes,
            json,
        } => {
            let ids = select_ids(&operator, ids, all, &filter).await?;
            if ids.is_empty() {
                println!("nothing to purge");
                return Ok(());
            }
            if !yes {
                if !std::io::stdin().is_terminal() {
                    bail!(
                        "refusing to purge {} dead letters without confirmation: pass --yes",
                        ids.len()
                    );
                }
                eprint!("Purge {} dead letter(s)? This cannot be undone. [y/N] ", ids.len());
                std::io::stderr().flush()?;
                let mut answer = String::new();
                std::io::stdin().read_line(&mut answer)?;
                if !matches!(answer.trim(), "y" | "Y" | "yes") {
                    println!("not purged");
                    return Ok(());
                }
            }
            let mut purged = Vec::new();
            for (index, id) in ids.iter().enumerate() {
                purged.push(operator.purge(&id.to_string()).await?);
                eprintln!("[{}/{}] purged {id}", index + 1, ids.len());
            }
            if json {
                print_json(&serde_json::json!({ "purged": purged }))?;
            } else {
                println!("purged {}", purged.len());
            }
        }
    }
    Ok(())
}
