//! JUnit XML test reports, parsed into test cases and counts.
//!
//! Accepts what the common reporters write: a `<testsuites>` root or a
//! single `<testsuite>` root, suites nested in suites (Ant, JUnit 5,
//! pytest, the .NET `JunitXml.TestLogger`), and `<testcase>` elements with
//! `<failure>`, `<error>` or `<skipped>` children. Surefire's
//! `<flakyFailure>`/`<rerunFailure>` children do not change a test's
//! outcome (a flaky test passed in the end; a test that failed every rerun
//! also has a `<failure>`).
//!
//! Tests are counted from the `<testcase>` elements. A suite that lists no
//! test case but carries the `tests`/`failures`/`errors`/`skipped`
//! attributes (some reporters write only counts) is counted from those,
//! unless a suite inside it already counted. A document that ends before
//! its suites are closed (a test process killed while writing) is an
//! error, not a smaller count.

use bosun_contracts::messages::TestSummary;
use quick_xml::XmlVersion;
use quick_xml::events::{BytesStart, Event};
use serde::{Deserialize, Serialize};

/// Longest failure message kept per test.
pub const MAX_MESSAGE_CHARS: usize = 2000;

/// How one test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TestOutcome {
    /// Passed.
    Passed,
    /// An assertion failed (`<failure>`).
    Failed,
    /// The test errored (`<error>`); counted as failed.
    Errored,
    /// Skipped or ignored (`<skipped>`).
    Skipped,
}

impl TestOutcome {
    /// Whether the test counts as failed.
    pub fn is_failure(self) -> bool {
        matches!(self, Self::Failed | Self::Errored)
    }
}

/// One `<testcase>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TestCase {
    /// Name of the innermost enclosing suite.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub suite: String,
    /// The `classname` attribute.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub classname: String,
    /// The `name` attribute.
    pub name: String,
    /// How it ended.
    pub outcome: TestOutcome,
    /// The `time` attribute, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The failure's, error's or skip's message (its `message` attribute,
    /// else the first line of its text), shortened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl TestCase {
    /// `classname.name`, or the name alone when it already starts with the
    /// class name or there is none.
    pub fn display_name(&self) -> String {
        let name = if self.name.trim().is_empty() {
            "(unnamed test)"
        } else {
            self.name.trim()
        };
        let classname = self.classname.trim();
        if classname.is_empty() || name.starts_with(classname) {
            name.to_owned()
        } else {
            format!("{classname}.{name}")
        }
    }
}

/// A parsed JUnit document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JunitReport {
    /// Number of `<testsuite>` elements.
    pub suites: u32,
    /// Every `<testcase>`, in document order.
    pub cases: Vec<TestCase>,
    /// The counts: the test cases plus suites counted from their attributes.
    pub summary: TestSummary,
}

/// Why a document could not be read as JUnit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JunitError {
    /// Not UTF-8 or UTF-16 text.
    #[error("not UTF-8 or UTF-16 text")]
    Encoding,
    /// Not well-formed XML (or cut short).
    #[error("malformed XML at byte {position}: {reason}")]
    Malformed {
        /// Byte offset in the (decoded) document.
        position: u64,
        /// What is wrong.
        reason: String,
    },
    /// Well-formed, but not a JUnit report.
    #[error("not a JUnit report: the root element is <{root}>, not <testsuites> or <testsuite>")]
    NotJunit {
        /// The root element found.
        root: String,
    },
}

/// Decodes a document: UTF-8 (with or without a byte order mark) or UTF-16
/// with a byte order mark.
fn decode(bytes: &[u8]) -> Result<String, JunitError> {
    if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF".as_slice()) {
        return String::from_utf8(rest.to_vec()).map_err(|_| JunitError::Encoding);
    }
    let utf16 = |rest: &[u8], from: fn([u8; 2]) -> u16| {
        if !rest.len().is_multiple_of(2) {
            return Err(JunitError::Encoding);
        }
        let units = rest.chunks_exact(2).map(|pair| from([pair[0], pair[1]]));
        char::decode_utf16(units)
            .collect::<Result<String, _>>()
            .map_err(|_| JunitError::Encoding)
    };
    if let Some(rest) = bytes.strip_prefix(b"\xFF\xFE".as_slice()) {
        return utf16(rest, u16::from_le_bytes);
    }
    if let Some(rest) = bytes.strip_prefix(b"\xFE\xFF".as_slice()) {
        return utf16(rest, u16::from_be_bytes);
    }
    String::from_utf8(bytes.to_vec()).map_err(|_| JunitError::Encoding)
}

/// The counts a suite declares in its attributes.
#[derive(Debug, Clone, Copy)]
struct DeclaredCounts {
    tests: u32,
    failed: u32,
    skipped: u32,
}

struct SuiteFrame {
    name: String,
    declared: Option<DeclaredCounts>,
    /// Whether this suite (or one inside it) counted any test.
    counted: bool,
}

struct CaseFrame {
    case: TestCase,
    /// Text of the `<failure>`/`<error>`/`<skipped>` being read.
    text: String,
    /// Depth of the element whose text is captured, when capturing.
    capture_depth: Option<usize>,
}

/// Reads an attribute (by local name) of an element.
fn attribute(element: &BytesStart<'_>, name: &str) -> Result<Option<String>, quick_xml::Error> {
    for attribute in element.attributes().with_checks(false) {
        let attribute = attribute?;
        if attribute.key.local_name().as_ref() == name {
            return Ok(Some(attribute.normalized_value(XmlVersion::Implicit1_0)?.into_owned()));
        }
    }
    Ok(None)
}

fn count_attribute(element: &BytesStart<'_>, name: &str) -> Result<Option<u32>, quick_xml::Error> {
    Ok(attribute(element, name)?.and_then(|value| value.trim().parse::<u32>().ok()))
}

fn declared_counts(element: &BytesStart<'_>) -> Result<Option<DeclaredCounts>, quick_xml::Error> {
    let Some(tests) = count_attribute(element, "tests")? else {
        return Ok(None);
    };
    let failures = count_attribute(element, "failures")?.unwrap_or(0);
    let errors = count_attribute(element, "errors")?.unwrap_or(0);
    let skipped = count_attribute(element, "skipped")?.unwrap_or(0);
    let failed = failures.saturating_add(errors).min(tests);
    Ok(Some(DeclaredCounts {
        tests,
        failed,
        skipped: skipped.min(tests - failed),
    }))
}

/// `time="1.25"` in milliseconds.
fn duration_ms(value: &str) -> Option<u64> {
    let seconds: f64 = value.trim().replace(',', "").parse().ok()?;
    if seconds.is_finite() && seconds >= 0.0 {
        // Rounded milliseconds of a finite, non-negative number of seconds.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Some((seconds * 1000.0).round() as u64)
    } else {
        None
    }
}

fn shorten(text: &str) -> String {
    let mut short: String = text.chars().take(MAX_MESSAGE_CHARS).collect();
    if text.chars().nth(MAX_MESSAGE_CHARS).is_some() {
        short.push('…');
    }
    short
}

fn add(summary: &mut TestSummary, outcome: TestOutcome) {
    summary.total = summary.total.saturating_add(1);
    match outcome {
        TestOutcome::Passed => summary.passed = summary.passed.saturating_add(1),
        TestOutcome::Failed | TestOutcome::Errored => summary.failed = summary.failed.saturating_add(1),
        TestOutcome::Skipped => summary.skipped = summary.skipped.saturating_add(1),
    }
}

/// Parses one JUnit XML document.
pub fn parse(bytes: &[u8]) -> Result<JunitReport, JunitError> {
    let text = decode(bytes)?;
    let mut reader = quick_xml::Reader::from_str(&text);
    // Text is kept whole: a message split around `&amp;` keeps its spaces.
    reader.config_mut().trim_text(false);
    let malformed = |position: u64, err: &dyn std::fmt::Display| JunitError::Malformed {
        position,
        reason: err.to_string(),
    };

    let mut report = JunitReport::default();
    let mut suites: Vec<SuiteFrame> = Vec::new();
    let mut case: Option<CaseFrame> = None;
    let mut depth = 0usize;
    let mut seen_root = false;

    loop {
        let event = reader
            .read_event()
            .map_err(|err| malformed(reader.buffer_position(), &err))?;
        let (element, empty) = match event {
            Event::Start(element) => (element, false),
            Event::Empty(element) => (element, true),
            Event::End(end) => {
                depth = depth.saturating_sub(1);
                let name = end.local_name().as_ref().to_owned();
                close(&name, depth, &mut case, &mut suites, &mut report);
                continue;
            }
            Event::Text(text) => {
                if let Some(frame) = case.as_mut().filter(|frame| frame.capture_depth.is_some())
                    && frame.text.len() < MAX_MESSAGE_CHARS * 4
                {
                    frame.text.push_str(&text.xml_content(XmlVersion::Implicit1_0));
                }
                continue;
            }
            Event::CData(data) => {
                if let Some(frame) = case.as_mut().filter(|frame| frame.capture_depth.is_some())
                    && frame.text.len() < MAX_MESSAGE_CHARS * 4
                {
                    frame.text.push_str(&data.xml_content(XmlVersion::Implicit1_0));
                }
                continue;
            }
            Event::GeneralRef(reference) => {
                if let Some(frame) = case.as_mut().filter(|frame| frame.capture_depth.is_some()) {
                    let resolved = match reference.resolve_char_ref() {
                        Ok(Some(c)) => Some(c),
                        _ => match reference.xml_content(XmlVersion::Implicit1_0).as_ref() {
                            "amp" => Some('&'),
                            "lt" => Some('<'),
                            "gt" => Some('>'),
                            "quot" => Some('"'),
                            "apos" => Some('\''),
                            _ => None,
                        },
                    };
                    if let Some(c) = resolved {
                        frame.text.push(c);
                    }
                }
                continue;
            }
            Event::Eof => break,
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) | Event::DocType(_) => continue,
        };
        let name = element.local_name().as_ref().to_owned();
        if !seen_root {
            seen_root = true;
            if name != "testsuites" && name != "testsuite" {
                return Err(JunitError::NotJunit { root: name });
            }
        }
        let position = reader.buffer_position();
        let read = |err: quick_xml::Error| malformed(position, &err);
        match (name.as_str(), case.as_mut()) {
            ("testsuites" | "testsuite", None) => {
                if name == "testsuite" {
                    report.suites = report.suites.saturating_add(1);
                }
                suites.push(SuiteFrame {
                    name: attribute(&element, "name").map_err(read)?.unwrap_or_default(),
                    declared: declared_counts(&element).map_err(read)?,
                    counted: false,
                });
            }
            ("testcase", None) => {
                let suite = suites.last().map(|suite| suite.name.clone()).unwrap_or_default();
                case = Some(CaseFrame {
                    case: TestCase {
                        suite,
                        classname: attribute(&element, "classname").map_err(read)?.unwrap_or_default(),
                        name: attribute(&element, "name").map_err(read)?.unwrap_or_default(),
                        outcome: TestOutcome::Passed,
                        duration_ms: attribute(&element, "time")
                            .map_err(read)?
                            .as_deref()
                            .and_then(duration_ms),
                        message: None,
                    },
                    text: String::new(),
                    capture_depth: None,
                });
            }
            ("failure" | "error" | "skipped", Some(frame)) if frame.capture_depth.is_none() => {
                let outcome = match name.as_str() {
                    "failure" => TestOutcome::Failed,
                    "error" => TestOutcome::Errored,
                    _ => TestOutcome::Skipped,
                };
                // A failure outranks a skip; the first failure's message is kept.
                let replaces = matches!(
                    (frame.case.outcome, outcome),
                    (TestOutcome::Passed, _) | (TestOutcome::Skipped, TestOutcome::Failed | TestOutcome::Errored)
                );
                if replaces {
                    frame.case.outcome = outcome;
                    frame.case.message = attribute(&element, "message")
                        .map_err(read)?
                        .filter(|message| !message.trim().is_empty())
                        .map(|message| shorten(message.trim()));
                    frame.text.clear();
                    if !empty {
                        frame.capture_depth = Some(depth);
                    }
                }
            }
            _ => {}
        }
        if empty {
            close(&name, depth, &mut case, &mut suites, &mut report);
        } else {
            depth += 1;
        }
    }
    if !suites.is_empty() || case.is_some() {
        return Err(JunitError::Malformed {
            position: reader.buffer_position(),
            reason: "the document ends before its test suites are closed".to_owned(),
        });
    }
    if !seen_root {
        return Err(JunitError::Malformed {
            position: 0,
            reason: "the document has no root element".to_owned(),
        });
    }
    Ok(report)
}

/// Handles the end of element `name` whose start was at `depth`.
fn close(
    name: &str,
    depth: usize,
    case: &mut Option<CaseFrame>,
    suites: &mut Vec<SuiteFrame>,
    report: &mut JunitReport,
) {
    if let Some(frame) = case.as_mut() {
        if frame.capture_depth == Some(depth) {
            frame.capture_depth = None;
            if frame.case.message.is_none() {
                frame.case.message = frame
                    .text
                    .lines()
                    .map(str::trim)
                    .find(|line| !line.is_empty())
                    .map(shorten);
            }
            return;
        }
        if name == "testcase"
            && frame.capture_depth.is_none()
            && let Some(done) = case.take()
        {
            add(&mut report.summary, done.case.outcome);
            report.cases.push(done.case);
            if let Some(suite) = suites.last_mut() {
                suite.counted = true;
            }
        }
        return;
    }
    if name == "testsuites" || name == "testsuite" {
        let Some(suite) = suites.pop() else { return };
        let counted = if suite.counted {
            true
        } else if let Some(declared) = suite.declared {
            let summary = &mut report.summary;
            let passed = declared.tests - declared.failed - declared.skipped;
            summary.total = summary.total.saturating_add(declared.tests);
            summary.passed = summary.passed.saturating_add(passed);
            summary.failed = summary.failed.saturating_add(declared.failed);
            summary.skipped = summary.skipped.saturating_add(declared.skipped);
            true
        } else {
            false
        };
        if counted && let Some(parent) = suites.last_mut() {
            parent.counted = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_cases_with_every_outcome() {
        let xml = br#"<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="calc" tests="4" failures="1" errors="1" skipped="1">
  <testcase classname="CalcTest" name="adds" time="0.012"/>
  <testcase classname="CalcTest" name="divides"><failure message="expected 2 but was 3">at CalcTest.divides</failure></testcase>
  <testcase classname="CalcTest" name="roots"><error type="java.lang.ArithmeticException">boom &amp; bust
  second line</error></testcase>
  <testcase classname="CalcTest" name="later"><skipped/></testcase>
</testsuite>"#;
        let report = parse(xml).unwrap();
        assert_eq!(
            report.summary,
            TestSummary {
                total: 4,
                passed: 1,
                failed: 2,
                skipped: 1
            }
        );
        assert_eq!(report.suites, 1);
        assert_eq!(report.cases[0].duration_ms, Some(12));
        assert_eq!(report.cases[1].message.as_deref(), Some("expected 2 but was 3"));
        assert_eq!(report.cases[2].outcome, TestOutcome::Errored);
        assert_eq!(report.cases[2].message.as_deref(), Some("boom & bust"));
        assert_eq!(report.cases[3].outcome, TestOutcome::Skipped);
        assert_eq!(report.cases[1].display_name(), "CalcTest.divides");
    }

    #[test]
    fn nested_suites_count_cases_once_and_attribute_only_suites_count() {
        let xml = br#"<testsuites tests="99" failures="9">
  <testsuite name="outer" tests="3">
    <testsuite name="inner"><testcase name="a"/><testcase name="b"><failure/></testcase></testsuite>
    <testsuite name="counts-only" tests="5" failures="1" errors="1" skipped="2"/>
  </testsuite>
</testsuites>"#;
        let report = parse(xml).unwrap();
        assert_eq!(
            report.summary,
            TestSummary {
                total: 7,
                passed: 2,
                failed: 3,
                skipped: 2
            }
        );
        assert_eq!(report.cases[1].suite, "inner");
        assert_eq!(report.suites, 3);
    }

    #[test]
    fn flaky_reruns_do_not_change_the_outcome() {
        let xml = br#"<testsuite><testcase name="flaky"><flakyFailure message="first try"><stackTrace>x</stackTrace></flakyFailure></testcase>
<testcase name="broken"><failure message="always"/><rerunFailure message="again"/></testcase></testsuite>"#;
        let report = parse(xml).unwrap();
        assert_eq!(report.cases[0].outcome, TestOutcome::Passed);
        assert_eq!(report.cases[1].outcome, TestOutcome::Failed);
        assert_eq!(report.cases[1].message.as_deref(), Some("always"));
        assert_eq!(report.summary.failed, 1);
    }

    #[test]
    fn truncated_and_foreign_documents_are_errors() {
        let cut = br#"<testsuites><testsuite name="s"><testcase name="a"/>"#;
        assert!(
            matches!(parse(cut), Err(JunitError::Malformed { .. })),
            "{:?}",
            parse(cut)
        );
        assert!(matches!(parse(b"<TestRun></TestRun>"), Err(JunitError::NotJunit { root }) if root == "TestRun"));
        assert!(matches!(parse(b""), Err(JunitError::Malformed { .. })));
        assert!(matches!(
            parse(b"<testsuite><a></b></testsuite>"),
            Err(JunitError::Malformed { .. })
        ));
        assert_eq!(parse(&[0xff, 0x00, 0x41]).unwrap_err(), JunitError::Encoding);
    }

    #[test]
    fn utf16_and_bom_documents_are_read() {
        let xml = "<testsuite><testcase name=\"é\"/></testsuite>";
        let mut utf16 = vec![0xFF, 0xFE];
        for unit in xml.encode_utf16() {
            utf16.extend_from_slice(&unit.to_le_bytes());
        }
        assert_eq!(parse(&utf16).unwrap().cases[0].name, "é");
        let mut bom = b"\xEF\xBB\xBF".to_vec();
        bom.extend_from_slice(xml.as_bytes());
        assert_eq!(parse(&bom).unwrap().summary.total, 1);
    }

    #[test]
    fn display_names_do_not_repeat_the_class() {
        let case = |classname: &str, name: &str| TestCase {
            suite: String::new(),
            classname: classname.to_owned(),
            name: name.to_owned(),
            outcome: TestOutcome::Failed,
            duration_ms: None,
            message: None,
        };
        assert_eq!(case("A.B", "A.B.c").display_name(), "A.B.c");
        assert_eq!(case("", "c").display_name(), "c");
        assert_eq!(case("A", " ").display_name(), "A.(unnamed test)");
    }
}
