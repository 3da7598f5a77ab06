//! Field rules shared by the payloads: names, branches, paths, digests.
//!
//! Each rule returns a [`FieldError`] naming the field (relative to the
//! payload) so the envelope decoder can report `payload.<field>`.
//!
//! These functions are the authority at run time. [`crate::schema_rules`]
//! writes the same rules as JSON Schema keywords, built from the limits and
//! character lists below, so the schemas in `contracts/schemas/` refuse what
//! these functions refuse.

/// Longest tenant id (ASCII, so bytes and characters agree).
pub const TENANT_ID_MAX_CHARS: usize = 63;
/// Longest repository name, in characters.
pub const REPOSITORY_NAME_MAX_CHARS: usize = 64;
/// Characters a repository name must not contain, besides control
/// characters and whitespace.
pub const REPOSITORY_NAME_FORBIDDEN: &[char] = &[
    '\\', '/', ':', '*', '?', '"', '<', '>', '|', ';', '#', '$', '{', '}', ',', '+', '=', '[', ']', '%', '&', '@', '~',
    '^', '\'', '`',
];
/// The prefix a branch name may carry; the branch rules apply to the rest.
pub const BRANCH_PREFIX: &str = "refs/heads/";
/// Longest branch name after [`BRANCH_PREFIX`], in bytes of UTF-8.
pub const BRANCH_NAME_MAX_BYTES: usize = 255;
/// Characters a branch name must not contain, besides control characters
/// and whitespace.
pub const BRANCH_NAME_FORBIDDEN: &[char] = &['~', '^', ':', '?', '*', '[', '\\'];
/// Longest identifier (ASCII, so bytes and characters agree).
pub const IDENTIFIER_MAX_CHARS: usize = 128;
/// Longest DNS label: environment names, namespaces, registry host labels.
pub const DNS_LABEL_MAX_CHARS: usize = 63;
/// Longest registry host name, without the port.
pub const REGISTRY_HOST_MAX_CHARS: usize = 253;
/// Shortest blob container name.
pub const BLOB_CONTAINER_MIN_CHARS: usize = 3;
/// Longest blob container name.
pub const BLOB_CONTAINER_MAX_CHARS: usize = 63;
/// Longest blob name, in characters.
pub const BLOB_KEY_MAX_CHARS: usize = 1024;
/// The characters besides ASCII letters and digits a media type's type and
/// subtype may contain.
pub const MEDIA_TYPE_TOKEN_PUNCTUATION: &[char] = &['!', '#', '$', '&', '^', '_', '.', '+', '-'];
/// The schemes a URL may start with.
pub const URL_SCHEMES: &[&str] = &["https://", "http://", "file://"];
/// Longest URL, in bytes of UTF-8.
pub const URL_MAX_BYTES: usize = 2048;
/// Longest OCI repository (image) name.
pub const OCI_REPOSITORY_MAX_CHARS: usize = 255;
/// Longest OCI tag.
pub const OCI_TAG_MAX_CHARS: usize = 128;
/// Longest NuGet package id.
pub const NUGET_PACKAGE_ID_MAX_CHARS: usize = 100;
/// Most `/`-separated parts of a stack name.
pub const STACK_NAME_MAX_PARTS: usize = 3;

/// A payload field that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field inside the payload, e.g. `files[2].path`.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

impl FieldError {
    /// A new error for `field`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// Payloads check their own field rules beyond what their types express.
pub trait Validate {
    /// Returns the first field that breaks a rule.
    fn validate(&self) -> Result<(), FieldError>;
}

/// A required text field must not be empty or only whitespace.
pub fn non_empty(field: &str, value: &str) -> Result<(), FieldError> {
    if value.trim().is_empty() {
        return Err(FieldError::new(field, "must not be empty"));
    }
    Ok(())
}

/// Tenant ids: 1-63 characters, lowercase letters, digits and `-`, starting
/// with a letter or digit.
pub fn tenant_id(field: &str, value: &str) -> Result<(), FieldError> {
    let valid = !value.is_empty()
        && value.len() <= TENANT_ID_MAX_CHARS
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !value.starts_with('-');
    if !valid {
        return Err(FieldError::new(
            field,
            format!("`{value}` is not a tenant id (1-63 of a-z, 0-9, '-', not starting with '-')"),
        ));
    }
    Ok(())
}

/// Repository names, following Azure DevOps rules: 1-64 characters, no
/// control characters, none of `\ / : * ? " < > | ; # $ * { } , + = [ ]`,
/// not starting with `_` or `.`, not ending with `.`, and not `.` or `..`.
pub fn repository_name(field: &str, value: &str) -> Result<(), FieldError> {
    let reason = if value.is_empty() {
        Some("must not be empty".to_owned())
    } else if value.chars().count() > REPOSITORY_NAME_MAX_CHARS {
        Some(format!("must be at most {REPOSITORY_NAME_MAX_CHARS} characters"))
    } else if value.starts_with('_') || value.starts_with('.') || value.ends_with('.') {
        Some("must not start with '_' or '.' nor end with '.'".to_owned())
    } else if let Some(c) = value
        .chars()
        .find(|c| c.is_control() || REPOSITORY_NAME_FORBIDDEN.contains(c))
    {
        Some(format!("must not contain {c:?}"))
    } else if value.chars().any(char::is_whitespace) {
        Some("must not contain whitespace".to_owned())
    } else {
        None
    };
    match reason {
        Some(reason) => Err(FieldError::new(
            field,
            format!("`{value}` is not a repository name: {reason}"),
        )),
        None => Ok(()),
    }
}

/// Branch names, following `git check-ref-format --branch`.
pub fn branch_name(field: &str, value: &str) -> Result<(), FieldError> {
    let bad = |reason: &str| {
        Err(FieldError::new(
            field,
            format!("`{value}` is not a branch name: {reason}"),
        ))
    };
    let name = value.strip_prefix(BRANCH_PREFIX).unwrap_or(value);
    if name.is_empty() {
        return bad("must not be empty");
    }
    if name.len() > BRANCH_NAME_MAX_BYTES {
        return bad(&format!("must be at most {BRANCH_NAME_MAX_BYTES} bytes"));
    }
    if name.starts_with('-') || name.starts_with('/') || name.ends_with('/') || name.ends_with('.') {
        return bad("must not start with '-' or '/' nor end with '/' or '.'");
    }
    if name == "@" || name.contains("..") || name.contains("@{") || name.contains("//") {
        return bad("must not be '@' nor contain '..', '@{' or '//'");
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_control() || c.is_whitespace() || BRANCH_NAME_FORBIDDEN.contains(c))
    {
        return bad(&format!("must not contain {c:?}"));
    }
    if name
        .split('/')
        .any(|part| part.starts_with('.') || part.ends_with(".lock"))
    {
        return bad("no component may start with '.' or end with '.lock'");
    }
    Ok(())
}

/// A file path inside a repository: relative, `/`-separated, no `.`/`..`
/// components, no `.git` component, no NUL.
pub fn repository_path(field: &str, value: &str) -> Result<(), FieldError> {
    let bad = |reason: &str| {
        Err(FieldError::new(
            field,
            format!("`{value}` is not a repository path: {reason}"),
        ))
    };
    if value.is_empty() {
        return bad("must not be empty");
    }
    if value.starts_with('/') || value.contains('\\') {
        return bad("must be relative and use '/'");
    }
    if value.contains('\0') {
        return bad("must not contain NUL");
    }
    for part in value.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return bad("must not contain empty, '.' or '..' components");
        }
        if part.eq_ignore_ascii_case(".git") {
            return bad("must not write into .git");
        }
    }
    Ok(())
}

/// A full Git object id: 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
pub fn git_sha(field: &str, value: &str) -> Result<(), FieldError> {
    let valid = (value.len() == 40 || value.len() == 64)
        && value.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase());
    if !valid {
        return Err(FieldError::new(
            field,
            format!("`{value}` is not a full lowercase Git object id"),
        ));
    }
    Ok(())
}

/// An OCI content digest: `sha256:` followed by 64 lowercase hex digits.
pub fn oci_digest(field: &str, value: &str) -> Result<(), FieldError> {
    let valid = value
        .strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
    if !valid {
        return Err(FieldError::new(
            field,
            format!("`{value}` is not a sha256 digest (sha256:<64 hex>)"),
        ));
    }
    Ok(())
}

/// A short identifier (environment, module id, package id, plan id ...):
/// 1-128 characters of letters, digits, `.`, `_` and `-`, starting with a
/// letter or digit.
pub fn identifier(field: &str, value: &str) -> Result<(), FieldError> {
    let valid = !value.is_empty()
        && value.len() <= IDENTIFIER_MAX_CHARS
        && value.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !valid {
        return Err(FieldError::new(
            field,
            format!("`{value}` is not an identifier (1-128 of letters, digits, '.', '_', '-')"),
        ));
    }
    Ok(())
}

/// A semantic version `MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]`.
pub fn semantic_version(field: &str, value: &str) -> Result<(), FieldError> {
    let core = value.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    let numeric = |part: &&str| {
        !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()) && (part.len() == 1 || !part.starts_with('0'))
    };
    let rest_ok = value[core.len()..]
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'));
    if parts.len() != 3 || !parts.iter().all(numeric) || !rest_ok {
        return Err(FieldError::new(
            field,
            format!("`{value}` is not a semantic version (1.2.3[-pre][+build])"),
        ));
    }
    Ok(())
}

/// Standard base64 (`A-Z a-z 0-9 + /`, `=` padding in the last two places),
/// a multiple of four characters once ASCII whitespace is left out.
pub fn base64(field: &str, value: &str) -> Result<(), FieldError> {
    let trimmed: Vec<u8> = value.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let valid = trimmed.len().is_multiple_of(4)
        && trimmed.iter().enumerate().all(|(i, b)| {
            b.is_ascii_alphanumeric()
                || *b == b'+'
                || *b == b'/'
                || (*b == b'=' && i >= trimmed.len().saturating_sub(2))
        });
    if !valid {
        return Err(FieldError::new(field, "is not valid base64"));
    }
    Ok(())
}

/// Prefixes a nested field error with its parent, e.g. `files[2]` + `path`.
pub fn nested(parent: &str, err: FieldError) -> FieldError {
    FieldError::new(format!("{parent}.{}", err.field), err.reason)
}

/// Prefixes a nested field error with its list parent and index, e.g.
/// `artifacts` + `2` + `blob.key` gives `artifacts[2].blob.key`.
pub fn nested_item(parent: &str, index: usize, err: FieldError) -> FieldError {
    nested(&format!("{parent}[{index}]"), err)
}

/// Text of at most `max` characters (Unicode scalar values).
pub fn max_chars(field: &str, value: &str, max: usize) -> Result<(), FieldError> {
    let count = value.chars().count();
    if count > max {
        return Err(FieldError::new(
            field,
            format!("is {count} characters, over the limit of {max}"),
        ));
    }
    Ok(())
}

/// Required text: not blank, at most `max` characters.
pub fn text(field: &str, value: &str, max: usize) -> Result<(), FieldError> {
    non_empty(field, value)?;
    max_chars(field, value, max)
}

/// A count or id that must be at least 1.
pub fn positive(field: &str, value: u64) -> Result<(), FieldError> {
    if value == 0 {
        return Err(FieldError::new(field, "must be at least 1"));
    }
    Ok(())
}

/// A list that must not be empty.
pub fn non_empty_list<T>(field: &str, values: &[T]) -> Result<(), FieldError> {
    if values.is_empty() {
        return Err(FieldError::new(field, "must list at least one item"));
    }
    Ok(())
}

/// A list of names without repeats; the error names the first repeat as
/// `field[index]`.
pub fn unique<'a>(field: &str, values: impl IntoIterator<Item = &'a str>) -> Result<(), FieldError> {
    let mut seen = std::collections::BTreeSet::new();
    for (index, value) in values.into_iter().enumerate() {
        if !seen.insert(value) {
            return Err(FieldError::new(
                format!("{field}[{index}]"),
                format!("`{value}` is listed twice"),
            ));
        }
    }
    Ok(())
}

/// A timestamp that must not be earlier than another field's.
pub fn not_before(
    field: &str,
    value: time::OffsetDateTime,
    earliest_field: &str,
    earliest: time::OffsetDateTime,
) -> Result<(), FieldError> {
    if value < earliest {
        return Err(FieldError::new(
            field,
            format!("must not be earlier than `{earliest_field}`"),
        ));
    }
    Ok(())
}

/// Environment names (`dev`, `staging-eu`, `prod`): a DNS label, 1-63 of
/// lowercase letters, digits and `-`, not starting or ending with `-`. They
/// key the GitOps saga and name directories and Kubernetes namespaces.
pub fn environment_name(field: &str, value: &str) -> Result<(), FieldError> {
    if !is_dns_label(value) {
        return Err(FieldError::new(
            field,
            format!("`{value}` is not an environment name (1-63 of a-z, 0-9, '-', not starting or ending with '-')"),
        ));
    }
    Ok(())
}

fn is_dns_label(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= DNS_LABEL_MAX_CHARS
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !value.starts_with('-')
        && !value.ends_with('-')
}

fn lowercase_hex(field: &str, value: &str, digits: usize, what: &str) -> Result<(), FieldError> {
    let valid = value.len() == digits && value.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
    if !valid {
        return Err(FieldError::new(
            field,
            format!("`{value}` is not a {what} ({digits} lowercase hex digits)"),
        ));
    }
    Ok(())
}

/// A SHA-256 hash as 64 lowercase hex digits (no `sha256:` prefix).
pub fn sha256_hex(field: &str, value: &str) -> Result<(), FieldError> {
    lowercase_hex(field, value, 64, "SHA-256 hash")
}

/// A SHA-512 hash as 128 lowercase hex digits.
pub fn sha512_hex(field: &str, value: &str) -> Result<(), FieldError> {
    lowercase_hex(field, value, 128, "SHA-512 hash")
}

/// Blob container names, following Azure Storage rules: 3-63 of lowercase
/// letters, digits and `-`, starting with a letter or digit, no `--`, not
/// ending with `-`.
pub fn blob_container(field: &str, value: &str) -> Result<(), FieldError> {
    let valid = (BLOB_CONTAINER_MIN_CHARS..=BLOB_CONTAINER_MAX_CHARS).contains(&value.len())
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !value.starts_with('-')
        && !value.ends_with('-')
        && !value.contains("--");
    if !valid {
        return Err(FieldError::new(
            field,
            format!("`{value}` is not a blob container name (3-63 of a-z, 0-9, single '-' inside)"),
        ));
    }
    Ok(())
}

/// Blob names: 1-1024 characters, `/`-separated, relative, without empty,
/// `.` or `..` segments, backslashes or control characters.
pub fn blob_key(field: &str, value: &str) -> Result<(), FieldError> {
    let bad = |reason: &str| Err(FieldError::new(field, format!("`{value}` is not a blob key: {reason}")));
    if value.is_empty() || value.chars().count() > BLOB_KEY_MAX_CHARS {
        return bad(&format!("must be 1-{BLOB_KEY_MAX_CHARS} characters"));
    }
    if value.contains('\\') || value.chars().any(char::is_control) {
        return bad("must not contain '\\' or control characters");
    }
    if value
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return bad("must be relative, without empty, '.' or '..' segments");
    }
    Ok(())
}

/// A MIME type such as `text/plain` or `application/xml; charset=utf-8`.
pub fn media_type(field: &str, value: &str) -> Result<(), FieldError> {
    let token = |part: &str| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || MEDIA_TYPE_TOKEN_PUNCTUATION.contains(&c))
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    let valid = essence
        .split_once('/')
        .is_some_and(|(kind, subtype)| token(kind) && token(subtype))
        && !value.chars().any(char::is_control);
    if !valid {
        return Err(FieldError::new(
            field,
            format!("`{value}` is not a media type (type/subtype)"),
        ));
    }
    Ok(())
}

/// An absolute `https://`, `http://` or `file://` URL of at most 2048
/// characters, without whitespace.
pub fn url(field: &str, value: &str) -> Result<(), FieldError> {
    let rest = URL_SCHEMES.iter().find_map(|scheme| value.strip_prefix(scheme));
    let valid = rest.is_some_and(|rest| !rest.is_empty())
        && value.len() <= URL_MAX_BYTES
        && !value.chars().any(|c| c.is_whitespace() || c.is_control());
    if !valid {
        return Err(FieldError::new(
            field,
            format!("`{value}` is not an absolute http(s) or file URL"),
        ));
    }
    Ok(())
}

/// An OCI repository (image) name, e.g. `contoso/payments-api`: `/`-separated
/// components of lowercase letters and digits joined by `.`, `_`, `__` or
/// runs of `-`; at most 255 characters.
pub fn oci_repository(field: &str, value: &str) -> Result<(), FieldError> {
    let component_ok = |component: &str| {
        let bytes = component.as_bytes();
        if bytes.first().is_none_or(|b| !is_lower_alnum(*b)) || bytes.last().is_none_or(|b| !is_lower_alnum(*b)) {
            return false;
        }
        let mut separator = String::new();
        for &b in bytes {
            if is_lower_alnum(b) {
                let allowed = separator.is_empty()
                    || separator == "."
                    || separator == "_"
                    || separator == "__"
                    || separator.bytes().all(|s| s == b'-');
                if !allowed {
                    return false;
                }
                separator.clear();
            } else if matches!(b, b'.' | b'_' | b'-') {
                separator.push(char::from(b));
            } else {
                return false;
            }
        }
        true
    };
    let valid = !value.is_empty() && value.len() <= OCI_REPOSITORY_MAX_CHARS && value.split('/').all(component_ok);
    if !valid {
        return Err(FieldError::new(
            field,
            format!("`{value}` is not an image repository name (lowercase, e.g. `contoso/payments-api`)"),
        ));
    }
    Ok(())
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// An OCI tag: 1-128 of letters, digits, `_`, `.` and `-`, not starting with
/// `.` or `-`.
pub fn oci_tag(field: &str, value: &str) -> Result<(), FieldError> {
    let valid = !value.is_empty()
        && value.len() <= OCI_TAG_MAX_CHARS
        && value
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if !valid {
        return Err(FieldError::new(
            field,
            format!("`{value}` is not an image tag (1-128 of [A-Za-z0-9_.-])"),
        ));
    }
    Ok(())
}

/// A registry host, `host[:port]`, e.g. `contoso.azurecr.io` or
/// `localhost:5000`: lowercase DNS labels joined by `.`.
pub fn registry_host(field: &str, value: &str) -> Result<(), FieldError> {
    let (host, port) = match value.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (value, None),
    };
    let port_ok = port.is_none_or(|port| port.parse::<u16>().is_ok_and(|p| p > 0) && !port.starts_with('0'));
    let valid =
        !host.is_empty() && host.len() <= REGISTRY_HOST_MAX_CHARS && host.split('.').all(is_dns_label) && port_ok;
    if !valid {
        return Err(FieldError::new(
            field,
            format!("`{value}` is not a registry host (e.g. `contoso.azurecr.io` or `localhost:5000`)"),
        ));
    }
    Ok(())
}

/// A NuGet package id, e.g. `Contoso.Payments.Client`: 1-100 characters,
/// words of letters, digits and `_` joined by single `.` or `-`.
pub fn nuget_package_id(field: &str, value: &str) -> Result<(), FieldError> {
    let valid = !value.is_empty()
        && value.len() <= NUGET_PACKAGE_ID_MAX_CHARS
        && value
            .split(['.', '-'])
            .all(|word| !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    if !valid {
        return Err(FieldError::new(
            field,
            format!("`{value}` is not a NuGet package id (1-100 characters, words joined by '.' or '-')"),
        ));
    }
    Ok(())
}

/// An infrastructure stack, `[organization/][project/]stack` as Pulumi
/// writes it; each part is an [`identifier`].
pub fn stack_name(field: &str, value: &str) -> Result<(), FieldError> {
    let parts: Vec<&str> = value.split('/').collect();
    let valid =
        (1..=STACK_NAME_MAX_PARTS).contains(&parts.len()) && parts.iter().all(|part| identifier(field, part).is_ok());
    if !valid {
        return Err(FieldError::new(
            field,
            format!("`{value}` is not a stack name ([organization/][project/]stack of identifiers)"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_names() {
        assert!(repository_name("name", "payments-api").is_ok());
        assert!(repository_name("name", "Payments.Api_2").is_ok());
        for bad in ["", "_x", ".x", "x.", "a/b", "a b", "a:b", &"x".repeat(65)] {
            let err = repository_name("name", bad).unwrap_err();
            assert_eq!(err.field, "name");
        }
    }

    #[test]
    fn branch_names() {
        for good in ["main", "feature/x-1", "refs/heads/release/1.0", "users/a.b/fix"] {
            assert!(branch_name("branch", good).is_ok(), "{good}");
        }
        for bad in [
            "", "-x", "a..b", "a b", "a~1", "x.lock", "a/.b", "a/", "@", "a@{1}", "a:b",
        ] {
            assert!(branch_name("branch", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn repository_paths() {
        assert!(repository_path("p", "src/lib.rs").is_ok());
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "a//b",
            ".git/config",
            "a/.GIT/x",
            "a\\b",
        ] {
            assert!(repository_path("p", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn versions_and_digests() {
        assert!(semantic_version("v", "1.2.3").is_ok());
        assert!(semantic_version("v", "1.2.3-beta.1+sha.5").is_ok());
        for bad in ["1.2", "01.2.3", "1.2.x", "v1.2.3", ""] {
            assert!(semantic_version("v", bad).is_err(), "{bad}");
        }
        assert!(oci_digest("d", &format!("sha256:{}", "a".repeat(64))).is_ok());
        assert!(oci_digest("d", "sha256:abc").is_err());
        assert!(git_sha("s", &"0".repeat(40)).is_ok());
        assert!(git_sha("s", "HEAD").is_err());
    }
    #[test]
    fn text_lengths_and_counts() {
        assert!(text("t", "hello", 5).is_ok());
        assert_eq!(text("t", "  ", 5).unwrap_err().field, "t");
        assert_eq!(text("t", "héllo!", 5).unwrap_err().field, "t");
        assert!(max_chars("t", "", 0).is_ok());
        assert!(positive("n", 1).is_ok());
        assert_eq!(positive("n", 0).unwrap_err().field, "n");
        assert!(non_empty_list::<u8>("l", &[]).is_err());
        assert!(non_empty_list("l", &[1]).is_ok());
    }

    #[test]
    fn duplicates_are_named_by_index() {
        assert!(unique("checks", ["build", "test"]).is_ok());
        let err = unique("checks", ["build", "test", "build"]).unwrap_err();
        assert_eq!(err.field, "checks[2]");
    }

    #[test]
    fn timestamps_in_order() {
        let start = time::macros::datetime!(2026-11-29 10:00 UTC);
        let end = time::macros::datetime!(2026-11-29 10:05 UTC);
        assert!(not_before("finishedAt", end, "startedAt", start).is_ok());
        assert!(not_before("finishedAt", start, "startedAt", start).is_ok());
        let err = not_before("finishedAt", start, "startedAt", end).unwrap_err();
        assert_eq!(err.field, "finishedAt");
        assert!(err.reason.contains("startedAt"));
    }

    #[test]
    fn environment_names() {
        for good in ["dev", "prod", "staging-eu", "qa2"] {
            assert!(environment_name("environment", good).is_ok(), "{good}");
        }
        for bad in ["", "Prod", "-dev", "dev-", "dev_1", "a.b", &"e".repeat(64)] {
            assert!(environment_name("environment", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hashes() {
        assert!(sha256_hex("h", &"ab".repeat(32)).is_ok());
        assert!(sha256_hex("h", &"AB".repeat(32)).is_err());
        assert!(sha256_hex("h", &format!("sha256:{}", "a".repeat(64))).is_err());
        assert!(sha512_hex("h", &"0f".repeat(64)).is_ok());
        assert!(sha512_hex("h", &"0f".repeat(32)).is_err());
    }

    #[test]
    fn blob_names() {
        assert!(blob_container("c", "build-logs").is_ok());
        for bad in ["ab", "Build", "-logs", "logs-", "build--logs", "build_logs"] {
            assert!(blob_container("c", bad).is_err(), "{bad}");
        }
        assert!(blob_key("k", "contoso/payments-api/4711/log.txt").is_ok());
        for bad in ["", "/abs", "a//b", "a/../b", "a\\b", "a/", "./a"] {
            assert!(blob_key("k", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn media_types_and_urls() {
        for good in [
            "text/plain",
            "application/xml; charset=utf-8",
            "application/vnd.oci.image.manifest.v1+json",
        ] {
            assert!(media_type("m", good).is_ok(), "{good}");
        }
        for bad in ["", "text", "/plain", "text/", "te xt/plain"] {
            assert!(media_type("m", bad).is_err(), "{bad}");
        }
        for good in [
            "https://dev.azure.com/contoso/_git/x",
            "http://localhost:8080/a",
            "file:///var/lib/bosun/git",
        ] {
            assert!(url("u", good).is_ok(), "{good}");
        }
        for bad in ["", "dev.azure.com", "ftp://x", "https://", "https://a b"] {
            assert!(url("u", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn image_names_tags_and_registries() {
        for good in [
            "payments-api",
            "contoso/payments-api",
            "a/b/c",
            "a__b",
            "a---b",
            "a.b_c",
        ] {
            assert!(oci_repository("image", good).is_ok(), "{good}");
        }
        for bad in ["", "Payments", "-a", "a-", "a..b", "a___b", "a//b", "a/", "a:b", "a._b"] {
            assert!(oci_repository("image", bad).is_err(), "{bad}");
        }
        for good in ["1.4.0", "latest", "_x", "1.4.0-7f3c2a1"] {
            assert!(oci_tag("tag", good).is_ok(), "{good}");
        }
        for bad in ["", ".x", "-x", "a:b", &"t".repeat(129)] {
            assert!(oci_tag("tag", bad).is_err(), "{bad}");
        }
        for good in ["contoso.azurecr.io", "localhost:5000", "registry-1.docker.io"] {
            assert!(registry_host("registry", good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Contoso.io",
            "host:0",
            "host:99999",
            "host:",
            "a..b",
            "https://x.io",
        ] {
            assert!(registry_host("registry", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn package_ids_and_stacks() {
        for good in ["Contoso.Payments.Client", "Newtonsoft.Json", "my-lib_2"] {
            assert!(nuget_package_id("packageId", good).is_ok(), "{good}");
        }
        for bad in ["", ".A", "A.", "A..B", "A B", "A/B", &"p".repeat(101)] {
            assert!(nuget_package_id("packageId", bad).is_err(), "{bad}");
        }
        for good in ["prod", "payments/prod", "contoso/payments/prod"] {
            assert!(stack_name("stack", good).is_ok(), "{good}");
        }
        for bad in ["", "a/b/c/d", "/prod", "a//b", "pro d"] {
            assert!(stack_name("stack", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn nested_errors_carry_the_path() {
        let err = nested_item("artifacts", 2, nested("blob", FieldError::new("key", "bad")));
        assert_eq!(err.field, "artifacts[2].blob.key");
    }
}
