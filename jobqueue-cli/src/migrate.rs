//! `jobqueue migrate`: apply the embedded migrations, with `--check` only list them, with
//! `--print-sql` print them.

use std::io::Write;
use std::process::ExitCode;

use jobqueue::Queue;

use crate::failure::Failure;
use crate::render::{plural, Out, Paint};
use crate::target::Target;

/// Applies the pending migrations (or lists them with `check`). Returns whether pending
/// migrations were found by `--check` (the exit status is then 1).
pub(crate) async fn run(queue: &Queue, target: &Target, check: bool) -> Result<bool, Failure> {
    let mut out = Out::stdout();
    let db = target.database();
    if !target.has_database() {
        return Err(Failure::Usage(
            "the database URL names no database; add one: mysql://user:password@host:port/DATABASE"
                .into(),
        ));
    }
    let pending = queue.pending_migrations().await?;
    if pending.is_empty() {
        out.line(&format!(
            "{} database {db} is up to date; no migration pending",
            out.paint(Paint::Green, "ok:")
        ))?;
        out.flush()?;
        return Ok(false);
    }
    let count = plural(pending.len() as u64, "migration", "migrations");
    if check {
        out.line(&format!(
            "{} database {db} has {count} pending; `jobqueue migrate` applies them:",
            out.paint(Paint::Yellow, "pending:")
        ))?;
    } else {
        queue.migrate().await?;
        out.line(&format!(
            "{} {count} to database {db}:",
            out.paint(Paint::Green, "applied")
        ))?;
    }
    for (version, description) in &pending {
        out.line(&format!("  {version} {description}"))?;
    }
    out.flush()?;
    Ok(check)
}

/// Prints the schema's SQL to standard output (`--print-sql`); needs no database.
pub(crate) fn print_sql() -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(Queue::migration_sql().as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write the SQL to standard output: {e}");
            ExitCode::from(crate::EXIT_ERROR)
        }
    }
}
