//! What every [`ControlStore`] must do: the log of consumer pauses and
//! resumes is appended in order, numbered, read newest first, and each
//! consumer's latest entry says whether it is paused.

use time::OffsetDateTime;

use crate::operator::controls::{self, Actor};
use crate::ports::store::{ConsumerControl, ControlAction, ControlStore, GroupAcknowledgement};

fn control(consumer: &str, action: ControlAction, by: &str, at_ms: i64) -> ConsumerControl {
    ConsumerControl {
        sequence: 0,
        consumer: consumer.to_owned(),
        action,
        by: by.to_owned(),
        door: format!("cli:{by}"),
        reason: Some(format!("{} by {by}", action.as_str())),
        at: OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap() + time::Duration::milliseconds(at_ms),
    }
}

/// Entries are numbered in append order and kept as given (to the
/// millisecond); each consumer's latest entry is what counts.
pub(crate) async fn consumer_controls_are_logged_in_order_and_the_latest_counts<S: ControlStore>(store: &S) {
    assert!(store.latest_controls().await.unwrap().is_empty());
    let first = store
        .record_control(&control("commit", ControlAction::Pause, "alice", 1))
        .await
        .unwrap();
    assert_eq!(first.sequence, 1);
    assert_eq!(first.reason.as_deref(), Some("pause by alice"));
    store
        .record_control(&control("probe", ControlAction::Pause, "bob", 2))
        .await
        .unwrap();
    let third = store
        .record_control(&control("commit", ControlAction::Resume, "carol", 3))
        .await
        .unwrap();
    assert_eq!(third.sequence, 3);
    let latest = store.latest_controls().await.unwrap();
    let summary: Vec<(&str, ControlAction, &str)> = latest
        .iter()
        .map(|c| (c.consumer.as_str(), c.action, c.by.as_str()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("commit", ControlAction::Resume, "carol"),
            ("probe", ControlAction::Pause, "bob")
        ]
    );
    assert_eq!(
        latest[1],
        control("probe", ControlAction::Pause, "bob", 2).with_sequence(2)
    );
    let log: Vec<u64> = store.controls(10).await.unwrap().iter().map(|c| c.sequence).collect();
    assert_eq!(log, vec![3, 2, 1], "newest first");
    assert_eq!(store.controls(1).await.unwrap().len(), 1);
}

/// Through the operator: a pause needs a reason and a known consumer,
/// pausing twice records once, resuming a running consumer records nothing.
pub(crate) async fn pausing_twice_records_once_and_needs_a_reason<S: ControlStore>(store: &S) {
    let actor = Actor {
        by: "cli:alice",
        door: "cli:alice",
    };
    let refused = controls::control(store, "commit", ControlAction::Pause, actor, Some("  ")).await;
    assert!(refused.unwrap_err().to_string().contains("`reason`"));
    let unknown = controls::control(store, "nope", ControlAction::Pause, actor, Some("why")).await;
    assert!(unknown.unwrap_err().to_string().contains("`nope` is not a consumer"));
    let resumed = controls::control(store, "commit", ControlAction::Resume, actor, None)
        .await
        .unwrap();
    assert!(!resumed.changed);
    let paused = controls::control(store, "commit", ControlAction::Pause, actor, Some("ADO is down"))
        .await
        .unwrap();
    assert!(paused.changed);
    let again = controls::control(store, "commit", ControlAction::Pause, actor, Some("still"))
        .await
        .unwrap();
    assert!(!again.changed);
    assert_eq!(
        again.control.reason.as_deref(),
        Some("ADO is down"),
        "the first pause stands"
    );
    let views = controls::consumers(store).await.unwrap();
    let commit = views.iter().find(|view| view.name == "commit").unwrap();
    assert!(commit.paused);
    assert!(
        views
            .iter()
            .filter(|view| view.name != "commit")
            .all(|view| !view.paused)
    );
    let resumed = controls::control(store, "commit", ControlAction::Resume, actor, None)
        .await
        .unwrap();
    assert!(resumed.changed);
    assert_eq!(
        store.controls(10).await.unwrap().len(),
        2,
        "a pause and a resume recorded"
    );
}

/// Acknowledgements are kept per scope (a tenant's never seen from
/// another's), replaced by a newer one, and removed once.
pub(crate) async fn group_acknowledgements_stay_in_their_scope<S: ControlStore>(store: &S) {
    let ack = |scope: &str, note: &str, at_ms: i64| GroupAcknowledgement {
        scope: scope.to_owned(),
        fingerprint: "0123456789abcdef".to_owned(),
        by: "key:k1 (ops)".to_owned(),
        door: "api:k1".to_owned(),
        note: Some(note.to_owned()),
        at: OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap() + time::Duration::milliseconds(at_ms),
    };
    store.acknowledge_group(&ack("contoso", "first", 1)).await.unwrap();
    store.acknowledge_group(&ack("contoso", "second", 2)).await.unwrap();
    assert_eq!(
        store.group_acknowledgements("contoso").await.unwrap(),
        vec![ack("contoso", "second", 2)]
    );
    assert!(store.group_acknowledgements("fabrikam").await.unwrap().is_empty());
    assert!(!store.unacknowledge_group("fabrikam", "0123456789abcdef").await.unwrap());
    assert!(store.unacknowledge_group("contoso", "0123456789abcdef").await.unwrap());
    assert!(!store.unacknowledge_group("contoso", "0123456789abcdef").await.unwrap());
    assert!(store.group_acknowledgements("contoso").await.unwrap().is_empty());
}

trait WithSequence {
    fn with_sequence(self, sequence: u64) -> Self;
}

impl WithSequence for ConsumerControl {
    fn with_sequence(self, sequence: u64) -> Self {
        Self { sequence, ..self }
    }
}
