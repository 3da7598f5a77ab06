//! Bosun messages as Service Bus AMQP messages, and back. Pure functions:
//! no I/O, so every rule here is unit-tested.
//!
//! Sent: `message-id` = the broker message id, `correlation-id`, `subject` =
//! the message type, `content-type` `application/json`, the envelope bytes as
//! one data section, application properties `type`, `schemaVersion`,
//! `tenantId`, `attempt`, `traceparent` and `tracestate` (read from the
//! envelope when it parses, never failing a send) and `Diagnostic-Id` (the
//! same `traceparent`: the property Service Bus's own SDKs and Application
//! Insights read a message's trace context from), `group-id` = the session
//! id for an entity that requires sessions, `replayTo` for a send to one subscription
//! (it goes to the topic, and only that subscription's `bosun-replay` rule
//! takes it), and the message annotation `x-opt-scheduled-enqueue-time` for
//! a scheduled message. Several messages to one entity travel as one
//! Service Bus batch (message format `0x80013700`, each message encoded in
//! its own data section), which the broker accepts or rejects as a whole.
//!
//! Received: the annotations `x-opt-sequence-number`, `x-opt-enqueued-time`,
//! `x-opt-locked-until` and `x-opt-lock-token`, the header's delivery count
//! (prior deliveries, so + 1 for this one), and the lock token, which is the
//! delivery tag: a .NET `Guid` in its own byte order (the first three fields
//! little-endian).

use bosun_contracts::Destination;
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::message::__private::{Deserializable, Serializable};
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Batch, Body, Data, Header, Message, MessageAnnotations, MessageId, Properties,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp, Value};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::ports::transport::{
    DeadLetteredMessage, LockToken, OutboundMessage, ReceivedMessage, from_unix_ms, unix_ms,
};

/// Message format of a Service Bus batch: each data section holds one
/// encoded message.
pub(crate) const BATCH_MESSAGE_FORMAT: u32 = 0x8001_3700;
/// When a scheduled message becomes visible.
pub(crate) const SCHEDULED_ENQUEUE_TIME: &str = "x-opt-scheduled-enqueue-time";
/// The message's sequence number in its entity.
pub(crate) const SEQUENCE_NUMBER: &str = "x-opt-sequence-number";
/// When the entity accepted the message.
pub(crate) const ENQUEUED_TIME: &str = "x-opt-enqueued-time";
/// When the peek-lock ends unless renewed.
pub(crate) const LOCKED_UNTIL: &str = "x-opt-locked-until";
/// The lock token (also the delivery tag).
pub(crate) const LOCK_TOKEN: &str = "x-opt-lock-token";
/// Application property naming the one subscription a topic send is for.
pub(crate) const REPLAY_TO: &str = "replayTo";
/// Application property: why a message was dead-lettered.
pub(crate) const DEAD_LETTER_REASON: &str = "DeadLetterReason";
/// Application property: the dead-letter description.
pub(crate) const DEAD_LETTER_DESCRIPTION: &str = "DeadLetterErrorDescription";
/// The sub-queue of an entity that holds its dead letters.
pub(crate) const DEAD_LETTER_QUEUE: &str = "$DeadLetterQueue";

/// A received AMQP message with whatever body it has.
pub(crate) type AmqpMessage = Message<Body<Value>>;

/// Where a message goes on Service Bus: the entity path a sender link
/// attaches to, and the subscription a topic send is meant for, if one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SendTarget {
    /// `commit` or `bosun-events`.
    pub(crate) entity_path: String,
    /// `replayTo` for a send to one subscription.
    pub(crate) replay_to: Option<String>,
}

/// The entity a destination is sent through: a subscription is reached via
/// its topic.
pub(crate) fn send_target(destination: &Destination) -> SendTarget {
    match destination {
        Destination::Queue(name) | Destination::Topic(name) => SendTarget {
            entity_path: name.clone(),
            replay_to: None,
        },
        Destination::Subscription { topic, subscription } => SendTarget {
            entity_path: topic.clone(),
            replay_to: Some(subscription.clone()),
        },
    }
}

/// The path of an entity's dead-letter sub-queue.
pub(crate) fn dead_letter_path(entity: &Destination) -> String {
    format!("{}/{DEAD_LETTER_QUEUE}", entity.path())
}

/// The AMQP message for `message` (its body: one data section holding the
/// envelope bytes exactly), in the session `session_id` (`group-id`) when
/// its entity requires sessions.
pub(crate) fn outbound_message(message: &OutboundMessage, session_id: Option<&str>) -> Message<Data> {
    let properties = Properties {
        message_id: Some(MessageId::String(message.broker_message_id.clone())),
        correlation_id: message.correlation_id.clone().map(MessageId::String),
        subject: message.message_type.clone(),
        content_type: Some(Symbol::from("application/json")),
        group_id: session_id.map(str::to_owned),
        ..Properties::default()
    };
    let mut application = ApplicationProperties::default();
    let envelope = EnvelopeFields::read(&message.body);
    if let Some(message_type) = envelope.message_type.or_else(|| message.message_type.clone()) {
        application
            .0
            .insert("type".to_owned(), SimpleValue::String(message_type));
    }
    if let Some(version) = envelope.schema_version {
        application.0.insert("schemaVersion".to_owned(), integer(version));
    }
    if let Some(tenant) = envelope.tenant_id {
        application.0.insert("tenantId".to_owned(), SimpleValue::String(tenant));
    }
    if let Some(attempt) = envelope.attempt {
        application.0.insert("attempt".to_owned(), integer(attempt));
    }
    if let Some(traceparent) = envelope.traceparent {
        application
            .0
            .insert("Diagnostic-Id".to_owned(), SimpleValue::String(traceparent.clone()));
        application
            .0
            .insert("traceparent".to_owned(), SimpleValue::String(traceparent));
    }
    if let Some(tracestate) = envelope.tracestate {
        application
            .0
            .insert("tracestate".to_owned(), SimpleValue::String(tracestate));
    }
    if let Some(subscription) = send_target(&message.destination).replay_to {
        application
            .0
            .insert(REPLAY_TO.to_owned(), SimpleValue::String(subscription));
    }
    let annotations = message.scheduled_at.map(|at| {
        let mut annotations = MessageAnnotations::default();
        annotations.0.insert(
            OwnedKey::from(SCHEDULED_ENQUEUE_TIME),
            Value::Timestamp(Timestamp::from(unix_ms(at))),
        );
        annotations
    });
    Message {
        header: Some(Header {
            durable: true,
            ..Header::default()
        }),
        delivery_annotations: None,
        message_annotations: annotations,
        properties: Some(properties),
        application_properties: Some(application),
        body: Data(Binary::from(message.body.clone())),
        footer: None,
    }
}

/// An integer application property: `int` when it fits, else `long`.
fn integer(value: i64) -> SimpleValue {
    match i32::try_from(value) {
        Ok(small) => SimpleValue::Int(small),
        Err(_) => SimpleValue::Long(value),
    }
}

/// The envelope fields copied into application properties; whatever does not
/// parse is left out.
#[derive(Debug, Default)]
struct EnvelopeFields {
    message_type: Option<String>,
    schema_version: Option<i64>,
    tenant_id: Option<String>,
    attempt: Option<i64>,
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl EnvelopeFields {
    fn read(body: &[u8]) -> Self {
        let Ok(serde_json::Value::Object(fields)) = serde_json::from_slice::<serde_json::Value>(body) else {
            return Self::default();
        };
        let text = |name: &str| fields.get(name).and_then(serde_json::Value::as_str).map(str::to_owned);
        let number = |name: &str| fields.get(name).and_then(serde_json::Value::as_i64);
        Self {
            message_type: text("type"),
            schema_version: number("schemaVersion"),
            tenant_id: text("tenantId"),
            attempt: number("attempt"),
            traceparent: text("traceparent"),
            tracestate: text("tracestate"),
        }
    }
}

/// The encoded bytes of a message (for a batch's data sections).
pub(crate) fn encode(message: &Message<Data>) -> Result<Vec<u8>, serde_amqp::Error> {
    // fe2o3 encodes and decodes whole messages through these wrappers (its
    // links do the same); they are public but hidden from its docs.
    serde_amqp::to_vec(&Serializable(message))
}

/// One Service Bus batch holding `encoded` messages (send it with
/// [`BATCH_MESSAGE_FORMAT`]). The batch's own message id and session id
/// are the first message's (a batch holds one session's messages), as the
/// Azure SDKs do.
pub(crate) fn batch_message(first: &Message<Data>, encoded: Vec<Vec<u8>>) -> Message<Batch<Data>> {
    let properties = first.properties.as_ref().map(|properties| Properties {
        message_id: properties.message_id.clone(),
        group_id: properties.group_id.clone(),
        ..Properties::default()
    });
    Message {
        header: None,
        delivery_annotations: None,
        message_annotations: None,
        properties,
        application_properties: None,
        body: Batch::new(
            encoded
                .into_iter()
                .map(|bytes| Data(Binary::from(bytes)))
                .collect::<Vec<_>>(),
        ),
        footer: None,
    }
}

/// Decodes one encoded message (a `$management` peek result, a batch section).
pub(crate) fn decode(bytes: &[u8]) -> Result<AmqpMessage, serde_amqp::Error> {
    serde_amqp::from_slice::<Deserializable<AmqpMessage>>(bytes).map(|decoded| decoded.0)
}

/// The lock token of a delivery: `x-opt-lock-token` when the broker sent it,
/// else the delivery tag read as a .NET `Guid`.
pub(crate) fn lock_token(message: &AmqpMessage, delivery_tag: &[u8]) -> Option<Uuid> {
    match annotation(message, LOCK_TOKEN) {
        Some(Value::Uuid(token)) => Some(Uuid::from_bytes(*token.as_inner())),
        _ => dotnet_guid(delivery_tag),
    }
}

/// A 16-byte .NET `Guid` (`Guid.ToByteArray()` order) as a UUID.
pub(crate) fn dotnet_guid(bytes: &[u8]) -> Option<Uuid> {
    <[u8; 16]>::try_from(bytes).ok().map(Uuid::from_bytes_le)
}

/// What a received message says about itself, before bosun takes its lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Incoming {
    /// The message as the transport returns it (its lock token is the
    /// delivery's).
    pub(crate) message: ReceivedMessage,
    /// The broker's lock expiry (`x-opt-locked-until`), if it sent one.
    pub(crate) broker_locked_until: Option<OffsetDateTime>,
}

/// A message received from `entity` under a peek-lock.
pub(crate) fn received_message(
    entity: &Destination,
    token: Uuid,
    message: &AmqpMessage,
    now: OffsetDateTime,
) -> Incoming {
    let broker_locked_until = timestamp_annotation(message, LOCKED_UNTIL);
    Incoming {
        message: ReceivedMessage {
            lock: LockToken {
                entity: entity.clone(),
                sequence: sequence_number(message).unwrap_or_default(),
                token,
            },
            broker_message_id: message_id(message),
            message_type: message_type(message),
            body: body_bytes(&message.body),
            delivery_count: prior_deliveries(message).saturating_add(1),
            enqueued_at: timestamp_annotation(message, ENQUEUED_TIME).unwrap_or(now),
            locked_until: broker_locked_until.unwrap_or(now),
            handled: None,
        },
        broker_locked_until,
    }
}

/// A message of `entity`'s dead-letter sub-queue. Service Bus sends no
/// dead-letter time over AMQP; `dead_lettered_at` is the enqueued time the
/// sub-queue reports.
pub(crate) fn dead_lettered_message(entity: &Destination, message: &AmqpMessage) -> DeadLetteredMessage {
    let enqueued_at = timestamp_annotation(message, ENQUEUED_TIME).unwrap_or(OffsetDateTime::UNIX_EPOCH);
    DeadLetteredMessage {
        entity: entity.clone(),
        sequence: sequence_number(message).unwrap_or_default(),
        broker_message_id: message_id(message),
        message_type: message_type(message),
        body: body_bytes(&message.body),
        delivery_count: prior_deliveries(message),
        reason: application_text(message, DEAD_LETTER_REASON).unwrap_or_default(),
        description: application_text(message, DEAD_LETTER_DESCRIPTION).unwrap_or_default(),
        enqueued_at,
        dead_lettered_at: enqueued_at,
    }
}

/// `x-opt-sequence-number`.
pub(crate) fn sequence_number(message: &AmqpMessage) -> Option<i64> {
    match annotation(message, SEQUENCE_NUMBER) {
        Some(Value::Long(sequence)) => Some(*sequence),
        Some(Value::Int(sequence)) => Some(i64::from(*sequence)),
        Some(Value::Ulong(sequence)) => i64::try_from(*sequence).ok(),
        _ => None,
    }
}

/// The header's delivery count: deliveries before this one.
fn prior_deliveries(message: &AmqpMessage) -> u32 {
    message.header.as_ref().map_or(0, |header| header.delivery_count)
}

fn message_id(message: &AmqpMessage) -> String {
    match message.properties.as_ref().and_then(|p| p.message_id.as_ref()) {
        Some(MessageId::String(id)) => id.clone(),
        Some(MessageId::Ulong(id)) => id.to_string(),
        Some(MessageId::Uuid(id)) => Uuid::from_bytes(*id.as_inner()).to_string(),
        Some(MessageId::Binary(id)) => id.iter().map(|byte| format!("{byte:02x}")).collect(),
        None => String::new(),
    }
}

/// `subject`, else the `type` application property.
fn message_type(message: &AmqpMessage) -> Option<String> {
    message
        .properties
        .as_ref()
        .and_then(|p| p.subject.clone())
        .or_else(|| application_text(message, "type"))
}

fn application_text(message: &AmqpMessage, name: &str) -> Option<String> {
    match message.application_properties.as_ref()?.0.get(name)? {
        SimpleValue::String(text) => Some(text.clone()),
        SimpleValue::Symbol(symbol) => Some(symbol.0.clone()),
        _ => None,
    }
}

fn annotation<'a>(message: &'a AmqpMessage, name: &str) -> Option<&'a Value> {
    message
        .message_annotations
        .as_ref()?
        .0
        .iter()
        .find(|(key, _)| matches!(key, OwnedKey::Symbol(symbol) if symbol.0 == name))
        .map(|(_, value)| value)
}

fn timestamp_annotation(message: &AmqpMessage, name: &str) -> Option<OffsetDateTime> {
    match annotation(message, name)? {
        Value::Timestamp(at) => Some(from_unix_ms(at.milliseconds())),
        _ => None,
    }
}

/// The body bytes: the data sections joined (bosun sends one); a value
/// section holding binary or text (other clients) as its bytes.
pub(crate) fn body_bytes(body: &Body<Value>) -> Vec<u8> {
    match body {
        Body::Data(sections) => sections.iter().flat_map(|data| data.0.iter().copied()).collect(),
        Body::Value(value) => match &value.0 {
            Value::Binary(bytes) => bytes.to_vec(),
            Value::String(text) => text.clone().into_bytes(),
            _ => Vec::new(),
        },
        Body::Sequence(_) | Body::Empty => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use bosun_contracts::routing::EVENTS_TOPIC;
    use fe2o3_amqp::types::messaging::AmqpValue;

    use super::*;

    fn outbound(destination: Destination, body: &[u8]) -> OutboundMessage {
        OutboundMessage {
            destination,
            broker_message_id: "m-1.retry-2".into(),
            message_type: Some("BuildCompleted".into()),
            correlation_id: Some("c-1".into()),
            body: body.to_vec(),
            scheduled_at: None,
        }
    }

    fn property<'a>(message: &'a Message<Data>, name: &str) -> Option<&'a SimpleValue> {
        message.application_properties.as_ref()?.0.get(name)
    }

    const ENVELOPE: &[u8] = br#"{"messageId":"m-1","type":"BuildCompleted","kind":"event","schemaVersion":3,
        "correlationId":"c-1","tenantId":"acme","source":"build","occurredAt":"2026-01-01T00:00:00Z",
        "traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"congo=t61rcWkgMzE",
        "attempt":2,"payload":{}}"#;

    #[test]
    fn an_envelope_becomes_a_service_bus_message() {
        let message = outbound_message(&outbound(Destination::Topic(EVENTS_TOPIC.into()), ENVELOPE), None);
        let properties = message.properties.as_ref().unwrap();
        assert_eq!(properties.message_id, Some(MessageId::String("m-1.retry-2".into())));
        assert_eq!(properties.correlation_id, Some(MessageId::String("c-1".into())));
        assert_eq!(properties.subject.as_deref(), Some("BuildCompleted"));
        assert_eq!(properties.content_type, Some(Symbol::from("application/json")));
        assert_eq!(message.body.0.as_ref(), ENVELOPE, "the envelope bytes, exactly");
        assert_eq!(
            property(&message, "type"),
            Some(&SimpleValue::String("BuildCompleted".into()))
        );
        assert_eq!(property(&message, "schemaVersion"), Some(&SimpleValue::Int(3)));
        assert_eq!(
            property(&message, "tenantId"),
            Some(&SimpleValue::String("acme".into()))
        );
        assert_eq!(property(&message, "attempt"), Some(&SimpleValue::Int(2)));
        assert_eq!(
            property(&message, "traceparent"),
            Some(&SimpleValue::String(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()
            ))
        );
        assert_eq!(
            property(&message, "Diagnostic-Id"),
            property(&message, "traceparent"),
            "Service Bus's SDKs read the trace context from Diagnostic-Id"
        );
        assert_eq!(
            property(&message, "tracestate"),
            Some(&SimpleValue::String("congo=t61rcWkgMzE".into()))
        );
        assert_eq!(
            property(&message, REPLAY_TO),
            None,
            "a topic send reaches every subscription"
        );
        assert!(message.message_annotations.is_none(), "not scheduled");
    }

    #[test]
    fn a_body_that_is_not_an_envelope_is_still_sent() {
        let message = outbound_message(&outbound(Destination::Queue("commit".into()), b"\xffnot json"), None);
        assert_eq!(message.body.0.as_ref(), b"\xffnot json");
        assert_eq!(
            property(&message, "type"),
            Some(&SimpleValue::String("BuildCompleted".into())),
            "the type falls back to the message's own"
        );
        assert_eq!(property(&message, "tenantId"), None);
        assert_eq!(property(&message, "traceparent"), None);
        assert_eq!(property(&message, "Diagnostic-Id"), None);
    }

    #[test]
    fn a_subscription_send_goes_to_its_topic_with_replay_to() {
        let destination = Destination::Subscription {
            topic: EVENTS_TOPIC.into(),
            subscription: "container-build".into(),
        };
        assert_eq!(
            send_target(&destination),
            SendTarget {
                entity_path: EVENTS_TOPIC.into(),
                replay_to: Some("container-build".into())
            }
        );
        let message = outbound_message(&outbound(destination, ENVELOPE), None);
        assert_eq!(
            property(&message, REPLAY_TO),
            Some(&SimpleValue::String("container-build".into()))
        );
        assert_eq!(
            send_target(&Destination::Queue("commit".into())),
            SendTarget {
                entity_path: "commit".into(),
                replay_to: None
            }
        );
    }

    #[test]
    fn a_session_message_carries_its_session_id_as_group_id() {
        let message = outbound(Destination::Queue("probe".into()), ENVELOPE);
        let amqp = outbound_message(&message, Some("acme/canary"));
        assert_eq!(
            amqp.properties.as_ref().and_then(|p| p.group_id.as_deref()),
            Some("acme/canary")
        );
        let batch = batch_message(&amqp, vec![encode(&amqp).unwrap()]);
        assert_eq!(
            batch.properties.as_ref().and_then(|p| p.group_id.as_deref()),
            Some("acme/canary"),
            "a batch is one session's"
        );
        assert_eq!(outbound_message(&message, None).properties.unwrap().group_id, None);
    }

    #[test]
    fn a_scheduled_message_carries_its_enqueue_time() {
        let mut message = outbound(Destination::Queue("commit".into()), ENVELOPE);
        let at = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        message.scheduled_at = Some(at);
        let amqp = outbound_message(&message, None);
        let annotations = amqp.message_annotations.unwrap();
        assert_eq!(
            annotations.0.get(&OwnedKey::from(SCHEDULED_ENQUEUE_TIME)),
            Some(&Value::Timestamp(Timestamp::from(1_800_000_000_000)))
        );
    }

    #[test]
    fn lock_tokens_read_the_delivery_tag_in_dotnet_byte_order() {
        // Guid.Parse("00112233-4455-6677-8899-aabbccddeeff").ToByteArray()
        let tag = [
            0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
        ];
        assert_eq!(
            dotnet_guid(&tag),
            Some(Uuid::parse_str("00112233-4455-6677-8899-aabbccddeeff").unwrap())
        );
        assert_eq!(dotnet_guid(&[1, 2, 3]), None, "a tag that is not a Guid");
        let message: AmqpMessage = Message::builder().body(Body::Empty).build();
        assert_eq!(
            lock_token(&message, &tag),
            Some(Uuid::parse_str("00112233-4455-6677-8899-aabbccddeeff").unwrap())
        );
        let token = Uuid::parse_str("12345678-1234-5678-1234-567812345678").unwrap();
        let mut annotated = message.clone();
        annotated.message_annotations = Some(MessageAnnotations(
            [(OwnedKey::from(LOCK_TOKEN), Value::Uuid(token.into_bytes().into()))]
                .into_iter()
                .collect(),
        ));
        assert_eq!(lock_token(&annotated, &tag), Some(token), "x-opt-lock-token wins");
    }

    /// What Service Bus delivers: the sent message plus its annotations.
    fn as_delivered(sent: &Message<Data>, delivery_count: u32, extra: &[(&str, Value)]) -> AmqpMessage {
        let decoded = decode(&encode(sent).unwrap()).unwrap();
        let mut annotations = decoded.message_annotations.clone().unwrap_or_default();
        for (name, value) in extra {
            annotations.0.insert(OwnedKey::from(*name), value.clone());
        }
        AmqpMessage {
            header: Some(Header {
                delivery_count,
                ..Header::default()
            }),
            message_annotations: Some(annotations),
            ..decoded
        }
    }

    #[test]
    fn a_received_message_reads_the_broker_annotations() {
        let sent = outbound_message(&outbound(Destination::Queue("commit".into()), ENVELOPE), None);
        let delivered = as_delivered(
            &sent,
            1,
            &[
                (SEQUENCE_NUMBER, Value::Long(42)),
                (ENQUEUED_TIME, Value::Timestamp(Timestamp::from(1_700_000_000_000))),
                (LOCKED_UNTIL, Value::Timestamp(Timestamp::from(1_700_000_060_000))),
            ],
        );
        let token = Uuid::now_v7();
        let now = OffsetDateTime::from_unix_timestamp(1_700_000_001).unwrap();
        let incoming = received_message(&Destination::Queue("commit".into()), token, &delivered, now);
        let message = incoming.message;
        assert_eq!(
            message.lock,
            LockToken {
                entity: Destination::Queue("commit".into()),
                sequence: 42,
                token
            }
        );
        assert_eq!(message.broker_message_id, "m-1.retry-2");
        assert_eq!(message.message_type.as_deref(), Some("BuildCompleted"));
        assert_eq!(message.body, ENVELOPE);
        assert_eq!(message.delivery_count, 2, "one earlier delivery, and this one");
        assert_eq!(message.enqueued_at.unix_timestamp(), 1_700_000_000);
        assert_eq!(message.locked_until.unix_timestamp(), 1_700_000_060);
        assert_eq!(
            incoming.broker_locked_until.map(OffsetDateTime::unix_timestamp),
            Some(1_700_000_060)
        );
    }

    #[test]
    fn a_dead_letter_keeps_reason_description_and_bytes() {
        let mut sent = outbound_message(&outbound(Destination::Queue("commit".into()), ENVELOPE), None);
        let application = sent.application_properties.get_or_insert_with(Default::default);
        application.0.insert(
            DEAD_LETTER_REASON.to_owned(),
            SimpleValue::String("MaxDeliveryCountExceeded".into()),
        );
        application.0.insert(
            DEAD_LETTER_DESCRIPTION.to_owned(),
            SimpleValue::String("delivered 10 times".into()),
        );
        let delivered = as_delivered(
            &sent,
            10,
            &[
                (SEQUENCE_NUMBER, Value::Long(7)),
                (ENQUEUED_TIME, Value::Timestamp(Timestamp::from(1_700_000_000_000))),
            ],
        );
        let dead = dead_lettered_message(&Destination::Queue("commit".into()), &delivered);
        assert_eq!(dead.sequence, 7);
        assert_eq!(dead.reason, "MaxDeliveryCountExceeded");
        assert_eq!(dead.description, "delivered 10 times");
        assert_eq!(dead.delivery_count, 10);
        assert_eq!(dead.body, ENVELOPE);
        assert_eq!(dead.broker_message_id, "m-1.retry-2");
        assert_eq!(
            dead_letter_path(&Destination::Subscription {
                topic: EVENTS_TOPIC.into(),
                subscription: "commit".into()
            }),
            "bosun-events/subscriptions/commit/$DeadLetterQueue"
        );
    }

    #[test]
    fn a_batch_holds_each_message_encoded_in_its_own_section() {
        let first = outbound_message(&outbound(Destination::Queue("commit".into()), b"{\"id\":\"a\"}"), None);
        let mut second_outbound = outbound(Destination::Queue("commit".into()), b"{\"id\":\"b\"}");
        second_outbound.broker_message_id = "m-2".into();
        let second = outbound_message(&second_outbound, None);
        let batch = batch_message(&first, vec![encode(&first).unwrap(), encode(&second).unwrap()]);
        assert_eq!(
            batch.properties.as_ref().and_then(|p| p.message_id.clone()),
            Some(MessageId::String("m-1.retry-2".into()))
        );
        let sections: Vec<&Data> = batch.body.iter().collect();
        assert_eq!(sections.len(), 2);
        let unpacked = decode(&sections[1].0).unwrap();
        assert_eq!(message_id(&unpacked), "m-2");
        assert_eq!(body_bytes(&unpacked.body), b"{\"id\":\"b\"}");
    }

    #[test]
    fn bodies_from_other_clients_are_read_as_bytes() {
        assert_eq!(
            body_bytes(&Body::Value(AmqpValue(Value::String("hello".into())))),
            b"hello"
        );
        assert_eq!(body_bytes(&Body::Empty), b"");
    }
}
