//! One trace per delivery, seen by an OTLP/HTTP receiver: `bosun serve`
//! exports its spans (real protobuf, decoded with `opentelemetry-proto`) to
//! a receiver in this test, and every message of a whole delivery, its
//! retries included, is a span of the caller's trace, each parented to the
//! span that sent it; the same across two `serve` processes sharing a
//! transport; a dead letter replayed stays in the delivery's trace; an MCP
//! tool call and the commands that join a delivery later continue it; the
//! metrics arrive over OTLP too. The exporter is flushed when `serve` stops on SIGTERM, so the
//! test reads the spans after the process has exited, without waiting.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use common::{Progress, Server, block_on, eventually, run_json};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as NumberValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message as _;
use serde_json::{Value, json};

/// The caller's context sent with every command of the delivery.
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
const CALLER_STATE: &str = "caller=t61rcWkgMzE";

fn caller_traceparent() -> String {
    format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")
}

/// A span as exported, with the `service.name` of the process that sent it.
#[derive(Debug, Clone)]
struct Exported {
    service: String,
    span: Span,
}

impl Exported {
    fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }

    fn parent_id(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    fn attribute(&self, key: &str) -> Option<String> {
        let value = self
            .span
            .attributes
            .iter()
            .find(|kv| kv.key == key)?
            .value
            .as_ref()?
            .value
            .as_ref()?;
        Some(match value {
            AnyValue::StringValue(text) => text.clone(),
            AnyValue::IntValue(n) => n.to_string(),
            AnyValue::BoolValue(b) => b.to_string(),
            AnyValue::DoubleValue(d) => d.to_string(),
            other => format!("{other:?}"),
        })
    }

    fn kind(&self) -> SpanKind {
        SpanKind::try_from(self.span.kind).unwrap_or(SpanKind::Unspecified)
    }

    fn describe(&self) -> String {
        format!(
            "{} [{}] {:?} type={:?} id={:?} attempt={:?} outcome={:?}",
            self.span.name,
            self.service,
            self.kind(),
            self.attribute("message_type"),
            self.attribute("messaging.message.id"),
            self.attribute("attempt"),
            self.attribute("outcome"),
        )
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An OTLP/HTTP receiver (`POST /v1/traces` and `/v1/metrics`, protobuf)
/// on a port of its own.
struct Receiver {
    address: SocketAddr,
    spans: Arc<Mutex<Vec<Exported>>>,
    metrics: Arc<Mutex<Vec<Metric>>>,
}

impl Receiver {
    fn start() -> Self {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let metrics = Arc::new(Mutex::new(Vec::new()));
        let (sender, address) = std::sync::mpsc::channel();
        let kept = Arc::clone(&spans);
        let kept_metrics = Arc::clone(&metrics);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                sender.send(listener.local_addr().unwrap()).unwrap();
                let app = Router::new()
                    .route(
                        "/v1/traces",
                        post(move |body: Bytes| {
                            let kept = Arc::clone(&kept);
                            async move {
                                let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
                                let mut spans = kept.lock().unwrap();
                                for resource in request.resource_spans {
                                    let service = resource
                                        .resource
                                        .iter()
                                        .flat_map(|r| &r.attributes)
                                        .find(|kv| kv.key == "service.name")
                                        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
                                        .map(|v| match v {
                                            AnyValue::StringValue(s) => s.clone(),
                                            other => format!("{other:?}"),
                                        })
                                        .unwrap_or_default();
                                    for scope in resource.scope_spans {
                                        for span in scope.spans {
                                            spans.push(Exported {
                                                service: service.clone(),
                                                span,
                                            });
                                        }
                                    }
                                }
                                ([("content-type", "application/x-protobuf")], Vec::<u8>::new())
                            }
                        }),
                    )
                    .route(
                        "/v1/metrics",
                        post(move |body: Bytes| {
                            let kept = Arc::clone(&kept_metrics);
                            async move {
                                let request =
                                    ExportMetricsServiceRequest::decode(body).expect("an OTLP protobuf export");
                                let mut metrics = kept.lock().unwrap();
                                for resource in request.resource_metrics {
                                    for scope in resource.scope_metrics {
                                        metrics.extend(scope.metrics);
                                    }
                                }
                                ([("content-type", "application/x-protobuf")], Vec::<u8>::new())
                            }
                        }),
                    );
                axum::serve(listener, app).await.unwrap();
            });
        });
        Self {
            address: address.recv().unwrap(),
            spans,
            metrics,
        }
    }

    /// Every metric export received, oldest first.
    fn metrics(&self) -> Vec<Metric> {
        self.metrics.lock().unwrap().clone()
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    fn spans(&self) -> Vec<Exported> {
        self.spans.lock().unwrap().clone()
    }
}

/// Settings that make a delivery quick, as the demo's.
const QUICK: [(&str, &str); 4] = [
    ("BOSUN_PIPELINE_POLL_MS", "100"),
    ("BOSUN_PIPELINE_POLL_MAX_MS", "500"),
    ("BOSUN_RECONCILE_MS", "100"),
    ("BOSUN_RECONCILE_MAX_MS", "500"),
];

fn delivery(data: &Path, correlation: &str) -> Value {
    run_json(data, &["deliveries", "show", correlation])
}

fn has_status(delivery: &Value, message_type: &str, statuses: &[&str]) -> bool {
    delivery["messages"].as_array().unwrap().iter().any(|m| {
        m["messageType"] == message_type
            && m["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| statuses.iter().any(|s| e["status"] == *s))
    })
}

/// The spans of `trace` form one tree under the caller's span: each span's
/// parent is the caller's span or another exported span of the trace.
fn assert_one_tree(spans: &[Exported], root_parent: &str) {
    let ids: BTreeSet<String> = spans.iter().map(Exported::span_id).collect();
    for span in spans {
        let parent = span.parent_id();
        assert!(
            parent == root_parent || ids.contains(&parent),
            "{} has parent {parent}, neither the caller's span nor a span of the trace",
            span.describe()
        );
    }
}

/// Every message of the delivery is sent by a producer span of the trace,
/// and every message a consumer handled has a consumer span that is the
/// child of its producer span.
fn assert_every_message_is_a_span(spans: &[Exported], delivery: &Value) {
    let by_id: HashMap<String, &Exported> = spans.iter().map(|s| (s.span_id(), s)).collect();
    for message in delivery["messages"].as_array().unwrap() {
        let id = message["messageId"].as_str().unwrap();
        let message_type = message["messageType"].as_str().unwrap();
        let producer = spans
            .iter()
            .find(|s| s.kind() == SpanKind::Producer && s.attribute("messaging.message.id").as_deref() == Some(id))
            .unwrap_or_else(|| panic!("no producer span for {message_type} {id}"));
        if message["consumers"].as_array().unwrap().is_empty() {
            continue;
        }
        let consumed: Vec<&Exported> = spans
            .iter()
            .filter(|s| s.kind() == SpanKind::Consumer && s.attribute("messaging.message.id").as_deref() == Some(id))
            .collect();
        assert!(!consumed.is_empty(), "no consumer span for {message_type} {id}");
        for span in consumed {
            assert_eq!(
                span.parent_id(),
                producer.span_id(),
                "{} is not the child of the span that sent it",
                span.describe()
            );
            assert_eq!(
                span.attribute("messaging.message.conversation_id").as_deref(),
                delivery["correlationId"].as_str()
            );
            // Up the tree, the consumer span reaches the caller's span.
            let mut at = span;
            let mut hops = 0;
            while at.parent_id() != CALLER_SPAN && at.parent_id() != "" {
                at = by_id
                    .get(&at.parent_id())
                    .unwrap_or_else(|| panic!("{} has a parent that was not exported", at.describe()));
                hops += 1;
                assert!(hops < 1_000, "a cycle in the parent links");
            }
            assert_eq!(
                at.parent_id(),
                CALLER_SPAN,
                "{} is not under the caller's span",
                span.describe()
            );
        }
    }
}

struct Http {
    client: reqwest::Client,
    url: String,
    key: String,
}

impl Http {
    fn send(&self, message_type: &str, payload: Value, correlation: Option<&str>) -> Value {
        let mut request = self
            .client
            .post(format!("{}/v1/commands/{message_type}", self.url))
            .bearer_auth(&self.key)
            .header("traceparent", caller_traceparent())
            .header("tracestate", CALLER_STATE)
            .json(&payload);
        if let Some(correlation) = correlation {
            request = request.header("x-correlation-id", correlation);
        }
        block_on(async {
            let response = request.send().await.expect("the API answers");
            assert_eq!(response.status(), 202, "{message_type} accepted");
            response.json::<Value>().await.unwrap()
        })
    }

    fn metrics(&self) -> String {
        block_on(async {
            let response = self.client.get(format!("{}/metrics", self.url)).send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.text().await.unwrap()
        })
    }
}

/// The consumers' series of a scrape (names and labels, not values).
fn consumer_series(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| {
            line.starts_with("bosun_")
                && !line.starts_with("bosun_http")
                && !line.starts_with("bosun_outbox")
                && !line.starts_with("bosun_queue_depth")
        })
        .map(|line| line.rsplit_once(' ').map_or(line, |(series, _)| series).to_owned())
        .collect()
}

#[test]
fn a_whole_delivery_over_http_is_one_trace_under_the_callers_span() {
    let progress = Progress::start("telemetry (a whole delivery, one trace)");
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let created = run_json(data, &["keys", "create", "--tenant", "demo", "--scopes", "admin"]);
    let key = created["key"].as_str().unwrap().to_owned();
    let endpoint = receiver.endpoint();
    let mut env = QUICK.to_vec();
    env.extend([
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_SERVICE_NAME", "bosun-test"),
        // Retries wait seconds, so the commit below is still retrying when
        // its repository is created.
        ("BOSUN_RETRY_BASE_DELAY_MS", "3000"),
    ]);
    let (server, url) = common::serve_with_http(data, &env, None);
    let http = Http {
        client: reqwest::Client::new(),
        url,
        key,
    };
    progress.phase("bosun serve is exporting to the test's OTLP receiver");
    // Before any message: every consumer's histograms, in seconds, at zero.
    let at_start = eventually(
        "every consumer's series are registered",
        Duration::from_secs(30),
        || {
            let text = http.metrics();
            bosun_contracts::routing::CONSUMERS
                .iter()
                .all(|route| {
                    text.contains(&format!(
                        "bosun_handler_duration_seconds_bucket{{consumer=\"{}\",message_type=\"{}\",le=\"0.005\"}} 0",
                        route.name,
                        route.commands.iter().chain(route.events).next().unwrap()
                    ))
                })
                .then_some(text)
        },
    );

    // The first commit comes before its repository exists: it fails
    // (transient) and is retried in the same trace.
    let main = json!({"repository": "payments-api", "branch": "main", "message": "Initial commit",
                      "files": [{"path": "README.md", "content": "# payments-api\n"}]});
    let sent = http.send("CreateCommit", main, None);
    let correlation = sent["correlationId"].as_str().unwrap().to_owned();
    eventually("the commit is retrying", Duration::from_secs(60), || {
        has_status(&delivery(data, &correlation), "CreateCommit", &["retry-scheduled"]).then_some(())
    });
    progress.phase("the first commit is retrying");
    http.send(
        "ProvisionRepository",
        json!({"name": "payments-api"}),
        Some(&correlation),
    );
    eventually("main is committed", Duration::from_secs(120), || {
        has_status(&delivery(data, &correlation), "CommitCreated", &["sent", "completed"]).then_some(())
    });
    progress.phase("the repository and main exist");
    let feature = json!({"repository": "payments-api", "branch": "feature/payments-api", "baseBranch": "main",
                         "message": "Add the payments service",
                         "files": bosun::tools::demo::sample_files(false), "pullRequestTarget": "main"});
    http.send("CreateCommit", feature, Some(&correlation));
    eventually("the environment is synced", Duration::from_secs(240), || {
        let shown = delivery(data, &correlation);
        assert!(
            !has_status(&shown, "CreateCommit", &["dead-lettered"]),
            "a commit was dead-lettered: {shown:#}"
        );
        has_status(&shown, "GitOpsSynced", &["sent", "completed"]).then_some(())
    });
    progress.phase("GitOpsSynced");
    // A whole delivery later, the scrape has the same series, no more.
    let after = http.metrics();
    assert_eq!(consumer_series(&at_start), consumer_series(&after));
    assert!(
        after.contains("bosun_end_to_end_duration_seconds_count{consumer=\"gitops-sync\""),
        "{after}"
    );
    server.terminate();
    let shown = delivery(data, &correlation);

    let spans = receiver.spans();
    let ours: Vec<Exported> = spans
        .iter()
        .filter(|s| s.attribute("messaging.message.conversation_id").as_deref() == Some(correlation.as_str()))
        .cloned()
        .collect();
    assert!(!ours.is_empty(), "no span of the delivery was exported");
    for span in &ours {
        assert_eq!(
            span.trace_id(),
            CALLER_TRACE,
            "{} left the caller's trace",
            span.describe()
        );
        assert_eq!(span.service, "bosun-test");
    }
    let trace: Vec<Exported> = spans.iter().filter(|s| s.trace_id() == CALLER_TRACE).cloned().collect();
    assert_one_tree(&trace, CALLER_SPAN);
    assert_every_message_is_a_span(&trace, &shown);
    // The caller's tracestate travels with the trace.
    let first = trace
        .iter()
        .find(|s| s.kind() == SpanKind::Producer && s.parent_id() == CALLER_SPAN)
        .expect("a command's send span under the caller's span");
    assert_eq!(first.span.trace_state, CALLER_STATE);
    assert_eq!(first.attribute("messaging.operation.type").as_deref(), Some("send"));
    // GitOpsSynced is in the tree.
    assert!(
        trace
            .iter()
            .any(|s| s.kind() == SpanKind::Producer && s.attribute("message_type").as_deref() == Some("GitOpsSynced")),
        "no span sent GitOpsSynced"
    );
    // The retried commit: each attempt is a consumer span of the same
    // message, a child of the same producer span.
    let retried = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["messageType"] == "CreateCommit" && m["attempts"].as_u64().unwrap_or(0) > 1)
        .expect("the commit was retried");
    let id = retried["messageId"].as_str().unwrap();
    let attempts: Vec<&Exported> = trace
        .iter()
        .filter(|s| s.kind() == SpanKind::Consumer && s.attribute("messaging.message.id").as_deref() == Some(id))
        .collect();
    assert!(attempts.len() >= 2, "{attempts:#?}");
    let parents: BTreeSet<String> = attempts.iter().map(|s| s.parent_id()).collect();
    assert_eq!(parents.len(), 1, "attempts under different parents: {attempts:#?}");
    let outcomes: BTreeSet<String> = attempts.iter().filter_map(|s| s.attribute("outcome")).collect();
    assert!(
        outcomes.contains("retry_scheduled") && outcomes.contains("completed"),
        "{outcomes:?}"
    );
    let numbers: BTreeSet<String> = attempts.iter().filter_map(|s| s.attribute("attempt")).collect();
    assert!(numbers.contains("0") && numbers.contains("1"), "{numbers:?}");
    for span in attempts {
        assert_eq!(span.attribute("messaging.system").as_deref(), Some("bosun.embedded"));
        assert_eq!(span.attribute("messaging.destination.name").as_deref(), Some("commit"));
        assert_eq!(span.attribute("consumer").as_deref(), Some("commit"));
        assert_eq!(span.attribute("tenant").as_deref(), Some("demo"));
    }
    // A saga consumer's span names its saga.
    assert!(
        trace
            .iter()
            .any(|s| s.attribute("saga_kind").as_deref() == Some("release") && s.attribute("saga_key").is_some()),
        "no span names the release saga"
    );
    progress.phase(format!("{} spans in one trace", trace.len()));
}

#[test]
fn two_serve_processes_sharing_a_transport_keep_one_trace() {
    let progress = Progress::start("telemetry (two processes, one trace)");
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let traces = format!("{}/v1/traces", receiver.endpoint());
    let first_env = [
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces.as_str()),
        ("OTEL_SERVICE_NAME", "bosun-provisioning"),
    ];
    let second_env = [
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces.as_str()),
        ("OTEL_SERVICE_NAME", "bosun-pipelines"),
    ];
    let mut first = Server::start(data, &first_env, &["--consumers", "repository-provisioning"]);
    let mut second = Server::start(data, &second_env, &["--consumers", "pipeline-generation"]);
    first.wait_for_line("receiving", Duration::from_secs(30));
    second.wait_for_line("receiving", Duration::from_secs(30));
    progress.phase("two processes receiving, one consumer each");

    // Sent by the CLI, continuing the caller's context; the CLI exports its
    // own send span before it exits.
    let traceparent = caller_traceparent();
    let output = common::bosun(data)
        .args(["send", "ProvisionRepository", "--tenant", "demo", "--json"])
        .args([
            "--payload",
            r#"{"name": "payments-api"}"#,
            "--traceparent",
            &traceparent,
        ])
        .envs([
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces.as_str()),
            ("OTEL_SERVICE_NAME", "bosun-cli"),
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let sent: Value = serde_json::from_slice(&output.stdout).unwrap();
    let correlation = sent["correlationId"].as_str().unwrap().to_owned();
    eventually("the second process handled the event", Duration::from_secs(60), || {
        delivery(data, &correlation)["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| {
                m["messageType"] == "RepositoryProvisioned"
                    && m["events"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|e| e["consumer"] == "pipeline-generation" && e["status"] == "completed")
            })
            .then_some(())
    });
    progress.phase("RepositoryProvisioned handled by the second process");
    first.terminate();
    second.terminate();

    let spans = receiver.spans();
    let trace: Vec<Exported> = spans.iter().filter(|s| s.trace_id() == CALLER_TRACE).cloned().collect();
    let services: BTreeSet<&str> = trace.iter().map(|s| s.service.as_str()).collect();
    assert!(
        services.contains("bosun-cli")
            && services.contains("bosun-provisioning")
            && services.contains("bosun-pipelines"),
        "both processes' spans are in the trace: {services:?}"
    );
    for span in spans
        .iter()
        .filter(|s| s.attribute("messaging.message.conversation_id").as_deref() == Some(correlation.as_str()))
    {
        assert_eq!(span.trace_id(), CALLER_TRACE, "{} left the trace", span.describe());
    }
    assert_one_tree(&trace, CALLER_SPAN);
    // The second process's consumer span is the child of the first's
    // producer span: the link crosses the processes.
    let handled = trace
        .iter()
        .find(|s| s.kind() == SpanKind::Consumer && s.service == "bosun-pipelines")
        .expect("the second process handled a message of the delivery");
    let parent = trace
        .iter()
        .find(|s| s.span_id() == handled.parent_id())
        .expect("its parent was exported");
    assert_eq!(parent.service, "bosun-provisioning");
    assert_eq!(parent.kind(), SpanKind::Producer);
    assert_every_message_is_a_span(&trace, &delivery(data, &correlation));
    progress.phase(format!(
        "{} spans from {} processes in one trace",
        trace.len(),
        services.len()
    ));
}

fn string_attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(s) => Some(s.clone()),
            _ => None,
        })
}

/// The value of the last exported point of a counter or gauge `name` with
/// these `consumer` (and `message_type`) attributes.
fn last_number(metrics: &[Metric], name: &str, labels: &[(&str, &str)]) -> Option<i64> {
    metrics
        .iter()
        .filter(|m| m.name == name)
        .filter_map(|m| match m.data.as_ref()? {
            Data::Sum(sum) => Some(&sum.data_points),
            Data::Gauge(gauge) => Some(&gauge.data_points),
            _ => None,
        })
        .flatten()
        .filter(|point| {
            labels
                .iter()
                .all(|(key, value)| string_attribute(&point.attributes, key).as_deref() == Some(*value))
        })
        .filter_map(|point| match point.value? {
            NumberValue::AsInt(n) => Some(n),
            NumberValue::AsDouble(n) => Some(n as i64),
        })
        .next_back()
}

/// A second caller's context: an agent calling the MCP tool.
const AGENT_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const AGENT_SPAN: &str = "b7ad6b7169203331";
/// A third: someone joining the delivery from a trace of their own.
const OTHER_TRACE: &str = "5e8c1f0a2b3c4d5e6f708192a3b4c5d6";
const OTHER_SPAN: &str = "1122334455667788";

#[test]
fn an_mcp_call_starts_the_delivery_in_the_agents_trace_and_joining_commands_continue_it() {
    let progress = Progress::start("telemetry (MCP _meta, joining commands)");
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let created = run_json(data, &["keys", "create", "--tenant", "demo", "--scopes", "admin"]);
    let key = created["key"].as_str().unwrap().to_owned();
    let endpoint = receiver.endpoint();
    let mut env = QUICK.to_vec();
    env.extend([
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_SERVICE_NAME", "bosun-test"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "300"),
    ]);
    let (server, url) = common::serve_with_http(data, &env, Some("repository-provisioning,commit"));
    let client = reqwest::Client::new();
    progress.phase("bosun serve is exporting to the test's OTLP receiver");

    // The agent's tool call carries its trace in `_meta` (SEP-414).
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "send_command",
        "arguments": {"type": "ProvisionRepository", "payload": {"name": "ledger"}},
        "_meta": {"traceparent": format!("00-{AGENT_TRACE}-{AGENT_SPAN}-01"), "tracestate": "agent=1"},
    }});
    let answer: Value = block_on(async {
        let response = client
            .post(format!("{url}/mcp"))
            .bearer_auth(&key)
            .header("accept", "application/json, text/event-stream")
            .json(&call)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    });
    let result = &answer["result"]["structuredContent"];
    let correlation = result["correlationId"]
        .as_str()
        .unwrap_or_else(|| panic!("send_command answered {answer}"))
        .to_owned();
    // A command joining the delivery with no trace of its own: it
    // continues the delivery's trace.
    let send = |payload: Value, traceparent: Option<String>| {
        let mut request = client
            .post(format!("{url}/v1/commands/CreateCommit"))
            .bearer_auth(&key)
            .header("x-correlation-id", &correlation)
            .json(&payload);
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent);
        }
        block_on(async {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 202);
            response.json::<Value>().await.unwrap()
        })
    };
    eventually("the repository exists", Duration::from_secs(60), || {
        has_status(&delivery(data, &correlation), "ProvisionRepository", &["completed"]).then_some(())
    });
    let joined = send(
        json!({"repository": "ledger", "branch": "main", "message": "Initial commit",
               "files": [{"path": "README.md", "content": "# ledger\n"}]}),
        None,
    );
    // The second commit branches from the first one's `main`: sent before
    // that branch exists, it would be retried (a third handler run).
    eventually("the first commit is made", Duration::from_secs(60), || {
        has_status(&delivery(data, &correlation), "CreateCommit", &["completed"]).then_some(())
    });
    // And one from a trace of its own: in that trace, linked to the delivery's.
    let other = send(
        json!({"repository": "ledger", "branch": "docs", "baseBranch": "main", "message": "Docs",
               "files": [{"path": "docs/index.md", "content": "# docs\n"}]}),
        Some(format!("00-{OTHER_TRACE}-{OTHER_SPAN}-01")),
    );
    eventually("both commits are made", Duration::from_secs(60), || {
        let shown = delivery(data, &correlation);
        let commits = shown["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["messageType"] == "CreateCommit" && m["status"] == "completed")
            .count();
        (commits == 2).then_some(())
    });
    progress.phase("the repository and both commits are made");
    // The sampled queue depths on /metrics: the events no consumer of this
    // process receives wait in their subscriptions.
    let scrape = eventually("queue depths are sampled", Duration::from_secs(30), || {
        let text = block_on(async {
            client
                .get(format!("{url}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        });
        text.lines()
            .any(|line| {
                line.starts_with("bosun_queue_depth{consumer=\"pull-request\"")
                    && line.rsplit_once(' ').is_some_and(|(_, n)| n != "0")
            })
            .then_some(text)
    });
    assert!(scrape.contains("# TYPE bosun_queue_depth gauge"), "{scrape}");
    server.terminate();

    // Metrics over OTLP: the counters (at zero from the start for a pair
    // nothing happened to), the histograms in seconds over bosun's buckets,
    // and the gauges.
    let metrics = receiver.metrics();
    let processed = last_number(
        &metrics,
        "bosun.messages.processed",
        &[("consumer", "commit"), ("message_type", "CreateCommit")],
    );
    assert_eq!(processed, Some(2), "two commits processed, exported over OTLP");
    assert_eq!(
        last_number(
            &metrics,
            "bosun.messages.dead_lettered",
            &[("consumer", "commit"), ("message_type", "CreateCommit")]
        ),
        Some(0),
        "a counter is exported at zero"
    );
    let handler = metrics
        .iter()
        .filter(|m| m.name == "bosun.handler.duration")
        .filter_map(|m| match m.data.as_ref()? {
            Data::Histogram(histogram) => Some((m.unit.clone(), histogram.data_points.clone())),
            _ => None,
        })
        .next_back()
        .expect("the handler duration histogram is exported");
    assert_eq!(handler.0, "s");
    let commit_point = handler
        .1
        .iter()
        .find(|p| string_attribute(&p.attributes, "consumer").as_deref() == Some("commit"))
        .expect("a point for the commit consumer");
    assert_eq!(commit_point.count, 2);
    assert_eq!(commit_point.explicit_bounds, bosun::runtime::metrics::BUCKETS.to_vec());
    let waiting = last_number(
        &metrics,
        "bosun.queue.depth",
        &[
            ("consumer", "pull-request"),
            ("messaging.destination.name", "bosun-events/subscriptions/pull-request"),
        ],
    );
    assert!(
        waiting.is_some_and(|n| n > 0),
        "the queue depth gauge is exported: {waiting:?}"
    );
    assert!(
        last_number(&metrics, "bosun.outbox.backlog", &[]).is_some(),
        "the outbox backlog gauge is exported"
    );
    let shown = delivery(data, &correlation);
    assert_eq!(
        shown["traceId"], AGENT_TRACE,
        "deliveries show names the delivery's trace"
    );

    let spans = receiver.spans();
    // The tool call's server span, under the agent's span.
    let tool_call = spans
        .iter()
        .find(|s| s.span.name == "tools/call send_command")
        .expect("the tool call's server span");
    assert_eq!(tool_call.kind(), SpanKind::Server);
    assert_eq!(tool_call.trace_id(), AGENT_TRACE);
    assert_eq!(tool_call.parent_id(), AGENT_SPAN);
    assert_eq!(tool_call.attribute("mcp.method.name").as_deref(), Some("tools/call"));
    assert_eq!(tool_call.attribute("gen_ai.tool.name").as_deref(), Some("send_command"));
    // The command's producer span is the tool call's child.
    let producer = |message_id: &str| {
        spans
            .iter()
            .find(|s| {
                s.kind() == SpanKind::Producer && s.attribute("messaging.message.id").as_deref() == Some(message_id)
            })
            .unwrap_or_else(|| panic!("no producer span for {message_id}"))
            .clone()
    };
    let first = producer(result["messageId"].as_str().unwrap());
    assert_eq!(first.parent_id(), tool_call.span_id());
    assert_eq!(first.span.trace_state, "agent=1");
    // The joining command continues the delivery's trace from the first
    // command's send span.
    let second = producer(joined["messageId"].as_str().unwrap());
    assert_eq!(second.trace_id(), AGENT_TRACE);
    assert_eq!(second.parent_id(), first.span_id());
    // The one sent from its own trace stays in it, linked to the delivery's.
    let third = producer(other["messageId"].as_str().unwrap());
    assert_eq!(third.trace_id(), OTHER_TRACE);
    assert_eq!(third.parent_id(), OTHER_SPAN);
    assert!(
        third
            .span
            .links
            .iter()
            .any(|link| hex(&link.trace_id) == AGENT_TRACE && hex(&link.span_id) == first.span_id()),
        "the command is linked to the delivery's trace: {:?}",
        third.span.links
    );
    // Every message of the delivery but the third command's is in the
    // agent's trace, as one tree under the agent's span.
    let trace: Vec<Exported> = spans.iter().filter(|s| s.trace_id() == AGENT_TRACE).cloned().collect();
    assert_one_tree(&trace, AGENT_SPAN);
    let third_id = third.attribute("messaging.message.id").unwrap();
    for span in spans.iter().filter(|s| {
        s.attribute("messaging.message.conversation_id").as_deref() == Some(correlation.as_str())
            && s.attribute("messaging.message.id").as_deref() != Some(third_id.as_str())
            && s.trace_id() != OTHER_TRACE
    }) {
        assert_eq!(span.trace_id(), AGENT_TRACE, "{} left the trace", span.describe());
    }
    let consumed = trace
        .iter()
        .filter(|s| s.kind() == SpanKind::Consumer && s.attribute("consumer").as_deref() == Some("commit"))
        .count();
    assert!(consumed >= 1, "the joined commit was handled in the delivery's trace");
    progress.phase(format!("{} spans in the agent's trace", trace.len()));
}

#[test]
fn a_replayed_dead_letter_stays_in_the_deliverys_trace() {
    let progress = Progress::start("telemetry (a replay, one trace)");
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let created = run_json(data, &["keys", "create", "--tenant", "demo", "--scopes", "admin"]);
    let key = created["key"].as_str().unwrap().to_owned();
    let endpoint = receiver.endpoint();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_SERVICE_NAME", "bosun-test"),
        ("OTEL_METRICS_EXPORTER", "none"),
    ];
    let (server, url) = common::serve_with_http(data, &env, Some("repository-provisioning,commit"));
    let http = Http {
        client: reqwest::Client::new(),
        url: url.clone(),
        key: key.clone(),
    };
    // A commit before its repository exists: retried, then dead-lettered.
    let commit = json!({"repository": "ledger", "branch": "main", "message": "Initial commit",
                        "files": [{"path": "README.md", "content": "# ledger\n"}]});
    let sent = http.send("CreateCommit", commit, None);
    let correlation = sent["correlationId"].as_str().unwrap().to_owned();
    let message_id = sent["messageId"].as_str().unwrap().to_owned();
    let get = |path: &str| {
        block_on(async {
            let response = http
                .client
                .get(format!("{url}{path}"))
                .bearer_auth(&key)
                .send()
                .await
                .unwrap();
            response.json::<Value>().await.unwrap()
        })
    };
    let dead = eventually("the commit is dead-lettered", Duration::from_secs(60), || {
        get("/v1/dead-letters")["deadLetters"]
            .as_array()?
            .iter()
            .find(|record| record["correlationId"] == correlation.as_str())
            .cloned()
    });
    let id = dead["id"].as_str().unwrap().to_owned();
    let detail = get(&format!("/v1/dead-letters/{id}"));
    assert_eq!(
        detail["traceId"], CALLER_TRACE,
        "the dead letter names the delivery's trace: {detail:#}"
    );
    progress.phase("dead-lettered");
    // The repository, then the replay.
    http.send("ProvisionRepository", json!({"name": "ledger"}), Some(&correlation));
    eventually("the repository exists", Duration::from_secs(60), || {
        has_status(&delivery(data, &correlation), "ProvisionRepository", &["completed"]).then_some(())
    });
    block_on(async {
        let response = http
            .client
            .post(format!("{url}/v1/dead-letters/{id}/replay"))
            .bearer_auth(&key)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "replay answered {}", response.status());
    });
    eventually("the replayed commit completes", Duration::from_secs(60), || {
        delivery(data, &correlation)["messages"]
            .as_array()?
            .iter()
            .any(|m| m["messageId"] == message_id.as_str() && m["status"] == "completed")
            .then_some(())
    });
    progress.phase("replayed and completed");
    server.terminate();

    let spans = receiver.spans();
    let handled: Vec<&Exported> = spans
        .iter()
        .filter(|s| {
            s.kind() == SpanKind::Consumer
                && s.attribute("messaging.message.id").as_deref() == Some(message_id.as_str())
        })
        .collect();
    let outcomes: BTreeSet<String> = handled.iter().filter_map(|s| s.attribute("outcome")).collect();
    assert!(
        outcomes.contains("dead_lettered") && outcomes.contains("completed"),
        "the failed attempts and the replay are spans of the message: {outcomes:?}"
    );
    for span in &handled {
        assert_eq!(span.trace_id(), CALLER_TRACE, "{} left the trace", span.describe());
    }
    let parents: BTreeSet<String> = handled.iter().map(|s| s.parent_id()).collect();
    assert_eq!(
        parents.len(),
        1,
        "every attempt, the replay included, is a child of the send: {handled:#?}"
    );
    progress.phase(format!("{} handlings of the message in one trace", handled.len()));
}
