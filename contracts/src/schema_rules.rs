//! The field rules of [`crate::validate`] written as JSON Schema keywords,
//! so the schemas in `contracts/schemas/` refuse what bosun refuses.
//!
//! Every public function here is a schemars transform, attached to a field
//! with `#[schemars(transform = schema_rules::branch_name)]`; the functions
//! taking a limit return one (`schema_rules::text(MAX_TITLE_CHARS)`).
//! [`each`] applies a rule to the items of a list and [`keys`] to the keys
//! of a map. The string keywords used (`pattern`, `minLength`, `maxLength`,
//! and `not` over a string) constrain strings only, so one transform serves
//! a `String` and an `Option<String>`, whose `null` stays allowed. The
//! limits and character lists come from the constants in
//! [`crate::validate`], which the Rust rules use too; the tests below check
//! that each schema and its Rust function agree on tables of values and on
//! generated strings, with an independent validator.
//!
//! Patterns are ECMA-262 without lookaround or backreferences, and valid
//! with or without the `u` flag. A value ending in a line feed gets its own
//! refusal (`not` with the pattern `\n`) wherever bosun refuses line feeds,
//! because some validators (Python's `re` among them) let `$` match before
//! a final line feed. Such a validator may still refuse a few odd values
//! bosun accepts (a repository path ending in `/.git` and a line feed),
//! never the other way round.
//!
//! # What the schemas cannot say
//!
//! bosun's Rust validation stays the authority. A few of its checks have no
//! exact JSON Schema form; the description of each field concerned says so
//! after `Also checked by bosun, beyond this schema:`.
//!
//! - Byte limits: a branch name is at most 255 bytes of UTF-8 after
//!   `refs/heads/`, a URL at most 2048 bytes. `maxLength` counts
//!   characters, so the schema sets the same number of characters; a value
//!   with non-ASCII characters can pass it and still be refused.
//! - One field unique across the items of a list (`uniqueItems` compares
//!   whole items): artifact names of `BuildCompleted`, environments of
//!   `ReleasePlanned`, resource type and name of `ProvisionInfrastructure`.
//! - Comparisons between fields: `finishedAt` not before `startedAt`
//!   (`PipelineRunCompleted`), `total` equal to `passed + failed + skipped`
//!   (`TestSummary`), `targetBranch` other than `sourceBranch`
//!   (`OpenPullRequest`, `PullRequestOpened`).
//!
//! Outside the payload schemas: the envelope's `type`, `kind` and
//! `schemaVersion` must match a catalogue entry (`index.json` lists them),
//! and a message is at most [`crate::MAX_MESSAGE_BYTES`] bytes. The
//! envelope schema's `tenantId` carries [`tenant_id`], which bosun's front
//! door and the consumers check; decoding an envelope does not.

use schemars::Schema;
use serde_json::{Map, Value, json};

use crate::validate::{
    BLOB_CONTAINER_MAX_CHARS, BLOB_CONTAINER_MIN_CHARS, BLOB_KEY_MAX_CHARS, BRANCH_NAME_FORBIDDEN,
    BRANCH_NAME_MAX_BYTES, BRANCH_PREFIX, DNS_LABEL_MAX_CHARS, IDENTIFIER_MAX_CHARS, MEDIA_TYPE_TOKEN_PUNCTUATION,
    NUGET_PACKAGE_ID_MAX_CHARS, OCI_REPOSITORY_MAX_CHARS, OCI_TAG_MAX_CHARS, REGISTRY_HOST_MAX_CHARS,
    REPOSITORY_NAME_FORBIDDEN, REPOSITORY_NAME_MAX_CHARS, STACK_NAME_MAX_PARTS, TENANT_ID_MAX_CHARS, URL_MAX_BYTES,
    URL_SCHEMES,
};

/// Control characters (`char::is_control`, Unicode category Cc), as the
/// inside of a character class.
pub const CONTROL: &str = r"\u0000-\u001f\u007f-\u009f";
/// Whitespace (`char::is_whitespace`, Unicode White_Space), as the inside
/// of a character class. ECMA-262's `\s` differs (it has U+FEFF, not
/// U+0085), so the characters are listed.
pub const WHITESPACE: &str = r"\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000";
/// Control characters and whitespace together, as the inside of a
/// character class.
pub const CONTROL_OR_WHITESPACE: &str = r"\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000";
/// Whitespace that is not a control character, as the inside of a
/// character class.
const SPACE: &str = r"\u0020\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000";
/// ASCII whitespace (`u8::is_ascii_whitespace`), as the inside of a
/// character class.
const ASCII_WHITESPACE: &str = r"\u0009\u000a\u000c\u000d\u0020";
/// The line feed, refused on its own for validators whose `$` matches
/// before a final line feed.
const LINE_FEED: &str = r"\n";
/// The ports 1-65535 (a `u16` above 0) without leading zeros.
const PORT_NUMBER: &str = r"([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])";
/// Marks what bosun checks that a field's schema cannot say.
pub const BEYOND_SCHEMA: &str = "Also checked by bosun, beyond this schema:";

/// The keywords of one rule on a string.
#[derive(Default)]
struct StringRule {
    /// The value's shape (`pattern`).
    pattern: Option<String>,
    /// Patterns no value may match, joined into one `not`.
    forbidden: Vec<String>,
    min_length: Option<usize>,
    max_length: Option<usize>,
    /// Schemas of which the value must match one (`anyOf`).
    any_of: Vec<Value>,
    /// What the keywords cannot say, added to the description.
    beyond: Option<String>,
}

impl StringRule {
    fn pattern(pattern: impl Into<String>) -> Self {
        Self {
            pattern: Some(pattern.into()),
            ..Self::default()
        }
    }

    fn forbid(mut self, pattern: impl Into<String>) -> Self {
        self.forbidden.push(pattern.into());
        self
    }

    fn min_length(mut self, min: usize) -> Self {
        self.min_length = Some(min);
        self
    }

    fn max_length(mut self, max: usize) -> Self {
        self.max_length = Some(max);
        self
    }

    fn any_of(mut self, schemas: Vec<Value>) -> Self {
        self.any_of = schemas;
        self
    }

    fn beyond(mut self, text: impl Into<String>) -> Self {
        self.beyond = Some(text.into());
        self
    }

    fn apply(self, schema: &mut Schema) {
        if let Some(min) = self.min_length {
            add(schema, "minLength", json!(min));
        }
        if let Some(max) = self.max_length {
            add(schema, "maxLength", json!(max));
        }
        if let Some(pattern) = self.pattern {
            add(schema, "pattern", json!(pattern));
        }
        if !self.forbidden.is_empty() {
            add(
                schema,
                "not",
                json!({"type": "string", "pattern": self.forbidden.join("|")}),
            );
        }
        if !self.any_of.is_empty() {
            add(schema, "anyOf", Value::Array(self.any_of));
        }
        if let Some(text) = self.beyond {
            also_checked(&text)(schema);
        }
    }
}

/// Adds a keyword; a keyword the schema already has goes into `allOf`, so
/// two rules on one field both apply.
fn add(schema: &mut Schema, keyword: &str, value: Value) {
    let object = schema.ensure_object();
    if !object.contains_key(keyword) {
        object.insert(keyword.to_owned(), value);
        return;
    }
    let mut extra = Map::new();
    extra.insert(keyword.to_owned(), value);
    match object.entry("allOf").or_insert_with(|| Value::Array(Vec::new())) {
        Value::Array(all_of) => all_of.push(Value::Object(extra)),
        other => *other = json!([other.clone(), extra]),
    }
}

/// Escapes characters for the inside of a character class.
fn class_of(chars: &[char]) -> String {
    let mut class = String::new();
    for &c in chars {
        if matches!(c, '\\' | ']' | '[' | '^' | '-') {
            class.push('\\');
        }
        class.push(c);
    }
    class
}

/// Escapes text to match itself in a pattern.
fn literal(text: &str) -> String {
    let mut pattern = String::new();
    for c in text.chars() {
        if "^$\\.*+?()[]{}|".contains(c) {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern
}

/// The generator of every contract schema: JSON Schema 2020-12, with the
/// bounds of fixed-width integers ([`integer_bounds`]) added to every
/// subschema. Here, below the catalogue, so that [`crate::messages`] and
/// [`crate::schema`] both use it.
pub fn generator() -> schemars::SchemaGenerator {
    schemars::generate::SchemaSettings::draft2020_12()
        .with_transform(schemars::transform::RecursiveTransform(integer_bounds))
        .into_generator()
}

/// The bounds of a fixed-width integer (`"format": "uint32"` and the like,
/// as schemars writes a Rust `u32`): schemars gives `minimum: 0` for an
/// unsigned one and no `maximum`, so a schema would let through a number
/// serde refuses (`4294967296` for a `u32`). Applied to every subschema by
/// [`generator`].
pub fn integer_bounds(schema: &mut Schema) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let (minimum, maximum): (i128, i128) = match object.get("format").and_then(Value::as_str) {
        Some("uint8") => (0, u8::MAX.into()),
        Some("uint16") => (0, u16::MAX.into()),
        Some("uint32") => (0, u32::MAX.into()),
        Some("uint64") => (0, u64::MAX.into()),
        Some("int8") => (i8::MIN.into(), i8::MAX.into()),
        Some("int16") => (i16::MIN.into(), i16::MAX.into()),
        Some("int32") => (i32::MIN.into(), i32::MAX.into()),
        Some("int64") => (i64::MIN.into(), i64::MAX.into()),
        _ => return,
    };
    let number = |value: i128| {
        u64::try_from(value)
            .map(Value::from)
            .or_else(|_| i64::try_from(value).map(Value::from))
            .unwrap_or(Value::Null)
    };
    object.entry("minimum").or_insert_with(|| number(minimum));
    object.entry("maximum").or_insert_with(|| number(maximum));
}

/// Appends what bosun checks beyond the schema to the field's description,
/// after [`BEYOND_SCHEMA`].
pub fn also_checked(text: &str) -> impl FnMut(&mut Schema) + '_ {
    move |schema: &mut Schema| {
        let object = schema.ensure_object();
        let sentence = format!("{BEYOND_SCHEMA} {text}.");
        let description = match object.get("description").and_then(Value::as_str) {
            Some(existing) if !existing.is_empty() => format!("{existing}\n\n{sentence}"),
            _ => sentence,
        };
        object.insert("description".to_owned(), json!(description));
    }
}

/// Applies a rule to the items of a list.
pub fn each(mut rule: impl FnMut(&mut Schema)) -> impl FnMut(&mut Schema) {
    move |schema: &mut Schema| {
        if let Some(items) = schema
            .get_mut("items")
            .and_then(|items| <&mut Schema>::try_from(items).ok())
        {
            rule(items);
        }
    }
}

/// Applies a rule to the keys of a map (`propertyNames`).
pub fn keys(mut rule: impl FnMut(&mut Schema)) -> impl FnMut(&mut Schema) {
    move |schema: &mut Schema| {
        let object = schema.ensure_object();
        let names = object
            .entry("propertyNames")
            .or_insert_with(|| json!({"type": "string"}));
        if let Ok(names) = <&mut Schema>::try_from(names) {
            rule(names);
        }
    }
}

/// [`crate::validate::non_empty`]: at least one character that is not
/// whitespace.
pub fn non_empty(schema: &mut Schema) {
    StringRule::pattern(format!("[^{WHITESPACE}]")).apply(schema);
}

/// [`crate::validate::max_chars`]: at most `max` characters.
pub fn max_chars(max: usize) -> impl FnMut(&mut Schema) {
    move |schema: &mut Schema| StringRule::default().max_length(max).apply(schema)
}

/// [`crate::validate::text`]: not blank, at most `max` characters.
pub fn text(max: usize) -> impl FnMut(&mut Schema) {
    move |schema: &mut Schema| {
        StringRule::pattern(format!("[^{WHITESPACE}]"))
            .max_length(max)
            .apply(schema);
    }
}

/// No whitespace anywhere (the keys of `ProvisionInfrastructure.config`).
pub fn no_whitespace(schema: &mut Schema) {
    StringRule::default().forbid(format!("[{WHITESPACE}]")).apply(schema);
}

/// [`crate::validate::tenant_id`].
pub fn tenant_id(schema: &mut Schema) {
    StringRule::pattern("^[a-z0-9][a-z0-9-]*$")
        .max_length(TENANT_ID_MAX_CHARS)
        .forbid(LINE_FEED)
        .apply(schema);
}

/// [`crate::validate::repository_name`].
pub fn repository_name(schema: &mut Schema) {
    let refused = format!("{}{CONTROL_OR_WHITESPACE}", class_of(REPOSITORY_NAME_FORBIDDEN));
    StringRule::pattern(format!("^[^{refused}_.]([^{refused}]*[^{refused}.])?$"))
        .max_length(REPOSITORY_NAME_MAX_CHARS)
        .forbid(LINE_FEED)
        .apply(schema);
}

/// [`crate::validate::branch_name`]. The byte limit becomes the same
/// number of characters, and the description says so.
pub fn branch_name(schema: &mut Schema) {
    let prefix = literal(BRANCH_PREFIX);
    StringRule::pattern(format!(
        "^[^{CONTROL_OR_WHITESPACE}{}]+$",
        class_of(BRANCH_NAME_FORBIDDEN)
    ))
    .forbid(format!("^({prefix})?([-/]|@$)"))
    .forbid("[/.]$")
    .forbid("//")
    .forbid(r"\.\.")
    .forbid(r"@\{")
    .forbid(r"(^|/)\.")
    .forbid(r"\.lock(/|$)")
    .forbid(LINE_FEED)
    .any_of(vec![
        json!({"maxLength": BRANCH_NAME_MAX_BYTES}),
        json!({"pattern": format!("^{prefix}"), "maxLength": BRANCH_NAME_MAX_BYTES + BRANCH_PREFIX.len()}),
    ])
    .beyond(format!(
        "at most {BRANCH_NAME_MAX_BYTES} bytes of UTF-8 after an optional `{BRANCH_PREFIX}` (the schema counts characters)"
    ))
    .apply(schema);
}

/// [`crate::validate::repository_path`].
pub fn repository_path(schema: &mut Schema) {
    StringRule::pattern(r"^[^/\\\u0000]+(/[^/\\\u0000]+)*$")
        .forbid(r"(^|/)(\.\.?|\.[gG][iI][tT])(/|$)")
        .apply(schema);
}

/// [`crate::validate::git_sha`].
pub fn git_sha(schema: &mut Schema) {
    StringRule::pattern("^([0-9a-f]{40}|[0-9a-f]{64})$")
        .forbid(LINE_FEED)
        .apply(schema);
}

/// [`crate::validate::oci_digest`].
pub fn oci_digest(schema: &mut Schema) {
    StringRule::pattern("^sha256:[0-9a-f]{64}$")
        .forbid(LINE_FEED)
        .apply(schema);
}

/// The pattern of an identifier inside a longer pattern.
fn identifier_pattern() -> String {
    format!("[A-Za-z0-9][A-Za-z0-9._-]{{0,{}}}", IDENTIFIER_MAX_CHARS - 1)
}

/// [`crate::validate::identifier`].
pub fn identifier(schema: &mut Schema) {
    StringRule::pattern("^[A-Za-z0-9][A-Za-z0-9._-]*$")
        .max_length(IDENTIFIER_MAX_CHARS)
        .forbid(LINE_FEED)
        .apply(schema);
}

/// [`crate::validate::semantic_version`].
pub fn semantic_version(schema: &mut Schema) {
    let number = "(0|[1-9][0-9]*)";
    StringRule::pattern(format!(r"^{number}\.{number}\.{number}([-+][0-9A-Za-z.+-]*)?$"))
        .forbid(LINE_FEED)
        .apply(schema);
}

/// [`crate::validate::environment_name`].
pub fn environment_name(schema: &mut Schema) {
    StringRule::pattern("^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
        .max_length(DNS_LABEL_MAX_CHARS)
        .forbid(LINE_FEED)
        .apply(schema);
}

/// [`crate::validate::sha256_hex`].
pub fn sha256_hex(schema: &mut Schema) {
    StringRule::pattern("^[0-9a-f]{64}$").forbid(LINE_FEED).apply(schema);
}

/// [`crate::validate::sha512_hex`].
pub fn sha512_hex(schema: &mut Schema) {
    StringRule::pattern("^[0-9a-f]{128}$").forbid(LINE_FEED).apply(schema);
}

/// [`crate::validate::blob_container`].
pub fn blob_container(schema: &mut Schema) {
    StringRule::pattern("^[a-z0-9]+(-[a-z0-9]+)*$")
        .min_length(BLOB_CONTAINER_MIN_CHARS)
        .max_length(BLOB_CONTAINER_MAX_CHARS)
        .forbid(LINE_FEED)
        .apply(schema);
}

/// [`crate::validate::blob_key`].
pub fn blob_key(schema: &mut Schema) {
    StringRule::pattern(format!(r"^[^/\\{CONTROL}]+(/[^/\\{CONTROL}]+)*$"))
        .max_length(BLOB_KEY_MAX_CHARS)
        .forbid(r"(^|/)\.\.?(/|$)")
        .forbid(LINE_FEED)
        .apply(schema);
}

/// [`crate::validate::media_type`].
pub fn media_type(schema: &mut Schema) {
    let token = format!("[A-Za-z0-9{}]+", class_of(MEDIA_TYPE_TOKEN_PUNCTUATION));
    StringRule::pattern(format!("^[{SPACE}]*{token}/{token}[{SPACE}]*(;[^{CONTROL}]*)?$"))
        .forbid(LINE_FEED)
        .apply(schema);
}

/// [`crate::validate::url`]. The byte limit becomes the same number of
/// characters, and the description says so.
pub fn url(schema: &mut Schema) {
    let schemes: Vec<String> = URL_SCHEMES.iter().map(|scheme| literal(scheme)).collect();
    StringRule::pattern(format!("^({})[^{CONTROL_OR_WHITESPACE}]+$", schemes.join("|")))
        .max_length(URL_MAX_BYTES)
        .forbid(LINE_FEED)
        .beyond(format!(
            "at most {URL_MAX_BYTES} bytes of UTF-8 (the schema counts characters)"
        ))
        .apply(schema);
}

/// [`crate::validate::oci_repository`].
pub fn oci_repository(schema: &mut Schema) {
    let component = "[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*";
    StringRule::pattern(format!("^{component}(/{component})*$"))
        .max_length(OCI_REPOSITORY_MAX_CHARS)
        .forbid(LINE_FEED)
        .apply(schema);
}

/// [`crate::validate::oci_tag`].
pub fn oci_tag(schema: &mut Schema) {
    StringRule::pattern("^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
        .max_length(OCI_TAG_MAX_CHARS)
        .forbid(LINE_FEED)
        .apply(schema);
}

/// [`crate::validate::registry_host`]. Like the Rust rule, which reads
/// the port as a `u16`, a port may carry a `+` sign, and after the sign
/// leading zeros.
pub fn registry_host(schema: &mut Schema) {
    let label = format!("[a-z0-9]([a-z0-9-]{{0,{}}}[a-z0-9])?", DNS_LABEL_MAX_CHARS - 2);
    StringRule::pattern(format!(r"^{label}(\.{label})*(:(\+0*)?{PORT_NUMBER})?$"))
        .forbid(format!("^[^:]{{{}}}", REGISTRY_HOST_MAX_CHARS + 1))
        .forbid(LINE_FEED)
        .apply(schema);
}

/// [`crate::validate::nuget_package_id`].
pub fn nuget_package_id(schema: &mut Schema) {
    StringRule::pattern("^[A-Za-z0-9_]+([.-][A-Za-z0-9_]+)*$")
        .max_length(NUGET_PACKAGE_ID_MAX_CHARS)
        .forbid(LINE_FEED)
        .apply(schema);
}

/// [`crate::validate::stack_name`].
pub fn stack_name(schema: &mut Schema) {
    let part = identifier_pattern();
    StringRule::pattern(format!("^{part}(/{part}){{0,{}}}$", STACK_NAME_MAX_PARTS - 1))
        .forbid(LINE_FEED)
        .apply(schema);
}

/// The pattern of [`crate::validate::base64`].
fn base64_pattern() -> String {
    let space = format!("[{ASCII_WHITESPACE}]*");
    let digit = format!("[A-Za-z0-9+/]{space}");
    let padding = format!("[A-Za-z0-9+/=]{space}");
    format!("^{space}(({digit}){{4}})*(({digit}){{2}}({padding}){{2}})?$")
}

/// [`crate::validate::base64`].
pub fn base64(schema: &mut Schema) {
    StringRule::pattern(base64_pattern()).apply(schema);
}

/// An e-mail address: it has an `@` (all `CreateCommit` checks of
/// `author.email`).
pub fn email(schema: &mut Schema) {
    StringRule::pattern("@").apply(schema);
}

/// [`crate::validate::positive`]: at least 1.
pub fn positive(schema: &mut Schema) {
    schema.insert("minimum".to_owned(), json!(1));
}

/// At most `max`.
pub fn at_most(max: u64) -> impl FnMut(&mut Schema) {
    move |schema: &mut Schema| {
        schema.insert("maximum".to_owned(), json!(max));
    }
}

/// [`crate::validate::non_empty_list`]: at least one item.
pub fn non_empty_list(schema: &mut Schema) {
    schema.insert("minItems".to_owned(), json!(1));
}

/// At most `max` items.
pub fn max_items(max: usize) -> impl FnMut(&mut Schema) {
    move |schema: &mut Schema| {
        schema.insert("maxItems".to_owned(), json!(max));
    }
}

/// [`crate::validate::unique`] on a list of strings: no item twice.
pub fn unique(schema: &mut Schema) {
    schema.insert("uniqueItems".to_owned(), json!(true));
}

/// `BundleFile`: with `encoding` `base64`, `content` is base64.
pub fn bundle_file_content(schema: &mut Schema) {
    let mut content = json_object();
    base64(&mut content);
    schema.insert(
        "if".to_owned(),
        json!({"properties": {"encoding": {"const": "base64"}}, "required": ["encoding"]}),
    );
    schema.insert("then".to_owned(), json!({"properties": {"content": content}}));
}

/// `CreateCommit`: at least one file, unless `delete` lists a path.
pub fn create_commit_changes(schema: &mut Schema) {
    add(
        schema,
        "anyOf",
        json!([
            {"properties": {"files": {"minItems": 1}}},
            {"properties": {"delete": {"minItems": 1}}, "required": ["delete"]}
        ]),
    );
}

/// `PullRequestOpened`: `mergeCommitSha` is required when `status` is
/// `completed`.
pub fn merge_commit_when_completed(schema: &mut Schema) {
    schema.insert(
        "if".to_owned(),
        json!({"properties": {"status": {"const": "completed"}}, "required": ["status"]}),
    );
    schema.insert(
        "then".to_owned(),
        json!({"properties": {"mergeCommitSha": {"type": "string"}}, "required": ["mergeCommitSha"]}),
    );
}

/// `ReleaseRejected`: `approver` is required unless `timedOut` is true.
pub fn approver_unless_timed_out(schema: &mut Schema) {
    schema.insert(
        "if".to_owned(),
        json!({"properties": {"timedOut": {"const": true}}, "required": ["timedOut"]}),
    );
    schema.insert(
        "else".to_owned(),
        json!({"properties": {"approver": {"type": "string"}}, "required": ["approver"]}),
    );
}

/// `DeploymentPromoted`: `image` or `package` is required.
pub fn image_or_package(schema: &mut Schema) {
    add(
        schema,
        "anyOf",
        json!([
            {"properties": {"image": {"type": "object"}}, "required": ["image"]},
            {"properties": {"package": {"type": "object"}}, "required": ["package"]}
        ]),
    );
}

/// An empty schema object to add keywords to.
fn json_object() -> Schema {
    Schema::from(Map::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::{self, FieldError};
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    type Check = fn(&str, &str) -> Result<(), FieldError>;

    fn validator(mut rule: impl FnMut(&mut Schema)) -> jsonschema::Validator {
        let mut schema = schemars::json_schema!({"type": "string"});
        rule(&mut schema);
        jsonschema::draft202012::new(schema.as_value()).unwrap()
    }

    /// The Rust rule accepts `accepted` and refuses `refused`, and the
    /// schema says the same of each.
    fn agree(rule: impl FnMut(&mut Schema), check: Check, accepted: &[&str], refused: &[&str]) {
        let validator = validator(rule);
        for value in accepted {
            assert_eq!(check("f", value), Ok(()), "bosun refuses {value:?}");
            assert!(validator.is_valid(&json!(value)), "the schema refuses {value:?}");
        }
        for value in refused {
            assert!(check("f", value).is_err(), "bosun accepts {value:?}");
            assert!(!validator.is_valid(&json!(value)), "the schema accepts {value:?}");
        }
    }

    fn text_256(field: &str, value: &str) -> Result<(), FieldError> {
        validate::text(field, value, 256)
    }

    fn max_chars_5(field: &str, value: &str) -> Result<(), FieldError> {
        validate::max_chars(field, value, 5)
    }

    fn email_check(field: &str, value: &str) -> Result<(), FieldError> {
        if value.contains('@') {
            Ok(())
        } else {
            Err(FieldError::new(field, "no @"))
        }
    }

    /// Every string rule, with its schema and its Rust function.
    fn rules() -> Vec<(&'static str, jsonschema::Validator, Check)> {
        vec![
            ("non_empty", validator(non_empty), validate::non_empty as Check),
            ("text", validator(text(256)), text_256),
            ("max_chars", validator(max_chars(5)), max_chars_5),
            ("tenant_id", validator(tenant_id), validate::tenant_id),
            ("repository_name", validator(repository_name), validate::repository_name),
            ("branch_name", validator(branch_name), validate::branch_name),
            ("repository_path", validator(repository_path), validate::repository_path),
            ("git_sha", validator(git_sha), validate::git_sha),
            ("oci_digest", validator(oci_digest), validate::oci_digest),
            ("identifier", validator(identifier), validate::identifier),
            (
                "semantic_version",
                validator(semantic_version),
                validate::semantic_version,
            ),
            (
                "environment_name",
                validator(environment_name),
                validate::environment_name,
            ),
            ("sha256_hex", validator(sha256_hex), validate::sha256_hex),
            ("sha512_hex", validator(sha512_hex), validate::sha512_hex),
            ("blob_container", validator(blob_container), validate::blob_container),
            ("blob_key", validator(blob_key), validate::blob_key),
            ("media_type", validator(media_type), validate::media_type),
            ("url", validator(url), validate::url),
            ("oci_repository", validator(oci_repository), validate::oci_repository),
            ("oci_tag", validator(oci_tag), validate::oci_tag),
            ("registry_host", validator(registry_host), validate::registry_host),
            (
                "nuget_package_id",
                validator(nuget_package_id),
                validate::nuget_package_id,
            ),
            ("stack_name", validator(stack_name), validate::stack_name),
            ("base64", validator(base64), validate::base64),
            ("email", validator(email), email_check),
        ]
    }

    /// Pieces the generated strings are made of: characters and words that
    /// some rule treats specially.
    const PIECES: &[&str] = &[
        "a",
        "b",
        "z",
        "Z",
        "0",
        "1",
        "9",
        "f",
        "-",
        "_",
        ".",
        "/",
        "@",
        "{",
        "}",
        "~",
        "^",
        ":",
        "?",
        "*",
        "[",
        "]",
        "\\",
        " ",
        "\n",
        "\t",
        "\u{b}",
        "\r",
        "\u{0}",
        "\u{7f}",
        "\u{85}",
        "\u{a0}",
        "\u{3000}",
        "\u{feff}",
        "é",
        "ı",
        "😀",
        "+",
        "=",
        ";",
        "#",
        "$",
        "!",
        "&",
        "'",
        "\"",
        "%",
        ",",
        "<",
        ">",
        "|",
        "`",
        "refs/heads/",
        ".lock",
        ".git",
        ".GIT",
        "..",
        "sha256:",
        "https://",
        "http://",
        "file://",
        "text/plain",
        "1.2.3",
        "00",
        "65535",
        "65536",
        "+0",
        "localhost",
        "__",
        "---",
        "ab==",
    ];

    fn generated() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(PIECES), 0..10).prop_map(|pieces| pieces.concat())
    }

    /// Every rule's schema and Rust function agree on generated strings.
    #[test]
    fn schemas_and_rules_agree_on_generated_strings() {
        let rules = rules();
        let mut runner = TestRunner::new(Config {
            cases: 4096,
            ..Config::default()
        });
        runner
            .run(&generated(), |value| {
                for (name, validator, check) in &rules {
                    prop_assert_eq!(
                        validator.is_valid(&json!(value)),
                        check("f", &value).is_ok(),
                        "rule {} on {:?}",
                        name,
                        value
                    );
                }
                Ok(())
            })
            .unwrap();
    }

    /// Every character up to U+3100 (past the last whitespace and control
    /// character) and a sample beyond, in the places where rules look at
    /// single characters.
    #[test]
    fn schemas_and_rules_agree_on_every_character() {
        let rules = rules();
        let chars = (0..=0x3100_u32)
            .chain((0x3100..=0x10_ffff).step_by(97))
            .chain([0xfeff, 0x10_ffff])
            .filter_map(char::from_u32);
        for c in chars {
            let values = [
                c.to_string(),
                format!("a{c}b"),
                format!("a{c}"),
                format!("https://a{c}"),
                format!("a/b;{c}"),
                format!("{c}a/b"),
                format!("a/b{c}"),
            ];
            for value in &values {
                for (name, validator, check) in &rules {
                    assert_eq!(
                        validator.is_valid(&json!(value)),
                        check("f", value).is_ok(),
                        "rule {name} on {value:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn text_rules() {
        agree(
            non_empty,
            validate::non_empty,
            &["a", " a ", "\u{feff}"],
            &["", " ", "\t\n", "\u{3000}\u{85}"],
        );
        agree(
            text(256),
            text_256,
            &["x", &"é".repeat(256)],
            &["", "  ", &"é".repeat(257)],
        );
        agree(max_chars(5), max_chars_5, &["", "  ", "héllo"], &["héllo!"]);
        agree(
            no_whitespace,
            |_, v| {
                if v.chars().any(char::is_whitespace) {
                    Err(FieldError::new("f", "ws"))
                } else {
                    Ok(())
                }
            },
            &["a", "a:b"],
            &["a b", "a\u{3000}", "\n"],
        );
        agree(email, email_check, &["a@b", "@"], &["", "ab"]);
    }

    #[test]
    fn tenant_ids() {
        agree(
            tenant_id,
            validate::tenant_id,
            &["contoso", "0", "a-", &"t".repeat(63)],
            &["", "-a", "Contoso", "a_b", "a.b", &"t".repeat(64), "contoso\n"],
        );
    }

    #[test]
    fn repository_names() {
        agree(
            repository_name,
            validate::repository_name,
            &["payments-api", "Payments.Api_2", "a", "a_", "é", "x.y", &"é".repeat(64)],
            &[
                "",
                "_x",
                ".x",
                "x.",
                ".",
                "..",
                "a/b",
                "a b",
                "a:b",
                "a\u{7f}",
                "a\u{3000}b",
                "a`b",
                &"x".repeat(65),
                "name\n",
            ],
        );
    }

    #[test]
    fn branch_names() {
        let long = "b".repeat(255);
        let prefixed_long = format!("refs/heads/{long}");
        let too_long = "b".repeat(256);
        let prefixed_too_long = format!("refs/heads/{too_long}");
        let wide = "é".repeat(128);
        agree(
            branch_name,
            validate::branch_name,
            &[
                "main",
                "feature/x-1",
                "refs/heads/release/1.0",
                "users/a.b/fix",
                "a@b",
                "refs/heads",
                "refs/heads/refs/heads/-x",
                "x.lockx",
                "é",
                &long,
                &prefixed_long,
            ],
            &[
                "",
                "-x",
                "/x",
                "x/",
                "x.",
                "a..b",
                "a b",
                "a~1",
                "x.lock",
                "x.lock/y",
                "a/.b",
                ".a",
                "@",
                "refs/heads/@",
                "refs/heads/-x",
                "refs/heads/",
                "a@{1}",
                "a:b",
                "a//b",
                "main\n",
                &too_long,
                &prefixed_too_long,
            ],
        );
        // 256 bytes in 128 characters: bosun refuses, the schema cannot say.
        assert!(validate::branch_name("f", &wide).is_err());
        assert!(validator(branch_name).is_valid(&json!(wide)));
    }

    #[test]
    fn repository_paths() {
        agree(
            repository_path,
            validate::repository_path,
            &[
                "src/lib.rs",
                "a",
                ".gitignore",
                "a/.github/x",
                "a b/c",
                "...",
                "a/.git2",
                "a\nb",
            ],
            &[
                "",
                "/etc/passwd",
                "../x",
                "a/../b",
                "a/./b",
                ".",
                "a//b",
                "a/",
                ".git/config",
                "a/.GIT/x",
                "a/.Git",
                "a\\b",
                "a\u{0}b",
            ],
        );
    }

    #[test]
    fn hashes_and_digests() {
        let sha1 = "0".repeat(40);
        let sha256 = "ab".repeat(32);
        let sha512 = "0f".repeat(64);
        let upper = "AB".repeat(32);
        let digest = format!("sha256:{sha256}");
        let sha1_lf = format!("{sha1}\n");
        agree(
            git_sha,
            validate::git_sha,
            &[&sha1, &sha256],
            &["", "HEAD", &"0".repeat(41), &upper, &sha1_lf],
        );
        agree(
            oci_digest,
            validate::oci_digest,
            &[&digest],
            &[
                "sha256:abc",
                &sha256,
                &format!("sha256:{upper}"),
                &format!("{digest}\n"),
            ],
        );
        agree(sha256_hex, validate::sha256_hex, &[&sha256], &[&upper, &digest, &sha1]);
        agree(
            sha512_hex,
            validate::sha512_hex,
            &[&sha512],
            &[&sha256, &"0F".repeat(64)],
        );
    }

    #[test]
    fn identifiers_and_versions() {
        agree(
            identifier,
            validate::identifier,
            &["payments-api", "4711", "a.b_c-d", &"i".repeat(128)],
            &["", "-a", ".a", "_a", "a b", "a/b", "é", &"i".repeat(129), "a\n"],
        );
        agree(
            semantic_version,
            validate::semantic_version,
            &[
                "1.2.3",
                "0.0.0",
                "1.2.3-beta.1+sha.5",
                "1.2.3-",
                "1.2.3+",
                "10.20.30-a-b",
            ],
            &[
                "1.2",
                "01.2.3",
                "1.02.3",
                "1.2.x",
                "v1.2.3",
                "",
                "1.2.3.4",
                "1.2.3-a b",
                "1.2.3\n",
                "1.2.3_x",
            ],
        );
        agree(
            stack_name,
            validate::stack_name,
            &["prod", "payments/prod", "contoso/payments/prod", &"s".repeat(128)],
            &[
                "",
                "a/b/c/d",
                "/prod",
                "a//b",
                "pro d",
                "prod/",
                &"s".repeat(129),
                "-a/b",
            ],
        );
    }

    #[test]
    fn environment_names() {
        agree(
            environment_name,
            validate::environment_name,
            &["dev", "prod", "staging-eu", "qa2", "a", &"e".repeat(63)],
            &["", "Prod", "-dev", "dev-", "dev_1", "a.b", &"e".repeat(64), "dev\n"],
        );
    }

    #[test]
    fn blob_names() {
        let long_key = "k".repeat(1024);
        let too_long_key = "é".repeat(1025);
        agree(
            blob_container,
            validate::blob_container,
            &["build-logs", "abc", &"c".repeat(63)],
            &[
                "ab",
                "Build",
                "-logs",
                "logs-",
                "build--logs",
                "build_logs",
                &"c".repeat(64),
                "logs\n",
            ],
        );
        agree(
            blob_key,
            validate::blob_key,
            &[
                "contoso/payments-api/4711/log.txt",
                "a b",
                "é",
                ".a",
                "a/...",
                &long_key,
            ],
            &[
                "",
                "/abs",
                "a//b",
                "a/../b",
                "a\\b",
                "a/",
                "./a",
                "a\tb",
                "a\n",
                &too_long_key,
            ],
        );
    }

    #[test]
    fn media_types_and_urls() {
        agree(
            media_type,
            validate::media_type,
            &[
                "text/plain",
                "application/xml; charset=utf-8",
                "application/vnd.oci.image.manifest.v1+json",
                " text/plain ",
                "text/plain;",
                "a/b;;é",
            ],
            &[
                "",
                "text",
                "/plain",
                "text/",
                "te xt/plain",
                "text/plain\t",
                "a/b/c",
                "text/plain\n",
                "a/b;\u{85}",
            ],
        );
        let long = format!("https://{}", "u".repeat(2040));
        agree(
            url,
            validate::url,
            &[
                "https://dev.azure.com/contoso/_git/x",
                "http://localhost:8080/a",
                "file:///var/lib/bosun/git",
                "https://é",
                &long,
            ],
            &[
                "",
                "dev.azure.com",
                "ftp://x",
                "https://",
                "https://a b",
                "HTTPS://x",
                "https://a\n",
                &format!("{long}u"),
            ],
        );
    }

    #[test]
    fn image_names_tags_and_registries() {
        agree(
            oci_repository,
            validate::oci_repository,
            &[
                "payments-api",
                "contoso/payments-api",
                "a/b/c",
                "a__b",
                "a---b",
                "a.b_c",
                "0",
            ],
            &[
                "",
                "Payments",
                "-a",
                "a-",
                "a..b",
                "a___b",
                "a//b",
                "a/",
                "a:b",
                "a._b",
                &"r".repeat(256),
                "a\n",
            ],
        );
        agree(
            oci_tag,
            validate::oci_tag,
            &["1.4.0", "latest", "_x", "1.4.0-7f3c2a1", &"t".repeat(128)],
            &["", ".x", "-x", "a:b", &"t".repeat(129), "a\n"],
        );
        let label = "l".repeat(63);
        let host_253 = [label.as_str(), &label, &label, &"l".repeat(61)].join(".");
        let host_254 = format!("{host_253}l");
        agree(
            registry_host,
            validate::registry_host,
            &[
                "contoso.azurecr.io",
                "localhost:5000",
                "registry-1.docker.io",
                "a:1",
                "a:65535",
                "a:+5000",
                "a:+05000",
                &host_253,
                &format!("{host_253}:5000"),
            ],
            &[
                "",
                "Contoso.io",
                "host:0",
                "host:99999",
                "host:65536",
                "host:",
                "host:05000",
                "host:+0",
                "host:+",
                "host:-1",
                "a..b",
                ".a",
                "a.",
                "-a",
                "a-",
                "https://x.io",
                "a:b:1",
                &host_254,
                &format!("{host_254}:1"),
                &format!("{}.io", "l".repeat(64)),
                "host\n",
            ],
        );
    }

    #[test]
    fn package_ids() {
        agree(
            nuget_package_id,
            validate::nuget_package_id,
            &[
                "Contoso.Payments.Client",
                "Newtonsoft.Json",
                "my-lib_2",
                "_",
                &"p".repeat(100),
            ],
            &["", ".A", "A.", "A..B", "A.-B", "A B", "A/B", &"p".repeat(101), "A\n"],
        );
    }

    #[test]
    fn base64_content() {
        agree(
            base64,
            validate::base64,
            &["", "YWJj", "YWI=", "YQ==", "ab=c", "YWJj\nZGVm", " YW Jj \r\n", "+/+/"],
            &["YWJ", "YQ=", "Y===", "=abc", "YW!j", "YWJj\u{b}", "YWJjé"],
        );
    }

    #[test]
    fn numbers_and_lists() {
        let positive = jsonschema::validator_for(&{
            let mut schema = schemars::json_schema!({"type": "integer", "minimum": 0});
            super::positive(&mut schema);
            schema.to_value()
        })
        .unwrap();
        assert!(positive.is_valid(&json!(1)));
        assert!(!positive.is_valid(&json!(0)));
        assert!(validate::positive("n", 0).is_err());

        let mut list = schemars::json_schema!({"type": "array", "items": {"type": "string"}});
        non_empty_list(&mut list);
        unique(&mut list);
        max_items(2)(&mut list);
        each(identifier)(&mut list);
        let list = jsonschema::validator_for(list.as_value()).unwrap();
        assert!(list.is_valid(&json!(["a", "b"])));
        assert!(!list.is_valid(&json!([])), "empty");
        assert!(!list.is_valid(&json!(["a", "a"])), "repeat");
        assert!(validate::unique("l", ["a", "a"]).is_err());
        assert!(!list.is_valid(&json!(["a", "b", "c"])), "too many");
        assert!(!list.is_valid(&json!(["a b"])), "item");

        let mut map = schemars::json_schema!({"type": "object"});
        keys(text(256))(&mut map);
        keys(no_whitespace)(&mut map);
        let map = jsonschema::validator_for(map.as_value()).unwrap();
        assert!(map.is_valid(&json!({"aws:region": 1})));
        assert!(!map.is_valid(&json!({"bad key": 1})));
        assert!(!map.is_valid(&json!({"": 1})));
    }

    #[test]
    fn optional_fields_stay_nullable() {
        let mut schema = schemars::json_schema!({"type": ["string", "null"]});
        branch_name(&mut schema);
        let validator = jsonschema::validator_for(schema.as_value()).unwrap();
        assert!(validator.is_valid(&json!(null)));
        assert!(validator.is_valid(&json!("main")));
        assert!(!validator.is_valid(&json!("a..b")));
    }

    #[test]
    fn two_rules_on_one_field_both_apply() {
        let mut schema = schemars::json_schema!({"type": "string"});
        identifier(&mut schema);
        text(5)(&mut schema);
        let validator = jsonschema::validator_for(schema.as_value()).unwrap();
        assert!(validator.is_valid(&json!("abc")));
        assert!(!validator.is_valid(&json!("abcdef")), "text's maxLength");
        assert!(!validator.is_valid(&json!("a b")), "identifier's pattern");
    }

    #[test]
    fn beyond_schema_is_added_to_the_description() {
        let mut schema = schemars::json_schema!({"type": "string", "description": "The branch."});
        branch_name(&mut schema);
        let description = schema.get("description").and_then(Value::as_str).unwrap_or_default();
        assert!(
            description.starts_with("The branch.\n\nAlso checked by bosun, beyond this schema: at most 255 bytes"),
            "{description}"
        );
    }

    #[test]
    fn every_pattern_is_free_of_lookaround_and_backreferences() {
        let files = crate::schema::schema_files();
        for (name, text) in files {
            for (index, _) in text.match_indices("\"pattern\"") {
                let line = text[index..].lines().next().unwrap_or_default();
                for construct in ["(?=", "(?!", "(?<=", "(?<!", "\\\\1", "\\\\k<"] {
                    assert!(!line.contains(construct), "{name}: {line}");
                }
            }
        }
    }
}
