//! Lock renewal while a handler runs.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Runtime;
use crate::ports::transport::ReceivedMessage;

/// Renews `lock` every third of the lock duration until dropped.
pub(super) struct LockRenewal {
    stop: CancellationToken,
}

impl LockRenewal {
    pub(super) fn start(runtime: &Runtime, received: &ReceivedMessage) -> Self {
        let stop = CancellationToken::new();
        let transport = Arc::clone(&runtime.transport);
        let lock = received.lock.clone();
        let duration = runtime.options.lock_duration;
        let token = stop.clone();
        tokio::spawn(
            async move {
                loop {
                    tokio::select! {
                        () = tokio::time::sleep(duration / 3) => {},
                        () = token.cancelled() => return,
                    }
                    if let Err(err) = transport.renew_lock(&lock, duration).await {
                        tracing::warn!(error = %err, "lock renewal failed; the message may be delivered again");
                        return;
                    }
                    tracing::debug!("lock renewed");
                }
            }
            .in_current_span(),
        );
        Self { stop }
    }
}

impl Drop for LockRenewal {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
