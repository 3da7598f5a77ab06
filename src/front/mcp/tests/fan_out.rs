//! A fan-out event dead-lettered by one subscriber and completed by another,
//! through a real host: the delivery is `failed` at once, and
//! `wait_for_delivery` and the API's event stream end with it.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bosun_consumers::{Consumer, HandlerError, Inbound, Outcome, RetryPolicy};
use bosun_contracts::samples;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{call, contoso, fixture};
use crate::front::access::Scope;
use crate::host::HostOptions;
use crate::ports::store::TimelineStatus;
use crate::runtime::config::Settings;

/// What a stand-in consumer does with what it receives.
enum Act {
    /// Answers `CreateCommit` with a `BuildCompleted` (three subscribers).
    EmitBuild,
    /// Fails for good: the host dead-letters the message.
    Refuse,
    /// Handles it once `go` is notified.
    SucceedAfter(Arc<Notify>),
}

/// A consumer under a real consumer's name, so the routing table sends it
/// the real consumer's messages.
struct StandIn {
    name: &'static str,
    act: Act,
}

#[async_trait]
impl Consumer for StandIn {
    fn name(&self) -> &'static str {
        self.name
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(0)
    }

    async fn handle(&self, _inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        match &self.act {
            Act::EmitBuild => Ok(Outcome::send(samples::sample("BuildCompleted"))),
            Act::Refuse => Err(HandlerError::permanent("the registry refused the image")),
            Act::SucceedAfter(go) => {
                go.notified().await;
                Ok(Outcome::send([]))
            }
        }
    }
}

fn stand_in(name: &'static str, act: Act) -> Arc<dyn Consumer> {
    Arc::new(StandIn { name, act })
}

/// The `BuildCompleted` message of a delivery.
fn build_completed(delivery: &Value) -> Value {
    delivery["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|message| message["messageType"] == "BuildCompleted")
        .cloned()
        .unwrap_or_else(|| panic!("no BuildCompleted in {delivery}"))
}

#[tokio::test]
async fn one_subscriber_dead_lettering_a_fan_out_event_fails_the_delivery_at_once() {
    let f = fixture().await;
    let publish = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let consumers = vec![
        stand_in("commit", Act::EmitBuild),
        stand_in("container-build", Act::Refuse),
        stand_in("package-publishing", Act::SucceedAfter(publish.clone())),
        // Still working when the delivery fails.
        stand_in("release-orchestration", Act::SucceedAfter(release.clone())),
    ];
    let options = HostOptions::from_settings(&Settings::with_data_dir(f._dir.path()));
    let host = f.backends.host(consumers, options);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let token = shutdown.clone();
        async move { host.run(token).await }
    });

    let (failed, sent) = call(
        &f.tools,
        &contoso(),
        "send_command",
        json!({"type": "CreateCommit", "payload": samples::sample("CreateCommit").expect("a sample").to_payload()}),
    )
    .await;
    assert!(!failed, "{sent}");
    let correlation_id = sent["correlationId"].as_str().expect("correlationId").to_owned();

    // The event stream, followed from the start.
    let key = f.key("contoso", &[Scope::DeliveriesRead]).await;
    let mut stream = f
        .client
        .get(format!("{}/v1/deliveries/{correlation_id}/events", f.url))
        .bearer_auth(&key)
        .send()
        .await
        .expect("the stream starts");
    assert_eq!(stream.status(), 200);

    let (failed, waited) = call(
        &f.tools,
        &contoso(),
        "wait_for_delivery",
        json!({"correlationId": correlation_id, "timeoutSeconds": 120}),
    )
    .await;
    assert!(!failed, "{waited}");
    assert_eq!(waited["status"], "failed", "{waited}");
    assert_eq!(waited["timedOut"], false, "{waited}");
    let build = build_completed(&waited);
    assert_eq!(build["status"], "dead-lettered", "{build}");

    let mut text = String::new();
    while !text.contains("event: end") {
        match tokio::time::timeout(Duration::from_secs(120), stream.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            other => panic!("the stream ended without its end event ({other:?}):\n{text}"),
        }
    }
    let end = text.split("event: end").nth(1).expect("the end event");
    assert!(end.contains(r#""status":"failed""#), "{text}");

    // Another subscriber completes it afterwards: the delivery stays
    // failed, and waits and streams that start now end with it at once.
    publish.notify_one();
    loop {
        let mut changed = f.backends.store.watch_timeline(&correlation_id);
        let timeline = f.backends.store.timeline(&correlation_id).await.expect("the timeline");
        if timeline.iter().any(|line| {
            line.consumer.as_deref() == Some("package-publishing") && line.status == TimelineStatus::Completed
        }) {
            break;
        }
        changed.changed().await;
    }
    let (_, delivery) = call(
        &f.tools,
        &contoso(),
        "get_delivery",
        json!({"correlationId": correlation_id}),
    )
    .await;
    assert_eq!(delivery["status"], "failed", "{delivery}");
    let (_, again) = call(
        &f.tools,
        &contoso(),
        "wait_for_delivery",
        json!({"correlationId": correlation_id, "timeoutSeconds": 20}),
    )
    .await;
    assert_eq!(again["status"], "failed", "{again}");
    assert_eq!(again["timedOut"], false, "{again}");
    let text = f
        .client
        .get(format!("{}/v1/deliveries/{correlation_id}/events", f.url))
        .bearer_auth(&key)
        .send()
        .await
        .expect("the stream starts")
        .text()
        .await
        .expect("the stream ends");
    let end = text.split("event: end").nth(1).expect("the end event");
    assert!(end.contains(r#""status":"failed""#), "{text}");
    let build = build_completed(&delivery);
    assert_eq!(build["status"], "dead-lettered", "{build}");
    let hops: Vec<(String, String)> = build["byConsumer"]
        .as_array()
        .expect("byConsumer")
        .iter()
        .map(|hop| {
            (
                hop["consumer"].as_str().unwrap().to_owned(),
                hop["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for expected in [
        ("container-build", "dead-lettered"),
        ("package-publishing", "completed"),
        ("release-orchestration", "sent"),
    ] {
        assert!(
            hops.contains(&(expected.0.to_owned(), expected.1.to_owned())),
            "{expected:?} in {hops:?}"
        );
    }
    release.notify_one();
    shutdown.cancel();
    running.await.expect("the host stops").expect("the host ran");
}
