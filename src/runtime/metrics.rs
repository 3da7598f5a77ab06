//! Runtime metrics: per consumer, messages processed, retried,
//! dead-lettered, duplicates acknowledged, saga conflicts, messages left
//! waiting for a newer bosun, and two latency
//! distributions — handler latency (inside the consumer) and processing
//! latency (from receiving the message to settling it: idempotency check,
//! saga load, handler, atomic commit, complete).
//!
//! For `/metrics`, each (consumer, message type) pair has its counters and
//! three histograms in seconds over fixed [`BUCKETS`]: handler time,
//! processing time and end to end (from the message's `occurredAt` to the
//! end of its handling: queueing, scheduled delays and retries included).
//! A host registers every pair its consumers receive before it starts
//! ([`Metrics::register`]), so every series exists from the start, at zero,
//! and a scrape costs the same however many messages were handled.
//!
//! Latencies also keep a bounded uniform sample (reservoir) per consumer,
//! from which `bosun bench` reads percentiles.
//!
//! Gauges (the outbox backlog and each consumer's queue and subscription
//! depth) are sampled by the serving process ([`Metrics::set_gauges`])
//! every few seconds, so a scrape reads them from memory.
//!
//! When metrics are exported over OTLP ([`telemetry::meter`]), every count
//! and duration is also recorded into OpenTelemetry instruments of the same
//! meaning, named by OpenTelemetry's conventions (`bosun.messages.processed`,
//! `bosun.handler.duration` in `s` ...), which a Prometheus backend shows
//! under the names `/metrics` uses (`bosun_messages_processed_total`,
//! `bosun_handler_duration_seconds`). Counters are created at zero for
//! every registered pair; a histogram's series starts with its first
//! observation (an OpenTelemetry histogram has no empty point).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter};
use serde::Serialize;

use crate::runtime::receiving::Receiving;
use crate::runtime::telemetry;

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

/// The upper bounds (seconds) of the latency histograms' buckets; a last
/// `+Inf` bucket counts everything.
pub const BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A latency histogram over [`BUCKETS`]: fixed size, whatever it counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations per bucket (not cumulative); the last is over 60 s.
    buckets: [u64; BUCKETS.len() + 1],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn record(&mut self, duration: Duration) {
        let seconds = duration.as_secs_f64();
        let slot = BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS.len());
        self.buckets[slot] += 1;
        self.sum += seconds;
        self.count += 1;
    }

    /// Observations at or under each bound of [`BUCKETS`], then of `+Inf`
    /// (cumulative, as Prometheus exposes them).
    pub fn cumulative(&self) -> impl Iterator<Item = u64> + '_ {
        self.buckets.iter().scan(0u64, |total, n| {
            *total += n;
            Some(*total)
        })
    }

    /// The sum of the observations, in seconds.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Observations.
    pub fn count(&self) -> u64 {
        self.count
    }
}

/// The numbers of one consumer for one message type, as `/metrics` shows them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Messages handled and committed.
    pub processed: u64,
    /// Transient failures that scheduled a retry.
    pub retried: u64,
    /// Messages dead-lettered.
    pub dead_lettered: u64,
    /// Redeliveries of messages already handled.
    pub duplicates: u64,
    /// Saga version conflicts.
    pub saga_conflicts: u64,
    /// Messages left waiting for a newer bosun (each look counts).
    pub waiting: u64,
    /// Time inside the handler.
    pub handler: Histogram,
    /// Time from receive to settle.
    pub processing: Histogram,
    /// Time from the message's `occurredAt` to the end of its handling.
    pub end_to_end: Histogram,
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
    /// Messages left waiting for a newer bosun (each look counts).
    pub waiting: u64,
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
    /// Left for a newer bosun (a newer schema version, or a handler that
    /// needs a newer release): scheduled to be looked at again.
    Waiting,
}

/// The sampled gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Outbox entries not yet sent, when the store answered.
    pub outbox_backlog: Option<u64>,
    /// (consumer, entity path) -> active messages, where the transport answered.
    pub queue_depth: BTreeMap<(String, String), u64>,
}

/// The OpenTelemetry instruments (see the module's documentation).
#[derive(Debug)]
struct Instruments {
    processed: Counter<u64>,
    retried: Counter<u64>,
    dead_lettered: Counter<u64>,
    duplicates: Counter<u64>,
    saga_conflicts: Counter<u64>,
    waiting: Counter<u64>,
    handler: opentelemetry::metrics::Histogram<f64>,
    processing: opentelemetry::metrics::Histogram<f64>,
    end_to_end: opentelemetry::metrics::Histogram<f64>,
}

impl Instruments {
    fn new(meter: &Meter, gauges: &Arc<Mutex<Gauges>>) -> Self {
        let counter = |name: &'static str, description: &'static str| {
            meter
                .u64_counter(name)
                .with_unit("{message}")
                .with_description(description)
                .build()
        };
        let histogram = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(BUCKETS.to_vec())
                .build()
        };
        let backlog = Arc::clone(gauges);
        meter
            .u64_observable_gauge("bosun.outbox.backlog")
            .with_unit("{entry}")
            .with_description("Outbox entries not yet sent.")
            .with_callback(move |observer| {
                if let Some(backlog) = lock(&backlog).outbox_backlog {
                    observer.observe(backlog, &[]);
                }
            })
            .build();
        let depth = Arc::clone(gauges);
        meter
            .u64_observable_gauge("bosun.queue.depth")
            .with_unit("{message}")
            .with_description("Active messages (scheduled ones included) in each consumer's queue and subscription.")
            .with_callback(move |observer| {
                for ((consumer, entity), depth) in &lock(&depth).queue_depth {
                    observer.observe(
                        *depth,
                        &[
                            KeyValue::new("consumer", consumer.clone()),
                            KeyValue::new("messaging.destination.name", entity.clone()),
                        ],
                    );
                }
            })
            .build();
        Self {
            processed: counter("bosun.messages.processed", "Messages handled and committed."),
            retried: counter("bosun.messages.retried", "Transient failures that scheduled a retry."),
            dead_lettered: counter("bosun.messages.dead_lettered", "Messages dead-lettered."),
            duplicates: counter("bosun.messages.duplicate", "Redeliveries of messages already handled."),
            saga_conflicts: counter(
                "bosun.saga.conflicts",
                "Saga version conflicts (each reloaded and re-applied).",
            ),
            waiting: counter(
                "bosun.messages.waiting",
                "Messages left for a newer bosun (a newer schema version, or a handler that needs a newer release).",
            ),
            handler: histogram("bosun.handler.duration", "Time inside the consumer's handler."),
            processing: histogram(
                "bosun.processing.duration",
                "Time from receiving a message to settling it.",
            ),
            end_to_end: histogram(
                "bosun.end_to_end.duration",
                "Time from a message's occurredAt to the end of its handling.",
            ),
        }
    }

    fn counter(&self, event: Event) -> &Counter<u64> {
        match event {
            Event::Processed => &self.processed,
            Event::Retried => &self.retried,
            Event::DeadLettered => &self.dead_lettered,
            Event::Duplicate => &self.duplicates,
            Event::SagaConflict => &self.saga_conflicts,
            Event::Waiting => &self.waiting,
        }
    }
}

fn labels(consumer: &str, message_type: &str) -> [KeyValue; 2] {
    [
        KeyValue::new("consumer", consumer.to_owned()),
        KeyValue::new("message_type", message_type.to_owned()),
    ]
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// All consumers' metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    consumers: Mutex<BTreeMap<String, ConsumerMetrics>>,
    /// (consumer, message type) -> its series.
    series: Mutex<BTreeMap<(String, String), Series>>,
    gauges: Arc<Mutex<Gauges>>,
    /// When metrics are exported over OTLP.
    instruments: Option<Instruments>,
    /// Whether each consumer's receives come back.
    receiving: Receiving,
}

impl Metrics {
    /// Empty metrics, recorded into the OTLP meter too when metrics are
    /// exported ([`telemetry::meter`]).
    pub fn new() -> Self {
        match telemetry::meter() {
            Some(meter) => Self::with_meter(meter),
            None => Self::default(),
        }
    }

    /// Empty metrics that also record into `meter`'s instruments.
    pub fn with_meter(meter: &Meter) -> Self {
        let gauges = Arc::default();
        Self {
            instruments: Some(Instruments::new(meter, &gauges)),
            gauges,
            ..Self::default()
        }
    }

    /// Replaces the sampled gauges.
    pub fn set_gauges(&self, gauges: Gauges) {
        *lock(&self.gauges) = gauges;
    }

    /// The gauges as last sampled.
    pub fn gauges(&self) -> Gauges {
        lock(&self.gauges).clone()
    }

    /// Whether each consumer of this process can receive.
    pub fn receiving(&self) -> &Receiving {
        &self.receiving
    }

    fn with<T>(&self, consumer: &str, f: impl FnOnce(&mut ConsumerMetrics) -> T) -> T {
        let mut guard = self.consumers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(guard.entry(consumer.to_owned()).or_default())
    }

    fn with_series<T>(&self, consumer: &str, message_type: &str, f: impl FnOnce(&mut Series) -> T) -> T {
        let mut guard = self.series.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // The key is built only for a pair not seen before.
        if let Some(series) = guard.get_mut(&(consumer.to_owned(), message_type.to_owned())) {
            return f(series);
        }
        f(guard.entry((consumer.to_owned(), message_type.to_owned())).or_default())
    }

    /// Creates the series of `consumer` for each of `message_types` (at
    /// zero), so they are exposed before any message arrives.
    pub fn register<'a>(&self, consumer: &str, message_types: impl IntoIterator<Item = &'a str>) {
        self.with(consumer, |_| ());
        for message_type in message_types {
            self.with_series(consumer, message_type, |_| ());
            if let Some(instruments) = &self.instruments {
                let labels = labels(consumer, message_type);
                for event in [
                    Event::Processed,
                    Event::Retried,
                    Event::DeadLettered,
                    Event::Duplicate,
                    Event::SagaConflict,
                    Event::Waiting,
                ] {
                    instruments.counter(event).add(0, &labels);
                }
            }
        }
    }

    /// Counts an event of a `message_type` message.
    pub fn count(&self, consumer: &str, message_type: &str, event: Event) {
        self.with(consumer, |m| match event {
            Event::Processed => m.processed += 1,
            Event::Retried => m.retried += 1,
            Event::DeadLettered => m.dead_lettered += 1,
            Event::Duplicate => m.duplicates += 1,
            Event::SagaConflict => m.saga_conflicts += 1,
            Event::Waiting => m.waiting += 1,
        });
        self.with_series(consumer, message_type, |s| match event {
            Event::Processed => s.processed += 1,
            Event::Retried => s.retried += 1,
            Event::DeadLettered => s.dead_lettered += 1,
            Event::Duplicate => s.duplicates += 1,
            Event::SagaConflict => s.saga_conflicts += 1,
            Event::Waiting => s.waiting += 1,
        });
        if let Some(instruments) = &self.instruments {
            instruments.counter(event).add(1, &labels(consumer, message_type));
        }
    }

    /// Records a handler's duration.
    pub fn handler_latency(&self, consumer: &str, message_type: &str, duration: Duration) {
        self.with(consumer, |m| m.handler.record(duration));
        self.with_series(consumer, message_type, |s| s.handler.record(duration));
        if let Some(instruments) = &self.instruments {
            instruments
                .handler
                .record(duration.as_secs_f64(), &labels(consumer, message_type));
        }
    }

    /// Records a message's receive-to-settle duration and the time since
    /// it was created (`end_to_end`).
    pub fn processing_latency(&self, consumer: &str, message_type: &str, duration: Duration, end_to_end: Duration) {
        self.with(consumer, |m| m.processing.record(duration));
        self.with_series(consumer, message_type, |s| {
            s.processing.record(duration);
            s.end_to_end.record(end_to_end);
        });
        if let Some(instruments) = &self.instruments {
            let labels = labels(consumer, message_type);
            instruments.processing.record(duration.as_secs_f64(), &labels);
            instruments.end_to_end.record(end_to_end.as_secs_f64(), &labels);
        }
    }

    /// Every (consumer, message type) series, in order. Its size is the
    /// number of pairs registered or seen, not of messages.
    pub fn series(&self) -> Vec<((String, String), Series)> {
        self.series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(key, series)| (key.clone(), series.clone()))
            .collect()
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
            metrics.processing_latency("commit", "CreateCommit", Duration::from_millis(ms), Duration::ZERO);
        }
        metrics.count("commit", "CreateCommit", Event::Processed);
        let commit = metrics.consumer("commit");
        assert_eq!(commit.processing.count(), 100);
        assert_eq!(commit.processing.percentile(0.5), Duration::from_millis(51));
        assert_eq!(commit.processing.percentile(0.99), Duration::from_millis(99));
        assert_eq!(commit.processing.max(), Duration::from_millis(100));
        assert_eq!(metrics.snapshot()[0].processed, 1);
    }

    #[test]
    fn histograms_count_each_observation_in_its_bucket_and_stay_one_size() {
        let metrics = Metrics::new();
        metrics.register("commit", ["CreateCommit"]);
        let registered = metrics.series();
        assert_eq!(registered.len(), 1);
        assert_eq!(registered[0].1, Series::default());
        for _ in 0..1_000 {
            metrics.handler_latency("commit", "CreateCommit", Duration::from_millis(3));
        }
        metrics.handler_latency("commit", "CreateCommit", Duration::from_secs(120));
        let series = metrics.series();
        assert_eq!(series.len(), 1);
        let handler = &series[0].1.handler;
        let cumulative: Vec<u64> = handler.cumulative().collect();
        assert_eq!(cumulative.len(), BUCKETS.len() + 1);
        // 3 ms is over 2.5 ms and at most 5 ms.
        assert_eq!(cumulative[1], 0);
        assert_eq!(cumulative[2], 1_000);
        assert_eq!(cumulative[BUCKETS.len() - 1], 1_000);
        assert_eq!(cumulative[BUCKETS.len()], 1_001);
        assert_eq!(handler.count(), 1_001);
        assert!((handler.sum() - 123.0).abs() < 1e-6, "{}", handler.sum());
    }
}
