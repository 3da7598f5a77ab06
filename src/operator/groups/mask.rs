//! Masking a dead letter's description: what differs from one occurrence
//! of a cause to the next becomes a placeholder.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

/// `text` with what differs between occurrences of one cause masked: UUIDs
/// and id-like tokens (letters and digits) as `<id>`, hex hashes as
/// `<hash>`, paths and URLs as `<path>`, RFC 3339 times as `<time>`, other
/// numbers as `<n>`; whitespace is normalised.
pub fn mask(text: &str) -> String {
    text.split_whitespace().map(mask_word).collect::<Vec<_>>().join(" ")
}

fn mask_word(word: &str) -> String {
    const EDGES: &[char] = &['(', ')', '[', ']', '{', '}', '"', '\'', '`', ',', ';', '<', '>'];
    let core = word.trim_matches(EDGES);
    // A sentence's full stop or colon is not part of the token.
    let core = core.strip_suffix(['.', ':']).unwrap_or(core);
    if core.is_empty() {
        return word.to_owned();
    }
    let start = word.find(core).unwrap_or(0);
    let (before, after) = (&word[..start], &word[start + core.len()..]);
    format!("{before}{}{after}", mask_token(core))
}

fn mask_token(token: &str) -> String {
    let has_digit = token.chars().any(|c| c.is_ascii_digit());
    if Uuid::try_parse(token).is_ok() {
        return "<id>".into();
    }
    if OffsetDateTime::parse(token, &Rfc3339).is_ok() {
        return "<time>".into();
    }
    if token.len() > 1 && token.contains('/') {
        return "<path>".into();
    }
    let id_like = token.len() >= 6
        && has_digit
        && token.chars().any(|c| c.is_ascii_alphabetic())
        && token.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:#@".contains(c));
    if id_like {
        let hex = token.len() >= 7 && token.chars().all(|c| c.is_ascii_hexdigit());
        return if hex { "<hash>" } else { "<id>" }.into();
    }
    // Numbers inside a word (`attempt#3`, `503`, `1.5s`).
    let mut out = String::with_capacity(token.len());
    let mut in_number = false;
    for c in token.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push_str("<n>");
                in_number = true;
            }
        } else {
            in_number = in_number && c == '.';
            if !in_number {
                out.push(c);
            }
        }
    }
    out
}
