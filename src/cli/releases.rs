//! `bosun releases ...`: the release manager's commands. One release's
//! state (where it is, what it waits for, who approved, what was refused
//! and why), approving and rejecting it, and the tenant's approval policy
//! (show, set, history).

use std::io::Write;

use anyhow::{Context, Result};
use clap::Subcommand;
use serde_json::{Value, json};

use bosun::operator::audit::{self, PolicyAction};
use bosun::operator::policies::{self, HoldChange, PolicyChange};
use bosun::operator::rollback::RollbackRequest;
use bosun::operator::{Operator, SendOptions};
use bosun::ports::store::ReleasePolicyRecord;
use bosun::runtime::config::Settings;
use bosun::wiring::Backends;

use super::output::{Align, Table, print_json, short_time};
use super::send::read_payload;

/// `bosun releases ...`
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum ReleasesCommand {
    /// One release: its phase, the approval it waits for (required, given,
    /// still needed, who may not approve), approvals, refusals and history.
    Show {
        /// The release id.
        release_id: String,
        /// The tenant whose release it is.
        #[arg(long, value_name = "ID", default_value = "default")]
        tenant: String,
        /// Print the saga as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve a release in an environment, as this operator
    /// (`cli:<operator>`); the tenant's approval policy decides whether it
    /// counts (`bosun releases show` says).
    Approve {
        /// The release id.
        release_id: String,
        /// The environment approved.
        #[arg(long, value_name = "ENV")]
        environment: String,
        /// Why, or the change ticket a policy may require.
        #[arg(long)]
        comment: Option<String>,
        /// The tenant whose release it is.
        #[arg(long, value_name = "ID", default_value = "default")]
        tenant: String,
    },
    /// Reject a release (in one environment, or the whole release).
    Reject {
        /// The release id.
        release_id: String,
        /// The environment whose approval is refused (default: the whole
        /// release).
        #[arg(long, value_name = "ENV")]
        environment: Option<String>,
        /// Why.
        #[arg(long)]
        reason: String,
        /// The tenant whose release it is.
        #[arg(long, value_name = "ID", default_value = "default")]
        tenant: String,
    },
    /// Let a release be promoted to an environment now, through a closed
    /// promotion window or a hold (recorded with the reason; never by who
    /// requested the release).
    Override {
        /// The release id.
        release_id: String,
        /// The environment.
        #[arg(long, value_name = "ENV")]
        environment: String,
        /// Why (an incident, a change ticket).
        #[arg(long)]
        reason: String,
        /// The tenant whose release it is.
        #[arg(long, value_name = "ID", default_value = "default")]
        tenant: String,
    },
    /// Roll an environment back to a release verified there: the newest one
    /// before the module's current release, or --to. Obeys the
    /// environment's promotion windows and holds unless --override-reason
    /// is given (recorded).
    Rollback {
        /// The environment.
        environment: String,
        /// Why (an incident, a change ticket).
        #[arg(long)]
        reason: String,
        /// The module, when the environment runs several.
        #[arg(long, value_name = "MODULE")]
        module: Option<String>,
        /// The verified release to go back to.
        #[arg(long, value_name = "RELEASE")]
        to: Option<String>,
        /// Why the rollback goes through a closed promotion window or hold.
        #[arg(long, value_name = "REASON")]
        override_reason: Option<String>,
        /// The tenant whose environment it is.
        #[arg(long, value_name = "ID", default_value = "default")]
        tenant: String,
    },
    /// Stop every promotion to an environment until `bosun releases unhold`
    /// (or --until): a new version of the tenant's policy.
    Hold {
        /// The environment.
        environment: String,
        /// Why (shown to every release that waits on it).
        #[arg(long)]
        reason: String,
        /// When it ends on its own (RFC 3339, e.g. 2026-12-24T08:00:00Z).
        #[arg(long, value_name = "TIME")]
        until: Option<String>,
        /// The tenant.
        #[arg(long, value_name = "ID", default_value = "default")]
        tenant: String,
    },
    /// Lift the hold on an environment: waiting releases go on at their
    /// next look (within 5 minutes).
    Unhold {
        /// The environment.
        environment: String,
        /// The tenant.
        #[arg(long, value_name = "ID", default_value = "default")]
        tenant: String,
    },
    /// The tenant's release policy: who may approve each environment and
    /// how many must, promotion windows and holds.
    Policy {
        /// What to do.
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

/// `bosun releases policy ...`
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum PolicyCommand {
    /// The policy in force (its version, who set it, the document).
    Show {
        /// The tenant.
        #[arg(long, value_name = "ID", default_value = "default")]
        tenant: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Store a new version of the policy, checked first.
    Set {
        /// The policy document as JSON, or @FILE (@- for stdin).
        #[arg(long, value_name = "JSON|@FILE")]
        document: String,
        /// Why it changes (kept in the history).
        #[arg(long)]
        reason: Option<String>,
        /// The version this change was made against (default: the one in
        /// force now); refused if someone stored another since.
        #[arg(long, value_name = "VERSION")]
        expect_version: Option<u64>,
        /// The tenant.
        #[arg(long, value_name = "ID", default_value = "default")]
        tenant: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Every version, oldest first: who changed the policy, when and why.
    History {
        /// The tenant.
        #[arg(long, value_name = "ID", default_value = "default")]
        tenant: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a releases command.
pub async fn run(command: ReleasesCommand, settings: &Settings) -> Result<()> {
    match command {
        ReleasesCommand::Show {
            release_id,
            tenant,
            json,
        } => {
            let backends = Backends::open_existing(settings).await?;
            let saga = backends
                .operator(&settings.operator)
                .saga("release", &format!("{tenant}/{release_id}"))
                .await?;
            if json {
                print_json(&saga)
            } else {
                write_release(&mut std::io::stdout().lock(), &saga.state)
            }
        }
        ReleasesCommand::Approve {
            release_id,
            environment,
            comment,
            tenant,
        } => {
            let mut payload = json!({"releaseId": release_id, "environment": environment});
            if let Some(comment) = comment {
                payload["comment"] = Value::String(comment);
            }
            decide(settings, "ApproveRelease", &payload, &tenant).await
        }
        ReleasesCommand::Reject {
            release_id,
            environment,
            reason,
            tenant,
        } => {
            let mut payload = json!({"releaseId": release_id, "reason": reason});
            if let Some(environment) = environment {
                payload["environment"] = Value::String(environment);
            }
            decide(settings, "RejectRelease", &payload, &tenant).await
        }
        ReleasesCommand::Override {
            release_id,
            environment,
            reason,
            tenant,
        } => {
            let payload = json!({"releaseId": release_id, "environment": environment, "reason": reason});
            decide(settings, "OverrideReleaseWindow", &payload, &tenant).await
        }
        ReleasesCommand::Rollback {
            environment,
            reason,
            module,
            to,
            override_reason,
            tenant,
        } => {
            let backends = Backends::open(settings).await?;
            let operator: Operator = backends.operator(&settings.operator);
            let plan = operator
                .plan_rollback(
                    backends.policies.as_ref(),
                    RollbackRequest {
                        tenant: &tenant,
                        environment: &environment,
                        module_id: module.as_deref(),
                        to_release_id: to.as_deref(),
                        reason: &reason,
                        override_reason: override_reason.as_deref(),
                    },
                    time::OffsetDateTime::now_utc(),
                )
                .await?;
            let sent = operator
                .send_with("RollbackEnvironment", &plan.payload, &tenant, &SendOptions::default())
                .await?;
            println!(
                "sent RollbackEnvironment {} as cli:{}: {} in {environment} from {} to {} (verified {}); \
                 `bosun sagas show gitops {tenant}/{environment}` shows it, `bosun audit export --tenant {tenant}` \
                 records it",
                sent.message_id,
                settings.operator,
                plan.module_id,
                plan.from_release_id.as_deref().unwrap_or("nothing"),
                plan.to_release_id,
                short_time(plan.verified_at),
            );
            Ok(())
        }
        ReleasesCommand::Hold {
            environment,
            reason,
            until,
            tenant,
        } => {
            let until = until
                .map(|until| {
                    time::OffsetDateTime::parse(&until, &time::format_description::well_known::Rfc3339)
                        .with_context(|| format!("--until `{until}` is not an RFC 3339 time"))
                })
                .transpose()?;
            let hold = bosun_sagas::release::Hold { reason, until };
            change_hold(settings, &tenant, &environment, Some(hold)).await
        }
        ReleasesCommand::Unhold { environment, tenant } => change_hold(settings, &tenant, &environment, None).await,
        ReleasesCommand::Policy { command } => policy(command, settings).await,
    }
}

/// What a release's verification says: the run in progress, where it was
/// verified, and a failure with what became of the rollback.
fn write_verification(out: &mut impl Write, state: &Value) -> Result<()> {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    let run = &state["verifying"];
    if run.is_object() {
        writeln!(
            out,
            "verifying {}: {} sample(s), {} failed; soak until {}; next sample at {}",
            text(&run["environment"]),
            run["samples"],
            run["failures"],
            text(&run["soakUntil"]),
            text(&run["checkAt"])
        )?;
        let mut outcomes = Table::headless([Align::Left, Align::Left, Align::Left]).indented("  ");
        for outcome in run["last"].as_array().into_iter().flatten() {
            let passed = if outcome["passed"].as_bool() == Some(true) {
                "passed"
            } else {
                "FAILED"
            };
            outcomes.row([text(&outcome["check"]), passed.to_owned(), text(&outcome["detail"])]);
        }
        outcomes.write(out)?;
    }
    if let Some(verified) = state["verified"].as_object() {
        writeln!(out, "verified:")?;
        let mut table = Table::headless([Align::Left, Align::Left, Align::Left]).indented("  ");
        for (environment, record) in verified {
            table.row([environment.clone(), text(&record["at"]), text(&record["summary"])]);
        }
        table.write(out)?;
    }
    let failure = &state["verificationFailed"];
    if failure.is_object() {
        writeln!(
            out,
            "verification FAILED in {} at {}: {}",
            text(&failure["environment"]),
            text(&failure["at"]),
            text(&failure["reason"])
        )?;
        let rollback = match (failure["rollBack"].as_bool(), failure["rollbackRequested"].as_bool()) {
            (Some(false), _) => "the policy does not roll back: the environment keeps this release".to_owned(),
            (_, Some(true)) => format!(
                "rollback to the last verified release asked for; `bosun sagas show gitops {}` shows it",
                text(&failure["environment"])
            ),
            _ => "rollback waits for the promotion gate (see `window` above), or an override".to_owned(),
        };
        writeln!(out, "  {rollback}")?;
    }
    Ok(())
}

async fn change_hold(
    settings: &Settings,
    tenant: &str,
    environment: &str,
    hold: Option<bosun_sagas::release::Hold>,
) -> Result<()> {
    let backends = Backends::open(settings).await?;
    let changed_by = format!("cli:{}", settings.operator);
    let action = if hold.is_some() {
        PolicyAction::HoldPlaced(environment.to_owned())
    } else {
        PolicyAction::HoldLifted(environment.to_owned())
    };
    let placing = hold.is_some();
    let record = policies::change_hold(
        backends.policies.as_ref(),
        HoldChange {
            tenant,
            environment,
            hold,
            changed_by: &changed_by,
        },
    )
    .await?;
    if let Some(record) = &record {
        audit::record_policy_change(backends.audit.as_ref(), record, &action, &changed_by).await?;
    }
    match (record, placing) {
        (Some(record), true) => println!(
            "{environment} of tenant {tenant} is on hold (policy version {})",
            record.version
        ),
        (Some(record), false) => println!(
            "the hold on {environment} of tenant {tenant} is lifted (policy version {}); waiting releases go on at \
             their next look",
            record.version
        ),
        (None, _) => println!("{environment} of tenant {tenant} was not on hold: nothing changed"),
    }
    Ok(())
}

async fn decide(settings: &Settings, message_type: &str, payload: &Value, tenant: &str) -> Result<()> {
    let backends = Backends::open(settings).await?;
    let operator: Operator = backends.operator(&settings.operator);
    let sent = operator
        .send_with(message_type, payload, tenant, &SendOptions::default())
        .await?;
    println!(
        "sent {message_type} {} as cli:{}; `bosun releases show {} --tenant {tenant}` shows whether it counted",
        sent.message_id,
        settings.operator,
        payload["releaseId"].as_str().unwrap_or_default()
    );
    Ok(())
}

async fn policy(command: PolicyCommand, settings: &Settings) -> Result<()> {
    match command {
        PolicyCommand::Show { tenant, json } => {
            let backends = Backends::open_existing(settings).await?;
            let current = policies::current(backends.policies.as_ref(), &tenant).await?;
            match (current, json) {
                (Some(record), true) => print_json(&record),
                (None, true) => print_json(&Value::Null),
                (Some(record), false) => write_policy(&mut std::io::stdout().lock(), &record),
                (None, false) => {
                    println!(
                        "tenant {tenant} has no approval policy: every environment that needs a person needs \
                         one approval by a holder of releases:approve, never by who requested the release"
                    );
                    Ok(())
                }
            }
        }
        PolicyCommand::Set {
            document,
            reason,
            expect_version,
            tenant,
            json,
        } => {
            let document = read_payload(&document, std::io::stdin()).context("--document")?;
            policies::check(&document)?;
            let backends = Backends::open(settings).await?;
            let store = backends.policies.as_ref();
            let expected = policies::expected_or_current(store, &tenant, expect_version).await?;
            let changed_by = format!("cli:{}", settings.operator);
            let record = policies::store_change(
                store,
                PolicyChange {
                    tenant: &tenant,
                    document: &document,
                    changed_by: &changed_by,
                    reason: reason.as_deref(),
                    expected,
                },
            )
            .await?;
            audit::record_policy_change(backends.audit.as_ref(), &record, &PolicyAction::Changed, &changed_by).await?;
            if json {
                print_json(&record)
            } else {
                println!("tenant {tenant}'s approval policy is now version {}", record.version);
                Ok(())
            }
        }
        PolicyCommand::History { tenant, json } => {
            let backends = Backends::open_existing(settings).await?;
            let versions = policies::history(backends.policies.as_ref(), &tenant).await?;
            if json {
                return print_json(&versions);
            }
            let mut out = std::io::stdout().lock();
            if versions.is_empty() {
                writeln!(out, "tenant {tenant} has never stored an approval policy")?;
            }
            let mut table = Table::headless([Align::Left, Align::Left, Align::Left, Align::Left]);
            for record in &versions {
                table.row([
                    format!("v{}", record.version),
                    short_time(record.changed_at),
                    record.changed_by.clone(),
                    record.reason.clone().unwrap_or_else(|| "-".to_owned()),
                ]);
            }
            table.write(&mut out)?;
            Ok(())
        }
    }
}

fn write_policy(out: &mut impl Write, record: &ReleasePolicyRecord) -> Result<()> {
    writeln!(
        out,
        "tenant {} approval policy version {}, set by {} at {}{}",
        record.tenant_id,
        record.version,
        record.changed_by,
        short_time(record.changed_at),
        record
            .reason
            .as_deref()
            .map(|reason| format!(" ({reason})"))
            .unwrap_or_default()
    )?;
    writeln!(out, "{}", serde_json::to_string_pretty(&record.document)?)?;
    Ok(())
}

/// `bosun releases show`: the parts of the state a release manager reads.
fn write_release(out: &mut impl Write, state: &Value) -> Result<()> {
    let text = |value: &Value| value.as_str().unwrap_or("-").to_owned();
    writeln!(
        out,
        "release {}  phase {}  environment {}",
        text(&state["releaseId"]),
        text(&state["phase"]),
        text(&state["currentEnvironment"])
    )?;
    if let Some(requested) = state["requestedBy"].as_array() {
        let names: Vec<String> = requested.iter().map(text).collect();
        writeln!(out, "requested by {}", names.join(", "))?;
    }
    let waiting = &state["waitingFor"];
    if waiting.is_object() {
        let list = |value: &Value| {
            value
                .as_array()
                .map(|items| items.iter().map(text).collect::<Vec<_>>().join(", "))
                .filter(|joined| !joined.is_empty())
                .unwrap_or_else(|| "-".to_owned())
        };
        writeln!(
            out,
            "waiting for {}: {} of {} approvals given, {} more needed",
            text(&waiting["environment"]),
            waiting["required"].as_u64().unwrap_or(1) - waiting["stillNeeded"].as_u64().unwrap_or(0),
            waiting["required"].as_u64().unwrap_or(1),
            waiting["stillNeeded"].as_u64().unwrap_or(0)
        )?;
        writeln!(out, "  approved by      {}", list(&waiting["approvedBy"]))?;
        writeln!(out, "  approver groups  {}", list(&waiting["approverGroups"]))?;
        writeln!(out, "  may not approve  {}", list(&waiting["excluded"]))?;
        if let Some(pattern) = waiting["commentPattern"].as_str() {
            writeln!(out, "  comment must match {pattern}")?;
        }
        if let Some(version) = waiting["policyVersion"].as_u64() {
            writeln!(out, "  under approval policy version {version}")?;
        }
    }
    let window = &state["windowWait"];
    if window.is_object() {
        writeln!(
            out,
            "promotion to {} waits ({}): {}",
            text(&window["environment"]),
            text(&window["rule"]),
            text(&window["reason"])
        )?;
        match window["until"].as_str() {
            Some(until) => writeln!(out, "  until {until}")?,
            None => writeln!(out, "  no end known; looking again at {}", text(&window["checkAt"]))?,
        }
        writeln!(
            out,
            "  `bosun releases override {} --environment {} --reason ...` lets it through now",
            text(&state["releaseId"]),
            text(&window["environment"])
        )?;
    }
    write_verification(out, state)?;
    if let Some(overrides) = state["overrides"].as_object() {
        writeln!(out, "overrides:")?;
        let mut table = Table::headless([Align::Left, Align::Left, Align::Left, Align::Left]).indented("  ");
        for (environment, record) in overrides {
            table.row([
                environment.clone(),
                text(&record["by"]),
                text(&record["at"]),
                text(&record["reason"]),
            ]);
        }
        table.write(out)?;
    }
    if let Some(approvals) = state["approvals"].as_object() {
        writeln!(out, "approvals:")?;
        let mut table = Table::headless([Align::Left, Align::Left, Align::Left]).indented("  ");
        for (environment, record) in approvals {
            let by = match record["approvers"].as_array() {
                Some(all) if !all.is_empty() => all.iter().map(text).collect::<Vec<_>>().join(", "),
                _ => text(&record["approver"]),
            };
            table.row([environment.clone(), by, text(&record["at"])]);
        }
        table.write(out)?;
    }
    if let Some(refused) = state["refusedApprovals"].as_array() {
        writeln!(out, "refused approvals:")?;
        let mut table = Table::headless([Align::Left, Align::Left, Align::Left, Align::Left]).indented("  ");
        for refusal in refused {
            table.row([
                text(&refusal["at"]),
                text(&refusal["environment"]),
                text(&refusal["approver"]),
                format!("rule {}: {}", text(&refusal["rule"]), text(&refusal["reason"])),
            ]);
        }
        table.write(out)?;
    }
    if let Some(history) = state["history"].as_array() {
        writeln!(out, "history:")?;
        let mut table = Table::headless([Align::Left, Align::Left, Align::Left, Align::Left]).indented("  ");
        for entry in history {
            table.row([
                text(&entry["at"]),
                text(&entry["messageType"]),
                text(&entry["phase"]),
                text(&entry["note"]),
            ]);
        }
        table.write(out)?;
    }
    Ok(())
}
