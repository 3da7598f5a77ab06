//! Logging and trace context.
//!
//! Logs are structured `tracing` events (text or JSON lines on stderr). Every
//! message is handled inside a span carrying its consumer, message id,
//! type, correlation id and W3C trace id, so every line logged while it is
//! handled names them. Payloads are never logged.

use crate::runtime::config::LogFormat;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `RUST_LOG` overrides the default level
/// (`info`; the MCP SDK's own lines, one set per HTTP request and with the
/// client's details, only from `warn`: bosun logs each tool call itself).
pub fn init(format: LogFormat) {
    init_with_filter(format, "info,rmcp=warn");
}

/// Installs the global subscriber with `default` as the level filter when
/// `RUST_LOG` is not set.
pub fn init_with_filter(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for people: not in files, pipes or MCP clients' logs.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).try_init(),
    };
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
    let mut parts = traceparent.split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let span = parts.next()?;
    let flags = parts.next()?;
    let hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit());
    (hex(version, 2) && hex(trace, 32) && hex(span, 16) && hex(flags, 2)).then_some(trace)
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
