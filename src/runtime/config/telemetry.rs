//! OpenTelemetry settings: the standard `OTEL_*` variables, read here like
//! every other setting and handed to [`crate::runtime::telemetry`].
//!
//! Traces are exported over OTLP/HTTP with protobuf bodies when an OTLP
//! endpoint is named (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, used as given,
//! or `OTEL_EXPORTER_OTLP_ENDPOINT`, to which `/v1/traces` is appended) or
//! `OTEL_TRACES_EXPORTER=otlp` asks for the default `http://localhost:4318`;
//! `OTEL_TRACES_EXPORTER=none` or `OTEL_SDK_DISABLED=true` turns them off.
//! With none of these set nothing is exported and no span is recorded.
//!
//! Metrics likewise, with the `METRICS` variables (`/v1/metrics`,
//! `OTEL_METRICS_EXPORTER`, `OTEL_EXPORTER_OTLP_METRICS_*`), every
//! `OTEL_METRIC_EXPORT_INTERVAL` milliseconds (default 60000). `/metrics`
//! serves the same instruments to Prometheus whatever these say.

use super::ConfigError;
use super::types::{Secret, invalid};

/// The OTLP/HTTP port collectors listen on.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318";

/// How bosun exports its telemetry.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetrySettings {
    /// Where spans go; `None`: traces are off.
    pub traces: Option<OtlpExport>,
    /// Where metrics go; `None`: not exported over OTLP.
    pub metrics: Option<OtlpMetrics>,
    /// `OTEL_SERVICE_NAME` (else `service.name` in `OTEL_RESOURCE_ATTRIBUTES`):
    /// the `service.name` of every span. Default `bosun`.
    pub service_name: String,
    /// `OTEL_RESOURCE_ATTRIBUTES`: `key=value` pairs (comma-separated,
    /// values percent-decoded) put on every span's resource.
    pub resource_attributes: Vec<(String, String)>,
    /// `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`. Default
    /// `parentbased_always_on`.
    pub sampler: TraceSampler,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self {
            traces: None,
            metrics: None,
            service_name: "bosun".to_owned(),
            resource_attributes: Vec::new(),
            sampler: TraceSampler::ParentBased(Box::new(TraceSampler::AlwaysOn)),
        }
    }
}

/// An OTLP/HTTP exporter's target, for one signal.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpExport {
    /// The full URL the signal is posted to (ends in `/v1/traces` or
    /// `/v1/metrics` unless `OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT` said
    /// otherwise).
    pub endpoint: String,
    /// `OTEL_EXPORTER_OTLP_<SIGNAL>_HEADERS` (else `OTEL_EXPORTER_OTLP_HEADERS`):
    /// headers sent with every export, e.g. an API key; values are secrets.
    pub headers: Vec<(String, Secret)>,
}

/// The OTLP metric exporter: where, and how often.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpMetrics {
    /// Where.
    pub export: OtlpExport,
    /// `OTEL_METRIC_EXPORT_INTERVAL` (milliseconds): how often. Default 60 s.
    pub interval: std::time::Duration,
}

/// Which spans are recorded (the `OTEL_TRACES_SAMPLER` values).
#[derive(Debug, Clone, PartialEq)]
pub enum TraceSampler {
    /// `always_on`: every span.
    AlwaysOn,
    /// `always_off`: none.
    AlwaysOff,
    /// `traceidratio`: this share of traces, by trace id.
    TraceIdRatio(f64),
    /// `parentbased_*`: as the caller decided when there is one, else the
    /// inner sampler.
    ParentBased(Box<TraceSampler>),
}

/// Reads the telemetry settings through `get` (the environment over the
/// settings file).
pub(super) fn read(get: &dyn Fn(&str) -> Option<String>) -> Result<TelemetrySettings, ConfigError> {
    let mut resource_attributes = match get("OTEL_RESOURCE_ATTRIBUTES") {
        Some(text) => key_values("OTEL_RESOURCE_ATTRIBUTES", &text)?,
        None => Vec::new(),
    };
    let named_service = resource_attributes
        .iter()
        .position(|(key, _)| key == "service.name")
        .map(|index| resource_attributes.remove(index).1);
    let service_name = get("OTEL_SERVICE_NAME")
        .or(named_service)
        .unwrap_or_else(|| TelemetrySettings::default().service_name);
    let sampler = sampler(get)?;

    let disabled = match get("OTEL_SDK_DISABLED").map(|v| v.trim().to_ascii_lowercase()) {
        None => false,
        Some(v) if v == "true" => true,
        Some(v) if v == "false" => false,
        Some(other) => return Err(invalid("OTEL_SDK_DISABLED", format!("`{other}` is not true or false"))),
    };
    let traces = export(get, Signal::Traces, disabled)?;
    let metrics = match export(get, Signal::Metrics, disabled)? {
        None => None,
        Some(export) => {
            let interval = match get("OTEL_METRIC_EXPORT_INTERVAL") {
                None => std::time::Duration::from_secs(60),
                Some(text) => match text.trim().parse::<u64>() {
                    Ok(ms) if ms > 0 => std::time::Duration::from_millis(ms),
                    _ => {
                        return Err(invalid(
                            "OTEL_METRIC_EXPORT_INTERVAL",
                            format!("`{text}` is not a positive number of milliseconds"),
                        ));
                    }
                },
            };
            Some(OtlpMetrics { export, interval })
        }
    };
    Ok(TelemetrySettings {
        traces,
        metrics,
        service_name,
        resource_attributes,
        sampler,
    })
}

/// A signal OTLP carries.
#[derive(Debug, Clone, Copy)]
enum Signal {
    Traces,
    Metrics,
}

impl Signal {
    /// Its name in the `OTEL_*` variables.
    fn variable(self) -> &'static str {
        match self {
            Self::Traces => "TRACES",
            Self::Metrics => "METRICS",
        }
    }

    /// Its path under a base endpoint.
    fn path(self) -> &'static str {
        match self {
            Self::Traces => "/v1/traces",
            Self::Metrics => "/v1/metrics",
        }
    }
}

/// The exporter of one signal: on when an endpoint is named or
/// `OTEL_<SIGNAL>_EXPORTER=otlp`, off with `none` or when the SDK is disabled.
fn export(
    get: &dyn Fn(&str) -> Option<String>,
    signal: Signal,
    disabled: bool,
) -> Result<Option<OtlpExport>, ConfigError> {
    let name = signal.variable();
    let exporter_variable = format!("OTEL_{name}_EXPORTER");
    let wanted = match get(&exporter_variable)
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        None => None,
        Some("otlp") => Some(true),
        Some("none") => Some(false),
        Some(other) => {
            return Err(invalid(
                &exporter_variable,
                format!("`{other}` is not otlp or none (bosun exports over OTLP only)"),
            ));
        }
    };
    let endpoint_variable = format!("OTEL_EXPORTER_OTLP_{name}_ENDPOINT");
    let endpoint = match (get(&endpoint_variable), get("OTEL_EXPORTER_OTLP_ENDPOINT")) {
        (Some(own), _) => Some(url(&endpoint_variable, own.trim())?.to_owned()),
        (None, Some(base)) => Some(format!(
            "{}{}",
            url("OTEL_EXPORTER_OTLP_ENDPOINT", base.trim())?.trim_end_matches('/'),
            signal.path()
        )),
        (None, None) => None,
    };
    for variable in [
        format!("OTEL_EXPORTER_OTLP_{name}_PROTOCOL"),
        "OTEL_EXPORTER_OTLP_PROTOCOL".to_owned(),
    ] {
        if let Some(protocol) = get(&variable) {
            if protocol.trim() != "http/protobuf" {
                return Err(invalid(
                    &variable,
                    format!("`{protocol}` is not supported: bosun exports OTLP over http/protobuf"),
                ));
            }
            break;
        }
    }
    let headers_variable = format!("OTEL_EXPORTER_OTLP_{name}_HEADERS");
    let headers = match get(&headers_variable) {
        Some(text) => key_values(&headers_variable, &text)?,
        None => match get("OTEL_EXPORTER_OTLP_HEADERS") {
            Some(text) => key_values("OTEL_EXPORTER_OTLP_HEADERS", &text)?,
            None => Vec::new(),
        },
    };
    let on = !disabled && wanted.unwrap_or(endpoint.is_some());
    Ok(on.then(|| OtlpExport {
        endpoint: endpoint.unwrap_or_else(|| format!("{DEFAULT_ENDPOINT}{}", signal.path())),
        headers: headers
            .into_iter()
            .map(|(key, value)| (key, Secret::new(value)))
            .collect(),
    }))
}

fn url<'a>(name: &str, text: &'a str) -> Result<&'a str, ConfigError> {
    if text.starts_with("http://") || text.starts_with("https://") {
        Ok(text)
    } else {
        Err(invalid(name, format!("`{text}` is not an http:// or https:// URL")))
    }
}

fn sampler(get: &dyn Fn(&str) -> Option<String>) -> Result<TraceSampler, ConfigError> {
    let ratio = || -> Result<f64, ConfigError> {
        match get("OTEL_TRACES_SAMPLER_ARG") {
            None => Ok(1.0),
            Some(text) => match text.trim().parse::<f64>() {
                Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
                _ => Err(invalid(
                    "OTEL_TRACES_SAMPLER_ARG",
                    format!("`{text}` is not a ratio from 0 to 1"),
                )),
            },
        }
    };
    let parent_based = |inner: TraceSampler| TraceSampler::ParentBased(Box::new(inner));
    Ok(
        match get("OTEL_TRACES_SAMPLER")
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref()
        {
            None | Some("parentbased_always_on") => parent_based(TraceSampler::AlwaysOn),
            Some("always_on") => TraceSampler::AlwaysOn,
            Some("always_off") => TraceSampler::AlwaysOff,
            Some("traceidratio") => TraceSampler::TraceIdRatio(ratio()?),
            Some("parentbased_always_off") => parent_based(TraceSampler::AlwaysOff),
            Some("parentbased_traceidratio") => parent_based(TraceSampler::TraceIdRatio(ratio()?)),
            Some(other) => {
                return Err(invalid(
                    "OTEL_TRACES_SAMPLER",
                    format!(
                        "`{other}` is not always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio"
                    ),
                ));
            }
        },
    )
}

/// `key=value,key=value` with percent-encoded values (the W3C Baggage
/// format the `OTEL_*` lists use).
fn key_values(name: &str, text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let mut pairs = Vec::new();
    for item in text.split(',').map(str::trim).filter(|item| !item.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(invalid(name, format!("`{item}` is not key=value")));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(invalid(name, format!("`{item}` has no key")));
        }
        let value = percent_decode(value.trim())
            .ok_or_else(|| invalid(name, format!("the value of `{key}` is not valid percent-encoded UTF-8")))?;
        pairs.push((key.to_owned(), value));
    }
    Ok(pairs)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = text.get(index + 1..index + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> Result<TelemetrySettings, ConfigError> {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        read(&|name| map.get(name).cloned())
    }

    #[test]
    fn traces_are_off_unless_an_endpoint_or_the_exporter_is_named() {
        let none = settings(&[]).unwrap();
        assert_eq!(none, TelemetrySettings::default());
        assert!(settings(&[("OTEL_SERVICE_NAME", "x")]).unwrap().traces.is_none());
        let asked = settings(&[("OTEL_TRACES_EXPORTER", "otlp")]).unwrap();
        assert_eq!(asked.traces.unwrap().endpoint, "http://localhost:4318/v1/traces");
        let off = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ])
        .unwrap();
        assert!(off.traces.is_none());
        let none = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ])
        .unwrap();
        assert!(none.traces.is_none());
    }

    #[test]
    fn metrics_are_exported_like_traces_with_their_own_variables_and_interval() {
        assert!(settings(&[]).unwrap().metrics.is_none());
        let base = settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]).unwrap();
        let metrics = base.metrics.unwrap();
        assert_eq!(metrics.export.endpoint, "http://c:4318/v1/metrics");
        assert_eq!(metrics.interval, std::time::Duration::from_secs(60));
        let own = settings(&[
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "https://prom/api/v1/otlp/v1/metrics",
            ),
            ("OTEL_METRIC_EXPORT_INTERVAL", "5000"),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-key=m"),
        ])
        .unwrap();
        assert!(own.traces.is_none(), "only the metrics endpoint is named");
        let metrics = own.metrics.unwrap();
        assert_eq!(metrics.export.endpoint, "https://prom/api/v1/otlp/v1/metrics");
        assert_eq!(metrics.interval, std::time::Duration::from_secs(5));
        assert_eq!(metrics.export.headers[0].1.expose(), "m");
        let traces_only = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ])
        .unwrap();
        assert!(traces_only.metrics.is_none() && traces_only.traces.is_some());
        let bad = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "soon"),
        ])
        .unwrap_err();
        assert!(bad.to_string().contains("OTEL_METRIC_EXPORT_INTERVAL"), "{bad}");
        let prometheus = settings(&[("OTEL_METRICS_EXPORTER", "prometheus")]).unwrap_err();
        assert!(prometheus.to_string().contains("OTEL_METRICS_EXPORTER"), "{prometheus}");
    }

    #[test]
    fn the_signal_endpoint_is_used_as_given_and_the_base_gets_the_path() {
        let base = settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318/")]).unwrap();
        assert_eq!(base.traces.unwrap().endpoint, "https://collector:4318/v1/traces");
        let signal = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://tempo/otlp/v1/traces"),
        ])
        .unwrap();
        assert_eq!(signal.traces.unwrap().endpoint, "https://tempo/otlp/v1/traces");
        assert!(settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")]).is_err());
    }

    #[test]
    fn only_http_protobuf_is_accepted_and_errors_name_the_setting() {
        assert!(settings(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]).is_ok());
        let grpc = settings(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).unwrap_err();
        assert!(grpc.to_string().contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{grpc}");
        let sampler = settings(&[("OTEL_TRACES_SAMPLER", "sometimes")]).unwrap_err();
        assert!(sampler.to_string().contains("OTEL_TRACES_SAMPLER"), "{sampler}");
        assert!(
            settings(&[
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "2")
            ])
            .is_err()
        );
    }

    #[test]
    fn resource_attributes_sampler_and_headers_are_parsed() {
        let parsed = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=from-attrs, deployment.environment=prod%20eu",
            ),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s%3Dcret"),
        ])
        .unwrap();
        assert_eq!(parsed.service_name, "from-attrs");
        assert_eq!(
            parsed.resource_attributes,
            vec![("deployment.environment".to_owned(), "prod eu".to_owned())]
        );
        assert_eq!(
            parsed.sampler,
            TraceSampler::ParentBased(Box::new(TraceSampler::TraceIdRatio(0.25)))
        );
        let traces = parsed.traces.unwrap();
        assert_eq!(traces.headers[0].0, "api-key");
        assert_eq!(traces.headers[0].1.expose(), "s=cret");
        assert_eq!(format!("{:?}", traces.headers), r#"[("api-key", [redacted])]"#);
        let named = settings(&[
            ("OTEL_SERVICE_NAME", "svc"),
            ("OTEL_RESOURCE_ATTRIBUTES", "service.name=x"),
        ])
        .unwrap();
        assert_eq!(named.service_name, "svc");
    }
}
