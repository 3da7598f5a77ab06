//! Reading the management API's answers: their XML, read with
//! `quick-xml` into a small element tree (elements, attributes, text; no
//! DTDs), and the ATOM feeds and entries the answers are made of.

use quick_xml::XmlVersion;
use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::{BytesStart, Event};
use quick_xml::reader::Reader;

/// An ATOM entry from the management API: its title and the description
/// inside its content (`QueueDescription`, `RuleDescription`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AtomEntry {
    /// The entry's title (the entity's name).
    pub(crate) title: String,
    /// The description element.
    pub(crate) description: XmlElement,
}

impl AtomEntry {
    /// The entity's name: the description's `Name` (rules), else the title.
    pub(crate) fn name(&self) -> &str {
        self.description
            .child_text("Name")
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .unwrap_or(self.title.trim())
    }
}

/// A management API answer: one entry, or a feed (a list; empty when a
/// `GET` names an entity that does not exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AtomDocument {
    /// One entity.
    Entry(AtomEntry),
    /// A list of entities.
    Feed(Vec<AtomEntry>),
}

/// An answer that is not the ATOM bosun expects. The management call
/// that got it fails with `InvalidResponse`; nothing is applied from it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AtomError {
    /// Not well-formed XML (as `quick-xml` reads it) at this byte offset.
    #[error("unreadable ATOM document: not well-formed XML at byte {position}: {source}")]
    Xml {
        /// Byte offset of the reader when it failed.
        position: u64,
        /// What the XML reader found.
        #[source]
        source: quick_xml::Error,
    },
    /// Well-formed, but not the document the management API sends.
    #[error("unreadable ATOM document: {0}")]
    Shape(String),
}

/// Reads a management API answer.
pub(crate) fn parse_atom(text: &str) -> Result<AtomDocument, AtomError> {
    let root = parse_xml(text)?;
    let entry = |element: &XmlElement| -> Result<AtomEntry, AtomError> {
        let description = element
            .child("content")
            .and_then(|content| content.children.first())
            .ok_or_else(|| AtomError::Shape("an entry without content".to_owned()))?;
        Ok(AtomEntry {
            title: element.child_text("title").unwrap_or_default().trim().to_owned(),
            description: description.clone(),
        })
    };
    match root.name.as_str() {
        "entry" => Ok(AtomDocument::Entry(entry(&root)?)),
        "feed" => Ok(AtomDocument::Feed(
            root.children
                .iter()
                .filter(|child| child.name == "entry")
                .map(entry)
                .collect::<Result<_, _>>()?,
        )),
        other => Err(AtomError::Shape(format!(
            "root element `{other}`, expected entry or feed"
        ))),
    }
}

/// An XML element by local name (namespace prefixes dropped, `xmlns`
/// attributes left out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct XmlElement {
    /// Local name.
    pub(crate) name: String,
    /// Attributes by local name.
    pub(crate) attributes: Vec<(String, String)>,
    /// Child elements in order.
    pub(crate) children: Vec<XmlElement>,
    /// The text directly inside, entities decoded.
    pub(crate) text: String,
}

impl XmlElement {
    /// The first child with this local name.
    pub(crate) fn child(&self, name: &str) -> Option<&XmlElement> {
        self.children.iter().find(|child| child.name == name)
    }

    /// The text of the first child with this local name.
    pub(crate) fn child_text(&self, name: &str) -> Option<&str> {
        self.child(name).map(|child| child.text.as_str())
    }

    /// An attribute by local name.
    pub(crate) fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// Reads one XML document into elements with `quick-xml`: elements,
/// attributes, text, CDATA; comments, processing instructions and the XML
/// declaration are skipped; a DOCTYPE is skipped and never expanded, so
/// entities other than the predefined and numeric ones are kept as
/// written. End tags must match their start tags, and there must be
/// exactly one root element.
pub(crate) fn parse_xml(text: &str) -> Result<XmlElement, AtomError> {
    let mut reader = Reader::from_str(text);
    // Text is kept whole (a value split around `&amp;` keeps its spaces).
    reader.config_mut().trim_text(false);
    let mut stack: Vec<XmlElement> = Vec::new();
    let mut root: Option<XmlElement> = None;
    loop {
        let position = reader.buffer_position();
        let xml = |source: quick_xml::Error| AtomError::Xml { position, source };
        let event = reader.read_event().map_err(xml)?;
        match event {
            Event::Start(start) | Event::Empty(start) if root.is_some() => {
                let name = start.local_name().as_ref().to_owned();
                return Err(AtomError::Shape(format!("element <{name}> after the root element")));
            }
            Event::Start(start) => stack.push(element(&start).map_err(xml)?),
            Event::Empty(start) => close(element(&start).map_err(xml)?, &mut stack, &mut root),
            Event::End(_) => {
                // The reader has checked that the end tag matches.
                let element = stack
                    .pop()
                    .ok_or_else(|| AtomError::Shape("an end tag without a start tag".to_owned()))?;
                close(element, &mut stack, &mut root);
            }
            Event::Text(text) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&text.xml_content(XmlVersion::Implicit1_0));
                }
            }
            Event::CData(data) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&data.xml_content(XmlVersion::Implicit1_0));
                }
            }
            Event::GeneralRef(reference) => {
                if let Some(top) = stack.last_mut() {
                    match reference.resolve_char_ref().map_err(xml)? {
                        Some(c) => top.text.push(c),
                        None => match resolve_predefined_entity(&reference) {
                            Some(value) => top.text.push_str(value),
                            None => {
                                top.text.push('&');
                                top.text.push_str(&reference);
                                top.text.push(';');
                            }
                        },
                    }
                }
            }
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) | Event::DocType(_) => {}
            Event::Eof => break,
        }
    }
    if let Some(open) = stack.last() {
        return Err(AtomError::Shape(format!("<{}> is never closed", open.name)));
    }
    root.ok_or_else(|| AtomError::Shape("no element".to_owned()))
}

/// A finished element goes into its parent, or is the root.
fn close(element: XmlElement, stack: &mut [XmlElement], root: &mut Option<XmlElement>) {
    match stack.last_mut() {
        Some(parent) => parent.children.push(element),
        None => *root = Some(element),
    }
}

/// An element from its start tag: its local name and its attributes by
/// local name, `xmlns` declarations left out. Values are normalized as XML
/// 1.0 says (predefined and numeric references resolved; any other entity
/// is an error, as there is no DTD to define it).
fn element(start: &BytesStart<'_>) -> Result<XmlElement, quick_xml::Error> {
    let mut element = XmlElement {
        name: start.local_name().as_ref().to_owned(),
        ..XmlElement::default()
    };
    for attribute in start.attributes() {
        let attribute = attribute?;
        if attribute.key.as_namespace_binding().is_some() {
            continue;
        }
        let value = attribute.normalized_value(XmlVersion::Implicit1_0)?;
        element
            .attributes
            .push((attribute.key.local_name().as_ref().to_owned(), value.into_owned()));
    }
    Ok(element)
}
