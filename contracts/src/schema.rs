//! JSON Schemas generated from the contracts: one for the envelope and one
//! per payload type, written as `<Type>.v<version>.schema.json` plus
//! `envelope.schema.json` and an `index.json` listing every type with its
//! kind, version and route.
//!
//! The current version of each payload schema is generated from its type;
//! an older version still read is the file that version's release wrote,
//! frozen ([`FROZEN`]): it is what senders of that version were told, and
//! no type of this build describes it any more. The index lists every
//! version read, with the wire version that introduced it.

use serde_json::{Value, json};

use crate::envelope::Envelope;
use crate::messages::{CATALOGUE, MessageSpec, payload_schemas};
use crate::routing::{command_handler, destination_of, event_subscribers};
use crate::schema_rules::generator;
use crate::versions;

/// The schema files of older versions still read, as their release wrote
/// them: `(file name, text)`. Keep one here for every version between a
/// type's `reads` and its current version (a test refuses a gap).
pub const FROZEN: &[(&str, &str)] = &[
    (
        "ApproveRelease.v1.schema.json",
        include_str!("../schemas/ApproveRelease.v1.schema.json"),
    ),
    (
        "RejectRelease.v1.schema.json",
        include_str!("../schemas/RejectRelease.v1.schema.json"),
    ),
];

/// The schema file name of `version` of `message_type`.
pub fn file_name(message_type: &str, version: u32) -> String {
    format!("{message_type}.v{version}.schema.json")
}

/// Every schema file: `(file name, pretty JSON text)`, in a stable order.
pub fn schema_files() -> Vec<(String, String)> {
    let mut files = Vec::new();
    files.push((
        "envelope.schema.json".to_owned(),
        pretty(&json!(generator().into_root_schema_for::<Envelope>())),
    ));
    for (message_type, schema) in payload_schemas() {
        let version = MessageSpec::find(message_type).map_or(1, |spec| spec.schema_version);
        let mut value = json!(schema);
        if let Some(object) = value.as_object_mut() {
            object.insert(
                "$id".to_owned(),
                json!(format!(
                    "https://bosun.dev/schemas/{message_type}.v{version}.schema.json"
                )),
            );
        }
        files.push((file_name(message_type, version), pretty(&value)));
    }
    for (name, text) in FROZEN {
        files.push(((*name).to_owned(), (*text).to_owned()));
    }
    let index: Vec<Value> = CATALOGUE
        .iter()
        .map(|spec| {
            json!({
                "type": spec.message_type,
                "kind": spec.kind,
                "schemaVersion": spec.schema_version,
                "oldestRead": spec.oldest_read,
                "versions": (spec.oldest_read..=spec.schema_version).map(|version| json!({
                    "schemaVersion": version,
                    "wireVersion": versions::wire_of(spec.message_type, version),
                    "schema": file_name(spec.message_type, version),
                })).collect::<Vec<_>>(),
                "description": spec.description,
                "internal": spec.internal,
                "destination": destination_of(spec.message_type).map(|d| d.path()),
                "handledBy": command_handler(spec.message_type).map(|c| c.name),
                "subscribers": event_subscribers(spec.message_type).map(|c| c.name).collect::<Vec<_>>(),
                "schema": file_name(spec.message_type, spec.schema_version),
            })
        })
        .collect();
    files.push(("index.json".to_owned(), pretty(&json!(index))));
    files
}

fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The checked-in schemas under `contracts/schemas/` must equal what the
    /// code generates. Regenerate with `cargo run -- schema export contracts/schemas`
    /// (or `BOSUN_UPDATE_SCHEMAS=1 cargo test -p bosun-contracts`).
    /// Every version read has its schema file: the current one generated,
    /// each older one frozen.
    #[test]
    fn every_version_read_has_a_schema_file() {
        let files: Vec<String> = schema_files().into_iter().map(|(name, _)| name).collect();
        for spec in CATALOGUE {
            for version in spec.oldest_read..=spec.schema_version {
                let name = file_name(spec.message_type, version);
                assert!(files.contains(&name), "{name} is missing");
            }
        }
        assert_eq!(
            files.len(),
            2 + CATALOGUE
                .iter()
                .map(|spec| (spec.schema_version - spec.oldest_read + 1) as usize)
                .sum::<usize>()
        );
    }

    #[test]
    fn checked_in_schemas_are_fresh() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
        let update = std::env::var_os("BOSUN_UPDATE_SCHEMAS").is_some();
        let files = schema_files();
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                // Frozen files are the source of their own text.
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if !FROZEN.iter().any(|(frozen, _)| *frozen == name) {
                    std::fs::remove_file(path).unwrap();
                }
            }
            for (name, text) in &files {
                if !FROZEN.iter().any(|(frozen, _)| frozen == name) {
                    std::fs::write(dir.join(name), text).unwrap();
                }
            }
        }
        let mut stale = Vec::new();
        for (name, text) in &files {
            match std::fs::read_to_string(dir.join(name)) {
                Ok(on_disk) if on_disk == *text => {}
                _ => stale.push(name.clone()),
            }
        }
        let generated: Vec<_> = files.iter().map(|(name, _)| name.clone()).collect();
        // A missing directory is reported as stale (every file above), not a panic.
        for entry in std::fs::read_dir(&dir).into_iter().flatten() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if !generated.contains(&name) {
                stale.push(format!("{name} (no longer generated)"));
            }
        }
        assert!(
            stale.is_empty(),
            "contracts/schemas is stale: {stale:?}; run `BOSUN_UPDATE_SCHEMAS=1 cargo test -p bosun-contracts`"
        );
    }
}
