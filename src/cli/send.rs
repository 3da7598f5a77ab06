//! `bosun send`: validate a command (or event) payload and send it,
//! starting a delivery or joining one.

use std::io::{Read, Write};

use anyhow::{Context, Result};
use clap::Args;
use uuid::Uuid;

use bosun::operator::{SendOptions, SentMessage};
use bosun::runtime::config::Settings;
use bosun::runtime::telemetry::TraceContext;
use bosun::wiring::Backends;

use super::output::print_json;

/// `bosun send`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct SendArgs {
    /// Message type, e.g. ProvisionRepository.
    #[arg(value_name = "TYPE")]
    pub message_type: String,
    /// The payload as JSON, or @FILE to read it from a file (@- for stdin).
    #[arg(long, value_name = "JSON|@FILE")]
    pub payload: String,
    /// Join an existing delivery instead of starting a new one.
    #[arg(long, value_name = "ID")]
    pub correlation_id: Option<Uuid>,
    /// Tenant the delivery belongs to.
    #[arg(long, value_name = "ID", default_value = "default")]
    pub tenant: String,
    /// The caller's W3C trace context: the delivery's trace continues it
    /// (as the HTTP API does with the `traceparent` header).
    #[arg(long, env = "TRACEPARENT", value_name = "00-TRACE-SPAN-FLAGS")]
    pub traceparent: Option<String>,
    /// The `tracestate` that goes with `--traceparent`.
    #[arg(long, env = "TRACESTATE", value_name = "STATE", requires = "traceparent")]
    pub tracestate: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Reads the payload (before opening anything, so a bad one costs
/// nothing) and sends it as the settings' operator.
pub async fn run(args: SendArgs, settings: &Settings) -> Result<()> {
    let payload = read_payload(&args.payload, std::io::stdin())?;
    let trace = match args.traceparent.as_deref() {
        None => None,
        Some(traceparent) => Some(
            TraceContext::from_headers(Some(traceparent), args.tracestate.as_deref()).with_context(|| {
                format!("--traceparent `{traceparent}` is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)")
            })?,
        ),
    };
    let backends = Backends::open(settings).await?;
    let options = SendOptions {
        correlation_id: args.correlation_id,
        message_id: None,
        trace,
        joined: None,
    };
    let sent = backends
        .operator(&settings.operator)
        .send_with(&args.message_type, &payload, &args.tenant, &options)
        .await?;
    if args.json {
        print_json(&sent)
    } else {
        write_sent(&mut std::io::stdout().lock(), &sent)
    }
}

/// `--payload`: inline JSON, `@FILE`, or `@-` for `stdin`. Malformed JSON
/// is reported with its line and column.
pub(super) fn read_payload(payload: &str, mut stdin: impl Read) -> Result<serde_json::Value> {
    let text = match payload.strip_prefix('@') {
        Some("-") => {
            let mut text = String::new();
            stdin
                .read_to_string(&mut text)
                .context("reading the payload from stdin")?;
            text
        }
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading the payload from {path}"))?,
        None => payload.to_owned(),
    };
    serde_json::from_str(&text).context("--payload is not valid JSON")
}

/// What was sent, for a person.
fn write_sent(out: &mut impl Write, sent: &SentMessage) -> Result<()> {
    writeln!(out, "messageId     {}", sent.message_id)?;
    writeln!(out, "correlationId {}", sent.correlation_id)?;
    writeln!(out, "sent {} to {}", sent.message_type, sent.destination)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A stdin that must not be read.
    struct NoStdin;

    impl Read for NoStdin {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            panic!("stdin was read")
        }
    }

    #[test]
    fn inline_json_is_the_payload() {
        let payload = read_payload(r#"{"name": "payments-api", "private": true}"#, NoStdin).unwrap();
        assert_eq!(payload, json!({"name": "payments-api", "private": true}));
    }

    #[test]
    fn at_file_reads_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("payload.json");
        std::fs::write(&path, "{\"name\": \"from-file\"}\n").unwrap();
        let payload = read_payload(&format!("@{}", path.display()), NoStdin).unwrap();
        assert_eq!(payload, json!({"name": "from-file"}));
    }

    #[test]
    fn at_dash_reads_stdin() {
        let payload = read_payload("@-", &b"[1, 2]"[..]).unwrap();
        assert_eq!(payload, json!([1, 2]));
    }

    #[test]
    fn a_missing_file_is_named() {
        let err = read_payload("@/no/such/payload.json", NoStdin).unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.starts_with("reading the payload from /no/such/payload.json: "),
            "{text}"
        );
    }

    #[test]
    fn malformed_json_names_the_flag_and_the_position() {
        for (given, position) in [
            (r#"{"a":"#, "line 1 column 5"),
            ("{\n  \"a\": 1,\n}", "line 3 column 1"),
            ("", "line 1 column 0"),
        ] {
            let err = read_payload(given, NoStdin).unwrap_err();
            let text = format!("{err:#}");
            assert!(text.starts_with("--payload is not valid JSON: "), "{text}");
            assert!(text.contains(position), "{given:?}: {text}");
        }
        let from_stdin = read_payload("@-", &b"{oops}"[..]).unwrap_err();
        assert!(format!("{from_stdin:#}").contains("line 1 column 2"), "{from_stdin:#}");
    }

    #[test]
    fn a_send_says_the_ids_and_where_it_went() {
        let sent = SentMessage {
            message_id: Uuid::from_u128(1),
            correlation_id: Uuid::from_u128(2),
            message_type: "ProvisionRepository".to_owned(),
            destination: "repository-provisioning".to_owned(),
        };
        let mut out = Vec::new();
        write_sent(&mut out, &sent).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "messageId     00000000-0000-0000-0000-000000000001\n\
             correlationId 00000000-0000-0000-0000-000000000002\n\
             sent ProvisionRepository to repository-provisioning\n"
        );
    }
}
