//! The operator's statements over a [`JobFilter`] on PostgreSQL: pages of jobs with keyset
//! pagination, the count and the bulk actions; the dashboard's overview, throughput, workers
//! and periodic schedules. The same reads as the MySQL ones in `store/dashboard.rs`; what
//! differs:
//! - No index hints: PostgreSQL has no `FORCE INDEX`, and its planner reads the same
//!   `(status, status_at, id)`, `(queue, status, status_at, id)`, `(queue, id)` and
//!   `(kind, id)` indexes for these statements (the tests print the plans).
//! - A listing's time limit is `SET LOCAL statement_timeout` in the listing's own
//!   (read-only) transaction, where MySQL has `MAX_EXECUTION_TIME` / `max_statement_time`.
//! - A `status_at` that is NULL (a row that lost its time) sorts last in an ascending index
//!   on PostgreSQL, first on MySQL: such rows come last in a listing next first and first in
//!   a listing newest first, so that each page is still a range of the index, read without
//!   a sort. The cursors' conditions are written for that order; where a page spans both
//!   the times and the rows without one, each is read as its own range and the two merged
//!   (`keyset_select`), as an `OR` would make PostgreSQL read and sort every row after the
//!   cursor.
//! - A bulk step changes its batch with one `UPDATE ... RETURNING id`, which locks the rows
//!   still of the status and names them, where MySQL locks them with a `SELECT ... FOR
//!   UPDATE` first.
//! - The filter's error text is matched with `ILIKE` (MySQL: a case-insensitive collation),
//!   a metadata member with `metadata ->> key` (MySQL: `JSON_EXTRACT`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::NaiveDateTime;
use sqlx::postgres::{PgArguments, PgPool, PgRow};
use sqlx::Row;

use super::{db_id, id_of};
use crate::error::{Error, Result};
use crate::model::{
    BulkProgress, JobCursor, JobDetail, JobFilter, JobPage, JobStatus, JobSummaryPage, PeriodicJob,
    QueueOverview, QueueOverviewPage, ThroughputMinute, WorkerInfo, OVERVIEW_COUNT_CAP,
};
use crate::store::dashboard::{Arg, BulkBound, LIST_TIME_LIMIT, THROUGHPUT_STALE_AFTER};
use crate::store::errors::{classify, DbErrorKind};
use crate::store::postgres::decode::{
    detail_from_pg_row as detail_from_row, pg_job_detail_sql as job_detail_sql,
    pg_summary_columns as summary_columns, record_from_pg_row as record_from_row,
    summary_from_pg_row as summary_from_row, PG_JOB_COLUMNS as JOB_COLUMNS,
};
use crate::store::Store;

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, PgArguments>;

/// Binds `args` in order. Numbers are the schema's signed `BIGINT`; a key prefix (bytes on
/// MySQL) is text.
pub(crate) fn bind_all<'q>(mut q: PgQuery<'q>, args: &'q [Arg]) -> PgQuery<'q> {
    for a in args {
        q = match a {
            Arg::Text(s) => q.bind(s.as_str()),
            Arg::Bytes(b) => q.bind(String::from_utf8_lossy(b).into_owned()),
            Arg::Int(n) => q.bind(i64::try_from(*n).unwrap_or(i64::MAX)),
            Arg::Time(t) => q.bind(*t),
        };
    }
    q
}

/// `sql` with its `?` marks numbered `$1, $2...` (a `?` inside a quoted string is left
/// alone): the statements are built with `?`, as the MySQL ones are, and numbered once
/// whole, so that conditions can be put together in any order.
pub(crate) fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut n = 0;
    let mut quoted = false;
    for c in sql.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            '?' if !quoted => {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            }
            _ => out.push(c),
        }
    }
    out
}

/// Microseconds from `from` to `to` (two timestamps), as a `BIGINT`: MySQL's
/// `TIMESTAMPDIFF(MICROSECOND, from, to)`.
pub(crate) fn micros_between(from: &str, to: &str) -> String {
    format!("CAST(EXTRACT(EPOCH FROM ({to} - {from})) * 1000000 AS BIGINT)")
}

/// `text` for a LIKE pattern with `ESCAPE '!'` (as on MySQL: `\` is not used, so that the
/// pattern reads the same on both).
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

pub(crate) fn where_clause(conds: &[&str]) -> String {
    if conds.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conds.join(" AND "))
    }
}

/// The conditions of `query` with `?` marks (see [`numbered`]), and their arguments in
/// order: the PostgreSQL twin of the MySQL `conditions`.
pub(crate) fn conditions(query: &JobFilter) -> (Vec<&'static str>, Vec<Arg>) {
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
        // `task_key` is COLLATE "C": a prefix LIKE is a range of its unique index.
        conds.push("task_key LIKE ? ESCAPE '!'");
        args.push(Arg::Text(format!("{}%", like_escaped(p))));
    }
    if let Some(e) = query.error_contains.as_deref().filter(|e| !e.is_empty()) {
        // Not indexed: bounded by the list's time limit. ILIKE ignores case, as MySQL's
        // explicit collation does.
        conds.push("last_error ILIKE ? ESCAPE '!'");
        args.push(Arg::Text(format!("%{}%", like_escaped(e))));
    }
    if let Some((key, value)) = &query.meta {
        // `->>` is the member's text, unquoted for a string, as MySQL's JSON_UNQUOTE of
        // JSON_EXTRACT.
        if crate::model::valid_meta_key(key) {
            conds.push("metadata ->> CAST(? AS TEXT) = CAST(? AS TEXT)");
            args.push(Arg::Text(key.clone()));
            args.push(Arg::Text(value.clone()));
        } else {
            conds.push("FALSE");
        }
    }
    if let Some(t) = query.created_from {
        conds.push("created_at >= ?");
        args.push(Arg::Time(t.naive_utc()));
    }
    if let Some(t) = query.created_to {
        conds.push("created_at < ?");
        args.push(Arg::Time(t.naive_utc()));
    }
    // With a status, a range of the listing's index, as on MySQL.
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

/// Whether a listing of `status` goes newest first (as on MySQL).
pub(crate) fn newest_first(status: JobStatus) -> bool {
    crate::store::dashboard::newest_first(status)
}

/// The statement of one page of a listing, reading `columns` and `status_at`, `limit + 1`
/// rows (see the MySQL `list_statement_of` for the orders and why each is a range of an
/// index). The NULL times are at the other end of the order than on MySQL (see the module's
/// notes).
pub(crate) fn list_statement_of(
    columns: &str,
    query: &JobFilter,
    cursor: Option<&JobCursor>,
    limit: u32,
) -> (String, Vec<Arg>) {
    let (conds, args) = conditions(query);
    let mut ranges: Vec<(&'static str, Vec<Arg>)> = Vec::new();
    let order = match query.status {
        None => {
            if let Some(c) = cursor {
                ranges.push(("id < ?", vec![Arg::Int(c.id)]));
            }
            "id DESC"
        }
        Some(status) => {
            let desc = newest_first(status);
            if let Some(c) = cursor {
                match (desc, c.at) {
                    // Newest first: the NULL times came first, then times downwards.
                    (true, Some(at)) => {
                        ranges.push((
                            "(status_at, id) < (?, ?)",
                            vec![Arg::Time(at), Arg::Int(c.id)],
                        ));
                    }
                    (true, None) => {
                        ranges.push(("status_at IS NULL AND id < ?", vec![Arg::Int(c.id)]));
                        ranges.push(("status_at IS NOT NULL", Vec::new()));
                    }
                    // Next first: times upwards, then the NULL times.
                    (false, Some(at)) => {
                        ranges.push((
                            "(status_at, id) > (?, ?)",
                            vec![Arg::Time(at), Arg::Int(c.id)],
                        ));
                        ranges.push(("status_at IS NULL", Vec::new()));
                    }
                    (false, None) => {
                        ranges.push(("status_at IS NULL AND id > ?", vec![Arg::Int(c.id)]));
                    }
                }
            }
            // PostgreSQL's defaults: NULLS LAST ascending, NULLS FIRST descending, the
            // index's order either way.
            if desc {
                "status_at DESC, id DESC"
            } else {
                "status_at, id"
            }
        }
    };
    keyset_select(
        &format!("{columns}, status_at"),
        &conds,
        &args,
        ranges,
        order,
        u64::from(limit) + 1,
    )
}

/// `SELECT columns FROM job_queue WHERE conds AND range ORDER BY order LIMIT limit`, numbered,
/// with its arguments. With two ranges (a cursor's range of times and the rows without a
/// time), each is read as its own ordered range of the index, `limit` rows at most, and the
/// two are merged: `(... OR status_at IS NULL)` in one statement would make PostgreSQL read
/// every row after the cursor and sort them.
pub(crate) fn keyset_select(
    columns: &str,
    conds: &[&'static str],
    args: &[Arg],
    ranges: Vec<(&'static str, Vec<Arg>)>,
    order: &str,
    limit: u64,
) -> (String, Vec<Arg>) {
    let one = |range: Option<&(&'static str, Vec<Arg>)>, out: &mut Vec<Arg>| -> String {
        let mut c = conds.to_vec();
        out.extend(args.iter().cloned());
        if let Some((cond, cond_args)) = range {
            c.push(cond);
            out.extend(cond_args.iter().cloned());
        }
        out.push(Arg::Int(limit));
        format!(
            "SELECT {columns} FROM job_queue {} ORDER BY {order} LIMIT ?",
            where_clause(&c)
        )
    };
    let mut out = Vec::new();
    let sql = match ranges.len() {
        0 | 1 => one(ranges.first(), &mut out),
        _ => {
            let parts: Vec<String> = ranges
                .iter()
                .map(|r| format!("({})", one(Some(r), &mut out)))
                .collect();
            out.push(Arg::Int(limit));
            format!(
                "SELECT * FROM ({}) page ORDER BY {order} LIMIT ?",
                parts.join(" UNION ALL ")
            )
        }
    };
    (numbered(&sql), out)
}

/// `list_statement_of` with every column of a job.
pub fn list_statement(
    query: &JobFilter,
    cursor: Option<&JobCursor>,
    limit: u32,
) -> (String, Vec<Arg>) {
    list_statement_of(JOB_COLUMNS, query, cursor, limit)
}

/// The count of `count_capped`: the matching rows, read up to `cap + 1`.
pub(crate) fn capped_count_statement(query: &JobFilter, cap: u64) -> (String, Vec<Arg>) {
    let (conds, mut args) = conditions(query);
    args.push(Arg::Int(cap.saturating_add(1)));
    (
        numbered(&format!(
            "SELECT COUNT(*) FROM (SELECT 1 FROM job_queue {} LIMIT ?) t",
            where_clause(&conds)
        )),
        args,
    )
}

/// See the MySQL `list`.
pub(crate) async fn list(
    store: &Store,
    pool: &PgPool,
    query: &JobFilter,
    cursor: Option<&JobCursor>,
    limit: u32,
) -> Result<JobPage> {
    let (rows, next) = list_rows(store, pool, JOB_COLUMNS, query, cursor, limit).await?;
    let jobs = rows.iter().map(record_from_row).collect::<Result<_>>()?;
    // Not a bounded window (the MySQL `searched`): a filter no index serves is bounded by
    // the listing's statement timeout instead.
    Ok(JobPage {
        jobs,
        next,
        searched: None,
    })
}

/// See the MySQL `list_summaries`.
pub(crate) async fn list_summaries(
    store: &Store,
    pool: &PgPool,
    query: &JobFilter,
    cursor: Option<&JobCursor>,
    limit: u32,
) -> Result<JobSummaryPage> {
    let columns = summary_columns();
    let (rows, next) = list_rows(store, pool, &columns, query, cursor, limit).await?;
    let jobs = rows.iter().map(summary_from_row).collect::<Result<_>>()?;
    Ok(JobSummaryPage {
        jobs,
        next,
        searched: None,
    })
}

/// The rows of one page of a listing, with `columns`, and the cursor of the next page.
pub(crate) async fn list_rows(
    store: &Store,
    pool: &PgPool,
    columns: &str,
    query: &JobFilter,
    cursor: Option<&JobCursor>,
    limit: u32,
) -> Result<(Vec<PgRow>, Option<JobCursor>)> {
    let (sql, args) = list_statement_of(columns, query, cursor, limit);
    let mut rows = fetch_limited(store, pool, &sql, &args, query).await?;
    let next = if rows.len() > limit as usize {
        rows.truncate(limit as usize);
        match rows.last() {
            Some(r) => Some(cursor_of(r, query.status)?),
            None => None,
        }
    } else {
        None
    };
    Ok((rows, next))
}

/// The cursor after row `r` (with `id` and `status_at`) of a listing of `status`.
fn cursor_of(r: &PgRow, status: Option<JobStatus>) -> Result<JobCursor> {
    Ok(JobCursor {
        status,
        at: match status {
            Some(_) => r.try_get::<Option<NaiveDateTime>, _>("status_at")?,
            None => None,
        },
        id: id_of(r.try_get::<i64, _>("id")?),
    })
}

/// Runs `sql` (one SELECT, numbered) within `limit`: `None` when it ran into it. The limit
/// is `SET LOCAL statement_timeout`, which lasts until the end of the transaction the read
/// runs in (rolled back: it only reads), so the pooled connection keeps no limit.
pub(crate) async fn fetch_within(
    store: &Store,
    pool: &PgPool,
    sql: &str,
    args: &[Arg],
    limit: Duration,
) -> Result<Option<Vec<PgRow>>> {
    let set = format!("SET LOCAL statement_timeout = {}", limit.as_millis().max(1));
    pg_transaction!(store, pool, |conn| {
        sqlx::Executor::execute(&mut *conn, set.as_str()).await?;
        let rows = match bind_all(sqlx::query(sql), args).fetch_all(&mut *conn).await {
            Ok(rows) => Some(rows),
            Err(e) if classify(&e) == Some(DbErrorKind::StatementTimeout) => None,
            Err(e) => return Err(e),
        };
        Ok((rows, false))
    })
}

/// Runs `sql` (one SELECT over the jobs matching `query`) with [`LIST_TIME_LIMIT`]: a
/// statement that runs into it is [`Error::FilterTooSlow`].
pub(crate) async fn fetch_limited(
    store: &Store,
    pool: &PgPool,
    sql: &str,
    args: &[Arg],
    query: &JobFilter,
) -> Result<Vec<PgRow>> {
    fetch_within(store, pool, sql, args, LIST_TIME_LIMIT)
        .await?
        .ok_or_else(|| Error::FilterTooSlow {
            filter: format!("{query:?}"),
            limit: LIST_TIME_LIMIT,
        })
}

/// See the MySQL `job_detail`.
pub(crate) async fn job_detail(
    _store: &Store,
    pool: &PgPool,
    id: u64,
) -> Result<Option<JobDetail>> {
    let row = sqlx::query(&job_detail_sql())
        .bind(db_id(id))
        .fetch_optional(pool)
        .await?;
    row.as_ref().map(detail_from_row).transpose()
}

/// See the MySQL `count`.
pub(crate) async fn count(_store: &Store, pool: &PgPool, query: &JobFilter) -> Result<u64> {
    let (conds, args) = conditions(query);
    let sql = numbered(&format!(
        "SELECT COUNT(*) FROM job_queue {}",
        where_clause(&conds)
    ));
    let n: i64 = bind_all(sqlx::query(&sql), &args)
        .fetch_one(pool)
        .await?
        .try_get(0)?;
    Ok(n.max(0) as u64)
}

/// See the MySQL `count_capped`.
pub(crate) async fn count_capped(
    store: &Store,
    pool: &PgPool,
    query: &JobFilter,
    cap: u64,
) -> Result<u64> {
    let (sql, args) = capped_count_statement(query, cap);
    let rows = fetch_limited(store, pool, &sql, &args, query).await?;
    let n: i64 = match rows.first() {
        Some(r) => r.try_get(0)?,
        None => 0,
    };
    Ok(n.max(0) as u64)
}

/// The `SET` of an operator's cancel of jobs that have not started.
pub(crate) const CANCEL_SET: &str = "UPDATE job_queue SET status = 'cancelled', \
     finished_at = job_queue_now(), updated_at = job_queue_now(), \
     last_error = 'cancelled by an operator before it ran'";

/// See the MySQL `cancel_matching`.
pub(crate) async fn cancel_matching(
    store: &Store,
    pool: &PgPool,
    query: &JobFilter,
    bound: BulkBound,
) -> Result<BulkProgress> {
    bulk(
        store,
        pool,
        CANCEL_SET,
        query,
        &[JobStatus::Scheduled, JobStatus::Ready, JobStatus::Blocked],
        bound,
    )
    .await
}

/// Runs `set` (PostgreSQL's SQL) over the jobs matching `query` whose status is one of
/// `statuses`, in batches of the MySQL `BULK_BATCH`, until none is left or `bound` is
/// reached (see the MySQL `bulk`). Each batch is a plain keyset read of the next ids of one
/// status, then one `UPDATE ... WHERE id = ANY(ids) AND status = s RETURNING id`: it locks
/// at most one batch of rows, by primary key, checks their status again, and names the rows
/// it changed.
pub(crate) async fn bulk(
    store: &Store,
    pool: &PgPool,
    set: &str,
    query: &JobFilter,
    statuses: &[JobStatus],
    bound: BulkBound,
) -> Result<BulkProgress> {
    let update = format!("{set} WHERE id = ANY($1) AND status = $2 RETURNING id");
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
            let batch = crate::store::dashboard::BULK_BATCH
                .min(bound.rows - changed)
                .max(1) as u32;
            let (sql, args) = list_statement_of("id", &of_status, cursor.as_ref(), batch);
            let rows = if bound.time_limited {
                fetch_limited(store, pool, &sql, &args, &of_status).await?
            } else {
                bind_all(sqlx::query(&sql), &args).fetch_all(pool).await?
            };
            let more = rows.len() > batch as usize;
            let rows = &rows[..rows.len().min(batch as usize)];
            let Some(last) = rows.last() else {
                break;
            };
            cursor = Some(cursor_of(last, Some(status))?);
            let ids = rows
                .iter()
                .map(|r| r.try_get::<i64, _>("id"))
                .collect::<sqlx::Result<Vec<_>>>()?;
            let done: Vec<i64> = pg_transaction!(store, pool, |conn| {
                let done: Vec<i64> = sqlx::query_scalar(&update)
                    .bind(&ids)
                    .bind(status.as_str())
                    .fetch_all(&mut *conn)
                    .await?;
                Ok((done, true))
            })?;
            changed += done.len() as u64;
            let room = crate::store::dashboard::BULK_CHANGED_IDS.saturating_sub(changed_ids.len());
            changed_ids.extend(done.into_iter().map(id_of).take(room));
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

/// How long ago the gauges were counted, in microseconds (NULL if never: the table starts
/// at 2000-01-01), as the one row `('', 'counted', 0, us)`.
fn counted_row() -> String {
    format!(
        "SELECT '' AS queue, 'counted' AS what, CAST(0 AS BIGINT) AS n, \
           CASE WHEN refreshed_at < '2001-01-01' THEN NULL ELSE {} END AS us \
         FROM job_queue_gauge_refresh WHERE id = 1",
        micros_between("refreshed_at", "job_queue_now()")
    )
}

/// What the overview reads besides the queues and the capped counts, in one statement (see
/// the MySQL `OVERVIEW_SQL`).
fn overview_sql() -> String {
    format!(
        "SELECT queue::text, status, jobs, {} FROM job_queue_gauges \
         UNION ALL {} \
         UNION ALL \
         SELECT queue::text, 'expired_leases', COUNT(*), NULL \
           FROM job_queue WHERE status = 'running' AND status_at < job_queue_now() GROUP BY queue \
         UNION ALL \
         SELECT queue::text, 'paused', 0, NULL FROM job_queue_pause",
        micros_between("oldest_run_at", "job_queue_now()"),
        counted_row()
    )
}

/// [`overview_sql`] narrowed to the queues `names` (one array bind, `$1`).
fn overview_of_statement(names: &[String]) -> String {
    if names.is_empty() {
        return counted_row();
    }
    format!(
        "SELECT queue::text, status, jobs, {} FROM job_queue_gauges WHERE queue = ANY($1) \
         UNION ALL {} \
         UNION ALL \
         SELECT queue::text, 'expired_leases', COUNT(*), NULL FROM job_queue \
           WHERE status = 'running' AND status_at < job_queue_now() AND queue = ANY($1) \
           GROUP BY queue \
         UNION ALL \
         SELECT queue::text, 'paused', 0, NULL FROM job_queue_pause WHERE queue = ANY($1)",
        micros_between("oldest_run_at", "job_queue_now()"),
        counted_row()
    )
}

/// The first queue name after `$1` that has a job: one lookup in `(queue, id)`.
pub(crate) const NEXT_QUEUE_SQL: &str =
    "SELECT queue::text FROM job_queue WHERE queue > $1 ORDER BY queue LIMIT 1";

/// The busiest queues by the gauges, at most `$1`.
const BUSIEST_QUEUES_SQL: &str = "SELECT queue::text FROM job_queue_gauges GROUP BY queue \
     ORDER BY SUM(jobs) DESC, queue LIMIT $1";

/// How many queues the gauges count.
const GAUGED_QUEUES_SQL: &str = "SELECT COUNT(DISTINCT queue) FROM job_queue_gauges";

/// The first paused queues by name, at most `$1`.
const PAUSED_QUEUES_SQL: &str = "SELECT queue::text FROM job_queue_pause ORDER BY queue LIMIT $1";

/// The first queue after `$1` that has a job and starts with a prefix: at least `$2`, below
/// `$3` (see the MySQL `QUEUE_SEARCH_SQL`). `queue` is COLLATE "C": byte order, as MySQL's.
const QUEUE_SEARCH_SQL: &str = "SELECT queue::text FROM job_queue \
     WHERE queue > $1 AND queue >= $2 AND queue < $3 ORDER BY queue LIMIT 1";

/// The jobs of one queue and status, counted up to `$3`.
const CAPPED_COUNT_SQL: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM job_queue \
     WHERE queue = $1 AND status = $2 LIMIT $3) t";

/// The rows of the overview's statements by queue, and how long ago the gauges were
/// counted (see the MySQL `fold_overview`).
fn fold_overview(rows: &[PgRow]) -> Result<(HashMap<String, QueueOverview>, Option<Duration>)> {
    let mut out: HashMap<String, QueueOverview> = HashMap::new();
    let mut counted = None;
    for r in rows {
        let q: String = r.try_get(0)?;
        let what: String = r.try_get(1)?;
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

/// See the MySQL `queue_overview`.
pub(crate) async fn queue_overview(
    _store: &Store,
    pool: &PgPool,
) -> Result<(Vec<QueueOverview>, Option<Duration>)> {
    let rows = sqlx::query(&overview_sql()).fetch_all(pool).await?;
    let (mut by_name, counted) = fold_overview(&rows)?;
    let mut after = String::new();
    while let Some(q) = sqlx::query_scalar::<_, String>(NEXT_QUEUE_SQL)
        .bind(after.as_str())
        .fetch_optional(pool)
        .await?
    {
        after = q;
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

/// See the MySQL `queue_overview_page`: the same choice of queues, each read bounded.
pub(crate) async fn queue_overview_page(
    _store: &Store,
    pool: &PgPool,
    limit: usize,
    search: Option<&str>,
) -> Result<(QueueOverviewPage, Option<Duration>)> {
    let mut names: Vec<String> = Vec::new();
    let mut more = 0;
    let mut more_idle = false;
    match search.filter(|s| !s.is_empty()) {
        Some(prefix) => {
            let Some(end) = crate::store::dashboard::prefix_end(prefix) else {
                return Ok((QueueOverviewPage::default(), None));
            };
            let mut after = String::new();
            while let Some(q) = sqlx::query_scalar::<_, String>(QUEUE_SEARCH_SQL)
                .bind(after.as_str())
                .bind(prefix)
                .bind(end.as_str())
                .fetch_optional(pool)
                .await?
            {
                if names.len() == limit {
                    more_idle = true;
                    break;
                }
                after = q;
                names.push(after.clone());
            }
        }
        None => {
            let busiest: Vec<String> = sqlx::query_scalar(BUSIEST_QUEUES_SQL)
                .bind(limit as i64)
                .fetch_all(pool)
                .await?;
            names.extend(busiest);
            let gauged: i64 = sqlx::query_scalar(GAUGED_QUEUES_SQL)
                .fetch_one(pool)
                .await?;
            more = (gauged.max(0) as u64).saturating_sub(names.len() as u64);
            let paused: Vec<String> = sqlx::query_scalar(PAUSED_QUEUES_SQL)
                .bind(limit as i64)
                .fetch_all(pool)
                .await?;
            for q in paused {
                if !names.contains(&q) {
                    names.push(q);
                }
            }
            // Queues the gauges do not count, while there is room: one index lookup each,
            // a bounded number of them.
            let mut after = String::new();
            let mut steps = 0;
            let mut every_queue_seen = false;
            while names.len() < limit && steps < 3 * limit {
                steps += 1;
                let Some(q) = sqlx::query_scalar::<_, String>(NEXT_QUEUE_SQL)
                    .bind(after.as_str())
                    .fetch_optional(pool)
                    .await?
                else {
                    every_queue_seen = true;
                    break;
                };
                after = q;
                if !names.contains(&after) {
                    names.push(after.clone());
                }
            }
            more_idle = !every_queue_seen;
        }
    }
    let sql = overview_of_statement(&names);
    let mut q = sqlx::query(&sql);
    if !names.is_empty() {
        q = q.bind(&names);
    }
    let rows = q.fetch_all(pool).await?;
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

/// See the MySQL `capped_count`.
pub(crate) async fn capped_count(
    _store: &Store,
    pool: &PgPool,
    queue: &str,
    status: JobStatus,
    cap: u64,
) -> Result<u64> {
    let n: i64 = sqlx::query_scalar(CAPPED_COUNT_SQL)
        .bind(queue)
        .bind(status.as_str())
        .bind(db_id(cap.saturating_add(1)))
        .fetch_one(pool)
        .await?;
    Ok(n.max(0) as u64)
}

/// Whole minutes from `col` to now, cut toward zero as MySQL's `TIMESTAMPDIFF(MINUTE, ...)`.
fn minutes_ago(col: &str) -> String {
    format!("CAST(TRUNC(EXTRACT(EPOCH FROM (job_queue_now() - {col})) / 60) AS BIGINT)")
}

/// The kept per-minute counts of the last `$1` minutes and, in the same statement, where
/// they stop (see the MySQL `THROUGHPUT_KEPT_SQL`).
fn throughput_kept_sql() -> String {
    format!(
        "SELECT {}, queue::text, done, failed, CAST(NULL AS TIMESTAMP(6)) \
         FROM job_queue_throughput WHERE minute >= job_queue_now() - $1 * INTERVAL '1 minute' \
         UNION ALL \
         SELECT CAST(NULL AS BIGINT), CAST(NULL AS TEXT), CAST(NULL AS BIGINT), \
           CAST(NULL AS BIGINT), counted_to FROM job_queue_throughput_mark WHERE id = 1",
        minutes_ago("minute")
    )
}

/// The jobs finished since the kept counts stop (`$1`, or the start of the chart's window,
/// `$2` minutes ago, if later), per minute and queue: a range of `(status, status_at, id)`.
fn throughput_tail_sql() -> String {
    format!(
        "SELECT {} AS ago, queue::text, COUNT(*) FILTER (WHERE status = 'done'), \
           COUNT(*) FILTER (WHERE status = 'failed') \
         FROM job_queue \
         WHERE status IN ('done', 'failed') \
           AND status_at >= GREATEST($1, job_queue_now() - $2 * INTERVAL '1 minute') \
         GROUP BY ago, queue",
        minutes_ago("date_trunc('minute', status_at)")
    )
}

/// See the MySQL `throughput`.
pub(crate) async fn throughput(
    store: &Store,
    pool: &PgPool,
    minutes: u32,
) -> Result<Vec<ThroughputMinute>> {
    let (mut kept, mut counted_to, age) = kept_throughput(store, pool, minutes).await?;
    if age.is_none_or(|a| a > THROUGHPUT_STALE_AFTER) {
        match store.count_throughput().await {
            Ok(()) => (kept, counted_to, _) = kept_throughput(store, pool, minutes).await?,
            Err(e) => tracing::debug!(error = %e, "cannot count the throughput"),
        }
    }
    let since = counted_to.unwrap_or_default();
    let rows = sqlx::query(&throughput_tail_sql())
        .bind(since)
        .bind(i64::from(minutes))
        .fetch_all(pool)
        .await?;
    for r in &rows {
        let m = ThroughputMinute {
            minutes_ago: r.try_get::<i64, _>(0)?.max(0) as u32,
            queue: r.try_get(1)?,
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

/// See the MySQL `kept_throughput`.
#[allow(clippy::type_complexity)]
pub(crate) async fn kept_throughput(
    _store: &Store,
    pool: &PgPool,
    minutes: u32,
) -> Result<(
    Vec<ThroughputMinute>,
    Option<NaiveDateTime>,
    Option<Duration>,
)> {
    let rows = sqlx::query(&throughput_kept_sql())
        .bind(i64::from(minutes))
        .fetch_all(pool)
        .await?;
    let mut kept = Vec::with_capacity(rows.len());
    let mut counted_to = None;
    for r in &rows {
        match r.try_get::<Option<i64>, _>(0)? {
            Some(ago) => kept.push(ThroughputMinute {
                minutes_ago: ago.max(0) as u32,
                queue: r.try_get(1)?,
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

/// The workers' heartbeat rows, at most [`crate::model::DASHBOARD_ROWS`], with whether each
/// holds the maintenance turn (see the MySQL `WORKERS_SQL`).
fn workers_sql() -> String {
    format!(
        "SELECT w.owner::text, w.host::text, w.pid, w.version::text, w.queues, w.concurrency, \
           w.running, w.started_at, w.last_seen, {}, \
           CAST(t.holder IS NOT NULL AS INTEGER) \
         FROM job_queue_worker w LEFT JOIN job_queue_turn t \
           ON t.name = 'maintenance' AND t.holder = w.owner AND t.expires_at > job_queue_now() \
         ORDER BY w.host, w.owner LIMIT 1000",
        micros_between("w.last_seen", "job_queue_now()")
    )
}

/// A row of [`workers_sql`]; a worker silent for `gone_after` is gone.
pub(crate) fn worker_from_row(r: &PgRow, gone_after: Duration) -> Result<WorkerInfo> {
    let ago = r.try_get::<Option<i64>, _>(9)?.unwrap_or(0) as f64 / 1e6;
    let int = |i: usize| -> Result<u32> {
        Ok(u32::try_from(r.try_get::<i64, _>(i)?.max(0)).unwrap_or(u32::MAX))
    };
    Ok(WorkerInfo {
        owner: r.try_get(0)?,
        host: r.try_get(1)?,
        pid: int(2)?,
        version: r.try_get(3)?,
        queues: r
            .try_get::<String, _>(4)?
            .split(',')
            .filter(|q| !q.is_empty())
            .map(str::to_owned)
            .collect(),
        concurrency: int(5)?,
        running: int(6)?,
        started_at: r.try_get::<NaiveDateTime, _>(7)?.and_utc(),
        last_seen: r.try_get::<NaiveDateTime, _>(8)?.and_utc(),
        seen_secs_ago: ago,
        gone: ago > gone_after.as_secs_f64(),
        maintains: r.try_get::<i32, _>(10)? == 1,
    })
}

/// See the MySQL `workers`.
pub(crate) async fn workers(
    _store: &Store,
    pool: &PgPool,
    gone_after: Duration,
) -> Result<Vec<WorkerInfo>> {
    let rows = sqlx::query(&workers_sql()).fetch_all(pool).await?;
    rows.iter()
        .map(|r| worker_from_row(r, gone_after))
        .collect()
}

/// The periodic kinds, at most [`crate::model::DASHBOARD_ROWS`], each with its last job by
/// primary key; the error cut by the server (`left()` counts characters, as MySQL's LEFT).
const PERIODIC_SQL: &str = "\
    SELECT c.kind::text, c.schedule::text, c.last_tick, c.last_job_id, j.status, \
      LEFT(j.last_error, 300) \
    FROM job_queue_cron c LEFT JOIN job_queue j ON j.id = c.last_job_id ORDER BY c.kind LIMIT 1000";

/// See the MySQL `periodic_jobs`.
pub(crate) async fn periodic_jobs(_store: &Store, pool: &PgPool) -> Result<Vec<PeriodicJob>> {
    let rows = sqlx::query(PERIODIC_SQL).fetch_all(pool).await?;
    rows.iter()
        .map(|r| {
            let schedule: Option<String> = r.try_get(1)?;
            let last_tick = r.try_get::<NaiveDateTime, _>(2)?.and_utc();
            let next_tick = schedule.as_deref().and_then(|expr| {
                crate::cron::Schedule::parse(expr)
                    .ok()?
                    .next_after(last_tick)
            });
            let status: Option<String> = r.try_get(4)?;
            Ok(PeriodicJob {
                kind: r.try_get(0)?,
                schedule,
                last_tick,
                next_tick,
                last_job_id: r.try_get::<Option<i64>, _>(3)?.map(id_of),
                last_job_status: status.map(|s| s.parse()).transpose()?,
                last_job_error: r.try_get(5)?,
            })
        })
        .collect()
}

/// The statements of the dashboard's pages for `query`, with their arguments, for checking
/// their plans with `explain`: the PostgreSQL twin of `dashboard_statements`.
pub fn dashboard_statements(
    query: &JobFilter,
    cursor: Option<&JobCursor>,
) -> Vec<(String, Vec<Arg>)> {
    let counted = JobFilter {
        status: query.status.or(Some(JobStatus::Failed)),
        ..query.clone()
    };
    let (conds, args) = conditions(&counted);
    vec![
        list_statement(query, cursor, 50),
        (
            numbered(&format!(
                "SELECT COUNT(*) FROM job_queue {}",
                where_clause(&conds)
            )),
            args,
        ),
        (overview_sql(), Vec::new()),
        (NEXT_QUEUE_SQL.to_owned(), vec![Arg::Text("q1".into())]),
        (
            CAPPED_COUNT_SQL.to_owned(),
            vec![
                Arg::Text("q0".into()),
                Arg::Text("done".into()),
                Arg::Int(OVERVIEW_COUNT_CAP + 1),
            ],
        ),
        (throughput_kept_sql(), vec![Arg::Int(60)]),
        (
            throughput_tail_sql(),
            vec![
                Arg::Time(
                    chrono::NaiveDate::from_ymd_opt(2026, 1, 1)
                        .and_then(|d| d.and_hms_opt(0, 0, 0))
                        .unwrap_or_default(),
                ),
                Arg::Int(60),
            ],
        ),
        (workers_sql(), Vec::new()),
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
    ]
}

/// One node of a PostgreSQL plan, in the shape of a MySQL EXPLAIN row: (relation, node
/// type, index, estimated rows, what else the node does).
type PlanRow = (String, String, Option<String>, Option<u64>, String);

/// Runs `EXPLAIN (FORMAT JSON)` on `sql` (numbered, PostgreSQL's SQL) and returns every
/// node of the plan, depth first, as (relation, node type, index, estimated rows, extra):
/// the node type is PostgreSQL's (`Index Scan`, `Index Only Scan`, `Seq Scan`, `Sort`...),
/// and extra holds the node's sort key, index condition and filter, where MySQL's EXPLAIN
/// has `Extra`. Not a stable API.
pub(crate) async fn explain(
    _store: &Store,
    pool: &PgPool,
    sql: &str,
    args: &[Arg],
) -> Result<Vec<PlanRow>> {
    let explain = format!("EXPLAIN (FORMAT JSON) {sql}");
    let row = bind_all(sqlx::query(&explain), args)
        .fetch_one(pool)
        .await?;
    let plan: sqlx::types::Json<serde_json::Value> = row.try_get(0)?;
    let mut out = Vec::new();
    if let Some(top) = plan.0.get(0).and_then(|p| p.get("Plan")) {
        plan_rows(top, &mut out);
    }
    Ok(out)
}

fn plan_rows(node: &serde_json::Value, out: &mut Vec<PlanRow>) {
    let s = |k: &str| node.get(k).and_then(|v| v.as_str()).map(str::to_owned);
    let mut extra = Vec::new();
    for k in ["Sort Key", "Index Cond", "Filter", "Recheck Cond"] {
        match node.get(k) {
            Some(serde_json::Value::String(v)) => extra.push(format!("{k}: {v}")),
            Some(serde_json::Value::Array(v)) => extra.push(format!(
                "{k}: {}",
                v.iter()
                    .filter_map(|x| x.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            _ => {}
        }
    }
    out.push((
        s("Relation Name").unwrap_or_default(),
        s("Node Type").unwrap_or_default(),
        s("Index Name"),
        node.get("Plan Rows")
            .and_then(|v| v.as_f64())
            .map(|r| r as u64),
        extra.join("; "),
    ));
    if let Some(children) = node.get("Plans").and_then(|p| p.as_array()) {
        for c in children {
            plan_rows(c, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_numbered_outside_quotes() {
        assert_eq!(
            numbered("a = ? AND b LIKE ? ESCAPE '!' AND c < ? * INTERVAL '1 microsecond'"),
            "a = $1 AND b LIKE $2 ESCAPE '!' AND c < $3 * INTERVAL '1 microsecond'"
        );
    }

    #[test]
    fn a_page_after_a_cursor_continues_the_index_order() {
        let cursor = JobCursor {
            status: Some(JobStatus::Done),
            at: chrono::DateTime::from_timestamp(1_800_000_000, 0).map(|t| t.naive_utc()),
            id: 7,
        };
        let (sql, args) = list_statement_of(
            "id",
            &JobFilter::default().status(JobStatus::Done).queue("q"),
            Some(&cursor),
            10,
        );
        assert!(
            sql.ends_with(
                "WHERE status = $1 AND queue = $2 AND (status_at, id) < ($3, $4) \
                 ORDER BY status_at DESC, id DESC LIMIT $5"
            ),
            "{sql}"
        );
        assert_eq!(args.len(), 5);
    }

    #[test]
    fn a_page_next_first_reads_the_times_and_then_the_rows_without_one() {
        let cursor = JobCursor {
            status: Some(JobStatus::Ready),
            at: chrono::DateTime::from_timestamp(1_800_000_000, 0).map(|t| t.naive_utc()),
            id: 7,
        };
        let (sql, args) = list_statement_of(
            "id",
            &JobFilter::default().status(JobStatus::Ready),
            Some(&cursor),
            10,
        );
        assert_eq!(
            sql,
            "SELECT * FROM ((SELECT id, status_at FROM job_queue WHERE status = $1 \
             AND (status_at, id) > ($2, $3) ORDER BY status_at, id LIMIT $4) UNION ALL \
             (SELECT id, status_at FROM job_queue WHERE status = $5 AND status_at IS NULL \
             ORDER BY status_at, id LIMIT $6)) page ORDER BY status_at, id LIMIT $7"
        );
        assert_eq!(args.len(), 7);
    }
}
