//! The operator API: read jobs and figures, cancel, retry, pause, resume and prune. The
//! `jobqueue` command-line tool is built on it, and a dashboard can be: every record it
//! returns is serialisable; the dashboard's figures are here too. Lists, counts and bulk
//! actions take one filter, [`JobFilter`]. The SQL behind it lives in the store
//! (`store/admin.rs`, `store/dashboard.rs`).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, JobRef, Result};
use crate::key::validate_queue;
use crate::maintenance::GAUGE_INTERVAL;
use crate::model::OVERVIEW_COUNT_CAP;
use crate::model::{
    Attempt, BulkProgress, CancelOutcome, JobCursor, JobDetail, JobFilter, JobPage, JobRecord,
    JobStatus, JobSummaryPage, PeriodicJob, QueueOverview, QueueOverviewPage, QueueStats,
    RunningJob, ThroughputMinute, WorkerInfo,
};
use crate::model::{Enqueued, KindStats, PeriodicTicks, QueueDetail};
use crate::queue::Queue;
use crate::store::{BulkBound, JobLookup};
use crate::worker::WORKER_GONE_AFTER;

/// Gauges older than this are counted before [`Queue::queue_overview`] returns (younger
/// ones in the background): a fleet that has not counted them for so long is not running.
const OVERVIEW_COUNT_NOW_AFTER: Duration = Duration::from_secs(3600);

impl Queue {
    /// One job, by id.
    pub async fn job(&self, id: u64) -> Result<Option<JobRecord>> {
        self.store().job(JobLookup::Id(id)).await
    }

    /// One job, by task key: the job holding the key, or, when none does, the newest job
    /// that gave the key up (see [`Uniqueness`](crate::Uniqueness)).
    pub async fn job_by_key(&self, key: &str) -> Result<Option<JobRecord>> {
        if let Some(job) = self.store().job(JobLookup::Key(key)).await? {
            return Ok(Some(job));
        }
        Ok(self.store().released_jobs(key, 1).await?.into_iter().next())
    }

    /// Every job enqueued with task key `key`, newest first, at most `limit`: the job
    /// holding the key, then those that gave it up to a newer job when their
    /// [`Uniqueness`](crate::Uniqueness) stopped blocking it (until they are pruned).
    pub async fn jobs_by_key(&self, key: &str, limit: u32) -> Result<Vec<JobRecord>> {
        let mut jobs = Vec::new();
        if limit == 0 {
            return Ok(jobs);
        }
        if let Some(job) = self.store().job(JobLookup::Key(key)).await? {
            jobs.push(job);
        }
        let rest = limit - jobs.len() as u32;
        if rest > 0 {
            jobs.extend(self.store().released_jobs(key, rest).await?);
        }
        Ok(jobs)
    }

    /// The attempts of job `id`, oldest first: the last
    /// [`MAX_ATTEMPT_HISTORY`](crate::MAX_ATTEMPT_HISTORY), each with its claim and end
    /// times, its worker, how it ended and its error. Empty until an attempt has ended, and
    /// for attempts recorded by workers older than the history. An error if there is no such
    /// job.
    pub async fn attempts(&self, id: u64) -> Result<Vec<Attempt>> {
        let Some(log) = self.store().attempt_log(id).await? else {
            return Err(Error::JobNotFound(JobRef::Id(id)));
        };
        match log {
            None => Ok(Vec::new()),
            Some(log) => crate::store::attempts_from_log(&log)
                .map_err(|reason| Error::AttemptLog { id, reason }),
        }
    }

    /// A page of jobs matching `filter`, at most `limit`, starting after `cursor` (from the
    /// start with `None`); [`JobPage::next`] is the cursor of the next page, `None` on the
    /// last one. Keyset pagination: each page costs the same however deep it is (no
    /// OFFSET), and a job enqueued meanwhile does not shift the pages.
    ///
    /// The order depends on the filter's status:
    ///
    /// | status | order |
    /// |---|---|
    /// | none | newest first, by id |
    /// | `done`, `failed`, `cancelled` | newest first, by when the job finished |
    /// | `scheduled`, `ready`, `blocked` | next to run first, by when the job is due (`run_at`) |
    /// | `running` | soonest lease expiry first |
    ///
    /// Jobs with the same time come by id. A listing of one status reads that status's
    /// range of an index (with a queue or a kind, the range of that queue or kind and
    /// status; [`JobFilter::status_time`] narrows it to a time range): it costs the page's
    /// rows, also when few or no jobs match. A job that leaves the status between
    /// two pages is not shown on the next; one that enters it shows if its place is after
    /// the cursor; every job that stays in its status and keeps its time is shown once. A
    /// running job whose lease is renewed between two pages moves forward in that order,
    /// and may show again.
    ///
    /// A filter that no index serves whole (metadata, error text, enqueue times, a task key
    /// with other fields, a queue, a kind and a status together) tests the jobs of the
    /// range the rest selects one by one, at most
    /// [`LIST_SCAN_ROWS`](crate::LIST_SCAN_ROWS) per page: a page may then hold fewer jobs
    /// than `limit`, none even, with [`JobPage::searched`] set and [`JobPage::next`] going
    /// on after the last job tested, so follow `next` rather than stop at a short page. A
    /// page stops after one second with [`Error::FilterTooSlow`] if its tests are slow
    /// (long error texts).
    ///
    /// `cursor` must come from a page of a listing of the same status (or of no status):
    /// another is refused with [`Error::InvalidSetting`].
    pub async fn list(
        &self,
        filter: &JobFilter,
        cursor: Option<&JobCursor>,
        limit: u32,
    ) -> Result<JobPage> {
        check_cursor(filter, cursor)?;
        self.store().list(filter, cursor, limit).await
    }

    /// [`Queue::list`] without the large columns: each row a [`JobSummary`](crate::JobSummary)
    /// (no payload, output, metadata, progress or attempt history; the last error cut to
    /// its first [`SUMMARY_ERROR_CHARS`](crate::SUMMARY_ERROR_CHARS) characters by the
    /// server). A page costs the same whatever those columns hold, and no stored value can
    /// fail it. The same order, cursors and time limit as [`Queue::list`]; a cursor of one
    /// continues a listing of the other.
    pub async fn list_summaries(
        &self,
        filter: &JobFilter,
        cursor: Option<&JobCursor>,
        limit: u32,
    ) -> Result<JobSummaryPage> {
        check_cursor(filter, cursor)?;
        self.store().list_summaries(filter, cursor, limit).await
    }

    /// One job, by id, for a person to read: [`JobDetail`], whose payload, output, metadata,
    /// progress, last error and attempt history are read as stored text, each cut to a
    /// size ([`DETAIL_TEXT_BYTES`](crate::DETAIL_TEXT_BYTES)) with its whole size beside.
    /// A value this library cannot parse (a number out of range, text that is not JSON, a
    /// history written by hand) fails neither the read nor the other columns: see
    /// [`StoredText::json`](crate::StoredText::json) and [`JobDetail::history`]. `None` if
    /// there is no such job.
    pub async fn job_detail(&self, id: u64) -> Result<Option<JobDetail>> {
        self.store().job_detail(id).await
    }

    /// How many jobs match `filter` (what a bulk action would consider). It reads every
    /// matching row with no time limit: for a page, use [`Queue::count_capped`].
    pub async fn count(&self, filter: &JobFilter) -> Result<u64> {
        self.store().count(filter).await
    }

    /// How many jobs match `filter`, counted up to `cap + 1` (a result above `cap` means
    /// "more than `cap`"), within a second: a filter that no index serves and that would
    /// read longer is [`Error::FilterTooSlow`].
    pub async fn count_capped(&self, filter: &JobFilter, cap: u64) -> Result<u64> {
        self.store().count_capped(filter, cap).await
    }

    /// Jobs per status in one queue (all queues with `None`).
    pub async fn counts(&self, queue: Option<&str>) -> Result<Vec<(JobStatus, u64)>> {
        self.store().counts(queue).await
    }

    /// Figures per queue (every queue with at least one job, plus paused ones).
    pub async fn stats(&self) -> Result<Vec<QueueStats>> {
        self.store().stats().await
    }

    /// Running jobs with their owners and lease time left, oldest lease first.
    pub async fn running(&self, queue: Option<&str>, limit: u32) -> Result<Vec<RunningJob>> {
        self.store().running(queue, limit).await
    }

    /// The database's clock now: the time every job's times are read on.
    pub async fn now(&self) -> Result<DateTime<Utc>> {
        Ok(self.store().now().await?.and_utc())
    }

    /// Cancels a job: at once if it has not started, by request if it is running.
    pub async fn cancel(&self, id: u64) -> Result<CancelOutcome> {
        let Some(outcome) = self.store().cancel(id).await? else {
            return Err(Error::JobNotFound(JobRef::Id(id)));
        };
        tracing::info!(job.id = id, outcome = ?outcome, "cancel");
        Ok(outcome)
    }

    /// Puts a `failed` or `cancelled` job back to `ready`, to run again now. Its history
    /// stays readable: `attempts` is never reset (it fences every write of every claim), and
    /// `last_error` keeps the last failure until the next one. A job that had used all its
    /// attempts gets one more (`max_attempts = attempts + 1`). Returns false if the job is
    /// in another status (nothing changed).
    pub async fn retry(&self, id: u64) -> Result<bool> {
        let matched = self.store().retry(id).await?;
        // Whether the job exists, without decoding its row: a payload this library cannot
        // read must not turn "not retried" into an error.
        if matched == 0 && self.store().attempt_log(id).await?.is_none() {
            return Err(Error::JobNotFound(JobRef::Id(id)));
        }
        if matched == 1 {
            self.wake_workers();
        }
        Ok(matched == 1)
    }

    /// [`Queue::retry`] for every `failed` or `cancelled` job matching `filter` (jobs in
    /// other statuses are left alone; a filter on `failed` retries only the failed ones).
    /// Returns how many jobs changed.
    ///
    /// It goes through the matching jobs of each status in batches of 1,000: a plain read
    /// of the next ids through the status's index (after the last id of the batch before),
    /// then one `UPDATE` of those ids, so that no transaction locks more than a batch and
    /// no row is read twice. [`Queue::retry_matching_within`] stops at a bound.
    pub async fn retry_matching(&self, filter: &JobFilter) -> Result<u64> {
        let p = self.store().retry_matching(filter, BulkBound::ALL).await?;
        if p.changed > 0 {
            self.wake_workers();
        }
        tracing::info!(rows = p.changed, filter = ?filter, "retried matching jobs");
        Ok(p.changed)
    }

    /// [`Queue::retry_matching`] that stops after changing `max_rows` jobs or once `time`
    /// has passed (at the end of a batch), whichever comes first; each batch's read stops
    /// after a second with [`Error::FilterTooSlow`] when the filter is not served by an
    /// index. [`BulkProgress::complete`] says whether it went through every matching job;
    /// if not, call it again to go on (the jobs it retried are no longer failed or
    /// cancelled, and are not met again). For a request of a dashboard, whose cost must be
    /// bounded.
    pub async fn retry_matching_within(
        &self,
        filter: &JobFilter,
        max_rows: u64,
        time: Duration,
    ) -> Result<BulkProgress> {
        let p = self
            .store()
            .retry_matching(filter, bounded(max_rows, time))
            .await?;
        if p.changed > 0 {
            self.wake_workers();
        }
        tracing::info!(rows = p.changed, complete = p.complete, filter = ?filter, "retried matching jobs");
        Ok(p)
    }

    /// Cancels every `scheduled`, `ready` or `blocked` job matching `filter`: they will never
    /// run. Running jobs are left alone (cancel them one by one with [`Queue::cancel`]).
    /// Returns how many jobs changed. In batches, as [`Queue::retry_matching`].
    pub async fn cancel_matching(&self, filter: &JobFilter) -> Result<u64> {
        let p = self.store().cancel_matching(filter, BulkBound::ALL).await?;
        tracing::info!(rows = p.changed, filter = ?filter, "cancelled matching jobs");
        Ok(p.changed)
    }

    /// [`Queue::cancel_matching`] within bounds, as [`Queue::retry_matching_within`].
    pub async fn cancel_matching_within(
        &self,
        filter: &JobFilter,
        max_rows: u64,
        time: Duration,
    ) -> Result<BulkProgress> {
        let p = self
            .store()
            .cancel_matching(filter, bounded(max_rows, time))
            .await?;
        tracing::info!(rows = p.changed, complete = p.complete, filter = ?filter, "cancelled matching jobs");
        Ok(p)
    }

    /// Pauses a queue: no worker claims from it until [`Queue::resume`]. Jobs can still be
    /// enqueued; running jobs go on.
    pub async fn pause(&self, queue: &str) -> Result<()> {
        validate_queue(queue)?;
        // Already paused: pausing again changes nothing.
        self.store().pause(queue).await?;
        tracing::info!(queue, "queue paused");
        Ok(())
    }

    /// Resumes a paused queue.
    pub async fn resume(&self, queue: &str) -> Result<()> {
        self.store().resume(queue).await?;
        tracing::info!(queue, "queue resumed");
        self.wake_workers();
        Ok(())
    }

    /// The paused queues.
    pub async fn paused_queues(&self) -> Result<Vec<String>> {
        self.store().paused_queues_sorted().await
    }

    /// Deletes jobs with `status` (done, failed or cancelled) that finished more than
    /// `older_than` ago, in batches of 500 locked with SKIP LOCKED, so it never blocks
    /// claims. Returns how many rows were deleted. A pruned job's task key can be enqueued
    /// again.
    pub async fn prune(&self, status: JobStatus, older_than: Duration) -> Result<u64> {
        check_prunable(status)?;
        let store = self.store();
        let mut total = 0;
        loop {
            let n = store.prune_batch(status, micros(older_than), 500).await?;
            total += n;
            if n < 500 {
                return Ok(total);
            }
        }
    }

    /// How many jobs [`Queue::prune`] would delete now.
    pub async fn prunable(&self, status: JobStatus, older_than: Duration) -> Result<u64> {
        check_prunable(status)?;
        self.store().prunable(status, micros(older_than)).await
    }
}

// The dashboard's figures.
impl Queue {
    /// [`Queue::prune`] for the jobs matching `filter`: deletes the jobs with the filter's
    /// status (done, failed or cancelled: it must be set to one of them) that finished more
    /// than `older_than` ago and match the filter's other fields (queue, kind, task key
    /// prefix...). Oldest first, in batches of 500 locked with SKIP LOCKED, so it never
    /// blocks claims. Returns how many rows were deleted.
    ///
    /// The rows are found through the index on (status, finish time): a queue or kind is
    /// tested on each finished job of that status older than `older_than`, read once.
    pub async fn prune_matching(&self, filter: &JobFilter, older_than: Duration) -> Result<u64> {
        check_prunable_query(filter)?;
        let store = self.store();
        let mut total = 0;
        let mut from = None;
        loop {
            let (n, last) = store
                .prune_matching_batch(filter, micros(older_than), from, 500)
                .await?;
            total += n;
            // A batch deletes every row it locked; one that deleted none found none left.
            if n == 0 || last.is_none() {
                break;
            }
            from = last;
        }
        tracing::info!(rows = total, filter = ?filter, "pruned matching jobs");
        Ok(total)
    }

    /// How many jobs [`Queue::prune_matching`] would delete now.
    pub async fn prunable_matching(&self, filter: &JobFilter, older_than: Duration) -> Result<u64> {
        check_prunable_query(filter)?;
        self.store()
            .prunable_matching(filter, micros(older_than))
            .await
    }

    /// Every queue's counts by status, whether it is paused, the age of its oldest ready job
    /// and its expired leases, by queue name, without reading every job: see
    /// [`QueueOverview`] for where each figure comes from and how old it may be. It costs a
    /// few small reads per queue however many jobs there are. [`Queue::stats`] has exact
    /// counts and more figures per queue, at the cost of reading the jobs;
    /// [`Queue::throughput`] has the finished jobs per minute.
    ///
    /// The counts of the active statuses are the queue gauges, which one worker of the
    /// fleet counts every few seconds. When no worker counted them for longer than that
    /// interval, this call takes the turn to count them: in the background if they are
    /// less than an hour old (this call returns the older counts, with their age), before
    /// it returns if they are older or were never counted. A user without the right to
    /// update the gauges sees them as the workers left them.
    pub async fn queue_overview(&self) -> Result<Vec<QueueOverview>> {
        let store = self.store();
        let (mut out, mut counted) = store.queue_overview().await?;
        if self.recount_gauges_if_stale(counted).await {
            (out, counted) = store.queue_overview().await?;
        }
        self.finish_overview(&mut out, counted).await?;
        Ok(out)
    }

    /// [`Queue::queue_overview`] of at most `limit` queues, whatever the number of queues
    /// and jobs: with `search`, the first queues by name that start with it (found through
    /// the index on queue names, one lookup each); without, the busiest queues by the
    /// gauges (most jobs scheduled, ready, blocked, running or failed), then the paused
    /// ones, then while there is room the first others by name. Shown by name;
    /// [`QueueOverviewPage::more`] counts the queues with jobs left out.
    ///
    /// Its cost grows with `limit` (a few index reads per queue shown) and, for the one
    /// read of the gauges' table, with the number of queues (a row per queue and status,
    /// grouped by the server), never with the number of jobs.
    pub async fn queue_overview_page(
        &self,
        limit: usize,
        search: Option<&str>,
    ) -> Result<QueueOverviewPage> {
        let store = self.store();
        let (mut page, mut counted) = store.queue_overview_page(limit, search).await?;
        if self.recount_gauges_if_stale(counted).await {
            (page, counted) = store.queue_overview_page(limit, search).await?;
        }
        self.finish_overview(&mut page.queues, counted).await?;
        Ok(page)
    }

    /// Counts the gauges when no worker did for [`GAUGE_INTERVAL`] (see
    /// [`Queue::queue_overview`]). True when it counted them before returning, and the
    /// caller reads them again.
    async fn recount_gauges_if_stale(&self, counted: Option<Duration>) -> bool {
        if counted.is_some_and(|age| age <= GAUGE_INTERVAL) {
            return false;
        }
        let store = self.store().clone();
        let recount = async move {
            if store.take_gauge_turn(GAUGE_INTERVAL.mul_f64(0.9)).await? {
                store.count_gauges().await?;
            }
            Result::<()>::Ok(())
        };
        if counted.is_none_or(|age| age > OVERVIEW_COUNT_NOW_AFTER) {
            match recount.await {
                Ok(()) => return true,
                Err(e) => tracing::debug!(error = %e, "cannot count the queue gauges"),
            }
        } else {
            tokio::spawn(async move {
                if let Err(e) = recount.await {
                    tracing::debug!(error = %e, "cannot count the queue gauges");
                }
            });
        }
        false
    }

    /// The overview's figures read now: the gauges' age, and the capped counts of done and
    /// cancelled jobs of each queue.
    async fn finish_overview(
        &self,
        queues: &mut [QueueOverview],
        counted: Option<Duration>,
    ) -> Result<()> {
        let store = self.store();
        for q in queues {
            q.counted_secs_ago = counted.map(|age| age.as_secs_f64());
            for status in [JobStatus::Done, JobStatus::Cancelled] {
                let n = store
                    .capped_count(&q.queue, status, OVERVIEW_COUNT_CAP)
                    .await?;
                if n > OVERVIEW_COUNT_CAP {
                    q.capped.push(status);
                }
                q.counts.set(status, n.min(OVERVIEW_COUNT_CAP));
            }
        }
        Ok(())
    }

    /// Jobs that ended `done` or `failed` per minute and queue over the last `minutes`
    /// minutes (only minutes with any), by the server's clock. The worker that counts the
    /// queue gauges keeps these counts as jobs finish (so pruned jobs stay counted), up to
    /// 15 s before its count; this call adds the jobs finished since, read from the table. When
    /// no worker kept them for a minute, this call counts them first (at most the last hour
    /// of jobs, once), if its user may. A job whose outcome committed more than 15 s after it
    /// finished is missed.
    pub async fn throughput(&self, minutes: u32) -> Result<Vec<ThroughputMinute>> {
        self.store().throughput(minutes).await
    }

    /// The workers that wrote a heartbeat, including those that stopped writing it without
    /// shutting down (shown as [`WorkerInfo::gone`] until they are forgotten).
    /// At most [`DASHBOARD_ROWS`](crate::DASHBOARD_ROWS), by host and name.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        self.store().workers(WORKER_GONE_AFTER).await
    }

    /// Every periodic kind the schedulers have recorded, with its next tick and the outcome
    /// of its latest enqueued tick. At most [`DASHBOARD_ROWS`](crate::DASHBOARD_ROWS), by
    /// kind; the error cut to [`SUMMARY_ERROR_CHARS`](crate::SUMMARY_ERROR_CHARS).
    pub async fn periodic_jobs(&self) -> Result<Vec<PeriodicJob>> {
        self.store().periodic_jobs().await
    }
}

/// The bound of a bulk action `..._within`.
fn bounded(max_rows: u64, time: Duration) -> BulkBound {
    BulkBound {
        rows: max_rows,
        until: std::time::Instant::now().checked_add(time),
        time_limited: true,
    }
}

/// Refuses a cursor of another listing than `filter`'s.
fn check_cursor(filter: &JobFilter, cursor: Option<&JobCursor>) -> Result<()> {
    if let Some(c) = cursor.filter(|c| c.status() != filter.status) {
        return Err(Error::InvalidSetting {
            setting: "cursor",
            reason: format!(
                "cursor {c} continues a listing of {}, and this filter lists {}: \
                 start this listing without a cursor",
                listing_of(c.status()),
                listing_of(filter.status)
            ),
        });
    }
    Ok(())
}

/// Which jobs a listing of `status` shows, for an error message.
fn listing_of(status: Option<JobStatus>) -> String {
    match status {
        Some(s) => format!("{s} jobs"),
        None => "jobs of every status".into(),
    }
}

fn check_prunable(status: JobStatus) -> Result<()> {
    match status {
        JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled => Ok(()),
        other => Err(Error::InvalidSetting {
            setting: "status",
            reason: format!("only done, failed or cancelled jobs can be pruned, not {other} ones"),
        }),
    }
}

fn check_prunable_query(filter: &JobFilter) -> Result<()> {
    match filter.status {
        Some(status) => check_prunable(status),
        None => Err(Error::InvalidSetting {
            setting: "status",
            reason: "pruning needs a status: done, failed or cancelled".into(),
        }),
    }
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

// The daily workflows: per-kind figures, periodic schedules' pause and manual runs, one
// queue's page.
impl Queue {
    /// What the jobs of each kind did over the last `hours` hours (at most 48, the time the
    /// figures are kept; a larger number reads 48): how many ended done or failed, their
    /// retries, and their runtimes and waits, from which [`KindStats`] estimates the median
    /// and 95th percentile. One per kind that finished a job in the window, by kind name.
    ///
    /// The figures are counted as jobs finish, in 5-minute buckets, by the worker that
    /// counts the queue gauges (from the jobs it reads for the throughput, so it costs no
    /// read of its own), and stop where those counts stop, 15 to 20 seconds before now; the
    /// window is the buckets that end within it, so it covers `hours` hours and up to
    /// 5 minutes more. Pruned jobs stay counted. This call never counts: with no worker of
    /// this release running, the figures stop at the last count. The read is a range of the
    /// figures' table: 12 rows per hour per kind and queue.
    pub async fn kind_stats(&self, hours: u32) -> Result<Vec<KindStats>> {
        self.store().kind_stats(hours.min(48)).await
    }

    /// Every periodic kind the schedulers have recorded ([`Queue::periodic_jobs`]), with its
    /// pause and its `recent` newest jobs (at most 100), newest first: its ticks, its manual
    /// runs ([`Queue::run_periodic_now`]) and any job of the kind enqueued otherwise. Each
    /// kind's jobs are one range of the `(kind, id)` index, however large the table.
    pub async fn periodic_ticks(&self, recent: u32) -> Result<Vec<PeriodicTicks>> {
        let store = self.store();
        let schedules = store.periodic_jobs().await?;
        let pauses = store.periodic_pauses().await?;
        let mut out = Vec::with_capacity(schedules.len());
        for schedule in schedules {
            let paused_at = pauses
                .iter()
                .find(|(k, _)| *k == schedule.kind)
                .and_then(|(_, at)| *at)
                .map(|at| at.and_utc());
            let recent = store
                .recent_of_kind(&schedule.kind, recent.min(100))
                .await?;
            out.push(PeriodicTicks {
                schedule,
                paused_at,
                recent,
            });
        }
        Ok(out)
    }

    /// Pauses the schedule of the periodic kind `kind` on every node: no tick of it is
    /// enqueued until [`Queue::resume_periodic`]. Jobs of the kind already enqueued, and
    /// manual runs, are not affected; the kind's queue is not paused. Returns false if it was
    /// paused already. An error ([`Error::InvalidSetting`]) if the schedulers have no
    /// schedule of that kind (a worker that registers it creates one when it starts).
    ///
    /// Workers of releases before this one do not read the pause: pause schedules once
    /// every worker runs this release.
    pub async fn pause_periodic(&self, kind: &str) -> Result<bool> {
        let changed = self
            .store()
            .set_periodic_paused(kind, true)
            .await?
            .ok_or_else(|| no_schedule(kind))?;
        tracing::info!(job.kind = kind, changed, "periodic schedule paused");
        Ok(changed)
    }

    /// Resumes a paused schedule. The ticks that fell due while it was paused are not
    /// enqueued, not even the latest: the schedule goes on with its next tick after now.
    /// Returns false if it was not paused. An error ([`Error::InvalidSetting`]) if there is
    /// no schedule of that kind.
    pub async fn resume_periodic(&self, kind: &str) -> Result<bool> {
        let changed = self
            .store()
            .set_periodic_paused(kind, false)
            .await?
            .ok_or_else(|| no_schedule(kind))?;
        tracing::info!(job.kind = kind, changed, "periodic schedule resumed");
        Ok(changed)
    }

    /// Enqueues one job of the periodic kind `kind` now, beside its schedule, as an
    /// operator's "run now". Its task key is `"{kind}@{now} run now"` (the database's clock,
    /// to the microsecond), which no tick's key can equal (those end in the tick's time), so
    /// it never takes a tick's place, and [`TickJob::manual`](crate::TickJob::manual) tells it apart. It does not
    /// move the schedule: the next tick comes when it would have, and a kind that does not
    /// allow overlap does not hold its next tick back for a manual run.
    ///
    /// Its arguments and options are those a tick gets when this binary registers the kind
    /// (its default arguments, queue, priority, attempts, lease and limits); otherwise (a
    /// stand-alone dashboard, which does not know the application's kinds) they are copied
    /// from the kind's newest job. It runs whether the schedule is paused or not: a pause
    /// stops the schedule, not an operator (it waits while the kind's queue is paused).
    /// An error ([`Error::InvalidSetting`]) if there is no schedule of that kind, or if it is
    /// not registered here and has no job to copy.
    pub async fn run_periodic_now(&self, kind: &str) -> Result<Enqueued> {
        let store = self.store();
        if !store.has_schedule(kind).await? {
            return Err(no_schedule(kind));
        }
        let now = store.now().await?;
        let key = format!(
            "{kind}@{}{}",
            now.format("%Y-%m-%dT%H:%M:%S%.6fZ"),
            crate::model::RUN_NOW_SUFFIX
        );
        let registered = match crate::registry::lookup(kind) {
            Some(d) => crate::maintenance::tick_template(d)?,
            None => None,
        };
        let job = match registered {
            Some(template) => crate::model::NewJob { key, ..template },
            None => store
                .copy_of_latest(kind, key)
                .await?
                .ok_or_else(|| Error::InvalidSetting {
                    setting: "kind",
                    reason: format!(
                        "periodic kind `{kind}` is not registered in this program and has no job yet to copy its arguments from; \
                         run it now from a program that registers it, or after its first tick"
                    ),
                })?,
        };
        crate::key::validate_queue(&job.queue)?;
        let enqueued = store.insert_autocommit(&job).await?;
        if matches!(enqueued, Enqueued::New(_)) {
            self.wake_workers();
        }
        tracing::info!(job.kind = kind, key = %job.key, outcome = ?enqueued, "periodic job run now");
        Ok(enqueued)
    }

    /// One queue's page: whether it is paused, its counts by status, the age of its oldest
    /// ready job, the limit keys its blocked jobs wait for (with their limits, their
    /// holders and how many jobs wait for each), and the workers serving it. Every read is
    /// bounded: the counts come from the queue gauges (as last counted) and capped counts,
    /// the keys from the queue's first 500 blocked jobs (at most 20 keys, 20 holders each),
    /// the workers from their heartbeat rows (at most 100). See [`QueueDetail`].
    pub async fn queue_detail(&self, queue: &str) -> Result<QueueDetail> {
        validate_queue(queue)?;
        let store = self.store();
        let (paused, counts, capped, oldest_ready_secs, counted_secs_ago, limits, blocked_read) =
            store.queue_figures(queue).await?;
        let workers = store.queue_workers(queue, WORKER_GONE_AFTER).await?;
        Ok(QueueDetail {
            queue: queue.to_owned(),
            paused,
            counts,
            capped,
            oldest_ready_secs,
            counted_secs_ago,
            limits,
            blocked_read,
            workers,
        })
    }
}

/// The error for a periodic kind without a schedule row.
fn no_schedule(kind: &str) -> Error {
    Error::InvalidSetting {
        setting: "kind",
        reason: format!(
            "no periodic schedule of kind `{kind}`: a worker that registers a periodic kind records its schedule when it starts; \
             check the kind's name (`jobqueue periodic` or the dashboard's periodic page lists them)"
        ),
    }
}
