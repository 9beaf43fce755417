//! What an operator's dashboard reads: a page of jobs, throughput per minute, live workers
//! and periodic schedules. The statements behind them are in the store (`store/dashboard.rs`).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, NaiveDateTime, Utc};

use super::{JobRecord, JobStatus};

/// One page of [`Queue::list`](crate::Queue::list).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobPage {
    /// The jobs, in the order of the filter (see [`Queue::list`](crate::Queue::list)).
    pub jobs: Vec<JobRecord>,
    /// Pass this to [`Queue::list`](crate::Queue::list), with the same filter, for the
    /// next page; `None` on the last page.
    pub next: Option<JobCursor>,
}

/// Where a page of [`Queue::list`](crate::Queue::list) starts: just after the last job of
/// the page before, in the order of that listing.
///
/// A cursor belongs to one ordering. A list without a status goes newest first by id; a
/// list of one status goes by the job's time in that status (newest first for `done`,
/// `failed` and `cancelled`, next to run first for the others), and its cursor names the
/// status: [`Queue::list`](crate::Queue::list) refuses a cursor of another ordering with
/// [`Error::InvalidSetting`](crate::Error::InvalidSetting), rather than showing a page that
/// starts somewhere else.
///
/// Its text ([`Display`](fmt::Display), and [`FromStr`] back) is a short token of ASCII
/// letters, digits, `.` and `_`, safe in a URL's query string or on a command line. Treat
/// it as opaque: its form may change between releases.
///
/// ```
/// # mod jobqueue { pub mod admin { pub use jobqueue_runtime::JobCursor; } }
/// use jobqueue::admin::JobCursor;
///
/// let cursor: JobCursor = "done.1764662400123456.4711".parse().unwrap();
/// assert_eq!(cursor.to_string(), "done.1764662400123456.4711");
/// assert!("done.yesterday.4711".parse::<JobCursor>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobCursor {
    /// The status of the listing (its ordering); `None`: every status, by id.
    pub(crate) status: Option<JobStatus>,
    /// The last job's time in its status (`status_at`); `None` for a listing by id, or a
    /// row without that time.
    pub(crate) at: Option<NaiveDateTime>,
    /// The last job's id.
    pub(crate) id: u64,
}

impl JobCursor {
    /// The status whose listing this cursor continues (`None`: a listing of every status).
    pub fn status(&self) -> Option<JobStatus> {
        self.status
    }
}

impl fmt::Display for JobCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(status) = self.status else {
            return write!(f, "{}", self.id);
        };
        match self.at {
            Some(at) => write!(
                f,
                "{status}.{}.{}",
                at.and_utc().timestamp_micros(),
                self.id
            ),
            None => write!(f, "{status}._.{}", self.id),
        }
    }
}

/// A text that is not a [`JobCursor`].
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid cursor {0:?}: pass the cursor of the page before, as it was given")]
pub struct InvalidCursor(String);

impl FromStr for JobCursor {
    type Err = InvalidCursor;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidCursor(s.to_owned());
        let parts: Vec<&str> = s.split('.').collect();
        match parts[..] {
            // A listing of every status, by id (also the `before=` id of earlier releases).
            [id] => Ok(JobCursor {
                status: None,
                at: None,
                id: id.parse().map_err(|_| bad())?,
            }),
            [status, at, id] => {
                let status: JobStatus = status.parse().map_err(|_| bad())?;
                let at = match at {
                    "_" => None,
                    us => Some(
                        DateTime::from_timestamp_micros(us.parse().map_err(|_| bad())?)
                            .ok_or_else(bad)?
                            .naive_utc(),
                    ),
                };
                Ok(JobCursor {
                    status: Some(status),
                    at,
                    id: id.parse().map_err(|_| bad())?,
                })
            }
            _ => Err(bad()),
        }
    }
}

impl serde::Serialize for JobCursor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for JobCursor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Jobs that finished in one minute, for the throughput chart ([`Queue::throughput`](crate::Queue::throughput)).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ThroughputMinute {
    /// How many whole minutes ago (0: the current minute).
    pub minutes_ago: u32,
    /// The queue.
    pub queue: String,
    /// Jobs that ended `done` in that minute.
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
    /// True when it holds the maintenance turn: it runs the passes (reclaim, promotion,
    /// pruning, gauges, throughput counts) for every worker of the database, and the others
    /// only try to take the turn over (at most one worker holds it at a time).
    pub maintains: bool,
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
