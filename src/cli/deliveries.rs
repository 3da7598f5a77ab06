//! `bosun deliveries show`: the timeline of one delivery.

use std::io::Write;

use anyhow::Result;
use clap::Subcommand;

use bosun::operator::Delivery;
use bosun::runtime::config::Settings;
use bosun::wiring::Backends;

use super::output::{print_json, short_time};

/// `bosun deliveries ...`
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum DeliveriesCommand {
    /// The timeline of one delivery: every message, its consumer, status,
    /// attempts and times.
    Show {
        /// The delivery's correlation id.
        correlation_id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a deliveries command.
pub async fn run(command: DeliveriesCommand, settings: &Settings) -> Result<()> {
    let DeliveriesCommand::Show { correlation_id, json } = command;
    let backends = Backends::open(settings).await?;
    let delivery = backends.operator(&settings.operator).delivery(&correlation_id).await?;
    if json {
        print_json(&delivery)
    } else {
        write_delivery(&mut std::io::stdout().lock(), &delivery)
    }
}

/// The timeline: a paragraph per message, a line per event.
fn write_delivery(out: &mut impl Write, delivery: &Delivery) -> Result<()> {
    writeln!(out, "delivery {}  ({})", delivery.correlation_id, delivery.status)?;
    if let Some(trace_id) = &delivery.trace_id {
        writeln!(out, "trace {trace_id}")?;
    }
    for message in &delivery.messages {
        writeln!(
            out,
            "\n{}  {}  status={}  attempts={}  consumers={}",
            message.message_type,
            message.message_id,
            message.status.as_str(),
            message.attempts,
            if message.consumers.is_empty() {
                "-".to_owned()
            } else {
                message.consumers.join(",")
            }
        )?;
        if let Some(summary) = &message.summary {
            writeln!(out, "  {summary}")?;
        }
        for event in &message.events {
            writeln!(
                out,
                "  {}  {:<16} {:<24} attempt {}  {}",
                short_time(event.at),
                event.status.as_str(),
                event.consumer.as_deref().unwrap_or("-"),
                event.attempt,
                event.detail.as_deref().unwrap_or("")
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bosun::operator::DeliveryMessage;
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
    fn the_timeline_has_a_paragraph_per_message_and_a_line_per_event() {
        let delivery = Delivery {
            correlation_id: "corr-1".to_owned(),
            tenant_id: Some("contoso".to_owned()),
            status: "failed".to_owned(),
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".to_owned()),
            messages: vec![
                DeliveryMessage {
                    message_id: "msg-1".to_owned(),
                    message_type: "CreateCommit".to_owned(),
                    consumers: vec!["commit".to_owned()],
                    status: TimelineStatus::DeadLettered,
                    attempts: 2,
                    first_seen: datetime!(2026-12-01 10:00:00 UTC),
                    last_update: datetime!(2026-12-01 10:00:00 UTC),
                    summary: Some("commit to payments-api".to_owned()),
                    events: vec![
                        event(TimelineStatus::Sent, None, 0, None),
                        event(TimelineStatus::DeadLettered, Some("commit"), 1, Some("no repository")),
                    ],
                },
                DeliveryMessage {
                    message_id: "msg-2".to_owned(),
                    message_type: "CommitCreated".to_owned(),
                    consumers: vec![],
                    status: TimelineStatus::Sent,
                    attempts: 0,
                    first_seen: datetime!(2026-12-01 10:00:00 UTC),
                    last_update: datetime!(2026-12-01 10:00:00 UTC),
                    summary: None,
                    events: vec![],
                },
            ],
        };
        let mut out = Vec::new();
        write_delivery(&mut out, &delivery).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                "delivery corr-1  (failed)\n\
                 trace 4bf92f3577b34da6a3ce929d0e0e4736\n\
                 \n\
                 CreateCommit  msg-1  status=dead-lettered  attempts=2  consumers=commit\n  \
                 commit to payments-api\n  \
                 2026-12-01T10:00:00Z  sent{sent} -{dash} attempt 0  \n  \
                 2026-12-01T10:00:00Z  dead-lettered{dead} commit{commit} attempt 1  no repository\n\
                 \n\
                 CommitCreated  msg-2  status=sent  attempts=0  consumers=-\n",
                sent = " ".repeat(12),
                dash = " ".repeat(23),
                dead = " ".repeat(3),
                commit = " ".repeat(18),
            )
        );
    }
}
