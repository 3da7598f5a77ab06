//! `dashboard.yaml` of the base: bosun's Grafana dashboard, as a ConfigMap
//! labelled `grafana_dashboard: "1"` so Grafana's dashboard sidecar (the
//! kube-prometheus-stack chart's, `k8s-sidecar`) loads it. The dashboard
//! reads the series the PodMonitor scrapes ([`super::monitoring`]): a
//! `datasource` variable picks the Prometheus data source, a `namespace`
//! variable the environment.

use serde_json::{Value, json};

use super::labels;
use super::monitoring::{COMPONENT, JOB};

/// The ConfigMap's name.
pub const CONFIG_MAP: &str = "bosun-dashboard";
/// The key of the dashboard's JSON in the ConfigMap (the sidecar writes it
/// as this file name).
pub const FILE: &str = "bosun.json";
/// The dashboard's uid (its URL: `/d/bosun`).
pub const UID: &str = "bosun";
/// The Grafana dashboard schema version the JSON is written in.
pub const SCHEMA_VERSION: u32 = 39;

/// How a panel draws its series.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    /// A time series of lines.
    Lines,
    /// A time series of stacked bars: events, not a level between samples.
    Bars,
    /// A state timeline of yes (1) and no (0).
    States,
}

/// One panel: its title, what it shows, how and in what unit, and its
/// queries (expression, legend).
struct Panel {
    title: &'static str,
    description: &'static str,
    style: Style,
    unit: &'static str,
    targets: Vec<(String, &'static str)>,
}

/// The data source every panel and query uses: the `datasource` variable.
fn datasource() -> Value {
    json!({"type": "prometheus", "uid": "${datasource}"})
}

fn panels() -> Vec<Panel> {
    let of = format!("{{job=\"{JOB}\", namespace=\"$namespace\"}}");
    let rate = |metric: &str, by: &str| format!("sum by ({by}) (rate({metric}{of}[$__rate_interval]))");
    let quantile = |q: &str| {
        format!(
            "histogram_quantile({q}, sum by (consumer, le) (rate(bosun_processing_duration_seconds_bucket{of}[$__rate_interval])))"
        )
    };
    vec![
        Panel {
            title: "Queue depth per consumer",
            description: "Active messages (scheduled ones included) in each consumer's queue and subscription, as its pods last sampled them.",
            style: Style::Lines,
            unit: "short",
            targets: vec![(
                format!("max by (consumer, entity) (bosun_queue_depth{of})"),
                "{{consumer}} {{entity}}",
            )],
        },
        Panel {
            title: "Throughput",
            description: "Messages handled and committed per second, per consumer.",
            style: Style::Lines,
            unit: "ops",
            targets: vec![(rate("bosun_messages_processed_total", "consumer"), "{{consumer}}")],
        },
        Panel {
            title: "Failure rate",
            description: "Messages dead-lettered by bosun per message handled, per consumer.",
            style: Style::Lines,
            unit: "percentunit",
            targets: vec![(
                format!(
                    "{} / {}",
                    rate("bosun_messages_dead_lettered_total", "consumer"),
                    rate("bosun_messages_processed_total", "consumer")
                ),
                "{{consumer}}",
            )],
        },
        Panel {
            title: "Handling time p50 / p95",
            description: "Processing time from receive to settle (idempotency check, saga, handler, commit), per consumer.",
            style: Style::Lines,
            unit: "s",
            targets: vec![
                (quantile("0.5"), "{{consumer}} p50"),
                (quantile("0.95"), "{{consumer}} p95"),
            ],
        },
        Panel {
            title: "Dead letters",
            description: "Messages dead-lettered by bosun, per consumer and message type: list them with `bosun dead-letters groups`.",
            style: Style::Bars,
            unit: "short",
            targets: vec![(
                format!(
                    "sum by (consumer, message_type) (increase(bosun_messages_dead_lettered_total{of}[$__rate_interval]))"
                ),
                "{{consumer}} {{message_type}}",
            )],
        },
        Panel {
            title: "Readiness per pod",
            description: "1 when the pod is ready (/readyz), each of its consumers is receiving, and Prometheus scrapes it; 0 when not.",
            style: Style::States,
            unit: "short",
            targets: vec![
                (format!("max by (pod) (bosun_ready{of})"), "{{pod}} ready"),
                (
                    format!("min by (pod) (bosun_consumer_receiving{of})"),
                    "{{pod}} receiving",
                ),
                (format!("max by (pod) (up{of})"), "{{pod}} scraped"),
            ],
        },
        Panel {
            title: "HTTP requests",
            description: "Requests the API answered per second, by route and status, and those the front door refused, by reason.",
            style: Style::Lines,
            unit: "reqps",
            targets: vec![
                (
                    rate("bosun_http_requests_total", "route, status"),
                    "{{route}} {{status}}",
                ),
                (rate("bosun_api_refusals_total", "reason"), "refused: {{reason}}"),
            ],
        },
    ]
}

/// A panel's JSON at `grid` (`gridPos`), numbered `id`.
fn panel_json(id: usize, panel: &Panel, grid: Value) -> Value {
    let targets: Vec<Value> = panel
        .targets
        .iter()
        .zip('A'..='Z')
        .map(|((expr, legend), ref_id)| {
            json!({
                "refId": ref_id.to_string(),
                "datasource": datasource(),
                "expr": expr,
                "legendFormat": legend,
                "range": true,
            })
        })
        .collect();
    let mut defaults = json!({"unit": panel.unit});
    let kind = match panel.style {
        Style::Lines => "timeseries",
        Style::Bars => {
            defaults["custom"] = json!({"drawStyle": "bars", "fillOpacity": 80, "stacking": {"mode": "normal"}});
            "timeseries"
        }
        Style::States => {
            defaults["mappings"] = json!([{
                "type": "value",
                "options": {
                    "0": {"text": "no", "color": "red", "index": 0},
                    "1": {"text": "yes", "color": "green", "index": 1},
                },
            }]);
            "state-timeline"
        }
    };
    json!({
        "id": id,
        "type": kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": datasource(),
        "gridPos": grid,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": true},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": targets,
    })
}

/// The dashboard: [`SCHEMA_VERSION`], the `datasource` and `namespace`
/// variables, and the panels two to a row (a last odd one full width).
pub fn dashboard() -> Value {
    let panels = panels();
    let count = panels.len();
    let panels: Vec<Value> = panels
        .iter()
        .enumerate()
        .map(|(i, panel)| {
            let alone = i + 1 == count && count % 2 == 1;
            let grid = json!({
                "h": 8,
                "w": if alone { 24 } else { 12 },
                "x": if i % 2 == 0 { 0 } else { 12 },
                "y": (i / 2) * 8,
            });
            panel_json(i + 1, panel, grid)
        })
        .collect();
    let namespaces = format!("label_values(up{{job=\"{JOB}\"}}, namespace)");
    json!({
        "uid": UID,
        "title": "bosun",
        "description": "bosun's consumers, pods and API, from the series its PodMonitor scrapes (rendered by `bosun infra render`).",
        "tags": ["bosun"],
        "editable": true,
        "graphTooltip": 1,
        "timezone": "browser",
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [
            {
                "name": "datasource",
                "label": "Data source",
                "type": "datasource",
                "query": "prometheus",
                "current": {},
                "hide": 0,
                "refresh": 1,
                "regex": "",
                "options": [],
            },
            {
                "name": "namespace",
                "label": "Namespace",
                "type": "query",
                "datasource": datasource(),
                "query": namespaces,
                "definition": namespaces,
                "current": {},
                "hide": 0,
                "refresh": 2,
                "sort": 1,
                "includeAll": false,
                "multi": false,
                "options": [],
            },
        ]},
        "panels": panels,
    })
}

/// The ConfigMap carrying [`dashboard`] as [`FILE`], for Grafana's
/// dashboard sidecar.
pub fn config_map() -> Value {
    let mut labels = labels(COMPONENT);
    labels["grafana_dashboard"] = json!("1");
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP, "labels": labels},
        "data": {FILE: dashboard().to_string()},
    })
}
