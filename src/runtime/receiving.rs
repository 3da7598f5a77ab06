//! Whether each of this process's consumers can receive: what its last
//! receive from each of its entities came back with. Readiness is false
//! while one of them fails (its sessions refused, its entity missing, the
//! broker unreachable), and `/metrics` says which (`bosun_consumer_receiving`).
//!
//! A receive that comes back, with messages or none, clears a failure; a
//! failed one marks the entity failing from then until the next receive
//! that comes back.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The receive state of every (consumer, entity) this process receives
/// from.
#[derive(Debug, Default)]
pub struct Receiving {
    entities: Mutex<BTreeMap<(String, String), State>>,
}

#[derive(Debug, Clone, Default)]
struct State {
    /// Since when it fails, and what the last failure said.
    failing: Option<(Instant, String)>,
    /// Failed receives in a row.
    failures: u64,
    /// Why the consumer takes nothing from it now (an operator's pause).
    paused: Option<String>,
}

/// One entity's receive state, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiveHealth {
    /// The consumer.
    pub consumer: String,
    /// The queue or subscription it receives from.
    pub entity: String,
    /// `None` while it receives; else for how long it has failed, and the
    /// last failure.
    pub failing: Option<(Duration, String)>,
    /// Failed receives in a row.
    pub failures: u64,
    /// `Some` while an operator's pause keeps the consumer from taking
    /// messages: who paused it, when and why.
    pub paused: Option<String>,
}

impl Receiving {
    fn with(&self, consumer: &str, entity: &str, change: impl FnOnce(&mut State)) {
        let mut entities = self.entities.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        change(entities.entry((consumer.to_owned(), entity.to_owned())).or_default());
    }

    /// `consumer` receives from `entity` from now on (not failing yet).
    pub fn register(&self, consumer: &str, entity: &str) {
        self.with(consumer, entity, |_| ());
    }

    /// A receive from `entity` came back (with messages or none).
    pub fn received(&self, consumer: &str, entity: &str) {
        self.with(consumer, entity, |state| {
            state.failing = None;
            state.failures = 0;
        });
    }

    /// A receive from `entity` failed with `error`.
    pub fn failed(&self, consumer: &str, entity: &str, error: &str) {
        self.with(consumer, entity, |state| {
            let since = state.failing.as_ref().map_or_else(Instant::now, |(since, _)| *since);
            state.failing = Some((since, error.to_owned()));
            state.failures = state.failures.saturating_add(1);
        });
    }

    /// The consumer takes nothing from `entity` now, because of `why` (an
    /// operator's pause). A paused consumer is not failing.
    pub fn paused(&self, consumer: &str, entity: &str, why: &str) {
        self.with(consumer, entity, |state| state.paused = Some(why.to_owned()));
    }

    /// The consumer takes messages from `entity` again.
    pub fn resumed(&self, consumer: &str, entity: &str) {
        self.with(consumer, entity, |state| state.paused = None);
    }

    /// Every entity's state, by consumer then entity.
    pub fn snapshot(&self) -> Vec<ReceiveHealth> {
        let entities = self.entities.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entities
            .iter()
            .map(|((consumer, entity), state)| ReceiveHealth {
                consumer: consumer.clone(),
                entity: entity.clone(),
                failing: state
                    .failing
                    .as_ref()
                    .map(|(since, error)| (since.elapsed(), error.clone())),
                failures: state.failures,
                paused: state.paused.clone(),
            })
            .collect()
    }

    /// `Ok` when every entity receives (or none is received from), else
    /// what fails, one entity per line part.
    pub fn verdict(&self) -> Result<(), String> {
        let failing: Vec<String> = self
            .snapshot()
            .into_iter()
            .filter_map(|health| {
                let (for_how_long, error) = health.failing?;
                Some(format!(
                    "{} cannot receive from `{}` ({} failed receives in {:.1} s): {error}",
                    health.consumer,
                    health.entity,
                    health.failures,
                    for_how_long.as_secs_f64()
                ))
            })
            .collect();
        if failing.is_empty() {
            Ok(())
        } else {
            Err(failing.join("; "))
        }
    }

    /// Whether any consumer receives in this process.
    pub fn is_empty(&self) -> bool {
        self.entities
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_lasts_until_a_receive_comes_back() {
        let receiving = Receiving::default();
        assert!(receiving.is_empty());
        receiving.register("gitops-sync", "gitops-sync");
        assert_eq!(receiving.verdict(), Ok(()));
        receiving.failed("gitops-sync", "gitops-sync", "amqp:not-allowed");
        receiving.failed("gitops-sync", "gitops-sync", "amqp:not-allowed again");
        let verdict = receiving.verdict().expect_err("failing");
        assert!(
            verdict.contains("gitops-sync cannot receive from `gitops-sync` (2 failed receives"),
            "{verdict}"
        );
        assert!(verdict.ends_with("amqp:not-allowed again"), "{verdict}");
        receiving.received("gitops-sync", "gitops-sync");
        assert_eq!(receiving.verdict(), Ok(()));
        assert_eq!(receiving.snapshot()[0].failures, 0);
    }
}
