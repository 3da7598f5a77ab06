//! Message versions: how a payload written at one schema version of its
//! type is read at another.
//!
//! Each message type has a current schema version (what this build
//! writes) and an oldest version it still reads (the catalogue's
//! `version 2 reads 1`). Every version after the first is one [`Change`]:
//! the pure step that upcasts a payload of the version before it, the step
//! that downcasts it back, and the wire version that introduced it.
//!
//! The wire version ([`WIRE_VERSION`]) numbers the catalogue as a whole: it
//! goes up by one whenever a release adds a message version. A process
//! told to write for an older wire (`BOSUN_COMPAT_VERSION`, during a
//! rolling upgrade) writes every message at the newest version that wire
//! had, downcasting the payload (`Envelope::write_for_wire`), so the previous
//! release, still running beside it, reads everything it sends.
//!
//! Reading: [`upcast`] runs the steps from the version found to the current
//! one. A version newer than the current one is
//! [`ContractError::NewerSchemaVersion`] (a later release wrote it: it
//! waits for a newer process), one older than the oldest read is
//! [`ContractError::UnsupportedSchemaVersion`] (dead-lettered).
//!
//! Adding a version: bump the type's `version` in the catalogue (keep
//! `reads` at the oldest version still read), add its [`Change`] here with
//! [`WIRE_VERSION`] raised by one, freeze the previous schema file in
//! [`crate::schema`], and keep the tests below passing (they refuse a gap).

use serde_json::{Map, Value};

use crate::error::ContractError;
use crate::messages::{CATALOGUE, MessageSpec};

/// The wire version this build writes: the newest catalogue version. Wire 1
/// is every message at version 1; wire 2 is `ApproveRelease` and
/// `RejectRelease` at version 2.
pub const WIRE_VERSION: u32 = 2;

/// One pure step between two versions of a payload.
pub type Step = fn(Value) -> Result<Value, ContractError>;

/// One version of a message type after its first: how it is read from the
/// version before it and written back as that version.
#[derive(Debug, Clone, Copy)]
pub struct Change {
    /// The message type.
    pub message_type: &'static str,
    /// The version this change introduces (it reads `version - 1`).
    pub version: u32,
    /// The wire version that introduced it.
    pub wire: u32,
    /// `version - 1` → `version`.
    pub upcast: Step,
    /// `version` → `version - 1`.
    pub downcast: Step,
    /// What changed, for `bosun version` and the docs.
    pub summary: &'static str,
    /// Fields of the version before it that this one no longer has (renamed
    /// or removed): a payload sent to a front door with one of them was
    /// written for that version, and is read as it ([`payload_as_sent`]).
    pub retired: &'static [&'static str],
}

/// Every change, one per (type, version introduced).
pub const CHANGES: &[Change] = &[
    Change {
        message_type: "ApproveRelease",
        version: 2,
        wire: 2,
        upcast: approver_to_on_behalf_of,
        downcast: on_behalf_of_to_approver,
        summary: "`approver` renamed `onBehalfOf`",
        retired: &["approver"],
    },
    Change {
        message_type: "RejectRelease",
        version: 2,
        wire: 2,
        upcast: approver_to_on_behalf_of,
        downcast: on_behalf_of_to_approver,
        summary: "`approver` renamed `onBehalfOf`",
        retired: &["approver"],
    },
];

/// The change that introduced `version` of `message_type`.
pub fn change(message_type: &str, version: u32) -> Option<&'static Change> {
    CHANGES
        .iter()
        .find(|change| change.message_type == message_type && change.version == version)
}

/// The wire version that introduced `version` of `message_type` (1 for a
/// first version).
pub fn wire_of(message_type: &str, version: u32) -> u32 {
    change(message_type, version).map_or(1, |change| change.wire)
}

/// Reads a payload written at `found` as the current version of `spec`,
/// one step at a time.
pub fn upcast(spec: &MessageSpec, found: u32, payload: Value) -> Result<Value, ContractError> {
    if found > spec.schema_version {
        return Err(ContractError::NewerSchemaVersion {
            message_type: spec.message_type.to_owned(),
            found,
            newest: spec.schema_version,
        });
    }
    let unsupported = || ContractError::UnsupportedSchemaVersion {
        message_type: spec.message_type.to_owned(),
        found,
        supported: spec.versions_read(),
    };
    if found < spec.oldest_read {
        return Err(unsupported());
    }
    let mut payload = payload;
    for version in found + 1..=spec.schema_version {
        let change = change(spec.message_type, version).ok_or_else(unsupported)?;
        payload = (change.upcast)(payload)?;
    }
    Ok(payload)
}

/// The version of `spec` a process writing for `wire` sends: the newest
/// one that wire had, but never older than the oldest this build can
/// downcast to (every change down to it is known).
pub fn version_for_wire(spec: &MessageSpec, wire: u32) -> u32 {
    let mut version = spec.schema_version;
    while version > 1 && wire_of(spec.message_type, version) > wire && change(spec.message_type, version).is_some() {
        version -= 1;
    }
    version
}

/// Writes `payload`, at the current version of `spec`, as version `to`.
pub fn downcast(spec: &MessageSpec, to: u32, payload: Value) -> Result<Value, ContractError> {
    let mut payload = payload;
    for version in (to + 1..=spec.schema_version).rev() {
        let change = change(spec.message_type, version).ok_or_else(|| ContractError::UnsupportedSchemaVersion {
            message_type: spec.message_type.to_owned(),
            found: to,
            supported: spec.versions_read(),
        })?;
        payload = (change.downcast)(payload)?;
    }
    Ok(payload)
}

/// A payload a front door received (the HTTP API, MCP, `bosun send`, an
/// edited replay), read at the current version of `spec`: as it is, unless
/// it has a field an older version had and a later one retired, in which
/// case it was written against that older version (an agent of the
/// previous release) and is upcast from it, so nothing it says is lost as
/// an unknown field. One that also has the field's new name is refused,
/// naming the old one.
pub fn payload_as_sent(spec: &MessageSpec, payload: &Value) -> Result<Value, ContractError> {
    let Some(object) = payload.as_object() else {
        return Ok(payload.clone());
    };
    let written_for = CHANGES
        .iter()
        .filter(|change| change.message_type == spec.message_type && change.version <= spec.schema_version)
        .filter(|change| change.retired.iter().any(|field| object.contains_key(*field)))
        .map(|change| change.version - 1)
        .min();
    let Some(version) = written_for else {
        return Ok(payload.clone());
    };
    if version < spec.oldest_read {
        return Ok(payload.clone());
    }
    let upcast_payload = upcast(spec, version, payload.clone())?;
    // The upcast moved each retired field to its new name: a payload that
    // had both said one thing twice.
    let is_retired = |field: &str| {
        CHANGES
            .iter()
            .any(|change| change.message_type == spec.message_type && change.retired.contains(&field))
    };
    let old_names: Vec<&str> = object
        .keys()
        .map(String::as_str)
        .filter(|field| is_retired(field))
        .collect();
    if let Some(upcast_object) = upcast_payload.as_object() {
        for (field, value) in object {
            if !is_retired(field) && upcast_object.get(field).is_some_and(|after| after != value) {
                return Err(ContractError::InvalidField {
                    field: format!("payload.{field}"),
                    reason: format!(
                        "is given beside `{}`, its name in `{}` version {version}; send one of them",
                        old_names.join("`, `"),
                        spec.message_type
                    ),
                });
            }
        }
    }
    Ok(upcast_payload)
}

/// The range of wire versions a build reads: from the oldest wire any of
/// its oldest-read versions belongs to, to [`WIRE_VERSION`].
pub fn oldest_wire_read() -> u32 {
    CATALOGUE
        .iter()
        .map(|spec| wire_of(spec.message_type, spec.oldest_read))
        .max()
        .unwrap_or(1)
}

fn object(payload: Value) -> Result<Map<String, Value>, ContractError> {
    match payload {
        Value::Object(object) => Ok(object),
        _ => Err(ContractError::InvalidField {
            field: "payload".to_owned(),
            reason: "is not an object, so its version cannot be changed".to_owned(),
        }),
    }
}

/// Moves field `from` to `to`; `from` wins over a `to` the old version
/// did not know (and so ignored).
fn rename(payload: Value, from: &str, to: &str) -> Result<Value, ContractError> {
    let mut object = object(payload)?;
    if let Some(value) = object.remove(from) {
        object.insert(to.to_owned(), value);
    } else {
        object.remove(to);
    }
    Ok(Value::Object(object))
}

/// `ApproveRelease` and `RejectRelease` v1 → v2.
fn approver_to_on_behalf_of(payload: Value) -> Result<Value, ContractError> {
    rename(payload, "approver", "onBehalfOf")
}

/// `ApproveRelease` and `RejectRelease` v2 → v1. `approverIdentities`
/// (added to version 2 later, optional) stays: a reader of version 1
/// ignores a field it does not know, and this release reads it back.
fn on_behalf_of_to_approver(payload: Value) -> Result<Value, ContractError> {
    rename(payload, "onBehalfOf", "approver")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{Envelope, bytes_for_wire};
    use crate::messages::Message;
    use crate::samples;
    use serde_json::json;

    /// A front door reads a payload written against the previous release
    /// (`approver`) as that version, the current one as it is, and refuses
    /// one that gives both names different values.
    #[test]
    fn a_front_door_payload_with_a_retired_field_is_read_as_its_version() {
        let spec = MessageSpec::find("ApproveRelease").unwrap();
        let old = json!({"releaseId": "r-1", "environment": "prod", "approver": "alice"});
        let read = payload_as_sent(spec, &old).unwrap();
        assert_eq!(
            read,
            json!({"releaseId": "r-1", "environment": "prod", "onBehalfOf": "alice"})
        );
        let current = json!({"releaseId": "r-1", "environment": "prod", "onBehalfOf": "alice"});
        assert_eq!(payload_as_sent(spec, &current).unwrap(), current);
        let same = json!({"releaseId": "r-1", "environment": "prod", "approver": "alice", "onBehalfOf": "alice"});
        assert_eq!(payload_as_sent(spec, &same).unwrap(), current);
        let both = json!({"releaseId": "r-1", "environment": "prod", "approver": "alice", "onBehalfOf": "bob"});
        let err = payload_as_sent(spec, &both).unwrap_err();
        assert_eq!(err.field(), Some("payload.onBehalfOf"), "{err}");
        assert!(err.to_string().contains("`approver`"), "{err}");
        // A type with no retired field is read as it is.
        let probe = json!({"group": "canary", "approver": "x"});
        assert_eq!(
            payload_as_sent(MessageSpec::find("Probe").unwrap(), &probe).unwrap(),
            probe
        );
    }

    /// Every version a type still reads, below its current one, has the
    /// step that reads it: no gap between the oldest read and the current.
    #[test]
    fn every_version_read_has_its_upcast() {
        for spec in CATALOGUE {
            assert!(spec.oldest_read >= 1, "{}", spec.message_type);
            assert!(spec.oldest_read <= spec.schema_version, "{}", spec.message_type);
            for from in spec.oldest_read..spec.schema_version {
                assert!(
                    change(spec.message_type, from + 1).is_some(),
                    "{} reads version {from} but has no step from it to {}",
                    spec.message_type,
                    from + 1
                );
            }
        }
    }

    /// Every change belongs to a type and a version the catalogue has,
    /// each once, and the wire version is the newest change's.
    #[test]
    fn every_change_is_of_a_catalogue_version_and_the_wire_is_the_newest() {
        for (index, change) in CHANGES.iter().enumerate() {
            let spec = MessageSpec::find(change.message_type).expect("a catalogue type");
            assert!(
                change.version >= 2 && change.version <= spec.schema_version,
                "{change:?}"
            );
            assert!(change.wire >= 2 && change.wire <= WIRE_VERSION, "{change:?}");
            assert!(
                wire_of(change.message_type, change.version - 1) <= change.wire,
                "a later version never comes from an older wire: {change:?}"
            );
            assert!(
                !CHANGES[..index]
                    .iter()
                    .any(|c| c.message_type == change.message_type && c.version == change.version),
                "{change:?} twice"
            );
        }
        let newest = CHANGES.iter().map(|change| change.wire).max().unwrap_or(1);
        assert_eq!(WIRE_VERSION, newest);
        assert_eq!(oldest_wire_read(), 1, "this build still reads everything wire 1 wrote");
    }

    /// Down then up again gives back every sample, at every wire.
    #[test]
    fn every_sample_survives_a_downcast_and_an_upcast_at_every_wire() {
        for message in samples::samples() {
            let spec = message.spec();
            for wire in 1..=WIRE_VERSION {
                let to = version_for_wire(spec, wire);
                let down = downcast(spec, to, message.to_payload()).unwrap();
                let back = read(spec.message_type, to, &down);
                assert_eq!(back, message, "{} through version {to}", spec.message_type);
            }
        }
    }

    /// A payload of `version`, read as an envelope reads it.
    fn read(message_type: &str, version: u32, payload: &Value) -> Message {
        let spec = MessageSpec::find(message_type).unwrap();
        let upcast = upcast(spec, version, payload.clone()).unwrap();
        Message::from_declared(message_type, spec.kind, spec.schema_version, &upcast).unwrap()
    }

    #[test]
    fn a_v1_approval_reads_as_v2() {
        let v1 = json!({"releaseId": "r-1", "environment": "prod", "approver": "alice", "approvedBy": "cli:bob"});
        let message = read("ApproveRelease", 1, &v1);
        let Message::ApproveRelease(approve) = message else {
            panic!("{message:?}")
        };
        assert_eq!(approve.on_behalf_of.as_deref(), Some("alice"));
        assert_eq!(approve.approved_by.as_deref(), Some("cli:bob"));

        let v1 = json!({"releaseId": "r-1", "approver": "bob", "reason": "freeze"});
        let message = read("RejectRelease", 1, &v1);
        let Message::RejectRelease(reject) = message else {
            panic!("{message:?}")
        };
        assert_eq!(reject.on_behalf_of.as_deref(), Some("bob"));
    }

    #[test]
    fn a_v1_field_the_old_version_ignored_does_not_survive_the_upcast() {
        let v1 = json!({"releaseId": "r-1", "environment": "prod", "onBehalfOf": "ignored by v1"});
        let message = read("ApproveRelease", 1, &v1);
        assert!(
            matches!(message, Message::ApproveRelease(ref a) if a.on_behalf_of.is_none()),
            "{message:?}"
        );
    }

    /// With compat 1 an approval goes out as version 1 with `approver`:
    /// exactly the fields of the version 1 schema the previous release
    /// reads, and nothing of version 2.
    #[test]
    fn compat_one_writes_an_approval_as_v1() {
        let envelope = Envelope::new(
            &samples::approve_release().into(),
            uuid::Uuid::now_v7(),
            "contoso",
            "agent:test",
        );
        let bytes = bytes_for_wire(&envelope.to_vec(), 1).unwrap().expect("rewritten");
        let sent: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(sent["schemaVersion"], 1);
        assert_eq!(sent["payload"]["approver"], "alice@contoso.com");
        assert_eq!(sent["payload"].get("onBehalfOf"), None);
        let v1_schema: Value = serde_json::from_str(include_str!("../schemas/ApproveRelease.v1.schema.json")).unwrap();
        let known: Vec<&String> = v1_schema["properties"].as_object().unwrap().keys().collect();
        // Besides version 1's fields, only optional fields added since,
        // which a version 1 reader ignores (its schema allows more).
        assert_ne!(v1_schema["additionalProperties"], false);
        for field in sent["payload"].as_object().unwrap().keys() {
            assert!(
                known.contains(&field) || field == "approverIdentities",
                "`{field}` is not a version 1 field"
            );
        }
        // At the current wire, nothing changes.
        assert_eq!(bytes_for_wire(&envelope.to_vec(), WIRE_VERSION).unwrap(), None);
        // A type unchanged since wire 1 is left as it is.
        let probe = Envelope::new(&samples::probe().into(), uuid::Uuid::now_v7(), "contoso", "agent:test");
        assert_eq!(bytes_for_wire(&probe.to_vec(), 1).unwrap(), None);
    }

    #[test]
    fn a_copy_of_a_newer_or_older_message_is_not_rewritten() {
        let mut envelope = Envelope::new(
            &samples::approve_release().into(),
            uuid::Uuid::now_v7(),
            "contoso",
            "agent:test",
        );
        envelope.schema_version = 3;
        assert_eq!(bytes_for_wire(&envelope.to_vec(), 1).unwrap(), None);
        envelope.schema_version = 1;
        assert_eq!(bytes_for_wire(&envelope.to_vec(), 1).unwrap(), None);
    }
}
