//! Errors raised when bytes do not form a valid bosun message.

/// The JSON path of a field for an error message: `.` for the whole
/// document.
pub(crate) fn path_or_root(path: &str) -> String {
    if path.is_empty() || path == "." {
        ".".to_owned()
    } else {
        path.to_owned()
    }
}

/// Why a message could not be read. Every variant names what was wrong so an
/// operator can fix the message and replay it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContractError {
    /// The message is larger than [`crate::MAX_MESSAGE_BYTES`].
    #[error("message is {size} bytes, over the limit of {limit} bytes")]
    Oversized {
        /// Size of the message in bytes.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The bytes are not JSON, or the envelope does not have the expected shape.
    #[error("malformed envelope at `{field}`: {reason}")]
    MalformedEnvelope {
        /// JSON path of the offending field (`.` for the whole document).
        field: String,
        /// What the parser said.
        reason: String,
    },
    /// The `type` is not in the catalogue.
    #[error("unknown message type `{message_type}` in field `type`")]
    UnknownType {
        /// The type name found.
        message_type: String,
    },
    /// The envelope's `kind` does not match the catalogue's kind for its type.
    #[error("field `kind` is `{found}` but `{message_type}` is a {expected}")]
    WrongKind {
        /// The type name.
        message_type: String,
        /// Kind declared by the catalogue.
        expected: String,
        /// Kind found on the envelope.
        found: String,
    },
    /// The `schemaVersion` is older than the oldest this build still reads:
    /// no build of bosun reads it any more, so the message is dead-lettered.
    #[error(
        "field `schemaVersion` is {found} but `{message_type}` is read at versions {supported} only; it is older than any this build reads and is dead-lettered"
    )]
    UnsupportedSchemaVersion {
        /// The type name.
        message_type: String,
        /// Version found on the envelope.
        found: u32,
        /// Versions this build reads, e.g. `1` or `1..=2`.
        supported: String,
    },
    /// The `schemaVersion` is newer than any this build reads: a later
    /// release of bosun wrote it. The host leaves it for a newer process
    /// (it waits, then is looked at again) rather than dead-lettering it.
    #[error(
        "field `schemaVersion` is {found} but this build reads `{message_type}` up to version {newest}; it waits for a newer bosun"
    )]
    NewerSchemaVersion {
        /// The type name.
        message_type: String,
        /// Version found on the envelope.
        found: u32,
        /// The newest version of the type this build reads.
        newest: u32,
    },
    /// A payload field is missing, of the wrong type, or breaks a rule.
    #[error("invalid field `{field}`: {reason}")]
    InvalidField {
        /// JSON path of the field, rooted at the envelope (`payload.name`).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl ContractError {
    /// The JSON path of the offending field, when the error names one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::MalformedEnvelope { field, .. } | Self::InvalidField { field, .. } => Some(field),
            Self::UnknownType { .. } => Some("type"),
            Self::WrongKind { .. } => Some("kind"),
            Self::UnsupportedSchemaVersion { .. } | Self::NewerSchemaVersion { .. } => Some("schemaVersion"),
            Self::Oversized { .. } => None,
        }
    }

    /// A short machine-readable cause, used to group dead letters.
    pub fn cause(&self) -> &'static str {
        match self {
            Self::Oversized { .. } => "oversized",
            Self::MalformedEnvelope { .. } => "malformed-envelope",
            Self::UnknownType { .. } => "unknown-type",
            Self::WrongKind { .. } => "wrong-kind",
            Self::UnsupportedSchemaVersion { .. } => "unsupported-schema-version",
            Self::NewerSchemaVersion { .. } => "newer-schema-version",
            Self::InvalidField { .. } => "invalid-field",
        }
    }
}
