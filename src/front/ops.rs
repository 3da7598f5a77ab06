//! The ops port (`BOSUN_OPS_ADDR`, `--ops-addr`): `/healthz`, `/readyz` and
//! `/metrics` alone, for kubelet probes and Prometheus, on an address of
//! their own. The API, console and MCP are not there: they are served only
//! where `--http` is given, so a consumer pod exposes nothing an outsider
//! could call.
//!
//! Readiness ([`readiness`]) is cheap enough to be asked every few
//! seconds: the transport answers from what it holds
//! ([`Transport::reachable`](crate::ports::transport::Transport::reachable):
//! a `SELECT 1`, the open Service Bus connection, never a `$management`
//! call), the store runs one small query and checks its schema version, and
//! the answer is false as soon as the process is draining (SIGTERM), before
//! the in-flight work is finished.

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
    /// Serving over `backends`, with the HTTP API's counts (empty when no
    /// API runs in this process).
    Serving { backends: Backends, http: Arc<HttpMetrics> },
}

impl OpsState {
    /// State over `backends`; readiness turns false when `draining` is
    /// cancelled. `metrics` are the host's counters and `http` the HTTP
    /// API's (empty when no API runs in this process), both rendered at
    /// `/metrics`.
    pub fn new(backends: Backends, draining: CancellationToken, metrics: Arc<Metrics>, http: Arc<HttpMetrics>) -> Self {
        Self {
            stage: Arc::new(RwLock::new(Stage::Serving { backends, http })),
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
        *self.stage.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Stage::Serving { backends, http };
    }

    /// The backends and HTTP counts, or why there are none yet.
    fn current(&self) -> Result<(Backends, Arc<HttpMetrics>), String> {
        match &*self.stage.read().unwrap_or_else(std::sync::PoisonError::into_inner) {
            Stage::Starting(reason) => Err(reason.clone()),
            Stage::Serving { backends, http } => Ok((backends.clone(), Arc::clone(http))),
        }
    }
}

/// `/readyz`: whether this process can serve (the API's `/readyz` and the
/// ops port's answer the same).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Readiness {
    /// All checks pass and the process is not draining.
    pub ready: bool,
    /// Each check: `ok` or what failed.
    pub checks: BTreeMap<&'static str, Value>,
}

/// Whether this process can serve: the transport and the store answer, the
/// store's schema is the one this build expects, and the process is not
/// draining. Makes no broker management call.
pub async fn readiness(backends: &Backends, draining: &CancellationToken) -> Readiness {
    let draining = draining.is_cancelled();
    let transport = backends.transport.reachable().await.map_err(|e| e.to_string());
    let store = backends
        .store
        .outbox_backlog()
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    let schema = backends.store.check_schema().await.map_err(|e| e.to_string());
    let mut checks = BTreeMap::new();
    let mut ready = !draining;
    for (name, result) in [("transport", transport), ("store", store), ("schema", schema)] {
        ready &= result.is_ok();
        checks.insert(name, json!(result.err().unwrap_or_else(|| "ok".to_owned())));
    }
    checks.insert("draining", json!(draining));
    Readiness { ready, checks }
}

/// The Prometheus exposition of the host's and the API's metrics, with the
/// outbox backlog when the store answers.
pub async fn metrics_text(backends: &Backends, metrics: &Metrics, http: &HttpMetrics) -> String {
    let backlog = backends.store.outbox_backlog().await.ok();
    prometheus::render(metrics, http, backlog)
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
        Ok((backends, _)) => readiness(&backends, &state.draining).await,
        Err(reason) => Readiness {
            ready: false,
            checks: BTreeMap::from([
                ("starting", json!(reason)),
                ("draining", json!(state.draining.is_cancelled())),
            ]),
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
        Ok((backends, http)) => metrics_text(&backends, &state.metrics, &http).await,
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
