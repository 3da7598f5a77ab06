//! Just enough XML to read a `.nuspec`: the text of each child element of
//! `package/metadata`, with entities and CDATA decoded. A document that is
//! not well-formed (a tag not closed, a close that does not match) is
//! refused, as NuGet refuses a package whose manifest it cannot read.

/// The `(element, text)` pairs under `<package><metadata>`, element names
/// without a namespace prefix; an error saying what is wrong otherwise.
pub fn metadata(document: &str) -> Result<Vec<(String, String)>, String> {
    let mut stack: Vec<String> = Vec::new();
    let mut found = Vec::new();
    let mut saw_metadata = false;
    let mut text = String::new();
    let mut rest = document.trim_start_matches('\u{feff}');
    while !rest.is_empty() {
        let Some(open) = rest.find('<') else {
            text.push_str(&decode(rest)?);
            break;
        };
        text.push_str(&decode(&rest[..open])?);
        rest = &rest[open..];
        if let Some(after) = rest.strip_prefix("<?") {
            rest = skip_past(after, "?>")?;
        } else if let Some(after) = rest.strip_prefix("<!--") {
            rest = skip_past(after, "-->")?;
        } else if let Some(after) = rest.strip_prefix("<![CDATA[") {
            let end = after.find("]]>").ok_or("a CDATA section is not closed")?;
            text.push_str(&after[..end]);
            rest = &after[end + 3..];
        } else if let Some(after) = rest.strip_prefix("<!") {
            rest = skip_past(after, ">")?;
        } else {
            let end = rest.find('>').ok_or("a tag is not closed")?;
            let tag = &rest[1..end];
            rest = &rest[end + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                let name = local(name.trim());
                let open = stack.pop().ok_or_else(|| format!("`</{name}>` closes nothing"))?;
                if open != name {
                    return Err(format!("`</{name}>` closes `<{open}>`"));
                }
                if stack.len() == 2 && stack[0] == "package" && stack[1] == "metadata" {
                    found.push((name, std::mem::take(&mut text)));
                }
            } else {
                let empty = tag.ends_with('/');
                let tag = tag.trim_end_matches('/');
                let name = local(tag.split_whitespace().next().ok_or("an empty tag")?);
                if stack.is_empty() && name != "package" {
                    return Err(format!("the root element is `<{name}>`, not `<package>`"));
                }
                if stack.len() == 1 && name == "metadata" {
                    saw_metadata = true;
                }
                if empty {
                    if stack.len() == 2 && stack[0] == "package" && stack[1] == "metadata" {
                        found.push((name, String::new()));
                    }
                } else {
                    stack.push(name);
                }
            }
            text.clear();
        }
    }
    if let Some(open) = stack.last() {
        return Err(format!("`<{open}>` is not closed"));
    }
    if !saw_metadata {
        return Err("there is no `<package><metadata>`".to_owned());
    }
    Ok(found)
}

fn skip_past<'a>(rest: &'a str, end: &str) -> Result<&'a str, String> {
    rest.find(end)
        .map(|at| &rest[at + end.len()..])
        .ok_or_else(|| format!("`{end}` missing"))
}

fn local(name: &str) -> String {
    name.rsplit(':').next().unwrap_or(name).to_owned()
}

/// Decodes the five named entities and character references.
fn decode(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let end = rest[at..].find(';').ok_or("an entity is not closed")? + at;
        let entity = &rest[at + 1..end];
        let decoded = match entity {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = if let Some(hex) = entity.strip_prefix("#x").or_else(|| entity.strip_prefix("#X")) {
                    u32::from_str_radix(hex, 16).ok()
                } else {
                    entity.strip_prefix('#').and_then(|dec| dec.parse().ok())
                };
                code.and_then(char::from_u32)
                    .ok_or_else(|| format!("`&{entity};` is not an entity"))?
            }
        };
        out.push(decoded);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn metadata_children_are_read_and_malformed_documents_refused() {
        let doc = "\u{feff}<?xml version=\"1.0\"?>\n<!-- c --><package xmlns=\"x\"><metadata minClientVersion=\"2\">\
                   <id>A.B</id><version>1.0</version><authors>a &amp; b</authors>\
                   <description><![CDATA[<d>]]></description><tags/><dependencies><group><dependency id=\"x\"/></group></dependencies>\
                   </metadata><files/></package>";
        let found = metadata(doc).unwrap();
        assert_eq!(
            found,
            vec![
                ("id".to_owned(), "A.B".to_owned()),
                ("version".to_owned(), "1.0".to_owned()),
                ("authors".to_owned(), "a & b".to_owned()),
                ("description".to_owned(), "<d>".to_owned()),
                ("tags".to_owned(), String::new()),
                ("dependencies".to_owned(), String::new()),
            ]
        );
        assert!(metadata("<package><metadata><id>x</version></metadata></package>").is_err());
        assert!(metadata("<package><metadata><id>x</id>").is_err());
        assert!(metadata("<nuspec><metadata/></nuspec>").is_err());
        assert!(metadata("<package><files/></package>").is_err());
        assert!(metadata("<package><metadata><id>&bogus;</id></metadata></package>").is_err());
    }
}
