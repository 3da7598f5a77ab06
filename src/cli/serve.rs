//! The long-running commands: `bosun serve` (the consumers, optionally with
//! the HTTP API), `bosun api` (the HTTP API alone) and `bosun mcp` (the MCP
//! tools over stdio). Each runs until SIGTERM or Ctrl-C (or end of input).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use tokio_util::sync::CancellationToken;

use bosun::front::api::{self, ApiState};
use bosun::front::gateway::Gateway;
use bosun::front::http::prometheus::HttpMetrics;
use bosun::front::mcp::McpServer;
use bosun::front::ops::{self, OpsState};
use bosun::runtime::config::{Settings, parse_consumer_list};
use bosun::runtime::metrics::Metrics;
use bosun::wiring::{self, Backends};

/// `bosun serve`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ServeArgs {
    /// Comma-separated consumers to run (default: all available).
    #[arg(long, value_name = "LIST")]
    pub consumers: Option<String>,
    /// Also serve the HTTP API, console and MCP endpoint on this
    /// address, e.g. 0.0.0.0:8080 (port 0 picks a free one).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// Serve /healthz, /readyz and /metrics alone on this address, e.g.
    /// 0.0.0.0:9090 (overrides BOSUN_OPS_ADDR; port 0 picks a free one).
    #[arg(long, value_name = "ADDR")]
    pub ops_addr: Option<SocketAddr>,
}

/// `bosun api`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ApiArgs {
    /// The address, e.g. 0.0.0.0:8080.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub http: String,
    /// Serve /healthz, /readyz and /metrics alone on this address too
    /// (overrides BOSUN_OPS_ADDR).
    #[arg(long, value_name = "ADDR")]
    pub ops_addr: Option<SocketAddr>,
}

/// Runs the consumers (and the API with `--http`, the ops port with
/// `--ops-addr` or `BOSUN_OPS_ADDR`) until a signal, then drains: the API
/// and the ops port answer "not ready" while the consumers finish.
pub async fn serve(args: ServeArgs, mut settings: Settings) -> Result<()> {
    if let Some(list) = args.consumers {
        settings.consumers = Some(parse_consumer_list(&list)?);
    }
    wiring::check_shared_state(&settings, "serve")?;
    let shutdown = CancellationToken::new();
    wiring::cancel_on_signals(shutdown.clone());
    let metrics = Arc::new(Metrics::new());
    // The ops port answers first: alive, not ready while the backends
    // open (or wait for a migration).
    let ops = match args.ops_addr.or(settings.ops_addr) {
        Some(address) => Some(start_ops(address, &shutdown, Arc::clone(&metrics)).await?),
        None => None,
    };
    let Some(backends) = open_backends(&settings, ops.as_ref(), &shutdown).await? else {
        return stop_ops(ops).await;
    };
    let api = match args.http {
        Some(address) => Some(start_api(&settings, &backends, &address, &shutdown, Arc::clone(&metrics)).await?),
        None => None,
    };
    if let Some((_, _, state)) = &ops {
        let http = api.as_ref().map(|(_, _, http)| Arc::clone(http)).unwrap_or_default();
        state.serving(backends.clone(), http);
    }
    let served = wiring::serve_with_metrics(&settings, &backends, shutdown, metrics).await;
    // The API and the ops port answer (not ready) while the consumers
    // drain, then stop.
    if let Some((stop, task, _)) = api {
        stop.cancel();
        task.await.context("HTTP API task")??;
    }
    stop_ops(ops).await?;
    // Prefetched messages go back to the broker at once, not when
    // their locks expire.
    backends.transport.close().await;
    served?;
    Ok(())
}

/// Serves the HTTP API alone (and the ops port with `--ops-addr` or
/// `BOSUN_OPS_ADDR`) until a signal.
pub async fn api(args: ApiArgs, settings: &Settings) -> Result<()> {
    wiring::check_shared_state(settings, "api")?;
    let shutdown = CancellationToken::new();
    wiring::cancel_on_signals(shutdown.clone());
    let metrics = Arc::new(Metrics::new());
    let ops = match args.ops_addr.or(settings.ops_addr) {
        Some(address) => Some(start_ops(address, &shutdown, Arc::clone(&metrics)).await?),
        None => None,
    };
    let Some(backends) = open_backends(settings, ops.as_ref(), &shutdown).await? else {
        return stop_ops(ops).await;
    };
    let (stop, task, http) = start_api(settings, &backends, &args.http, &shutdown, Arc::clone(&metrics)).await?;
    if let Some((_, _, state)) = &ops {
        state.serving(backends.clone(), http);
    }
    // The API stops taking commands once the database moves past what
    // this bosun runs with.
    let schema = tokio::spawn(wiring::watch_schema(
        Arc::clone(&backends.store),
        wiring::this_process("api", settings.message_versions.wire()),
        wiring::SCHEMA_RECHECK,
        shutdown.clone(),
    ));
    shutdown.cancelled().await;
    stop.cancel();
    let served = task.await.context("HTTP API task")?;
    stop_ops(ops).await?;
    if let Some(err) = schema.await.ok().flatten() {
        return Err(err.into());
    }
    served
}

/// Opens the backends, waiting unready (the ops port says why) while the
/// database schema is behind this bosun. `None` when a signal came first.
async fn open_backends(
    settings: &Settings,
    ops: Option<&RunningOps>,
    shutdown: &CancellationToken,
) -> Result<Option<Backends>> {
    let waiting = |err: &bosun::ports::store::StoreError| {
        if let Some((_, _, state)) = ops {
            state.waiting(format!("waiting for the database schema: {err}"));
        }
    };
    Ok(wiring::open_when_migrated(settings, waiting, shutdown).await?)
}

/// Stops the ops port, if one runs, and waits for it.
async fn stop_ops(ops: Option<RunningOps>) -> Result<()> {
    if let Some((stop, task, _)) = ops {
        stop.cancel();
        task.await.context("ops port task")??;
    }
    Ok(())
}

/// Serves the MCP tools over stdio, acting as the key in `BOSUN_API_KEY`.
pub async fn mcp(settings: &Settings) -> Result<()> {
    let key = std::env::var("BOSUN_API_KEY")
        .context("bosun mcp acts as an API key: set BOSUN_API_KEY (make one with `bosun keys create`)")?;
    let backends = Backends::open(settings).await?;
    let gateway = Gateway::new(backends, CancellationToken::new());
    // Bulk replays started over stdio run here while the session lasts; a
    // job left unfinished is carried on by any `bosun serve --http`.
    let stop_runner = CancellationToken::new();
    let _runner = (
        gateway.spawn_replay_runner(stop_runner.clone()),
        stop_runner.drop_guard(),
    );
    let caller = gateway
        .authenticate(&key)
        .await
        .map_err(|err| anyhow::anyhow!("BOSUN_API_KEY: {err}"))?;
    let server = McpServer::new(gateway).with_max_message_bytes(settings.http_max_body_bytes);
    let stdin = tokio::io::BufReader::new(tokio::io::stdin());
    server
        .serve_stdio(caller, stdin, tokio::io::stdout())
        .await
        .context("MCP stdio")
}

/// Binds the HTTP API and serves it in the background until the returned
/// token is cancelled; readiness turns false when `draining` is cancelled.
/// Also returns the API's request counts, for the ops port's `/metrics`.
async fn start_api(
    settings: &Settings,
    backends: &Backends,
    address: &str,
    draining: &CancellationToken,
    metrics: Arc<Metrics>,
) -> Result<(CancellationToken, tokio::task::JoinHandle<Result<()>>, Arc<HttpMetrics>)> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("--http {address}: cannot listen"))?;
    let bound = listener.local_addr().context("--http: no local address")?;
    // Scripts and tests read the port from here (port 0 picks a free one).
    eprintln!("bosun: HTTP API on http://{bound}");
    let gateway = Gateway::new(backends.clone(), draining.clone());
    let state = ApiState::new(gateway.clone(), metrics);
    let http = state.http_metrics();
    let stop = CancellationToken::new();
    let max_body = settings.http_max_body_bytes;
    let limits = settings.http_limits.clone();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move {
            // Stored bulk replay jobs: this process's, and any another
            // process left behind (it died, or was stopped mid-job).
            let runner = gateway.spawn_replay_runner(stop.clone());
            let served = api::serve(listener, state, max_body, limits, stop.clone())
                .await
                .context("HTTP API");
            stop.cancel();
            runner.await.context("replay job runner")?;
            served
        }
    });
    Ok((stop, task, http))
}

/// The ops port running in the background, and its state (to tell it the
/// backends once they are open).
type RunningOps = (CancellationToken, tokio::task::JoinHandle<Result<()>>, OpsState);

/// Binds the ops port and serves it in the background until the returned
/// token is cancelled: alive at once, ready once told the backends
/// ([`OpsState::serving`]), not ready again when `draining` is cancelled.
async fn start_ops(address: SocketAddr, draining: &CancellationToken, metrics: Arc<Metrics>) -> Result<RunningOps> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("--ops-addr / BOSUN_OPS_ADDR {address}: cannot listen"))?;
    let bound = listener.local_addr().context("ops port: no local address")?;
    // Scripts and tests read the port from here (port 0 picks a free one).
    eprintln!("bosun: ops port on http://{bound}");
    let state = OpsState::starting(draining.clone(), metrics);
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        let state = state.clone();
        async move { ops::serve(listener, state, stop).await.context("ops port") }
    });
    Ok((stop, task, state))
}
