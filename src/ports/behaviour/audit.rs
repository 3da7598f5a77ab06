//! The release audit's part of the store behaviour suite: what every
//! [`AuditStore`] must do (run by [`super::store::run_all`], on a fresh
//! store each).

use std::time::Duration;

use serde_json::json;
use time::OffsetDateTime;

use crate::ports::store::{AuditEntry, AuditStore, FinishedSaga, RetentionPolicy, Store};

/// A fixed instant with whole milliseconds (what stores keep), `offset_ms` after it.
fn at(offset_ms: u64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap() + Duration::from_millis(123 + offset_ms)
}

/// Entry `id` of `tenant`'s log: r-1 approved in prod by alice's key,
/// `offset_ms` after [`at`], not yet appended (sequence 0).
fn entry(tenant: &str, id: &str, offset_ms: u64) -> AuditEntry {
    AuditEntry {
        id: id.into(),
        tenant_id: tenant.into(),
        sequence: 0,
        at: at(offset_ms),
        action: "approved".into(),
        release_id: Some("r-1".into()),
        environment: Some("prod".into()),
        by: Some("key:k1 (alice's deploy key)".into()),
        door: Some("api:k1".into()),
        reason: Some("change CAB-7 approved".into()),
        detail: json!({"rule": "two-approvals", "identities": ["key:k1", "user:alice"], "policyVersion": 3}),
    }
}

/// Appends `entry`, which must be new; returns it as stored.
async fn append_new<S: AuditStore>(store: &S, entry: &AuditEntry) -> AuditEntry {
    let (stored, new) = store.append_audit(entry).await.unwrap();
    assert!(new, "{} was already in the log: {stored:?}", entry.id);
    stored
}

/// Every entry of `tenant`'s log.
async fn log<S: AuditStore>(store: &S, tenant: &str) -> Vec<AuditEntry> {
    store.audit_entries(tenant, None, None, usize::MAX).await.unwrap()
}

/// The sequences of `entries`, in their order.
fn sequences(entries: &[AuditEntry]) -> Vec<u64> {
    entries.iter().map(|entry| entry.sequence).collect()
}

pub(super) async fn audit_entries_are_appended_once_and_numbered_in_order<S: AuditStore>(store: &S) {
    assert!(log(store, "contoso").await.is_empty());

    // Stored as given, numbered 1, its time kept to the millisecond; the
    // sequence it came with is not the store's.
    let given = AuditEntry {
        sequence: 42,
        at: at(0) + Duration::from_nanos(456_789),
        ..entry("contoso", "m-1", 0)
    };
    let first = append_new(store, &given).await;
    assert_eq!(
        first,
        AuditEntry {
            sequence: 1,
            ..entry("contoso", "m-1", 0)
        }
    );

    // The same id again (a redelivered message): nothing new, the entry
    // stored first as it was, whatever the second says.
    let again = AuditEntry {
        action: "rejected".into(),
        reason: None,
        at: at(9000),
        ..entry("contoso", "m-1", 0)
    };
    assert_eq!(store.append_audit(&again).await.unwrap(), (first.clone(), false));

    // Entries with nothing optional, and a detail of any shape.
    let bare = AuditEntry {
        action: "policy-changed".into(),
        release_id: None,
        environment: None,
        by: None,
        door: None,
        reason: None,
        detail: serde_json::Value::Null,
        ..entry("contoso", "policy:4", 1000)
    };
    let second = append_new(store, &bare).await;
    assert_eq!(
        second,
        AuditEntry {
            sequence: 2,
            ..bare.clone()
        }
    );
    let nested = AuditEntry {
        action: "waiting-for-window".into(),
        detail: json!({"until": "2027-01-04T06:00:00Z", "window": {"deny": ["0 0 * * 5"], "zone": "Europe/Paris"}, "n": [1, 2.5, null, "x"]}),
        ..entry("contoso", "m-2", 500)
    };
    let third = append_new(store, &nested).await;
    assert_eq!(third, AuditEntry { sequence: 3, ..nested });
    assert_eq!(store.append_audit(&bare).await.unwrap(), (second.clone(), false));

    // The log, by sequence (the third was made before the second: order is
    // the order appended, not the time of the decision).
    assert_eq!(log(store, "contoso").await, [first, second, third]);
}

pub(super) async fn the_audit_log_pages_by_sequence_since_a_time_and_to_a_limit<S: AuditStore>(store: &S) {
    // Decisions made out of order: 5 s, 1 s, 3 s, 4 s, 2 s after `at`.
    let mut stored = Vec::new();
    for (n, offset) in [5000, 1000, 3000, 4000, 2000].into_iter().enumerate() {
        stored.push(append_new(store, &entry("contoso", &format!("m-{n}"), offset)).await);
    }
    assert_eq!(sequences(&stored), [1, 2, 3, 4, 5]);
    assert_eq!(log(store, "contoso").await, stored);

    // Since a time: those made at or after it, still by sequence.
    let since = |offset| store.audit_entries("contoso", Some(at(offset)), None, usize::MAX);
    assert_eq!(sequences(&since(3000).await.unwrap()), [1, 3, 4]);
    assert_eq!(sequences(&since(0).await.unwrap()), [1, 2, 3, 4, 5]);
    assert!(since(5001).await.unwrap().is_empty());
    // Half a millisecond past an entry's time is after it.
    let just_after = store
        .audit_entries("contoso", Some(at(3000) + Duration::from_micros(500)), None, 10)
        .await
        .unwrap();
    assert_eq!(sequences(&just_after), [1, 4]);

    // After a sequence, and pages of two with the last sequence as cursor.
    let after = |after, limit| store.audit_entries("contoso", None, Some(after), limit);
    assert_eq!(after(3, 10).await.unwrap(), stored[3..]);
    let mut pages = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.audit_entries("contoso", None, cursor, 2).await.unwrap();
        let Some(last) = page.last() else { break };
        cursor = Some(last.sequence);
        pages.push(sequences(&page));
    }
    assert_eq!(pages, [vec![1, 2], vec![3, 4], vec![5]]);
    assert!(after(5, 10).await.unwrap().is_empty());
    assert!(after(u64::MAX, 10).await.unwrap().is_empty());
    assert!(after(0, 0).await.unwrap().is_empty(), "a limit of 0 reads nothing");
    assert_eq!(after(0, 1).await.unwrap(), stored[..1]);

    // Both: made at or after 2 s, after sequence 2, one at a time.
    let both = store
        .audit_entries("contoso", Some(at(2000)), Some(2), 1)
        .await
        .unwrap();
    assert_eq!(sequences(&both), [3]);
    let both = store
        .audit_entries("contoso", Some(at(2000)), Some(3), 10)
        .await
        .unwrap();
    assert_eq!(sequences(&both), [4, 5]);
}

pub(super) async fn audit_logs_stay_in_their_tenant<S: AuditStore>(store: &S) {
    let contoso = vec![
        append_new(store, &entry("contoso", "m-1", 0)).await,
        append_new(store, &entry("contoso", "m-2", 1000)).await,
    ];
    // The same id in another tenant's log is another entry, numbered in
    // that log; a tenant whose id begins with another's is another.
    let fabrikam = append_new(store, &entry("fabrikam", "m-1", 2000)).await;
    assert_eq!(fabrikam.sequence, 1);
    let prefixed = append_new(store, &entry("contoso-eu", "m-2", 3000)).await;
    assert_eq!(prefixed.sequence, 1);
    assert_eq!(
        append_new(store, &entry("contoso", "m-3", 4000)).await.sequence,
        3,
        "contoso's log counts on its own"
    );

    let contoso_log = log(store, "contoso").await;
    assert_eq!(contoso_log[..2], contoso);
    assert_eq!(sequences(&contoso_log), [1, 2, 3]);
    assert_eq!(log(store, "fabrikam").await, std::slice::from_ref(&fabrikam));
    assert_eq!(log(store, "contoso-eu").await, [prefixed]);
    assert!(log(store, "northwind").await.is_empty());
    assert!(log(store, "").await.is_empty());
    // A cursor or a time from one log reads nothing of another.
    assert!(
        store
            .audit_entries("fabrikam", Some(at(0)), Some(1), 10)
            .await
            .unwrap()
            .is_empty()
    );
    // fabrikam's m-1 is still fabrikam's, whatever contoso's m-1 says.
    assert_eq!(
        store.append_audit(&entry("fabrikam", "m-1", 9000)).await.unwrap(),
        (fabrikam, false)
    );
}

pub(super) async fn the_audit_log_outlives_retention<S: Store + AuditStore>(store: &S) {
    let mut stored = Vec::new();
    for n in 0..3u64 {
        stored.push(append_new(store, &entry("contoso", &format!("m-{n}"), n * 1000)).await);
    }
    // Retention never prunes an entry, however old, whatever it keeps.
    let everything = RetentionPolicy {
        handled: Some(Duration::ZERO),
        outbox_sent: Some(Duration::ZERO),
        timeline: Some(Duration::ZERO),
        finished_sagas: Some(Duration::ZERO),
        saga_history_entries: Some(0),
        finished: vec![FinishedSaga {
            kind: "release".into(),
            field: "phase".into(),
            values: vec!["completed".into(), "rejected".into()],
        }],
        batch: 1000,
    };
    let long_after = at(0) + Duration::from_secs(3650 * 24 * 3600);
    store.prune(&everything, long_after).await.unwrap();
    assert_eq!(log(store, "contoso").await, stored);
}

/// Appends from many tasks at once, new ids and one id many times: each
/// new id is numbered once, the numbers are the log's, 1 to N in the
/// order the log reads, and of the same id appended at once exactly one
/// append is new.
pub(super) async fn concurrent_audit_appends_are_numbered_once_each<S: AuditStore + Clone + 'static>(store: S) {
    const WRITERS: usize = 12;
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(WRITERS * 2));
    let mut tasks = tokio::task::JoinSet::new();
    for writer in 0..WRITERS {
        for id in [format!("m-{writer}"), "m-same".to_owned()] {
            let (store, start) = (store.clone(), std::sync::Arc::clone(&start));
            tasks.spawn(async move {
                start.wait().await;
                let appended = store
                    .append_audit(&entry("contoso", &id, 1000))
                    .await
                    .unwrap_or_else(|err| panic!("appending {id}: {err}"));
                (id, appended)
            });
        }
    }
    let answers = tasks.join_all().await;
    let described = format!("{answers:?}");

    let stored = log(&store, "contoso").await;
    let expected: Vec<u64> = (1..=u64::try_from(WRITERS + 1).unwrap()).collect();
    assert_eq!(sequences(&stored), expected, "{described}");
    let same: Vec<_> = answers.iter().filter(|(id, _)| id == "m-same").collect();
    assert_eq!(
        same.iter().filter(|(_, (_, new))| *new).count(),
        1,
        "one append of m-same is new: {described}"
    );
    for (id, (entry, new)) in &answers {
        assert!(*new || id == "m-same", "{id} was new: {described}");
        let in_log: Vec<_> = stored.iter().filter(|stored| &stored.id == id).collect();
        assert_eq!(in_log, [entry], "{id} is in the log once, as its append said");
    }
}

pub(super) async fn a_releases_entries_are_read_on_their_own<S: AuditStore>(store: &S) {
    let of = |tenant: &str, id: &str, release: Option<&str>, offset_ms: u64| AuditEntry {
        release_id: release.map(str::to_owned),
        ..entry(tenant, id, offset_ms)
    };
    append_new(store, &of("wingtip", "w-1", Some("r-1"), 0)).await;
    append_new(store, &of("wingtip", "w-2", Some("r-2"), 1)).await;
    append_new(store, &of("wingtip", "w-3", None, 2)).await;
    append_new(store, &of("wingtip", "w-4", Some("r-1"), 3)).await;
    append_new(store, &of("fabrikam", "f-1", Some("r-1"), 4)).await;
    let ids = |entries: Vec<AuditEntry>| entries.into_iter().map(|entry| entry.id).collect::<Vec<_>>();
    // In log order, only that release's, only that tenant's.
    assert_eq!(
        ids(store.release_audit("wingtip", "r-1", 100).await.unwrap()),
        ["w-1", "w-4"]
    );
    assert_eq!(ids(store.release_audit("wingtip", "r-1", 1).await.unwrap()), ["w-1"]);
    assert_eq!(ids(store.release_audit("fabrikam", "r-1", 100).await.unwrap()), ["f-1"]);
    assert!(store.release_audit("wingtip", "r-9", 100).await.unwrap().is_empty());
    assert!(store.release_audit("nobody", "r-1", 100).await.unwrap().is_empty());
}
