//! Durable bulk replay jobs, end to end with the real binary: a bulk replay
//! of 500 dead letters at a low rate, its serving process SIGKILLed midway
//! and restarted, resumes and replays every dead letter exactly once, and a
//! second API process shows its progress throughout.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use bosun::ports::store::DeadLetterFilter;
use bosun_contracts::{Destination, Envelope, Message};
use common::{Progress, Server, backends, block_on, eventually, run_json};
use serde_json::{Value, json};
use uuid::Uuid;

const DEAD_LETTERS: usize = 500;
/// Replays per second: the job takes about 10 s, so the kill lands midway.
const RATE: f64 = 50.0;

/// Starts `bosun serve --http` with only the pull-request consumer, so the
/// replayed `CreateCommit`s stay on the commit queue to be counted.
fn serve(data: &Path) -> (Server, String) {
    let mut server = Server::start(data, &[], &["--http", "127.0.0.1:0", "--consumers", "pull-request"]);
    let line = server.wait_for_line("HTTP API on http://", Duration::from_secs(60));
    let url = line[line.find("http://").unwrap()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    server.wait_for_line("receiving", Duration::from_secs(30));
    (server, url)
}

fn call(method: reqwest::Method, url: &str, key: &str, body: Option<Value>) -> (u16, Value) {
    block_on(async {
        let mut request = reqwest::Client::new().request(method, url).bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("the API answers");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    })
}

fn job(url: &str, key: &str, id: &str) -> Value {
    let (status, job) = call(reqwest::Method::GET, &format!("{url}/v1/replays/{id}"), key, None);
    assert_eq!(status, 200, "{job}");
    job
}

/// 500 dead letters of tenant contoso, as the commit consumer records them.
fn record_dead_letters(data: &Path) -> BTreeSet<Uuid> {
    let backends = backends(data);
    let payload = json!({"repository": "payments-api", "branch": "main", "message": "m",
                         "files": [{"path": "README.md", "content": "x"}]});
    let message = Message::from_type_and_payload("CreateCommit", &payload).unwrap();
    let mut ids = BTreeSet::new();
    block_on(async {
        for _ in 0..DEAD_LETTERS {
            let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "test");
            let record = common::dead_letter(
                &envelope,
                "commit",
                "transient-exhausted",
                "the Git host did not answer",
                "transport",
            );
            ids.insert(record.id);
            backends.store.record_dead_letter(record, None).await.unwrap();
        }
    });
    ids
}

#[test]
fn a_bulk_replay_survives_sigkill_and_replays_every_dead_letter_exactly_once() {
    let progress = Progress::start("replay_jobs (500 dead letters, SIGKILL midway)");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let created = run_json(
        data,
        &[
            "keys",
            "create",
            "--tenant",
            "contoso",
            "--scopes",
            "dead-letters:replay,deliveries:read",
        ],
    );
    let key = created["key"].as_str().unwrap().to_owned();
    let ids = record_dead_letters(data);
    progress.phase(format!("{DEAD_LETTERS} dead letters recorded"));

    let (first, first_url) = serve(data);
    let (_second, second_url) = serve(data);
    let (status, started) = call(
        reqwest::Method::POST,
        &format!("{first_url}/v1/dead-letters/replays"),
        &key,
        Some(json!({"filter": {"reason": "transient-exhausted"}, "rate": RATE})),
    );
    assert_eq!(status, 202, "{started}");
    let job_id = started["id"].as_str().unwrap().to_owned();
    assert_eq!(started["total"], DEAD_LETTERS);
    assert_eq!(started["status"], "running");

    // Followed from the second process, which did not start it.
    let mut seen = Vec::new();
    let before_kill = eventually("the job is a fifth done", Duration::from_secs(60), || {
        let job = job(&second_url, &key, &job_id);
        let done = job["done"].as_u64().unwrap();
        seen.push(done);
        (done >= DEAD_LETTERS as u64 / 5).then_some(done)
    });
    assert!(before_kill < DEAD_LETTERS as u64, "the kill must land midway");
    first.kill();
    progress.phase(format!(
        "first process SIGKILLed with {before_kill} of {DEAD_LETTERS} done"
    ));
    let (_restarted, _) = serve(data);
    progress.phase("first process restarted");

    let deadline = Instant::now() + Duration::from_secs(180);
    let finished = loop {
        let job = job(&second_url, &key, &job_id);
        seen.push(job["done"].as_u64().unwrap());
        if job["status"] == "finished" {
            break job;
        }
        assert_eq!(job["status"], "running", "{job}");
        assert!(Instant::now() < deadline, "the job did not finish: {job}");
        progress.tick(|| format!("{} of {DEAD_LETTERS} replayed", job["done"]));
        std::thread::sleep(Duration::from_millis(200));
    };
    progress.phase("job finished");
    assert!(
        seen.windows(2).all(|pair| pair[0] <= pair[1]),
        "progress went backwards: {seen:?}"
    );
    assert!(
        seen.iter().any(|done| *done > 0 && *done < DEAD_LETTERS as u64),
        "progress was visible midway: {seen:?}"
    );
    assert_eq!(finished["replayedCount"], DEAD_LETTERS, "{finished}");
    assert_eq!(finished["failedCount"], 0, "{finished}");
    let replayed: BTreeSet<Uuid> = finished["replayed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| Uuid::parse_str(id.as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(replayed, ids);

    // Exactly once: one replay recorded per dead letter, one message each
    // on the queue (none sent twice across the kill).
    let backends = backends(data);
    let records = block_on(backends.store.dead_letters(&DeadLetterFilter {
        include_replayed: true,
        ..DeadLetterFilter::default()
    }))
    .unwrap();
    assert_eq!(records.len(), DEAD_LETTERS);
    for record in &records {
        assert_eq!(
            record.replays.len(),
            1,
            "dead letter {} replays: {:?}",
            record.id,
            record.replays
        );
        assert_eq!(record.replays[0].by, format!("key:{}", created["id"].as_str().unwrap()));
    }
    let depth = block_on(backends.transport.depth(&Destination::Queue("commit".into()))).unwrap();
    assert_eq!(depth, DEAD_LETTERS as u64, "one replayed message per dead letter");
    let listed = call(reqwest::Method::GET, &format!("{second_url}/v1/replays"), &key, None).1;
    assert_eq!(listed["jobs"][0]["id"], job_id.as_str());
    progress.phase("every dead letter replayed exactly once");

    // The CLI reads the same stored job.
    let jobs = run_json(data, &["dead-letters", "jobs"]);
    assert_eq!(jobs[0]["id"], job_id.as_str());
    assert_eq!(jobs[0]["status"], "finished");
    let shown = common::run(data, &["dead-letters", "job", &job_id[..13]]);
    assert!(
        shown.contains(&format!("progress: {DEAD_LETTERS} of {DEAD_LETTERS} done")),
        "{shown}"
    );
    let refused = common::bosun(data)
        .args(["dead-letters", "job", &job_id, "--pause"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("is finished: it cannot be paused"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}
