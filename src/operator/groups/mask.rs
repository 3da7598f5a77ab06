//! Masking a dead letter's description: what differs from one occurrence
//! of a cause to the next becomes a placeholder, and the words that say
//! what went wrong stay.
//!
//! | masked | as |
//! |---|---|
//! | a span in backticks, single or double quotes (`` `orders` ``, `'my repo'`, `"bosun-contoso.dev"`), whole, spaces and all | `` `<name>` ``, `'<name>'`, `"<name>"` |
//! | a URL (any `scheme://…`) | `<url>` |
//! | an e-mail address | `<email>` |
//! | an IP address, with or without a port (`10.0.0.4:5432`, `[::1]:8080`) | `<ip>` |
//! | a path: Unix (`/data/git/a.git`, `./x`, `~/x`), Windows (`C:\work`, `\\server\share`) or relative with a slash (`contoso/orders`) | `<path>` |
//! | a UUID, or an id-like token of letters and digits (`run-3c1aa79b`) | `<id>` |
//! | a hex hash of 7 or more digits (a Git SHA, short or full; `sha256:…` keeps its prefix) | `<hash>` |
//! | an RFC 3339 time | `<time>` |
//! | a number, whole or decimal, alone or with a unit (`503`, `1.5s`, `0x1f`) | `<n>` |
//!
//! Kept: a word without a digit that is none of these (the fixed words
//! that say what went wrong, and error types such as `HttpError:`,
//! `io::Error`, `TimedOut`), a few fixed words with digits (`UTF-8`,
//! `sha256`, `x86_64`), error codes (`TF401019`, `AADSTS50058`), an error
//! type quoted alone (`"GitRepositoryNotFoundException"`), a JSON object's
//! keys, and a span in single or double quotes that reads as a sentence (a
//! remote's message: it has a negation or a verb such as `not`, `is`,
//! `failed`, or more than six words), which is masked word by word instead.
//! An apostrophe (`can't`, `the tenants' repos`) opens no quote. Whitespace
//! is normalised.
//!
//! A name outside quotes without a digit or a slash (`repository orders not
//! found`) cannot be told from a fixed word, and is kept.

use std::net::{IpAddr, SocketAddr};

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

/// Quote marks, each with the one that closes it.
const QUOTES: &[(char, char)] = &[('`', '`'), ('\'', '\''), ('"', '"'), ('‘', '’'), ('“', '”')];

/// The longest quoted span (in bytes) taken as one; a longer one is
/// masked word by word.
const MAX_QUOTED: usize = 200;

/// The most words a quoted name has; more reads as a sentence.
const MAX_NAME_WORDS: usize = 6;

/// Words that make a quoted span a sentence rather than a name.
const SENTENCE_WORDS: &[&str] = &[
    "not", "no", "is", "are", "was", "were", "be", "been", "has", "have", "had", "does", "do", "did", "cannot",
    "can't", "could", "couldn't", "doesn't", "don't", "isn't", "wasn't", "won't", "failed", "found", "must", "the",
    "to", "of", "for", "with", "from", "already", "denied", "refused", "unable", "invalid", "missing",
];

/// Words with digits that are fixed words, not values (compared ignoring
/// case).
const FIXED_WORDS: &[&str] = &[
    "utf-8", "utf-16", "utf-32", "utf8", "utf16", "sha1", "sha256", "sha384", "sha512", "md5", "base64", "ipv4",
    "ipv6", "http/1.0", "http/1.1", "http/2", "http/3", "http2", "x86_64", "amd64", "arm64", "aarch64", "oauth2",
    "x509", "tls1.2", "tls1.3", "k8s", "s3", "win32", "and/or", "i/o", "n/a",
];

/// `text` with what differs between occurrences of one cause masked (this
/// module's documentation says what is masked and what is kept).
pub fn mask(text: &str) -> String {
    let mut out = Out::default();
    let mut word = 0;
    let mut at = 0;
    while let Some(c) = text[at..].chars().next() {
        if c.is_whitespace() {
            out.word(&text[word..at]);
            out.space();
            at += c.len_utf8();
            word = at;
        } else if let Some(end) = quoted_span(text, at, c) {
            out.word(&text[word..at]);
            out.push(&mask_quoted(text, at, end));
            at = end;
            word = at;
        } else {
            at += c.len_utf8();
        }
    }
    out.word(&text[word..]);
    out.text
}

/// The masked text, with one space where the original had whitespace.
#[derive(Default)]
struct Out {
    text: String,
    space: bool,
}

impl Out {
    fn space(&mut self) {
        self.space = !self.text.is_empty();
    }

    fn push(&mut self, masked: &str) {
        if masked.is_empty() {
            return;
        }
        if std::mem::take(&mut self.space) {
            self.text.push(' ');
        }
        self.text.push_str(masked);
    }

    fn word(&mut self, word: &str) {
        if !word.is_empty() {
            self.push(&mask_word(word));
        }
    }
}

/// Where the quoted span opened by `open` at `at` ends (just past its
/// closing mark), if it is one: on one line, not empty, at most
/// [`MAX_QUOTED`] long; a straight quote opens only where a word starts
/// and closes only where one ends, so an apostrophe (`can't`,
/// `the tenants' repos`) opens nothing.
fn quoted_span(text: &str, at: usize, open: char) -> Option<usize> {
    let close = QUOTES.iter().find(|(o, _)| *o == open)?.1;
    let straight = open == '\'' || open == '"';
    if straight && text[..at].chars().next_back().is_some_and(char::is_alphanumeric) {
        return None;
    }
    let inside = at + open.len_utf8();
    let first = text[inside..].chars().next()?;
    if first == close || first == '\n' || (open != '`' && first.is_whitespace()) {
        return None;
    }
    let mut previous = first;
    for (offset, c) in text[inside..].char_indices().skip(1) {
        if c == '\n' || offset > MAX_QUOTED {
            return None;
        }
        let end = inside + offset + c.len_utf8();
        let closes = c == close
            && (open == '`' || !previous.is_whitespace())
            && (open == '`' || !text[end..].chars().next().is_some_and(char::is_alphanumeric));
        if closes {
            return Some(end);
        }
        previous = c;
    }
    None
}

/// The quoted span `text[at..end]`, masked.
fn mask_quoted(text: &str, at: usize, end: usize) -> String {
    let span = &text[at..end];
    let open = span.chars().next().map_or(0, char::len_utf8);
    let close = span.chars().next_back().map_or(0, char::len_utf8);
    let (open, inner, close) = (
        &span[..open],
        &span[open..span.len() - close],
        &span[span.len() - close..],
    );
    // A JSON object's key is a fixed word.
    let key = open == "\"" && text[..at].trim_end().ends_with(['{', ',']) && text[end..].trim_start().starts_with(':');
    if key || is_error_type(inner) {
        return span.to_owned();
    }
    let masked = if open != "`" && reads_as_sentence(inner) {
        mask(inner)
    } else {
        "<name>".to_owned()
    };
    format!("{open}{masked}{close}")
}

/// Whether a quoted span is a sentence (a remote's message) rather than a
/// name.
fn reads_as_sentence(inner: &str) -> bool {
    let words: Vec<&str> = inner.split_whitespace().collect();
    words.len() > MAX_NAME_WORDS
        || (words.len() > 1
            && words.iter().any(|word| {
                let word = word.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'');
                SENTENCE_WORDS.iter().any(|fixed| fixed.eq_ignore_ascii_case(word))
            }))
}

/// An error type named alone: `GitRepositoryNotFoundException`,
/// `io::Error`.
fn is_error_type(inner: &str) -> bool {
    // A path of identifiers (`std::io::Error`, `System.IO.IOException`),
    // the last a type's name.
    let segments: Vec<&str> = inner.split("::").flat_map(|part| part.split('.')).collect();
    let Some(last) = segments.last() else {
        return false;
    };
    segments
        .iter()
        .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        && last.starts_with(|c: char| c.is_ascii_uppercase())
        && (inner.contains("::")
            || ["Error", "Exception", "Fault", "Failure"]
                .iter()
                .any(|suffix| last.ends_with(suffix)))
}

/// One whitespace-separated word, masked; the punctuation around its token
/// (brackets, stray quotes, a sentence's full stop, comma or colon) kept.
fn mask_word(word: &str) -> String {
    const LEADING: &[char] = &['(', '[', '{', '<', '"', '\'', '`'];
    const TRAILING: &[char] = &[')', ']', '}', '>', '"', '\'', '`', ',', ';', '.', ':', '!', '?'];
    // `[::1]:8080`, `(10.0.0.4:5432),`: the brackets are the address's.
    let bare = word.trim_start_matches('(').trim_end_matches([')', ',', ';', '.']);
    if bare.parse::<SocketAddr>().is_ok() {
        let start = word.len() - word.trim_start_matches('(').len();
        return format!("{}<ip>{}", &word[..start], &word[start + bare.len()..]);
    }
    let start = word.len() - word.trim_start_matches(LEADING).len();
    let end = start + word[start..].trim_end_matches(TRAILING).len();
    if start >= end {
        return word.to_owned();
    }
    format!("{}{}{}", &word[..start], mask_token(&word[start..end]), &word[end..])
}

/// One token (a word without the punctuation around it), masked.
fn mask_token(token: &str) -> String {
    let has_digit = token.chars().any(|c| c.is_ascii_digit());
    if is_fixed_word(token) {
        return token.to_owned();
    }
    if is_url(token) {
        return "<url>".into();
    }
    if is_email(token) {
        return "<email>".into();
    }
    if has_digit && Uuid::try_parse(token).is_ok() {
        return "<id>".into();
    }
    if has_digit && OffsetDateTime::parse(token, &Rfc3339).is_ok() {
        return "<time>".into();
    }
    if has_digit && (token.parse::<IpAddr>().is_ok() || token.parse::<SocketAddr>().is_ok()) {
        return "<ip>".into();
    }
    if is_path(token) {
        return "<path>".into();
    }
    if !has_digit {
        return token.to_owned();
    }
    if let Some((algorithm, digest)) = token.split_once(':')
        && ["sha1", "sha256", "sha384", "sha512", "md5"].contains(&algorithm)
        && is_hash(digest)
    {
        return format!("{algorithm}:<hash>");
    }
    if is_error_code(token) {
        return token.to_owned();
    }
    if is_hash(token) {
        return "<hash>".into();
    }
    if let Some(hex) = token.strip_prefix("0x").or_else(|| token.strip_prefix("0X"))
        && !hex.is_empty()
        && hex.chars().all(|c| c.is_ascii_hexdigit())
    {
        return "<n>".into();
    }
    // `key=value`: the key is a fixed word, the value masked alone.
    if let Some((key, value)) = token.split_once('=')
        && !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return format!("{key}={}", mask_token(value));
    }
    let id_like = token.len() >= 6
        && !is_quantity(token)
        && token.chars().any(|c| c.is_ascii_alphabetic())
        && token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:#@+".contains(c));
    if id_like {
        return "<id>".into();
    }
    mask_numbers(token)
}

/// One of [`FIXED_WORDS`], alone or after a word and a hyphen
/// (`non-UTF-8`).
fn is_fixed_word(token: &str) -> bool {
    let last = token.split_once('-').map_or(token, |(before, rest)| {
        if before.chars().all(|c| c.is_ascii_alphabetic()) {
            rest
        } else {
            token
        }
    });
    [token, last]
        .iter()
        .any(|word| FIXED_WORDS.iter().any(|fixed| fixed.eq_ignore_ascii_case(word)))
}

/// `scheme://…`.
fn is_url(token: &str) -> bool {
    token.split_once("://").is_some_and(|(scheme, _)| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
    })
}

/// `someone@example.com`.
fn is_email(token: &str) -> bool {
    let Some((local, domain)) = token.split_once('@') else {
        return false;
    };
    let labels: Vec<&str> = domain.split('.').collect();
    !local.is_empty()
        && local.chars().all(|c| c.is_ascii_alphanumeric() || "._%+-".contains(c))
        && labels.len() > 1
        && labels
            .iter()
            .all(|label| !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        && labels
            .last()
            .is_some_and(|tld| tld.chars().all(|c| c.is_ascii_alphabetic()))
}

/// A Unix, Windows or relative path; not `I/O`, `TCP/IP`, `3/4` nor a
/// media type (`application/json`).
fn is_path(token: &str) -> bool {
    let bytes = token.as_bytes();
    if token.len() < 2 {
        return false;
    }
    let rooted = ["/", "./", "../", "~/", "\\\\"]
        .iter()
        .any(|root| token.starts_with(root))
        || (bytes[0].is_ascii_alphabetic() && bytes[1] == b':' && matches!(bytes.get(2), Some(b'\\' | b'/')));
    if rooted {
        return true;
    }
    let segments: Vec<&str> = token.split(['/', '\\']).filter(|s| !s.is_empty()).collect();
    if segments.len() < 2 && !(segments.len() == 1 && token.ends_with('/')) {
        return false;
    }
    let all = |test: fn(char) -> bool| segments.iter().all(|s| s.chars().all(test));
    let media_type = ["application", "text", "image", "audio", "video", "multipart", "font"]
        .iter()
        .any(|top| token.strip_prefix(top).is_some_and(|rest| rest.starts_with('/')) && segments.len() == 2);
    !(all(|c| c.is_ascii_uppercase()) || all(|c| c.is_ascii_digit()) || media_type)
}

/// 7 or more hex digits with a digit among them, and a letter unless it
/// is as long as a SHA-1 or a SHA-256 (an all-digit short one is a number).
fn is_hash(token: &str) -> bool {
    token.len() >= 7
        && token.chars().all(|c| c.is_ascii_hexdigit())
        && token.chars().any(|c| c.is_ascii_digit())
        && (token.chars().any(|c| c.is_ascii_alphabetic()) || token.len() == 40 || token.len() == 64)
}

/// An error code: capitals, then 3 to 8 digits (`TF401019`, `E0425`).
fn is_error_code(token: &str) -> bool {
    let digits = token.trim_start_matches(|c: char| c.is_ascii_uppercase() || c == '_');
    digits.len() < token.len()
        && token.starts_with(|c: char| c.is_ascii_uppercase())
        && (3..=8).contains(&digits.len())
        && digits.chars().all(|c| c.is_ascii_digit())
}

/// A number with a unit: `1.5s`, `250ms`, `10MiB`.
fn is_quantity(token: &str) -> bool {
    let unit = token.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
    unit.len() < token.len() && unit.len() <= 5 && unit.chars().all(|c| c.is_ascii_alphabetic())
}

/// Each run of digits (with its decimals) as `<n>`: `1.5s` is `<n>s`.
fn mask_numbers(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars().peekable();
    let mut in_number = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push_str("<n>");
                in_number = true;
            }
        } else if in_number && c == '.' && chars.peek().is_some_and(char::is_ascii_digit) {
            // The decimals are the number's.
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::mask;

    #[track_caller]
    fn masks(text: &str, expected: &str) {
        assert_eq!(mask(text), expected, "{text}");
    }

    #[test]
    fn quoted_names_are_masked_whole() {
        masks(
            "repository `orders` not found for this tenant",
            "repository `<name>` not found for this tenant",
        );
        masks("project 'my repo' does not exist", "project '<name>' does not exist");
        masks(
            r#"applications.argoproj.io "bosun-contoso.dev" not found"#,
            r#"applications.argoproj.io "<name>" not found"#,
        );
        masks(
            "could not run `git push origin main`: denied",
            "could not run `<name>`: denied",
        );
        masks(
            "resource `urn:pulumi:dev::payments::random:index:RandomId::x` is `std::io::Error`, not `io::error`",
            "resource `<name>` is `std::io::Error`, not `<name>`",
        );
        masks("a `\nb` c", "a ` b` c");
        masks("Script exited with code '1'.", "Script exited with code '<name>'.");
        masks("the reference ‘refs/heads/x’ moved", "the reference ‘<name>’ moved");
    }

    #[test]
    fn odd_text_is_kept_and_whitespace_normalised() {
        for odd in ["", "'", "``", "`", "\"\"", "“x", "(((", "...", "a'b'c", "é ß"] {
            masks(odd, odd);
        }
        masks("  é\t'ü'\n ß  ", "é '<name>' ß");
        masks("a 'multi\nline' b", "a 'multi line' b");
    }

    #[test]
    fn apostrophes_open_no_quote() {
        masks(
            "the tenants' repos can't be read: 'ledger' is locked",
            "the tenants' repos can't be read: '<name>' is locked",
        );
        masks("don't retry 'x", "don't retry 'x");
    }

    #[test]
    fn sentences_in_quotes_json_keys_and_error_types_are_kept() {
        masks(
            r#"HTTP 404: {"message":"Run 4711 not found","typeKey":"PipelineRunNotFoundException"}"#,
            r#"HTTP <n>: {"message":"Run <n> not found","typeKey":"PipelineRunNotFoundException"}"#,
        );
        masks(
            r#"Os { code: 2, kind: NotFound, message: "No such file or directory" }"#,
            r#"Os { code: <n>, kind: NotFound, message: "No such file or directory" }"#,
        );
        masks(
            "HttpError: io::Error: TimedOut after 30s",
            "HttpError: io::Error: TimedOut after <n>s",
        );
        masks(
            "TF401019: The Git repository with name or identifier payments does not exist.",
            "TF401019: The Git repository with name or identifier payments does not exist.",
        );
    }

    #[test]
    fn urls_emails_addresses_and_paths_are_masked() {
        masks(
            "error sending request for url (https://dev.azure.com/contoso/_apis/git/repositories?api-version=7.1): x",
            "error sending request for url (<url>): x",
        );
        masks("approver bob@contoso.com refused", "approver <email> refused");
        masks(
            "connect to 10.0.0.4:5432 failed, then [::1]:8080, then fe80::1 and 192.168.1.2.",
            "connect to <ip> failed, then <ip>, then <ip> and <ip>.",
        );
        masks(
            r"C:\agent\_work\1\a and \\server\share\x and ./bin/app and ~/x and contoso/orders: gone",
            "<path> and <path> and <path> and <path> and <path>: gone",
        );
        masks(
            "I/O error on TCP/IP, step 3/4, application/json and/or text/html",
            "I/O error on TCP/IP, step <n>/<n>, application/json and/or text/html",
        );
    }

    #[test]
    fn ids_hashes_times_and_numbers_are_masked() {
        masks(
            "push of 9c1581f87c1a42b9cca654aed6a4675d9fdfb309 to /data/git/contoso/a.git refused (run-3c1aa79bf0649a6568b3)",
            "push of <hash> to <path> refused (<id>)",
        );
        masks(
            "message 01a233f8-165b-7248-a2cc-fc98369fd094 at 2026-12-01T23:37:06.396Z: HTTP 503, retry in 1.5s",
            "message <id> at <time>: HTTP <n>, retry in <n>s",
        );
        masks(
            "commit 9c1581f, image sha256:e3b0c44298fc1c149afbf4c8996fb924, code 0x80070005, 120000ms, 1.4.2",
            "commit <hash>, image sha256:<hash>, code <n>, <n>ms, <n>",
        );
        masks("request_id=req-42xz9 x=7", "request_id=<id> x=<n>");
        masks(
            "UTF-8 text, sha256 sums, x86_64 only",
            "UTF-8 text, sha256 sums, x86_64 only",
        );
        masks("field `branch`:  is  empty.", "field `<name>`: is empty.");
    }
}
