//! The envelope: the JSON document every bosun message travels in.
//!
//! Fields follow `DESIGN.md`: `messageId` (UUID v7), `type`, `kind`,
//! `schemaVersion`, `correlationId`, `causationId`, `tenantId`, `source`,
//! `occurredAt`, `traceparent` (and `tracestate`), `attempt`, `payload`. Fields this build does
//! not know are kept in [`Envelope::extensions`] and written back out, so a
//! forwarded or replayed message loses nothing.
//!
//! The envelope sits above the catalogue ([`crate::messages`]): it wraps a
//! typed [`Message`] and reads one back, while the catalogue knows nothing
//! of envelopes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::error::{ContractError, path_or_root};
use crate::messages::{Message, MessageKind, MessageSpec};
use crate::versions;

/// Largest message bosun accepts, in bytes (Service Bus standard tier limit).
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// The envelope around every message on every transport.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    /// Unique id of this message (UUID v7); also the event id.
    pub message_id: Uuid,
    /// The message type, e.g. `ProvisionRepository`.
    #[serde(rename = "type")]
    pub message_type: String,
    /// `command` or `event`.
    pub kind: MessageKind,
    /// Version of the payload schema for this type.
    pub schema_version: u32,
    /// The delivery this message belongs to.
    pub correlation_id: Uuid,
    /// The message that caused this one, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<Uuid>,
    /// The tenant the delivery belongs to.
    #[schemars(transform = crate::schema_rules::tenant_id)]
    pub tenant_id: String,
    /// Who sent it: a consumer name or an agent/person id.
    pub source: String,
    /// When the message was created (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub occurred_at: OffsetDateTime,
    /// W3C trace context of the span that produced the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// W3C `tracestate` that goes with `traceparent` (vendor entries,
    /// passed on unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// How many times handling was retried (0 on first delivery).
    #[serde(default)]
    pub attempt: u32,
    /// The payload; its shape is given by `type` and `schemaVersion`.
    pub payload: Value,
    /// Fields this build does not know; kept on forward and replay.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extensions: Map<String, Value>,
}

impl Envelope {
    /// Wraps a typed message in a new envelope with a fresh UUID v7 id.
    pub fn new(message: &Message, correlation_id: Uuid, tenant_id: &str, source: &str) -> Self {
        Self {
            message_id: Uuid::now_v7(),
            message_type: message.message_type().to_owned(),
            kind: message.kind(),
            schema_version: message.spec().schema_version,
            correlation_id,
            causation_id: None,
            tenant_id: tenant_id.to_owned(),
            source: source.to_owned(),
            occurred_at: OffsetDateTime::now_utc(),
            traceparent: None,
            tracestate: None,
            attempt: 0,
            payload: message.to_payload(),
            extensions: Map::new(),
        }
    }

    /// Parses an envelope from bytes, naming the offending field on error.
    /// Does not look at the payload; see [`Envelope::decode`].
    pub fn from_slice(bytes: &[u8]) -> Result<Self, ContractError> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(ContractError::Oversized {
                size: bytes.len(),
                limit: MAX_MESSAGE_BYTES,
            });
        }
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let envelope: Self =
            serde_path_to_error::deserialize(&mut de).map_err(|err| ContractError::MalformedEnvelope {
                field: path_or_root(&err.path().to_string()),
                reason: err.inner().to_string(),
            })?;
        de.end().map_err(|err| ContractError::MalformedEnvelope {
            field: ".".to_owned(),
            reason: err.to_string(),
        })?;
        Ok(envelope)
    }

    /// Serializes the envelope (including unknown fields) to JSON bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        // Serializing a struct of strings, numbers and `Value`s cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads the typed message: checks the type, kind and schema version
    /// against the catalogue (an older version still read is upcast to the
    /// current one, [`versions::upcast`]), then the payload's shape and
    /// field rules.
    pub fn decode(&self) -> Result<Message, ContractError> {
        let upcast;
        let (version, payload) = match MessageSpec::find(&self.message_type) {
            // A wrong kind is named before anything about the version.
            Some(spec) if spec.kind == self.kind && self.schema_version != spec.schema_version => {
                upcast = versions::upcast(spec, self.schema_version, self.payload.clone())?;
                (spec.schema_version, &upcast)
            }
            _ => (self.schema_version, &self.payload),
        };
        Message::from_declared(&self.message_type, self.kind, version, payload)
    }

    /// Rewrites this envelope as the wire `wire` reads it: a message of the
    /// current version of its type is downcast to
    /// [`versions::version_for_wire`]. Returns whether it changed. A type
    /// this build does not know, a version other than the current one (a
    /// copy of an older message, or a newer one waiting for a newer
    /// process), and a payload held in the blob store (claim check) are
    /// left as they are.
    pub fn write_for_wire(&mut self, wire: u32) -> Result<bool, ContractError> {
        let Some(spec) = MessageSpec::find(&self.message_type) else {
            return Ok(false);
        };
        let to = versions::version_for_wire(spec, wire);
        if self.schema_version != spec.schema_version || to == spec.schema_version || self.payload.is_null() {
            return Ok(false);
        }
        self.payload = versions::downcast(spec, to, std::mem::take(&mut self.payload))?;
        self.schema_version = to;
        Ok(true)
    }

    /// Parses and decodes in one step.
    pub fn parse(bytes: &[u8]) -> Result<(Self, Message), ContractError> {
        let envelope = Self::from_slice(bytes)?;
        let message = envelope.decode()?;
        Ok((envelope, message))
    }

    /// A follow-up message caused by this one: same correlation and tenant,
    /// `causationId` set to this message's id, attempt 0.
    pub fn follow_up(&self, message: &Message, source: &str) -> Self {
        let mut next = Self::new(message, self.correlation_id, &self.tenant_id, source);
        next.causation_id = Some(self.message_id);
        next.traceparent = self.traceparent.clone();
        next.tracestate = self.tracestate.clone();
        next
    }
}

/// [`Envelope::write_for_wire`] on the bytes of an envelope: the bytes to
/// send instead, or `None` when they are right as they are (bytes that do
/// not parse as an envelope are left to the consumer, which dead-letters
/// them).
pub fn bytes_for_wire(bytes: &[u8], wire: u32) -> Result<Option<Vec<u8>>, ContractError> {
    if wire >= versions::WIRE_VERSION {
        return Ok(None);
    }
    let Ok(mut envelope) = Envelope::from_slice(bytes) else {
        return Ok(None);
    };
    Ok(envelope.write_for_wire(wire)?.then(|| envelope.to_vec()))
}

/// The trace id of a well-formed W3C `traceparent`
/// (`<version>-<32 hex trace id>-<16 hex span id>-<2 hex flags>`).
pub fn trace_id(traceparent: &str) -> Option<&str> {
    let mut parts = traceparent.split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let span = parts.next()?;
    let flags = parts.next()?;
    let hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit());
    (hex(version, 2) && hex(trace, 32) && hex(span, 16) && hex(flags, 2)).then_some(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Value {
        serde_json::json!({
            "messageId": "01936f7e-8a3b-7c4d-9e5f-0123456789ab",
            "type": "ProvisionRepository",
            "kind": "command",
            "schemaVersion": 1,
            "correlationId": "01936f7e-8a3b-7c4d-9e5f-0123456789ac",
            "tenantId": "contoso",
            "source": "agent:test",
            "occurredAt": "2026-11-29T10:00:00Z",
            "attempt": 0,
            "payload": {"name": "payments-api", "defaultBranch": "main", "futurePayloadField": 1},
            "futureEnvelopeField": {"kept": true}
        })
    }

    #[test]
    fn unknown_fields_survive_a_round_trip() {
        let bytes = serde_json::to_vec(&sample()).unwrap();
        let envelope = Envelope::from_slice(&bytes).unwrap();
        let back: Value = serde_json::from_slice(&envelope.to_vec()).unwrap();
        assert_eq!(back["futureEnvelopeField"], serde_json::json!({"kept": true}));
        assert_eq!(back["payload"]["futurePayloadField"], 1);
    }

    #[test]
    fn malformed_json_names_the_problem() {
        let err = Envelope::from_slice(b"{\"messageId\": ").unwrap_err();
        assert!(matches!(err, ContractError::MalformedEnvelope { .. }), "{err}");
    }

    #[test]
    fn missing_envelope_field_is_named() {
        let mut value = sample();
        value.as_object_mut().unwrap().remove("correlationId");
        let err = Envelope::from_slice(&serde_json::to_vec(&value).unwrap()).unwrap_err();
        assert!(err.to_string().contains("correlationId"), "{err}");
    }

    #[test]
    fn wrong_field_type_is_named() {
        let mut value = sample();
        value["attempt"] = serde_json::json!("three");
        let err = Envelope::from_slice(&serde_json::to_vec(&value).unwrap()).unwrap_err();
        assert_eq!(err.field(), Some("attempt"), "{err}");
    }

    #[test]
    fn oversized_is_rejected_before_parsing() {
        let bytes = vec![b' '; MAX_MESSAGE_BYTES + 1];
        assert!(matches!(
            Envelope::from_slice(&bytes),
            Err(ContractError::Oversized { .. })
        ));
    }

    #[test]
    fn follow_up_links_to_its_cause() {
        let cause = Envelope::new(
            &crate::samples::build_completed().into(),
            Uuid::now_v7(),
            "contoso",
            "build-ingestion",
        );
        let next = cause.follow_up(&crate::samples::container_image_built().into(), "container-build");
        assert_eq!(next.causation_id, Some(cause.message_id));
        assert_eq!(next.correlation_id, cause.correlation_id);
        assert_eq!(next.tenant_id, "contoso");
        assert_eq!(next.message_type, "ContainerImageBuilt");
        assert_eq!(next.kind, MessageKind::Event);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Field names the envelope itself reads; extensions are everything else.
        const KNOWN: &[&str] = &[
            "messageId",
            "type",
            "kind",
            "schemaVersion",
            "correlationId",
            "causationId",
            "tenantId",
            "source",
            "occurredAt",
            "traceparent",
            "tracestate",
            "attempt",
            "payload",
        ];

        /// Any JSON value. Numbers are integers or short binary fractions, which
        /// JSON text represents exactly.
        fn json_value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                any::<u64>().prop_map(Value::from),
                any::<i32>().prop_map(|n| Value::from(f64::from(n) / 8.0)),
                ".*".prop_map(Value::from),
            ];
            leaf.prop_recursive(4, 64, 8, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                    prop::collection::vec((".*", inner), 0..8)
                        .prop_map(|entries| Value::Object(entries.into_iter().collect())),
                ]
            })
        }

        fn json_object() -> impl Strategy<Value = Map<String, Value>> {
            prop::collection::vec((".*", json_value()), 0..8).prop_map(|entries| entries.into_iter().collect())
        }

        fn extensions() -> impl Strategy<Value = Map<String, Value>> {
            json_object().prop_map(|mut map| {
                map.retain(|key, _| !KNOWN.contains(&key.as_str()));
                map
            })
        }

        fn envelope_with(payload: Map<String, Value>, extensions: Map<String, Value>) -> Envelope {
            let mut envelope = Envelope::new(
                &crate::samples::open_pull_request().into(),
                Uuid::now_v7(),
                "contoso",
                "agent:test",
            );
            envelope.payload = Value::Object(payload);
            envelope.extensions = extensions;
            envelope.traceparent = Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned());
            envelope
        }

        proptest! {
            #[test]
            fn from_slice_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
                let _ = Envelope::from_slice(&bytes);
                let _ = Envelope::parse(&bytes);
            }

            #[test]
            fn from_slice_never_panics_on_json(value in json_value()) {
                let bytes = serde_json::to_vec(&value).unwrap();
                if let Ok(envelope) = Envelope::from_slice(&bytes) {
                    let _ = envelope.decode();
                }
            }

            #[test]
            fn envelope_with_an_arbitrary_field_changed_never_panics(
                key in prop::sample::select(KNOWN),
                value in json_value(),
            ) {
                let envelope = envelope_with(Map::new(), Map::new());
                let mut document = serde_json::to_value(&envelope).unwrap();
                document[key] = value;
                let _ = Envelope::parse(&serde_json::to_vec(&document).unwrap());
            }

            #[test]
            fn arbitrary_payload_and_extensions_survive_a_round_trip(
                payload in json_object(),
                extensions in extensions(),
            ) {
                let envelope = envelope_with(payload, extensions);
                let back = Envelope::from_slice(&envelope.to_vec()).unwrap();
                prop_assert_eq!(&back, &envelope);
                let again = Envelope::from_slice(&back.to_vec()).unwrap();
                prop_assert_eq!(again, envelope);
            }
        }
    }
}
