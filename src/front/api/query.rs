//! Query strings, read by the same [`QueryDoc`] table the OpenAPI document
//! is written from: a route's handler passes its parameters' docs, and a
//! name the table lacks, a name given twice or a value outside its type
//! (an empty text, a number outside its bounds, a time that is not RFC
//! 3339, a word outside its enum) is refused with 422 naming the parameter.
//! What the document says a parameter takes is therefore exactly what the
//! server takes.

use std::collections::BTreeMap;

use axum::extract::Query;
use axum::http::Uri;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::openapi::{QueryDoc, QueryType};
use crate::front::gateway::GatewayError;

/// One parameter's value, as its [`QueryType`] reads it.
#[derive(Debug, Clone, PartialEq)]
enum QueryValue {
    Text(String),
    Integer(u64),
    Boolean(bool),
    Time(OffsetDateTime),
}

/// A request's query parameters, each checked against its [`QueryDoc`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryValues {
    values: BTreeMap<&'static str, QueryValue>,
}

impl QueryValues {
    /// Reads the query string of `uri` against `docs`: every parameter
    /// must be documented, given once and valid for its type.
    pub fn read(uri: &Uri, docs: &'static [QueryDoc]) -> Result<Self, GatewayError> {
        let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(uri).map_err(|err| GatewayError::Invalid {
            field: None,
            message: format!("the query string cannot be read: {}", err.body_text()),
        })?;
        let mut values = BTreeMap::new();
        for (name, text) in pairs {
            let Some(doc) = docs.iter().find(|doc| doc.name == name) else {
                let known: Vec<&str> = docs.iter().map(|doc| doc.name).collect();
                return Err(invalid(
                    &name,
                    if known.is_empty() {
                        format!("unknown query parameter `{name}`: this route takes none")
                    } else {
                        format!("unknown query parameter `{name}` (known: {})", known.join(", "))
                    },
                ));
            };
            let value = parse(doc, &text)?;
            if values.insert(doc.name, value).is_some() {
                return Err(invalid(doc.name, format!("`{}` is given more than once", doc.name)));
            }
        }
        Ok(Self { values })
    }

    /// A text (or enum) parameter, if given.
    pub fn text(&self, name: &str) -> Option<String> {
        match self.values.get(name) {
            Some(QueryValue::Text(text)) => Some(text.clone()),
            _ => None,
        }
    }

    /// A whole-number parameter, if given.
    pub fn integer(&self, name: &str) -> Option<usize> {
        match self.values.get(name) {
            Some(QueryValue::Integer(number)) => usize::try_from(*number).ok(),
            _ => None,
        }
    }

    /// A boolean parameter, if given.
    pub fn boolean(&self, name: &str) -> Option<bool> {
        match self.values.get(name) {
            Some(QueryValue::Boolean(value)) => Some(*value),
            _ => None,
        }
    }

    /// A time parameter, if given.
    pub fn time(&self, name: &str) -> Option<OffsetDateTime> {
        match self.values.get(name) {
            Some(QueryValue::Time(time)) => Some(*time),
            _ => None,
        }
    }
}

fn invalid(field: &str, message: String) -> GatewayError {
    GatewayError::Invalid {
        field: Some(field.to_owned()),
        message,
    }
}

/// `text` as `doc`'s type says, or why not (naming the parameter).
fn parse(doc: &QueryDoc, text: &str) -> Result<QueryValue, GatewayError> {
    let name = doc.name;
    match doc.kind {
        QueryType::Text => {
            if text.is_empty() {
                return Err(invalid(
                    name,
                    format!("`{name}` must not be empty (leave it out instead)"),
                ));
            }
            Ok(QueryValue::Text(text.to_owned()))
        }
        QueryType::Enum(_, words) => {
            if words.contains(&text) {
                Ok(QueryValue::Text(text.to_owned()))
            } else {
                Err(invalid(name, format!("`{name}` must be one of {}", words.join(", "))))
            }
        }
        QueryType::Integer { minimum, maximum } => {
            let bounds = match maximum {
                Some(maximum) => format!("a whole number from {minimum} to {maximum}"),
                None => format!("a whole number from {minimum}"),
            };
            // Digits only: no sign, no spaces, no exponent.
            let number = Some(text)
                .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|text| text.parse::<u64>().ok())
                .filter(|number| *number >= minimum && maximum.is_none_or(|maximum| *number <= maximum))
                .ok_or_else(|| invalid(name, format!("`{name}` must be {bounds}")))?;
            Ok(QueryValue::Integer(number))
        }
        QueryType::Boolean => match text {
            "true" => Ok(QueryValue::Boolean(true)),
            "false" => Ok(QueryValue::Boolean(false)),
            _ => Err(invalid(name, format!("`{name}` must be true or false"))),
        },
        QueryType::DateTime => parse_time(text).map(QueryValue::Time).ok_or_else(|| {
            invalid(
                name,
                format!("`{name}` must be an RFC 3339 time, e.g. 2026-11-29T10:00:00Z"),
            )
        }),
    }
}

/// An RFC 3339 time (what JSON Schema's `date-time` format is).
pub fn parse_time(text: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(text, &Rfc3339).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCS: &[QueryDoc] = &[
        QueryDoc {
            name: "consumer",
            kind: QueryType::Text,
            description: "",
        },
        QueryDoc {
            name: "kind",
            kind: QueryType::Enum("SagaKind", &["release", "gitops"]),
            description: "",
        },
        QueryDoc {
            name: "limit",
            kind: QueryType::Integer {
                minimum: 1,
                maximum: Some(500),
            },
            description: "",
        },
        QueryDoc {
            name: "includeReplayed",
            kind: QueryType::Boolean,
            description: "",
        },
        QueryDoc {
            name: "since",
            kind: QueryType::DateTime,
            description: "",
        },
    ];

    fn read(query: &str) -> Result<QueryValues, GatewayError> {
        let uri: Uri = format!("/v1/x?{query}")
            .parse()
            .unwrap_or_else(|err| panic!("{query}: {err}"));
        QueryValues::read(&uri, DOCS)
    }

    fn refused_field(query: &str) -> String {
        match read(query) {
            Err(GatewayError::Invalid { field: Some(field), .. }) => field,
            other => panic!("{query}: {other:?}"),
        }
    }

    #[test]
    fn documented_parameters_are_read_with_their_types() {
        let values = read("consumer=commit&kind=gitops&limit=500&includeReplayed=true&since=2026-11-29T10:00:00Z")
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(values.text("consumer").as_deref(), Some("commit"));
        assert_eq!(values.text("kind").as_deref(), Some("gitops"));
        assert_eq!(values.integer("limit"), Some(500));
        assert_eq!(values.boolean("includeReplayed"), Some(true));
        assert!(values.time("since").is_some());
        assert_eq!(read("").unwrap_or_else(|err| panic!("{err}")), QueryValues::default());
    }

    #[test]
    fn unknown_repeated_and_invalid_parameters_are_refused_by_name() {
        assert_eq!(refused_field("consumr=commit"), "consumr");
        assert_eq!(refused_field("limit=1&limit=2"), "limit");
        assert_eq!(refused_field("consumer="), "consumer");
        assert_eq!(refused_field("kind=billing"), "kind");
        for limit in [
            "0",
            "501",
            "+5",
            "-1",
            "1.5",
            "1e2",
            "",
            "ten",
            "99999999999999999999999",
        ] {
            assert_eq!(refused_field(&format!("limit={limit}")), "limit", "{limit}");
        }
        for flag in ["", "yes", "1", "TRUE"] {
            assert_eq!(refused_field(&format!("includeReplayed={flag}")), "includeReplayed");
        }
        for since in ["", "yesterday", "2026-11-29"] {
            assert_eq!(refused_field(&format!("since={since}")), "since", "{since}");
        }
    }

    #[test]
    fn a_route_without_parameters_refuses_any() {
        let uri: Uri = "/v1/x?limit=1".parse().unwrap_or_else(|err| panic!("{err}"));
        assert!(matches!(
            QueryValues::read(&uri, &[]),
            Err(GatewayError::Invalid { field: Some(field), .. }) if field == "limit"
        ));
    }
}
