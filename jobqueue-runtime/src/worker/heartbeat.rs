//! The worker heartbeat: each running worker keeps a row in `job_queue_worker` up to date,
//! so operators (the dashboard, `jobqueue workers`) see which workers are alive, what they
//! claim from and how busy they are. Its SQL is in the store (`store/workers.rs`).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::store::{DbErrorKind, Store, WorkerRow};

/// How often a worker writes its heartbeat.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);

/// A worker not seen for this long is shown as gone: it missed several heartbeats.
pub const WORKER_GONE_AFTER: Duration = Duration::from_secs(30);

/// Rows of workers not seen for this long are deleted by any other worker.
pub const WORKER_FORGOTTEN_AFTER: Duration = Duration::from_secs(3600);

/// Rows of long-gone workers are deleted at a worker's first beat and every this many after.
const FORGET_EVERY_BEATS: u64 = 60;

/// What a worker writes about itself.
pub(crate) struct Heartbeat {
    /// The worker's store: every call within its call timeout.
    pub(crate) store: Store,
    pub(crate) owner: String,
    pub(crate) queues: Vec<String>,
    pub(crate) concurrency: usize,
    /// Periodic kinds this worker schedules, with their cron expressions.
    pub(crate) schedules: Vec<(String, String)>,
    /// How many jobs the worker runs now.
    pub(crate) running: Box<dyn Fn() -> usize + Send + Sync>,
}

impl Heartbeat {
    /// Writes the row every [`HEARTBEAT_INTERVAL`] until `stop`, then deletes it. Errors are
    /// logged and tried again at the next beat: a heartbeat never stops a worker.
    pub(crate) async fn run(mut self, stop: CancellationToken) {
        let mut beats: u64 = 0;
        let mut failing = false;
        loop {
            let beat = tokio::select! {
                _ = stop.cancelled() => break,
                beat = self.beat(beats % FORGET_EVERY_BEATS == 0) => beat,
            };
            match beat {
                Ok(()) => {
                    if failing {
                        tracing::info!(owner = %self.owner, "worker heartbeat written again");
                    }
                    beats += 1;
                    failing = false;
                }
                // A user granted rights on the job tables of an older release only: the
                // worker runs, it is just not listed among the live workers.
                Err(e) if e.database_class() == Some(DbErrorKind::TableDenied) => {
                    tracing::info!(owner = %self.owner, error = %e, "this user may not write the heartbeat's tables (`job_queue_worker`, and `job_queue_cron` for periodic kinds), so this worker is not listed by `jobqueue workers` or the dashboard; grant them as the deployment guide's least-privilege section shows");
                    // A row written before the refusal (the worker's own table may be granted
                    // and the cron table not) goes too; a refused delete has nothing to undo.
                    let _ = self.store.delete_worker(&self.owner).await;
                    return;
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(owner = %self.owner, error = %e, "worker heartbeat failed; trying again in {HEARTBEAT_INTERVAL:?}");
                    }
                    failing = true;
                }
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(HEARTBEAT_INTERVAL) => {}
            }
        }
        if let Err(e) = self.store.delete_worker(&self.owner).await {
            tracing::warn!(owner = %self.owner, error = %e, "could not delete the worker's heartbeat row; it shows as gone once it is old");
        }
    }

    async fn beat(&mut self, forget_old: bool) -> Result<()> {
        let store = &self.store;
        let running = (self.running)() as u64;
        let updated = store.beat_worker(&self.owner, running).await?;
        if updated == 0 {
            let (host, pid) = host_and_pid(&self.owner);
            let inserted = store
                .insert_worker(&WorkerRow {
                    owner: &self.owner,
                    host: &host,
                    pid,
                    queues: &self.queues.join(","),
                    concurrency: self.concurrency as u64,
                    running,
                })
                .await;
            match inserted {
                // Another process with this owner name: the unique key keeps one row.
                Err(e) if e.database_class() == Some(DbErrorKind::Duplicate) => {}
                other => {
                    other?;
                }
            }
        }
        // The scheduler creates a kind's row on its first pass, which may come after this
        // beat: a schedule is written at each beat until its row took it.
        let mut written = Vec::new();
        for (i, (kind, expr)) in self.schedules.iter().enumerate() {
            if store.write_schedule(kind, expr).await? == 1 {
                written.push(i);
            }
        }
        for i in written.into_iter().rev() {
            self.schedules.swap_remove(i);
        }
        if forget_old {
            store
                .forget_workers(WORKER_FORGOTTEN_AFTER.as_secs())
                .await?;
        }
        Ok(())
    }
}

/// The host and process id of the worker: taken from the default owner name
/// (`host:pid:random`), else this process's.
fn host_and_pid(owner: &str) -> (String, u32) {
    let mut parts = owner.rsplitn(3, ':');
    let _random = parts.next();
    let pid = parts.next().and_then(|p| p.parse().ok());
    let host = parts.next();
    match (host, pid) {
        (Some(h), Some(p)) if p == std::process::id() => (h.to_owned(), p),
        _ => (
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "unknown".into()),
            std::process::id(),
        ),
    }
}
