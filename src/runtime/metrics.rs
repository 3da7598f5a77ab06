//! Runtime metrics: per consumer, messages processed, retried,
//! dead-lettered, duplicates acknowledged, saga conflicts, and two latency
//! distributions — handler latency (inside the consumer) and processing
//! latency (from receiving the message to settling it: idempotency check,
//! saga load, handler, atomic commit, complete).
//!
//! Latencies keep a bounded uniform sample (reservoir) per consumer, from
//! which percentiles are read; `bosun bench` prints them, and the metrics
//! endpoint of the HTTP API can export them.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

/// Samples kept per latency distribution.
const RESERVOIR: usize = 100_000;

/// A latency distribution with a bounded uniform sample.
#[derive(Debug, Clone, Default)]
pub struct Latency {
    count: u64,
    total_us: u128,
    max_us: u64,
    samples: Vec<u64>,
}

impl Latency {
    fn record(&mut self, duration: Duration) {
        let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        self.count += 1;
        self.total_us += u128::from(micros);
        self.max_us = self.max_us.max(micros);
        if self.samples.len() < RESERVOIR {
            self.samples.push(micros);
        } else {
            // Reservoir sampling keeps a uniform sample of everything seen.
            let slot = fastrand::u64(0..self.count);
            if let Some(slot) = usize::try_from(slot).ok().filter(|slot| *slot < RESERVOIR) {
                self.samples[slot] = micros;
            }
        }
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The `p`-th percentile (0.0..=1.0) of the sample.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.samples.is_empty() {
            return Duration::ZERO;
        }
        let mut sorted = self.samples.clone();
        sorted.sort_unstable();
        let rank = ((sorted.len() - 1) as f64 * p.clamp(0.0, 1.0)).round() as usize;
        Duration::from_micros(sorted[rank.min(sorted.len() - 1)])
    }

    /// The mean.
    pub fn mean(&self) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        Duration::from_micros(u64::try_from(self.total_us / u128::from(self.count)).unwrap_or(u64::MAX))
    }

    /// The largest value.
    pub fn max(&self) -> Duration {
        Duration::from_micros(self.max_us)
    }
}

/// One consumer's numbers.
#[derive(Debug, Clone, Default)]
pub struct ConsumerMetrics {
    /// Messages handled and committed.
    pub processed: u64,
    /// Transient failures that scheduled a retry.
    pub retried: u64,
    /// Messages dead-lettered (unreadable, permanent failure, retries exhausted).
    pub dead_lettered: u64,
    /// Redeliveries of messages already handled.
    pub duplicates: u64,
    /// Saga version conflicts (each one reloaded and re-applied).
    pub saga_conflicts: u64,
    /// Time inside the handler.
    pub handler: Latency,
    /// Time from receive to settle.
    pub processing: Latency,
}

/// A consumer's counters as plain numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerSnapshot {
    /// The consumer.
    pub consumer: String,
    /// See [`ConsumerMetrics::processed`].
    pub processed: u64,
    /// See [`ConsumerMetrics::retried`].
    pub retried: u64,
    /// See [`ConsumerMetrics::dead_lettered`].
    pub dead_lettered: u64,
    /// See [`ConsumerMetrics::duplicates`].
    pub duplicates: u64,
    /// See [`ConsumerMetrics::saga_conflicts`].
    pub saga_conflicts: u64,
    /// Handler latency p50, microseconds.
    pub handler_p50_us: u64,
    /// Handler latency p99, microseconds.
    pub handler_p99_us: u64,
    /// Processing latency p50, microseconds.
    pub processing_p50_us: u64,
    /// Processing latency p99, microseconds.
    pub processing_p99_us: u64,
}

/// What the host reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Handled and committed.
    Processed,
    /// A retry was scheduled.
    Retried,
    /// Dead-lettered.
    DeadLettered,
    /// A redelivery of a handled message.
    Duplicate,
    /// A saga version conflict.
    SagaConflict,
}

/// All consumers' metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    consumers: Mutex<BTreeMap<String, ConsumerMetrics>>,
}

impl Metrics {
    /// Empty metrics.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, consumer: &str, f: impl FnOnce(&mut ConsumerMetrics) -> T) -> T {
        let mut guard = self.consumers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(guard.entry(consumer.to_owned()).or_default())
    }

    /// Counts an event.
    pub fn count(&self, consumer: &str, event: Event) {
        self.with(consumer, |m| match event {
            Event::Processed => m.processed += 1,
            Event::Retried => m.retried += 1,
            Event::DeadLettered => m.dead_lettered += 1,
            Event::Duplicate => m.duplicates += 1,
            Event::SagaConflict => m.saga_conflicts += 1,
        });
    }

    /// Records a handler's duration.
    pub fn handler_latency(&self, consumer: &str, duration: Duration) {
        self.with(consumer, |m| m.handler.record(duration));
    }

    /// Records a message's receive-to-settle duration.
    pub fn processing_latency(&self, consumer: &str, duration: Duration) {
        self.with(consumer, |m| m.processing.record(duration));
    }

    /// A copy of one consumer's metrics.
    pub fn consumer(&self, consumer: &str) -> ConsumerMetrics {
        self.with(consumer, |m| m.clone())
    }

    /// Every consumer's counters and percentiles.
    pub fn snapshot(&self) -> Vec<ConsumerSnapshot> {
        let guard = self.consumers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        guard
            .iter()
            .map(|(name, m)| ConsumerSnapshot {
                consumer: name.clone(),
                processed: m.processed,
                retried: m.retried,
                dead_lettered: m.dead_lettered,
                duplicates: m.duplicates,
                saga_conflicts: m.saga_conflicts,
                handler_p50_us: micros(m.handler.percentile(0.5)),
                handler_p99_us: micros(m.handler.percentile(0.99)),
                processing_p50_us: micros(m.processing.percentile(0.5)),
                processing_p99_us: micros(m.processing.percentile(0.99)),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_sample() {
        let metrics = Metrics::new();
        for ms in 1..=100 {
            metrics.processing_latency("commit", Duration::from_millis(ms));
        }
        metrics.count("commit", Event::Processed);
        let commit = metrics.consumer("commit");
        assert_eq!(commit.processing.count(), 100);
        assert_eq!(commit.processing.percentile(0.5), Duration::from_millis(51));
        assert_eq!(commit.processing.percentile(0.99), Duration::from_millis(99));
        assert_eq!(commit.processing.max(), Duration::from_millis(100));
        assert_eq!(metrics.snapshot()[0].processed, 1);
    }
}
