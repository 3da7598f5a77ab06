//! The broker's Service Bus semantics through a real AMQP client
//! (`fe2o3-amqp`'s client side): peek-lock expiry and delivery counts,
//! the maximum delivery count and the dead-letter sub-queue, duplicate
//! detection, scheduled messages, batches, routing by rule, refused
//! attaches, and the fault hooks (a lock expired early, dropped
//! connections).

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bosun_servicebus_broker::{
    Broker, BrokerConfig, EntitySettings, MAX_DELIVERY_COUNT_EXCEEDED, RunningBroker, SharedAccessKey,
};
use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::{self, ErrorCondition, Fields, ReceiverSettleMode, SenderSettleMode};
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::message::__private::Serializable;
use fe2o3_amqp::types::messaging::{
    Batch, Body, Data, Message, MessageAnnotations, MessageId, Modified, Outcome, Properties,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp, Value};
use fe2o3_amqp::{Connection, Delivery, Receiver, Sendable, Sender, Session};
use fe2o3_amqp_cbs::client::CbsClient;
use fe2o3_amqp_cbs::token::CbsToken;
use time::OffsetDateTime;
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(3);

struct Client {
    _connection: ConnectionHandle<()>,
    session: SessionHandle<()>,
}

async fn connect(broker: &RunningBroker) -> Client {
    let stream = TcpStream::connect(("127.0.0.1", broker.port())).await.unwrap();
    let mut connection = Connection::builder()
        .container_id("semantics-test")
        .scheme("amqp")
        .hostname("127.0.0.1")
        .sasl_profile(SaslProfile::Anonymous)
        .open_with_stream(stream)
        .await
        .unwrap();
    let session = Session::begin(&mut connection).await.unwrap();
    Client {
        _connection: connection,
        session,
    }
}

async fn open_broker() -> RunningBroker {
    Broker::start(BrokerConfig { key: None }).await.unwrap()
}

fn settings(lock_ms: u64, max_delivery_count: u32) -> EntitySettings {
    EntitySettings {
        lock_duration: Duration::from_millis(lock_ms),
        max_delivery_count,
        duplicate_detection_window: Some(Duration::from_secs(60)),
        requires_session: false,
    }
}

fn message(id: &str, label: &str) -> Message<Data> {
    Message::builder()
        .properties(Properties {
            message_id: Some(MessageId::String(id.to_owned())),
            subject: Some(label.to_owned()),
            ..Properties::default()
        })
        .data(Binary::from(id.as_bytes().to_vec()))
        .build()
}

impl Client {
    async fn sender(&mut self, path: &str) -> Sender {
        Sender::builder()
            .name(format!("send-{path}"))
            .target(path)
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .attach(&mut self.session)
            .await
            .unwrap()
    }

    async fn send(&mut self, path: &str, message: Message<Data>) -> Outcome {
        let mut sender = self.sender(path).await;
        let outcome = sender.send(message).await.unwrap();
        sender.close().await.unwrap();
        outcome
    }

    async fn receiver(&mut self, path: &str, credit: u32) -> Receiver {
        let mut receiver = Receiver::builder()
            .name(format!("receive-{path}-{credit}"))
            .source(path)
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .receiver_settle_mode(ReceiverSettleMode::Second)
            .credit_mode(CreditMode::Manual)
            .auto_accept(false)
            .attach(&mut self.session)
            .await
            .unwrap();
        receiver.set_credit(credit).await.unwrap();
        receiver
    }
}

async fn next(receiver: &mut Receiver, within: Duration) -> Option<Delivery<Body<Value>>> {
    tokio::time::timeout(within, receiver.recv::<Body<Value>>())
        .await
        .ok()
        .map(|delivery| delivery.unwrap())
}

fn annotation<'a>(delivery: &'a Delivery<Body<Value>>, name: &str) -> Option<&'a Value> {
    delivery
        .message()
        .message_annotations
        .as_ref()?
        .0
        .iter()
        .find(|(key, _)| matches!(key, OwnedKey::Symbol(symbol) if symbol.0 == name))
        .map(|(_, value)| value)
}

/// The lock token: the delivery tag, a .NET `Guid` (`ToByteArray` order).
fn lock_token(delivery: &Delivery<Body<Value>>) -> uuid::Uuid {
    let tag: [u8; 16] = delivery
        .delivery_tag()
        .as_slice()
        .try_into()
        .expect("a 16-byte delivery tag");
    uuid::Uuid::from_bytes_le(tag)
}

async fn eventually(condition: impl Fn() -> bool, what: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !condition() {
        assert!(tokio::time::Instant::now() < deadline, "not {what} within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn prior_deliveries(delivery: &Delivery<Body<Value>>) -> u32 {
    delivery
        .message()
        .header
        .as_ref()
        .map_or(0, |header| header.delivery_count)
}

#[tokio::test]
async fn an_expired_lock_makes_the_message_available_again_and_counts_it() {
    let broker = open_broker().await;
    broker.create_queue("q", settings(300, 10)).unwrap();
    let mut client = connect(&broker).await;
    assert!(matches!(
        client.send("q", message("a", "L")).await,
        Outcome::Accepted(_)
    ));
    let mut receiver = client.receiver("q", 5).await;
    let first = next(&mut receiver, WAIT).await.expect("delivered");
    assert_eq!(prior_deliveries(&first), 0);
    for name in ["x-opt-sequence-number", "x-opt-enqueued-time", "x-opt-locked-until"] {
        assert!(annotation(&first, name).is_some(), "{name} is set");
    }
    assert!(
        annotation(&first, "x-opt-lock-token").is_none(),
        "as on Service Bus, the lock token is the delivery tag only"
    );
    let second = next(&mut receiver, WAIT)
        .await
        .expect("redelivered after the lock expired");
    assert_eq!(prior_deliveries(&second), 1);
    assert_ne!(lock_token(&first), lock_token(&second), "a new delivery, a new lock");
    receiver.accept(&second).await.unwrap();
    // The client's accept does not wait for the broker's confirmation.
    eventually(|| broker.message_count("q") == Some(0), "completed").await;
}

#[tokio::test]
async fn abandons_up_to_the_maximum_delivery_count_dead_letter_the_message() {
    let broker = open_broker().await;
    broker.create_queue("q", settings(30_000, 2)).unwrap();
    let mut client = connect(&broker).await;
    client.send("q", message("a", "L")).await;
    let mut receiver = client.receiver("q", 10).await;
    for _ in 0..2 {
        let delivery = next(&mut receiver, WAIT).await.expect("delivered");
        let failed = Modified {
            delivery_failed: Some(true),
            undeliverable_here: None,
            message_annotations: None,
        };
        receiver.modify(&delivery, failed).await.unwrap();
    }
    assert!(next(&mut receiver, Duration::from_millis(200)).await.is_none());
    let mut dead = client.receiver("q/$DeadLetterQueue", 10).await;
    let delivery = next(&mut dead, WAIT).await.expect("dead-lettered");
    assert_eq!(prior_deliveries(&delivery), 2);
    let properties = delivery.message().application_properties.as_ref().unwrap();
    assert_eq!(
        properties.0.get("DeadLetterReason"),
        Some(&SimpleValue::String(MAX_DELIVERY_COUNT_EXCEEDED.to_owned()))
    );

    // Rejected with com.microsoft:dead-letter: the reason and description kept.
    client.send("q", message("b", "L")).await;
    let delivery = next(&mut receiver, WAIT).await.expect("delivered");
    let mut info = Fields::new();
    info.insert(Symbol::from("DeadLetterReason"), Value::String("invalid-field".into()));
    info.insert(
        Symbol::from("DeadLetterErrorDescription"),
        Value::String("payload.branch is empty".into()),
    );
    let error = definitions::Error::new(
        ErrorCondition::Custom(Symbol::from("com.microsoft:dead-letter")),
        None,
        info,
    );
    receiver.reject(&delivery, error).await.unwrap();
    let delivery = next(&mut dead, WAIT).await.expect("dead-lettered");
    let properties = delivery.message().application_properties.as_ref().unwrap();
    assert_eq!(
        properties.0.get("DeadLetterErrorDescription"),
        Some(&SimpleValue::String("payload.branch is empty".into()))
    );
}

#[tokio::test]
async fn duplicates_are_dropped_scheduled_messages_wait_and_batches_split() {
    let broker = open_broker().await;
    broker.create_queue("q", settings(30_000, 10)).unwrap();
    let mut client = connect(&broker).await;
    client.send("q", message("same", "L")).await;
    assert!(matches!(
        client.send("q", message("same", "L")).await,
        Outcome::Accepted(_)
    ));
    assert_eq!(
        broker.message_count("q"),
        Some(1),
        "the duplicate is accepted and dropped"
    );

    let mut later = message("later", "L");
    let at = OffsetDateTime::now_utc() + Duration::from_millis(400);
    let mut annotations = MessageAnnotations::default();
    annotations.0.insert(
        OwnedKey::from("x-opt-scheduled-enqueue-time"),
        Value::Timestamp(Timestamp::from(
            i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap(),
        )),
    );
    later.message_annotations = Some(annotations);
    client.send("q", later).await;
    let mut receiver = client.receiver("q", 10).await;
    let now = next(&mut receiver, WAIT).await.expect("the first message");
    receiver.accept(&now).await.unwrap();
    assert!(
        next(&mut receiver, Duration::from_millis(150)).await.is_none(),
        "scheduled"
    );
    let scheduled = next(&mut receiver, WAIT).await.expect("visible at its time");
    assert!(OffsetDateTime::now_utc() >= at);
    receiver.accept(&scheduled).await.unwrap();

    let encoded: Vec<Data> = ["b1", "b2"]
        .iter()
        .map(|id| {
            Data(Binary::from(
                serde_amqp::to_vec(&Serializable(message(id, "L"))).unwrap(),
            ))
        })
        .collect();
    let batch = Sendable::builder()
        .message(Message::builder().body(Batch::new(encoded)).build())
        .message_format(0x8001_3700)
        .build();
    let mut sender = client.sender("q").await;
    assert!(matches!(sender.send(batch).await.unwrap(), Outcome::Accepted(_)));
    assert_eq!(broker.message_count("q"), Some(2), "a batch is its messages");
}

#[tokio::test]
async fn a_topic_gives_each_subscription_whose_rules_match_a_copy() {
    let broker = open_broker().await;
    broker.create_topic("events", settings(30_000, 10)).unwrap();
    for name in ["builds", "all", "replays"] {
        broker
            .create_subscription("events", name, settings(30_000, 10))
            .unwrap();
    }
    broker
        .put_rule(
            "events",
            "builds",
            "types",
            "sys.Label IN ('BuildCompleted') AND NOT EXISTS(replayTo)",
        )
        .unwrap();
    assert!(broker.remove_rule("events", "builds", "$Default").unwrap());
    broker
        .put_rule("events", "replays", "replay", "replayTo = 'replays'")
        .unwrap();
    broker.remove_rule("events", "replays", "$Default").unwrap();
    let mut client = connect(&broker).await;
    client.send("events", message("e1", "BuildCompleted")).await;
    client.send("events", message("e2", "CommitCreated")).await;
    let mut replay = message("e3", "BuildCompleted");
    replay.application_properties = Some(
        fe2o3_amqp::types::messaging::ApplicationProperties::builder()
            .insert("replayTo", "replays")
            .build(),
    );
    client.send("events", replay).await;
    assert_eq!(broker.message_count("events/Subscriptions/builds"), Some(1));
    assert_eq!(broker.message_count("events/Subscriptions/all"), Some(3));
    assert_eq!(broker.message_count("events/Subscriptions/replays"), Some(1));
    let mut receiver = client.receiver("events/subscriptions/builds", 1).await;
    let delivery = next(&mut receiver, WAIT).await.expect("routed");
    assert_eq!(
        delivery.message().properties.as_ref().unwrap().subject.as_deref(),
        Some("BuildCompleted")
    );
}

#[tokio::test]
async fn attaches_need_an_entity_and_with_a_key_a_valid_token() {
    let key = SharedAccessKey {
        key_name: "RootManageSharedAccessKey".into(),
        key: "secret".into(),
    };
    let broker = Broker::start(BrokerConfig { key: Some(key.clone()) }).await.unwrap();
    broker.create_queue("q", settings(30_000, 10)).unwrap();
    assert!(broker.connection_string().contains(&format!(":{};", broker.port())));
    let mut client = connect(&broker).await;
    let refused = |error: fe2o3_amqp::link::DetachError| format!("{error:?}");

    let mut sender = client.sender("q").await;
    let error = tokio::time::timeout(WAIT, sender.on_detach()).await.unwrap();
    assert!(refused(error).contains("UnauthorizedAccess"), "no token yet");

    let mut cbs = CbsClient::attach(&mut client.session).await.unwrap();
    let expires = OffsetDateTime::now_utc() + Duration::from_secs(600);
    let forged = SharedAccessKey {
        key: "guess".into(),
        ..key.clone()
    }
    .signature("sb://127.0.0.1/q", expires);
    let sas = "servicebus.windows.net:sastoken";
    assert!(
        cbs.put_token("sb://127.0.0.1/q", CbsToken::new(forged.as_str(), sas, None))
            .await
            .is_err()
    );
    let token = key.signature("sb://127.0.0.1/q", expires);
    cbs.put_token("sb://127.0.0.1/q", CbsToken::new(token.as_str(), sas, None))
        .await
        .unwrap();
    assert!(matches!(
        client.send("q", message("a", "L")).await,
        Outcome::Accepted(_)
    ));

    let mut nowhere = client.sender("no-such-queue").await;
    let error = tokio::time::timeout(WAIT, nowhere.on_detach()).await.unwrap();
    assert!(refused(error).contains("NotFound"), "no such entity");
}

#[tokio::test]
async fn faults_expire_a_lock_early_and_drop_connections() {
    let broker = open_broker().await;
    broker.create_queue("q", settings(30_000, 10)).unwrap();
    let mut client = connect(&broker).await;
    client.send("q", message("a", "L")).await;
    let mut receiver = client.receiver("q", 5).await;
    let first = next(&mut receiver, WAIT).await.expect("delivered");
    let token = lock_token(&first);
    assert!(broker.expire_lock(token));
    assert!(!broker.expire_lock(token), "already gone");
    let again = next(&mut receiver, WAIT).await.expect("redelivered at once");
    assert_eq!(prior_deliveries(&again), 1);

    broker.drop_connections();
    let dropped = tokio::time::timeout(WAIT, receiver.recv::<Body<Value>>()).await;
    assert!(matches!(dropped, Ok(Err(_))), "the link ends with its connection");
    let mut fresh = connect(&broker).await;
    let mut receiver = fresh.receiver("q", 5).await;
    let after = next(&mut receiver, WAIT)
        .await
        .expect("the lock of a dropped link is given up");
    assert_eq!(prior_deliveries(&after), 2);
}

#[tokio::test]
async fn held_replies_hold_a_send_until_they_are_released() {
    let broker = open_broker().await;
    broker.create_queue("q", settings(30_000, 10)).unwrap();
    let mut client = connect(&broker).await;
    let mut sender = client.sender("q").await;
    broker.hold_replies();
    let send = tokio::spawn(async move {
        let outcome = sender.send(message("held", "L")).await;
        (sender, outcome)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!send.is_finished(), "the outcome came while replies were held");
    assert_eq!(broker.message_count("q"), Some(1), "the send itself was taken");
    broker.release_replies();
    let (sender, outcome) = tokio::time::timeout(WAIT, send)
        .await
        .expect("the outcome comes once replies are released")
        .unwrap();
    assert!(matches!(outcome.unwrap(), Outcome::Accepted(_)));
    sender.close().await.unwrap();
}
