//! An operator's writes on one job besides retry and cancel, and the small bounded reads of
//! the job list, on PostgreSQL (see `store/operator.rs`). What differs: no index hints, and
//! the cursor of the page before is read with the listing's PostgreSQL order (NULL times at
//! the other end, see `postgres/dashboard.rs`).

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::postgres::PgPool;
use sqlx::Row;

use super::admin::unblock_and_lock;
use super::dashboard::{conditions, fetch_within, keyset_select, micros_between, newest_first};
use super::{db_id, id_of};
use crate::error::Result;
use crate::model::{JobCursor, JobFilter, JobStatus, StatusCounts};
use crate::store::dashboard::{Arg, LIST_TIME_LIMIT};
use crate::store::operator::{Deletion, NameColumn};
use crate::store::Store;

/// See the MySQL `RUN_NOW_UPDATE`.
const RUN_NOW_UPDATE: &str = "UPDATE job_queue SET status = 'ready', run_at = job_queue_now(), \
     updated_at = job_queue_now() WHERE id = $1 AND status = 'scheduled'";

/// See the MySQL `delete_job`: the same order of locks as the cancel.
pub(crate) async fn delete_job(store: &Store, pool: &PgPool, id: u64) -> Result<Deletion> {
    pg_transaction!(store, pool, |conn| {
        let (status, unblocked) = unblock_and_lock(&mut *conn, id).await?;
        let outcome = match status.as_deref() {
            None => Deletion::Missing,
            Some("running") => Deletion::Running,
            Some(s) => {
                sqlx::query("DELETE FROM job_queue WHERE id = $1 AND status <> 'running'")
                    .bind(db_id(id))
                    .execute(&mut *conn)
                    .await?;
                if s == "blocked" && !unblocked {
                    sqlx::query("DELETE FROM job_queue_blocked WHERE job_id = $1")
                        .bind(db_id(id))
                        .execute(&mut *conn)
                        .await?;
                }
                Deletion::Done
            }
        };
        Ok((outcome, true))
    })
}

/// See the MySQL `run_now`.
pub(crate) async fn run_now(_store: &Store, pool: &PgPool, id: u64) -> Result<u64> {
    Ok(sqlx::query(RUN_NOW_UPDATE)
        .bind(db_id(id))
        .execute(pool)
        .await?
        .rows_affected())
}

/// See the MySQL `job_status`.
pub(crate) async fn job_status(
    _store: &Store,
    pool: &PgPool,
    id: u64,
) -> Result<Option<JobStatus>> {
    let s: Option<String> = sqlx::query_scalar("SELECT status FROM job_queue WHERE id = $1")
        .bind(db_id(id))
        .fetch_optional(pool)
        .await?;
    s.map(|s| s.parse()).transpose()
}

/// See the MySQL `names`: one index lookup per name, each after the one before; the
/// columns are COLLATE "C", so the order is byte order as on MySQL.
pub(crate) async fn names(
    _store: &Store,
    pool: &PgPool,
    column: NameColumn,
    limit: usize,
) -> Result<Vec<String>> {
    let sql = match column {
        NameColumn::Queue => {
            "SELECT queue::text FROM job_queue WHERE queue > $1 ORDER BY queue LIMIT 1"
        }
        NameColumn::Kind => {
            "SELECT kind::text FROM job_queue WHERE kind > $1 ORDER BY kind LIMIT 1"
        }
    };
    let mut out: Vec<String> = Vec::new();
    while out.len() < limit {
        let after = out.last().map(String::as_str).unwrap_or("");
        let Some(name) = sqlx::query_scalar::<_, String>(sql)
            .bind(after)
            .fetch_optional(pool)
            .await?
        else {
            break;
        };
        out.push(name);
    }
    Ok(out)
}

/// See the MySQL `gauge_counts`.
pub(crate) async fn gauge_counts(
    _store: &Store,
    pool: &PgPool,
    queue: Option<&str>,
) -> Result<(StatusCounts, Option<Duration>)> {
    let counted = format!(
        "SELECT 'counted', CASE WHEN refreshed_at < '2001-01-01' THEN NULL ELSE {} END \
         FROM job_queue_gauge_refresh WHERE id = 1",
        micros_between("refreshed_at", "job_queue_now()")
    );
    let rows = match queue {
        Some(q) => {
            sqlx::query(&format!(
                "SELECT status, jobs FROM job_queue_gauges WHERE queue = $1 UNION ALL {counted}"
            ))
            .bind(q)
            .fetch_all(pool)
            .await?
        }
        None => {
            sqlx::query(&format!(
                "SELECT status, CAST(SUM(jobs) AS BIGINT) FROM job_queue_gauges GROUP BY status \
                 UNION ALL {counted}"
            ))
            .fetch_all(pool)
            .await?
        }
    };
    let mut counts = StatusCounts::default();
    let mut counted = None;
    for r in &rows {
        let what: String = r.try_get(0)?;
        let n: Option<i64> = r.try_get(1)?;
        if what == "counted" {
            counted = n.map(|us| Duration::from_micros(us.max(0) as u64));
        } else {
            counts.set(what.parse()?, n.unwrap_or(0).max(0) as u64);
        }
    }
    Ok((counts, counted))
}

/// See the MySQL `capped_status_count`: a range of `(status, status_at, id)` or `(queue,
/// status, status_at, id)`, counted up to `cap + 1`.
pub(crate) async fn capped_status_count(
    _store: &Store,
    pool: &PgPool,
    queue: Option<&str>,
    status: JobStatus,
    cap: u64,
) -> Result<u64> {
    let limit = db_id(cap.saturating_add(1));
    let n: i64 = match queue {
        Some(q) => {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM (SELECT 1 FROM job_queue \
                 WHERE queue = $1 AND status = $2 LIMIT $3) t",
            )
            .bind(q)
            .bind(status.as_str())
            .bind(limit)
            .fetch_one(pool)
            .await?
        }
        None => {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM (SELECT 1 FROM job_queue WHERE status = $1 LIMIT $2) t",
            )
            .bind(status.as_str())
            .bind(limit)
            .fetch_one(pool)
            .await?
        }
    };
    Ok(n.max(0) as u64)
}

/// The statement of `previous_cursor` on PostgreSQL: the listing of `query` read backwards
/// from `cursor` (included), `limit + 1` rows of ids and times. Rows of a NULL time are at
/// the end of a listing next first and at the start of one newest first (see
/// `postgres/dashboard.rs`), and the conditions follow that order.
pub fn previous_statement(query: &JobFilter, cursor: &JobCursor, limit: u32) -> (String, Vec<Arg>) {
    let (conds, args) = conditions(query);
    let mut ranges: Vec<(&'static str, Vec<Arg>)> = Vec::new();
    let order = match query.status {
        None => {
            ranges.push(("id >= ?", vec![Arg::Int(cursor.id)]));
            "id"
        }
        Some(status) => {
            // Backwards through a listing newest first is forwards in time.
            let forwards_in_time = newest_first(status);
            match (forwards_in_time, cursor.at) {
                (true, Some(at)) => {
                    ranges.push((
                        "(status_at, id) >= (?, ?)",
                        vec![Arg::Time(at), Arg::Int(cursor.id)],
                    ));
                    ranges.push(("status_at IS NULL", Vec::new()));
                }
                (true, None) => {
                    ranges.push(("status_at IS NULL AND id >= ?", vec![Arg::Int(cursor.id)]));
                }
                (false, Some(at)) => {
                    ranges.push((
                        "(status_at, id) <= (?, ?)",
                        vec![Arg::Time(at), Arg::Int(cursor.id)],
                    ));
                }
                (false, None) => {
                    ranges.push(("status_at IS NULL AND id <= ?", vec![Arg::Int(cursor.id)]));
                    ranges.push(("status_at IS NOT NULL", Vec::new()));
                }
            }
            if forwards_in_time {
                "status_at, id"
            } else {
                "status_at DESC, id DESC"
            }
        }
    };
    keyset_select(
        "id, status_at",
        &conds,
        &args,
        ranges,
        order,
        u64::from(limit) + 1,
    )
}

/// See the MySQL `previous_cursor`: `None` when the read ran into the list's time limit
/// (`SET LOCAL statement_timeout`).
pub(crate) async fn previous_cursor(
    store: &Store,
    pool: &PgPool,
    query: &JobFilter,
    cursor: &JobCursor,
    limit: u32,
) -> Result<Option<Option<JobCursor>>> {
    let (sql, args) = previous_statement(query, cursor, limit);
    let Some(rows) = fetch_within(store, pool, &sql, &args, LIST_TIME_LIMIT).await? else {
        return Ok(None);
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
        id: id_of(r.try_get(0)?),
    })))
}
