//! A delivery's `outcome` through `GET /v1/deliveries/{id}`: the sentence
//! and its parts for a dead letter and for a completed delivery, the
//! lines' `attemptNumber` beside their `attempt`, and the document that
//! describes them.

use super::*;

/// A line the commit consumer wrote about message `message_id`.
fn commit_line(
    correlation: &str,
    message_id: &str,
    status: TimelineStatus,
    attempt: u32,
    detail: Option<String>,
) -> TimelineEntry {
    TimelineEntry {
        correlation_id: correlation.to_owned(),
        message_id: message_id.to_owned(),
        message_type: "CreateCommit".into(),
        consumer: Some("commit".into()),
        status,
        attempt,
        at: OffsetDateTime::now_utc(),
        detail,
    }
}

#[tokio::test]
async fn a_delivery_says_what_ended_it_and_what_to_do_next() {
    let api = Api::start().await;
    let key = api.key("contoso", &[Scope::CommandsSend, Scope::DeliveriesRead]).await;
    let accepted = api.send_commit(&key, "payments-api").await;
    let correlation = accepted["correlationId"].as_str().unwrap().to_owned();
    let message_id = accepted["messageId"].as_str().unwrap().to_owned();
    let path = format!("/v1/deliveries/{correlation}");
    let read = || async {
        api.get(&key, &path)
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };

    // Sent, not handled yet: in progress, waiting for the commit consumer.
    let delivery = read().await;
    assert_eq!(delivery["status"], "in-progress");
    assert_eq!(delivery["outcome"]["state"], "in-progress");
    assert_eq!(
        delivery["outcome"]["sentence"].as_str().unwrap().split(" in ").next(),
        Some("In progress: 1 hop"),
        "{delivery:#}"
    );
    // The line keeps `attempt` (retries before it) and adds the attempt counted from 1.
    let sent = &delivery["messages"][0]["events"][0];
    assert_eq!(
        (sent["status"].clone(), sent["attempt"].clone()),
        (json!("sent"), json!(0))
    );
    assert_eq!(sent["attemptNumber"], 1);

    // Retried once, then dead-lettered on its second attempt.
    let dead = Uuid::now_v7();
    api.backends
        .store
        .append_timeline(vec![
            commit_line(&correlation, &message_id, TimelineStatus::RetryScheduled, 0, Some("timed out".into())),
            commit_line(
                &correlation,
                &message_id,
                TimelineStatus::DeadLettered,
                1,
                Some(format!(
                    "retries-exhausted: failed 2 times; last error: repository `payments-api` not found (dead letter {dead})"
                )),
            ),
        ])
        .await
        .unwrap();
    let delivery = read().await;
    assert_eq!(delivery["status"], "failed");
    let message = &delivery["messages"][0];
    assert_eq!(message["attempts"], 2, "{message:#}");
    let numbers: Vec<&Value> = message["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["attemptNumber"])
        .collect();
    assert_eq!(numbers, [&json!(1), &json!(1), &json!(2)]);
    let outcome = &delivery["outcome"];
    assert_eq!(outcome["state"], "failed");
    assert_eq!(outcome["cause"], "dead-letter");
    assert_eq!(outcome["messageType"], "CreateCommit");
    assert_eq!(outcome["messageId"], message_id.as_str());
    assert_eq!(outcome["consumer"], "commit");
    assert_eq!(outcome["attempt"], 2);
    assert_eq!(
        outcome["error"],
        "retries-exhausted: failed 2 times; last error: repository `payments-api` not found"
    );
    let sentence = outcome["sentence"].as_str().unwrap();
    assert!(
        sentence.starts_with(
            "Failed: CreateCommit was dead-lettered by commit on attempt 2: retries-exhausted: failed 2 times"
        ) && sentence.contains(&format!("next: replay dead letter {dead}")),
        "{sentence}"
    );
    assert_eq!(
        outcome["actions"],
        json!([
            {"kind": "replay-dead-letter", "label": format!("Replay dead letter {}...", &dead.to_string()[..8]),
             "target": dead.to_string(), "method": "POST", "path": format!("/v1/dead-letters/{dead}/replay"),
             "command": format!("bosun dead-letters replay {dead}")},
            {"kind": "open-dead-letter", "label": format!("Open dead letter {}...", &dead.to_string()[..8]),
             "target": dead.to_string(), "method": "GET", "path": format!("/v1/dead-letters/{dead}"),
             "command": format!("bosun dead-letters show {dead}")},
        ])
    );

    // Another delivery, handled: completed, how long through how many hops.
    let accepted = api.send_commit(&key, "storefront").await;
    let correlation = accepted["correlationId"].as_str().unwrap().to_owned();
    let message_id = accepted["messageId"].as_str().unwrap();
    api.backends
        .store
        .append_timeline(vec![commit_line(
            &correlation,
            message_id,
            TimelineStatus::Completed,
            0,
            None,
        )])
        .await
        .unwrap();
    let delivery: Value = api
        .get(&key, &format!("/v1/deliveries/{correlation}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(delivery["status"], "completed");
    let outcome = &delivery["outcome"];
    let ms = outcome["durationMs"].as_u64().unwrap();
    assert_eq!(outcome["sentence"], format!("Completed in {ms} ms through 1 hop."));
    assert_eq!(
        (outcome["state"].clone(), outcome["hops"].clone()),
        (json!("completed"), json!(1))
    );
    assert!(
        outcome.get("cause").is_none() && outcome["actions"] == json!([]),
        "{outcome:#}"
    );
}

#[tokio::test]
async fn the_document_describes_the_outcome_and_the_attempt_number() {
    let api = Api::start().await;
    let doc: Value = api
        .client
        .get(format!("{}/openapi.json", api.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let schemas = &doc["components"]["schemas"];
    let delivery = &schemas["Delivery"];
    assert!(
        delivery["required"].as_array().unwrap().contains(&json!("outcome")),
        "{delivery:#}"
    );
    let outcome = &schemas["DeliveryOutcome"];
    for field in ["state", "sentence", "hops", "durationMs", "actions"] {
        assert!(
            outcome["required"].as_array().unwrap().contains(&json!(field)),
            "{field}: {outcome:#}"
        );
    }
    assert_eq!(
        schemas["OutcomeState"]["enum"],
        json!(["failed", "stuck", "in-progress", "completed"])
    );
    let line = &schemas["TimelineEntry"];
    for field in ["attempt", "attemptNumber"] {
        assert!(
            line["required"].as_array().unwrap().contains(&json!(field)),
            "{field}: {line:#}"
        );
    }
    assert!(
        schemas["TimelineStatus"]["enum"]
            .as_array()
            .unwrap()
            .contains(&json!("published")),
        "{:#}",
        schemas["TimelineStatus"]
    );
}
