//! Tests of `src/tools/bench.rs`.

use std::collections::BTreeMap;

use super::*;

fn settings() -> Settings {
    Settings::from_sources(&BTreeMap::new(), &BTreeMap::new()).expect("default settings")
}

fn plan(backlog: usize) -> BenchPlan {
    BenchPlan {
        scenarios: vec![Scenario::Noop, Scenario::Saga],
        concurrency: vec![2],
        messages: 20,
        backlog,
        timeout: Duration::from_secs(120),
        saga_keys: SAGA_KEYS,
    }
}

fn bosun_row(msg_per_sec: f64) -> BenchRow {
    BenchRow {
        backend: "postgres".into(),
        workload: Scenario::Saga,
        concurrency: 8,
        backlog: 1000,
        messages: 2000,
        seconds: 2000.0 / msg_per_sec,
        msg_per_sec,
        first_tenth_per_sec: msg_per_sec,
        last_tenth_per_sec: msg_per_sec,
        saga_keys: SAGA_KEYS,
        p50_ms: 1.5,
        p99_ms: 9.0,
        handler_p50_ms: 0.1,
        handler_p99_ms: 0.2,
        conflicts: 7,
        limit: String::new(),
        limit_per_sec: 0.0,
        limit_before_per_sec: 0.0,
        limit_after_per_sec: 0.0,
        limit_p50_ms: 0.0,
        limit_p99_ms: 0.0,
        limit_conflicts: 0,
        ratio: 0.0,
    }
}

fn limit_run(messages: usize, seconds: f64, latency_us: u64, conflicts: u64) -> LimitRun {
    LimitRun {
        messages,
        seconds,
        latencies_us: vec![latency_us; messages],
        conflicts,
    }
}

#[test]
fn a_json_row_has_every_field_and_the_ratio_of_bosun_to_the_limit() {
    let row = bosun_row(250.0).beside(
        POSTGRES_LIMIT,
        &limit_run(2000, 1.0, 1000, 1),
        &limit_run(2000, 3.0, 3000, 2),
    );
    let lines = json_lines(&[row.clone(), row]).unwrap();
    assert_eq!(lines.lines().count(), 2, "one object per line: {lines}");
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    for field in [
        "backend",
        "workload",
        "concurrency",
        "backlog",
        "msgPerSec",
        "p50Ms",
        "p99Ms",
        "conflicts",
        "limitPerSec",
        "ratio",
        "limit",
        "limitBeforePerSec",
        "limitAfterPerSec",
        "limitP50Ms",
        "limitP99Ms",
        "limitConflicts",
        "firstTenthPerSec",
        "lastTenthPerSec",
        "sagaKeys",
    ] {
        assert!(first.get(field).is_some(), "{field} missing from {first}");
    }
    assert_eq!(first["backend"], "postgres");
    assert_eq!(first["workload"], "saga");
    assert_eq!(first["concurrency"], 8);
    assert_eq!(first["backlog"], 1000);
    assert_eq!(first["conflicts"], 7);
    assert_eq!(first["limit"], POSTGRES_LIMIT);
    // 4000 limit messages in 4 s, bosun at 250/s.
    assert_eq!(first["limitPerSec"], 1000.0);
    assert_eq!(first["limitBeforePerSec"], 2000.0);
    assert_eq!(first["limitAfterPerSec"], 2000.0 / 3.0);
    assert_eq!(first["limitConflicts"], 3);
    let ratio = first["ratio"].as_f64().unwrap();
    let expected = first["msgPerSec"].as_f64().unwrap() / first["limitPerSec"].as_f64().unwrap();
    assert_eq!(ratio, expected);
    assert_eq!(ratio, 0.25);
}

#[test]
fn a_limit_that_handled_nothing_gives_ratio_zero_not_infinity() {
    let row = bosun_row(250.0).beside(SQLITE_LIMIT, &LimitRun::default(), &LimitRun::default());
    assert_eq!(row.ratio, 0.0);
    assert!(json_lines(&[row]).unwrap().contains("\"ratio\":0.0"));
}

#[test]
fn the_table_prints_bosun_the_limit_and_the_ratio() {
    let row = bosun_row(250.0).beside(
        POSTGRES_LIMIT,
        &limit_run(2000, 2.0, 1000, 0),
        &limit_run(2000, 2.0, 1000, 0),
    );
    let table = table(&[row]);
    let mut lines = table.lines();
    let header: Vec<_> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "BACKEND",
            "LOAD",
            "HANDLERS",
            "BACKLOG",
            "MSG/S",
            "P50",
            "P99",
            "CONFLICTS",
            "LIMIT/S",
            "LIMIT",
            "P50",
            "LIMIT",
            "P99",
            "RATIO"
        ]
    );
    let cells: Vec<_> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "postgres", "saga", "8", "1000", "250", "1.50ms", "9.00ms", "7", "1000", "1.00ms", "1.00ms", "0.250"
        ]
    );
}

#[test]
fn limit_messages_are_bosuns_with_the_same_saga_keys() {
    let bosun = envelopes(Scenario::Saga, 20, SAGA_KEYS);
    let limit = limit_messages(Scenario::Saga, 20, SAGA_KEYS);
    assert_eq!(limit.len(), 20);
    assert_eq!(limit[3].saga_key, "bench-3");
    assert_eq!(limit[19].saga_key, "bench-3");
    // The same kind of envelope (lengths differ with the timestamps'
    // digits, so compare what they are, not their size).
    let shape = |body: &[u8]| {
        let value: serde_json::Value = serde_json::from_slice(body).unwrap();
        let keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
        (value["messageType"].clone(), keys)
    };
    assert_eq!(shape(&limit[0].body), shape(&bosun[0].body));
    let ids: std::collections::HashSet<_> = limit.iter().map(|m| &m.message_id).collect();
    assert_eq!(ids.len(), 20, "every message its own id");
}

#[tokio::test]
async fn prefill_sends_exactly_n_messages_to_the_probe_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = settings();
    settings.data_dir = dir.path().join("data");
    let backends = Backends::open(&settings).await.unwrap();
    let mut lines = Vec::new();
    for (scenario, count) in [(Scenario::Noop, 1234), (Scenario::Saga, 7)] {
        prefill(&backends, scenario, count, SAGA_KEYS, &mut |line: &str| {
            lines.push(line.to_owned())
        })
        .await
        .unwrap();
        assert_eq!(
            backends.transport.depth(&entity_of(scenario)).await.unwrap(),
            count as u64,
            "{scenario:?}"
        );
    }
}

#[tokio::test]
async fn embedded_rows_sit_beside_their_limit_and_leave_nothing_behind() {
    let scratch = tempfile::tempdir().unwrap();
    let mut lines = Vec::new();
    let rows = run_embedded(scratch.path(), &settings(), &plan(5), &mut |line: &str| {
        lines.push(line.to_owned())
    })
    .await
    .unwrap();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert_eq!((row.backend.as_str(), row.concurrency, row.backlog), ("embedded", 2, 5));
        assert!(row.messages >= 20, "{row:?}");
        assert_eq!(row.limit, SQLITE_LIMIT);
        assert!(
            row.limit_before_per_sec > 0.0 && row.limit_after_per_sec > 0.0,
            "{row:?}"
        );
        assert_eq!(row.ratio, row.msg_per_sec / row.limit_per_sec);
    }
    // Limit, bosun, limit, for each row, in that order.
    let order: Vec<_> = lines
        .iter()
        .filter(|line| line.ends_with("..."))
        .map(|line| if line.contains("limit") { "limit" } else { "bosun" })
        .collect();
    assert_eq!(
        order,
        ["limit", "bosun", "limit", "limit", "bosun", "limit"],
        "{lines:#?}"
    );
    let left: Vec<_> = std::fs::read_dir(scratch.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[tokio::test]
async fn postgres_rows_sit_beside_their_limit_and_drop_their_tables() {
    // Fails, saying how to provide one, when there is no PostgreSQL.
    let probe = crate::backends::postgres::testing::fresh().await;
    probe.finish().await;
    let url = crate::backends::postgres::testing::url();
    let mut lines = Vec::new();
    let rows = run_postgres(&url, &settings(), &plan(5), &mut |line: &str| {
        lines.push(line.to_owned())
    })
    .await
    .unwrap();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert_eq!((row.backend.as_str(), row.concurrency, row.backlog), ("postgres", 2, 5));
        assert_eq!(row.limit, POSTGRES_LIMIT);
        assert!(
            row.limit_before_per_sec > 0.0 && row.limit_after_per_sec > 0.0,
            "{row:?}"
        );
        assert_eq!(row.ratio, row.msg_per_sec / row.limit_per_sec);
    }
    let database = crate::backends::postgres::PostgresDatabase::connect(&url)
        .await
        .unwrap();
    let left: i64 = sqlx_core::query_scalar::query_scalar(
        "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'bench\\_limit\\_%'",
    )
    .fetch_one(database.pool())
    .await
    .unwrap();
    assert_eq!(left, 0, "limit tables left behind");
    database.pool().close().await;
}
