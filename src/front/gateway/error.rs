//! Why the front door said no, as an HTTP status, a code and a field.

use super::*;
use crate::front::access::Refusal;
use crate::host::claim_check::ClaimCheckError;
use crate::ports::transport::TransportError;

/// Every error the API answers: `{"error": {"code", "message", "field"?}}`
/// (the OpenAPI document's `Error` schema).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(rename = "Error")]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// What went wrong, in an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ErrorDetail {
    /// A short machine-readable code (`invalid-field`, `not-found`,
    /// `rate-limited` ...).
    #[schemars(example = "invalid-field")]
    pub code: String,
    /// What is wrong, for a person.
    pub message: String,
    /// The offending field, when one is to blame (`payload.branch`, `limit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ErrorBody {
    /// An error body.
    pub fn new(code: &str, message: String, field: Option<String>) -> Self {
        Self {
            error: ErrorDetail {
                code: code.to_owned(),
                message,
                field,
            },
        }
    }

    /// As JSON.
    pub fn to_json(&self) -> Value {
        // Strings only: serializing cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Why the front door said no.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// No key, or a key that is unknown, malformed, revoked or expired.
    #[error("{0}")]
    Unauthorized(Refusal),
    /// The key lacks the scope.
    #[error("this key lacks the `{scope}` scope")]
    Forbidden {
        /// The scope needed.
        scope: Scope,
    },
    /// A tenant's key named another tenant (`X-Bosun-Tenant`, MCP's
    /// `tenant`): a tenant's key acts for its own tenant only.
    #[error("this key acts for tenant `{own}` only: leave X-Bosun-Tenant out or name `{own}`")]
    OtherTenant {
        /// The key's own tenant.
        own: String,
    },
    /// What the caller asked affects every tenant, and its key is a
    /// tenant's: only a platform key may do it.
    #[error("{0} affects every tenant: only a platform key (tenant `*`) with the right may do it")]
    PlatformOnly(&'static str),
    /// Nothing with that id (for this tenant).
    #[error("no {what} `{id}`")]
    NotFound {
        /// What was looked up.
        what: &'static str,
        /// The id.
        id: String,
    },
    /// A message type bosun does not know, or not a command.
    #[error("{0}")]
    UnknownType(String),
    /// The request is not valid.
    #[error("{message}")]
    Invalid {
        /// The offending field, when one is to blame.
        field: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// The `Idempotency-Key` was used before with a different request.
    #[error("Idempotency-Key `{0}` was already used with a different request")]
    IdempotencyReused(String),
    /// A request with the same `Idempotency-Key` is still being processed.
    #[error("a request with Idempotency-Key `{0}` is still being processed; retry later")]
    IdempotencyInProgress(String),
    /// A concurrent change won (a saga version conflict).
    #[error("{0}")]
    Conflict(String),
    /// The store, the transport or the blob store failed (or an answer
    /// could not be written): nothing the caller did; retry later (503).
    #[error("unavailable: {0}")]
    Unavailable(#[source] Outage),
}

/// What failed behind a [`GatewayError::Unavailable`], with its error.
#[derive(Debug, thiserror::Error)]
pub enum Outage {
    /// The store.
    #[error(transparent)]
    Store(StoreError),
    /// The transport.
    #[error(transparent)]
    Transport(TransportError),
    /// The blob store behind the claim check, transiently.
    #[error("claim check: {0}")]
    ClaimCheck(#[source] ClaimCheckError),
    /// An answer that could not be written as JSON; `what` says which.
    #[error("{what}: {source}")]
    Answer {
        /// What could not be written (`answer not serializable`).
        what: &'static str,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
}

impl GatewayError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            Self::Unauthorized(_) => 401,
            Self::Forbidden { .. } | Self::OtherTenant { .. } | Self::PlatformOnly(_) => 403,
            Self::NotFound { .. } | Self::UnknownType(_) => 404,
            Self::Invalid { .. } | Self::IdempotencyReused(_) => 422,
            Self::IdempotencyInProgress(_) | Self::Conflict(_) => 409,
            Self::Unavailable(_) => 503,
        }
    }

    /// A short machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthorized(_) => "unauthorized",
            Self::Forbidden { .. } => "forbidden",
            Self::OtherTenant { .. } => "tenant-not-allowed",
            Self::PlatformOnly(_) => "platform-key-needed",
            Self::NotFound { .. } => "not-found",
            Self::UnknownType(_) => "unknown-type",
            Self::Invalid { .. } => "invalid-field",
            Self::IdempotencyReused(_) => "idempotency-key-reused",
            Self::IdempotencyInProgress(_) => "idempotency-in-progress",
            Self::Conflict(_) => "conflict",
            Self::Unavailable(_) => "unavailable",
        }
    }

    /// Why the caller was refused, when it was for who it is or what it
    /// may do (the `reason` label of `bosun_api_refusals_total`): a
    /// [`Refusal`]'s name, or `scope` for a key without the right.
    pub fn refusal(&self) -> Option<&'static str> {
        match self {
            Self::Unauthorized(refusal) => Some(refusal.as_str()),
            Self::Forbidden { .. } => Some("scope"),
            Self::OtherTenant { .. } | Self::PlatformOnly(_) => Some("tenant"),
            _ => None,
        }
    }

    /// The field to blame, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Invalid { field, .. } => field.as_deref(),
            Self::UnknownType(_) => Some("type"),
            Self::OtherTenant { .. } => Some("X-Bosun-Tenant"),
            _ => None,
        }
    }

    /// The error as the API's body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody::new(self.code(), self.to_string(), self.field().map(str::to_owned))
    }

    /// The error as the API's JSON body.
    pub fn to_json(&self) -> Value {
        self.body().to_json()
    }

    pub(super) fn not_found(what: &'static str, id: &str) -> Self {
        Self::NotFound {
            what,
            id: id.to_owned(),
        }
    }
}

impl From<StoreError> for GatewayError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound { what, id } => Self::NotFound { what, id },
            StoreError::SagaConflict { .. } | StoreError::Ambiguous { .. } | StoreError::PolicyChanged { .. } => {
                Self::Conflict(err.to_string())
            }
            other => Self::Unavailable(Outage::Store(other)),
        }
    }
}

impl From<ContractError> for GatewayError {
    fn from(err: ContractError) -> Self {
        Self::Invalid {
            field: err.field().map(str::to_owned),
            message: err.to_string(),
        }
    }
}

impl From<OperatorError> for GatewayError {
    fn from(err: OperatorError) -> Self {
        match err {
            OperatorError::Contract(err) => err.into(),
            OperatorError::Store(err) => err.into(),
            OperatorError::Transport(err) => Self::Unavailable(Outage::Transport(err)),
            OperatorError::Internal(_) => Self::UnknownType(err.to_string()),
            OperatorError::Invalid(message) => Self::Invalid { field: None, message },
            OperatorError::BlobUnavailable(err) => Self::Unavailable(Outage::ClaimCheck(err)),
            OperatorError::ClaimCheck(_) => Self::Invalid {
                field: None,
                message: err.to_string(),
            },
        }
    }
}
