//! Logging, traces and trace context.
//!
//! Logs are structured `tracing` events (text or JSON lines on stderr). Every
//! message is handled inside a span carrying its consumer, message id,
//! type, correlation id, W3C trace id and span id, so every line logged
//! while it is handled names them. Payloads are never logged.
//!
//! Traces: when the `OTEL_*` settings name an OTLP endpoint
//! ([`TelemetrySettings`]), `tracing` spans are also OpenTelemetry spans
//! (`tracing-opentelemetry`), batched and exported over OTLP/HTTP with
//! protobuf bodies on the workspace's reqwest; [`Telemetry::shutdown`]
//! flushes what is still queued. One trace per delivery: a command's
//! producer span continues the caller's `traceparent` (or starts the
//! trace), each message's consumer span continues the `traceparent` its
//! envelope carries ([`continue_trace`]), and each message it causes is
//! stamped with the context of a producer span made under it
//! ([`traceparent_of`]), so the next hop is that span's child. With traces
//! off no OpenTelemetry span exists: envelopes still carry a `traceparent`
//! of the delivery's trace ([`child_traceparent`]), so a collector further
//! on still sees one trace.

use std::collections::HashMap;
use std::sync::OnceLock;

use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::FilterExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use bosun_contracts::Envelope;

use crate::runtime::config::{LogFormat, OtlpExport, TelemetrySettings, TraceSampler, TransportKind};

/// The installed telemetry: call [`Telemetry::shutdown`] before the
/// process exits so the spans still queued, and the last metrics, are
/// exported.
#[derive(Debug, Default)]
#[must_use = "shut it down at exit, or queued spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    meters: Option<SdkMeterProvider>,
}

/// The meter bosun's instruments are made from, when metrics are exported
/// over OTLP (set once, by [`init`]).
static METER: OnceLock<Meter> = OnceLock::new();

/// The OTLP meter, when metrics are exported: [`crate::runtime::metrics::Metrics`]
/// records into its instruments besides its own series.
pub fn meter() -> Option<&'static Meter> {
    METER.get()
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports the spans still queued and stops the exporter (within its
    /// 5 s timeout); a failure is logged, the process exits anyway.
    pub async fn shutdown(self) {
        // The batch processor and the periodic reader wait for their
        // exports, tasks on this runtime: wait on a blocking thread, not
        // on a worker.
        if let Some(meters) = self.meters {
            match tokio::task::spawn_blocking(move || meters.shutdown()).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => tracing::warn!(error = %err, "could not export the last metrics"),
                Err(err) => tracing::warn!(error = %err, "could not export the last metrics"),
            }
        }
        let Some(provider) = self.provider else { return };
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(error = %err, "could not export the last spans"),
            Err(err) => tracing::warn!(error = %err, "could not export the last spans"),
        }
    }
}

/// Installs the global subscriber and, when `settings` name an endpoint,
/// the trace exporter. `RUST_LOG` overrides the default log level
/// (`info`; the MCP SDK's own lines, one set per HTTP request and with the
/// client's details, only from `warn`: bosun logs each tool call itself).
/// Whatever `RUST_LOG` says, dependencies log no more than
/// [`dependency_cap`] lets through: their debug and trace lines print
/// requests, frames and bodies, payloads and their secrets included.
pub fn init(format: LogFormat, settings: &TelemetrySettings) -> Telemetry {
    init_with_filter(format, "info,rmcp=warn", settings)
}

/// Whether a span or event of `metadata` may be logged at all: bosun's own
/// (targets `bosun`, `bosun_consumers`, ...) at any level; a dependency's
/// at `info` and above, the MCP SDK's at `warn` and above (its `info`
/// lines carry the client's details, its `debug` ones whole requests).
/// bosun's own lines never carry a payload: they name messages by id,
/// type and correlation id.
pub fn dependency_cap(metadata: &tracing::Metadata<'_>) -> bool {
    let target = metadata.target();
    if target.starts_with("bosun") {
        return true;
    }
    let ceiling = if target.starts_with("rmcp") {
        tracing::Level::WARN
    } else {
        tracing::Level::INFO
    };
    *metadata.level() <= ceiling
}

/// [`init`] with `default` as the log level filter when `RUST_LOG` is not
/// set. Spans go to the exporter from `info` whatever the log level.
pub fn init_with_filter(format: LogFormat, default: &str, settings: &TelemetrySettings) -> Telemetry {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // Colour codes only for people: not in files, pipes or MCP clients' logs.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).with_current_span(true).boxed(),
    };
    let (provider, problem) = match exporter(settings) {
        Ok(provider) => (provider, None),
        Err(err) => (None, Some(err)),
    };
    let (meters, metrics_problem) = match metric_exporter(settings) {
        Ok(meters) => (meters, None),
        Err(err) => (None, Some(err)),
    };
    let otel = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("bosun"))
            .with_filter(
                tracing_subscriber::filter::LevelFilter::INFO
                    .and(tracing_subscriber::filter::filter_fn(dependency_cap)),
            )
    });
    let cap = tracing_subscriber::filter::filter_fn(dependency_cap);
    let _ = tracing_subscriber::registry()
        .with(fmt.with_filter(filter.and(cap)))
        .with(otel)
        .try_init();
    if let Some(err) = problem {
        tracing::warn!(error = %err, "traces are not exported");
    }
    if let Some(err) = metrics_problem {
        tracing::warn!(error = %err, "metrics are not exported over OTLP (/metrics still serves them)");
    }
    if let Some(traces) = &settings.traces
        && provider.is_some()
    {
        tracing::info!(endpoint = %traces.endpoint, service = %settings.service_name, "exporting traces over OTLP");
    }
    if let (Some(metrics), Some(meters)) = (&settings.metrics, &meters) {
        // A second init in one process (tests) keeps the first meter.
        let _ = METER.set(meters.meter("bosun"));
        tracing::info!(
            endpoint = %metrics.export.endpoint,
            interval_ms = metrics.interval.as_millis() as u64,
            "exporting metrics over OTLP"
        );
    }
    Telemetry { provider, meters }
}

/// The process's resource: `service.name` and `OTEL_RESOURCE_ATTRIBUTES`.
fn resource(settings: &TelemetrySettings) -> opentelemetry_sdk::Resource {
    opentelemetry_sdk::Resource::builder_empty()
        .with_service_name(settings.service_name.clone())
        .with_attributes(
            settings
                .resource_attributes
                .iter()
                .map(|(key, value)| KeyValue::new(key.clone(), value.clone())),
        )
        .build()
}

fn headers_of(export: &OtlpExport) -> HashMap<String, String> {
    export
        .headers
        .iter()
        .map(|(key, value)| (key.clone(), value.expose().to_owned()))
        .collect()
}

fn http_client() -> OnRuntime {
    OnRuntime {
        client: reqwest::Client::new(),
        runtime: tokio::runtime::Handle::current(),
    }
}

/// The meter provider with its OTLP/HTTP exporter on a periodic reader
/// (cumulative temporality), when metrics are exported.
fn metric_exporter(
    settings: &TelemetrySettings,
) -> Result<Option<SdkMeterProvider>, opentelemetry_otlp::ExporterBuildError> {
    let Some(metrics) = &settings.metrics else {
        return Ok(None);
    };
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_http_client(http_client())
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(metrics.export.endpoint.clone())
        .with_headers(headers_of(&metrics.export))
        .build()?;
    let reader = opentelemetry_sdk::metrics::PeriodicReader::builder(exporter)
        .with_interval(metrics.interval)
        .build();
    Ok(Some(
        SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource(settings))
            .build(),
    ))
}

/// The tracer provider with its OTLP/HTTP batch exporter, when traces are on.
fn exporter(settings: &TelemetrySettings) -> Result<Option<SdkTracerProvider>, opentelemetry_otlp::ExporterBuildError> {
    let Some(traces) = &settings.traces else {
        return Ok(None);
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(http_client())
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(traces.endpoint.clone())
        .with_headers(headers_of(traces))
        .build()?;
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(sampler(&settings.sampler))
            .with_resource(resource(settings))
            .build(),
    ))
}

fn sampler(wanted: &TraceSampler) -> Sampler {
    match wanted {
        TraceSampler::AlwaysOn => Sampler::AlwaysOn,
        TraceSampler::AlwaysOff => Sampler::AlwaysOff,
        TraceSampler::TraceIdRatio(ratio) => Sampler::TraceIdRatioBased(*ratio),
        TraceSampler::ParentBased(inner) => Sampler::ParentBased(Box::new(sampler(inner))),
    }
}

/// The workspace's reqwest client, driven on bosun's tokio runtime: the
/// SDK's batch processor exports from a thread of its own, where reqwest
/// finds no runtime, so each export is spawned onto the one that started.
#[derive(Debug)]
struct OnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OnRuntime {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<opentelemetry_http::Response<opentelemetry_http::Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { opentelemetry_http::HttpClient::send_bytes(&client, request).await })
            .await?
    }
}

/// The `messaging.system` of spans on a transport: `servicebus` (the
/// OpenTelemetry name of Azure Service Bus); bosun's own queues are
/// `bosun.embedded` (SQLite) and `bosun.postgres` (PostgreSQL tables), for
/// which the conventions have no name.
pub fn messaging_system(transport: TransportKind) -> &'static str {
    match transport {
        TransportKind::ServiceBus => "servicebus",
        TransportKind::Embedded => "bosun.embedded",
        TransportKind::Postgres => "bosun.postgres",
    }
}

/// The trace context an envelope carries, when its `traceparent` is well formed.
pub fn context_of(envelope: &Envelope) -> Option<TraceContext> {
    TraceContext::from_headers(envelope.traceparent.as_deref(), envelope.tracestate.as_deref())
}

/// A W3C trace context as a caller hands it over: the `traceparent` and,
/// optionally, its `tracestate`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceContext {
    /// `00-<trace id>-<parent span id>-<flags>`.
    pub traceparent: String,
    /// Vendor-specific trace state, passed on unchanged.
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The context of the caller's headers, when it sent a well-formed
    /// `traceparent` (a malformed one is ignored, as W3C says).
    pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        let traceparent = traceparent?.trim();
        trace_id(traceparent)?;
        Some(Self {
            traceparent: traceparent.to_owned(),
            tracestate: tracestate.map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned),
        })
    }
}

fn extract(context: &TraceContext) -> Context {
    let mut carrier = HashMap::new();
    carrier.insert("traceparent".to_owned(), context.traceparent.clone());
    if let Some(state) = &context.tracestate {
        carrier.insert("tracestate".to_owned(), state.clone());
    }
    TraceContextPropagator::new().extract(&carrier)
}

/// Makes `span` a child of the remote context `parent` (the envelope's or
/// the caller's). Call it before the span is first entered. Nothing to do
/// when traces are off (no OpenTelemetry layer) or `parent` is `None`.
pub fn continue_trace(span: &tracing::Span, parent: Option<&TraceContext>) {
    if let Some(parent) = parent {
        let _ = span.set_parent(extract(parent));
    }
}

/// Links `span` to the span of `other` (a trace it relates to but is not
/// part of: the delivery's, for a command the caller sends in its own
/// trace). Nothing to do when traces are off.
pub fn link_to(span: &tracing::Span, other: &TraceContext) {
    let context = extract(other);
    let linked = context.span().span_context().clone();
    if linked.is_valid() {
        span.add_link(linked);
    }
}

/// The W3C context of `span`, to stamp on what it sends; `None` when
/// traces are off (no OpenTelemetry span behind it).
pub fn traceparent_of(span: &tracing::Span) -> Option<TraceContext> {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    Some(TraceContext {
        traceparent: carrier.remove("traceparent")?,
        tracestate: carrier.remove("tracestate").filter(|s| !s.is_empty()),
    })
}

/// The trace and span ids of `span` in hex, when it is an OpenTelemetry span.
pub fn ids_of(span: &tracing::Span) -> Option<(String, String)> {
    let context = span.context();
    let span_ref = context.span();
    let ids = span_ref.span_context();
    ids.is_valid()
        .then(|| (ids.trace_id().to_string(), ids.span_id().to_string()))
}

/// The context to stamp on a message `span` sends: `span`'s own, or, with
/// traces off, a new span id in the trace of `parent` (the incoming
/// message's), carrying its `tracestate`.
pub fn outgoing_context(span: &tracing::Span, parent: Option<&TraceContext>) -> TraceContext {
    traceparent_of(span).unwrap_or_else(|| TraceContext {
        traceparent: child_traceparent(parent.map(|p| p.traceparent.as_str())),
        tracestate: parent.and_then(|p| p.tracestate.clone()),
    })
}

fn random_hex(bytes: usize) -> String {
    let mut text = String::with_capacity(bytes * 2);
    loop {
        text.clear();
        for _ in 0..bytes {
            text.push_str(&format!("{:02x}", fastrand::u8(..)));
        }
        // All-zero ids are invalid in W3C trace context.
        if text.chars().any(|c| c != '0') {
            return text;
        }
    }
}

/// A new root `traceparent` (version 00, sampled).
pub fn new_traceparent() -> String {
    format!("00-{}-{}-01", random_hex(16), random_hex(8))
}

/// The trace id of a well-formed `traceparent`.
pub fn trace_id(traceparent: &str) -> Option<&str> {
    bosun_contracts::envelope::trace_id(traceparent)
}

/// A child `traceparent`: same trace, new span id. A malformed or missing
/// parent starts a new trace.
pub fn child_traceparent(parent: Option<&str>) -> String {
    match parent.and_then(trace_id) {
        Some(trace) => format!("00-{trace}-{}-01", random_hex(8)),
        None => new_traceparent(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_are_well_formed_and_children_keep_the_trace() {
        let root = new_traceparent();
        let trace = trace_id(&root).unwrap().to_owned();
        let child = child_traceparent(Some(&root));
        assert_eq!(trace_id(&child), Some(trace.as_str()));
        assert_ne!(child, root);
        assert!(trace_id("garbage").is_none());
        assert!(trace_id(&child_traceparent(Some("garbage"))).is_some());
    }
}
