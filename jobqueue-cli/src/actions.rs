//! The commands that change jobs: retry, cancel, pause, resume, purge. Each says exactly how
//! many rows it changed; with `--dry-run` it changes nothing and says how many it would.
//! Those that may change many jobs (purge, and retry or cancel over a filter) count them
//! first and ask before going on (or refuse off a terminal without `--yes`).
//!
//! With `--json` each prints one line: an object with `command`, `dry_run`, `matched`,
//! `changed` and `message`, and the fields of its own.

use std::future::Future;
use std::io::{self, BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use jobqueue::admin::{CancelOutcome, JobRecord};
use jobqueue::{JobStatus, Queue};
use serde_json::{json, Map, Value};

use crate::cli::Age;
use crate::failure::Failure;
use crate::jobs::{fetch, Lookup};
use crate::progress;
use crate::render::{plural, Out, Paint, Palette};
use crate::scope::Scope;

/// What a command that changes something did, as it prints it and as its exit status says.
#[derive(Debug)]
pub(crate) struct Report {
    /// `retry`, `cancel`...
    command: &'static str,
    /// Whether it only counted.
    dry_run: bool,
    /// What it found to change (or would change with `--dry-run`).
    matched: u64,
    /// What it changed (0 with `--dry-run`).
    changed: u64,
    /// Whether the command did not do what was asked (a person answered no at the
    /// confirmation; `migrate --check` found pending migrations): exit status 1.
    not_done: bool,
    /// The line a person reads.
    message: String,
    /// The command's own fields of its JSON object.
    fields: Map<String, Value>,
}

/// Exit status of a command that did not do what was asked: pending migrations, a
/// confirmation answered no, nothing changed with `--strict`.
pub(crate) const EXIT_UNCHANGED: u8 = 1;

impl Report {
    fn new(command: &'static str, dry_run: bool, matched: u64, changed: u64) -> Report {
        Report {
            command,
            dry_run,
            matched,
            changed,
            not_done: false,
            message: String::new(),
            fields: Map::new(),
        }
    }

    fn message(mut self, message: String) -> Report {
        self.message = message;
        self
    }

    fn field(mut self, name: &str, value: impl Into<Value>) -> Report {
        self.fields.insert(name.to_owned(), value.into());
        self
    }

    /// Prints the report: its message, the first word painted as the outcome, or its JSON
    /// object on one line.
    pub(crate) fn print(&self, json: bool) -> Result<(), Failure> {
        let mut out = Out::stdout();
        if json {
            let mut value = Map::new();
            value.insert("command".into(), self.command.into());
            value.insert("dry_run".into(), self.dry_run.into());
            value.insert("matched".into(), self.matched.into());
            value.insert("changed".into(), self.changed.into());
            for (k, v) in &self.fields {
                value.insert(k.clone(), v.clone());
            }
            value.insert("message".into(), self.message.clone().into());
            out.json_line(&Value::Object(value))?;
        } else {
            let good = if self.dry_run {
                self.matched > 0
            } else {
                self.changed > 0
            };
            let paint = if good { Paint::Green } else { Paint::Yellow };
            let (head, tail) = self.message.split_once(' ').unwrap_or((&self.message, ""));
            out.line(&format!("{} {tail}", out.paint(paint, head)))?;
        }
        Ok(out.flush()?)
    }

    /// 1 if the command did not do what was asked, or with `strict` if nothing changed (with `--dry-run`: if
    /// nothing would); 0 otherwise.
    pub(crate) fn exit_code(&self, strict: bool) -> ExitCode {
        let nothing = if self.dry_run {
            self.matched == 0
        } else {
            self.changed == 0
        };
        if self.not_done || (strict && nothing) {
            ExitCode::from(EXIT_UNCHANGED)
        } else {
            ExitCode::SUCCESS
        }
    }
}

/// How a summary line ends: what changed, or what would have.
fn rows(n: u64, dry_run: bool) -> String {
    if dry_run {
        format!(
            "{} would change; nothing changed (dry run)",
            plural(n, "row", "rows")
        )
    } else {
        format!("{} changed", plural(n, "row", "rows"))
    }
}

/// `would retry` or `retried`, and so on.
fn verb(dry_run: bool, would: &str, did: &str) -> String {
    if dry_run {
        format!("would {would}")
    } else {
        did.to_owned()
    }
}

/// What to do about a change of `matched` rows, described by `phrase` ("delete 2 done
/// jobs ..."), once counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Go {
    /// Change them.
    Ahead,
    /// Only tell (`--dry-run`), or there is nothing to change.
    Not,
    /// A person answered no.
    Declined,
}

/// Asks before a change of `matched` rows, unless it is a dry run, there is nothing to
/// change, or `yes`. Off a terminal, refuses without `yes`.
fn decide(matched: u64, dry_run: bool, yes: bool, phrase: &str) -> Result<Go, Failure> {
    if dry_run || matched == 0 {
        return Ok(Go::Not);
    }
    if yes {
        return Ok(Go::Ahead);
    }
    if !io::stdin().is_terminal() {
        return Err(Failure::Usage(format!(
            "refusing to {phrase} without a confirmation, as standard input is not a terminal; \
             add --yes to go ahead (or --dry-run to only count)"
        )));
    }
    let palette = Palette::for_stderr();
    let mut stderr = io::stderr().lock();
    write!(
        stderr,
        "{} {phrase}. Go ahead? [y/N] ",
        palette.paint(Paint::Yellow, "confirm:")
    )?;
    stderr.flush()?;
    let mut answer = String::new();
    io::stdin().lock().read_line(&mut answer)?;
    Ok(
        if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            Go::Ahead
        } else {
            Go::Declined
        },
    )
}

/// Asks as [`decide`] does, then, if told to go ahead, makes the change of `matched` rows
/// with `work`, showing its progress on a terminal by what `remaining` counts: whether it
/// went ahead, and how many rows changed.
async fn confirm_and_change<W, R, RF>(
    matched: u64,
    dry_run: bool,
    yes: bool,
    phrase: &str,
    doing: &str,
    work: W,
    remaining: R,
) -> Result<(Go, u64), Failure>
where
    W: Future<Output = jobqueue::Result<u64>>,
    R: Fn() -> RF,
    RF: Future<Output = jobqueue::Result<u64>>,
{
    let go = decide(matched, dry_run, yes, phrase)?;
    let changed = if go == Go::Ahead {
        progress::track(doing, matched, work, remaining).await?
    } else {
        0
    };
    Ok((go, changed))
}

/// The report of a bulk command: "not confirmed" if a person answered no, else `message`.
fn finish(report: Report, go: Go, message: String) -> Report {
    if go == Go::Declined {
        let mut report = report.message("not confirmed: nothing changed".into());
        report.not_done = true;
        report
    } else {
        report.message(message)
    }
}

/// The fields of one job in a single-job report.
fn job_fields(report: Report, job: &JobRecord) -> Report {
    report
        .field("id", job.id)
        .field("queue", job.queue.clone())
        .field("kind", job.kind.clone())
        .field("status_before", job.status.as_str())
}

/// `retry ID` or `retry --key KEY`: one failed or cancelled job back to ready.
pub(crate) async fn retry_one(
    queue: &Queue,
    lookup: &Lookup,
    dry_run: bool,
) -> Result<Report, Failure> {
    let before = fetch(queue, lookup).await?;
    let id = before.id;
    let report =
        |matched, changed| job_fields(Report::new("retry", dry_run, matched, changed), &before);
    if !matches!(before.status, JobStatus::Failed | JobStatus::Cancelled) {
        let text = format!(
            "not retried: job {id} is {}, and only failed or cancelled jobs can be retried; {}",
            before.status,
            rows(0, dry_run)
        );
        return Ok(report(0, 0)
            .field("status_after", before.status.as_str())
            .field("attempts", before.attempts)
            .field("max_attempts", before.max_attempts)
            .message(text));
    }
    let max_after = before.max_attempts.max(before.attempts + 1);
    let attempts = if max_after == before.max_attempts {
        format!(
            "attempts stay {} of {}",
            before.attempts, before.max_attempts
        )
    } else {
        format!(
            "attempts stay {}, max_attempts {} -> {}",
            before.attempts, before.max_attempts, max_after
        )
    };
    let changed = if dry_run {
        0
    } else {
        u64::from(queue.retry(id).await?)
    };
    if dry_run || changed == 1 {
        let text = format!(
            "{} job {id} ({}, {}): {} -> ready, {attempts}; {}",
            verb(dry_run, "retry", "retried"),
            before.kind,
            before.queue,
            before.status,
            rows(1, dry_run)
        );
        return Ok(report(1, changed)
            .field("status_after", "ready")
            .field("attempts", before.attempts)
            .field("max_attempts", max_after)
            .message(text));
    }
    // It changed status between our read and the update (a worker or another operator).
    let now = fetch(queue, &Lookup::Id(id)).await?;
    let text = format!(
        "not retried: job {id} became {} meanwhile; {}",
        now.status,
        rows(0, false)
    );
    Ok(report(1, 0)
        .field("status_after", now.status.as_str())
        .field("attempts", now.attempts)
        .field("max_attempts", now.max_attempts)
        .message(text))
}

/// `retry` over a filter: every failed or cancelled job of `scope` back to ready.
pub(crate) async fn retry_matching(
    queue: &Queue,
    scope: &Scope,
    dry_run: bool,
    yes: bool,
) -> Result<Report, Failure> {
    let matched = scope.count(queue).await?;
    let what = |n| {
        format!(
            "{}{}",
            scope.jobs(n, "failed or cancelled"),
            scope.describe()
        )
    };
    let (go, changed) = confirm_and_change(
        matched,
        dry_run,
        yes,
        &format!("retry {}", what(matched)),
        "retrying jobs",
        queue.retry_matching(&scope.change_query()),
        || scope.count(queue),
    )
    .await?;
    let n = if dry_run { matched } else { changed };
    let message = format!(
        "{} {} -> ready (attempts kept; max_attempts raised to attempts + 1 where used up); {}",
        verb(dry_run, "retry", "retried"),
        what(n),
        rows(n, dry_run)
    );
    let report = Report::new("retry", dry_run, matched, changed).field("filter", scope.json());
    Ok(finish(report, go, message))
}

/// `cancel ID` or `cancel --key KEY`.
pub(crate) async fn cancel_one(
    queue: &Queue,
    lookup: &Lookup,
    dry_run: bool,
) -> Result<Report, Failure> {
    let before = fetch(queue, lookup).await?;
    let id = before.id;
    let outcome = if dry_run {
        match before.status {
            JobStatus::Scheduled | JobStatus::Ready | JobStatus::Blocked => {
                CancelOutcome::Cancelled
            }
            JobStatus::Running => CancelOutcome::Requested,
            other => CancelOutcome::AlreadyFinished(other),
        }
    } else {
        queue.cancel(id).await?
    };
    let (matched, after, requested, text) = match outcome {
        CancelOutcome::Cancelled => (
            1,
            JobStatus::Cancelled,
            false,
            format!(
                "{} job {id}: {} -> cancelled, it will never run; {}",
                verb(dry_run, "cancel", "cancelled"),
                before.status,
                rows(1, dry_run)
            ),
        ),
        CancelOutcome::Requested => (
            1,
            JobStatus::Running,
            true,
            format!(
                "{} job {id} to stop: it is running on {}; its worker cancels it within a third of \
                 its lease and it ends cancelled (or done, if it finishes first); {}",
                verb(dry_run, "ask", "asked"),
                before.lease_owner.as_deref().unwrap_or("a worker"),
                rows(1, dry_run)
            ),
        ),
        CancelOutcome::AlreadyFinished(status) => (
            0,
            status,
            before.cancel_requested,
            format!(
                "not cancelled: job {id} has already ended ({status}); {}",
                rows(0, dry_run)
            ),
        ),
        _ => (
            0,
            before.status,
            before.cancel_requested,
            format!(
                "job {id}: {outcome:?}; `jobqueue show {id}` tells where it is; {}",
                rows(0, dry_run)
            ),
        ),
    };
    let changed = if dry_run { 0 } else { matched };
    Ok(
        job_fields(Report::new("cancel", dry_run, matched, changed), &before)
            .field("status_after", after.as_str())
            .field("cancel_requested", requested)
            .message(text),
    )
}

/// `cancel` over a filter: every waiting job of `scope` cancelled; running ones are left
/// alone.
pub(crate) async fn cancel_matching(
    queue: &Queue,
    scope: &Scope,
    dry_run: bool,
    yes: bool,
) -> Result<Report, Failure> {
    let matched = scope.count(queue).await?;
    let running = Scope {
        statuses: vec![JobStatus::Running],
        ..scope.clone()
    };
    // Running jobs are in the filter only if no status narrowed it.
    let running_left = if scope.statuses.len() > 1 {
        running.count(queue).await?
    } else {
        0
    };
    let what = |n| format!("{}{}", scope.jobs(n, "waiting"), scope.describe());
    let (go, changed) = confirm_and_change(
        matched,
        dry_run,
        yes,
        &format!("cancel {}", what(matched)),
        "cancelling jobs",
        queue.cancel_matching(&scope.change_query()),
        || scope.count(queue),
    )
    .await?;
    let n = if dry_run { matched } else { changed };
    let left = if running_left > 0 {
        format!(
            "; {} left alone (`jobqueue cancel ID` stops one)",
            plural(running_left, "running job", "running jobs")
        )
    } else {
        String::new()
    };
    let message = format!(
        "{} {}: they will never run{left}; {}",
        verb(dry_run, "cancel", "cancelled"),
        what(n),
        rows(n, dry_run)
    );
    let report = Report::new("cancel", dry_run, matched, changed)
        .field("filter", scope.json())
        .field("running_left", running_left);
    Ok(finish(report, go, message))
}

/// Whether queue `name` has a job or a worker claiming from it.
async fn known_queue(queue: &Queue, name: &str) -> Result<bool, Failure> {
    let scope = Scope {
        queue: Some(name.to_owned()),
        ..Scope::default()
    };
    if !queue
        .list(&scope.query(None), None, 1)
        .await?
        .jobs
        .is_empty()
    {
        return Ok(true);
    }
    let workers = queue.workers().await?;
    Ok(workers.iter().any(|w| w.queues.iter().any(|q| q == name)))
}

/// `pause QUEUE`.
pub(crate) async fn pause(queue: &Queue, name: &str, dry_run: bool) -> Result<Report, Failure> {
    let paused = queue.paused_queues().await?.iter().any(|q| q == name);
    let report = |matched, changed| {
        Report::new("pause", dry_run, matched, changed)
            .field("queue", name)
            .field("paused", paused || !dry_run)
    };
    if paused {
        let text = format!(
            "unchanged: queue {name} is already paused; {}",
            rows(0, dry_run)
        );
        return Ok(report(0, 0).field("known_queue", true).message(text));
    }
    let known = known_queue(queue, name).await?;
    if !dry_run {
        queue.pause(name).await?;
    }
    // After the pause, so that a name the runtime refuses is one error and no warning.
    if !known {
        let palette = Palette::for_stderr();
        writeln!(
            io::stderr().lock(),
            "{} queue {name} has no job and no worker claims from it (is the name a typo?); {} anyway",
            palette.paint(Paint::Yellow, "warning:"),
            if dry_run { "it would be paused" } else { "paused it" },
        )?;
    }
    let text = format!(
        "{} queue {name}: workers claim none of its jobs until `jobqueue resume {name}`; enqueues \
         and running jobs go on; {}",
        verb(dry_run, "pause", "paused"),
        rows(1, dry_run)
    );
    let changed = if dry_run { 0 } else { 1 };
    Ok(report(1, changed).field("known_queue", known).message(text))
}

/// `resume QUEUE`.
pub(crate) async fn resume(queue: &Queue, name: &str, dry_run: bool) -> Result<Report, Failure> {
    let paused = queue.paused_queues().await?.iter().any(|q| q == name);
    if !paused {
        let text = format!(
            "unchanged: queue {name} is not paused; {}",
            rows(0, dry_run)
        );
        return Ok(Report::new("resume", dry_run, 0, 0)
            .field("queue", name)
            .field("paused", false)
            .message(text));
    }
    if !dry_run {
        queue.resume(name).await?;
    }
    let text = format!(
        "{} queue {name}: workers claim its jobs again; {}",
        verb(dry_run, "resume", "resumed"),
        rows(1, dry_run)
    );
    let changed = if dry_run { 0 } else { 1 };
    Ok(Report::new("resume", dry_run, 1, changed)
        .field("queue", name)
        .field("paused", dry_run)
        .message(text))
}

/// `purge --status S --older-than AGE [--queue Q] [--kind K]`.
pub(crate) async fn purge(
    queue: &Queue,
    scope: &Scope,
    older_than: &Age,
    dry_run: bool,
    yes: bool,
) -> Result<Report, Failure> {
    let age: Duration = older_than.duration();
    let query = scope.change_query();
    let matched = queue.prunable_matching(&query, age).await?;
    let what = |n| {
        format!(
            "{}{} that finished more than {older_than} ago",
            scope.jobs(n, "finished"),
            scope.describe()
        )
    };
    let (go, changed) = confirm_and_change(
        matched,
        dry_run,
        yes,
        &format!("delete {}", what(matched)),
        "deleting jobs",
        queue.prune_matching(&query, age),
        || queue.prunable_matching(&query, age),
    )
    .await?;
    let n = if dry_run { matched } else { changed };
    let message = format!(
        "{} {}; {}",
        verb(dry_run, "delete", "deleted"),
        what(n),
        rows(n, dry_run)
    );
    let report = Report::new("purge", dry_run, matched, changed)
        .field("filter", scope.json())
        .field("older_than", older_than.to_string())
        .field("older_than_secs", age.as_secs());
    Ok(finish(report, go, message))
}

/// `migrate` and `migrate --check`, as a report: `pending` were found, and applied unless
/// `check`.
pub(crate) fn migrate_report(
    database: &str,
    check: bool,
    pending: &[(i64, String)],
    message: String,
) -> Report {
    let n = pending.len() as u64;
    let applied = if check { 0 } else { n };
    let mut report = Report::new("migrate", check, n, applied)
        .field("database", database)
        .field(
            "pending",
            pending
                .iter()
                .map(|(version, description)| json!({"version": version, "description": description}))
                .collect::<Vec<_>>(),
        )
        .message(message);
    // Pending migrations found by --check: exit 1.
    report.not_done = check && n > 0;
    report
}
