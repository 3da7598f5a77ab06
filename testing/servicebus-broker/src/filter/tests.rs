//! Tests of `testing/servicebus-broker/src/filter.rs`.

use super::*;
use std::collections::HashMap;

#[derive(Default)]
struct Msg {
    sys: HashMap<String, SqlValue>,
    user: HashMap<String, SqlValue>,
}

impl FilterSubject for Msg {
    fn system(&self, name: &str) -> Option<SqlValue> {
        self.sys.get(name).cloned()
    }
    fn user(&self, name: &str) -> Option<SqlValue> {
        self.user.get(name).cloned()
    }
}

fn msg(sys: &[(&str, SqlValue)], user: &[(&str, SqlValue)]) -> Msg {
    Msg {
        sys: sys.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect(),
        user: user.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect(),
    }
}

fn s(v: &str) -> SqlValue {
    SqlValue::String(v.to_owned())
}

fn eval_str(expr: &str, m: &Msg) -> Option<bool> {
    let f = SqlFilter::parse(expr).unwrap_or_else(|e| panic!("parse {expr:?}: {e}"));
    let r = f.evaluate(m);
    assert_eq!(f.matches(m), r == Some(true), "{expr}");
    r
}

/// (expression, expected three-valued result) against one message.
fn run_table(m: &Msg, table: &[(&str, Option<bool>)]) {
    for (expr, expected) in table {
        assert_eq!(eval_str(expr, m), *expected, "expression: {expr}");
    }
}

const T: Option<bool> = Some(true);
const F: Option<bool> = Some(false);
const U: Option<bool> = None;

#[test]
fn label_in_list() {
    let f = SqlFilter::parse("sys.Label IN ('ReleaseApproved','BuildCompleted')").unwrap();
    for (label, expected) in [
        ("ReleaseApproved", true),
        ("BuildCompleted", true),
        ("BuildFailed", false),
        ("releaseapproved", false),
    ] {
        let m = msg(&[("Label", s(label))], &[]);
        assert_eq!(f.matches(&m), expected, "{label}");
    }
    // Missing label: UNKNOWN, no match, and NOT IN does not match either.
    let empty = Msg::default();
    assert_eq!(f.evaluate(&empty), None);
    let not_in = SqlFilter::parse("sys.Label NOT IN ('ReleaseApproved','BuildCompleted')").unwrap();
    assert!(!not_in.matches(&empty));
    assert!(not_in.matches(&msg(&[("Label", s("Other"))], &[])));
    assert!(!not_in.matches(&msg(&[("Label", s("BuildCompleted"))], &[])));
}

#[test]
fn label_and_not_exists() {
    let f = SqlFilter::parse("sys.Label = 'x' AND NOT EXISTS(user.skip)").unwrap();
    let cases = [
        (msg(&[("Label", s("x"))], &[]), true),
        (msg(&[("Label", s("x"))], &[("skip", SqlValue::Bool(true))]), false),
        (msg(&[("Label", s("x"))], &[("skip", SqlValue::Null)]), false),
        (msg(&[("Label", s("y"))], &[]), false),
        (msg(&[], &[]), false),
    ];
    for (i, (m, expected)) in cases.iter().enumerate() {
        assert_eq!(f.matches(m), *expected, "case {i}");
    }
}

#[test]
fn three_valued_truth_tables() {
    // `t`, `f` are boolean properties; `missing` is absent -> UNKNOWN.
    let m = msg(&[], &[("t", SqlValue::Bool(true)), ("f", SqlValue::Bool(false))]);
    let atoms = [("t = TRUE", T), ("t = FALSE", F), ("missing = 1", U)];
    let and = |a: Option<bool>, b: Option<bool>| match (a, b) {
        (Some(false), _) | (_, Some(false)) => F,
        (Some(true), Some(true)) => T,
        _ => U,
    };
    let or = |a: Option<bool>, b: Option<bool>| match (a, b) {
        (Some(true), _) | (_, Some(true)) => T,
        (Some(false), Some(false)) => F,
        _ => U,
    };
    for (ea, va) in atoms {
        assert_eq!(eval_str(&format!("NOT ({ea})"), &m), va.map(|b| !b), "NOT {ea}");
        for (eb, vb) in atoms {
            let e = format!("({ea}) AND ({eb})");
            assert_eq!(eval_str(&e, &m), and(va, vb), "{e}");
            let e = format!("({ea}) OR ({eb})");
            assert_eq!(eval_str(&e, &m), or(va, vb), "{e}");
        }
    }
    run_table(
        &m,
        &[
            ("missing = 'a'", U),
            ("NOT missing = 'a'", U),
            ("missing <> 'a'", U),
            ("missing = 1 AND 1 = 0", F),
            ("missing = 1 OR 1 = 1", T),
            ("missing = 1 OR 1 = 0", U),
            ("missing = 1 AND 1 = 1", U),
            ("NOT (missing = 1 AND 1 = 0)", T),
            ("t", T),
            ("f", F),
            ("NOT f", T),
            ("t AND f", F),
            ("missing AND f", F),
            ("missing OR t", T),
            ("NULL = NULL", U),
            ("NULL <> 1", U),
            ("NOT NULL", U),
            ("5", U),
            ("'a' AND t", U),
        ],
    );
}

#[test]
fn special_filters() {
    let m = Msg::default();
    run_table(
        &m,
        &[
            ("1=1", T),
            ("1=0", F),
            ("1 = 1", T),
            ("TRUE", T),
            ("FALSE", F),
            ("NOT 1=0", T),
            ("true = TrUe", T),
        ],
    );
}

#[test]
fn comparisons_and_numeric_coercion() {
    let m = msg(
        &[("DeliveryCount", SqlValue::Int(3))],
        &[
            ("i", SqlValue::Int(10)),
            ("f", SqlValue::Float(10.0)),
            ("g", SqlValue::Float(2.5)),
            ("str", s("10")),
            ("name", s("abc")),
            ("nan", SqlValue::Float(f64::NAN)),
            ("b", SqlValue::Bool(true)),
            ("nul", SqlValue::Null),
        ],
    );
    run_table(
        &m,
        &[
            ("i = 10", T),
            ("i = 10.0", T),
            ("f = 10", T),
            ("i = f", T),
            ("i <> f", F),
            ("i != 11", T),
            ("i > 9.5", T),
            ("i >= 10", T),
            ("i < 10", F),
            ("i <= 10.0", T),
            ("g < i", T),
            ("g * 4 = i", T),
            ("i / 4 = 2", T),     // integer division truncates
            ("i / 4.0 = 2.5", T), // promoted to float
            ("i % 3 = 1", T),
            ("i + 1 = 11", T),
            ("i - 20 = -10", T),
            ("-i = -10", T),
            ("+i = 10", T),
            ("2 + 3 * 4 = 14", T),
            ("(2 + 3) * 4 = 20", T),
            ("10 - 2 - 3 = 5", T),
            ("1e3 = 1000", T),
            ("1.5E-1 = 0.15", T),
            ("101.5E5 = 10150000", T),
            (".5 = 0.5", T),
            ("1. = 1", T),
            ("i / 0 = 1", U),
            ("i / 0.0 > 1000000", T),           // float division: +infinity
            ("9223372036854775807 + 1 > 0", U), // overflow
            ("-9223372036854775808 < 0", T),
            ("str = 10", U), // string vs number: UNKNOWN
            ("NOT str = 10", U),
            ("str = '10'", T),
            ("name > 'abb'", T),
            ("name < 'abd'", T),
            ("name = 'ABC'", F), // ordinal, case-sensitive
            ("'B' < 'a'", T),    // ordinal: uppercase sorts first
            ("name + 'def' = 'abcdef'", T),
            ("name + 1 = 'abc1'", U),
            ("nan = nan", F),
            ("nan <> nan", T),
            ("b = TRUE", T),
            ("b <> FALSE", T),
            ("b > FALSE", U),
            ("b = 1", U),
            ("nul = 1", U),
            ("sys.DeliveryCount > 2", T),
            ("sys.DeliveryCount + i = 13", T),
            ("i IN (1, 2, 10.0)", T),
            ("i IN (1, 2)", F),
            ("i IN (1, missing)", U),
            ("i IN (10, missing)", T),
            ("i NOT IN (1, missing)", U),
            ("i NOT IN (1, 2)", T),
            ("i IN ('10')", U),
            ("name IN ('x', 'abc')", T),
            ("i IN (5 + 5)", T),
        ],
    );
}

#[test]
fn null_and_exists() {
    let m = msg(
        &[("Label", s("l")), ("To", SqlValue::Null)],
        &[("color", s("red")), ("nothing", SqlValue::Null)],
    );
    run_table(
        &m,
        &[
            ("color IS NULL", F),
            ("color IS NOT NULL", T),
            ("missing IS NULL", T),
            ("missing IS NOT NULL", F),
            ("nothing IS NULL", T),
            ("nothing is not null", F),
            ("sys.To IS NULL", T),
            ("sys.ReplyTo IS NULL", T),
            ("sys.Label IS NOT NULL", T),
            ("EXISTS(color)", T),
            ("EXISTS(user.color)", T),
            ("EXISTS ( [color] )", T),
            ("EXISTS(missing)", F),
            ("NOT EXISTS(missing)", T),
            ("EXISTS(nothing)", T),
            ("EXISTS(sys.Label)", T),
            ("EXISTS(sys.label)", T),
            ("EXISTS(sys.ReplyTo)", F),
            ("NOT EXISTS(sys.ReplyTo)", T),
            ("exists(missing) or color = 'red'", T),
            ("(missing + 1) IS NULL", T),
        ],
    );
}

#[test]
fn like_patterns() {
    let m = msg(
        &[("Label", s("Service Bus"))],
        &[
            ("p", s("ABC%")),
            ("q", s("a_b")),
            ("u", s("héllo wörld")),
            ("n", SqlValue::Int(5)),
            ("pat", s("%Bus")),
            ("esc", s("!")),
            ("twochars", s("!!")),
        ],
    );
    run_table(
        &m,
        &[
            ("sys.Label LIKE '%bus%'", F),
            ("sys.Label LIKE '%Bus%'", T),
            ("sys.Label LIKE 'Service%'", T),
            ("sys.Label LIKE 'Service'", F),
            ("sys.Label LIKE '%'", T),
            ("sys.Label LIKE '%%%'", T),
            ("sys.Label LIKE 'S_rvice Bus'", T),
            ("sys.Label LIKE 'S_rvice Bu'", F),
            ("sys.Label LIKE '_ervice%s'", T),
            ("sys.Label LIKE '%e%e%s'", T),
            ("sys.Label LIKE '%x%'", F),
            ("sys.Label NOT LIKE '%x%'", T),
            ("sys.Label NOT LIKE 'Serv%'", F),
            ("p LIKE 'ABC!%' ESCAPE '!'", T),
            ("p LIKE 'ABC\\%' ESCAPE '\\'", T),
            ("'ABCD' LIKE 'ABC!%' ESCAPE '!'", F),
            ("'ABCD' LIKE 'ABC%' ESCAPE '!'", T),
            ("p LIKE 'ABC%'", T),
            ("q LIKE 'a!_b' ESCAPE '!'", T),
            ("'axb' LIKE 'a!_b' ESCAPE '!'", F),
            ("'axb' LIKE 'a_b'", T),
            ("'a!b' LIKE 'a!!b' ESCAPE '!'", T),
            ("'it''s' LIKE 'it''%'", T),
            ("u LIKE 'h_llo w_rld'", T),
            ("u LIKE '%ö%'", T),
            ("'' LIKE '%'", T),
            ("'' LIKE '_'", F),
            ("'aaa' LIKE 'a%a%a'", T),
            ("'aa' LIKE 'a%a%a'", F),
            ("missing LIKE '%'", U),
            ("missing NOT LIKE '%'", U),
            ("n LIKE '5'", U),
            ("sys.Label LIKE pat", T),
            ("sys.Label LIKE missing", U),
            ("'a%' LIKE 'a#%' ESCAPE '#'", T),
            ("sys.Label LIKE '%' + 'Bus'", T),
            ("p LIKE 'ABC!%' ESCAPE esc", T),
            ("'ABCD' LIKE 'ABC!%' ESCAPE esc", F),
            ("p LIKE 'ABC!%' ESCAPE missing", U),
            ("p LIKE 'ABC!%' ESCAPE twochars", U),
            ("p LIKE 'ABC!' ESCAPE esc", U),
        ],
    );
}

#[test]
fn property_references() {
    let m = msg(
        &[("Label", s("L")), ("MessageId", s("m1")), ("CorrelationId", s("c1"))],
        &[
            ("color", s("red")),
            ("Color", s("RED")),
            ("name with spaces", s("v")),
            ("HR-EmployeeId", SqlValue::Int(7)),
            ("a]b", s("x")),
            ("not", s("kw")),
            ("Label", s("userlabel")),
            ("sys", s("plain")),
        ],
    );
    run_table(
        &m,
        &[
            ("color = 'red'", T),
            ("user.color = 'red'", T),
            ("USER.color = 'red'", T),
            ("Color = 'RED'", T), // user names are case-preserved
            ("[name with spaces] = 'v'", T),
            ("user.[name with spaces] = 'v'", T),
            ("\"name with spaces\" = 'v'", T),
            ("[HR-EmployeeId] = 7", T),
            ("[a]]b] = 'x'", T),
            ("[not] = 'kw'", T),
            ("user.not = 'kw'", T),
            ("sys.Label = 'L'", T),
            ("SYS.LABEL = 'L'", T),
            ("sys.messageid = 'm1'", T),
            ("sys.correlationid LIKE 'c%'", T),
            ("Label = 'userlabel'", T),
            ("user.Label = 'userlabel'", T),
            ("sys = 'plain'", T),
            ("sys.NoSuchThing = 1", U),
            ("property('color') = 'red'", T),
            ("PROPERTY('sys.Label') = 'L'", T),
            ("property('user.' + 'color') = 'red'", T),
            ("property(1) = 1", U),
        ],
    );
}

#[test]
fn precedence_and_keywords() {
    let m = msg(&[], &[("a", SqlValue::Int(1)), ("b", SqlValue::Int(2))]);
    run_table(
        &m,
        &[
            // OR binds looser than AND.
            ("a = 1 OR a = 2 AND b = 3", T),
            ("(a = 1 OR a = 2) AND b = 3", F),
            // NOT binds tighter than AND/OR, looser than comparison.
            ("NOT a = 2 AND b = 2", T),
            ("NOT a = 1 OR b = 2", T),
            ("NOT (a = 1 OR b = 2)", F),
            ("NOT NOT a = 1", T),
            ("a = 1 and b = 2", T),
            ("a = 1 AnD not b = 3", T),
            ("a in (1) oR b LIKE 'x'", T),
            ("a+b*2=5", T),
            ("a - -1 = 2", T),
            ("-(a + b) = -3", T),
            ("'x' = 'x' AND (1 = 1 OR 1 = 0)", T),
        ],
    );
}

#[test]
fn string_literals() {
    let m = msg(&[], &[("q", s("it's"))]);
    run_table(
        &m,
        &[
            ("q = 'it''s'", T),
            ("'' = ''", T),
            ("'''' = ''''", T),
            ("'a' + 'b' = 'ab'", T),
        ],
    );
}

#[test]
fn parse_errors_name_position() {
    let cases: &[(&str, usize, &str)] = &[
        ("", 0, "expected an expression"),
        ("sys.Label =", 11, "expected an expression"),
        ("sys.Label = 'x' AND", 19, "expected an expression"),
        ("color = 'red", 8, "unterminated string"),
        ("[color = 1", 0, "expected closing ]"),
        ("a = 1 b = 2", 6, "expected AND, OR, or end of expression"),
        ("a IN (1, 2", 10, "expected ',' or ')' in IN list"),
        ("a IN 1", 5, "expected '(' after IN"),
        ("a IS 1", 5, "expected NULL or NOT NULL"),
        ("a IS NOT 1", 9, "expected NULL"),
        ("(a = 1", 6, "expected ')'"),
        ("a = 1)", 5, "found ')'"),
        ("a # 1", 2, "character '#'"),
        ("a = 12abc", 4, "invalid number"),
        ("a = 1e", 4, "exponent"),
        ("a = 99999999999999999999", 4, "64-bit"),
        ("a = 9223372036854775808", 4, "64-bit signed"),
        ("EXISTS color", 7, "'(' after EXISTS"),
        ("EXISTS(1)", 7, "a property name"),
        ("a LIKE 'x' ESCAPE 'ab'", 18, "exactly one character"),
        ("a LIKE 'x!' ESCAPE '!'", 7, "after the escape character"),
        ("a LIKE 5", 7, "string pattern"),
        ("a = AND", 4, "expected an expression"),
        ("sys. = 1", 5, "property name after the scope"),
        ("foo(1) = 1", 0, "known function"),
        ("a NOT = 1", 2, "expected AND, OR, or end of expression"),
        ("1 = 1 = 1", 6, "found '='"),
        ("é = 1 AND ü @", 12, "position 12"),
    ];
    for (expr, pos, needle) in cases {
        let err = SqlFilter::parse(expr).expect_err(expr);
        assert_eq!(err.position(), *pos, "{expr}: {err}");
        let text = err.to_string();
        assert!(text.contains(needle), "{expr}: {text:?} lacks {needle:?}");
        assert!(text.contains(&format!("position {pos}")), "{expr}: {text:?}");
    }
}

#[test]
fn nesting_limit() {
    let ok = format!("{}1 = 1{}", "(".repeat(100), ")".repeat(100));
    assert!(SqlFilter::parse(&ok).unwrap().matches(&Msg::default()));
    let nots = format!("{}1 = 0", "NOT ".repeat(101));
    assert_eq!(SqlFilter::parse(&nots).unwrap().evaluate(&Msg::default()), Some(true));
    let deep = format!("{}1 = 1{}", "(".repeat(100_000), ")".repeat(100_000));
    let err = SqlFilter::parse(&deep).unwrap_err();
    assert_eq!(err.position(), 128);
    assert!(err.to_string().contains("nesting"), "{err}");
    let signs = format!("a = {}1", "-".repeat(100_000));
    assert!(SqlFilter::parse(&signs).is_err());
    let nots = format!("{}1 = 1", "NOT ".repeat(100_000));
    assert!(SqlFilter::parse(&nots).is_err());
}

#[test]
fn error_variants() {
    assert!(matches!(
        SqlFilter::parse("a = 'x"),
        Err(FilterError::UnterminatedString { position: 4 })
    ));
    assert!(matches!(
        SqlFilter::parse("\"abc = 1"),
        Err(FilterError::UnterminatedIdentifier {
            position: 0,
            expected: '"'
        })
    ));
    match SqlFilter::parse("a <") {
        Err(FilterError::Syntax {
            position,
            expected,
            found,
        }) => {
            assert_eq!(position, 3);
            assert!(expected.contains("expression"));
            assert_eq!(found, "end of expression");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn filter_api() {
    let f: SqlFilter = "1=1".parse().unwrap();
    assert_eq!(f.expression(), "1=1");
    assert_eq!(f.to_string(), "1=1");
    assert_eq!(SqlValue::from("x"), s("x"));
    assert_eq!(SqlValue::from(3), SqlValue::Int(3));
    assert_eq!(SqlValue::from(2.0), SqlValue::Float(2.0));
    assert_eq!(SqlValue::from(true), SqlValue::Bool(true));
}

#[test]
fn like_matcher_direct() {
    let cases = [
        ("", "", true),
        ("%", "", true),
        ("_", "", false),
        ("a%b%c", "abc", true),
        ("a%b%c", "aXbYc", true),
        ("a%b%c", "aXbY", false),
        ("%abc", "ababc", true),
        ("%a_c", "abcabc", true),
        ("ab", "abc", false),
        ("abc", "ab", false),
    ];
    for (pat, text, expected) in cases {
        let toks = compile_like(pat, None).unwrap();
        assert_eq!(like_match(&toks, text), expected, "{pat} / {text}");
    }
}
