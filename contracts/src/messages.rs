//! The catalogue: every command and event of the eleven consumers.
//!
//! Each message type is a payload struct in one of the submodules, listed
//! once in the [`catalogue!`] invocation below with its kind and schema
//! version. The macro derives the [`Message`] enum, the [`CATALOGUE`] of
//! specs, typed decoding and the JSON Schema list from that one list.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::envelope::{path_or_root, Envelope, MessageKind};
use crate::error::ContractError;
use crate::validate::{FieldError, Validate};

pub mod repository;
pub mod source_control;

pub use repository::*;
pub use source_control::*;

/// What the catalogue knows about one message type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageSpec {
    /// The `type` name on the envelope.
    pub message_type: &'static str,
    /// Command or event.
    pub kind: MessageKind,
    /// The schema version this build writes and reads.
    pub schema_version: u32,
    /// One line saying what the message means.
    pub description: &'static str,
}

impl MessageSpec {
    /// The spec of a type name, if the catalogue has it.
    pub fn find(message_type: &str) -> Option<&'static MessageSpec> {
        CATALOGUE.iter().find(|spec| spec.message_type == message_type)
    }
}

macro_rules! catalogue {
    ($( $kind:ident $name:ident version $version:literal : $doc:literal ;)*) => {
        /// Every message bosun knows, with its typed payload.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Message {
            $(
                #[doc = $doc]
                $name($name),
            )*
        }

        /// Every message type, in catalogue order.
        pub const CATALOGUE: &[MessageSpec] = &[
            $(
                MessageSpec {
                    message_type: stringify!($name),
                    kind: MessageKind::$kind,
                    schema_version: $version,
                    description: $doc,
                },
            )*
        ];

        impl Message {
            /// The `type` name of this message.
            pub fn message_type(&self) -> &'static str {
                match self {
                    $( Self::$name(_) => stringify!($name), )*
                }
            }

            fn payload_value(&self) -> Result<Value, serde_json::Error> {
                match self {
                    $( Self::$name(payload) => serde_json::to_value(payload), )*
                }
            }

            fn decode_payload(message_type: &str, payload: &Value) -> Option<Result<Self, ContractError>> {
                match message_type {
                    $( stringify!($name) => Some(decode::<$name>(payload).map(Self::$name)), )*
                    _ => None,
                }
            }

            fn validate_payload(&self) -> Result<(), FieldError> {
                match self {
                    $( Self::$name(payload) => payload.validate(), )*
                }
            }
        }

        $(
            impl From<$name> for Message {
                fn from(payload: $name) -> Self {
                    Self::$name(payload)
                }
            }
        )*

        /// The JSON Schema of every payload, keyed by type name.
        pub fn payload_schemas() -> Vec<(&'static str, schemars::Schema)> {
            vec![ $( (stringify!($name), schemars::schema_for!($name)), )* ]
        }
    };
}

catalogue! {
    Command ProvisionRepository version 1: "Create and configure a Git repository for a tenant (idempotent on tenant + name).";
    Event RepositoryProvisioned version 1: "A repository exists and is configured (created now or found existing).";
    Command CreateCommit version 1: "Write an artifact bundle's files into a branch and commit them.";
    Event CommitCreated version 1: "A branch holds the requested tree (a new commit, or the existing one when nothing changed).";
}

impl Message {
    /// The catalogue entry of this message's type.
    pub fn spec(&self) -> &'static MessageSpec {
        let message_type = self.message_type();
        // Every variant is generated from the same list as CATALOGUE.
        CATALOGUE
            .iter()
            .find(|spec| spec.message_type == message_type)
            .unwrap_or(&CATALOGUE[0])
    }

    /// Command or event.
    pub fn kind(&self) -> MessageKind {
        self.spec().kind
    }

    /// The payload as JSON.
    pub fn to_payload(&self) -> Value {
        self.payload_value().unwrap_or(Value::Null)
    }

    /// Decodes and validates the payload of an envelope.
    pub fn from_envelope(envelope: &Envelope) -> Result<Self, ContractError> {
        let spec = MessageSpec::find(&envelope.message_type).ok_or_else(|| ContractError::UnknownType {
            message_type: envelope.message_type.clone(),
        })?;
        if spec.kind != envelope.kind {
            return Err(ContractError::WrongKind {
                message_type: spec.message_type.to_owned(),
                expected: spec.kind.to_string(),
                found: envelope.kind.to_string(),
            });
        }
        if envelope.schema_version != spec.schema_version {
            return Err(ContractError::UnsupportedSchemaVersion {
                message_type: spec.message_type.to_owned(),
                found: envelope.schema_version,
                supported: spec.schema_version.to_string(),
            });
        }
        let message = Self::decode_payload(spec.message_type, &envelope.payload).ok_or_else(|| {
            ContractError::UnknownType {
                message_type: envelope.message_type.clone(),
            }
        })??;
        message.validate_payload().map_err(|err| ContractError::InvalidField {
            field: format!("payload.{}", err.field),
            reason: err.reason,
        })?;
        Ok(message)
    }

    /// Checks the payload's field rules.
    pub fn validate(&self) -> Result<(), ContractError> {
        self.validate_payload().map_err(|err| ContractError::InvalidField {
            field: format!("payload.{}", err.field),
            reason: err.reason,
        })
    }

    /// Builds a typed message from a type name and a JSON payload, as an
    /// agent's `bosun send TYPE --payload JSON` does.
    pub fn from_type_and_payload(message_type: &str, payload: &Value) -> Result<Self, ContractError> {
        let spec = MessageSpec::find(message_type).ok_or_else(|| ContractError::UnknownType {
            message_type: message_type.to_owned(),
        })?;
        let message = Self::decode_payload(spec.message_type, payload).ok_or_else(|| {
            ContractError::UnknownType {
                message_type: message_type.to_owned(),
            }
        })??;
        message.validate()?;
        Ok(message)
    }
}

fn decode<T: DeserializeOwned + JsonSchema>(payload: &Value) -> Result<T, ContractError> {
    serde_path_to_error::deserialize(payload).map_err(|err| {
        let path = path_or_root(&err.path().to_string());
        let field = if path == "." {
            "payload".to_owned()
        } else {
            format!("payload.{path}")
        };
        ContractError::InvalidField {
            field,
            reason: err.inner().to_string(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_names_are_unique() {
        let mut names: Vec<_> = CATALOGUE.iter().map(|spec| spec.message_type).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
    }

    #[test]
    fn missing_payload_field_is_named() {
        let err = Message::from_type_and_payload("CreateCommit", &serde_json::json!({"repository": "r"}))
            .unwrap_err();
        assert_eq!(err.field(), Some("payload"), "{err}");
        assert!(err.to_string().contains("branch"), "{err}");
    }

    #[test]
    fn nested_bad_field_is_named_with_its_path() {
        let err = Message::from_type_and_payload(
            "CreateCommit",
            &serde_json::json!({
                "repository": "r", "branch": "main", "message": "m",
                "files": [{"path": "a.txt", "content": 5}]
            }),
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("payload.files[0].content"), "{err}");
    }

    #[test]
    fn unknown_type_is_rejected() {
        let err = Message::from_type_and_payload("LaunchRocket", &serde_json::json!({})).unwrap_err();
        assert_eq!(err, ContractError::UnknownType { message_type: "LaunchRocket".into() });
    }
}
