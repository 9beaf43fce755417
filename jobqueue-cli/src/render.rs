//! How results look to a person: aligned tables, colours (only on a terminal, never with
//! `NO_COLOR`), durations and times. JSON for scripts is written by the commands themselves.

use std::fmt::Write as _;
use std::io::{self, IsTerminal, Write};

use chrono::{DateTime, Utc};
use jobqueue::JobStatus;

/// A colour or weight for a piece of text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Paint {
    /// As it is.
    Plain,
    /// Headings.
    Bold,
    /// Zeros and other things to look past.
    Dim,
    /// Failures.
    Red,
    /// Success.
    Green,
    /// Things that need a look but are not failures (paused, expired leases, a backlog).
    Yellow,
    /// Work in progress.
    Cyan,
}

impl Paint {
    /// The SGR parameter of this paint.
    fn code(self) -> &'static str {
        match self {
            Paint::Plain => "",
            Paint::Bold => "1",
            Paint::Dim => "2",
            Paint::Red => "31",
            Paint::Green => "32",
            Paint::Yellow => "33",
            Paint::Cyan => "36",
        }
    }

    /// The paint a status is shown in.
    pub(crate) fn of_status(status: JobStatus) -> Paint {
        match status {
            JobStatus::Scheduled => Paint::Dim,
            JobStatus::Ready | JobStatus::Blocked => Paint::Yellow,
            JobStatus::Running => Paint::Cyan,
            JobStatus::Done => Paint::Green,
            JobStatus::Failed => Paint::Red,
            // Cancelled, and any status of a later release.
            _ => Paint::Dim,
        }
    }
}

/// Whether to colour, decided once per stream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Palette {
    /// False: text passes through unchanged.
    enabled: bool,
}

impl Palette {
    /// Colours for standard output: only when it is a terminal and `NO_COLOR` is unset or
    /// empty (the convention of no-color.org).
    pub(crate) fn for_stdout() -> Palette {
        Palette {
            enabled: io::stdout().is_terminal() && !no_color(),
        }
    }

    /// Colours for standard error, by the same rule.
    pub(crate) fn for_stderr() -> Palette {
        Palette {
            enabled: io::stderr().is_terminal() && !no_color(),
        }
    }

    /// `text` in `paint`, or as it is when colours are off.
    pub(crate) fn paint(self, paint: Paint, text: &str) -> String {
        if !self.enabled || paint == Paint::Plain || text.is_empty() {
            text.to_owned()
        } else {
            format!("\x1b[{}m{text}\x1b[0m", paint.code())
        }
    }
}

/// Whether `NO_COLOR` asks for no colours (set and not empty).
fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// Standard output, locked once, with the palette that suits it.
pub(crate) struct Out {
    /// Locked once: the commands write many short lines.
    stdout: io::StdoutLock<'static>,
    /// The colours of this stream.
    pub(crate) palette: Palette,
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Out")
            .field("palette", &self.palette)
            .finish_non_exhaustive()
    }
}

impl Out {
    /// Standard output.
    pub(crate) fn stdout() -> Out {
        Out {
            stdout: io::stdout().lock(),
            palette: Palette::for_stdout(),
        }
    }

    /// Writes `text` and a newline.
    pub(crate) fn line(&mut self, text: &str) -> io::Result<()> {
        writeln!(self.stdout, "{text}")
    }

    /// Writes `text` as it is.
    pub(crate) fn raw(&mut self, text: &str) -> io::Result<()> {
        self.stdout.write_all(text.as_bytes())
    }

    /// Writes `value` as pretty JSON and a newline.
    pub(crate) fn json(&mut self, value: &serde_json::Value) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut self.stdout, value)?;
        writeln!(self.stdout)
    }

    /// Writes `value` as one line of JSON (for `status --watch --json`).
    pub(crate) fn json_line(&mut self, value: &serde_json::Value) -> io::Result<()> {
        serde_json::to_writer(&mut self.stdout, value)?;
        writeln!(self.stdout)
    }

    /// Flushes what was written.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.stdout.flush()
    }

    /// `text` in `paint`, if this stream shows colours.
    pub(crate) fn paint(&self, paint: Paint, text: &str) -> String {
        self.palette.paint(paint, text)
    }

    /// Whether standard output is a terminal.
    pub(crate) fn is_terminal(&self) -> bool {
        io::stdout().is_terminal()
    }
}

/// Which side of its column a value keeps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// A table whose columns are as wide as their widest cell.
#[derive(Debug)]
pub(crate) struct Table {
    /// Heading and alignment of each column.
    columns: Vec<(&'static str, Align)>,
    /// The cells, row by row.
    rows: Vec<Vec<(String, Paint)>>,
}

impl Table {
    /// A table with these headings.
    pub(crate) fn new(columns: &[(&'static str, Align)]) -> Table {
        Table {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row: one (text, paint) per column.
    pub(crate) fn row(&mut self, cells: Vec<(String, Paint)>) {
        debug_assert_eq!(cells.len(), self.columns.len());
        self.rows.push(cells);
    }

    /// The table as lines of text, painted with `palette`; widths count characters, so
    /// colour codes never shift a column.
    pub(crate) fn render(&self, palette: Palette) -> String {
        let mut widths: Vec<usize> = self.columns.iter().map(|(h, _)| h.len()).collect();
        for row in &self.rows {
            for (w, (text, _)) in widths.iter_mut().zip(row) {
                *w = (*w).max(text.chars().count());
            }
        }
        let mut out = String::new();
        let heading: Vec<(String, Paint)> = self
            .columns
            .iter()
            .map(|(h, _)| ((*h).to_owned(), Paint::Bold))
            .collect();
        for row in std::iter::once(&heading).chain(&self.rows) {
            let mut line = String::new();
            let last = row.len() - 1;
            for (i, ((text, paint), (&width, &(_, align)))) in
                row.iter().zip(widths.iter().zip(&self.columns)).enumerate()
            {
                let pad = " ".repeat(width - text.chars().count());
                let painted = palette.paint(*paint, text);
                match align {
                    Align::Left if i == last => line.push_str(&painted),
                    Align::Left => {
                        line.push_str(&painted);
                        line.push_str(&pad);
                    }
                    Align::Right => {
                        line.push_str(&pad);
                        line.push_str(&painted);
                    }
                }
                if i != last {
                    line.push_str("  ");
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        out
    }
}

/// A count, dimmed when zero so that the numbers that matter stand out.
pub(crate) fn count(n: u64, paint_if_nonzero: Paint) -> (String, Paint) {
    (
        n.to_string(),
        if n == 0 { Paint::Dim } else { paint_if_nonzero },
    )
}

/// A length of time, short: `850ms`, `42s`, `4m 10s`, `2h 05m`, `3d 4h`.
pub(crate) fn span(secs: f64) -> String {
    let secs = secs.abs();
    if secs < 1.0 {
        return format!("{}ms", (secs * 1000.0).round() as u64);
    }
    let s = secs.round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// A database time for people: `2026-11-30 12:00:01 UTC`.
pub(crate) fn timestamp(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// How long before or after `now` (the database's clock) `t` is: `5m 02s ago`, `in 30s`.
pub(crate) fn relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - t).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6;
    if secs >= 0.0 {
        format!("{} ago", span(secs))
    } else {
        format!("in {}", span(secs))
    }
}

/// `text` cut to `max` characters on one line, with `…` when cut.
pub(crate) fn cut(text: &str, max: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        let mut s: String = one_line.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

/// `1 row`, `3 rows`.
pub(crate) fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans() {
        assert_eq!(span(0.25), "250ms");
        assert_eq!(span(42.4), "42s");
        assert_eq!(span(250.0), "4m 10s");
        assert_eq!(span(7500.0), "2h 05m");
        assert_eq!(span(3.0 * 86_400.0 + 4.0 * 3600.0), "3d 4h");
        assert_eq!(span(-30.0), "30s");
    }

    #[test]
    fn tables_align_without_colour() {
        let mut t = Table::new(&[("ID", Align::Right), ("KIND", Align::Left)]);
        t.row(vec![
            ("7".into(), Paint::Plain),
            ("export".into(), Paint::Red),
        ]);
        t.row(vec![
            ("1234".into(), Paint::Plain),
            ("x".into(), Paint::Plain),
        ]);
        let text = t.render(Palette { enabled: false });
        assert_eq!(text, "  ID  KIND\n   7  export\n1234  x\n");
        let coloured = t.render(Palette { enabled: true });
        assert!(coloured.contains("\x1b[31mexport\x1b[0m"));
    }

    #[test]
    fn cutting_and_counting() {
        assert_eq!(cut("a\nb   c", 10), "a b c");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(plural(1, "row", "rows"), "1 row");
        assert_eq!(plural(0, "row", "rows"), "0 rows");
    }
}
