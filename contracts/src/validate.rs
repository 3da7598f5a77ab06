//! Field rules shared by the payloads: names, branches, paths, digests.
//!
//! Each rule returns a [`FieldError`] naming the field (relative to the
//! payload) so the envelope decoder can report `payload.<field>`.

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
        && value.len() <= 63
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
    const FORBIDDEN: &[char] = &[
        '\\', '/', ':', '*', '?', '"', '<', '>', '|', ';', '#', '$', '{', '}', ',', '+', '=', '[', ']', '%', '&',
        '@', '~', '^', '\'', '`',
    ];
    let reason = if value.is_empty() {
        Some("must not be empty".to_owned())
    } else if value.chars().count() > 64 {
        Some("must be at most 64 characters".to_owned())
    } else if value.starts_with('_') || value.starts_with('.') || value.ends_with('.') {
        Some("must not start with '_' or '.' nor end with '.'".to_owned())
    } else if let Some(c) = value.chars().find(|c| c.is_control() || FORBIDDEN.contains(c)) {
        Some(format!("must not contain {c:?}"))
    } else if value.chars().any(char::is_whitespace) {
        Some("must not contain whitespace".to_owned())
    } else {
        None
    };
    match reason {
        Some(reason) => Err(FieldError::new(field, format!("`{value}` is not a repository name: {reason}"))),
        None => Ok(()),
    }
}

/// Branch names, following `git check-ref-format --branch`.
pub fn branch_name(field: &str, value: &str) -> Result<(), FieldError> {
    let bad = |reason: &str| Err(FieldError::new(field, format!("`{value}` is not a branch name: {reason}")));
    let name = value.strip_prefix("refs/heads/").unwrap_or(value);
    if name.is_empty() {
        return bad("must not be empty");
    }
    if name.len() > 255 {
        return bad("must be at most 255 bytes");
    }
    if name.starts_with('-') || name.starts_with('/') || name.ends_with('/') || name.ends_with('.') {
        return bad("must not start with '-' or '/' nor end with '/' or '.'");
    }
    if name == "@" || name.contains("..") || name.contains("@{") || name.contains("//") {
        return bad("must not be '@' nor contain '..', '@{' or '//'");
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_control() || c.is_whitespace() || matches!(c, '~' | '^' | ':' | '?' | '*' | '[' | '\\'))
    {
        return bad(&format!("must not contain {c:?}"));
    }
    if name.split('/').any(|part| part.starts_with('.') || part.ends_with(".lock")) {
        return bad("no component may start with '.' or end with '.lock'");
    }
    Ok(())
}

/// A file path inside a repository: relative, `/`-separated, no `.`/`..`
/// components, no `.git` component, no NUL.
pub fn repository_path(field: &str, value: &str) -> Result<(), FieldError> {
    let bad = |reason: &str| Err(FieldError::new(field, format!("`{value}` is not a repository path: {reason}")));
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
    let valid = (value.len() == 40 || value.len() == 64) && value.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase());
    if !valid {
        return Err(FieldError::new(field, format!("`{value}` is not a full lowercase Git object id")));
    }
    Ok(())
}

/// An OCI content digest: `sha256:` followed by 64 lowercase hex digits.
pub fn oci_digest(field: &str, value: &str) -> Result<(), FieldError> {
    let valid = value
        .strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
    if !valid {
        return Err(FieldError::new(field, format!("`{value}` is not a sha256 digest (sha256:<64 hex>)")));
    }
    Ok(())
}

/// A short identifier (environment, module id, package id, plan id ...):
/// 1-128 characters of letters, digits, `.`, `_` and `-`, starting with a
/// letter or digit.
pub fn identifier(field: &str, value: &str) -> Result<(), FieldError> {
    let valid = !value.is_empty()
        && value.len() <= 128
        && value.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
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
    let numeric = |part: &&str| !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()) && (part.len() == 1 || !part.starts_with('0'));
    let rest_ok = value[core.len()..]
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'));
    if parts.len() != 3 || !parts.iter().all(numeric) || !rest_ok {
        return Err(FieldError::new(field, format!("`{value}` is not a semantic version (1.2.3[-pre][+build])")));
    }
    Ok(())
}

/// Prefixes a nested field error with its parent, e.g. `files[2]` + `path`.
pub fn nested(parent: &str, err: FieldError) -> FieldError {
    FieldError::new(format!("{parent}.{}", err.field), err.reason)
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
        for bad in ["", "-x", "a..b", "a b", "a~1", "x.lock", "a/.b", "a/", "@", "a@{1}", "a:b"] {
            assert!(branch_name("branch", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn repository_paths() {
        assert!(repository_path("p", "src/lib.rs").is_ok());
        for bad in ["", "/etc/passwd", "../x", "a/../b", "a//b", ".git/config", "a/.GIT/x", "a\\b"] {
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
}
