//! The commands that change jobs: retry, cancel, pause, resume, purge. Each says exactly how
//! many rows it changed; with `--dry-run` it changes nothing and says how many it would.

use std::time::Duration;

use jobqueue::admin::{CancelOutcome, JobFilter};
use jobqueue::{JobStatus, Queue};

use crate::cli::Age;
use crate::failure::Failure;
use crate::jobs::{fetch, Lookup};
use crate::progress;
use crate::render::{plural, Out, Paint};

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

/// Prints `text`, its first word painted as the outcome.
fn report(out: &mut Out, changed: u64, text: &str) -> Result<(), Failure> {
    let paint = if changed > 0 {
        Paint::Green
    } else {
        Paint::Yellow
    };
    let (head, tail) = text.split_once(' ').unwrap_or((text, ""));
    out.line(&format!("{} {tail}", out.paint(paint, head)))?;
    Ok(out.flush()?)
}

/// `retry ID`: one failed or cancelled job back to ready.
pub(crate) async fn retry_one(queue: &Queue, id: u64, dry_run: bool) -> Result<(), Failure> {
    let mut out = Out::stdout();
    let before = fetch(queue, &Lookup::Id(id)).await?;
    if !matches!(before.status, JobStatus::Failed | JobStatus::Cancelled) {
        let text = format!(
            "not retried: job {id} is {}, and only failed or cancelled jobs can be retried; {}",
            before.status,
            rows(0, dry_run)
        );
        return report(&mut out, 0, &text);
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
        1
    } else {
        u64::from(queue.retry(id).await?)
    };
    let text = if changed == 1 {
        format!(
            "{} job {id} ({}, {}): {} -> ready, {attempts}; {}",
            verb(dry_run, "retry", "retried"),
            before.kind,
            before.queue,
            before.status,
            rows(1, dry_run)
        )
    } else {
        // It changed status between our read and the update (a worker or another operator).
        let now = fetch(queue, &Lookup::Id(id)).await?;
        format!(
            "not retried: job {id} became {} meanwhile; {}",
            now.status,
            rows(0, false)
        )
    };
    report(&mut out, changed, &text)
}

/// `retry --failed`: every failed job matching `filter` back to ready.
pub(crate) async fn retry_failed(
    queue: &Queue,
    filter: JobFilter,
    dry_run: bool,
) -> Result<(), Failure> {
    let mut out = Out::stdout();
    let filter = filter.status(JobStatus::Failed);
    let scope = describe(&filter);
    let matching = queue.count(&filter).await?;
    let changed = if dry_run {
        matching
    } else {
        progress::track(
            "retrying failed jobs",
            matching,
            queue.retry_matching(&filter),
            || queue.count(&filter),
        )
        .await?
    };
    let text = format!(
        "{} {}{scope} -> ready (attempts kept; max_attempts raised to attempts + 1 where used up); {}",
        verb(dry_run, "retry", "retried"),
        plural(changed, "failed job", "failed jobs"),
        rows(changed, dry_run)
    );
    report(&mut out, changed, &text)
}

/// ` in queue exports of kind export_order`, or nothing.
fn describe(filter: &JobFilter) -> String {
    let mut s = String::new();
    if let Some(q) = &filter.queue {
        s.push_str(&format!(" in queue {q}"));
    }
    if let Some(k) = &filter.kind {
        s.push_str(&format!(" of kind {k}"));
    }
    s
}

/// `cancel ID`.
pub(crate) async fn cancel(queue: &Queue, id: u64, dry_run: bool) -> Result<(), Failure> {
    let mut out = Out::stdout();
    let before = fetch(queue, &Lookup::Id(id)).await?;
    let outcome = if dry_run {
        match before.status {
            JobStatus::Scheduled | JobStatus::Ready => CancelOutcome::Cancelled,
            JobStatus::Running => CancelOutcome::Requested,
            other => CancelOutcome::AlreadyFinished(other),
        }
    } else {
        queue.cancel(id).await?
    };
    let (changed, text) = match outcome {
        CancelOutcome::Cancelled => (
            1,
            format!(
                "{} job {id}: {} -> cancelled, it will never run; {}",
                verb(dry_run, "cancel", "cancelled"),
                before.status,
                rows(1, dry_run)
            ),
        ),
        CancelOutcome::Requested => (
            1,
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
            format!(
                "not cancelled: job {id} has already ended ({status}); {}",
                rows(0, dry_run)
            ),
        ),
        _ => (
            0,
            format!(
                "job {id}: {outcome:?}; `jobqueue show {id}` tells where it is; {}",
                rows(0, dry_run)
            ),
        ),
    };
    report(&mut out, changed, &text)
}

/// `pause QUEUE`.
pub(crate) async fn pause(queue: &Queue, name: &str, dry_run: bool) -> Result<(), Failure> {
    let mut out = Out::stdout();
    let paused = queue.paused_queues().await?.iter().any(|q| q == name);
    if paused {
        let text = format!(
            "unchanged: queue {name} is already paused; {}",
            rows(0, dry_run)
        );
        return report(&mut out, 0, &text);
    }
    if !dry_run {
        queue.pause(name).await?;
    }
    let text = format!(
        "{} queue {name}: workers claim none of its jobs until `jobqueue resume {name}`; enqueues \
         and running jobs go on; {}",
        verb(dry_run, "pause", "paused"),
        rows(1, dry_run)
    );
    report(&mut out, 1, &text)
}

/// `resume QUEUE`.
pub(crate) async fn resume(queue: &Queue, name: &str, dry_run: bool) -> Result<(), Failure> {
    let mut out = Out::stdout();
    let paused = queue.paused_queues().await?.iter().any(|q| q == name);
    if !paused {
        let text = format!(
            "unchanged: queue {name} is not paused; {}",
            rows(0, dry_run)
        );
        return report(&mut out, 0, &text);
    }
    if !dry_run {
        queue.resume(name).await?;
    }
    let text = format!(
        "{} queue {name}: workers claim its jobs again; {}",
        verb(dry_run, "resume", "resumed"),
        rows(1, dry_run)
    );
    report(&mut out, 1, &text)
}

/// `purge --status S --older-than AGE`.
pub(crate) async fn purge(
    queue: &Queue,
    status: JobStatus,
    older_than: &Age,
    dry_run: bool,
) -> Result<(), Failure> {
    let mut out = Out::stdout();
    let age: Duration = older_than.duration();
    let matching = queue.prunable(status, age).await?;
    let changed = if dry_run {
        matching
    } else {
        progress::track(
            &format!("deleting {status} jobs"),
            matching,
            queue.prune(status, age),
            || queue.prunable(status, age),
        )
        .await?
    };
    let text = format!(
        "{} {} {status} jobs that finished more than {older_than} ago; {}",
        verb(dry_run, "delete", "deleted"),
        changed,
        rows(changed, dry_run)
    );
    report(&mut out, changed, &text)
}
