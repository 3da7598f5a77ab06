//! The ops port (`BOSUN_OPS_ADDR`, `--ops-addr`): `/healthz`, `/readyz` and
//! `/metrics` alone, for kubelet probes and Prometheus, on an address of
//! their own. The API, console and MCP are not there: they are served only
//! where `--http` is given, so a consumer pod exposes nothing an outsider
//! could call.
//!
//! Readiness ([`Health`]) is cheap enough to be asked every few
//! seconds: the transport answers from what it holds
//! ([`Transport::reachable`](crate::ports::transport::Transport::reachable):
//! a `SELECT 1`, the open Service Bus connection, never a `$management`
//! call), the store runs one small query and checks its schema version,
//! every consumer of the process must be receiving, and the answer is false
//! as soon as the process is draining (SIGTERM), before the in-flight work
//! is finished. It answers within a second whatever is down ([`health`]).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::front::http::prometheus::{self, HttpMetrics};
use crate::front::http::server::{self, ConnectionLimits};
use crate::runtime::metrics::Metrics;
use crate::wiring::Backends;

pub mod health;

pub use health::{Health, Observed};

/// Connections the ops port keeps open at once (probes and a scraper).
const OPS_MAX_CONNECTIONS: usize = 64;
/// Time a probe has to send its request head, and a kept-alive one to send
/// its next.
const OPS_TIMEOUT: Duration = Duration::from_secs(10);

/// What the ops port's handlers share.
#[derive(Clone)]
pub struct OpsState {
    stage: Arc<RwLock<Stage>>,
    draining: CancellationToken,
    metrics: Arc<Metrics>,
}

/// Where the process is: still opening its backends (waiting for a
/// migration, say), or serving over them.
enum Stage {
    /// Not serving yet, and why.
    Starting(String),
    /// Serving, checked by `health`, with the HTTP API's counts (empty
    /// when no API runs in this process).
    Serving { health: Health, http: Arc<HttpMetrics> },
}

impl OpsState {
    /// State over `backends`; readiness turns false when `draining` is
    /// cancelled. `metrics` are the host's counters and `http` the HTTP
    /// API's (empty when no API runs in this process), both rendered at
    /// `/metrics`.
    pub fn new(backends: Backends, draining: CancellationToken, metrics: Arc<Metrics>, http: Arc<HttpMetrics>) -> Self {
        Self {
            stage: Arc::new(RwLock::new(Stage::Serving {
                health: Health::new(backends, draining.clone()),
                http,
            })),
            draining,
            metrics,
        }
    }

    /// State of a process still opening its backends: `/healthz` answers,
    /// `/readyz` says why it is not ready ([`OpsState::waiting`]) until
    /// [`OpsState::serving`].
    pub fn starting(draining: CancellationToken, metrics: Arc<Metrics>) -> Self {
        Self {
            stage: Arc::new(RwLock::new(Stage::Starting(
                "opening the store and the transport".to_owned(),
            ))),
            draining,
            metrics,
        }
    }

    /// Why the process is still not serving (`/readyz` says it).
    pub fn waiting(&self, reason: impl std::fmt::Display) {
        *self.stage.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Stage::Starting(reason.to_string());
    }

    /// The process serves over `backends` from now on.
    pub fn serving(&self, backends: Backends, http: Arc<HttpMetrics>) {
        let health = Health::new(backends, self.draining.clone());
        *self.stage.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Stage::Serving { health, http };
    }

    /// The health checks and HTTP counts, or why there are none yet.
    fn current(&self) -> Result<(Health, Arc<HttpMetrics>), String> {
        match &*self.stage.read().unwrap_or_else(std::sync::PoisonError::into_inner) {
            Stage::Starting(reason) => Err(reason.clone()),
            Stage::Serving { health, http } => Ok((health.clone(), Arc::clone(http))),
        }
    }
}

/// `/readyz`: whether this process can serve (the API's `/readyz` and the
/// ops port's answer the same).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Readiness {
    /// All checks pass and the process is not draining.
    pub ready: bool,
    /// Each check: `ok` or what failed (`transport`, `store`, `schema`,
    /// `consumers` where consumers run, `starting` before the backends are
    /// open), and `draining`.
    pub checks: BTreeMap<&'static str, Value>,
    /// How each check's answer was come by: within this request's deadline
    /// or the last one, and how old.
    pub observed: BTreeMap<&'static str, Observed>,
    /// Consumers of this process an operator paused (they take no message
    /// until resumed; a pause does not make the process unready), each
    /// with who paused it, when and why.
    pub paused: Vec<String>,
}

/// The Prometheus exposition of the host's and the API's metrics, with
/// readiness, each consumer's receiving and the outbox backlog, within
/// [`health::ANSWER_WITHIN`] whatever is down.
pub async fn metrics_text(health: &Health, metrics: &Metrics, http: &HttpMetrics) -> String {
    let mut text = health.exposition(metrics.receiving()).await;
    text.insert_str(0, &prometheus::render(metrics, http, health.outbox_backlog()));
    text
}

/// The ops router: `/healthz`, `/readyz`, `/metrics`; anything else is 404.
pub fn router(state: OpsState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                Json(json!({"error": {"code": "not-found", "message": "the ops port serves /healthz, /readyz and /metrics only"}})),
            )
        })
        .with_state(state)
}

/// Serves the ops router on `listener` until `shutdown` is cancelled.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: OpsState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    tracing::info!(address = ?listener.local_addr().ok(), "ops port listening (/healthz, /readyz, /metrics)");
    let limits = ConnectionLimits {
        header_timeout: OPS_TIMEOUT,
        idle_timeout: OPS_TIMEOUT,
        max_connections: OPS_MAX_CONNECTIONS,
    };
    // The ops port's own connection counts stay out of the API's metrics.
    server::serve_router(listener, router(state), limits, Arc::default(), shutdown).await
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(state): State<OpsState>) -> Response {
    let readiness = match state.current() {
        Ok((health, _)) => health.readiness(state.metrics.receiving()).await,
        Err(reason) => Readiness {
            ready: false,
            checks: BTreeMap::from([
                ("starting", json!(reason)),
                ("draining", json!(state.draining.is_cancelled())),
            ]),
            observed: BTreeMap::new(),
            paused: Vec::new(),
        },
    };
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(readiness)).into_response()
}

async fn metrics(State(state): State<OpsState>) -> Response {
    let text = match state.current() {
        Ok((health, http)) => metrics_text(&health, &state.metrics, &http).await,
        Err(_) => prometheus::render(&state.metrics, &HttpMetrics::default(), None),
    };
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response()
}

#[cfg(test)]
mod tests;
