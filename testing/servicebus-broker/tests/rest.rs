//! The broker's management REST API (ATOM over HTTP on the AMQP port),
//! through a real HTTP client: create, read, replace and delete queues,
//! topics, subscriptions and rules; Service Bus's answers for absent and
//! existing entities (200 with an empty feed / 404, 409); shared access
//! signatures checked (401); descriptions the broker cannot honour refused
//! (400); and entities made over HTTP used over AMQP.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bosun_servicebus_broker::{Broker, BrokerConfig, EntitySettings, RunningBroker, SharedAccessKey};
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::types::messaging::{Message, MessageId, Properties};
use fe2o3_amqp::types::primitives::Binary;
use fe2o3_amqp::{Connection, Sender, Session};
use reqwest::StatusCode;
use time::OffsetDateTime;
use tokio::net::TcpStream;

const SB: &str = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect";

/// A client of one broker's management API, signing as the broker's key
/// (or not at all).
struct Management {
    http: reqwest::Client,
    port: u16,
    key: Option<SharedAccessKey>,
}

struct Answer {
    status: StatusCode,
    body: String,
}

impl Management {
    fn new(broker: &RunningBroker, key: Option<SharedAccessKey>) -> Self {
        Self {
            http: reqwest::Client::new(),
            port: broker.port(),
            key,
        }
    }

    fn token(&self, path: &str) -> Option<String> {
        let key = self.key.as_ref()?;
        let path = path.split_once('?').map_or(path, |(path, _)| path);
        let audience = format!("sb://127.0.0.1:{}/{path}", self.port);
        Some(key.signature(&audience, OffsetDateTime::now_utc() + Duration::from_secs(600)))
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<String>,
        replace: bool,
        authorization: Option<String>,
    ) -> Answer {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let url = format!("http://127.0.0.1:{}/{path}?api-version=2021-05&{query}", self.port);
        let mut request = self.http.request(method, url);
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        if let Some(body) = body {
            request = request
                .header("Content-Type", "application/atom+xml;type=entry;charset=utf-8")
                .body(body);
        }
        if replace {
            request = request.header("If-Match", "*");
        }
        let response = request.send().await.unwrap();
        Answer {
            status: response.status(),
            body: response.text().await.unwrap(),
        }
    }

    async fn get(&self, path: &str) -> Answer {
        self.send(reqwest::Method::GET, path, None, false, self.token(path))
            .await
    }

    async fn create(&self, path: &str, description: &str) -> Answer {
        self.send(
            reqwest::Method::PUT,
            path,
            Some(entry(description)),
            false,
            self.token(path),
        )
        .await
    }

    async fn replace(&self, path: &str, description: &str) -> Answer {
        self.send(
            reqwest::Method::PUT,
            path,
            Some(entry(description)),
            true,
            self.token(path),
        )
        .await
    }

    async fn delete(&self, path: &str) -> Answer {
        self.send(reqwest::Method::DELETE, path, None, false, self.token(path))
            .await
    }
}

fn entry(description: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><entry xmlns=\"http://www.w3.org/2005/Atom\">\
         <content type=\"application/xml\">{description}</content></entry>"
    )
}

fn queue(lock: &str, max_delivery_count: u32) -> String {
    format!(
        "<QueueDescription xmlns=\"{SB}\"><LockDuration>{lock}</LockDuration>\
         <RequiresDuplicateDetection>true</RequiresDuplicateDetection><RequiresSession>false</RequiresSession>\
         <DefaultMessageTimeToLive>P14D</DefaultMessageTimeToLive>\
         <DeadLetteringOnMessageExpiration>true</DeadLetteringOnMessageExpiration>\
         <DuplicateDetectionHistoryTimeWindow>PT10M</DuplicateDetectionHistoryTimeWindow>\
         <MaxDeliveryCount>{max_delivery_count}</MaxDeliveryCount><EnableBatchedOperations>true</EnableBatchedOperations>\
         </QueueDescription>"
    )
}

fn topic() -> String {
    format!(
        "<TopicDescription xmlns=\"{SB}\"><DefaultMessageTimeToLive>P14D</DefaultMessageTimeToLive>\
         <RequiresDuplicateDetection>true</RequiresDuplicateDetection>\
         <DuplicateDetectionHistoryTimeWindow>PT10M</DuplicateDetectionHistoryTimeWindow></TopicDescription>"
    )
}

fn subscription(max_delivery_count: u32) -> String {
    format!(
        "<SubscriptionDescription xmlns=\"{SB}\"><LockDuration>PT1M</LockDuration>\
         <RequiresSession>false</RequiresSession><DeadLetteringOnMessageExpiration>true</DeadLetteringOnMessageExpiration>\
         <MaxDeliveryCount>{max_delivery_count}</MaxDeliveryCount></SubscriptionDescription>"
    )
}

fn sql_rule(name: &str, sql: &str) -> String {
    format!(
        "<RuleDescription xmlns=\"{SB}\" xmlns:i=\"http://www.w3.org/2001/XMLSchema-instance\">\
         <Filter i:type=\"SqlFilter\"><SqlExpression>{sql}</SqlExpression></Filter><Name>{name}</Name></RuleDescription>"
    )
}

fn has(body: &str, element: &str, value: &str) -> bool {
    body.contains(&format!("<{element}>{value}</{element}>"))
}

async fn open_broker() -> (RunningBroker, Management) {
    let broker = Broker::start(BrokerConfig::default()).await.unwrap();
    let key = BrokerConfig::default().key;
    let management = Management::new(&broker, key);
    (broker, management)
}

#[tokio::test]
async fn a_queue_is_created_read_replaced_and_deleted() {
    let (broker, management) = open_broker().await;

    let absent = management.get("Orders").await;
    assert_eq!(
        absent.status,
        StatusCode::OK,
        "Service Bus answers 200 with an empty feed"
    );
    assert!(
        absent.body.starts_with("<feed") && !absent.body.contains("<entry"),
        "{}",
        absent.body
    );

    let created = management.create("Orders", &queue("PT30S", 3)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert!(created.body.starts_with("<entry"), "{}", created.body);
    assert!(has(&created.body, "LockDuration", "PT30S"), "{}", created.body);

    let again = management.create("Orders", &queue("PT30S", 3)).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
    assert!(again.body.starts_with("<Error><Code>409</Code>"), "{}", again.body);

    let read = management.get("orders").await;
    assert_eq!(read.status, StatusCode::OK);
    for (element, value) in [
        ("LockDuration", "PT30S"),
        ("MaxDeliveryCount", "3"),
        ("RequiresDuplicateDetection", "true"),
        ("DuplicateDetectionHistoryTimeWindow", "PT10M"),
        ("DefaultMessageTimeToLive", "P14D"),
        ("DeadLetteringOnMessageExpiration", "true"),
        ("RequiresSession", "false"),
        ("Status", "Active"),
        ("MessageCount", "0"),
    ] {
        assert!(has(&read.body, element, value), "{element} {value}: {}", read.body);
    }
    assert!(
        read.body.contains("<title type=\"text\">Orders</title>"),
        "the name as created: {}",
        read.body
    );
    assert!(read.body.contains("<QueueDescription"), "{}", read.body);

    let replaced = management.replace("Orders", &queue("PT1M", 5)).await;
    assert_eq!(replaced.status, StatusCode::OK, "{}", replaced.body);
    let read = management.get("Orders").await;
    assert!(has(&read.body, "MaxDeliveryCount", "5"), "{}", read.body);
    assert!(has(&read.body, "LockDuration", "PT1M"), "{}", read.body);

    let missing = management.replace("Nope", &queue("PT1M", 5)).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "a replace needs the entity");

    let deleted = management.delete("Orders").await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.body);
    assert_eq!(broker.message_count("orders"), None, "gone from the namespace");
    let read = management.get("Orders").await;
    assert!(!read.body.contains("<entry"), "{}", read.body);
    let again = management.delete("Orders").await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
    assert!(again.body.starts_with("<Error><Code>404</Code>"), "{}", again.body);
}

#[tokio::test]
async fn topics_subscriptions_and_rules_are_created_listed_replaced_and_deleted() {
    let (broker, management) = open_broker().await;
    let sub = "events/Subscriptions/billing";

    let orphan = management.create(sub, &subscription(10)).await;
    assert_eq!(orphan.status, StatusCode::NOT_FOUND, "no topic yet: {}", orphan.body);

    assert_eq!(management.create("events", &topic()).await.status, StatusCode::CREATED);
    let read = management.get("events").await;
    assert!(read.body.contains("<TopicDescription"), "{}", read.body);
    assert!(has(&read.body, "RequiresDuplicateDetection", "true"), "{}", read.body);
    assert!(has(&read.body, "DefaultMessageTimeToLive", "P14D"), "{}", read.body);
    assert_eq!(
        management.create("events", &queue("PT1M", 10)).await.status,
        StatusCode::CONFLICT,
        "a queue of a topic's name"
    );

    let missing = management.get(sub).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{}", missing.body);
    assert!(missing.body.starts_with("<Error><Code>404</Code>"), "{}", missing.body);

    let created = management.create(sub, &subscription(7)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(
        management.create(sub, &subscription(7)).await.status,
        StatusCode::CONFLICT
    );
    let read = management.get(sub).await;
    assert_eq!(read.status, StatusCode::OK);
    assert!(read.body.contains("<SubscriptionDescription"), "{}", read.body);
    assert!(has(&read.body, "MaxDeliveryCount", "7"), "{}", read.body);
    assert!(
        has(&read.body, "DeadLetteringOnMessageExpiration", "true"),
        "{}",
        read.body
    );
    assert!(has(&management.get("events").await.body, "SubscriptionCount", "1"));

    let replaced = management.replace(sub, &subscription(4)).await;
    assert_eq!(replaced.status, StatusCode::OK, "{}", replaced.body);
    assert!(has(&management.get(sub).await.body, "MaxDeliveryCount", "4"));

    // A new subscription has `$Default`, a true filter.
    let rules = management.get(&format!("{sub}/Rules")).await;
    assert_eq!(rules.status, StatusCode::OK);
    assert!(rules.body.starts_with("<feed"), "{}", rules.body);
    assert!(has(&rules.body, "Name", "$Default"), "{}", rules.body);
    assert!(rules.body.contains("i:type=\"TrueFilter\""), "{}", rules.body);

    let rule = format!("{sub}/Rules/invoices");
    let created = management
        .create(
            &rule,
            &sql_rule("invoices", "sys.Label IN ('Invoice') AND amount &gt; 10"),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(
        management.create(&rule, &sql_rule("invoices", "1=1")).await.status,
        StatusCode::CONFLICT
    );
    let read = management.get(&rule).await;
    assert_eq!(read.status, StatusCode::OK);
    assert!(read.body.contains("i:type=\"SqlFilter\""), "{}", read.body);
    assert!(
        has(
            &read.body,
            "SqlExpression",
            "sys.Label IN ('Invoice') AND amount &gt; 10"
        ),
        "{}",
        read.body
    );
    assert!(has(&read.body, "Name", "invoices"), "{}", read.body);

    let replaced = management
        .replace(&rule, &sql_rule("invoices", "sys.Label = 'Invoice'"))
        .await;
    assert_eq!(replaced.status, StatusCode::OK, "{}", replaced.body);
    assert!(has(
        &management.get(&rule).await.body,
        "SqlExpression",
        "sys.Label = 'Invoice'"
    ));

    let default = format!("{sub}/Rules/$Default");
    assert_eq!(management.delete(&default).await.status, StatusCode::OK);
    assert_eq!(management.get(&default).await.status, StatusCode::NOT_FOUND);
    assert_eq!(management.delete(&default).await.status, StatusCode::NOT_FOUND);
    let rules = management.get(&format!("{sub}/Rules")).await.body;
    assert_eq!(rules.matches("<entry").count(), 1, "{rules}");
    assert!(has(&rules, "Name", "invoices"), "{rules}");

    assert_eq!(management.delete("events").await.status, StatusCode::OK);
    assert_eq!(
        management.get(sub).await.status,
        StatusCode::NOT_FOUND,
        "its subscriptions go too"
    );
    assert_eq!(broker.message_count("events/subscriptions/billing"), None);
}

#[tokio::test]
async fn a_missing_or_bad_signature_is_refused_with_401() {
    let (_broker, management) = open_broker().await;
    let path = "orders";
    let body = || Some(entry(&queue("PT1M", 10)));
    let put = |authorization: Option<String>| management.send(reqwest::Method::PUT, path, body(), false, authorization);

    let none = put(None).await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED, "{}", none.body);
    assert!(none.body.starts_with("<Error><Code>401</Code>"), "{}", none.body);

    let wrong_key = SharedAccessKey {
        key_name: "RootManageSharedAccessKey".into(),
        key: "not-the-key".into(),
    };
    let audience = format!("sb://127.0.0.1:{}/{path}", management.port);
    let later = OffsetDateTime::now_utc() + Duration::from_secs(600);
    let forged = put(Some(wrong_key.signature(&audience, later))).await;
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED, "{}", forged.body);

    let key = BrokerConfig::default().key.unwrap();
    let elsewhere = format!("sb://127.0.0.1:{}/other", management.port);
    assert_eq!(
        put(Some(key.signature(&elsewhere, later))).await.status,
        StatusCode::UNAUTHORIZED,
        "a token for another entity"
    );
    let expired = OffsetDateTime::now_utc() - Duration::from_secs(5);
    assert_eq!(
        put(Some(key.signature(&audience, expired))).await.status,
        StatusCode::UNAUTHORIZED,
        "an expired token"
    );
    assert_eq!(
        put(Some("Basic dXNlcjpwYXNz".into())).await.status,
        StatusCode::UNAUTHORIZED
    );

    let namespace_wide = format!("sb://127.0.0.1:{}/", management.port);
    assert_eq!(
        put(Some(key.signature(&namespace_wide, later))).await.status,
        StatusCode::CREATED,
        "a namespace token covers its entities"
    );
    assert_eq!(management.get(path).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_broker_without_a_key_needs_no_token() {
    let broker = Broker::start(BrokerConfig { key: None }).await.unwrap();
    let management = Management::new(&broker, None);
    assert_eq!(
        management.create("orders", &queue("PT1M", 10)).await.status,
        StatusCode::CREATED
    );
    assert_eq!(management.get("orders").await.status, StatusCode::OK);
}

#[tokio::test]
async fn descriptions_the_broker_cannot_honour_are_refused_with_400() {
    let (_broker, management) = open_broker().await;
    for (path, description, why) in [
        ("a", queue("PT1S", 10), "a lock under 5 seconds"),
        ("b", queue("PT1M", 0), "no deliveries"),
        ("c", queue("soon", 10), "not a duration"),
        ("e", "<Nonsense/>".to_owned(), "not a description"),
    ] {
        let answer = management.create(path, &description).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{why}: {}", answer.body);
        assert!(answer.body.starts_with("<Error><Code>400</Code>"), "{}", answer.body);
    }
    // Sessions are set when an entity is made and never changed.
    let sessions =
        format!("<QueueDescription xmlns=\"{SB}\"><RequiresSession>true</RequiresSession></QueueDescription>");
    let made = management.create("d", &sessions).await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);
    assert!(has(&management.get("d").await.body, "RequiresSession", "true"));
    let without =
        format!("<QueueDescription xmlns=\"{SB}\"><RequiresSession>false</RequiresSession></QueueDescription>");
    let changed = management.replace("d", &without).await;
    assert_eq!(changed.status, StatusCode::BAD_REQUEST, "{}", changed.body);
    assert!(changed.body.contains("RequiresSession"), "{}", changed.body);

    let not_xml = management
        .send(
            reqwest::Method::PUT,
            "f",
            Some("<entry><content>".into()),
            false,
            management.token("f"),
        )
        .await;
    assert_eq!(not_xml.status, StatusCode::BAD_REQUEST);

    assert_eq!(management.create("t", &topic()).await.status, StatusCode::CREATED);
    assert_eq!(
        management.create("t/Subscriptions/s", &subscription(10)).await.status,
        StatusCode::CREATED
    );
    let bad_sql = management
        .create("t/Subscriptions/s/Rules/r", &sql_rule("r", "sys.Label IN ("))
        .await;
    assert_eq!(bad_sql.status, StatusCode::BAD_REQUEST, "{}", bad_sql.body);
    let no_subscription = management
        .create("t/Subscriptions/x/Rules/r", &sql_rule("r", "1=1"))
        .await;
    assert_eq!(no_subscription.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn entities_made_over_http_carry_messages_over_amqp() {
    let broker = Broker::start(BrokerConfig { key: None }).await.unwrap();
    let management = Management::new(&broker, None);
    assert_eq!(
        management.create("jobs", &queue("PT1M", 10)).await.status,
        StatusCode::CREATED
    );
    assert_eq!(management.create("events", &topic()).await.status, StatusCode::CREATED);
    for name in ["all", "invoices"] {
        let path = format!("events/Subscriptions/{name}");
        assert_eq!(
            management.create(&path, &subscription(10)).await.status,
            StatusCode::CREATED
        );
    }
    let rule = "events/Subscriptions/invoices/Rules/types";
    assert_eq!(
        management
            .create(rule, &sql_rule("types", "sys.Label = 'Invoice'"))
            .await
            .status,
        StatusCode::CREATED
    );
    assert_eq!(
        management
            .delete("events/Subscriptions/invoices/Rules/$Default")
            .await
            .status,
        StatusCode::OK
    );

    let stream = TcpStream::connect(("127.0.0.1", broker.port())).await.unwrap();
    let mut connection = Connection::builder()
        .container_id("rest-test")
        .scheme("amqp")
        .hostname("127.0.0.1")
        .sasl_profile(SaslProfile::Anonymous)
        .open_with_stream(stream)
        .await
        .unwrap();
    let mut session = Session::begin(&mut connection).await.unwrap();
    for (target, label) in [("jobs", "Job"), ("events", "Invoice"), ("events", "Receipt")] {
        let mut sender = Sender::attach(&mut session, format!("send-{target}-{label}"), target)
            .await
            .unwrap();
        let message = Message::builder()
            .properties(Properties {
                message_id: Some(MessageId::String(format!("{target}-{label}"))),
                subject: Some(label.to_owned()),
                ..Properties::default()
            })
            .data(Binary::from(label.as_bytes().to_vec()))
            .build();
        sender.send(message).await.unwrap();
        sender.close().await.unwrap();
    }
    assert_eq!(broker.message_count("jobs"), Some(1));
    assert_eq!(broker.message_count("events/Subscriptions/all"), Some(2));
    assert_eq!(
        broker.message_count("events/Subscriptions/invoices"),
        Some(1),
        "only the rule made over HTTP lets it in"
    );
    let read = management.get("events/Subscriptions/all").await;
    assert!(has(&read.body, "MessageCount", "2"), "{}", read.body);
    session.end().await.unwrap();
    connection.close().await.unwrap();
}

#[tokio::test]
async fn entities_made_from_code_are_read_and_replaced_over_http() {
    let (broker, management) = open_broker().await;
    broker.create_queue("Commit", EntitySettings::default()).unwrap();
    broker.create_topic("events", EntitySettings::default()).unwrap();
    broker
        .create_subscription("events", "Billing", EntitySettings::default())
        .unwrap();
    broker
        .put_rule("events", "Billing", "bosun-types", "sys.Label = 'Invoice'")
        .unwrap();

    let read = management.get("commit").await;
    assert!(
        read.body.contains("<title type=\"text\">Commit</title>"),
        "{}",
        read.body
    );
    for (element, value) in [
        ("LockDuration", "PT1M"),
        ("MaxDeliveryCount", "10"),
        ("RequiresDuplicateDetection", "true"),
        ("DuplicateDetectionHistoryTimeWindow", "PT10M"),
    ] {
        assert!(has(&read.body, element, value), "{element} {value}: {}", read.body);
    }

    let rules = management.get("events/Subscriptions/billing/Rules").await.body;
    assert!(has(&rules, "Name", "$Default"), "{rules}");
    assert!(has(&rules, "Name", "bosun-types"), "{rules}");
    assert!(has(&rules, "SqlExpression", "sys.Label = 'Invoice'"), "{rules}");
    for (query, names) in [("$top=1", ["$Default"]), ("$skip=1&$top=5", ["bosun-types"])] {
        let page = management
            .get(&format!("events/Subscriptions/billing/Rules?{query}"))
            .await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert_eq!(page.body.matches("<entry").count(), 1, "{query}: {}", page.body);
        assert!(has(&page.body, "Name", names[0]), "{query}: {}", page.body);
    }

    let replaced = management
        .replace("events/Subscriptions/billing", &subscription(3))
        .await;
    assert_eq!(replaced.status, StatusCode::OK, "{}", replaced.body);
    let read = management.get("events/Subscriptions/billing").await;
    assert!(has(&read.body, "MaxDeliveryCount", "3"), "{}", read.body);
    assert!(
        read.body.contains("<title type=\"text\">Billing</title>"),
        "{}",
        read.body
    );
}
