//! Tests of `src/backends/servicebus/amqp.rs`.

use fe2o3_amqp::types::definitions::AmqpError as AmqpCondition;
use fe2o3_amqp::types::messaging::{AmqpValue, Body, Message};
use fe2o3_amqp::types::primitives::{Array, SimpleValue};
use fe2o3_amqp_management::error::StatusError;
use fe2o3_amqp_management::request::Request;
use fe2o3_amqp_management::response::Response;

use super::*;

#[test]
fn dead_letter_carries_reason_and_description_in_the_error_info() {
    let rejected = dead_letter_outcome("invalid-field", "payload.branch is empty");
    let error = rejected.error.unwrap();
    assert_eq!(condition_symbol(&error.condition), "com.microsoft:dead-letter");
    let info = error.info.unwrap();
    assert_eq!(
        info.get(&Symbol::from("DeadLetterReason")),
        Some(&Value::String("invalid-field".into()))
    );
    assert_eq!(
        info.get(&Symbol::from("DeadLetterErrorDescription")),
        Some(&Value::String("payload.branch is empty".into()))
    );
    let long = "x".repeat(10_000);
    let truncated = dead_letter_outcome(&long, &long).error.unwrap();
    assert_eq!(truncated.description.map(|d| d.len()), Some(DEAD_LETTER_TEXT_MAX));
}

#[test]
fn abandon_counts_the_delivery() {
    assert_eq!(abandon_outcome().delivery_failed, Some(true));
}

#[test]
fn broker_errors_are_sorted_by_what_happens_next() {
    let not_found = definitions::Error::new(AmqpCondition::NotFound, Some("no queue".to_owned()), None);
    assert!(matches!(
        classify_remote("send", &not_found),
        AmqpFailure::NotFound { .. }
    ));
    let lock = definitions::Error::new(
        ErrorCondition::Custom(Symbol::from("com.microsoft:message-lock-lost")),
        None,
        None,
    );
    assert!(matches!(
        classify_remote("complete", &lock),
        AmqpFailure::LockLost { .. }
    ));
    let full = definitions::Error::new(AmqpCondition::ResourceLimitExceeded, None, None);
    let failure = classify_remote("send", &full);
    assert!(matches!(failure, AmqpFailure::Rejected { ref text, .. } if text.contains("amqp:resource-limit-exceeded")));
    let status = ManagementError::Status(StatusError {
        code: fe2o3_amqp_management::status::StatusCode(std::num::NonZeroU16::new(410).unwrap()),
        description: Some("MessageLockLost".into()),
    });
    assert!(matches!(from_management("renew", status), AmqpFailure::LockLost { .. }));
}

#[test]
fn failures_keep_the_error_they_came_from() {
    use std::error::Error as _;

    let full = definitions::Error::new(AmqpCondition::ResourceLimitExceeded, Some("quota".to_owned()), None);
    let failure = classify_remote("send", &full);
    assert_eq!(failure.to_string(), "send: amqp:resource-limit-exceeded: quota");
    let source = failure.source().expect("the broker's error is the source");
    assert_eq!(source.downcast_ref::<definitions::Error>(), Some(&full));

    let status = ManagementError::Status(StatusError {
        code: fe2o3_amqp_management::status::StatusCode(std::num::NonZeroU16::new(401).unwrap()),
        description: Some("token expired".into()),
    });
    let failure = from_management("put-token", status);
    assert!(matches!(failure, AmqpFailure::Unauthorized { .. }), "{failure:?}");
    assert_eq!(
        failure.to_string(),
        "not authorized: put-token: status 401 token expired"
    );
    assert!(
        failure
            .source()
            .is_some_and(|source| source.downcast_ref::<ManagementError>().is_some()),
        "{failure:?}"
    );
    // A clone (handed to every waiter) keeps it too.
    assert!(failure.clone().source().is_some());

    let timeout = AmqpFailure::Timeout {
        text: "renew: no answer within 10 ms".into(),
    };
    assert!(timeout.source().is_none());
}

#[test]
fn management_requests_have_the_service_bus_shape() {
    let token = Uuid::parse_str("00112233-4455-6677-8899-aabbccddeeff").unwrap();
    let message = RenewLockRequest {
        lock_tokens: vec![token],
        server_timeout: Duration::from_secs(10),
    }
    .into_message();
    let properties = message.application_properties.as_ref().unwrap();
    assert_eq!(
        properties.0.get("operation"),
        Some(&SimpleValue::String("com.microsoft:renew-lock".into()))
    );
    assert_eq!(
        properties.0.get("com.microsoft:server-timeout"),
        Some(&SimpleValue::Uint(10_000))
    );
    let AmqpValue(Value::Map(body)) = &message.body else {
        panic!("the body is a map: {:?}", message.body);
    };
    assert_eq!(
        body.get(&Value::String("lock-tokens".into())),
        Some(&Value::Array(Array::from(vec![Value::Uuid(token.into_bytes().into())])))
    );
    let peek = PeekRequest {
        from_sequence: 5,
        count: 10,
        server_timeout: Duration::from_secs(10),
    }
    .into_message();
    let AmqpValue(Value::Map(body)) = &peek.body else {
        panic!("the body is a map");
    };
    assert_eq!(
        body.get(&Value::String("from-sequence-number".into())),
        Some(&Value::Long(5))
    );
    assert_eq!(body.get(&Value::String("message-count".into())), Some(&Value::Int(10)));
}

#[test]
fn management_responses_decode() {
    let response = Message::builder()
        .body(Body::Value(map_body(vec![(
            "expirations",
            Value::Array(Array::from(vec![Value::Timestamp(Timestamp::from(1_700_000_000_000))])),
        )])))
        .build();
    let renewed = RenewLockResponse::decode_message(response).unwrap();
    assert_eq!(
        renewed
            .expirations
            .iter()
            .map(|at| at.unix_timestamp())
            .collect::<Vec<_>>(),
        [1_700_000_000]
    );
    let entry = Value::Map(
        [(Value::String("message".into()), Value::Binary(vec![1, 2, 3].into()))]
            .into_iter()
            .collect(),
    );
    let response = Message::builder()
        .body(Body::Value(map_body(vec![("messages", Value::List(vec![entry]))])))
        .build();
    assert_eq!(
        PeekResponse::decode_message(response).unwrap().messages,
        [vec![1, 2, 3]]
    );
}
