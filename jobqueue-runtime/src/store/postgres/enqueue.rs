//! Enqueue on PostgreSQL: one job, or many, on a connection of the caller's or of the store.
//!
//! The guarantees are those of the MySQL `insert` and `insert_many`: a task key is taken once
//! (a second enqueue of it is `Duplicate` with the holder's id), a holder whose
//! [`Uniqueness`](crate::Uniqueness) no longer blocks its key gives it up to the new job, and
//! a batch returns one outcome per job, in order. What differs:
//!
//! - A taken key is never an error. On PostgreSQL a failed statement aborts the whole
//!   transaction (MySQL undoes only the statement), so every insert is
//!   `INSERT ... ON CONFLICT (task_key) DO NOTHING RETURNING id, task_key`: the keys it did
//!   not return are taken, and their holders are read afterwards. This keeps the caller's
//!   transaction usable after a duplicate.
//! - One statement inserts a whole chunk from arrays (`unnest`), so one job and a thousand
//!   take the same path: no run of consecutive ids to check, no padded `IN` lists.
//! - The holder of a taken key is read plainly (at READ COMMITTED each statement sees the
//!   latest committed rows), then locked `FOR KEY SHARE` when it is reported as a duplicate.
//!   That lock is the one PostgreSQL takes for a foreign key: it stops the holder from being
//!   deleted (pruned) or from giving up its key (an `UPDATE` of its unique `task_key`) until
//!   the caller's transaction ends, as MySQL's shared lock on the key's index entry does,
//!   but it lets workers claim and complete the holder meanwhile.
//! - A released job's `task_key` uses chr(1) as separator (TEXT cannot hold 0x00), after at
//!   most [`RELEASED_PREFIX`] bytes of its key cut at a character boundary (PostgreSQL's
//!   `left()` counts characters, so the prefix is computed here and bound).
//!
//! Under REPEATABLE READ or SERIALIZABLE (a caller's transaction set so), PostgreSQL answers a
//! key whose holder was inserted or changed after the transaction's snapshot with a
//! serialization failure (SQLSTATE 40001), for the caller to retry; READ COMMITTED, the
//! default, never does.

use std::collections::HashMap;

use sqlx::postgres::PgConnection;
use sqlx::Row;

use super::{id_of, Store};
use crate::error::{Error, Result};
use crate::model::{Enqueued, JobStatus, NewJob};
use crate::store::enqueue::{duplicate_of, BULK_BYTES, BULK_CHUNK, RELEASED_PREFIX};
use crate::store::errors::DbErrorKind;
use crate::store::CONFLICT_RETRIES;
use sqlx::postgres::PgPool;

/// Whether the row's uniqueness has stopped blocking its key (the MySQL `RELEASABLE`).
pub(crate) const RELEASABLE: &str =
    "((unique_policy = 'while_active' AND status IN ('done', 'failed', 'cancelled')) \
     OR (unique_policy = 'for_period' AND unique_until <= job_queue_now()))";

/// The jobs of one chunk, from arrays bound in [`bind_chunk`] (one element per job, in the
/// caller's order), inserted in that order so that ids (and claim order) follow it. A key
/// already taken, or taken by an earlier row of the same statement, inserts nothing and
/// returns nothing.
const INSERT_CHUNK: &str = "INSERT INTO job_queue \
     (queue, kind, task_key, payload, status, priority, run_at, attempts, max_attempts, lease_ms, \
      traceparent, created_at, updated_at, unique_policy, unique_until, metadata, \
      concurrency_key, concurrency_limit, rate_key, rate_limit, rate_window_ms) \
     SELECT j.queue, j.kind, j.task_key, j.payload::jsonb, \
       CASE WHEN j.due > job_queue_now() THEN 'scheduled' ELSE 'ready' END, \
       j.priority, j.due, 0, j.max_attempts, j.lease_ms, j.traceparent, \
       job_queue_now(), job_queue_now(), j.unique_policy, \
       job_queue_now() + j.unique_us * INTERVAL '1 microsecond', j.metadata::jsonb, \
       j.concurrency_key, j.concurrency_limit, j.rate_key, j.rate_limit, j.rate_window_ms \
     FROM (SELECT u.*, COALESCE(u.run_at, job_queue_now() + u.delay_us * INTERVAL '1 microsecond') AS due \
           FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::smallint[], \
                       $6::timestamp[], $7::bigint[], $8::bigint[], $9::bigint[], $10::text[], \
                       $11::text[], $12::bigint[], $13::text[], $14::text[], $15::bigint[], \
                       $16::text[], $17::bigint[], $18::bigint[]) WITH ORDINALITY \
             AS u(queue, kind, task_key, payload, priority, run_at, delay_us, max_attempts, \
                  lease_ms, traceparent, unique_policy, unique_us, metadata, concurrency_key, \
                  concurrency_limit, rate_key, rate_limit, rate_window_ms, ord)) j \
     ORDER BY j.ord \
     ON CONFLICT (task_key) DO NOTHING \
     RETURNING id, task_key";

/// The release of the keys `$1` (with `$2` their prefixes, see [`released_prefix`]) by
/// holders whose policy no longer blocks them, decided on each row's latest committed
/// version under its row lock: the PostgreSQL form of the MySQL `release_sql`. The holder's
/// `task_key` becomes the prefix, chr(1) and its id as 20 digits.
pub(crate) fn release_sql() -> String {
    format!(
        "UPDATE job_queue SET released_key = task_key, \
           task_key = r.prefix || chr(1) || lpad(id::text, 20, '0') \
         FROM unnest($1::text[], $2::text[]) AS r(key, prefix) \
         WHERE task_key = r.key AND released_key IS NULL AND {RELEASABLE}"
    )
}

/// The first at most [`RELEASED_PREFIX`] bytes of `key`, cut at a character boundary: what a
/// released job keeps of its key in `task_key`.
pub(crate) fn released_prefix(key: &str) -> &str {
    let mut end = key.len().min(RELEASED_PREFIX);
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    &key[..end]
}

/// The bounds of the `task_key` range that holds the released jobs of `key`: its
/// [`released_prefix`] followed by chr(1) (inclusive) and by chr(2) (exclusive).
pub(crate) fn released_range(key: &str) -> (String, String) {
    let prefix = released_prefix(key);
    (format!("{prefix}\u{1}"), format!("{prefix}\u{2}"))
}

/// Inserts one job (see the MySQL `insert`): `New`, or `Duplicate` of the job holding its
/// key, whose row stays locked against pruning and release until the caller's transaction
/// ends. Never fails on a taken key, so the caller's transaction stays usable.
pub(crate) async fn insert(conn: &mut PgConnection, job: &NewJob) -> Result<Enqueued> {
    let mut out = insert_chunk(conn, std::slice::from_ref(job)).await?;
    Ok(out.pop().expect("one outcome per job"))
}

/// Inserts many jobs (see the MySQL `insert_many`), per chunk of at most 1,000 jobs and
/// 4 MiB of payload, with one statement per chunk when no key is taken. Meant to run inside
/// a transaction.
pub(crate) async fn insert_many(conn: &mut PgConnection, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
    let mut out = Vec::with_capacity(jobs.len());
    let mut start = 0;
    while start < jobs.len() {
        // Bounded work per statement, as on MySQL (where it keeps under max_allowed_packet).
        let mut end = start;
        let mut bytes = 0;
        while end < jobs.len()
            && end - start < BULK_CHUNK
            && (end == start || bytes + jobs[end].payload.len() <= BULK_BYTES)
        {
            bytes += jobs[end].payload.len();
            end += 1;
        }
        out.extend(insert_chunk(conn, &jobs[start..end]).await?);
        start = end;
    }
    Ok(out)
}

/// What the store knows of one key of a chunk.
enum KeyState {
    /// Not settled yet: to insert (again).
    Pending,
    /// Inserted by this call, as this job id of this kind.
    Inserted(u64, usize),
    /// Held by another job: its id, kind and status.
    Held(u64, String, Option<JobStatus>),
}

/// Inserts one chunk. Each round inserts the keys not settled yet with one statement; the
/// keys it did not insert are read, those whose holder may give them up are released (and
/// inserted by the next round), and the others are duplicates once their holder is locked. A
/// holder that vanished (pruned) between the insert and the read leaves its key to the next
/// round too. As on MySQL, a key that keeps colliding with such rows is given up after a few
/// rounds with [`Error::InvalidKey`].
///
/// Jobs whose key was released insert in a later round than the others of their chunk, so
/// their ids come after them (MySQL releases before inserting the chunk when it has met a
/// taken key, and keeps the caller's order there).
async fn insert_chunk(conn: &mut PgConnection, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
    // Refused before any statement: the insert would fail, and abort the caller's
    // transaction with it.
    for j in jobs {
        for (setting, json) in [
            ("payload", Some(&j.payload)),
            ("metadata", j.metadata.as_ref()),
        ] {
            if json.is_some_and(|t| crate::model::holds_nul_escape(t)) {
                return Err(Error::InvalidSetting {
                    setting,
                    reason: format!(
                        "the {setting} of a `{}` job holds the character U+0000 (`\\u0000` in \
                         JSON), which PostgreSQL's JSONB cannot store; remove it or encode it \
                         otherwise",
                        j.kind
                    ),
                });
            }
        }
    }
    // The first job of each key stands for the key; later ones are duplicates of it.
    let mut first_of: HashMap<&str, usize> = HashMap::with_capacity(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        first_of.entry(j.key.as_str()).or_insert(i);
    }
    let mut state: HashMap<&str, KeyState> =
        first_of.keys().map(|k| (*k, KeyState::Pending)).collect();
    for _ in 0..6 {
        let pending: Vec<&NewJob> = jobs
            .iter()
            .enumerate()
            .filter(|(i, j)| {
                first_of[j.key.as_str()] == *i && matches!(state[j.key.as_str()], KeyState::Pending)
            })
            .map(|(_, j)| j)
            .collect();
        if pending.is_empty() {
            break;
        }
        let rows = bind_chunk(sqlx::query(INSERT_CHUNK), &pending)
            .fetch_all(&mut *conn)
            .await?;
        for row in rows {
            let id: i64 = row.try_get(0)?;
            let key: String = row.try_get(1)?;
            if let Some((k, i)) = first_of.get_key_value(key.as_str()) {
                state.insert(*k, KeyState::Inserted(id_of(id), *i));
            }
        }
        let taken: Vec<&str> = pending
            .iter()
            .map(|j| j.key.as_str())
            .filter(|k| matches!(state[k], KeyState::Pending))
            .collect();
        if taken.is_empty() {
            break;
        }
        settle_taken(conn, &taken, &mut state).await?;
    }
    let mut out = Vec::with_capacity(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        out.push(match &state[j.key.as_str()] {
            KeyState::Pending => {
                return Err(Error::InvalidKey {
                    key: j.key.chars().take(80).collect(),
                    reason: "the key kept colliding with a row that vanished or gave up the key before it could be read".into(),
                })
            }
            KeyState::Inserted(id, first) if *first == i => Ok(Enqueued::New(*id)),
            KeyState::Inserted(id, first) => duplicate_of(j, *id, &jobs[*first].kind, None),
            KeyState::Held(id, kind, status) => duplicate_of(j, *id, kind, *status),
        }?);
    }
    Ok(out)
}

/// Reads the holders of `taken` (keys the last insert found taken), releases the keys whose
/// holder's policy no longer blocks them, and locks the other holders: their keys become
/// [`KeyState::Held`]. Keys released, or whose holder is gone or changed, stay pending.
async fn settle_taken<'k>(
    conn: &mut PgConnection,
    taken: &[&'k str],
    state: &mut HashMap<&'k str, KeyState>,
) -> Result<()> {
    // A plain read: at READ COMMITTED it sees the latest committed rows, and it takes no lock
    // that a concurrent release of the same holder would wait on (two enqueuers that both
    // locked a holder and then both released it would deadlock).
    let rows = sqlx::query(&format!(
        "SELECT id, task_key, kind, {RELEASABLE} AS releasable, status \
         FROM job_queue WHERE task_key = ANY($1)"
    ))
    .bind(taken)
    .fetch_all(&mut *conn)
    .await?;
    let mut release: Vec<&str> = Vec::new();
    let mut held: HashMap<&str, (i64, String, Option<JobStatus>)> = HashMap::new();
    for row in rows {
        let key: String = row.try_get("task_key")?;
        let Some(k) = taken.iter().find(|k| **k == key) else {
            continue;
        };
        if row
            .try_get::<Option<bool>, _>("releasable")?
            .unwrap_or(false)
        {
            release.push(k);
        } else {
            let status: String = row.try_get("status")?;
            held.insert(
                k,
                (
                    row.try_get("id")?,
                    row.try_get("kind")?,
                    status.parse().ok(),
                ),
            );
        }
    }
    if !release.is_empty() {
        // Matching no row is fine: another enqueuer released the key first, or the holder
        // blocks again (an operator's retry); the next round's insert tells which.
        let prefixes: Vec<&str> = release.iter().map(|k| released_prefix(k)).collect();
        sqlx::query(&release_sql())
            .bind(&release)
            .bind(&prefixes)
            .execute(&mut *conn)
            .await?;
    }
    if !held.is_empty() {
        // The holder is the same row and still holds the key (rechecked on its latest
        // version) once locked; otherwise the key goes round again.
        let ids: Vec<i64> = held.values().map(|h| h.0).collect();
        let keys: Vec<&str> = held.keys().copied().collect();
        let locked = sqlx::query(
            "SELECT id, task_key FROM job_queue WHERE id = ANY($1) AND task_key = ANY($2) \
             FOR KEY SHARE",
        )
        .bind(&ids)
        .bind(&keys)
        .fetch_all(&mut *conn)
        .await?;
        for row in locked {
            let id: i64 = row.try_get(0)?;
            let key: String = row.try_get(1)?;
            if let Some((k, (hid, kind, status))) = held.remove_entry(key.as_str()) {
                if hid == id {
                    state.insert(k, KeyState::Held(id_of(id), kind, status));
                }
            }
        }
    }
    Ok(())
}

/// Binds the arrays of [`INSERT_CHUNK`]: one element per job.
fn bind_chunk<'q>(
    q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    jobs: &[&'q NewJob],
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    fn col<'a, T>(jobs: &[&'a NewJob], f: impl Fn(&'a NewJob) -> T) -> Vec<T> {
        jobs.iter().map(|j| f(j)).collect()
    }
    q.bind(col(jobs, |j| j.queue.as_str()))
        .bind(col(jobs, |j| j.kind.as_str()))
        .bind(col(jobs, |j| j.key.as_str()))
        .bind(col(jobs, |j| j.payload.as_str()))
        .bind(col(jobs, |j| j.priority))
        .bind(col(jobs, |j| j.run_at))
        .bind(col(jobs, |j| j.delay_us))
        .bind(col(jobs, |j| i64::from(j.max_attempts)))
        .bind(col(jobs, |j| i64::from(j.lease_ms)))
        .bind(col(jobs, |j| j.traceparent.as_deref()))
        .bind(col(jobs, |j| j.unique.as_str()))
        .bind(col(jobs, |j| j.unique.period_us()))
        .bind(col(jobs, |j| j.metadata.as_deref()))
        .bind(col(jobs, |j| {
            j.limits.concurrency.as_ref().map(|c| c.0.as_str())
        }))
        .bind(col(jobs, |j| {
            j.limits.concurrency.as_ref().map_or(0, |c| i64::from(c.1))
        }))
        .bind(col(jobs, |j| j.limits.rate.as_ref().map(|r| r.0.as_str())))
        .bind(col(jobs, |j| {
            j.limits.rate.as_ref().map_or(0, |r| i64::from(r.1))
        }))
        .bind(col(jobs, |j| {
            j.limits.rate.as_ref().map_or(0, |r| i64::from(r.2))
        }))
}

/// Inserts many jobs in one transaction, retried whole after a conflict (see the MySQL
/// `Store::insert_many`).
pub(crate) async fn insert_many_tx(
    store: &Store,
    pool: &PgPool,
    jobs: &[NewJob],
) -> Result<Vec<Enqueued>> {
    let outcome: Result<Vec<Enqueued>> = pg_transaction!(store, pool, |conn| {
        match insert_many(conn, jobs).await {
            Ok(outcomes) => Ok((Ok(outcomes), true)),
            Err(Error::Database(e)) => Err(e),
            // Not a database error: nothing to retry; undo and report it.
            Err(other) => Ok((Err(other), false)),
        }
    })?;
    outcome
}

/// Inserts one job outside any transaction of the caller, each statement on its own,
/// retried after a deadlock (see the MySQL `Store::insert_autocommit`). The holder's lock of
/// a duplicate ends with its statement: there is no transaction to keep it for.
pub(crate) async fn insert_autocommit(
    store: &Store,
    pool: &PgPool,
    job: &NewJob,
) -> Result<Enqueued> {
    let mut retry = 0u32;
    loop {
        let mut conn = super::acquire(store, pool).await?;
        match insert(&mut conn, job).await {
            Err(e)
                if e.database_class() == Some(DbErrorKind::Deadlock)
                    && retry < CONFLICT_RETRIES =>
            {
                drop(conn);
                retry += 1;
                store.metrics.conflict(DbErrorKind::Deadlock);
                tokio::time::sleep(crate::retry::conflict_delay(retry)).await;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_prefix_ends_on_a_character_boundary_within_the_limit() {
        // 255 characters of four bytes: 1,020 bytes, the longest key.
        let key = "\u{1D11E}".repeat(255);
        let prefix = released_prefix(&key);
        assert_eq!(prefix.len(), RELEASED_PREFIX);
        // The released key (prefix, chr(1), 20 digits) fits the column's 1,020 bytes.
        assert!(prefix.len() + 1 + 20 <= 1020);
        // A one-byte character then two-byte ones: byte 960 falls inside a character, so
        // the prefix stops one byte short.
        let odd = format!("a{}", "é".repeat(600));
        assert_eq!(released_prefix(&odd).len(), RELEASED_PREFIX - 1);
        assert_eq!(released_prefix("short"), "short");
        let (low, high) = released_range("short");
        assert_eq!((low.as_str(), high.as_str()), ("short\u{1}", "short\u{2}"));
    }
}
