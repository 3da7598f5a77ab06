//! The Service Bus `$management` requests bosun sends over AMQP
//! (`com.microsoft:renew-lock`, `renew-session-lock`, `peek-message`) and
//! their answers, as `fe2o3-amqp-management` requests and responses: the
//! body shapes Service Bus's own SDKs use. Pure encoding and decoding; the
//! calls are made by the transport (`transport/links.rs`).

use std::time::Duration;

use fe2o3_amqp::types::messaging::{AmqpValue, ApplicationProperties, Body, Message};
use fe2o3_amqp::types::primitives::{Array, OrderedMap, SimpleValue, Value};
use fe2o3_amqp_management::error::{Error as ManagementError, InvalidType, StatusCodeNotFound, StatusError};
use fe2o3_amqp_management::request::Request;
use fe2o3_amqp_management::response::Response;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::ports::transport::from_unix_ms;

/// `com.microsoft:server-timeout` for a `$management` request.
fn server_timeout(limit: Duration) -> SimpleValue {
    SimpleValue::Uint(u32::try_from(limit.as_millis()).unwrap_or(u32::MAX))
}

pub(crate) fn map_body(entries: Vec<(&str, Value)>) -> AmqpValue<Value> {
    AmqpValue(Value::Map(
        entries
            .into_iter()
            .map(|(key, value)| (Value::String(key.to_owned()), value))
            .collect::<OrderedMap<Value, Value>>(),
    ))
}

fn body_map(body: Body<Value>) -> Option<OrderedMap<Value, Value>> {
    match body {
        Body::Value(AmqpValue(Value::Map(map))) => Some(map),
        _ => None,
    }
}

fn list_items(value: Value) -> Vec<Value> {
    match value {
        Value::List(items) => items,
        Value::Array(items) => items.into_inner(),
        _ => Vec::new(),
    }
}

/// Errors a `$management` response can carry.
#[derive(Debug)]
pub(crate) struct ResponseError(ManagementError);

impl From<StatusError> for ResponseError {
    fn from(err: StatusError) -> Self {
        Self(ManagementError::Status(err))
    }
}

impl From<InvalidType> for ResponseError {
    fn from(err: InvalidType) -> Self {
        Self(ManagementError::DecodeError(Some(err)))
    }
}

impl From<StatusCodeNotFound> for ResponseError {
    fn from(_: StatusCodeNotFound) -> Self {
        Self(ManagementError::StatusCodeNotFound)
    }
}

impl From<ResponseError> for ManagementError {
    fn from(err: ResponseError) -> Self {
        err.0
    }
}

/// `com.microsoft:renew-lock`: extends the locks of `lock_tokens`.
#[derive(Debug)]
pub(crate) struct RenewLockRequest {
    /// The locks to renew.
    pub(crate) lock_tokens: Vec<Uuid>,
    /// How long the broker may take.
    pub(crate) server_timeout: Duration,
}

/// The new lock expiries, in request order.
#[derive(Debug)]
pub(crate) struct RenewLockResponse {
    /// One expiry per lock token.
    pub(crate) expirations: Vec<OffsetDateTime>,
}

impl Request for RenewLockRequest {
    const OPERATION: &'static str = "com.microsoft:renew-lock";
    type Response = RenewLockResponse;
    type Body = AmqpValue<Value>;

    fn encode_application_properties(&mut self) -> Option<ApplicationProperties> {
        Some(
            ApplicationProperties::builder()
                .insert("com.microsoft:server-timeout", server_timeout(self.server_timeout))
                .build(),
        )
    }

    fn encode_body(self) -> Self::Body {
        let tokens = self
            .lock_tokens
            .into_iter()
            .map(|token| Value::Uuid(token.into_bytes().into()))
            .collect::<Vec<_>>();
        map_body(vec![("lock-tokens", Value::Array(Array::from(tokens)))])
    }
}

impl Response for RenewLockResponse {
    const STATUS_CODE: u16 = 200;
    type Body = Body<Value>;
    type Error = ResponseError;

    fn decode_message(message: Message<Self::Body>) -> Result<Self, Self::Error> {
        let expirations = body_map(message.body)
            .and_then(|mut map| map.swap_remove(&Value::String("expirations".into())))
            .map(list_items)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|value| match value {
                Value::Timestamp(at) => Some(from_unix_ms(at.milliseconds())),
                _ => None,
            })
            .collect();
        Ok(Self { expirations })
    }
}

/// `com.microsoft:renew-session-lock`: extends the lock of a session (and
/// of the messages received in it).
#[derive(Debug)]
pub(crate) struct RenewSessionLockRequest {
    /// The session.
    pub(crate) session_id: String,
    /// How long the broker may take.
    pub(crate) server_timeout: Duration,
}

/// The session lock's new expiry.
#[derive(Debug)]
pub(crate) struct RenewSessionLockResponse {
    /// When the session lock ends unless renewed again.
    pub(crate) expiration: Option<OffsetDateTime>,
}

impl Request for RenewSessionLockRequest {
    const OPERATION: &'static str = "com.microsoft:renew-session-lock";
    type Response = RenewSessionLockResponse;
    type Body = AmqpValue<Value>;

    fn encode_application_properties(&mut self) -> Option<ApplicationProperties> {
        Some(
            ApplicationProperties::builder()
                .insert("com.microsoft:server-timeout", server_timeout(self.server_timeout))
                .build(),
        )
    }

    fn encode_body(self) -> Self::Body {
        map_body(vec![("session-id", Value::String(self.session_id))])
    }
}

impl Response for RenewSessionLockResponse {
    const STATUS_CODE: u16 = 200;
    type Body = Body<Value>;
    type Error = ResponseError;

    fn decode_message(message: Message<Self::Body>) -> Result<Self, Self::Error> {
        let expiration = body_map(message.body)
            .and_then(|mut map| map.swap_remove(&Value::String("expiration".into())))
            .and_then(|value| match value {
                Value::Timestamp(at) => Some(from_unix_ms(at.milliseconds())),
                _ => None,
            });
        Ok(Self { expiration })
    }
}

/// `com.microsoft:peek-message`: up to `count` messages from
/// `from_sequence` on, without locking them.
#[derive(Debug)]
pub(crate) struct PeekRequest {
    /// The first sequence number to look at.
    pub(crate) from_sequence: i64,
    /// How many messages at most.
    pub(crate) count: i32,
    /// How long the broker may take.
    pub(crate) server_timeout: Duration,
}

/// The peeked messages, encoded.
#[derive(Debug)]
pub(crate) struct PeekResponse {
    /// Each message as the broker encoded it.
    pub(crate) messages: Vec<Vec<u8>>,
}

impl Request for PeekRequest {
    const OPERATION: &'static str = "com.microsoft:peek-message";
    type Response = PeekResponse;
    type Body = AmqpValue<Value>;

    fn encode_application_properties(&mut self) -> Option<ApplicationProperties> {
        Some(
            ApplicationProperties::builder()
                .insert("com.microsoft:server-timeout", server_timeout(self.server_timeout))
                .build(),
        )
    }

    fn encode_body(self) -> Self::Body {
        map_body(vec![
            ("from-sequence-number", Value::Long(self.from_sequence)),
            ("message-count", Value::Int(self.count)),
        ])
    }
}

impl Response for PeekResponse {
    const STATUS_CODE: u16 = 200;
    type Body = Body<Value>;
    type Error = ResponseError;

    fn decode_message(message: Message<Self::Body>) -> Result<Self, Self::Error> {
        let messages = body_map(message.body)
            .and_then(|mut map| map.swap_remove(&Value::String("messages".into())))
            .map(list_items)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|entry| match entry {
                Value::Map(mut fields) => match fields.swap_remove(&Value::String("message".into())) {
                    Some(Value::Binary(bytes)) => Some(bytes.into_vec()),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        Ok(Self { messages })
    }
}

/// Whether a `$management` status error means "nothing there" (204 for an
/// empty peek).
pub(crate) fn is_no_content(error: &ManagementError) -> bool {
    matches!(error, ManagementError::Status(status) if status.code.0.get() == 204)
}
