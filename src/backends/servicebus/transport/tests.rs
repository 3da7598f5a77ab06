//! Tests of the Service Bus transport: batching, the pump's local locks,
//! and the behaviour suite against a broker: the namespace or emulator
//! named by `BOSUN_TEST_SERVICEBUS`, else the in-process test broker
//! (`bosun-servicebus-broker`) with the entities `topology plan` creates.

use crate::ports::transport::TransportAdmin;
use std::sync::Arc;

use bosun_contracts::routing::EVENTS_TOPIC;

use super::*;
use crate::ports::behaviour::transport as behaviour;

fn outbound(id: &str, scheduled: bool, size: usize) -> Addressed {
    Addressed {
        message: OutboundMessage {
            destination: Destination::Queue("commit".into()),
            broker_message_id: id.into(),
            message_type: Some("CreateCommit".into()),
            correlation_id: None,
            body: vec![b'x'; size],
            scheduled_at: scheduled.then(OffsetDateTime::now_utc),
        },
        session_id: None,
    }
}

#[test]
fn sends_are_batched_by_size_and_scheduled_messages_go_alone() {
    let messages = vec![
        outbound("a", false, 100),
        outbound("b", false, 100),
        outbound("later", true, 100),
        outbound("c", false, 100),
    ];
    let sent = chunks(&messages, 64 * 1024).unwrap();
    assert_eq!(sent.iter().map(Chunk::count).collect::<Vec<_>>(), [2, 1, 1]);
    assert!(matches!(sent[0], Chunk::Batch(..)));
    let big = vec![
        outbound("a", false, 40_000),
        outbound("b", false, 40_000),
        outbound("c", false, 40_000),
    ];
    let sent = chunks(&big, 100 * 1024).unwrap();
    assert_eq!(sent.iter().map(Chunk::count).collect::<Vec<_>>(), [2, 1]);
    let huge = vec![outbound("a", false, 300_000)];
    assert_eq!(
        chunks(&huge, 256 * 1024).unwrap().len(),
        1,
        "sent alone, the broker decides"
    );
    let in_session = |id: &str, session: &str| Addressed {
        session_id: Some(session.into()),
        ..outbound(id, false, 100)
    };
    let sessions = vec![
        in_session("a", "s1"),
        in_session("b", "s1"),
        in_session("c", "s2"),
        outbound("d", false, 100),
    ];
    assert_eq!(
        chunks(&sessions, 64 * 1024)
            .unwrap()
            .iter()
            .map(Chunk::count)
            .collect::<Vec<_>>(),
        [2, 1, 1],
        "a batch holds one session's messages"
    );
}

#[test]
fn reconnect_backoff_grows_to_its_cap() {
    let options = ServiceBusOptions::default();
    for failures in 1..40 {
        let delay = backoff(&options, failures);
        assert!(
            delay >= options.reconnect_min && delay <= options.reconnect_max,
            "{failures}: {delay:?}"
        );
    }
    assert!(backoff(&options, 1) <= options.reconnect_min);
}

/// The tests below share the namespace's entities: one at a time.
pub(super) static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// The connection string in `BOSUN_TEST_SERVICEBUS`, if one is set.
fn external_service_bus() -> Option<String> {
    std::env::var("BOSUN_TEST_SERVICEBUS")
        .ok()
        .filter(|text| !text.trim().is_empty())
}

/// The endpoint and tokens of a connection string.
pub(super) fn endpoint_of(text: &str) -> (ServiceBusEndpoint, TokenSource) {
    let endpoint = ServiceBusEndpoint::from_connection_string(text)
        .unwrap_or_else(|err| panic!("BOSUN_TEST_SERVICEBUS is not a usable connection string: {err}"));
    let tokens = TokenSource::for_endpoint(&endpoint).unwrap_or_else(|err| panic!("BOSUN_TEST_SERVICEBUS: {err}"));
    (endpoint, tokens)
}

/// The in-process test broker with bosun's topology (the registry's: the
/// saga consumers' entities require sessions) applied to it the way
/// `bosun topology apply` does (the management client over the broker's
/// REST API), every entity's maximum delivery count `max_delivery_count`.
pub(super) async fn test_broker(max_delivery_count: u32) -> bosun_servicebus_broker::RunningBroker {
    test_broker_with(max_delivery_count, &crate::runtime::registry::topology()).await
}

/// [`test_broker`] with the entities of `topology`.
pub(super) async fn test_broker_with(
    max_delivery_count: u32,
    topology: &Topology,
) -> bosun_servicebus_broker::RunningBroker {
    use bosun_servicebus_broker::{Broker, BrokerConfig};

    use crate::backends::servicebus::management::ManagementClient;
    use crate::backends::servicebus::plan::TopologyOptions;

    let broker = Broker::start(BrokerConfig::default())
        .await
        .expect("the test broker starts");
    let options = TopologyOptions {
        max_delivery_count,
        ..TopologyOptions::default()
    };
    let (endpoint, tokens) = endpoint_of(&broker.connection_string());
    let management = ManagementClient::new(&endpoint, tokens)
        .expect("a management client")
        .with_base_url(format!("http://127.0.0.1:{}", broker.port()));
    let plan = management
        .plan(topology, &options)
        .await
        .expect("the topology planned on the test broker");
    management
        .apply(&plan)
        .await
        .expect("the topology applied to the test broker");
    broker
}

/// The registry's topology: the saga consumers' entities take sessions,
/// as `serve` sets it up.
pub(super) fn test_options() -> ServiceBusOptions {
    ServiceBusOptions {
        send_timeout: Duration::from_secs(10),
        operation_timeout: Duration::from_secs(10),
        topology: crate::runtime::registry::topology(),
        ..ServiceBusOptions::default()
    }
}

/// The entities the behaviours use, and the dead-letter sub-queue they fill.
fn suite_paths() -> Vec<String> {
    let mut paths = vec!["commit".to_owned(), "commit/$DeadLetterQueue".to_owned()];
    for subscription in [
        "release-orchestration",
        "container-build",
        "package-publishing",
        "pull-request",
        "gitops-sync",
    ] {
        paths.push(format!("{EVENTS_TOPIC}/subscriptions/{subscription}"));
    }
    paths
}

/// The suite's message ids are the same in every behaviour and every
/// run, and a namespace remembers ids for duplicate detection: this
/// wrapper gives each behaviour run ids of its own and hides them again.
struct RunScoped {
    inner: ServiceBusTransport,
    suffix: String,
}

impl RunScoped {
    fn strip(&self, id: String) -> String {
        id.strip_suffix(&self.suffix).map(str::to_owned).unwrap_or(id)
    }
}

#[async_trait]
impl Transport for RunScoped {
    async fn ensure_topology(&self, topology: &Topology) -> Result<(), TransportError> {
        self.inner.ensure_topology(topology).await
    }

    async fn send(&self, messages: Vec<OutboundMessage>) -> Result<(), TransportError> {
        let messages = messages
            .into_iter()
            .map(|mut message| {
                message.broker_message_id.push_str(&self.suffix);
                message
            })
            .collect();
        self.inner.send(messages).await
    }

    async fn receive(
        &self,
        entity: &Destination,
        max: usize,
        lock_duration: Duration,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        let mut received = self.inner.receive(entity, max, lock_duration).await?;
        for message in &mut received {
            message.broker_message_id = self.strip(std::mem::take(&mut message.broker_message_id));
        }
        Ok(received)
    }

    async fn wait_for_messages(&self, entity: &Destination, timeout: Duration) {
        self.inner.wait_for_messages(entity, timeout).await;
    }

    async fn renew_lock(&self, lock: &LockToken, lock_duration: Duration) -> Result<OffsetDateTime, TransportError> {
        self.inner.renew_lock(lock, lock_duration).await
    }

    async fn is_locked(&self, lock: &LockToken) -> Result<bool, TransportError> {
        self.inner.is_locked(lock).await
    }

    async fn complete(&self, lock: &LockToken) -> Result<(), TransportError> {
        self.inner.complete(lock).await
    }

    async fn abandon(&self, lock: &LockToken) -> Result<(), TransportError> {
        self.inner.abandon(lock).await
    }

    async fn dead_letter(&self, lock: &LockToken, reason: &str, description: &str) -> Result<(), TransportError> {
        self.inner.dead_letter(lock, reason, description).await
    }

    async fn reachable(&self) -> Result<(), TransportError> {
        self.inner.reachable().await
    }
}

#[async_trait]
impl TransportAdmin for RunScoped {
    async fn peek_dead_letters(
        &self,
        entity: &Destination,
        max: usize,
    ) -> Result<Vec<DeadLetteredMessage>, TransportError> {
        let mut dead = self.inner.peek_dead_letters(entity, max).await?;
        for message in &mut dead {
            message.broker_message_id = self.strip(std::mem::take(&mut message.broker_message_id));
        }
        Ok(dead)
    }

    async fn remove_dead_letter(&self, entity: &Destination, sequence: i64) -> Result<bool, TransportError> {
        self.inner.remove_dead_letter(entity, sequence).await
    }

    async fn depth(&self, entity: &Destination) -> Result<u64, TransportError> {
        self.inner.depth(entity).await
    }
}

#[derive(Debug)]
enum Verdict {
    Passed,
    NotSupported(String),
    NotRun(String),
    Failed(String),
}

fn verdict_of(result: Result<Result<(), tokio::task::JoinError>, tokio::time::error::Elapsed>) -> Verdict {
    match result {
        Ok(Ok(())) => Verdict::Passed,
        Ok(Err(join)) => {
            let message = match join.try_into_panic() {
                Ok(panic) => panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
                    .unwrap_or_else(|| "panicked".to_owned()),
                Err(join) => join.to_string(),
            };
            if message.contains("not supported by this endpoint") {
                Verdict::NotSupported(message)
            } else {
                Verdict::Failed(message)
            }
        }
        Err(_) => Verdict::Failed("no result within 120 s".to_owned()),
    }
}

/// A transport on `endpoint`; the suite's entities are emptied first
/// unless they are `fresh` (a test broker's, just made).
async fn fresh_transport(
    endpoint: &ServiceBusEndpoint,
    tokens: &TokenSource,
    fresh: bool,
) -> Result<ServiceBusTransport, String> {
    let transport = ServiceBusTransport::connect(endpoint.clone(), tokens.clone(), test_options())
        .await
        .map_err(|err| format!("connect: {err}"))?;
    let paths = if fresh { Vec::new() } else { suite_paths() };
    for path in paths {
        transport
            .drain(&path)
            .await
            .map_err(|err| format!("empty `{path}` first: {err}"))?;
    }
    Ok(transport)
}

async fn run_behaviour(
    endpoint: &ServiceBusEndpoint,
    tokens: &TokenSource,
    fresh: bool,
    name: &'static str,
) -> Verdict {
    let transport = match fresh_transport(endpoint, tokens, fresh).await {
        Ok(transport) => transport,
        Err(err) => return Verdict::Failed(err),
    };
    let scoped = Arc::new(RunScoped {
        inner: transport.clone(),
        suffix: format!("@{}", &Uuid::new_v4().simple().to_string()[..8]),
    });
    let task = tokio::spawn(async move { behaviour::run_one(name, scoped.as_ref()).await });
    let verdict = verdict_of(tokio::time::timeout(Duration::from_secs(120), task).await);
    transport.close().await;
    verdict
}

/// A renewal that must reach the broker's `$management` node.
async fn broker_renewal(endpoint: &ServiceBusEndpoint, tokens: &TokenSource, fresh: bool) -> Verdict {
    let transport = match fresh_transport(endpoint, tokens, fresh).await {
        Ok(transport) => transport,
        Err(err) => return Verdict::Failed(err),
    };
    let probe = transport.clone();
    let task = tokio::spawn(async move {
        let queue = Destination::Queue("commit".into());
        let id = format!("renew@{}", Uuid::new_v4().simple());
        probe
            .send(vec![behaviour::outbound(queue.clone(), &id, "CreateCommit")])
            .await
            .unwrap();
        let received = probe.receive(&queue, 1, Duration::from_secs(30)).await.unwrap();
        assert_eq!(received.len(), 1, "the probe message arrives");
        let until = probe.renew_lock_at_broker(&received[0].lock).await.unwrap();
        assert!(
            until > OffsetDateTime::now_utc(),
            "the broker's lock was extended: {until}"
        );
        probe.complete(&received[0].lock).await.unwrap();
    });
    let verdict = verdict_of(tokio::time::timeout(Duration::from_secs(120), task).await);
    transport.close().await;
    verdict
}

/// The behaviour suite against the namespace or emulator named by
/// `BOSUN_TEST_SERVICEBUS`, else against the in-process test broker (a
/// fresh one per behaviour, its entities made with the maximum delivery
/// count the behaviour needs), one behaviour at a time on emptied
/// entities, with a report. An operation the endpoint lacks is reported
/// as not supported by this endpoint, not counted as passed; any other
/// failure fails the test. `BOSUN_TEST_SERVICEBUS_MAX_DELIVERY_COUNT`
/// (default 10) is the maximum delivery count an external namespace's
/// entities were created with: a behaviour that needs another is
/// reported, not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_bus_passes_the_behaviour_suite() {
    let external = external_service_bus().map(|text| endpoint_of(&text));
    let _serial = ONE_AT_A_TIME.lock().await;
    let entity_max_delivery_count: u32 = std::env::var("BOSUN_TEST_SERVICEBUS_MAX_DELIVERY_COUNT")
        .ok()
        .map(|text| {
            text.parse()
                .expect("BOSUN_TEST_SERVICEBUS_MAX_DELIVERY_COUNT is a number")
        })
        .unwrap_or(10);
    let mut report: Vec<(&str, Verdict)> = Vec::new();
    for (name, max_delivery_count) in behaviour::BEHAVIOURS {
        let verdict = match &external {
            Some((endpoint, tokens)) if *max_delivery_count == entity_max_delivery_count => {
                run_behaviour(endpoint, tokens, false, name).await
            }
            Some(_) => Verdict::NotRun(format!(
                "needs entities with max delivery count {max_delivery_count}; these have \
                 {entity_max_delivery_count} (an entity property; set \
                 BOSUN_TEST_SERVICEBUS_MAX_DELIVERY_COUNT to what they have)"
            )),
            None => {
                let broker = test_broker(*max_delivery_count).await;
                let (endpoint, tokens) = endpoint_of(&broker.connection_string());
                run_behaviour(&endpoint, &tokens, true, name).await
            }
        };
        eprintln!("service bus behaviour {name}: {verdict:?}");
        report.push((name, verdict));
    }
    let renewal_broker = match &external {
        Some(_) => None,
        None => Some(test_broker(10).await),
    };
    let (endpoint, tokens) = match (&external, &renewal_broker) {
        (Some(external), _) => external.clone(),
        (None, broker) => endpoint_of(&broker.as_ref().expect("started above").connection_string()),
    };
    let verdict = broker_renewal(&endpoint, &tokens, external.is_none()).await;
    eprintln!("service bus behaviour broker_renew_lock: {verdict:?}");
    report.push(("broker_renew_lock", verdict));
    let under_test = if external.is_some() {
        endpoint.host.clone()
    } else {
        "the in-process test broker".to_owned()
    };
    eprintln!("\nService Bus behaviour suite against {under_test}:");
    for (name, verdict) in &report {
        let line = match verdict {
            Verdict::Passed => "passed".to_owned(),
            Verdict::NotSupported(why) => format!("NOT SUPPORTED by this endpoint: {why}"),
            Verdict::NotRun(why) => format!("not run: {why}"),
            Verdict::Failed(why) => format!("FAILED: {why}"),
        };
        eprintln!("  {name:<36} {line}");
    }
    let failed: Vec<&str> = report
        .iter()
        .filter(|(_, verdict)| matches!(verdict, Verdict::Failed(_)))
        .map(|(name, _)| *name)
        .collect();
    assert!(failed.is_empty(), "behaviours failed against Service Bus: {failed:?}");
}

/// A TCP proxy in front of the emulator that can hold back what the
/// broker sends (a send then hangs) or cut every connection.
struct Proxy {
    port: u16,
    hold: watch::Sender<bool>,
    cut: watch::Sender<u64>,
    _accept: AbortOnDropHandle<()>,
}

async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut hold: Option<watch::Receiver<bool>>,
    mut cut: watch::Receiver<u64>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            _ = cut.changed() => return,
        };
        let Ok(read) = read else { return };
        if read == 0 {
            return;
        }
        if let Some(hold) = hold.as_mut() {
            tokio::select! {
                _ = hold.wait_for(|held| !*held) => {},
                _ = cut.changed() => return,
            }
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

async fn proxy(target: String) -> Proxy {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (hold, _) = watch::channel(false);
    let (cut, _) = watch::channel(0u64);
    let (hold_for_loop, cut_for_loop) = (hold.clone(), cut.clone());
    let accept = tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                continue;
            };
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let (client_read, client_write) = inbound.into_split();
            let (broker_read, broker_write) = outbound.into_split();
            tokio::spawn(forward(client_read, broker_write, None, cut_for_loop.subscribe()));
            tokio::spawn(forward(
                broker_read,
                client_write,
                Some(hold_for_loop.subscribe()),
                cut_for_loop.subscribe(),
            ));
        }
    });
    Proxy {
        port,
        hold,
        cut,
        _accept: AbortOnDropHandle::new(accept),
    }
}

/// The send hazard and a dropped connection, through a proxy in front of
/// the emulator: a send whose outcome never comes fails within the send
/// timeout (not hanging), the retry goes out on a new link, a cut
/// connection is reopened, and duplicate detection leaves each message
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the Service Bus emulator (plain AMQP): BOSUN_TEST_SERVICEBUS with UseDevelopmentEmulator=true (scripts/test runs it then); without it, --ignored runs it against the in-process test broker"]
async fn servicebus_emulator_a_hung_send_times_out_and_a_dropped_connection_is_reopened() {
    let external = external_service_bus();
    let broker = match external {
        Some(_) => None,
        None => Some(test_broker(10).await),
    };
    let (endpoint, tokens) = match (&external, &broker) {
        (Some(text), _) => endpoint_of(text),
        (None, broker) => endpoint_of(&broker.as_ref().expect("started above").connection_string()),
    };
    assert!(
        endpoint.emulator,
        "this test puts a TCP proxy in front of plain AMQP: BOSUN_TEST_SERVICEBUS must name the emulator (UseDevelopmentEmulator=true)"
    );
    let _serial = ONE_AT_A_TIME.lock().await;
    let proxy = proxy(format!("{}:{}", endpoint.host, endpoint.amqp_port)).await;
    let proxied = ServiceBusEndpoint {
        amqp_port: proxy.port,
        ..endpoint.clone()
    };
    let options = ServiceBusOptions {
        send_timeout: Duration::from_secs(2),
        operation_timeout: Duration::from_secs(5),
        reconnect_min: Duration::from_millis(100),
        reconnect_max: Duration::from_millis(500),
        ..ServiceBusOptions::default()
    };
    let transport = ServiceBusTransport::connect(proxied, tokens, options).await.unwrap();
    transport.drain("commit").await.unwrap();
    let queue = Destination::Queue("commit".into());
    let run = Uuid::new_v4().simple().to_string();
    let id = |n: u32| format!("hazard-{n}@{run}");
    transport
        .send(vec![behaviour::outbound(queue.clone(), &id(1), "CreateCommit")])
        .await
        .unwrap();

    // The broker's answers are held back: the send must give up in time.
    proxy.hold.send_replace(true);
    let started = std::time::Instant::now();
    let hung = transport
        .send(vec![behaviour::outbound(queue.clone(), &id(2), "CreateCommit")])
        .await;
    let waited = started.elapsed();
    assert!(matches!(hung, Err(TransportError::Unavailable { .. })), "{hung:?}");
    assert!(waited < Duration::from_secs(6), "the send waited {waited:?}");
    proxy.hold.send_replace(false);
    // The host's retry: same message id, new link.
    transport
        .send(vec![behaviour::outbound(queue.clone(), &id(2), "CreateCommit")])
        .await
        .unwrap();

    // Every connection is cut: the transport reconnects with backoff.
    proxy.cut.send_modify(|generation| *generation += 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match transport
            .send(vec![behaviour::outbound(queue.clone(), &id(3), "CreateCommit")])
            .await
        {
            Ok(()) => break,
            Err(err) => {
                assert!(std::time::Instant::now() < deadline, "no reconnection: {err}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }

    let generation = transport.inner.state.lock().await.generation;
    assert!(generation >= 2, "a new connection was opened (generation {generation})");

    let mut ids = Vec::new();
    for _ in 0..10 {
        let received = transport.receive(&queue, 10, Duration::from_secs(30)).await.unwrap();
        if received.is_empty() && ids.len() >= 3 {
            break;
        }
        for message in received {
            ids.push(message.broker_message_id.clone());
            transport.complete(&message.lock).await.unwrap();
        }
    }
    ids.sort();
    assert_eq!(ids, [id(1), id(2), id(3)], "each message once, none lost");
    transport.close().await;
}

/// Readiness asks the transport whether it can work; it answers from the
/// open connection, with no round trip: a broker that has stopped
/// answering does not make a probe wait, as a `$management` peek would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reachable_answers_from_the_open_connection_without_a_management_call() {
    let broker = test_broker(10).await;
    let (endpoint, tokens) = endpoint_of(&broker.connection_string());
    let transport = ServiceBusTransport::connect(endpoint, tokens, test_options())
        .await
        .expect("connects to the test broker");
    transport.reachable().await.expect("reachable while connected");
    broker.hold_replies();
    // A guard against a hang, not a measurement: a call that waited for
    // the broker would wait for its operation timeout and fail.
    let answered = tokio::time::timeout(Duration::from_secs(60), transport.reachable()).await;
    broker.release_replies();
    assert!(
        matches!(answered, Ok(Ok(()))),
        "reachable answered from the connection: {answered:?}"
    );
    transport.close().await;
}
