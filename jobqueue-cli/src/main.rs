//! `jobqueue`: the operator's command line for a jobqueue database.
//!
//! It answers "what is stuck, what failed, why" and fixes it, without SQL:
//!
//! ```text
//! jobqueue migrate [--check | --print-sql]         apply (or list, or print) the migrations
//! jobqueue status [--queue Q] [--watch]            each queue at a glance
//! jobqueue list [--status S] [--queue Q] [--kind K] [--limit N] [--hide-payload]
//! jobqueue show ID | --key KEY [--hide-payload]    one job: payload, attempt history, output, last error
//! jobqueue retry ID | --key KEY | [--failed | --status S] [--queue Q] [--kind K] [--key-prefix P]
//! jobqueue cancel ID | --key KEY | [--status S] [--queue Q] [--kind K] [--key-prefix P]
//! jobqueue pause Q  /  jobqueue resume Q
//! jobqueue purge [--status done] --older-than 7d [--queue Q] [--kind K]
//! jobqueue workers
//! ```
//!
//! Every command but `web` takes `--json`; the commands that change something take
//! `--dry-run` and `--strict`; `purge` and `retry`/`cancel` over a filter take `--yes` (they
//! ask on a terminal and refuse elsewhere without it).
//!
//! The database comes from `--database-url` or `DATABASE_URL`
//! (`mysql://user:password@host:port/database`). Its password is never printed: messages
//! show the URL as `mysql://user:***@host:port/database`.
//!
//! Output: tables for people, `--json` for scripts, colours only when standard output is a
//! terminal and `NO_COLOR` is unset or empty, and a progress bar on standard error (on a
//! terminal) for long purges, retries and cancels. Logs go to standard error at `warn` level;
//! `RUST_LOG=jobqueue_runtime=info` shows more.
//!
//! Exit status: 0 on success; 1 when the command did not do what was asked (`migrate --check`
//! found pending migrations, a confirmation was answered no, `--strict` and nothing
//! changed); 2 on any error, which is printed as one line saying what to do about it.
//!
//! Install with `cargo install --path jobqueue-cli`; see the crate's README for a session.

use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use jobqueue::JobStatus;

mod actions;
mod cli;
mod failure;
mod jobs;
mod migrate;
mod progress;
mod render;
mod scope;
mod status;
mod target;
mod web;
mod workers;

use cli::{Cli, Command, FilterArgs};
use failure::Failure;
use jobs::Lookup;
use render::{Paint, Palette};
use scope::Scope;
use target::Target;

/// Exit status of every error (clap's own usage errors use it too).
const EXIT_ERROR: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Migrate {
        print_sql: true,
        format,
        backend,
        ..
    } = &cli.command
    {
        if format.json {
            return fail(
                None,
                &Failure::Usage("--print-sql prints SQL, not JSON; leave out --json".into()),
            );
        }
        // The flag's database, else the URL's (when it names one by its scheme), else MySQL's.
        let backend = backend.map(jobqueue::Backend::from).unwrap_or_else(|| {
            cli.database_url
                .as_deref()
                .and_then(jobqueue::Backend::of_url)
                .unwrap_or(jobqueue::Backend::MySql)
        });
        return migrate::print_sql(backend);
    }
    let Some(url) = cli.database_url.clone().filter(|u| !u.trim().is_empty()) else {
        return fail(
            None,
            &Failure::Usage(
                "no database given; set DATABASE_URL or pass --database-url \
                 mysql://user:password@host:port/database (or postgres://...)"
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
            allow_host,
            ..
        } => Some(web::auth(
            *listen,
            token.as_deref(),
            basic_auth.as_deref(),
            allow_host,
        )?),
        _ => None,
    };
    if let Some(failure) = no_target(&command) {
        return Err(failure);
    }
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
    let (report, strict, json) = match command {
        Command::Migrate { check, format, .. } => (
            migrate::run(&queue, target, check, format.json).await?,
            false,
            None,
        ),
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
            .await?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::List {
            status,
            queue: in_queue,
            kind,
            meta,
            key,
            limit,
            cursor,
            privacy,
            format,
        } => {
            let hide = privacy.hide_payload;
            if let Some(key) = key {
                jobs::list_key(&queue, &key, limit, format.json, hide).await?;
                return Ok(ExitCode::SUCCESS);
            }
            let scope = Scope {
                queue: in_queue,
                kind,
                meta,
                ..Scope::default()
            };
            let query = scope.query(status.map(Into::into));
            jobs::list(&queue, &query, cursor.as_ref(), limit, format.json, hide).await?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Show {
            id,
            key,
            privacy,
            format,
        } => {
            let lookup = lookup(id, key).ok_or_else(|| {
                Failure::Usage("give a job id or --key KEY; `jobqueue list` shows both".into())
            })?;
            jobs::show(&queue, &lookup, format.json, privacy.hide_payload).await?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Retry {
            id,
            key,
            failed,
            status,
            filter,
            change,
            confirm,
            format,
        } => {
            let report = if let Some(lookup) = lookup(id, key) {
                actions::retry_one(&queue, &lookup, change.dry_run).await?
            } else {
                // A filter: `no_target` refused a command with none.
                let statuses = match (failed, status) {
                    (true, _) => vec![JobStatus::Failed],
                    (false, Some(s)) => vec![s.into()],
                    (false, None) => vec![JobStatus::Failed, JobStatus::Cancelled],
                };
                let scope = scope(statuses, filter);
                actions::retry_matching(&queue, &scope, change.dry_run, confirm.yes).await?
            };
            (report, change.strict, Some(format.json))
        }
        Command::Cancel {
            id,
            key,
            status,
            filter,
            change,
            confirm,
            format,
        } => {
            let report = if let Some(lookup) = lookup(id, key) {
                actions::cancel_one(&queue, &lookup, change.dry_run).await?
            } else {
                // A filter: `no_target` refused a command with none.
                let statuses = match status {
                    Some(s) => vec![s.into()],
                    None => vec![JobStatus::Scheduled, JobStatus::Ready, JobStatus::Blocked],
                };
                let scope = scope(statuses, filter);
                actions::cancel_matching(&queue, &scope, change.dry_run, confirm.yes).await?
            };
            (report, change.strict, Some(format.json))
        }
        Command::Pause {
            queue: name,
            change,
            format,
        } => (
            actions::pause(&queue, &name, change.dry_run).await?,
            change.strict,
            Some(format.json),
        ),
        Command::Resume {
            queue: name,
            change,
            format,
        } => (
            actions::resume(&queue, &name, change.dry_run).await?,
            change.strict,
            Some(format.json),
        ),
        Command::Workers { format } => {
            workers::run(&queue, format.json).await?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Web {
            listen,
            read_only,
            redact,
            allow_host,
            trust_forwarded_proto,
            trust_forwarded_for,
            ..
        } => {
            let options = web::Options {
                read_only,
                redact,
                allow_host,
                trust_forwarded_proto,
                trust_forwarded_for,
            };
            web::serve(queue, listen, web_auth.flatten(), options).await?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Purge {
            status,
            older_than,
            queue: in_queue,
            kind,
            change,
            confirm,
            format,
        } => {
            let scope = scope(
                vec![status.into()],
                FilterArgs {
                    queue: in_queue,
                    kind,
                    key_prefix: None,
                },
            );
            (
                actions::purge(&queue, &scope, &older_than, change.dry_run, confirm.yes).await?,
                change.strict,
                Some(format.json),
            )
        }
    };
    // `migrate` printed its report itself (its text has a line per migration).
    if let Some(json) = json {
        report.print(json)?;
    }
    Ok(report.exit_code(strict))
}

/// The usage error of a `retry` or `cancel` that names neither a job nor a filter, found
/// before connecting.
fn no_target(command: &Command) -> Option<Failure> {
    match command {
        Command::Retry {
            id: None,
            key: None,
            failed: false,
            status: None,
            filter,
            ..
        } if !filter.is_set() => Some(Failure::Usage(
            "give a job id, --key KEY, or a filter: --failed (every failed job), --status, \
             --queue, --kind, --key-prefix"
                .into(),
        )),
        Command::Cancel {
            id: None,
            key: None,
            status: None,
            filter,
            ..
        } if !filter.is_set() => Some(Failure::Usage(
            "give a job id, --key KEY, or a filter: --status, --queue, --kind, --key-prefix \
             (`--status ready` cancels every ready job)"
                .into(),
        )),
        _ => None,
    }
}

/// One job, by id or by task key, if either is given.
fn lookup(id: Option<u64>, key: Option<String>) -> Option<Lookup> {
    match (id, key) {
        (Some(id), _) => Some(Lookup::Id(id)),
        (None, Some(key)) => Some(Lookup::Key(key)),
        (None, None) => None,
    }
}

/// The jobs of `statuses` that the command line's filter selects.
fn scope(statuses: Vec<JobStatus>, filter: FilterArgs) -> Scope {
    Scope {
        statuses,
        queue: filter.queue,
        kind: filter.kind,
        key_prefix: filter.key_prefix,
        meta: None,
    }
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
