//! A small, deterministic YAML writer for the manifests `bosun infra
//! render` writes: block mappings and sequences in the order they were
//! built, every string double-quoted (a JSON string literal is a valid YAML
//! double-quoted scalar, so `"true"`, `"0"` or `"on"` never turn into a
//! boolean or a number), and keys plain only when YAML reads them back as
//! the same string.

use serde_json::Value;

/// One YAML document (no `---`).
pub fn document(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => mapping(&mut out, map, 0),
        Value::Array(items) if !items.is_empty() => sequence(&mut out, items, 0),
        other => {
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
    out
}

/// Several documents, each after a `---` line.
pub fn documents(values: &[Value]) -> String {
    values.iter().map(|value| format!("---\n{}", document(value))).collect()
}

fn indent(out: &mut String, level: usize) {
    out.extend(std::iter::repeat_n(' ', level * 2));
}

fn mapping(out: &mut String, map: &serde_json::Map<String, Value>, level: usize) {
    for (key, value) in map {
        indent(out, level);
        out.push_str(&key_text(key));
        out.push(':');
        nested(out, value, level);
    }
}

fn sequence(out: &mut String, items: &[Value], level: usize) {
    for item in items {
        indent(out, level);
        out.push('-');
        match item {
            Value::Object(map) if !map.is_empty() => {
                // The first key goes on the dash's line, the rest under it.
                let mut first = true;
                for (key, value) in map {
                    if first {
                        out.push(' ');
                        first = false;
                    } else {
                        indent(out, level + 1);
                    }
                    out.push_str(&key_text(key));
                    out.push(':');
                    nested(out, value, level + 1);
                }
            }
            Value::Array(inner) if !inner.is_empty() => {
                out.push('\n');
                sequence(out, inner, level + 1);
            }
            other => {
                out.push(' ');
                out.push_str(&scalar(other));
                out.push('\n');
            }
        }
    }
}

/// What follows `key:`: a scalar on the same line, or a block below it.
fn nested(out: &mut String, value: &Value, level: usize) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            mapping(out, map, level + 1);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            sequence(out, items, level + 1);
        }
        other => {
            out.push(' ');
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
}

fn scalar(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => quoted(s),
        Value::Array(_) => "[]".to_owned(),
        Value::Object(_) => "{}".to_owned(),
    }
}

fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_owned())
}

/// A key is written plain when it is made of letters, digits and `._/-`,
/// starts with a letter, and is not a word YAML 1.1 reads as a boolean or
/// null; anything else is quoted.
fn key_text(key: &str) -> String {
    let plain = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-'))
        && !matches!(
            key.to_ascii_lowercase().as_str(),
            "y" | "n" | "yes" | "no" | "on" | "off" | "true" | "false" | "null"
        );
    if plain { key.to_owned() } else { quoted(key) }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn writes_block_yaml_with_every_string_quoted() {
        let value = json!({
            "apiVersion": "v1",
            "metadata": {"labels": {"azure.workload.identity/use": "true"}, "annotations": {}},
            "spec": {
                "replicas": 2,
                "on": false,
                "args": ["serve", "--consumers", "commit"],
                "containers": [{"name": "bosun", "ports": [{"containerPort": 9090, "name": "ops"}]}],
                "empty": [],
                "matrix": [[1, 2], []],
            }
        });
        assert_eq!(
            document(&value),
            "apiVersion: \"v1\"\n\
             metadata:\n  labels:\n    azure.workload.identity/use: \"true\"\n  annotations: {}\n\
             spec:\n  replicas: 2\n  \"on\": false\n  args:\n    - \"serve\"\n    - \"--consumers\"\n    - \"commit\"\n\
             \x20 containers:\n    - name: \"bosun\"\n      ports:\n        - containerPort: 9090\n          name: \"ops\"\n\
             \x20 empty: []\n  matrix:\n    -\n      - 1\n      - 2\n    - []\n"
        );
        assert_eq!(
            documents(&[json!({"a": 1}), json!({"b": "x\"y"})]),
            "---\na: 1\n---\nb: \"x\\\"y\"\n"
        );
    }

    #[test]
    fn strings_that_look_like_other_things_read_back_as_strings() {
        let tricky = [
            "true",
            "on",
            "0",
            "1.5",
            "null",
            "~",
            "a: b",
            "#x",
            "- y",
            "multi\nline",
            "tab\t",
            "ünïcode",
            "",
        ];
        let mut map = serde_json::Map::new();
        for text in tricky {
            map.insert(text.to_owned(), json!(text));
        }
        let text = document(&Value::Object(map));
        let parsed = &yaml_rust2::YamlLoader::load_from_str(&text).unwrap()[0];
        for text in tricky {
            assert_eq!(
                parsed[text].as_str(),
                Some(text),
                "{text:?} in:\n{}",
                document(&json!({text: text}))
            );
        }
    }
}
