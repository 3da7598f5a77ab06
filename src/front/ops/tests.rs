//! The ops port over a real socket, on the embedded default backends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::Destination;
use reqwest::StatusCode;
use serde_json::Value;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::{OpsState, serve};
use crate::ports::transport::{
    Broker, DeadLetteredMessage, LockToken, OutboundMessage, ReceivedMessage, Topology, Transport, TransportAdmin,
    TransportError,
};
use crate::runtime::config::Settings;
use crate::runtime::metrics::Metrics;
use crate::wiring::Backends;

/// A transport like an endpoint without `$management` (the Service Bus
/// emulator): it cannot count a queue's messages, and counts every try.
struct NoDepth {
    inner: Arc<dyn Broker>,
    depth_calls: AtomicUsize,
}

#[async_trait]
impl Transport for NoDepth {
    async fn ensure_topology(&self, topology: &Topology) -> Result<(), TransportError> {
        self.inner.ensure_topology(topology).await
    }
    async fn send(&self, messages: Vec<OutboundMessage>) -> Result<(), TransportError> {
        self.inner.send(messages).await
    }
    async fn receive(
        &self,
        entity: &Destination,
        max: usize,
        lock_duration: Duration,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        self.inner.receive(entity, max, lock_duration).await
    }
    async fn wait_for_messages(&self, entity: &Destination, timeout: Duration) {
        self.inner.wait_for_messages(entity, timeout).await;
    }
    async fn renew_lock(&self, lock: &LockToken, lock_duration: Duration) -> Result<OffsetDateTime, TransportError> {
        self.inner.renew_lock(lock, lock_duration).await
    }
    async fn is_locked(&self, lock: &LockToken) -> Result<bool, TransportError> {
        self.inner.is_locked(lock).await
    }
    async fn complete(&self, lock: &LockToken) -> Result<(), TransportError> {
        self.inner.complete(lock).await
    }
    async fn abandon(&self, lock: &LockToken) -> Result<(), TransportError> {
        self.inner.abandon(lock).await
    }
    async fn dead_letter(&self, lock: &LockToken, reason: &str, description: &str) -> Result<(), TransportError> {
        self.inner.dead_letter(lock, reason, description).await
    }
    async fn reachable(&self) -> Result<(), TransportError> {
        self.inner.reachable().await
    }
}

#[async_trait]
impl TransportAdmin for NoDepth {
    async fn peek_dead_letters(
        &self,
        entity: &Destination,
        max: usize,
    ) -> Result<Vec<DeadLetteredMessage>, TransportError> {
        self.inner.peek_dead_letters(entity, max).await
    }

    async fn remove_dead_letter(&self, entity: &Destination, sequence: i64) -> Result<bool, TransportError> {
        self.inner.remove_dead_letter(entity, sequence).await
    }

    async fn depth(&self, _entity: &Destination) -> Result<u64, TransportError> {
        self.depth_calls.fetch_add(1, Ordering::SeqCst);
        Err(TransportError::misconfigured(
            "peeking through $management",
            "this endpoint has no $management node",
        ))
    }
}

struct Ops {
    url: String,
    client: reqwest::Client,
    draining: CancellationToken,
    depth_calls: Arc<NoDepth>,
    _dir: tempfile::TempDir,
}

impl Ops {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut backends = Backends::open(&Settings::with_data_dir(dir.path())).await.unwrap();
        let transport = Arc::new(NoDepth {
            inner: Arc::clone(&backends.transport),
            depth_calls: AtomicUsize::new(0),
        });
        backends.transport = Arc::clone(&transport) as Arc<dyn Broker>;
        let draining = CancellationToken::new();
        let state = OpsState::new(backends, draining.clone(), Arc::new(Metrics::new()), Arc::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(serve(listener, state, CancellationToken::new()));
        Self {
            url,
            client: reqwest::Client::new(),
            draining,
            depth_calls: transport,
            _dir: dir,
        }
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(format!("{}{path}", self.url)).send().await.unwrap()
    }
}

#[tokio::test]
async fn ready_without_a_depth_call_and_not_ready_once_draining() {
    let ops = Ops::start().await;
    assert_eq!(ops.get("/healthz").await.status(), StatusCode::OK);
    for _ in 0..3 {
        let ready = ops.get("/readyz").await;
        assert_eq!(ready.status(), StatusCode::OK);
        let body: Value = ready.json().await.unwrap();
        assert_eq!(body["checks"]["transport"], "ok");
        assert_eq!(body["checks"]["store"], "ok");
        assert_eq!(body["checks"]["schema"], "ok");
        assert_eq!(body["checks"]["draining"], false);
    }
    assert_eq!(
        ops.depth_calls.depth_calls.load(Ordering::SeqCst),
        0,
        "a probe never counts a queue (a $management call on Service Bus)"
    );
    ops.draining.cancel();
    let ready = ops.get("/readyz").await;
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ready.json::<Value>().await.unwrap()["checks"]["draining"], true);
    assert_eq!(
        ops.get("/healthz").await.status(),
        StatusCode::OK,
        "alive while draining"
    );
}

#[tokio::test]
async fn serves_metrics_and_nothing_of_the_api() {
    let ops = Ops::start().await;
    let metrics = ops.get("/metrics").await;
    assert_eq!(metrics.status(), StatusCode::OK);
    assert!(
        metrics.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    assert!(metrics.text().await.unwrap().contains("bosun_outbox_backlog"));
    for path in ["/", "/console", "/openapi.json", "/v1/deliveries", "/mcp"] {
        assert_eq!(ops.get(path).await.status(), StatusCode::NOT_FOUND, "{path}");
    }
}
