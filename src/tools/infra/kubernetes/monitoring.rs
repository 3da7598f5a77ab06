//! `monitoring.yaml` of the base: a Prometheus Operator `PodMonitor`
//! scraping `/metrics` on the ops port ([`OPS_PORT`](crate::tools::infra::OPS_PORT)) of every bosun pod,
//! and a `PrometheusRule` with bosun's alerts ([`alerts`]), their
//! thresholds from [`AlertThresholds`]. Both need the Prometheus Operator
//! (its CRDs, and a Prometheus selecting them); the dashboard is
//! [`super::dashboard`].
//!
//! Every series gets `job="bosun"` (the pods' `app.kubernetes.io/name`,
//! whatever namespace the overlay sets) and the operator's `namespace` and
//! `pod` labels; the alerts select `job="bosun"` only.

use std::time::Duration;

use serde_json::{Value, json};

use super::labels;

/// The `job` label of every series scraped from a bosun pod: the value of
/// the pods' `app.kubernetes.io/name` label (the PodMonitor's `jobLabel`).
pub const JOB: &str = "bosun";
/// The component label of the monitoring objects.
pub const COMPONENT: &str = "monitoring";
/// The name of the PodMonitor and of the PrometheusRule.
pub const NAME: &str = "bosun";
/// How often Prometheus scrapes each pod.
pub const SCRAPE_INTERVAL: &str = "30s";

/// When the rendered alerts fire: each threshold, and how long it must
/// hold before the alert fires (its `for:`). [`Default`] gives the
/// rendered values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertThresholds {
    /// The window over which new dead letters are counted per consumer
    /// (15 minutes): the alert stays while a dead letter is in it.
    pub dead_letter_window: Duration,
    /// How long dead letters must keep showing in the window (1 minute).
    pub dead_letter_for: Duration,
    /// How long a pod may say it is not ready (`bosun_ready == 0`) before
    /// it alerts (5 minutes: a draining pod is not ready for less).
    pub not_ready_for: Duration,
    /// How long a consumer may not be receiving
    /// (`bosun_consumer_receiving == 0`) before it alerts (5 minutes).
    pub not_receiving_for: Duration,
    /// The depth (active messages, scheduled ones included) of a queue or
    /// subscription above which a growing depth alerts (100).
    pub queue_depth: u64,
    /// The window over which the depth's growth is measured (`deriv`,
    /// 10 minutes).
    pub queue_growth_window: Duration,
    /// How long the depth must keep growing above [`Self::queue_depth`]
    /// (15 minutes: longer than KEDA takes to scale a consumer out).
    pub queue_growing_for: Duration,
    /// How long Prometheus may fail to scrape a pod (`up == 0`) before it
    /// alerts (10 minutes: longer than the startup probe's 5, so a slow
    /// start or a long migration in the init container does not alert).
    pub pod_down_for: Duration,
    /// The 95th percentile of the processing time (receive to settle)
    /// above which a consumer is slow (30 seconds; the histogram's
    /// buckets end at 60).
    pub slow_p95: Duration,
    /// The window of the processing time's percentile (10 minutes).
    pub slow_window: Duration,
    /// How long the percentile must stay above [`Self::slow_p95`]
    /// (15 minutes).
    pub slow_for: Duration,
}

impl Default for AlertThresholds {
    fn default() -> Self {
        let minutes = |n: u64| Duration::from_secs(n * 60);
        Self {
            dead_letter_window: minutes(15),
            dead_letter_for: minutes(1),
            not_ready_for: minutes(5),
            not_receiving_for: minutes(5),
            queue_depth: 100,
            queue_growth_window: minutes(10),
            queue_growing_for: minutes(15),
            pod_down_for: minutes(10),
            slow_p95: Duration::from_secs(30),
            slow_window: minutes(10),
            slow_for: minutes(15),
        }
    }
}

/// How serious an alert is: its `severity` label, on which Alertmanager
/// routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Work is stopped or pods are gone: act now.
    Critical,
    /// Something needs a look within the working day.
    Warning,
}

impl Severity {
    /// The label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Critical => "critical",
            Self::Warning => "warning",
        }
    }
}

/// One alerting rule of the PrometheusRule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    /// The alert's name (`alertname`).
    pub name: &'static str,
    /// The PromQL expression: one result per thing that is wrong.
    pub expr: String,
    /// How long the expression must hold (`for:`).
    pub for_: Duration,
    /// The `severity` label.
    pub severity: Severity,
    /// One line naming what is wrong (`summary`), with `{{ $labels.X }}`.
    pub summary: String,
    /// What it means (`description`).
    pub description: String,
    /// What to do, in plain words (`runbook`).
    pub runbook: &'static str,
}

/// A duration as PromQL writes it: `15m`, `1h`, `30s`, `500ms`.
pub fn promql_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if !millis.is_multiple_of(1000) || millis == 0 {
        format!("{millis}ms")
    } else if millis.is_multiple_of(3_600_000) {
        format!("{}h", millis / 3_600_000)
    } else if millis.is_multiple_of(60_000) {
        format!("{}m", millis / 60_000)
    } else {
        format!("{}s", millis / 1000)
    }
}

/// bosun's alerts with `thresholds`, in the order the PrometheusRule lists
/// them.
pub fn alerts(thresholds: &AlertThresholds) -> Vec<Alert> {
    let t = thresholds;
    let job = format!("{{job=\"{JOB}\"}}");
    let dead_window = promql_duration(t.dead_letter_window);
    let growth = promql_duration(t.queue_growth_window);
    let slow_window = promql_duration(t.slow_window);
    let slow = t.slow_p95.as_secs_f64();
    let depth_by = "max by (namespace, consumer, entity)";
    vec![
        Alert {
            name: "BosunDeadLettersGrowing",
            expr: format!(
                "sum by (namespace, consumer) (increase(bosun_messages_dead_lettered_total{job}[{dead_window}])) > 0"
            ),
            for_: t.dead_letter_for,
            severity: Severity::Warning,
            summary: "{{ $labels.consumer }} dead-lettered messages".to_owned(),
            description: format!(
                "The consumer {{{{ $labels.consumer }}}} in {{{{ $labels.namespace }}}} dead-lettered messages in \
                 the last {dead_window}: bosun will not handle them again on its own."
            ),
            runbook: "List them with `bosun dead-letters groups --consumer CONSUMER` (or the console's dead \
                      letters page), read the reason of each group, fix the cause (the input, a dependency, \
                      the identity's rights, a bug), then replay them with `bosun dead-letters replay --group \
                      ID` or purge what is not wanted.",
        },
        Alert {
            name: "BosunPodNotReady",
            expr: format!("bosun_ready{job} == 0"),
            for_: t.not_ready_for,
            severity: Severity::Warning,
            summary: "{{ $labels.pod }} is not ready".to_owned(),
            description: format!(
                "The pod {{{{ $labels.pod }}}} in {{{{ $labels.namespace }}}} has said it is not ready for {}: \
                 Kubernetes sends it no traffic and a rollout waits for it.",
                promql_duration(t.not_ready_for)
            ),
            runbook: "Ask the pod which check fails: `kubectl port-forward POD 9090` then `curl \
                      localhost:9090/readyz` (transport: Service Bus; store: PostgreSQL; schema: a \
                      migration is missing, see the migrate init container's log or run `bosun migrate`; \
                      draining: it is shutting down). Read the pod's log for the cause.",
        },
        Alert {
            name: "BosunConsumerNotReceiving",
            expr: format!("bosun_consumer_receiving{job} == 0"),
            for_: t.not_receiving_for,
            severity: Severity::Critical,
            summary: "{{ $labels.consumer }} is not receiving in {{ $labels.pod }}".to_owned(),
            description: format!(
                "The consumer {{{{ $labels.consumer }}}} in the pod {{{{ $labels.pod }}}} has not been receiving \
                 messages for {}: its work waits in its queue.",
                promql_duration(t.not_receiving_for)
            ),
            runbook: "Read the pod's log for the receive error: Service Bus unreachable, the identity's \
                      rights on the queue or subscription (infra/bicep), an entity missing (`bosun topology \
                      plan`). Delete the pod if it does not recover once the cause is gone.",
        },
        Alert {
            name: "BosunQueueGrowing",
            expr: format!(
                "({depth_by} (deriv(bosun_queue_depth{job}[{growth}])) > 0 and {depth_by} (bosun_queue_depth{job}) > {}) \
                 unless on (namespace, consumer) max by (namespace, consumer) (bosun_consumer_paused{job}) == 1",
                t.queue_depth
            ),
            for_: t.queue_growing_for,
            severity: Severity::Warning,
            summary: "{{ $labels.entity }} of {{ $labels.consumer }} keeps growing".to_owned(),
            description: format!(
                "{{{{ $labels.entity }}}} of the consumer {{{{ $labels.consumer }}}} in {{{{ $labels.namespace }}}} \
                 holds over {} messages and has kept growing for {}: messages arrive faster than they are \
                 handled.",
                t.queue_depth,
                promql_duration(t.queue_growing_for)
            ),
            runbook: "Check that KEDA scaled the consumer out (`kubectl get scaledobject,hpa`; at its maximum \
                      replicas it needs a higher one), that its pods are ready and receiving, and whether \
                      handling got slower (the dashboard's handling time): a slow dependency or a stuck \
                      saga holds the queue. A consumer an operator paused (`bosun consumers list`) does not \
                      raise it: its queue is meant to grow until it is resumed.",
        },
        Alert {
            name: "BosunPodDown",
            expr: format!("up{job} == 0"),
            for_: t.pod_down_for,
            severity: Severity::Critical,
            summary: "{{ $labels.pod }} cannot be scraped".to_owned(),
            description: format!(
                "Prometheus has not reached /metrics on the ops port of {{{{ $labels.pod }}}} in \
                 {{{{ $labels.namespace }}}} for {}.",
                promql_duration(t.pod_down_for)
            ),
            runbook: "`kubectl describe pod POD` and `kubectl logs POD` (and `-c migrate`): it is crash \
                      looping, stuck in its migrate init container, or out of memory. If the pod runs \
                      and answers `/healthz`, a NetworkPolicy or the PodMonitor's port keeps Prometheus \
                      out.",
        },
        Alert {
            name: "BosunHandlingSlow",
            expr: format!(
                "histogram_quantile(0.95, sum by (namespace, consumer, le) \
                 (rate(bosun_processing_duration_seconds_bucket{job}[{slow_window}]))) > {slow}"
            ),
            for_: t.slow_for,
            severity: Severity::Warning,
            summary: "{{ $labels.consumer }} handles messages slowly".to_owned(),
            description: format!(
                "The 95th percentile of {{{{ $labels.consumer }}}}'s processing time (receive to settle) in \
                 {{{{ $labels.namespace }}}} has been over {slow} s for {}.",
                promql_duration(t.slow_for)
            ),
            runbook: "Look at the traces of slow deliveries (the handler span's time) and the dependency \
                      they wait for (Azure DevOps, ACR, PostgreSQL, Service Bus); saga conflicts \
                      (bosun_saga_conflicts_total) and CPU throttling of the pod slow it too.",
        },
    ]
}

/// The PodMonitor: every pod labelled `app.kubernetes.io/name: bosun` in
/// its namespace, `/metrics` on the `ops` port every [`SCRAPE_INTERVAL`],
/// with the pod's component as the `component` label.
pub fn pod_monitor() -> Value {
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": NAME, "labels": labels(COMPONENT)},
        "spec": {
            "jobLabel": "app.kubernetes.io/name",
            "selector": {"matchLabels": {"app.kubernetes.io/name": JOB}},
            "podMetricsEndpoints": [{
                "port": "ops",
                "path": "/metrics",
                "interval": SCRAPE_INTERVAL,
                "relabelings": [{
                    "sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_component"],
                    "targetLabel": "component",
                }],
            }],
        },
    })
}

/// The PrometheusRule: one group, `bosun`, with [`alerts`].
pub fn prometheus_rule(thresholds: &AlertThresholds) -> Value {
    let rules: Vec<Value> = alerts(thresholds)
        .into_iter()
        .map(|alert| {
            json!({
                "alert": alert.name,
                "expr": alert.expr,
                "for": promql_duration(alert.for_),
                "labels": {"severity": alert.severity.as_str()},
                "annotations": {
                    "summary": alert.summary,
                    "description": alert.description,
                    "runbook": alert.runbook,
                },
            })
        })
        .collect();
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": NAME, "labels": labels(COMPONENT)},
        "spec": {"groups": [{"name": "bosun", "rules": rules}]},
    })
}

/// The objects of `monitoring.yaml`.
pub fn objects(thresholds: &AlertThresholds) -> Vec<Value> {
    vec![pod_monitor(), prometheus_rule(thresholds)]
}
