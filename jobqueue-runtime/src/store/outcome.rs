//! Outcomes: how each attempt ends (done, retry, fail, cancel, hand-back, deferral), every
//! write fenced by the claim's owner and attempt.

use std::time::Duration;

use sqlx::Row;

use super::limits;
use super::*;
use crate::model::{Finish, JobStatus, MAX_ATTEMPT_ERROR_BYTES, MAX_ATTEMPT_HISTORY};

/// The longest `last_error` kept, in bytes (the column is `TEXT`).
pub(super) const MAX_ERROR_BYTES: usize = 16 * 1024;

/// An assignment to `cancel_requested` that leaves it as it is and reports, through
/// `LAST_INSERT_ID(expr)`, how a statement ended: 1 cancelled (a cancel was pending), 2
/// failed (`failed_if` held), 0 as asked. It reads only columns that no earlier assignment
/// of the statement changes, so it means the same under MariaDB's `SIMULTANEOUS_ASSIGNMENT`.
fn outcome_code(failed_if: &str) -> String {
    format!("IF(LAST_INSERT_ID(IF(cancel_requested = 1, 1, IF({failed_if}, 2, 0))) = 1, 1, 0)")
}

/// The assignment that appends this attempt to the job's history (`attempt_log`), keeping
/// the latest [`MAX_ATTEMPT_HISTORY`] entries. `outcome` and `error` are SQL expressions.
///
/// It must come first in its `SET`: it reads `lease_owner`, `attempts`, `claimed_at` and
/// whatever `outcome` reads as they were before the statement, which holds on MySQL (which
/// assigns left to right) and on MariaDB with or without `SIMULTANEOUS_ASSIGNMENT`.
/// Times are written as text in one format, since the two servers put a DATETIME into JSON
/// differently.
pub(super) fn log_attempt(outcome: &str, error: &str) -> String {
    format!(
        "attempt_log = JSON_ARRAY_APPEND(\
           IF(JSON_LENGTH(COALESCE(attempt_log, '[]')) >= {MAX_ATTEMPT_HISTORY}, \
              JSON_REMOVE(attempt_log, '$[0]'), COALESCE(attempt_log, '[]')), '$', \
           JSON_OBJECT('attempt', attempts, \
             'started_at', DATE_FORMAT(claimed_at, '%Y-%m-%d %H:%i:%s.%f'), \
             'ended_at', DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%d %H:%i:%s.%f'), \
             'worker', lease_owner, 'outcome', {outcome}, 'error', {error}))"
    )
}

/// An attempt's error as its history keeps it.
pub(super) fn attempt_error(error: &str) -> String {
    truncate(error, MAX_ATTEMPT_ERROR_BYTES)
}

/// `d` for a message: `24h`, `90min`, `45s`, or as `Debug` writes it when not whole.
pub(super) fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    match (secs, d.subsec_nanos()) {
        (0, _) | (_, 1..) => format!("{d:?}"),
        (s, _) if s % 3600 == 0 => format!("{}h", s / 3600),
        (s, _) if s % 60 == 0 => format!("{}min", s / 60),
        (s, _) => format!("{s}s"),
    }
}

/// A value bound to a mark of an outcome statement.
enum Bind {
    Text(String),
    Micros(i64),
}

pub(super) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

impl Store {
    /// Marks claims done, many per statement, and frees the concurrency slots they hold (in
    /// the same transaction; see [`limits::release_claims`]). `claims` are (id, attempt).
    /// Returns the ids whose lease this owner no longer held: nothing was written for them.
    pub async fn complete(&self, owner: &str, claims: &[(u64, u32)]) -> Result<Vec<u64>> {
        self.complete_with(owner, claims, true).await
    }

    /// [`Store::complete`] for claims known to hold no concurrency slot (their job has no
    /// concurrency limit): one autocommit statement per chunk, nothing to release.
    pub async fn complete_unlimited(&self, owner: &str, claims: &[(u64, u32)]) -> Result<Vec<u64>> {
        self.complete_with(owner, claims, false).await
    }

    async fn complete_with(
        &self,
        owner: &str,
        claims: &[(u64, u32)],
        release: bool,
    ) -> Result<Vec<u64>> {
        on_postgres!(self, outcome::complete_with(owner, claims, release));
        let mut lost = Vec::new();
        for chunk in claims.chunks(128) {
            let ids: Vec<u64> = chunk.iter().map(|c| c.0).collect();
            let tokens: Vec<String> = chunk.iter().map(|(id, a)| format!("{id}:{a}")).collect();
            let n = padded_len(chunk.len());
            let sql = format!(
                "UPDATE job_queue SET {log}, status = 'done', lease_owner = NULL, lease_until = NULL, \
                 finished_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6) \
                 WHERE id IN ({p}) AND status = 'running' AND lease_owner = ? \
                   AND CONCAT(id, ':', attempts) IN ({p})",
                log = log_attempt("'done'", "NULL"),
                p = placeholders(n)
            );
            let query = || {
                let mut q = sqlx::query(&sql);
                for id in padded(&ids) {
                    q = q.bind(id);
                }
                q = q.bind(owner);
                for t in padded(&tokens) {
                    q = q.bind(t);
                }
                q
            };
            let matched = if release {
                transaction!(self, |conn| {
                    let matched = query().execute(&mut *conn).await?.rows_affected();
                    // A claim this owner no longer holds matched nothing above; its slot was
                    // freed by whoever ended it, and its attempt matches no slot here.
                    limits::release_claims(conn, chunk).await?;
                    Ok((matched, true))
                })?
            } else {
                autocommit!(self, |conn| query().execute(&mut *conn))?.rows_affected()
            };
            if matched != chunk.len() as u64 {
                // Find out which: a row is ours if it is now done at our attempt.
                let done: Vec<u64> = self.ids_done_at(chunk).await?;
                lost.extend(ids.iter().filter(|id| !done.contains(id)));
            }
        }
        Ok(lost)
    }

    /// Marks one claim done with the job's `output` (JSON), and frees the concurrency slot
    /// it holds in the same transaction. Returns false when the lease was lost: nothing was
    /// written.
    pub async fn complete_with_output(
        &self,
        owner: &str,
        id: u64,
        attempt: u32,
        output: &str,
    ) -> Result<bool> {
        self.complete_claim_with_output(owner, id, attempt, output, true)
            .await
    }

    /// [`Store::complete_with_output`], told whether the claim holds a concurrency slot (see
    /// [`Store::finish_claim`]).
    pub(crate) async fn complete_claim_with_output(
        &self,
        owner: &str,
        id: u64,
        attempt: u32,
        output: &str,
        holds_slot: bool,
    ) -> Result<bool> {
        on_postgres!(
            self,
            outcome::complete_claim_with_output(owner, id, attempt, output, holds_slot)
        );
        let sql = format!(
            "UPDATE job_queue SET {log}, status = 'done', output = ?, lease_owner = NULL, lease_until = NULL, \
             finished_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6) \
             WHERE id = ? AND status = 'running' AND lease_owner = ? AND attempts = ?",
            log = log_attempt("'done'", "NULL"),
        );
        let matched = transaction!(self, |conn| {
            let matched = sqlx::query(&sql)
                .bind(output)
                .bind(id)
                .bind(owner)
                .bind(attempt)
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
        Ok(self.ids_done_at(&[(id, attempt)]).await? == [id])
    }

    /// Which of `claims` (id, attempt) are `done` at that attempt: completed by that claim.
    pub(crate) async fn ids_done_at(&self, claims: &[(u64, u32)]) -> Result<Vec<u64>> {
        on_postgres!(self, outcome::ids_done_at(claims));
        let sql = format!(
            "SELECT id, attempts FROM job_queue WHERE id IN ({}) AND status = 'done'",
            placeholders(claims.len())
        );
        let mut q = sqlx::query(&sql).persistent(false);
        for (id, _) in claims {
            q = q.bind(*id);
        }
        let rows = on_connection!(self, |conn| q.fetch_all(&mut *conn)).await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let id: u64 = r.get(0);
                let attempts: u32 = r.get(1);
                claims.contains(&(id, attempts)).then_some(id)
            })
            .collect())
    }

    /// Ends one claim other than by success. Returns the status written (a retry, a
    /// hand-back, a deferral or a snooze ends `cancelled` when an operator's cancel was
    /// pending; a hand-back of the last attempt, a deferral past its bound or a snooze past
    /// `max_snoozes` ends `failed`), or `None` when the lease was lost: nothing was written.
    /// The attempt is appended to the job's history by the same statement.
    pub async fn finish(
        &self,
        owner: &str,
        id: u64,
        attempt: u32,
        how: &Finish,
    ) -> Result<Option<JobStatus>> {
        self.finish_claim(owner, id, attempt, how, true).await
    }

    /// [`Store::finish`], told whether the claim holds a concurrency slot. One that does not
    /// touches no table of the limits, so that a worker user without rights on them (kept
    /// from a release before limits) still records the outcomes of unlimited jobs.
    pub(crate) async fn finish_claim(
        &self,
        owner: &str,
        id: u64,
        attempt: u32,
        how: &Finish,
        holds_slot: bool,
    ) -> Result<Option<JobStatus>> {
        on_postgres!(
            self,
            outcome::finish_claim(owner, id, attempt, how, holds_slot)
        );
        const FENCE: &str =
            "WHERE id = ? AND status = 'running' AND lease_owner = ? AND attempts = ?";
        // Binds in the order of the statement's marks, before the fence's: the history
        // entry's first (its assignment comes first), then the rest.
        let mut binds: Vec<Bind> = Vec::new();
        let sql = match how {
            Finish::Retry { delay, error } => {
                binds.push(Bind::Text(attempt_error(error)));
                binds.push(Bind::Micros(micros(*delay)));
                binds.push(Bind::Text(truncate(error, MAX_ERROR_BYTES)));
                format!(
                    "UPDATE job_queue SET {log}, status = IF(cancel_requested = 1, 'cancelled', 'scheduled'), \
                     run_at = IF(cancel_requested = 1, run_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), \
                     finished_at = IF(cancel_requested = 1, UTC_TIMESTAMP(6), NULL), \
                     cancel_requested = LAST_INSERT_ID(cancel_requested), unrunnable_since = NULL, \
                     lease_owner = NULL, lease_until = NULL, last_error = ?, updated_at = UTC_TIMESTAMP(6) {FENCE}",
                    log = log_attempt("IF(cancel_requested = 1, 'cancelled', 'retry')", "?"),
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
                    "UPDATE job_queue SET {log}, status = '{status}', lease_owner = NULL, lease_until = NULL, last_error = ?, \
                     finished_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6) {FENCE}",
                    log = log_attempt(&format!("'{status}'"), "?"),
                )
            }
            Finish::HandBack => format!(
                "UPDATE job_queue SET {log}, \
                 status = IF(cancel_requested = 1, 'cancelled', IF(attempts >= max_attempts, 'failed', 'ready')), \
                 finished_at = IF(cancel_requested = 1 OR attempts >= max_attempts, UTC_TIMESTAMP(6), NULL), \
                 last_error = IF(cancel_requested = 1, \
                   'cancelled on request; its worker shut down before the job stopped', \
                   IF(attempts >= max_attempts, LEFT(CONCAT('its worker shut down during the last attempt (', \
                     attempts, ' of ', max_attempts, '), which may have done part of its work; not run again', \
                     COALESCE(CONCAT('; previous error: ', last_error), '')), 16000), last_error)), \
                 cancel_requested = {code}, unrunnable_since = NULL, \
                 lease_owner = NULL, lease_until = NULL, updated_at = UTC_TIMESTAMP(6) {FENCE}",
                log = log_attempt(
                    "IF(cancel_requested = 1, 'cancelled', IF(attempts >= max_attempts, 'failed', 'handed_back'))",
                    "'its worker shut down before the job ended'"
                ),
                code = outcome_code("attempts >= max_attempts"),
            ),
            Finish::Defer {
                delay,
                error,
                give_up_after,
            } => {
                // Far beyond any deploy, and still a valid date to subtract.
                const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
                let give_up = format!(
                    "(unrunnable_since < UTC_TIMESTAMP(6) - INTERVAL {} MICROSECOND)",
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
                     status = IF(cancel_requested = 1, 'cancelled', IF({give_up}, 'failed', 'scheduled')), \
                     run_at = IF(cancel_requested = 1 OR {give_up}, run_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), \
                     max_attempts = IF(cancel_requested = 1 OR {give_up}, max_attempts, max_attempts + 1), \
                     finished_at = IF(cancel_requested = 1 OR {give_up}, UTC_TIMESTAMP(6), NULL), \
                     last_error = IF(cancel_requested = 1, 'cancelled on request before a worker could run it', \
                       IF({give_up}, ?, ?)), \
                     cancel_requested = {code}, \
                     unrunnable_since = COALESCE(unrunnable_since, UTC_TIMESTAMP(6)), \
                     lease_owner = NULL, lease_until = NULL, updated_at = UTC_TIMESTAMP(6) {FENCE}",
                    log = log_attempt(
                        &format!("IF(cancel_requested = 1, 'cancelled', IF({give_up}, 'failed', 'deferred'))"),
                        "?"
                    ),
                    code = outcome_code(&give_up),
                )
            }
            Finish::Snooze {
                delay,
                max_snoozes,
                exhausted,
            } => {
                // The bound is the kind's constant: one statement text per kind at most.
                let spent = format!("(snoozes >= {max_snoozes})");
                binds.push(Bind::Text(attempt_error(exhausted)));
                binds.push(Bind::Text(format!("snoozed for {}", human_duration(*delay))));
                binds.push(Bind::Micros(micros(*delay)));
                binds.push(Bind::Text(truncate(exhausted, MAX_ERROR_BYTES)));
                // `snoozes` is assigned last: every expression before it reads the count
                // from before the statement, on MySQL (left to right) as on MariaDB.
                format!(
                    "UPDATE job_queue SET {log}, \
                     status = IF(cancel_requested = 1, 'cancelled', IF({spent}, 'failed', 'scheduled')), \
                     run_at = IF(cancel_requested = 1 OR {spent}, run_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), \
                     max_attempts = IF(cancel_requested = 1 OR {spent}, max_attempts, max_attempts + 1), \
                     finished_at = IF(cancel_requested = 1 OR {spent}, UTC_TIMESTAMP(6), NULL), \
                     last_error = IF(cancel_requested = 1, 'cancelled on request while it snoozed', \
                       IF({spent}, ?, last_error)), \
                     cancel_requested = {code}, unrunnable_since = NULL, \
                     lease_owner = NULL, lease_until = NULL, updated_at = UTC_TIMESTAMP(6), \
                     snoozes = IF(cancel_requested = 1 OR {spent}, snoozes, snoozes + 1) {FENCE}",
                    log = log_attempt(
                        &format!("IF(cancel_requested = 1, 'cancelled', IF({spent}, 'failed', 'snoozed'))"),
                        &format!("IF(cancel_requested = 1, NULL, IF({spent}, ?, ?))")
                    ),
                    code = outcome_code(&spent),
                )
            }
        };
        // The row's new state and the release of the claim's concurrency slot commit
        // together; a claim this owner no longer holds writes and frees nothing.
        let done = transaction!(self, |conn| {
            let mut q = sqlx::query(&sql);
            for b in &binds {
                q = match b {
                    Bind::Text(t) => q.bind(t.as_str()),
                    Bind::Micros(us) => q.bind(*us),
                };
            }
            let done = q
                .bind(id)
                .bind(owner)
                .bind(attempt)
                .execute(&mut *conn)
                .await?;
            if done.rows_affected() == 1 && holds_slot {
                limits::release_claims(conn, &[(id, attempt)]).await?;
            }
            Ok((done, true))
        })?;
        if done.rows_affected() != 1 {
            return Ok(None);
        }
        // A retry, hand-back, deferral or snooze can end otherwise than asked: cancelled
        // when an operator's request was pending, failed when out of attempts, time or
        // snoozes. The statement reports which through `LAST_INSERT_ID(expr)` (see
        // [`outcome_code`]), which puts the value in the reply, so no second read is needed.
        Ok(Some(match (how, done.last_insert_id()) {
            (Finish::Fail { .. }, _) => JobStatus::Failed,
            (Finish::Cancelled { .. }, _) => JobStatus::Cancelled,
            (_, 1) => JobStatus::Cancelled,
            (_, 2) => JobStatus::Failed,
            (Finish::HandBack, _) => JobStatus::Ready,
            (Finish::Retry { .. } | Finish::Defer { .. } | Finish::Snooze { .. }, _) => {
                JobStatus::Scheduled
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_bounds_read_as_people_write_them() {
        assert_eq!(human_duration(Duration::from_secs(24 * 3600)), "24h");
        assert_eq!(human_duration(Duration::from_secs(5400)), "90min");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(human_duration(Duration::from_secs(90)), "90s");
    }
}
