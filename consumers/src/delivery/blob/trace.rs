//! A client span for every try of every Blob Storage request, as
//! [`crate::delivery::azure::http::send`] makes for the REST adapters: the
//! Azure SDK sends the blob requests, so the span and the `traceparent`
//! header are added by a policy of its pipeline, run once per try (a retry
//! is a span of its own, as the HTTP conventions ask).

use std::sync::Arc;

use async_trait::async_trait;
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{Context, Request};
use opentelemetry::propagation::Injector;
use tracing::Instrument;

use crate::delivery::azure::http;

/// See the module's documentation.
#[derive(Debug, Default)]
pub(super) struct TracePolicy;

/// The headers the propagator writes, collected to put on the request.
struct Collected(Vec<(String, String)>);

impl Injector for Collected {
    fn set(&mut self, key: &str, value: String) {
        self.0.push((key.to_owned(), value));
    }
}

#[async_trait]
impl Policy for TracePolicy {
    async fn send(&self, ctx: &Context, request: &mut Request, next: &[Arc<dyn Policy>]) -> PolicyResult {
        let span = http::client_span(request.method().as_ref(), request.url());
        let mut headers = Collected(Vec::new());
        http::inject(&span, &mut headers);
        for (name, value) in headers.0 {
            request.insert_header(name, value);
        }
        let result = next[0].send(ctx, request, &next[1..]).instrument(span.clone()).await;
        match &result {
            Ok(response) => http::record_status(&span, u16::from(response.status())),
            Err(_) => http::record_failure(&span, "transport"),
        }
        result
    }
}
