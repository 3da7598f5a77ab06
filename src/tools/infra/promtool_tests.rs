//! The rendered PrometheusRule against Prometheus' own `promtool`: `check
//! rules` on its groups, and `test rules` with unit tests written here, one
//! group per alert, from the default thresholds: each alert fires when
//! what it watches goes wrong and not before its `for:`, and stays quiet
//! when it does not (a deep but flat queue, a fast consumer).
//!
//! `promtool` comes from Debian's `prometheus` package, extracted under
//! `~/.cache/bosun/tools` by `scripts/promtool install`, which
//! `scripts/test` runs:
//!
//! ```sh
//! BOSUN_TEST_PROMTOOL="$(scripts/promtool install)" \
//!   cargo test --lib -p bosun tools::infra::promtool -- --ignored
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use super::kubernetes::AlertThresholds;
use super::kubernetes::monitoring::JOB;
use super::tests::{base_objects, default_files, kind_of};

const PROMTOOL_VAR: &str = "BOSUN_TEST_PROMTOOL";
const NAMESPACE: &str = "bosun";

fn promtool() -> PathBuf {
    let path = std::env::var_os(PROMTOOL_VAR).unwrap_or_else(|| {
        panic!(
            "{PROMTOOL_VAR} is not set: set it to a promtool binary, \
             {PROMTOOL_VAR}=\"$(scripts/promtool install)\" (scripts/test does this)"
        )
    });
    let path = PathBuf::from(path);
    assert!(path.is_file(), "{PROMTOOL_VAR}={} is not a file", path.display());
    path
}

fn run(promtool: &Path, args: &[&str], dir: &Path) -> String {
    let output = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

/// The rendered PrometheusRule's rules, by alert name.
fn rendered_rules() -> (Value, BTreeMap<String, Value>) {
    let rule = base_objects(&default_files())
        .into_iter()
        .map(|(_, object)| object)
        .find(|object| kind_of(object) == "PrometheusRule")
        .expect("the base has a PrometheusRule");
    let by_name = rule["spec"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|group| group["rules"].as_array().cloned().unwrap_or_default())
        .map(|rule| (rule["alert"].as_str().unwrap_or_default().to_owned(), rule))
        .collect();
    (json!({"groups": rule["spec"]["groups"]}), by_name)
}

fn minutes(duration: Duration) -> u64 {
    duration.as_secs().div_ceil(60)
}

/// A series as promtool's input takes it: `name{labels}`.
fn series(name: &str, labels: &[(&str, &str)]) -> String {
    let labels: Vec<String> = [("job", JOB), ("namespace", NAMESPACE)]
        .iter()
        .chain(labels)
        .map(|(name, value)| format!("{name}=\"{value}\""))
        .collect();
    format!("{name}{{{}}}", labels.join(","))
}

/// An expected firing alert of `rule`: its labels, the rule's severity,
/// and its annotations with `{{ $labels.X }}` filled in.
fn firing(rule: &Value, labels: &[(&str, &str)]) -> Value {
    let mut exp_labels: BTreeMap<String, String> =
        labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    exp_labels.insert("namespace".to_owned(), NAMESPACE.to_owned());
    let severity = rule["labels"]["severity"].as_str().unwrap_or_default();
    let mut annotations = BTreeMap::new();
    for (key, text) in rule["annotations"].as_object().into_iter().flatten() {
        let mut text = text.as_str().unwrap_or_default().to_owned();
        for (label, value) in &exp_labels {
            text = text.replace(&format!("{{{{ $labels.{label} }}}}"), value);
        }
        assert!(!text.contains("{{"), "a template the test does not fill: {text}");
        annotations.insert(key.clone(), text);
    }
    exp_labels.insert("severity".to_owned(), severity.to_owned());
    json!({"exp_labels": exp_labels, "exp_annotations": annotations})
}

/// One unit test group: `input` series, then for `alert` what is expected
/// at each (minute, firing alerts).
fn group(alert: &str, input: Vec<(String, String)>, checks: Vec<(u64, Vec<Value>)>) -> Value {
    json!({
        "name": alert,
        "interval": "1m",
        "input_series": input
            .into_iter()
            .map(|(series, values)| json!({"series": series, "values": values}))
            .collect::<Vec<_>>(),
        "alert_rule_test": checks
            .into_iter()
            .map(|(minute, alerts)| json!({"eval_time": format!("{minute}m"), "alertname": alert, "exp_alerts": alerts}))
            .collect::<Vec<_>>(),
    })
}

/// The unit tests of the rendered rules with the default thresholds.
fn unit_tests(rules: &BTreeMap<String, Value>) -> Vec<Value> {
    let t = AlertThresholds::default();
    let rule = |name: &str| rules.get(name).unwrap_or_else(|| panic!("no rule {name}"));
    let pod = "bosun-commit-5d9c7b8f4-x2k1q";
    let mut groups = Vec::new();

    // One dead letter at minute 6: pending, firing once `for:` has passed,
    // resolved once it has left the window.
    let dead = rule("BosunDeadLettersGrowing");
    let (start, window) = (6, minutes(t.dead_letter_window));
    let labels = [("consumer", "commit")];
    groups.push(group(
        "BosunDeadLettersGrowing",
        vec![(
            series(
                "bosun_messages_dead_lettered_total",
                &[("pod", pod), ("consumer", "commit"), ("message_type", "CreateCommit")],
            ),
            format!("0x{} 1x{}", start - 1, window + 20),
        )],
        vec![
            (start - 1, vec![]),
            (start + minutes(t.dead_letter_for) + 1, vec![firing(dead, &labels)]),
            (start + window + 2, vec![]),
        ],
    ));

    // A queue deep but flat never alerts, nor one of a paused consumer;
    // one growing by 10 a minute alerts once it is over the depth and has
    // grown for `for:`.
    let queue = rule("BosunQueueGrowing");
    let depth = t.queue_depth;
    let over = depth / 10 + 1;
    let fires = over + minutes(t.queue_growing_for) + 2;
    let growing = [("consumer", "build-ingestion"), ("entity", "build-ingestion")];
    groups.push(group(
        "BosunQueueGrowing",
        vec![
            (
                series(
                    "bosun_queue_depth",
                    &[("pod", pod), ("consumer", "commit"), ("entity", "commit")],
                ),
                format!("{}x{}", depth * 5, fires + 10),
            ),
            (
                series(
                    "bosun_queue_depth",
                    &[("pod", "bosun-build-ingestion-0"), growing[0], growing[1]],
                ),
                format!("0+10x{}", fires + 10),
            ),
            // Growing as fast, but paused by an operator: its queue is
            // meant to grow.
            (
                series(
                    "bosun_queue_depth",
                    &[
                        ("pod", "bosun-gitops-sync-0"),
                        ("consumer", "gitops-sync"),
                        ("entity", "gitops-sync"),
                    ],
                ),
                format!("0+10x{}", fires + 10),
            ),
            (
                series(
                    "bosun_consumer_paused",
                    &[
                        ("pod", "bosun-gitops-sync-0"),
                        ("consumer", "gitops-sync"),
                        ("entity", "gitops-sync"),
                    ],
                ),
                format!("1x{}", fires + 10),
            ),
        ],
        vec![(over + 2, vec![]), (fires, vec![firing(queue, &growing)])],
    ));

    // A consumer stops receiving at minute 6.
    let receiving = rule("BosunConsumerNotReceiving");
    let labels = [("job", JOB), ("pod", pod), ("consumer", "commit")];
    let quiet = minutes(t.not_receiving_for);
    groups.push(group(
        "BosunConsumerNotReceiving",
        vec![(
            series("bosun_consumer_receiving", &labels[1..]),
            format!("1x5 0x{}", quiet + 10),
        )],
        vec![
            (6 + quiet - 1, vec![]),
            (6 + quiet + 1, vec![firing(receiving, &labels)]),
        ],
    ));

    // A pod never ready.
    let ready = rule("BosunPodNotReady");
    let labels = [("job", JOB), ("pod", pod)];
    let quiet = minutes(t.not_ready_for);
    groups.push(group(
        "BosunPodNotReady",
        vec![(series("bosun_ready", &labels[1..]), format!("0x{}", quiet + 10))],
        vec![(quiet - 1, vec![]), (quiet + 1, vec![firing(ready, &labels)])],
    ));

    // A pod Prometheus stops reaching at minute 4.
    let down = rule("BosunPodDown");
    let labels = [("job", JOB), ("pod", pod)];
    let quiet = minutes(t.pod_down_for);
    groups.push(group(
        "BosunPodDown",
        vec![(series("up", &labels[1..]), format!("1x3 0x{}", quiet + 10))],
        vec![(4 + quiet - 1, vec![]), (4 + quiet + 1, vec![firing(down, &labels)])],
    ));

    // Every message of commit takes 30 to 60 s, every one of probe under
    // 0.1 s: only commit is slow.
    let slow = rule("BosunHandlingSlow");
    let bucket = |consumer: &str, le: &str| {
        series(
            "bosun_processing_duration_seconds_bucket",
            &[("pod", pod), ("consumer", consumer), ("message_type", "M"), ("le", le)],
        )
    };
    let fires = minutes(t.slow_window) + minutes(t.slow_for) + 2;
    let samples = fires + 10;
    let count = format!("0+10x{samples}");
    let zero = format!("0x{samples}");
    groups.push(group(
        "BosunHandlingSlow",
        vec![
            (bucket("commit", "0.1"), zero.clone()),
            (bucket("commit", "30"), zero.clone()),
            (bucket("commit", "60"), count.clone()),
            (bucket("commit", "+Inf"), count.clone()),
            (bucket("probe", "0.1"), count.clone()),
            (bucket("probe", "30"), count.clone()),
            (bucket("probe", "60"), count.clone()),
            (bucket("probe", "+Inf"), count),
        ],
        vec![
            (minutes(t.slow_for) - 1, vec![]),
            (fires, vec![firing(slow, &[("consumer", "commit")])]),
        ],
    ));
    groups
}

#[test]
#[ignore = "needs promtool: scripts/test provides it"]
fn promtool_checks_the_rendered_rules_and_their_unit_tests_pass() {
    let promtool = promtool();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (rules_file, rules) = rendered_rules();
    // JSON is YAML: promtool reads both.
    std::fs::write(dir.path().join("rules.yaml"), rules_file.to_string()).expect("rules.yaml is written");
    let checked = run(&promtool, &["check", "rules", "rules.yaml"], dir.path());
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", rules.len())),
        "{checked}"
    );
    let tests = unit_tests(&rules);
    assert_eq!(tests.len(), rules.len(), "a unit test group for every alert");
    let file = json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": tests,
    });
    std::fs::write(dir.path().join("tests.yaml"), file.to_string()).expect("tests.yaml is written");
    let tested = run(&promtool, &["test", "rules", "tests.yaml"], dir.path());
    assert!(tested.contains("SUCCESS"), "{tested}");
}
