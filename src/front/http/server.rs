//! The HTTP server under the API: bosun's own accept loop over hyper's
//! HTTP/1 connections, so that idle or slow clients cannot take the
//! process's file descriptors or its `/healthz` away.
//!
//! `axum::serve` accepts every connection and keeps it as long as the
//! client likes: 1,100 idle sockets under a 1,024 descriptor limit made
//! `/healthz` time out and a handler fail with `Too many open files`. Here:
//!
//! - **Header timeout** (`BOSUN_HTTP_HEADER_TIMEOUT_MS`, 10 s): a new
//!   connection must deliver its first request head within this time of
//!   being accepted; on a kept-alive connection the clock starts at the
//!   first byte of the next request. Sending a byte a second does not help.
//! - **Idle timeout** (`BOSUN_HTTP_IDLE_TIMEOUT_MS`, 75 s): a kept-alive
//!   connection with no request for this long is closed.
//! - **Connection cap** (`BOSUN_HTTP_MAX_CONNECTIONS`, 4,096, and never
//!   more than half the process's open-file soft limit, read from
//!   `/proc/self/limits`): the other half stays for the stores, the
//!   transport, Git, blobs and outgoing HTTP.
//!
//! Both timeouts are enforced by `Watched`, a wrapper around the socket
//! that hyper reads and writes through: when the socket would block and
//! the connection is waiting for a request, the wrapper polls a timer to
//! the connection's deadline and fails the read (or write) with
//! `TimedOut` once it passes, which makes hyper close the connection.
//! hyper's own `header_read_timeout` cannot do this alone: its clock
//! restarts when a response ends, so it would also be the idle timeout. It
//! is still set, to header + idle timeout, as a backstop that never fires
//! first. A request in flight is never timed out: its time belongs to its
//! handler (event streams last as long as their delivery).
//!
//! **At the cap**, the connection that has been waiting longest for a
//! request head (idle keep-alive, or a head still arriving, oldest first,
//! measured from when it started waiting) is closed, so that one slot is
//! always free for the next client; the newest connection is never the one
//! shed, and connections with a request in flight never are. Slowloris
//! connections therefore cannot crowd out `/healthz`: each new client
//! pushes out the stalest waiter, and a real client sends its head at once
//! and turns busy long before hundreds of newer connections could make it
//! the stalest. When every connection has a request in flight, accepting
//! pauses (clients wait in the listen backlog, costing the process no
//! descriptor) until one finishes or closes. The count includes
//! connections being closed, so the process never holds more than the cap.
//!
//! Shutdown is graceful as before: stop accepting, let requests in flight
//! finish (hyper closes each connection after its current response), then
//! return. Connections with nothing in flight (idle, or a head still
//! arriving) are closed at once rather than waited for.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::response::Response;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::prometheus::HttpMetrics;
use crate::runtime::config::HttpLimits;

/// How long to wait before accepting again after an error such as
/// `EMFILE`: short enough to answer soon after a descriptor frees, long
/// enough not to spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The limits the server applies to connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time to send a request head.
    pub header_timeout: Duration,
    /// Time a kept-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// Connections open at once (already capped by the descriptor limit).
    pub max_connections: usize,
}

impl ConnectionLimits {
    /// The limits from the settings, with the cap lowered to half of
    /// `open_files_soft_limit` when that is smaller.
    pub fn new(limits: &HttpLimits, open_files_soft_limit: Option<u64>) -> Self {
        Self {
            header_timeout: limits.header_timeout,
            idle_timeout: limits.idle_timeout,
            max_connections: connection_cap(limits.max_connections, open_files_soft_limit),
        }
    }
}

/// `configured`, but at most half of the open-file soft limit (and at
/// least 1).
pub fn connection_cap(configured: usize, open_files_soft_limit: Option<u64>) -> usize {
    match open_files_soft_limit {
        Some(soft) => {
            let half = usize::try_from(soft / 2).unwrap_or(usize::MAX).max(1);
            configured.min(half)
        }
        None => configured,
    }
}

/// The process's `RLIMIT_NOFILE` soft limit, from `/proc/self/limits`;
/// `None` when unlimited or unknown (not Linux).
pub fn open_files_soft_limit() -> Option<u64> {
    parse_open_files_limit(&std::fs::read_to_string("/proc/self/limits").ok()?)
}

/// The soft limit in the text of `/proc/<pid>/limits`.
pub fn parse_open_files_limit(text: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with("Max open files"))?;
    let soft = line.trim_start_matches("Max open files").split_whitespace().next()?;
    soft.parse().ok()
}

/// Serves `router` on `listener` under `limits` until `shutdown` is
/// cancelled, then lets the requests in flight finish.
pub async fn serve_router(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    metrics: Arc<HttpMetrics>,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let registry = Arc::new(Registry::new(limits.max_connections, metrics));
    let connections = TaskTracker::new();
    'accept: loop {
        // Room for one more, shedding the stalest waiter at the cap.
        loop {
            let changed = registry.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !registry.at_cap() {
                break;
            }
            registry.shed_longest_waiting();
            tokio::select! {
                () = &mut changed => {}
                () = shutdown.cancelled() => break 'accept,
            }
        }
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    // Small answers and server-sent events go out as they
                    // are written, not held back by Nagle's algorithm
                    // waiting for the client's delayed ACK (~40 ms).
                    if let Err(err) = stream.set_nodelay(true) {
                        tracing::debug!(error = %err, "HTTP API: cannot set TCP_NODELAY");
                    }
                    stream
                }
                Err(err) if is_connection_error(&err) => continue,
                Err(err) => {
                    tracing::warn!(error = %err, "HTTP API: accept failed; retrying shortly");
                    tokio::select! {
                        () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                        () = shutdown.cancelled() => break,
                    }
                }
            },
            () = shutdown.cancelled() => break,
        };
        let slot = Registry::admit(&registry);
        connections.spawn(serve_connection(stream, slot, router.clone(), limits, shutdown.clone()));
    }
    drop(listener);
    connections.close();
    connections.wait().await;
    Ok(())
}

/// Errors of one connection that has already gone, not of the listener.
fn is_connection_error(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// Drives one connection until it ends, is shed, or shutdown drains it.
async fn serve_connection(
    stream: TcpStream,
    slot: Slot,
    router: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    let connection = Arc::clone(&slot.connection);
    let io = TokioIo::new(Watched {
        inner: stream,
        connection: Arc::clone(&connection),
        registry: Arc::clone(&slot.registry),
        limits,
        timer: None,
        armed: None,
        timed_out: false,
    });
    let service = Tracked {
        inner: TowerToHyperService::new(router),
        connection: Arc::clone(&connection),
        registry: Arc::clone(&slot.registry),
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout + limits.idle_timeout);
    let served = builder.serve_connection(io, service);
    tokio::pin!(served);
    let mut draining = false;
    loop {
        tokio::select! {
            result = served.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!(error = %err, "HTTP connection ended with an error");
                }
                break;
            }
            () = shutdown.cancelled(), if !draining => {
                if connection.waiting_since().is_some() {
                    // Nothing in flight to finish (idle, or a head still
                    // arriving, which hyper's graceful shutdown would wait for).
                    break;
                }
                served.as_mut().graceful_shutdown();
                draining = true;
            }
            () = connection.shed.cancelled(), if !draining => {
                if connection.waiting_since().is_some() {
                    tracing::debug!("HTTP connection shed at the connection cap");
                    break;
                }
                // A request arrived since it was chosen: finish it, then close.
                served.as_mut().graceful_shutdown();
                draining = true;
            }
        }
    }
    // The socket closes here, before `slot` frees its place.
}

/// Where one connection is.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Waiting for a request head since `since` (the accept, or the end of
    /// the previous response); `first_byte`: when a byte of it came.
    Waiting {
        since: Instant,
        first_byte: Option<Instant>,
        served: bool,
    },
    /// This many requests are being answered.
    Busy(usize),
}

/// One open connection, shared by its task, its socket wrapper, its
/// service and the registry.
#[derive(Debug)]
struct Connection {
    id: u64,
    phase: Mutex<Phase>,
    /// Cancelled when the connection is shed at the cap.
    shed: CancellationToken,
}

impl Connection {
    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When the connection must have sent (the rest of) a request head.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        match *self.phase() {
            Phase::Busy(_) => None,
            Phase::Waiting {
                since, served: false, ..
            } => Some(since + limits.header_timeout),
            Phase::Waiting {
                first_byte: Some(first),
                ..
            } => Some(first + limits.header_timeout),
            Phase::Waiting {
                since,
                first_byte: None,
                ..
            } => Some(since + limits.idle_timeout),
        }
    }

    /// Since when it has waited for a request head; `None` while busy.
    fn waiting_since(&self) -> Option<Instant> {
        match *self.phase() {
            Phase::Waiting { since, .. } => Some(since),
            Phase::Busy(_) => None,
        }
    }

    fn saw_bytes(&self) {
        if let Phase::Waiting { first_byte, .. } = &mut *self.phase()
            && first_byte.is_none()
        {
            *first_byte = Some(Instant::now());
        }
    }

    fn begin_request(&self) {
        let mut phase = self.phase();
        *phase = match *phase {
            Phase::Busy(n) => Phase::Busy(n + 1),
            Phase::Waiting { .. } => Phase::Busy(1),
        };
    }

    /// Whether the connection is now waiting again.
    fn end_request(&self) -> bool {
        let mut phase = self.phase();
        match *phase {
            Phase::Busy(n) if n > 1 => {
                *phase = Phase::Busy(n - 1);
                false
            }
            Phase::Busy(_) => {
                *phase = Phase::Waiting {
                    since: Instant::now(),
                    first_byte: None,
                    served: true,
                };
                true
            }
            Phase::Waiting { .. } => false,
        }
    }
}

#[derive(Debug, Default)]
struct Slots {
    next_id: u64,
    newest: u64,
    open: HashMap<u64, Arc<Connection>>,
}

/// The open connections: the cap and who is shed at it.
#[derive(Debug)]
struct Registry {
    cap: usize,
    slots: Mutex<Slots>,
    /// Notified when a connection closes or starts waiting.
    changed: Notify,
    metrics: Arc<HttpMetrics>,
}

impl Registry {
    fn new(cap: usize, metrics: Arc<HttpMetrics>) -> Self {
        Self {
            cap: cap.max(1),
            slots: Mutex::default(),
            changed: Notify::new(),
            metrics,
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn at_cap(&self) -> bool {
        self.slots().open.len() >= self.cap
    }

    /// Registers a just-accepted connection.
    fn admit(registry: &Arc<Self>) -> Slot {
        let mut slots = registry.slots();
        slots.next_id += 1;
        let id = slots.next_id;
        let connection = Arc::new(Connection {
            id,
            phase: Mutex::new(Phase::Waiting {
                since: Instant::now(),
                first_byte: None,
                served: false,
            }),
            shed: CancellationToken::new(),
        });
        slots.newest = id;
        slots.open.insert(id, Arc::clone(&connection));
        registry.metrics.set_connections_open(slots.open.len() as u64);
        Slot {
            registry: Arc::clone(registry),
            connection,
        }
    }

    /// Sheds the connection that has waited longest for a request head,
    /// unless one shed earlier is still closing (its slot frees soon). One
    /// that got a request just as it was shed finishes it first, and does
    /// not hold up the next shedding.
    fn shed_longest_waiting(&self) {
        let slots = self.slots();
        if slots
            .open
            .values()
            .any(|c| c.shed.is_cancelled() && c.waiting_since().is_some())
        {
            return;
        }
        let victim = slots
            .open
            .values()
            .filter(|c| c.id != slots.newest && !c.shed.is_cancelled())
            .filter_map(|c| c.waiting_since().map(|since| (since, c)))
            .min_by_key(|(since, c)| (*since, c.id));
        if let Some((_, connection)) = victim {
            connection.shed.cancel();
            self.metrics.record_connection_shed();
        }
    }

    fn release(&self, id: u64) {
        let mut slots = self.slots();
        slots.open.remove(&id);
        self.metrics.set_connections_open(slots.open.len() as u64);
        drop(slots);
        self.changed.notify_waiters();
    }
}

/// A connection's place under the cap, freed when dropped.
struct Slot {
    registry: Arc<Registry>,
    connection: Arc<Connection>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.registry.release(self.connection.id);
    }
}

/// The socket as hyper sees it: reads mark a request head as started,
/// and while the connection waits for a head, a blocked read or write
/// fails with `TimedOut` once the header or idle deadline passes.
struct Watched {
    inner: TcpStream,
    connection: Arc<Connection>,
    registry: Arc<Registry>,
    limits: ConnectionLimits,
    timer: Option<Pin<Box<Sleep>>>,
    armed: Option<Instant>,
    timed_out: bool,
}

impl Watched {
    /// Arms the timer for the current deadline; an error when it passed.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let Some(deadline) = self.connection.deadline(&self.limits) else {
            return Ok(());
        };
        let fresh = self.timer.is_none();
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !fresh && self.armed != Some(deadline) {
            timer.as_mut().reset(deadline);
        }
        self.armed = Some(deadline);
        if Instant::now() >= deadline || timer.as_mut().poll(cx).is_ready() {
            if !self.timed_out {
                self.timed_out = true;
                self.registry.metrics.record_connection_timed_out();
            }
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no complete request head in time (BOSUN_HTTP_HEADER_TIMEOUT_MS / BOSUN_HTTP_IDLE_TIMEOUT_MS)",
            ));
        }
        Ok(())
    }

    fn pending_or_timed_out<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.poll_deadline(cx) {
            Ok(()) => Poll::Pending,
            Err(err) => Poll::Ready(Err(err)),
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.connection.saw_bytes();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            Poll::Pending => this.pending_or_timed_out(cx),
        }
    }
}

impl AsyncWrite for Watched {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Pending => this.pending_or_timed_out(cx),
            ready => ready,
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.pending_or_timed_out(cx),
            ready => ready,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending => this.pending_or_timed_out(cx),
            ready => ready,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The router as hyper calls it, marking the connection busy from a
/// request's head until its response body is done.
struct Tracked {
    inner: TowerToHyperService<Router>,
    connection: Arc<Connection>,
    registry: Arc<Registry>,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Tracked {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        self.connection.begin_request();
        let busy = Busy {
            connection: Arc::clone(&self.connection),
            registry: Arc::clone(&self.registry),
        };
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| Body::new(BusyBody { body, _busy: busy })))
        })
    }
}

/// One request being answered; dropped with its response body (or with
/// the handler's future, when the client went away).
struct Busy {
    connection: Arc<Connection>,
    registry: Arc<Registry>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.connection.end_request() {
            self.registry.changed.notify_waiters();
        }
    }
}

/// A response body that keeps its connection busy until it is done.
struct BusyBody {
    body: Body,
    _busy: Busy,
}

impl HttpBody for BusyBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const LIMITS_TEXT: &str = "Limit                     Soft Limit           Hard Limit           Units     \n\
        Max cpu time              unlimited            unlimited            seconds   \n\
        Max open files            1024                 524288               files     \n";

    #[test]
    fn the_cap_keeps_half_the_descriptors() {
        assert_eq!(parse_open_files_limit(LIMITS_TEXT), Some(1024));
        assert_eq!(
            parse_open_files_limit("Max open files            unlimited            unlimited            files\n"),
            None
        );
        assert_eq!(parse_open_files_limit("nothing here"), None);
        assert_eq!(connection_cap(4096, Some(1024)), 512);
        assert_eq!(connection_cap(100, Some(1024)), 100);
        assert_eq!(connection_cap(4096, None), 4096);
        assert_eq!(connection_cap(4096, Some(1)), 1);
        let limits = ConnectionLimits::new(&HttpLimits::default(), Some(65_536));
        assert_eq!(limits.max_connections, 4096);
        assert_eq!(limits.header_timeout, Duration::from_secs(10));
    }

    async fn start(
        limits: ConnectionLimits,
    ) -> (
        std::net::SocketAddr,
        CancellationToken,
        tokio::task::JoinHandle<io::Result<()>>,
    ) {
        let router = Router::new().route("/healthz", get(|| async { "ok" })).route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(600)).await;
                "slow done"
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(serve_router(listener, router, limits, Arc::default(), shutdown.clone()));
        (address, shutdown, task)
    }

    /// Sends `request` on a new connection and reads until the server closes.
    async fn exchange(address: std::net::SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
            .await
            .expect("the server answers and closes")
            .unwrap();
        answer
    }

    /// Reads until the server closes; how long that took.
    async fn until_closed(stream: &mut TcpStream) -> Duration {
        let started = std::time::Instant::now();
        let mut sink = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut sink))
            .await
            .expect("the server closes the connection");
        started.elapsed()
    }

    fn limits(header_ms: u64, idle_ms: u64, max_connections: usize) -> ConnectionLimits {
        ConnectionLimits {
            header_timeout: Duration::from_millis(header_ms),
            idle_timeout: Duration::from_millis(idle_ms),
            max_connections,
        }
    }

    #[tokio::test]
    async fn silent_and_trickling_connections_are_closed_after_the_header_timeout() {
        let (address, shutdown, task) = start(limits(300, 60_000, 64)).await;
        let mut silent = TcpStream::connect(address).await.unwrap();
        let mut trickling = TcpStream::connect(address).await.unwrap();
        trickling.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        // A header line every 50 ms for 4 s: bytes keep coming, the head never ends.
        let trickle = async {
            let mut sent = 0;
            for _ in 0..80 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if trickling.write_all(b"X-A: b\r\n").await.is_err() {
                    break;
                }
                sent += 1;
            }
            until_closed(&mut trickling).await;
            sent
        };
        let (silent_after, trickled) = tokio::join!(until_closed(&mut silent), trickle);
        // Closed by the 300 ms header timeout, not the 60 s idle timeout;
        // trickling bytes did not keep the connection open.
        assert!(silent_after < Duration::from_secs(15), "{silent_after:?}");
        assert!(trickled < 80, "the trickling connection was not closed");
        let answer = exchange(address, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"), "{answer}");
        shutdown.cancel();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_kept_alive_connection_gets_the_idle_timeout_not_the_header_timeout() {
        let (address, shutdown, task) = start(limits(200, 1_000, 64)).await;
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = stream.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        // Longer than the header timeout: still open (idle allows 1 s).
        tokio::time::sleep(Duration::from_millis(500)).await;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let n = stream.read(&mut buf).await.unwrap();
        assert!(
            String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
            "the second request on the kept-alive connection is answered"
        );
        // Then it is closed once idle for the idle timeout.
        until_closed(&mut stream).await;
        shutdown.cancel();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_slow_request_is_not_timed_out_and_finishes_through_shutdown() {
        let (address, shutdown, task) = start(limits(200, 200, 64)).await;
        let slow = tokio::spawn(exchange(address, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        shutdown.cancel();
        let answer = slow.await.unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("slow done"),
            "{answer}"
        );
        task.await.unwrap().unwrap();
        assert!(TcpStream::connect(address).await.is_err(), "no longer listening");
    }

    #[tokio::test]
    async fn at_the_cap_the_longest_waiting_connection_is_shed() {
        let (address, shutdown, task) = start(limits(60_000, 60_000, 4)).await;
        let mut waiting = Vec::new();
        for _ in 0..4 {
            let mut stream = TcpStream::connect(address).await.unwrap();
            stream.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
            waiting.push(stream);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Every slot holds a half-sent head; a real client still gets in.
        for _ in 0..3 {
            let answer = exchange(address, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }
        // The oldest waiters were the ones closed.
        until_closed(&mut waiting[0]).await;
        // Shutdown does not wait for the half-sent heads' 60 s timeout.
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("shutdown closes connections with nothing in flight")
            .unwrap()
            .unwrap();
    }
}
