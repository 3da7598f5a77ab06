//! A Prometheus check's sample: an instant query of the HTTP API,
//! `GET {url}/api/v1/query?query=<PromQL>`, whose every value must be
//! within the check's bounds.
//!
//! The answer is Prometheus' envelope, `{"status": "success" | "error",
//! "data": {"resultType", "result"}, "errorType", "error", "warnings"}`:
//!
//! - `vector`: `[{"metric": {labels}, "value": [<time>, "<value>"]}]`
//!   (a native histogram's series has `histogram` instead of `value`);
//! - `matrix`: `[{"metric": {labels}, "values": [[<time>, "<value>"], ...]}]`;
//! - `scalar`: `[<time>, "<value>"]`; `string`: `[<time>, "<text>"]`.
//!
//! Values are strings (`"0.25"`, `"NaN"`, `"+Inf"`, `"-Inf"`). The sample
//! passes when there is at least one value and every value is within
//! `[min, max]` (a bound not given is open). It fails for no data, a value
//! out of bounds or `NaN`, a histogram or a string (nothing to bound), an
//! `error` status (its `errorType` and `error`, clipped), any other non-2xx
//! answer, or an answer that is not this JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use bosun_sagas::release::PrometheusCheck;
use serde::Deserialize;
use serde_json::Value;

use super::adapter::{Sample, clip, failure, read_answer, shown, tenant_url};
use crate::delivery::azure::http;

/// The longest series labels kept in a detail, in characters.
const MAX_LABEL_CHARS: usize = 120;

/// Prometheus' answer envelope.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    status: String,
    data: Option<Data>,
    error_type: Option<String>,
    error: Option<String>,
}

/// `data` of a query: the result's type and the result, read by type.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    #[serde(default)]
    result: Value,
}

/// A `vector` series.
#[derive(Debug, Deserialize)]
struct InstantSeries {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    value: Option<(Value, String)>,
}

/// A `matrix` series.
#[derive(Debug, Deserialize)]
struct RangeSeries {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    #[serde(default)]
    values: Vec<(Value, String)>,
}

/// One value the query returned, and the series it belongs to.
#[derive(Debug)]
struct Point {
    /// The series' labels as PromQL writes them (`up{job="api"}`), or
    /// `the scalar`.
    series: String,
    /// The value as Prometheus wrote it.
    text: String,
}

/// One sample of `check` with `client`, waiting at most `timeout`.
pub(super) async fn sample(client: &reqwest::Client, check: &PrometheusCheck, timeout: Duration) -> Sample {
    let mut url = match tenant_url(&check.url) {
        Ok(url) => url,
        Err(refused) => return Sample::fail(refused),
    };
    let path = format!("{}/api/v1/query", url.path().trim_end_matches('/'));
    url.set_path(&path);
    url.set_fragment(None);
    url.query_pairs_mut().append_pair("query", &check.query);
    let target = format!("query of {}", shown(&url));
    let response = match http::send(client.get(url).timeout(timeout)).await {
        Ok(response) => response,
        Err(err) => return Sample::fail(format!("{target} failed: {}", failure(&err, timeout))),
    };
    let status = response.status();
    let body = match read_answer(response, timeout).await {
        Ok(body) => body,
        Err(reason) => return Sample::fail(format!("{target} answered {status}, then failed: {reason}")),
    };
    let envelope = serde_json::from_slice::<Envelope>(&body).ok();
    if let Some(Envelope {
        status: answer_status,
        error_type,
        error,
        ..
    }) = &envelope
        && answer_status == "error"
    {
        let reason = format!(
            "{}: {}",
            error_type.as_deref().unwrap_or("error"),
            error.as_deref().unwrap_or("no message")
        );
        return Sample::fail(format!("{target} failed ({status}): {}", clip(&reason)));
    }
    if !status.is_success() {
        return Sample::fail(format!("{target} answered {status}"));
    }
    let Some(envelope) = envelope else {
        return Sample::fail(format!(
            "{target} answered {status} with something that is not a Prometheus API answer"
        ));
    };
    if envelope.status != "success" {
        return Sample::fail(format!(
            "{target} answered an unknown status `{}`",
            clip(&envelope.status)
        ));
    }
    let Some(data) = envelope.data else {
        return Sample::fail(format!("{target} answered success without data"));
    };
    match points(data) {
        Ok(points) => judge(&points, check.min, check.max),
        Err(reason) => Sample::fail(format!("the query {reason}")),
    }
}

/// Every value of a query's `data`; `Err` says why there is nothing to
/// bound (a string, a native histogram, a shape that is not Prometheus').
fn points(data: Data) -> Result<Vec<Point>, String> {
    let unreadable = |_| format!("returned a {} result that cannot be read", data.result_type);
    match data.result_type.as_str() {
        "vector" => {
            let series: Vec<InstantSeries> = serde_json::from_value(data.result.clone()).map_err(unreadable)?;
            series
                .into_iter()
                .map(|series| match series.value {
                    Some((_, text)) => Ok(Point {
                        series: labels(&series.metric),
                        text,
                    }),
                    None => Err(format!(
                        "returned a native histogram for {}, which has no single value to bound",
                        labels(&series.metric)
                    )),
                })
                .collect()
        }
        "matrix" => {
            let series: Vec<RangeSeries> = serde_json::from_value(data.result.clone()).map_err(unreadable)?;
            Ok(series
                .into_iter()
                .flat_map(|series| {
                    let name = labels(&series.metric);
                    series.values.into_iter().map(move |(_, text)| Point {
                        series: name.clone(),
                        text,
                    })
                })
                .collect())
        }
        "scalar" => {
            let (_, text): (Value, String) = serde_json::from_value(data.result.clone()).map_err(unreadable)?;
            Ok(vec![Point {
                series: "the scalar".to_owned(),
                text,
            }])
        }
        "string" => Err("returned a string, not a number".to_owned()),
        other => Err(format!("returned an unknown result type `{}`", clip(other))),
    }
}

/// Whether every point is a number within `[min, max]`.
fn judge(points: &[Point], min: Option<f64>, max: Option<f64>) -> Sample {
    if points.is_empty() {
        return Sample::fail("the query returned no data");
    }
    let mut first_failure = None;
    let mut failures = 0usize;
    for point in points {
        let problem = match point.text.trim().parse::<f64>() {
            Err(_) => Some(format!(
                "value `{}` of {} is not a number",
                clip(&point.text),
                point.series
            )),
            Ok(value) if value.is_nan() => Some(format!("value NaN of {} is not a number", point.series)),
            Ok(value) if min.is_some_and(|min| value < min) => Some(format!(
                "value {} of {} is below the minimum {}",
                point.text,
                point.series,
                min.unwrap_or_default()
            )),
            Ok(value) if max.is_some_and(|max| value > max) => Some(format!(
                "value {} of {} is above the maximum {}",
                point.text,
                point.series,
                max.unwrap_or_default()
            )),
            Ok(_) => None,
        };
        if let Some(problem) = problem {
            failures += 1;
            first_failure.get_or_insert(problem);
        }
    }
    match first_failure {
        Some(problem) if points.len() == 1 => Sample::fail(problem),
        Some(problem) => Sample::fail(format!("{problem} ({failures} of {} values fail)", points.len())),
        None if points.len() == 1 => Sample::pass(format!(
            "value {} of {} is within {}",
            points[0].text,
            points[0].series,
            bounds(min, max)
        )),
        None => Sample::pass(format!("all {} values are within {}", points.len(), bounds(min, max))),
    }
}

/// The bounds as a detail says them.
fn bounds(min: Option<f64>, max: Option<f64>) -> String {
    match (min, max) {
        (Some(min), Some(max)) => format!("[{min}, {max}]"),
        (Some(min), None) => format!("the minimum {min}"),
        (None, Some(max)) => format!("the maximum {max}"),
        (None, None) => "any bounds".to_owned(),
    }
}

/// A series' labels as PromQL writes them, `name{label="value",...}`,
/// clipped to [`MAX_LABEL_CHARS`]; `{}` for none.
fn labels(metric: &BTreeMap<String, String>) -> String {
    let mut text = metric.get("__name__").cloned().unwrap_or_default();
    text.push('{');
    let mut first = true;
    for (name, value) in metric.iter().filter(|(name, _)| *name != "__name__") {
        if !first {
            text.push(',');
        }
        first = false;
        let _ = write!(text, "{name}={value:?}");
    }
    text.push('}');
    if text.chars().count() > MAX_LABEL_CHARS {
        let mut cut: String = text.chars().take(MAX_LABEL_CHARS - 2).collect();
        cut.push_str("…}");
        return cut;
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(text: &str) -> Point {
        Point {
            series: "up{}".to_owned(),
            text: text.to_owned(),
        }
    }

    #[test]
    fn prometheus_special_values_parse_and_infinities_break_bounds() {
        assert!(
            judge(&[point("+Inf")], None, Some(1.0))
                .detail
                .contains("above the maximum 1")
        );
        assert!(
            judge(&[point("-Inf")], Some(0.0), None)
                .detail
                .contains("below the minimum 0")
        );
        assert!(!judge(&[point("NaN")], Some(0.0), Some(1.0)).passed);
        assert!(judge(&[point("1e-3")], Some(0.0), Some(1.0)).passed);
        assert!(!judge(&[point("high")], Some(0.0), None).passed);
    }

    #[test]
    fn labels_read_as_promql_and_are_clipped() {
        let metric = BTreeMap::from([
            ("__name__".to_owned(), "http_errors".to_owned()),
            ("job".to_owned(), "api".to_owned()),
        ]);
        assert_eq!(labels(&metric), r#"http_errors{job="api"}"#);
        let long = BTreeMap::from([("pod".to_owned(), "x".repeat(500))]);
        let clipped = labels(&long);
        assert_eq!(clipped.chars().count(), MAX_LABEL_CHARS);
        assert!(clipped.ends_with("…}"), "{clipped}");
    }
}
