//! The operator's statements over a [`JobFilter`]: pages of jobs with keyset pagination, the
//! count and the bulk actions; and the dashboard's overview in one statement, throughput per
//! minute, live workers and periodic schedules. The bulk retry's `SET` is with the other
//! retries in `admin.rs`.

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::mysql::MySqlRow;
use sqlx::Row;

use super::*;
use crate::model::OVERVIEW_COUNT_CAP;
use crate::model::{
    JobCursor, JobFilter, JobPage, JobStatus, PeriodicJob, QueueOverview, ThroughputMinute,
    WorkerInfo,
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
const BULK_BATCH: u64 = 1000;

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
/// every queue with one of these per queue, each after the one before: `SELECT DISTINCT
/// queue` reads every entry of the queue index (a million for a million jobs), and so does
/// a recursive query whose step is a correlated `MIN(queue) ... WHERE queue > q` on MariaDB.
const NEXT_QUEUE_SQL: &str = "\
    SELECT queue FROM job_queue FORCE INDEX (job_queue_list_queue) \
    WHERE queue > ? ORDER BY queue LIMIT 1";

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

/// With, last, whether the worker holds the maintenance turn (held and not expired). Read
/// by [`worker_from_row`], as is `QUEUE_WORKERS_SQL`, which has the same columns.
const WORKERS_SQL: &str = "\
    SELECT w.owner, w.host, w.pid, w.version, w.queues, w.concurrency, w.running, w.started_at, \
      w.last_seen, TIMESTAMPDIFF(MICROSECOND, w.last_seen, UTC_TIMESTAMP(6)), \
      CAST(t.holder IS NOT NULL AS SIGNED) \
    FROM job_queue_worker w LEFT JOIN job_queue_turn t \
      ON t.name = 'maintenance' AND t.holder = w.owner AND t.expires_at > UTC_TIMESTAMP(6) \
    ORDER BY w.host, w.owner";

const PERIODIC_SQL: &str = "\
    SELECT c.kind, c.schedule, c.last_tick, c.last_job_id, CAST(j.status AS CHAR), j.last_error \
    FROM job_queue_cron c LEFT JOIN job_queue j ON j.id = c.last_job_id ORDER BY c.kind";

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
        let (sql, args) = list_statement(query, cursor, limit);
        let sql = time_limited(&sql, LIST_TIME_LIMIT);
        let rows = match bind_all(sqlx::query(&sql), &args)
            .fetch_all(&self.pool)
            .await
        {
            Ok(rows) => rows,
            Err(e) if classify(&e) == Some(DbErrorKind::StatementTimeout) => {
                return Err(Error::FilterTooSlow {
                    filter: format!("{query:?}"),
                    limit: LIST_TIME_LIMIT,
                })
            }
            Err(e) => return Err(e.into()),
        };
        let mut jobs = Vec::with_capacity(rows.len());
        let mut last = None;
        for r in rows.iter().take(limit as usize) {
            jobs.push(record_from_row(r)?);
            last = Some(r);
        }
        let next = match last {
            Some(r) if rows.len() > limit as usize => Some(JobCursor {
                status: query.status,
                at: match query.status {
                    Some(_) => r.try_get::<Option<NaiveDateTime>, _>("status_at")?,
                    None => None,
                },
                id: r.try_get("id")?,
            }),
            _ => None,
        };
        Ok(JobPage { jobs, next })
    }

    /// How many jobs match `query`.
    pub(crate) async fn count(&self, query: &JobFilter) -> Result<u64> {
        let (conds, args) = conditions(query);
        let sql = format!("SELECT COUNT(*) FROM job_queue {}", where_clause(&conds));
        let n: i64 = bind_all(sqlx::query(&sql), &args)
            .fetch_one(&self.pool)
            .await?
            .try_get(0)?;
        Ok(n as u64)
    }

    /// Cancels every `scheduled`, `ready` or `blocked` job matching `query`. Returns how many.
    pub(crate) async fn cancel_matching(&self, query: &JobFilter) -> Result<u64> {
        self.bulk(
            "UPDATE job_queue SET status = 'cancelled', finished_at = UTC_TIMESTAMP(6), \
             updated_at = UTC_TIMESTAMP(6), last_error = 'cancelled by an operator before it ran'",
            query,
            "status IN ('scheduled', 'ready', 'blocked')",
        )
        .await
    }

    /// Runs `set` over the jobs matching `query` and `guard`, a batch at a time. Returns how
    /// many rows changed.
    pub(super) async fn bulk(
        &self,
        set: &str,
        query: &JobFilter,
        guard: &'static str,
    ) -> Result<u64> {
        let (mut conds, args) = conditions(query);
        conds.push(guard);
        let sql = format!("{set} {} LIMIT {BULK_BATCH}", where_clause(&conds));
        let mut total = 0;
        loop {
            let n = bind_all(sqlx::query(&sql), &args)
                .execute(&self.pool)
                .await?
                .rows_affected();
            total += n;
            if n < BULK_BATCH {
                return Ok(total);
            }
        }
    }

    /// Every queue's counts by status as the queue gauges last counted them, its pause,
    /// oldest ready job and expired leases; and how long ago the gauges were counted
    /// (`None`: never).
    pub(crate) async fn queue_overview(&self) -> Result<(Vec<QueueOverview>, Option<Duration>)> {
        let rows = sqlx::query(OVERVIEW_SQL).fetch_all(&self.pool).await?;
        let mut out: Vec<QueueOverview> = Vec::new();
        let mut counted = None;
        for r in &rows {
            let q = text(r, 0)?;
            let what = text(r, 1)?;
            let n = r.try_get::<i64, _>(2)?.max(0) as u64;
            let us: Option<i64> = r.try_get(3)?;
            if what == "counted" {
                counted = us.map(|us| Duration::from_micros(us.max(0) as u64));
                continue;
            }
            let i = match out.iter().position(|s| s.queue == q) {
                Some(i) => i,
                None => {
                    out.push(QueueOverview {
                        queue: q,
                        ..Default::default()
                    });
                    out.len() - 1
                }
            };
            let s = &mut out[i];
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
        let mut after = String::new();
        while let Some(q) = sqlx::query_scalar::<_, Vec<u8>>(NEXT_QUEUE_SQL)
            .bind(after.as_str())
            .fetch_optional(&self.pool)
            .await?
        {
            after = String::from_utf8_lossy(&q).into_owned();
            if !out.iter().any(|s| s.queue == after) {
                out.push(QueueOverview {
                    queue: after.clone(),
                    ..Default::default()
                });
            }
        }
        out.sort_by(|a, b| a.queue.cmp(&b.queue));
        Ok((out, counted))
    }

    /// The jobs of `queue` in `status`, counted up to `cap + 1`.
    pub(crate) async fn capped_count(
        &self,
        queue: &str,
        status: JobStatus,
        cap: u64,
    ) -> Result<u64> {
        let n: i64 = sqlx::query_scalar(CAPPED_COUNT_SQL)
            .bind(queue)
            .bind(status.as_str())
            .bind(cap + 1)
            .fetch_one(&self.pool)
            .await?;
        Ok(n.max(0) as u64)
    }

    /// Jobs that ended `done` or `failed` per minute and queue over the last `minutes`:
    /// the kept counts, plus the jobs finished since they stop. When nobody kept them for
    /// [`THROUGHPUT_STALE_AFTER`] (no worker of this release runs), counts them first, if
    /// this user may.
    pub(crate) async fn throughput(&self, minutes: u32) -> Result<Vec<ThroughputMinute>> {
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
            .fetch_all(&self.pool)
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
            .fetch_all(&self.pool)
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
        let rows = sqlx::query(WORKERS_SQL).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| worker_from_row(r, gone_after))
            .collect()
    }

    /// Every periodic kind the schedulers have recorded.
    pub(crate) async fn periodic_jobs(&self) -> Result<Vec<PeriodicJob>> {
        let rows = sqlx::query(PERIODIC_SQL).fetch_all(&self.pool).await?;
        rows.iter().map(periodic_from_row).collect()
    }

    /// Runs EXPLAIN on one of [`dashboard_statements`] and returns its rows as
    /// (table, type, key, rows, Extra). Not a stable API.
    pub async fn explain(
        &self,
        sql: &str,
        args: &[Arg],
    ) -> Result<Vec<(String, String, Option<String>, Option<u64>, String)>> {
        let explain = format!("EXPLAIN {sql}");
        let rows = bind_all(sqlx::query(&explain), args)
            .fetch_all(&self.pool)
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
/// their plans with EXPLAIN.
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
    vec![
        list_statement(query, cursor, 50),
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
    ]
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

/// The statement of one page of [`Store::list`] (`limit + 1` rows: one more tells whether
/// there is a next page).
///
/// Without a status: newest first by id. Each (x, id) index is in id order within one value
/// of x: reading it backwards gives a page with no sort, whatever else is filtered row by
/// row. Left to itself the optimizer may prefer the claim index for a queue, and sort every
/// match. A key prefix alone goes through the key index and sorts only the keys it matches.
///
/// With a status: by `(status_at, id)`, through `job_queue_status_at (status, status_at,
/// id)`, or `job_queue_queue_status_at (queue, status, status_at, id)` when a queue is
/// named too, read forwards or backwards from the cursor: no sort, and a filter that
/// matches nothing ends at the end of its range, not at the end of the table. `status_at`
/// is NULL only on a row that lost its time (it sorts first in an ascending index): such
/// rows come first in a listing next first, last in a listing newest first.
pub(crate) fn list_statement(
    query: &JobFilter,
    cursor: Option<&JobCursor>,
    limit: u32,
) -> (String, Vec<Arg>) {
    let (mut conds, mut args) = conditions(query);
    let (index, order) = match query.status {
        None => {
            if let Some(c) = cursor {
                conds.push("id < ?");
                args.push(Arg::Int(c.id));
            }
            let index = if query.queue.is_some() {
                " FORCE INDEX (job_queue_list_queue)"
            } else if query.kind.is_some() {
                " FORCE INDEX (job_queue_list_kind)"
            } else {
                ""
            };
            (index, "id DESC")
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
            let index = if query.queue.is_some() {
                " FORCE INDEX (job_queue_queue_status_at)"
            } else {
                " FORCE INDEX (job_queue_status_at)"
            };
            let order = if desc {
                "status_at DESC, id DESC"
            } else {
                "status_at, id"
            };
            (index, order)
        }
    };
    args.push(Arg::Int(u64::from(limit) + 1));
    (
        format!(
            "SELECT {JOB_COLUMNS}, status_at FROM job_queue{index} {} ORDER BY {order} LIMIT ?",
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
