//! `jobqueue list` and `jobqueue show`: jobs as rows, and one job in full.

use chrono::{DateTime, Utc};
use jobqueue::admin::{AttemptOutcome, JobCursor, JobFilter, JobRecord, JobRef};
use jobqueue::limits::MAX_ATTEMPT_HISTORY;
use jobqueue::{Error, JobStatus, Queue, Uniqueness};
use serde_json::{json, Value};

use crate::failure::Failure;
use crate::render::{cut, plural, relative, timestamp, Align, Out, Paint, Table};

/// A job as the JSON output spells it: every column, times in RFC 3339 UTC; with `hide`,
/// the payload is null and `payload_hidden` true.
pub(crate) fn job_json(job: &JobRecord, hide: bool) -> Value {
    json!({
        "id": job.id,
        "queue": job.queue,
        "kind": job.kind,
        "task_key": job.task_key,
        "status": job.status.as_str(),
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "run_at": job.run_at,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "finished_at": job.finished_at,
        "lease_owner": job.lease_owner,
        "lease_until": job.lease_until,
        "cancel_requested": job.cancel_requested,
        "lease_expiries": job.lease_expiries,
        "unrunnable_since": job.unrunnable_since,
        "snoozes": job.snoozes,
        "concurrency_key": job.concurrency_key,
        "concurrency_limit": job.concurrency_limit,
        "rate_key": job.rate_key,
        "rate_limit": job.rate_limit,
        "rate_window_ms": job.rate_window_ms,
        "last_error": job.last_error,
        "payload": if hide { Value::Null } else { job.payload.clone() },
        "payload_hidden": hide,
        "unique": job.unique,
        "key_released": job.key_released,
        "metadata": job.metadata,
        "progress": job.progress,
        "progress_at": job.progress_at,
    })
}

/// Prints every job of task key `key`, newest first, at most `limit`.
pub(crate) async fn list_key(
    queue: &Queue,
    key: &str,
    limit: u32,
    json: bool,
    hide: bool,
) -> Result<(), Failure> {
    let jobs = queue.jobs_by_key(key, limit).await?;
    if jobs.is_empty() && !json {
        return Err(Failure::Queue(Error::JobNotFound(JobRef::Key(
            key.to_owned(),
        ))));
    }
    let page = Page {
        total: jobs.len() as u64,
        order: "newest first",
        next: None,
        narrow: "raise --limit",
    };
    print_jobs(queue, &jobs, &page, json, hide).await
}

/// Prints the jobs matching `query` after `cursor`, at most `limit`.
pub(crate) async fn list(
    queue: &Queue,
    query: &JobFilter,
    cursor: Option<&JobCursor>,
    limit: u32,
    json: bool,
    hide: bool,
) -> Result<(), Failure> {
    let listed = queue.list(query, cursor, limit).await?;
    let shown = listed.jobs.len() as u64;
    let total = if cursor.is_none() && listed.next.is_none() {
        shown
    } else {
        queue.count(query).await?
    };
    let page = Page {
        total,
        order: query.order(),
        next: listed.next,
        narrow: "raise --limit or narrow with --status, --queue, --kind, --meta",
    };
    print_jobs(queue, &listed.jobs, &page, json, hide).await
}

/// What a listing says besides its jobs.
struct Page {
    /// How many jobs match.
    total: u64,
    /// The order of the jobs.
    order: &'static str,
    /// The cursor of the next page, if there is one.
    next: Option<JobCursor>,
    /// How to see fewer.
    narrow: &'static str,
}

/// Prints `jobs` as a table (or JSON), with a note when `page.total` is more than they are.
async fn print_jobs(
    queue: &Queue,
    jobs: &[JobRecord],
    page: &Page,
    json: bool,
    hide: bool,
) -> Result<(), Failure> {
    let now = queue.now().await?;
    let mut out = Out::stdout();
    if json {
        out.json(&json!({
            "total": page.total,
            "jobs": jobs.iter().map(|j| job_json(j, hide)).collect::<Vec<_>>(),
            "next_cursor": page.next.as_ref().map(ToString::to_string),
        }))?;
        return Ok(out.flush()?);
    }
    if jobs.is_empty() {
        match &page.next {
            // A filter no index serves whole tests a bounded number of jobs per page.
            Some(next) => out.line(&format!(
                "no match among the jobs this page searched; search on: --cursor {next}"
            ))?,
            None => out.line("no jobs match")?,
        }
        return Ok(out.flush()?);
    }
    let mut table = Table::new(&[
        ("ID", Align::Right),
        ("QUEUE", Align::Left),
        ("KIND", Align::Left),
        ("STATUS", Align::Left),
        ("ATTEMPTS", Align::Right),
        ("CREATED", Align::Right),
        ("UPDATED", Align::Right),
        ("LAST ERROR", Align::Left),
    ]);
    for job in jobs {
        table.row(vec![
            (job.id.to_string(), Paint::Plain),
            (job.queue.clone(), Paint::Plain),
            (job.kind.clone(), Paint::Plain),
            (job.status.to_string(), Paint::of_status(job.status)),
            (
                format!("{}/{}", job.attempts, job.max_attempts),
                Paint::Plain,
            ),
            (relative(job.created_at, now), Paint::Plain),
            (relative(job.updated_at, now), Paint::Plain),
            (
                job.last_error
                    .as_deref()
                    .map(|e| cut(e, 40))
                    .unwrap_or_default(),
                Paint::Red,
            ),
        ]);
    }
    out.raw(&table.render(out.palette))?;
    if page.total > jobs.len() as u64 || page.next.is_some() {
        let more = match &page.next {
            Some(next) => format!(
                "{} of {} shown, {}; the next page: --cursor {next}; or {}",
                jobs.len(),
                plural(page.total, "matching job", "matching jobs"),
                page.order,
                page.narrow
            ),
            None => format!(
                "{} of {} shown, {}; {}",
                jobs.len(),
                plural(page.total, "matching job", "matching jobs"),
                page.order,
                page.narrow
            ),
        };
        out.line(&out.paint(Paint::Dim, &more))?;
    }
    Ok(out.flush()?)
}

/// How `show` finds its job.
#[derive(Debug)]
pub(crate) enum Lookup {
    /// By id.
    Id(u64),
    /// By task key.
    Key(String),
}

/// Reads one job, or fails with "no job ...".
pub(crate) async fn fetch(queue: &Queue, lookup: &Lookup) -> Result<JobRecord, Failure> {
    let (job, what) = match lookup {
        Lookup::Id(id) => (queue.job(*id).await?, JobRef::Id(*id)),
        Lookup::Key(key) => (queue.job_by_key(key).await?, JobRef::Key(key.clone())),
    };
    job.ok_or_else(|| Failure::Queue(Error::JobNotFound(what)))
}

/// Prints one job in full; with `hide`, neither its payload nor its output.
pub(crate) async fn show(
    queue: &Queue,
    lookup: &Lookup,
    json: bool,
    hide: bool,
) -> Result<(), Failure> {
    let job = fetch(queue, lookup).await?;
    let attempts = queue.attempts(job.id).await?;
    let output = if hide {
        None
    } else {
        queue.output_json(job.id).await?
    };
    let mut out = Out::stdout();
    if json {
        let mut value = job_json(&job, hide);
        value["attempt_history"] = attempts
            .iter()
            .map(|a| {
                json!({
                    "attempt": a.attempt,
                    "started_at": a.started_at,
                    "ended_at": a.ended_at,
                    "worker": a.worker,
                    "outcome": a.outcome.as_str(),
                    "error": a.error,
                })
            })
            .collect();
        value["output"] = output.unwrap_or(Value::Null);
        out.json(&value)?;
        return Ok(out.flush()?);
    }
    let now = queue.now().await?;
    let p = out.palette;
    let when = |t: DateTime<Utc>| format!("{} ({})", timestamp(t), relative(t, now));
    let mut fields: Vec<(&str, String)> = vec![
        ("queue", job.queue.clone()),
        ("kind", job.kind.clone()),
        ("task key", job.task_key.clone()),
        (
            "status",
            p.paint(Paint::of_status(job.status), job.status.as_str()),
        ),
        ("priority", job.priority.to_string()),
        (
            "attempts",
            format!("{} of {}", job.attempts, job.max_attempts),
        ),
        (
            if job.status == JobStatus::Scheduled {
                "runs at"
            } else {
                "run at"
            },
            when(job.run_at),
        ),
        ("created", when(job.created_at)),
        ("updated", when(job.updated_at)),
    ];
    if let Some(t) = job.finished_at {
        fields.push(("finished", when(t)));
    }
    if let (Some(owner), Some(until)) = (&job.lease_owner, job.lease_until) {
        let left = if until >= now {
            format!(
                "{} left",
                crate::render::span((until - now).num_milliseconds() as f64 / 1e3)
            )
        } else {
            p.paint(Paint::Yellow, "expired, waits for reclaim")
        };
        fields.push((
            "lease",
            format!("{owner} until {} ({left})", timestamp(until)),
        ));
    }
    if let (Some(since), JobStatus::Scheduled) = (job.unrunnable_since, job.status) {
        fields.push((
            "waiting",
            p.paint(
                Paint::Yellow,
                &format!(
                    "for a worker that can run it, since {}; attempts are not spent meanwhile (see the last error)",
                    when(since)
                ),
            ),
        ));
    }
    if let Some(key) = &job.concurrency_key {
        fields.push((
            "limit",
            format!("at most {} of key {key:?} at once", job.concurrency_limit),
        ));
    }
    if let Some(key) = &job.rate_key {
        fields.push((
            "rate",
            format!(
                "at most {} starts of key {key:?} per {}",
                job.rate_limit,
                crate::render::span(f64::from(job.rate_window_ms) / 1e3)
            ),
        ));
    }
    if job.status == JobStatus::Blocked {
        fields.push((
            "waiting",
            p.paint(
                Paint::Yellow,
                "for a slot of its limit (the key was at its limit when a worker tried to claim it); \
                 it is ready again as soon as a job of the key ends, or within a maintenance interval",
            ),
        ));
    }
    if job.lease_expiries > 0 {
        fields.push((
            "expiries",
            format!(
                "its lease expired {} (its worker crashed, was killed or stalled)",
                plural(job.lease_expiries.into(), "time", "times")
            ),
        ));
    }
    let unique = match job.unique {
        Uniqueness::UntilPruned => "blocks its key until pruned".to_owned(),
        Uniqueness::WhileActive => "blocks its key while waiting or running".to_owned(),
        Uniqueness::For(d) => format!(
            "blocks its key for {} after its enqueue",
            crate::render::span(d.as_secs_f64())
        ),
        _ => format!("{:?}", job.unique),
    };
    fields.push(("unique", unique));
    if job.key_released {
        fields.push((
            "key",
            p.paint(
                Paint::Dim,
                "given up to a newer job of the same key (`jobqueue list --key` shows them all)",
            ),
        ));
    }
    if let Some(t) = job.progress_at {
        fields.push(("progress", when(t)));
    }
    if job.snoozes > 0 {
        fields.push((
            "snoozes",
            format!(
                "{} (each ran it again later without spending an attempt)",
                job.snoozes
            ),
        ));
    }
    if job.cancel_requested {
        fields.push((
            "cancel",
            p.paint(
                Paint::Yellow,
                "requested; the worker stops the job within a third of its lease",
            ),
        ));
    }
    out.line(&p.paint(Paint::Bold, &format!("job {}", job.id)))?;
    for (name, value) in &fields {
        out.line(&format!("  {:<10}{value}", format!("{name}")))?;
    }
    out.line(&p.paint(Paint::Bold, "last error"))?;
    match &job.last_error {
        Some(e) => {
            for line in e.lines() {
                out.line(&format!("  {}", p.paint(Paint::Red, line)))?;
            }
        }
        None => out.line(&format!("  {}", p.paint(Paint::Dim, "none")))?,
    }
    for (title, value) in [("progress", &job.progress), ("metadata", &job.metadata)] {
        if let Some(value) = value {
            out.line(&p.paint(Paint::Bold, title))?;
            let pretty = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
            for line in pretty.lines() {
                out.line(&format!("  {line}"))?;
            }
        }
    }
    out.line(&p.paint(
        Paint::Bold,
        &format!("attempts (the last {MAX_ATTEMPT_HISTORY})"),
    ))?;
    if attempts.is_empty() {
        out.line(&format!("  {}", p.paint(Paint::Dim, "none ended yet")))?;
    } else {
        let mut table = Table::new(&[
            ("#", Align::Right),
            ("started", Align::Left),
            ("took", Align::Right),
            ("worker", Align::Left),
            ("outcome", Align::Left),
            ("error", Align::Left),
        ]);
        for a in &attempts {
            let took = a
                .started_at
                .map(|s| crate::render::span((a.ended_at - s).num_milliseconds() as f64 / 1e3))
                .unwrap_or_else(|| "?".into());
            let outcome_paint = match a.outcome {
                AttemptOutcome::Done => Paint::Green,
                AttemptOutcome::Failed => Paint::Red,
                AttemptOutcome::Retry | AttemptOutcome::LeaseExpired => Paint::Yellow,
                _ => Paint::Plain,
            };
            table.row(vec![
                (a.attempt.to_string(), Paint::Plain),
                (
                    a.started_at.map(timestamp).unwrap_or_else(|| "?".into()),
                    Paint::Plain,
                ),
                (took, Paint::Plain),
                (a.worker.clone().unwrap_or_default(), Paint::Plain),
                (a.outcome.as_str().to_owned(), outcome_paint),
                (
                    cut(
                        a.error
                            .as_deref()
                            .unwrap_or("")
                            .lines()
                            .next()
                            .unwrap_or(""),
                        80,
                    ),
                    Paint::Plain,
                ),
            ]);
        }
        for line in table.render(p).lines() {
            out.line(&format!("  {line}"))?;
        }
    }
    if let Some(output) = &output {
        out.line(&p.paint(Paint::Bold, "output"))?;
        let pretty = serde_json::to_string_pretty(output).unwrap_or_else(|_| output.to_string());
        for line in pretty.lines() {
            out.line(&format!("  {line}"))?;
        }
    }
    out.line(&p.paint(Paint::Bold, "payload"))?;
    if hide {
        let size = job.payload.to_string().len() as u64;
        out.line(&format!(
            "  {}",
            p.paint(
                Paint::Dim,
                &format!(
                    "hidden ({}); the output too, if any",
                    plural(size, "byte", "bytes")
                )
            )
        ))?;
        return Ok(out.flush()?);
    }
    let pretty =
        serde_json::to_string_pretty(&job.payload).unwrap_or_else(|_| job.payload.to_string());
    for line in pretty.lines() {
        out.line(&format!("  {line}"))?;
    }
    Ok(out.flush()?)
}
