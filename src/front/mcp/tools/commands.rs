//! The commands a tool may name, from the contracts: their names
//! ([`CommandType`]) and their payload schemas ([`CommandPayload`]), the
//! same JSON Schemas the OpenAPI document publishes (`bosun_contracts`'
//! `payload_schemas()`), and for the same commands: the sendable ones
//! ([`MessageSpec::is_sendable`]; internal ones such as
//! `ReleaseApprovalTimeout` are never offered).

use std::borrow::Cow;

use bosun_contracts::{CATALOGUE, MessageSpec};
use schemars::generate::SchemaGenerator;
use schemars::{JsonSchema, Schema, json_schema};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The sendable commands, in catalogue order.
pub fn sendable() -> impl Iterator<Item = &'static MessageSpec> {
    CATALOGUE.iter().filter(|spec| spec.is_sendable())
}

/// The names of the sendable commands, in catalogue order.
pub fn names() -> Vec<&'static str> {
    sendable().map(|spec| spec.message_type).collect()
}

/// The JSON Schema of a sendable command's payload, as the contracts
/// generate it (a root schema, with its own `$defs`).
pub fn payload_schema(message_type: &str) -> Option<Schema> {
    let spec = MessageSpec::find(message_type).filter(|spec| spec.is_sendable())?;
    bosun_contracts::messages::payload_schemas()
        .into_iter()
        .find(|(name, _)| *name == spec.message_type)
        .map(|(_, schema)| schema)
}

/// A command's type name, e.g. `CreateCommit`. Its schema is the list of
/// sendable commands; whether the name is one is the gateway's to say (an
/// unknown or internal type is refused as `unknown-type`, as over HTTP).
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct CommandType(pub String);

impl JsonSchema for CommandType {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "CommandType".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "enum": names()})
    }
}

/// A command's payload: a JSON object whose schema is one of the sendable
/// commands' payload schemas (each added to the tool schema's `$defs` under
/// its command's name). The contract of the named command checks it.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct CommandPayload(pub Map<String, Value>);

impl CommandPayload {
    /// The payload as a JSON value.
    pub fn into_value(self) -> Value {
        Value::Object(self.0)
    }
}

impl JsonSchema for CommandPayload {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "CommandPayload".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let path = generator
            .settings()
            .definitions_path
            .trim_start_matches('#')
            .trim_end_matches('/');
        let prefix = format!("#{path}/");
        let mut variants = Vec::new();
        for (name, schema) in bosun_contracts::messages::payload_schemas() {
            if !MessageSpec::find(name).is_some_and(MessageSpec::is_sendable) {
                continue;
            }
            let Value::Object(mut schema) = schema.to_value() else {
                continue;
            };
            schema.remove("$schema");
            if let Some(Value::Object(definitions)) = schema.remove("$defs") {
                for (definition, body) in definitions {
                    generator.definitions_mut().insert(definition, relink(body, &prefix));
                }
            }
            generator
                .definitions_mut()
                .insert(name.to_owned(), relink(Value::Object(schema), &prefix));
            variants.push(serde_json::json!({"$ref": format!("{prefix}{name}")}));
        }
        json_schema!({"type": "object", "anyOf": variants})
    }
}

/// Points the contracts' `#/$defs/` references at `prefix` (the same path
/// unless the generator keeps its definitions elsewhere).
fn relink(value: Value, prefix: &str) -> Value {
    match value {
        Value::String(text) if text.starts_with("#/$defs/") => Value::String(text.replacen("#/$defs/", prefix, 1)),
        Value::Array(items) => Value::Array(items.into_iter().map(|item| relink(item, prefix)).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, relink(v, prefix))).collect()),
        other => other,
    }
}
