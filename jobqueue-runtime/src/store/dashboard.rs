//! The operator's statements over a [`JobFilter`]: pages of jobs with keyset pagination, the
//! count and the bulk actions; and the dashboard's overview in one statement, throughput per
//! minute, live workers and periodic schedules. The bulk retry's `SET` is with the other
//! retries in `admin.rs`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::NaiveDateTime;
use sqlx::mysql::MySqlRow;
use sqlx::Row;

use super::*;
use crate::model::OVERVIEW_COUNT_CAP;
use crate::model::{
    BulkProgress, JobCursor, JobDetail, JobFilter, JobPage, JobStatus, JobSummaryPage, PeriodicJob,
    QueueOverview, QueueOverviewPage, ThroughputMinute, WorkerInfo,
};
use crate::store::errors::{classify, DbErrorKind};

/// An argument of a dashboard statement (for the EXPLAIN test of [`dashboard_statements`]).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub enum Arg {
    /// A text value.
    Text(String),
    /// Bytes (task keys).
    Bytes(Vec<u8>),
    /// A number.
    Int(u64),
    /// A time.
    Time(NaiveDateTime),
}

type Query<'q> = sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>;

pub(super) fn bind_all<'q>(mut q: Query<'q>, args: &'q [Arg]) -> Query<'q> {
    for a in args {
        q = match a {
            Arg::Text(s) => q.bind(s.as_str()),
            Arg::Bytes(b) => q.bind(b.as_slice()),
            Arg::Int(n) => q.bind(*n),
            Arg::Time(t) => q.bind(*t),
        };
    }
    q
}

/// `text` for a LIKE pattern with `ESCAPE '!'`: LIKE's own characters and the escape
/// character are escaped with `!`. Not `\`, which is a plain character under the
/// `NO_BACKSLASH_ESCAPES` mode a server may set (and the driver keeps).
fn like_escaped(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        if matches!(c, '%' | '_' | '!') {
            s.push('!');
        }
        s.push(c);
    }
    s
}

/// `prefix%` for `LIKE ? ESCAPE '!'`.
fn like_prefix(p: &str) -> String {
    format!("{}%", like_escaped(p))
}

pub(super) fn where_clause(conds: &[&str]) -> String {
    if conds.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conds.join(" AND "))
    }
}

/// Rows changed per statement of a bulk action: short transactions, few locks at once.
pub(super) const BULK_BATCH: u64 = 1000;

/// How many of the jobs a bulk step changed it names ([`BulkProgress::changed_ids`]): as
/// many as the audit records one by one.
pub(super) const BULK_CHANGED_IDS: usize = crate::AUDIT_JOB_ROWS;

/// How far one call of a bulk action goes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BulkBound {
    /// At most this many rows changed (the last batch is cut to fit).
    pub(crate) rows: u64,
    /// No batch starts after this.
    pub(crate) until: Option<Instant>,
    /// Each batch's read stops at [`LIST_TIME_LIMIT`] ([`Error::FilterTooSlow`]).
    pub(crate) time_limited: bool,
}

impl BulkBound {
    /// Every matching row, with no limit of time: the command line's bulk actions.
    pub(crate) const ALL: BulkBound = BulkBound {
        rows: u64::MAX,
        until: None,
        time_limited: false,
    };
}

/// What the overview reads besides the queues and the capped counts, in one statement: the
/// queue gauges (counted by one worker of the fleet per interval), how long ago they were
/// counted (NULL if never: the table starts at 2000-01-01), the expired leases (the range of
/// running jobs whose lease is over, read now) and the paused queues.
const OVERVIEW_SQL: &str = "\
    SELECT queue, CAST(status AS CHAR), CAST(jobs AS SIGNED), \
      TIMESTAMPDIFF(MICROSECOND, oldest_run_at, UTC_TIMESTAMP(6)) FROM job_queue_gauges \
    UNION ALL \
    SELECT '', 'counted', 0, IF(refreshed_at < '2001-01-01', NULL, \
        TIMESTAMPDIFF(MICROSECOND, refreshed_at, UTC_TIMESTAMP(6))) \
      FROM job_queue_gauge_refresh WHERE id = 1 \
    UNION ALL \
    SELECT queue, 'expired_leases', COUNT(*), NULL \
      FROM job_queue WHERE status = 'running' AND status_at < UTC_TIMESTAMP(6) GROUP BY queue \
    UNION ALL \
    SELECT queue, 'paused', 0, NULL FROM job_queue_pause";

/// The first queue name after `?` that has a job: one index lookup. The overview finds
/// every queue with one of these per queue, each after the one before; so does a recursive
/// query whose step is a correlated `MIN(queue) ... WHERE queue > q`, but on MariaDB that
/// reads every entry of the queue index. (`SELECT DISTINCT queue` over the index, the
/// gauges' [`GAUGE_QUEUES`], is a loose scan on MariaDB 10.11 too: one dive per queue.)
const NEXT_QUEUE_SQL: &str = "\
    SELECT queue FROM job_queue FORCE INDEX (job_queue_list_queue) \
    WHERE queue > ? ORDER BY queue LIMIT 1";

/// The busiest queues by the gauges (jobs scheduled, ready, blocked, running or failed), at
/// most `?`: the gauges' table, a row per queue and status, read once and grouped.
const BUSIEST_QUEUES_SQL: &str = "\
    SELECT queue FROM job_queue_gauges GROUP BY queue ORDER BY SUM(jobs) DESC, queue LIMIT ?";

/// How many queues the gauges count.
const GAUGED_QUEUES_SQL: &str = "SELECT COUNT(DISTINCT queue) FROM job_queue_gauges";

/// The first paused queues by name, at most `?`.
const PAUSED_QUEUES_SQL: &str = "SELECT queue FROM job_queue_pause ORDER BY queue LIMIT ?";

/// The first queue name after `?` (the first bind) that has a job and starts with a prefix:
/// at least the prefix (the second) and below the first name past every name that starts
/// with it (the third). One index lookup; the bounds end the range, so a prefix no queue has
/// reads nothing.
const QUEUE_SEARCH_SQL: &str = "\
    SELECT queue FROM job_queue FORCE INDEX (job_queue_list_queue) \
    WHERE queue > ? AND queue >= ? AND queue < ? ORDER BY queue LIMIT 1";

/// The jobs of one queue and status, counted up to a cap (the `LIMIT`, one more than the
/// cap, is added): a range of the (queue, status, ...) indexes, read from the index alone.
const CAPPED_COUNT_SQL: &str = "\
    SELECT COUNT(*) FROM (SELECT 1 FROM job_queue WHERE queue = ? AND status = ? LIMIT ?) t";

/// The kept per-minute counts of the last `?` minutes (see `store/gauges.rs`,
/// `count_throughput`), and, in the same statement so that both come from one snapshot, where
/// they stop (`counted_to`, the last column of the one row whose first column is NULL).
const THROUGHPUT_KEPT_SQL: &str = "\
    SELECT TIMESTAMPDIFF(MINUTE, minute, UTC_TIMESTAMP(6)), queue, CAST(done AS SIGNED), \
      CAST(failed AS SIGNED), NULL \
    FROM job_queue_throughput WHERE minute >= UTC_TIMESTAMP(6) - INTERVAL ? MINUTE \
    UNION ALL \
    SELECT NULL, NULL, NULL, NULL, counted_to FROM job_queue_throughput_mark WHERE id = 1";

/// The jobs finished since the kept counts stop (`?`, or the start of the chart's window if
/// later), per minute and queue: a range of the `(status, status_at, id)` index, a few
/// seconds of jobs when a worker keeps the counts.
const THROUGHPUT_TAIL_SQL: &str = "\
    SELECT TIMESTAMPDIFF(MINUTE, DATE_FORMAT(status_at, '%Y-%m-%d %H:%i:00'), UTC_TIMESTAMP(6)) \
      AS ago, queue, CAST(SUM(status = 'done') AS SIGNED), CAST(SUM(status = 'failed') AS SIGNED) \
    FROM job_queue FORCE INDEX (job_queue_status_at) \
    WHERE status IN ('done', 'failed') \
      AND status_at >= GREATEST(?, UTC_TIMESTAMP(6) - INTERVAL ? MINUTE) \
    GROUP BY ago, queue";

// The limits written in the statements below.
const _: () =
    assert!(crate::model::DASHBOARD_ROWS == 1000 && crate::model::SUMMARY_ERROR_CHARS == 300);

/// The workers' heartbeat rows, at most [`crate::model::DASHBOARD_ROWS`] (a fleet has a row
/// per live worker, and rows of stopped ones until they are forgotten: a table written by
/// hand could hold any number), with, last, whether the worker holds the maintenance turn
/// (held and not expired). Read by [`worker_from_row`], as is `QUEUE_WORKERS_SQL`, which
/// has the same columns.
const WORKERS_SQL: &str = "\
    SELECT w.owner, w.host, w.pid, w.version, w.queues, w.concurrency, w.running, w.started_at, \
      w.last_seen, TIMESTAMPDIFF(MICROSECOND, w.last_seen, UTC_TIMESTAMP(6)), \
      CAST(t.holder IS NOT NULL AS SIGNED) \
    FROM job_queue_worker w LEFT JOIN job_queue_turn t \
      ON t.name = 'maintenance' AND t.holder = w.owner AND t.expires_at > UTC_TIMESTAMP(6) \
    ORDER BY w.host, w.owner LIMIT 1000";

/// The periodic kinds, at most [`crate::model::DASHBOARD_ROWS`], each with its last job by
/// primary key; the error cut by the server, as in a listing.
const PERIODIC_SQL: &str = "\
    SELECT c.kind, c.schedule, c.last_tick, c.last_job_id, CAST(j.status AS CHAR), \
      LEFT(j.last_error, 300) \
    FROM job_queue_cron c LEFT JOIN job_queue j ON j.id = c.last_job_id ORDER BY c.kind LIMIT 1000";

/// The conditions of `query`, and their arguments in order, for a WHERE clause.
pub(super) fn conditions(query: &JobFilter) -> (Vec<&'static str>, Vec<Arg>) {
    let mut conds = Vec::new();
    let mut args = Vec::new();
    if let Some(s) = query.status {
        conds.push("status = ?");
        args.push(Arg::Text(s.as_str().to_owned()));
    }
    if let Some(q) = &query.queue {
        conds.push("queue = ?");
        args.push(Arg::Text(q.clone()));
    }
    if let Some(k) = &query.kind {
        conds.push("kind = ?");
        args.push(Arg::Text(k.clone()));
    }
    if let Some(p) = query.key_prefix.as_deref().filter(|p| !p.is_empty()) {
        conds.push("task_key LIKE ? ESCAPE '!'");
        args.push(Arg::Bytes(like_prefix(p).into_bytes()));
    }
    if let Some(e) = query.error_contains.as_deref().filter(|e| !e.is_empty()) {
        // Not indexed: bounded by the list's time limit. The explicit collation makes the
        // match ignore case (the column's own is binary).
        conds.push("last_error COLLATE utf8mb4_general_ci LIKE ? ESCAPE '!'");
        args.push(Arg::Text(format!("%{}%", like_escaped(e))));
    }
    if let Some((key, value)) = &query.meta {
        // JSON_EXTRACT and JSON_UNQUOTE behave alike on MySQL's JSON type and MariaDB's
        // (LONGTEXT checked by JSON_VALID): the member's text, unquoted for a string.
        // MariaDB has no `->>` operator, hence the functions.
        if crate::model::valid_meta_key(key) {
            conds.push("JSON_UNQUOTE(JSON_EXTRACT(metadata, ?)) = ?");
            args.push(Arg::Text(format!("$.\"{key}\"")));
            args.push(Arg::Text(value.clone()));
        } else {
            conds.push("FALSE");
        }
    }
    // `created_at` holds the server's UTC time, without a zone.
    if let Some(t) = query.created_from {
        conds.push("created_at >= ?");
        args.push(Arg::Time(t.naive_utc()));
    }
    if let Some(t) = query.created_to {
        conds.push("created_at < ?");
        args.push(Arg::Time(t.naive_utc()));
    }
    // With a status, a range of the listing's index (see `list_plan`).
    if let Some(t) = query.status_time_from {
        conds.push("status_at >= ?");
        args.push(Arg::Time(t.naive_utc()));
    }
    if let Some(t) = query.status_time_to {
        conds.push("status_at < ?");
        args.push(Arg::Time(t.naive_utc()));
    }
    (conds, args)
}

impl Store {
    /// A page of jobs matching `query`, in its order, after `cursor`, at most `limit`.
    pub(crate) async fn list(
        &self,
        query: &JobFilter,
        cursor: Option<&JobCursor>,
        limit: u32,
    ) -> Result<JobPage> {
        on_postgres!(self, dashboard::list(query, cursor, limit));
        let (rows, next, searched) = self.list_rows(JOB_COLUMNS, query, cursor, limit).await?;
        let jobs = rows.iter().map(record_from_row).collect::<Result<_>>()?;
        Ok(JobPage {
            jobs,
            next,
            searched,
        })
    }

    /// [`Store::list`] without the large columns: rows as [`JobSummary`].
    pub(crate) async fn list_summaries(
        &self,
        query: &JobFilter,
        cursor: Option<&JobCursor>,
        limit: u32,
    ) -> Result<JobSummaryPage> {
        on_postgres!(self, dashboard::list_summaries(query, cursor, limit));
        let (rows, next, searched) = self
            .list_rows(&summary_columns(), query, cursor, limit)
            .await?;
        let jobs = rows.iter().map(summary_from_row).collect::<Result<_>>()?;
        Ok(JobSummaryPage {
            jobs,
            next,
            searched,
        })
    }

    /// The rows of one page of a listing, with `columns`, the cursor of the next page, and
    /// how many entries a bounded page read without filling itself
    /// ([`JobPage::searched`]).
    async fn list_rows(
        &self,
        columns: &str,
        query: &JobFilter,
        cursor: Option<&JobCursor>,
        limit: u32,
    ) -> Result<(Vec<MySqlRow>, Option<JobCursor>, Option<u64>)> {
        let cursor_of = |r: &MySqlRow| -> Result<JobCursor> {
            Ok(JobCursor {
                status: query.status,
                at: match query.status {
                    Some(_) => r.try_get::<Option<NaiveDateTime>, _>("status_at")?,
                    None => None,
                },
                id: r.try_get("id")?,
            })
        };
        // A filter its index does not serve whole reads a window of the index's range: its
        // end first, from the index alone, then the matches up to there.
        let edge = if list_plan(query).served {
            None
        } else {
            let (sql, args) = window_statement(query, cursor);
            let rows = self.fetch_limited(&sql, &args, query).await?;
            rows.first().map(cursor_of).transpose()?
        };
        let (sql, args) = match &edge {
            None => list_statement_of(columns, query, cursor, limit),
            Some(edge) => list_statement_within(columns, query, cursor, limit, edge),
        };
        let mut rows = self.fetch_limited(&sql, &args, query).await?;
        if rows.len() > limit as usize {
            rows.truncate(limit as usize);
            let next = rows.last().map(cursor_of).transpose()?;
            return Ok((rows, next, None));
        }
        // The window read whole without a full page: the next page starts after it.
        let searched = edge.as_ref().map(|_| scan_rows(list_plan(query)));
        Ok((rows, edge, searched))
    }

    /// Runs `sql` (one SELECT over the jobs matching `query`) with [`LIST_TIME_LIMIT`]: a
    /// statement that runs into it is [`Error::FilterTooSlow`].
    async fn fetch_limited(
        &self,
        sql: &str,
        args: &[Arg],
        query: &JobFilter,
    ) -> Result<Vec<MySqlRow>> {
        let sql = time_limited(sql, LIST_TIME_LIMIT);
        match bind_all(sqlx::query(&sql), args)
            .fetch_all(self.mysql_pool()?)
            .await
        {
            Ok(rows) => Ok(rows),
            Err(e) if classify(&e) == Some(DbErrorKind::StatementTimeout) => {
                Err(Error::FilterTooSlow {
                    filter: format!("{query:?}"),
                    limit: LIST_TIME_LIMIT,
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// One job by id, every large column read as capped text.
    pub(crate) async fn job_detail(&self, id: u64) -> Result<Option<JobDetail>> {
        on_postgres!(self, dashboard::job_detail(id));
        let row = sqlx::query(&job_detail_sql())
            .bind(id)
            .fetch_optional(self.mysql_pool()?)
            .await?;
        row.as_ref().map(detail_from_row).transpose()
    }

    /// How many jobs match `query`.
    pub(crate) async fn count(&self, query: &JobFilter) -> Result<u64> {
        on_postgres!(self, dashboard::count(query));
        let (conds, args) = conditions(query);
        let sql = format!("SELECT COUNT(*) FROM job_queue {}", where_clause(&conds));
        let n: i64 = bind_all(sqlx::query(&sql), &args)
            .fetch_one(self.mysql_pool()?)
            .await?
            .try_get(0)?;
        Ok(n as u64)
    }

    /// How many jobs match `query`, counted up to `cap + 1`, within [`LIST_TIME_LIMIT`].
    pub(crate) async fn count_capped(&self, query: &JobFilter, cap: u64) -> Result<u64> {
        on_postgres!(self, dashboard::count_capped(query, cap));
        let (sql, args) = capped_count_statement(query, cap);
        let rows = self.fetch_limited(&sql, &args, query).await?;
        let n: i64 = match rows.first() {
            Some(r) => r.try_get(0)?,
            None => 0,
        };
        Ok(n.max(0) as u64)
    }

    /// Cancels every `scheduled`, `ready` or `blocked` job matching `query`, within `bound`.
    pub(crate) async fn cancel_matching(
        &self,
        query: &JobFilter,
        bound: BulkBound,
    ) -> Result<BulkProgress> {
        on_postgres!(self, dashboard::cancel_matching(query, bound));
        self.bulk(
            "UPDATE job_queue SET status = 'cancelled', finished_at = UTC_TIMESTAMP(6), \
             updated_at = UTC_TIMESTAMP(6), last_error = 'cancelled by an operator before it ran'",
            query,
            &[JobStatus::Scheduled, JobStatus::Ready, JobStatus::Blocked],
            bound,
        )
        .await
    }

    /// Runs `set` over the jobs matching `query` whose status is one of `statuses`, in
    /// batches of [`BULK_BATCH`], until none is left or `bound` is reached.
    ///
    /// Each batch is a plain read of the next ids in the listing's order of one status
    /// (keyset: after the last row of the batch before, so no row is read twice however
    /// many do not match), then an `UPDATE` of those ids that checks their status again: a
    /// transaction locks at most one batch of rows, by primary key.
    pub(super) async fn bulk(
        &self,
        set: &str,
        query: &JobFilter,
        statuses: &[JobStatus],
        bound: BulkBound,
    ) -> Result<BulkProgress> {
        let mut changed = 0;
        let mut changed_ids = Vec::new();
        for &status in statuses {
            if query.status.is_some_and(|s| s != status) {
                continue;
            }
            let of_status = JobFilter {
                status: Some(status),
                ..query.clone()
            };
            let mut cursor: Option<JobCursor> = None;
            loop {
                if changed >= bound.rows || bound.until.is_some_and(|t| Instant::now() >= t) {
                    return Ok(BulkProgress {
                        changed,
                        complete: false,
                        changed_ids,
                    });
                }
                let batch = BULK_BATCH.min(bound.rows - changed).max(1) as u32;
                let (sql, args) = list_statement_of("id", &of_status, cursor.as_ref(), batch);
                let rows = if bound.time_limited {
                    self.fetch_limited(&sql, &args, &of_status).await?
                } else {
                    bind_all(sqlx::query(&sql), &args)
                        .fetch_all(self.mysql_pool()?)
                        .await?
                };
                let more = rows.len() > batch as usize;
                let rows = &rows[..rows.len().min(batch as usize)];
                let Some(last) = rows.last() else {
                    break;
                };
                cursor = Some(JobCursor {
                    status: Some(status),
                    at: last.try_get("status_at")?,
                    id: last.try_get("id")?,
                });
                let ids = rows
                    .iter()
                    .map(|r| r.try_get::<u64, _>("id"))
                    .collect::<sqlx::Result<Vec<_>>>()?;
                // The rows still of the status are locked first, so that the jobs changed
                // are known (for the audit), not only their number.
                let done: Vec<u64> = transaction!(self, |conn| {
                    let select = format!(
                        "SELECT id FROM job_queue WHERE id IN ({}) AND status = ? FOR UPDATE",
                        placeholders(padded_len(ids.len()))
                    );
                    let mut q = sqlx::query_scalar::<_, u64>(&select).persistent(false);
                    for id in padded(&ids) {
                        q = q.bind(id);
                    }
                    let locked = q.bind(status.as_str()).fetch_all(&mut *conn).await?;
                    if !locked.is_empty() {
                        let update = format!(
                            "{set} WHERE id IN ({}) AND status = ?",
                            placeholders(padded_len(locked.len()))
                        );
                        let mut q = sqlx::query(&update).persistent(false);
                        for id in padded(&locked) {
                            q = q.bind(id);
                        }
                        q.bind(status.as_str()).execute(&mut *conn).await?;
                    }
                    Ok((locked, true))
                })?;
                changed += done.len() as u64;
                let room = BULK_CHANGED_IDS.saturating_sub(changed_ids.len());
                changed_ids.extend(done.into_iter().take(room));
                if !more {
                    break;
                }
            }
        }
        Ok(BulkProgress {
            changed,
            complete: true,
            changed_ids,
        })
    }

    /// Every queue's counts by status as the queue gauges last counted them, its pause,
    /// oldest ready job and expired leases; and how long ago the gauges were counted
    /// (`None`: never). One index lookup per queue to find the queues.
    pub(crate) async fn queue_overview(&self) -> Result<(Vec<QueueOverview>, Option<Duration>)> {
        on_postgres!(self, dashboard::queue_overview());
        let rows = sqlx::query(OVERVIEW_SQL)
            .fetch_all(self.mysql_pool()?)
            .await?;
        let (mut by_name, counted) = fold_overview(&rows)?;
        let mut after = String::new();
        while let Some(q) = sqlx::query_scalar::<_, Vec<u8>>(NEXT_QUEUE_SQL)
            .bind(after.as_str())
            .fetch_optional(self.mysql_pool()?)
            .await?
        {
            after = String::from_utf8_lossy(&q).into_owned();
            by_name
                .entry(after.clone())
                .or_insert_with(|| QueueOverview {
                    queue: after.clone(),
                    ..Default::default()
                });
        }
        let mut out: Vec<QueueOverview> = by_name.into_values().collect();
        out.sort_by(|a, b| a.queue.cmp(&b.queue));
        Ok((out, counted))
    }

    /// At most `limit` queues with their figures as [`Store::queue_overview`] reads them:
    /// the queues whose names start with `search`, or else the busiest by the gauges, then
    /// the paused ones, then (while there is room) the first others by name. Its cost
    /// depends on `limit`, not on how many queues or jobs there are (but for the one read of
    /// the gauges' table, a row per queue and status).
    pub(crate) async fn queue_overview_page(
        &self,
        limit: usize,
        search: Option<&str>,
    ) -> Result<(QueueOverviewPage, Option<Duration>)> {
        on_postgres!(self, dashboard::queue_overview_page(limit, search));
        let mut names: Vec<String> = Vec::new();
        let mut more = 0;
        let mut more_idle = false;
        match search.filter(|s| !s.is_empty()) {
            Some(prefix) => {
                let Some(end) = prefix_end(prefix) else {
                    return Ok((QueueOverviewPage::default(), None));
                };
                let mut after = String::new();
                while let Some(q) = sqlx::query_scalar::<_, Vec<u8>>(QUEUE_SEARCH_SQL)
                    .bind(after.as_str())
                    .bind(prefix)
                    .bind(end.as_str())
                    .fetch_optional(self.mysql_pool()?)
                    .await?
                {
                    if names.len() == limit {
                        more_idle = true;
                        break;
                    }
                    after = String::from_utf8_lossy(&q).into_owned();
                    names.push(after.clone());
                }
            }
            None => {
                let busiest: Vec<Vec<u8>> = sqlx::query_scalar(BUSIEST_QUEUES_SQL)
                    .bind(limit as u64)
                    .fetch_all(self.mysql_pool()?)
                    .await?;
                names.extend(
                    busiest
                        .iter()
                        .map(|q| String::from_utf8_lossy(q).into_owned()),
                );
                let gauged: i64 = sqlx::query_scalar(GAUGED_QUEUES_SQL)
                    .fetch_one(self.mysql_pool()?)
                    .await?;
                more = (gauged.max(0) as u64).saturating_sub(names.len() as u64);
                let paused: Vec<Vec<u8>> = sqlx::query_scalar(PAUSED_QUEUES_SQL)
                    .bind(limit as u64)
                    .fetch_all(self.mysql_pool()?)
                    .await?;
                for q in paused {
                    let q = String::from_utf8_lossy(&q).into_owned();
                    if !names.contains(&q) {
                        names.push(q);
                    }
                }
                // Queues the gauges do not count (only done or cancelled jobs), while there
                // is room: one index lookup each, a bounded number of them.
                let mut after = String::new();
                let mut steps = 0;
                let mut every_queue_seen = false;
                while names.len() < limit && steps < 3 * limit {
                    steps += 1;
                    let Some(q) = sqlx::query_scalar::<_, Vec<u8>>(NEXT_QUEUE_SQL)
                        .bind(after.as_str())
                        .fetch_optional(self.mysql_pool()?)
                        .await?
                    else {
                        every_queue_seen = true;
                        break;
                    };
                    after = String::from_utf8_lossy(&q).into_owned();
                    if !names.contains(&after) {
                        names.push(after.clone());
                    }
                }
                // Stopped by the limit rather than at the last queue: there may be more.
                more_idle = !every_queue_seen;
            }
        }
        let (sql, args) = overview_of_statement(&names);
        let rows = bind_all(sqlx::query(&sql).persistent(false), &args)
            .fetch_all(self.mysql_pool()?)
            .await?;
        let (mut by_name, counted) = fold_overview(&rows)?;
        let mut queues: Vec<QueueOverview> = names
            .into_iter()
            .map(|name| {
                by_name.remove(&name).unwrap_or(QueueOverview {
                    queue: name,
                    ..Default::default()
                })
            })
            .collect();
        queues.sort_by(|a, b| a.queue.cmp(&b.queue));
        Ok((
            QueueOverviewPage {
                queues,
                more,
                more_idle,
            },
            counted,
        ))
    }

    /// The jobs of `queue` in `status`, counted up to `cap + 1`.
    pub(crate) async fn capped_count(
        &self,
        queue: &str,
        status: JobStatus,
        cap: u64,
    ) -> Result<u64> {
        on_postgres!(self, dashboard::capped_count(queue, status, cap));
        let n: i64 = sqlx::query_scalar(CAPPED_COUNT_SQL)
            .bind(queue)
            .bind(status.as_str())
            .bind(cap + 1)
            .fetch_one(self.mysql_pool()?)
            .await?;
        Ok(n.max(0) as u64)
    }

    /// Jobs that ended `done` or `failed` per minute and queue over the last `minutes`:
    /// the kept counts, plus the jobs finished since they stop. When nobody kept them for
    /// [`THROUGHPUT_STALE_AFTER`] (no worker of this release runs), counts them first, if
    /// this user may.
    pub(crate) async fn throughput(&self, minutes: u32) -> Result<Vec<ThroughputMinute>> {
        on_postgres!(self, dashboard::throughput(minutes));
        let (mut kept, mut counted_to, age) = self.kept_throughput(minutes).await?;
        if age.is_none_or(|a| a > THROUGHPUT_STALE_AFTER) {
            match self.count_throughput().await {
                Ok(()) => (kept, counted_to, _) = self.kept_throughput(minutes).await?,
                Err(e) => tracing::debug!(error = %e, "cannot count the throughput"),
            }
        }
        let since = counted_to.unwrap_or_default();
        let rows = sqlx::query(THROUGHPUT_TAIL_SQL)
            .bind(since)
            .bind(minutes)
            .fetch_all(self.mysql_pool()?)
            .await?;
        for r in &rows {
            let m = ThroughputMinute {
                minutes_ago: r.try_get::<i64, _>(0)?.max(0) as u32,
                queue: text(r, 1)?,
                done: r.try_get::<i64, _>(2)?.max(0) as u64,
                failed: r.try_get::<i64, _>(3)?.max(0) as u64,
            };
            match kept
                .iter_mut()
                .find(|k| k.minutes_ago == m.minutes_ago && k.queue == m.queue)
            {
                Some(k) => {
                    k.done += m.done;
                    k.failed += m.failed;
                }
                None => kept.push(m),
            }
        }
        kept.retain(|m| m.minutes_ago < minutes);
        kept.sort_by(|a, b| (a.minutes_ago, &a.queue).cmp(&(b.minutes_ago, &b.queue)));
        Ok(kept)
    }

    /// The kept per-minute counts of the last `minutes`, where they stop, and how long ago
    /// that is.
    async fn kept_throughput(
        &self,
        minutes: u32,
    ) -> Result<(
        Vec<ThroughputMinute>,
        Option<NaiveDateTime>,
        Option<Duration>,
    )> {
        let rows = sqlx::query(THROUGHPUT_KEPT_SQL)
            .bind(minutes)
            .fetch_all(self.mysql_pool()?)
            .await?;
        let mut kept = Vec::with_capacity(rows.len());
        let mut counted_to = None;
        for r in &rows {
            match r.try_get::<Option<i64>, _>(0)? {
                Some(ago) => kept.push(ThroughputMinute {
                    minutes_ago: ago.max(0) as u32,
                    queue: text(r, 1)?,
                    done: r.try_get::<i64, _>(2)?.max(0) as u64,
                    failed: r.try_get::<i64, _>(3)?.max(0) as u64,
                }),
                None => counted_to = r.try_get::<Option<NaiveDateTime>, _>(4)?,
            }
        }
        let now = chrono::Utc::now().naive_utc();
        let age = counted_to
            .filter(|t| t.and_utc().timestamp() > 946_684_800)
            .map(|t| (now - t).to_std().unwrap_or_default());
        Ok((kept, counted_to, age))
    }

    /// The workers' heartbeat rows; those not seen for `gone_after` are marked gone.
    pub(crate) async fn workers(&self, gone_after: Duration) -> Result<Vec<WorkerInfo>> {
        on_postgres!(self, dashboard::workers(gone_after));
        let rows = sqlx::query(WORKERS_SQL)
            .fetch_all(self.mysql_pool()?)
            .await?;
        rows.iter()
            .map(|r| worker_from_row(r, gone_after))
            .collect()
    }

    /// Every periodic kind the schedulers have recorded.
    pub(crate) async fn periodic_jobs(&self) -> Result<Vec<PeriodicJob>> {
        on_postgres!(self, dashboard::periodic_jobs());
        let rows = sqlx::query(PERIODIC_SQL)
            .fetch_all(self.mysql_pool()?)
            .await?;
        rows.iter().map(periodic_from_row).collect()
    }

    /// Runs EXPLAIN on one of [`dashboard_statements`] and returns its rows as
    /// (table, type, key, rows, Extra). Not a stable API.
    pub async fn explain(
        &self,
        sql: &str,
        args: &[Arg],
    ) -> Result<Vec<(String, String, Option<String>, Option<u64>, String)>> {
        on_postgres!(self, dashboard::explain(sql, args));
        let explain = format!("EXPLAIN {sql}");
        let rows = bind_all(sqlx::query(&explain), args)
            .fetch_all(self.mysql_pool()?)
            .await?;
        rows.iter()
            .map(|r| {
                let opt = |name: &str| -> Option<String> {
                    r.try_get::<Option<String>, _>(name)
                        .ok()
                        .flatten()
                        .or_else(|| {
                            r.try_get::<Option<Vec<u8>>, _>(name)
                                .ok()
                                .flatten()
                                .map(|b| String::from_utf8_lossy(&b).into_owned())
                        })
                };
                let rows = opt("rows")
                    .and_then(|s| s.parse().ok())
                    .or_else(|| r.try_get::<Option<u64>, _>("rows").ok().flatten());
                Ok((
                    opt("table").unwrap_or_default(),
                    opt("type").unwrap_or_default(),
                    opt("key"),
                    rows,
                    opt("Extra").unwrap_or_default(),
                ))
            })
            .collect()
    }
}

/// The statements of the dashboard's pages for `query`, with their arguments, for checking
/// their plans with EXPLAIN. The first is a page of the job list as it is read; for a filter
/// its index does not serve whole, the last (`LIMIT 1 OFFSET ?`) is the read of where the
/// page's window ends.
pub fn dashboard_statements(
    query: &JobFilter,
    cursor: Option<&JobCursor>,
) -> Vec<(String, Vec<Arg>)> {
    // The bulk actions' confirmation counts jobs of one status at a time.
    let counted = JobFilter {
        status: query.status.or(Some(JobStatus::Failed)),
        ..query.clone()
    };
    let (conds, args) = conditions(&counted);
    // A filter its index does not serve whole: the page up to a window's end (here far
    // along the listing: the oldest id, a time long past or far ahead), and, last, the
    // read of that end.
    let page = if list_plan(query).served {
        list_statement(query, cursor, 50)
    } else {
        let year = |y| {
            chrono::NaiveDate::from_ymd_opt(y, 1, 1)
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .unwrap_or_default()
        };
        let edge = JobCursor {
            status: query.status,
            at: query.status.map(|s| {
                if newest_first(s) {
                    year(2000)
                } else {
                    year(2100)
                }
            }),
            id: 1,
        };
        list_statement_within(JOB_COLUMNS, query, cursor, 50, &edge)
    };
    let mut statements = vec![
        page,
        (
            format!("SELECT COUNT(*) FROM job_queue {}", where_clause(&conds)),
            args,
        ),
        (OVERVIEW_SQL.to_owned(), Vec::new()),
        (NEXT_QUEUE_SQL.to_owned(), vec![Arg::Text("q1".into())]),
        (
            CAPPED_COUNT_SQL.to_owned(),
            vec![
                Arg::Text("q0".into()),
                Arg::Text("done".into()),
                Arg::Int(OVERVIEW_COUNT_CAP + 1),
            ],
        ),
        (THROUGHPUT_KEPT_SQL.to_owned(), vec![Arg::Int(60)]),
        (
            THROUGHPUT_TAIL_SQL.to_owned(),
            vec![Arg::Text("2026-01-01 00:00:00".into()), Arg::Int(60)],
        ),
        (WORKERS_SQL.to_owned(), Vec::new()),
        (PERIODIC_SQL.to_owned(), Vec::new()),
        list_statement_of(&summary_columns(), query, cursor, 50),
        (job_detail_sql(), vec![Arg::Int(1)]),
        (BUSIEST_QUEUES_SQL.to_owned(), vec![Arg::Int(50)]),
        (GAUGED_QUEUES_SQL.to_owned(), Vec::new()),
        (PAUSED_QUEUES_SQL.to_owned(), vec![Arg::Int(50)]),
        (
            QUEUE_SEARCH_SQL.to_owned(),
            vec![
                Arg::Text(String::new()),
                Arg::Text("q1".into()),
                Arg::Text("q2".into()),
            ],
        ),
        overview_of_statement(&["q0".to_owned(), "q1".to_owned()]),
    ];
    if !list_plan(query).served {
        statements.push(window_statement(query, cursor));
    }
    statements
}

/// How old the kept throughput counts may be before a reader counts them itself: a worker
/// of this release adds to them with the queue gauges, every few seconds.
pub(crate) const THROUGHPUT_STALE_AFTER: Duration = Duration::from_secs(60);

/// How long a page of [`Store::list`] may read: a filter that no index serves (metadata, a
/// time range, a kind with a status...) reads rows one by one, and is stopped there rather
/// than scan a large table.
pub(crate) const LIST_TIME_LIMIT: Duration = Duration::from_secs(1);

/// `sql` (one SELECT) with a time limit the server enforces. MariaDB runs the `/*M!`
/// comment, `SET STATEMENT max_statement_time = <seconds> FOR`, and reads the `/*+` hint
/// as a comment (before 12.0); MySQL reads the first as a comment and obeys the hint,
/// `MAX_EXECUTION_TIME(<milliseconds>)`, which it applies to a read-only SELECT only.
/// Either stops the statement with an error ([`DbErrorKind::StatementTimeout`]).
pub(super) fn time_limited(sql: &str, limit: Duration) -> String {
    let hinted = sql.replacen(
        "SELECT ",
        &format!("SELECT /*+ MAX_EXECUTION_TIME({}) */ ", limit.as_millis()),
        1,
    );
    format!(
        "/*M! SET STATEMENT max_statement_time = {} FOR */ {hinted}",
        limit.as_secs_f64()
    )
}

/// Whether a listing of `status` goes newest first (finished jobs, by when they finished)
/// rather than next first (waiting jobs by when they are due, running ones by when their
/// lease expires).
pub(super) fn newest_first(status: JobStatus) -> bool {
    matches!(
        status,
        JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled
    )
}

/// The index a listing of a filter reads, and whether it serves the whole filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ListPlan {
    /// The index forced (`""`: the primary key, or the optimizer's choice for a key prefix).
    pub(crate) index: &'static str,
    /// Whether the index's range holds only matching jobs. If not, the rest of the filter
    /// is tested row by row, and a page reads at most [`scan_rows`] entries of the range
    /// ([`JobPage::searched`]).
    pub(crate) served: bool,
    /// The index's columns that the filter's queue and kind are equalities on.
    queue: bool,
    kind: bool,
}

/// Which index serves a listing of `query`, in the listing's order, with no sort:
///
/// | filter | index |
/// |---|---|
/// | a status (and a time range in it) | `(status, status_at, id)` |
/// | a status and a queue | `(queue, status, status_at, id)` |
/// | a status and a kind (a queue too: tested row by row) | `(kind, status, status_at, id)` |
/// | a queue / a kind / both | `(queue, id)` / `(kind, id)` / `(queue, kind, id)` |
/// | nothing, or only a key prefix | the primary key; the key index |
///
/// Metadata, error text, enqueue times, a key prefix with other fields, and a time range
/// without a status are tested row by row.
pub(crate) fn list_plan(query: &JobFilter) -> ListPlan {
    let queue = query.queue.is_some();
    let kind = query.kind.is_some();
    let key = query.key_prefix.as_deref().is_some_and(|p| !p.is_empty());
    let residual = query
        .error_contains
        .as_deref()
        .is_some_and(|e| !e.is_empty())
        || query.meta.is_some()
        || query.created_from.is_some()
        || query.created_to.is_some();
    match query.status {
        Some(_) => {
            let (index, queue_used) = if kind {
                (" FORCE INDEX (job_queue_kind_status_at)", false)
            } else if queue {
                (" FORCE INDEX (job_queue_queue_status_at)", true)
            } else {
                (" FORCE INDEX (job_queue_status_at)", false)
            };
            ListPlan {
                index,
                served: !residual && !key && (queue_used || !queue),
                queue: queue_used,
                kind,
            }
        }
        None => {
            let timed = query.status_time_from.is_some() || query.status_time_to.is_some();
            let index = match (queue, kind) {
                (true, true) => " FORCE INDEX (job_queue_list_queue_kind)",
                (true, false) => " FORCE INDEX (job_queue_list_queue)",
                (false, true) => " FORCE INDEX (job_queue_list_kind)",
                (false, false) => "",
            };
            ListPlan {
                index,
                // A key prefix alone reads the key index's range and sorts its matches.
                served: !residual && !timed && (!key || !(queue || kind)),
                queue,
                kind,
            }
        }
    }
}

/// The most jobs a page of a listing tests when its index does not serve the whole filter
/// (see [`JobPage::searched`]): jobs in id order are neighbours in the table, jobs read
/// through another index each a row of their own.
pub(crate) fn scan_rows(plan: ListPlan) -> u64 {
    if plan.index.is_empty() {
        crate::operator::LIST_SCAN_ROWS
    } else {
        crate::operator::LIST_SCAN_INDEXED_ROWS
    }
}

/// The part of `query` that `plan`'s index serves: its equalities and, with a status, the
/// range of the status time.
fn served_part(query: &JobFilter, plan: ListPlan) -> JobFilter {
    let timed = query.status.is_some();
    JobFilter {
        status: query.status,
        queue: query.queue.clone().filter(|_| plan.queue),
        kind: query.kind.clone().filter(|_| plan.kind),
        status_time_from: query.status_time_from.filter(|_| timed),
        status_time_to: query.status_time_to.filter(|_| timed),
        ..JobFilter::default()
    }
}

/// A listing's conditions and order, before its columns and limit.
struct Listing {
    index: &'static str,
    conds: Vec<&'static str>,
    args: Vec<Arg>,
    order: &'static str,
}

/// The rows of `query` after `cursor`, in the listing's order, through `index`.
fn listing(query: &JobFilter, cursor: Option<&JobCursor>, index: &'static str) -> Listing {
    let (mut conds, mut args) = conditions(query);
    let order = match query.status {
        None => {
            if let Some(c) = cursor {
                conds.push("id < ?");
                args.push(Arg::Int(c.id));
            }
            "id DESC"
        }
        Some(status) => {
            let desc = newest_first(status);
            if let Some(c) = cursor {
                match (desc, c.at) {
                    (true, Some(at)) => {
                        conds.push(
                            "(status_at < ? OR (status_at = ? AND id < ?) OR status_at IS NULL)",
                        );
                        args.extend([Arg::Time(at), Arg::Time(at), Arg::Int(c.id)]);
                    }
                    (true, None) => {
                        conds.push("(status_at IS NULL AND id < ?)");
                        args.push(Arg::Int(c.id));
                    }
                    (false, Some(at)) => {
                        conds.push("(status_at > ? OR (status_at = ? AND id > ?))");
                        args.extend([Arg::Time(at), Arg::Time(at), Arg::Int(c.id)]);
                    }
                    (false, None) => {
                        conds.push("(status_at IS NOT NULL OR id > ?)");
                        args.push(Arg::Int(c.id));
                    }
                }
            }
            if desc {
                "status_at DESC, id DESC"
            } else {
                "status_at, id"
            }
        }
    };
    Listing {
        index,
        conds,
        args,
        order,
    }
}

/// The statement of one page of [`Store::list`] (`limit + 1` rows: one more tells whether
/// there is a next page), through the index of [`list_plan`], read forwards or backwards
/// from the cursor: no sort, and a filter that matches nothing ends at the end of its
/// range, not at the end of the table.
///
/// Without a status: newest first by id. Each (x, id) index is in id order within one value
/// of x: reading it backwards gives a page with no sort, whatever else is filtered row by
/// row. Left to itself the optimizer may prefer the claim index for a queue, and sort every
/// match. A key prefix alone goes through the key index and sorts only the keys it matches.
///
/// With a status: by `(status_at, id)`. `status_at` is NULL only on a row that lost its
/// time (it sorts first in an ascending index): such rows come first in a listing next
/// first, last in a listing newest first.
pub(crate) fn list_statement(
    query: &JobFilter,
    cursor: Option<&JobCursor>,
    limit: u32,
) -> (String, Vec<Arg>) {
    list_statement_of(JOB_COLUMNS, query, cursor, limit)
}

/// [`list_statement`] reading `columns` (and `status_at`).
pub(crate) fn list_statement_of(
    columns: &str,
    query: &JobFilter,
    cursor: Option<&JobCursor>,
    limit: u32,
) -> (String, Vec<Arg>) {
    let l = listing(query, cursor, list_plan(query).index);
    finish(columns, l, limit)
}

fn finish(columns: &str, l: Listing, limit: u32) -> (String, Vec<Arg>) {
    let Listing {
        index,
        conds,
        mut args,
        order,
    } = l;
    args.push(Arg::Int(u64::from(limit) + 1));
    (
        format!(
            "SELECT {columns}, status_at FROM job_queue{index} {} ORDER BY {order} LIMIT ?",
            where_clause(&conds)
        ),
        args,
    )
}

/// Where a bounded page of `query` (one [`list_plan`] does not serve whole) stops: the
/// [`scan_rows`]th entry after `cursor` of the range its index serves, read from the
/// index alone (`id`, and `status_at` with a status); no row when the range ends sooner.
pub(crate) fn window_statement(
    query: &JobFilter,
    cursor: Option<&JobCursor>,
) -> (String, Vec<Arg>) {
    let plan = list_plan(query);
    let index = if plan.index.is_empty() {
        " FORCE INDEX (PRIMARY)"
    } else {
        plan.index
    };
    let Listing {
        index,
        conds,
        mut args,
        order,
    } = listing(&served_part(query, plan), cursor, index);
    args.push(Arg::Int(scan_rows(plan) - 1));
    // `status_at` is in the status indexes only: the others' windows read ids alone.
    let columns = if query.status.is_some() {
        "id, status_at"
    } else {
        "id"
    };
    (
        format!(
            "SELECT {columns} FROM job_queue{index} {} ORDER BY {order} LIMIT 1 OFFSET ?",
            where_clause(&conds)
        ),
        args,
    )
}

/// [`list_statement_of`] ending at `edge` (included), the last entry of the window of
/// [`window_statement`].
pub(crate) fn list_statement_within(
    columns: &str,
    query: &JobFilter,
    cursor: Option<&JobCursor>,
    limit: u32,
    edge: &JobCursor,
) -> (String, Vec<Arg>) {
    let mut l = listing(query, cursor, list_plan(query).index);
    match query.status {
        None => {
            l.conds.push("id >= ?");
            l.args.push(Arg::Int(edge.id));
        }
        Some(status) => match (newest_first(status), edge.at) {
            // Newest first: every row from the newest down to the edge; rows without a
            // time come last.
            (true, Some(at)) => {
                l.conds
                    .push("(status_at > ? OR (status_at = ? AND id >= ?))");
                l.args
                    .extend([Arg::Time(at), Arg::Time(at), Arg::Int(edge.id)]);
            }
            (true, None) => {
                l.conds.push("(status_at IS NOT NULL OR id >= ?)");
                l.args.push(Arg::Int(edge.id));
            }
            // Next first: rows without a time first, then up to the edge.
            (false, Some(at)) => {
                l.conds
                    .push("(status_at < ? OR (status_at = ? AND id <= ?) OR status_at IS NULL)");
                l.args
                    .extend([Arg::Time(at), Arg::Time(at), Arg::Int(edge.id)]);
            }
            (false, None) => {
                l.conds.push("(status_at IS NULL AND id <= ?)");
                l.args.push(Arg::Int(edge.id));
            }
        },
    }
    finish(columns, l, limit)
}

/// What the overview reads about the queues `names`: [`OVERVIEW_SQL`] narrowed to them.
fn overview_of_statement(names: &[String]) -> (String, Vec<Arg>) {
    if names.is_empty() {
        return (
            "SELECT '', 'counted', 0, IF(refreshed_at < '2001-01-01', NULL, \
               TIMESTAMPDIFF(MICROSECOND, refreshed_at, UTC_TIMESTAMP(6))) \
             FROM job_queue_gauge_refresh WHERE id = 1"
                .to_owned(),
            Vec::new(),
        );
    }
    let list = placeholders(names.len());
    let sql = format!(
        "SELECT queue, CAST(status AS CHAR), CAST(jobs AS SIGNED), \
           TIMESTAMPDIFF(MICROSECOND, oldest_run_at, UTC_TIMESTAMP(6)) FROM job_queue_gauges \
           WHERE queue IN ({list}) \
         UNION ALL \
         SELECT '', 'counted', 0, IF(refreshed_at < '2001-01-01', NULL, \
             TIMESTAMPDIFF(MICROSECOND, refreshed_at, UTC_TIMESTAMP(6))) \
           FROM job_queue_gauge_refresh WHERE id = 1 \
         UNION ALL \
         SELECT queue, 'expired_leases', COUNT(*), NULL FROM job_queue \
           WHERE status = 'running' AND status_at < UTC_TIMESTAMP(6) AND queue IN ({list}) \
           GROUP BY queue \
         UNION ALL \
         SELECT queue, 'paused', 0, NULL FROM job_queue_pause WHERE queue IN ({list})"
    );
    let args: Vec<Arg> = names.iter().map(|n| Arg::Text(n.clone())).collect();
    let args = [args.clone(), args.clone(), args].concat();
    (sql, args)
}

/// The rows of [`OVERVIEW_SQL`] (or [`overview_of_statement`]) by queue, and how long
/// ago the gauges were counted.
fn fold_overview(rows: &[MySqlRow]) -> Result<(HashMap<String, QueueOverview>, Option<Duration>)> {
    let mut out: HashMap<String, QueueOverview> = HashMap::new();
    let mut counted = None;
    for r in rows {
        let q = text(r, 0)?;
        let what = text(r, 1)?;
        let n = r.try_get::<i64, _>(2)?.max(0) as u64;
        let us: Option<i64> = r.try_get(3)?;
        if what == "counted" {
            counted = us.map(|us| Duration::from_micros(us.max(0) as u64));
            continue;
        }
        let s = out.entry(q).or_insert_with_key(|q| QueueOverview {
            queue: q.clone(),
            ..Default::default()
        });
        match what.as_str() {
            "expired_leases" => s.expired_leases = n,
            "paused" => s.paused = true,
            status => {
                let status = status.parse::<JobStatus>()?;
                s.counts.set(status, n);
                if status == JobStatus::Ready {
                    s.oldest_ready_secs = us.map(|us| us.max(0) as f64 / 1e6);
                }
            }
        }
    }
    Ok((out, counted))
}

/// The first text after every text that starts with `prefix` (in byte order: queue names
/// compare as ASCII bytes); `None` when no queue name can start with it (it is not ASCII).
pub(super) fn prefix_end(prefix: &str) -> Option<String> {
    if !prefix.is_ascii() {
        return None;
    }
    let mut bytes = prefix.as_bytes().to_vec();
    while let Some(last) = bytes.pop() {
        if last < 0x7f {
            bytes.push(last + 1);
            return String::from_utf8(bytes).ok();
        }
    }
    // Every byte is the last ASCII one: no bound above (queue names are ASCII).
    Some("\u{7f}".repeat(prefix.len() + 1))
}

/// The count of [`Store::count_capped`]: the matching rows, read up to `cap + 1`.
pub(crate) fn capped_count_statement(query: &JobFilter, cap: u64) -> (String, Vec<Arg>) {
    let (conds, mut args) = conditions(query);
    args.push(Arg::Int(cap.saturating_add(1)));
    (
        format!(
            "SELECT COUNT(*) FROM (SELECT 1 FROM job_queue {} LIMIT ?) t",
            where_clause(&conds)
        ),
        args,
    )
}

fn periodic_from_row(r: &MySqlRow) -> Result<PeriodicJob> {
    let schedule = opt_text_lossy(r, 1)?;
    let last_tick = utc(r, 2)?;
    let next_tick = schedule.as_deref().and_then(|expr| {
        crate::cron::Schedule::parse(expr)
            .ok()?
            .next_after(last_tick)
    });
    let status = opt_text_lossy(r, 4)?;
    Ok(PeriodicJob {
        kind: text(r, 0)?,
        schedule,
        last_tick,
        next_tick,
        last_job_id: r.try_get(3)?,
        last_job_status: status.map(|s| s.parse()).transpose()?,
        last_job_error: opt_text_lossy(r, 5)?,
    })
}

/// A nullable text column, which the driver may report as bytes (binary collations).
fn opt_text_lossy(r: &MySqlRow, i: usize) -> sqlx::Result<Option<String>> {
    r.try_get::<Option<String>, _>(i).or_else(|_| {
        r.try_get::<Option<Vec<u8>>, _>(i)
            .map(|b| b.map(|b| String::from_utf8_lossy(&b).into_owned()))
    })
}

/// A row of `WORKERS_SQL` or `QUEUE_WORKERS_SQL`; a worker silent for `gone_after` is gone.
pub(super) fn worker_from_row(
    r: &sqlx::mysql::MySqlRow,
    gone_after: Duration,
) -> Result<WorkerInfo> {
    let ago = r.try_get::<Option<i64>, _>(9)?.unwrap_or(0) as f64 / 1e6;
    Ok(WorkerInfo {
        owner: text(r, 0)?,
        host: text(r, 1)?,
        pid: r.try_get(2)?,
        version: text(r, 3)?,
        queues: text(r, 4)?
            .split(',')
            .filter(|q| !q.is_empty())
            .map(str::to_owned)
            .collect(),
        concurrency: r.try_get(5)?,
        running: r.try_get(6)?,
        started_at: utc(r, 7)?,
        last_seen: utc(r, 8)?,
        seen_secs_ago: ago,
        gone: ago > gone_after.as_secs_f64(),
        maintains: r.try_get::<i64, _>(10)? == 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_prefixes_escape_their_wildcards_with_the_explicit_escape() {
        assert_eq!(like_prefix("order_1"), "order!_1%");
        assert_eq!(like_prefix("100%!\\"), "100!%!!\\%");
    }

    #[test]
    fn a_queue_prefix_ends_before_the_next_prefix() {
        assert_eq!(prefix_end("q12").as_deref(), Some("q13"));
        assert_eq!(prefix_end("a\u{7f}").as_deref(), Some("b"));
        assert_eq!(prefix_end("é"), None);
    }
}
