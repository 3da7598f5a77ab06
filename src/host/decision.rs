//! What to do with one delivery of a message, decided without I/O.
//!
//! The host is split in two: this module decides, [`super`] executes. The
//! executor runs the handler and the store and transport calls, reports
//! what it observed ([`Observed`]), and carries out the [`Decision`] that
//! [`decide`] returns. Every rule about retries, dead letters, redelivery
//! and saga conflicts lives here, in one pure function tested over every
//! combination of inputs (`tests` below).

use std::time::Duration;

use bosun_consumers::{HandlerError, RetryPolicy};

use crate::ports::NextStep;

/// Saga version conflicts tolerated for one message before it is abandoned
/// for redelivery.
pub const MAX_SAGA_CONFLICTS: u32 = 16;

/// What the executor observed about one delivery.
#[derive(Debug, Clone, Copy)]
pub enum Observed<'a> {
    /// This consumer already handled the message (its idempotency record
    /// exists): a redelivery or a duplicate send.
    AlreadyHandled,
    /// The handler succeeded; its outputs are ready to commit.
    Succeeded,
    /// The handler failed.
    HandlerFailed(&'a HandlerError),
    /// The runtime failed around the handler (checking idempotency, loading
    /// the saga, committing); the error says what may happen next.
    RuntimeFailed(NextStep),
    /// The saga changed between load and commit, for the `conflicts`-th
    /// time for this delivery.
    SagaConflict {
        /// Conflicts so far, this one included.
        conflicts: u32,
    },
    /// The lock was lost before the commit: nothing was written and the
    /// transport will deliver the message again.
    LockLost,
    /// The shutdown grace period ended before the handler finished.
    Interrupted,
    /// This build cannot handle the message yet: its schema version is
    /// newer than any this build reads, or the handler said it needs a
    /// newer release ([`HandlerError::NeedsNewer`]). It has waited for a
    /// newer process for `waited` so far (zero the first time it is seen).
    NeedsNewer {
        /// Since the message was first seen waiting (its `waitingSince`).
        waited: Duration,
        /// How long until it is looked at again
        /// (`BOSUN_NEWER_MESSAGE_WAIT`).
        wait: Duration,
        /// How long it may wait in all (`BOSUN_NEWER_MESSAGE_PATIENCE`).
        patience: Duration,
    },
}

/// Why a message is dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterReason {
    /// The handler said retrying cannot help.
    PermanentFailure,
    /// The handler kept failing transiently and the retries are used up.
    RetriesExhausted,
    /// The state this message needs cannot be read (e.g. a corrupt saga
    /// row): no retry can succeed until an operator repairs it.
    CorruptState,
    /// The message waited for a newer bosun longer than the patience
    /// allows, and no process that could read it took it.
    NeedsNewer,
}

impl DeadLetterReason {
    /// The reason as recorded on the dead letter and the transport.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PermanentFailure => "permanent-failure",
            Self::RetriesExhausted => "retries-exhausted",
            Self::CorruptState => "corrupt-state",
            Self::NeedsNewer => "needs-newer",
        }
    }
}

/// What the executor does with the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Complete the message. With `outputs`, first commit the handler's
    /// outputs (idempotency record, saga, outbox) with it; without, only
    /// acknowledge (it was handled before).
    Complete {
        /// Whether the handler's outputs are committed with it.
        outputs: bool,
    },
    /// Load the saga again and run the handler again.
    Reapply,
    /// Record the failed attempt and schedule a copy of the message with
    /// attempt `attempt` after `delay`; complete this delivery.
    Retry {
        /// The attempt number the copy carries.
        attempt: u32,
        /// How long from now the copy is delivered.
        delay: Duration,
    },
    /// Leave the message for a newer process: schedule a copy of its
    /// original bytes after `delay` (same attempt: waiting is not a
    /// failed attempt), marked with when it was first seen waiting;
    /// complete this delivery.
    Wait {
        /// How long from now the copy is delivered.
        delay: Duration,
    },
    /// Record a dead letter (original bytes, error chain, attempts) and
    /// dead-letter the message on the transport.
    DeadLetter(DeadLetterReason),
    /// Give the message back for redelivery now (nothing was written).
    Abandon,
    /// Abandon the message and stop taking work: this process cannot
    /// handle anything until an operator acts (e.g. schema mismatch).
    Stop,
    /// Do nothing: the lock is gone and the transport redelivers it.
    LetGo,
}

/// The decision for a delivery of a message at attempt `attempt` (0 for
/// the first delivery, as recorded on the envelope) of a consumer with
/// `policy`. `jitter`, in `0.0..=1.0`, picks the retry delay within the
/// policy's ceiling (full jitter); the executor passes a random number.
///
/// A [`HandlerError::NeedsNewer`] is reported by the executor as
/// [`Observed::NeedsNewer`] (it knows how long the message has waited), not
/// as a handler failure; a message that needs a newer bosun waits without
/// counting an attempt, and is dead-lettered only once it has waited
/// longer than its patience.
pub fn decide(observed: Observed<'_>, policy: &RetryPolicy, attempt: u32, jitter: f64) -> Decision {
    match observed {
        Observed::AlreadyHandled => Decision::Complete { outputs: false },
        Observed::Succeeded => Decision::Complete { outputs: true },
        Observed::HandlerFailed(err) if !err.is_retryable() => Decision::DeadLetter(DeadLetterReason::PermanentFailure),
        Observed::HandlerFailed(_) if attempt >= policy.max_retries => {
            Decision::DeadLetter(DeadLetterReason::RetriesExhausted)
        }
        Observed::HandlerFailed(err) => {
            let next = attempt + 1;
            let jittered = policy.ceiling(next).mul_f64(jitter.clamp(0.0, 1.0));
            let delay = match err {
                HandlerError::RetryAfter { after, .. } => jittered.max(*after),
                HandlerError::Transient(_) | HandlerError::Permanent(_) | HandlerError::NeedsNewer(_) => jittered,
            };
            Decision::Retry { attempt: next, delay }
        }
        Observed::RuntimeFailed(NextStep::Retry) => Decision::Abandon,
        Observed::RuntimeFailed(NextStep::DeadLetter) => Decision::DeadLetter(DeadLetterReason::CorruptState),
        Observed::RuntimeFailed(NextStep::Stop) => Decision::Stop,
        Observed::SagaConflict { conflicts } if conflicts <= MAX_SAGA_CONFLICTS => Decision::Reapply,
        Observed::SagaConflict { .. } => Decision::Abandon,
        Observed::LockLost => Decision::LetGo,
        Observed::Interrupted => Decision::Abandon,
        Observed::NeedsNewer { waited, patience, .. } if waited > patience => {
            Decision::DeadLetter(DeadLetterReason::NeedsNewer)
        }
        Observed::NeedsNewer { wait, .. } => Decision::Wait { delay: wait },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("git host answered 503")]
    struct Unavailable;

    fn policies() -> Vec<RetryPolicy> {
        vec![
            RetryPolicy::exponential(0),
            RetryPolicy::exponential(1),
            RetryPolicy::exponential(5),
            RetryPolicy {
                max_retries: 3,
                base_delay: Duration::from_millis(10),
                max_delay: Duration::from_millis(25),
            },
        ]
    }

    fn errors() -> Vec<HandlerError> {
        vec![
            HandlerError::transient(Unavailable),
            HandlerError::permanent(Unavailable),
            HandlerError::RetryAfter {
                after: Duration::ZERO,
                source: Box::new(Unavailable),
            },
            HandlerError::RetryAfter {
                after: Duration::from_secs(30),
                source: Box::new(Unavailable),
            },
            HandlerError::RetryAfter {
                after: Duration::from_secs(3_600),
                source: Box::new(Unavailable),
            },
        ]
    }

    const JITTERS: [f64; 5] = [0.0, 0.25, 0.5, 1.0, 7.0];

    /// Every handler error, at every attempt around every policy's limit,
    /// with every jitter: the expected decision written out independently.
    #[test]
    fn handler_failures_over_every_policy_attempt_and_jitter() {
        let mut cases = 0;
        for policy in policies() {
            let limit = policy.max_retries;
            let attempts = [0, 1, limit.saturating_sub(1), limit, limit + 1, u32::MAX];
            for err in errors() {
                for attempt in attempts {
                    for jitter in JITTERS {
                        let decision = decide(Observed::HandlerFailed(&err), &policy, attempt, jitter);
                        cases += 1;
                        let expected = match &err {
                            HandlerError::Permanent(_) => Decision::DeadLetter(DeadLetterReason::PermanentFailure),
                            _ if attempt >= limit => Decision::DeadLetter(DeadLetterReason::RetriesExhausted),
                            err => {
                                let ceiling = policy.ceiling(attempt + 1);
                                let jittered = ceiling.mul_f64(jitter.min(1.0));
                                let floor = match err {
                                    HandlerError::RetryAfter { after, .. } => *after,
                                    _ => Duration::ZERO,
                                };
                                Decision::Retry {
                                    attempt: attempt + 1,
                                    delay: jittered.max(floor),
                                }
                            }
                        };
                        assert_eq!(
                            decision, expected,
                            "{err:?} at attempt {attempt} of {policy:?}, jitter {jitter}"
                        );
                        if let Decision::Retry { delay, .. } = decision {
                            let ceiling = policy.ceiling(attempt + 1);
                            match &err {
                                HandlerError::RetryAfter { after, .. } => {
                                    assert!(delay >= *after, "a retry never comes before Retry-After");
                                    assert!(delay <= ceiling.max(*after));
                                }
                                _ => assert!(delay <= ceiling, "a retry waits at most the policy's ceiling"),
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(cases, 4 * 5 * 6 * JITTERS.len());
    }

    #[test]
    fn a_policy_without_retries_dead_letters_the_first_transient_failure() {
        let err = HandlerError::transient(Unavailable);
        assert_eq!(
            decide(Observed::HandlerFailed(&err), &RetryPolicy::exponential(0), 0, 0.5),
            Decision::DeadLetter(DeadLetterReason::RetriesExhausted)
        );
    }

    #[test]
    fn the_last_retry_is_scheduled_and_the_next_failure_dead_letters() {
        let policy = RetryPolicy::exponential(5);
        let err = HandlerError::transient(Unavailable);
        assert!(matches!(
            decide(Observed::HandlerFailed(&err), &policy, 4, 1.0),
            Decision::Retry { attempt: 5, delay } if delay == Duration::from_secs(16)
        ));
        assert_eq!(
            decide(Observed::HandlerFailed(&err), &policy, 5, 1.0),
            Decision::DeadLetter(DeadLetterReason::RetriesExhausted)
        );
    }

    /// Everything that is not a handler failure decides the same whatever
    /// the policy, attempt and jitter.
    #[test]
    fn other_observations_over_every_policy_attempt_and_jitter() {
        let table = [
            (Observed::AlreadyHandled, Decision::Complete { outputs: false }),
            (Observed::Succeeded, Decision::Complete { outputs: true }),
            (Observed::RuntimeFailed(NextStep::Retry), Decision::Abandon),
            (
                Observed::RuntimeFailed(NextStep::DeadLetter),
                Decision::DeadLetter(DeadLetterReason::CorruptState),
            ),
            (Observed::RuntimeFailed(NextStep::Stop), Decision::Stop),
            (Observed::SagaConflict { conflicts: 1 }, Decision::Reapply),
            (
                Observed::SagaConflict {
                    conflicts: MAX_SAGA_CONFLICTS,
                },
                Decision::Reapply,
            ),
            (
                Observed::SagaConflict {
                    conflicts: MAX_SAGA_CONFLICTS + 1,
                },
                Decision::Abandon,
            ),
            (Observed::LockLost, Decision::LetGo),
            (Observed::Interrupted, Decision::Abandon),
        ];
        for policy in policies() {
            for attempt in [0, 1, policy.max_retries, policy.max_retries + 1, u32::MAX] {
                for jitter in JITTERS {
                    for (observed, expected) in table {
                        assert_eq!(
                            decide(observed, &policy, attempt, jitter),
                            expected,
                            "{observed:?} at attempt {attempt} of {policy:?}"
                        );
                    }
                }
            }
        }
    }

    /// A message that needs a newer bosun waits, whatever the policy,
    /// attempt and jitter (waiting is no attempt), until it has waited
    /// longer than its patience.
    #[test]
    fn needing_a_newer_bosun_waits_until_the_patience_is_over() {
        let minute = Duration::from_secs(60);
        let day = Duration::from_secs(86_400);
        let table = [
            (Duration::ZERO, minute, day, Decision::Wait { delay: minute }),
            (minute, minute, day, Decision::Wait { delay: minute }),
            (day, minute, day, Decision::Wait { delay: minute }),
            (
                day + Duration::from_millis(1),
                minute,
                day,
                Decision::DeadLetter(DeadLetterReason::NeedsNewer),
            ),
            (
                Duration::from_secs(1),
                minute,
                Duration::ZERO,
                Decision::DeadLetter(DeadLetterReason::NeedsNewer),
            ),
            (Duration::ZERO, minute, Duration::ZERO, Decision::Wait { delay: minute }),
            (
                Duration::from_millis(10),
                Duration::from_millis(5),
                Duration::from_millis(20),
                Decision::Wait {
                    delay: Duration::from_millis(5),
                },
            ),
        ];
        for policy in policies() {
            for attempt in [0, 1, policy.max_retries, policy.max_retries + 1, u32::MAX] {
                for jitter in JITTERS {
                    for (waited, wait, patience, expected) in table {
                        let observed = Observed::NeedsNewer { waited, wait, patience };
                        assert_eq!(
                            decide(observed, &policy, attempt, jitter),
                            expected,
                            "{observed:?} at attempt {attempt} of {policy:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn reasons_read_as_recorded() {
        assert_eq!(DeadLetterReason::PermanentFailure.as_str(), "permanent-failure");
        assert_eq!(DeadLetterReason::RetriesExhausted.as_str(), "retries-exhausted");
        assert_eq!(DeadLetterReason::CorruptState.as_str(), "corrupt-state");
        assert_eq!(DeadLetterReason::NeedsNewer.as_str(), "needs-newer");
    }
}
