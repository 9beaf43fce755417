//! What an operator's dashboard reads: a page of jobs, throughput per minute, live workers
//! and periodic schedules. The statements behind them are in the store (`store/dashboard.rs`).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, NaiveDateTime, Utc};

use super::{Attempt, JobRecord, JobStatus, QueueOverview};

/// One page of [`Queue::list`](crate::Queue::list).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobPage {
    /// The jobs, in the order of the filter (see [`Queue::list`](crate::Queue::list)).
    pub jobs: Vec<JobRecord>,
    /// Pass this to [`Queue::list`](crate::Queue::list), with the same filter, for the
    /// next page; `None` on the last page.
    pub next: Option<JobCursor>,
    /// `Some(n)` when no index serves the whole filter (metadata, error text, enqueue
    /// times, a task key with other fields, a queue, kind and status together) and this
    /// page tested the most it may, `n` jobs of the range the served part selects
    /// ([`LIST_SCAN_ROWS`](crate::LIST_SCAN_ROWS) in id order,
    /// [`LIST_SCAN_INDEXED_ROWS`](crate::LIST_SCAN_INDEXED_ROWS) through an index), without
    /// filling the page: [`JobPage::jobs`] are the matches among those `n` (maybe none),
    /// and [`JobPage::next`] continues after the last of them, where more may match.
    /// `None`: the page is complete, as with every filter an index serves.
    pub searched: Option<u64>,
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

/// The upper bounds of the runtime buckets of [`KindStats::runtime_histogram`] but the last
/// (which holds every runtime of 1,000 s or more): 10 ms, 30 ms, 100 ms, 300 ms, 1 s, 3 s,
/// 10 s, 30 s, 100 s, 300 s, 1,000 s.
pub const KIND_RUNTIME_BOUNDS: [std::time::Duration; 11] = [
    std::time::Duration::from_millis(10),
    std::time::Duration::from_millis(30),
    std::time::Duration::from_millis(100),
    std::time::Duration::from_millis(300),
    std::time::Duration::from_secs(1),
    std::time::Duration::from_secs(3),
    std::time::Duration::from_secs(10),
    std::time::Duration::from_secs(30),
    std::time::Duration::from_secs(100),
    std::time::Duration::from_secs(300),
    std::time::Duration::from_secs(1000),
];

/// What the jobs of one kind did over a window of hours ([`Queue::kind_stats`](crate::Queue::kind_stats)):
/// how many finished and how, how long they ran and waited.
///
/// Counted as jobs finish (by the worker that counts the queue gauges, in 5-minute
/// buckets), so pruned jobs stay counted; jobs still running or waiting are not in it.
/// Runtimes and waits are those of each job's last attempt: the runtime from its claim to
/// its end (`finished_at - claimed_at`), the wait from when it was due to its claim
/// (`claimed_at - run_at`, which includes time blocked by a limit or in a paused queue).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct KindStats {
    /// The job kind.
    pub kind: String,
    /// The queues its jobs finished in, by name.
    pub queues: Vec<String>,
    /// Jobs that ended `done`.
    pub done: u64,
    /// Jobs that ended `failed` (every attempt used, or a permanent error).
    pub failed: u64,
    /// Attempts of those jobs beyond their first: retries after an error or a lost lease,
    /// and operators' retries.
    pub retries: u64,
    /// How many of those jobs have a claim time, over which the runtimes and waits are
    /// taken (jobs finished by workers older than the attempt history have none).
    pub timed: u64,
    /// The sum of their runtimes.
    pub total_runtime: std::time::Duration,
    /// The sum of their waits.
    pub total_wait: std::time::Duration,
    /// Their runtimes per bucket: under each bound of [`KIND_RUNTIME_BOUNDS`] (and at or
    /// over the one before), then 1,000 s or more.
    pub runtime_histogram: [u64; 12],
}

impl KindStats {
    /// The share of finished jobs that failed (0 to 1); `None` when none finished.
    pub fn failure_rate(&self) -> Option<f64> {
        let all = self.done + self.failed;
        (all > 0).then(|| self.failed as f64 / all as f64)
    }

    /// The mean runtime; `None` when no job was timed.
    pub fn mean_runtime(&self) -> Option<std::time::Duration> {
        (self.timed > 0).then(|| self.total_runtime.div_f64(self.timed as f64))
    }

    /// The mean wait; `None` when no job was timed.
    pub fn mean_wait(&self) -> Option<std::time::Duration> {
        (self.timed > 0).then(|| self.total_wait.div_f64(self.timed as f64))
    }

    /// The runtime under which a share `q` (0 to 1: 0.5 for the median, 0.95 for the 95th
    /// percentile) of the timed jobs ran, estimated from [`KindStats::runtime_histogram`]:
    /// the bucket that holds that rank, interpolated linearly inside it, so the estimate is
    /// always within the bounds of the bucket that holds the true value. In the last bucket
    /// (1,000 s or more) it is that bucket's lower bound: read it as "at least". `None` when
    /// no job was timed.
    pub fn runtime_percentile(&self, q: f64) -> Option<std::time::Duration> {
        let n: u64 = self.runtime_histogram.iter().sum();
        if n == 0 {
            return None;
        }
        // The rank of the job at that share, from 1 (the fastest) to n.
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).clamp(1, n);
        let mut before = 0;
        for (i, &count) in self.runtime_histogram.iter().enumerate() {
            if count > 0 && before + count >= rank {
                let low = if i == 0 {
                    0.0
                } else {
                    KIND_RUNTIME_BOUNDS[i - 1].as_secs_f64()
                };
                let Some(high) = KIND_RUNTIME_BOUNDS.get(i) else {
                    return Some(std::time::Duration::from_secs_f64(low));
                };
                let within = (rank - before) as f64 / count as f64;
                return Some(std::time::Duration::from_secs_f64(
                    low + (high.as_secs_f64() - low) * within,
                ));
            }
            before += count;
        }
        None
    }
}

/// A periodic kind's schedule with its pause and its recent jobs
/// ([`Queue::periodic_ticks`](crate::Queue::periodic_ticks)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PeriodicTicks {
    /// The schedule as the schedulers recorded it.
    pub schedule: PeriodicJob,
    /// When an operator paused it ([`Queue::pause_periodic`](crate::Queue::pause_periodic));
    /// `None` while it runs.
    pub paused_at: Option<DateTime<Utc>>,
    /// The newest jobs of the kind, newest first: its ticks and its manual runs
    /// ([`Queue::run_periodic_now`](crate::Queue::run_periodic_now)), and any job of the
    /// kind enqueued otherwise.
    pub recent: Vec<TickJob>,
}

/// One recent job of a periodic kind ([`PeriodicTicks::recent`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TickJob {
    /// The job's id.
    pub id: u64,
    /// Its task key: `kind@<tick>` for a tick, `kind@<time> run now` for a manual run.
    pub task_key: String,
    /// True for a run an operator asked for ([`Queue::run_periodic_now`](crate::Queue::run_periodic_now)).
    pub manual: bool,
    /// Its status.
    pub status: JobStatus,
    /// When it was due: the tick's time for a tick.
    pub run_at: DateTime<Utc>,
    /// When its last attempt started, if one did.
    pub claimed_at: Option<DateTime<Utc>>,
    /// When it finished, if it did.
    pub finished_at: Option<DateTime<Utc>>,
    /// The first line of its last error, cut to 240 characters, if it has one.
    pub last_error: Option<String>,
}

/// The suffix of a manual run's task key: a tick's key ends in the tick's time and `Z`,
/// never in this, so the two cannot collide.
pub(crate) const RUN_NOW_SUFFIX: &str = " run now";

/// One queue's page ([`Queue::queue_detail`](crate::Queue::queue_detail)): its state, its
/// counts, the limits its blocked jobs wait for, and the workers that serve it. Every
/// figure comes from a bounded read: see the fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct QueueDetail {
    /// The queue.
    pub queue: String,
    /// Whether an operator paused it.
    pub paused: bool,
    /// Its jobs per status: scheduled, ready, blocked, running and failed from the queue
    /// gauges (as last counted), done and cancelled counted now up to
    /// [`OVERVIEW_COUNT_CAP`](crate::OVERVIEW_COUNT_CAP).
    pub counts: super::StatusCounts,
    /// The statuses whose count reached the cap (at least that many).
    pub capped: Vec<JobStatus>,
    /// The age of its oldest ready job, in seconds (as the gauges last counted it).
    pub oldest_ready_secs: Option<f64>,
    /// How long ago the gauges were counted, in seconds (`None`: never).
    pub counted_secs_ago: Option<f64>,
    /// The limit keys its blocked jobs wait for, most waiting first, read from its first
    /// [`QueueDetail::blocked_read`] blocked jobs in claim order, at most 20 keys.
    pub limits: Vec<BlockingKey>,
    /// How many of its blocked jobs were read to find the keys (at most 500).
    pub blocked_read: u64,
    /// The workers whose heartbeat says they claim from it (at most 100), gone ones
    /// included.
    pub workers: Vec<WorkerInfo>,
}

/// Which limit a key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum LimitKind {
    /// At most `limit` jobs of the key run at once.
    Concurrency,
    /// At most `limit` jobs of the key start per window.
    Rate,
}

/// A limit key that holds blocked jobs of a queue ([`QueueDetail::limits`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BlockingKey {
    /// Concurrency or rate.
    pub limit_kind: LimitKind,
    /// The key (its bytes read as UTF-8, lossily).
    pub key: String,
    /// Its limit, as the first blocked job of the queue read carries it.
    pub limit: u32,
    /// The window of a rate limit.
    pub window: Option<std::time::Duration>,
    /// How many of the queue's blocked jobs read wait for it.
    pub blocked_here: u64,
    /// How many jobs wait for it in all, in every queue, counted up to 10,000.
    pub waiting: u64,
    /// True when `waiting` reached that cap.
    pub waiting_capped: bool,
    /// Concurrency: the slots held by running jobs. Rate: the starts within the current
    /// window.
    pub busy: u32,
    /// Rate: seconds until the next start is allowed (`None`: now, or a concurrency key).
    pub next_start_secs: Option<f64>,
    /// Concurrency: the jobs holding its slots, at most 20.
    pub holders: Vec<SlotHolder>,
}

/// A job holding a concurrency slot ([`BlockingKey::holders`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SlotHolder {
    /// The job's id.
    pub id: u64,
    /// Its kind, queue and status, if it is still in the table.
    pub job: Option<(String, String, JobStatus)>,
    /// The worker running it.
    pub lease_owner: Option<String>,
}

#[cfg(test)]
mod kind_stats_tests {
    use super::*;
    use std::time::Duration;

    fn with(histogram: [u64; 12]) -> KindStats {
        KindStats {
            kind: "k".into(),
            queues: vec!["q".into()],
            done: histogram.iter().sum(),
            failed: 0,
            retries: 0,
            timed: histogram.iter().sum(),
            total_runtime: Duration::ZERO,
            total_wait: Duration::ZERO,
            runtime_histogram: histogram,
        }
    }

    #[test]
    fn a_percentile_is_interpolated_within_the_bucket_holding_its_rank() {
        // Ten jobs under 10 ms, ten in [1, 3) s.
        let k = with([10, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0]);
        // Rank 10 of 20: the last of the first bucket, at its upper bound.
        assert_eq!(k.runtime_percentile(0.5), Some(Duration::from_millis(10)));
        // Rank 19: nine tenths into [1, 3) s.
        assert_eq!(
            k.runtime_percentile(0.95),
            Some(Duration::from_millis(2_800))
        );
        // The fastest: a tenth into [0, 10) ms.
        assert_eq!(k.runtime_percentile(0.0), Some(Duration::from_millis(1)));
        assert_eq!(k.runtime_percentile(1.0), Some(Duration::from_secs(3)));
    }

    #[test]
    fn the_open_last_bucket_gives_its_lower_bound_and_nothing_gives_none() {
        let k = with([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3]);
        assert_eq!(k.runtime_percentile(0.5), Some(Duration::from_secs(1000)));
        let none = with([0; 12]);
        assert_eq!(none.runtime_percentile(0.5), None);
        assert_eq!(none.mean_runtime(), None);
        assert_eq!(none.failure_rate(), None);
    }
}

/// How many rows [`Queue::workers`](crate::Queue::workers) and
/// [`Queue::periodic_jobs`](crate::Queue::periodic_jobs) return at most: a page lists them
/// all, and their tables grow with the fleet and the kinds, which a table written by hand
/// does not bound.
pub const DASHBOARD_ROWS: usize = 1000;

/// How many characters of a job's `last_error` a [`JobSummary`] carries: enough for the
/// first line in a table cell, cut by the server so that a huge error is never read whole.
pub const SUMMARY_ERROR_CHARS: usize = 300;

/// One job as a listing shows it ([`Queue::list_summaries`](crate::Queue::list_summaries)):
/// what a row of a table needs, without the job's payload, output, metadata, progress or
/// attempt history. Reading it costs the same whatever those columns hold, and no stored
/// value can make it fail to decode. Not even the payload's size: the server reads a large
/// value stored off the row to measure it (40 payloads of 4 MiB took 0.9 s on MariaDB
/// 10.11, against 20 ms without); [`JobDetail`] has it.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct JobSummary {
    /// The job's id.
    pub id: u64,
    /// Its queue.
    pub queue: String,
    /// Its kind name.
    pub kind: String,
    /// Its task key (read lossily if it is not UTF-8).
    pub task_key: String,
    /// Where it is in its life.
    pub status: JobStatus,
    /// Lower runs first.
    pub priority: i16,
    /// When it may run (server clock).
    pub run_at: DateTime<Utc>,
    /// Claims so far.
    pub attempts: u32,
    /// Claims it may have.
    pub max_attempts: u32,
    /// The first [`SUMMARY_ERROR_CHARS`] characters of the error of its last failed attempt.
    pub last_error: Option<String>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When the row last changed.
    pub updated_at: DateTime<Utc>,
    /// When it reached done, failed or cancelled.
    pub finished_at: Option<DateTime<Utc>>,
    /// When the lease of a running job ends unless its worker renews it.
    pub lease_until: Option<DateTime<Utc>>,
}

/// One page of [`Queue::list_summaries`](crate::Queue::list_summaries): the rows of
/// [`JobPage`] as [`JobSummary`]s, with the same cursor.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobSummaryPage {
    /// The jobs, in the order of the filter (see [`Queue::list`](crate::Queue::list)).
    pub jobs: Vec<JobSummary>,
    /// Pass this to [`Queue::list_summaries`](crate::Queue::list_summaries) (or
    /// [`Queue::list`](crate::Queue::list)), with the same filter, for the next page;
    /// `None` on the last page.
    pub next: Option<JobCursor>,
    /// As [`JobPage::searched`]: `Some(n)` when the page stopped after reading `n` jobs
    /// that a filter no index serves was tested on.
    pub searched: Option<u64>,
}

/// How many bytes of each large column of a job [`Queue::job_detail`](crate::Queue::job_detail)
/// reads: the payload, output, metadata, progress and last error. A longer value is cut
/// there (see [`StoredText::is_cut`]).
pub const DETAIL_TEXT_BYTES: usize = 64 * 1024;

/// How many bytes of a job's attempt history [`Queue::job_detail`](crate::Queue::job_detail)
/// reads. The history this library writes is far smaller (20 entries, each error at most
/// [`MAX_ATTEMPT_ERROR_BYTES`](crate::MAX_ATTEMPT_ERROR_BYTES)); a longer one was written by
/// something else, and is shown as text.
pub const DETAIL_HISTORY_BYTES: usize = 1024 * 1024;

/// A column of a job as it is stored, read as text whatever it holds: the first bytes of it
/// (at most [`DETAIL_TEXT_BYTES`], or [`DETAIL_HISTORY_BYTES`] for the attempt history) and
/// its whole size.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct StoredText {
    /// The column's first bytes, as text (a byte sequence that is not UTF-8 reads as
    /// U+FFFD; a character cut at the end is left out).
    pub text: String,
    /// The column's whole size, in bytes.
    pub bytes: u64,
}

/// What a JSON column of a job reads as ([`StoredText::json`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StoredJson {
    /// The whole value, parsed.
    Parsed(serde_json::Value),
    /// The value is longer than what was read: only its first bytes are known, as text.
    Cut,
    /// The stored text is not JSON this library reads (the server accepted it: MariaDB
    /// takes numbers such as `1e400` that overflow a double, and a column written by hand may
    /// hold anything): why, in words.
    Unreadable(String),
}

impl StoredText {
    /// Whether the column is longer than the text read.
    pub fn is_cut(&self) -> bool {
        (self.text.len() as u64) < self.bytes
    }

    /// The text parsed as JSON, when it is whole and parses.
    pub fn json(&self) -> StoredJson {
        if self.is_cut() {
            return StoredJson::Cut;
        }
        match serde_json::from_str(&self.text) {
            Ok(v) => StoredJson::Parsed(v),
            Err(e) => StoredJson::Unreadable(e.to_string()),
        }
    }
}

/// One job for an operator's page ([`Queue::job_detail`](crate::Queue::job_detail)): every
/// field of [`JobRecord`], but the columns a producer or a job writes (payload, metadata,
/// progress, output, last error, attempt history) are read as stored text, each capped in
/// size, and each read on its own: a value the decoder cannot read is shown as text instead
/// of failing the others.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct JobDetail {
    /// The job's id.
    pub id: u64,
    /// Its queue.
    pub queue: String,
    /// Its kind name.
    pub kind: String,
    /// Its task key (read lossily if it is not UTF-8).
    pub task_key: String,
    /// Where it is in its life.
    pub status: JobStatus,
    /// Lower runs first.
    pub priority: i16,
    /// When it may run (server clock).
    pub run_at: DateTime<Utc>,
    /// Claims so far.
    pub attempts: u32,
    /// Claims it may have.
    pub max_attempts: u32,
    /// The worker holding it, while running.
    pub lease_owner: Option<String>,
    /// Until when the lease holds (server clock).
    pub lease_until: Option<DateTime<Utc>>,
    /// Whether an operator asked for it to be cancelled.
    pub cancel_requested: bool,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When the row last changed.
    pub updated_at: DateTime<Utc>,
    /// When it reached done, failed or cancelled.
    pub finished_at: Option<DateTime<Utc>>,
    /// How many times a lease of it expired.
    pub lease_expiries: u32,
    /// Since when it waits for a worker that can run it, if it does.
    pub unrunnable_since: Option<DateTime<Utc>>,
    /// How many times it snoozed.
    pub snoozes: u32,
    /// Whether a newer job of the same task key holds the key now.
    pub key_released: bool,
    /// When its progress was last written (server clock).
    pub progress_at: Option<DateTime<Utc>>,
    /// Its arguments (JSON).
    pub payload: StoredText,
    /// Its metadata (a JSON object), if it has any.
    pub metadata: Option<StoredText>,
    /// The latest progress it reported (JSON), if any.
    pub progress: Option<StoredText>,
    /// What it returned (JSON), once it is done; `None` otherwise and for `()`.
    pub output: Option<StoredText>,
    /// The error of its last failed attempt.
    pub last_error: Option<StoredText>,
    /// Its attempt history as stored (a JSON array), if an attempt has ended.
    pub attempt_log: Option<StoredText>,
    /// The attempt history read from `attempt_log`, newest first: at most
    /// [`MAX_ATTEMPT_HISTORY`](crate::MAX_ATTEMPT_HISTORY) entries, each error cut to
    /// [`MAX_ATTEMPT_ERROR_BYTES`](crate::MAX_ATTEMPT_ERROR_BYTES). Empty before an attempt
    /// ended; an error (why, in words) when the stored history is not what this library
    /// writes: show `attempt_log` as text then.
    pub history: Result<Vec<Attempt>, String>,
}

/// What [`Queue::queue_overview_page`](crate::Queue::queue_overview_page) shows: a bounded
/// number of queues, and how many it left out.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[non_exhaustive]
pub struct QueueOverviewPage {
    /// The queues shown, by name.
    pub queues: Vec<QueueOverview>,
    /// Queues with scheduled, ready, blocked, running or failed jobs (as the gauges counted
    /// them) that are not shown.
    pub more: u64,
    /// Whether there may be more queues than those shown and those counted in `more`:
    /// queues that hold only done or cancelled jobs are not counted (that would read every
    /// queue's jobs), nor the matches of a search past the first. Find them by name.
    pub more_idle: bool,
}

/// Where a bulk action over a filter stopped ([`Queue::retry_matching_within`](crate::Queue::retry_matching_within),
/// [`Queue::cancel_matching_within`](crate::Queue::cancel_matching_within)).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct BulkProgress {
    /// How many jobs it changed.
    pub changed: u64,
    /// Whether it went through every matching job; false when it stopped at its bound
    /// (rows or time), and running it again goes on.
    pub complete: bool,
    /// The jobs it changed, in the order changed: the first
    /// [`AUDIT_JOB_ROWS`](crate::AUDIT_JOB_ROWS), as many as an audit entry names.
    pub changed_ids: Vec<u64>,
}
