//! Consumer host tests over the in-memory transport and an in-memory store.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bosun_consumers::{Consumer, HandlerError, Inbound, Outcome, RetryPolicy};
use bosun_contracts::messages::{CommitCreated, CreateCommit};
use bosun_contracts::routing::EVENTS_TOPIC;
use bosun_contracts::{Destination, Envelope, Message};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{Host, HostOptions};
use crate::backends::memory::MemoryTransport;
use crate::backends::sqlite::store::SqliteStore;
use crate::ports::store::{DeadLetterFilter, HandledMessage, SagaWrite, Store, TimelineStatus};
use crate::ports::store::{DeadLetterStore, HandledStore, SagaStore, TimelineStore};
use crate::ports::transport::{OutboundMessage, Topology, Transport, TransportAdmin};

#[derive(Clone, Copy)]
enum Behaviour {
    Succeed,
    FailTransientlyTimes(u32),
    FailPermanently,
    SleepFor(Duration),
    /// Says it needs a newer bosun for the first `n` calls (as the saga
    /// code does for a saga state a later release wrote), then succeeds.
    NeedsNewerTimes(u32),
}

struct TestConsumer {
    behaviour: Behaviour,
    calls: AtomicU32,
    effects: AtomicU32,
    max_retries: u32,
    /// The highest `attempt` seen on a delivered envelope.
    highest_attempt: AtomicU32,
}

impl TestConsumer {
    fn new(behaviour: Behaviour) -> Arc<Self> {
        Arc::new(Self {
            behaviour,
            calls: AtomicU32::new(0),
            effects: AtomicU32::new(0),
            max_retries: 5,
            highest_attempt: AtomicU32::new(0),
        })
    }
}

#[derive(Debug, thiserror::Error)]
#[error("git host answered 503")]
struct Unavailable;

#[derive(Debug, thiserror::Error)]
#[error("could not write the commit")]
struct WriteFailed(#[source] Unavailable);

#[async_trait]
impl Consumer for TestConsumer {
    fn name(&self) -> &'static str {
        "commit"
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(self.max_retries)
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        self.highest_attempt
            .fetch_max(inbound.envelope.attempt, Ordering::SeqCst);
        match self.behaviour {
            Behaviour::NeedsNewerTimes(n) if call < n => {
                return Err(HandlerError::needs_newer("saga state written by a later release"));
            }
            Behaviour::FailTransientlyTimes(n) if call < n => {
                return Err(HandlerError::transient(WriteFailed(Unavailable)));
            }
            Behaviour::FailPermanently => return Err(HandlerError::permanent("repository name is reserved")),
            Behaviour::SleepFor(duration) => tokio::time::sleep(duration).await,
            _ => {}
        }
        self.effects.fetch_add(1, Ordering::SeqCst);
        let Message::CreateCommit(command) = inbound.message else {
            return Err(HandlerError::permanent("unexpected message"));
        };
        Ok(Outcome::send([Message::CommitCreated(CommitCreated {
            repository: command.repository.clone(),
            repository_id: "r-1".into(),
            branch: command.branch.clone(),
            commit_sha: "a".repeat(40),
            tree_sha: "b".repeat(40),
            parent_sha: None,
            files_changed: 1,
            no_op: false,
            pull_request_target: None,
        })]))
    }
}

fn create_commit() -> Envelope {
    let message = Message::CreateCommit(CreateCommit {
        repository: "payments-api".into(),
        branch: "main".into(),
        base_branch: None,
        message: "add readme".into(),
        author: None,
        files: vec![bosun_contracts::messages::BundleFile {
            path: "README.md".into(),
            content: "# payments".into(),
            encoding: Default::default(),
            executable: false,
        }],
        delete: vec![],
        pull_request_target: None,
    });
    Envelope::new(&message, Uuid::now_v7(), "contoso", "agent:test")
}

fn raw(body: Vec<u8>, broker_id: &str) -> OutboundMessage {
    OutboundMessage {
        destination: Destination::Queue("commit".into()),
        broker_message_id: broker_id.to_owned(),
        message_type: Some("CreateCommit".into()),
        correlation_id: None,
        body,
        scheduled_at: None,
    }
}

struct Harness {
    transport: Arc<MemoryTransport>,
    store: Arc<SqliteStore>,
    shutdown: CancellationToken,
    host: tokio::task::JoinHandle<()>,
}

fn options() -> HostOptions {
    HostOptions {
        concurrency: 4,
        lock_duration: Duration::from_millis(1_200),
        poll_interval: Duration::from_millis(20),
        retry_base_delay: Duration::from_millis(10),
        shutdown_grace: Duration::from_secs(5),
        failpoint: None,
        retention: None,
        messaging_system: "bosun.memory",
        message_versions: Default::default(),
    }
}

async fn start(consumer: Arc<TestConsumer>, options: HostOptions) -> Harness {
    start_counting(consumer, options).await.0
}

impl Harness {
    async fn stop(self) {
        self.shutdown.cancel();
        self.host.await.unwrap();
    }

    async fn events_on(&self, subscription: &str) -> u64 {
        self.transport
            .depth(&Destination::Subscription {
                topic: EVENTS_TOPIC.into(),
                subscription: subscription.into(),
            })
            .await
            .unwrap()
    }
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..500 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting until {what}");
}

#[tokio::test]
async fn a_duplicate_delivery_runs_the_effect_once() {
    let consumer = TestConsumer::new(Behaviour::Succeed);
    let harness = start(consumer.clone(), options()).await;
    let envelope = create_commit();
    // The broker delivers the same message twice (e.g. a lock expired after
    // the work was done): same messageId, different broker copies.
    harness
        .transport
        .send(vec![raw(envelope.to_vec(), "copy-1")])
        .await
        .unwrap();
    eventually("the first copy is handled", || async {
        consumer.effects.load(Ordering::SeqCst) == 1
    })
    .await;
    harness
        .transport
        .send(vec![raw(envelope.to_vec(), "copy-2")])
        .await
        .unwrap();
    let store = harness.store.clone();
    let correlation = envelope.correlation_id.to_string();
    eventually("the duplicate is acknowledged", || {
        let store = store.clone();
        let correlation = correlation.clone();
        async move {
            store
                .timeline(&correlation)
                .await
                .unwrap()
                .iter()
                .any(|e| e.status == TimelineStatus::Duplicate)
        }
    })
    .await;
    assert_eq!(consumer.calls.load(Ordering::SeqCst), 1);
    assert_eq!(consumer.effects.load(Ordering::SeqCst), 1);
    assert_eq!(
        harness.events_on("pull-request").await,
        1,
        "the outgoing event was sent once"
    );
    assert_eq!(
        harness
            .transport
            .depth(&Destination::Queue("commit".into()))
            .await
            .unwrap(),
        0
    );
    harness.stop().await;
}

#[tokio::test]
async fn two_transient_failures_then_success_records_three_attempts_and_one_effect() {
    let consumer = TestConsumer::new(Behaviour::FailTransientlyTimes(2));
    let harness = start(consumer.clone(), options()).await;
    let envelope = create_commit();
    harness.transport.send(vec![raw(envelope.to_vec(), "m")]).await.unwrap();
    eventually("the third attempt succeeds", || async {
        consumer.effects.load(Ordering::SeqCst) == 1
    })
    .await;
    let store = harness.store.clone();
    let correlation = envelope.correlation_id.to_string();
    eventually("the completion is recorded", || {
        let store = store.clone();
        let correlation = correlation.clone();
        async move {
            store
                .timeline(&correlation)
                .await
                .unwrap()
                .iter()
                .any(|e| e.status == TimelineStatus::Completed)
        }
    })
    .await;
    assert_eq!(consumer.calls.load(Ordering::SeqCst), 3);
    let failures = harness
        .store
        .attempts("commit", &envelope.message_id.to_string())
        .await
        .unwrap();
    assert_eq!(failures.iter().map(|a| a.attempt).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(
        failures[0].error_chain,
        ["transient: could not write the commit", "git host answered 503"]
    );
    let timeline = harness.store.timeline(&correlation).await.unwrap();
    let attempts: Vec<_> = timeline
        .iter()
        .filter(|e| e.message_id == envelope.message_id.to_string())
        .map(|e| (e.status, e.attempt))
        .collect();
    assert_eq!(
        attempts,
        [
            (TimelineStatus::RetryScheduled, 0),
            (TimelineStatus::RetryScheduled, 1),
            (TimelineStatus::Completed, 2)
        ]
    );
    eventually("the event is sent", || async {
        harness.events_on("pull-request").await == 1
    })
    .await;
    assert!(
        harness
            .store
            .dead_letters(&DeadLetterFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
    harness.stop().await;
}

#[tokio::test]
async fn a_permanent_failure_is_dead_lettered_at_once_with_the_original_bytes() {
    let consumer = TestConsumer::new(Behaviour::FailPermanently);
    let harness = start(consumer.clone(), options()).await;
    let envelope = create_commit();
    // Unusual but valid formatting and an unknown field: the dead letter
    // must keep the bytes exactly.
    let mut value: serde_json::Value = serde_json::from_slice(&envelope.to_vec()).unwrap();
    value["x-custom"] = serde_json::json!({"kept": true});
    let original = serde_json::to_vec_pretty(&value).unwrap();
    harness.transport.send(vec![raw(original.clone(), "m")]).await.unwrap();
    let store = harness.store.clone();
    eventually("the message is dead-lettered", || {
        let store = store.clone();
        async move {
            !store
                .dead_letters(&DeadLetterFilter::default())
                .await
                .unwrap()
                .is_empty()
        }
    })
    .await;
    let dead = harness.store.dead_letters(&DeadLetterFilter::default()).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].body, original);
    assert_eq!(dead[0].reason, "permanent-failure");
    assert!(dead[0].description.contains("repository name is reserved"));
    assert_eq!(dead[0].attempts.len(), 1);
    assert_eq!(
        consumer.calls.load(Ordering::SeqCst),
        1,
        "a permanent failure is not retried"
    );
    let native = harness
        .transport
        .peek_dead_letters(&Destination::Queue("commit".into()), 10)
        .await
        .unwrap();
    assert_eq!(native.len(), 1);
    assert_eq!(native[0].reason, "permanent-failure");
    harness.stop().await;
}

#[tokio::test]
async fn exhausted_retries_are_dead_lettered_with_every_attempt() {
    let consumer = Arc::new(TestConsumer {
        behaviour: Behaviour::FailTransientlyTimes(u32::MAX),
        calls: AtomicU32::new(0),
        effects: AtomicU32::new(0),
        max_retries: 3,
        highest_attempt: AtomicU32::new(0),
    });
    let harness = start(consumer.clone(), options()).await;
    let envelope = create_commit();
    harness.transport.send(vec![raw(envelope.to_vec(), "m")]).await.unwrap();
    let store = harness.store.clone();
    eventually("the retries run out", || {
        let store = store.clone();
        async move {
            !store
                .dead_letters(&DeadLetterFilter::default())
                .await
                .unwrap()
                .is_empty()
        }
    })
    .await;
    let dead = harness.store.dead_letters(&DeadLetterFilter::default()).await.unwrap();
    assert_eq!(dead[0].reason, "retries-exhausted");
    assert_eq!(
        dead[0].attempts.iter().map(|a| a.attempt).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert!(
        dead[0]
            .attempts
            .iter()
            .all(|a| a.error_chain == ["transient: could not write the commit", "git host answered 503"])
    );
    assert_eq!(consumer.calls.load(Ordering::SeqCst), 4);
    assert_eq!(consumer.effects.load(Ordering::SeqCst), 0);
    // The kept envelope is the original apart from its attempt count.
    let kept: serde_json::Value = serde_json::from_slice(&dead[0].body).unwrap();
    let mut original: serde_json::Value = serde_json::from_slice(&envelope.to_vec()).unwrap();
    original["attempt"] = serde_json::json!(3);
    assert_eq!(kept, original);
    harness.stop().await;
}

#[tokio::test]
async fn malformed_messages_are_dead_lettered_with_a_reason_and_the_host_keeps_running() {
    let consumer = TestConsumer::new(Behaviour::Succeed);
    let harness = start(consumer.clone(), options()).await;
    let mut unknown_type: serde_json::Value = serde_json::from_slice(&create_commit().to_vec()).unwrap();
    unknown_type["type"] = serde_json::json!("LaunchRocket");
    let mut missing_field: serde_json::Value = serde_json::from_slice(&create_commit().to_vec()).unwrap();
    missing_field["payload"].as_object_mut().unwrap().remove("branch");
    // Older than the oldest version read (a newer one waits instead: see
    // `a_message_newer_than_this_build_waits_for_a_newer_bosun...`).
    let mut wrong_version: serde_json::Value = serde_json::from_slice(&create_commit().to_vec()).unwrap();
    wrong_version["schemaVersion"] = serde_json::json!(0);
    harness
        .transport
        .send(vec![
            raw(b"{not json".to_vec(), "bad-json"),
            raw(serde_json::to_vec(&unknown_type).unwrap(), "unknown-type"),
            raw(serde_json::to_vec(&missing_field).unwrap(), "missing-field"),
            raw(serde_json::to_vec(&wrong_version).unwrap(), "wrong-version"),
        ])
        .await
        .unwrap();
    let store = harness.store.clone();
    eventually("all four are dead-lettered", || {
        let store = store.clone();
        async move { store.dead_letters(&DeadLetterFilter::default()).await.unwrap().len() == 4 }
    })
    .await;
    let dead = harness.store.dead_letters(&DeadLetterFilter::default()).await.unwrap();
    let by_broker_id = |id: &str| dead.iter().find(|d| d.broker_message_id == id).unwrap();
    assert_eq!(by_broker_id("bad-json").reason, "malformed-envelope");
    assert_eq!(by_broker_id("bad-json").body, b"{not json");
    assert_eq!(by_broker_id("unknown-type").reason, "unknown-type");
    assert!(by_broker_id("unknown-type").description.contains("LaunchRocket"));
    assert_eq!(by_broker_id("missing-field").reason, "invalid-field");
    assert!(
        by_broker_id("missing-field").description.contains("branch"),
        "{}",
        by_broker_id("missing-field").description
    );
    assert_eq!(by_broker_id("wrong-version").reason, "unsupported-schema-version");
    assert!(by_broker_id("wrong-version").description.contains("schemaVersion"));
    assert_eq!(consumer.calls.load(Ordering::SeqCst), 0);

    harness
        .transport
        .send(vec![raw(create_commit().to_vec(), "good")])
        .await
        .unwrap();
    eventually("a good message is still handled", || async {
        consumer.effects.load(Ordering::SeqCst) == 1
    })
    .await;
    harness.stop().await;
}

#[tokio::test]
async fn the_lock_is_renewed_while_a_long_handler_runs() {
    let consumer = TestConsumer::new(Behaviour::SleepFor(Duration::from_millis(3_000)));
    let harness = start(consumer.clone(), options()).await;
    harness
        .transport
        .send(vec![raw(create_commit().to_vec(), "m")])
        .await
        .unwrap();
    eventually("the slow handler finishes", || async {
        consumer.effects.load(Ordering::SeqCst) == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        consumer.calls.load(Ordering::SeqCst),
        1,
        "the message was delivered again while in flight"
    );
    harness.stop().await;
}

#[tokio::test]
async fn shutdown_lets_in_flight_work_finish_within_the_grace_period() {
    let consumer = TestConsumer::new(Behaviour::SleepFor(Duration::from_millis(500)));
    let harness = start(consumer.clone(), options()).await;
    harness
        .transport
        .send(vec![raw(create_commit().to_vec(), "m")])
        .await
        .unwrap();
    eventually("the handler starts", || async {
        consumer.calls.load(Ordering::SeqCst) == 1
    })
    .await;
    let transport = harness.transport.clone();
    harness.stop().await;
    assert_eq!(consumer.effects.load(Ordering::SeqCst), 1);
    assert_eq!(transport.depth(&Destination::Queue("commit".into())).await.unwrap(), 0);
    assert_eq!(
        transport
            .depth(&Destination::Subscription {
                topic: EVENTS_TOPIC.into(),
                subscription: "pull-request".into()
            })
            .await
            .unwrap(),
        1,
        "the outbox was flushed before exit"
    );
}

#[tokio::test]
async fn work_past_the_grace_period_is_abandoned_for_redelivery() {
    let consumer = TestConsumer::new(Behaviour::SleepFor(Duration::from_secs(30)));
    let mut options = options();
    options.shutdown_grace = Duration::from_millis(200);
    let harness = start(consumer.clone(), options).await;
    harness
        .transport
        .send(vec![raw(create_commit().to_vec(), "m")])
        .await
        .unwrap();
    eventually("the handler starts", || async {
        consumer.calls.load(Ordering::SeqCst) == 1
    })
    .await;
    let transport = harness.transport.clone();
    harness.stop().await;
    assert_eq!(consumer.effects.load(Ordering::SeqCst), 0);
    let again = transport
        .receive(&Destination::Queue("commit".into()), 1, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(again.len(), 1, "the abandoned message is available at once");
}

/// Counts messages in a saga: a read-modify-write that loses updates unless
/// the host reloads and re-applies on version conflicts.
struct CountingSaga {
    calls: AtomicU32,
}

#[async_trait]
impl Consumer for CountingSaga {
    fn name(&self) -> &'static str {
        "commit"
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(5)
    }

    fn saga_of(&self, _envelope: &Envelope, _message: &Message) -> Option<(&'static str, String)> {
        Some(("release", "payments-api-1".to_owned()))
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let saga = inbound.saga.ok_or_else(|| HandlerError::permanent("no saga loaded"))?;
        let count = saga.state.get("count").and_then(serde_json::Value::as_u64).unwrap_or(0);
        // Widen the race window so concurrent handlers really conflict.
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok(Outcome {
            messages: Vec::new(),
            saga_state: Some(serde_json::json!({ "count": count + 1 })),
        })
    }
}

/// Waits until the counting saga has counted 24 messages, each in a version
/// of its own, and returns it.
async fn counted_24(store: &dyn Store) -> crate::ports::store::SagaRecord {
    eventually("every message is counted", || async {
        store
            .load_saga("release", "payments-api-1")
            .await
            .unwrap()
            .is_some_and(|saga| saga.state["count"] == 24)
    })
    .await;
    let saga = store.load_saga("release", "payments-api-1").await.unwrap().unwrap();
    assert_eq!(saga.version, 24);
    saga
}

/// Runs `hosts` hosts (as separate processes would) of one counting saga
/// consumer, each handling 8 messages at once, over one transport and one
/// store, until 24 messages are counted; returns how often the handler ran.
async fn count_24_with(hosts: usize) -> u32 {
    let consumer = Arc::new(CountingSaga {
        calls: AtomicU32::new(0),
    });
    let transport = Arc::new(MemoryTransport::new(10));
    transport.ensure_topology(&Topology::from_routing()).await.unwrap();
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let shutdown = CancellationToken::new();
    let mut running = Vec::new();
    for _ in 0..hosts {
        let mut opts = options();
        opts.concurrency = 8;
        let host = Host::new(transport.clone(), store.clone(), vec![consumer.clone()], opts);
        let token = shutdown.clone();
        running.push(tokio::spawn(async move { host.run(token).await.unwrap() }));
    }
    let messages: Vec<_> = (0..24)
        .map(|i| raw(create_commit().to_vec(), &format!("m-{i}")))
        .collect();
    transport.send(messages).await.unwrap();
    let saga = counted_24(store.as_ref()).await;
    assert_eq!(saga.history.len(), 24);
    shutdown.cancel();
    for host in running {
        host.await.unwrap();
    }
    consumer.calls.load(Ordering::SeqCst)
}

#[tokio::test]
async fn concurrent_saga_updates_across_processes_are_never_lost() {
    // Two hosts: each takes one message of the saga at a time, but the
    // two race each other, and the version check at commit catches it.
    let calls = count_24_with(2).await;
    assert!(
        calls > 24,
        "no conflict happened across the hosts; the test proves nothing"
    );
}

/// [`count_24_with`] on PostgreSQL: `hosts` hosts, each with a database
/// pool of its own (as separate processes have), over one schema.
async fn count_24_on_postgres(hosts: usize) -> u32 {
    use crate::backends::postgres::settle::PostgresSettle;
    use crate::backends::postgres::store::PostgresStore;
    use crate::backends::postgres::testing;
    use crate::backends::postgres::transport::PostgresTransport;

    let consumer = Arc::new(CountingSaga {
        calls: AtomicU32::new(0),
    });
    let test = testing::migrated().await;
    let sender = PostgresTransport::new(test.database.clone(), 10);
    sender.ensure_topology(&Topology::from_routing()).await.unwrap();
    let store = PostgresStore::with_transport(&sender);
    let shutdown = CancellationToken::new();
    let mut running = Vec::new();
    let mut metrics = Vec::new();
    for _ in 0..hosts {
        let database = test.connect_again().await;
        let transport = PostgresTransport::new(database.clone(), 10);
        let mut opts = options();
        opts.concurrency = 8;
        // Every message waits its turn with its lock renewed; a lock long
        // enough that a loaded machine never loses one while it waits (a
        // lost lock is a redelivery, which this test would count).
        opts.lock_duration = Duration::from_secs(20);
        let settle = Arc::new(PostgresSettle::new(&transport));
        let host = Host::new(
            Arc::new(transport),
            Arc::new(PostgresStore::new(database.clone())),
            vec![consumer.clone()],
            opts,
        )
        .with_settle(settle);
        metrics.push(host.metrics());
        let token = shutdown.clone();
        running.push(tokio::spawn(async move { host.run(token).await.unwrap() }));
    }
    let messages: Vec<_> = (0..24)
        .map(|i| raw(create_commit().to_vec(), &format!("m-{i}")))
        .collect();
    sender.send(messages).await.unwrap();
    counted_24(&store).await;
    shutdown.cancel();
    for host in running {
        host.await.unwrap();
    }
    test.finish().await;
    let conflicts: u64 = metrics.iter().map(|m| m.consumer("commit").saga_conflicts).sum();
    assert_eq!(conflicts, 0, "saga version conflicts across the hosts");
    consumer.calls.load(Ordering::SeqCst)
}

#[tokio::test]
async fn processes_sharing_postgresql_take_turns_at_a_saga_so_none_conflicts() {
    // Three hosts with their own pools (as three processes), eight
    // handlers each, one saga: the advisory lock per saga key makes its
    // messages take turns across them, so the handler runs once per message.
    assert_eq!(
        count_24_on_postgres(3).await,
        24,
        "a saga message was handled again after a conflict across processes"
    );
}

#[tokio::test]
async fn one_process_handles_a_sagas_messages_one_at_a_time() {
    // Eight handlers, one saga: its messages take turns, so none conflicts.
    assert_eq!(
        count_24_with(1).await,
        24,
        "a saga message was handled again after a conflict"
    );
}

#[tokio::test]
async fn each_consumer_runs_at_most_its_concurrency_limit() {
    struct Gauge {
        now: AtomicU32,
        peak: AtomicU32,
        done: AtomicU32,
    }
    #[async_trait]
    impl Consumer for Gauge {
        fn name(&self) -> &'static str {
            "commit"
        }
        fn retry_policy(&self) -> RetryPolicy {
            RetryPolicy::exponential(5)
        }
        async fn handle(&self, _inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
            let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(30)).await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            self.done.fetch_add(1, Ordering::SeqCst);
            Ok(Outcome::default())
        }
    }
    let gauge = Arc::new(Gauge {
        now: AtomicU32::new(0),
        peak: AtomicU32::new(0),
        done: AtomicU32::new(0),
    });
    let transport = Arc::new(MemoryTransport::new(10));
    transport.ensure_topology(&Topology::from_routing()).await.unwrap();
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let shutdown = CancellationToken::new();
    let mut opts = options();
    opts.concurrency = 3;
    let host = Host::new(transport.clone(), store, vec![gauge.clone()], opts);
    let token = shutdown.clone();
    let running = tokio::spawn(async move { host.run(token).await.unwrap() });
    let messages: Vec<_> = (0..12)
        .map(|i| raw(create_commit().to_vec(), &format!("m-{i}")))
        .collect();
    transport.send(messages).await.unwrap();
    eventually("all are handled", || async { gauge.done.load(Ordering::SeqCst) == 12 }).await;
    assert_eq!(gauge.peak.load(Ordering::SeqCst), 3);
    shutdown.cancel();
    running.await.unwrap();
}

#[tokio::test]
async fn a_message_for_another_tenants_saga_is_dead_lettered_naming_both_and_changes_nothing() {
    let consumer = Arc::new(CountingSaga {
        calls: AtomicU32::new(0),
    });
    let transport = Arc::new(MemoryTransport::new(10));
    transport.ensure_topology(&Topology::from_routing()).await.unwrap();
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    // fabrikam's saga, under a key that does not name its tenant (as sagas
    // saved before tenant keys were).
    store
        .commit_handled(HandledMessage {
            consumer: "commit".into(),
            message_id: "m-0".into(),
            message_type: "CreateCommit".into(),
            saga: Some(SagaWrite {
                kind: "release".into(),
                key: "payments-api-1".into(),
                expected_version: 0,
                state: serde_json::json!({ "count": 7 }),
                tenant_id: Some("fabrikam".into()),
            }),
            outbox: vec![],
            timeline: vec![],
        })
        .await
        .unwrap();
    let shutdown = CancellationToken::new();
    let host = Host::new(transport.clone(), store.clone(), vec![consumer.clone()], options());
    let token = shutdown.clone();
    let running = tokio::spawn(async move { host.run(token).await.unwrap() });
    // A message of tenant contoso (create_commit's tenant).
    transport
        .send(vec![raw(create_commit().to_vec(), "m-contoso")])
        .await
        .unwrap();
    let records = store.clone();
    eventually("the message is dead-lettered", || {
        let records = records.clone();
        async move { !records.dead_letters(&Default::default()).await.unwrap().is_empty() }
    })
    .await;
    let dead = store.dead_letters(&Default::default()).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, "permanent-failure");
    assert!(
        dead[0].description.contains("tenant `contoso`") && dead[0].description.contains("tenant `fabrikam`"),
        "{}",
        dead[0].description
    );
    assert_eq!(consumer.calls.load(Ordering::SeqCst), 0, "the handler never ran");
    let saga = store.load_saga("release", "payments-api-1").await.unwrap().unwrap();
    assert_eq!((saga.version, saga.state["count"].as_u64()), (1, Some(7)));
    shutdown.cancel();
    running.await.unwrap();
}

#[tokio::test]
async fn a_message_for_a_corrupt_saga_is_dead_lettered_on_its_first_delivery_naming_the_saga_and_the_decode_error() {
    let consumer = Arc::new(CountingSaga {
        calls: AtomicU32::new(0),
    });
    let transport = Arc::new(MemoryTransport::new(10));
    transport.ensure_topology(&Topology::from_routing()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    // A saga row whose state is not JSON, written past the store.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "INSERT INTO sagas (kind, key, version, state, created_at, updated_at, tenant_id)
             VALUES ('release', 'payments-api-1', 1, '{\"count\": 7', 1, 1, 'contoso')",
        )
        .unwrap();
    let shutdown = CancellationToken::new();
    let host = Host::new(transport.clone(), store.clone(), vec![consumer.clone()], options());
    let token = shutdown.clone();
    let running = tokio::spawn(async move { host.run(token).await.unwrap() });
    transport
        .send(vec![raw(create_commit().to_vec(), "m-corrupt")])
        .await
        .unwrap();
    let records = store.clone();
    eventually("the message is dead-lettered", || {
        let records = records.clone();
        async move { !records.dead_letters(&Default::default()).await.unwrap().is_empty() }
    })
    .await;
    let dead = store.dead_letters(&Default::default()).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, "corrupt-state");
    for text in [&dead[0].description, &dead[0].error_chain.join(": ")] {
        assert!(
            text.contains("saga release/payments-api-1") && text.contains("EOF while parsing an object"),
            "{text}"
        );
    }
    assert_eq!(dead[0].attempts.len(), 1, "one attempt: no retries");
    assert_eq!(consumer.calls.load(Ordering::SeqCst), 0, "the handler never ran");
    let native = transport
        .peek_dead_letters(&Destination::Queue("commit".into()), 10)
        .await
        .unwrap();
    assert_eq!(native.len(), 1);
    assert_eq!(native[0].delivery_count, 1, "dead-lettered on its first delivery");
    assert_eq!(native[0].reason, "corrupt-state");
    assert!(
        native[0].description.contains("saga release/payments-api-1"),
        "{}",
        native[0].description
    );
    shutdown.cancel();
    running.await.unwrap();
}

/// A settle that finds the database at a schema this build does not know,
/// as when a newer bosun migrated it while this one runs: every write
/// fails; giving a message back still works.
struct SchemaMovedOn(Arc<dyn Transport>);

#[async_trait]
impl crate::ports::settle::Settle for SchemaMovedOn {
    async fn settle(
        &self,
        settlement: crate::ports::settle::Settlement,
        lock: &crate::ports::transport::LockToken,
    ) -> Result<crate::ports::settle::Settled, crate::ports::settle::SettleError> {
        if settlement == crate::ports::settle::Settlement::Abandon {
            self.0.abandon(lock).await?;
            return Ok(crate::ports::settle::Settled::Written);
        }
        Err(crate::ports::settle::SettleError::Store(
            crate::ports::store::StoreError::SchemaMismatch { found: 6, expected: 5 },
        ))
    }
}

#[tokio::test]
async fn a_schema_this_build_does_not_know_stops_the_host_and_keeps_the_message() {
    let consumer = TestConsumer::new(Behaviour::Succeed);
    let transport = Arc::new(MemoryTransport::new(10));
    transport.ensure_topology(&Topology::from_routing()).await.unwrap();
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let host = Host::new(transport.clone(), store.clone(), vec![consumer.clone()], options())
        .with_settle(Arc::new(SchemaMovedOn(transport.clone())));
    let never = CancellationToken::new();
    let running = tokio::spawn(async move { host.run(never).await });
    transport
        .send(vec![raw(create_commit().to_vec(), "m-schema")])
        .await
        .unwrap();
    // The host stops by itself: nobody cancels it.
    let stopped = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the host stops by itself")
        .unwrap();
    let err = stopped.expect_err("a stop is an error the process exits with");
    assert!(matches!(err, super::HostError::Stopped(_)), "{err:?}");
    assert!(err.to_string().contains("schema"), "{err}");
    assert_eq!(
        consumer.calls.load(Ordering::SeqCst),
        1,
        "handled once, then it stopped taking work"
    );
    assert!(
        store
            .dead_letters(&DeadLetterFilter::default())
            .await
            .unwrap()
            .is_empty(),
        "nothing is dead-lettered: the message is fine, the process is not"
    );
    let again = transport
        .receive(&Destination::Queue("commit".into()), 1, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        again.len(),
        1,
        "the message was abandoned for another process to handle"
    );
}

#[tokio::test]
async fn retention_runs_in_the_background_and_stops_with_the_host() {
    use crate::ports::store::{RetentionPolicy, TimelineEntry};
    let day = Duration::from_secs(24 * 3600);
    let policy = RetentionPolicy {
        handled: Some(day * 14),
        outbox_sent: Some(day * 7),
        timeline: Some(day * 30),
        finished_sagas: Some(day * 30),
        saga_history_entries: Some(1000),
        finished: crate::runtime::registry::finished_sagas(),
        // Batches of one: the task goes on while they come back full.
        batch: 1,
    };
    let consumer = TestConsumer::new(Behaviour::Succeed);
    let harness = start(
        consumer,
        HostOptions {
            retention: Some((policy, Duration::from_millis(20))),
            ..options()
        },
    )
    .await;
    let old = time::OffsetDateTime::now_utc() - day * 40;
    let lines = (0..3)
        .map(|n| TimelineEntry {
            correlation_id: "c-old".into(),
            message_id: format!("m-{n}"),
            message_type: "CreateCommit".into(),
            consumer: None,
            status: TimelineStatus::Completed,
            attempt: 0,
            at: old,
            detail: None,
        })
        .collect();
    harness.store.append_timeline(lines).await.unwrap();
    let store = Arc::clone(&harness.store);
    eventually("the old timeline is pruned", || {
        let store = Arc::clone(&store);
        async move { store.timeline("c-old").await.unwrap().is_empty() }
    })
    .await;
    tokio::time::timeout(Duration::from_secs(5), harness.stop())
        .await
        .expect("the host stops with its retention task");
}

#[tokio::test]
async fn a_slow_consumer_claims_nothing_ahead_so_another_replica_takes_the_next_message() {
    // Two replicas of a consumer whose messages take 300 ms, one handler
    // each: had the first claimed the second message ahead, it would wait
    // there behind the first while the other replica sat idle.
    struct Slow {
        handled: AtomicU32,
    }
    #[async_trait]
    impl Consumer for Slow {
        fn name(&self) -> &'static str {
            "commit"
        }
        fn retry_policy(&self) -> RetryPolicy {
            RetryPolicy::exponential(5)
        }
        async fn handle(&self, _inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
            tokio::time::sleep(Duration::from_millis(300)).await;
            self.handled.fetch_add(1, Ordering::SeqCst);
            Ok(Outcome::default())
        }
    }
    let transport = Arc::new(MemoryTransport::new(10));
    transport.ensure_topology(&Topology::from_routing()).await.unwrap();
    let shutdown = CancellationToken::new();
    let mut replicas = Vec::new();
    let mut running = Vec::new();
    for _ in 0..2 {
        let slow = Arc::new(Slow {
            handled: AtomicU32::new(0),
        });
        let mut opts = options();
        opts.concurrency = 1;
        opts.lock_duration = Duration::from_secs(10);
        let store = Arc::new(SqliteStore::in_memory().unwrap());
        let host = Host::new(transport.clone(), store, vec![slow.clone()], opts);
        let token = shutdown.clone();
        running.push(tokio::spawn(async move { host.run(token).await.unwrap() }));
        replicas.push(slow);
    }
    // Both replicas are waiting before the messages arrive.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for round in 0..3 {
        let messages = (0..2)
            .map(|i| raw(create_commit().to_vec(), &format!("slow-{round}-{i}")))
            .collect();
        transport.send(messages).await.unwrap();
        let want = (round + 1) * 2;
        eventually("the pair is handled", || async {
            replicas.iter().map(|r| r.handled.load(Ordering::SeqCst)).sum::<u32>() == want
        })
        .await;
    }
    let per_replica: Vec<u32> = replicas.iter().map(|r| r.handled.load(Ordering::SeqCst)).collect();
    assert_eq!(
        per_replica,
        [3, 3],
        "one replica took a message the other could have handled"
    );
    shutdown.cancel();
    for replica in running {
        replica.await.unwrap();
    }
}

/// A commit that holds its first call until told, then commits as the
/// store and the transport would.
struct HeldFirstCommit {
    inner: crate::ports::settle::StoreThenSettle,
    calls: AtomicU32,
    release: tokio::sync::Notify,
}

#[async_trait]
impl crate::ports::settle::Settle for HeldFirstCommit {
    async fn settle(
        &self,
        settlement: crate::ports::settle::Settlement,
        lock: &crate::ports::transport::LockToken,
    ) -> Result<crate::ports::settle::Settled, crate::ports::settle::SettleError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            self.release.notified().await;
        }
        self.inner.settle(settlement, lock).await
    }
}

#[tokio::test]
async fn one_handler_handles_the_next_message_while_the_last_ones_commit_waits() {
    // One handler slot: had the slot been held through the commit, the
    // second message's handler could not run while the first commit waits
    // (on PostgreSQL, for its WAL flush).
    let consumer = TestConsumer::new(Behaviour::Succeed);
    let transport = Arc::new(MemoryTransport::new(10));
    transport.ensure_topology(&Topology::from_routing()).await.unwrap();
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let commit = Arc::new(HeldFirstCommit {
        inner: crate::ports::settle::StoreThenSettle::new(store.clone(), transport.clone()),
        calls: AtomicU32::new(0),
        release: tokio::sync::Notify::new(),
    });
    let mut opts = options();
    opts.concurrency = 1;
    let host = Host::new(transport.clone(), store.clone(), vec![consumer.clone()], opts).with_settle(commit.clone());
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let running = tokio::spawn(async move { host.run(token).await.unwrap() });
    let envelopes = [create_commit(), create_commit()];
    transport
        .send(vec![
            raw(envelopes[0].to_vec(), "first"),
            raw(envelopes[1].to_vec(), "second"),
        ])
        .await
        .unwrap();
    eventually("the second message is handled and committing too", || async {
        consumer.calls.load(Ordering::SeqCst) == 2 && commit.calls.load(Ordering::SeqCst) == 2
    })
    .await;
    assert_eq!(
        transport.depth(&Destination::Queue("commit".into())).await.unwrap(),
        1,
        "the first message is not settled while its commit waits"
    );
    commit.release.notify_one();
    eventually("both are settled", || async {
        transport.depth(&Destination::Queue("commit".into())).await.unwrap() == 0
    })
    .await;
    for envelope in &envelopes {
        let lines = store.timeline(&envelope.correlation_id.to_string()).await.unwrap();
        assert!(
            lines.iter().any(|line| line.status == TimelineStatus::Completed),
            "{lines:?}"
        );
    }
    assert_eq!(consumer.effects.load(Ordering::SeqCst), 2, "each handled once");
    shutdown.cancel();
    running.await.unwrap();
}

/// Waits between looks for a newer bosun, and the patience, short enough
/// for a test.
fn waiting(wait_ms: u64, patience_ms: u64) -> HostOptions {
    HostOptions {
        message_versions: crate::runtime::config::MessageVersionSettings {
            newer_message_wait: Duration::from_millis(wait_ms),
            newer_message_patience: Duration::from_millis(patience_ms),
            compat_version: None,
        },
        ..options()
    }
}

/// A host on the in-memory transport and store, and its metrics.
async fn start_counting(
    consumer: Arc<TestConsumer>,
    options: HostOptions,
) -> (Harness, Arc<crate::runtime::metrics::Metrics>) {
    let transport = Arc::new(MemoryTransport::new(10));
    transport.ensure_topology(&Topology::from_routing()).await.unwrap();
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let shutdown = CancellationToken::new();
    let host = Host::new(transport.clone(), store.clone(), vec![consumer], options);
    let metrics = host.metrics();
    let token = shutdown.clone();
    let host = tokio::spawn(async move {
        host.run(token).await.unwrap();
    });
    (
        Harness {
            transport,
            store,
            shutdown,
            host,
        },
        metrics,
    )
}

fn waits(metrics: &crate::runtime::metrics::Metrics) -> u64 {
    metrics.consumer("commit").waiting
}

/// A `CreateCommit` one version newer than this build reads.
fn newer_create_commit() -> Envelope {
    let mut envelope = create_commit();
    envelope.schema_version += 1;
    envelope
}

#[tokio::test]
async fn a_message_newer_than_this_build_waits_for_a_newer_bosun_and_is_counted_not_dead_lettered() {
    let consumer = TestConsumer::new(Behaviour::Succeed);
    let (harness, metrics) = start_counting(consumer.clone(), waiting(30, 3_600_000)).await;
    let envelope = newer_create_commit();
    harness.transport.send(vec![raw(envelope.to_vec(), "m")]).await.unwrap();
    eventually("it was left to wait three times", || async { waits(&metrics) >= 3 }).await;
    assert_eq!(consumer.calls.load(Ordering::SeqCst), 0, "this build never handles it");
    assert!(
        harness
            .store
            .dead_letters(&DeadLetterFilter::default())
            .await
            .unwrap()
            .is_empty(),
        "not dead-lettered because it is newer"
    );
    let counted = metrics.consumer("commit");
    assert_eq!((counted.retried, counted.dead_lettered), (0, 0));
    let timeline = harness
        .store
        .timeline(&envelope.correlation_id.to_string())
        .await
        .unwrap();
    let line = timeline
        .iter()
        .find(|line| line.status == TimelineStatus::RetryScheduled)
        .expect("a wait on the timeline");
    let detail = line.detail.as_deref().unwrap_or_default();
    assert!(detail.contains("waiting for a newer bosun"), "{detail}");
    assert!(detail.contains("schemaVersion"), "{detail}");
    assert_eq!(line.attempt, 0, "waiting counts no attempt");
    harness.stop().await;
}

#[tokio::test]
async fn a_message_newer_than_this_build_is_dead_lettered_as_needs_newer_once_past_the_patience() {
    let consumer = TestConsumer::new(Behaviour::Succeed);
    let (harness, metrics) = start_counting(consumer.clone(), waiting(40, 250)).await;
    let envelope = newer_create_commit();
    harness.transport.send(vec![raw(envelope.to_vec(), "m")]).await.unwrap();
    let store = harness.store.clone();
    eventually("it is dead-lettered", || {
        let store = store.clone();
        async move {
            !store
                .dead_letters(&DeadLetterFilter::default())
                .await
                .unwrap()
                .is_empty()
        }
    })
    .await;
    let dead = store.dead_letters(&DeadLetterFilter::default()).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, "needs-newer");
    assert!(
        dead[0].description.contains("BOSUN_NEWER_MESSAGE_PATIENCE"),
        "{}",
        dead[0].description
    );
    assert!(waits(&metrics) >= 2, "it waited before it was given up on");
    // The copy that was given up on is the original message, marked with
    // when it began to wait, at its first attempt.
    let body: serde_json::Value = serde_json::from_slice(&dead[0].body).unwrap();
    assert_eq!(body["messageId"], envelope.message_id.to_string());
    assert_eq!(body["schemaVersion"], envelope.schema_version);
    assert_eq!(body["attempt"], 0);
    let since = body["waitingSince"].as_str().expect("waitingSince");
    let since = time::OffsetDateTime::parse(since, &time::format_description::well_known::Rfc3339).unwrap();
    assert!(time::OffsetDateTime::now_utc() - since >= time::Duration::milliseconds(250));
    assert_eq!(body["payload"], envelope.payload);
    assert_eq!(consumer.calls.load(Ordering::SeqCst), 0);
    harness.stop().await;
}

#[tokio::test]
async fn a_handler_that_needs_a_newer_bosun_waits_like_a_newer_message_without_counting_attempts() {
    // Needs a newer bosun three times (say, until a newer process takes
    // it), then is handled.
    let consumer = TestConsumer::new(Behaviour::NeedsNewerTimes(3));
    let (harness, metrics) = start_counting(consumer.clone(), waiting(20, 3_600_000)).await;
    let envelope = create_commit();
    harness.transport.send(vec![raw(envelope.to_vec(), "m")]).await.unwrap();
    eventually("it is handled once a process can", || async {
        consumer.effects.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(consumer.calls.load(Ordering::SeqCst), 4);
    assert_eq!(
        consumer.highest_attempt.load(Ordering::SeqCst),
        0,
        "waiting is no attempt"
    );
    let counted = metrics.consumer("commit");
    assert_eq!((counted.waiting, counted.retried, counted.dead_lettered), (3, 0, 0));
    harness.stop().await;
}

#[tokio::test]
async fn a_handler_that_keeps_needing_a_newer_bosun_is_dead_lettered_as_needs_newer_past_the_patience() {
    // A policy of one retry: it is the patience that ends the wait.
    let consumer = Arc::new(TestConsumer {
        behaviour: Behaviour::NeedsNewerTimes(u32::MAX),
        calls: AtomicU32::new(0),
        effects: AtomicU32::new(0),
        max_retries: 1,
        highest_attempt: AtomicU32::new(0),
    });
    let (harness, metrics) = start_counting(consumer.clone(), waiting(30, 200)).await;
    let envelope = create_commit();
    harness.transport.send(vec![raw(envelope.to_vec(), "m")]).await.unwrap();
    let store = harness.store.clone();
    eventually("it is dead-lettered", || {
        let store = store.clone();
        async move {
            !store
                .dead_letters(&DeadLetterFilter::default())
                .await
                .unwrap()
                .is_empty()
        }
    })
    .await;
    let dead = store.dead_letters(&DeadLetterFilter::default()).await.unwrap();
    assert_eq!(dead[0].reason, "needs-newer");
    assert!(
        consumer.calls.load(Ordering::SeqCst) > 2,
        "it waited past a policy of one retry"
    );
    assert!(waits(&metrics) >= 2);
    assert_eq!(metrics.consumer("commit").retried, 0);
    harness.stop().await;
}

/// A saga state a later release saved is never overwritten: the message
/// that needs it waits for a newer bosun (counted, not dead-lettered), and
/// the stored state and version stay as that release left them.
#[tokio::test]
async fn a_saga_state_a_later_release_saved_is_left_as_it_is_and_its_message_waits() {
    let transport = Arc::new(MemoryTransport::new(10));
    transport.ensure_topology(&Topology::from_routing()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let newer = r#"{"stateVersion": 2, "tally": {"count": 41}, "shape": "of a later release"}"#;
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "INSERT INTO sagas (kind, key, version, state, created_at, updated_at, tenant_id)
             VALUES ('probe', 'contoso/canary', 5, ?1, 1, 1, 'contoso')",
            [newer],
        )
        .unwrap();
    let consumer: Arc<dyn Consumer> = Arc::new(bosun_consumers::probe::ProbeConsumer::new());
    let shutdown = CancellationToken::new();
    let host = Host::new(transport.clone(), store.clone(), vec![consumer], waiting(30, 3_600_000));
    let metrics = host.metrics();
    let token = shutdown.clone();
    let running = tokio::spawn(async move { host.run(token).await.unwrap() });
    let echo: Message = bosun_contracts::samples::probe_echoed().into();
    let envelope = Envelope::new(&echo, Uuid::now_v7(), "contoso", "agent:test");
    transport
        .send(vec![OutboundMessage {
            destination: bosun_contracts::routing::destination_of("ProbeEchoed").expect("routed"),
            broker_message_id: envelope.message_id.to_string(),
            message_type: Some("ProbeEchoed".into()),
            correlation_id: Some(envelope.correlation_id.to_string()),
            body: envelope.to_vec(),
            scheduled_at: None,
        }])
        .await
        .unwrap();
    eventually("it waited three times", || async {
        metrics.consumer("probe").waiting >= 3
    })
    .await;
    let saga = store
        .load_saga("probe", "contoso/canary")
        .await
        .unwrap()
        .expect("the saga");
    assert_eq!(saga.version, 5, "never saved over");
    assert_eq!(saga.state, serde_json::from_str::<serde_json::Value>(newer).unwrap());
    assert!(
        store
            .dead_letters(&DeadLetterFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
    let counted = metrics.consumer("probe");
    assert_eq!((counted.retried, counted.dead_lettered), (0, 0));
    shutdown.cancel();
    running.await.unwrap();
}

/// An approval the previous release wrote (the corpus's `ApproveRelease`
/// version 1, with `approver`) for a release it left waiting for its prod
/// approval (the corpus's saga state) is handled by this build through
/// the host: upcast to version 2, the approval recorded with the sender's
/// name as its note, nothing dead-lettered.
#[tokio::test]
async fn an_approval_of_the_previous_release_is_upcast_and_approves_the_release_it_left_waiting() {
    use bosun_sagas::release::{ReleasePolicy, ReleaseSaga};

    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let state = std::fs::read_to_string(corpus.join("sagas/release.v1.awaitingApproval-prod.json")).unwrap();
    let approval = std::fs::read(corpus.join("messages/ApproveRelease.v1.json")).unwrap();
    let transport = Arc::new(MemoryTransport::new(10));
    transport.ensure_topology(&Topology::from_routing()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let key = "contoso/payments-api-1.4.0-7f3c2a1";
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "INSERT INTO sagas (kind, key, version, state, created_at, updated_at, tenant_id)
             VALUES ('release', ?1, 7, ?2, 1, 1, 'contoso')",
            [key, state.as_str()],
        )
        .unwrap();
    let saga = ReleaseSaga::new(ReleasePolicy {
        environments: vec!["dev".to_owned(), "staging".to_owned(), "prod".to_owned()],
        auto_approve: vec!["dev".to_owned()],
        ..ReleasePolicy::default()
    });
    let consumer: Arc<dyn Consumer> = Arc::new(bosun_consumers::release_orchestration::ReleaseOrchestration::new(saga));
    let shutdown = CancellationToken::new();
    let host = Host::new(transport.clone(), store.clone(), vec![consumer], options());
    let token = shutdown.clone();
    let running = tokio::spawn(async move { host.run(token).await.unwrap() });
    transport
        .send(vec![OutboundMessage {
            destination: bosun_contracts::routing::destination_of("ApproveRelease").expect("routed"),
            broker_message_id: "01930000-0000-7000-8000-000000000010".to_owned(),
            message_type: Some("ApproveRelease".into()),
            correlation_id: None,
            body: approval,
            scheduled_at: None,
        }])
        .await
        .unwrap();
    let records = store.clone();
    eventually("the release saga took the approval", || {
        let records = records.clone();
        async move {
            records
                .load_saga("release", key)
                .await
                .unwrap()
                .is_some_and(|saga| saga.version > 7)
        }
    })
    .await;
    let saga = store.load_saga("release", key).await.unwrap().unwrap();
    let prod = &saga.state["approvals"]["prod"];
    assert_eq!(prod["note"], "alice@contoso.com", "{:#}", saga.state);
    assert_eq!(prod["approver"], "key:0123456789ab (release board)");
    assert_eq!(saga.state["stateVersion"], 1);
    assert!(
        store
            .dead_letters(&DeadLetterFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
    shutdown.cancel();
    running.await.unwrap();
}
