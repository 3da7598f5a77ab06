//! What became of a message and of a delivery, from what each consumer
//! did: never from the order the timeline lines were written in.
//!
//! Lines of one delivery are written by different writers (the host of
//! each consumer, the outbox dispatcher, an operator's replay), so their
//! order says nothing: the dispatcher writes a message's `sent` line after
//! it sent the message, when its consumer may have handled it already, and
//! a replay's `replayed` line is written after the replayed copy was sent.
//! So the status of one hop (a message at one consumer) is decided by what
//! its lines say, whatever their order:
//!
//! 1. a `completed` or `duplicate` line: the consumer handled it
//!    (`completed`; nothing after that changes it);
//! 2. else a `dead-lettered` line whose dead letter no `replayed` line names:
//!    `dead-lettered`;
//! 3. else the last `replayed` or `retry-scheduled` line: in flight again;
//! 4. else `sent`.
//!
//! A message is `dead-lettered` as soon as one of its hops is, `completed`
//! when every consumer it is routed to (and every consumer that wrote a
//! line about it) handled it, `published` when it was sent and no consumer
//! is routed to it (an event nobody subscribes to: over, not waiting), and
//! in flight otherwise. A delivery is
//! `failed` as soon as one of its messages is dead-lettered (whatever the
//! other subscribers did, or do later). As lines are added, a hop's status
//! only moves forward (`sent` -> in flight -> `dead-lettered` or
//! `completed`, and `dead-lettered` -> `completed`); the one way back is an
//! operator's replay of the dead letter, which puts the hop in flight again.

use schemars::JsonSchema;
use serde::Serialize;
use uuid::Uuid;

use crate::ports::store::{TimelineEntry, TimelineStatus};

/// What became of a message at one consumer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerStatus {
    /// The consumer.
    pub consumer: String,
    /// `sent` (not handled yet), `retry-scheduled` or `replayed` (in
    /// flight), `dead-lettered` (and not replayed since), or `completed`.
    pub status: TimelineStatus,
}

/// The status of one hop (one message at one consumer) from its lines, in
/// any order (see the module's documentation).
pub fn hop_status<'a>(lines: impl IntoIterator<Item = &'a TimelineEntry>) -> TimelineStatus {
    let lines: Vec<&TimelineEntry> = lines.into_iter().collect();
    if lines
        .iter()
        .any(|line| matches!(line.status, TimelineStatus::Completed | TimelineStatus::Duplicate))
    {
        return TimelineStatus::Completed;
    }
    let replayed: Vec<Option<Uuid>> = lines
        .iter()
        .filter(|line| line.status == TimelineStatus::Replayed)
        .map(|line| line.dead_letter_id())
        .collect();
    let unresolved = lines.iter().enumerate().any(|(index, line)| {
        line.status == TimelineStatus::DeadLettered
            && match line.dead_letter_id() {
                Some(id) => !replayed.contains(&Some(id)),
                // A line that names no dead letter (none bosun writes):
                // resolved by a replay written after it.
                None => !lines[index..]
                    .iter()
                    .any(|later| later.status == TimelineStatus::Replayed),
            }
    });
    if unresolved {
        return TimelineStatus::DeadLettered;
    }
    lines
        .iter()
        .rev()
        .map(|line| line.status)
        .find(|status| matches!(status, TimelineStatus::Replayed | TimelineStatus::RetryScheduled))
        .unwrap_or(TimelineStatus::Sent)
}

/// Each consumer's status for one message: the consumers it is routed to
/// (`expected`, in that order), then any other consumer a line names.
pub fn consumer_statuses(expected: &[&str], lines: &[TimelineEntry]) -> Vec<ConsumerStatus> {
    let mut consumers: Vec<String> = expected.iter().map(|name| (*name).to_owned()).collect();
    for consumer in lines.iter().filter_map(|line| line.consumer.as_ref()) {
        if !consumers.contains(consumer) {
            consumers.push(consumer.clone());
        }
    }
    consumers
        .into_iter()
        .map(|consumer| {
            let status = hop_status(lines.iter().filter(|line| line.consumer.as_deref() == Some(&consumer)));
            ConsumerStatus { consumer, status }
        })
        .collect()
}

/// A message's status from its consumers' (see the module's documentation);
/// `lines` decides it for a message no consumer receives: `published` once
/// sent.
pub fn message_status(consumers: &[ConsumerStatus], lines: &[TimelineEntry]) -> TimelineStatus {
    if consumers.is_empty() {
        return match hop_status(lines) {
            TimelineStatus::Sent => TimelineStatus::Published,
            status => status,
        };
    }
    let any = |status: TimelineStatus| consumers.iter().any(|hop| hop.status == status);
    if any(TimelineStatus::DeadLettered) {
        TimelineStatus::DeadLettered
    } else if consumers.iter().all(|hop| hop.status == TimelineStatus::Completed) {
        TimelineStatus::Completed
    } else if any(TimelineStatus::RetryScheduled) {
        TimelineStatus::RetryScheduled
    } else if any(TimelineStatus::Replayed) {
        TimelineStatus::Replayed
    } else {
        TimelineStatus::Sent
    }
}

/// Whether every consumer in `expected` handled the message.
pub fn handled_everywhere(expected: &[&str], lines: &[TimelineEntry]) -> bool {
    expected.iter().all(|consumer| {
        hop_status(lines.iter().filter(|line| line.consumer.as_deref() == Some(*consumer))) == TimelineStatus::Completed
    })
}

#[cfg(test)]
mod tests {
    use time::OffsetDateTime;

    use super::*;

    fn line(consumer: Option<&str>, status: TimelineStatus, detail: Option<String>) -> TimelineEntry {
        TimelineEntry {
            correlation_id: "c-1".into(),
            message_id: "m-1".into(),
            message_type: "BuildCompleted".into(),
            consumer: consumer.map(str::to_owned),
            status,
            attempt: 0,
            at: OffsetDateTime::now_utc(),
            detail,
        }
    }

    fn sent() -> TimelineEntry {
        line(None, TimelineStatus::Sent, Some("to events".into()))
    }

    fn completed(consumer: &str) -> TimelineEntry {
        line(Some(consumer), TimelineStatus::Completed, None)
    }

    fn dead_lettered(consumer: &str, id: Uuid) -> TimelineEntry {
        line(
            Some(consumer),
            TimelineStatus::DeadLettered,
            Some(format!("PermanentFailure: no space left (dead letter {id})")),
        )
    }

    fn replayed(consumer: &str, id: Uuid) -> TimelineEntry {
        line(
            Some(consumer),
            TimelineStatus::Replayed,
            Some(format!("by cli:alice from dead letter {id}")),
        )
    }

    const SUBSCRIBERS: &[&str] = &["release-orchestration", "container-build", "package-publishing"];

    fn status_of(lines: &[TimelineEntry]) -> TimelineStatus {
        message_status(&consumer_statuses(SUBSCRIBERS, lines), lines)
    }

    /// Every order of `lines`, by Heap's algorithm.
    fn permutations(lines: &[TimelineEntry]) -> Vec<Vec<TimelineEntry>> {
        fn heap(k: usize, lines: &mut Vec<TimelineEntry>, out: &mut Vec<Vec<TimelineEntry>>) {
            if k <= 1 {
                out.push(lines.clone());
                return;
            }
            for i in 0..k {
                heap(k - 1, lines, out);
                let j = if k.is_multiple_of(2) { i } else { 0 };
                lines.swap(j, k - 1);
            }
        }
        let mut out = Vec::new();
        heap(lines.len(), &mut lines.to_vec(), &mut out);
        out
    }

    #[test]
    fn a_sent_line_written_after_completed_does_not_make_the_hop_sent() {
        let lines = [completed("commit"), sent()];
        assert_eq!(
            hop_status(lines.iter().filter(|l| l.consumer.is_some())),
            TimelineStatus::Completed
        );
        let consumers = consumer_statuses(&["commit"], &lines);
        assert_eq!(message_status(&consumers, &lines), TimelineStatus::Completed);
        assert!(handled_everywhere(&["commit"], &lines));
    }

    #[test]
    fn one_dead_lettered_subscriber_makes_the_message_dead_lettered_whatever_the_others_did() {
        let id = Uuid::now_v7();
        let lines = [
            sent(),
            dead_lettered("container-build", id),
            completed("package-publishing"),
            completed("release-orchestration"),
        ];
        for order in permutations(&lines) {
            assert_eq!(status_of(&order), TimelineStatus::DeadLettered, "{order:?}");
        }
        let hops = consumer_statuses(SUBSCRIBERS, &lines);
        assert_eq!(
            hops.iter().map(|hop| hop.status).collect::<Vec<_>>(),
            [
                TimelineStatus::Completed,
                TimelineStatus::DeadLettered,
                TimelineStatus::Completed
            ]
        );
        assert!(!handled_everywhere(SUBSCRIBERS, &lines));
    }

    #[test]
    fn every_subscriber_completed_in_any_order_is_completed() {
        let lines = [
            sent(),
            completed("container-build"),
            completed("package-publishing"),
            completed("release-orchestration"),
        ];
        for order in permutations(&lines) {
            assert_eq!(status_of(&order), TimelineStatus::Completed, "{order:?}");
            assert!(handled_everywhere(SUBSCRIBERS, &order));
        }
        // One subscriber not heard from yet: in flight, not completed.
        assert_eq!(status_of(&lines[..3]), TimelineStatus::Sent);
    }

    #[test]
    fn a_replay_resolves_the_dead_letter_it_names_only() {
        let first = Uuid::now_v7();
        let second = Uuid::now_v7();
        // Replayed, then handled: completed, whichever line came first.
        for order in permutations(&[
            dead_lettered("container-build", first),
            replayed("container-build", first),
            completed("container-build"),
        ]) {
            assert_eq!(hop_status(&order), TimelineStatus::Completed, "{order:?}");
        }
        // Replayed, nothing since: in flight again.
        assert_eq!(
            hop_status(&[
                dead_lettered("container-build", first),
                replayed("container-build", first)
            ]),
            TimelineStatus::Replayed
        );
        // The replayed copy dead-lettered again before the replay's line was
        // written: the second dead letter is not replayed.
        for order in permutations(&[
            dead_lettered("container-build", first),
            dead_lettered("container-build", second),
            replayed("container-build", first),
        ]) {
            assert_eq!(hop_status(&order), TimelineStatus::DeadLettered, "{order:?}");
        }
    }

    #[test]
    fn a_message_no_consumer_is_routed_to_is_published_not_sent() {
        // ReleaseBlocked: an event no consumer subscribes to.
        let mut line = sent();
        line.message_type = "ReleaseBlocked".into();
        let lines = [line];
        let consumers = consumer_statuses(&[], &lines);
        assert!(consumers.is_empty());
        assert_eq!(message_status(&consumers, &lines), TimelineStatus::Published);
        assert!(handled_everywhere(&[], &lines));
        // A message routed to a consumer that has not handled it yet is sent.
        assert_eq!(status_of(&[sent()]), TimelineStatus::Sent);
    }

    #[test]
    fn a_hops_status_never_goes_backwards_as_lines_are_added() {
        fn rank(status: TimelineStatus) -> u8 {
            match status {
                TimelineStatus::Sent => 0,
                TimelineStatus::RetryScheduled | TimelineStatus::Replayed | TimelineStatus::Duplicate => 1,
                TimelineStatus::DeadLettered => 2,
                TimelineStatus::Completed | TimelineStatus::Published => 3,
            }
        }
        let id = Uuid::now_v7();
        let mut retry = completed("container-build");
        retry.status = TimelineStatus::RetryScheduled;
        let lines = [
            sent(),
            retry,
            dead_lettered("container-build", id),
            completed("container-build"),
            line(Some("container-build"), TimelineStatus::Duplicate, None),
        ];
        for order in permutations(&lines) {
            let mut last = 0;
            for end in 0..=order.len() {
                let now = rank(hop_status(&order[..end]));
                assert!(now >= last, "went backwards at {end} of {order:?}");
                last = now;
            }
        }
    }
}
