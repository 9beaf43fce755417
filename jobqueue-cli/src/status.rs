//! `jobqueue status`: each queue at a glance, once or redrawn like `top`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use jobqueue::admin::{QueueStats, RunningJob};
use jobqueue::Queue;
use serde_json::json;

use crate::failure::Failure;
use crate::render::{count, span, timestamp, Align, Out, Paint, Table};
use crate::target::Target;

/// Running jobs listed in the table.
const RUNNING_SHOWN: u32 = 20;
/// Running jobs listed in the JSON.
const RUNNING_IN_JSON: u32 = 1000;

/// What `status` shows, read in one go.
struct Snapshot {
    /// The database's clock when the figures were read.
    now: DateTime<Utc>,
    /// Figures per queue.
    queues: Vec<QueueStats>,
    /// Running jobs, oldest lease first.
    running: Vec<RunningJob>,
}

/// Reads the figures of every queue (or of `only`) and up to `running_limit` running jobs.
async fn snapshot(
    queue: &Queue,
    only: Option<&str>,
    running_limit: u32,
) -> jobqueue::Result<Snapshot> {
    let now = queue.now().await?;
    let mut queues = queue.stats().await?;
    if let Some(name) = only {
        queues.retain(|s| s.queue == name);
        if queues.is_empty() {
            let mut empty = QueueStats::default();
            empty.queue = name.to_owned();
            queues.push(empty);
        }
    }
    let running = queue.running(only, running_limit).await?;
    Ok(Snapshot {
        now,
        queues,
        running,
    })
}

/// Prints the status once, or every `interval` with `watch` until Ctrl-C.
pub(crate) async fn run(
    queue: &Queue,
    target: &Target,
    only: Option<&str>,
    watch: bool,
    interval: Duration,
    json: bool,
) -> Result<(), Failure> {
    let mut out = Out::stdout();
    let limit = if json { RUNNING_IN_JSON } else { RUNNING_SHOWN };
    if !watch {
        let snap = snapshot(queue, only, limit).await?;
        if json {
            out.json(&to_json(target, &snap))?;
        } else {
            out.raw(&render(&out, queue, target, &snap, None))?;
        }
        return Ok(out.flush()?);
    }

    // The first read decides whether watching makes sense at all (a bad URL or a missing
    // table ends the command); later failures are shown in the frame and retried, as a
    // dashboard should survive a database restart.
    let mut last = snapshot(queue, only, limit).await?;
    let mut trouble: Option<String> = None;
    let redraw = out.is_terminal() && !json;
    // One listener for the whole watch, so that a Ctrl-C pressed while a frame is drawn is
    // not lost.
    let mut interrupted = std::pin::pin!(tokio::signal::ctrl_c());
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        if json {
            out.json_line(&to_json(target, &last))?;
        } else {
            let frame = render(&out, queue, target, &last, trouble.as_deref());
            if redraw {
                // Home, clear, draw, in one write: no flicker of an empty screen.
                out.raw(&format!("\x1b[H\x1b[2J{frame}"))?;
                out.raw(&out.paint(
                    Paint::Dim,
                    &format!(
                        "every {}; Ctrl-C to quit\n",
                        humantime::format_duration(interval)
                    ),
                ))?;
            } else {
                out.raw(&frame)?;
                out.line("")?;
            }
        }
        out.flush()?;
        tokio::select! {
            _ = &mut interrupted => break,
            _ = tick.tick() => {}
        }
        let read = tokio::select! {
            _ = &mut interrupted => break,
            read = snapshot(queue, only, limit) => read,
        };
        match read {
            Ok(snap) => {
                last = snap;
                trouble = None;
            }
            Err(e) => {
                trouble = Failure::Queue(e).explain(Some(target));
            }
        }
    }
    // Ctrl-C: leave the shell prompt on a line of its own, after the last frame.
    if redraw {
        out.line("")?;
    }
    Ok(out.flush()?)
}

/// The snapshot for scripts.
fn to_json(target: &Target, snap: &Snapshot) -> serde_json::Value {
    json!({
        "database": target.database(),
        "server_time": snap.now,
        "queues": snap.queues,
        "running": snap.running,
    })
}

/// The snapshot for people: a table of queues, then the running jobs; `trouble` is the
/// error of the last refresh, if it failed.
fn render(
    out: &Out,
    queue: &Queue,
    target: &Target,
    snap: &Snapshot,
    trouble: Option<&str>,
) -> String {
    let p = out.palette;
    let mut text = format!(
        "{} {} on {}, {}\n",
        p.paint(Paint::Bold, "database"),
        p.paint(Paint::Bold, target.database()),
        queue.server_info().version,
        timestamp(snap.now),
    );
    if let Some(msg) = trouble {
        text.push_str(&p.paint(
            Paint::Red,
            &format!("refresh failed, showing the last good read: {msg}\n"),
        ));
    }
    text.push('\n');
    if snap.queues.is_empty() {
        text.push_str("no jobs yet\n");
        return text;
    }

    let mut table = Table::new(&[
        ("QUEUE", Align::Left),
        ("STATE", Align::Left),
        ("SCHEDULED", Align::Right),
        ("READY", Align::Right),
        ("BLOCKED", Align::Right),
        ("RUNNING", Align::Right),
        ("DONE", Align::Right),
        ("FAILED", Align::Right),
        ("CANCELLED", Align::Right),
        ("OLDEST READY", Align::Right),
        ("EXPIRED LEASES", Align::Right),
        ("NO WORKER", Align::Right),
        ("FAILED 1H", Align::Right),
        ("DONE 1M", Align::Right),
    ]);
    for s in &snap.queues {
        table.row(vec![
            (s.queue.clone(), Paint::Plain),
            if s.paused {
                ("paused".into(), Paint::Yellow)
            } else {
                ("active".into(), Paint::Plain)
            },
            count(s.counts.scheduled, Paint::Plain),
            count(s.counts.ready, Paint::Yellow),
            count(s.counts.blocked, Paint::Yellow),
            count(s.counts.running, Paint::Cyan),
            count(s.counts.done, Paint::Green),
            count(s.counts.failed, Paint::Red),
            count(s.counts.cancelled, Paint::Plain),
            match s.oldest_ready_secs {
                Some(age) => (span(age), Paint::Yellow),
                None => ("-".into(), Paint::Dim),
            },
            count(s.expired_leases, Paint::Yellow),
            count(s.unrunnable, Paint::Yellow),
            count(s.failed_last_hour, Paint::Red),
            count(s.done_last_minute, Paint::Green),
        ]);
    }
    text.push_str(&table.render(p));

    let total_running: u64 = snap.queues.iter().map(|s| s.counts.running).sum();
    if total_running == 0 {
        return text;
    }
    text.push('\n');
    text.push_str(&p.paint(Paint::Bold, "running jobs, oldest lease first\n"));
    let mut table = Table::new(&[
        ("ID", Align::Right),
        ("QUEUE", Align::Left),
        ("KIND", Align::Left),
        ("OWNER", Align::Left),
        ("ATTEMPT", Align::Right),
        ("LEASE", Align::Left),
    ]);
    for r in &snap.running {
        let lease = if r.lease_left_secs >= 0.0 {
            (format!("{} left", span(r.lease_left_secs)), Paint::Plain)
        } else {
            (
                format!("expired {} ago, waits for reclaim", span(r.lease_left_secs)),
                Paint::Yellow,
            )
        };
        table.row(vec![
            (r.id.to_string(), Paint::Plain),
            (r.queue.clone(), Paint::Plain),
            (r.kind.clone(), Paint::Plain),
            (r.lease_owner.clone(), Paint::Plain),
            (r.attempts.to_string(), Paint::Plain),
            lease,
        ]);
    }
    text.push_str(&table.render(p));
    let shown = snap.running.len() as u64;
    if total_running > shown {
        text.push_str(&p.paint(
            Paint::Dim,
            &format!(
                "... and {} more: jobqueue list --status running\n",
                total_running - shown
            ),
        ));
    }
    text
}
