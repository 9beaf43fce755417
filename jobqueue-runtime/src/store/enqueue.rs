//! Enqueue: the insert of one job or many, idempotent by task key.

use sqlx::mysql::MySqlConnection;
use sqlx::Row;

use super::*;
use crate::backend::ConnRef;
use crate::error::JobRef;
use crate::model::{Enqueued, JobStatus, NewJob, Uniqueness};

const INSERT_ONE: &str = "INSERT INTO job_queue \
     (queue, kind, task_key, payload, status, priority, run_at, attempts, max_attempts, lease_ms, traceparent, created_at, updated_at, unique_policy, unique_until, metadata, concurrency_key, concurrency_limit, rate_key, rate_limit, rate_window_ms) \
     VALUES (?, ?, ?, ?, \
       IF(COALESCE(?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND) > UTC_TIMESTAMP(6), 'scheduled', 'ready'), \
       ?, COALESCE(?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), 0, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), \
       ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, ?, ?, ?, ?, ?)";

const VALUES_ROW: &str = "(?, ?, ?, ?, \
       IF(COALESCE(?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND) > UTC_TIMESTAMP(6), 'scheduled', 'ready'), \
       ?, COALESCE(?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), 0, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), \
       ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, ?, ?, ?, ?, ?)";

/// [`VALUES_ROW`] for a job due now: queue, kind, key, payload, priority, max_attempts,
/// lease_ms, traceparent, unique_policy, the uniqueness period (NULL: no `unique_until`),
/// metadata, then the limits: concurrency key and limit, rate key, limit and window.
const VALUES_ROW_NOW: &str = "(?, ?, ?, ?, 'ready', ?, UTC_TIMESTAMP(6), 0, ?, ?, ?, \
       UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, ?, ?, ?, ?, ?)";

/// [`VALUES_ROW_NOW`] for a job that also leaves every optional column to its default (see
/// [`is_lean`]): queue, kind, key, payload, priority, max_attempts, lease_ms.
const VALUES_ROW_LEAN: &str = "(?, ?, ?, ?, 'ready', ?, UTC_TIMESTAMP(6), 0, ?, ?, \
       UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))";

/// Whether `job` carries nothing the columns' defaults do not say already: no trace, no
/// metadata, no limits, and the default uniqueness (its key blocks until pruned, no period).
fn is_lean(job: &NewJob) -> bool {
    job.traceparent.is_none()
        && job.metadata.is_none()
        && job.limits.concurrency.is_none()
        && job.limits.rate.is_none()
        && job.unique == Uniqueness::UntilPruned
}

/// Binds one job's values for [`VALUES_ROW`] (or, with `due_now`, [`VALUES_ROW_NOW`]).
fn bind_new<'q>(
    q: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    job: &'q NewJob,
    due_now: bool,
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    let q = q
        .bind(&job.queue)
        .bind(&job.kind)
        .bind(&job.key)
        .bind(&job.payload);
    let q = if due_now {
        q
    } else {
        q.bind(job.run_at).bind(job.delay_us)
    };
    let q = q.bind(job.priority);
    let q = if due_now {
        q
    } else {
        q.bind(job.run_at).bind(job.delay_us)
    };
    let (concurrency, rate) = (&job.limits.concurrency, &job.limits.rate);
    q.bind(job.max_attempts)
        .bind(job.lease_ms)
        .bind(job.traceparent.as_deref())
        .bind(job.unique.as_str())
        .bind(job.unique.period_us())
        .bind(job.metadata.as_deref())
        .bind(concurrency.as_ref().map(|c| c.0.as_str()))
        .bind(concurrency.as_ref().map_or(0, |c| c.1))
        .bind(rate.as_ref().map(|r| r.0.as_str()))
        .bind(rate.as_ref().map_or(0, |r| r.1))
        .bind(rate.as_ref().map_or(0, |r| r.2))
}

pub(super) fn is_key_conflict(e: &sqlx::Error) -> bool {
    classify(e) == Some(DbErrorKind::Duplicate)
}

/// Whether the row's [`Uniqueness`](crate::Uniqueness) has stopped blocking its key: a
/// `while_active` job that has finished, or a `for_period` job whose period has passed.
const RELEASABLE: &str =
    "((unique_policy = 'while_active' AND status IN ('done', 'failed', 'cancelled')) \
     OR (unique_policy = 'for_period' AND unique_until <= UTC_TIMESTAMP(6)))";

/// How many leading bytes of a key a released job keeps in its `task_key`: with the 0x00
/// separator and 20 digits of id, 981 bytes, within the column's 1,020.
pub(crate) const RELEASED_PREFIX: usize = 960;

/// Moves the key of the job holding it to `released_key`, if the holder's policy no longer
/// blocks it (decided here, on the row's latest committed version, under its row lock). The
/// holder's `task_key` becomes its key's first `RELEASED_PREFIX` (960) bytes, 0x00 and its id
/// as 20 digits: unique, since ids are, and it cannot meet a real key, which has no control
/// characters. Concurrent enqueuers serialise on the holder's row: one moves the key, the
/// others match no row.
pub fn release_sql() -> String {
    format!(
        "UPDATE job_queue SET released_key = task_key, \
           task_key = CONCAT(LEFT(task_key, {RELEASED_PREFIX}), X'00', LPAD(id, 20, '0')) \
         WHERE task_key = ? AND released_key IS NULL AND {RELEASABLE}"
    )
}

/// The bounds of the `task_key` range that holds the released jobs of `key`: its first
/// [`RELEASED_PREFIX`] bytes followed by 0x00 (inclusive) and by 0x01 (exclusive).
pub(crate) fn released_range(key: &str) -> (Vec<u8>, Vec<u8>) {
    let bytes = key.as_bytes();
    let prefix = &bytes[..bytes.len().min(RELEASED_PREFIX)];
    let mut low = prefix.to_vec();
    low.push(0);
    let mut high = prefix.to_vec();
    high.push(1);
    (low, high)
}

/// [`insert`] on a connection of either database.
pub(crate) async fn insert_on(conn: ConnRef<'_>, job: &NewJob) -> Result<Enqueued> {
    match conn {
        ConnRef::MySql(conn) => insert(conn, job).await,
        ConnRef::Postgres(conn) => super::postgres::enqueue::insert(conn, job).await,
    }
}

/// [`insert_many`] on a connection of either database.
pub(crate) async fn insert_many_on(conn: ConnRef<'_>, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
    match conn {
        ConnRef::MySql(conn) => insert_many(conn, jobs).await,
        ConnRef::Postgres(conn) => super::postgres::enqueue::insert_many(conn, jobs).await,
    }
}

/// Inserts one job; a task key that exists already gives `Duplicate` with the existing id,
/// unless the holder's [`Uniqueness`](crate::Uniqueness) has stopped blocking the key: then
/// the holder gives it up (see [`release_sql`]) and the insert is tried again.
///
/// A duplicate-key error undoes only the failed statement, so this is safe inside the
/// caller's transaction.
pub(crate) async fn insert(conn: &mut MySqlConnection, job: &NewJob) -> Result<Enqueued> {
    // The existing row can be pruned between our failed INSERT and the SELECT, or give up
    // its key: then the key is free again and the INSERT is tried once more. Whoever inserts
    // first after a release is the one new job; the others meet it and are duplicates.
    for _ in 0..6 {
        match bind_new(sqlx::query(INSERT_ONE), job, false)
            .execute(&mut *conn)
            .await
        {
            Ok(done) => return Ok(Enqueued::New(done.last_insert_id())),
            Err(e) if is_key_conflict(&e) => {
                if let Some((id, holder)) = existing_id(conn, &job.key).await? {
                    if holder.as_ref().is_some_and(|h| h.releasable) {
                        // Matching no row is fine too: another enqueuer released it first,
                        // or the holder blocks again (an operator's retry); the next INSERT
                        // tells which.
                        sqlx::query(&release_sql())
                            .bind(&job.key)
                            .execute(&mut *conn)
                            .await?;
                        continue;
                    }
                    // A kind hidden by the caller's snapshot cannot be compared: the key is
                    // taken either way, and the job holding it is most likely this kind's.
                    let (kind, status) = match holder {
                        Some(h) => (h.kind, h.status),
                        None => (job.kind.clone(), None),
                    };
                    return duplicate_of(job, id, &kind, status);
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::InvalidKey {
        key: job.key.chars().take(80).collect(),
        reason: "the key kept colliding with a row that vanished or gave up the key before it could be read".into(),
    })
}

/// What a plain read tells of the job holding a key.
struct Holder {
    kind: String,
    /// `None` for a status this release does not know.
    status: Option<JobStatus>,
    /// Whether its policy no longer blocks the key (a hint: the release re-checks it).
    releasable: bool,
}

/// The id of the job holding `key`, with its kind and policy when the caller's snapshot
/// shows its row.
async fn existing_id(
    conn: &mut MySqlConnection,
    key: &str,
) -> Result<Option<(u64, Option<Holder>)>> {
    // A locking read sees the latest committed row even inside the caller's REPEATABLE READ
    // snapshot; the duplicate-key error already holds this shared lock anyway. It reads the
    // key's index alone: a locking read of the row itself would fail with 1020 (and abort the
    // caller's transaction) under MariaDB's `innodb_snapshot_isolation=ON` when the row was
    // committed after the caller's snapshot.
    let id: Option<u64> =
        sqlx::query_scalar("SELECT id FROM job_queue WHERE task_key = ? LOCK IN SHARE MODE")
            .bind(key)
            .fetch_optional(&mut *conn)
            .await?;
    let Some(id) = id else { return Ok(None) };
    // A plain read never fails that way; inside such a snapshot it may not see the row, and
    // then the kind is unknown (and the key is not released).
    let row = sqlx::query(&format!(
        "SELECT CAST(kind AS CHAR), {RELEASABLE}, CAST(status AS CHAR) FROM job_queue WHERE id = ?"
    ))
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    let holder = match row {
        Some(r) => Some(Holder {
            kind: text(&r, 0)?,
            releasable: r.try_get::<Option<bool>, _>(1)?.unwrap_or(false),
            status: text(&r, 2)?.parse().ok(),
        }),
        None => None,
    };
    Ok(Some((id, holder)))
}

/// A duplicate of job `id` (in `status`) when that job, which holds `job`'s key, is of
/// `job`'s kind. A job of another kind is an error: its `Duplicate` would say that this job
/// exists, and it does not.
pub(crate) fn duplicate_of(
    job: &NewJob,
    id: u64,
    kind: &str,
    status: Option<JobStatus>,
) -> Result<Enqueued> {
    if kind == job.kind {
        Ok(Enqueued::duplicate(id, status))
    } else {
        Err(Error::KeyTaken {
            key: job.key.chars().take(80).collect(),
            kind: job.kind.clone(),
            holder: kind.to_owned(),
            id,
        })
    }
}

/// Jobs per multi-row `INSERT` of [`insert_many`].
pub(crate) const BULK_CHUNK: usize = 1000;

/// Payload bytes per multi-row `INSERT` of [`insert_many`].
pub(crate) const BULK_BYTES: usize = 4 * 1024 * 1024;

/// Inserts many jobs with few statements, per chunk of at most 1,000 jobs. Returns one
/// outcome per input job, in order. Meant to run inside a transaction.
///
/// A chunk is first inserted as it is, with one multi-row `INSERT`, on the bet that none
/// of its keys is taken: then its ids come from the `INSERT` itself (see [`insert_rows`]),
/// two statements in all. A taken key makes that `INSERT` fail whole (a duplicate-key
/// error undoes only the failed statement) and the chunk goes the careful way of
/// [`insert_chunk`]: one `SELECT` of the keys that exist, one `INSERT` of the rest. Once a
/// chunk has met a taken key, the later chunks of the call go the careful way at once.
pub(crate) async fn insert_many(
    conn: &mut MySqlConnection,
    jobs: &[NewJob],
) -> Result<Vec<Enqueued>> {
    let mut out = Vec::with_capacity(jobs.len());
    let mut start = 0;
    let mut duplicates_seen = false;
    while start < jobs.len() {
        // At most BULK_CHUNK rows and BULK_BYTES of payload per statement, so that one
        // statement stays well under the server's `max_allowed_packet` (16 MiB by default
        // on MariaDB) whatever the payloads weigh.
        let mut end = start;
        let mut bytes = 0;
        while end < jobs.len()
            && end - start < BULK_CHUNK
            && (end == start || bytes + jobs[end].payload.len() <= BULK_BYTES)
        {
            bytes += jobs[end].payload.len();
            end += 1;
        }
        let chunk = &jobs[start..end];
        let inserted = if duplicates_seen {
            None
        } else {
            insert_new_chunk(conn, chunk).await?
        };
        match inserted {
            Some(outcomes) => out.extend(outcomes),
            None => {
                duplicates_seen = true;
                out.extend(insert_chunk(conn, chunk).await?);
            }
        }
        start = end;
    }
    Ok(out)
}

/// Inserts a chunk none of whose keys is expected to be taken, in one `INSERT`. `None` when
/// one is (nothing was inserted), or when the chunk holds a key twice (the second job is a
/// duplicate of the first, which [`insert_chunk`] reports).
async fn insert_new_chunk(
    conn: &mut MySqlConnection,
    jobs: &[NewJob],
) -> Result<Option<Vec<Enqueued>>> {
    let mut seen = std::collections::HashSet::with_capacity(jobs.len());
    if !jobs.iter().all(|j| seen.insert(j.key.as_str())) {
        return Ok(None);
    }
    let fresh: Vec<&NewJob> = jobs.iter().collect();
    Ok(insert_rows(conn, &fresh)
        .await?
        .map(|ids| ids.into_iter().map(Enqueued::New).collect()))
}

/// Inserts `fresh` (no key twice) with one multi-row `INSERT` and returns their ids, in
/// order; `None` when a key was taken, and the statement undone.
///
/// The ids of one multi-row `INSERT` are handed out in row order, from the first one,
/// which the server reports. They are consecutive unless another session's insert took
/// values in between (`innodb_autoinc_lock_mode` 0 and 1, MariaDB's default, never let it
/// happen within one statement whose row count is known; 2, MySQL 8.0's default, may) or
/// `auto_increment_increment` is above 1. So one read of the last row's id tells: if it is
/// the first id plus the row count less one, the ids are exactly that run. Otherwise they
/// are read by key.
async fn insert_rows(conn: &mut MySqlConnection, fresh: &[&NewJob]) -> Result<Option<Vec<u64>>> {
    let Some(last) = fresh.last() else {
        return Ok(Some(Vec::new()));
    };
    // Jobs due at once (no `run_at`, no delay: every `enqueue_many` without options) take
    // the plain row, without the per-row expressions and their four parameters; if none of
    // them carries a trace, metadata, limits or a uniqueness other than the default either,
    // the lean row, which leaves those columns to their defaults: half the parameters.
    let now = fresh.iter().all(|j| j.run_at.is_none() && j.delay_us == 0);
    let lean = now && fresh.iter().all(|j| is_lean(j));
    let sql = if lean {
        format!(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, priority, run_at, attempts, max_attempts, lease_ms, created_at, updated_at) VALUES {}",
            vec![VALUES_ROW_LEAN; fresh.len()].join(", ")
        )
    } else {
        format!(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, priority, run_at, attempts, max_attempts, lease_ms, traceparent, created_at, updated_at, unique_policy, unique_until, metadata, concurrency_key, concurrency_limit, rate_key, rate_limit, rate_window_ms) VALUES {}",
            vec![if now { VALUES_ROW_NOW } else { VALUES_ROW }; fresh.len()].join(", ")
        )
    };
    // A full chunk, the usual case of a large batch, has one arity: keep it prepared
    // (parsing a statement of many rows costs about as much as running it). Other arities
    // are prepared for one use only, so that they cannot pile up on the server.
    let mut q = sqlx::query(&sql).persistent(fresh.len() == BULK_CHUNK);
    for job in fresh {
        q = if lean {
            q.bind(&job.queue)
                .bind(&job.kind)
                .bind(&job.key)
                .bind(&job.payload)
                .bind(job.priority)
                .bind(job.max_attempts)
                .bind(job.lease_ms)
        } else {
            bind_new(q, job, now)
        };
    }
    let first = match q.execute(&mut *conn).await {
        Ok(done) => done.last_insert_id(),
        Err(e) if is_key_conflict(&e) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let last_id: Option<u64> = sqlx::query_scalar("SELECT id FROM job_queue WHERE task_key = ?")
        .bind(&last.key)
        .fetch_optional(&mut *conn)
        .await?;
    let n = fresh.len() as u64;
    if last_id == Some(first + n - 1) {
        return Ok(Some((first..first + n).collect()));
    }
    let keys: Vec<&str> = fresh.iter().map(|j| j.key.as_str()).collect();
    let by_key = ids_by_key(conn, &keys, false).await?;
    keys.iter()
        .map(|k| {
            by_key
                .get(k)
                .map(|(id, _, _, _)| *id)
                .ok_or_else(|| Error::JobNotFound(JobRef::Key((*k).to_owned())))
        })
        .collect::<Result<Vec<u64>>>()
        .map(Some)
}

async fn insert_chunk(conn: &mut MySqlConnection, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
    let keys: Vec<&str> = jobs.iter().map(|j| j.key.as_str()).collect();
    // A plain read: a locking one would take gap locks on keys that do not exist yet, which
    // deadlock two batches enqueued at once. A key inserted by someone else after this read
    // makes the INSERT fail with a duplicate, handled below.
    let mut existing = ids_by_key(conn, &keys, false).await?;
    // Holders whose policy no longer blocks their key give it up, all in one statement; a
    // key released by someone else meanwhile, or blocking again, makes the INSERT below
    // meet a duplicate, handled there.
    let releasable: Vec<&str> = existing
        .iter()
        .filter(|(_, h)| h.2)
        .map(|(k, _)| *k)
        .collect();
    if !releasable.is_empty() {
        let sql = format!(
            "UPDATE job_queue SET released_key = task_key, \
               task_key = CONCAT(LEFT(task_key, {RELEASED_PREFIX}), X'00', LPAD(id, 20, '0')) \
             WHERE task_key IN ({}) AND released_key IS NULL AND {RELEASABLE}",
            placeholders(padded_len(releasable.len()))
        );
        let mut q = sqlx::query(&sql);
        for k in padded(&releasable) {
            q = q.bind(k);
        }
        q.execute(&mut *conn).await?;
        for k in &releasable {
            existing.remove(k);
        }
    }
    // The first job of each key not yet in the table is inserted; every other one is a
    // duplicate (of the table's row, or of the earlier job in this batch).
    let mut seen = std::collections::HashSet::new();
    // Rows keep the caller's order: ids, and so claim order, follow it. Two batches that
    // share keys can deadlock on them; the transaction is then retried whole.
    let fresh: Vec<&NewJob> = jobs
        .iter()
        .filter(|j| !existing.contains_key(j.key.as_str()) && seen.insert(j.key.as_str()))
        .collect();
    let ids = match insert_rows(conn, &fresh).await? {
        Some(ids) => ids,
        None => {
            // Another enqueuer inserted one of these keys since our SELECT: fall back to
            // one statement per job, which reports each duplicate on its own.
            let mut out = Vec::with_capacity(jobs.len());
            for job in jobs {
                out.push(insert(conn, job).await?);
            }
            return Ok(out);
        }
    };
    let inserted: std::collections::HashMap<&str, (u64, &str)> = fresh
        .iter()
        .zip(ids)
        .map(|(j, id)| (j.key.as_str(), (id, j.kind.as_str())))
        .collect();
    let mut first = std::collections::HashSet::new();
    jobs.iter()
        .map(|j| {
            let k = j.key.as_str();
            if let Some((id, kind, _, status)) = existing.get(k) {
                duplicate_of(j, *id, kind, *status)
            } else {
                let (id, kind) = inserted
                    .get(k)
                    .ok_or_else(|| Error::JobNotFound(JobRef::Key(k.to_owned())))?;
                if first.insert(k) {
                    Ok(Enqueued::New(*id))
                } else {
                    duplicate_of(j, *id, kind, None)
                }
            }
        })
        .collect()
}

/// The id and kind of the job holding each of `keys` that is taken, whether its policy no
/// longer blocks the key, and its status.
async fn ids_by_key<'k>(
    conn: &mut MySqlConnection,
    keys: &[&'k str],
    locking: bool,
) -> Result<std::collections::HashMap<&'k str, (u64, String, bool, Option<JobStatus>)>> {
    let mut map = std::collections::HashMap::new();
    if keys.is_empty() {
        return Ok(map);
    }
    let sql = format!(
        "SELECT id, task_key, kind, {RELEASABLE}, CAST(status AS CHAR) FROM job_queue WHERE task_key IN ({}){}",
        placeholders(padded_len(keys.len())),
        if locking { " LOCK IN SHARE MODE" } else { "" }
    );
    let mut q = sqlx::query(&sql);
    for k in padded(keys) {
        q = q.bind(k);
    }
    for row in q.fetch_all(&mut *conn).await? {
        let id: u64 = row.try_get(0)?;
        let key = text(&row, 1)?;
        if let Some(k) = keys.iter().find(|k| **k == key) {
            let releasable = row.try_get::<Option<bool>, _>(3)?.unwrap_or(false);
            let status = text(&row, 4)?.parse().ok();
            map.insert(*k, (id, text(&row, 2)?, releasable, status));
        }
    }
    Ok(map)
}

impl Store {
    /// Inserts many jobs in one transaction at READ COMMITTED, retried whole after a
    /// deadlock or lock wait timeout. See [`insert_many`].
    pub(crate) async fn insert_many(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        on_postgres!(self, enqueue::insert_many_tx(jobs));
        let outcome: Result<Vec<Enqueued>> = transaction!(self, |conn| {
            match insert_many(conn, jobs).await {
                Ok(outcomes) => Ok((Ok(outcomes), true)),
                Err(Error::Database(e)) => Err(e),
                // Not a database error: nothing to retry; undo and report it.
                Err(other) => Ok((Err(other), false)),
            }
        })?;
        outcome
    }

    /// Inserts one job outside any transaction of the caller (see [`insert`]), retried after
    /// a deadlock. Two inserts of one key that both wait on a third session's uncommitted
    /// insert of it deadlock when that session rolls back; the victim's retry then finds the
    /// winner's row and reports `Duplicate`. A lock wait timeout is not retried: it
    /// has already made the caller wait `innodb_lock_wait_timeout`.
    pub(crate) async fn insert_autocommit(&self, job: &NewJob) -> Result<Enqueued> {
        on_postgres!(self, enqueue::insert_autocommit(job));
        let mut retry = 0u32;
        loop {
            let mut conn = acquire(self).await?;
            match insert(&mut conn, job).await {
                Err(e)
                    if e.database_class() == Some(DbErrorKind::Deadlock)
                        && retry < CONFLICT_RETRIES =>
                {
                    drop(conn);
                    retry += 1;
                    self.metrics.conflict(DbErrorKind::Deadlock);
                    tokio::time::sleep(conflict_delay(retry)).await;
                }
                other => return other,
            }
        }
    }
}
