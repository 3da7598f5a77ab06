//! What operators and agents do with a running (or stopped) bosun: fire
//! commands, follow a delivery, look at and replay dead letters, look at
//! sagas. The CLI is a thin layer over this module (and the HTTP API will
//! be another).

mod assemble;
pub mod audit;
pub mod controls;
pub mod describe;
pub mod groups;
mod lookup;
pub mod outcome;
pub mod policies;
pub mod rollback;
mod send;
pub mod status;

#[cfg(test)]
pub(crate) use assemble::expected_consumers;
pub use outcome::DeliveryOutcome;
pub use send::{PreparedCommand, SendOptions, SentMessage};

use std::sync::Arc;
use std::time::Duration;

use bosun_contracts::{ContractError, Destination, Envelope, Message, MessageSpec, versions};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::host::claim_check::{ClaimCheck, ClaimCheckError};
use crate::host::with_attempt;
use crate::operator::groups::FailureGroup;
use crate::operator::status::ConsumerStatus;
use crate::ports::store::{
    DeadLetterFilter, DeadLetterRecord, DeadLetterStatus, ReplayEdit, ReplayRecord, SagaRecord, Store, StoreError,
    TimelineEntry, TimelineStatus,
};
use crate::ports::transport::{Broker, OutboundMessage, Topology, TransportError};
use crate::runtime::telemetry;

/// Why an operator action failed.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// The command is not valid.
    #[error(transparent)]
    Contract(#[from] ContractError),
    /// A store failure or a missing record.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A transport failure.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// A message bosun schedules for itself (a timeout, a poll).
    #[error("`{0}` is scheduled by bosun itself and cannot be sent")]
    Internal(String),
    /// Anything else that is the caller's to fix.
    #[error("{0}")]
    Invalid(String),
    /// The blob store the claim check moves a large payload to failed, in
    /// a way that may pass ([`ClaimCheckError::is_transient`]): nothing was
    /// sent; send again later (the API answers 503).
    #[error("claim check: {0}")]
    BlobUnavailable(#[source] ClaimCheckError),
    /// The claim check refused the message for good (it is not an
    /// envelope it can work on, or the blob store refused the payload):
    /// nothing was sent, and sending it again will not help.
    #[error("claim check: {0}")]
    ClaimCheck(#[source] ClaimCheckError),
}

impl From<ClaimCheckError> for OperatorError {
    /// [`OperatorError::BlobUnavailable`] when the blob store's error may
    /// pass, [`OperatorError::ClaimCheck`] otherwise.
    fn from(err: ClaimCheckError) -> Self {
        if err.is_transient() {
            Self::BlobUnavailable(err)
        } else {
            Self::ClaimCheck(err)
        }
    }
}

/// One message of a delivery, summarised from the timeline.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryMessage {
    /// The message.
    pub message_id: String,
    /// Its type.
    pub message_type: String,
    /// Consumers that handled (or failed) it.
    pub consumers: Vec<String>,
    /// What became of it: `dead-lettered` as soon as one consumer
    /// dead-lettered it (and it was not replayed since), `completed` when
    /// every consumer it is routed to handled it, `published` when no
    /// consumer is routed to it (sent, and over), else in flight (`sent`,
    /// `retry-scheduled`, `replayed`); never from the order its lines were
    /// written in ([`status`]).
    pub status: TimelineStatus,
    /// What became of it at each consumer it is routed to (and any other
    /// that wrote a line about it).
    pub by_consumer: Vec<ConsumerStatus>,
    /// Handling attempts (retries + 1) seen so far, counted as its lines'
    /// `attemptNumber`: the highest of its `completed`, `retry-scheduled`
    /// and `dead-lettered` lines (0 before any consumer handled it, and for
    /// a `published` one).
    pub attempts: u32,
    /// First time it appears.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub first_seen: OffsetDateTime,
    /// Last time anything happened to it.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub last_update: OffsetDateTime,
    /// What the message says, in one line (for messages a consumer emitted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Every line.
    pub events: Vec<TimelineEntry>,
}

/// A delivery: every message with one correlation id.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// The correlation id.
    pub correlation_id: String,
    /// The tenant whose delivery it is, when known.
    pub tenant_id: Option<String>,
    /// `failed` when a message is dead-lettered and not replayed since, or
    /// the release was blocked or rejected; `completed` when every message
    /// sent or emitted has been handled by every consumer it is routed to
    /// (nothing in flight, nothing scheduled); `in-progress` otherwise.
    pub status: String,
    /// What became of it, in one sentence and its parts: for a failed
    /// delivery what ended it and where (the hop, the consumer, the error)
    /// and what to do next; for a completed one how long it took through
    /// how many hops.
    pub outcome: DeliveryOutcome,
    /// The delivery's W3C trace id (32 hex digits), to look it up in the
    /// tracing backend: the trace of its first command, which every
    /// message of the delivery is a span of. `None` when unknown (a
    /// delivery recorded before bosun kept its trace, with no message
    /// emitted yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Messages in the order they first appeared.
    pub messages: Vec<DeliveryMessage>,
}

/// What a bulk replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplaySummary {
    /// Dead letters replayed.
    pub replayed: Vec<Uuid>,
    /// Dead letters that could not be replayed, with why.
    pub failed: Vec<(Uuid, String)>,
}

/// Operator actions over a transport and a store.
#[derive(Clone)]
pub struct Operator {
    transport: Arc<dyn Broker>,
    store: Arc<dyn Store>,
    topology: Topology,
    identity: String,
    source: String,
    principal: String,
    /// The identities the principal answers to in approval policies
    /// (`approverIdentities`).
    identities: Vec<String>,
    claim_check: Option<ClaimCheck>,
    /// The transport's `messaging.system`, on the producer spans of sends.
    messaging_system: &'static str,
    /// The wire version messages are written at (`BOSUN_COMPAT_VERSION`).
    wire: u32,
}

impl Operator {
    /// Operator actions performed as `identity` (recorded on replays and sends).
    pub fn new(transport: Arc<dyn Broker>, store: Arc<dyn Store>, identity: impl Into<String>) -> Self {
        let identity = identity.into();
        Self {
            transport,
            store,
            topology: Topology::from_routing(),
            source: format!("cli:{identity}"),
            principal: format!("cli:{identity}"),
            identities: vec![format!("cli:{identity}")],
            identity,
            claim_check: None,
            messaging_system: "bosun",
            wire: bosun_contracts::WIRE_VERSION,
        }
    }

    /// Names the transport on the spans of what this operator sends
    /// ([`telemetry::messaging_system`]).
    pub fn with_messaging_system(mut self, messaging_system: &'static str) -> Self {
        self.messaging_system = messaging_system;
        self
    }

    /// Records `principal` as who approves or rejects releases in the
    /// commands this operator sends (`approvedBy`, `rejectedBy`); the CLI's
    /// is `cli:<operator>`, an API key's `key:<id> (<description>)`.
    pub fn approving_as(mut self, principal: impl Into<String>) -> Self {
        self.principal = principal.into();
        self
    }

    /// Records `identities` as who the principal answers to in approval
    /// policies (`approverIdentities` of its approvals): the CLI's is
    /// `cli:<operator>`, an API key's `key:<id>` and its sponsor.
    pub fn answering_to(mut self, identities: Vec<String>) -> Self {
        self.identities = identities;
        self
    }

    /// Records `identity` as who acts and `source` as the envelope's source
    /// of sent commands (the HTTP API uses `api:<key id>` for both).
    pub fn acting_as(mut self, identity: impl Into<String>, source: impl Into<String>) -> Self {
        self.identity = identity.into();
        self.source = source.into();
        self
    }

    /// Writes every message it sends for wire version `wire`
    /// (`BOSUN_COMPAT_VERSION`: each at the newest version that wire had).
    pub fn writing_for_wire(mut self, wire: u32) -> Self {
        self.wire = wire;
        self
    }

    /// Moves payloads over the threshold to the blob store before sending.
    pub fn with_claim_check(mut self, claim_check: ClaimCheck) -> Self {
        self.claim_check = Some(claim_check);
        self
    }

    /// The timeline of a delivery, grouped by message.
    pub async fn delivery(&self, correlation_id: &str) -> Result<Delivery, OperatorError> {
        Ok(self.delivery_with_lines(correlation_id).await?.0)
    }

    /// [`Operator::delivery`], and its timeline lines in the order they
    /// were written (for a stream that follows them), from one read.
    pub async fn delivery_with_lines(
        &self,
        correlation_id: &str,
    ) -> Result<(Delivery, Vec<TimelineEntry>), OperatorError> {
        let lines = self.store.timeline(correlation_id).await?;
        if lines.is_empty() {
            return Err(StoreError::NotFound {
                what: "delivery",
                id: correlation_id.to_owned(),
            }
            .into());
        }
        let mut messages = assemble::messages_of(&lines);
        let record = self.store.delivery_record(correlation_id).await?;
        let mut trace_id = record
            .as_ref()
            .and_then(|record| record.traceparent.as_deref())
            .and_then(telemetry::trace_id)
            .map(str::to_owned);
        let mut tenant = record.map(|record| record.tenant_id);
        // Messages consumers emitted: what they say, and (sent or still in
        // the outbox) whether the delivery is settled.
        let mut emitted = Vec::new();
        for body in self.store.emitted(correlation_id).await? {
            if let Ok((envelope, message)) = Envelope::parse(&body) {
                let id = envelope.message_id.to_string();
                if let Some(entry) = messages.iter_mut().find(|m| m.message_id == id) {
                    entry.summary = crate::operator::describe::describe(&message);
                }
                tenant.get_or_insert_with(|| envelope.tenant_id.clone());
                if trace_id.is_none() {
                    trace_id = envelope
                        .traceparent
                        .as_deref()
                        .and_then(telemetry::trace_id)
                        .map(str::to_owned);
                }
                emitted.push((envelope, message));
            }
        }
        let emitted_types: Vec<(String, String)> = emitted
            .iter()
            .map(|(envelope, _)| (envelope.message_id.to_string(), envelope.message_type.clone()))
            .collect();
        let status = assemble::delivery_status(&messages, &emitted_types);
        let outcome = outcome::outcome(status, &messages, &emitted);
        let delivery = Delivery {
            correlation_id: correlation_id.to_owned(),
            tenant_id: tenant,
            status: status.to_owned(),
            outcome,
            trace_id,
            messages,
        };
        Ok((delivery, lines))
    }

    /// Removes the transport's copy of a dead letter from its dead-letter
    /// queue. A native dead letter's record holds the copy's sequence
    /// number. The host's record holds the number the message had in its
    /// queue, which a transport may change when it dead-letters it (Service
    /// Bus numbers its dead-letter sub-queue anew), so that copy is found by
    /// its broker message id.
    async fn remove_native_copy(&self, record: &DeadLetterRecord) -> Result<(), OperatorError> {
        let entity = Destination::parse(&record.entity);
        let sequence = if record.origin == "host" {
            self.transport
                .peek_dead_letters(&entity, 10_000)
                .await?
                .into_iter()
                .find(|native| native.broker_message_id == record.broker_message_id)
                .map(|native| native.sequence)
        } else {
            record.transport_sequence
        };
        if let Some(sequence) = sequence {
            self.transport.remove_dead_letter(&entity, sequence).await?;
        }
        Ok(())
    }

    /// Brings the transport's own dead letters (max delivery count, TTL)
    /// into the dead-letter list. Returns how many were new. The native
    /// copies of messages the host dead-lettered itself are already listed
    /// (matched by sequence number, else by entity and broker message id).
    pub async fn sync_native_dead_letters(&self) -> Result<usize, OperatorError> {
        let mut imported = 0;
        let mut host_records: Option<Vec<(String, String)>> = None;
        for entity in self.topology.receive_entities() {
            for native in self.transport.peek_dead_letters(&entity, 10_000).await? {
                if self.store.dead_letter_for(&entity, native.sequence).await?.is_some() {
                    continue;
                }
                if host_records.is_none() {
                    let all = DeadLetterFilter {
                        include_replayed: true,
                        ..DeadLetterFilter::default()
                    };
                    host_records = Some(
                        self.store
                            .dead_letters(&all)
                            .await?
                            .into_iter()
                            .filter(|record| record.origin == "host")
                            .map(|record| (record.entity, record.broker_message_id))
                            .collect(),
                    );
                }
                let path = entity.path();
                if host_records
                    .iter()
                    .flatten()
                    .any(|(entity, broker_id)| entity == &path && broker_id == &native.broker_message_id)
                {
                    continue;
                }
                let envelope = Envelope::from_slice(&native.body).ok();
                let consumer = match &entity {
                    Destination::Queue(name) => name.clone(),
                    Destination::Subscription { subscription, .. } => subscription.clone(),
                    Destination::Topic(topic) => topic.clone(),
                };
                let record = DeadLetterRecord {
                    id: Uuid::now_v7(),
                    consumer: Some(consumer),
                    entity: entity.path(),
                    transport_sequence: Some(native.sequence),
                    broker_message_id: native.broker_message_id.clone(),
                    message_id: envelope.as_ref().map(|e| e.message_id.to_string()),
                    message_type: envelope
                        .as_ref()
                        .map(|e| e.message_type.clone())
                        .or(native.message_type.clone()),
                    correlation_id: envelope.as_ref().map(|e| e.correlation_id.to_string()),
                    tenant_id: envelope.as_ref().map(|e| e.tenant_id.clone()),
                    body: native.body.clone(),
                    reason: native.reason.clone(),
                    description: native.description.clone(),
                    error_chain: vec![format!("{}: {}", native.reason, native.description)],
                    attempts: Vec::new(),
                    dead_lettered_at: native.dead_lettered_at,
                    origin: "transport".to_owned(),
                    status: DeadLetterStatus::Dead,
                    replays: Vec::new(),
                };
                let timeline = envelope.as_ref().map(|e| TimelineEntry {
                    correlation_id: e.correlation_id.to_string(),
                    message_id: e.message_id.to_string(),
                    message_type: e.message_type.clone(),
                    consumer: record.consumer.clone(),
                    status: TimelineStatus::DeadLettered,
                    attempt: e.attempt,
                    at: native.dead_lettered_at,
                    detail: Some(format!(
                        "{}: {} (dead letter {})",
                        native.reason, native.description, record.id
                    )),
                });
                self.store.record_dead_letter(record, timeline).await?;
                imported += 1;
            }
        }
        Ok(imported)
    }

    /// Dead letters matching `filter`, native ones included.
    pub async fn dead_letters(&self, filter: &DeadLetterFilter) -> Result<Vec<DeadLetterRecord>, OperatorError> {
        self.sync_native_dead_letters().await?;
        Ok(self.store.dead_letters(filter).await?)
    }

    /// Dead letters matching `filter` (native ones included), grouped by
    /// cause ([`groups`]), largest group first.
    pub async fn failure_groups(&self, filter: &DeadLetterFilter) -> Result<Vec<FailureGroup>, OperatorError> {
        let records = self.dead_letters(filter).await?;
        Ok(groups::group_failures(&records, OffsetDateTime::now_utc()))
    }

    /// The group with this fingerprint among the dead letters matching
    /// `filter`; not found when none of them has it.
    pub async fn failure_group(
        &self,
        filter: &DeadLetterFilter,
        fingerprint: &str,
    ) -> Result<FailureGroup, OperatorError> {
        self.failure_groups(filter)
            .await?
            .into_iter()
            .find(|group| group.fingerprint == fingerprint.trim())
            .ok_or_else(|| {
                StoreError::NotFound {
                    what: "failure group",
                    id: fingerprint.to_owned(),
                }
                .into()
            })
    }

    /// One dead letter (full id or unique prefix), of any tenant.
    pub async fn dead_letter(&self, id: &str) -> Result<DeadLetterRecord, OperatorError> {
        self.dead_letter_of(id, None).await
    }

    /// One dead letter (full id or unique prefix) of `tenant` only when
    /// given: another tenant's records neither match nor make a prefix
    /// ambiguous.
    pub async fn dead_letter_of(&self, id: &str, tenant: Option<&str>) -> Result<DeadLetterRecord, OperatorError> {
        // No sync here: a dead letter's id is given when it is recorded (a
        // native one when a listing imports it), so an id names a record
        // the store already has. Replays, bulk ones included, look up each
        // id without peeking every dead-letter queue again.
        Ok(self.store.dead_letter(id, tenant).await?)
    }

    /// Sends a dead letter's original envelope back to the queue or
    /// subscription it came from (its attempt count reset to 0, everything
    /// else byte-for-byte as kept, unknown fields included), removes the
    /// transport's copy from the dead-letter queue, and records the replay.
    pub async fn replay(&self, id: &str) -> Result<ReplayRecord, OperatorError> {
        self.replay_with(id, None).await
    }

    /// [`Operator::replay`], with the payload replaced by `edited_payload`
    /// when given (validated against the message's contract first; the rest
    /// of the envelope, messageId and unknown fields included, is kept).
    pub async fn replay_with(&self, id: &str, edited_payload: Option<&Value>) -> Result<ReplayRecord, OperatorError> {
        let record = self.dead_letter(id).await?;
        self.replay_record(record, edited_payload, Uuid::now_v7()).await
    }

    /// [`Operator::replay`] under a replay id fixed beforehand (a stored
    /// bulk replay job's item): the message is sent as
    /// `<messageId>.replay-<replay_id>`, so sending it again after a crash
    /// between the send and the record is dropped by the transport's
    /// duplicate detection, and a dead letter that already records this
    /// replay is neither sent nor recorded again.
    pub async fn replay_as(&self, id: &str, replay_id: Uuid) -> Result<ReplayRecord, OperatorError> {
        let record = self.dead_letter(id).await?;
        if let Some(done) = record.replays.iter().find(|replay| replay.replay_id == replay_id) {
            return Ok(done.clone());
        }
        self.replay_record(record, None, replay_id).await
    }

    async fn replay_record(
        &self,
        record: DeadLetterRecord,
        edited_payload: Option<&Value>,
        replay_id: Uuid,
    ) -> Result<ReplayRecord, OperatorError> {
        let destination = Destination::parse(&record.entity);
        let mut edit = None;
        let body = match edited_payload {
            None => with_attempt(&record.body, 0).unwrap_or_else(|| record.body.clone()),
            Some(payload) => {
                let mut envelope = Envelope::from_slice(&record.body).map_err(|err| {
                    OperatorError::Invalid(format!(
                        "dead letter {} holds no readable envelope ({err}); it can only be replayed as it is",
                        record.id
                    ))
                })?;
                if MessageSpec::find(&envelope.message_type).is_some_and(|spec| spec.internal) {
                    return Err(OperatorError::Invalid(format!(
                        "`{}` is scheduled by bosun itself: it can only be replayed as it is, not edited",
                        envelope.message_type
                    )));
                }
                let mut payload = payload.clone();
                // An edited decision is a new decision: it is recorded as the
                // replaying caller's, whatever the edit says (the front door
                // checks that caller's right to decide).
                if let Some(field) = match envelope.message_type.as_str() {
                    "ApproveRelease" => Some(("approvedBy", Some("approverIdentities"))),
                    "RejectRelease" => Some(("rejectedBy", None)),
                    "OverrideReleaseWindow" => Some(("overriddenBy", Some("overriderIdentities"))),
                    "RollbackEnvironment" => Some(("requestedBy", Some("requesterIdentities"))),
                    _ => None,
                } && let Some(object) = payload.as_object_mut()
                {
                    let (field, identities) = field;
                    object.insert(field.to_owned(), Value::String(self.principal.clone()));
                    if envelope.message_type == "RollbackEnvironment" {
                        // As when sent: bosun says when, and only the release
                        // saga names a failed release.
                        object.remove("failedReleaseId");
                        if let Ok(now) =
                            time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339)
                        {
                            object.insert("requestedAt".to_owned(), Value::String(now));
                        }
                    }
                    if let Some(identities) = identities {
                        // And who that caller answers to in approval policies.
                        object.insert(identities.to_owned(), serde_json::json!(self.identities));
                    }
                }
                // Sent as the contract reads it (defaults filled in), so the
                // diff shows what the edit changed, not what it left out.
                // An edit written against an older version (a retired
                // field) is read as that version.
                let payload = match MessageSpec::find(&envelope.message_type) {
                    Some(spec) => versions::payload_as_sent(spec, &payload)?,
                    None => payload,
                };
                let message = Message::from_type_and_payload(&envelope.message_type, &payload)?;
                let payload = message.to_payload();
                // The edit is read as the current version of the type, so
                // it is sent as that version (an older original included).
                envelope.schema_version = message.spec().schema_version;
                let original = std::mem::replace(&mut envelope.payload, payload.clone());
                // Recorded even when nothing changed (an empty diff): the
                // caller asked for an edited replay.
                edit = Some(ReplayEdit::between(original, payload));
                envelope.attempt = 0;
                envelope.to_vec()
            }
        };
        let base_id = record
            .message_id
            .clone()
            .unwrap_or_else(|| record.broker_message_id.clone());
        let broker_message_id = format!("{base_id}.replay-{replay_id}");
        let mut replayed = OutboundMessage {
            destination: destination.clone(),
            broker_message_id: broker_message_id.clone(),
            message_type: record.message_type.clone(),
            correlation_id: record.correlation_id.clone(),
            body,
            scheduled_at: None,
        };
        // A replay is sent directly, not through the outbox: written for
        // the compat wire here, as `send_pending` writes everything else.
        crate::host::dispatcher::write_for_wire(&mut replayed, self.wire);
        self.transport.send(vec![replayed]).await?;
        self.remove_native_copy(&record).await?;
        let replay = ReplayRecord {
            replay_id,
            by: self.identity.clone(),
            at: OffsetDateTime::now_utc(),
            destination: destination.path(),
            broker_message_id,
            edit,
        };
        let timeline = match (&record.correlation_id, &record.message_id) {
            (Some(correlation_id), Some(message_id)) => Some(TimelineEntry {
                correlation_id: correlation_id.clone(),
                message_id: message_id.clone(),
                message_type: record.message_type.clone().unwrap_or_default(),
                consumer: record.consumer.clone(),
                status: TimelineStatus::Replayed,
                attempt: 0,
                at: replay.at,
                detail: Some(format!("by {} from dead letter {}", replay.by, record.id)),
            }),
            _ => None,
        };
        self.store.record_replay(record.id, replay.clone(), timeline).await?;
        Ok(replay)
    }

    /// Replays many dead letters, at most `rate` per second, calling
    /// `progress(done, total, id, result)` after each (with the error, when
    /// one failed; the summary keeps its text).
    pub async fn replay_many(
        &self,
        ids: &[Uuid],
        rate: Option<f64>,
        mut progress: impl FnMut(usize, usize, &Uuid, &Result<ReplayRecord, OperatorError>),
    ) -> ReplaySummary {
        let interval = rate.filter(|r| *r > 0.0).map(|r| Duration::from_secs_f64(1.0 / r));
        let mut ticker = interval.map(|interval| {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker
        });
        let mut summary = ReplaySummary::default();
        for (index, id) in ids.iter().enumerate() {
            if let Some(ticker) = ticker.as_mut() {
                ticker.tick().await;
            }
            let result = self.replay(&id.to_string()).await;
            match &result {
                Ok(_) => summary.replayed.push(*id),
                Err(err) => summary.failed.push((*id, err.to_string())),
            }
            progress(index + 1, ids.len(), id, &result);
        }
        summary
    }

    /// Deletes a dead letter and the transport's copy.
    pub async fn purge(&self, id: &str) -> Result<Uuid, OperatorError> {
        let record = self.dead_letter(id).await?;
        self.remove_native_copy(&record).await?;
        self.store.purge_dead_letter(record.id).await?;
        Ok(record.id)
    }

    /// The store this operator works on.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Sagas, optionally of one kind.
    pub async fn sagas(&self, kind: Option<&str>) -> Result<Vec<SagaRecord>, OperatorError> {
        Ok(self.store.list_sagas(kind).await?)
    }

    /// One saga, by its key (`<tenant>/<releaseId>`, `<tenant>/<environment>`).
    /// Of any tenant, a key without its tenant finds the saga when only one
    /// tenant has it, and is ambiguous when several do.
    pub async fn saga(&self, kind: &str, key: &str) -> Result<SagaRecord, OperatorError> {
        if let Some(saga) = self.store.load_saga(kind, key).await? {
            return Ok(saga);
        }
        let not_found = || StoreError::NotFound {
            what: "saga",
            id: format!("{kind}/{key}"),
        };
        if key.contains('/') {
            return Err(not_found().into());
        }
        let suffix = format!("/{key}");
        let mut matching: Vec<SagaRecord> = self
            .store
            .list_sagas(Some(kind))
            .await?
            .into_iter()
            .filter(|saga| saga.key.ends_with(&suffix))
            .collect();
        match matching.len() {
            0 => Err(not_found().into()),
            1 => Ok(matching.remove(0)),
            _ => Err(StoreError::Ambiguous {
                what: "saga",
                id: format!("{kind}/{key}"),
                candidates: matching.iter().map(|saga| saga.key.clone()).collect(),
            }
            .into()),
        }
    }
}

#[cfg(test)]
mod tests;
