//! Tests of `src/backends/servicebus/management.rs`.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::backends::servicebus::connection::ServiceBusAuth;
use crate::ports::topology::Subscription;

const SUB: &str = "bosun-events/Subscriptions/release-orchestration";

/// A request the scripted server received.
#[derive(Debug, Clone)]
struct Recorded {
    method: String,
    path: String,
    query: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    body: String,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

#[derive(Default)]
struct State {
    /// Replies per `METHOD path`, in the order they are to be given.
    script: HashMap<String, VecDeque<(u16, String)>>,
    recorded: Vec<Recorded>,
    problems: Vec<String>,
}

/// A server answering like the management API: scripted replies per
/// `METHOD path` (requests of a plan run concurrently, so there is no
/// global order), every request recorded.
struct ScriptedServiceBus {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl ScriptedServiceBus {
    async fn start(script: &[(&str, &str, u16, &str)]) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let mut state = State::default();
        for (method, path, status, body) in script {
            state
                .script
                .entry(format!("{method} {path}"))
                .or_default()
                .push_back((*status, (*body).to_owned()));
        }
        let state = Arc::new(Mutex::new(state));
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = Arc::clone(&shared);
                tokio::spawn(async move {
                    if let Err(err) = serve(stream, &state).await {
                        state.lock().unwrap().problems.push(format!("I/O: {err}"));
                    }
                });
            }
        });
        Self { addr, state, task }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops; fails on unexpected requests or unused replies.
    fn finish(self) -> Vec<Recorded> {
        self.task.abort();
        let state = self.state.lock().unwrap();
        assert!(state.problems.is_empty(), "{:#?}", state.problems);
        let unused: Vec<&String> = state
            .script
            .iter()
            .filter(|(_, replies)| !replies.is_empty())
            .map(|(key, _)| key)
            .collect();
        assert!(unused.is_empty(), "replies never asked for: {unused:?}");
        state.recorded.clone()
    }
}

async fn serve(mut stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    loop {
        let mut buffer = Vec::new();
        let mut chunk = [0u8; 8192];
        let header_end = loop {
            if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            let read = stream.read(&mut chunk).await?;
            if read == 0 {
                return Ok(());
            }
            buffer.extend_from_slice(&chunk[..read]);
        };
        let head = String::from_utf8_lossy(&buffer[..header_end]).into_owned();
        let mut lines = head.split("\r\n");
        let mut request_line = lines.next().unwrap_or_default().split(' ');
        let method = request_line.next().unwrap_or_default().to_owned();
        let target = request_line.next().unwrap_or_default().to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(key, value)| (key.trim().to_ascii_lowercase(), value.trim().to_owned()))
            .collect();
        let length: usize = headers
            .iter()
            .find(|(key, _)| key == "content-length")
            .and_then(|(_, value)| value.parse().ok())
            .unwrap_or(0);
        let mut body = buffer[header_end + 4..].to_vec();
        while body.len() < length {
            let read = stream.read(&mut chunk).await?;
            if read == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..read]);
        }
        let url = reqwest::Url::parse(&format!("http://mock{target}")).expect("target");
        let recorded = Recorded {
            method: method.clone(),
            path: url.path().trim_start_matches('/').to_owned(),
            query: url
                .query_pairs()
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        };
        let (status, reply) = {
            let mut state = state.lock().unwrap();
            let key = format!("{} {}", recorded.method, recorded.path);
            let reply = state.script.get_mut(&key).and_then(VecDeque::pop_front);
            let reply = reply.unwrap_or_else(|| {
                state.problems.push(format!("unexpected {key}"));
                (418, String::new())
            });
            state.recorded.push(recorded);
            reply
        };
        let response = format!(
            "HTTP/1.1 {status} Scripted\r\nContent-Type: application/atom+xml;type=entry;charset=utf-8\r\n\
             Content-Length: {}\r\n\r\n{reply}",
            reply.len()
        );
        stream.write_all(response.as_bytes()).await?;
    }
}

fn endpoint(emulator: bool) -> ServiceBusEndpoint {
    ServiceBusEndpoint {
        host: "contoso.servicebus.windows.net".into(),
        amqp_port: 5671,
        emulator,
        auth: ServiceBusAuth::SharedAccessKey {
            key_name: "RootManageSharedAccessKey".into(),
            key: "c2VjcmV0".into(),
        },
    }
}

fn client(server_url: &str, emulator: bool) -> ManagementClient {
    let endpoint = endpoint(emulator);
    let tokens = TokenSource::for_endpoint(&endpoint).unwrap();
    ManagementClient::new(&endpoint, tokens)
        .unwrap()
        .with_base_url(server_url)
}

fn topology() -> Topology {
    Topology {
        queues: vec!["commit".into()],
        topic: "bosun-events".into(),
        subscriptions: vec![Subscription {
            name: "release-orchestration".into(),
            event_types: vec!["BuildCompleted".into(), "ImagePublished".into()],
        }],
        sessions: Vec::new(),
    }
}

fn entry(title: &str, description: &str) -> String {
    format!(
        "<entry xmlns=\"http://www.w3.org/2005/Atom\"><id>https://contoso.servicebus.windows.net/{title}</id>\
         <title type=\"text\">{title}</title><content type=\"application/xml\">{description}</content></entry>"
    )
}

fn rule(name: &str, filter_type: &str, sql: &str) -> String {
    format!(
        "<entry><title type=\"text\">{name}</title><content type=\"application/xml\">\
         <RuleDescription xmlns=\"http://schemas.microsoft.com/netservices/2010/10/servicebus/connect\" \
         xmlns:i=\"http://www.w3.org/2001/XMLSchema-instance\"><Filter i:type=\"{filter_type}\">\
         <SqlExpression>{sql}</SqlExpression><CompatibilityLevel>20</CompatibilityLevel></Filter>\
         <Action i:type=\"EmptyRuleAction\"/><Name>{name}</Name></RuleDescription></content></entry>"
    )
}

const EMPTY_FEED: &str =
    "<feed xmlns=\"http://www.w3.org/2005/Atom\"><title type=\"text\">Publicly Listed Services</title></feed>";
const NOT_FOUND: &str =
    "<Error><Code>404</Code><Detail>The messaging entity could not be found. TrackingId:1</Detail></Error>";

#[tokio::test]
async fn plans_and_creates_a_topology_in_an_empty_namespace() {
    let created = |path: &str| entry(path, "<QueueDescription/>");
    let server = ScriptedServiceBus::start(&[
        ("GET", "commit", 404, NOT_FOUND),
        ("GET", "bosun-events", 200, EMPTY_FEED),
        ("PUT", "commit", 201, &created("commit")),
        ("PUT", "bosun-events", 201, &created("bosun-events")),
        ("PUT", SUB, 201, &created("release-orchestration")),
        ("PUT", &format!("{SUB}/Rules/bosun-types"), 201, &created("bosun-types")),
        ("PUT", &format!("{SUB}/Rules/bosun-replay"), 409, NOT_FOUND),
        ("DELETE", &format!("{SUB}/Rules/$Default"), 200, ""),
    ])
    .await;
    let client = client(&server.url(), false);
    let plan = client.plan(&topology(), &TopologyOptions::default()).await.unwrap();
    assert_eq!(plan.items.len(), 6);
    assert!(plan.items[..5].iter().all(|i| i.action == PlanAction::Create), "{plan}");
    assert_eq!(plan.items[5].action, PlanAction::Delete);

    let report = client.apply(&plan).await.unwrap();
    assert_eq!(
        report.created,
        [
            "queue commit",
            "topic bosun-events",
            &format!("subscription {SUB}"),
            &format!("rule {SUB}/Rules/bosun-types")
        ]
    );
    assert_eq!(report.already_present, [format!("rule {SUB}/Rules/bosun-replay")]);
    assert_eq!(report.deleted, [format!("rule {SUB}/Rules/$Default")]);

    let requests = server.finish();
    for request in &requests {
        assert_eq!(request.query("api-version"), Some("2021-05"), "{request:?}");
        let authorization = request.header("authorization").unwrap();
        let audience = format!(
            "sr=sb%3A%2F%2Fcontoso.servicebus.windows.net%2F{}",
            request.path.replace('/', "%2F")
        )
        .replace('$', "%24");
        assert!(
            authorization.starts_with("SharedAccessSignature ") && authorization.contains(&audience),
            "{authorization} for {}",
            request.path
        );
    }
    let writes: Vec<(&str, &str)> = requests
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| (r.method.as_str(), r.path.as_str()))
        .collect();
    let types = format!("{SUB}/Rules/bosun-types");
    let replay = format!("{SUB}/Rules/bosun-replay");
    let default = format!("{SUB}/Rules/$Default");
    assert_eq!(
        writes,
        [
            ("PUT", "commit"),
            ("PUT", "bosun-events"),
            ("PUT", SUB),
            ("PUT", types.as_str()),
            ("PUT", replay.as_str()),
            ("DELETE", default.as_str()),
        ],
        "topic, then subscriptions, then rules, then $Default"
    );
    for put in requests.iter().filter(|r| r.method == "PUT") {
        assert_eq!(put.header("content-type"), Some(ATOM_CONTENT_TYPE));
        assert_eq!(put.header("if-match"), None, "a create is not a replace");
        assert!(put.body.starts_with("<?xml version=\"1.0\" encoding=\"utf-8\"?><entry"));
    }
    let queue = requests
        .iter()
        .find(|r| r.method == "PUT" && r.path == "commit")
        .unwrap();
    assert!(
        queue.body.contains("<MaxDeliveryCount>10</MaxDeliveryCount>"),
        "{}",
        queue.body
    );
    assert!(queue.body.contains("<LockDuration>PT1M</LockDuration>"));
    let types_put = requests.iter().find(|r| r.path == types).unwrap();
    assert!(
        types_put.body.contains(
            "<SqlExpression>sys.Label IN ('BuildCompleted','ImagePublished') AND NOT EXISTS(replayTo)</SqlExpression>"
        ),
        "{}",
        types_put.body
    );
    let replay_put = requests.iter().find(|r| r.path == replay).unwrap();
    assert!(
        replay_put
            .body
            .contains("<SqlExpression>replayTo = 'release-orchestration'</SqlExpression>")
    );
}

#[tokio::test]
async fn verify_names_every_problem_and_apply_fixes_rules_only() {
    let queue = entry(
        "commit",
        "<QueueDescription xmlns=\"http://schemas.microsoft.com/netservices/2010/10/servicebus/connect\">\
         <LockDuration>PT1M</LockDuration><MaxDeliveryCount>5</MaxDeliveryCount><Status>Active</Status>\
         </QueueDescription>",
    );
    let topic = entry(
        "bosun-events",
        "<TopicDescription><RequiresDuplicateDetection>true</RequiresDuplicateDetection></TopicDescription>",
    );
    let subscription = entry(
        "release-orchestration",
        "<SubscriptionDescription><LockDuration>PT1M</LockDuration><MaxDeliveryCount>10</MaxDeliveryCount>\
         </SubscriptionDescription>",
    );
    let rules = format!(
        "<feed xmlns=\"http://www.w3.org/2005/Atom\"><title>Rules</title>{}{}</feed>",
        rule("$Default", "TrueFilter", "1=1"),
        rule(
            "bosun-types",
            "SqlFilter",
            "sys.Label IN ('BuildCompleted') AND NOT EXISTS(replayTo)"
        ),
    );
    let mut script = Vec::new();
    for _ in 0..2 {
        script.extend([
            ("GET", "commit".to_owned(), 200, queue.clone()),
            ("GET", "bosun-events".to_owned(), 200, topic.clone()),
            ("GET", SUB.to_owned(), 200, subscription.clone()),
            ("GET", format!("{SUB}/Rules"), 200, rules.clone()),
        ]);
    }
    script.extend([
        (
            "PUT",
            format!("{SUB}/Rules/bosun-types"),
            200,
            rule("bosun-types", "SqlFilter", "x"),
        ),
        (
            "PUT",
            format!("{SUB}/Rules/bosun-replay"),
            201,
            rule("bosun-replay", "SqlFilter", "x"),
        ),
        ("DELETE", format!("{SUB}/Rules/$Default"), 200, String::new()),
    ]);
    let script: Vec<(&str, &str, u16, &str)> = script
        .iter()
        .map(|(m, p, s, b)| (*m, p.as_str(), *s, b.as_str()))
        .collect();
    let server = ScriptedServiceBus::start(&script).await;
    let client = client(&server.url(), false);

    let err = client
        .verify(&topology(), &TopologyOptions::default())
        .await
        .unwrap_err();
    let ManagementError::Missing { entities } = &err else {
        panic!("{err}")
    };
    assert_eq!(entities.len(), 3, "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&format!("rule {SUB}/Rules/bosun-replay is missing")),
        "{message}"
    );
    assert!(message.contains("$Default must be removed"), "{message}");
    assert!(message.contains("'ImagePublished'"), "{message}");
    assert!(message.contains("run `bosun topology apply`"), "{message}");
    assert!(
        !message.contains("commit"),
        "a differing max delivery count only warns: {message}"
    );

    let plan = client.plan(&topology(), &TopologyOptions::default()).await.unwrap();
    let report = client.apply(&plan).await.unwrap();
    assert_eq!(report.updated, [format!("rule {SUB}/Rules/bosun-types")]);
    assert_eq!(report.created, [format!("rule {SUB}/Rules/bosun-replay")]);
    assert_eq!(report.deleted, [format!("rule {SUB}/Rules/$Default")]);
    assert_eq!(report.unchanged, 2);
    assert_eq!(report.left_differing.len(), 1);
    assert!(report.left_differing[0].starts_with("queue commit: MaxDeliveryCount is 5"));
    assert!(
        report
            .to_string()
            .ends_with("1 created, 1 replaced, 1 deleted, 2 unchanged, 1 left differing")
    );

    let requests = server.finish();
    let rules_get = requests.iter().find(|r| r.path.ends_with("/Rules")).unwrap();
    assert_eq!(rules_get.query("$top"), Some("100"));
    let replaced = requests
        .iter()
        .find(|r| r.method == "PUT" && r.path.ends_with("bosun-types"))
        .unwrap();
    assert_eq!(replaced.header("if-match"), Some("*"));
    let created = requests
        .iter()
        .find(|r| r.method == "PUT" && r.path.ends_with("bosun-replay"))
        .unwrap();
    assert_eq!(created.header("if-match"), None);
    assert!(
        requests.iter().filter(|r| r.method == "DELETE").count() == 1,
        "nothing but $Default is deleted"
    );
}

#[tokio::test]
async fn apply_refuses_to_delete_anything_but_default_rules() {
    let server = ScriptedServiceBus::start(&[]).await;
    let client = client(&server.url(), false);
    let plan = Plan {
        items: vec![super::super::plan::PlanItem {
            kind: EntityKind::Queue,
            path: "commit".into(),
            action: PlanAction::Delete,
            entry: None,
        }],
    };
    let report = client.apply(&plan).await.unwrap();
    assert_eq!(report.refused.len(), 1);
    assert!(report.refused[0].starts_with("queue commit: "));
    assert!(server.finish().is_empty());
}

#[tokio::test]
async fn missing_rights_say_manage_is_needed() {
    let server = ScriptedServiceBus::start(&[
        (
            "GET",
            "commit",
            401,
            "<Error><Code>401</Code><Detail>Manage,EntityRead claims required for this operation. \
             SharedAccessSignature sr=x&amp;sig=abc TrackingId:2</Detail></Error>",
        ),
        ("GET", "bosun-events", 200, EMPTY_FEED),
    ])
    .await;
    let err = client(&server.url(), false)
        .plan(&topology(), &TopologyOptions::default())
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, ManagementError::Unauthorized { .. }), "{message}");
    assert!(message.contains("needs the Manage right"), "{message}");
    assert!(message.contains("Manage,EntityRead claims required"), "{message}");
    assert!(!message.contains("sig=abc"), "{message}");
    server.finish();
}

#[tokio::test]
async fn errors_keep_a_trimmed_body_without_secrets() {
    let long = format!("Bearer eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl {}", "x ".repeat(400));
    let server =
        ScriptedServiceBus::start(&[("GET", "commit", 500, &long), ("GET", "bosun-events", 200, EMPTY_FEED)]).await;
    let err = client(&server.url(), false)
        .plan(&topology(), &TopologyOptions::default())
        .await
        .unwrap_err();
    let ManagementError::Http { status, body, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(*status, 500);
    assert!(body.chars().count() <= BODY_LIMIT + 1, "{body}");
    assert!(!body.contains("eyJ"), "{body}");
    server.finish();
}

#[tokio::test]
async fn an_emulator_without_the_management_api_is_reported_as_unsupported() {
    // Nothing listens on the port.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let err = client(&format!("http://127.0.0.1:{port}"), true)
        .verify(&topology(), &TopologyOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ManagementError::Unsupported { .. }), "{err}");
    assert!(err.to_string().contains("not supported by this endpoint"), "{err}");

    // Something answers 404 to everything.
    let server = ScriptedServiceBus::start(&[("GET", "commit", 404, ""), ("GET", "bosun-events", 404, "")]).await;
    let err = client(&server.url(), true)
        .plan(&topology(), &TopologyOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ManagementError::Unsupported { .. }), "{err}");
    server.finish();

    // A real namespace that cannot be reached is unavailable, not unsupported.
    let err = client(&format!("http://127.0.0.1:{port}"), false)
        .plan(&topology(), &TopologyOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ManagementError::Unavailable { .. }), "{err}");
}

#[tokio::test]
async fn a_silent_server_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let hold = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            open.push(stream);
        }
    });
    let endpoint = endpoint(false);
    let tokens = TokenSource::for_endpoint(&endpoint).unwrap();
    let client = ManagementClient::with_timeout(&endpoint, tokens, Duration::from_millis(200))
        .unwrap()
        .with_base_url(url);
    let err = client.plan(&topology(), &TopologyOptions::default()).await.unwrap_err();
    assert!(matches!(err, ManagementError::Unavailable { .. }), "{err}");
    hold.abort();
}

#[test]
fn trimmed_bodies_prefer_the_detail() {
    assert_eq!(
        trimmed_body("<Error><Code>400</Code><Detail>Bad  request.\n TrackingId:3</Detail></Error>"),
        "Bad request. TrackingId:3"
    );
    assert_eq!(trimmed_body(""), "(no body)");
    assert_eq!(
        trimmed_body("token SharedAccessSignature sr=a&sig=b&se=1"),
        "token SharedAccessSignature <redacted>"
    );
}
