//! The request/response nodes: `$cbs` (claims-based security: `put-token`)
//! and each entity's `$management` node, with the Service Bus operations
//! bosun calls: `com.microsoft:renew-lock` and `com.microsoft:peek-message`.
//! Requests carry `operation` (and for `$cbs` `type` and `name`) in their
//! application properties and a map body; a response goes to `reply-to`,
//! correlated by the request's message id, with `statusCode` and
//! `statusDescription` (`status-code` / `status-description` on `$cbs`, as
//! Service Bus answers) and, for an error, `errorCondition`.

use std::sync::Arc;

use fe2o3_amqp::Receiver;
use fe2o3_amqp::types::definitions::ErrorCondition;
use fe2o3_amqp::types::messaging::message::__private::Serializable;
use fe2o3_amqp::types::messaging::{AmqpValue, ApplicationProperties, Body, Message, Properties};
use fe2o3_amqp::types::primitives::{Array, Binary, OrderedMap, SimpleValue, Symbol, Value};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::Shared;
use crate::namespace::{AmqpMessage, Refusal, timestamp};
use crate::sas::check_token;
use crate::server::{Authorized, Replies, apply_outcomes, lock};

/// The text of an AMQP error condition.
pub(crate) fn condition_text(condition: &ErrorCondition) -> String {
    match condition {
        ErrorCondition::AmqpError(error) => Symbol::from(error).0,
        ErrorCondition::ConnectionError(error) => Symbol::from(error).0,
        ErrorCondition::SessionError(error) => Symbol::from(error).0,
        ErrorCondition::LinkError(error) => Symbol::from(error).0,
        ErrorCondition::Custom(symbol) => symbol.0.clone(),
    }
}

/// A response: status, description, error condition, body.
struct Answer {
    status: u16,
    description: String,
    condition: Option<&'static str>,
    body: Value,
}

impl Answer {
    fn ok(status: u16, body: Value) -> Self {
        Self {
            status,
            description: if status == 204 { "No Content" } else { "OK" }.to_owned(),
            condition: None,
            body,
        }
    }

    fn refused(refusal: &Refusal) -> Self {
        Self {
            status: refusal.status_code(),
            description: refusal.to_string(),
            condition: Some(refusal.condition()),
            body: Value::Null,
        }
    }

    fn error(status: u16, condition: &'static str, description: String) -> Self {
        Self {
            status,
            description,
            condition: Some(condition),
            body: Value::Null,
        }
    }
}

/// Serves the requests of one request link to `node` (`$cbs` or
/// `<entity>/$management`).
pub(crate) async fn serve(
    mut receiver: Receiver,
    node: String,
    shared: Arc<Shared>,
    authorized: Arc<Authorized>,
    replies: Replies,
) {
    let cbs = node == "$cbs";
    let entity = node
        .strip_suffix("$management")
        .unwrap_or_default()
        .trim_end_matches('/')
        .to_owned();
    loop {
        let Ok(delivery) = receiver.recv::<Body<Value>>().await else {
            return;
        };
        if receiver.accept(&delivery).await.is_err() {
            return;
        }
        let request = delivery.into_message();
        apply_outcomes(&shared);
        let answer = if cbs {
            put_token(&request, &shared, &authorized)
        } else {
            management(&request, &entity, &shared)
        };
        let properties = request.properties.as_ref();
        // Without a `reply-to` (Microsoft's pyamqp) the answer goes to
        // the client's link whose target is this node.
        let reply_to = properties
            .and_then(|p| p.reply_to.clone())
            .unwrap_or_else(|| node.clone());
        let response = response(answer, properties.and_then(|p| p.message_id.clone()), cbs);
        // The client attaches its reply link before it sends, but the two
        // links are served by different tasks: wait for it a little.
        let mut link = lock(&replies).get(&reply_to).cloned();
        for _ in 0..REPLY_LINK_WAITS {
            if link.is_some() {
                break;
            }
            tokio::time::sleep(REPLY_LINK_POLL).await;
            link = lock(&replies).get(&reply_to).cloned();
        }
        match link {
            Some(link) => {
                let _ = link.send(response);
            }
            None => tracing::warn!(node, reply_to, "no reply link for a request; its answer is dropped"),
        }
    }
}

/// How long a request waits for its reply link: `REPLY_LINK_WAITS` times
/// `REPLY_LINK_POLL`.
const REPLY_LINK_WAITS: u32 = 400;
const REPLY_LINK_POLL: std::time::Duration = std::time::Duration::from_millis(5);

fn response(answer: Answer, correlation: Option<fe2o3_amqp::types::messaging::MessageId>, cbs: bool) -> AmqpMessage {
    let (code, text) = if cbs {
        ("status-code", "status-description")
    } else {
        ("statusCode", "statusDescription")
    };
    let mut application = ApplicationProperties::builder()
        .insert(code, SimpleValue::Int(i32::from(answer.status)))
        .insert(text, SimpleValue::String(answer.description));
    if let Some(condition) = answer.condition {
        application = application.insert("errorCondition", SimpleValue::Symbol(Symbol::from(condition)));
    }
    Message::builder()
        .properties(Properties {
            correlation_id: correlation,
            ..Properties::default()
        })
        .application_properties(application.build())
        .body(Body::Value(AmqpValue(answer.body)))
        .build()
}

fn property(request: &AmqpMessage, name: &str) -> Option<String> {
    match request.application_properties.as_ref()?.0.get(name)? {
        SimpleValue::String(text) => Some(text.clone()),
        SimpleValue::Symbol(symbol) => Some(symbol.0.clone()),
        _ => None,
    }
}

fn put_token(request: &AmqpMessage, shared: &Shared, authorized: &Authorized) -> Answer {
    if property(request, "operation").as_deref() != Some("put-token") {
        return Answer::error(400, "amqp:not-implemented", "$cbs only takes put-token".to_owned());
    }
    let (Some(token_type), Some(audience)) = (property(request, "type"), property(request, "name")) else {
        return Answer::error(400, "amqp:invalid-field", "put-token needs type and name".to_owned());
    };
    let token = match &request.body {
        Body::Value(AmqpValue(Value::String(token))) => token.clone(),
        _ => return Answer::error(400, "amqp:invalid-field", "the token is the body, a string".to_owned()),
    };
    match check_token(
        shared.key.as_ref(),
        &token_type,
        &token,
        &audience,
        OffsetDateTime::now_utc(),
    ) {
        Ok(()) => {
            authorized.add(&audience);
            Answer {
                status: 202,
                description: "Accepted".to_owned(),
                condition: None,
                body: Value::Null,
            }
        }
        Err(refusal) => Answer::error(401, "amqp:unauthorized-access", refusal.to_string()),
    }
}

fn body_field(request: &AmqpMessage, name: &str) -> Option<Value> {
    match &request.body {
        Body::Value(AmqpValue(Value::Map(map))) => map.get(&Value::String(name.to_owned())).cloned(),
        _ => None,
    }
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(
        entries
            .into_iter()
            .map(|(key, value)| (Value::String(key.to_owned()), value))
            .collect::<OrderedMap<Value, Value>>(),
    )
}

fn list_items(value: Value) -> Vec<Value> {
    match value {
        Value::List(items) => items,
        Value::Array(items) => items.into_inner(),
        _ => Vec::new(),
    }
}

fn integer(value: Option<Value>) -> Option<i64> {
    match value? {
        Value::Long(value) => Some(value),
        Value::Int(value) => Some(i64::from(value)),
        Value::Uint(value) => Some(i64::from(value)),
        Value::Ulong(value) => i64::try_from(value).ok(),
        Value::Short(value) => Some(i64::from(value)),
        _ => None,
    }
}

fn management(request: &AmqpMessage, entity: &str, shared: &Shared) -> Answer {
    if !lock(&shared.namespace).has_entity(entity) {
        return Answer::refused(&Refusal::NotFound(entity.to_owned()));
    }
    let now = OffsetDateTime::now_utc();
    match property(request, "operation").as_deref() {
        Some("com.microsoft:renew-lock") => {
            let tokens: Vec<Uuid> = body_field(request, "lock-tokens")
                .map(list_items)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|value| match value {
                    Value::Uuid(token) => Some(Uuid::from_bytes(*token.as_inner())),
                    _ => None,
                })
                .collect();
            match lock(&shared.namespace).renew(&tokens, now) {
                Ok(expirations) => Answer::ok(
                    200,
                    map(vec![(
                        "expirations",
                        Value::Array(Array::from(
                            expirations
                                .into_iter()
                                .map(|at| Value::Timestamp(timestamp(at)))
                                .collect::<Vec<_>>(),
                        )),
                    )]),
                ),
                Err(refusal) => Answer::refused(&refusal),
            }
        }
        Some("com.microsoft:peek-message") => {
            let from = integer(body_field(request, "from-sequence-number")).unwrap_or(0);
            let count = integer(body_field(request, "message-count")).unwrap_or(1).max(0);
            let peeked = lock(&shared.namespace).peek(entity, from, usize::try_from(count).unwrap_or(0));
            match peeked {
                Ok(messages) if messages.is_empty() => Answer::ok(204, Value::Null),
                Ok(messages) => {
                    let entries = messages
                        .iter()
                        .filter_map(|message| serde_amqp::to_vec(&Serializable(message)).ok())
                        .map(|bytes| map(vec![("message", Value::Binary(Binary::from(bytes)))]))
                        .collect();
                    Answer::ok(200, map(vec![("messages", Value::List(entries))]))
                }
                Err(refusal) => Answer::refused(&refusal),
            }
        }
        Some(other) => Answer::error(
            501,
            "amqp:not-implemented",
            format!("this test broker does not implement `{other}`"),
        ),
        None => Answer::error(400, "amqp:invalid-field", "no operation".to_owned()),
    }
}
