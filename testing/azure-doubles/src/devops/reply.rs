//! How the Azure DevOps double reads a request and writes an answer: the
//! request's parts, Azure DevOps' error body, JSON lists and dates.

use axum::body::Bytes;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The highest REST API version the double serves (as Azure DevOps
/// Services does today).
pub(crate) const MAX_API_VERSION: (u32, u32) = (7, 2);

/// One request, taken apart.
#[derive(Debug)]
pub(crate) struct Req {
    /// The method.
    pub(crate) method: Method,
    /// The path segments after `{project}/_apis/`, percent-decoded.
    pub(crate) segments: Vec<String>,
    /// The query pairs, decoded.
    pub(crate) query: Vec<(String, String)>,
    /// The `Accept` header.
    pub(crate) accept: String,
    /// The body.
    pub(crate) body: Bytes,
    /// The `api-version` asked for (query or `Accept`), if any.
    pub(crate) api_version: Option<String>,
}

impl Req {
    /// The first query value of `name` (names compared ignoring case, as
    /// Azure DevOps does).
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// Lowercased segment `index`, or `""`.
    pub(crate) fn seg(&self, index: usize) -> String {
        self.segments
            .get(index)
            .map(|s| s.to_ascii_lowercase())
            .unwrap_or_default()
    }

    /// The same request without its first segment (`git/repositories/...`
    /// seen as `repositories/...`).
    pub(crate) fn shifted(&self) -> Self {
        Self {
            method: self.method.clone(),
            segments: self.segments.iter().skip(1).cloned().collect(),
            query: self.query.clone(),
            accept: self.accept.clone(),
            body: self.body.clone(),
            api_version: self.api_version.clone(),
        }
    }

    /// The raw segment `index`, or `""`.
    pub(crate) fn raw(&self, index: usize) -> &str {
        self.segments.get(index).map_or("", String::as_str)
    }

    /// The body as JSON; an answer of 400 when it is not.
    pub(crate) fn json(&self) -> Result<Value, Box<Response>> {
        serde_json::from_slice(&self.body).map_err(|err| {
            Box::new(error(
                StatusCode::BAD_REQUEST,
                "InvalidArgumentValueException",
                &format!("The request body is not valid JSON: {err}"),
            ))
        })
    }

    /// `400` unless the `api-version` asks for a preview, as Azure DevOps
    /// answers a released version of a resource that is only in preview.
    pub(crate) fn require_preview(&self) -> Result<(), Box<Response>> {
        match self.api_version.as_deref() {
            Some(version) if !version.contains("-preview") => Err(Box::new(error(
                StatusCode::BAD_REQUEST,
                "VssInvalidPreviewVersionException",
                &format!(
                    "The requested version \"{version}\" of the resource is under preview. The -preview flag must be supplied in the api-version for such requests. For example: \"{version}-preview\""
                ),
            ))),
            _ => Ok(()),
        }
    }

    /// Whether the caller asked for raw bytes (`Accept:
    /// application/octet-stream` or `$format=octetStream`).
    pub(crate) fn wants_octets(&self) -> bool {
        self.accept.contains("application/octet-stream")
            || self
                .param("$format")
                .is_some_and(|f| f.eq_ignore_ascii_case("octetStream"))
    }
}

/// An error answered in Azure DevOps' shape: `message`, `typeName`,
/// `typeKey`, `errorCode`, `eventId`.
pub(crate) fn error(status: StatusCode, type_key: &str, message: &str) -> Response {
    let body = json!({
        "$id": "1",
        "innerException": null,
        "message": message,
        "typeName": format!("Microsoft.TeamFoundation.{type_key}, Microsoft.TeamFoundation.Server.Core"),
        "typeKey": type_key,
        "errorCode": 0,
        "eventId": 3000,
    });
    (status, axum::Json(body)).into_response()
}

/// `404` for a route the double does not serve.
pub(crate) fn no_route(method: &Method, path: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "ApiResourceNotFoundException",
        &format!("The double does not serve {method} {path}"),
    )
}

/// `200` with a JSON body.
pub(crate) fn ok(value: Value) -> Response {
    (StatusCode::OK, axum::Json(value)).into_response()
}

/// `201` with a JSON body.
pub(crate) fn created(value: Value) -> Response {
    (StatusCode::CREATED, axum::Json(value)).into_response()
}

/// `{count, value}`, Azure DevOps' list wrapper.
pub(crate) fn list(values: Vec<Value>) -> Response {
    ok(json!({ "count": values.len(), "value": values }))
}

/// Raw bytes.
pub(crate) fn octets(bytes: Vec<u8>) -> Response {
    let mut response = (StatusCode::OK, bytes).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    response
}

/// Plain text.
pub(crate) fn text(body: String) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Now, as Azure DevOps writes dates (RFC 3339, UTC).
pub(crate) fn now() -> String {
    date(OffsetDateTime::now_utc())
}

/// A date as Azure DevOps writes it.
pub(crate) fn date(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

/// Percent-decodes a path segment (invalid escapes are kept as written).
pub(crate) fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%'
            && index + 2 < bytes.len()
            && let Some(byte) = std::str::from_utf8(&bytes[index + 1..index + 3])
                .ok()
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(byte);
            index += 3;
            continue;
        }
        out.push(bytes[index]);
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `400` unless `api-version` is absent or one the double serves
/// (`7.1`, `7.1-preview.1`, `7.2-preview.3` ...), as Azure DevOps refuses
/// a version it does not know.
pub(crate) fn check_api_version(query: &[(String, String)]) -> Result<(), Box<Response>> {
    let Some((_, version)) = query.iter().find(|(key, _)| key.eq_ignore_ascii_case("api-version")) else {
        return Ok(());
    };
    let number = version.split('-').next().unwrap_or_default();
    let mut parts = number.split('.');
    let major = parts.next().and_then(|p| p.parse::<u32>().ok());
    let minor = parts.next().map_or(Some(0), |p| p.parse::<u32>().ok());
    let suffix = version.strip_prefix(number).unwrap_or_default();
    let suffix_ok = suffix.is_empty()
        || suffix == "-preview"
        || suffix
            .strip_prefix("-preview.")
            .is_some_and(|n| n.parse::<u32>().is_ok());
    match (major, minor) {
        (Some(major), Some(minor)) if suffix_ok && (major, minor) <= MAX_API_VERSION => Ok(()),
        (Some(_), Some(_)) if suffix_ok => Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            "VssVersionOutOfRangeException",
            &format!(
                "The requested REST API version of {version} is out of range for this server. The latest REST API version for this server is {}.{}.",
                MAX_API_VERSION.0, MAX_API_VERSION.1
            ),
        ))),
        _ => Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            "VssInvalidApiVersionException",
            &format!("The API version {version} is not valid."),
        ))),
    }
}

/// An enum field as its name, lowercased: a JSON string as written, or a
/// number looked up in `names` (Microsoft's clients send enums as numbers,
/// which Azure DevOps accepts).
pub(crate) fn enum_name(value: &serde_json::Value, names: &[(i64, &str)]) -> Option<String> {
    if let Some(text) = value.as_str() {
        return Some(text.to_ascii_lowercase());
    }
    let number = value.as_i64()?;
    names
        .iter()
        .find(|(n, _)| *n == number)
        .map(|(_, name)| name.to_ascii_lowercase())
}

/// `PullRequestStatus`.
pub(crate) const PULL_REQUEST_STATUS: &[(i64, &str)] = &[
    (0, "notSet"),
    (1, "active"),
    (2, "abandoned"),
    (3, "completed"),
    (4, "all"),
];
