//! What an operator's dashboard reads: a page of jobs, throughput per minute, live workers
//! and periodic schedules. The statements behind them are in the store (`store/dashboard.rs`).

use chrono::{DateTime, Utc};

use super::{JobRecord, JobStatus};

/// One page of [`Queue::list`](crate::Queue::list).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobPage {
    /// The jobs, newest (highest id) first.
    pub jobs: Vec<JobRecord>,
    /// Pass this as `before` for the next (older) page; `None` on the last page.
    pub next_before: Option<u64>,
}

/// Jobs that finished in one minute, for the throughput chart ([`Queue::throughput`](crate::Queue::throughput)).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ThroughputMinute {
    /// How many whole minutes ago (0: the current minute).
    pub minutes_ago: u32,
    /// The queue.
    pub queue: String,
    /// Jobs that ended `done` in that minute (and are not yet pruned).
    pub done: u64,
    /// Jobs that ended `failed` in that minute.
    pub failed: u64,
}

/// A worker as its heartbeat row describes it ([`Queue::workers`](crate::Queue::workers)).
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// Its `lease_owner` name: the running jobs it holds carry it.
    pub owner: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// The jobqueue version it runs.
    pub version: String,
    /// The queues it claims from.
    pub queues: Vec<String>,
    /// How many jobs it runs at most at once.
    pub concurrency: u32,
    /// How many it ran at its last heartbeat.
    pub running: u32,
    /// When it started (the server's clock).
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat (the server's clock).
    pub last_seen: DateTime<Utc>,
    /// Seconds since its last heartbeat.
    pub seen_secs_ago: f64,
    /// True when it missed heartbeats for [`WORKER_GONE_AFTER`](crate::WORKER_GONE_AFTER):
    /// it was killed or lost its host without stopping, and its jobs come back when their
    /// leases expire.
    pub gone: bool,
}

/// A periodic kind as the schedulers recorded it ([`Queue::periodic_jobs`](crate::Queue::periodic_jobs)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PeriodicJob {
    /// The job kind.
    pub kind: String,
    /// Its cron expression, as the workers that schedule it last wrote it (`None` until a
    /// worker of this release ran it).
    pub schedule: Option<String>,
    /// The latest tick dealt with (enqueued or skipped).
    pub last_tick: DateTime<Utc>,
    /// The next tick after `last_tick`, if the schedule is known and parses.
    pub next_tick: Option<DateTime<Utc>>,
    /// The job of the latest tick enqueued, if any.
    pub last_job_id: Option<u64>,
    /// That job's status, if it is still in the table.
    pub last_job_status: Option<JobStatus>,
    /// That job's last error, if it has one.
    pub last_job_error: Option<String>,
}
