//! What every command group prints with: `--json` output and times.
//!
//! The tables themselves live with their command group; they write to any
//! [`Write`] so their unit tests read what a user would see.

use std::io::Write;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// `println!` that returns the write's error instead of panicking, so
/// output to a closed pipe (`bosun ... | head`) ends the command quietly
/// ([`is_closed_pipe`]).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}
pub(crate) use outln;

/// `print!` that returns the write's error (see [`outln!`]).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
    }};
}
pub(crate) use out;

/// Whether `err` is a write to a reader that went away (`| head`): the
/// command ends quietly then, as Unix tools do.
pub fn is_closed_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind)
                == Some(std::io::ErrorKind::BrokenPipe)
    })
}

/// The `--since` units: suffix and seconds.
const SINCE_UNITS: [(char, u64); 4] = [('s', 1), ('m', 60), ('h', 3600), ('d', 86_400)];

/// Parses `--since`: RFC 3339, or `<n>s|m|h|d` before `now`.
pub fn parse_since(text: &str, now: OffsetDateTime) -> Result<OffsetDateTime> {
    if let Ok(at) = OffsetDateTime::parse(text, &Rfc3339) {
        return Ok(at);
    }
    let neither = || format!("--since `{text}` is neither RFC 3339 nor a duration like 30m, 2h, 7d");
    let Some((number, seconds_per_unit)) = SINCE_UNITS
        .iter()
        .find_map(|&(unit, seconds)| text.strip_suffix(unit).map(|number| (number, seconds)))
    else {
        bail!(neither());
    };
    let amount: u64 = number.parse().with_context(neither)?;
    amount
        .checked_mul(seconds_per_unit)
        .and_then(|seconds| i64::try_from(seconds).ok())
        .and_then(|seconds| now.checked_sub(time::Duration::seconds(seconds)))
        .with_context(|| format!("--since `{text}` is too long ago"))
}

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

/// A time to the millisecond, in UTC and saying so, as the console shows
/// it: `2026-12-07 21:49:33.412 UTC`.
pub fn precise_time(at: OffsetDateTime) -> String {
    let format =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second].[subsecond digits:3] UTC");
    let utc = at.to_offset(time::UtcOffset::UTC);
    utc.format(&format).unwrap_or_else(|_| utc.to_string())
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
    fn precise_times_have_milliseconds_and_say_utc() {
        assert_eq!(
            precise_time(datetime!(2026-12-07 21:49:33.412_345 UTC)),
            "2026-12-07 21:49:33.412 UTC"
        );
        assert_eq!(
            precise_time(datetime!(2026-12-07 22:49:33 +01:00)),
            "2026-12-07 21:49:33.000 UTC"
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
