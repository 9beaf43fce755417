//! Outcomes on PostgreSQL: how each attempt ends, every write fenced by the claim's owner
//! and attempt (the twins of the MySQL `outcome.rs`).
//!
//! What differs:
//! - Every expression of an `UPDATE`'s `SET` reads the row as it was before the statement
//!   (MySQL reads columns already assigned to their left), which is what the MySQL
//!   statements are ordered to get: the order of the assignments does not matter here.
//! - How a retry, hand-back, deferral or snooze ended (cancelled, failed, as asked) is read
//!   from `RETURNING status`, not through MySQL's `LAST_INSERT_ID(expr)`; `cancel_requested`
//!   is left as it is by not assigning it.
//! - `rows_affected` counts the rows changed; every fenced statement here changes each row
//!   it matches (its status moves off `running`), so rows changed are rows matched.
//! - MySQL's `CONCAT` is NULL when a part is; here `||` is used for that (PostgreSQL's
//!   `concat` skips NULLs).

use std::time::Duration;

use sqlx::postgres::PgPool;
use sqlx::Row;

use super::complete_in::pg_log_attempt;
use super::{db_id, id_of, limits, micros, Store};
use crate::error::Result;
use crate::model::{Finish, JobStatus};
use crate::store::outcome::{attempt_error, human_duration, truncate, MAX_ERROR_BYTES};

/// The fence of every outcome written after a claim.
const FENCE: &str = "WHERE id = ? AND status = 'running' AND lease_owner = ? AND attempts = ?";

/// `sql` with its `?` marks (outside quoted strings) numbered `$1, $2...` in order.
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let (mut n, mut quoted) = (0, false);
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

/// `Store::complete_with` on PostgreSQL: claims (id, attempt) marked done, 128 per
/// statement, by a join on the claims' pairs (MySQL matches `CONCAT(id, ':', attempts)`
/// against a padded list). Returns the ids this owner no longer held.
pub(crate) async fn complete_with(
    store: &Store,
    pool: &PgPool,
    owner: &str,
    claims: &[(u64, u32)],
    release: bool,
) -> Result<Vec<u64>> {
    let sql = format!(
        "UPDATE job_queue SET {log}, status = 'done', lease_owner = NULL, lease_until = NULL, \
         finished_at = job_queue_now(), updated_at = job_queue_now() \
         FROM unnest($1::bigint[], $2::bigint[]) AS c(job_id, attempt) \
         WHERE id = c.job_id AND attempts = c.attempt AND status = 'running' AND lease_owner = $3",
        log = pg_log_attempt("'done'", "NULL"),
    );
    let mut lost = Vec::new();
    for chunk in claims.chunks(128) {
        let ids: Vec<i64> = chunk.iter().map(|c| db_id(c.0)).collect();
        let attempts: Vec<i64> = chunk.iter().map(|c| i64::from(c.1)).collect();
        let query = || sqlx::query(&sql).bind(&ids).bind(&attempts).bind(owner);
        let matched = if release {
            pg_transaction!(store, pool, |conn| {
                let matched = query().execute(&mut *conn).await?.rows_affected();
                // A claim this owner no longer holds matched nothing above, and its attempt
                // matches no slot here.
                limits::release_claims(conn, chunk).await?;
                Ok((matched, true))
            })?
        } else {
            pg_autocommit!(store, pool, |conn| query().execute(&mut *conn))?.rows_affected()
        };
        if matched != chunk.len() as u64 {
            let done = ids_done_at(store, pool, chunk).await?;
            lost.extend(chunk.iter().map(|c| c.0).filter(|id| !done.contains(id)));
        }
    }
    Ok(lost)
}

/// `Store::complete_claim_with_output` on PostgreSQL.
pub(crate) async fn complete_claim_with_output(
    store: &Store,
    pool: &PgPool,
    owner: &str,
    id: u64,
    attempt: u32,
    output: &str,
    holds_slot: bool,
) -> Result<bool> {
    let sql = format!(
        "UPDATE job_queue SET {log}, status = 'done', output = $1, lease_owner = NULL, \
         lease_until = NULL, finished_at = job_queue_now(), updated_at = job_queue_now() \
         WHERE id = $2 AND status = 'running' AND lease_owner = $3 AND attempts = $4",
        log = pg_log_attempt("'done'", "NULL"),
    );
    let matched = pg_transaction!(store, pool, |conn| {
        let matched = sqlx::query(&sql)
            .bind(output)
            .bind(db_id(id))
            .bind(owner)
            .bind(i64::from(attempt))
            .execute(&mut *conn)
            .await?
            .rows_affected();
        if matched == 1 && holds_slot {
            limits::release_claims(conn, &[(id, attempt)]).await?;
        }
        Ok((matched, true))
    })?;
    if matched == 1 {
        return Ok(true);
    }
    // A write whose reply was lost may have been made already.
    Ok(ids_done_at(store, pool, &[(id, attempt)]).await? == [id])
}

/// `Store::ids_done_at` on PostgreSQL: which of `claims` are `done` at that attempt.
pub(crate) async fn ids_done_at(
    store: &Store,
    pool: &PgPool,
    claims: &[(u64, u32)],
) -> Result<Vec<u64>> {
    let ids: Vec<i64> = claims.iter().map(|c| db_id(c.0)).collect();
    let rows = pg_autocommit!(store, pool, |conn| sqlx::query(
        "SELECT id, attempts FROM job_queue WHERE id = ANY($1) AND status = 'done'"
    )
    .bind(&ids)
    .fetch_all(&mut *conn))?;
    let mut done = Vec::new();
    for r in &rows {
        let (id, attempts): (i64, i64) = (r.try_get(0)?, r.try_get(1)?);
        let (id, attempts) = (id_of(id), u32::try_from(attempts).unwrap_or(u32::MAX));
        if claims.contains(&(id, attempts)) {
            done.push(id);
        }
    }
    Ok(done)
}

/// A value bound to a mark of an outcome statement.
enum Bind {
    Text(String),
    Micros(i64),
}

/// `Store::finish_claim` on PostgreSQL: the same statements, with `CASE` for MySQL's `IF`,
/// and the status written read back by `RETURNING status`.
pub(crate) async fn finish_claim(
    store: &Store,
    pool: &PgPool,
    owner: &str,
    id: u64,
    attempt: u32,
    how: &Finish,
    holds_slot: bool,
) -> Result<Option<JobStatus>> {
    let mut binds: Vec<Bind> = Vec::new();
    let sql = match how {
        Finish::Retry { delay, error } => {
            binds.push(Bind::Text(attempt_error(error)));
            binds.push(Bind::Micros(micros(*delay)));
            binds.push(Bind::Text(truncate(error, MAX_ERROR_BYTES)));
            format!(
                "UPDATE job_queue SET {log}, \
                 status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'scheduled' END, \
                 run_at = CASE WHEN cancel_requested THEN run_at \
                   ELSE job_queue_now() + ? * INTERVAL '1 microsecond' END, \
                 finished_at = CASE WHEN cancel_requested THEN job_queue_now() ELSE NULL END, \
                 unrunnable_since = NULL, lease_owner = NULL, lease_until = NULL, last_error = ?, \
                 updated_at = job_queue_now() {FENCE}",
                log = pg_log_attempt(
                    "(CASE WHEN cancel_requested THEN 'cancelled' ELSE 'retry' END)",
                    "?"
                ),
            )
        }
        Finish::Fail { error } | Finish::Cancelled { error } => {
            let status = match how {
                Finish::Fail { .. } => "failed",
                _ => "cancelled",
            };
            binds.push(Bind::Text(attempt_error(error)));
            binds.push(Bind::Text(truncate(error, MAX_ERROR_BYTES)));
            format!(
                "UPDATE job_queue SET {log}, status = '{status}', lease_owner = NULL, \
                 lease_until = NULL, last_error = ?, finished_at = job_queue_now(), \
                 updated_at = job_queue_now() {FENCE}",
                log = pg_log_attempt(&format!("'{status}'"), "?"),
            )
        }
        Finish::HandBack => format!(
            "UPDATE job_queue SET {log}, \
             status = CASE WHEN cancel_requested THEN 'cancelled' \
               WHEN attempts >= max_attempts THEN 'failed' ELSE 'ready' END, \
             finished_at = CASE WHEN cancel_requested OR attempts >= max_attempts \
               THEN job_queue_now() ELSE NULL END, \
             last_error = CASE WHEN cancel_requested \
               THEN 'cancelled on request; its worker shut down before the job stopped' \
               WHEN attempts >= max_attempts THEN left('its worker shut down during the last attempt (' \
                 || attempts || ' of ' || max_attempts || '), which may have done part of its work; not run again' \
                 || COALESCE('; previous error: ' || last_error, ''), 16000) \
               ELSE last_error END, \
             unrunnable_since = NULL, lease_owner = NULL, lease_until = NULL, \
             updated_at = job_queue_now() {FENCE}",
            log = pg_log_attempt(
                "(CASE WHEN cancel_requested THEN 'cancelled' \
                  WHEN attempts >= max_attempts THEN 'failed' ELSE 'handed_back' END)",
                "'its worker shut down before the job ended'"
            ),
        ),
        Finish::Defer {
            delay,
            error,
            give_up_after,
        } => {
            // Far beyond any deploy, and still a valid date to subtract.
            const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
            let give_up = format!(
                "(unrunnable_since < job_queue_now() - {} * INTERVAL '1 microsecond')",
                micros((*give_up_after).min(CENTURY))
            );
            binds.push(Bind::Text(attempt_error(error)));
            binds.push(Bind::Micros(micros(*delay)));
            let within = human_duration((*give_up_after).min(CENTURY));
            binds.push(Bind::Text(truncate(
                &format!("no worker could run it within {within} of the first try: {error}"),
                MAX_ERROR_BYTES,
            )));
            binds.push(Bind::Text(truncate(
                &if *give_up_after >= CENTURY {
                    format!(
                        "waiting for a worker that can run it: {error} (not counted as an attempt)"
                    )
                } else {
                    format!(
                        "waiting for a worker that can run it: {error} (not counted as an attempt; \
                         fails if no worker can run it within {within} of the first try)"
                    )
                },
                MAX_ERROR_BYTES,
            )));
            format!(
                "UPDATE job_queue SET {log}, \
                 status = CASE WHEN cancel_requested THEN 'cancelled' \
                   WHEN {give_up} THEN 'failed' ELSE 'scheduled' END, \
                 run_at = CASE WHEN cancel_requested OR {give_up} THEN run_at \
                   ELSE job_queue_now() + ? * INTERVAL '1 microsecond' END, \
                 max_attempts = CASE WHEN cancel_requested OR {give_up} THEN max_attempts \
                   ELSE max_attempts + 1 END, \
                 finished_at = CASE WHEN cancel_requested OR {give_up} THEN job_queue_now() ELSE NULL END, \
                 last_error = CASE WHEN cancel_requested \
                   THEN 'cancelled on request before a worker could run it' \
                   WHEN {give_up} THEN ? ELSE ? END, \
                 unrunnable_since = COALESCE(unrunnable_since, job_queue_now()), \
                 lease_owner = NULL, lease_until = NULL, updated_at = job_queue_now() {FENCE}",
                log = pg_log_attempt(
                    &format!(
                        "(CASE WHEN cancel_requested THEN 'cancelled' \
                         WHEN {give_up} THEN 'failed' ELSE 'deferred' END)"
                    ),
                    "?"
                ),
            )
        }
        Finish::Snooze {
            delay,
            max_snoozes,
            exhausted,
        } => {
            let spent = format!("(snoozes >= {max_snoozes})");
            binds.push(Bind::Text(attempt_error(exhausted)));
            binds.push(Bind::Text(format!("snoozed for {}", human_duration(*delay))));
            binds.push(Bind::Micros(micros(*delay)));
            binds.push(Bind::Text(truncate(exhausted, MAX_ERROR_BYTES)));
            format!(
                "UPDATE job_queue SET {log}, \
                 status = CASE WHEN cancel_requested THEN 'cancelled' \
                   WHEN {spent} THEN 'failed' ELSE 'scheduled' END, \
                 run_at = CASE WHEN cancel_requested OR {spent} THEN run_at \
                   ELSE job_queue_now() + ? * INTERVAL '1 microsecond' END, \
                 max_attempts = CASE WHEN cancel_requested OR {spent} THEN max_attempts \
                   ELSE max_attempts + 1 END, \
                 finished_at = CASE WHEN cancel_requested OR {spent} THEN job_queue_now() ELSE NULL END, \
                 last_error = CASE WHEN cancel_requested THEN 'cancelled on request while it snoozed' \
                   WHEN {spent} THEN ? ELSE last_error END, \
                 unrunnable_since = NULL, lease_owner = NULL, lease_until = NULL, \
                 updated_at = job_queue_now(), \
                 snoozes = CASE WHEN cancel_requested OR {spent} THEN snoozes ELSE snoozes + 1 END {FENCE}",
                log = pg_log_attempt(
                    &format!(
                        "(CASE WHEN cancel_requested THEN 'cancelled' \
                         WHEN {spent} THEN 'failed' ELSE 'snoozed' END)"
                    ),
                    &format!(
                        "(CASE WHEN cancel_requested THEN NULL WHEN {spent} THEN ?::text ELSE ?::text END)"
                    )
                ),
            )
        }
    };
    let sql = numbered(&format!("{sql} RETURNING status"));
    // The row's new state and the release of the claim's concurrency slot commit together;
    // a claim this owner no longer holds writes and frees nothing.
    let written: Option<String> = pg_transaction!(store, pool, |conn| {
        let mut q = sqlx::query_scalar::<_, String>(&sql);
        for b in &binds {
            q = match b {
                Bind::Text(t) => q.bind(t.as_str()),
                Bind::Micros(us) => q.bind(*us),
            };
        }
        let written = q
            .bind(db_id(id))
            .bind(owner)
            .bind(i64::from(attempt))
            .fetch_optional(&mut *conn)
            .await?;
        if written.is_some() && holds_slot {
            limits::release_claims(conn, &[(id, attempt)]).await?;
        }
        Ok((written, true))
    })?;
    let Some(status) = written else {
        return Ok(None);
    };
    Ok(Some(match (how, status.as_str()) {
        (Finish::Fail { .. }, _) => JobStatus::Failed,
        (Finish::Cancelled { .. }, _) => JobStatus::Cancelled,
        (_, "cancelled") => JobStatus::Cancelled,
        (_, "failed") => JobStatus::Failed,
        (Finish::HandBack, _) => JobStatus::Ready,
        (Finish::Retry { .. } | Finish::Defer { .. } | Finish::Snooze { .. }, _) => {
            JobStatus::Scheduled
        }
    }))
}
