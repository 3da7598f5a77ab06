//! `/metrics` in the Prometheus text exposition format (version 0.0.4):
//! the host's counters and latency histograms (seconds) per consumer and
//! message type, the outbox
//! backlog, the HTTP API's requests by route and status, and what the
//! front door refused: requests by the reason they were refused (no key,
//! a bad, revoked or expired one, a missing scope, an origin, a budget),
//! requests over a key's budget, connections shed at the connection cap or
//! closed for taking too long.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::runtime::metrics::{BUCKETS, Histogram, Metrics, Series};

/// (method, route template, status) -> (requests, total time).
type RequestCounts = BTreeMap<(String, String, u16), (u64, Duration)>;

/// A consumer counter: name, help, and how to read it from a series.
type Counter = (&'static str, &'static str, fn(&Series) -> u64);

/// A latency histogram: name, help, and which of a series' histograms.
type Latency = (&'static str, &'static str, fn(&Series) -> &Histogram);

/// Every reason `bosun_api_refusals_total` counts.
const REFUSAL_REASONS: [&str; 9] = [
    "missing",
    "malformed",
    "invalid",
    "revoked",
    "expired",
    "scope",
    "tenant",
    "origin",
    "rate-limited",
];

/// Requests the API answered, by method, route template and status, and
/// what the front door refused.
#[derive(Debug, Default)]
pub struct HttpMetrics {
    requests: Mutex<RequestCounts>,
    /// key id -> requests refused with 429.
    rate_limited: Mutex<BTreeMap<String, u64>>,
    /// reason -> requests refused for who the caller is or what it may do.
    refusals: Mutex<BTreeMap<&'static str, u64>>,
    connections_open: AtomicU64,
    connections_shed: AtomicU64,
    connections_timed_out: AtomicU64,
}

impl HttpMetrics {
    /// Counts one request.
    pub fn record(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        let mut guard = self.requests.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = guard
            .entry((method.to_owned(), route.to_owned(), status))
            .or_insert((0, Duration::ZERO));
        entry.0 += 1;
        entry.1 += elapsed;
    }

    /// Counts one request of `key_id` refused for being over its budget.
    pub fn record_rate_limited(&self, key_id: &str) {
        let mut guard = self
            .rate_limited
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *guard.entry(key_id.to_owned()).or_insert(0) += 1;
    }

    /// Counts one request refused for `reason`: `missing`, `malformed`,
    /// `invalid`, `revoked` or `expired` (401), `scope`, `tenant` (a
    /// tenant's key naming another) or `origin` (403),
    /// `rate-limited` (429).
    pub fn record_refusal(&self, reason: &'static str) {
        let mut guard = self.refusals.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *guard.entry(reason).or_insert(0) += 1;
    }

    /// Sets how many HTTP connections are open.
    pub fn set_connections_open(&self, open: u64) {
        self.connections_open.store(open, Ordering::Relaxed);
    }

    /// Counts a connection closed at the connection cap.
    pub fn record_connection_shed(&self) {
        self.connections_shed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed by the header or idle timeout.
    pub fn record_connection_timed_out(&self) {
        self.connections_timed_out.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> RequestCounts {
        self.requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Escapes a label value.
pub(crate) fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The whole exposition. The consumers' part has one series per
/// (consumer, message type) registered or seen, each with a fixed number
/// of lines: its size does not grow with the messages handled.
pub fn render(metrics: &Metrics, http: &HttpMetrics, outbox_backlog: Option<u64>) -> String {
    let mut out = String::new();
    let series = metrics.series();
    let labels: Vec<String> = series
        .iter()
        .map(|((consumer, message_type), _)| {
            format!(
                "consumer=\"{}\",message_type=\"{}\"",
                label(consumer),
                label(message_type)
            )
        })
        .collect();
    let counters: [Counter; 6] = [
        (
            "bosun_messages_processed_total",
            "Messages handled and committed.",
            |s| s.processed,
        ),
        (
            "bosun_messages_retried_total",
            "Transient failures that scheduled a retry.",
            |s| s.retried,
        ),
        (
            "bosun_messages_dead_lettered_total",
            "Messages dead-lettered by the host.",
            |s| s.dead_lettered,
        ),
        (
            "bosun_messages_duplicate_total",
            "Redeliveries of messages already handled.",
            |s| s.duplicates,
        ),
        (
            "bosun_saga_conflicts_total",
            "Saga version conflicts (each reloaded and re-applied).",
            |s| s.saga_conflicts,
        ),
        (
            "bosun_messages_waiting_total",
            "Messages left for a newer bosun (a newer schema version, or a handler that needs a newer release).",
            |s| s.waiting,
        ),
    ];
    for (name, help, value) in counters {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for ((_, numbers), labels) in series.iter().zip(&labels) {
            let _ = writeln!(out, "{name}{{{labels}}} {}", value(numbers));
        }
    }
    let histograms: [Latency; 3] = [
        (
            "bosun_handler_duration_seconds",
            "Time inside the consumer's handler.",
            |s| &s.handler,
        ),
        (
            "bosun_processing_duration_seconds",
            "Time from receive to settle: idempotency check, saga, handler, commit.",
            |s| &s.processing,
        ),
        (
            "bosun_end_to_end_duration_seconds",
            "Time from the message's occurredAt to the end of its handling: queueing, scheduled delays and retries included.",
            |s| &s.end_to_end,
        ),
    ];
    for (name, help, histogram) in histograms {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for ((_, numbers), labels) in series.iter().zip(&labels) {
            let histogram = histogram(numbers);
            let bounds = BUCKETS.iter().map(|bound| bound.to_string()).chain(["+Inf".to_owned()]);
            for (bound, count) in bounds.zip(histogram.cumulative()) {
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {count}");
            }
            let _ = writeln!(out, "{name}_sum{{{labels}}} {}", histogram.sum());
            let _ = writeln!(out, "{name}_count{{{labels}}} {}", histogram.count());
        }
    }
    if let Some(backlog) = outbox_backlog {
        let _ = writeln!(
            out,
            "# HELP bosun_outbox_backlog Outbox entries not yet sent.\n# TYPE bosun_outbox_backlog gauge\nbosun_outbox_backlog {backlog}"
        );
    }
    // Sampled by the serving process every few seconds: a scrape makes no
    // broker or database call for them.
    let depths = metrics.gauges().queue_depth;
    if !depths.is_empty() {
        let _ = writeln!(
            out,
            "# HELP bosun_queue_depth Active messages (scheduled ones included) in a consumer's queue or subscription, as last sampled.\n# TYPE bosun_queue_depth gauge"
        );
        for ((consumer, entity), depth) in depths {
            let _ = writeln!(
                out,
                "bosun_queue_depth{{consumer=\"{}\",entity=\"{}\"}} {depth}",
                label(&consumer),
                label(&entity)
            );
        }
    }
    let requests = http.snapshot();
    let _ = writeln!(
        out,
        "# HELP bosun_http_requests_total HTTP API requests answered.\n# TYPE bosun_http_requests_total counter"
    );
    for ((method, route, status), (count, _)) in &requests {
        let _ = writeln!(
            out,
            "bosun_http_requests_total{{method=\"{}\",route=\"{}\",status=\"{status}\"}} {count}",
            label(method),
            label(route)
        );
    }
    let _ = writeln!(
        out,
        "# HELP bosun_http_request_seconds_total Time spent answering HTTP API requests.\n# TYPE bosun_http_request_seconds_total counter"
    );
    for ((method, route, status), (_, elapsed)) in &requests {
        let _ = writeln!(
            out,
            "bosun_http_request_seconds_total{{method=\"{}\",route=\"{}\",status=\"{status}\"}} {}",
            label(method),
            label(route),
            elapsed.as_secs_f64()
        );
    }
    let rate_limited = http
        .rate_limited
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let _ = writeln!(
        out,
        "# HELP bosun_http_rate_limited_total Requests refused with 429 because their API key was over its budget.\n# TYPE bosun_http_rate_limited_total counter"
    );
    for (key, count) in &rate_limited {
        let _ = writeln!(out, "bosun_http_rate_limited_total{{key=\"{}\"}} {count}", label(key));
    }
    let refusals = http
        .refusals
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let _ = writeln!(
        out,
        "# HELP bosun_api_refusals_total Requests refused for who the caller is or what it may do, by reason.\n# TYPE bosun_api_refusals_total counter"
    );
    // Every reason from zero, so a rate over it exists before the first
    // refusal.
    for reason in REFUSAL_REASONS {
        let count = refusals.get(reason).copied().unwrap_or(0);
        let _ = writeln!(out, "bosun_api_refusals_total{{reason=\"{reason}\"}} {count}");
    }
    for (name, kind, help, value) in [
        (
            "bosun_http_connections_open",
            "gauge",
            "HTTP connections open now.",
            &http.connections_open,
        ),
        (
            "bosun_http_connections_shed_total",
            "counter",
            "Connections closed at the connection cap because they had waited longest for a request.",
            &http.connections_shed,
        ),
        (
            "bosun_http_connections_timed_out_total",
            "counter",
            "Connections closed because a request head or the next request did not come in time.",
            &http.connections_timed_out,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}",
            value.load(Ordering::Relaxed)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::metrics::Event;

    #[test]
    fn exposition_has_counters_histograms_and_requests() {
        let metrics = Metrics::new();
        metrics.count("commit", "CreateCommit", Event::Processed);
        metrics.count("commit", "CreateCommit", Event::Processed);
        metrics.processing_latency(
            "commit",
            "CreateCommit",
            Duration::from_millis(20),
            Duration::from_secs(2),
        );
        let http = HttpMetrics::default();
        http.record("POST", "/v1/commands/{type}", 202, Duration::from_millis(3));
        http.record_rate_limited("k1");
        http.record_rate_limited("k1");
        http.record_refusal("expired");
        http.record_refusal("expired");
        http.record_refusal("scope");
        http.record_connection_shed();
        http.set_connections_open(3);
        let text = render(&metrics, &http, Some(4));
        let commit = "consumer=\"commit\",message_type=\"CreateCommit\"";
        assert!(
            text.contains(&format!("bosun_messages_processed_total{{{commit}}} 2")),
            "{text}"
        );
        assert!(text.contains(&format!(
            "bosun_processing_duration_seconds_bucket{{{commit},le=\"0.01\"}} 0"
        )));
        assert!(text.contains(&format!(
            "bosun_processing_duration_seconds_bucket{{{commit},le=\"0.025\"}} 1"
        )));
        assert!(text.contains(&format!("bosun_processing_duration_seconds_count{{{commit}}} 1")));
        assert!(text.contains(&format!(
            "bosun_end_to_end_duration_seconds_bucket{{{commit},le=\"1\"}} 0"
        )));
        assert!(text.contains(&format!(
            "bosun_end_to_end_duration_seconds_bucket{{{commit},le=\"2.5\"}} 1"
        )));
        assert!(
            text.contains("# TYPE bosun_handler_duration_seconds histogram"),
            "{text}"
        );
        assert!(text.contains("bosun_outbox_backlog 4"));
        assert!(
            text.contains("bosun_http_requests_total{method=\"POST\",route=\"/v1/commands/{type}\",status=\"202\"} 1")
        );
        assert!(text.contains("bosun_http_rate_limited_total{key=\"k1\"} 2"), "{text}");
        assert!(
            text.contains("bosun_api_refusals_total{reason=\"expired\"} 2"),
            "{text}"
        );
        assert!(text.contains("bosun_api_refusals_total{reason=\"scope\"} 1"), "{text}");
        assert!(
            text.contains("bosun_api_refusals_total{reason=\"revoked\"} 0"),
            "{text}"
        );
        assert!(text.contains("bosun_http_connections_open 3"), "{text}");
        assert!(text.contains("bosun_http_connections_shed_total 1"), "{text}");
        assert!(text.contains("bosun_http_connections_timed_out_total 0"), "{text}");
        assert_eq!(label("a\"b\\c"), "a\\\"b\\\\c");
    }

    /// The consumers' series of an exposition: its lines without `#`
    /// comments, each cut at its value.
    fn series_of(text: &str) -> Vec<String> {
        text.lines()
            .filter(|line| line.starts_with("bosun_") && !line.starts_with("bosun_http"))
            .map(|line| line.rsplit_once(' ').map_or(line, |(series, _)| series).to_owned())
            .collect()
    }

    #[test]
    fn every_consumer_has_its_histograms_from_the_start_and_a_scrape_does_not_grow() {
        let metrics = Metrics::new();
        for route in bosun_contracts::routing::CONSUMERS {
            metrics.register(route.name, route.commands.iter().chain(route.events).copied());
        }
        let http = HttpMetrics::default();
        let at_start = render(&metrics, &http, None);
        for route in bosun_contracts::routing::CONSUMERS {
            for message_type in route.commands.iter().chain(route.events) {
                for name in [
                    "bosun_handler_duration_seconds",
                    "bosun_processing_duration_seconds",
                    "bosun_end_to_end_duration_seconds",
                ] {
                    let labels = format!("consumer=\"{}\",message_type=\"{message_type}\"", route.name);
                    for bound in ["0.001", "0.1", "1", "60", "+Inf"] {
                        let bucket = format!("{name}_bucket{{{labels},le=\"{bound}\"}} 0\n");
                        assert!(at_start.contains(&bucket), "no {bucket} at start");
                    }
                }
                let processed = format!(
                    "bosun_messages_processed_total{{consumer=\"{}\",message_type=\"{message_type}\"}} 0\n",
                    route.name
                );
                assert!(at_start.contains(&processed), "no {processed} at start");
            }
        }
        let handle = |n: u32| {
            for i in 0..n {
                let took = Duration::from_micros(u64::from(i % 5_000) * 97);
                metrics.handler_latency("commit", "CreateCommit", took);
                metrics.processing_latency("commit", "CreateCommit", took, took * 3);
                metrics.count("commit", "CreateCommit", Event::Processed);
            }
        };
        handle(1);
        let after_one = render(&metrics, &http, None);
        handle(20_000);
        let after_many = render(&metrics, &http, None);
        assert_eq!(series_of(&at_start), series_of(&after_one));
        assert_eq!(series_of(&after_one), series_of(&after_many));
        assert_eq!(after_one.lines().count(), after_many.lines().count());
        assert!(
            after_many
                .contains("bosun_messages_processed_total{consumer=\"commit\",message_type=\"CreateCommit\"} 20001\n")
        );
    }
}
