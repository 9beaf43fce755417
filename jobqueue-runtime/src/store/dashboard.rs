//! The operator's statements over a [`JobFilter`]: pages of jobs with keyset pagination, the
//! count and the bulk actions; and the dashboard's overview in one statement, throughput per
//! minute, live workers and periodic schedules. The bulk retry's `SET` is with the other
//! retries in `admin.rs`.

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::mysql::MySqlRow;
use sqlx::Row;

use super::*;
use crate::model::{
    JobFilter, JobPage, JobStatus, PeriodicJob, QueueOverview, ThroughputMinute, WorkerInfo,
};

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

/// `prefix%` for LIKE, with LIKE's own characters escaped.
fn like_prefix(p: &str) -> String {
    let mut s = String::with_capacity(p.len() + 1);
    for c in p.chars() {
        if matches!(c, '%' | '_' | '\\') {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('%');
    s
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

const OVERVIEW_SQL: &str = "\
    SELECT queue, CAST(status AS CHAR), COUNT(*), NULL FROM job_queue GROUP BY queue, status \
    UNION ALL \
    SELECT queue, 'oldest_ready', 0, TIMESTAMPDIFF(MICROSECOND, MIN(run_at), UTC_TIMESTAMP(6)) \
      FROM job_queue WHERE status = 'ready' GROUP BY queue \
    UNION ALL \
    SELECT queue, 'expired_leases', COUNT(*), NULL \
      FROM job_queue WHERE status = 'running' AND status_at < UTC_TIMESTAMP(6) GROUP BY queue \
    UNION ALL \
    SELECT queue, 'paused', 0, NULL FROM job_queue_pause";

const THROUGHPUT_SQL: &str = "\
    SELECT TIMESTAMPDIFF(MINUTE, finished_at, UTC_TIMESTAMP(6)) AS ago, queue, \
      CAST(SUM(status = 'done') AS SIGNED), CAST(SUM(status = 'failed') AS SIGNED) \
    FROM job_queue WHERE status IN ('done', 'failed') AND status_at >= UTC_TIMESTAMP(6) - INTERVAL ? MINUTE \
    GROUP BY ago, queue";

const WORKERS_SQL: &str = "\
    SELECT owner, host, pid, version, queues, concurrency, running, started_at, last_seen, \
      TIMESTAMPDIFF(MICROSECOND, last_seen, UTC_TIMESTAMP(6)) \
    FROM job_queue_worker ORDER BY host, owner";

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
        conds.push("task_key LIKE ?");
        args.push(Arg::Bytes(like_prefix(p).into_bytes()));
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
    /// A page of jobs matching `query`, newest first, below `before`, at most `limit`.
    pub(crate) async fn list(
        &self,
        query: &JobFilter,
        before: Option<u64>,
        limit: u32,
    ) -> Result<JobPage> {
        let (sql, args) = list_statement(query, before, limit);
        let rows = bind_all(sqlx::query(&sql), &args)
            .fetch_all(&self.pool)
            .await?;
        let mut jobs = rows
            .iter()
            .map(record_from_row)
            .collect::<Result<Vec<_>>>()?;
        let next_before = if jobs.len() > limit as usize {
            jobs.truncate(limit as usize);
            jobs.last().map(|j| j.id)
        } else {
            None
        };
        Ok(JobPage { jobs, next_before })
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

    /// Every queue's counts by status, pause, oldest ready job and expired leases.
    pub(crate) async fn queue_overview(&self) -> Result<Vec<QueueOverview>> {
        let rows = sqlx::query(OVERVIEW_SQL).fetch_all(&self.pool).await?;
        let mut out: Vec<QueueOverview> = Vec::new();
        for r in &rows {
            let q = text(r, 0)?;
            let what = text(r, 1)?;
            let n = r.try_get::<i64, _>(2)? as u64;
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
                "oldest_ready" => {
                    let us: Option<i64> = r.try_get(3)?;
                    s.oldest_ready_secs = us.map(|us| us.max(0) as f64 / 1e6);
                }
                "expired_leases" => s.expired_leases = n,
                "paused" => s.paused = true,
                status => s.counts.set(status.parse::<JobStatus>()?, n),
            }
        }
        out.sort_by(|a, b| a.queue.cmp(&b.queue));
        Ok(out)
    }

    /// Jobs that ended `done` or `failed` per minute and queue over the last `minutes`.
    pub(crate) async fn throughput(&self, minutes: u32) -> Result<Vec<ThroughputMinute>> {
        let rows = sqlx::query(THROUGHPUT_SQL)
            .bind(minutes)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(ThroughputMinute {
                    minutes_ago: r.try_get::<i64, _>(0)?.max(0) as u32,
                    queue: text(r, 1)?,
                    done: r.try_get::<i64, _>(2)?.max(0) as u64,
                    failed: r.try_get::<i64, _>(3)?.max(0) as u64,
                })
            })
            .collect()
    }

    /// The workers' heartbeat rows; those not seen for `gone_after` are marked gone.
    pub(crate) async fn workers(&self, gone_after: Duration) -> Result<Vec<WorkerInfo>> {
        let rows = sqlx::query(WORKERS_SQL).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| {
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
                })
            })
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
pub fn dashboard_statements(query: &JobFilter, before: Option<u64>) -> Vec<(String, Vec<Arg>)> {
    // The bulk actions' confirmation counts jobs of one status at a time.
    let counted = JobFilter {
        status: query.status.or(Some(JobStatus::Failed)),
        ..query.clone()
    };
    let (conds, args) = conditions(&counted);
    vec![
        list_statement(query, before, 50),
        (
            format!("SELECT COUNT(*) FROM job_queue {}", where_clause(&conds)),
            args,
        ),
        (OVERVIEW_SQL.to_owned(), Vec::new()),
        (THROUGHPUT_SQL.to_owned(), vec![Arg::Int(60)]),
        (WORKERS_SQL.to_owned(), Vec::new()),
        (PERIODIC_SQL.to_owned(), Vec::new()),
    ]
}

fn list_statement(query: &JobFilter, before: Option<u64>, limit: u32) -> (String, Vec<Arg>) {
    let (mut conds, mut args) = conditions(query);
    if let Some(b) = before {
        conds.push("id < ?");
        args.push(Arg::Int(b));
    }
    args.push(Arg::Int(u64::from(limit) + 1));
    // Each (x, id) index is in id order within one value of x: reading it backwards gives a
    // page with no sort, whatever else is filtered row by row. Left to itself the optimizer
    // may prefer the claim index for queue + status, and sort every match. A key prefix
    // alone goes through the key index and sorts only the keys it matches.
    let index = if query.status.is_some() {
        " FORCE INDEX (job_queue_list_status)"
    } else if query.queue.is_some() {
        " FORCE INDEX (job_queue_list_queue)"
    } else if query.kind.is_some() {
        " FORCE INDEX (job_queue_list_kind)"
    } else {
        ""
    };
    (
        format!(
            "SELECT {} FROM job_queue{index} {} ORDER BY id DESC LIMIT ?",
            JOB_COLUMNS,
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
