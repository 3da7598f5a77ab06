//! What every command group prints with: `--json` output and times.
//!
//! The tables themselves live with their command group; they write to any
//! [`Write`] so their unit tests read what a user would see.

use std::io::Write;

use anyhow::Result;
use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Prints `value` as pretty JSON and a newline on stdout (`--json`).
pub fn print_json(value: &impl Serialize) -> Result<()> {
    write_json(&mut std::io::stdout().lock(), value)
}

/// Writes `value` as pretty JSON and a newline.
pub fn write_json(out: &mut impl Write, value: &impl Serialize) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}

/// A time as the tables show it: RFC 3339.
pub fn short_time(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_else(|_| at.to_string())
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn times_print_as_rfc3339() {
        assert_eq!(short_time(datetime!(2026-12-01 10:00:00 UTC)), "2026-12-01T10:00:00Z");
        assert_eq!(
            short_time(datetime!(2026-12-01 10:00:00.25 +01:00)),
            "2026-12-01T10:00:00.25+01:00"
        );
    }

    #[test]
    fn json_is_pretty_and_ends_with_a_newline() -> Result<()> {
        let mut out = Vec::new();
        write_json(&mut out, &serde_json::json!({"id": "a", "n": 1}))?;
        assert_eq!(String::from_utf8(out)?, "{\n  \"id\": \"a\",\n  \"n\": 1\n}\n");
        Ok(())
    }
}
