//! The YAML of the manifests `bosun infra render` writes, by `serde-saphyr`:
//! block mappings and sequences in the order the values were built (the
//! workspace's `serde_json` keeps insertion order), so the same values
//! always give the same text.
//!
//! The serializer quotes a string whenever a YAML reader could take it for
//! something else, including YAML 1.1's words and forms (`on`, `yes`, `y`,
//! `1_000`, `0b1`, dates) that Kubernetes tooling built on YAML 1.1 parsers
//! still reads as booleans, numbers or timestamps; other strings are plain.
//! Block scalars (`|`, `>`) are turned off: a multi-line or long string is
//! one double-quoted line, which every reader reads back the same.

use serde_json::Value;

/// Why the manifests could not be written as YAML. It does not happen for
/// JSON values (string keys, finite numbers); if it does, nothing is
/// written and the command fails with the serializer's reason.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the manifests as YAML: {0}")]
pub struct YamlError(#[source] serde_saphyr::SerializeError);

/// Several documents, each after a `---` line.
pub fn documents(values: &[Value]) -> Result<String, YamlError> {
    let mut out = String::new();
    for value in values {
        out.push_str("---\n");
        out.push_str(&document(value)?);
    }
    Ok(out)
}

/// One document (no `---`), ending with a newline.
fn document(value: &Value) -> Result<String, YamlError> {
    let options = serde_saphyr::ser_options! {
        // `key:` then its items indented below it, as kubectl and the
        // Kubernetes documentation write them.
        compact_list_indent: false,
        prefer_block_scalars: false,
    };
    serde_saphyr::to_string_with_options(value, options).map_err(YamlError)
}

/// Reads the documents of a YAML file someone edited (an overlay's
/// `config.yaml`), for `bosun infra check`: strings, numbers, booleans and
/// null as JSON, anchors resolved; the parser's message when it does not
/// parse or holds a key that is not a string. yaml-rust2 reads it, a
/// parser of its own beside the writer, as the infra tests read back what
/// was written.
pub fn parse(text: &str) -> Result<Vec<Value>, String> {
    let documents = yaml_rust2::YamlLoader::load_from_str(text).map_err(|err| err.to_string())?;
    documents.iter().map(to_json).collect()
}

fn to_json(yaml: &yaml_rust2::Yaml) -> Result<Value, String> {
    use yaml_rust2::Yaml;
    Ok(match yaml {
        Yaml::String(text) => Value::String(text.clone()),
        Yaml::Integer(n) => Value::from(*n),
        Yaml::Real(text) => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone())),
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Null => Value::Null,
        Yaml::Array(items) => Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Yaml::Hash(map) => Value::Object(
            map.iter()
                .map(|(key, value)| {
                    let key = match key {
                        Yaml::String(text) => text.clone(),
                        Yaml::Integer(n) => n.to_string(),
                        Yaml::Boolean(b) => b.to_string(),
                        other => return Err(format!("a key that is not a string: {other:?}")),
                    };
                    Ok((key, to_json(value)?))
                })
                .collect::<Result<_, _>>()?,
        ),
        Yaml::Alias(_) => return Err("an alias the parser did not resolve".to_owned()),
        Yaml::BadValue => return Err("a value the parser could not read".to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn writes_block_yaml_quoting_only_what_needs_it() {
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
            document(&value).unwrap(),
            "apiVersion: v1\n\
             metadata:\n  labels:\n    azure.workload.identity/use: \"true\"\n  annotations: {}\n\
             spec:\n  replicas: 2\n  \"on\": false\n  args:\n    - serve\n    - --consumers\n    - commit\n\
             \x20 containers:\n    - name: bosun\n      ports:\n        - containerPort: 9090\n          name: ops\n\
             \x20 empty: []\n  matrix:\n    - - 1\n      - 2\n    - []\n"
        );
        assert_eq!(
            documents(&[json!({"a": 1}), json!({"b": "x\"y"})]).unwrap(),
            "---\na: 1\n---\nb: x\"y\n"
        );
        assert_eq!(
            documents(&[json!({"a": 1})]).unwrap(),
            documents(&[json!({"a": 1})]).unwrap()
        );
    }

    #[test]
    fn strings_that_look_like_other_things_read_back_as_strings() {
        // YAML 1.1 reads these as booleans, null, numbers or timestamps.
        let yaml_1_1 = [
            "true",
            "on",
            "Off",
            "yes",
            "NO",
            "y",
            "n",
            "null",
            "~",
            "0",
            "1.5",
            "1_000",
            "0b101",
            "0o17",
            "012",
            "0x1F",
            "+12",
            "1e3",
            "1:20",
            ".inf",
            "+.inf",
            "-.inf",
            ".NaN",
            "2001-12-14",
            "<<",
            "=",
        ];
        let other = [
            "a: b",
            "#x",
            "x #c",
            "- y",
            "--consumers",
            "multi\nline",
            "line\n",
            "tab\t",
            "a\r\nb",
            "ünïcode",
            "\u{feff}bom",
            "a\u{2028}b",
            " lead",
            "trail ",
            "'q",
            "\"q",
            "*a",
            "&a",
            "!t",
            "%x",
            "@x",
            "`x",
            "|",
            ">",
            "?",
            "---",
            "",
        ];
        let mut map = serde_json::Map::new();
        for text in yaml_1_1.iter().chain(&other) {
            map.insert((*text).to_owned(), json!(text));
        }
        let text = document(&Value::Object(map)).unwrap();
        let parsed = &yaml_rust2::YamlLoader::load_from_str(&text).unwrap()[0];
        for word in yaml_1_1.iter().chain(&other) {
            assert_eq!(parsed[*word].as_str(), Some(*word), "{word:?} in:\n{text}");
        }
        // yaml-rust2 reads YAML 1.2: that YAML 1.1's forms are quoted is
        // checked on the text.
        for word in yaml_1_1 {
            let quoted = [format!("\"{word}\": \"{word}\""), format!("'{word}': '{word}'")];
            assert!(
                text.lines().any(|line| quoted.iter().any(|q| line == q.as_str())),
                "{word:?} is not quoted in:\n{text}"
            );
        }
    }
}
