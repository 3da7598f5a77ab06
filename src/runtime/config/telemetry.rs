//! OpenTelemetry settings: the standard `OTEL_*` variables, read here like
//! every other setting and handed to [`crate::runtime::telemetry`].
//!
//! Traces are exported over OTLP/HTTP with protobuf bodies when an OTLP
//! endpoint is named (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, used as given,
//! or `OTEL_EXPORTER_OTLP_ENDPOINT`, to which `/v1/traces` is appended) or
//! `OTEL_TRACES_EXPORTER=otlp` asks for the default `http://localhost:4318`;
//! `OTEL_TRACES_EXPORTER=none` or `OTEL_SDK_DISABLED=true` turns them off.
//! With none of these set nothing is exported and no span is recorded.

use super::ConfigError;
use super::types::{Secret, invalid};

/// The OTLP/HTTP port collectors listen on.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318";

/// How bosun exports its telemetry.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetrySettings {
    /// Where spans go; `None`: traces are off.
    pub traces: Option<OtlpTraces>,
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
            service_name: "bosun".to_owned(),
            resource_attributes: Vec::new(),
            sampler: TraceSampler::ParentBased(Box::new(TraceSampler::AlwaysOn)),
        }
    }
}

/// The OTLP/HTTP trace exporter's target.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpTraces {
    /// The full URL spans are posted to (ends in `/v1/traces` unless
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` said otherwise).
    pub endpoint: String,
    /// `OTEL_EXPORTER_OTLP_TRACES_HEADERS` (else `OTEL_EXPORTER_OTLP_HEADERS`):
    /// headers sent with every export, e.g. an API key; values are secrets.
    pub headers: Vec<(String, Secret)>,
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
    let exporter = get("OTEL_TRACES_EXPORTER").map(|v| v.trim().to_ascii_lowercase());
    let wanted = match exporter.as_deref() {
        None => None,
        Some("otlp") => Some(true),
        Some("none") => Some(false),
        Some(other) => {
            return Err(invalid(
                "OTEL_TRACES_EXPORTER",
                format!("`{other}` is not otlp or none (bosun exports over OTLP only)"),
            ));
        }
    };
    let endpoint = match (
        get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        get("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ) {
        (Some(traces), _) => Some(url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces.trim())?.to_owned()),
        (None, Some(base)) => Some(format!(
            "{}/v1/traces",
            url("OTEL_EXPORTER_OTLP_ENDPOINT", base.trim())?.trim_end_matches('/')
        )),
        (None, None) => None,
    };
    for name in ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"] {
        if let Some(protocol) = get(name) {
            if protocol.trim() != "http/protobuf" {
                return Err(invalid(
                    name,
                    format!("`{protocol}` is not supported: bosun exports OTLP over http/protobuf"),
                ));
            }
            break;
        }
    }
    let headers = match get("OTEL_EXPORTER_OTLP_TRACES_HEADERS").map(|h| ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", h)) {
        Some((name, text)) => key_values(name, &text)?,
        None => match get("OTEL_EXPORTER_OTLP_HEADERS") {
            Some(text) => key_values("OTEL_EXPORTER_OTLP_HEADERS", &text)?,
            None => Vec::new(),
        },
    };
    let on = !disabled && wanted.unwrap_or(endpoint.is_some());
    let traces = on.then(|| OtlpTraces {
        endpoint: endpoint.unwrap_or_else(|| format!("{DEFAULT_ENDPOINT}/v1/traces")),
        headers: headers
            .into_iter()
            .map(|(key, value)| (key, Secret::new(value)))
            .collect(),
    });
    Ok(TelemetrySettings {
        traces,
        service_name,
        resource_attributes,
        sampler,
    })
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
