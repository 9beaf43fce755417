//! `jobqueue workers`: the workers' heartbeats and the leases they hold.

use std::io::Write;

use jobqueue::Queue;
use serde_json::json;

use crate::failure::Failure;

/// Prints every worker that wrote a heartbeat, with its running jobs' leases.
pub(crate) async fn run(queue: &Queue, json: bool) -> Result<(), Failure> {
    let workers = queue.workers().await?;
    let running = queue.running(None, 1000).await?;
    let mut out = std::io::stdout().lock();
    if json {
        for w in &workers {
            let leases: Vec<_> = running
                .iter()
                .filter(|r| r.lease_owner == w.owner)
                .map(|r| json!({"id": r.id, "kind": r.kind, "lease_left_secs": r.lease_left_secs}))
                .collect();
            let mut v = serde_json::to_value(w).map_err(|e| Failure::Io(e.into()))?;
            v["leases"] = json!(leases);
            writeln!(out, "{v}")?;
        }
        return Ok(());
    }
    if workers.is_empty() {
        writeln!(
            out,
            "No worker has written a heartbeat (workers of jobqueue 0.1 write none)."
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<6} {:<40} {:<20} {:>8} {:>9} {:>10}  {:<11}  QUEUES",
        "STATE", "OWNER", "HOST", "PID", "RUNNING", "SEEN", "MAINTENANCE"
    )?;
    for w in &workers {
        writeln!(
            out,
            "{:<6} {:<40} {:<20} {:>8} {:>9} {:>9.0}s  {:<11}  {}",
            if w.gone { "gone" } else { "live" },
            w.owner,
            w.host,
            w.pid,
            format!("{}/{}", w.running, w.concurrency),
            w.seen_secs_ago,
            if w.maintains { "holds turn" } else { "-" },
            w.queues.join(",")
        )?;
        for r in running.iter().filter(|r| r.lease_owner == w.owner) {
            writeln!(
                out,
                "         job {} {} (attempt {}), lease {:.1}s left",
                r.id, r.kind, r.attempts, r.lease_left_secs
            )?;
        }
    }
    Ok(())
}
