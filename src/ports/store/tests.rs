//! Tests of `src/ports/store/mod.rs`.

use serde_json::{Value, json};

use super::*;

#[test]
fn an_edit_lists_every_changed_field_as_a_json_pointer() {
    let edit = ReplayEdit::between(
        json!({"branch": "main", "a/b": 1, "files": [{"path": "x"}, {"path": "y"}], "tags": [1], "gone": true}),
        json!({"branch": "hotfix", "a/b": 1, "files": [{"path": "x"}, {"path": "z"}], "tags": [1, 2], "new": "n"}),
    );
    let changes: Vec<(String, Option<Value>, Option<Value>)> = edit
        .diff
        .iter()
        .map(|c| (c.path.clone(), c.before.clone(), c.after.clone()))
        .collect();
    assert_eq!(
        changes,
        [
            ("/branch".into(), Some(json!("main")), Some(json!("hotfix"))),
            ("/files/1/path".into(), Some(json!("y")), Some(json!("z"))),
            ("/gone".into(), Some(json!(true)), None),
            ("/new".into(), None, Some(json!("n"))),
            ("/tags".into(), Some(json!([1])), Some(json!([1, 2]))),
        ]
    );
    assert!(ReplayEdit::between(json!({"a": 1}), json!({"a": 1})).diff.is_empty());
    // `/` and `~` in a key are escaped as JSON Pointer says.
    let escaped = ReplayEdit::between(json!({"a/b~c": 1}), json!({"a/b~c": 2}));
    assert_eq!(escaped.diff[0].path, "/a~1b~0c");
}

#[test]
fn a_replay_stored_before_edits_were_audited_still_reads() {
    let old = json!({
        "replayId": "01910000-0000-7000-8000-000000000009", "by": "alice",
        "at": "2026-12-01T10:00:00Z", "destination": "commit", "brokerMessageId": "m.replay"
    });
    let replay: ReplayRecord = serde_json::from_value(old).unwrap();
    assert_eq!(replay.edit, None);
}
