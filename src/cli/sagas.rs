//! `bosun sagas list|diagram|show`: the sagas the consumers keep (their
//! kinds and diagrams are declared by the consumers' registrations,
//! [`registry::sagas`]), their state machines as Mermaid diagrams, and one
//! saga's state and history.

use std::io::Write;

use anyhow::Result;
use clap::Subcommand;

use bosun::ports::store::SagaRecord;
use bosun::runtime::config::Settings;
use bosun::runtime::registry;
use bosun::wiring::Backends;

use super::output::{Align, Table, out, print_json, short_time};

/// `bosun sagas ...`
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum SagasCommand {
    /// List sagas.
    List {
        /// Only sagas of this kind (e.g. `release`, `gitops`).
        #[arg(long, value_name = "KIND")]
        kind: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a saga's state machine as a Mermaid diagram.
    Diagram {
        /// The saga kind (e.g. `release`, `gitops`).
        kind: String,
    },
    /// One saga's state, history and pending timeouts.
    Show {
        /// The saga kind (e.g. `release`, `gitops`).
        kind: String,
        /// The release id or environment.
        key: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a sagas command; a saga kind is checked before anything is read.
pub async fn run(command: SagasCommand, settings: &Settings) -> Result<()> {
    let backends = Backends::open_existing(settings).await?;
    let operator = backends.operator(&settings.operator);
    match command {
        SagasCommand::List { kind, json } => {
            if let Some(kind) = &kind {
                registry::saga(kind)?;
            }
            let sagas = operator.sagas(kind.as_deref()).await?;
            if json {
                print_json(&sagas)?;
            } else {
                write_list(&mut std::io::stdout().lock(), &sagas)?;
            }
        }
        SagasCommand::Diagram { kind } => {
            let diagram = (registry::saga(&kind)?.diagram)(settings);
            out!("{diagram}")?;
        }
        SagasCommand::Show { kind, key, json } => {
            registry::saga(&kind)?;
            let saga = operator.saga(&kind, &key).await?;
            if json {
                print_json(&saga)?;
            } else {
                write_saga(&mut std::io::stdout().lock(), &saga)?;
            }
        }
    }
    Ok(())
}

/// The `bosun sagas list` table.
fn write_list(out: &mut impl Write, sagas: &[SagaRecord]) -> Result<()> {
    if sagas.is_empty() {
        writeln!(out, "no sagas")?;
        return Ok(());
    }
    let mut table = Table::new([
        ("KIND", Align::Left),
        ("KEY", Align::Left),
        ("VERSION", Align::Right),
        ("UPDATED", Align::Left),
    ]);
    for saga in sagas {
        table.row([
            saga.kind.clone(),
            saga.key.clone(),
            saga.version.to_string(),
            short_time(saga.updated_at),
        ]);
    }
    table.write(out)?;
    Ok(())
}

/// `bosun sagas show`: the phase, the pending timeouts (state fields named
/// `pending…` that are set), the whole state and the history.
fn write_saga(out: &mut impl Write, saga: &SagaRecord) -> Result<()> {
    writeln!(out, "{} saga {}  version {}", saga.kind, saga.key, saga.version)?;
    writeln!(
        out,
        "created {}  updated {}",
        short_time(saga.created_at),
        short_time(saga.updated_at)
    )?;
    if let Some(phase) = saga.state.get("phase").and_then(|p| p.as_str()) {
        writeln!(out, "phase {phase}")?;
    }
    let pending: Vec<_> = saga
        .state
        .as_object()
        .map(|state| {
            state
                .iter()
                .filter(|(key, value)| key.starts_with("pending") && !value.is_null())
                .collect()
        })
        .unwrap_or_default();
    writeln!(out, "pending timeouts:")?;
    if pending.is_empty() {
        writeln!(out, "  none")?;
    }
    for (key, value) in pending {
        writeln!(out, "  {key}: {}", serde_json::to_string(value)?)?;
    }
    writeln!(out, "state:\n{}", serde_json::to_string_pretty(&saga.state)?)?;
    writeln!(out, "history:")?;
    let mut history = Table::headless([Align::Left, Align::Left, Align::Left, Align::Left]).indented("  ");
    for entry in &saga.history {
        history.row([
            format!("v{}", entry.version),
            short_time(entry.at),
            entry.message_type.clone(),
            entry.message_id.clone(),
        ]);
    }
    history.write(out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use bosun::ports::store::SagaHistoryEntry;
    use serde_json::json;
    use time::macros::datetime;

    use super::*;

    fn saga(state: serde_json::Value) -> SagaRecord {
        SagaRecord {
            kind: "release".to_owned(),
            key: "payments-api-1".to_owned(),
            version: 2,
            tenant_id: Some("contoso".to_owned()),
            state,
            created_at: datetime!(2026-12-01 10:00:00 UTC),
            updated_at: datetime!(2026-12-01 10:30:00 UTC),
            history: vec![
                SagaHistoryEntry {
                    version: 1,
                    message_id: "msg-1".to_owned(),
                    message_type: "BuildCompleted".to_owned(),
                    at: datetime!(2026-12-01 10:00:00 UTC),
                },
                SagaHistoryEntry {
                    version: 2,
                    message_id: "msg-2".to_owned(),
                    message_type: "ReleasePlanned".to_owned(),
                    at: datetime!(2026-12-01 10:30:00 UTC),
                },
            ],
        }
    }

    fn text(write: impl FnOnce(&mut Vec<u8>) -> Result<()>) -> String {
        let mut out = Vec::new();
        write(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn show_prints_phase_pending_timeouts_state_and_history() {
        let saga = saga(json!({
            "phase": "AwaitingApproval",
            "pendingApproval": {"environment": "dev"},
            "pendingSync": null,
        }));
        assert_eq!(
            text(|out| write_saga(out, &saga)),
            "release saga payments-api-1  version 2\n\
             created 2026-12-01T10:00:00Z  updated 2026-12-01T10:30:00Z\n\
             phase AwaitingApproval\n\
             pending timeouts:\n  \
             pendingApproval: {\"environment\":\"dev\"}\n\
             state:\n\
             {\n  \
               \"phase\": \"AwaitingApproval\",\n  \
               \"pendingApproval\": {\n    \
                 \"environment\": \"dev\"\n  \
               },\n  \
               \"pendingSync\": null\n\
             }\n\
             history:\n  \
             v1  2026-12-01T10:00:00Z  BuildCompleted  msg-1\n  \
             v2  2026-12-01T10:30:00Z  ReleasePlanned  msg-2\n"
        );
    }

    #[test]
    fn show_says_none_without_pending_timeouts_or_phase() {
        let shown = text(|out| write_saga(out, &saga(json!({"count": 3}))));
        assert!(!shown.contains("phase"), "{shown}");
        assert!(shown.contains("pending timeouts:\n  none\nstate:\n"), "{shown}");
    }

    #[test]
    fn the_list_is_a_table_of_one_line_per_saga() {
        let table = text(|out| write_list(out, &[saga(json!({}))]));
        assert_eq!(
            table,
            format!(
                "KIND     KEY{}VERSION  UPDATED\nrelease  payments-api-1{}2  2026-12-01T10:30:00Z\n",
                " ".repeat(13),
                " ".repeat(8)
            )
        );
        assert_eq!(text(|out| write_list(out, &[])), "no sagas\n");
    }
}
