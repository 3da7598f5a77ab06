//! The rendered monitoring: the PodMonitor scrapes what the pods serve, the
//! alerts and the dashboard ask only for series bosun exports, and the
//! dashboard is a Grafana dashboard the sidecar loads.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use super::kubernetes::AlertThresholds;
use super::kubernetes::dashboard::{self, FILE};
use super::kubernetes::monitoring::{self, JOB, promql_duration};
use super::tests::{base_objects, default_files, kind_of, parse_documents};
use super::*;
use crate::front::http::prometheus::{self, HttpMetrics};
use crate::runtime::metrics::{Gauges, Metrics};

/// Every metric name `/metrics` exports (a histogram's `_bucket`, `_sum`
/// and `_count`), read from an exposition with every series present, and
/// readiness's and each consumer's receiving.
pub(super) fn exported_metrics() -> BTreeSet<String> {
    let metrics = Metrics::new();
    for route in bosun_contracts::routing::CONSUMERS {
        metrics.register(route.name, route.commands.iter().chain(route.events).copied());
    }
    let mut gauges = Gauges::default();
    gauges.queue_depth.insert(("commit".to_owned(), "commit".to_owned()), 1);
    metrics.set_gauges(gauges);
    let http = HttpMetrics::default();
    http.record("GET", "/v1/deliveries", 200, Duration::from_millis(1));
    let text = prometheus::render(&metrics, &http, Some(0));
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        if kind == "histogram" {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        } else {
            names.insert(name.to_owned());
        }
    }
    assert!(names.contains("bosun_queue_depth"), "{names:?}");
    // Readiness and each consumer's receiving, as `/metrics` renders them.
    let receiving = crate::runtime::receiving::Receiving::default();
    receiving.register("commit", "commit");
    let readiness = crate::front::ops::Readiness {
        ready: true,
        checks: Default::default(),
        observed: Default::default(),
        paused: Vec::new(),
    };
    for line in crate::front::ops::health::render(&readiness, &receiving).lines() {
        if let Some((name, _)) = line.strip_prefix("# TYPE ").and_then(|rest| rest.split_once(' ')) {
            names.insert(name.to_owned());
        }
    }
    names
}

/// PromQL's words that are not metrics: functions are followed by `(`;
/// these may not be (`max by (x) (...)`).
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];
/// Keywords followed by a list of label names.
const LABEL_LISTS: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];

/// The metric names an expression selects: the identifiers outside label
/// matchers (`{...}`), ranges (`[...]`) and strings that are neither a
/// function, a keyword nor a label list.
pub(super) fn metric_names(expr: &str) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let skip_to = |from: usize, close: char| {
        let mut j = from;
        let mut quoted = false;
        while j < chars.len() && (quoted || chars[j] != close) {
            if chars[j] == '"' {
                quoted = !quoted;
            }
            j += 1;
        }
        j + 1
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '{' || c == '[' || c == '"' {
            i = skip_to(
                i + 1,
                if c == '{' {
                    '}'
                } else if c == '[' {
                    ']'
                } else {
                    '"'
                },
            );
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace()).copied();
            if LABEL_LISTS.contains(&word.as_str()) {
                let open = i + chars[i..].iter().position(|c| *c == '(').unwrap();
                i = skip_to(open + 1, ')');
            } else if next != Some('(') && !KEYWORDS.contains(&word.as_str()) {
                names.push(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn metric_names_are_read_from_promql() {
    assert_eq!(
        metric_names(
            "histogram_quantile(0.95, sum by (consumer, le) (rate(a_bucket{job=\"x\", le!=\"{b}\"}[5m]))) > 1e3 \
             and on (pod) up offset 5m / ignoring(x) group_left (y) c"
        ),
        ["a_bucket", "up", "c"]
    );
}

/// Every expression of `what` names a metric bosun exports, or `up`, and
/// selects the PodMonitor's job.
fn assert_known_metrics(what: &str, expr: &str, known: &BTreeSet<String>) {
    let names = metric_names(expr);
    assert!(!names.is_empty(), "{what}: no metric in {expr}");
    for name in names {
        assert!(
            name == "up" || known.contains(&name),
            "{what}: {name} is not a metric bosun exports ({expr})"
        );
    }
    assert!(expr.contains(&format!("job=\"{JOB}\"")), "{what}: {expr}");
}

fn rendered(kind: &str) -> Value {
    base_objects(&default_files())
        .into_iter()
        .map(|(_, object)| object)
        .find(|object| kind_of(object) == kind)
        .unwrap_or_else(|| panic!("no {kind} in the base"))
}

#[test]
fn the_pod_monitor_scrapes_the_ops_port_of_every_bosun_pod() {
    let files = default_files();
    let kustomization = files
        .iter()
        .find(|file| file.path == "kubernetes/base/kustomization.yaml")
        .unwrap();
    let resources = &parse_documents(&kustomization.text)[0]["resources"];
    for file in ["monitoring.yaml", "dashboard.yaml"] {
        assert!(resources.as_array().unwrap().contains(&file.into()), "{resources}");
    }
    let monitor = rendered("PodMonitor");
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    let selector = monitor["spec"]["selector"]["matchLabels"].as_object().unwrap();
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    let mut deployments = 0;
    for (path, object) in base_objects(&files) {
        if kind_of(&object) != "Deployment" {
            continue;
        }
        deployments += 1;
        let template = &object["spec"]["template"];
        for (label, value) in selector {
            assert_eq!(&template["metadata"]["labels"][label], value, "{path}: {label}");
        }
        let job_label = monitor["spec"]["jobLabel"].as_str().unwrap();
        assert_eq!(template["metadata"]["labels"][job_label], JOB, "{path}");
        let bosun = &template["spec"]["containers"][0];
        let port = bosun["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|port| port["name"] == endpoint["port"])
            .unwrap_or_else(|| panic!("{path}: no port {}", endpoint["port"]));
        assert_eq!(port["containerPort"], OPS_PORT, "{path}");
    }
    assert_eq!(deployments, consumers().len() + 1, "every consumer's and the API's");
}

#[test]
fn every_alert_says_how_serious_for_how_long_what_and_what_to_do_with_exported_metrics() {
    let known = exported_metrics();
    let rule = rendered("PrometheusRule");
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    let names: Vec<&str> = rules.iter().map(|rule| rule["alert"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "BosunDeadLettersGrowing",
            "BosunPodNotReady",
            "BosunConsumerNotReceiving",
            "BosunQueueGrowing",
            "BosunPodDown",
            "BosunHandlingSlow",
        ]
    );
    for rule in rules {
        let name = rule["alert"].as_str().unwrap();
        assert_known_metrics(name, rule["expr"].as_str().unwrap(), &known);
        assert!(rule["for"].as_str().is_some_and(|d| d.ends_with('m')), "{name}: {rule}");
        assert!(
            matches!(rule["labels"]["severity"].as_str(), Some("critical" | "warning")),
            "{name}"
        );
        for annotation in ["summary", "description", "runbook"] {
            let text = rule["annotations"][annotation].as_str().unwrap_or_default();
            assert!(text.len() > 20, "{name}: {annotation} {text:?}");
            assert!(!text.contains("$value"), "{name}: the promtool test expects no $value");
        }
    }
    let expr = |name: &str| {
        rules.iter().find(|rule| rule["alert"] == name).unwrap()["expr"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(expr("BosunDeadLettersGrowing").contains("by (namespace, consumer)"));
    assert!(expr("BosunQueueGrowing").contains("deriv(bosun_queue_depth"));
}

#[test]
fn the_thresholds_are_the_renderers_settings() {
    assert_eq!(promql_duration(Duration::from_secs(900)), "15m");
    assert_eq!(promql_duration(Duration::from_secs(7200)), "2h");
    assert_eq!(promql_duration(Duration::from_secs(90)), "90s");
    assert_eq!(promql_duration(Duration::from_millis(1500)), "1500ms");
    let thresholds = AlertThresholds {
        queue_depth: 500,
        queue_growing_for: Duration::from_secs(1800),
        slow_p95: Duration::from_millis(2500),
        ..AlertThresholds::default()
    };
    let alerts = monitoring::alerts(&thresholds);
    let queue = alerts.iter().find(|alert| alert.name == "BosunQueueGrowing").unwrap();
    assert!(queue.expr.contains(") > 500)"), "{}", queue.expr);
    assert_eq!(queue.for_, Duration::from_secs(1800));
    assert!(queue.description.contains("30m"), "{}", queue.description);
    let slow = alerts.iter().find(|alert| alert.name == "BosunHandlingSlow").unwrap();
    assert!(slow.expr.ends_with("> 2.5"), "{}", slow.expr);
    let settings = InfraSettings::from_settings(&Settings::with_data_dir(".bosun")).unwrap();
    assert_eq!(settings.alerts, AlertThresholds::default());
}

/// The dashboard's JSON, from the rendered ConfigMap.
fn rendered_dashboard() -> Value {
    let config_map = base_objects(&default_files())
        .into_iter()
        .map(|(_, object)| object)
        .find(|object| kind_of(object) == "ConfigMap" && object["metadata"]["name"] == dashboard::CONFIG_MAP)
        .unwrap();
    assert_eq!(config_map["metadata"]["labels"]["grafana_dashboard"], "1");
    serde_json::from_str(config_map["data"][FILE].as_str().unwrap()).unwrap()
}

#[test]
fn the_dashboard_is_grafana_json_whose_panels_query_only_exported_metrics() {
    let known = exported_metrics();
    let dashboard = rendered_dashboard();
    assert_eq!(dashboard["uid"], dashboard::UID);
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let datasource = variables.iter().find(|v| v["name"] == "datasource").unwrap();
    assert_eq!(datasource["type"], "datasource");
    assert_eq!(datasource["query"], "prometheus");
    let panels = dashboard["panels"].as_array().unwrap();
    let mut ids = BTreeSet::new();
    let mut cells = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap();
        assert!(ids.insert(panel["id"].as_u64().unwrap()), "{title}: its id is taken");
        assert!(
            matches!(panel["type"].as_str(), Some("timeseries" | "state-timeline")),
            "{title}"
        );
        let grid = &panel["gridPos"];
        let [h, w, x, y] = ["h", "w", "x", "y"].map(|key| {
            grid[key]
                .as_u64()
                .unwrap_or_else(|| panic!("{title}: gridPos.{key} in {grid}"))
        });
        assert!(h > 0 && w > 0 && x + w <= 24, "{title}: {grid}");
        for row in y..y + h {
            for column in x..x + w {
                assert!(cells.insert((row, column)), "{title} overlaps another panel");
            }
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no targets");
        for target in targets {
            assert!(target["refId"].as_str().is_some(), "{title}");
            assert_known_metrics(title, target["expr"].as_str().unwrap(), &known);
        }
    }
    let titles: Vec<&str> = panels.iter().map(|panel| panel["title"].as_str().unwrap()).collect();
    for wanted in [
        "Queue depth per consumer",
        "Throughput",
        "Failure rate",
        "Handling time p50 / p95",
        "Dead letters",
        "Readiness per pod",
        "HTTP requests",
    ] {
        assert!(titles.contains(&wanted), "{wanted} in {titles:?}");
    }
}

/// The Prometheus Operator's objects, field by field, against its
/// documented API (prometheus-operator.dev, API reference: PodMonitorSpec,
/// PodMetricsEndpoint, RelabelConfig, PrometheusRuleSpec, RuleGroup, Rule),
/// as the KEDA objects are in `tests.rs`: kubernetes-validate has no
/// schema for them.
#[test]
fn monitoring_objects_have_the_documented_shape() {
    let keys = |value: &Value| -> Vec<String> { value.as_object().unwrap().keys().cloned().collect() };
    let within = |what: &str, value: &Value, documented: &[&str]| {
        for key in keys(value) {
            assert!(
                documented.contains(&key.as_str()),
                "{what} field {key} is not documented"
            );
        }
    };
    let duration = |text: &str| {
        let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit())
            && ["ms", "s", "m", "h", "d"].contains(&&text[digits.len()..])
    };
    let monitor = rendered("PodMonitor");
    assert_eq!(keys(&monitor), ["apiVersion", "kind", "metadata", "spec"]);
    within(
        "PodMonitor spec",
        &monitor["spec"],
        &[
            "jobLabel",
            "selector",
            "namespaceSelector",
            "podMetricsEndpoints",
            "podTargetLabels",
        ],
    );
    for endpoint in monitor["spec"]["podMetricsEndpoints"].as_array().unwrap() {
        within(
            "PodMetricsEndpoint",
            endpoint,
            &[
                "port",
                "path",
                "interval",
                "scrapeTimeout",
                "scheme",
                "relabelings",
                "metricRelabelings",
            ],
        );
        assert!(endpoint["port"].is_string(), "the port by name");
        assert!(duration(endpoint["interval"].as_str().unwrap()));
        for relabeling in endpoint["relabelings"].as_array().unwrap() {
            within(
                "RelabelConfig",
                relabeling,
                &[
                    "sourceLabels",
                    "separator",
                    "targetLabel",
                    "regex",
                    "replacement",
                    "action",
                ],
            );
        }
    }
    let rule = rendered("PrometheusRule");
    assert_eq!(keys(&rule), ["apiVersion", "kind", "metadata", "spec"]);
    assert_eq!(keys(&rule["spec"]), ["groups"]);
    for group in rule["spec"]["groups"].as_array().unwrap() {
        within("RuleGroup", group, &["name", "interval", "rules"]);
        for rule in group["rules"].as_array().unwrap() {
            assert_eq!(keys(rule), ["alert", "expr", "for", "labels", "annotations"]);
            assert!(duration(rule["for"].as_str().unwrap()), "{rule}");
            for map in ["labels", "annotations"] {
                assert!(rule[map].as_object().unwrap().values().all(Value::is_string), "{rule}");
            }
        }
    }
}
