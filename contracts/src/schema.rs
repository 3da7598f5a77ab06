//! JSON Schemas generated from the contracts: one for the envelope and one
//! per payload type, written as `<Type>.v<version>.schema.json` plus
//! `envelope.schema.json` and an `index.json` listing every type with its
//! kind, version and route.

use serde_json::{Value, json};

use crate::envelope::Envelope;
use crate::messages::{CATALOGUE, MessageSpec, payload_schemas};
use crate::routing::{command_handler, destination_of, event_subscribers};
use crate::schema_rules::generator;

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
        files.push((format!("{message_type}.v{version}.schema.json"), pretty(&value)));
    }
    let index: Vec<Value> = CATALOGUE
        .iter()
        .map(|spec| {
            json!({
                "type": spec.message_type,
                "kind": spec.kind,
                "schemaVersion": spec.schema_version,
                "description": spec.description,
                "internal": spec.internal,
                "destination": destination_of(spec.message_type).map(|d| d.path()),
                "handledBy": command_handler(spec.message_type).map(|c| c.name),
                "subscribers": event_subscribers(spec.message_type).map(|c| c.name).collect::<Vec<_>>(),
                "schema": format!("{}.v{}.schema.json", spec.message_type, spec.schema_version),
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
    #[test]
    fn checked_in_schemas_are_fresh() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
        let update = std::env::var_os("BOSUN_UPDATE_SCHEMAS").is_some();
        let files = schema_files();
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            for entry in std::fs::read_dir(&dir).unwrap() {
                std::fs::remove_file(entry.unwrap().path()).unwrap();
            }
            for (name, text) in &files {
                std::fs::write(dir.join(name), text).unwrap();
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
