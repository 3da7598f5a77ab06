//! Idempotency, the atomic commit of a handled message, and retries.

use std::collections::BTreeMap;

use time::OffsetDateTime;

use super::{MemoryStore, ms, now};
use crate::ports::store::HandledStore;
use crate::ports::store::{
    AttemptRecord, CommitOutcome, HandledMessage, OutboxPurpose, RetryWrite, SagaState, StoreError,
};

/// Which consumer handled which message, and the failed attempts.
#[derive(Debug, Default)]
pub(super) struct Handled {
    /// When each (consumer, message id) was handled: the idempotency records.
    pub(super) records: BTreeMap<(String, String), OffsetDateTime>,
    /// Failed attempts by (consumer, broker id of the delivery that
    /// failed): a redelivery of the same copy is recorded once.
    pub(super) attempts: BTreeMap<(String, String), Attempt>,
}

/// One failed attempt, with the message it was of.
#[derive(Debug)]
pub(super) struct Attempt {
    message_id: String,
    pub(super) record: AttemptRecord,
}

impl Handled {
    fn is_handled(&self, consumer: &str, message_id: &str) -> bool {
        self.records.contains_key(&(consumer.to_owned(), message_id.to_owned()))
    }
}

#[async_trait::async_trait]
impl HandledStore for MemoryStore {
    async fn is_handled(&self, consumer: &str, message_id: &str) -> Result<bool, StoreError> {
        Ok(self.with(|state| state.handled.is_handled(consumer, message_id)))
    }

    async fn handled_and_saga(
        &self,
        consumer: &str,
        message_id: &str,
        saga: Option<(&str, &str)>,
    ) -> Result<(bool, Option<SagaState>), StoreError> {
        Ok(self.with(|state| {
            if state.handled.is_handled(consumer, message_id) {
                return (true, None);
            }
            (false, saga.and_then(|(kind, key)| state.sagas.state(kind, key)))
        }))
    }

    async fn commit_handled(&self, handled: HandledMessage) -> Result<CommitOutcome, StoreError> {
        let lines = self.waited_on(&handled.timeline);
        let HandledMessage {
            consumer,
            message_id,
            message_type,
            saga,
            outbox,
            timeline,
        } = handled;
        let outcome = self.with(|state| -> Result<CommitOutcome, StoreError> {
            let key = (consumer, message_id);
            if state.handled.records.contains_key(&key) {
                return Ok(CommitOutcome::AlreadyHandled);
            }
            // Everything that can refuse the commit is checked before
            // anything is written: a conflict leaves nothing behind.
            if let Some(saga) = &saga {
                state.sagas.check(saga)?;
            }
            let now = now();
            if let Some(saga) = saga {
                state.sagas.save(saga, &key.1, &message_type, now);
            }
            for message in outbox {
                state.outbox.insert(Some(&key.1), OutboxPurpose::Emitted, message);
            }
            state.timeline.append(timeline);
            state.handled.records.insert(key, now);
            Ok(CommitOutcome::Committed)
        })?;
        self.written(&lines);
        Ok(outcome)
    }

    async fn record_retry(&self, retry: RetryWrite) -> Result<(), StoreError> {
        let lines = self.waited_on([&retry.timeline]);
        let RetryWrite {
            consumer,
            message_id,
            received_broker_message_id,
            attempt,
            retry,
            timeline,
        } = retry;
        self.with(|state| {
            let key = (consumer, received_broker_message_id);
            // A redelivered attempt that was already recorded already has
            // its retry in the outbox.
            if state.handled.attempts.contains_key(&key) {
                return;
            }
            state.outbox.insert(Some(&message_id), OutboxPurpose::Retry, retry);
            state.timeline.append([timeline]);
            let record = AttemptRecord {
                at: ms(attempt.at),
                ..attempt
            };
            state.handled.attempts.insert(key, Attempt { message_id, record });
        });
        self.written(&lines);
        Ok(())
    }

    async fn attempts(&self, consumer: &str, message_id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        let mut attempts: Vec<AttemptRecord> = self.with(|state| {
            state
                .handled
                .attempts
                .iter()
                .filter(|((of, _), attempt)| of == consumer && attempt.message_id == message_id)
                .map(|(_, attempt)| attempt.record.clone())
                .collect()
        });
        attempts.sort_by_key(|attempt| (attempt.at, attempt.attempt));
        Ok(attempts)
    }
}
