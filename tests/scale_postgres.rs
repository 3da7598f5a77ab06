//! Scale on PostgreSQL: three `bosun serve` processes share one database;
//! 10,000 probes go through a two-hop flow with a saga (Probe -> ProbeEchoed
//! -> a tally saga per group); one process is killed with SIGKILL midway.
//! Every message is handled once, no saga update is lost, nothing is left
//! in flight.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use bosun::runtime::config::{Secret, Settings, TransportKind};
use bosun::wiring::Backends;
use bosun_contracts::messages::Probe;
use bosun_contracts::routing::destination_of;
use bosun_contracts::{Envelope, Message};
use common::{PostgresSchema, Progress, Server, eventually, run, thousands};
use uuid::Uuid;

const MESSAGES: u64 = 10_000;
const GROUPS: u64 = 50;

#[test]
fn three_hosts_on_postgres_handle_ten_thousand_probes_once_despite_a_sigkill() {
    let progress = Progress::start("scale_postgres");
    // One runtime for the whole test: the connection pool lives in it.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    let schema = runtime.block_on(PostgresSchema::create("bosun_scale"));
    let url = schema.url.clone();

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    run(data, &["migrate", "--database-url", &url]);
    let env = [
        ("BOSUN_DATABASE_URL", url.as_str()),
        ("BOSUN_TRANSPORT", "postgres"),
        ("BOSUN_CONCURRENCY", "16"),
        ("BOSUN_LOCK_DURATION_MS", "3000"),
    ];
    let args = ["--consumers", "probe"];
    let mut servers: Vec<Server> = (0..3).map(|_| Server::start(data, &env, &args)).collect();
    for server in &mut servers {
        server.wait_for_line("receiving", Duration::from_secs(60));
    }
    progress.phase("3 hosts receiving on a migrated schema");

    let mut settings = Settings::with_data_dir(data);
    settings.database_url = Some(Secret::new(url.clone()));
    settings.transport = TransportKind::Postgres;
    let backends = runtime.block_on(Backends::open(&settings)).expect("backends");
    let destination = destination_of("Probe").unwrap();
    let correlation = Uuid::now_v7();
    runtime.block_on(async {
        let mut batch = Vec::new();
        for sequence in 0..MESSAGES {
            let message = Message::Probe(Probe {
                group: format!("g{}", sequence % GROUPS),
                sequence,
                echo: true,
                work_ms: 0,
                relays: 0,
            });
            let envelope = Envelope::new(&message, correlation, "scale", "test");
            batch.push(bosun::ports::transport::OutboundMessage {
                destination: destination.clone(),
                broker_message_id: envelope.message_id.to_string(),
                message_type: Some("Probe".into()),
                correlation_id: Some(correlation.to_string()),
                body: envelope.to_vec(),
                scheduled_at: None,
            });
            if batch.len() == 500 {
                backends.transport.send(std::mem::take(&mut batch)).await.unwrap();
                progress.tick(|| format!("{}/{} probes sent", thousands(sequence + 1), thousands(MESSAGES)));
            }
        }
        backends.transport.send(batch).await.unwrap();
    });
    progress.phase(format!("{} probes sent", thousands(MESSAGES)));

    let counted = || -> u64 {
        runtime
            .block_on(backends.store.list_sagas(Some("probe")))
            .unwrap()
            .iter()
            .map(|saga| saga.state["count"].as_u64().unwrap_or(0))
            .sum()
    };
    let report = |n: u64| format!("{}/{} probes counted", thousands(n), thousands(MESSAGES));
    eventually("a third of the probes are counted", Duration::from_secs(300), || {
        let n = counted();
        progress.tick(|| report(n));
        (n >= MESSAGES / 3).then_some(())
    });
    servers.remove(0).kill();
    progress.phase(format!("{}; killed one host with SIGKILL", report(counted())));

    eventually("every probe is counted", Duration::from_secs(600), || {
        let n = counted();
        progress.tick(|| report(n));
        (n >= MESSAGES).then_some(())
    });
    progress.phase(report(counted()));
    let probe_queue = bosun_contracts::Destination::Queue("probe".into());
    let probe_subscription = bosun_contracts::routing::consumer("probe").unwrap().subscription();
    eventually("nothing is left in flight", Duration::from_secs(60), || {
        let queued = runtime.block_on(backends.transport.depth(&probe_queue)).unwrap();
        let echoes = runtime.block_on(backends.transport.depth(&probe_subscription)).unwrap();
        (queued == 0 && echoes == 0).then_some(())
    });
    progress.phase("nothing left in flight");
    std::thread::sleep(Duration::from_secs(2));
    for server in servers {
        server.terminate();
    }

    let sagas = runtime.block_on(backends.store.list_sagas(Some("probe"))).unwrap();
    assert_eq!(sagas.len() as u64, GROUPS);
    for saga in &sagas {
        assert_eq!(
            saga.state["count"],
            MESSAGES / GROUPS,
            "{} lost or doubled an update: {}",
            saga.key,
            saga.state
        );
        assert_eq!(
            saga.version as u64,
            MESSAGES / GROUPS,
            "{}: one saga version per echo",
            saga.key
        );
    }
    assert_eq!(counted(), MESSAGES, "every probe counted exactly once");
    assert_eq!(
        runtime.block_on(backends.store.outbox_backlog()).unwrap(),
        0,
        "nothing left in the outbox"
    );
    let dead = runtime
        .block_on(backends.store.dead_letters(&Default::default()))
        .unwrap();
    assert!(dead.is_empty(), "{} dead letters", dead.len());
    progress.phase(format!("checked {GROUPS} tally sagas: every probe counted once"));
    runtime.block_on(schema.drop());
}

#[test]
fn serve_waits_on_a_database_that_was_not_migrated_and_says_what_to_do() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let schema = runtime.block_on(PostgresSchema::create("bosun_unmigrated"));
    let url = schema.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(
        dir.path(),
        &[("BOSUN_DATABASE_URL", &url), ("BOSUN_TRANSPORT", "postgres")],
        &["--consumers", "probe"],
    );
    // It waits (a pod stays up, unready), saying what to do; it neither
    // serves nor exits.
    server.wait_for_line("run `bosun migrate`", Duration::from_secs(60));
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "serve exited on an unmigrated database"
    );
    assert!(
        !server.seen.iter().any(|line| line.contains("receiving")),
        "served unmigrated"
    );
    run(dir.path(), &["migrate", "--database-url", &url]);
    let again = run(dir.path(), &["migrate", "--database-url", &url]);
    assert!(again.contains("already at version"), "{again}");
    server.wait_for_line("receiving", Duration::from_secs(60));
    server.terminate();
    runtime.block_on(schema.drop());
}
