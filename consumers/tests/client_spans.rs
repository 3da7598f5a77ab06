//! With traces on, every request a handler makes is a client span whose
//! W3C context the request carries, in the handler's trace: the REST
//! adapters' requests (`delivery::azure::http::send`) and the Blob Storage
//! requests the Azure SDK sends (a per-try policy of its pipeline).
//!
//! A test binary of its own with one test: it installs the process's global
//! subscriber with an OpenTelemetry layer, as `bosun serve` does with traces
//! on, which tests sharing a process with others cannot do.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_consumers::delivery::azure::http::{self, Redirects, Timeout};
use bosun_consumers::delivery::blob::{AzureBlobAuth, AzureBlobSettings, AzureBlobStore, BlobStore};
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// The headers of every request the endpoint received, in order.
type Seen = Arc<Mutex<Vec<HashMap<String, String>>>>;

/// A plain HTTP endpoint on loopback that answers every GET with `{}` and
/// every PUT as the Blob service answers Put Blob, and keeps each
/// request's headers.
fn endpoint() -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let seen: Seen = Arc::default();
    let kept = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let kept = Arc::clone(&kept);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let method = line.split_whitespace().next().unwrap_or_default().to_owned();
                    let mut headers = HashMap::new();
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 {
                            return;
                        }
                        let header = header.trim_end();
                        if header.is_empty() {
                            break;
                        }
                        if let Some((name, value)) = header.split_once(':') {
                            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
                        }
                    }
                    let length = headers
                        .get("content-length")
                        .and_then(|value| value.parse::<usize>().ok())
                        .unwrap_or(0);
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    kept.lock().unwrap().push(headers);
                    let answer = if method == "PUT" {
                        "HTTP/1.1 201 Created\r\nx-ms-request-id: 1\r\nx-ms-version: 2026-04-06\r\nETag: \"0x1\"\r\n\
                         Last-Modified: Sun, 29 Nov 2026 10:00:00 GMT\r\nContent-Length: 0\r\n\r\n"
                    } else {
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
                    };
                    let stream = reader.get_mut();
                    if stream.write_all(answer.as_bytes()).is_err() || stream.flush().is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, seen)
}

/// The trace id and span id of a span, in hex.
fn ids(span: &tracing::Span) -> (String, String) {
    let context = span.context();
    let span = context.span();
    let ids = span.span_context();
    (ids.trace_id().to_string(), ids.span_id().to_string())
}

/// The request carries a context in the handler's trace, of a span that is
/// not the handler's own (its client span).
fn assert_in_trace(headers: &HashMap<String, String>, handler: &(String, String)) {
    let traceparent = headers.get("traceparent").expect("a traceparent header");
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(parts[1], handler.0, "in the handler's trace");
    assert_ne!(parts[2], handler.1, "the client span's id, not the handler's");
}

#[tokio::test]
async fn every_request_of_a_handler_is_a_client_span_whose_context_it_carries() {
    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test"))),
    )
    .unwrap();
    let (url, seen) = endpoint();

    // A REST adapter's request.
    let client = http::client(
        Timeout::Total(Duration::from_secs(5)),
        reqwest::header::HeaderMap::new(),
        Redirects::Follow,
    )
    .unwrap();
    let handler = tracing::info_span!("process");
    let handler_ids = ids(&handler);
    http::send(client.get(format!("{url}/x")))
        .instrument(handler)
        .await
        .unwrap();
    assert_in_trace(&seen.lock().unwrap()[0], &handler_ids);

    // A blob the Azure SDK puts.
    let sas = "sv=2025-01-05&ss=b&srt=sco&sp=rwdlac&se=2099-01-01T00:00:00Z&sig=c2lnbmF0dXJl";
    let store = AzureBlobStore::new(AzureBlobSettings::new(
        format!("{url}/"),
        AzureBlobAuth::Sas(sas.into()),
    ))
    .unwrap();
    let handler = tracing::info_span!("process");
    let handler_ids = ids(&handler);
    store
        .put("logs", "contoso/run.log", b"ok".to_vec(), "text/plain")
        .instrument(handler)
        .await
        .unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_in_trace(&seen[1], &handler_ids);
}
