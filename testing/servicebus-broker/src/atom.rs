//! The XML of the management REST API: reading the ATOM entry a `PUT`
//! carries (with `quick-xml`) and writing the entries, feeds and error
//! documents Service Bus answers with; ISO 8601 durations.

use std::fmt::Write as _;
use std::time::Duration;

use quick_xml::XmlVersion;
use quick_xml::events::attributes::AttrError;
use quick_xml::events::{BytesStart, Event};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The ATOM namespace.
pub(crate) const ATOM_NAMESPACE: &str = "http://www.w3.org/2005/Atom";
/// The namespace of Service Bus's descriptions.
pub(crate) const SERVICE_BUS_NAMESPACE: &str = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect";
/// The XML schema instance namespace (`i:type`).
pub(crate) const SCHEMA_INSTANCE_NAMESPACE: &str = "http://www.w3.org/2001/XMLSchema-instance";
/// The time to live Service Bus gives an entity without one (`TimeSpan.MaxValue`).
pub(crate) const MAX_TIME_SPAN: &str = "P10675199DT2H48M5.4775807S";

/// An XML element by local name (prefixes and `xmlns` attributes dropped).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Element {
    /// Local name.
    pub(crate) name: String,
    /// Attributes by local name.
    pub(crate) attributes: Vec<(String, String)>,
    /// Child elements in order.
    pub(crate) children: Vec<Element>,
    /// The text directly inside, references resolved.
    pub(crate) text: String,
}

impl Element {
    /// The first child with this local name.
    pub(crate) fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|child| child.name == name)
    }

    /// An attribute by local name.
    pub(crate) fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// Why a request body is not an ATOM document the broker reads.
#[derive(Debug, thiserror::Error)]
pub(crate) enum XmlError {
    /// The XML reader refused it.
    #[error("{0}")]
    Syntax(#[from] quick_xml::Error),
    /// An attribute the XML reader refused.
    #[error("{0}")]
    Attribute(#[from] AttrError),
    /// Well-formed XML, but not in the shape the broker reads.
    #[error("{0}")]
    Shape(String),
}

impl From<String> for XmlError {
    fn from(reason: String) -> Self {
        Self::Shape(reason)
    }
}

impl From<&str> for XmlError {
    fn from(reason: &str) -> Self {
        Self::Shape(reason.to_owned())
    }
}

fn start(element: &BytesStart<'_>) -> Result<Element, XmlError> {
    let local = element.local_name();
    let name: &str = local.as_ref();
    let mut out = Element {
        name: name.to_owned(),
        ..Element::default()
    };
    for attribute in element.attributes().with_checks(false) {
        let attribute = attribute?;
        let key: &str = attribute.key.as_ref();
        if key == "xmlns" || key.starts_with("xmlns:") {
            continue;
        }
        let local = attribute.key.local_name();
        let local: &str = local.as_ref();
        let value = attribute.normalized_value(XmlVersion::Implicit1_0)?;
        out.attributes.push((local.to_owned(), value.into_owned()));
    }
    Ok(out)
}

/// Reads an XML document into its root element.
pub(crate) fn parse(text: &str) -> Result<Element, XmlError> {
    let mut reader = quick_xml::Reader::from_str(text);
    let mut stack: Vec<Element> = Vec::new();
    let mut root = None;
    loop {
        let event = reader.read_event()?;
        let closed = match event {
            Event::Start(element) => {
                stack.push(start(&element)?);
                None
            }
            Event::Empty(element) => Some(start(&element)?),
            Event::End(_) => Some(stack.pop().ok_or("an end tag without a start tag")?),
            Event::Text(text) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&text.xml_content(XmlVersion::Implicit1_0));
                }
                None
            }
            Event::CData(data) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&data.xml_content(XmlVersion::Implicit1_0));
                }
                None
            }
            Event::GeneralRef(reference) => {
                let resolved = match reference.resolve_char_ref() {
                    Ok(Some(c)) => Some(c),
                    _ => match &*reference {
                        "amp" => Some('&'),
                        "lt" => Some('<'),
                        "gt" => Some('>'),
                        "quot" => Some('"'),
                        "apos" => Some('\''),
                        _ => None,
                    },
                };
                let resolved = resolved.ok_or_else(|| format!("unknown entity `&{};`", &*reference))?;
                if let Some(top) = stack.last_mut() {
                    top.text.push(resolved);
                }
                None
            }
            Event::Eof => break,
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) | Event::DocType(_) => None,
        };
        if let Some(element) = closed {
            match stack.last_mut() {
                Some(parent) => parent.children.push(element),
                None if root.is_none() => root = Some(element),
                None => return Err("content after the root element".into()),
            }
        }
    }
    if !stack.is_empty() {
        return Err("an unclosed element".into());
    }
    root.ok_or_else(|| "no element".into())
}

/// The description inside a `PUT`'s ATOM entry (`QueueDescription`, ...).
pub(crate) fn entry_description(body: &str) -> Result<Element, XmlError> {
    let root = parse(body)?;
    if root.name != "entry" {
        return Err(format!("the root element is `{}`, not an ATOM entry", root.name).into());
    }
    root.child("content")
        .and_then(|content| content.children.first())
        .cloned()
        .ok_or_else(|| "the entry has no content description".into())
}

/// Text escaped for XML content and (double-quoted) attribute values;
/// apostrophes stay, as Service Bus writes SQL filters.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            other => out.push(other),
        }
    }
    out
}

/// A time as Service Bus writes it (RFC 3339, UTC).
pub(crate) fn timestamp(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

/// An ATOM entry for the entity at `path` (`https://host/path` is its id).
pub(crate) fn entry(
    host: &str,
    path: &str,
    title: &str,
    created: OffsetDateTime,
    updated: OffsetDateTime,
    description: &str,
) -> String {
    format!(
        "<entry xmlns=\"{ATOM_NAMESPACE}\"><id>https://{host}/{id}</id><title type=\"text\">{title}</title>\
         <published>{published}</published><updated>{updated}</updated><author><name>{author}</name></author>\
         <link rel=\"self\" href=\"https://{host}/{id}\"/><content type=\"application/xml\">{description}</content></entry>",
        id = escape(path),
        title = escape(title),
        published = timestamp(created),
        updated = timestamp(updated),
        author = escape(host.split(':').next().unwrap_or(host)),
    )
}

/// An ATOM feed of `entries` (each an `<entry>`) titled `title`.
pub(crate) fn feed(host: &str, path: &str, title: &str, entries: &[String]) -> String {
    let mut out = format!(
        "<feed xmlns=\"{ATOM_NAMESPACE}\"><title type=\"text\">{title}</title><id>https://{host}/{id}</id>\
         <updated>{updated}</updated><link rel=\"self\" href=\"https://{host}/{id}\"/>",
        title = escape(title),
        id = escape(path),
        updated = timestamp(OffsetDateTime::now_utc()),
    );
    for entry in entries {
        out.push_str(entry);
    }
    out.push_str("</feed>");
    out
}

/// What Service Bus answers a `GET` of a queue or topic that does not
/// exist with: HTTP 200 and an empty feed.
pub(crate) fn empty_feed() -> String {
    format!(
        "<feed xmlns=\"{ATOM_NAMESPACE}\"><title type=\"text\">Publicly Listed Services</title>\
         <subtitle type=\"text\">This is the list of publicly-listed services currently available.</subtitle>\
         <id>uuid:{id};id=1</id><updated>{updated}</updated><generator>Service Bus 1.1</generator></feed>",
        id = uuid::Uuid::new_v4(),
        updated = timestamp(OffsetDateTime::now_utc()),
    )
}

/// Service Bus's error document.
pub(crate) fn error(code: u16, detail: &str) -> String {
    format!(
        "<Error><Code>{code}</Code><Detail>{}. TrackingId:{}, SystemTracker:bosun-servicebus-broker, Timestamp:{}</Detail></Error>",
        escape(detail.trim_end_matches('.')),
        uuid::Uuid::new_v4(),
        timestamp(OffsetDateTime::now_utc()),
    )
}

/// Appends `<name>value</name>`.
pub(crate) fn element(xml: &mut String, name: &str, value: &str) {
    let _ = write!(xml, "<{name}>{}</{name}>", escape(value));
}

/// An ISO 8601 duration as Service Bus writes them: `PT1M`, `P14D`, `PT10M`, `PT0.5S`.
pub(crate) fn format_duration(duration: Duration) -> String {
    let total = duration.as_secs();
    let (days, hours, minutes, seconds) = (total / 86_400, total / 3600 % 24, total / 60 % 60, total % 60);
    let nanos = duration.subsec_nanos();
    let mut out = String::from("P");
    if days > 0 {
        let _ = write!(out, "{days}D");
    }
    if hours > 0 || minutes > 0 || seconds > 0 || nanos > 0 || days == 0 {
        out.push('T');
        if hours > 0 {
            let _ = write!(out, "{hours}H");
        }
        if minutes > 0 {
            let _ = write!(out, "{minutes}M");
        }
        if nanos > 0 {
            let fraction = format!("{nanos:09}");
            let _ = write!(out, "{seconds}.{}S", fraction.trim_end_matches('0'));
        } else if seconds > 0 || (hours == 0 && minutes == 0) {
            let _ = write!(out, "{seconds}S");
        }
    }
    out
}

/// Reads an ISO 8601 duration with days, hours, minutes and (fractional)
/// seconds (`PT1M`, `P10675199DT2H48M5.4775807S`); years, months and weeks
/// (not used by Service Bus) give `None`.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let rest = text.trim().strip_prefix('P')?;
    if rest.is_empty() {
        return None;
    }
    let (date, time) = match rest.split_once('T') {
        Some((date, time)) => (date, Some(time)),
        None => (rest, None),
    };
    let mut total = Duration::ZERO;
    if !date.is_empty() {
        let days: u64 = date.strip_suffix('D')?.parse().ok()?;
        total += Duration::from_secs(days.checked_mul(86_400)?);
    }
    if let Some(mut time) = time {
        if time.is_empty() {
            return None;
        }
        while !time.is_empty() {
            let end = time.find(|c: char| c.is_ascii_alphabetic())?;
            let (number, unit) = (&time[..end], &time[end..=end]);
            total += match unit {
                "H" => Duration::from_secs(number.parse::<u64>().ok()?.checked_mul(3600)?),
                "M" => Duration::from_secs(number.parse::<u64>().ok()?.checked_mul(60)?),
                "S" => Duration::try_from_secs_f64(number.parse::<f64>().ok()?).ok()?,
                _ => return None,
            };
            time = &time[end + 1..];
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn durations_read_and_write_as_service_bus_does() {
        for (text, duration) in [
            ("PT1M", Duration::from_secs(60)),
            ("PT10M", Duration::from_secs(600)),
            ("P14D", Duration::from_secs(14 * 86_400)),
            ("PT30S", Duration::from_secs(30)),
            ("PT1H1M1S", Duration::from_secs(3661)),
        ] {
            assert_eq!(parse_duration(text), Some(duration), "{text}");
            assert_eq!(format_duration(duration), text);
        }
        assert!(parse_duration(MAX_TIME_SPAN).is_some());
        assert_eq!(parse_duration("P1Y"), None);
        assert_eq!(parse_duration("PT"), None);
    }

    #[test]
    fn an_entry_gives_its_description() {
        let description = entry_description(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><entry xmlns=\"http://www.w3.org/2005/Atom\">\
             <content type=\"application/xml\"><RuleDescription xmlns=\"x\" xmlns:i=\"y\">\
             <Filter i:type=\"SqlFilter\"><SqlExpression>a &lt; 1 AND b = 'x&amp;y'</SqlExpression></Filter>\
             <Name>r</Name></RuleDescription></content></entry>",
        )
        .unwrap();
        assert_eq!(description.name, "RuleDescription");
        let filter = description.child("Filter").unwrap();
        assert_eq!(filter.attribute("type"), Some("SqlFilter"));
        assert_eq!(filter.child("SqlExpression").unwrap().text, "a < 1 AND b = 'x&y'");
        assert!(entry_description("<feed/>").is_err());
        assert!(entry_description("<entry><content>").is_err());
    }

    #[test]
    fn a_reader_error_is_kept_as_the_cause() {
        let err = entry_description("<entry><content></entry>").unwrap_err();
        assert!(matches!(err, XmlError::Syntax(_)), "{err:?}");
        assert!(std::error::Error::source(&err).is_some(), "{err}");
        let err = entry_description("<entry a/>").unwrap_err();
        assert!(matches!(err, XmlError::Attribute(_)), "{err:?}");
        let err = entry_description("<feed/>").unwrap_err();
        assert!(matches!(err, XmlError::Shape(_)), "{err:?}");
        assert_eq!(err.to_string(), "the root element is `feed`, not an ATOM entry");
    }
}
