//! `/metrics` in the Prometheus text exposition format (version 0.0.4):
//! the host's per-consumer counters and latency quantiles, the outbox
//! backlog, the HTTP API's requests by route and status, and what the
//! front door refused: requests over a key's budget, connections shed at
//! the connection cap or closed for taking too long.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::runtime::metrics::{ConsumerSnapshot, Metrics};

/// (method, route template, status) -> (requests, total time).
type RequestCounts = BTreeMap<(String, String, u16), (u64, Duration)>;

/// A consumer counter: name, help, and how to read it from a snapshot.
type Counter = (&'static str, &'static str, fn(&ConsumerSnapshot) -> u64);

/// Requests the API answered, by method, route template and status, and
/// what the front door refused.
#[derive(Debug, Default)]
pub struct HttpMetrics {
    requests: Mutex<RequestCounts>,
    /// key id -> requests refused with 429.
    rate_limited: Mutex<BTreeMap<String, u64>>,
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
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The whole exposition.
pub fn render(metrics: &Metrics, http: &HttpMetrics, outbox_backlog: Option<u64>) -> String {
    let mut out = String::new();
    let consumers = metrics.snapshot();
    let counters: [Counter; 5] = [
        (
            "bosun_messages_processed_total",
            "Messages handled and committed.",
            |c| c.processed,
        ),
        (
            "bosun_messages_retried_total",
            "Transient failures that scheduled a retry.",
            |c| c.retried,
        ),
        (
            "bosun_messages_dead_lettered_total",
            "Messages dead-lettered by the host.",
            |c| c.dead_lettered,
        ),
        (
            "bosun_messages_duplicate_total",
            "Redeliveries of messages already handled.",
            |c| c.duplicates,
        ),
        (
            "bosun_saga_conflicts_total",
            "Saga version conflicts (each reloaded and re-applied).",
            |c| c.saga_conflicts,
        ),
    ];
    for (name, help, value) in counters {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for consumer in &consumers {
            let _ = writeln!(
                out,
                "{name}{{consumer=\"{}\"}} {}",
                label(&consumer.consumer),
                value(consumer)
            );
        }
    }
    for (name, help, which) in [
        (
            "bosun_handler_duration_seconds",
            "Time inside the consumer's handler.",
            true,
        ),
        (
            "bosun_processing_duration_seconds",
            "Time from receive to settle.",
            false,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} summary");
        for consumer in &consumers {
            let m = metrics.consumer(&consumer.consumer);
            let latency = if which { &m.handler } else { &m.processing };
            let consumer = label(&consumer.consumer);
            for quantile in [0.5, 0.9, 0.99] {
                let _ = writeln!(
                    out,
                    "{name}{{consumer=\"{consumer}\",quantile=\"{quantile}\"}} {}",
                    latency.percentile(quantile).as_secs_f64()
                );
            }
            let sum = latency.mean().as_secs_f64() * latency.count() as f64;
            let _ = writeln!(out, "{name}_sum{{consumer=\"{consumer}\"}} {sum}");
            let _ = writeln!(out, "{name}_count{{consumer=\"{consumer}\"}} {}", latency.count());
        }
    }
    if let Some(backlog) = outbox_backlog {
        let _ = writeln!(
            out,
            "# HELP bosun_outbox_backlog Outbox entries not yet sent.\n# TYPE bosun_outbox_backlog gauge\nbosun_outbox_backlog {backlog}"
        );
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
    fn exposition_has_counters_quantiles_and_requests() {
        let metrics = Metrics::new();
        metrics.count("commit", Event::Processed);
        metrics.count("commit", Event::Processed);
        metrics.processing_latency("commit", Duration::from_millis(20));
        let http = HttpMetrics::default();
        http.record("POST", "/v1/commands/{type}", 202, Duration::from_millis(3));
        http.record_rate_limited("k1");
        http.record_rate_limited("k1");
        http.record_connection_shed();
        http.set_connections_open(3);
        let text = render(&metrics, &http, Some(4));
        assert!(
            text.contains("bosun_messages_processed_total{consumer=\"commit\"} 2"),
            "{text}"
        );
        assert!(text.contains("bosun_processing_duration_seconds{consumer=\"commit\",quantile=\"0.5\"} 0.02"));
        assert!(text.contains("bosun_processing_duration_seconds_count{consumer=\"commit\"} 1"));
        assert!(text.contains("bosun_outbox_backlog 4"));
        assert!(
            text.contains("bosun_http_requests_total{method=\"POST\",route=\"/v1/commands/{type}\",status=\"202\"} 1")
        );
        assert!(text.contains("bosun_http_rate_limited_total{key=\"k1\"} 2"), "{text}");
        assert!(text.contains("bosun_http_connections_open 3"), "{text}");
        assert!(text.contains("bosun_http_connections_shed_total 1"), "{text}");
        assert!(text.contains("bosun_http_connections_timed_out_total 0"), "{text}");
        assert_eq!(label("a\"b\\c"), "a\\\"b\\\\c");
    }
}
