//! The store behaviour suite: what every [`Store`] (and [`AccessStore`],
//! [`PolicyStore`] and [`AuditStore`]) must do; the release audit's
//! behaviours are in `audit.rs`.
//!
//! Test code only (this module is compiled under `cfg(test)`), and over
//! 800 lines on purpose: it is the definition of a correct store, read top to
//! bottom by whoever writes a backend, so its length is the number of
//! behaviours, not a mix of concerns.

use std::future::Future;
use std::time::Duration;

use bosun_contracts::Destination;
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use super::audit;
use crate::ports::store::{
    AcceptedCommand, AccessStore, ApiKeyRecord, AttemptRecord, AuditStore, CommitOutcome, ControlStore,
    DeadLetterFilter, DeadLetterRecord, DeadLetterStatus, DeliveryRecord, FinishedSaga, HandledMessage,
    IdempotencyClaim, OutboxPurpose, PolicyStore, Pruned, ReleasePolicyRecord, ReplayRecord, RetentionPolicy,
    RetryWrite, SagaWrite, Store, StoreError, TimelineEntry, TimelineStatus,
};
use crate::ports::store::{
    ControlOutcome, ReplayItemOutcome, ReplayJobAction, ReplayJobControl, ReplayJobItem, ReplayJobRecord,
    ReplayJobStatus,
};
use crate::ports::transport::OutboundMessage;

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

/// A command accepted at the front door: delivery `c-1` of contoso.
fn accepted(message: OutboundMessage) -> AcceptedCommand {
    AcceptedCommand {
        delivery: DeliveryRecord {
            correlation_id: "c-1".into(),
            tenant_id: "contoso".into(),
            started_by: "cli:test".into(),
            message_type: "CreateCommit".into(),
            message_id: message.broker_message_id.clone(),
            started_at: OffsetDateTime::now_utc(),
            traceparent: None,
            tracestate: None,
        },
        timeline: TimelineEntry {
            consumer: None,
            ..line(&message.broker_message_id, TimelineStatus::Sent)
        },
        message,
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

/// A fixed instant with whole milliseconds (what stores keep), `offset_ms` after it.
fn at(offset_ms: u64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap() + Duration::from_millis(123 + offset_ms)
}

/// Runs every behaviour against fresh stores made by `make`.
pub(crate) async fn run_all<S, F, Fut>(make: F)
where
    S: Store + AccessStore + PolicyStore + AuditStore + ControlStore + Clone + 'static,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    idempotency_record_is_written_once(&make().await).await;
    saga_conflict_writes_nothing(&make().await).await;
    saga_tenant_is_kept_from_the_first_save(&make().await).await;
    outbox_claims_are_leased(&make().await).await;
    outbox_entries_keep_their_purpose(&make().await).await;
    a_command_is_accepted_in_one_write(&make().await).await;
    retries_are_recorded_once_per_attempt(&make().await).await;
    dead_letters_round_trip(&make().await).await;
    dead_letter_lookups_stay_in_their_tenant(&make().await).await;
    dead_letters_filter_by_tenant_reason_and_limit(&make().await).await;
    timeline_keeps_order(&make().await).await;
    deliveries_keep_their_first_record(&make().await).await;
    deliveries_are_found_by_a_prefix_within_their_tenant(&make().await).await;
    api_keys_round_trip_and_revoke_once(&make().await).await;
    api_keys_rotate_and_record_their_use(&make().await).await;
    idempotency_keys_claim_complete_and_release(&make().await).await;
    stale_idempotency_claims_are_taken_over(&make().await).await;
    concurrent_idempotency_claims_have_one_winner(make().await).await;
    retention_prunes_what_is_past_it_and_keeps_what_is_needed(&make().await).await;
    retention_prunes_finished_sagas_only(&make().await).await;
    retention_prunes_in_bounded_batches(&make().await).await;
    retention_bounds_idempotency_keys_and_the_history_of_sagas_that_never_finish(&make().await).await;
    retention_bounds_a_sagas_history_by_count_and_keeps_its_state(&make().await).await;
    super::controls::consumer_controls_are_logged_in_order_and_the_latest_counts(&make().await).await;
    super::controls::pausing_twice_records_once_and_needs_a_reason(&make().await).await;
    super::controls::group_acknowledgements_stay_in_their_scope(&make().await).await;
    replay_jobs_are_held_by_one_runner_at_a_time(&make().await).await;
    replay_jobs_pause_resume_cancel_and_finish(&make().await).await;
    ended_replay_jobs_go_with_the_timelines_retention(&make().await).await;
    a_first_release_policy_is_version_one_and_a_stale_put_is_refused(&make().await).await;
    release_policy_history_is_oldest_first_and_outlives_retention(&make().await).await;
    release_policies_stay_in_their_tenant(&make().await).await;
    concurrent_release_policy_puts_have_one_winner(make().await).await;
    audit::audit_entries_are_appended_once_and_numbered_in_order(&make().await).await;
    audit::the_audit_log_pages_by_sequence_since_a_time_and_to_a_limit(&make().await).await;
    audit::audit_logs_stay_in_their_tenant(&make().await).await;
    audit::a_releases_entries_are_read_on_their_own(&make().await).await;
    audit::the_audit_log_outlives_retention(&make().await).await;
    audit::concurrent_audit_appends_are_numbered_once_each(make().await).await;
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
        tenant_id: Some("contoso".into()),
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
    // The hot path's read: the same state, version and tenant, no history.
    let state = store.load_saga_state("release", "r-1").await.unwrap().unwrap();
    assert_eq!(
        (state.version, &state.state, &state.tenant_id),
        (saga.version, &saga.state, &saga.tenant_id)
    );
    assert_eq!(store.load_saga_state("release", "r-404").await.unwrap(), None);
    // The handled check and the saga read in one: a new message gets the
    // saga, a handled one is reported handled, a saga that is not there is None.
    assert_eq!(
        store
            .handled_and_saga("commit", "m-3", Some(("release", "r-1")))
            .await
            .unwrap(),
        (false, Some(state.clone()))
    );
    assert!(
        store
            .handled_and_saga("commit", "m-2", Some(("release", "r-1")))
            .await
            .unwrap()
            .0
    );
    assert_eq!(
        store
            .handled_and_saga("commit", "m-3", Some(("release", "r-404")))
            .await
            .unwrap(),
        (false, None)
    );
    assert_eq!(
        store.handled_and_saga("commit", "m-3", None).await.unwrap(),
        (false, None)
    );
    assert_eq!(
        saga.history.iter().map(|h| h.message_id.as_str()).collect::<Vec<_>>(),
        ["m-1", "m-2"]
    );
    assert_eq!(store.list_sagas(Some("release")).await.unwrap().len(), 1);
    assert!(store.list_sagas(Some("gitops")).await.unwrap().is_empty());
}

async fn saga_tenant_is_kept_from_the_first_save<S: Store>(store: &S) {
    let write = |key: &str, version, tenant: Option<&str>| SagaWrite {
        kind: "release".into(),
        key: key.into(),
        expected_version: version,
        state: json!({"version": version}),
        tenant_id: tenant.map(str::to_owned),
    };
    store
        .commit_handled(handled("m-1", Some(write("r-1", 0, Some("contoso"))), vec![]))
        .await
        .unwrap();
    store
        .commit_handled(handled("m-2", Some(write("r-1", 1, Some("fabrikam"))), vec![]))
        .await
        .unwrap();
    let saga = store.load_saga("release", "r-1").await.unwrap().unwrap();
    assert_eq!(saga.version, 2);
    assert_eq!(
        saga.tenant_id.as_deref(),
        Some("contoso"),
        "a later save changed the tenant"
    );

    // A saga without a tenant (saved before tenants were kept) takes the next one's.
    store
        .commit_handled(handled("m-3", Some(write("r-2", 0, None)), vec![]))
        .await
        .unwrap();
    assert_eq!(
        store.load_saga("release", "r-2").await.unwrap().unwrap().tenant_id,
        None
    );
    store
        .commit_handled(handled("m-4", Some(write("r-2", 1, Some("fabrikam"))), vec![]))
        .await
        .unwrap();
    store
        .commit_handled(handled("m-5", Some(write("r-2", 2, Some("contoso"))), vec![]))
        .await
        .unwrap();
    let sagas = store.list_sagas(Some("release")).await.unwrap();
    let tenant_of = |key: &str| {
        sagas
            .iter()
            .find(|saga| saga.key == key)
            .and_then(|saga| saga.tenant_id.clone())
    };
    assert_eq!(tenant_of("r-1").as_deref(), Some("contoso"));
    assert_eq!(tenant_of("r-2").as_deref(), Some("fabrikam"));
}

async fn outbox_claims_are_leased<S: Store>(store: &S) {
    store
        .commit_handled(handled("m-1", None, vec![message("a"), message("b")]))
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

/// A command accepted at the front door: its delivery, its `sent` line and
/// its outbox entry, leased to the process that accepted it; a delivery
/// joined again keeps its first record.
async fn a_command_is_accepted_in_one_write<S: Store>(store: &S) {
    let id = store
        .accept_command(accepted(message("cmd-1")), Duration::from_secs(30))
        .await
        .unwrap();
    let delivery = store.delivery_record("c-1").await.unwrap().unwrap();
    assert_eq!(
        (delivery.tenant_id.as_str(), delivery.message_id.as_str()),
        ("contoso", "cmd-1")
    );
    let lines = store.timeline("c-1").await.unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(
        (lines[0].status, lines[0].consumer.as_deref()),
        (TimelineStatus::Sent, None)
    );
    assert_eq!(store.outbox_backlog().await.unwrap(), 1);
    assert!(
        store
            .claim_outbox(10, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty(),
        "the entry is leased to the process that accepted it"
    );
    store.mark_dispatched(&[id]).await.unwrap();
    assert_eq!(store.outbox_backlog().await.unwrap(), 0);
    // A second command joins the delivery; the first record stays, and an
    // entry whose lease is over goes to any dispatcher.
    let mut second = accepted(message("cmd-2"));
    second.delivery.started_by = "cli:other".into();
    let second_id = store.accept_command(second, Duration::ZERO).await.unwrap();
    assert_ne!(second_id, id);
    assert_eq!(
        store.delivery_record("c-1").await.unwrap().unwrap().started_by,
        "cli:test"
    );
    let claimed = store.claim_outbox(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        claimed
            .iter()
            .map(|entry| (entry.id, entry.purpose))
            .collect::<Vec<_>>(),
        [(second_id, OutboxPurpose::Sent)]
    );
    assert_eq!(store.timeline("c-1").await.unwrap().len(), 2);
}

/// What an outbox entry is for is stored with it, whatever its broker
/// message id looks like.
async fn outbox_entries_keep_their_purpose<S: Store>(store: &S) {
    let with_body = |id: &str| OutboundMessage {
        body: id.as_bytes().to_vec(),
        ..message(id)
    };
    store
        .accept_command(accepted(with_body("sent-1")), Duration::ZERO)
        .await
        .unwrap();
    store
        .commit_handled(handled("m-1", None, vec![with_body("emitted-1")]))
        .await
        .unwrap();
    let attempt = AttemptRecord {
        attempt: 0,
        at: at(0),
        error_chain: vec!["boom".into()],
    };
    // A retry whose broker message id does not follow the `.retry-` form.
    store
        .record_retry(RetryWrite {
            consumer: "commit".into(),
            message_id: "m-2".into(),
            received_broker_message_id: "m-2".into(),
            attempt,
            retry: with_body("again-1"),
            timeline: line("m-2", TimelineStatus::RetryScheduled),
        })
        .await
        .unwrap();
    let claimed = store.claim_outbox(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        claimed
            .iter()
            .map(|p| (p.message.broker_message_id.as_str(), p.purpose))
            .collect::<Vec<_>>(),
        [
            ("sent-1", OutboxPurpose::Sent),
            ("emitted-1", OutboxPurpose::Emitted),
            ("again-1", OutboxPurpose::Retry)
        ]
    );
    assert_eq!(
        store.emitted("c-1").await.unwrap(),
        vec![b"sent-1".to_vec(), b"emitted-1".to_vec()],
        "retries are not among the messages sent for a delivery"
    );
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
            .record_retry(RetryWrite {
                consumer: "commit".into(),
                message_id: "m-1".into(),
                received_broker_message_id: "m-1".into(),
                attempt: attempt.clone(),
                retry: message("m-1.retry-1"),
                timeline: line("m-1", TimelineStatus::RetryScheduled),
            })
            .await
            .unwrap();
    }
    assert_eq!(store.attempts("commit", "m-1").await.unwrap(), vec![attempt]);
    assert_eq!(store.outbox_backlog().await.unwrap(), 1);
}

/// Ids are matched literally and within the caller's tenant; "not found"
/// reads the same whether or not another tenant has a match.
async fn dead_letter_lookups_stay_in_their_tenant<S: Store>(store: &S) {
    let shared = "0195f3a0-0000-7000-8000-0000000000";
    let with_id = |suffix: &str, tenant: &str, sequence: i64| DeadLetterRecord {
        id: Uuid::parse_str(&format!("{shared}{suffix}")).unwrap(),
        tenant_id: Some(tenant.into()),
        ..dead_letter("commit", "CreateCommit", sequence)
    };
    let contoso = with_id("01", "contoso", 1);
    let fabrikam = with_id("02", "fabrikam", 2);
    let contoso_too = with_id("03", "contoso", 3);
    for record in [&contoso, &fabrikam] {
        store.record_dead_letter(record.clone(), None).await.unwrap();
    }
    let text = |result: Result<DeadLetterRecord, StoreError>| match result {
        Ok(record) => format!("found {}", record.id),
        Err(err) => err.to_string(),
    };
    // A prefix both tenants' records share is unique within each tenant.
    assert_eq!(store.dead_letter(shared, Some("contoso")).await.unwrap().id, contoso.id);
    assert_eq!(
        store.dead_letter(shared, Some("fabrikam")).await.unwrap().id,
        fabrikam.id
    );
    // Another tenant's record reads exactly as no record.
    let foreign = text(store.dead_letter(&fabrikam.id.to_string(), Some("contoso")).await);
    let absent = text(store.dead_letter(&format!("{shared}ff"), Some("contoso")).await);
    assert_eq!(
        foreign.replace(&fabrikam.id.to_string(), "ID"),
        absent.replace(&format!("{shared}ff"), "ID")
    );
    assert!(foreign.starts_with("no dead letter"), "{foreign}");
    // No wildcards.
    for pattern in ["%", "____", "0195%", "0195f3a0-0000-7000-8000-00000000000_"] {
        assert!(
            matches!(store.dead_letter(pattern, None).await, Err(StoreError::NotFound { .. })),
            "{pattern}"
        );
    }
    // Ambiguous within the tenant: listed; the platform (no tenant) sees all.
    store.record_dead_letter(contoso_too.clone(), None).await.unwrap();
    let Err(StoreError::Ambiguous { candidates, .. }) = store.dead_letter(shared, Some("contoso")).await else {
        panic!("a prefix of two contoso records is ambiguous");
    };
    assert_eq!(candidates, [contoso.id.to_string(), contoso_too.id.to_string()]);
    let Err(StoreError::Ambiguous { candidates, .. }) = store.dead_letter(shared, None).await else {
        panic!("ambiguous for the platform");
    };
    assert_eq!(candidates.len(), 3);
    // The full id always wins, in any case.
    let upper = contoso.id.to_string().to_uppercase();
    assert_eq!(store.dead_letter(&upper, Some("contoso")).await.unwrap().id, contoso.id);
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

    let found = store.dead_letter(&first.id.to_string(), None).await.unwrap();
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
        // An edited replay's audit is kept whole.
        edit: Some(crate::ports::store::ReplayEdit::between(
            serde_json::json!({"branch": "main", "files": [{"path": "a"}]}),
            serde_json::json!({"branch": "hotfix", "files": [{"path": "b"}]}),
        )),
    };
    store.record_replay(first.id, replay.clone(), None).await.unwrap();
    let replayed = store.dead_letter(&first.id.to_string(), None).await.unwrap();
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
        store.dead_letter(&second.id.to_string(), None).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.purge_dead_letter(second.id).await,
        Err(StoreError::NotFound { .. })
    ));
}

async fn dead_letters_filter_by_tenant_reason_and_limit<S: Store>(store: &S) {
    let make = |sequence: i64, tenant: &str, reason: &str| {
        let mut record = dead_letter("commit", "CreateCommit", sequence);
        record.tenant_id = Some(tenant.into());
        record.reason = reason.into();
        record.dead_lettered_at = at(u64::try_from(sequence).unwrap() * 1000);
        record
    };
    let oldest = make(1, "contoso", "transient-exhausted");
    let middle = make(2, "fabrikam", "invalid-field");
    let newest = make(3, "contoso", "invalid-field");
    for record in [&oldest, &middle, &newest] {
        store.record_dead_letter(record.clone(), None).await.unwrap();
    }
    let ids = |filter: DeadLetterFilter| async move {
        store
            .dead_letters(&filter)
            .await
            .unwrap()
            .into_iter()
            .map(|record| record.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(DeadLetterFilter::default()).await,
        [newest.id, middle.id, oldest.id]
    );
    assert_eq!(
        ids(DeadLetterFilter {
            tenant_id: Some("contoso".into()),
            ..Default::default()
        })
        .await,
        [newest.id, oldest.id]
    );
    assert_eq!(
        ids(DeadLetterFilter {
            reason: Some("invalid-field".into()),
            ..Default::default()
        })
        .await,
        [newest.id, middle.id]
    );
    assert_eq!(
        ids(DeadLetterFilter {
            tenant_id: Some("contoso".into()),
            reason: Some("invalid-field".into()),
            ..Default::default()
        })
        .await,
        [newest.id]
    );
    assert_eq!(
        ids(DeadLetterFilter {
            limit: Some(2),
            ..Default::default()
        })
        .await,
        [newest.id, middle.id]
    );
    assert_eq!(
        ids(DeadLetterFilter {
            tenant_id: Some("fabrikam".into()),
            limit: Some(1),
            ..Default::default()
        })
        .await,
        [middle.id]
    );
    assert!(
        ids(DeadLetterFilter {
            limit: Some(0),
            ..Default::default()
        })
        .await
        .is_empty()
    );
    assert!(
        ids(DeadLetterFilter {
            tenant_id: Some("nobody".into()),
            ..Default::default()
        })
        .await
        .is_empty()
    );
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

fn delivery(correlation_id: &str, tenant: &str, offset_ms: u64) -> DeliveryRecord {
    DeliveryRecord {
        correlation_id: correlation_id.into(),
        tenant_id: tenant.into(),
        started_by: "api:key-1".into(),
        message_type: "CreateCommit".into(),
        message_id: format!("m-{correlation_id}"),
        started_at: at(offset_ms),
        traceparent: None,
        tracestate: None,
    }
}

async fn deliveries_keep_their_first_record<S: Store>(store: &S) {
    let mut first = delivery("d-1", "contoso", 0);
    first.traceparent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
    first.tracestate = Some("congo=t61rcWkgMzE".into());
    store.record_delivery(first.clone()).await.unwrap();
    store.record_delivery(delivery("d-2", "fabrikam", 1000)).await.unwrap();
    store.record_delivery(delivery("d-3", "contoso", 2000)).await.unwrap();
    // A later command of the same correlation id changes nothing.
    let mut later = delivery("d-1", "fabrikam", 5000);
    later.started_by = "cli:someone".into();
    later.message_type = "OpenPullRequest".into();
    later.traceparent = Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
    later.tracestate = None;
    store.record_delivery(later).await.unwrap();

    assert_eq!(store.delivery_record("d-1").await.unwrap(), Some(first));
    assert_eq!(store.delivery_record("d-404").await.unwrap(), None);
    let correlation_ids = |tenant: Option<&'static str>, limit| async move {
        store
            .list_deliveries(tenant, limit)
            .await
            .unwrap()
            .into_iter()
            .map(|record| record.correlation_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(correlation_ids(None, 50).await, ["d-3", "d-2", "d-1"], "newest first");
    assert_eq!(correlation_ids(Some("contoso"), 50).await, ["d-3", "d-1"]);
    assert_eq!(correlation_ids(Some("fabrikam"), 50).await, ["d-2"]);
    assert!(correlation_ids(Some("nobody"), 50).await.is_empty());
    assert_eq!(correlation_ids(None, 2).await, ["d-3", "d-2"]);
    assert_eq!(correlation_ids(Some("contoso"), 1).await, ["d-3"]);
    assert!(correlation_ids(None, 0).await.is_empty());
}

async fn deliveries_are_found_by_a_prefix_within_their_tenant<S: Store>(store: &S) {
    let shared = "0195f3a0-0000-7000-8000-0000000000";
    for (suffix, tenant, offset_ms) in [("03", "contoso", 0), ("02", "fabrikam", 1000), ("01", "contoso", 2000)] {
        store
            .record_delivery(delivery(&format!("{shared}{suffix}"), tenant, offset_ms))
            .await
            .unwrap();
    }
    store
        .record_delivery(delivery("0195f3a1-other", "contoso", 3000))
        .await
        .unwrap();
    let found = |prefix: &'static str, tenant: Option<&'static str>, limit| async move {
        store
            .deliveries_by_prefix(prefix, tenant, limit)
            .await
            .unwrap()
            .into_iter()
            .map(|record| record.correlation_id)
            .collect::<Vec<_>>()
    };
    let id = |suffix: &str| format!("{shared}{suffix}");
    // In correlation id order, whole records.
    assert_eq!(found(shared, None, 11).await, [id("01"), id("02"), id("03")]);
    assert_eq!(
        store.deliveries_by_prefix(shared, None, 11).await.unwrap()[1],
        delivery(&id("02"), "fabrikam", 1000)
    );
    // Within the tenant when one is given: another tenant's neither match
    // nor count against the limit.
    assert_eq!(found(shared, Some("contoso"), 11).await, [id("01"), id("03")]);
    assert_eq!(found(shared, Some("fabrikam"), 11).await, [id("02")]);
    assert!(found(shared, Some("nobody"), 11).await.is_empty());
    assert_eq!(found("0195f3a", Some("contoso"), 2).await, [id("01"), id("03")]);
    assert_eq!(found("0195f3a", None, 11).await.len(), 4);
    // A whole id is its own prefix.
    assert_eq!(found("0195f3a1-other", None, 11).await, ["0195f3a1-other"]);
    // No wildcards, and case as stored.
    for pattern in ["%", "_195", "0195%", "0195f3a0-0000-7000-8000-00000000000_", "0195F3A0"] {
        assert!(found(pattern, None, 11).await.is_empty(), "{pattern}");
    }
    assert!(found("0196", None, 11).await.is_empty());
}

fn api_key(id: &str, tenant: &str, offset_ms: u64) -> ApiKeyRecord {
    ApiKeyRecord {
        id: id.into(),
        tenant_id: tenant.into(),
        scopes: vec!["commands:send".into(), "deliveries:read".into()],
        secret_hash: format!("{id:0>64}"),
        description: Some(format!("key {id}")),
        created_by: "cli:operator".into(),
        created_at: at(offset_ms),
        revoked_at: None,
        expires_at: Some(at(offset_ms + 90_000)),
        last_used_at: None,
        rotated_from: None,
        rotated_to: None,
        sponsor: None,
    }
}

async fn api_keys_round_trip_and_revoke_once<S: AccessStore>(store: &S) {
    let first = api_key("k1", "contoso", 0);
    let mut platform = api_key("k2", "*", 1000);
    platform.scopes = vec!["admin".into()];
    platform.description = None;
    // Inserted out of order: listed oldest first anyway.
    store.insert_api_key(platform.clone()).await.unwrap();
    store.insert_api_key(first.clone()).await.unwrap();
    assert!(
        store.insert_api_key(api_key("k1", "fabrikam", 2000)).await.is_err(),
        "a second key with the same id"
    );

    assert_eq!(store.api_key("k1").await.unwrap(), Some(first.clone()));
    assert_eq!(store.api_key("k2").await.unwrap(), Some(platform.clone()));
    assert_eq!(store.api_key("nope").await.unwrap(), None);
    assert_eq!(store.list_api_keys().await.unwrap(), [first.clone(), platform.clone()]);

    let revoked = store.revoke_api_key("k1", at(3000)).await.unwrap();
    assert_eq!(revoked.revoked_at, Some(at(3000)));
    assert_eq!(revoked.id, "k1");
    let again = store.revoke_api_key("k1", at(9000)).await.unwrap();
    assert_eq!(again.revoked_at, Some(at(3000)), "revoking twice keeps the first time");
    assert_eq!(
        store.api_key("k1").await.unwrap().and_then(|key| key.revoked_at),
        Some(at(3000))
    );
    assert_eq!(
        store.api_key("k2").await.unwrap().and_then(|key| key.revoked_at),
        None,
        "only that key"
    );
    assert!(matches!(
        store.revoke_api_key("nope", at(3000)).await,
        Err(StoreError::NotFound { .. })
    ));
}

async fn api_keys_rotate_and_record_their_use<S: AccessStore>(store: &S) {
    let mut before_expiry = api_key("k0", "contoso", 0);
    before_expiry.expires_at = None;
    store.insert_api_key(before_expiry).await.unwrap();
    store.insert_api_key(api_key("k1", "contoso", 0)).await.unwrap();

    // The successor is stored and linked; the old key ends at the grace
    // period's end, or at its own expiry when that is sooner.
    let mut successor = api_key("k2", "contoso", 5000);
    successor.rotated_from = Some("k1".into());
    let old = store.rotate_api_key("k1", successor.clone(), at(20_000)).await.unwrap();
    assert_eq!(old.rotated_to.as_deref(), Some("k2"));
    assert_eq!(old.expires_at, Some(at(20_000)));
    assert_eq!(store.api_key("k2").await.unwrap(), Some(successor));
    let mut again = api_key("k3", "contoso", 6000);
    again.rotated_from = Some("k1".into());
    let old = store.rotate_api_key("k1", again, at(500_000)).await.unwrap();
    assert_eq!(
        old.expires_at,
        Some(at(20_000)),
        "a grace period never lengthens a key's life"
    );
    // A key made before keys expired gets the grace period's end.
    let mut of_old = api_key("k4", "contoso", 7000);
    of_old.rotated_from = Some("k0".into());
    let old = store.rotate_api_key("k0", of_old, at(30_000)).await.unwrap();
    assert_eq!(old.expires_at, Some(at(30_000)));
    let mut orphan = api_key("k5", "contoso", 8000);
    orphan.rotated_from = Some("nope".into());
    assert!(matches!(
        store.rotate_api_key("nope", orphan, at(30_000)).await,
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(
        store.api_key("k5").await.unwrap(),
        None,
        "nothing stored for a key that is not there"
    );

    store.touch_api_key("k2", at(40_000)).await.unwrap();
    store.touch_api_key("k2", at(35_000)).await.unwrap();
    assert_eq!(
        store.api_key("k2").await.unwrap().and_then(|key| key.last_used_at),
        Some(at(40_000)),
        "last used never goes back"
    );
    store.touch_api_key("nope", at(40_000)).await.unwrap();
}

const LONG: Duration = Duration::from_secs(600);

async fn idempotency_keys_claim_complete_and_release<S: AccessStore>(store: &S) {
    assert_eq!(
        store.claim_idempotency("contoso", "k", "h1", LONG).await.unwrap(),
        IdempotencyClaim::Claimed
    );
    assert_eq!(
        store.claim_idempotency("contoso", "k", "h2", LONG).await.unwrap(),
        IdempotencyClaim::InProgress {
            request_hash: "h1".into()
        }
    );
    // Keys are per tenant.
    assert_eq!(
        store.claim_idempotency("fabrikam", "k", "h2", LONG).await.unwrap(),
        IdempotencyClaim::Claimed
    );

    let response = json!({"messageId": "m-1", "links": {"delivery": "/v1/deliveries/c-1"}});
    store
        .complete_idempotency("contoso", "k", 202, &response)
        .await
        .unwrap();
    let completed = IdempotencyClaim::Completed {
        request_hash: "h1".into(),
        status: 202,
        response: response.clone(),
    };
    assert_eq!(
        store.claim_idempotency("contoso", "k", "h2", LONG).await.unwrap(),
        completed
    );
    // A completed key is neither released nor answered twice.
    store.release_idempotency("contoso", "k").await.unwrap();
    store
        .complete_idempotency("contoso", "k", 500, &json!({"other": true}))
        .await
        .unwrap();
    assert_eq!(
        store.claim_idempotency("contoso", "k", "h1", LONG).await.unwrap(),
        completed
    );
    assert!(matches!(
        store
            .complete_idempotency("contoso", "never-claimed", 202, &response)
            .await,
        Err(StoreError::NotFound { .. })
    ));

    // A failed request releases its key: a retry can run.
    assert_eq!(
        store.claim_idempotency("contoso", "r", "h1", LONG).await.unwrap(),
        IdempotencyClaim::Claimed
    );
    store.release_idempotency("contoso", "r").await.unwrap();
    assert_eq!(
        store.claim_idempotency("contoso", "r", "h3", LONG).await.unwrap(),
        IdempotencyClaim::Claimed
    );
    assert_eq!(
        store.claim_idempotency("contoso", "r", "h1", LONG).await.unwrap(),
        IdempotencyClaim::InProgress {
            request_hash: "h3".into()
        }
    );
    // Releasing an unknown key is harmless.
    store.release_idempotency("contoso", "unknown").await.unwrap();
}

async fn stale_idempotency_claims_are_taken_over<S: AccessStore>(store: &S) {
    assert_eq!(
        store.claim_idempotency("contoso", "s", "h1", LONG).await.unwrap(),
        IdempotencyClaim::Claimed
    );
    // Its process died long ago, as far as a zero staleness is concerned.
    assert_eq!(
        store
            .claim_idempotency("contoso", "s", "h2", Duration::ZERO)
            .await
            .unwrap(),
        IdempotencyClaim::Claimed
    );
    assert_eq!(
        store.claim_idempotency("contoso", "s", "h3", LONG).await.unwrap(),
        IdempotencyClaim::InProgress {
            request_hash: "h2".into()
        },
        "the taker's claim is the current one"
    );
    store
        .complete_idempotency("contoso", "s", 202, &json!({"taker": "h2"}))
        .await
        .unwrap();
    // A completed key is never stale.
    assert_eq!(
        store
            .claim_idempotency("contoso", "s", "h4", Duration::ZERO)
            .await
            .unwrap(),
        IdempotencyClaim::Completed {
            request_hash: "h2".into(),
            status: 202,
            response: json!({"taker": "h2"}),
        }
    );
}

/// Claims `key` from `claimers` tasks at once; returns the claims.
async fn claim_concurrently<S: AccessStore + Clone + 'static>(
    store: &S,
    key: &str,
    claimers: usize,
    stale_after: Duration,
) -> Vec<(String, IdempotencyClaim)> {
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(claimers));
    let mut tasks = tokio::task::JoinSet::new();
    for claimer in 0..claimers {
        let (store, start, key) = (store.clone(), std::sync::Arc::clone(&start), key.to_owned());
        tasks.spawn(async move {
            let hash = format!("h-{claimer}");
            start.wait().await;
            let claim = store.claim_idempotency("contoso", &key, &hash, stale_after).await;
            (hash, claim.unwrap())
        });
    }
    tasks.join_all().await
}

/// Exactly one claim won, and every other saw the winner's request in progress.
fn assert_one_winner(claims: &[(String, IdempotencyClaim)]) {
    let winners: Vec<&String> = claims
        .iter()
        .filter(|(_, claim)| *claim == IdempotencyClaim::Claimed)
        .map(|(hash, _)| hash)
        .collect();
    assert_eq!(winners.len(), 1, "{claims:?}");
    for (hash, claim) in claims {
        if hash != winners[0] {
            assert_eq!(
                *claim,
                IdempotencyClaim::InProgress {
                    request_hash: winners[0].clone()
                },
                "{claims:?}"
            );
        }
    }
}

async fn concurrent_idempotency_claims_have_one_winner<S: AccessStore + Clone + 'static>(store: S) {
    assert_one_winner(&claim_concurrently(&store, "fresh", 8, LONG).await);

    // A stale claim, taken over by several at once: one taker wins. The
    // staleness leaves a second of margin on both sides: the old claim is
    // well past it, and the new one well within it while the others look.
    let stale_after = Duration::from_secs(2);
    assert_eq!(
        store.claim_idempotency("contoso", "stale", "dead", LONG).await.unwrap(),
        IdempotencyClaim::Claimed
    );
    tokio::time::sleep(stale_after + Duration::from_millis(1000)).await;
    assert_one_winner(&claim_concurrently(&store, "stale", 8, stale_after).await);
}

// -- retention ---------------------------------------------------------------

const DAY: Duration = Duration::from_secs(24 * 3600);

/// Handled 14 days, sent outbox 7, timeline 30, finished sagas 30; a release
/// is finished when `phase` is `completed` or `rejected`.
fn retention(batch: usize) -> RetentionPolicy {
    RetentionPolicy {
        handled: Some(DAY * 14),
        outbox_sent: Some(DAY * 7),
        timeline: Some(DAY * 30),
        finished_sagas: Some(DAY * 30),
        saga_history_entries: Some(1000),
        finished: vec![FinishedSaga {
            kind: "release".into(),
            field: "phase".into(),
            values: vec!["completed".into(), "rejected".into()],
        }],
        batch,
    }
}

fn line_of(correlation_id: &str, message_id: &str, at: OffsetDateTime) -> TimelineEntry {
    TimelineEntry {
        correlation_id: correlation_id.into(),
        at,
        ..line(message_id, TimelineStatus::Completed)
    }
}

async fn retention_prunes_what_is_past_it_and_keeps_what_is_needed<S: Store>(store: &S) {
    // Rows written now are pruned by a prune "in the future" (prune takes
    // its `now`); rows with their own time are written in the past.
    let now = OffsetDateTime::now_utc();
    store
        .commit_handled(HandledMessage {
            timeline: vec![],
            ..handled("m-1", None, vec![message("emitted-1"), message("emitted-2")])
        })
        .await
        .unwrap();
    let claimed = store.claim_outbox(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(claimed.len(), 2);
    store.mark_dispatched(&[claimed[0].id]).await.unwrap();
    let old_attempt = AttemptRecord {
        attempt: 0,
        at: now - DAY * 20,
        error_chain: vec!["boom".into()],
    };
    store
        .record_retry(RetryWrite {
            consumer: "commit".into(),
            message_id: "m-2".into(),
            received_broker_message_id: "m-2".into(),
            attempt: old_attempt,
            retry: message("again-1"),
            timeline: line("m-2", TimelineStatus::RetryScheduled),
        })
        .await
        .unwrap();
    // An old delivery, a recent one, and an old one with a dead letter.
    for (correlation_id, started_at) in [
        ("c-old", now - DAY * 40),
        ("c-new", now - DAY),
        ("c-dead", now - DAY * 40),
    ] {
        store
            .record_delivery(DeliveryRecord {
                correlation_id: correlation_id.into(),
                tenant_id: "contoso".into(),
                started_by: "cli:test".into(),
                message_type: "CreateCommit".into(),
                message_id: format!("{correlation_id}-1"),
                started_at,
                traceparent: None,
                tracestate: None,
            })
            .await
            .unwrap();
        store
            .append_timeline(vec![line_of(
                correlation_id,
                &format!("{correlation_id}-1"),
                started_at,
            )])
            .await
            .unwrap();
    }
    let dead = DeadLetterRecord {
        correlation_id: Some("c-dead".into()),
        dead_lettered_at: now - DAY * 400,
        ..dead_letter("commit", "CreateCommit", 7)
    };
    store.record_dead_letter(dead.clone(), None).await.unwrap();

    // Within every retention: nothing goes but what is old in its own right.
    let pruned = store.prune(&retention(100), now + DAY * 6).await.unwrap();
    assert_eq!(
        pruned,
        Pruned {
            attempts: 1,
            timeline: 1,
            deliveries: 1,
            ..Pruned::default()
        },
        "only the 26-day-old attempt, and the 40-day-old delivery without a dead letter (and its line)"
    );
    assert!(store.delivery_record("c-old").await.unwrap().is_none());
    assert!(store.timeline("c-old").await.unwrap().is_empty());
    assert_eq!(store.timeline("c-new").await.unwrap().len(), 1);
    assert!(store.delivery_record("c-new").await.unwrap().is_some());
    assert_eq!(
        store.timeline("c-dead").await.unwrap().len(),
        1,
        "a dead letter's delivery keeps its timeline"
    );
    assert!(store.delivery_record("c-dead").await.unwrap().is_some());
    assert!(store.attempts("commit", "m-2").await.unwrap().is_empty());
    assert!(store.is_handled("commit", "m-1").await.unwrap());

    // Past the outbox's retention: the sent entry goes, the unsent stay.
    let pruned = store.prune(&retention(100), now + DAY * 8).await.unwrap();
    assert_eq!(
        pruned,
        Pruned {
            outbox: 1,
            ..Pruned::default()
        }
    );
    assert_eq!(store.outbox_backlog().await.unwrap(), 2, "unsent entries are kept");

    // Past the idempotency records' retention.
    let pruned = store.prune(&retention(100), now + DAY * 15).await.unwrap();
    assert_eq!(
        pruned,
        Pruned {
            handled: 1,
            ..Pruned::default()
        }
    );
    assert!(!store.is_handled("commit", "m-1").await.unwrap());

    // Long after: every retention is past, and what is needed stays.
    store.prune(&retention(100), now + DAY * 1000).await.unwrap();
    assert_eq!(
        store.outbox_backlog().await.unwrap(),
        2,
        "unsent entries are never pruned"
    );
    let kept = store.dead_letter(&dead.id.to_string(), None).await.unwrap();
    assert_eq!(kept.body, dead.body, "dead letters are never pruned");
    assert_eq!(store.timeline("c-dead").await.unwrap().len(), 1);
    assert!(store.timeline("c-new").await.unwrap().is_empty());
    assert!(store.delivery_record("c-new").await.unwrap().is_none());

    // Once its dead letter is purged, the delivery's timeline goes too.
    store.purge_dead_letter(dead.id).await.unwrap();
    let pruned = store.prune(&retention(100), now + DAY * 1000).await.unwrap();
    assert_eq!(
        pruned,
        Pruned {
            timeline: 1,
            deliveries: 1,
            ..Pruned::default()
        }
    );

    // A kind without retention is kept forever.
    let keep_all = RetentionPolicy {
        handled: None,
        outbox_sent: None,
        timeline: None,
        finished_sagas: None,
        saga_history_entries: None,
        ..retention(100)
    };
    store.commit_handled(handled("m-3", None, vec![])).await.unwrap();
    assert_eq!(
        store.prune(&keep_all, now + DAY * 1000).await.unwrap(),
        Pruned::default()
    );
    assert!(store.is_handled("commit", "m-3").await.unwrap());
}

async fn retention_prunes_finished_sagas_only<S: Store>(store: &S) {
    let now = OffsetDateTime::now_utc();
    let save = |message_id: &str, kind: &str, key: &str, version: i64, phase: &str| HandledMessage {
        timeline: vec![],
        ..handled(
            message_id,
            Some(SagaWrite {
                kind: kind.into(),
                key: key.into(),
                expected_version: version,
                state: json!({"phase": phase}),
                tenant_id: Some("contoso".into()),
            }),
            vec![],
        )
    };
    for (message_id, kind, key, phase) in [
        ("m-1", "release", "contoso/done", "completed"),
        ("m-2", "release", "contoso/stopped", "rejected"),
        ("m-3", "release", "contoso/flying", "syncing"),
        ("m-4", "release", "contoso/blocked", "blocked"),
        ("m-5", "gitops", "contoso/dev", "completed"),
    ] {
        store
            .commit_handled(save(message_id, kind, key, 0, phase))
            .await
            .unwrap();
    }
    store
        .commit_handled(save("m-6", "release", "contoso/done", 1, "completed"))
        .await
        .unwrap();

    let pruned = store.prune(&retention(100), now + DAY * 29).await.unwrap();
    assert_eq!(pruned.sagas, 0, "finished sagas are kept for their retention");

    let pruned = store.prune(&retention(100), now + DAY * 31).await.unwrap();
    assert_eq!(pruned.sagas, 2);
    assert!(store.load_saga("release", "contoso/done").await.unwrap().is_none());
    assert!(store.load_saga("release", "contoso/stopped").await.unwrap().is_none());
    for (kind, key) in [
        ("release", "contoso/flying"),
        ("release", "contoso/blocked"),
        ("gitops", "contoso/dev"),
    ] {
        assert!(
            store.load_saga(kind, key).await.unwrap().is_some(),
            "{kind} {key} is in flight (or of a kind that never finishes) and must be kept"
        );
    }
    // Its history went with it: the key starts afresh at version 1.
    store
        .commit_handled(save("m-7", "release", "contoso/done", 0, "collecting"))
        .await
        .unwrap();
    let again = store.load_saga("release", "contoso/done").await.unwrap().unwrap();
    assert_eq!(again.version, 1);
    assert_eq!(
        again.history.iter().map(|h| h.message_id.as_str()).collect::<Vec<_>>(),
        ["m-7"]
    );
}

async fn retention_bounds_idempotency_keys_and_the_history_of_sagas_that_never_finish<S: Store + AccessStore>(
    store: &S,
) {
    let now = OffsetDateTime::now_utc();
    let claimed = store
        .claim_idempotency("contoso", "provision-1", "hash-1", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(claimed, IdempotencyClaim::Claimed);
    store
        .complete_idempotency("contoso", "provision-1", 202, &json!({"messageId": "m-1"}))
        .await
        .unwrap();
    // An environment's GitOps saga never finishes: three saves of it.
    for version in 0..3 {
        store
            .commit_handled(HandledMessage {
                timeline: vec![],
                ..handled(
                    &format!("g-{version}"),
                    Some(SagaWrite {
                        kind: "gitops".into(),
                        key: "contoso/dev".into(),
                        expected_version: version,
                        state: json!({"phase": "synced", "environment": "dev"}),
                        tenant_id: Some("contoso".into()),
                    }),
                    vec![],
                )
            })
            .await
            .unwrap();
    }
    // Within both retentions: all kept.
    let pruned = store.prune(&retention(100), now + DAY * 13).await.unwrap();
    assert_eq!((pruned.http_idempotency, pruned.saga_history), (0, 0));
    // Past the idempotency records' retention: the key is forgotten (the
    // same key is a new request again).
    let pruned = store.prune(&retention(100), now + DAY * 15).await.unwrap();
    assert_eq!(pruned.http_idempotency, 1);
    assert_eq!(
        store
            .claim_idempotency("contoso", "provision-1", "hash-2", Duration::from_secs(60))
            .await
            .unwrap(),
        IdempotencyClaim::Claimed
    );
    // Past the timeline's retention, in bounded batches: the history goes,
    // the state and its version stay.
    let pruned = store.prune(&retention(2), now + DAY * 31).await.unwrap();
    assert_eq!(pruned.saga_history, 2);
    assert!(pruned.any_full(2));
    let pruned = store.prune(&retention(2), now + DAY * 31).await.unwrap();
    assert_eq!(pruned.saga_history, 1);
    let saga = store.load_saga("gitops", "contoso/dev").await.unwrap().unwrap();
    assert_eq!(saga.version, 3);
    assert_eq!(saga.state["phase"], "synced");
    assert!(saga.history.is_empty(), "{:?}", saga.history);
    // A kind without retention keeps both.
    let keep_all = RetentionPolicy {
        handled: None,
        timeline: None,
        ..retention(100)
    };
    assert_eq!(
        store.prune(&keep_all, now + DAY * 1000).await.unwrap().http_idempotency,
        0
    );
}

/// A busy saga that never finishes keeps the history of its last versions
/// only (`saga_history_entries`), well within the timeline's retention,
/// pruned in batches; its state and version stay.
async fn retention_bounds_a_sagas_history_by_count_and_keeps_its_state<S: Store>(store: &S) {
    let now = OffsetDateTime::now_utc();
    for version in 0..5 {
        store
            .commit_handled(HandledMessage {
                timeline: vec![],
                ..handled(
                    &format!("p-{version}"),
                    Some(SagaWrite {
                        kind: "probe".into(),
                        key: "contoso/busy".into(),
                        expected_version: version,
                        state: json!({"count": version + 1}),
                        tenant_id: Some("contoso".into()),
                    }),
                    vec![],
                )
            })
            .await
            .unwrap();
    }
    let bounded = |batch| RetentionPolicy {
        saga_history_entries: Some(2),
        ..retention(batch)
    };
    let first = store.prune(&bounded(2), now).await.unwrap();
    assert_eq!(first.saga_history, 2);
    assert!(first.any_full(2), "a full batch says there may be more");
    assert_eq!(store.prune(&bounded(2), now).await.unwrap().saga_history, 1);
    assert_eq!(store.prune(&bounded(2), now).await.unwrap(), Pruned::default());
    let saga = store.load_saga("probe", "contoso/busy").await.unwrap().unwrap();
    assert_eq!((saga.version, &saga.state), (5, &json!({"count": 5})));
    let versions: Vec<i64> = saga.history.iter().map(|entry| entry.version).collect();
    assert_eq!(versions, vec![4, 5], "the last two versions' entries");
    // Without a bound, nothing more goes within the timeline's retention.
    let unbounded = RetentionPolicy {
        saga_history_entries: None,
        ..retention(100)
    };
    assert_eq!(store.prune(&unbounded, now).await.unwrap(), Pruned::default());
}

async fn retention_prunes_in_bounded_batches<S: Store>(store: &S) {
    let now = OffsetDateTime::now_utc();
    for n in 0..5 {
        store
            .commit_handled(HandledMessage {
                timeline: vec![],
                ..handled(&format!("m-{n}"), None, vec![])
            })
            .await
            .unwrap();
    }
    let lines = (0..5)
        .map(|n| line_of("c-old", &format!("m-{n}"), now - DAY * 40))
        .collect();
    store.append_timeline(lines).await.unwrap();

    let first = store.prune(&retention(2), now + DAY * 15).await.unwrap();
    assert_eq!(
        first,
        Pruned {
            handled: 2,
            timeline: 2,
            ..Pruned::default()
        }
    );
    assert!(first.any_full(2), "a full batch says there may be more");
    let second = store.prune(&retention(2), now + DAY * 15).await.unwrap();
    assert_eq!(
        second,
        Pruned {
            handled: 2,
            timeline: 2,
            ..Pruned::default()
        }
    );
    let third = store.prune(&retention(2), now + DAY * 15).await.unwrap();
    assert_eq!(
        third,
        Pruned {
            handled: 1,
            timeline: 1,
            ..Pruned::default()
        }
    );
    assert!(!third.any_full(2));
    assert_eq!(
        store.prune(&retention(2), now + DAY * 15).await.unwrap(),
        Pruned::default()
    );
    assert!(store.timeline("c-old").await.unwrap().is_empty());
}

fn replay_job(tenant: &str, total: u32, created_at: OffsetDateTime) -> (ReplayJobRecord, Vec<ReplayJobItem>) {
    // Whole milliseconds: what every backend keeps.
    let at = OffsetDateTime::from_unix_timestamp(created_at.unix_timestamp()).unwrap();
    let job = ReplayJobRecord {
        id: Uuid::now_v7(),
        tenant_id: tenant.into(),
        requested_by: "key:k1".into(),
        source: "api:k1".into(),
        principal: "key:k1".into(),
        request: json!({"filter": {"reason": "transient-exhausted"}}),
        rate: Some(2.5),
        status: ReplayJobStatus::Running,
        total: u64::from(total),
        replayed: 0,
        failed: 0,
        created_at: at,
        updated_at: at,
        finished_at: None,
        lease_owner: None,
        lease_until: None,
        controls: vec![],
    };
    let items = (0..total)
        .map(|position| ReplayJobItem {
            position,
            dead_letter_id: Uuid::now_v7(),
            replay_id: Uuid::now_v7(),
            outcome: None,
        })
        .collect();
    (job, items)
}

async fn replay_jobs_are_held_by_one_runner_at_a_time<S: AccessStore>(store: &S) {
    let lease = Duration::from_secs(10);
    let now = OffsetDateTime::now_utc();
    let (job, items) = replay_job("contoso", 3, now - Duration::from_secs(60));
    store.create_replay_job(&job, &items).await.unwrap();
    let stored = store.replay_job(job.id, Some("contoso")).await.unwrap().unwrap();
    assert_eq!(stored, job);
    assert_eq!(store.replay_job_items(job.id).await.unwrap(), items);
    // "Not found" for another tenant, found for a platform reader.
    assert!(store.replay_job(job.id, Some("fabrikam")).await.unwrap().is_none());
    assert!(store.replay_job(job.id, None).await.unwrap().is_some());
    assert!(store.list_replay_jobs(Some("fabrikam"), 10).await.unwrap().is_empty());
    assert_eq!(store.list_replay_jobs(Some("contoso"), 10).await.unwrap().len(), 1);

    let claimed = store.claim_replay_job("runner-a", lease, now).await.unwrap().unwrap();
    assert_eq!(claimed.id, job.id);
    assert_eq!(claimed.lease_owner.as_deref(), Some("runner-a"));
    // Held: no other runner gets it while the lease lasts.
    assert!(store.claim_replay_job("runner-b", lease, now).await.unwrap().is_none());
    let done = ReplayItemOutcome::Replayed { at: now };
    let after_one = store
        .record_replay_item(job.id, "runner-a", 0, &done, lease, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((after_one.replayed, after_one.failed), (1, 0));
    // Recording the same item again counts nothing twice.
    let again = store
        .record_replay_item(job.id, "runner-a", 0, &done, lease, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.replayed, 1);
    // A runner that does not hold the job writes nothing.
    assert!(
        store
            .record_replay_item(job.id, "runner-b", 1, &done, lease, now)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .renew_replay_job(job.id, "runner-b", lease, now)
            .await
            .unwrap()
            .is_none()
    );
    // Its process died: once the lease has run out another runner takes it.
    let later = now + Duration::from_secs(11);
    let taken = store.claim_replay_job("runner-b", lease, later).await.unwrap().unwrap();
    assert_eq!(taken.lease_owner.as_deref(), Some("runner-b"));
    assert_eq!(taken.replayed, 1);
    assert!(
        store
            .renew_replay_job(job.id, "runner-a", lease, later)
            .await
            .unwrap()
            .is_none()
    );
    let pending: Vec<u32> = store
        .replay_job_items(job.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|item| item.outcome.is_none())
        .map(|item| item.position)
        .collect();
    assert_eq!(pending, vec![1, 2]);
    let failed = ReplayItemOutcome::Failed {
        error: "no dead letter".into(),
        at: later,
    };
    store
        .record_replay_item(job.id, "runner-b", 1, &failed, lease, later)
        .await
        .unwrap()
        .unwrap();
    let finished = store
        .record_replay_item(job.id, "runner-b", 2, &done, lease, later)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(finished.status, ReplayJobStatus::Finished);
    assert_eq!((finished.replayed, finished.failed), (2, 1));
    assert!(finished.finished_at.is_some());
    assert_eq!(finished.lease_owner, None);
    let items = store.replay_job_items(job.id).await.unwrap();
    assert!(matches!(&items[1].outcome, Some(ReplayItemOutcome::Failed { error, .. }) if error == "no dead letter"));
    // A finished job is claimed by no one.
    assert!(
        store
            .claim_replay_job("runner-c", lease, later + Duration::from_secs(60))
            .await
            .unwrap()
            .is_none()
    );
}

async fn replay_jobs_pause_resume_cancel_and_finish<S: AccessStore>(store: &S) {
    let lease = Duration::from_secs(10);
    let now = OffsetDateTime::now_utc();
    let (older, older_items) = replay_job("contoso", 2, now - Duration::from_secs(120));
    let (newer, newer_items) = replay_job("contoso", 1, now - Duration::from_secs(60));
    store.create_replay_job(&older, &older_items).await.unwrap();
    store.create_replay_job(&newer, &newer_items).await.unwrap();
    let listed: Vec<Uuid> = store
        .list_replay_jobs(None, 10)
        .await
        .unwrap()
        .iter()
        .map(|job| job.id)
        .collect();
    assert_eq!(listed, vec![newer.id, older.id], "newest first");
    let control = |action| ReplayJobControl {
        action,
        by: "alice".into(),
        at: OffsetDateTime::from_unix_timestamp(now.unix_timestamp()).unwrap(),
        reason: None,
    };
    // Another tenant's key finds no job to pause.
    let err = store
        .control_replay_job(older.id, Some("fabrikam"), control(ReplayJobAction::Pause))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
    let claimed = store.claim_replay_job("runner-a", lease, now).await.unwrap().unwrap();
    assert_eq!(claimed.id, older.id, "oldest first");
    let ControlOutcome::Applied(paused) = store
        .control_replay_job(older.id, Some("contoso"), control(ReplayJobAction::Pause))
        .await
        .unwrap()
    else {
        panic!("pausing a running job applies");
    };
    assert_eq!(paused.status, ReplayJobStatus::Paused);
    assert_eq!(paused.controls, vec![control(ReplayJobAction::Pause)]);
    // The runner sees the pause at its next write and lets go.
    let seen = store
        .renew_replay_job(older.id, "runner-a", lease, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.status, ReplayJobStatus::Paused);
    store.release_replay_job(older.id, "runner-a").await.unwrap();
    // Paused jobs are not claimed; the next runnable one is.
    let next = store.claim_replay_job("runner-b", lease, now).await.unwrap().unwrap();
    assert_eq!(next.id, newer.id);
    assert!(matches!(
        store
            .control_replay_job(older.id, None, control(ReplayJobAction::Pause))
            .await
            .unwrap(),
        ControlOutcome::NotApplicable(job) if job.status == ReplayJobStatus::Paused
    ));
    let ControlOutcome::Applied(resumed) = store
        .control_replay_job(older.id, None, control(ReplayJobAction::Resume))
        .await
        .unwrap()
    else {
        panic!("resuming a paused job applies");
    };
    assert_eq!(resumed.status, ReplayJobStatus::Running);
    let again = store.claim_replay_job("runner-c", lease, now).await.unwrap().unwrap();
    assert_eq!(again.id, older.id);
    let ControlOutcome::Applied(cancelled) = store
        .control_replay_job(older.id, None, control(ReplayJobAction::Cancel))
        .await
        .unwrap()
    else {
        panic!("cancelling a running job applies");
    };
    assert_eq!(cancelled.status, ReplayJobStatus::Cancelled);
    assert!(cancelled.finished_at.is_some());
    assert_eq!(cancelled.controls.len(), 3);
    // A cancelled job takes no more progress as running and is never resumed.
    let after = store
        .record_replay_item(
            older.id,
            "runner-c",
            0,
            &ReplayItemOutcome::Replayed { at: now },
            lease,
            now,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.status, ReplayJobStatus::Cancelled);
    assert!(matches!(
        store
            .control_replay_job(older.id, None, control(ReplayJobAction::Resume))
            .await
            .unwrap(),
        ControlOutcome::NotApplicable(_)
    ));
    assert_eq!(
        store.replay_job(older.id, None).await.unwrap().unwrap().controls.len(),
        3
    );
}

async fn ended_replay_jobs_go_with_the_timelines_retention<S: Store + AccessStore>(store: &S) {
    let now = OffsetDateTime::now_utc();
    let lease = Duration::from_secs(10);
    let long_ago = now - DAY * 40;
    let (old, old_items) = replay_job("contoso", 1, long_ago);
    let (recent, recent_items) = replay_job("contoso", 1, now - DAY);
    let (running, running_items) = replay_job("contoso", 2, long_ago);
    // The old one finished 40 days ago, the recent one yesterday; the
    // third, as old, is still running.
    for (job, items, at) in [(&old, &old_items, long_ago), (&recent, &recent_items, now - DAY)] {
        store.create_replay_job(job, items).await.unwrap();
        let claimed = store.claim_replay_job("runner", lease, at).await.unwrap().unwrap();
        assert_eq!(claimed.id, job.id);
        let done = store
            .record_replay_item(job.id, "runner", 0, &ReplayItemOutcome::Replayed { at }, lease, at)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(done.status, ReplayJobStatus::Finished);
    }
    store.create_replay_job(&running, &running_items).await.unwrap();
    let pruned = store.prune(&retention(100), now).await.unwrap();
    assert_eq!(pruned.replay_jobs, 1, "{pruned:?}");
    assert!(store.replay_job(old.id, None).await.unwrap().is_none());
    assert!(
        store.replay_job_items(old.id).await.unwrap().is_empty(),
        "its items went with it"
    );
    assert!(store.replay_job(recent.id, None).await.unwrap().is_some());
    assert!(
        store.replay_job(running.id, None).await.unwrap().is_some(),
        "a running job is never pruned"
    );
    assert_eq!(store.prune(&retention(100), now).await.unwrap().replay_jobs, 0);
}

// -- release policies --------------------------------------------------------

/// Puts `document` as `tenant`'s next version over `expected`, by alice,
/// `offset_ms` after [`at`].
async fn put_policy<S: PolicyStore>(
    store: &S,
    tenant: &str,
    document: serde_json::Value,
    expected: Option<u64>,
    offset_ms: u64,
) -> Result<ReleasePolicyRecord, StoreError> {
    store
        .put_release_policy(
            tenant,
            &document,
            "cli:alice",
            Some("tighten prod"),
            expected,
            at(offset_ms),
        )
        .await
}

/// The refusal a put over `expected` gets when the tenant is at `found`.
fn assert_policy_changed(
    refused: Result<ReleasePolicyRecord, StoreError>,
    tenant: &str,
    expected: Option<u64>,
    found: Option<u64>,
) {
    match refused {
        Err(StoreError::PolicyChanged {
            tenant: refused_tenant,
            expected: refused_expected,
            found: refused_found,
        }) => assert_eq!(
            (refused_tenant.as_str(), refused_expected, refused_found),
            (tenant, expected, found)
        ),
        other => panic!("expected PolicyChanged over {expected:?} (at {found:?}), got {other:?}"),
    }
}

async fn a_first_release_policy_is_version_one_and_a_stale_put_is_refused<S: PolicyStore>(store: &S) {
    assert_eq!(store.release_policy("contoso").await.unwrap(), None);
    assert!(store.release_policy_history("contoso").await.unwrap().is_empty());

    let document = json!({"environments": ["dev", "prod"], "prod": {"approvals": 2}});
    let first = put_policy(store, "contoso", document.clone(), None, 0).await.unwrap();
    assert_eq!(
        first,
        ReleasePolicyRecord {
            tenant_id: "contoso".into(),
            version: 1,
            document,
            changed_by: "cli:alice".into(),
            changed_at: at(0),
            reason: Some("tighten prod".into()),
        }
    );
    assert_eq!(store.release_policy("contoso").await.unwrap(), Some(first.clone()));

    // A writer who read no policy, once there is one.
    let refused = put_policy(store, "contoso", json!({"v": "late"}), None, 1000).await;
    let Err(err) = &refused else {
        panic!("a put over no version stored over version 1: {refused:?}");
    };
    assert_eq!(err.next_step(), crate::ports::error::NextStep::Retry, "{err}");
    assert!(err.to_string().contains("read it again and retry"), "{err}");
    assert_policy_changed(refused, "contoso", None, Some(1));

    // The next version, without a reason, by another changer.
    let second = store
        .put_release_policy("contoso", &json!({"v": 2}), "key:k1", None, Some(1), at(2000))
        .await
        .unwrap();
    assert_eq!((second.version, second.reason.as_deref()), (2, None));
    assert_eq!(second.changed_by, "key:k1");

    // A stale version (read before the second), and one that was never stored.
    assert_policy_changed(
        put_policy(store, "contoso", json!({"v": "stale"}), Some(1), 3000).await,
        "contoso",
        Some(1),
        Some(2),
    );
    assert_policy_changed(
        put_policy(store, "contoso", json!({"v": "ahead"}), Some(7), 3000).await,
        "contoso",
        Some(7),
        Some(2),
    );
    // Refused puts stored nothing.
    assert_eq!(
        store.release_policy_history("contoso").await.unwrap(),
        [first, second.clone()]
    );
    assert_eq!(store.release_policy("contoso").await.unwrap(), Some(second));
}

async fn release_policy_history_is_oldest_first_and_outlives_retention<S: Store + PolicyStore>(store: &S) {
    let mut stored = Vec::new();
    let mut expected = None;
    for n in 1..=4u64 {
        let record = put_policy(store, "contoso", json!({"n": n}), expected, n * 1000)
            .await
            .unwrap();
        assert_eq!(record.version, n);
        expected = Some(record.version);
        stored.push(record);
    }
    let history = store.release_policy_history("contoso").await.unwrap();
    assert_eq!(history, stored);
    assert_eq!(
        history.iter().map(|record| record.version).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    assert_eq!(store.release_policy("contoso").await.unwrap().as_ref(), stored.last());

    // Retention never prunes a policy version, however old.
    let long_after = at(0) + DAY * 3650;
    store.prune(&retention(1), long_after).await.unwrap();
    store
        .prune(
            &RetentionPolicy {
                handled: Some(Duration::ZERO),
                outbox_sent: Some(Duration::ZERO),
                timeline: Some(Duration::ZERO),
                finished_sagas: Some(Duration::ZERO),
                ..retention(1000)
            },
            long_after,
        )
        .await
        .unwrap();
    assert_eq!(store.release_policy_history("contoso").await.unwrap(), stored);
}

async fn release_policies_stay_in_their_tenant<S: PolicyStore>(store: &S) {
    let contoso = put_policy(store, "contoso", json!({"of": "contoso"}), None, 0)
        .await
        .unwrap();
    let contoso = vec![
        contoso.clone(),
        put_policy(store, "contoso", json!({"of": "contoso", "n": 2}), Some(1), 1000)
            .await
            .unwrap(),
    ];
    // Another tenant's versions start at 1 and count on their own, whatever
    // contoso's are; a tenant whose id begins with another's is another.
    let fabrikam = put_policy(store, "fabrikam", json!({"of": "fabrikam"}), None, 2000)
        .await
        .unwrap();
    assert_eq!(fabrikam.version, 1);
    let prefixed = put_policy(store, "contoso-eu", json!({"of": "contoso-eu"}), None, 3000)
        .await
        .unwrap();
    assert_eq!(prefixed.version, 1);
    // contoso's version is no answer for fabrikam.
    assert_policy_changed(
        put_policy(store, "fabrikam", json!({"of": "fabrikam"}), Some(2), 4000).await,
        "fabrikam",
        Some(2),
        Some(1),
    );

    assert_eq!(store.release_policy_history("contoso").await.unwrap(), contoso);
    assert_eq!(
        store.release_policy_history("fabrikam").await.unwrap(),
        std::slice::from_ref(&fabrikam)
    );
    assert_eq!(store.release_policy_history("contoso-eu").await.unwrap(), [prefixed]);
    assert_eq!(store.release_policy("contoso").await.unwrap().as_ref(), contoso.last());
    assert_eq!(store.release_policy("fabrikam").await.unwrap(), Some(fabrikam));
    assert_eq!(store.release_policy("northwind").await.unwrap(), None);
    assert!(store.release_policy_history("northwind").await.unwrap().is_empty());
    assert!(store.release_policy_history("").await.unwrap().is_empty());
}

/// Puts `writers` versions of contoso's policy over `expected` at once,
/// from as many tasks; returns each writer's number and answer.
async fn put_policies_concurrently<S: PolicyStore + Clone + 'static>(
    store: &S,
    expected: Option<u64>,
    writers: u64,
) -> Vec<(u64, Result<ReleasePolicyRecord, StoreError>)> {
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(usize::try_from(writers).unwrap()));
    let mut tasks = tokio::task::JoinSet::new();
    for writer in 0..writers {
        let (store, start) = (store.clone(), std::sync::Arc::clone(&start));
        tasks.spawn(async move {
            start.wait().await;
            let put = put_policy(&store, "contoso", json!({"writer": writer}), expected, writer).await;
            (writer, put)
        });
    }
    tasks.join_all().await
}

/// Exactly one put won, with the version over `expected`; every other was
/// refused naming that version. Returns the winner's record.
fn assert_one_policy_winner(
    puts: Vec<(u64, Result<ReleasePolicyRecord, StoreError>)>,
    expected: Option<u64>,
) -> ReleasePolicyRecord {
    let version = expected.map_or(1, |expected| expected + 1);
    let described = format!("{puts:?}");
    let (won, refused): (Vec<_>, Vec<_>) = puts.into_iter().partition(|(_, put)| put.is_ok());
    assert_eq!(won.len(), 1, "{described}");
    let Some((writer, Ok(winner))) = won.into_iter().next() else {
        panic!("no winner: {described}");
    };
    assert_eq!(winner.version, version, "{described}");
    assert_eq!(winner.document, json!({"writer": writer}), "{described}");
    for (_, put) in refused {
        assert_policy_changed(put, "contoso", expected, Some(version));
    }
    winner
}

async fn concurrent_release_policy_puts_have_one_winner<S: PolicyStore + Clone + 'static>(store: S) {
    let first = assert_one_policy_winner(put_policies_concurrently(&store, None, 8).await, None);
    let second = assert_one_policy_winner(put_policies_concurrently(&store, Some(1), 8).await, Some(1));
    // Two writers exactly, the brief's case.
    let third = assert_one_policy_winner(put_policies_concurrently(&store, Some(2), 2).await, Some(2));
    assert_eq!(
        store.release_policy_history("contoso").await.unwrap(),
        [first, second, third]
    );
}
