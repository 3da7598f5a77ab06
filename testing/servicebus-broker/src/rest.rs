//! The management REST API (ATOM over HTTP, api-version 2021-05) on the
//! broker's AMQP port: a connection whose first bytes are not the AMQP
//! protocol header is HTTP/1.1 ([`is_http`], [`serve`], on hyper).
//!
//! - `PUT {queue|topic}`, `PUT {topic}/Subscriptions/{s}`,
//!   `PUT {topic}/Subscriptions/{s}/Rules/{r}` with an ATOM entry holding
//!   a `QueueDescription` / `TopicDescription` / `SubscriptionDescription`
//!   / `RuleDescription`: 201 and the entity's entry when created, 409 when
//!   it exists; with `If-Match: *` it replaces (200), 404 when absent.
//! - `GET` of the same paths: 200 and the entry. A queue or topic that does
//!   not exist gives 200 and an empty feed (as Service Bus does); a missing
//!   subscription or rule gives 404 and an `<Error>` document.
//!   `GET {topic}/Subscriptions/{s}/Rules` lists the rules (`$skip`, `$top`).
//! - `DELETE` of the same paths: 200, or 404 when absent.
//! - With a key, `Authorization` must carry a shared access signature for
//!   `sb://host/<path>` (`host` with or without the port; checked with
//!   [`crate::check_token`]; a bearer token is taken as it is), else 401.
//!
//! Settings the broker models ([`crate::EntitySettings`]) come from the
//! description; other simple properties are kept and given back as sent,
//! Service Bus's defaults otherwise. What the broker cannot do is refused
//! with 400: sessions, auto-forwarding, correlation filters, rule actions.
//!
//! Over 800 lines on purpose: one handler per management operation the SDKs and
//! bosun call, each beside the ATOM it reads and writes.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body as _, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, IF_MATCH};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use time::OffsetDateTime;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::Shared;
use crate::atom::{self, Element, MAX_TIME_SPAN, SCHEMA_INSTANCE_NAMESPACE, SERVICE_BUS_NAMESPACE};
use crate::namespace::{EntitySettings, Namespace, Refusal, entity_key};
use crate::sas::{check_token, url_decode};
use crate::server::{apply_outcomes, lock};

/// How long a new connection may take to send its first bytes.
const SNIFF_WAIT: Duration = Duration::from_secs(10);
/// The largest request body taken.
const BODY_LIMIT: usize = 1 << 20;
/// The content type of an answer with one entry.
const ENTRY_TYPE: &str = "application/atom+xml;type=entry;charset=utf-8";
/// The content type of an answer with a feed.
const FEED_TYPE: &str = "application/atom+xml;type=feed;charset=utf-8";
/// The content type of an error answer.
const ERROR_TYPE: &str = "application/xml; charset=utf-8";

/// Properties Service Bus computes: never kept from a request.
const READ_ONLY: &[&str] = &[
    "SizeInBytes",
    "MessageCount",
    "CreatedAt",
    "UpdatedAt",
    "AccessedAt",
    "CountDetails",
    "SubscriptionCount",
    "EntityAvailabilityStatus",
    "Name",
];

/// Whether a new connection speaks HTTP: its first bytes are not `AMQP`.
/// Waits for up to four bytes (or [`SNIFF_WAIT`]); a connection that sends
/// nothing is left to the AMQP side.
pub(crate) async fn is_http(stream: &TcpStream) -> bool {
    let deadline = tokio::time::Instant::now() + SNIFF_WAIT;
    let mut buffer = [0u8; 4];
    loop {
        match tokio::time::timeout_at(deadline, stream.peek(&mut buffer)).await {
            Ok(Ok(read)) if read >= buffer.len() => return &buffer != b"AMQP",
            Ok(Ok(0) | Err(_)) | Err(_) => return false,
            Ok(Ok(read)) => {
                if !b"AMQP".starts_with(&buffer[..read]) {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
}

/// Serves one HTTP/1.1 connection until the client closes it or the
/// broker stops.
pub(crate) async fn serve(stream: TcpStream, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |request| {
        let shared = Arc::clone(&shared);
        async move { Ok::<_, Infallible>(handle(request, &shared).await) }
    });
    let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        result = connection => {
            if let Err(err) = result {
                tracing::debug!(error = %err, "management API connection ended");
            }
        }
        _ = stop.changed() => {}
    }
}

/// What the management API knows of an entity beyond its
/// [`EntitySettings`]: its name as created, the properties sent that the
/// broker keeps as they are, when it was created and updated.
#[derive(Debug, Clone)]
struct Record {
    name: String,
    properties: Vec<(String, String)>,
    /// A rule's filter type when it is not what the namespace shows
    /// (`FalseFilter`, kept as the SQL filter `1=0`).
    filter_type: Option<String>,
    created: OffsetDateTime,
    updated: OffsetDateTime,
}

impl Record {
    fn new(name: &str) -> Self {
        let now = OffsetDateTime::now_utc();
        Self {
            name: name.to_owned(),
            properties: Vec::new(),
            filter_type: None,
            created: now,
            updated: now,
        }
    }

    fn property(&self, name: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// The management API's records, by entity key (lower-case path:
/// `commit`, `t/subscriptions/s`, `t/subscriptions/s/rules/r`).
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    records: HashMap<String, Record>,
}

impl Catalog {
    /// Notes the name an entity was created with (entities made from code).
    pub(crate) fn named(&mut self, path: &str) {
        let key = entity_key(path);
        let name = path.rsplit('/').next().unwrap_or(path);
        self.records.insert(key, Record::new(name));
    }

    /// Forgets an entity and everything under it.
    pub(crate) fn forget(&mut self, path: &str) {
        let key = entity_key(path);
        let prefix = format!("{key}/");
        self.records
            .retain(|other, _| *other != key && !other.starts_with(&prefix));
    }

    fn record(&self, key: &str, fallback_name: &str) -> Record {
        self.records
            .get(key)
            .cloned()
            .unwrap_or_else(|| Record::new(fallback_name))
    }
}

/// An answer: status, content type and body.
struct Reply {
    status: u16,
    content_type: &'static str,
    body: String,
}

impl Reply {
    fn entry(status: u16, body: String) -> Self {
        Self {
            status,
            content_type: ENTRY_TYPE,
            body,
        }
    }

    fn feed(body: String) -> Self {
        Self {
            status: 200,
            content_type: FEED_TYPE,
            body,
        }
    }

    fn error(status: u16, detail: &str) -> Self {
        Self {
            status,
            content_type: ERROR_TYPE,
            body: atom::error(status, detail),
        }
    }

    fn empty() -> Self {
        Self {
            status: 200,
            content_type: ENTRY_TYPE,
            body: String::new(),
        }
    }

    fn refusal(refusal: &Refusal) -> Self {
        Self::error(refusal.status_code(), &refusal.to_string())
    }
}

/// What a path names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A queue or topic.
    Entity(String),
    /// `{topic}/Subscriptions/{name}`.
    Subscription { topic: String, name: String },
    /// `{topic}/Subscriptions/{subscription}/Rules`.
    Rules { topic: String, subscription: String },
    /// `{topic}/Subscriptions/{subscription}/Rules/{name}`.
    Rule {
        topic: String,
        subscription: String,
        name: String,
    },
}

fn target(path: &str) -> Option<Target> {
    let segments: Vec<&str> = path.split('/').collect();
    if segments
        .iter()
        .any(|segment| segment.is_empty() || segment.starts_with("$Resources"))
    {
        return None;
    }
    let Some(at) = segments
        .iter()
        .position(|segment| segment.eq_ignore_ascii_case("Subscriptions"))
    else {
        return Some(Target::Entity(path.to_owned()));
    };
    let topic = segments[..at].join("/");
    let subscription = (*segments.get(at + 1)?).to_owned();
    if topic.is_empty() {
        return None;
    }
    match &segments[at + 2..] {
        [] => Some(Target::Subscription {
            topic,
            name: subscription,
        }),
        [rules] if rules.eq_ignore_ascii_case("Rules") => Some(Target::Rules { topic, subscription }),
        [rules, name] if rules.eq_ignore_ascii_case("Rules") => Some(Target::Rule {
            topic,
            subscription,
            name: (*name).to_owned(),
        }),
        _ => None,
    }
}

/// Why a request body could not be read; a `PUT` with one is answered 400.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    /// The connection failed while the body was read.
    #[error("{0}")]
    Read(#[from] hyper::Error),
    /// Over [`BODY_LIMIT`] bytes.
    #[error("the request body is too large")]
    TooLarge,
    /// Not UTF-8 text.
    #[error("the request body is not UTF-8")]
    NotUtf8(#[source] std::string::FromUtf8Error),
}

/// Reads a request body (at most [`BODY_LIMIT`] bytes).
async fn read_body(mut body: Incoming) -> Result<String, BodyError> {
    let mut bytes = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        if let Ok(data) = frame?.into_data() {
            bytes.extend_from_slice(&data);
            if bytes.len() > BODY_LIMIT {
                return Err(BodyError::TooLarge);
            }
        }
    }
    String::from_utf8(bytes).map_err(BodyError::NotUtf8)
}

/// One request as the handlers see it.
struct Call {
    method: Method,
    host: String,
    path: String,
    query: Vec<(String, String)>,
    authorization: Option<String>,
    replace: bool,
    body: Result<String, BodyError>,
}

async fn handle(request: Request<Incoming>, shared: &Shared) -> Response<String> {
    let header = |name| {
        request
            .headers()
            .get(name)
            .and_then(|value: &hyper::header::HeaderValue| value.to_str().ok())
            .map(str::to_owned)
    };
    let host = header(HOST).unwrap_or_else(|| "127.0.0.1".to_owned());
    let authorization = header(AUTHORIZATION);
    let replace = header(IF_MATCH).is_some();
    let method = request.method().clone();
    let path = url_decode(request.uri().path().trim_matches('/'));
    let query = request
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (url_decode(key), url_decode(value))
        })
        .collect();
    let body = read_body(request.into_body()).await;
    let call = Call {
        method,
        host,
        path,
        query,
        authorization,
        replace,
        body,
    };
    let reply = answer(shared, &call);
    tracing::debug!(method = %call.method, path = %call.path, status = reply.status, "management API request");
    Response::builder()
        .status(reply.status)
        .header(CONTENT_TYPE, reply.content_type)
        .body(reply.body)
        .unwrap_or_else(|_| Response::new(String::new()))
}

/// Checks the `Authorization` header against the broker's key for the
/// request's URL (`sb://host/path`, or the token's `http(s)://` form).
fn authorize(shared: &Shared, call: &Call) -> Result<(), Reply> {
    let Some(key) = shared.key.as_ref() else {
        return Ok(());
    };
    let Some(authorization) = call.authorization.as_deref() else {
        return Err(Reply::error(
            401,
            "MissingToken: The request has no Authorization header",
        ));
    };
    let (token_type, token) = if authorization.starts_with("SharedAccessSignature") {
        ("servicebus.windows.net:sastoken", authorization)
    } else if let Some(token) = authorization.strip_prefix("Bearer ") {
        ("jwt", token)
    } else {
        return Err(Reply::error(
            401,
            "MalformedToken: The credentials contained in the authorization header are not a shared access signature or a bearer token",
        ));
    };
    let now = OffsetDateTime::now_utc();
    // The host with its port, and without (clients sign for the
    // namespace's host name, the port being the emulator's).
    let bare = call.host.rsplit_once(':').map_or(call.host.as_str(), |(host, _)| host);
    let audiences = [call.host.as_str(), bare]
        .into_iter()
        .flat_map(|host| ["sb", "https", "http"].map(|scheme| format!("{scheme}://{host}/{}", call.path)));
    let mut first = None;
    for audience in audiences {
        match check_token(Some(key), token_type, token, &audience, now) {
            Ok(()) => return Ok(()),
            Err(refusal) => {
                first.get_or_insert(refusal);
            }
        }
    }
    let detail = first.map_or_else(String::new, |refusal| refusal.to_string());
    Err(Reply::error(401, &format!("InvalidSignature: {detail}")))
}

fn answer(shared: &Shared, call: &Call) -> Reply {
    if let Err(reply) = authorize(shared, call) {
        return reply;
    }
    let Some(target) = target(&call.path) else {
        return Reply::error(
            400,
            &format!(
                "The request path `/{}` is not one the test broker's management API serves",
                call.path
            ),
        );
    };
    apply_outcomes(shared);
    let mut namespace = lock(&shared.namespace);
    let mut catalog = lock(&shared.catalog);
    let reply = match call.method {
        Method::GET => get(&namespace, &catalog, call, &target),
        Method::PUT => match &call.body {
            Ok(body) => put(&mut namespace, &mut catalog, call, &target, body),
            Err(err) => Reply::error(400, &err.to_string()),
        },
        Method::DELETE => delete(&mut namespace, &mut catalog, &target),
        _ => Reply::error(405, &format!("{} is not supported", call.method)),
    };
    drop(catalog);
    drop(namespace);
    if call.method != Method::GET {
        shared.changed.notify_waiters();
    }
    reply
}

fn subscription_path(topic: &str, subscription: &str) -> String {
    format!("{topic}/Subscriptions/{subscription}")
}

fn rule_path(topic: &str, subscription: &str, rule: &str) -> String {
    format!("{topic}/Subscriptions/{subscription}/Rules/{rule}")
}

fn not_found(host: &str, what: &str) -> Reply {
    Reply::error(
        404,
        &format!(
            "The messaging entity '{host}:{what}' could not be found. To know more visit https://aka.ms/sbResourceMgrExceptions"
        ),
    )
}

fn get(namespace: &Namespace, catalog: &Catalog, call: &Call, target: &Target) -> Reply {
    let host = call.host.as_str();
    match target {
        Target::Entity(path) => match entity_entry(namespace, catalog, host, path) {
            Some(entry) => Reply::entry(200, entry),
            None => Reply::feed(atom::empty_feed()),
        },
        Target::Subscription { topic, name } => match subscription_entry(namespace, catalog, host, topic, name) {
            Some(entry) => Reply::entry(200, entry),
            None => not_found(host, &format!("Topic:{topic}|{name}")),
        },
        Target::Rules { topic, subscription } => {
            let Ok(rules) = namespace.rules(topic, subscription) else {
                return not_found(host, &format!("Topic:{topic}|{subscription}"));
            };
            let number = |name: &str| {
                call.query
                    .iter()
                    .find(|(key, _)| key == name)
                    .and_then(|(_, value)| value.parse::<usize>().ok())
            };
            let entries: Vec<String> = rules
                .iter()
                .skip(number("$skip").unwrap_or(0))
                .take(number("$top").unwrap_or(usize::MAX))
                .map(|(key, sql)| rule_entry(catalog, host, topic, subscription, key, sql.as_deref()))
                .collect();
            Reply::feed(atom::feed(
                host,
                &format!("{}/Rules", subscription_path(topic, subscription)),
                "Rules",
                &entries,
            ))
        }
        Target::Rule {
            topic,
            subscription,
            name,
        } => {
            let Ok(rules) = namespace.rules(topic, subscription) else {
                return not_found(host, &format!("Topic:{topic}|{subscription}"));
            };
            let wanted = name.to_ascii_lowercase();
            match rules.iter().find(|(key, _)| *key == wanted) {
                Some((key, sql)) => {
                    Reply::entry(200, rule_entry(catalog, host, topic, subscription, key, sql.as_deref()))
                }
                None => not_found(host, &format!("Topic:{topic}|{subscription}|{name}")),
            }
        }
    }
}

/// A description element with `fields` in order, then the kept properties
/// not among them.
fn description(kind: &str, fields: &[(&str, String)], record: &Record) -> String {
    let mut xml = format!("<{kind} xmlns=\"{SERVICE_BUS_NAMESPACE}\" xmlns:i=\"{SCHEMA_INSTANCE_NAMESPACE}\">");
    for (name, value) in fields {
        atom::element(&mut xml, name, value);
    }
    for (name, value) in &record.properties {
        if !fields.iter().any(|(field, _)| field == name) {
            atom::element(&mut xml, name, value);
        }
    }
    xml.push_str(&format!("</{kind}>"));
    xml
}

fn kept(record: &Record, name: &'static str, default: &str) -> (&'static str, String) {
    (name, record.property(name).unwrap_or(default).to_owned())
}

fn duplicate_fields(settings: &EntitySettings, record: &Record) -> [(&'static str, String); 2] {
    let window = settings
        .duplicate_detection_window
        .map(atom::format_duration)
        .or_else(|| {
            record
                .property("DuplicateDetectionHistoryTimeWindow")
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "PT10M".to_owned());
    [
        (
            "RequiresDuplicateDetection",
            settings.duplicate_detection_window.is_some().to_string(),
        ),
        ("DuplicateDetectionHistoryTimeWindow", window),
    ]
}

fn times(record: &Record) -> [(&'static str, String); 3] {
    [
        ("CreatedAt", atom::timestamp(record.created)),
        ("UpdatedAt", atom::timestamp(record.updated)),
        ("AccessedAt", atom::timestamp(record.updated)),
    ]
}

fn queue_description(settings: &EntitySettings, record: &Record, messages: usize) -> String {
    let [requires_duplicate_detection, window] = duplicate_fields(settings, record);
    let [created, updated, accessed] = times(record);
    let fields = [
        ("LockDuration", atom::format_duration(settings.lock_duration)),
        kept(record, "MaxSizeInMegabytes", "1024"),
        requires_duplicate_detection,
        ("RequiresSession", settings.requires_session.to_string()),
        kept(record, "DefaultMessageTimeToLive", MAX_TIME_SPAN),
        kept(record, "DeadLetteringOnMessageExpiration", "false"),
        window,
        ("MaxDeliveryCount", settings.max_delivery_count.to_string()),
        kept(record, "EnableBatchedOperations", "true"),
        ("SizeInBytes", "0".to_owned()),
        ("MessageCount", messages.to_string()),
        kept(record, "IsAnonymousAccessible", "false"),
        kept(record, "Status", "Active"),
        created,
        updated,
        accessed,
        kept(record, "SupportOrdering", "true"),
        kept(record, "AutoDeleteOnIdle", MAX_TIME_SPAN),
        kept(record, "EnablePartitioning", "false"),
        ("EntityAvailabilityStatus", "Available".to_owned()),
        kept(record, "EnableExpress", "false"),
    ];
    description("QueueDescription", &fields, record)
}

fn topic_description(settings: &EntitySettings, record: &Record, subscriptions: usize) -> String {
    let [requires_duplicate_detection, window] = duplicate_fields(settings, record);
    let [created, updated, accessed] = times(record);
    let fields = [
        kept(record, "DefaultMessageTimeToLive", MAX_TIME_SPAN),
        kept(record, "MaxSizeInMegabytes", "1024"),
        requires_duplicate_detection,
        window,
        kept(record, "EnableBatchedOperations", "true"),
        ("SizeInBytes", "0".to_owned()),
        kept(record, "FilteringMessagesBeforePublishing", "false"),
        kept(record, "IsAnonymousAccessible", "false"),
        kept(record, "Status", "Active"),
        created,
        updated,
        accessed,
        kept(record, "SupportOrdering", "true"),
        ("SubscriptionCount", subscriptions.to_string()),
        kept(record, "AutoDeleteOnIdle", MAX_TIME_SPAN),
        kept(record, "EnablePartitioning", "false"),
        ("EntityAvailabilityStatus", "Available".to_owned()),
        kept(record, "EnableSubscriptionPartitioning", "false"),
        kept(record, "EnableExpress", "false"),
    ];
    description("TopicDescription", &fields, record)
}

fn subscription_description(settings: &EntitySettings, record: &Record, messages: usize) -> String {
    let [created, updated, accessed] = times(record);
    let fields = [
        ("LockDuration", atom::format_duration(settings.lock_duration)),
        ("RequiresSession", settings.requires_session.to_string()),
        kept(record, "DefaultMessageTimeToLive", MAX_TIME_SPAN),
        kept(record, "DeadLetteringOnMessageExpiration", "false"),
        kept(record, "DeadLetteringOnFilterEvaluationExceptions", "true"),
        ("MessageCount", messages.to_string()),
        ("MaxDeliveryCount", settings.max_delivery_count.to_string()),
        kept(record, "EnableBatchedOperations", "true"),
        kept(record, "Status", "Active"),
        created,
        updated,
        accessed,
        kept(record, "AutoDeleteOnIdle", MAX_TIME_SPAN),
        ("EntityAvailabilityStatus", "Available".to_owned()),
    ];
    description("SubscriptionDescription", &fields, record)
}

fn entity_entry(namespace: &Namespace, catalog: &Catalog, host: &str, path: &str) -> Option<String> {
    let key = entity_key(path);
    let record = catalog.record(&key, path);
    let description = if let Some(settings) = namespace.queue_settings(path) {
        let messages = namespace.message_count(&key).unwrap_or(0);
        queue_description(&settings, &record, messages)
    } else {
        let settings = namespace.topic_settings(path)?;
        topic_description(&settings, &record, namespace.subscription_count(path))
    };
    Some(atom::entry(
        host,
        &record.name,
        &record.name,
        record.created,
        record.updated,
        &description,
    ))
}

fn subscription_entry(namespace: &Namespace, catalog: &Catalog, host: &str, topic: &str, name: &str) -> Option<String> {
    let settings = namespace.subscription_settings(topic, name)?;
    let path = subscription_path(topic, name);
    let key = entity_key(&path);
    let record = catalog.record(&key, name);
    let messages = namespace.message_count(&key).unwrap_or(0);
    let description = subscription_description(&settings, &record, messages);
    Some(atom::entry(
        host,
        &subscription_path(topic, &record.name),
        &record.name,
        record.created,
        record.updated,
        &description,
    ))
}

/// A rule's entry; `key` is its lower-case name, `sql` its SQL filter
/// (`None`: a true filter).
fn rule_entry(catalog: &Catalog, host: &str, topic: &str, subscription: &str, key: &str, sql: Option<&str>) -> String {
    let fallback = if key == "$default" { "$Default" } else { key };
    let record = catalog.record(&entity_key(&rule_path(topic, subscription, key)), fallback);
    let (filter_type, expression) = match sql {
        None => ("TrueFilter", "1=1"),
        Some(sql) => (record.filter_type.as_deref().unwrap_or("SqlFilter"), sql),
    };
    let mut xml = format!(
        "<RuleDescription xmlns=\"{SERVICE_BUS_NAMESPACE}\" xmlns:i=\"{SCHEMA_INSTANCE_NAMESPACE}\">\
         <Filter i:type=\"{filter_type}\">"
    );
    atom::element(&mut xml, "SqlExpression", expression);
    atom::element(&mut xml, "CompatibilityLevel", "20");
    xml.push_str("</Filter><Action i:type=\"EmptyRuleAction\"/>");
    atom::element(&mut xml, "CreatedAt", &atom::timestamp(record.created));
    atom::element(&mut xml, "Name", &record.name);
    xml.push_str("</RuleDescription>");
    atom::entry(
        host,
        &rule_path(topic, subscription, &record.name),
        &record.name,
        record.created,
        record.updated,
        &xml,
    )
}

/// The description a `PUT` carries, checked to be `kind`.
fn description_of(body: &str, kinds: &[&str]) -> Result<Element, Reply> {
    let description = atom::entry_description(body)
        .map_err(|err| Reply::error(400, &format!("The request body is not a valid ATOM entry: {err}")))?;
    if !kinds.contains(&description.name.as_str()) {
        return Err(Reply::error(
            400,
            &format!(
                "The entry holds a `{}`, expected {}",
                description.name,
                kinds.join(" or ")
            ),
        ));
    }
    Ok(description)
}

fn bad(detail: String) -> Reply {
    Reply::error(400, &detail)
}

fn text_of<'e>(description: &'e Element, name: &str) -> Option<&'e str> {
    description.child(name).map(|child| child.text.trim())
}

fn boolean(description: &Element, name: &str) -> Result<Option<bool>, Reply> {
    match text_of(description, name) {
        None => Ok(None),
        Some(text) if text.eq_ignore_ascii_case("true") => Ok(Some(true)),
        Some(text) if text.eq_ignore_ascii_case("false") => Ok(Some(false)),
        Some(text) => Err(bad(format!("{name} must be true or false, not `{text}`"))),
    }
}

fn duration(description: &Element, name: &str, range: (Duration, Duration)) -> Result<Option<Duration>, Reply> {
    let Some(text) = text_of(description, name) else {
        return Ok(None);
    };
    let value =
        atom::parse_duration(text).ok_or_else(|| bad(format!("{name} `{text}` is not an ISO 8601 duration")))?;
    if value < range.0 || value > range.1 {
        return Err(bad(format!(
            "{name} must be between {} and {}, not {text}",
            atom::format_duration(range.0),
            atom::format_duration(range.1)
        )));
    }
    Ok(Some(value))
}

/// The settings and kept properties of a queue, topic or subscription
/// description. `existing`: the entity's settings on a replace;
/// `detects_duplicates`: a queue or topic (a subscription has no duplicate
/// detection of its own, and keeps what it had).
fn settings_of(
    description: &Element,
    existing: Option<EntitySettings>,
    detects_duplicates: bool,
) -> Result<(EntitySettings, Vec<(String, String)>), Reply> {
    let requires_session = boolean(description, "RequiresSession")?.unwrap_or(false);
    if let Some(existing) = existing
        && existing.requires_session != requires_session
    {
        return Err(bad(
            "The value for the RequiresSession property of an existing entity cannot be changed".to_owned(),
        ));
    }
    for forward in ["ForwardTo", "ForwardDeadLetteredMessagesTo"] {
        if text_of(description, forward).is_some_and(|text| !text.is_empty()) {
            return Err(bad(format!("{forward}: the test broker does not forward messages")));
        }
    }
    let lock_duration = duration(
        description,
        "LockDuration",
        (Duration::from_secs(5), Duration::from_secs(300)),
    )?
    .unwrap_or(Duration::from_secs(60));
    let max_delivery_count = match text_of(description, "MaxDeliveryCount") {
        None => 10,
        Some(text) => text.parse::<u32>().ok().filter(|count| *count >= 1).ok_or_else(|| {
            bad(format!(
                "MaxDeliveryCount must be a whole number of at least 1, not `{text}`"
            ))
        })?,
    };
    let window = duration(
        description,
        "DuplicateDetectionHistoryTimeWindow",
        (Duration::from_secs(20), Duration::from_secs(7 * 86_400)),
    )?
    .unwrap_or(Duration::from_secs(600));
    let requires_duplicate_detection = boolean(description, "RequiresDuplicateDetection")?.unwrap_or(false);
    if detects_duplicates
        && let Some(existing) = existing
        && existing.duplicate_detection_window.is_some() != requires_duplicate_detection
    {
        return Err(bad(
            "The value for the RequiresDuplicateDetection property of an existing entity cannot be changed".to_owned(),
        ));
    }
    let settings = EntitySettings {
        lock_duration,
        max_delivery_count,
        duplicate_detection_window: if detects_duplicates {
            requires_duplicate_detection.then_some(window)
        } else {
            existing.and_then(|existing| existing.duplicate_detection_window)
        },
        requires_session,
    };
    let properties = description
        .children
        .iter()
        .filter(|child| child.children.is_empty() && !READ_ONLY.contains(&child.name.as_str()))
        .map(|child| (child.name.clone(), child.text.trim().to_owned()))
        .collect();
    Ok((settings, properties))
}

/// Checks create-versus-replace against whether the entity exists: 409 for
/// a create of an existing one, 404 for a replace of a missing one.
fn check_exists(exists: bool, replace: bool, host: &str, what: &str) -> Result<(), Reply> {
    match (exists, replace) {
        (true, false) => Err(Reply::error(
            409,
            &format!(
                "SubCode=40900. Conflict. The messaging entity '{host}:{what}' already exists. To know more visit https://aka.ms/sbResourceMgrExceptions"
            ),
        )),
        (false, true) => Err(not_found(host, what)),
        _ => Ok(()),
    }
}

/// Stores a record for `key`, keeping its creation time on a replace.
fn remember(
    catalog: &mut Catalog,
    key: &str,
    name: &str,
    properties: Vec<(String, String)>,
    filter_type: Option<String>,
) {
    let now = OffsetDateTime::now_utc();
    let created = catalog.records.get(key).map_or(now, |record| record.created);
    catalog.records.insert(
        key.to_owned(),
        Record {
            name: name.to_owned(),
            properties,
            filter_type,
            created,
            updated: now,
        },
    );
}

fn put(namespace: &mut Namespace, catalog: &mut Catalog, call: &Call, target: &Target, body: &str) -> Reply {
    match put_inner(namespace, catalog, call, target, body) {
        Ok(reply) | Err(reply) => reply,
    }
}

fn put_inner(
    namespace: &mut Namespace,
    catalog: &mut Catalog,
    call: &Call,
    target: &Target,
    body: &str,
) -> Result<Reply, Reply> {
    let host = call.host.as_str();
    let status = if call.replace { 200 } else { 201 };
    match target {
        Target::Entity(path) => {
            let description = description_of(body, &["QueueDescription", "TopicDescription"])?;
            let queue = description.name == "QueueDescription";
            let existing_queue = namespace.queue_settings(path);
            let existing_topic = namespace.topic_settings(path);
            let kind = if queue { "Queue" } else { "Topic" };
            check_exists(
                existing_queue.is_some() || existing_topic.is_some(),
                call.replace,
                host,
                &format!("{kind}:{path}"),
            )?;
            if (queue && existing_topic.is_some()) || (!queue && existing_queue.is_some()) {
                return Err(Reply::error(
                    409,
                    &format!(
                        "The messaging entity '{host}:{path}' is a {}",
                        if queue { "topic" } else { "queue" }
                    ),
                ));
            }
            let (settings, properties) = settings_of(&description, existing_queue.or(existing_topic), true)?;
            let result = match (queue, call.replace) {
                (true, false) => namespace.create_queue(path, settings),
                (true, true) => namespace.set_queue_settings(path, settings),
                (false, false) => namespace.create_topic(path, settings),
                (false, true) => namespace.set_topic_settings(path, settings),
            };
            result.map_err(|refusal| Reply::refusal(&refusal))?;
            let key = entity_key(path);
            let name = catalog
                .records
                .get(&key)
                .map_or(path.as_str(), |r| r.name.as_str())
                .to_owned();
            remember(catalog, &key, &name, properties, None);
            let entry = entity_entry(namespace, catalog, host, path).unwrap_or_default();
            Ok(Reply::entry(status, entry))
        }
        Target::Subscription { topic, name } => {
            let description = description_of(body, &["SubscriptionDescription"])?;
            if namespace.topic_settings(topic).is_none() {
                return Err(not_found(host, &format!("Topic:{topic}")));
            }
            let existing = namespace.subscription_settings(topic, name);
            check_exists(existing.is_some(), call.replace, host, &format!("Topic:{topic}|{name}"))?;
            let (settings, properties) = settings_of(&description, existing, false)?;
            let result = if call.replace {
                namespace.set_subscription_settings(topic, name, settings)
            } else {
                namespace.create_subscription(topic, name, settings)
            };
            result.map_err(|refusal| Reply::refusal(&refusal))?;
            let key = entity_key(&subscription_path(topic, name));
            let shown = catalog
                .records
                .get(&key)
                .map_or(name.as_str(), |r| r.name.as_str())
                .to_owned();
            remember(catalog, &key, &shown, properties, None);
            let entry = subscription_entry(namespace, catalog, host, topic, name).unwrap_or_default();
            Ok(Reply::entry(status, entry))
        }
        Target::Rule {
            topic,
            subscription,
            name,
        } => {
            let description = description_of(body, &["RuleDescription"])?;
            let rules = namespace
                .rules(topic, subscription)
                .map_err(|_| not_found(host, &format!("Topic:{topic}|{subscription}")))?;
            let wanted = name.to_ascii_lowercase();
            let exists = rules.iter().any(|(key, _)| *key == wanted);
            check_exists(
                exists,
                call.replace,
                host,
                &format!("Topic:{topic}|{subscription}|{name}"),
            )?;
            if let Some(action) = description.child("Action")
                && action.attribute("type").is_some_and(|kind| kind != "EmptyRuleAction")
            {
                return Err(bad("Rule actions: the test broker only has EmptyRuleAction".to_owned()));
            }
            let filter = description.child("Filter");
            let filter_type = filter.and_then(|f| f.attribute("type")).unwrap_or("TrueFilter");
            let sql = filter.and_then(|f| text_of(f, "SqlExpression"));
            let result = match filter_type {
                "SqlFilter" => {
                    let sql = sql.ok_or_else(|| bad("A SqlFilter needs a SqlExpression".to_owned()))?;
                    namespace.put_rule(topic, subscription, name, sql)
                }
                "TrueFilter" => namespace.put_true_rule(topic, subscription, name),
                "FalseFilter" => namespace.put_rule(topic, subscription, name, "1=0"),
                other => {
                    return Err(bad(format!(
                        "{other}: the test broker has SQL, true and false filters only"
                    )));
                }
            };
            result.map_err(|refusal| Reply::refusal(&refusal))?;
            let key = entity_key(&rule_path(topic, subscription, name));
            let kept_type = (filter_type == "FalseFilter").then(|| filter_type.to_owned());
            remember(catalog, &key, name, Vec::new(), kept_type);
            let sql = match filter_type {
                "TrueFilter" => None,
                "FalseFilter" => Some("1=0"),
                _ => sql,
            };
            Ok(Reply::entry(
                status,
                rule_entry(catalog, host, topic, subscription, &wanted, sql),
            ))
        }
        Target::Rules { .. } => Err(Reply::error(405, "PUT is not supported on a rule collection")),
    }
}

fn delete(namespace: &mut Namespace, catalog: &mut Catalog, target: &Target) -> Reply {
    let (deleted, path) = match target {
        Target::Entity(path) => (
            namespace.delete_queue(path) || namespace.delete_topic(path),
            path.clone(),
        ),
        Target::Subscription { topic, name } => (
            namespace.delete_subscription(topic, name),
            subscription_path(topic, name),
        ),
        Target::Rule {
            topic,
            subscription,
            name,
        } => (
            namespace.remove_rule(topic, subscription, name).unwrap_or(false),
            rule_path(topic, subscription, name),
        ),
        Target::Rules { .. } => return Reply::error(405, "DELETE is not supported on a rule collection"),
    };
    if !deleted {
        return Reply::error(
            404,
            &format!(
                "The messaging entity '{path}' could not be found. To know more visit https://aka.ms/sbResourceMgrExceptions"
            ),
        );
    }
    catalog.forget(&path);
    Reply::empty()
}

#[cfg(test)]
mod tests;
