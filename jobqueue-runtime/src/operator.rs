//! The operator's actions on jobs picked one by one (delete, run now, and retry, cancel,
//! delete or run now on a selection of ids), and the bounded reads a job list shows beside
//! its rows: the names for its queue and kind pickers and its per-status counts. The SQL is
//! in `store/operator.rs`.

use std::time::Duration;

use crate::error::{Error, JobRef, Result};
use crate::maintenance::GAUGE_INTERVAL;
use crate::model::{CancelOutcome, JobCursor, JobFilter, JobStatus, StatusCounts};
use crate::queue::Queue;
use crate::store::operator::{Deletion, NameColumn};

/// The most jobs one selection action ([`Queue::retry_selected`] and the others) takes:
/// each job is one short statement, so a selection costs at most this many round trips.
/// Act on more with the actions on every job matching a filter
/// ([`Queue::retry_matching`], [`Queue::cancel_matching`]).
pub const MAX_SELECTION: usize = 500;

/// [`Queue::recount_gauges`] counts only while the gauges last counted at most this many
/// waiting, running and failed jobs: a count reads an index entry of each.
pub const RECOUNT_MAX_JOBS: u64 = 100_000;

/// The most names [`Queue::queue_names`] and [`Queue::kind_names`] return: each is one
/// index lookup.
pub const MAX_NAMES: usize = 200;

/// The most jobs a page of [`Queue::list`] (or [`Queue::list_summaries`]) tests when no
/// index serves its whole filter (metadata, error text, enqueue times, a key prefix with
/// other fields, a queue with a kind and a status) and it reads them in id order (no
/// status, queue or kind): neighbours in the table, about 1 ms. The page holds the matches
/// among them, and says so ([`JobPage::searched`](crate::JobPage::searched)).
pub const LIST_SCAN_ROWS: u64 = 1_000;

/// [`LIST_SCAN_ROWS`] for a page that reads its jobs through an index (a status, a queue or
/// a kind narrows the range): each job tested is then a row read on its own, wherever it
/// is in the table (failed jobs among a million done ones: about 20 µs each on a loaded
/// 2-core machine).
pub const LIST_SCAN_INDEXED_ROWS: u64 = 250;

/// The most done or cancelled jobs [`Queue::list_counts`] counts per status: a count reads
/// one index entry per job (a job list shows "1,000+" past it).
pub const LIST_COUNT_CAP: u64 = 1_000;

/// What an action on a selection of jobs did to each of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct SelectionOutcome {
    /// The jobs the action changed, in the order given.
    pub changed: Vec<u64>,
    /// Running jobs whose cancellation was requested (a cancel only): their worker stops
    /// them within a third of their lease.
    pub requested: Vec<u64>,
    /// The jobs left as they were, with the status that kept them out of the action.
    pub skipped: Vec<(u64, JobStatus)>,
    /// Ids of no job (never enqueued, deleted or pruned).
    pub missing: Vec<u64>,
}

/// A job list's counts per status, read without scanning the table: see
/// [`Queue::list_counts`].
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct ListCounts {
    /// The jobs of each status. Capped ones are at [`LIST_COUNT_CAP`].
    pub counts: StatusCounts,
    /// The statuses with more jobs than [`LIST_COUNT_CAP`] (shown as "1,000+").
    pub capped: Vec<JobStatus>,
    /// How long ago the queue gauges (the counts of every status but done and cancelled)
    /// were counted; `None` if never.
    pub counted_secs_ago: Option<f64>,
}

impl Queue {
    /// Deletes job `id` for good: a finished job, or one that waits (scheduled, ready,
    /// blocked on a limit), which then never runs. Its task key can be enqueued again.
    /// Returns false, and changes nothing, if the job is running: its worker still writes
    /// to it, so cancel it first ([`Queue::cancel`]) and delete it once it has stopped. An
    /// error if there is no such job.
    pub async fn delete(&self, id: u64) -> Result<bool> {
        match self.store().delete_job(id).await? {
            Deletion::Done => {
                tracing::info!(job.id = id, "job deleted");
                Ok(true)
            }
            Deletion::Running => Ok(false),
            Deletion::Missing => Err(Error::JobNotFound(JobRef::Id(id))),
        }
    }

    /// Runs a `scheduled` job now: a delayed job, or a failed attempt's retry waiting out
    /// its backoff, becomes ready with `run_at` set to now (its attempts and last error
    /// stay). Returns false, and changes nothing, if the job is in another status. An error
    /// if there is no such job.
    pub async fn run_now(&self, id: u64) -> Result<bool> {
        let changed = self.store().run_now(id).await? == 1;
        if changed {
            tracing::info!(job.id = id, "job made ready to run now");
            self.wake_workers();
        } else if self.store().job_status(id).await?.is_none() {
            return Err(Error::JobNotFound(JobRef::Id(id)));
        }
        Ok(changed)
    }

    /// [`Queue::retry`] for each of `ids` (at most [`MAX_SELECTION`]): `failed` and
    /// `cancelled` jobs become ready, the others are skipped. One statement per job.
    pub async fn retry_selected(&self, ids: &[u64]) -> Result<SelectionOutcome> {
        let ids = selection(ids)?;
        let mut out = SelectionOutcome::default();
        for id in ids {
            if self.store().retry(id).await? == 1 {
                out.changed.push(id);
            } else {
                self.skip(&mut out, id).await?;
            }
        }
        if !out.changed.is_empty() {
            self.wake_workers();
        }
        tracing::info!(jobs = ?out.changed, "retried selected jobs");
        Ok(out)
    }

    /// [`Queue::cancel`] for each of `ids` (at most [`MAX_SELECTION`]): jobs that have not
    /// started are cancelled, running ones are asked to stop ([`SelectionOutcome::requested`]),
    /// finished ones are skipped. One short transaction per job.
    pub async fn cancel_selected(&self, ids: &[u64]) -> Result<SelectionOutcome> {
        let ids = selection(ids)?;
        let mut out = SelectionOutcome::default();
        for id in ids {
            match self.store().cancel(id).await? {
                None => out.missing.push(id),
                Some(CancelOutcome::Cancelled) => out.changed.push(id),
                Some(CancelOutcome::Requested) => out.requested.push(id),
                Some(CancelOutcome::AlreadyFinished(status)) => out.skipped.push((id, status)),
            }
        }
        tracing::info!(jobs = ?out.changed, requested = ?out.requested, "cancelled selected jobs");
        Ok(out)
    }

    /// [`Queue::delete`] for each of `ids` (at most [`MAX_SELECTION`]): running jobs are
    /// skipped. One short transaction per job.
    pub async fn delete_selected(&self, ids: &[u64]) -> Result<SelectionOutcome> {
        let ids = selection(ids)?;
        let mut out = SelectionOutcome::default();
        for id in ids {
            match self.store().delete_job(id).await? {
                Deletion::Done => out.changed.push(id),
                Deletion::Running => out.skipped.push((id, JobStatus::Running)),
                Deletion::Missing => out.missing.push(id),
            }
        }
        tracing::info!(jobs = ?out.changed, "deleted selected jobs");
        Ok(out)
    }

    /// [`Queue::run_now`] for each of `ids` (at most [`MAX_SELECTION`]): `scheduled` jobs
    /// become ready now, the others are skipped. One statement per job.
    pub async fn run_now_selected(&self, ids: &[u64]) -> Result<SelectionOutcome> {
        let ids = selection(ids)?;
        let mut out = SelectionOutcome::default();
        for id in ids {
            if self.store().run_now(id).await? == 1 {
                out.changed.push(id);
            } else {
                self.skip(&mut out, id).await?;
            }
        }
        if !out.changed.is_empty() {
            self.wake_workers();
        }
        tracing::info!(jobs = ?out.changed, "made selected jobs ready to run now");
        Ok(out)
    }

    /// Records why `id` was left alone: its status now, or that it does not exist.
    async fn skip(&self, out: &mut SelectionOutcome, id: u64) -> Result<()> {
        match self.store().job_status(id).await? {
            Some(status) => out.skipped.push((id, status)),
            None => out.missing.push(id),
        }
        Ok(())
    }

    /// The names of the queues that have jobs, in byte order, at most `limit` (and at most
    /// [`MAX_NAMES`]): one lookup in the `(queue, id)` index per name, however many jobs
    /// there are.
    pub async fn queue_names(&self, limit: usize) -> Result<Vec<String>> {
        self.store()
            .names(NameColumn::Queue, limit.min(MAX_NAMES))
            .await
    }

    /// The kinds that have jobs, in byte order, at most `limit` (and at most
    /// [`MAX_NAMES`]): one lookup in the `(kind, id)` index per name.
    pub async fn kind_names(&self, limit: usize) -> Result<Vec<String>> {
        self.store()
            .names(NameColumn::Kind, limit.min(MAX_NAMES))
            .await
    }

    /// The jobs of each status, in `queue` or in every queue, without reading the table:
    /// scheduled, ready, blocked, running and failed jobs are the queue gauges (counted by
    /// one worker of the fleet every few seconds; counted here first when nobody has for
    /// longer, if this user may), done and cancelled jobs are counted on their index up to
    /// [`LIST_COUNT_CAP`] ([`ListCounts::capped`] says which went past it). Each figure
    /// costs at most that many index entries.
    pub async fn list_counts(&self, queue: Option<&str>) -> Result<ListCounts> {
        let store = self.store();
        let (mut counts, mut counted) = store.gauge_counts(queue).await?;
        if counted.is_none_or(|age| age > GAUGE_INTERVAL) {
            match self.count_gauges_now().await {
                Ok(true) => (counts, counted) = store.gauge_counts(queue).await?,
                Ok(false) => {}
                Err(e) => tracing::debug!(error = %e, "cannot count the queue gauges"),
            }
        }
        let mut capped = Vec::new();
        for status in [JobStatus::Done, JobStatus::Cancelled] {
            let n = store
                .capped_status_count(queue, status, LIST_COUNT_CAP)
                .await?;
            if n > LIST_COUNT_CAP {
                capped.push(status);
            }
            counts.set(status, n.min(LIST_COUNT_CAP));
        }
        Ok(ListCounts {
            counts,
            capped,
            counted_secs_ago: counted.map(|age: Duration| age.as_secs_f64()),
        })
    }

    /// The cursor of the page before the page of [`Queue::list`] that starts after
    /// `cursor` ("newer" in a listing newest first): `Ok(Some(None))` when that page is the
    /// first (list it without a cursor), `Ok(Some(Some(c)))` to list it after `c`. It is
    /// read now: jobs that entered the listing since the pages were read shift it, as they
    /// would shift a new first page. `Ok(None)` when no index serves the whole filter (see
    /// [`LIST_SCAN_ROWS`]): its read backwards would not be bounded; and when the read ran
    /// into the list's time limit. It reads the listing backwards from `cursor`: `limit + 1` index
    /// entries, through the same index as the page.
    pub async fn previous_cursor(
        &self,
        filter: &JobFilter,
        cursor: &JobCursor,
        limit: u32,
    ) -> Result<Option<Option<JobCursor>>> {
        if cursor.status() != filter.status {
            return Err(Error::InvalidSetting {
                setting: "cursor",
                reason: format!(
                    "cursor {cursor} continues a listing of another status than this filter's: \
                     start this listing without a cursor"
                ),
            });
        }
        self.store().previous_cursor(filter, cursor, limit).await
    }

    /// Job `id`'s status, `None` when there is no such job. It reads the status alone, so it
    /// answers for a job whose stored values this library cannot decode, where
    /// [`Queue::job`] returns an error.
    pub async fn job_status(&self, id: u64) -> Result<Option<JobStatus>> {
        self.store().job_status(id).await
    }

    /// Counts the queue gauges now, as one worker of the fleet does every few seconds, so
    /// that the counts read next ([`Queue::list_counts`], [`Queue::queue_overview`]) show a
    /// change just made. Bounded: a count reads an index entry of every waiting, running
    /// and failed job (under 0.1 s per 100,000 of them on MariaDB), so it is skipped when the gauges
    /// last counted more than [`RECOUNT_MAX_JOBS`]; the workers' next count, within
    /// seconds, shows the change then. Returns whether it counted. Needs the right to write
    /// the gauges' table.
    pub async fn recount_gauges(&self) -> Result<bool> {
        let store = self.store();
        if store.gauged_jobs().await? > RECOUNT_MAX_JOBS {
            return Ok(false);
        }
        store.count_gauges().await?;
        Ok(true)
    }

    /// Counts the queue gauges if this caller wins the turn. Returns whether it counted.
    async fn count_gauges_now(&self) -> Result<bool> {
        let store = self.store();
        if !store.take_gauge_turn(GAUGE_INTERVAL.mul_f64(0.9)).await? {
            return Ok(false);
        }
        store.count_gauges().await?;
        Ok(true)
    }
}

/// `ids` without repeats, in the order given, if there are at most [`MAX_SELECTION`].
fn selection(ids: &[u64]) -> Result<Vec<u64>> {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    let unique: Vec<u64> = ids.iter().copied().filter(|id| seen.insert(*id)).collect();
    if unique.len() > MAX_SELECTION {
        return Err(Error::InvalidSetting {
            setting: "ids",
            reason: format!(
                "{} jobs were selected, and an action takes at most {MAX_SELECTION} at a time: \
                 select fewer, or act on every job matching a filter",
                unique.len()
            ),
        });
    }
    Ok(unique)
}
