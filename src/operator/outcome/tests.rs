//! The outcome of deliveries assembled from timeline lines as bosun writes
//! them: a dead letter, a release blocked by failing tests, a retry, a
//! completed delivery and one whose last event no consumer receives.

use bosun_contracts::messages::{PipelineResult, ReleaseStep};
use bosun_contracts::samples;
use time::OffsetDateTime;
use time::macros::datetime;
use uuid::Uuid;

use super::*;
use crate::operator::assemble::{delivery_status, messages_of};

const START: OffsetDateTime = datetime!(2026-12-07 21:49:33.412 UTC);

/// A line of message `message` (its type `message_type`) `ms` after
/// [`START`].
fn line(
    message: &str,
    message_type: &str,
    consumer: Option<&str>,
    status: TimelineStatus,
    attempt: u32,
    ms: i64,
    detail: Option<String>,
) -> TimelineEntry {
    TimelineEntry {
        correlation_id: "corr-1".into(),
        message_id: message.into(),
        message_type: message_type.into(),
        consumer: consumer.map(str::to_owned),
        status,
        attempt,
        at: START + time::Duration::milliseconds(ms),
        detail,
    }
}

/// The delivery's status and outcome from its lines and emitted messages,
/// as `Operator::delivery` puts them together.
fn outcome_of(lines: &[TimelineEntry], emitted: &[(Envelope, Message)]) -> (Vec<DeliveryMessage>, DeliveryOutcome) {
    let messages = messages_of(lines);
    let types: Vec<(String, String)> = emitted
        .iter()
        .map(|(envelope, _)| (envelope.message_id.to_string(), envelope.message_type.clone()))
        .collect();
    let status = delivery_status(&messages, &types);
    let outcome = outcome(status, &messages, emitted);
    (messages, outcome)
}

/// `message` as `source` emitted it for tenant contoso.
fn emitted(message: impl Into<Message>, source: &str) -> (Envelope, Message) {
    let message = message.into();
    let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", source);
    (envelope, message)
}

#[test]
fn a_dead_letter_says_the_hop_the_consumer_the_error_and_the_replay() {
    let dead = Uuid::now_v7();
    let lines = [
        line(
            "m-1",
            "CreateCommit",
            None,
            TimelineStatus::Sent,
            0,
            0,
            Some("to commit by cli:alice".into()),
        ),
        line(
            "m-1",
            "CreateCommit",
            Some("commit"),
            TimelineStatus::RetryScheduled,
            0,
            40,
            Some("repository not found; retry in 200 ms".into()),
        ),
        line(
            "m-1",
            "CreateCommit",
            Some("commit"),
            TimelineStatus::DeadLettered,
            1,
            260,
            Some(format!(
                "retries-exhausted: failed 2 times; last error: repository `shop` not found (dead letter {dead})"
            )),
        ),
    ];
    let (messages, outcome) = outcome_of(&lines, &[]);
    // The card and the outcome count attempts alike, from 1.
    assert_eq!(messages[0].attempts, 2);
    assert_eq!(outcome.state, OutcomeState::Failed);
    assert_eq!(outcome.cause, Some(OutcomeCause::DeadLetter));
    assert_eq!(outcome.message_type.as_deref(), Some("CreateCommit"));
    assert_eq!(outcome.consumer.as_deref(), Some("commit"));
    assert_eq!(outcome.attempt, Some(2));
    assert_eq!(
        outcome.error.as_deref(),
        Some("retries-exhausted: failed 2 times; last error: repository `shop` not found")
    );
    assert_eq!(
        outcome.sentence,
        format!(
            "Failed: CreateCommit was dead-lettered by commit on attempt 2: retries-exhausted: failed 2 times; \
             last error: repository `shop` not found; next: replay dead letter {dead} once the cause is fixed, \
             or open it to read its error chain and edit its payload."
        )
    );
    let actions: Vec<(NextActionKind, &str, &str, &str)> = outcome
        .actions
        .iter()
        .map(|action| {
            (
                action.kind,
                action.method.as_str(),
                action.path.as_str(),
                action.command.as_str(),
            )
        })
        .collect();
    let (replay, open) = (
        format!("/v1/dead-letters/{dead}/replay"),
        format!("/v1/dead-letters/{dead}"),
    );
    let (replay_command, open_command) = (
        format!("bosun dead-letters replay {dead}"),
        format!("bosun dead-letters show {dead}"),
    );
    assert_eq!(
        actions,
        [
            (
                NextActionKind::ReplayDeadLetter,
                "POST",
                replay.as_str(),
                replay_command.as_str()
            ),
            (
                NextActionKind::OpenDeadLetter,
                "GET",
                open.as_str(),
                open_command.as_str()
            ),
        ]
    );
    assert!(outcome.actions.iter().all(|action| action.target == dead.to_string()));
    assert_eq!(outcome.duration_ms, 260);
}

#[test]
fn a_release_blocked_by_failing_tests_names_them_and_the_release_saga() {
    let mut build = samples::build_completed();
    build.release_id = "payments-api-e6367d0142dc".into();
    build.result = PipelineResult::Failed;
    build.test_summary.failed = 2;
    build.failed_tests = vec!["calc.add_two_and_three".into(), "calc.divide_by_zero".into()];
    let mut blocked = samples::release_blocked();
    blocked.release_id = build.release_id.clone();
    blocked.failing_step = ReleaseStep::Build;
    // The reason names one of the two failing tests: the outcome adds the other.
    blocked.reason = "build build-4711 failed; 2 of 214 tests failed: calc.add_two_and_three".into();
    let build = emitted(build, "build-ingestion");
    let blocked = emitted(blocked, "release-orchestration");
    let (build_id, blocked_id) = (build.0.message_id.to_string(), blocked.0.message_id.to_string());
    let mut lines = vec![line(
        &build_id,
        "BuildCompleted",
        None,
        TimelineStatus::Sent,
        0,
        0,
        None,
    )];
    for (consumer, ms) in [
        ("release-orchestration", 3),
        ("container-build", 4),
        ("package-publishing", 5),
    ] {
        lines.push(line(
            &build_id,
            "BuildCompleted",
            Some(consumer),
            TimelineStatus::Completed,
            0,
            ms,
            None,
        ));
    }
    lines.push(line(
        &blocked_id,
        "ReleaseBlocked",
        None,
        TimelineStatus::Sent,
        0,
        9,
        None,
    ));
    let (messages, outcome) = outcome_of(&lines, &[build, blocked]);

    // No consumer receives ReleaseBlocked: published (over), not sent.
    assert_eq!(messages[1].status, TimelineStatus::Published);
    assert_eq!(outcome.state, OutcomeState::Failed);
    assert_eq!(outcome.cause, Some(OutcomeCause::ReleaseBlocked));
    assert_eq!(outcome.message_id.as_deref(), Some(blocked_id.as_str()));
    assert_eq!(outcome.consumer.as_deref(), Some("release-orchestration"));
    assert_eq!(outcome.attempt, None);
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            "build build-4711 failed; 2 of 214 tests failed: calc.add_two_and_three \
             (failing tests: calc.divide_by_zero)"
        )
    );
    assert_eq!(
        outcome.sentence,
        "Failed: ReleaseBlocked from release-orchestration: release payments-api-e6367d0142dc stopped at its \
         build step: build build-4711 failed; 2 of 214 tests failed: calc.add_two_and_three (failing tests: \
         calc.divide_by_zero); next: open the release saga contoso/payments-api-e6367d0142dc (a successful \
         re-run of the build continues it, a rejection ends it)."
    );
    assert_eq!(outcome.actions.len(), 1);
    let open = &outcome.actions[0];
    assert_eq!(open.kind, NextActionKind::OpenRelease);
    assert_eq!(open.target, "contoso/payments-api-e6367d0142dc");
    assert_eq!(
        (open.method.as_str(), open.path.as_str()),
        ("GET", "/v1/sagas/release/contoso%2Fpayments-api-e6367d0142dc")
    );
    assert_eq!(
        open.command,
        "bosun sagas show release contoso/payments-api-e6367d0142dc"
    );
}

#[test]
fn the_first_failure_in_time_is_the_one_told() {
    let dead = Uuid::now_v7();
    let blocked = emitted(samples::release_blocked(), "release-orchestration");
    let blocked_id = blocked.0.message_id.to_string();
    let lines = [
        line("m-1", "BuildCompleted", None, TimelineStatus::Sent, 0, 0, None),
        line(
            "m-1",
            "BuildCompleted",
            Some("container-build"),
            TimelineStatus::DeadLettered,
            0,
            5,
            Some(format!(
                "permanent-failure: the registry refused the push (dead letter {dead})"
            )),
        ),
        line(&blocked_id, "ReleaseBlocked", None, TimelineStatus::Sent, 0, 50, None),
    ];
    let (_, outcome) = outcome_of(&lines, &[blocked]);
    assert_eq!(outcome.cause, Some(OutcomeCause::DeadLetter));
    assert_eq!(outcome.consumer.as_deref(), Some("container-build"));
    assert_eq!(outcome.attempt, Some(1));
}

#[test]
fn a_completed_delivery_says_how_long_through_how_many_hops() {
    let lines = [
        line("m-1", "CreateCommit", None, TimelineStatus::Sent, 0, 0, None),
        line(
            "m-1",
            "CreateCommit",
            Some("commit"),
            TimelineStatus::Completed,
            0,
            41,
            None,
        ),
        line("m-2", "CommitCreated", None, TimelineStatus::Sent, 0, 42, None),
        line(
            "m-2",
            "CommitCreated",
            Some("pull-request"),
            TimelineStatus::Completed,
            0,
            812,
            None,
        ),
    ];
    let (messages, outcome) = outcome_of(&lines, &[]);
    assert_eq!(messages.iter().map(|m| m.attempts).collect::<Vec<_>>(), [1, 1]);
    assert_eq!(outcome.state, OutcomeState::Completed);
    assert_eq!(outcome.sentence, "Completed in 812 ms through 2 hops.");
    assert_eq!((outcome.hops, outcome.duration_ms), (2, 812));
    assert_eq!(outcome.cause, None);
    assert!(outcome.actions.is_empty());
}

#[test]
fn an_event_no_consumer_receives_is_published_and_ends_a_delivery() {
    // PipelineGenerated: an event nothing subscribes to.
    let lines = [line(
        "m-1",
        "PipelineGenerated",
        None,
        TimelineStatus::Sent,
        0,
        0,
        Some("to bosun-events".into()),
    )];
    let (messages, outcome) = outcome_of(&lines, &[]);
    assert_eq!(messages[0].status, TimelineStatus::Published);
    assert_eq!(messages[0].attempts, 0);
    assert_eq!(outcome.state, OutcomeState::Completed);
    assert_eq!(outcome.sentence, "Completed in 0 ms through 1 hop.");
}

#[test]
fn a_retrying_hop_makes_an_in_progress_delivery_stuck() {
    let lines = [
        line("m-1", "CreateCommit", None, TimelineStatus::Sent, 0, 0, None),
        line(
            "m-1",
            "CreateCommit",
            Some("commit"),
            TimelineStatus::RetryScheduled,
            2,
            1500,
            Some("git push timed out; retry in 800 ms".into()),
        ),
    ];
    let (_, outcome) = outcome_of(&lines, &[]);
    assert_eq!(outcome.state, OutcomeState::Stuck);
    assert_eq!(outcome.cause, Some(OutcomeCause::Retrying));
    assert_eq!(outcome.attempt, Some(3));
    assert_eq!(
        outcome.sentence,
        "Stuck: CreateCommit in commit failed on attempt 3 and is retried: git push timed out; retry in 800 ms; \
         next: nothing yet: it is retried by itself, and dead-lettered if its retries run out."
    );
    // Nothing failing: in progress, waiting for the consumer.
    let (_, waiting) = outcome_of(&lines[..1], &[]);
    assert_eq!(waiting.state, OutcomeState::InProgress);
    assert_eq!(
        waiting.sentence,
        "In progress: 1 hop in 0 ms; waiting for CreateCommit in commit."
    );
}

#[test]
fn long_errors_are_cut_in_the_sentence_and_kept_whole_in_the_error() {
    let dead = Uuid::now_v7();
    let long = "x".repeat(1000);
    let lines = [line(
        "m-1",
        "CreateCommit",
        Some("commit"),
        TimelineStatus::DeadLettered,
        0,
        0,
        Some(format!("permanent-failure: {long} (dead letter {dead})")),
    )];
    let (_, outcome) = outcome_of(&lines, &[]);
    assert_eq!(
        outcome.error.as_deref(),
        Some(format!("permanent-failure: {long}").as_str())
    );
    assert!(outcome.sentence.len() < 700, "{}", outcome.sentence);
    assert!(outcome.sentence.contains("...; next: replay dead letter"));
}

#[test]
fn durations_read_as_people_say_them() {
    assert_eq!(took(812), "812 ms");
    assert_eq!(took(59_999), "59999 ms");
    assert_eq!(took(61_500), "1 min 1 s");
    assert_eq!(took(3 * 3_600_000 + 120_000), "3 h 2 min");
    assert_eq!(path_segment("contoso/pay ments"), "contoso%2Fpay%20ments");
}
