//! The request/response nodes: `$cbs` (claims-based security: `put-token`)
//! and each entity's `$management` node, with the Service Bus operations
//! `com.microsoft:renew-lock`, `peek-message`, `update-disposition`,
//! `renew-session-lock`, `get-session-state`, `set-session-state`,
//! `receive-by-sequence-number` (deferred messages), `schedule-message`
//! and `cancel-scheduled-message`, with Service Bus's body fields.
//! Requests carry `operation` (and for `$cbs` `type` and `name`) in their
//! application properties and a map body; a response goes to `reply-to`,
//! correlated by the request's message id, with `statusCode` and
//! `statusDescription` (`status-code` / `status-description` on `$cbs`, as
//! Service Bus answers) and, for an error, `errorCondition`.

use std::sync::Arc;

use fe2o3_amqp::Receiver;
use fe2o3_amqp::types::definitions::ErrorCondition;
use fe2o3_amqp::types::messaging::message::__private::{Deserializable, Serializable};
use fe2o3_amqp::types::messaging::{AmqpValue, ApplicationProperties, Body, Message, Properties};
use fe2o3_amqp::types::primitives::{Array, Binary, OrderedMap, SimpleValue, Symbol, Value};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::Shared;
use crate::namespace::{AmqpMessage, Refusal, Settlement, timestamp};
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

fn text(value: Option<Value>) -> Option<String> {
    match value? {
        Value::String(text) => Some(text),
        Value::Symbol(symbol) => Some(symbol.0),
        _ => None,
    }
}

fn sequence_numbers(request: &AmqpMessage) -> Vec<i64> {
    body_field(request, "sequence-numbers")
        .map(list_items)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|value| integer(Some(value)))
        .collect()
}

fn lock_tokens(request: &AmqpMessage) -> Vec<Uuid> {
    body_field(request, "lock-tokens")
        .map(list_items)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|value| match value {
            Value::Uuid(token) => Some(Uuid::from_bytes(*token.as_inner())),
            Value::String(token) => Uuid::parse_str(&token).ok(),
            _ => None,
        })
        .collect()
}

fn no_session_id() -> Answer {
    Answer::error(400, "amqp:invalid-field", "the request needs `session-id`".to_owned())
}

fn management(request: &AmqpMessage, entity: &str, shared: &Shared) -> Answer {
    if !lock(&shared.namespace).has_entity(entity) {
        return Answer::refused(&Refusal::NotFound(entity.to_owned()));
    }
    let now = OffsetDateTime::now_utc();
    match property(request, "operation").as_deref() {
        Some("com.microsoft:renew-lock") => {
            let tokens = lock_tokens(request);
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
            let session = text(body_field(request, "session-id"));
            let peeked =
                lock(&shared.namespace).peek(entity, from, usize::try_from(count).unwrap_or(0), session.as_deref());
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
        Some("com.microsoft:renew-session-lock") => {
            let Some(session) = text(body_field(request, "session-id")) else {
                return no_session_id();
            };
            match lock(&shared.namespace).renew_session_lock(entity, &session, now) {
                Ok(until) => Answer::ok(200, map(vec![("expiration", Value::Timestamp(timestamp(until)))])),
                Err(refusal) => Answer::refused(&refusal),
            }
        }
        Some("com.microsoft:get-session-state") => {
            let Some(session) = text(body_field(request, "session-id")) else {
                return no_session_id();
            };
            match lock(&shared.namespace).session_state(entity, &session, now) {
                Ok(state) => Answer::ok(
                    200,
                    map(vec![(
                        "session-state",
                        state.map_or(Value::Null, |state| Value::Binary(Binary::from(state))),
                    )]),
                ),
                Err(refusal) => Answer::refused(&refusal),
            }
        }
        Some("com.microsoft:set-session-state") => {
            let Some(session) = text(body_field(request, "session-id")) else {
                return no_session_id();
            };
            let state = match body_field(request, "session-state") {
                None | Some(Value::Null) => None,
                Some(Value::Binary(state)) => Some(state.into_vec()),
                Some(Value::String(state)) => Some(state.into_bytes()),
                Some(_) => {
                    return Answer::error(400, "amqp:invalid-field", "session-state must be binary".to_owned());
                }
            };
            match lock(&shared.namespace).set_session_state(entity, &session, state, now) {
                Ok(()) => Answer::ok(200, Value::Null),
                Err(refusal) => Answer::refused(&refusal),
            }
        }
        Some("com.microsoft:receive-by-sequence-number") => {
            let sequences = sequence_numbers(request);
            let session = text(body_field(request, "session-id"));
            // Receiver settle mode first (0) is receive-and-delete; second (1) peek-lock.
            let peek_lock = integer(body_field(request, "receiver-settle-mode")).unwrap_or(1) != 0;
            let received =
                lock(&shared.namespace).receive_deferred(entity, &sequences, session.as_deref(), peek_lock, now);
            match received {
                Ok(messages) => {
                    let entries = messages
                        .into_iter()
                        .filter_map(|(message, token)| {
                            let bytes = serde_amqp::to_vec(&Serializable(message)).ok()?;
                            let mut entry = vec![("message", Value::Binary(Binary::from(bytes)))];
                            if let Some(token) = token {
                                entry.push(("lock-token", Value::Uuid(token.into_bytes().into())));
                            }
                            Some(map(entry))
                        })
                        .collect();
                    Answer::ok(200, map(vec![("messages", Value::List(entries))]))
                }
                Err(refusal) => Answer::refused(&refusal),
            }
        }
        Some("com.microsoft:update-disposition") => {
            let Some(status) = text(body_field(request, "disposition-status")) else {
                return Answer::error(400, "amqp:invalid-field", "no disposition-status".to_owned());
            };
            let settlement = match status.as_str() {
                "completed" => Settlement::Complete,
                "abandoned" => Settlement::Abandon { counted: true },
                "defered" | "deferred" => Settlement::Defer,
                "suspended" => Settlement::DeadLetter {
                    reason: text(body_field(request, "deadletter-reason")).unwrap_or_default(),
                    description: text(body_field(request, "deadletter-description")).unwrap_or_default(),
                },
                other => {
                    return Answer::error(
                        400,
                        "amqp:invalid-field",
                        format!("unknown disposition-status `{other}`"),
                    );
                }
            };
            let mut namespace = lock(&shared.namespace);
            for token in lock_tokens(request) {
                if let Err(refusal) = namespace.settle(token, settlement.clone(), now) {
                    return Answer::refused(&refusal);
                }
            }
            drop(namespace);
            shared.changed.notify_waiters();
            Answer::ok(200, Value::Null)
        }
        Some("com.microsoft:schedule-message") => {
            let mut messages = Vec::new();
            for entry in body_field(request, "messages").map(list_items).unwrap_or_default() {
                let encoded = match &entry {
                    Value::Map(entry) => entry.get(&Value::String("message".to_owned())),
                    _ => None,
                };
                let Some(Value::Binary(encoded)) = encoded else {
                    return Answer::error(
                        400,
                        "amqp:invalid-field",
                        "each message needs `message`, binary".to_owned(),
                    );
                };
                match serde_amqp::from_slice::<Deserializable<AmqpMessage>>(encoded) {
                    Ok(decoded) => messages.push(decoded.0),
                    Err(err) => {
                        return Answer::error(400, "amqp:decode-error", format!("a message does not decode: {err}"));
                    }
                }
            }
            let scheduled = lock(&shared.namespace).schedule(entity, messages, now);
            shared.changed.notify_waiters();
            match scheduled {
                Ok(numbers) => Answer::ok(
                    200,
                    map(vec![(
                        "sequence-numbers",
                        Value::Array(Array::from(numbers.into_iter().map(Value::Long).collect::<Vec<_>>())),
                    )]),
                ),
                Err(refusal) => Answer::refused(&refusal),
            }
        }
        Some("com.microsoft:cancel-scheduled-message") => {
            let sequences = sequence_numbers(request);
            match lock(&shared.namespace).cancel_scheduled(entity, &sequences, now) {
                Ok(()) => Answer::ok(200, Value::Null),
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
