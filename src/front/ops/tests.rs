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
    /// How long `reachable` takes, in milliseconds (a transport that hangs).
    reachable_ms: std::sync::atomic::AtomicU64,
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
        tokio::time::sleep(Duration::from_millis(self.reachable_ms.load(Ordering::SeqCst))).await;
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
    metrics: Arc<Metrics>,
    _dir: tempfile::TempDir,
}

impl Ops {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut backends = Backends::open(&Settings::with_data_dir(dir.path())).await.unwrap();
        let transport = Arc::new(NoDepth {
            inner: Arc::clone(&backends.transport),
            depth_calls: AtomicUsize::new(0),
            reachable_ms: std::sync::atomic::AtomicU64::new(0),
        });
        backends.transport = Arc::clone(&transport) as Arc<dyn Broker>;
        let draining = CancellationToken::new();
        let metrics = Arc::new(Metrics::new());
        let state = OpsState::new(backends, draining.clone(), Arc::clone(&metrics), Arc::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(serve(listener, state, CancellationToken::new()));
        Self {
            url,
            client: reqwest::Client::new(),
            draining,
            depth_calls: transport,
            metrics,
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

/// A check slower than the deadline: the request answers within it, with
/// the last answer and its age while that is recent, as "no answer"
/// without one; the check's own answer counts once it comes.
#[tokio::test]
async fn a_slow_check_is_answered_within_the_deadline_with_its_last_result() {
    let ops = Ops::start().await;
    let ready = ops.get("/readyz").await.json::<Value>().await.unwrap();
    assert_eq!(ready["ready"], true, "{ready}");
    assert_eq!(ready["observed"]["transport"]["fresh"], true, "{ready}");

    // The transport now takes 3 s to answer: the last answer (ok, fresh a
    // moment ago) stands for it, with its age.
    ops.depth_calls.reachable_ms.store(3000, Ordering::SeqCst);
    let started = std::time::Instant::now();
    let response = ops.get("/readyz").await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "answered in {took:?}");
    assert_eq!(response.status(), StatusCode::OK);
    let ready = response.json::<Value>().await.unwrap();
    assert_eq!(ready["checks"]["transport"], "ok", "{ready}");
    assert_eq!(ready["observed"]["transport"]["fresh"], false, "{ready}");
    assert!(ready["observed"]["transport"]["ageMs"].as_u64().is_some(), "{ready}");
    // The store answered within the deadline meanwhile.
    assert_eq!(ready["observed"]["store"]["fresh"], true, "{ready}");
    let metrics = ops.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains("bosun_ready 1"), "{metrics}");
    assert!(
        metrics.contains("bosun_health_check_age_seconds{check=\"transport\"}"),
        "{metrics}"
    );
}

/// A process none of whose checks ever answered is not ready, and says
/// which check is still out.
#[tokio::test]
async fn a_check_that_never_answered_is_not_ready_within_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let mut backends = Backends::open(&Settings::with_data_dir(dir.path())).await.unwrap();
    let transport = Arc::new(NoDepth {
        inner: Arc::clone(&backends.transport),
        depth_calls: AtomicUsize::new(0),
        reachable_ms: std::sync::atomic::AtomicU64::new(60_000),
    });
    backends.transport = transport as Arc<dyn Broker>;
    let health = super::Health::with_limits(
        backends,
        CancellationToken::new(),
        Duration::from_millis(300),
        Duration::from_secs(120),
    );
    let started = std::time::Instant::now();
    let readiness = health.readiness(&crate::runtime::receiving::Receiving::default()).await;
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert!(!readiness.ready);
    let transport = readiness.checks["transport"].as_str().unwrap_or_default().to_owned();
    assert!(transport.starts_with("no answer within 0.3 s"), "{transport}");
    assert_eq!(readiness.checks["store"], "ok");
    // A second request waits on the same check, it does not start another.
    let again = health.readiness(&crate::runtime::receiving::Receiving::default()).await;
    assert!(!again.ready);
}

/// A consumer of the process that cannot receive makes it not ready, named
/// in `/readyz` and in `/metrics`; ready again once it receives.
#[tokio::test]
async fn not_ready_while_a_consumer_cannot_receive() {
    let ops = Ops::start().await;
    let receiving = ops.metrics.receiving();
    receiving.register("gitops-sync", "gitops-sync");
    receiving.register("probe", "probe");
    let ready = ops.get("/readyz").await;
    assert_eq!(ready.status(), StatusCode::OK);
    assert_eq!(ready.json::<Value>().await.unwrap()["checks"]["consumers"], "ok");

    receiving.failed(
        "gitops-sync",
        "gitops-sync",
        "receiving from `gitops-sync` through sessions: amqp:not-allowed",
    );
    let ready = ops.get("/readyz").await;
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = ready.json::<Value>().await.unwrap();
    let consumers = body["checks"]["consumers"].as_str().unwrap_or_default().to_owned();
    assert!(
        consumers.starts_with("gitops-sync cannot receive from `gitops-sync`"),
        "{consumers}"
    );
    assert!(consumers.contains("amqp:not-allowed"), "{consumers}");
    let metrics = ops.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("bosun_consumer_receiving{consumer=\"gitops-sync\",entity=\"gitops-sync\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("bosun_consumer_receiving{consumer=\"probe\",entity=\"probe\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("bosun_ready 0"), "{metrics}");

    receiving.received("gitops-sync", "gitops-sync");
    assert_eq!(ops.get("/readyz").await.status(), StatusCode::OK);
}
