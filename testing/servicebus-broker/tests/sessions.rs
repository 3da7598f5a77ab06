//! Sessions, deferral and scheduling through a real AMQP client
//! (`fe2o3-amqp`'s client side): a session locked by one receiver at a
//! time (`com.microsoft:session-filter`, named or the next available),
//! its messages only and in order, session state and session lock renewal
//! and expiry on `$management`, deferred messages received by sequence
//! number and settled by `update-disposition`, and messages scheduled and
//! cancelled by sequence number.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bosun_servicebus_broker::{Broker, BrokerConfig, EntitySettings, RunningBroker};
use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::{ReceiverSettleMode, SenderSettleMode};
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::message::__private::Serializable;
use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, Body, Data, Message, MessageAnnotations, MessageId, Modified, Properties, Source,
};
use fe2o3_amqp::types::primitives::{Array, Binary, OrderedMap, SimpleValue, Symbol, Timestamp, Value};
use fe2o3_amqp::{Connection, Delivery, Receiver, Sender, Session};
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;
use time::OffsetDateTime;
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(3);
const SESSION_FILTER: &str = "com.microsoft:session-filter";

struct Client {
    _connection: ConnectionHandle<()>,
    session: SessionHandle<()>,
    links: u32,
}

async fn connect(broker: &RunningBroker) -> Client {
    let stream = TcpStream::connect(("127.0.0.1", broker.port())).await.unwrap();
    let mut connection = Connection::builder()
        .container_id("sessions-test")
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
        links: 0,
    }
}

async fn open_broker() -> RunningBroker {
    Broker::start(BrokerConfig { key: None }).await.unwrap()
}

fn settings(lock_ms: u64, requires_session: bool) -> EntitySettings {
    EntitySettings {
        lock_duration: Duration::from_millis(lock_ms),
        max_delivery_count: 10,
        duplicate_detection_window: None,
        requires_session,
    }
}

fn message(id: &str, session: Option<&str>) -> Message<Data> {
    Message::builder()
        .properties(Properties {
            message_id: Some(MessageId::String(id.to_owned())),
            group_id: session.map(str::to_owned),
            ..Properties::default()
        })
        .data(Binary::from(id.as_bytes().to_vec()))
        .build()
}

/// Which session a receiver asks for.
enum Wanted<'a> {
    None,
    /// A named session (as a described filter, as Service Bus's own clients send it).
    Named(&'a str),
    /// The next available session (a null filter).
    Next,
}

impl Client {
    fn name(&mut self, what: &str) -> String {
        self.links += 1;
        format!("{what}-{}", self.links)
    }

    async fn send(&mut self, path: &str, messages: Vec<Message<Data>>) {
        let name = self.name("send");
        let mut sender = Sender::builder()
            .name(name)
            .target(path)
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .attach(&mut self.session)
            .await
            .unwrap();
        for message in messages {
            sender.send(message).await.unwrap();
        }
        sender.close().await.unwrap();
    }

    async fn receiver(&mut self, path: &str, wanted: Wanted<'_>) -> Receiver {
        let source = Source::builder().address(path);
        let source = match wanted {
            Wanted::None => source,
            Wanted::Named(id) => source.add_to_filter(
                Symbol::from(SESSION_FILTER),
                Described {
                    descriptor: Descriptor::Code(0x0000_0137_0000_000C),
                    value: Value::String(id.to_owned()),
                },
            ),
            Wanted::Next => source.add_to_filter(Symbol::from(SESSION_FILTER), None),
        };
        let name = self.name("receive");
        let mut receiver = Receiver::builder()
            .name(name)
            .source(source.build())
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .receiver_settle_mode(ReceiverSettleMode::Second)
            .credit_mode(CreditMode::Manual)
            .auto_accept(false)
            .attach(&mut self.session)
            .await
            .unwrap();
        receiver.set_credit(10).await.unwrap();
        receiver
    }

    async fn management(&mut self, entity: &str) -> Management {
        let reply_to = self.name(&format!("{entity}-replies"));
        let node = format!("{entity}/$management");
        let name = self.name("requests");
        let sender = Sender::builder()
            .name(name)
            .target(node.as_str())
            .attach(&mut self.session)
            .await
            .unwrap();
        let name = self.name("responses");
        let receiver = Receiver::builder()
            .name(name)
            .source(node.as_str())
            .target(reply_to.as_str())
            .attach(&mut self.session)
            .await
            .unwrap();
        Management {
            sender,
            receiver,
            reply_to,
            requests: 0,
        }
    }
}

/// A request/response pair of links to an entity's `$management` node.
struct Management {
    sender: Sender,
    receiver: Receiver,
    reply_to: String,
    requests: u64,
}

/// A `$management` response: status code, error condition, body.
struct Response {
    status: i32,
    condition: Option<String>,
    body: Value,
}

impl Response {
    fn field(&self, name: &str) -> Option<&Value> {
        match &self.body {
            Value::Map(map) => map.get(&Value::String(name.to_owned())),
            _ => None,
        }
    }
}

fn body(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(
        entries
            .into_iter()
            .map(|(key, value)| (Value::String(key.to_owned()), value))
            .collect::<OrderedMap<Value, Value>>(),
    )
}

fn longs(values: &[i64]) -> Value {
    Value::Array(Array::from(values.iter().map(|v| Value::Long(*v)).collect::<Vec<_>>()))
}

impl Management {
    async fn request(&mut self, operation: &str, entries: Vec<(&str, Value)>) -> Response {
        self.requests += 1;
        let request = Message::builder()
            .properties(Properties {
                message_id: Some(MessageId::Ulong(self.requests)),
                reply_to: Some(self.reply_to.clone()),
                ..Properties::default()
            })
            .application_properties(ApplicationProperties::builder().insert("operation", operation).build())
            .body(Body::<Value>::Value(AmqpValue(body(entries))))
            .build();
        self.sender.send(request).await.unwrap();
        let delivery = tokio::time::timeout(WAIT, self.receiver.recv::<Body<Value>>())
            .await
            .expect("a response")
            .unwrap();
        self.receiver.accept(&delivery).await.unwrap();
        let message = delivery.into_message();
        let properties = message.application_properties.unwrap_or_default().0;
        let status = match properties.get("statusCode") {
            Some(SimpleValue::Int(status)) => *status,
            other => panic!("statusCode {other:?}"),
        };
        let condition = match properties.get("errorCondition") {
            Some(SimpleValue::Symbol(symbol)) => Some(symbol.0.clone()),
            _ => None,
        };
        let body = match message.body {
            Body::Value(AmqpValue(value)) => value,
            other => panic!("a value body, got {other:?}"),
        };
        Response {
            status,
            condition,
            body,
        }
    }
}

async fn next(receiver: &mut Receiver, within: Duration) -> Option<Delivery<Body<Value>>> {
    tokio::time::timeout(within, receiver.recv::<Body<Value>>())
        .await
        .ok()
        .map(|delivery| delivery.unwrap())
}

fn id_of(delivery: &Delivery<Body<Value>>) -> String {
    match delivery
        .message()
        .properties
        .as_ref()
        .and_then(|p| p.message_id.as_ref())
    {
        Some(MessageId::String(id)) => id.clone(),
        other => panic!("message id {other:?}"),
    }
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

fn sequence_of(delivery: &Delivery<Body<Value>>) -> i64 {
    match annotation(delivery, "x-opt-sequence-number") {
        Some(Value::Long(sequence)) => *sequence,
        other => panic!("x-opt-sequence-number {other:?}"),
    }
}

/// The session id the broker answered the attach with.
fn session_of(receiver: &Receiver) -> Option<String> {
    let value = receiver
        .source()
        .as_ref()?
        .filter
        .as_ref()?
        .get(&Symbol::from(SESSION_FILTER))?;
    match value {
        Value::Described(described) => match &described.value {
            Value::String(id) => Some(id.clone()),
            _ => None,
        },
        Value::String(id) => Some(id.clone()),
        _ => None,
    }
}

/// The error a receiver's link was closed with, as text.
async fn closed_with(receiver: &mut Receiver) -> String {
    let received = tokio::time::timeout(WAIT, receiver.recv::<Body<Value>>())
        .await
        .expect("the link is closed");
    match received {
        Ok(delivery) => panic!("the link is closed, but delivered {:?}", id_of(&delivery)),
        Err(error) => format!("{error:?}"),
    }
}

#[tokio::test]
async fn a_session_is_locked_by_one_receiver_and_gives_only_its_messages_in_order() {
    let broker = open_broker().await;
    broker.create_queue("orders", settings(30_000, true)).unwrap();
    broker.create_queue("plain", settings(30_000, false)).unwrap();
    let mut client = connect(&broker).await;
    client
        .send(
            "orders",
            vec![
                message("a1", Some("a")),
                message("b1", Some("b")),
                message("a2", Some("a")),
                message("a3", Some("a")),
            ],
        )
        .await;

    let mut a = client.receiver("orders", Wanted::Named("a")).await;
    assert_eq!(session_of(&a).as_deref(), Some("a"));
    for expected in ["a1", "a2", "a3"] {
        let delivery = next(&mut a, WAIT).await.expect("a message of session a");
        assert_eq!(id_of(&delivery), expected);
        a.accept(&delivery).await.unwrap();
    }
    assert!(
        next(&mut a, Duration::from_millis(200)).await.is_none(),
        "only session a's"
    );

    let mut rival = connect(&broker).await;
    let mut second = rival.receiver("orders", Wanted::Named("a")).await;
    assert!(
        closed_with(&mut second)
            .await
            .contains("com.microsoft:session-cannot-be-locked"),
        "session a is locked"
    );
    let mut plain = rival.receiver("orders", Wanted::None).await;
    assert!(
        closed_with(&mut plain).await.contains("NotAllowed"),
        "a session-enabled queue needs a session receiver"
    );
    let mut sessionful = rival.receiver("plain", Wanted::Named("a")).await;
    assert!(
        closed_with(&mut sessionful).await.contains("NotAllowed"),
        "a queue without sessions takes no session receiver"
    );

    // The next available session: a is locked, so b.
    let mut any = rival.receiver("orders", Wanted::Next).await;
    assert_eq!(session_of(&any).as_deref(), Some("b"));
    let delivery = next(&mut any, WAIT).await.expect("b1");
    assert_eq!(id_of(&delivery), "b1");
    any.accept(&delivery).await.unwrap();

    // Closing a receiver gives its session up.
    a.close().await.unwrap();
    let mut again = rival.receiver("orders", Wanted::Named("a")).await;
    assert_eq!(session_of(&again).as_deref(), Some("a"));
    client.send("orders", vec![message("a4", Some("a"))]).await;
    let delivery = next(&mut again, WAIT).await.expect("a4");
    assert_eq!(id_of(&delivery), "a4");
}

#[tokio::test]
async fn session_state_and_the_session_lock_renew_and_expire() {
    let broker = open_broker().await;
    broker.create_queue("jobs", settings(500, true)).unwrap();
    let mut client = connect(&broker).await;
    client.send("jobs", vec![message("m", Some("s"))]).await;
    let mut management = client.management("jobs").await;
    let lost = management
        .request("com.microsoft:get-session-state", vec![("session-id", "s".into())])
        .await;
    assert_eq!(lost.status, 410, "no receiver holds session s");
    assert_eq!(lost.condition.as_deref(), Some("com.microsoft:session-lock-lost"));

    let mut receiver = client.receiver("jobs", Wanted::Named("s")).await;
    let first = next(&mut receiver, WAIT).await.expect("m");
    assert_eq!(id_of(&first), "m");
    let empty = management
        .request("com.microsoft:get-session-state", vec![("session-id", "s".into())])
        .await;
    assert_eq!(empty.status, 200);
    assert_eq!(empty.field("session-state"), Some(&Value::Null));
    let set = management
        .request(
            "com.microsoft:set-session-state",
            vec![
                ("session-id", "s".into()),
                ("session-state", Value::Binary(Binary::from(b"step-1".to_vec()))),
            ],
        )
        .await;
    assert_eq!(set.status, 200);
    let state = management
        .request("com.microsoft:get-session-state", vec![("session-id", "s".into())])
        .await;
    assert_eq!(
        state.field("session-state"),
        Some(&Value::Binary(Binary::from(b"step-1".to_vec())))
    );

    // Renewed twice over the lock duration: still held, message and all.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let renewed = management
            .request("com.microsoft:renew-session-lock", vec![("session-id", "s".into())])
            .await;
        assert_eq!(renewed.status, 200);
        let Some(Value::Timestamp(until)) = renewed.field("expiration") else {
            panic!("an expiration, got {:?}", renewed.body);
        };
        let now = OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000;
        assert!(i128::from(until.milliseconds()) > now);
    }

    // Not renewed: the session lock expires, the link is closed and the
    // message it held comes back to the next receiver of the session.
    assert!(
        closed_with(&mut receiver)
            .await
            .contains("com.microsoft:session-lock-lost")
    );
    let renewed = management
        .request("com.microsoft:renew-session-lock", vec![("session-id", "s".into())])
        .await;
    assert_eq!(renewed.condition.as_deref(), Some("com.microsoft:session-lock-lost"));
    let mut receiver = client.receiver("jobs", Wanted::Next).await;
    assert_eq!(session_of(&receiver).as_deref(), Some("s"));
    let again = next(&mut receiver, WAIT).await.expect("m again");
    assert_eq!(id_of(&again), "m");
    assert_eq!(again.message().header.as_ref().map(|h| h.delivery_count), Some(1));
    let state = management
        .request("com.microsoft:get-session-state", vec![("session-id", "s".into())])
        .await;
    assert_eq!(
        state.field("session-state"),
        Some(&Value::Binary(Binary::from(b"step-1".to_vec()))),
        "the state is the session's, kept across receivers"
    );
}

#[tokio::test]
async fn deferred_messages_are_received_by_sequence_number() {
    let broker = open_broker().await;
    broker.create_queue("q", settings(30_000, false)).unwrap();
    let mut client = connect(&broker).await;
    client
        .send("q", vec![message("d1", None), message("d2", None), message("d3", None)])
        .await;
    let mut receiver = client.receiver("q", Wanted::None).await;
    let mut deferred = Vec::new();
    for expected in ["d1", "d2"] {
        let delivery = next(&mut receiver, WAIT).await.expect("delivered");
        assert_eq!(id_of(&delivery), expected);
        deferred.push(sequence_of(&delivery));
        let defer = Modified {
            delivery_failed: None,
            undeliverable_here: Some(true),
            message_annotations: None,
        };
        receiver.modify(&delivery, defer).await.unwrap();
    }
    let d3 = next(&mut receiver, WAIT).await.expect("d3");
    assert_eq!(id_of(&d3), "d3", "deferred messages are not delivered again");
    receiver.accept(&d3).await.unwrap();
    assert!(next(&mut receiver, Duration::from_millis(200)).await.is_none());

    let mut management = client.management("q").await;
    // Peek-lock (receiver settle mode second): locked, with its lock token.
    let locked = management
        .request(
            "com.microsoft:receive-by-sequence-number",
            vec![
                ("sequence-numbers", longs(&deferred[..1])),
                ("receiver-settle-mode", Value::Uint(1)),
            ],
        )
        .await;
    assert_eq!(locked.status, 200);
    let Some(Value::List(messages)) = locked.field("messages") else {
        panic!("messages, got {:?}", locked.body);
    };
    assert_eq!(messages.len(), 1);
    let Value::Map(entry) = &messages[0] else {
        panic!("a map")
    };
    let Some(Value::Uuid(token)) = entry.get(&Value::String("lock-token".into())) else {
        panic!("a lock token in {entry:?}");
    };
    let Some(Value::Binary(_)) = entry.get(&Value::String("message".into())) else {
        panic!("the encoded message in {entry:?}");
    };
    let twice = management
        .request(
            "com.microsoft:receive-by-sequence-number",
            vec![
                ("sequence-numbers", longs(&deferred[..1])),
                ("receiver-settle-mode", Value::Uint(1)),
            ],
        )
        .await;
    assert_eq!(twice.status, 404, "locked already");
    assert_eq!(twice.condition.as_deref(), Some("com.microsoft:message-not-found"));
    let completed = management
        .request(
            "com.microsoft:update-disposition",
            vec![
                ("disposition-status", "completed".into()),
                (
                    "lock-tokens",
                    Value::Array(Array::from(vec![Value::Uuid(token.clone())])),
                ),
            ],
        )
        .await;
    assert_eq!(completed.status, 200);
    assert_eq!(broker.message_count("q"), Some(1));

    // Receive-and-delete (receiver settle mode first): removed at once.
    let removed = management
        .request(
            "com.microsoft:receive-by-sequence-number",
            vec![
                ("sequence-numbers", longs(&deferred[1..])),
                ("receiver-settle-mode", Value::Uint(0)),
            ],
        )
        .await;
    assert_eq!(removed.status, 200);
    assert_eq!(broker.message_count("q"), Some(0));
    let gone = management
        .request(
            "com.microsoft:receive-by-sequence-number",
            vec![
                ("sequence-numbers", longs(&deferred[1..])),
                ("receiver-settle-mode", Value::Uint(0)),
            ],
        )
        .await;
    assert_eq!(gone.condition.as_deref(), Some("com.microsoft:message-not-found"));
}

#[tokio::test]
async fn scheduled_messages_are_cancelled_by_sequence_number() {
    let broker = open_broker().await;
    broker.create_queue("later", settings(30_000, false)).unwrap();
    let mut client = connect(&broker).await;
    let at = OffsetDateTime::now_utc() + Duration::from_millis(500);
    let scheduled = |id: &str| {
        let mut message = message(id, None);
        let mut annotations = MessageAnnotations::default();
        annotations.0.insert(
            OwnedKey::from("x-opt-scheduled-enqueue-time"),
            Value::Timestamp(Timestamp::from(
                i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap(),
            )),
        );
        message.message_annotations = Some(annotations);
        let encoded = serde_amqp::to_vec(&Serializable(message)).unwrap();
        body(vec![
            ("message-id", id.into()),
            ("message", Value::Binary(Binary::from(encoded))),
        ])
    };
    let mut management = client.management("later").await;
    let response = management
        .request(
            "com.microsoft:schedule-message",
            vec![("messages", Value::List(vec![scheduled("dropped"), scheduled("kept")]))],
        )
        .await;
    assert_eq!(response.status, 200);
    let Some(Value::Array(numbers)) = response.field("sequence-numbers") else {
        panic!("sequence numbers, got {:?}", response.body);
    };
    let numbers: Vec<i64> = numbers
        .iter()
        .map(|value| match value {
            Value::Long(number) => *number,
            other => panic!("a long, got {other:?}"),
        })
        .collect();
    assert_eq!(numbers.len(), 2);
    let cancelled = management
        .request(
            "com.microsoft:cancel-scheduled-message",
            vec![("sequence-numbers", longs(&numbers[..1]))],
        )
        .await;
    assert_eq!(cancelled.status, 200);
    let again = management
        .request(
            "com.microsoft:cancel-scheduled-message",
            vec![("sequence-numbers", longs(&numbers[..1]))],
        )
        .await;
    assert_eq!(again.status, 404);
    assert_eq!(again.condition.as_deref(), Some("com.microsoft:message-not-found"));
    assert_eq!(broker.message_count("later"), Some(1));

    let mut receiver = client.receiver("later", Wanted::None).await;
    assert!(
        next(&mut receiver, Duration::from_millis(200)).await.is_none(),
        "not before its time"
    );
    let delivery = next(&mut receiver, WAIT).await.expect("at its time");
    assert!(OffsetDateTime::now_utc() >= at);
    assert_eq!(id_of(&delivery), "kept");
    assert_eq!(sequence_of(&delivery), numbers[1]);
    receiver.accept(&delivery).await.unwrap();
    let enqueued = management
        .request(
            "com.microsoft:cancel-scheduled-message",
            vec![("sequence-numbers", longs(&numbers[1..]))],
        )
        .await;
    assert_eq!(enqueued.status, 404, "no longer scheduled");
}
