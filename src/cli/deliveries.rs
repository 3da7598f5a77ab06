//! `bosun deliveries list|show`: recent deliveries and their status, and the
//! timeline of one delivery.

use std::io::Write;

use anyhow::{Result, bail};
use clap::{Subcommand, ValueEnum};
use serde::Serialize;
use time::OffsetDateTime;

use bosun::operator::Delivery;
use bosun::ports::store::{DeliveryRecord, StoreError};
use bosun::runtime::config::Settings;
use bosun::wiring::Backends;

use super::output::{Align, Table, for_terminal, parse_since, precise_time, print_json, short_time};

/// How many deliveries `list` looks through, newest first, for the ones
/// its filters keep.
const LIST_SCAN: usize = 10_000;

/// `bosun deliveries ...`
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum DeliveriesCommand {
    /// Recent deliveries, newest first, with their status.
    List {
        /// Only deliveries with this status.
        #[arg(long, value_enum, value_name = "S")]
        status: Option<DeliveryStatus>,
        /// Only deliveries started since TIME (RFC 3339, or a duration ago:
        /// 30m, 2h, 7d).
        #[arg(long, value_name = "DUR|TIME")]
        since: Option<String>,
        /// At most N deliveries.
        #[arg(long, value_name = "N", default_value_t = 50)]
        limit: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// What became of one delivery in one sentence (what ended it and
    /// where, and what to do next), then its timeline: every message, its
    /// consumer, status, attempts and times.
    Show {
        /// The delivery's correlation id (or a unique prefix of at least 4
        /// characters).
        correlation_id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// A delivery's status, as `--status` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeliveryStatus {
    /// Not completed nor failed yet.
    InProgress,
    /// Every message handled by every consumer it is routed to.
    Completed,
    /// A message dead-lettered (and not replayed since), or the release
    /// blocked or rejected.
    Failed,
}

impl DeliveryStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::InProgress => "in-progress",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }
}

/// A delivery in the list.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    #[serde(flatten)]
    record: DeliveryRecord,
    status: String,
}

/// Runs a deliveries command.
pub async fn run(command: DeliveriesCommand, settings: &Settings) -> Result<()> {
    let backends = Backends::open_existing(settings).await?;
    let operator = backends.operator(&settings.operator);
    match command {
        DeliveriesCommand::List {
            status,
            since,
            limit,
            json,
        } => {
            if limit == 0 {
                bail!("--limit must be at least 1");
            }
            let since = since
                .as_deref()
                .map(|text| parse_since(text, OffsetDateTime::now_utc()))
                .transpose()?;
            let mut listed = Vec::new();
            for record in backends.store.list_deliveries(None, LIST_SCAN).await? {
                if since.is_some_and(|since| record.started_at < since) {
                    // Newest first: the rest are older still.
                    break;
                }
                let found = match operator.delivery(&record.correlation_id).await {
                    Ok(delivery) => delivery.status,
                    // Started, nothing on its timeline yet.
                    Err(bosun::operator::OperatorError::Store(StoreError::NotFound { .. })) => {
                        DeliveryStatus::InProgress.as_str().to_owned()
                    }
                    Err(err) => return Err(err.into()),
                };
                if status.is_none_or(|wanted| wanted.as_str() == found) {
                    listed.push(Listed { record, status: found });
                    if listed.len() == limit {
                        break;
                    }
                }
            }
            if json {
                print_json(&listed)
            } else {
                write_list(&mut std::io::stdout().lock(), &listed)
            }
        }
        DeliveriesCommand::Show { correlation_id, json } => {
            let delivery = operator
                .delivery_of(&correlation_id, None)
                .await
                .map_err(for_terminal)?;
            if json {
                print_json(&delivery)
            } else {
                write_delivery(&mut std::io::stdout().lock(), &delivery)
            }
        }
    }
}

/// The list: a line per delivery.
fn write_list(out: &mut impl Write, listed: &[Listed]) -> Result<()> {
    if listed.is_empty() {
        writeln!(out, "no deliveries")?;
        return Ok(());
    }
    let mut table = Table::new([
        ("CORRELATION ID", Align::Left),
        ("STATUS", Align::Left),
        ("STARTED", Align::Left),
        ("TENANT", Align::Left),
        ("FIRST MESSAGE", Align::Left),
        ("STARTED BY", Align::Left),
    ]);
    for Listed { record, status } in listed {
        table.row([
            record.correlation_id.clone(),
            status.clone(),
            short_time(record.started_at),
            record.tenant_id.clone(),
            record.message_type.clone(),
            record.started_by.clone(),
        ]);
    }
    table.write(out)?;
    Ok(())
}

/// The consumers of a message: each with what it did (`commit:completed`)
/// when known, so a fan-out shows which subscriber failed.
fn consumers_of(message: &bosun::operator::DeliveryMessage) -> String {
    if !message.by_consumer.is_empty() {
        return message
            .by_consumer
            .iter()
            .map(|hop| format!("{}:{}", hop.consumer, hop.status.as_str()))
            .collect::<Vec<_>>()
            .join(",");
    }
    if message.consumers.is_empty() {
        "-".to_owned()
    } else {
        message.consumers.join(",")
    }
}

/// The outcome's sentence and its next actions as commands, then the
/// timeline: a paragraph per message, a line per event (attempts counted
/// from 1, times to the millisecond in UTC); the events' columns in line
/// across the paragraphs.
fn write_delivery(out: &mut impl Write, delivery: &Delivery) -> Result<()> {
    writeln!(out, "{}", delivery.outcome.sentence)?;
    for action in &delivery.outcome.actions {
        writeln!(out, "  {}: {}", action.label, action.command)?;
    }
    writeln!(out, "\ndelivery {}  ({})", delivery.correlation_id, delivery.status)?;
    if let Some(trace_id) = &delivery.trace_id {
        writeln!(out, "trace {trace_id}")?;
    }
    let mut events = Table::headless([Align::Left, Align::Left, Align::Left, Align::Left, Align::Left]).indented("  ");
    for event in delivery.messages.iter().flat_map(|message| &message.events) {
        events.row([
            precise_time(event.at),
            event.status.as_str().to_owned(),
            event.consumer.clone().unwrap_or_else(|| "-".to_owned()),
            format!("attempt {}", event.attempt_number()),
            event.detail.clone().unwrap_or_default(),
        ]);
    }
    let mut lines = events.lines().into_iter();
    for message in &delivery.messages {
        writeln!(
            out,
            "\n{}  {}  status={}  attempts={}  consumers={}",
            message.message_type,
            message.message_id,
            message.status.as_str(),
            message.attempts,
            consumers_of(message)
        )?;
        if let Some(summary) = &message.summary {
            writeln!(out, "  {summary}")?;
        }
        for line in lines.by_ref().take(message.events.len()) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bosun::operator::DeliveryMessage;
    use bosun::operator::status::ConsumerStatus;
    use bosun::ports::store::{TimelineEntry, TimelineStatus};
    use time::macros::datetime;

    use super::*;

    fn event(status: TimelineStatus, consumer: Option<&str>, attempt: u32, detail: Option<&str>) -> TimelineEntry {
        TimelineEntry {
            correlation_id: "corr-1".to_owned(),
            message_id: "msg-1".to_owned(),
            message_type: "CreateCommit".to_owned(),
            consumer: consumer.map(str::to_owned),
            status,
            attempt,
            at: datetime!(2026-12-01 10:00:00 UTC),
            detail: detail.map(str::to_owned),
        }
    }

    #[test]
    fn the_list_keeps_its_columns_in_line_past_a_long_id_and_a_time_with_fractions() {
        let record = |id: &str, tenant: &str, at| DeliveryRecord {
            correlation_id: id.to_owned(),
            tenant_id: tenant.to_owned(),
            started_by: "cli:ops".to_owned(),
            message_type: "CreateCommit".to_owned(),
            message_id: "m-1".to_owned(),
            started_at: at,
            traceparent: None,
            tracestate: None,
        };
        let listed = [
            Listed {
                record: record("c-1", "contoso", datetime!(2026-12-01 10:00:00 UTC)),
                status: "completed".to_owned(),
            },
            Listed {
                record: record(
                    "01936f7e-8a3b-7c4d-9e5f-0123456789ac-and-then-some",
                    "fabrikam-international",
                    datetime!(2026-12-01 10:00:00.123456789 +05:30),
                ),
                status: "in-progress".to_owned(),
            },
        ];
        let mut out = Vec::new();
        write_list(&mut out, &listed).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        let column = |line: &str, cell: &str| line.find(cell).unwrap_or_else(|| panic!("{cell} in {line}"));
        for (header, cells) in [
            ("STATUS", ["completed", "in-progress"]),
            (
                "STARTED",
                ["2026-12-01T10:00:00Z", "2026-12-01T10:00:00.123456789+05:30"],
            ),
            ("TENANT", ["contoso", "fabrikam-international"]),
            ("FIRST MESSAGE", ["CreateCommit", "CreateCommit"]),
            ("STARTED BY", ["cli:ops", "cli:ops"]),
        ] {
            let at = column(lines[0], header);
            assert_eq!(column(lines[1], cells[0]), at, "{header}\n{text}");
            assert_eq!(column(lines[2], cells[1]), at, "{header}\n{text}");
        }
    }

    #[test]
    fn a_fan_out_shows_what_each_subscriber_did() {
        let message = DeliveryMessage {
            message_id: "msg-3".to_owned(),
            message_type: "BuildCompleted".to_owned(),
            consumers: vec!["container-build".to_owned(), "package-publishing".to_owned()],
            status: TimelineStatus::DeadLettered,
            by_consumer: vec![
                ConsumerStatus {
                    consumer: "container-build".to_owned(),
                    status: TimelineStatus::DeadLettered,
                },
                ConsumerStatus {
                    consumer: "package-publishing".to_owned(),
                    status: TimelineStatus::Completed,
                },
            ],
            attempts: 1,
            first_seen: datetime!(2026-12-01 10:00:00 UTC),
            last_update: datetime!(2026-12-01 10:00:00 UTC),
            summary: None,
            events: vec![],
        };
        assert_eq!(
            consumers_of(&message),
            "container-build:dead-lettered,package-publishing:completed"
        );
    }

    #[test]
    fn the_outcome_comes_first_then_a_paragraph_per_message_and_a_line_per_event() {
        let dead = "01936f7e-8a3b-7c4d-9e5f-0123456789ac";
        let messages = vec![
            DeliveryMessage {
                message_id: "msg-1".to_owned(),
                message_type: "CreateCommit".to_owned(),
                consumers: vec!["commit".to_owned()],
                status: TimelineStatus::DeadLettered,
                attempts: 2,
                first_seen: datetime!(2026-12-01 10:00:00 UTC),
                last_update: datetime!(2026-12-01 10:00:00.25 UTC),
                by_consumer: vec![ConsumerStatus {
                    consumer: "commit".to_owned(),
                    status: TimelineStatus::DeadLettered,
                }],
                summary: Some("commit to payments-api".to_owned()),
                events: vec![
                    event(TimelineStatus::Sent, None, 0, None),
                    TimelineEntry {
                        at: datetime!(2026-12-01 10:00:00.25 UTC),
                        ..event(
                            TimelineStatus::DeadLettered,
                            Some("commit"),
                            1,
                            Some(&format!("permanent-failure: no repository (dead letter {dead})")),
                        )
                    },
                ],
            },
            DeliveryMessage {
                message_id: "msg-2".to_owned(),
                message_type: "PipelineGenerated".to_owned(),
                consumers: vec![],
                status: TimelineStatus::Published,
                attempts: 0,
                first_seen: datetime!(2026-12-01 10:00:00 UTC),
                last_update: datetime!(2026-12-01 10:00:00 UTC),
                by_consumer: vec![],
                summary: None,
                events: vec![],
            },
        ];
        let delivery = Delivery {
            correlation_id: "corr-1".to_owned(),
            tenant_id: Some("contoso".to_owned()),
            status: "failed".to_owned(),
            outcome: bosun::operator::outcome::outcome("failed", &messages, &[]),
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".to_owned()),
            messages,
        };
        let mut out = Vec::new();
        write_delivery(&mut out, &delivery).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                "Failed: CreateCommit was dead-lettered by commit on attempt 2: permanent-failure: no repository; \
                 next: replay dead letter {dead} once the cause is fixed, or open it to read its error chain and \
                 edit its payload.\n  \
                 Replay dead letter 01936f7e...: bosun dead-letters replay {dead}\n  \
                 Open dead letter 01936f7e...: bosun dead-letters show {dead}\n\
                 \n\
                 delivery corr-1  (failed)\n\
                 trace 4bf92f3577b34da6a3ce929d0e0e4736\n\
                 \n\
                 CreateCommit  msg-1  status=dead-lettered  attempts=2  consumers=commit:dead-lettered\n  \
                 commit to payments-api\n  \
                 2026-12-01 10:00:00.000 UTC  sent{sent}  -{dash}  attempt 1\n  \
                 2026-12-01 10:00:00.250 UTC  dead-lettered  commit  attempt 2  \
                 permanent-failure: no repository (dead letter {dead})\n\
                 \n\
                 PipelineGenerated  msg-2  status=published  attempts=0  consumers=-\n",
                sent = " ".repeat(9),
                dash = " ".repeat(5),
            )
        );
    }
}
