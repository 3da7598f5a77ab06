//! What became of a delivery, in one sentence an operator reads first, and
//! its parts: computed from what is stored (the timeline and the messages
//! its consumers emitted), never from the order lines were written in.
//!
//! - **failed**: what ended it and where. The first failure in time, of:
//!   a message a consumer dead-lettered (the hop, the consumer, the attempt,
//!   the dead letter's reason and description; next: replay the dead letter,
//!   or open it), a `ReleaseBlocked` (the release, the step, its reason,
//!   with the failing tests of the build when the reason does not name
//!   them; next: open the release saga), a `ReleaseRejected` (who, where,
//!   why; next: open the release saga);
//! - **stuck**: in progress, but a hop's last attempt failed and a retry is
//!   scheduled (the hop, the consumer, the attempt, the error);
//! - **in-progress**: how many hops so far, and what it waits for;
//! - **completed**: how long it took, through how many hops (messages).

use bosun_contracts::messages::ReleaseStep;
use bosun_contracts::{Envelope, Message};
use schemars::JsonSchema;
use serde::Serialize;

use crate::operator::DeliveryMessage;
use crate::ports::store::{TimelineEntry, TimelineStatus};

/// The most characters of an error the sentence quotes (the `error` field
/// has it whole).
const QUOTED_ERROR_CHARS: usize = 400;

/// Where a delivery stands, as its banner shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OutcomeState {
    /// The delivery's `status` is `failed`: a message dead-lettered (and not replayed since), or its release blocked or rejected.
    Failed,
    /// The delivery's `status` is `in-progress` and a hop is failing: its last attempt failed and a retry is scheduled.
    Stuck,
    /// The delivery's `status` is `in-progress`, nothing failing.
    InProgress,
    /// The delivery's `status` is `completed`.
    Completed,
}

/// What ended (or holds up) a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OutcomeCause {
    /// A consumer dead-lettered a message (and it was not replayed since).
    DeadLetter,
    /// The release saga blocked the release (`ReleaseBlocked`): its build, tests, an artifact, a promotion or a verification failed.
    ReleaseBlocked,
    /// The release was rejected, or its approval timed out (`ReleaseRejected`).
    ReleaseRejected,
    /// A consumer's attempt failed and a retry is scheduled.
    Retrying,
}

/// What an action does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NextActionKind {
    /// Send the dead letter back to its consumer.
    ReplayDeadLetter,
    /// Look at the dead letter: its error chain, attempts and envelope (and edit its payload before a replay).
    OpenDeadLetter,
    /// Look at the release saga: its phase, why it stopped, its environments and decisions.
    OpenRelease,
}

/// Something to do next about a delivery, with its target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NextAction {
    /// What it does.
    pub kind: NextActionKind,
    /// A label for a button or link (`Replay dead letter 0193ab12...`).
    pub label: String,
    /// What it acts on: the dead letter's id, or the release saga's key (`<tenant>/<releaseId>`).
    pub target: String,
    /// The API request that does it: its method (`GET`, `POST`).
    pub method: String,
    /// The API request that does it: its path (`/v1/dead-letters/{id}/replay`).
    pub path: String,
    /// The same from the command line (`bosun dead-letters replay <id>`).
    pub command: String,
}

/// What became of a delivery: one sentence, and its parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryOutcome {
    /// Where it stands: the delivery's `status`, with `stuck` for an in-progress delivery whose hop is failing and being retried.
    pub state: OutcomeState,
    /// One sentence to read first: for a failed or stuck delivery what ended (or holds up) it and where (the hop, the consumer, the error) and what to do next; for a completed one how long it took through how many hops.
    pub sentence: String,
    /// What ended or holds it up (failed and stuck only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<OutcomeCause>,
    /// The message of the hop that ended or holds it up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// That message's type (`ReleaseBlocked`, `CreateCommit` ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_type: Option<String>,
    /// The consumer that dead-lettered, retries or emitted that message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// The attempt of that hop, counted from 1 (dead letters and retries).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The head of the error: the dead letter's reason and description, the retry's error, or the release's reason (with the build's failing tests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its messages (hops) so far.
    pub hops: usize,
    /// Milliseconds from its first line to its last.
    pub duration_ms: u64,
    /// What to do next, first the most useful.
    pub actions: Vec<NextAction>,
}

/// A failure (or a retry) found on the timeline, before it is told.
struct Finding<'a> {
    cause: OutcomeCause,
    message: &'a DeliveryMessage,
    consumer: Option<String>,
    attempt: Option<u32>,
    error: String,
    /// What happened, for the sentence (`CreateCommit was dead-lettered by
    /// commit on attempt 6`).
    what: String,
    /// What to do, for the sentence.
    next: String,
    actions: Vec<NextAction>,
    at: time::OffsetDateTime,
}

/// What became of a delivery whose status is `status` (`failed`,
/// `completed`, `in-progress`), from its messages and the messages its
/// consumers emitted (their envelopes say who emitted them).
pub fn outcome(status: &str, messages: &[DeliveryMessage], emitted: &[(Envelope, Message)]) -> DeliveryOutcome {
    let first = messages.iter().map(|m| m.first_seen).min();
    let last = messages.iter().map(|m| m.last_update).max();
    let duration_ms = match (first, last) {
        (Some(first), Some(last)) => u64::try_from((last - first).whole_milliseconds()).unwrap_or(0),
        _ => 0,
    };
    let hops = messages.len();
    let mut outcome = DeliveryOutcome {
        state: OutcomeState::InProgress,
        sentence: String::new(),
        cause: None,
        message_id: None,
        message_type: None,
        consumer: None,
        attempt: None,
        error: None,
        hops,
        duration_ms,
        actions: Vec::new(),
    };
    let finding = match status {
        "failed" => {
            outcome.state = OutcomeState::Failed;
            failures(messages, emitted).into_iter().min_by_key(|finding| finding.at)
        }
        "completed" => {
            outcome.state = OutcomeState::Completed;
            outcome.sentence = format!("Completed in {} through {}.", took(duration_ms), plural(hops, "hop"));
            return outcome;
        }
        _ => retries(messages).into_iter().min_by_key(|finding| finding.at),
    };
    let Some(finding) = finding else {
        outcome.sentence = if outcome.state == OutcomeState::Failed {
            format!("Failed after {}.", plural(hops, "hop"))
        } else {
            in_progress(messages, duration_ms)
        };
        return outcome;
    };
    if finding.cause == OutcomeCause::Retrying {
        outcome.state = OutcomeState::Stuck;
    }
    let state = if outcome.state == OutcomeState::Stuck {
        "Stuck"
    } else {
        "Failed"
    };
    outcome.sentence = format!(
        "{state}: {}: {}; next: {}.",
        finding.what,
        quoted(&finding.error),
        finding.next
    );
    outcome.cause = Some(finding.cause);
    outcome.message_id = Some(finding.message.message_id.clone());
    outcome.message_type = Some(finding.message.message_type.clone());
    outcome.consumer = finding.consumer;
    outcome.attempt = finding.attempt;
    outcome.error = Some(finding.error);
    outcome.actions = finding.actions;
    outcome
}

/// The failures of a failed delivery: each dead letter not replayed since,
/// each blocked or rejected release.
fn failures<'a>(messages: &'a [DeliveryMessage], emitted: &[(Envelope, Message)]) -> Vec<Finding<'a>> {
    let mut found = Vec::new();
    for message in messages {
        for hop in message
            .by_consumer
            .iter()
            .filter(|hop| hop.status == TimelineStatus::DeadLettered)
        {
            if let Some(line) = last_line(message, &hop.consumer, TimelineStatus::DeadLettered) {
                found.push(dead_letter(message, line));
            }
        }
        let Some((envelope, body)) = emitted
            .iter()
            .find(|(envelope, _)| envelope.message_id.to_string() == message.message_id)
        else {
            continue;
        };
        match body {
            Message::ReleaseBlocked(blocked) => {
                let step = step_name(blocked.failing_step);
                let place = blocked
                    .environment
                    .as_deref()
                    .map(|environment| format!(" in {environment}"))
                    .unwrap_or_default();
                found.push(Finding {
                    cause: OutcomeCause::ReleaseBlocked,
                    message,
                    consumer: Some(envelope.source.clone()),
                    attempt: None,
                    error: with_failing_tests(&blocked.reason, &blocked.release_id, emitted),
                    what: format!(
                        "ReleaseBlocked from {}: release {} stopped at its {step} step{place}",
                        envelope.source, blocked.release_id
                    ),
                    next: format!(
                        "open the release saga {} (a successful re-run of the build continues it, a rejection ends it)",
                        release_key(envelope, body, &blocked.release_id)
                    ),
                    actions: vec![open_release(envelope, body, &blocked.release_id)],
                    at: message.first_seen,
                });
            }
            Message::ReleaseRejected(rejected) => {
                let place = rejected
                    .environment
                    .as_deref()
                    .map(|environment| format!(" in {environment}"))
                    .unwrap_or_default();
                let how = if rejected.timed_out {
                    format!("its approval{place} timed out")
                } else {
                    let by = rejected
                        .approver
                        .as_deref()
                        .map(|approver| format!(" by {approver}"))
                        .unwrap_or_default();
                    format!("was rejected{place}{by}")
                };
                found.push(Finding {
                    cause: OutcomeCause::ReleaseRejected,
                    message,
                    consumer: Some(envelope.source.clone()),
                    attempt: None,
                    error: rejected.reason.clone(),
                    what: format!(
                        "ReleaseRejected from {}: release {} {how}",
                        envelope.source, rejected.release_id
                    ),
                    next: format!(
                        "open the release saga {}",
                        release_key(envelope, body, &rejected.release_id)
                    ),
                    actions: vec![open_release(envelope, body, &rejected.release_id)],
                    at: message.first_seen,
                });
            }
            _ => {}
        }
    }
    found
}

/// The hops whose last attempt failed and whose retry is scheduled.
fn retries(messages: &[DeliveryMessage]) -> Vec<Finding<'_>> {
    let mut found = Vec::new();
    for message in messages {
        for hop in message
            .by_consumer
            .iter()
            .filter(|hop| hop.status == TimelineStatus::RetryScheduled)
        {
            let Some(line) = last_line(message, &hop.consumer, TimelineStatus::RetryScheduled) else {
                continue;
            };
            found.push(Finding {
                cause: OutcomeCause::Retrying,
                message,
                consumer: Some(hop.consumer.clone()),
                attempt: Some(line.attempt_number()),
                error: line.detail.clone().unwrap_or_else(|| "no error recorded".to_owned()),
                what: format!(
                    "{} in {} failed on attempt {} and is retried",
                    message.message_type,
                    hop.consumer,
                    line.attempt_number()
                ),
                next: "nothing yet: it is retried by itself, and dead-lettered if its retries run out".to_owned(),
                actions: Vec::new(),
                at: line.at,
            });
        }
    }
    found
}

/// A dead-lettered hop, told from its line (`<reason>: <description>
/// (dead letter <id>)`, as the host and the native import write it).
fn dead_letter<'a>(message: &'a DeliveryMessage, line: &TimelineEntry) -> Finding<'a> {
    let consumer = line.consumer.clone().unwrap_or_default();
    let detail = line.detail.as_deref().unwrap_or("");
    let id = line.dead_letter_id();
    let error = match detail.rfind(" (dead letter ") {
        Some(end) => &detail[..end],
        None => detail,
    };
    let error = if error.is_empty() { "no error recorded" } else { error };
    let mut actions = Vec::new();
    let next = match id {
        Some(id) => {
            actions.push(NextAction {
                kind: NextActionKind::ReplayDeadLetter,
                label: format!("Replay dead letter {}", short_id(&id.to_string())),
                target: id.to_string(),
                method: "POST".to_owned(),
                path: format!("/v1/dead-letters/{id}/replay"),
                command: format!("bosun dead-letters replay {id}"),
            });
            actions.push(NextAction {
                kind: NextActionKind::OpenDeadLetter,
                label: format!("Open dead letter {}", short_id(&id.to_string())),
                target: id.to_string(),
                method: "GET".to_owned(),
                path: format!("/v1/dead-letters/{id}"),
                command: format!("bosun dead-letters show {id}"),
            });
            format!(
                "replay dead letter {id} once the cause is fixed, or open it to read its error chain and edit its payload"
            )
        }
        None => "open the delivery's dead letters".to_owned(),
    };
    Finding {
        cause: OutcomeCause::DeadLetter,
        message,
        consumer: Some(consumer.clone()),
        attempt: Some(line.attempt_number()),
        error: error.to_owned(),
        what: format!(
            "{} was dead-lettered by {consumer} on attempt {}",
            message.message_type,
            line.attempt_number()
        ),
        next,
        actions,
        at: line.at,
    }
}

/// The last line of `status` a consumer wrote about a message.
fn last_line<'a>(message: &'a DeliveryMessage, consumer: &str, status: TimelineStatus) -> Option<&'a TimelineEntry> {
    message
        .events
        .iter()
        .filter(|line| line.status == status && line.consumer.as_deref() == Some(consumer))
        .max_by_key(|line| line.at)
}

/// The sentence of a delivery in progress with nothing failing: its hops
/// so far, and the hops it waits for.
fn in_progress(messages: &[DeliveryMessage], duration_ms: u64) -> String {
    let waiting: Vec<String> = messages
        .iter()
        .flat_map(|message| {
            message
                .by_consumer
                .iter()
                .filter(|hop| matches!(hop.status, TimelineStatus::Sent | TimelineStatus::Replayed))
                .map(move |hop| format!("{} in {}", message.message_type, hop.consumer))
        })
        .collect();
    let so_far = format!(
        "In progress: {} in {}",
        plural(messages.len(), "hop"),
        took(duration_ms)
    );
    match waiting.as_slice() {
        [] => format!("{so_far}."),
        [one] => format!("{so_far}; waiting for {one}."),
        [first, rest @ ..] => format!("{so_far}; waiting for {first} and {} more.", rest.len()),
    }
}

/// A blocked release's reason, with the failing tests of its build when
/// the reason does not name them.
fn with_failing_tests(reason: &str, release_id: &str, emitted: &[(Envelope, Message)]) -> String {
    let failing: Vec<&str> = emitted
        .iter()
        .filter_map(|(_, message)| match message {
            Message::BuildCompleted(build) if build.release_id == release_id && !build.result.is_success() => {
                Some(build)
            }
            _ => None,
        })
        .flat_map(|build| build.failed_tests.iter().map(String::as_str))
        .filter(|test| !reason.contains(test))
        .collect();
    if failing.is_empty() {
        reason.to_owned()
    } else {
        format!("{reason} (failing tests: {})", failing.join(", "))
    }
}

/// The release saga's key (`<tenant>/<releaseId>`), as the release
/// consumer keys it.
fn release_key(envelope: &Envelope, message: &Message, release_id: &str) -> String {
    bosun_consumers::release_orchestration::saga_of(envelope, message)
        .map(|(_, key)| key)
        .unwrap_or_else(|| bosun_consumers::release_orchestration::saga_key(&envelope.tenant_id, release_id))
}

/// Opening a release saga.
fn open_release(envelope: &Envelope, message: &Message, release_id: &str) -> NextAction {
    let key = release_key(envelope, message, release_id);
    NextAction {
        kind: NextActionKind::OpenRelease,
        label: format!("Open release {release_id}"),
        path: format!("/v1/sagas/release/{}", path_segment(&key)),
        command: format!("bosun sagas show release {key}"),
        target: key,
        method: "GET".to_owned(),
    }
}

/// `text` as one URL path segment: every byte but the unreserved ones
/// percent-encoded (a saga key's `/` included).
fn path_segment(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(byte).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// A release step in words.
fn step_name(step: ReleaseStep) -> &'static str {
    match step {
        ReleaseStep::Build => "build",
        ReleaseStep::ContainerImage => "container image",
        ReleaseStep::Package => "package",
        ReleaseStep::Infrastructure => "infrastructure",
        ReleaseStep::Promotion => "promotion",
        ReleaseStep::Sync => "sync",
    }
}

/// An error as the sentence quotes it: at most [`QUOTED_ERROR_CHARS`]
/// characters.
fn quoted(error: &str) -> String {
    match error.char_indices().nth(QUOTED_ERROR_CHARS) {
        Some((end, _)) => format!("{}...", &error[..end]),
        None => error.to_owned(),
    }
}

/// How long, for people: milliseconds under a minute, then minutes and
/// seconds, then hours and minutes.
fn took(ms: u64) -> String {
    match ms {
        0..60_000 => format!("{ms} ms"),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{} h {} min", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// `1 hop`, `14 hops`.
fn plural(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// The first 8 characters of an id and an ellipsis.
fn short_id(id: &str) -> String {
    match id.get(..8) {
        Some(head) if id.len() > 8 => format!("{head}..."),
        _ => id.to_owned(),
    }
}

#[cfg(test)]
mod tests;
