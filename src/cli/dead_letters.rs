//! `bosun dead-letters list|groups|show|replay|purge|jobs|job`: the
//! messages consumers gave up on, whole, what operators do with them, and
//! the stored bulk replay jobs the API runs.
//!
//! Over 800 lines on purpose: seven subcommands over one set of records, with
//! their tables and JSON.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde::Serialize;
use time::OffsetDateTime;
use uuid::Uuid;

use bosun::front::access::ALL_TENANTS;
use bosun::front::gateway::ReplayJob;
use bosun::front::gateway::jobs::MAX_JOBS_LISTED;
use bosun::operator::Operator;
use bosun::operator::controls::{self, Actor};
use bosun::operator::groups::FailureGroup;
use bosun::ports::store::{
    ControlOutcome, DeadLetterFilter, DeadLetterRecord, DeadLetterStatus, ReplayJobAction, ReplayJobControl,
};
use bosun::runtime::config::Settings;
use bosun::wiring::Backends;

use super::output::{Align, Table, for_terminal, outln, parse_since, print_json, short_time};

/// Filters shared by the dead-letter commands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct DeadLetterFilterArgs {
    /// Only this consumer.
    #[arg(long, value_name = "C")]
    pub consumer: Option<String>,
    /// Only this message type.
    #[arg(long = "type", value_name = "T")]
    pub message_type: Option<String>,
    /// Only dead-lettered since TIME (RFC 3339, or a duration ago: 30m, 2h, 7d).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
}

impl DeadLetterFilterArgs {
    /// The flags given, by name.
    fn given(&self) -> Vec<&'static str> {
        [
            ("--consumer", self.consumer.is_some()),
            ("--type", self.message_type.is_some()),
            ("--since", self.since.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }

    fn to_filter(&self, include_replayed: bool) -> Result<DeadLetterFilter> {
        for (flag, value) in [("--consumer", &self.consumer), ("--type", &self.message_type)] {
            if value.as_deref().is_some_and(|value| value.trim().is_empty()) {
                bail!("{flag} must not be empty (leave it out instead)");
            }
        }
        Ok(DeadLetterFilter {
            consumer: self.consumer.clone(),
            message_type: self.message_type.clone(),
            since: self
                .since
                .as_deref()
                .map(|text| parse_since(text, OffsetDateTime::now_utc()))
                .transpose()?,
            include_replayed,
            ..Default::default()
        })
    }
}

/// `bosun dead-letters ...`
#[derive(Debug, Clone, PartialEq, Subcommand)]
pub enum DeadLettersCommand {
    /// List dead letters (native ones of the transport included).
    List {
        /// Filters.
        #[command(flatten)]
        filter: DeadLetterFilterArgs,
        /// Include dead letters already replayed.
        #[arg(long)]
        include_replayed: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Dead letters not replayed yet, grouped by root cause: the error's
    /// kind and its message with what varies masked (quoted names, URLs,
    /// addresses, paths, ids, hashes, times, numbers), plus consumer and
    /// message type; largest group first, with first and last seen, a
    /// sample and the last day's trend.
    Groups {
        /// Filters.
        #[command(flatten)]
        filter: DeadLetterFilterArgs,
        /// Include acknowledged groups with no newer failure.
        #[arg(long)]
        all: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Acknowledge a failure group (its fingerprint from `groups`), with a
    /// note: it is left out of `groups` until a failure of its cause newer
    /// than now arrives, then listed again with the note.
    Ack {
        /// The group's fingerprint.
        fingerprint: String,
        /// What the next operator should know (a ticket, the cause).
        #[arg(long)]
        note: Option<String>,
    },
    /// Take a group's acknowledgement back: it is listed again.
    Unack {
        /// The group's fingerprint.
        fingerprint: String,
    },
    /// Everything about one dead letter: original message, error chain,
    /// attempts, replays.
    Show {
        /// Id (or a unique prefix of at least 4 characters).
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Send dead letters back to their consumer.
    Replay {
        /// Ids to replay.
        ids: Vec<String>,
        /// Edit the payload in $VISUAL or $EDITOR (else vi) first; it is
        /// checked against the message's contract before anything is sent,
        /// and the replay records the original, the edit and what changed.
        /// One id only.
        #[arg(long, conflicts_with_all = ["all", "group", "payload"])]
        edit: bool,
        /// Replace the payload with this JSON (inline, @FILE, or @- for
        /// stdin) first; checked and recorded as with --edit. One id only.
        #[arg(long, value_name = "JSON|@FILE", conflicts_with_all = ["all", "group"])]
        payload: Option<String>,
        /// Replay every dead letter matching the filters.
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// Replay every dead letter of this failure group (its fingerprint,
        /// from `dead-letters groups`).
        #[arg(long, value_name = "FINGERPRINT", conflicts_with_all = ["ids", "all"])]
        group: Option<String>,
        /// Filters (with --all).
        #[command(flatten)]
        filter: DeadLetterFilterArgs,
        /// At most N replays per second.
        #[arg(long, value_name = "N")]
        rate: Option<f64>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Bulk replay jobs started through the API or MCP (stored: the same
    /// from every replica), newest first.
    Jobs {
        /// At most N (at most 200).
        #[arg(long, value_name = "N", default_value_t = 20)]
        limit: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One bulk replay job: progress, what failed and why, who started,
    /// paused, resumed or cancelled it; or pause, resume or cancel it
    /// (recorded as the operator's).
    Job {
        /// The job's id (or a unique prefix of a recent job's).
        id: String,
        /// Pause it after the replay in progress.
        #[arg(long, conflicts_with_all = ["resume", "cancel"])]
        pause: bool,
        /// Resume a paused job where it stopped.
        #[arg(long, conflicts_with = "cancel")]
        resume: bool,
        /// Cancel it: what it did not replay stays dead-lettered.
        #[arg(long)]
        cancel: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete dead letters.
    Purge {
        /// Ids to purge.
        ids: Vec<String>,
        /// Purge every dead letter matching the filters.
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// Purge every dead letter of this failure group (its fingerprint,
        /// from `dead-letters groups`).
        #[arg(long, value_name = "FINGERPRINT", conflicts_with_all = ["ids", "all"])]
        group: Option<String>,
        /// Filters (with --all).
        #[command(flatten)]
        filter: DeadLetterFilterArgs,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Checks `--rate`: a number of replays per second above 0 whose interval
/// a [`Duration`] can hold.
fn check_rate(rate: Option<f64>) -> Result<()> {
    let Some(rate) = rate else { return Ok(()) };
    if rate.is_nan() || rate <= 0.0 {
        bail!("--rate must be more than 0");
    }
    if Duration::try_from_secs_f64(1.0 / rate).is_err() {
        bail!("--rate is too small: the wait between two replays would be longer than bosun can wait");
    }
    Ok(())
}

/// Checks what a bulk replay or purge names before anything is read: ids,
/// `--group` (narrowed by the filters, if any) or `--all` (every dead
/// letter, narrowed by the filters, if any: taking all of them is asked
/// for explicitly, never implied by an empty filter). Filters that would
/// be ignored (beside ids) and an empty `--group` are refused, naming them.
fn check_selection(ids: &[String], all: bool, group: Option<&str>, filter: &DeadLetterFilterArgs) -> Result<()> {
    if group.is_some_and(|group| group.trim().is_empty()) {
        bail!("--group must not be empty: give a fingerprint from `dead-letters groups`");
    }
    let flags = filter.given();
    if !flags.is_empty() && !all && group.is_none() {
        bail!(
            "{} narrow(s) --all or --group: add one of them, or drop {} to name ids",
            flags.join(", "),
            if flags.len() == 1 { "it" } else { "them" }
        );
    }
    if ids.is_empty() && !all && group.is_none() {
        bail!("name at least one dead letter id, or use --group, or --all (with filters to narrow it)");
    }
    if let Some(id) = ids.iter().find(|id| id.trim().is_empty()) {
        bail!("dead letter id `{id}` is empty");
    }
    Ok(())
}

/// Runs a dead-letter command as the settings' operator.
pub async fn run(command: DeadLettersCommand, settings: &Settings) -> Result<()> {
    let backends = Backends::open_existing(settings).await?;
    let operator = backends.operator(&settings.operator);
    match command {
        DeadLettersCommand::List {
            filter,
            include_replayed,
            json,
        } => {
            let records = operator.dead_letters(&filter.to_filter(include_replayed)?).await?;
            if json {
                print_json(&records.iter().map(view).collect::<Vec<_>>())?;
            } else {
                write_list(&mut std::io::stdout().lock(), &records)?;
            }
        }
        DeadLettersCommand::Ack { fingerprint, note } => {
            let group = operator
                .failure_group(&Default::default(), &fingerprint)
                .await
                .map_err(for_terminal)?;
            let by = format!("cli:{}", settings.operator);
            let group = controls::acknowledge_group(
                backends.controls.as_ref(),
                ALL_TENANTS,
                group,
                Actor { by: &by, door: &by },
                note.as_deref(),
            )
            .await?;
            println!(
                "group {} acknowledged: left out of `groups` until a newer failure of its cause arrives",
                group.fingerprint
            );
        }
        DeadLettersCommand::Unack { fingerprint } => {
            if backends.controls.unacknowledge_group(ALL_TENANTS, &fingerprint).await? {
                println!("group {fingerprint} is listed again");
            } else {
                bail!("group {fingerprint} is not acknowledged");
            }
        }
        DeadLettersCommand::Groups { filter, all, json } => {
            let groups = operator.failure_groups(&filter.to_filter(false)?).await?;
            let acknowledgements = backends.controls.group_acknowledgements(ALL_TENANTS).await?;
            let groups = bosun::operator::groups::with_acknowledgements(groups, &acknowledgements, all);
            if json {
                print_json(&groups)?;
            } else {
                write_groups(&mut std::io::stdout().lock(), &groups)?;
            }
        }
        DeadLettersCommand::Show { id, json } => {
            let record = operator.dead_letter(&id).await.map_err(for_terminal)?;
            if json {
                print_json(&view(&record))?;
            } else {
                write_dead_letter(&mut std::io::stdout().lock(), &record)?;
            }
        }
        DeadLettersCommand::Replay {
            ids,
            edit,
            payload,
            all,
            group,
            filter,
            rate,
            json,
        } => {
            if edit || payload.is_some() {
                let [id] = ids.as_slice() else {
                    bail!("--edit and --payload replay one dead letter: name exactly one id");
                };
                if let Some(flag) = filter.given().first() {
                    bail!("{flag} does not apply to --edit or --payload, which replay one named dead letter");
                }
                if rate.is_some() {
                    bail!("--rate does not apply to --edit or --payload, which replay one named dead letter");
                }
                let record = operator.dead_letter(id).await?;
                let edited = match payload {
                    Some(payload) => super::send::read_payload(&payload, std::io::stdin())?,
                    None => match edit_in_editor(&record)? {
                        Some(edited) => edited,
                        None => {
                            outln!(
                                "the payload was not changed: nothing replayed (replay without --edit to send it as it is)"
                            )?;
                            return Ok(());
                        }
                    },
                };
                let replay = operator.replay_with(&record.id.to_string(), Some(&edited)).await?;
                if json {
                    print_json(&replay)?;
                } else {
                    outln!(
                        "replayed {} to {} with an edited payload",
                        record.id,
                        replay.destination
                    )?;
                    for change in replay.edit.iter().flat_map(|edit| &edit.diff) {
                        outln!(
                            "  {}: {} -> {}",
                            change.path,
                            change
                                .before
                                .as_ref()
                                .map_or_else(|| "(none)".to_owned(), ToString::to_string),
                            change
                                .after
                                .as_ref()
                                .map_or_else(|| "(none)".to_owned(), ToString::to_string)
                        )?;
                    }
                }
                return Ok(());
            }
            check_rate(rate)?;
            check_selection(&ids, all, group.as_deref(), &filter)?;
            let ids = select_ids(&operator, ids, all, group.as_deref(), &filter).await?;
            let total = ids.len();
            let summary = operator
                .replay_many(&ids, rate, |done, total, id, result| match result {
                    Ok(_) => eprintln!("[{done}/{total}] replayed {id}"),
                    Err(err) => eprintln!("[{done}/{total}] FAILED {id}: {err}"),
                })
                .await;
            if json {
                print_json(&summary)?;
            } else {
                outln!("replayed {} of {total}", summary.replayed.len())?;
            }
            if !summary.failed.is_empty() {
                bail!("{} of {total} replays failed", summary.failed.len());
            }
        }
        DeadLettersCommand::Jobs { limit, json } => {
            let jobs = backends
                .access
                .list_replay_jobs(None, limit.clamp(1, MAX_JOBS_LISTED))
                .await?;
            let views: Vec<ReplayJob> = jobs.iter().map(|job| ReplayJob::of(job, &[])).collect();
            if json {
                print_json(&views)?;
            } else {
                write_jobs(&mut std::io::stdout().lock(), &views)?;
            }
        }
        DeadLettersCommand::Job {
            id,
            pause,
            resume,
            cancel,
            json,
        } => {
            let id = resolve_job(&backends, &id).await?;
            let action = [
                (pause, ReplayJobAction::Pause),
                (resume, ReplayJobAction::Resume),
                (cancel, ReplayJobAction::Cancel),
            ]
            .into_iter()
            .find_map(|(asked, action)| asked.then_some(action));
            let job = match action {
                None => backends
                    .access
                    .replay_job(id, None)
                    .await?
                    .with_context(|| format!("no replay job `{id}`"))?,
                Some(action) => {
                    let control = ReplayJobControl {
                        action,
                        by: settings.operator.clone(),
                        at: OffsetDateTime::now_utc(),
                        reason: None,
                    };
                    match backends.access.control_replay_job(id, None, control).await? {
                        ControlOutcome::Applied(job) => {
                            tracing::info!(by = %settings.operator, job = %id, action = action.as_str(), "bulk replay job changed");
                            job
                        }
                        ControlOutcome::NotApplicable(job) => {
                            bail!(
                                "replay job {id} is {}: it cannot be {}",
                                job.status.as_str(),
                                action.done_word()
                            )
                        }
                    }
                }
            };
            let items = backends.access.replay_job_items(id).await?;
            let view = ReplayJob::of(&job, &items);
            if json {
                print_json(&view)?;
            } else {
                write_job(&mut std::io::stdout().lock(), &view)?;
            }
        }
        DeadLettersCommand::Purge {
            ids,
            all,
            group,
            filter,
            yes,
            json,
        } => {
            check_selection(&ids, all, group.as_deref(), &filter)?;
            let ids = select_ids(&operator, ids, all, group.as_deref(), &filter).await?;
            if ids.is_empty() {
                outln!("nothing to purge")?;
                return Ok(());
            }
            if !yes && !confirm_purge(ids.len())? {
                outln!("not purged")?;
                return Ok(());
            }
            let mut purged = Vec::new();
            for (index, id) in ids.iter().enumerate() {
                purged.push(operator.purge(&id.to_string()).await?);
                eprintln!("[{}/{}] purged {id}", index + 1, ids.len());
            }
            tracing::info!(by = %settings.operator, purged = purged.len(), group = group.as_deref().unwrap_or(""), "dead letters purged");
            if json {
                print_json(&serde_json::json!({ "purged": purged }))?;
            } else {
                outln!("purged {}", purged.len())?;
            }
        }
    }
    Ok(())
}

/// The dead letters a replay or purge acts on: every one matching the
/// filters (oldest first) with `--all`, every one of a failure group (oldest
/// first) with `--group`, else the named ones.
async fn select_ids(
    operator: &Operator,
    ids: Vec<String>,
    all: bool,
    group: Option<&str>,
    filter: &DeadLetterFilterArgs,
) -> Result<Vec<Uuid>> {
    if let Some(fingerprint) = group {
        let group = operator.failure_group(&filter.to_filter(false)?, fingerprint).await?;
        return Ok(group.ids.into_iter().rev().collect());
    }
    if all {
        let records = operator.dead_letters(&filter.to_filter(false)?).await?;
        return Ok(records.into_iter().rev().map(|r| r.id).collect());
    }
    let mut resolved = Vec::new();
    for id in ids {
        resolved.push(operator.dead_letter(&id).await?.id);
    }
    Ok(resolved)
}

/// Opens the dead letter's payload, pretty-printed, in `$VISUAL` or
/// `$EDITOR` (else `vi`; run by `sh`, so it may carry arguments); returns
/// the edited payload, or `None` when it was saved unchanged. Invalid JSON
/// is refused with its line and column.
fn edit_in_editor(record: &DeadLetterRecord) -> Result<Option<serde_json::Value>> {
    let envelope = bosun_contracts::Envelope::from_slice(&record.body).map_err(|err| {
        anyhow::anyhow!(
            "dead letter {} holds no readable envelope ({err}): it can only be replayed as it is",
            record.id
        )
    })?;
    let original = serde_json::to_string_pretty(&envelope.payload)?
        + "
";
    let file = tempfile::Builder::new()
        .prefix(&format!("bosun-replay-{}-", record.id))
        .suffix(".json")
        .tempfile()?;
    std::fs::write(file.path(), &original)?;
    let editor = std::env::var("VISUAL")
        .ok()
        .or_else(|| std::env::var("EDITOR").ok())
        .filter(|editor| !editor.trim().is_empty())
        .unwrap_or_else(|| "vi".to_owned());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(file.path())
        .status()
        .with_context(|| format!("starting the editor `{editor}`"))?;
    if !status.success() {
        bail!("the editor `{editor}` exited with {status}: nothing replayed");
    }
    let text = std::fs::read_to_string(file.path())?;
    if text.trim() == original.trim() {
        return Ok(None);
    }
    match serde_json::from_str(&text) {
        Ok(edited) => Ok(Some(edited)),
        Err(err) => {
            // The edit is kept for another try.
            let (_, path) = file.keep()?;
            bail!(
                "the edited payload is not valid JSON ({err}): nothing replayed; the edit is kept in {}",
                path.display()
            )
        }
    }
}

/// Eight levels of a sparkline, lowest first.
const SPARKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Counts as a sparkline: a space for none, else a block as high as the
/// count is against the largest.
fn sparkline(counts: &[usize]) -> String {
    let most = counts.iter().copied().max().unwrap_or(0).max(1);
    counts
        .iter()
        .map(|&count| match count {
            0 => ' ',
            _ => SPARKS[((count * SPARKS.len()).div_ceil(most) - 1).min(SPARKS.len() - 1)],
        })
        .collect()
}

/// Failure groups: a paragraph each.
fn write_groups(out: &mut impl Write, groups: &[FailureGroup]) -> Result<()> {
    if groups.is_empty() {
        writeln!(out, "no dead letters")?;
        return Ok(());
    }
    for (index, group) in groups.iter().enumerate() {
        if index > 0 {
            writeln!(out)?;
        }
        writeln!(
            out,
            "group {}  {} dead letter(s)  {}  {}  {}",
            group.fingerprint,
            group.count,
            group.reason,
            group.consumer.as_deref().unwrap_or("-"),
            group.message_type.as_deref().unwrap_or("-")
        )?;
        writeln!(out, "  cause    {}", group.pattern)?;
        writeln!(
            out,
            "  seen     {} .. {}",
            short_time(group.first_at),
            short_time(group.last_at)
        )?;
        writeln!(out, "  last 24h [{}]", sparkline(&group.trend.counts))?;
        writeln!(out, "  sample   {}  {}", group.sample, group.description)?;
        if let Some(ack) = &group.acknowledgement {
            let note = ack.note.as_deref().map(|note| format!(": {note}")).unwrap_or_default();
            writeln!(out, "  acked    {} by {}{note}", short_time(ack.at), ack.by)?;
        }
    }
    Ok(())
}

/// A job's full id from the id or a unique prefix of a recent job's.
async fn resolve_job(backends: &Backends, given: &str) -> Result<Uuid> {
    if let Ok(id) = Uuid::parse_str(given) {
        return Ok(id);
    }
    let prefix = given.to_ascii_lowercase();
    if prefix.len() < 4 {
        bail!("give at least 4 characters of the job's id");
    }
    let matching: Vec<Uuid> = backends
        .access
        .list_replay_jobs(None, MAX_JOBS_LISTED)
        .await?
        .into_iter()
        .map(|job| job.id)
        .filter(|id| id.to_string().starts_with(&prefix))
        .collect();
    match matching.as_slice() {
        [id] => Ok(*id),
        [] => bail!("no replay job `{given}` among the {MAX_JOBS_LISTED} newest: give its whole id"),
        _ => bail!(
            "replay job `{given}` is ambiguous: it begins {}; give more of the id",
            matching.iter().map(Uuid::to_string).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn write_jobs(out: &mut impl Write, jobs: &[ReplayJob]) -> Result<()> {
    if jobs.is_empty() {
        writeln!(out, "no replay jobs")?;
        return Ok(());
    }
    let mut table = Table::new([
        ("ID", Align::Left),
        ("STATUS", Align::Left),
        ("DONE", Align::Right),
        ("FAILED", Align::Right),
        ("STARTED", Align::Left),
        ("BY", Align::Left),
    ]);
    for job in jobs {
        table.row([
            job.id.to_string(),
            job.status.clone(),
            format!("{}/{}", job.done, job.total),
            job.failed_count.to_string(),
            short_time(job.started_at),
            job.by.clone(),
        ]);
    }
    table.write(out)?;
    Ok(())
}

fn write_job(out: &mut impl Write, job: &ReplayJob) -> Result<()> {
    writeln!(out, "replay job {}", job.id)?;
    writeln!(out, "status:   {}", job.status)?;
    writeln!(
        out,
        "progress: {} of {} done ({} replayed, {} failed)",
        job.done, job.total, job.replayed_count, job.failed_count
    )?;
    writeln!(
        out,
        "rate:     {}",
        job.rate
            .map_or_else(|| "as fast as they go".to_owned(), |rate| format!("{rate}/s"))
    )?;
    writeln!(out, "asked:    {}", job.request)?;
    writeln!(out, "by:       {}", job.by)?;
    writeln!(out, "started:  {}", short_time(job.started_at))?;
    if let Some(finished) = job.finished_at {
        writeln!(out, "ended:    {}", short_time(finished))?;
    }
    if let Some(runner) = &job.running_on {
        writeln!(out, "runner:   {runner}")?;
    }
    for control in &job.controls {
        writeln!(
            out,
            "{:<9} {} by {}",
            format!("{}:", control.action),
            short_time(control.at),
            control.by
        )?;
    }
    if !job.failed.is_empty() {
        writeln!(out, "failed:")?;
        for failed in &job.failed {
            writeln!(out, "  {}  {}", failed.id, failed.error)?;
        }
    }
    Ok(())
}

/// Asks on the terminal before purging; refuses when stdin is not one
/// (a script must pass `--yes`).
fn confirm_purge(count: usize) -> Result<bool> {
    if !std::io::stdin().is_terminal() {
        bail!("refusing to purge {count} dead letters without confirmation: pass --yes");
    }
    eprint!("Purge {count} dead letter(s)? This cannot be undone. [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// A dead letter as `--json` prints it: the record and its original
/// message.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DeadLetterView<'a> {
    #[serde(flatten)]
    record: &'a DeadLetterRecord,
    /// The trace the message belonged to, from its `traceparent`.
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_id: Option<String>,
    /// The original message: JSON when it parses, else text.
    original: serde_json::Value,
}

fn view(record: &DeadLetterRecord) -> DeadLetterView<'_> {
    let original = serde_json::from_slice(&record.body)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&record.body).into_owned()));
    DeadLetterView {
        record,
        trace_id: record.trace_id(),
        original,
    }
}

fn status(status: DeadLetterStatus) -> String {
    format!("{status:?}").to_lowercase()
}

/// The `bosun dead-letters list` table.
fn write_list(out: &mut impl Write, records: &[DeadLetterRecord]) -> Result<()> {
    if records.is_empty() {
        writeln!(out, "no dead letters")?;
        return Ok(());
    }
    let mut table = Table::new([
        ("ID", Align::Left),
        ("DEAD-LETTERED", Align::Left),
        ("CONSUMER", Align::Left),
        ("TYPE", Align::Left),
        ("STATUS", Align::Left),
        ("REASON", Align::Left),
    ]);
    for record in records {
        table.row([
            record.id.to_string(),
            short_time(record.dead_lettered_at),
            record.consumer.clone().unwrap_or_else(|| "-".to_owned()),
            record.message_type.clone().unwrap_or_else(|| "-".to_owned()),
            status(record.status),
            record.reason.clone(),
        ]);
    }
    table.write(out)?;
    Ok(())
}

/// `bosun dead-letters show`: every field, the error chain indented by
/// depth, attempts, replays and the original message.
fn write_dead_letter(out: &mut impl Write, record: &DeadLetterRecord) -> Result<()> {
    writeln!(out, "dead letter    {}", record.id)?;
    writeln!(out, "status         {}", status(record.status))?;
    writeln!(out, "consumer       {}", record.consumer.as_deref().unwrap_or("-"))?;
    writeln!(out, "entity         {}", record.entity)?;
    writeln!(
        out,
        "message        {} {}",
        record.message_type.as_deref().unwrap_or("-"),
        record.message_id.as_deref().unwrap_or("-")
    )?;
    writeln!(
        out,
        "correlation    {}",
        record.correlation_id.as_deref().unwrap_or("-")
    )?;
    writeln!(out, "tenant         {}", record.tenant_id.as_deref().unwrap_or("-"))?;
    writeln!(out, "origin         {}", record.origin)?;
    writeln!(out, "dead-lettered  {}", short_time(record.dead_lettered_at))?;
    writeln!(out, "trace          {}", record.trace_id().as_deref().unwrap_or("-"))?;
    writeln!(out, "reason         {}", record.reason)?;
    writeln!(out, "description    {}", record.description)?;
    writeln!(out, "error chain:")?;
    for (depth, error) in record.error_chain.iter().enumerate() {
        writeln!(out, "  {}{}", "  ".repeat(depth), error)?;
    }
    writeln!(out, "attempts:")?;
    for attempt in &record.attempts {
        writeln!(
            out,
            "  #{} {}  {}",
            attempt.attempt,
            short_time(attempt.at),
            attempt.error_chain.join(": ")
        )?;
    }
    writeln!(out, "replays:")?;
    if record.replays.is_empty() {
        writeln!(out, "  none")?;
    }
    for replay in &record.replays {
        writeln!(
            out,
            "  {} by {} to {} ({}){}",
            short_time(replay.at),
            replay.by,
            replay.destination,
            replay.replay_id,
            if replay.edit.is_some() { ", payload edited" } else { "" }
        )?;
        if let Some(edit) = &replay.edit {
            if edit.diff.is_empty() {
                writeln!(out, "    (edited, nothing changed)")?;
            }
            let shown = |value: &Option<serde_json::Value>| {
                value
                    .as_ref()
                    .map_or_else(|| "(none)".to_owned(), serde_json::Value::to_string)
            };
            for change in &edit.diff {
                writeln!(
                    out,
                    "    {}: {} -> {}",
                    change.path,
                    shown(&change.before),
                    shown(&change.after)
                )?;
            }
        }
    }
    writeln!(out, "original message ({} bytes):", record.body.len())?;
    match serde_json::from_slice::<serde_json::Value>(&record.body) {
        Ok(value) => writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?,
        Err(_) => writeln!(out, "{}", String::from_utf8_lossy(&record.body))?,
    }
    Ok(())
}

#[cfg(test)]
mod tests;
