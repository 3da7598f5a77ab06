//! Service Bus SQL filters, as far as bosun's topology uses them.
//!
//! This is a stand-in with the interface of the full SQL filter evaluator
//! (written separately, to replace this file): it parses and evaluates a
//! conjunction (`AND`) of these terms, which is all that bosun's rules
//! (`src/backends/servicebus/plan/`) and the `$Default` true filter emit:
//!
//! - `sys.Label IN ('A','B')` (any system or user property, string literals),
//! - `name = 'text'` / `name = 5`, `name <> 'text'`,
//! - `EXISTS(name)` and `NOT EXISTS(name)`,
//! - `1=1` (true) and `1=0` (false).
//!
//! `sys.X` names a system property (`sys.Label` is the message's subject);
//! any other name (optionally `user.X`) an application property. Anything
//! else fails to parse with [`FilterError`].

/// A value a filter compares.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    /// SQL `NULL` (a missing property).
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A string.
    String(String),
}

/// What a filter is evaluated against: a message's system and user
/// (application) properties.
pub trait FilterSubject {
    /// A system property (`Label`, `MessageId`, `CorrelationId`, `To`,
    /// `ReplyTo`, `ContentType`, `SessionId`, ...), if the message has it.
    fn system(&self, name: &str) -> Option<SqlValue>;
    /// An application property, if the message has it.
    fn user(&self, name: &str) -> Option<SqlValue>;
}

/// A filter expression that did not parse.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// The expression uses syntax this evaluator does not know.
    #[error("cannot parse SQL filter `{expression}` at `{at}`: {reason}")]
    Syntax {
        /// The whole expression.
        expression: String,
        /// The rest of the expression where parsing stopped.
        at: String,
        /// What was expected.
        reason: &'static str,
    },
}

/// A parsed SQL filter.
#[derive(Debug, Clone)]
pub struct SqlFilter {
    terms: Vec<Term>,
}

#[derive(Debug, Clone)]
enum Property {
    System(String),
    User(String),
}

#[derive(Debug, Clone)]
enum Term {
    Constant(bool),
    In(Property, Vec<SqlValue>),
    Equals(Property, SqlValue, bool),
    Exists(Property, bool),
}

struct Parser<'a> {
    expression: &'a str,
    rest: &'a str,
}

impl<'a> Parser<'a> {
    fn error(&self, reason: &'static str) -> FilterError {
        FilterError::Syntax {
            expression: self.expression.to_owned(),
            at: self.rest.to_owned(),
            reason,
        }
    }

    fn skip_space(&mut self) {
        self.rest = self.rest.trim_start();
    }

    fn keyword(&mut self, word: &str) -> bool {
        self.skip_space();
        let Some(head) = self.rest.get(..word.len()) else {
            return false;
        };
        let boundary = self.rest[word.len()..]
            .chars()
            .next()
            .is_none_or(|next| !(next.is_alphanumeric() || next == '_' || next == '.'));
        if head.eq_ignore_ascii_case(word) && boundary {
            self.rest = &self.rest[word.len()..];
            true
        } else {
            false
        }
    }

    fn symbol(&mut self, symbol: &str) -> bool {
        self.skip_space();
        if let Some(rest) = self.rest.strip_prefix(symbol) {
            self.rest = rest;
            true
        } else {
            false
        }
    }

    fn identifier(&mut self) -> Result<Property, FilterError> {
        self.skip_space();
        let end = self
            .rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.' || c == '-'))
            .unwrap_or(self.rest.len());
        if end == 0 || self.rest.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(self.error("a property name"));
        }
        let name = &self.rest[..end];
        self.rest = &self.rest[end..];
        let lower = name.to_ascii_lowercase();
        Ok(if lower.starts_with("sys.") {
            Property::System(name[4..].to_owned())
        } else if lower.starts_with("user.") {
            Property::User(name[5..].to_owned())
        } else {
            Property::User(name.to_owned())
        })
    }

    fn literal(&mut self) -> Result<SqlValue, FilterError> {
        self.skip_space();
        if let Some(body) = self.rest.strip_prefix('\'') {
            let mut text = String::new();
            let mut chars = body.char_indices();
            while let Some((index, c)) = chars.next() {
                if c == '\'' {
                    if body[index + 1..].starts_with('\'') {
                        text.push('\'');
                        chars.next();
                    } else {
                        self.rest = &body[index + 1..];
                        return Ok(SqlValue::String(text));
                    }
                } else {
                    text.push(c);
                }
            }
            return Err(self.error("a closing quote"));
        }
        let end = self
            .rest
            .find(|c: char| !(c.is_ascii_digit() || c == '-' || c == '.'))
            .unwrap_or(self.rest.len());
        let number = &self.rest[..end];
        if let Ok(int) = number.parse::<i64>() {
            self.rest = &self.rest[end..];
            return Ok(SqlValue::Int(int));
        }
        if let Ok(float) = number.parse::<f64>() {
            self.rest = &self.rest[end..];
            return Ok(SqlValue::Float(float));
        }
        Err(self.error("a string or number literal"))
    }

    fn term(&mut self) -> Result<Term, FilterError> {
        self.skip_space();
        if self.rest.starts_with(|c: char| c.is_ascii_digit()) {
            let left = self.literal()?;
            if !self.symbol("=") {
                return Err(self.error("`=` in a constant comparison"));
            }
            let right = self.literal()?;
            return Ok(Term::Constant(left == right));
        }
        let negated = self.keyword("NOT");
        if self.keyword("EXISTS") {
            if !self.symbol("(") {
                return Err(self.error("`(` after EXISTS"));
            }
            let property = self.identifier()?;
            if !self.symbol(")") {
                return Err(self.error("`)` after EXISTS(name"));
            }
            return Ok(Term::Exists(property, !negated));
        }
        if negated {
            return Err(self.error("EXISTS after NOT"));
        }
        let property = self.identifier()?;
        if self.keyword("IN") {
            if !self.symbol("(") {
                return Err(self.error("`(` after IN"));
            }
            let mut values = vec![self.literal()?];
            while self.symbol(",") {
                values.push(self.literal()?);
            }
            if !self.symbol(")") {
                return Err(self.error("`)` closing IN"));
            }
            return Ok(Term::In(property, values));
        }
        if self.symbol("<>") || self.symbol("!=") {
            return Ok(Term::Equals(property, self.literal()?, false));
        }
        if self.symbol("=") {
            return Ok(Term::Equals(property, self.literal()?, true));
        }
        Err(self.error("IN, = or <> after a property"))
    }
}

impl SqlFilter {
    /// Parses a filter expression.
    pub fn parse(expr: &str) -> Result<Self, FilterError> {
        let mut parser = Parser {
            expression: expr,
            rest: expr,
        };
        let mut terms = vec![parser.term()?];
        while parser.keyword("AND") {
            terms.push(parser.term()?);
        }
        parser.skip_space();
        if !parser.rest.is_empty() {
            return Err(parser.error("AND or the end of the expression"));
        }
        Ok(Self { terms })
    }

    /// Whether a message with these properties passes the filter.
    pub fn matches(&self, subject: &dyn FilterSubject) -> bool {
        self.terms.iter().all(|term| evaluate(term, subject))
    }
}

fn lookup(property: &Property, subject: &dyn FilterSubject) -> Option<SqlValue> {
    match property {
        Property::System(name) => subject.system(name),
        Property::User(name) => subject.user(name),
    }
    .filter(|value| *value != SqlValue::Null)
}

fn same(left: &SqlValue, right: &SqlValue) -> bool {
    match (left, right) {
        (SqlValue::Int(a), SqlValue::Float(b)) | (SqlValue::Float(b), SqlValue::Int(a)) => (*a as f64) == *b,
        _ => left == right,
    }
}

fn evaluate(term: &Term, subject: &dyn FilterSubject) -> bool {
    match term {
        Term::Constant(value) => *value,
        Term::Exists(property, wanted) => lookup(property, subject).is_some() == *wanted,
        Term::In(property, values) => {
            lookup(property, subject).is_some_and(|value| values.iter().any(|candidate| same(&value, candidate)))
        }
        Term::Equals(property, literal, equal) => {
            lookup(property, subject).is_some_and(|value| same(&value, literal) == *equal)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::HashMap;

    use super::*;

    struct Props {
        system: HashMap<&'static str, SqlValue>,
        user: HashMap<&'static str, SqlValue>,
    }

    impl FilterSubject for Props {
        fn system(&self, name: &str) -> Option<SqlValue> {
            self.system.get(name).cloned()
        }
        fn user(&self, name: &str) -> Option<SqlValue> {
            self.user.get(name).cloned()
        }
    }

    fn message(label: &str, replay_to: Option<&str>) -> Props {
        Props {
            system: HashMap::from([("Label", SqlValue::String(label.to_owned()))]),
            user: replay_to
                .map(|to| HashMap::from([("replayTo", SqlValue::String(to.to_owned()))]))
                .unwrap_or_default(),
        }
    }

    #[test]
    fn bosuns_rules_route_by_label_and_replay_target() {
        let types =
            SqlFilter::parse("sys.Label IN ('BuildCompleted','ImagePublished') AND NOT EXISTS(replayTo)").unwrap();
        assert!(types.matches(&message("BuildCompleted", None)));
        assert!(!types.matches(&message("CommitCreated", None)));
        assert!(!types.matches(&message("BuildCompleted", Some("x"))));
        let replay = SqlFilter::parse("replayTo = 'o''brien'").unwrap();
        assert!(replay.matches(&message("Any", Some("o'brien"))));
        assert!(!replay.matches(&message("Any", Some("other"))));
        assert!(!replay.matches(&message("Any", None)));
        assert!(
            !SqlFilter::parse("1=0 AND NOT EXISTS(replayTo)")
                .unwrap()
                .matches(&message("A", None))
        );
        assert!(SqlFilter::parse("1=1").unwrap().matches(&message("A", None)));
    }

    #[test]
    fn unknown_syntax_is_refused() {
        for bad in [
            "sys.Label LIKE 'x%'",
            "replayTo = ",
            "(a = 'b')",
            "a = 'b' OR c = 'd'",
            "1 = 1 extra",
        ] {
            assert!(SqlFilter::parse(bad).is_err(), "{bad}");
        }
    }
}
