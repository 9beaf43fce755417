//! An operator's writes on one job besides retry and cancel (delete, run now), and the small
//! bounded reads of the job list: the queue and kind names of its pickers, and the counts
//! of its status tabs. Each write is one short statement or transaction on one job, by
//! primary key, guarded by the statuses it may change, as the retry and cancel of
//! `admin.rs` are.

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::Row;

use super::dashboard::{
    bind_all, conditions, list_plan, newest_first, time_limited, where_clause, Arg, LIST_TIME_LIMIT,
};
use super::*;
use crate::model::{JobCursor, JobFilter, JobStatus, StatusCounts};
use crate::store::errors::{classify, DbErrorKind};

/// Makes a `scheduled` job ready now: what promotion does when its `run_at` comes, with
/// `run_at` moved to now so that it keeps its place among the ready jobs of its priority.
/// Its attempts, bounds and error stay: it is the same wait cut short.
pub const RUN_NOW_UPDATE: &str =
    "UPDATE job_queue SET status = 'ready', run_at = UTC_TIMESTAMP(6), \
     updated_at = UTC_TIMESTAMP(6) WHERE id = ? AND status = 'scheduled'";

/// The first queue name after `?` that has a job: one lookup in `(queue, id)`.
pub const NEXT_QUEUE_NAME: &str = "SELECT queue FROM job_queue FORCE INDEX (job_queue_list_queue) \
     WHERE queue > ? ORDER BY queue LIMIT 1";

/// The first kind after `?` that has a job: one lookup in `(kind, id)`.
pub const NEXT_KIND_NAME: &str = "SELECT kind FROM job_queue FORCE INDEX (job_queue_list_kind) \
     WHERE kind > ? ORDER BY kind LIMIT 1";

/// The queue gauges of every queue, summed by status, and how long ago they were counted
/// (the `counted` row; NULL if never: the table starts at 2000-01-01).
const GAUGES_ALL: &str = "\
    SELECT CAST(status AS CHAR), CAST(SUM(jobs) AS SIGNED) FROM job_queue_gauges GROUP BY status \
    UNION ALL \
    SELECT 'counted', IF(refreshed_at < '2001-01-01', NULL, \
        TIMESTAMPDIFF(MICROSECOND, refreshed_at, UTC_TIMESTAMP(6))) \
      FROM job_queue_gauge_refresh WHERE id = 1";

/// [`GAUGES_ALL`] for one queue.
const GAUGES_OF_QUEUE: &str = "\
    SELECT CAST(status AS CHAR), CAST(jobs AS SIGNED) FROM job_queue_gauges WHERE queue = ? \
    UNION ALL \
    SELECT 'counted', IF(refreshed_at < '2001-01-01', NULL, \
        TIMESTAMPDIFF(MICROSECOND, refreshed_at, UTC_TIMESTAMP(6))) \
      FROM job_queue_gauge_refresh WHERE id = 1";

/// The jobs of one status, counted up to the bound `?`: a range of `(status, status_at,
/// id)`, read from the index alone.
pub const CAPPED_STATUS_COUNT: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM job_queue \
     FORCE INDEX (job_queue_status_at) WHERE status = ? LIMIT ?) t";

/// [`CAPPED_STATUS_COUNT`] in one queue: a range of `(queue, status, status_at, id)`.
pub const CAPPED_QUEUE_STATUS_COUNT: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM job_queue \
     FORCE INDEX (job_queue_queue_status_at) WHERE queue = ? AND status = ? LIMIT ?) t";

/// What [`Store::delete_job`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deletion {
    /// The job is gone.
    Done,
    /// The job is running: left alone.
    Running,
    /// There is no such job.
    Missing,
}

/// Which names a picker lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameColumn {
    /// Queue names.
    Queue,
    /// Kind names.
    Kind,
}

impl Store {
    /// Deletes job `id` unless it is running. A blocked job's waiting rows go first, found by
    /// a plain read and deleted by primary key before the job's row is locked: the order of
    /// a wake and of the cancel, which the other order would deadlock with.
    pub(crate) async fn delete_job(&self, id: u64) -> Result<Deletion> {
        on_postgres!(self, operator::delete_job(id));
        transaction!(self, |conn| {
            let (status, unblocked) = super::admin::unblock_and_lock(&mut *conn, id).await?;
            let outcome = match status.as_deref() {
                None => Deletion::Missing,
                // A running job's worker still writes to its row and holds its limits'
                // slots: it is cancelled, not deleted.
                Some("running") => Deletion::Running,
                Some(s) => {
                    sqlx::query("DELETE FROM job_queue WHERE id = ? AND status <> 'running'")
                        .bind(id)
                        .execute(&mut *conn)
                        .await?;
                    if s == "blocked" && !unblocked {
                        // Blocked since the plain read: its waiting row goes with it, so
                        // that the next wake of its key does not spend a round on it.
                        sqlx::query(BLOCKED_DELETE_JOB)
                            .bind(id)
                            .execute(&mut *conn)
                            .await?;
                    }
                    Deletion::Done
                }
            };
            Ok((outcome, true))
        })
    }

    /// Makes job `id` ready now if it is `scheduled`. Returns the rows changed (0 or 1).
    pub(crate) async fn run_now(&self, id: u64) -> Result<u64> {
        on_postgres!(self, operator::run_now(id));
        Ok(sqlx::query(RUN_NOW_UPDATE)
            .bind(id)
            .execute(self.mysql_pool()?)
            .await?
            .rows_affected())
    }

    /// Job `id`'s status, `None` if there is no such job.
    pub(crate) async fn job_status(&self, id: u64) -> Result<Option<JobStatus>> {
        on_postgres!(self, operator::job_status(id));
        let row = sqlx::query("SELECT CAST(status AS CHAR) FROM job_queue WHERE id = ?")
            .bind(id)
            .fetch_optional(self.mysql_pool()?)
            .await?;
        row.map(|r| text(&r, 0)?.parse()).transpose()
    }

    /// The first `limit` names of `column` that have a job, in byte order: one index lookup
    /// per name, each after the one before (`SELECT DISTINCT` would read every entry).
    pub(crate) async fn names(&self, column: NameColumn, limit: usize) -> Result<Vec<String>> {
        on_postgres!(self, operator::names(column, limit));
        let sql = match column {
            NameColumn::Queue => NEXT_QUEUE_NAME,
            NameColumn::Kind => NEXT_KIND_NAME,
        };
        let mut out: Vec<String> = Vec::new();
        while out.len() < limit {
            let after = out.last().map(String::as_str).unwrap_or("");
            let Some(name) = sqlx::query_scalar::<_, Vec<u8>>(sql)
                .bind(after)
                .fetch_optional(self.mysql_pool()?)
                .await?
            else {
                break;
            };
            out.push(String::from_utf8_lossy(&name).into_owned());
        }
        Ok(out)
    }

    /// The queue gauges of `queue` (of every queue with `None`) by status, and how long ago
    /// they were counted (`None`: never).
    pub(crate) async fn gauge_counts(
        &self,
        queue: Option<&str>,
    ) -> Result<(StatusCounts, Option<Duration>)> {
        on_postgres!(self, operator::gauge_counts(queue));
        let rows = match queue {
            Some(q) => {
                sqlx::query(GAUGES_OF_QUEUE)
                    .bind(q)
                    .fetch_all(self.mysql_pool()?)
                    .await?
            }
            None => {
                sqlx::query(GAUGES_ALL)
                    .fetch_all(self.mysql_pool()?)
                    .await?
            }
        };
        let mut counts = StatusCounts::default();
        let mut counted = None;
        for r in &rows {
            let what = text(r, 0)?;
            let n: Option<i64> = r.try_get(1)?;
            if what == "counted" {
                counted = n.map(|us| Duration::from_micros(us.max(0) as u64));
            } else {
                counts.set(what.parse()?, n.unwrap_or(0).max(0) as u64);
            }
        }
        Ok((counts, counted))
    }

    /// The jobs of `status` (in `queue` if given), counted up to `cap + 1`.
    pub(crate) async fn capped_status_count(
        &self,
        queue: Option<&str>,
        status: JobStatus,
        cap: u64,
    ) -> Result<u64> {
        on_postgres!(self, operator::capped_status_count(queue, status, cap));
        let n: i64 = match queue {
            Some(q) => {
                sqlx::query_scalar(CAPPED_QUEUE_STATUS_COUNT)
                    .bind(q)
                    .bind(status.as_str())
                    .bind(cap + 1)
                    .fetch_one(self.mysql_pool()?)
                    .await?
            }
            None => {
                sqlx::query_scalar(CAPPED_STATUS_COUNT)
                    .bind(status.as_str())
                    .bind(cap + 1)
                    .fetch_one(self.mysql_pool()?)
                    .await?
            }
        };
        Ok(n.max(0) as u64)
    }

    /// Where the page before the one starting after `cursor` starts: the cursor of the row
    /// `limit` places before the first row of that page (`Some(None)`: the page before is the
    /// first). `None` when the statement ran into the list's time limit, or when no index
    /// serves the whole filter.
    pub(crate) async fn previous_cursor(
        &self,
        query: &JobFilter,
        cursor: &JobCursor,
        limit: u32,
    ) -> Result<Option<Option<JobCursor>>> {
        on_postgres!(self, operator::previous_cursor(query, cursor, limit));
        // Read backwards, a filter its index does not serve whole could test every job
        // newer than the cursor: a bounded page has no link to the page before.
        if !list_plan(query).served {
            return Ok(None);
        }
        let (sql, args) = previous_statement(query, cursor, limit);
        let sql = time_limited(&sql, LIST_TIME_LIMIT);
        let rows = match bind_all(sqlx::query(&sql), &args)
            .fetch_all(self.mysql_pool()?)
            .await
        {
            Ok(rows) => rows,
            Err(e) if classify(&e) == Some(DbErrorKind::StatementTimeout) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let Some(r) = rows.get(limit as usize) else {
            return Ok(Some(None));
        };
        Ok(Some(Some(JobCursor {
            status: query.status,
            at: match query.status {
                Some(_) => r.try_get::<Option<NaiveDateTime>, _>(1)?,
                None => None,
            },
            id: r.try_get(0)?,
        })))
    }
}

/// The statement of `Queue::previous_cursor`: the listing of `query` read backwards
/// from `cursor` (which is included: it is the last row of the page before), `limit + 1`
/// rows of ids and times. The same indexes and ranges as a page of the list, the other way.
pub fn previous_statement(query: &JobFilter, cursor: &JobCursor, limit: u32) -> (String, Vec<Arg>) {
    let (mut conds, mut args) = conditions(query);
    let index = list_plan(query).index;
    let order = match query.status {
        None => {
            conds.push("id >= ?");
            args.push(Arg::Int(cursor.id));
            "id"
        }
        Some(status) => {
            // Backwards through a listing newest first is forwards in time, and the other
            // way; rows without a time are at the newest end of neither.
            let forwards_in_time = newest_first(status);
            match (forwards_in_time, cursor.at) {
                (true, Some(at)) => {
                    conds.push("(status_at > ? OR (status_at = ? AND id >= ?))");
                    args.extend([Arg::Time(at), Arg::Time(at), Arg::Int(cursor.id)]);
                }
                (true, None) => {
                    conds.push("(status_at IS NOT NULL OR id >= ?)");
                    args.push(Arg::Int(cursor.id));
                }
                (false, Some(at)) => {
                    conds.push(
                        "(status_at < ? OR (status_at = ? AND id <= ?) OR status_at IS NULL)",
                    );
                    args.extend([Arg::Time(at), Arg::Time(at), Arg::Int(cursor.id)]);
                }
                (false, None) => {
                    conds.push("(status_at IS NULL AND id <= ?)");
                    args.push(Arg::Int(cursor.id));
                }
            }
            if forwards_in_time {
                "status_at, id"
            } else {
                "status_at DESC, id DESC"
            }
        }
    };
    args.push(Arg::Int(u64::from(limit) + 1));
    (
        format!(
            "SELECT id, status_at FROM job_queue{index} {} ORDER BY {order} LIMIT ?",
            where_clause(&conds)
        ),
        args,
    )
}
