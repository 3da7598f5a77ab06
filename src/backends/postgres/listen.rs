//! The LISTEN loop both PostgreSQL wake-ups share: the transport's (new
//! queue messages, `bosun_messages`) and the store's (timeline lines,
//! `bosun_timeline`). It connects, LISTENs on one channel and hands every
//! notification's payload to its [`Listener`]; after every (re)connection
//! the listener is told that notifications may have been missed, and a
//! connection that cannot be made is tried again with a growing backoff.
//! It ends when its listener is dropped, its pool closed or `stop` cancelled.

use std::sync::Weak;
use std::time::Duration;

use sqlx_postgres::{PgListener, PgPool};
use tokio_util::sync::CancellationToken;

/// What a LISTEN loop feeds.
pub(crate) trait Listener: Send + Sync + 'static {
    /// The log line when it cannot connect ("cannot LISTEN for new
    /// messages; receivers poll meanwhile").
    const CANNOT_LISTEN: &'static str;
    /// The log line when a connection breaks.
    const CONNECTION_FAILED: &'static str;

    /// Connected and listening (again).
    fn listening(&self);
    /// Could not connect, because of `why`; tried again after a backoff.
    fn failed(&self, why: String);
    /// The connection broke; reconnecting.
    fn connecting(&self);
    /// A notification with this payload.
    fn notified(&self, payload: &str);
    /// Notifications may have been lost (after a reconnection).
    fn missed(&self);
}

/// Runs the loop for `channel` until `listener` is gone, the pool closed or
/// `stop` cancelled.
pub(crate) async fn listen<L: Listener>(
    pool: PgPool,
    channel: &'static str,
    listener: Weak<L>,
    stop: CancellationToken,
) {
    let mut failures = 0u32;
    loop {
        if pool.is_closed() {
            return;
        }
        let connected = async {
            let mut connection = PgListener::connect_with(&pool).await?;
            connection.listen(channel).await?;
            Ok::<_, sqlx_core::Error>(connection)
        };
        let attempt = tokio::select! {
            attempt = connected => attempt,
            () = stop.cancelled() => return,
        };
        let Some(shared) = listener.upgrade() else { return };
        let mut connection = match attempt {
            Ok(connection) => {
                failures = 0;
                shared.listening();
                shared.missed();
                connection
            }
            Err(err) => {
                failures = failures.saturating_add(1);
                tracing::warn!(error = %err, "{}", L::CANNOT_LISTEN);
                shared.failed(err.to_string());
                drop(shared);
                let backoff = Duration::from_millis(200u64.saturating_mul(2u64.saturating_pow(failures.min(6))));
                tokio::select! {
                    () = tokio::time::sleep(backoff) => continue,
                    () = stop.cancelled() => return,
                }
            }
        };
        drop(shared);
        loop {
            let next = tokio::select! {
                next = connection.try_recv() => next,
                () = stop.cancelled() => return,
            };
            let Some(shared) = listener.upgrade() else { return };
            match next {
                Ok(Some(notification)) => shared.notified(notification.payload()),
                // The connection dropped and was re-established: some
                // notifications may be lost.
                Ok(None) => shared.missed(),
                Err(err) => {
                    tracing::warn!(error = %err, "{}", L::CONNECTION_FAILED);
                    shared.connecting();
                    shared.missed();
                    break;
                }
            }
        }
    }
}
