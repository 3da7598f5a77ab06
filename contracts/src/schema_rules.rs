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
mod tests;
