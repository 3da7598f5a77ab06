//! The part of Argo CD's published OpenAPI document the double serves
//! (`conformance/argocd-swagger-subset.json`: the List, Create, Get,
//! Update and Sync operations of `ApplicationService` and every definition
//! they reference, copied unchanged from `assets/swagger.json` of
//! argoproj/argo-cd at the commit the file names), and a check of JSON
//! values against its definitions.
//!
//! The check is strict where Argo CD is lenient, on purpose: a property a
//! definition does not declare is reported (Argo CD's JSON decoder ignores
//! it, so a client sending it is asking for something that never happens,
//! and a double answering it answers what Argo CD never does), as is
//! `null`, a value of the wrong type, an `int64` that is not an integer, a
//! `date-time` that is not RFC 3339, and a query parameter the operation
//! does not declare.

use std::sync::OnceLock;

use serde_json::{Map, Value};

/// The subset, as checked in.
pub const SUBSET_JSON: &str = include_str!("../../conformance/argocd-swagger-subset.json");

/// The subset, parsed.
#[derive(Debug)]
pub struct Swagger {
    document: Value,
}

/// The subset, parsed once. Panics only if the checked-in file is not
/// JSON, which its own test catches first.
pub fn subset() -> &'static Swagger {
    static SUBSET: OnceLock<Swagger> = OnceLock::new();
    SUBSET.get_or_init(|| Swagger {
        document: serde_json::from_str(SUBSET_JSON).unwrap_or(Value::Null),
    })
}

impl Swagger {
    /// The `x-source` record: repository, commit and file it was cut from.
    pub fn source(&self) -> &Value {
        &self.document["x-source"]
    }

    /// Every way `value` departs from definition `name`, as
    /// `path: problem` lines; empty when it conforms.
    pub fn check(&self, name: &str, value: &Value) -> Vec<String> {
        let mut problems = Vec::new();
        let schema = Value::String(format!("#/definitions/{name}"));
        let mut reference = Map::new();
        reference.insert("$ref".to_owned(), schema);
        self.check_schema(&Value::Object(reference), value, "$", &mut problems);
        problems
    }

    /// The query parameters operation `method path` declares (`path` as the
    /// document writes it, e.g. `/api/v1/applications/{name}`); `None` when
    /// the subset has no such operation.
    pub fn query_parameters(&self, method: &str, path: &str) -> Option<Vec<String>> {
        let operation = self.document["paths"].get(path)?.get(method.to_ascii_lowercase())?;
        Some(
            operation["parameters"]
                .as_array()?
                .iter()
                .filter(|p| p["in"] == "query")
                .filter_map(|p| p["name"].as_str().map(str::to_owned))
                .collect(),
        )
    }

    /// The definition operation `method path` takes as its body, or
    /// answers with when it succeeds.
    pub fn body_definition(&self, method: &str, path: &str) -> Option<String> {
        let operation = self.document["paths"].get(path)?.get(method.to_ascii_lowercase())?;
        let schema = operation["parameters"]
            .as_array()?
            .iter()
            .find(|p| p["in"] == "body")
            .map(|p| &p["schema"])?;
        definition_name(schema)
    }

    /// The definition operation `method path` answers `200` with.
    pub fn answer_definition(&self, method: &str, path: &str) -> Option<String> {
        let operation = self.document["paths"].get(path)?.get(method.to_ascii_lowercase())?;
        definition_name(&operation["responses"]["200"]["schema"])
    }

    fn check_schema(&self, schema: &Value, value: &Value, at: &str, problems: &mut Vec<String>) {
        if let Some(name) = definition_name(schema) {
            match self.document["definitions"].get(&name) {
                Some(definition) => self.check_schema(definition, value, at, problems),
                None => problems.push(format!("{at}: the subset has no definition `{name}`")),
            }
            return;
        }
        if value.is_null() {
            problems.push(format!("{at}: null"));
            return;
        }
        let kind = schema["type"].as_str().unwrap_or("object");
        let format = schema["format"].as_str().unwrap_or("");
        let wrong = |problems: &mut Vec<String>| problems.push(format!("{at}: expected {kind} {format}, got {value}"));
        match (kind, value) {
            ("string", Value::String(text)) => match format {
                "int64" if text.parse::<i64>().is_err() => wrong(problems),
                "date-time" if !rfc3339(text) => wrong(problems),
                _ => {}
            },
            ("integer", Value::Number(n)) if n.is_i64() || n.is_u64() => {}
            ("number", Value::Number(_)) | ("boolean", Value::Bool(_)) => {}
            ("array", Value::Array(items)) => {
                for (index, item) in items.iter().enumerate() {
                    self.check_schema(&schema["items"], item, &format!("{at}[{index}]"), problems);
                }
            }
            ("object", Value::Object(fields)) => {
                let properties = schema["properties"].as_object();
                let additional = schema.get("additionalProperties");
                for (key, field) in fields {
                    let path = format!("{at}.{key}");
                    match (properties.and_then(|p| p.get(key)), additional) {
                        (Some(property), _) => self.check_schema(property, field, &path, problems),
                        (None, Some(additional)) if additional.is_object() => {
                            self.check_schema(additional, field, &path, problems);
                        }
                        _ => problems.push(format!("{path}: not a property of this definition")),
                    }
                }
                for required in schema["required"].as_array().into_iter().flatten() {
                    if let Some(required) = required.as_str()
                        && !fields.contains_key(required)
                    {
                        problems.push(format!("{at}.{required}: required, missing"));
                    }
                }
            }
            _ => wrong(problems),
        }
    }
}

fn definition_name(schema: &Value) -> Option<String> {
    schema["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/definitions/"))
        .map(str::to_owned)
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`, as Kubernetes writes times.
fn rfc3339(text: &str) -> bool {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).is_ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use serde_json::json;

    #[test]
    fn the_subset_names_its_source_and_checks_values() {
        let swagger = subset();
        assert_eq!(swagger.source()["repository"], "https://github.com/argoproj/argo-cd");
        assert_eq!(swagger.source()["commit"].as_str().unwrap().len(), 40);
        assert_eq!(
            swagger
                .body_definition("POST", "/api/v1/applications/{name}/sync")
                .as_deref(),
            Some("applicationApplicationSyncRequest")
        );
        assert_eq!(
            swagger.answer_definition("GET", "/api/v1/applications").as_deref(),
            Some("v1alpha1ApplicationList")
        );
        assert!(
            swagger
                .check(
                    "applicationApplicationSyncRequest",
                    &json!({"prune": true, "revision": "abc"})
                )
                .is_empty()
        );
        let problems = swagger.check(
            "v1alpha1Application",
            &json!({"metadata": {"name": 1, "generation": "2", "labels": {"a": "b"}, "creationTimestamp": "yesterday"}, "spek": {}, "status": null}),
        );
        assert_eq!(problems.len(), 5, "{problems:#?}");
        assert!(
            swagger
                .query_parameters("GET", "/api/v1/applications/{name}")
                .unwrap()
                .contains(&"refresh".to_owned())
        );
    }
}
