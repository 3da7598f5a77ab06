//! The HTTP API's own bodies: the lists and purge answers its handlers
//! wrap the gateway's views in, and the JSON request bodies it reads. Each
//! derives `JsonSchema`, so the OpenAPI document ([`super::openapi`])
//! describes exactly what the handlers write and read.
//!
//! The request bodies are strict, and their types are both their schema and
//! their parser: the handlers deserialize them (through
//! `serde_path_to_error`, so a refusal names the field, `filter.since` or
//! `ids[2]`), unknown fields are refused (`deny_unknown_fields`, which the
//! schema says as `additionalProperties: false`), no field takes `null`, a
//! text is never empty, a time is RFC 3339 and an id a hyphenated UUID.

use bosun_contracts::messages::{MAX_APPROVER_CHARS, MAX_REASON_CHARS};
use bosun_contracts::schema_rules as rules;
use schemars::{JsonSchema, Schema};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::front::gateway::{BULK_REPLAY_MAX_IDS, BulkReplayRequest, DeliverySummary, FailureGroup, MIN_REPLAY_RATE};
use crate::ports::store::{DeadLetterRecord, SagaRecord};

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: &'static str,
}

/// `GET /v1/deliveries`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct DeliveryList {
    /// Newest first.
    pub deliveries: Vec<DeliverySummary>,
}

/// `GET /v1/sagas`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SagaList {
    /// The sagas.
    pub sagas: Vec<SagaRecord>,
}

/// `GET /v1/dead-letters`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterList {
    /// Newest first.
    pub dead_letters: Vec<DeadLetterRecord>,
}

/// `GET /v1/dead-letters/groups`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct FailureGroupList {
    /// Largest group first.
    pub groups: Vec<FailureGroup>,
}

/// `DELETE /v1/dead-letters/groups/{fingerprint}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct GroupPurged {
    /// The group.
    pub fingerprint: String,
    /// The dead letters purged.
    pub purged: Vec<Uuid>,
}

/// `DELETE /v1/dead-letters/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Purged {
    /// The dead letter purged.
    pub purged: Uuid,
}

/// `POST /v1/dead-letters/{id}/replay` (the body is optional).
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = no_null_defaults)]
pub struct ReplayBody {
    /// The payload to send instead of the dead letter's (edit-and-replay),
    /// validated against the message type's contract.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Map<String, Value>")]
    pub payload: Option<Map<String, Value>>,
}

/// `POST /v1/dead-letters/groups/{fingerprint}/replay` (the body is optional).
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = no_null_defaults)]
pub struct GroupReplayBody {
    /// At most this many replays per second (at least one every 1,000 s).
    #[serde(default, deserialize_with = "rate")]
    #[schemars(with = "f64", range(min = MIN_REPLAY_RATE))]
    pub rate: Option<f64>,
}

/// `POST /v1/dead-letters/replays`: these dead letters (`ids`), or every
/// one not yet replayed that matches a `filter` naming at least one of
/// consumer, type, reason and since, or every one not yet replayed
/// (`"all": true`, alone): exactly one of the three.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = exactly_one_selection)]
pub struct BulkReplayBody {
    /// Dead letter ids.
    #[serde(default, deserialize_with = "ids")]
    #[schemars(with = "Vec<Uuid>", length(min = 1, max = BULK_REPLAY_MAX_IDS))]
    pub ids: Option<Vec<Uuid>>,
    /// Or the dead letters matching this filter.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "BulkReplayFilter")]
    pub filter: Option<BulkReplayFilter>,
    /// Or, `true`, every dead letter of the tenant not yet replayed: a
    /// bulk replay that names nothing to narrow by must say so.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "bool")]
    pub all: Option<bool>,
    /// At most this many replays per second (at least one every 1,000 s).
    #[serde(default, deserialize_with = "rate")]
    #[schemars(with = "f64", range(min = MIN_REPLAY_RATE))]
    pub rate: Option<f64>,
}

/// Which dead letters a bulk replay takes (the query parameters of
/// `GET /v1/dead-letters`): at least one of them.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("minProperties" = 1), transform = no_null_defaults)]
pub struct BulkReplayFilter {
    /// Only this consumer's.
    #[serde(default, deserialize_with = "text")]
    #[schemars(with = "String", length(min = 1))]
    pub consumer: Option<String>,
    /// Only this message type.
    #[serde(default, rename = "type", deserialize_with = "text")]
    #[schemars(with = "String", length(min = 1))]
    pub message_type: Option<String>,
    /// Only this failure cause.
    #[serde(default, deserialize_with = "text")]
    #[schemars(with = "String", length(min = 1))]
    pub reason: Option<String>,
    /// Only dead-lettered at or after this RFC 3339 time.
    #[serde(default, deserialize_with = "time")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub since: Option<OffsetDateTime>,
}

impl From<BulkReplayBody> for BulkReplayRequest {
    fn from(body: BulkReplayBody) -> Self {
        Self {
            ids: body.ids.unwrap_or_default(),
            filter: body.filter.map(|filter| crate::ports::store::DeadLetterFilter {
                consumer: filter.consumer,
                message_type: filter.message_type,
                reason: filter.reason,
                since: filter.since,
                ..Default::default()
            }),
            all: body.all.unwrap_or(false),
            rate: body.rate,
        }
    }
}

/// `BulkReplayBody`'s rule as schema: exactly one of `ids`, `filter` and
/// `"all": true` (`"all": false` may stand beside the other two). The
/// choice goes in an `allOf` beside the properties, so client generators
/// make one model of them (as `openapi::generator_friendly` does for the
/// contracts), and a field left out is `{"not": {}}` rather than `false`,
/// which some of them cannot read.
fn exactly_one_selection(schema: &mut Schema) {
    no_null_defaults(schema);
    let absent = json!({"not": {}});
    let choice = json!({"oneOf": [
        {"required": ["ids"], "properties": {"filter": absent, "all": {"const": false}}},
        {"required": ["filter"], "properties": {"ids": absent, "all": {"const": false}}},
        {"required": ["all"], "properties": {"ids": absent, "filter": absent, "all": {"const": true}}},
    ]});
    let mut outer = Map::new();
    for annotation in ["title", "description"] {
        if let Some(value) = schema.remove(annotation) {
            outer.insert(annotation.to_owned(), value);
        }
    }
    let properties = std::mem::take(schema).to_value();
    outer.insert("allOf".to_owned(), json!([properties, choice]));
    *schema = Schema::from(outer);
}

/// No `"default": null` on fields that never take `null` (what schemars
/// writes for an optional field read with `#[serde(default)]`).
fn no_null_defaults(schema: &mut Schema) {
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        for property in properties.values_mut() {
            if let Some(property) = property.as_object_mut()
                && property.get("default") == Some(&Value::Null)
            {
                property.remove("default");
            }
        }
    }
}

/// A field that, when given, is not `null`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// A text that, when given, is not empty.
fn text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text.is_empty() {
        return Err(D::Error::custom("must not be empty (leave it out instead)"));
    }
    Ok(Some(text))
}

/// An RFC 3339 time.
fn time<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<OffsetDateTime>, D::Error> {
    let text = String::deserialize(deserializer)?;
    super::query::parse_time(&text)
        .map(Some)
        .ok_or_else(|| D::Error::custom("must be an RFC 3339 time, e.g. 2026-11-29T10:00:00Z"))
}

/// A rate of replays per second, at least [`MIN_REPLAY_RATE`].
fn rate<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
    let rate = f64::deserialize(deserializer)?;
    if !(rate >= MIN_REPLAY_RATE && rate.is_finite()) {
        return Err(D::Error::custom(format!(
            "must be a number of replays per second of at least {MIN_REPLAY_RATE}"
        )));
    }
    Ok(Some(rate))
}

/// 1 to [`BULK_REPLAY_MAX_IDS`] dead letter ids, each a hyphenated UUID.
fn ids<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Vec<Uuid>>, D::Error> {
    let ids = Vec::<DeadLetterId>::deserialize(deserializer)?;
    if ids.is_empty() || ids.len() > BULK_REPLAY_MAX_IDS {
        return Err(D::Error::custom(format!(
            "must list 1 to {BULK_REPLAY_MAX_IDS} dead letter ids"
        )));
    }
    Ok(Some(ids.into_iter().map(|id| id.0).collect()))
}

/// A dead letter's id: a UUID in its hyphenated form (what the schema's
/// `format: uuid` means; the other forms `Uuid` reads are refused).
struct DeadLetterId(Uuid);

impl<'de> Deserialize<'de> for DeadLetterId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        match Uuid::try_parse(&text) {
            Ok(id) if text.len() == 36 => Ok(Self(id)),
            _ => Err(D::Error::custom(format!(
                "`{text}` is not a dead letter id (a UUID, e.g. 0193a0c2-7c1e-7d2a-9b5e-3f1d2c4b5a69)"
            ))),
        }
    }
}

/// `PUT /v1/tenants/{tenant}/release-policy`: the tenant's next approval
/// policy version.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = no_null_defaults)]
pub struct ReleasePolicyBody {
    /// The approval policy: groups of identities, and per environment the
    /// approvals required, the groups that may give them, how long one
    /// counts and the pattern its comment must match.
    pub document: bosun_sagas::release::ApprovalPolicy,
    /// Why it changes (kept in the history).
    #[serde(default)]
    #[schemars(length(max = 1000))]
    pub reason: Option<String>,
    /// The version this change was made against; refused (409) if another
    /// was stored since. Absent: the version in force now.
    /// Also checked by bosun, beyond this schema: a whole number.
    #[serde(default)]
    #[schemars(range(min = 1, max = crate::operator::policies::MAX_POLICY_VERSION))]
    pub expected_version: Option<u64>,
}

/// `POST /v1/tenants/{tenant}/environments/{environment}/rollback`: roll
/// one module of the environment back to a release verified there.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = no_null_defaults)]
pub struct RollbackBody {
    /// Why (kept on the command and in the environment's history).
    #[schemars(transform = rules::text(MAX_REASON_CHARS))]
    pub reason: String,
    /// The module to roll back; leave it out when the environment runs
    /// one module.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "String", transform = rules::identifier)]
    pub module_id: Option<String>,
    /// The verified release to go back to; leave it out for the newest one
    /// verified there before the module's current release.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "String", transform = rules::identifier)]
    pub to_release_id: Option<String>,
    /// Why the rollback goes through a closed promotion window or a hold of
    /// the environment (an incident); needs `releases:override` besides
    /// `releases:rollback`. Without it, a rollback into a closed window is
    /// refused (422), the rule named.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "String", transform = rules::text(MAX_REASON_CHARS))]
    pub override_reason: Option<String>,
    /// The person the caller acts for, as the caller names them (a note;
    /// `requestedBy` is the caller's key, whatever this says).
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "String", transform = rules::text(MAX_APPROVER_CHARS))]
    pub on_behalf_of: Option<String>,
}

/// `POST /v1/consumers/{consumer}/pause` and `.../resume`: why.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = no_null_defaults)]
pub struct ConsumerControlBody {
    /// Why (recorded, and shown to whoever sees the consumer paused);
    /// required to pause.
    #[serde(default)]
    #[schemars(transform = rules::text(crate::operator::controls::MAX_REASON_CHARS))]
    pub reason: Option<String>,
}

/// `PUT /v1/dead-letters/groups/{fingerprint}/acknowledgement`: a note.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = no_null_defaults)]
pub struct AcknowledgementBody {
    /// What the next operator should know (a ticket, the cause).
    #[serde(default)]
    #[schemars(transform = rules::text(crate::operator::controls::MAX_REASON_CHARS))]
    pub note: Option<String>,
}
