//! Reading the management API's answers: a small XML reader (elements,
//! attributes, text, entities; no DTDs) and the ATOM feeds and entries the
//! answers are made of.

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

/// An answer that is not the ATOM bosun expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unreadable ATOM document: {0}")]
pub(crate) struct AtomError(pub(crate) String);

/// Reads a management API answer.
pub(crate) fn parse_atom(text: &str) -> Result<AtomDocument, AtomError> {
    let root = parse_xml(text)?;
    let entry = |element: &XmlElement| -> Result<AtomEntry, AtomError> {
        let description = element
            .child("content")
            .and_then(|content| content.children.first())
            .ok_or_else(|| AtomError("an entry without content".to_owned()))?;
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
        other => Err(AtomError(format!("root element `{other}`, expected entry or feed"))),
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

fn local_name(name: &str) -> &str {
    name.rsplit_once(':').map_or(name, |(_, local)| local)
}

/// A small XML reader for the management API's answers: elements,
/// attributes, text, CDATA, comments, the XML declaration; no DTDs (a
/// DOCTYPE is skipped, entities other than the predefined and numeric ones
/// are kept as written).
pub(crate) fn parse_xml(text: &str) -> Result<XmlElement, AtomError> {
    let error = |what: &str| AtomError(what.to_owned());
    let mut stack: Vec<XmlElement> = Vec::new();
    let mut root = None;
    let mut rest = text;
    while !rest.is_empty() {
        let Some(open) = rest.find('<') else {
            if let Some(top) = stack.last_mut() {
                top.text.push_str(&decode_entities(rest));
            }
            break;
        };
        if let Some(top) = stack.last_mut() {
            top.text.push_str(&decode_entities(&rest[..open]));
        }
        rest = &rest[open..];
        if let Some(after) = rest.strip_prefix("<?") {
            let end = after.find("?>").ok_or_else(|| error("unterminated <?"))?;
            rest = &after[end + 2..];
        } else if let Some(after) = rest.strip_prefix("<!--") {
            let end = after.find("-->").ok_or_else(|| error("unterminated comment"))?;
            rest = &after[end + 3..];
        } else if let Some(after) = rest.strip_prefix("<![CDATA[") {
            let end = after.find("]]>").ok_or_else(|| error("unterminated CDATA"))?;
            if let Some(top) = stack.last_mut() {
                top.text.push_str(&after[..end]);
            }
            rest = &after[end + 3..];
        } else if let Some(after) = rest.strip_prefix("<!") {
            let end = after.find('>').ok_or_else(|| error("unterminated <!"))?;
            rest = &after[end + 1..];
        } else if let Some(after) = rest.strip_prefix("</") {
            let end = after.find('>').ok_or_else(|| error("unterminated end tag"))?;
            let name = local_name(after[..end].trim());
            let element = stack.pop().ok_or_else(|| error("end tag without start tag"))?;
            if element.name != name {
                return Err(AtomError(format!("</{name}> closes <{}>", element.name)));
            }
            match stack.last_mut() {
                Some(parent) => parent.children.push(element),
                None => root = Some(element),
            }
            rest = &after[end + 1..];
        } else {
            if root.is_some() {
                return Err(error("content after the root element"));
            }
            let (element, self_closing, after) = start_tag(&rest[1..])?;
            rest = after;
            if self_closing {
                match stack.last_mut() {
                    Some(parent) => parent.children.push(element),
                    None => root = Some(element),
                }
            } else {
                stack.push(element);
            }
        }
    }
    if !stack.is_empty() {
        return Err(error("unclosed element"));
    }
    root.ok_or_else(|| error("no element"))
}

/// Reads a start tag after its `<`: the element, whether it closes itself,
/// and the text after the tag.
fn start_tag(text: &str) -> Result<(XmlElement, bool, &str), AtomError> {
    let error = |what: &str| AtomError(what.to_owned());
    let name_end = text
        .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
        .ok_or_else(|| error("unterminated start tag"))?;
    if name_end == 0 {
        return Err(error("a start tag without a name"));
    }
    let mut element = XmlElement {
        name: local_name(&text[..name_end]).to_owned(),
        ..XmlElement::default()
    };
    let mut rest = &text[name_end..];
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix("/>") {
            return Ok((element, true, after));
        }
        if let Some(after) = rest.strip_prefix('>') {
            return Ok((element, false, after));
        }
        let equals = rest.find('=').ok_or_else(|| error("an attribute without a value"))?;
        let name = rest[..equals].trim();
        let value_text = rest[equals + 1..].trim_start();
        let quote = value_text
            .chars()
            .next()
            .filter(|c| *c == '"' || *c == '\'')
            .ok_or_else(|| error("an unquoted attribute value"))?;
        let end = value_text[1..]
            .find(quote)
            .ok_or_else(|| error("an unterminated attribute value"))?;
        let value = decode_entities(&value_text[1..=end]);
        if name != "xmlns" && !name.starts_with("xmlns:") {
            element.attributes.push((local_name(name).to_owned(), value));
        }
        rest = &value_text[end + 2..];
    }
}

fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find(';').filter(|end| *end <= 10) else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let entity = &rest[1..end];
        let decoded = match entity {
            "lt" => Some('<'),
            "gt" => Some('>'),
            "amp" => Some('&'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .map(|hex| u32::from_str_radix(hex, 16))
                .or_else(|| entity.strip_prefix('#').map(str::parse::<u32>))
                .and_then(Result::ok)
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}
