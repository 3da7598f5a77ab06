//! Tests of `contracts/src/schema_rules.rs`.

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
