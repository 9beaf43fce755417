//! `jobqueue migrate`: apply the embedded migrations, with `--check` only list them, with
//! `--print-sql` print them.

use std::io::Write;
use std::process::ExitCode;

use jobqueue::{Backend, Queue};

use crate::actions::{migrate_report, Report};
use crate::failure::Failure;
use crate::render::{plural, Out, Paint};
use crate::target::Target;

/// Applies the pending migrations (or lists them with `check`), printing what it did (as
/// text, or as one JSON line with `json`). The report's exit status is 1 when `--check`
/// found pending migrations.
pub(crate) async fn run(
    queue: &Queue,
    target: &Target,
    check: bool,
    json: bool,
) -> Result<Report, Failure> {
    let db = target.database();
    if !target.has_database() {
        return Err(Failure::Usage(format!(
            "the database URL names no database; add one: {}",
            target.url_form()
        )));
    }
    let pending = queue.pending_migrations().await?;
    let count = plural(pending.len() as u64, "migration", "migrations");
    let (head, paint, text) = if pending.is_empty() {
        (
            "ok:",
            Paint::Green,
            format!("database {db} is up to date; no migration pending"),
        )
    } else if check {
        (
            "pending:",
            Paint::Yellow,
            format!("database {db} has {count} pending; `jobqueue migrate` applies them:"),
        )
    } else {
        queue.migrate().await?;
        (
            "applied",
            Paint::Green,
            format!("{count} to database {db}:"),
        )
    };
    let report = migrate_report(db, check, &pending, format!("{head} {text}"));
    if json {
        report.print(true)?;
        return Ok(report);
    }
    let mut out = Out::stdout();
    out.line(&format!("{} {text}", out.paint(paint, head)))?;
    for (version, description) in &pending {
        out.line(&format!("  {version} {description}"))?;
    }
    out.flush()?;
    Ok(report)
}

/// Prints the schema's SQL of `backend` to standard output (`--print-sql`); needs no
/// database.
pub(crate) fn print_sql(backend: Backend) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(Queue::migration_sql_for(backend).as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write the SQL to standard output: {e}");
            ExitCode::from(crate::EXIT_ERROR)
        }
    }
}
