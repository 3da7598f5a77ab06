//! What every command group prints with: `--json` output, times and
//! [`Table`]s sized to their contents.
//!
//! The tables themselves live with their command group; they write to any
//! [`Write`] so their unit tests read what a user would see.

use std::io::Write;

use anyhow::{Context, Result, bail};
use bosun::operator::OperatorError;
use bosun::ports::store::StoreError;
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

/// An operator's error as the terminal shows it: an id prefix several
/// records begin with lists them a line each (the API says it in one line).
pub fn for_terminal(err: OperatorError) -> anyhow::Error {
    match err {
        OperatorError::Store(StoreError::Ambiguous { what, id, candidates }) => anyhow::anyhow!(
            "{what} `{id}` is ambiguous: give more of the id; it begins\n  {}",
            candidates.join("\n  ")
        ),
        other => other.into(),
    }
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

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: padded on the right.
    Left,
    /// Numbers: padded on the left.
    Right,
}

/// The space between two columns.
const GAP: &str = "  ";

/// The width of `text` on a terminal, in columns: its characters (no crate
/// in the tree knows East Asian wide characters or zero-width marks, and
/// bosun's cells are ids, names, times and numbers), so a cell with
/// non-ASCII text is as wide as its characters, not its bytes.
pub fn width(text: &str) -> usize {
    text.chars().count()
}

/// A table sized to its contents: every column as wide as its widest cell,
/// header included, so a long id or a time with fractions of a second
/// never pushes the columns after it out of line. Columns are two spaces
/// apart; lines carry no trailing spaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// The header line's cells, if the table has one.
    headers: Option<Vec<String>>,
    /// Each column's alignment.
    aligns: Vec<Align>,
    /// The rows, one cell per column.
    rows: Vec<Vec<String>>,
    /// What every line begins with.
    indent: &'static str,
}

impl Table {
    /// A table with a header line: each column's header and alignment.
    pub fn new<const N: usize>(columns: [(&str, Align); N]) -> Self {
        Self {
            headers: Some(columns.iter().map(|(header, _)| (*header).to_owned()).collect()),
            aligns: columns.iter().map(|(_, align)| *align).collect(),
            rows: Vec::new(),
            indent: "",
        }
    }

    /// A table without a header line (a list under a heading).
    pub fn headless<const N: usize>(aligns: [Align; N]) -> Self {
        Self {
            headers: None,
            aligns: aligns.to_vec(),
            rows: Vec::new(),
            indent: "",
        }
    }

    /// The same table, every line beginning with `indent`.
    pub fn indented(self, indent: &'static str) -> Self {
        Self { indent, ..self }
    }

    /// Adds a row: a cell per column (missing cells are empty, extra ones
    /// are left out).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut row: Vec<String> = cells.into_iter().map(Into::into).take(self.aligns.len()).collect();
        row.resize(self.aligns.len(), String::new());
        self.rows.push(row);
    }

    /// Its lines, header first, without line ends.
    pub fn lines(&self) -> Vec<String> {
        let all = || self.headers.iter().chain(&self.rows);
        let widths: Vec<usize> = (0..self.aligns.len())
            .map(|column| all().map(|row| width(&row[column])).max().unwrap_or(0))
            .collect();
        all()
            .map(|row| {
                let mut line = self.indent.to_owned();
                for (column, cell) in row.iter().enumerate() {
                    if column > 0 {
                        line.push_str(GAP);
                    }
                    let padding = " ".repeat(widths[column] - width(cell));
                    match self.aligns[column] {
                        Align::Left => {
                            line.push_str(cell);
                            line.push_str(&padding);
                        }
                        Align::Right => {
                            line.push_str(&padding);
                            line.push_str(cell);
                        }
                    }
                }
                line.truncate(line.trim_end().len());
                line
            })
            .collect()
    }

    /// Writes its lines.
    pub fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
        for line in self.lines() {
            writeln!(out, "{line}")?;
        }
        Ok(())
    }
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

    /// Where each cell of `line` begins, in characters, the cells being
    /// `cells` in order.
    fn starts(line: &str, cells: &[&str]) -> Vec<usize> {
        let mut from = 0;
        cells
            .iter()
            .map(|cell| {
                let at = line[from..]
                    .find(cell)
                    .map(|at| from + at)
                    .unwrap_or_else(|| panic!("{cell} in {line}"));
                from = at + cell.len();
                width(&line[..at])
            })
            .collect()
    }

    #[test]
    fn a_long_time_and_a_long_id_keep_every_column_in_line() {
        let mut table = Table::new([
            ("ID", Align::Left),
            ("STARTED", Align::Left),
            ("DONE", Align::Right),
            ("BY", Align::Left),
        ]);
        let long_id = "01936f7e-8a3b-7c4d-9e5f-0123456789ac.replay-01936f7e-8a3b-7c4d-9e5f-0123456789ad";
        let long_time = short_time(datetime!(2026-12-01 10:00:00.123456789 +05:30));
        let rows = [
            ["a", "2026-12-01T10:00:00Z", "1", "cli:ops"],
            [long_id, long_time.as_str(), "12345", "api:key-1"],
            ["ümlaut-ß", "-", "7", "cli:zoë"],
        ];
        for row in &rows {
            table.row(*row);
        }
        let lines = table.lines();
        assert_eq!(lines.len(), 4);
        let header = starts(&lines[0], &["ID", "STARTED", "DONE", "BY"]);
        // DONE is right-aligned: its header ends where the numbers end.
        let ends = |line: &str, cells: &[&str]| {
            starts(line, cells)
                .iter()
                .zip(cells)
                .map(|(start, cell)| start + width(cell))
                .collect::<Vec<_>>()
        };
        for (line, row) in lines[1..].iter().zip(&rows) {
            let at = starts(line, row);
            assert_eq!(
                [at[0], at[1], at[3]],
                [header[0], header[1], header[3]],
                "{line}\n{}",
                lines[0]
            );
            assert_eq!(
                ends(line, row)[2],
                ends(&lines[0], &["ID", "STARTED", "DONE", "BY"])[2],
                "{line}"
            );
        }
        // Every column as wide as its widest cell, two spaces apart.
        assert_eq!(header[1], width(long_id) + 2);
        assert_eq!(header[3], header[1] + width(&long_time) + 2 + 5 + 2);
        assert!(lines.iter().all(|line| !line.ends_with(' ')), "{lines:#?}");
    }

    #[test]
    fn a_headless_table_is_indented_and_pads_no_last_column() {
        let mut table = Table::headless([Align::Left, Align::Left]).indented("  ");
        table.row(["dev", "ok"]);
        table.row(["production", ""]);
        table.row(["qa"]);
        let mut out = Vec::new();
        table.write(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "  dev         ok\n  production\n  qa\n"
        );
    }

    #[test]
    fn an_ambiguous_prefix_lists_its_candidates_a_line_each_and_other_errors_read_as_they_are() {
        let ambiguous = OperatorError::Store(StoreError::Ambiguous {
            what: "delivery",
            id: "0195".to_owned(),
            candidates: vec![
                "0195-1 (started T, failed)".to_owned(),
                "0195-2 (started T, completed)".to_owned(),
            ],
        });
        assert_eq!(
            for_terminal(ambiguous).to_string(),
            "delivery `0195` is ambiguous: give more of the id; it begins\n  \
             0195-1 (started T, failed)\n  \
             0195-2 (started T, completed)"
        );
        let missing = StoreError::NotFound {
            what: "delivery",
            id: "0196".to_owned(),
        };
        let said = missing.to_string();
        assert_eq!(for_terminal(OperatorError::Store(missing)).to_string(), said);
    }

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
