//! `jobqueue`: the operator's command line for a jobqueue database.
//!
//! It answers "what is stuck, what failed, why" and fixes it, without SQL:
//!
//! ```text
//! jobqueue migrate [--check | --print-sql]         apply (or list, or print) the migrations
//! jobqueue status [--queue Q] [--watch] [--json]   each queue at a glance
//! jobqueue list [--status S] [--queue Q] [--kind K] [--limit N] [--json]
//! jobqueue show ID | --key KEY [--json]            one job: payload, attempt history, output, last error
//! jobqueue retry ID | --failed [--queue Q] [--kind K] [--dry-run]
//! jobqueue cancel ID [--dry-run]
//! jobqueue pause Q [--dry-run]  /  jobqueue resume Q [--dry-run]
//! jobqueue purge [--status done] --older-than 7d [--dry-run]
//! ```
//!
//! The database comes from `--database-url` or `DATABASE_URL`
//! (`mysql://user:password@host:port/database`). Its password is never printed: messages
//! show the URL as `mysql://user:***@host:port/database`.
//!
//! Output: tables for people, `--json` on the read commands for scripts, colours only when
//! standard output is a terminal and `NO_COLOR` is unset or empty, and a progress bar on
//! standard error (on a terminal) for long purges and retries. Logs go to standard error at
//! `warn` level; `RUST_LOG=jobqueue_runtime=info` shows more.
//!
//! Exit status: 0 on success, 1 when `migrate --check` finds pending migrations, 2 on any
//! error, which is printed as one line saying what to do about it.
//!
//! Install with `cargo install --path jobqueue-cli`; see the crate's README for a session.

use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use jobqueue::admin::JobFilter;

mod actions;
mod cli;
mod failure;
mod jobs;
mod migrate;
mod progress;
mod render;
mod status;
mod target;
mod web;
mod workers;

use cli::{Cli, Command};
use failure::Failure;
use render::{Paint, Palette};
use target::Target;

/// Exit status of `migrate --check` when migrations are pending.
const EXIT_PENDING: u8 = 1;
/// Exit status of every error (clap's own usage errors use it too).
const EXIT_ERROR: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Migrate {
        print_sql: true, ..
    } = cli.command
    {
        return migrate::print_sql();
    }
    let Some(url) = cli.database_url.clone().filter(|u| !u.trim().is_empty()) else {
        return fail(
            None,
            &Failure::Usage(
                "no database given; set DATABASE_URL or pass --database-url \
                 mysql://user:password@host:port/database"
                    .into(),
            ),
        );
    };
    let target = Arc::new(Target::new(url, cli.connect_timeout.duration()));
    init_logging(target.clone());

    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(Some(&target), &Failure::Io(e)),
    };
    match runtime.block_on(run(cli.command, &target)) {
        Ok(code) => code,
        Err(failure) => fail(Some(&target), &failure),
    }
}

/// Runs one command against the database.
async fn run(command: Command, target: &Target) -> Result<ExitCode, Failure> {
    // A dashboard that would be open to the network is refused before connecting.
    let web_auth = match &command {
        Command::Web {
            listen,
            token,
            basic_auth,
            ..
        } => Some(web::auth(*listen, token.as_deref(), basic_auth.as_deref())?),
        _ => None,
    };
    let changes_jobs = !matches!(
        command,
        Command::Status { .. }
            | Command::List { .. }
            | Command::Show { .. }
            | Command::Workers { .. }
            | Command::Web {
                read_only: true,
                ..
            }
    ) && !matches!(command, Command::Migrate { check: true, .. });
    let queue = target.connect(changes_jobs).await?;
    match command {
        Command::Migrate { check, .. } => {
            let pending = migrate::run(&queue, target, check).await?;
            return Ok(if pending {
                ExitCode::from(EXIT_PENDING)
            } else {
                ExitCode::SUCCESS
            });
        }
        Command::Status {
            queue: only,
            watch,
            interval,
            format,
        } => {
            status::run(
                &queue,
                target,
                only.as_deref(),
                watch,
                interval.duration(),
                format.json,
            )
            .await?
        }
        Command::List {
            status,
            queue: in_queue,
            kind,
            meta,
            key,
            limit,
            format,
        } => {
            if let Some(key) = key {
                return jobs::list_key(&queue, &key, limit, format.json)
                    .await
                    .map(|()| ExitCode::SUCCESS);
            }
            let mut filter = JobFilter::default();
            if let Some(s) = status {
                filter = filter.status(s.into());
            }
            if let Some(q) = in_queue {
                filter = filter.queue(q);
            }
            if let Some(k) = kind {
                filter = filter.kind(k);
            }
            if let Some((key, value)) = meta {
                filter = filter.meta(key, value);
            }
            jobs::list(&queue, &filter, limit, format.json).await?
        }
        Command::Show { id, key, format } => {
            let lookup = match (id, key) {
                (Some(id), _) => jobs::Lookup::Id(id),
                (None, Some(key)) => jobs::Lookup::Key(key),
                (None, None) => {
                    return Err(Failure::Usage(
                        "give a job id or --key KEY; `jobqueue list` shows both".into(),
                    ))
                }
            };
            jobs::show(&queue, &lookup, format.json).await?
        }
        Command::Retry {
            id,
            failed,
            queue: in_queue,
            kind,
            dry_run,
        } => match id {
            Some(id) => actions::retry_one(&queue, id, dry_run.dry_run).await?,
            None if failed => {
                let mut filter = JobFilter::default();
                if let Some(q) = in_queue {
                    filter = filter.queue(q);
                }
                if let Some(k) = kind {
                    filter = filter.kind(k);
                }
                actions::retry_failed(&queue, filter, dry_run.dry_run).await?
            }
            None => {
                return Err(Failure::Usage(
                    "give a job id, or --failed to retry every failed job".into(),
                ))
            }
        },
        Command::Cancel { id, dry_run } => actions::cancel(&queue, id, dry_run.dry_run).await?,
        Command::Pause {
            queue: name,
            dry_run,
        } => actions::pause(&queue, &name, dry_run.dry_run).await?,
        Command::Resume {
            queue: name,
            dry_run,
        } => actions::resume(&queue, &name, dry_run.dry_run).await?,
        Command::Workers { format } => workers::run(&queue, format.json).await?,
        Command::Web {
            listen,
            read_only,
            hide_payloads,
            ..
        } => web::serve(queue, listen, web_auth.flatten(), read_only, hide_payloads).await?,
        Command::Purge {
            status,
            older_than,
            dry_run,
        } => actions::purge(&queue, status.into(), &older_than, dry_run.dry_run).await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints `error: ...` (one line, no password) and returns the error exit status; a closed
/// output pipe ends the command quietly instead.
fn fail(target: Option<&Target>, failure: &Failure) -> ExitCode {
    let Some(message) = failure.explain(target) else {
        return ExitCode::SUCCESS;
    };
    let palette = Palette::for_stderr();
    let _ = writeln!(
        io::stderr().lock(),
        "{} {message}",
        palette.paint(Paint::Red, "error:")
    );
    ExitCode::from(EXIT_ERROR)
}

/// Logs to standard error at `warn` (or `RUST_LOG`), through a writer that scrubs the
/// database password from every line.
fn init_logging(target: Arc<Target>) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let ansi =
        io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(move || ScrubbedStderr {
            target: target.clone(),
        })
        .try_init();
}

/// Standard error, minus the database password.
struct ScrubbedStderr {
    /// Knows the password to scrub.
    target: Arc<Target>,
}

impl Write for ScrubbedStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        io::stderr().write_all(self.target.scrub(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}
