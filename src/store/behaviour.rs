//! The store behaviour suite: what every [`Store`] must do.

use std::future::Future;
use std::time::Duration;

use bosun_contracts::Destination;
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use super::{
    AttemptRecord, CommitOutcome, DeadLetterFilter, DeadLetterRecord, DeadLetterStatus, HandledMessage, ReplayRecord,
    SagaWrite, Store, StoreError, TimelineEntry, TimelineStatus,
};
use crate::transport::OutboundMessage;

fn message(id: &str) -> OutboundMessage {
    OutboundMessage {
        destination: Destination::Queue("commit".into()),
        broker_message_id: id.to_owned(),
        message_type: Some("CreateCommit".into()),
        correlation_id: Some("c-1".into()),
        body: b"{}".to_vec(),
        scheduled_at: None,
    }
}

fn line(message_id: &str, status: TimelineStatus) -> TimelineEntry {
    TimelineEntry {
        correlation_id: "c-1".into(),
        message_id: message_id.into(),
        message_type: "CreateCommit".into(),
        consumer: Some("commit".into()),
        status,
        attempt: 0,
        at: OffsetDateTime::now_utc(),
        detail: None,
    }
}

fn handled(message_id: &str, saga: Option<SagaWrite>, outbox: Vec<OutboundMessage>) -> HandledMessage {
    HandledMessage {
        consumer: "commit".into(),
        message_id: message_id.into(),
        message_type: "CreateCommit".into(),
        saga,
        outbox,
        timeline: vec![line(message_id, TimelineStatus::Completed)],
    }
}

fn dead_letter(consumer: &str, message_type: &str, sequence: i64) -> DeadLetterRecord {
    DeadLetterRecord {
        id: Uuid::now_v7(),
        consumer: Some(consumer.into()),
        entity: consumer.into(),
        transport_sequence: Some(sequence),
        broker_message_id: format!("b-{sequence}"),
        message_id: Some(format!("m-{sequence}")),
        message_type: Some(message_type.into()),
        correlation_id: Some("c-1".into()),
        tenant_id: Some("contoso".into()),
        body: b"original bytes".to_vec(),
        reason: "transient-exhausted".into(),
        description: "gave up".into(),
        error_chain: vec!["outer".into(), "inner".into()],
        attempts: vec![AttemptRecord {
            attempt: 0,
            at: OffsetDateTime::now_utc(),
            error_chain: vec!["outer".into()],
        }],
        dead_lettered_at: OffsetDateTime::now_utc(),
        origin: "host".into(),
        status: DeadLetterStatus::Dead,
        replays: vec![],
    }
}

/// Runs every behaviour against fresh stores made by `make`.
pub(crate) async fn run_all<S, F, Fut>(make: F)
where
    S: Store,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    idempotency_record_is_written_once(&make().await).await;
    saga_conflict_writes_nothing(&make().await).await;
    outbox_claims_are_leased(&make().await).await;
    retries_are_recorded_once_per_attempt(&make().await).await;
    dead_letters_round_trip(&make().await).await;
    timeline_keeps_order(&make().await).await;
}

async fn idempotency_record_is_written_once<S: Store>(store: &S) {
    assert!(!store.is_handled("commit", "m-1").await.unwrap());
    let first = store
        .commit_handled(handled("m-1", None, vec![message("out-1")]))
        .await
        .unwrap();
    assert_eq!(first, CommitOutcome::Committed);
    let second = store
        .commit_handled(handled("m-1", None, vec![message("out-1")]))
        .await
        .unwrap();
    assert_eq!(second, CommitOutcome::AlreadyHandled);
    assert!(store.is_handled("commit", "m-1").await.unwrap());
    assert!(!store.is_handled("pull-request", "m-1").await.unwrap());
    assert_eq!(store.outbox_backlog().await.unwrap(), 1);
    assert_eq!(store.timeline("c-1").await.unwrap().len(), 1);
    assert_eq!(store.emitted("c-1").await.unwrap(), vec![b"{}".to_vec()]);
    assert!(store.emitted("other").await.unwrap().is_empty());
}

async fn saga_conflict_writes_nothing<S: Store>(store: &S) {
    let write = |version, state| SagaWrite {
        kind: "release".into(),
        key: "r-1".into(),
        expected_version: version,
        state,
    };
    store
        .commit_handled(handled("m-1", Some(write(0, json!({"step": 1}))), vec![]))
        .await
        .unwrap();
    let stale = store
        .commit_handled(handled(
            "m-2",
            Some(write(0, json!({"step": 2}))),
            vec![message("lost")],
        ))
        .await;
    assert!(
        matches!(
            stale,
            Err(StoreError::SagaConflict {
                expected: 0,
                found: 1,
                ..
            })
        ),
        "{stale:?}"
    );
    assert!(
        !store.is_handled("commit", "m-2").await.unwrap(),
        "idempotency record written despite conflict"
    );
    assert_eq!(
        store.outbox_backlog().await.unwrap(),
        0,
        "outbox written despite conflict"
    );
    store
        .commit_handled(handled("m-2", Some(write(1, json!({"step": 2}))), vec![]))
        .await
        .unwrap();
    let saga = store.load_saga("release", "r-1").await.unwrap().unwrap();
    assert_eq!(saga.version, 2);
    assert_eq!(saga.state, json!({"step": 2}));
    assert_eq!(
        saga.history.iter().map(|h| h.message_id.as_str()).collect::<Vec<_>>(),
        ["m-1", "m-2"]
    );
    assert_eq!(store.list_sagas(Some("release")).await.unwrap().len(), 1);
    assert!(store.list_sagas(Some("gitops")).await.unwrap().is_empty());
}

async fn outbox_claims_are_leased<S: Store>(store: &S) {
    store
        .enqueue_outbox(vec![message("a"), message("b")], vec![])
        .await
        .unwrap();
    let claimed = store.claim_outbox(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        claimed
            .iter()
            .map(|p| p.message.broker_message_id.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert!(
        store
            .claim_outbox(10, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty(),
        "claimed twice"
    );
    store.mark_dispatched(&[claimed[0].id]).await.unwrap();
    assert_eq!(store.outbox_backlog().await.unwrap(), 1);
    let short = store.claim_outbox(10, Duration::from_millis(0)).await.unwrap();
    assert!(short.is_empty());
}

async fn retries_are_recorded_once_per_attempt<S: Store>(store: &S) {
    // Stores keep milliseconds.
    let at = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap() + Duration::from_millis(123);
    let attempt = AttemptRecord {
        attempt: 0,
        at,
        error_chain: vec!["boom".into()],
    };
    for _ in 0..2 {
        store
            .record_retry(
                "commit",
                "m-1",
                "m-1",
                attempt.clone(),
                message("m-1.retry-1"),
                line("m-1", TimelineStatus::RetryScheduled),
            )
            .await
            .unwrap();
    }
    assert_eq!(store.attempts("commit", "m-1").await.unwrap(), vec![attempt]);
    assert_eq!(store.outbox_backlog().await.unwrap(), 1);
}

async fn dead_letters_round_trip<S: Store>(store: &S) {
    let first = dead_letter("commit", "CreateCommit", 1);
    let second = dead_letter("pull-request", "OpenPullRequest", 2);
    store.record_dead_letter(first.clone(), None).await.unwrap();
    store.record_dead_letter(second.clone(), None).await.unwrap();
    // The same transport message is recorded once.
    let mut again = dead_letter("commit", "CreateCommit", 1);
    again.id = Uuid::now_v7();
    store.record_dead_letter(again, None).await.unwrap();

    let all = store.dead_letters(&DeadLetterFilter::default()).await.unwrap();
    assert_eq!(all.len(), 2);
    let commits = store
        .dead_letters(&DeadLetterFilter {
            consumer: Some("commit".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(commits.len(), 1);
    assert_eq!(commits[0].body, b"original bytes");
    assert_eq!(commits[0].error_chain, ["outer", "inner"]);
    let by_type = store
        .dead_letters(&DeadLetterFilter {
            message_type: Some("OpenPullRequest".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(by_type[0].id, second.id);
    let future = store
        .dead_letters(&DeadLetterFilter {
            since: Some(OffsetDateTime::now_utc() + Duration::from_secs(60)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(future.is_empty());

    let found = store.dead_letter(&first.id.to_string()).await.unwrap();
    assert_eq!(found.id, first.id);
    let by_transport = store
        .dead_letter_for(&Destination::Queue("commit".into()), 1)
        .await
        .unwrap();
    assert_eq!(by_transport.map(|r| r.id), Some(first.id));

    let replay = ReplayRecord {
        replay_id: Uuid::now_v7(),
        by: "operator".into(),
        at: OffsetDateTime::now_utc(),
        destination: "commit".into(),
        broker_message_id: "m-1.replay".into(),
    };
    store.record_replay(first.id, replay.clone(), None).await.unwrap();
    let replayed = store.dead_letter(&first.id.to_string()).await.unwrap();
    assert_eq!(replayed.status, DeadLetterStatus::Replayed);
    assert_eq!(replayed.replays, vec![replay]);
    assert_eq!(store.dead_letters(&DeadLetterFilter::default()).await.unwrap().len(), 1);
    assert_eq!(
        store
            .dead_letters(&DeadLetterFilter {
                include_replayed: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .len(),
        2
    );

    store.purge_dead_letter(second.id).await.unwrap();
    assert!(matches!(
        store.dead_letter(&second.id.to_string()).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.purge_dead_letter(second.id).await,
        Err(StoreError::NotFound { .. })
    ));
}

async fn timeline_keeps_order<S: Store>(store: &S) {
    store
        .append_timeline(vec![
            line("m-1", TimelineStatus::Sent),
            line("m-1", TimelineStatus::RetryScheduled),
        ])
        .await
        .unwrap();
    store
        .append_timeline(vec![line("m-1", TimelineStatus::Completed)])
        .await
        .unwrap();
    let statuses: Vec<_> = store
        .timeline("c-1")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.status)
        .collect();
    assert_eq!(
        statuses,
        [
            TimelineStatus::Sent,
            TimelineStatus::RetryScheduled,
            TimelineStatus::Completed
        ]
    );
    assert!(store.timeline("other").await.unwrap().is_empty());
}
