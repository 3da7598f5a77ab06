//! Tests of `src/cli/dead_letters.rs`.

use bosun::ports::store::{AttemptRecord, ReplayRecord};
use time::macros::datetime;

use super::*;

const NOW: OffsetDateTime = datetime!(2026-12-01 12:00:00 UTC);

#[test]
fn since_takes_a_duration_ago_in_each_unit() {
    for (text, ago) in [
        ("45s", time::Duration::seconds(45)),
        ("30m", time::Duration::minutes(30)),
        ("2h", time::Duration::hours(2)),
        ("7d", time::Duration::days(7)),
        ("0m", time::Duration::ZERO),
    ] {
        assert_eq!(parse_since(text, NOW).unwrap(), NOW - ago, "{text}");
    }
}

#[test]
fn since_takes_an_rfc3339_time_as_it_is() {
    assert_eq!(
        parse_since("2026-11-30T08:15:00+01:00", NOW).unwrap(),
        datetime!(2026-11-30 08:15:00 +01:00)
    );
}

#[test]
fn since_refuses_anything_else_naming_it() {
    for text in ["", "5", "5x", "m", "abcm", "-5m", "1.5h", "2026-12-01", "5é", "5 m"] {
        let err = format!("{:#}", parse_since(text, NOW).unwrap_err());
        assert!(
            err.starts_with(&format!(
                "--since `{text}` is neither RFC 3339 nor a duration like 30m, 2h, 7d"
            )),
            "{text:?}: {err}"
        );
    }
}

#[test]
fn since_refuses_a_time_before_the_calendar_instead_of_panicking() {
    for text in ["18446744073709551615s", "9223372036854775807s", "99999999999d"] {
        let err = parse_since(text, NOW).unwrap_err().to_string();
        assert_eq!(err, format!("--since `{text}` is too long ago"));
    }
}

#[test]
fn the_filter_carries_every_flag() {
    let args = DeadLetterFilterArgs {
        consumer: Some("commit".to_owned()),
        message_type: Some("CreateCommit".to_owned()),
        since: Some("2026-11-30T00:00:00Z".to_owned()),
    };
    assert_eq!(
        args.to_filter(true).unwrap(),
        DeadLetterFilter {
            consumer: Some("commit".to_owned()),
            message_type: Some("CreateCommit".to_owned()),
            since: Some(datetime!(2026-11-30 00:00:00 UTC)),
            include_replayed: true,
            ..Default::default()
        }
    );
    let bad = DeadLetterFilterArgs {
        since: Some("yesterday".to_owned()),
        ..Default::default()
    };
    assert!(bad.to_filter(false).is_err());
}

#[test]
fn a_bulk_selection_is_explicit_and_refuses_what_it_would_ignore() {
    let none = DeadLetterFilterArgs::default();
    let commit = DeadLetterFilterArgs {
        consumer: Some("commit".to_owned()),
        ..Default::default()
    };
    let id = vec!["0191".to_owned()];
    // Ids, --group, --all (narrowed or not): each is explicit.
    assert!(check_selection(&id, false, None, &none).is_ok());
    assert!(check_selection(&[], false, Some("0123456789abcdef"), &commit).is_ok());
    assert!(check_selection(&[], true, None, &none).is_ok());
    assert!(check_selection(&[], true, None, &commit).is_ok());
    // Nothing named: every dead letter is never implied.
    let err = check_selection(&[], false, None, &none).unwrap_err().to_string();
    assert!(err.contains("--all"), "{err}");
    // A filter alone, or beside ids, would be ignored or mean all: refused by name.
    for ids in [&[][..], &id[..]] {
        let err = check_selection(ids, false, None, &commit).unwrap_err().to_string();
        assert!(err.starts_with("--consumer narrow(s) --all or --group"), "{err}");
    }
    let err = check_selection(&[], false, Some(" "), &none).unwrap_err().to_string();
    assert!(err.starts_with("--group must not be empty"), "{err}");
    let empty = DeadLetterFilterArgs {
        message_type: Some(String::new()),
        ..Default::default()
    };
    assert_eq!(
        empty.to_filter(false).unwrap_err().to_string(),
        "--type must not be empty (leave it out instead)"
    );
}

#[test]
fn the_rate_must_be_a_usable_number_of_replays_per_second() {
    for fine in [None, Some(0.5), Some(10.0), Some(f64::INFINITY)] {
        assert!(check_rate(fine).is_ok(), "{fine:?}");
    }
    for zero in [Some(0.0), Some(-1.0), Some(f64::NAN)] {
        assert_eq!(check_rate(zero).unwrap_err().to_string(), "--rate must be more than 0");
    }
    assert_eq!(
        check_rate(Some(1e-300)).unwrap_err().to_string(),
        "--rate is too small: the wait between two replays would be longer than bosun can wait"
    );
}

fn record() -> DeadLetterRecord {
    DeadLetterRecord {
        id: Uuid::from_u128(0x0191_0000_0000_7000_8000_0000_0000_0001),
        consumer: Some("commit".to_owned()),
        entity: "commit".to_owned(),
        transport_sequence: Some(7),
        broker_message_id: "broker-1".to_owned(),
        message_id: Some("msg-1".to_owned()),
        message_type: Some("CreateCommit".to_owned()),
        correlation_id: Some("corr-1".to_owned()),
        tenant_id: Some("contoso".to_owned()),
        body: br#"{"repository":"payments-api"}"#.to_vec(),
        reason: "retries-exhausted".to_owned(),
        description: "no repository payments-api".to_owned(),
        error_chain: vec!["commit failed".to_owned(), "no repository payments-api".to_owned()],
        attempts: vec![AttemptRecord {
            attempt: 0,
            at: datetime!(2026-12-01 10:00:00 UTC),
            error_chain: vec!["commit failed".to_owned(), "no repository".to_owned()],
        }],
        dead_lettered_at: datetime!(2026-12-01 10:05:00 UTC),
        origin: "host".to_owned(),
        status: DeadLetterStatus::Dead,
        replays: vec![],
    }
}

fn text(write: impl FnOnce(&mut Vec<u8>) -> Result<()>) -> String {
    let mut out = Vec::new();
    write(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn the_list_is_a_table_of_one_line_per_dead_letter() {
    let mut native = record();
    native.id = Uuid::from_u128(2);
    native.consumer = None;
    native.message_type = None;
    native.status = DeadLetterStatus::Replayed;
    native.reason = "MaxDeliveryCountExceeded".to_owned();
    let table = text(|out| write_list(out, &[record(), native]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines,
        [
            "ID                                    DEAD-LETTERED         CONSUMER  TYPE          STATUS    REASON",
            "01910000-0000-7000-8000-000000000001  2026-12-01T10:05:00Z  commit    CreateCommit  dead      \
             retries-exhausted",
            "00000000-0000-0000-0000-000000000002  2026-12-01T10:05:00Z  -         -             replayed  \
             MaxDeliveryCountExceeded",
        ]
    );
    assert_eq!(text(|out| write_list(out, &[])), "no dead letters\n");
}

#[test]
fn show_prints_every_field_the_chain_by_depth_and_the_original() {
    let mut replayed = record();
    replayed.status = DeadLetterStatus::Replayed;
    replayed.replays = vec![ReplayRecord {
        replay_id: Uuid::from_u128(9),
        by: "test-operator".to_owned(),
        at: datetime!(2026-12-01 11:00:00 UTC),
        destination: "commit".to_owned(),
        broker_message_id: "broker-2".to_owned(),
        edit: None,
    }];
    assert_eq!(
        text(|out| write_dead_letter(out, &replayed)),
        "dead letter    01910000-0000-7000-8000-000000000001\n\
         status         replayed\n\
         consumer       commit\n\
         entity         commit\n\
         message        CreateCommit msg-1\n\
         correlation    corr-1\n\
         tenant         contoso\n\
         origin         host\n\
         dead-lettered  2026-12-01T10:05:00Z\n\
         trace          -\n\
         reason         retries-exhausted\n\
         description    no repository payments-api\n\
         error chain:\n  \
         commit failed\n    \
         no repository payments-api\n\
         attempts:\n  \
         #0 2026-12-01T10:00:00Z  commit failed: no repository\n\
         replays:\n  \
         2026-12-01T11:00:00Z by test-operator to commit (00000000-0000-0000-0000-000000000009)\n\
         original message (29 bytes):\n\
         {\n  \"repository\": \"payments-api\"\n}\n"
    );
}

#[test]
fn show_prints_an_original_that_is_not_json_as_text() {
    let mut raw = record();
    raw.body = b"not json \xff".to_vec();
    let shown = text(|out| write_dead_letter(out, &raw));
    assert!(shown.contains("replays:\n  none\n"), "{shown}");
    assert!(
        shown.ends_with("original message (10 bytes):\nnot json \u{fffd}\n"),
        "{shown}"
    );
}

#[test]
fn show_names_the_trace_of_the_original_envelope() {
    let mut traced = record();
    traced.body = br#"{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}"#.to_vec();
    let shown = text(|out| write_dead_letter(out, &traced));
    assert!(
        shown.contains("trace          4bf92f3577b34da6a3ce929d0e0e4736\n"),
        "{shown}"
    );
    let json = serde_json::to_value(view(&traced)).unwrap();
    assert_eq!(json["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
}

#[test]
fn json_has_the_record_and_the_original_message() {
    let record = record();
    let json = serde_json::to_value(view(&record)).unwrap();
    assert_eq!(json["id"], "01910000-0000-7000-8000-000000000001");
    assert_eq!(json["messageType"], "CreateCommit");
    assert_eq!(json["status"], "dead");
    assert_eq!(json["original"], serde_json::json!({"repository": "payments-api"}));
    let mut raw = record.clone();
    raw.body = b"plain".to_vec();
    assert_eq!(serde_json::to_value(view(&raw)).unwrap()["original"], "plain");
}
