//! Tests of `testing/servicebus-broker/src/namespace.rs`.

#![allow(clippy::unwrap_used)]

use fe2o3_amqp::types::messaging::{Data, Properties};
use fe2o3_amqp::types::primitives::Binary;

use super::*;

fn message(id: &str, label: &str) -> AmqpMessage {
    Message::builder()
        .properties(Properties {
            message_id: Some(MessageId::String(id.to_owned())),
            subject: Some(label.to_owned()),
            ..Properties::default()
        })
        .body(Body::Data(vec![Data(Binary::from(id.as_bytes().to_vec()))].into()))
        .build()
}

fn settings(max_delivery_count: u32) -> EntitySettings {
    EntitySettings {
        lock_duration: Duration::from_secs(5),
        max_delivery_count,
        duplicate_detection_window: Some(Duration::from_secs(60)),
        requires_session: false,
    }
}

fn header_count(message: &AmqpMessage) -> u32 {
    message.header.as_ref().unwrap().delivery_count
}

#[test]
fn paths_are_keys_without_scheme_host_or_case() {
    assert_eq!(entity_key("amqp://127.0.0.1:5672/Commit"), "commit");
    assert_eq!(
        entity_key("amqp://localhost/bosun-events/Subscriptions/x/$management"),
        "bosun-events/subscriptions/x/$management"
    );
    assert_eq!(entity_key("$cbs"), "$cbs");
}

#[test]
fn an_expired_lock_redelivers_and_counts_until_the_dead_letter_queue() {
    let mut namespace = Namespace::default();
    namespace.create_queue("q", settings(2)).unwrap();
    let now = OffsetDateTime::now_utc();
    namespace.enqueue("q", vec![message("a", "L")], now).unwrap();
    let first = namespace.lock_next("q", now).unwrap();
    assert_eq!(header_count(&first.message), 0);
    assert!(namespace.lock_next("q", now).is_none(), "locked");
    let later = now + Duration::from_secs(6);
    assert!(namespace.expire_locks(later));
    assert_eq!(
        namespace.settle(first.token, Settlement::Complete, later),
        Err(Refusal::LockLost)
    );
    let second = namespace.lock_next("q", later).unwrap();
    assert_eq!(header_count(&second.message), 1);
    namespace
        .settle(second.token, Settlement::Abandon { counted: true }, later)
        .unwrap();
    assert!(namespace.lock_next("q", later).is_none());
    let dead = namespace.peek("q/$deadletterqueue", 0, 10, None).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(header_count(&dead[0]), 2);
    assert_eq!(
        dead[0]
            .application_properties
            .as_ref()
            .unwrap()
            .0
            .get("DeadLetterReason"),
        Some(&SimpleValue::String(MAX_DELIVERY_COUNT_EXCEEDED.to_owned()))
    );
}

#[test]
fn a_session_lock_is_exclusive_ordered_and_expires() {
    let mut namespace = Namespace::default();
    let sessions = EntitySettings {
        requires_session: true,
        ..settings(10)
    };
    namespace.create_queue("s", sessions).unwrap();
    let now = OffsetDateTime::now_utc();
    let in_session = |id: &str, session: &str| {
        let mut message = message(id, "L");
        message.properties.as_mut().unwrap().group_id = Some(session.to_owned());
        message
    };
    let batch = vec![in_session("x1", "x"), in_session("y1", "y"), in_session("x2", "x")];
    namespace.enqueue("s", batch, now).unwrap();
    assert!(namespace.lock_next("s", now).is_none(), "a session receiver is needed");
    let (one, two) = (Uuid::new_v4(), Uuid::new_v4());
    let x = namespace.accept_session("s", None, one, now).unwrap().unwrap();
    assert_eq!(x.session_id, "x", "the session of the first message");
    assert!(matches!(
        namespace.accept_session("s", Some("x"), two, now),
        Err(Refusal::SessionCannotBeLocked(_))
    ));
    let y = namespace.accept_session("s", None, two, now).unwrap().unwrap();
    assert_eq!(y.session_id, "y");
    assert!(
        namespace
            .accept_session("s", None, Uuid::new_v4(), now)
            .unwrap()
            .is_none()
    );
    let first = namespace.lock_next_in_session("s", "x", one, now).unwrap().unwrap();
    assert_eq!(message_id(&first.message).as_deref(), Some("x1"));
    let second = namespace.lock_next_in_session("s", "x", one, now).unwrap().unwrap();
    assert_eq!(message_id(&second.message).as_deref(), Some("x2"));
    assert!(matches!(
        namespace.lock_next_in_session("s", "x", two, now),
        Err(Refusal::SessionLockLost)
    ));
    namespace
        .set_session_state("s", "x", Some(b"state".to_vec()), now)
        .unwrap();
    let later = now + Duration::from_secs(6);
    assert!(namespace.expire_locks(later));
    assert_eq!(namespace.session_state("s", "x", later), Err(Refusal::SessionLockLost));
    // (Swept, the lock token is simply unknown: message-lock-lost.)
    assert!(namespace.settle(first.token, Settlement::Complete, later).is_err());
    let again = namespace.accept_session("s", None, two, later).unwrap().unwrap();
    assert_eq!(again.session_id, "x", "free again, with its messages back");
    assert_eq!(namespace.session_state("s", "x", later), Ok(Some(b"state".to_vec())));
}

#[test]
fn duplicates_scheduling_and_rules() {
    let mut namespace = Namespace::default();
    namespace.create_queue("q", settings(10)).unwrap();
    namespace.create_topic("t", settings(10)).unwrap();
    namespace.create_subscription("t", "a", settings(10)).unwrap();
    namespace.create_subscription("t", "b", settings(10)).unwrap();
    namespace.put_rule("t", "b", "types", "sys.Label IN ('X')").unwrap();
    namespace.remove_rule("t", "b", "$Default").unwrap();
    let now = OffsetDateTime::now_utc();
    namespace.enqueue("q", vec![message("same", "L")], now).unwrap();
    namespace.enqueue("q", vec![message("same", "L")], now).unwrap();
    assert_eq!(namespace.message_count("q"), Some(1));
    let mut later = message("later", "L");
    annotate(
        &mut later,
        SCHEDULED_ENQUEUE_TIME,
        Value::Timestamp(timestamp(now + Duration::from_secs(2))),
    );
    namespace.enqueue("q", vec![later], now).unwrap();
    let first = namespace.lock_next("q", now).unwrap();
    assert_eq!(message_id(&first.message).as_deref(), Some("same"));
    namespace.settle(first.token, Settlement::Complete, now).unwrap();
    assert!(namespace.lock_next("q", now).is_none(), "scheduled");
    assert_eq!(namespace.peek("q", 0, 10, None).unwrap().len(), 1, "peek shows it");
    assert!(namespace.lock_next("q", now + Duration::from_secs(3)).is_some());
    namespace
        .enqueue("t", vec![message("e1", "Y"), message("e2", "X")], now)
        .unwrap();
    assert_eq!(namespace.message_count("t/subscriptions/a"), Some(2));
    assert_eq!(namespace.message_count("t/subscriptions/b"), Some(1));
    assert!(matches!(
        namespace.enqueue("nope", vec![message("x", "L")], now),
        Err(Refusal::NotFound(_))
    ));
}
