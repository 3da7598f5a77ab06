//! Paused consumers: an operator's pause ([`ControlStore`]) stops every
//! replica of a consumer from taking messages within a few seconds. Each
//! host reads the consumers' latest pauses and resumes every
//! [`PAUSE_POLL`]; a receive loop of a paused consumer takes nothing until
//! it is resumed (or the host stops): messages wait in their queue, none is
//! received, retried or dead-lettered because of the pause. A receive
//! already under way when the pause is read still hands over what it got.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use time::format_description::well_known::Rfc3339;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Runtime;
use crate::ports::store::{ConsumerControl, ControlAction, ControlStore};

/// How often a host reads the pauses.
pub const PAUSE_POLL: Duration = Duration::from_secs(2);

/// The consumers of this host paused now, as last read.
pub(crate) struct Pauses {
    paused: watch::Sender<BTreeMap<String, ConsumerControl>>,
    pub(super) controls: Option<Arc<dyn ControlStore>>,
}

impl Default for Pauses {
    fn default() -> Self {
        Self {
            paused: watch::channel(BTreeMap::new()).0,
            controls: None,
        }
    }
}

/// How a pause reads in logs, `/readyz` and `/metrics`' help.
pub fn describe(control: &ConsumerControl) -> String {
    let at = control.at.format(&Rfc3339).unwrap_or_default();
    match &control.reason {
        Some(reason) => format!("paused by {} at {at}: {reason}", control.by),
        None => format!("paused by {} at {at}", control.by),
    }
}

/// Reads the pauses of `consumers` every [`PAUSE_POLL`] until `stop`.
pub(super) async fn watch(runtime: Arc<Runtime>, consumers: Vec<String>, stop: CancellationToken) {
    let Some(controls) = runtime.pauses.controls.clone() else {
        return;
    };
    loop {
        match controls.latest_controls().await {
            Ok(latest) => {
                let paused: BTreeMap<String, ConsumerControl> = latest
                    .into_iter()
                    .filter(|control| control.action == ControlAction::Pause && consumers.contains(&control.consumer))
                    .map(|control| (control.consumer.clone(), control))
                    .collect();
                runtime.pauses.paused.send_if_modified(|current| {
                    let changed = *current != paused;
                    if changed {
                        *current = paused;
                    }
                    changed
                });
            }
            // The last pauses read stand until the next read works.
            Err(err) => tracing::warn!(error = %err, "could not read the consumers' pauses; keeping the last read"),
        }
        tokio::select! {
            () = tokio::time::sleep(PAUSE_POLL) => {},
            () = stop.cancelled() => return,
        }
    }
}

/// Waits while `consumer` is paused, saying so in its receive state;
/// false when `shutdown` came first.
pub(super) async fn wait_while_paused(
    runtime: &Runtime,
    consumer: &str,
    entity: &str,
    shutdown: &CancellationToken,
) -> bool {
    let mut changes = runtime.pauses.paused.subscribe();
    let mut was_paused = false;
    loop {
        let paused = changes.borrow_and_update().get(consumer).cloned();
        let Some(control) = paused else {
            if was_paused {
                runtime.metrics.receiving().resumed(consumer, entity);
                tracing::info!(consumer, entity, "resumed: taking messages again");
            }
            return true;
        };
        let description = describe(&control);
        if !was_paused {
            tracing::warn!(consumer, entity, pause = description, "paused: taking no message");
            was_paused = true;
        }
        runtime.metrics.receiving().paused(consumer, entity, &description);
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return !shutdown.is_cancelled();
                }
            }
            () = shutdown.cancelled() => return false,
        }
    }
}
