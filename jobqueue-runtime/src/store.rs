//! Every SQL statement the queue runs, in one place, and the low-level operations the
//! [`Worker`](crate::Worker) is built from. Most programs never call these directly; they
//! are public for custom consumers and for tests that prove the protocol.
//!
//! Each outcome written after a claim is fenced: its `WHERE` names the job,
//! `status = 'running'`, the worker's `lease_owner` and the claim's `attempts`, and the caller
//! requires the rows it expected to match. Renewals name the owner only: an owner is one
//! worker, which holds at most one claim of a job at a time. `attempts` grows by one on every claim and never goes back, so a
//! worker that lost its lease can match nothing, whatever happened to the row since.
//! (sqlx's MySQL driver sets CLIENT_FOUND_ROWS, so `rows_affected` counts rows matched.)

use std::sync::Arc;
use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::mysql::{MySqlConnection, MySqlPool, MySqlRow};
use sqlx::{Executor, Row};

use crate::enqueue::Enqueued;
use crate::error::{server_code, Error, Result};
use crate::metrics::Metrics;
use crate::queue::{JobRecord, JobStatus};
use crate::retry::{conflict_delay, is_transient};

/// How many times a transaction is retried after a deadlock or lock wait timeout.
const CONFLICT_RETRIES: u32 = 8;

/// The longest `last_error` kept, in bytes (the column is `TEXT`).
const MAX_ERROR_BYTES: usize = 16 * 1024;

/// Runs `$body` (which yields `(value, commit)`) in a transaction at READ COMMITTED, retrying
/// the whole transaction after a deadlock (1213), lock wait timeout (1205) or MariaDB's
/// snapshot conflict (1020). The transaction is always rolled back explicitly on error: after
/// a 1205 the server has undone only the statement.
macro_rules! transaction {
    ($store:expr, |$conn:ident| $body:block) => {{
        let store: &Store = $store;
        let mut retry = 0u32;
        loop {
            let mut pooled = store.pool.acquire().await?;
            if store.set_isolation {
                pooled
                    .execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                    .await?;
            }
            let mut tx = sqlx::Connection::begin(&mut *pooled).await?;
            let result: sqlx::Result<_> = async {
                let $conn: &mut MySqlConnection = &mut tx;
                $body
            }
            .await;
            match result {
                Ok((value, true)) => {
                    tx.commit().await?;
                    break Ok(value);
                }
                Ok((value, false)) => {
                    tx.rollback().await?;
                    break Ok(value);
                }
                Err(e) => {
                    let _ = tx.rollback().await;
                    let code = server_code(&e);
                    if is_transient(code) && retry < CONFLICT_RETRIES {
                        retry += 1;
                        store.metrics.conflict(code.unwrap_or(0));
                        tokio::time::sleep(conflict_delay(retry)).await;
                        continue;
                    }
                    break Err(Error::from(e));
                }
            }
        }
    }};
}

/// Runs one autocommit statement (`$stmt` is re-evaluated each try), retrying it after a
/// transient conflict.
macro_rules! autocommit {
    ($store:expr, $stmt:expr) => {{
        let store: &Store = $store;
        let mut retry = 0u32;
        loop {
            match $stmt.await {
                Ok(v) => break Ok(v),
                Err(e) => {
                    let code = server_code(&e);
                    if is_transient(code) && retry < CONFLICT_RETRIES {
                        retry += 1;
                        store.metrics.conflict(code.unwrap_or(0));
                        tokio::time::sleep(conflict_delay(retry)).await;
                        continue;
                    }
                    break Err::<_, Error>(Error::from(e));
                }
            }
        }
    }};
}

/// A job to insert, already validated and serialized.
#[derive(Debug, Clone)]
pub(crate) struct NewJob {
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) key: String,
    pub(crate) payload: String,
    pub(crate) priority: i16,
    pub(crate) max_attempts: u32,
    pub(crate) lease_ms: u32,
    /// An absolute start time (UTC); `None` means now plus `delay_us`.
    pub(crate) run_at: Option<NaiveDateTime>,
    pub(crate) delay_us: i64,
}

const INSERT_ONE: &str = "INSERT INTO job_queue \
     (queue, kind, task_key, payload, status, priority, run_at, attempts, max_attempts, lease_ms, created_at, updated_at) \
     VALUES (?, ?, ?, ?, \
       IF(COALESCE(?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND) > UTC_TIMESTAMP(6), 'scheduled', 'ready'), \
       ?, COALESCE(?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), 0, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))";

const VALUES_ROW: &str = "(?, ?, ?, ?, \
       IF(COALESCE(?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND) > UTC_TIMESTAMP(6), 'scheduled', 'ready'), \
       ?, COALESCE(?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), 0, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))";

/// [`VALUES_ROW`] for a job due now: queue, kind, key, payload, priority, max_attempts,
/// lease_ms.
const VALUES_ROW_NOW: &str = "(?, ?, ?, ?, 'ready', ?, UTC_TIMESTAMP(6), 0, ?, ?, \
       UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))";

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
    q.bind(job.max_attempts).bind(job.lease_ms)
}

fn is_key_conflict(e: &sqlx::Error) -> bool {
    server_code(e) == Some(1062)
}

/// Inserts one job; a task key that exists already gives `Duplicate` with the existing id.
///
/// A duplicate-key error undoes only the failed statement, so this is safe inside the
/// caller's transaction.
pub(crate) async fn insert(conn: &mut MySqlConnection, job: &NewJob) -> Result<Enqueued> {
    // The existing row can be pruned between our failed INSERT and the SELECT: then the
    // key is free again and the INSERT is tried once more.
    for _ in 0..3 {
        match bind_new(sqlx::query(INSERT_ONE), job, false)
            .execute(&mut *conn)
            .await
        {
            Ok(done) => return Ok(Enqueued::New(done.last_insert_id())),
            Err(e) if is_key_conflict(&e) => {
                if let Some(id) = existing_id(conn, &job.key).await? {
                    return Ok(Enqueued::Duplicate(id));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::InvalidKey {
        key: job.key.chars().take(80).collect(),
        reason: "the key kept colliding with a row that vanished before it could be read".into(),
    })
}

async fn existing_id(conn: &mut MySqlConnection, key: &str) -> Result<Option<u64>> {
    // A locking read sees the latest committed row even inside the caller's REPEATABLE READ
    // snapshot; the duplicate-key error already holds this shared lock anyway.
    let id: Option<u64> =
        sqlx::query_scalar("SELECT id FROM job_queue WHERE task_key = ? LOCK IN SHARE MODE")
            .bind(key)
            .fetch_optional(&mut *conn)
            .await?;
    Ok(id)
}

/// Jobs per multi-row `INSERT` of [`insert_many`].
const BULK_CHUNK: usize = 1000;

/// Payload bytes per multi-row `INSERT` of [`insert_many`].
const BULK_BYTES: usize = 4 * 1024 * 1024;

/// Inserts many jobs with few statements: one `SELECT` of the keys that exist, one
/// multi-row `INSERT` of the rest, one `SELECT` of their ids, per chunk of 1,000. Returns one
/// outcome per input job, in order. Meant to run inside a transaction.
pub(crate) async fn insert_many(
    conn: &mut MySqlConnection,
    jobs: &[NewJob],
) -> Result<Vec<Enqueued>> {
    let mut out = Vec::with_capacity(jobs.len());
    let mut start = 0;
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
        out.extend(insert_chunk(conn, &jobs[start..end]).await?);
        start = end;
    }
    Ok(out)
}

async fn insert_chunk(conn: &mut MySqlConnection, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
    let keys: Vec<&str> = jobs.iter().map(|j| j.key.as_str()).collect();
    // A plain read: a locking one would take gap locks on keys that do not exist yet, which
    // deadlock two batches enqueued at once. A key inserted by someone else after this read
    // makes the INSERT fail with a duplicate, handled below.
    let existing = ids_by_key(conn, &keys, false).await?;
    // The first job of each key not yet in the table is inserted; every other one is a
    // duplicate (of the table's row, or of the earlier job in this batch).
    let mut seen = std::collections::HashSet::new();
    // Rows keep the caller's order: ids, and so claim order, follow it. Two batches that
    // share keys can deadlock on them; the transaction is then retried whole.
    let fresh: Vec<&NewJob> = jobs
        .iter()
        .filter(|j| !existing.contains_key(j.key.as_str()) && seen.insert(j.key.as_str()))
        .collect();
    if !fresh.is_empty() {
        // Jobs due at once (no `run_at`, no delay: every `enqueue_many` without options)
        // take the plain row, without the per-row expressions and their four parameters.
        let now = fresh.iter().all(|j| j.run_at.is_none() && j.delay_us == 0);
        let sql = format!(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, priority, run_at, attempts, max_attempts, lease_ms, created_at, updated_at) VALUES {}",
            vec![if now { VALUES_ROW_NOW } else { VALUES_ROW }; fresh.len()].join(", ")
        );
        // A full chunk, the usual case of a large batch, has one arity: keep it prepared
        // (parsing a statement of many rows costs about as much as running it). Other
        // arities are prepared for one use only, so that they cannot pile up on the server.
        let mut q = sqlx::query(&sql).persistent(fresh.len() == BULK_CHUNK);
        for job in &fresh {
            q = bind_new(q, job, now);
        }
        if let Err(e) = q.execute(&mut *conn).await {
            if !is_key_conflict(&e) {
                return Err(e.into());
            }
            // Another enqueuer inserted one of these keys since our SELECT: fall back to
            // one statement per job, which reports each duplicate on its own.
            let mut out = Vec::with_capacity(jobs.len());
            for job in jobs {
                out.push(insert(conn, job).await?);
            }
            return Ok(out);
        }
    }
    let fresh_keys: Vec<&str> = fresh.iter().map(|j| j.key.as_str()).collect();
    let inserted = ids_by_key(conn, &fresh_keys, false).await?;
    let mut first = std::collections::HashSet::new();
    jobs.iter()
        .map(|j| {
            let k = j.key.as_str();
            if let Some(&id) = existing.get(k) {
                Ok(Enqueued::Duplicate(id))
            } else {
                let id = *inserted
                    .get(k)
                    .ok_or_else(|| Error::NotFound(format!("with key {k:?} after insert")))?;
                Ok(if first.insert(k) {
                    Enqueued::New(id)
                } else {
                    Enqueued::Duplicate(id)
                })
            }
        })
        .collect()
}

async fn ids_by_key<'k>(
    conn: &mut MySqlConnection,
    keys: &[&'k str],
    locking: bool,
) -> Result<std::collections::HashMap<&'k str, u64>> {
    let mut map = std::collections::HashMap::new();
    if keys.is_empty() {
        return Ok(map);
    }
    let sql = format!(
        "SELECT id, task_key FROM job_queue WHERE task_key IN ({}){}",
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
            map.insert(*k, id);
        }
    }
    Ok(map)
}

/// A job this worker has just claimed.
#[derive(Debug)]
#[non_exhaustive]
pub struct Claimed {
    /// The job's id.
    pub id: u64,
    /// The queue it was claimed from.
    pub queue: String,
    /// Its kind name.
    pub kind: String,
    /// Its idempotency key.
    pub task_key: String,
    /// The payload, or why it could not be read.
    pub payload: std::result::Result<serde_json::Value, String>,
    /// This claim's attempt number: the fencing token of every later write.
    pub attempt: u32,
    /// How many attempts it has in all.
    pub max_attempts: u32,
    /// Its lease length.
    pub lease: Duration,
    /// A local instant taken just before the claim's `UPDATE`: the lease runs out no earlier
    /// than `claimed_at + lease` by this process's monotonic clock.
    pub claimed_at: std::time::Instant,
}

/// Why a claim found nothing. None of these is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmptyClaim {
    /// No ready job in any served queue.
    Idle,
    /// Ready jobs exist, but other claimers hold all of them.
    Contended,
    /// No ready job; only running jobs, waiting on their leases.
    LeasedOnly,
    /// Every served queue is paused.
    Paused,
}

/// How a running job's attempt ends, as written by [`Store::finish`].
#[derive(Debug, Clone)]
pub enum Finish {
    /// Back to `scheduled`, due after `delay`; to `cancelled` instead if an operator's
    /// cancel request is pending (the worker may not have passed it on to the job yet).
    Retry {
        /// The wait before the next attempt.
        delay: Duration,
        /// The attempt's error, kept in `last_error`.
        error: String,
    },
    /// To `failed` for good.
    Fail {
        /// Why, kept in `last_error`.
        error: String,
    },
    /// To `cancelled` (an operator asked).
    Cancelled {
        /// Why, kept in `last_error`.
        error: String,
    },
    /// Back to `ready` at once with `attempts` kept (shutdown); to `cancelled` instead if an
    /// operator's cancel request is pending.
    HandBack,
}

/// What one maintenance pass over expired leases did.
#[derive(Debug, Default)]
pub struct Reclaimed {
    /// (id, attempts, former owner) put back to `ready`.
    pub ready: Vec<(u64, u32, String)>,
    /// (id, attempts, former owner) out of attempts, now `failed`.
    pub failed: Vec<(u64, u32, String)>,
    /// Ids whose cancel had been requested, now `cancelled`.
    pub cancelled: Vec<u64>,
}

/// A claim as seen by a lease check: whether this worker still holds it.
#[derive(Debug)]
pub struct LeaseState {
    /// The job's id.
    pub id: u64,
    /// Whether the owner still holds this claim (same attempt, still running).
    pub held: bool,
    /// Whether an operator asked to cancel the job.
    pub cancel_requested: bool,
}

/// The low-level queue operations, with their conflict retries counted. Get one with
/// [`Queue::store`](crate::Queue::store).
#[derive(Clone, Debug)]
pub struct Store {
    pub(crate) pool: MySqlPool,
    pub(crate) set_isolation: bool,
    pub(crate) metrics: Arc<Metrics>,
}

impl Store {
    /// Claims up to `limit` ready jobs of `queue` for `owner`: `SELECT ... FOR UPDATE SKIP
    /// LOCKED` over the claim index, then one `UPDATE` of exactly those rows, in one short
    /// transaction. Rows other claimers hold are skipped, never waited for. If the `UPDATE`
    /// matches fewer rows than were locked, something changed them under us: roll back and
    /// claim nothing.
    pub async fn claim(&self, queue: &str, owner: &str, limit: usize) -> Result<Vec<Claimed>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        transaction!(self, |conn| {
            let rows = sqlx::query(
                "SELECT id, queue, kind, task_key, payload, attempts, max_attempts, lease_ms \
                 FROM job_queue FORCE INDEX (job_queue_claim) \
                 WHERE queue = ? AND status = 'ready' \
                   AND NOT EXISTS (SELECT 1 FROM job_queue_pause p WHERE p.queue = ?) \
                 ORDER BY priority, id LIMIT ? FOR UPDATE SKIP LOCKED",
            )
            .bind(queue)
            .bind(queue)
            .bind(limit as u64)
            .fetch_all(&mut *conn)
            .await?;
            if rows.is_empty() {
                return Ok((Vec::new(), false));
            }
            let ids: Vec<u64> = rows.iter().map(|r| r.get::<u64, _>(0)).collect();
            let sql = format!(
                "UPDATE job_queue SET status = 'running', lease_owner = ?, \
                 lease_until = UTC_TIMESTAMP(6) + INTERVAL lease_ms * 1000 MICROSECOND, \
                 attempts = attempts + 1, updated_at = UTC_TIMESTAMP(6) \
                 WHERE id IN ({}) AND status = 'ready'",
                placeholders(padded_len(ids.len()))
            );
            let mut q = sqlx::query(&sql).bind(owner);
            for id in padded(&ids) {
                q = q.bind(id);
            }
            // The server's lease starts while this statement runs: a local clock read just
            // before it is never later than the server's, so deadlines derived from it are
            // conservative.
            let sent = std::time::Instant::now();
            let matched = q.execute(&mut *conn).await?.rows_affected();
            if matched != ids.len() as u64 {
                tracing::warn!(
                    locked = ids.len(),
                    matched,
                    "claim matched fewer rows than it locked; rolled back"
                );
                return Ok((Vec::new(), false));
            }
            let claimed = rows
                .iter()
                .map(|r| claimed_from_row(r, sent))
                .collect::<sqlx::Result<Vec<_>>>()?;
            Ok((claimed, true))
        })
    }

    /// Why a claim over `queues` found nothing (plain reads: they lock nothing).
    pub async fn classify_empty(&self, queues: &[String]) -> Result<EmptyClaim> {
        let mut paused = 0;
        let mut reason = EmptyClaim::Idle;
        for queue in queues {
            let row = sqlx::query(
                "SELECT \
                   EXISTS(SELECT 1 FROM job_queue_pause WHERE queue = ?), \
                   EXISTS(SELECT 1 FROM job_queue WHERE queue = ? AND status = 'ready'), \
                   EXISTS(SELECT 1 FROM job_queue WHERE queue = ? AND status = 'running')",
            )
            .bind(queue)
            .bind(queue)
            .bind(queue)
            .fetch_one(&self.pool)
            .await?;
            let (is_paused, ready, running): (bool, bool, bool) =
                (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            if is_paused {
                paused += 1;
            } else if ready {
                return Ok(EmptyClaim::Contended);
            } else if running {
                reason = EmptyClaim::LeasedOnly;
            }
        }
        if paused == queues.len() {
            return Ok(EmptyClaim::Paused);
        }
        Ok(reason)
    }

    /// Marks claims done, many per statement. `claims` are (id, attempt). Returns the ids
    /// whose lease this owner no longer held: nothing was written for them.
    pub async fn complete(&self, owner: &str, claims: &[(u64, u32)]) -> Result<Vec<u64>> {
        let mut lost = Vec::new();
        for chunk in claims.chunks(128) {
            let ids: Vec<u64> = chunk.iter().map(|c| c.0).collect();
            let tokens: Vec<String> = chunk.iter().map(|(id, a)| format!("{id}:{a}")).collect();
            let n = padded_len(chunk.len());
            let sql = format!(
                "UPDATE job_queue SET status = 'done', lease_owner = NULL, lease_until = NULL, \
                 finished_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6) \
                 WHERE id IN ({p}) AND status = 'running' AND lease_owner = ? \
                   AND CONCAT(id, ':', attempts) IN ({p})",
                p = placeholders(n)
            );
            let matched = autocommit!(self, {
                let mut q = sqlx::query(&sql);
                for id in padded(&ids) {
                    q = q.bind(id);
                }
                q = q.bind(owner);
                for t in padded(&tokens) {
                    q = q.bind(t);
                }
                q.execute(&self.pool)
            })?
            .rows_affected();
            if matched != chunk.len() as u64 {
                // Find out which: a row is ours if it is now done at our attempt.
                let done: Vec<u64> = self.ids_done_at(chunk).await?;
                lost.extend(ids.iter().filter(|id| !done.contains(id)));
            }
        }
        Ok(lost)
    }

    async fn ids_done_at(&self, claims: &[(u64, u32)]) -> Result<Vec<u64>> {
        let sql = format!(
            "SELECT id, attempts FROM job_queue WHERE id IN ({}) AND status = 'done'",
            placeholders(claims.len())
        );
        let mut q = sqlx::query(&sql).persistent(false);
        for (id, _) in claims {
            q = q.bind(*id);
        }
        let rows = q.fetch_all(&self.pool).await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let id: u64 = r.get(0);
                let attempts: u32 = r.get(1);
                claims.contains(&(id, attempts)).then_some(id)
            })
            .collect())
    }

    /// Ends one claim other than by success. Returns the status written (a retry or a
    /// hand-back ends `cancelled` when an operator's cancel was pending), or `None` when the
    /// lease was lost: nothing was written.
    pub async fn finish(
        &self,
        owner: &str,
        id: u64,
        attempt: u32,
        how: &Finish,
    ) -> Result<Option<JobStatus>> {
        const FENCE: &str =
            "WHERE id = ? AND status = 'running' AND lease_owner = ? AND attempts = ?";
        let (sql, error, delay_us) = match how {
            Finish::Retry { delay, error } => (
                format!(
                    "UPDATE job_queue SET status = IF(cancel_requested = 1, 'cancelled', 'scheduled'), \
                     run_at = IF(cancel_requested = 1, run_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), \
                     finished_at = IF(cancel_requested = 1, UTC_TIMESTAMP(6), NULL), \
                     cancel_requested = LAST_INSERT_ID(cancel_requested), \
                     lease_owner = NULL, lease_until = NULL, last_error = ?, updated_at = UTC_TIMESTAMP(6) {FENCE}"
                ),
                Some(error),
                Some(delay.as_micros().min(i64::MAX as u128) as i64),
            ),
            Finish::Fail { error } => (
                format!(
                    "UPDATE job_queue SET status = 'failed', lease_owner = NULL, lease_until = NULL, last_error = ?, \
                     finished_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6) {FENCE}"
                ),
                Some(error),
                None,
            ),
            Finish::Cancelled { error } => (
                format!(
                    "UPDATE job_queue SET status = 'cancelled', lease_owner = NULL, lease_until = NULL, last_error = ?, \
                     finished_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6) {FENCE}"
                ),
                Some(error),
                None,
            ),
            Finish::HandBack => (
                format!(
                    "UPDATE job_queue SET status = IF(cancel_requested = 1, 'cancelled', 'ready'), \
                     finished_at = IF(cancel_requested = 1, UTC_TIMESTAMP(6), NULL), \
                     last_error = IF(cancel_requested = 1, \
                       'cancelled on request; its worker shut down before the job stopped', last_error), \
                     cancel_requested = LAST_INSERT_ID(cancel_requested), \
                     lease_owner = NULL, lease_until = NULL, updated_at = UTC_TIMESTAMP(6) {FENCE}"
                ),
                None,
                None,
            ),
        };
        let error = error.map(|e| truncate(e, MAX_ERROR_BYTES));
        let done = autocommit!(self, {
            let mut q = sqlx::query(&sql);
            if let Some(us) = delay_us {
                q = q.bind(us);
            }
            if let Some(e) = &error {
                q = q.bind(e.as_str());
            }
            q.bind(id).bind(owner).bind(attempt).execute(&self.pool)
        })?;
        if done.rows_affected() != 1 {
            return Ok(None);
        }
        // A retry or hand-back becomes a cancel when an operator's request was pending. The
        // statement reports which through `LAST_INSERT_ID(cancel_requested)`, which sets the
        // column to itself and returns its value in the reply, so no second read is needed.
        let cancelled = done.last_insert_id() == 1;
        Ok(Some(match how {
            Finish::Retry { .. } if !cancelled => JobStatus::Scheduled,
            Finish::HandBack if !cancelled => JobStatus::Ready,
            Finish::Fail { .. } => JobStatus::Failed,
            _ => JobStatus::Cancelled,
        }))
    }

    /// Extends the leases of `ids` held by `owner`, one statement for all of them. Jobs with
    /// a pending cancel request are left out unless `with_cancel_requested`, so that a short
    /// count tells the caller to look. Returns the rows matched.
    pub async fn renew(
        &self,
        owner: &str,
        ids: &[u64],
        with_cancel_requested: bool,
    ) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let mut matched = 0;
        for chunk in ids.chunks(128) {
            let sql = format!(
                "UPDATE job_queue SET lease_until = UTC_TIMESTAMP(6) + INTERVAL lease_ms * 1000 MICROSECOND \
                 WHERE id IN ({}) AND status = 'running' AND lease_owner = ?{}",
                placeholders(padded_len(chunk.len())),
                if with_cancel_requested { "" } else { " AND cancel_requested = 0" }
            );
            matched += autocommit!(self, {
                let mut q = sqlx::query(&sql);
                for id in padded(chunk) {
                    q = q.bind(id);
                }
                q.bind(owner).execute(&self.pool)
            })?
            .rows_affected();
        }
        Ok(matched)
    }

    /// Whether `owner` still holds each claim in `claims` (id, attempt), and whether its
    /// cancel was requested.
    pub async fn lease_states(
        &self,
        owner: &str,
        claims: &[(u64, u32)],
    ) -> Result<Vec<LeaseState>> {
        let mut out = Vec::with_capacity(claims.len());
        for chunk in claims.chunks(128) {
            let sql = format!(
                "SELECT id, attempts, status = 'running' AND lease_owner <=> ?, cancel_requested \
                 FROM job_queue WHERE id IN ({})",
                placeholders(chunk.len())
            );
            let mut q = sqlx::query(&sql).persistent(false).bind(owner);
            for (id, _) in chunk {
                q = q.bind(*id);
            }
            let rows = q.fetch_all(&self.pool).await?;
            for &(id, attempt) in chunk {
                let row = rows.iter().find(|r| r.get::<u64, _>(0) == id);
                out.push(match row {
                    Some(r) => LeaseState {
                        id,
                        held: r.get::<u32, _>(1) == attempt && r.get::<bool, _>(2),
                        cancel_requested: r.get::<bool, _>(3),
                    },
                    None => LeaseState {
                        id,
                        held: false,
                        cancel_requested: false,
                    },
                });
            }
        }
        Ok(out)
    }

    /// Takes back up to `limit` jobs whose lease expired: to `ready` with `attempts` kept, to
    /// `failed` when that was the last attempt, to `cancelled` when a cancel was pending.
    /// Rows that another process is reclaiming are skipped.
    pub async fn reclaim(&self, limit: usize) -> Result<Reclaimed> {
        transaction!(self, |conn| {
            let rows = sqlx::query(
                "SELECT id, attempts, max_attempts, cancel_requested, COALESCE(lease_owner, '') \
                 FROM job_queue FORCE INDEX (job_queue_lease) \
                 WHERE status = 'running' AND lease_until < UTC_TIMESTAMP(6) \
                 ORDER BY lease_until, id LIMIT ? FOR UPDATE SKIP LOCKED",
            )
            .bind(limit as u64)
            .fetch_all(&mut *conn)
            .await?;
            let mut out = Reclaimed::default();
            for r in &rows {
                let (id, attempts, max, cancel): (u64, u32, u32, bool) =
                    (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
                let owner = text(r, 4)?;
                if cancel {
                    out.cancelled.push(id);
                } else if attempts >= max {
                    out.failed.push((id, attempts, owner));
                } else {
                    out.ready.push((id, attempts, owner));
                }
            }
            const GUARD: &str = "AND status = 'running' AND lease_until < UTC_TIMESTAMP(6)";
            let ready: Vec<u64> = out.ready.iter().map(|r| r.0).collect();
            let failed: Vec<u64> = out.failed.iter().map(|r| r.0).collect();
            let updates = [
                (
                    &ready,
                    "status = 'ready', last_error = LEFT(CONCAT('lease of ', COALESCE(lease_owner, '?'), \
                     ' expired during attempt ', attempts, '; taken back', \
                     COALESCE(CONCAT('; previous error: ', last_error), '')), 16000)",
                ),
                (
                    &failed,
                    "status = 'failed', finished_at = UTC_TIMESTAMP(6), last_error = LEFT(CONCAT('lease of ', \
                     COALESCE(lease_owner, '?'), ' expired during the last attempt (', attempts, ' of ', max_attempts, ')', \
                     COALESCE(CONCAT('; previous error: ', last_error), '')), 16000)",
                ),
                (
                    &out.cancelled,
                    "status = 'cancelled', finished_at = UTC_TIMESTAMP(6), \
                     last_error = 'cancelled on request; its worker stopped renewing the lease'",
                ),
            ];
            for (ids, set) in updates {
                if ids.is_empty() {
                    continue;
                }
                let sql = format!(
                    "UPDATE job_queue SET {set}, lease_owner = NULL, lease_until = NULL, \
                     updated_at = UTC_TIMESTAMP(6) WHERE id IN ({}) {GUARD}",
                    placeholders(padded_len(ids.len()))
                );
                let mut q = sqlx::query(&sql);
                for id in padded(ids) {
                    q = q.bind(id);
                }
                let matched = q.execute(&mut *conn).await?.rows_affected();
                if matched != ids.len() as u64 {
                    return Ok((Reclaimed::default(), false));
                }
            }
            Ok((out, true))
        })
    }

    /// Deletes up to `limit` jobs with `status` that finished more than `older_than_us`
    /// microseconds ago. Rows locked by anyone else are skipped.
    pub(crate) async fn prune_batch(
        &self,
        status: JobStatus,
        older_than_us: i64,
        limit: usize,
    ) -> Result<u64> {
        transaction!(self, |conn| {
            let ids: Vec<u64> = sqlx::query_scalar(
                "SELECT id FROM job_queue FORCE INDEX (job_queue_finished) \
                 WHERE status = ? AND finished_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND \
                 ORDER BY finished_at, id LIMIT ? FOR UPDATE SKIP LOCKED",
            )
            .bind(status.as_str())
            .bind(older_than_us)
            .bind(limit as u64)
            .fetch_all(&mut *conn)
            .await?;
            if ids.is_empty() {
                return Ok((0, false));
            }
            let sql = format!(
                "DELETE FROM job_queue WHERE id IN ({}) AND status = ?",
                placeholders(padded_len(ids.len()))
            );
            let mut q = sqlx::query(&sql);
            for id in padded(&ids) {
                q = q.bind(id);
            }
            let n = q
                .bind(status.as_str())
                .execute(&mut *conn)
                .await?
                .rows_affected();
            Ok((n, true))
        })
    }

    /// Inserts many jobs in one transaction at READ COMMITTED, retried whole after a
    /// deadlock or lock wait timeout. See [`insert_many`].
    pub(crate) async fn insert_many(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
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

    /// Inserts a periodic job's tick (no log of duplicates: with N nodes, N - 1 of them
    /// find the tick taken, which is the point).
    pub(crate) async fn insert_tick(&self, job: &NewJob) -> Result<Enqueued> {
        let mut conn = self.pool.acquire().await?;
        insert(&mut conn, job).await
    }

    /// Makes up to `limit` due `scheduled` jobs `ready`. Returns how many.
    pub async fn promote(&self, limit: usize) -> Result<u64> {
        // A plain read first: most passes find nothing due, and a plain read locks nothing
        // and needs no transaction.
        let due: bool = sqlx::query_scalar(
            "SELECT EXISTS(SELECT 1 FROM job_queue FORCE INDEX (job_queue_due) \
             WHERE status = 'scheduled' AND run_at <= UTC_TIMESTAMP(6))",
        )
        .fetch_one(&self.pool)
        .await?;
        if !due {
            return Ok(0);
        }
        transaction!(self, |conn| {
            let ids: Vec<u64> = sqlx::query_scalar(
                "SELECT id FROM job_queue FORCE INDEX (job_queue_due) \
                 WHERE status = 'scheduled' AND run_at <= UTC_TIMESTAMP(6) \
                 ORDER BY run_at, id LIMIT ? FOR UPDATE SKIP LOCKED",
            )
            .bind(limit as u64)
            .fetch_all(&mut *conn)
            .await?;
            if ids.is_empty() {
                return Ok((0, false));
            }
            let sql = format!(
                "UPDATE job_queue SET status = 'ready', updated_at = UTC_TIMESTAMP(6) \
                 WHERE id IN ({}) AND status = 'scheduled'",
                placeholders(padded_len(ids.len()))
            );
            let mut q = sqlx::query(&sql);
            for id in padded(&ids) {
                q = q.bind(id);
            }
            let matched = q.execute(&mut *conn).await?.rows_affected();
            if matched != ids.len() as u64 {
                return Ok((0, false));
            }
            Ok((matched, true))
        })
    }
}

fn claimed_from_row(r: &MySqlRow, claimed_at: std::time::Instant) -> sqlx::Result<Claimed> {
    let lease_ms: u32 = r.try_get("lease_ms")?;
    let attempts: u32 = r.try_get("attempts")?;
    Ok(Claimed {
        id: r.try_get("id")?,
        queue: text(r, "queue")?,
        kind: text(r, "kind")?,
        task_key: key_text(r, "task_key")?,
        payload: r
            .try_get::<sqlx::types::Json<serde_json::Value>, _>("payload")
            .map(|j| j.0)
            .map_err(|e| format!("payload is not readable JSON: {e}")),
        // The row was read before the UPDATE incremented it.
        attempt: attempts + 1,
        max_attempts: r.try_get("max_attempts")?,
        lease: Duration::from_millis(lease_ms.into()),
        claimed_at,
    })
}

/// Which row [`fetch_job`] reads.
#[derive(Debug)]
pub(crate) enum JobLookup<'a> {
    Id(u64),
    Key(&'a str),
}

pub(crate) const JOB_COLUMNS: &str = "id, queue, kind, task_key, payload, CAST(status AS CHAR) AS status, priority, run_at, \
    attempts, max_attempts, lease_owner, lease_until, cancel_requested, last_error, created_at, updated_at, finished_at";

pub(crate) async fn fetch_job(
    pool: &MySqlPool,
    lookup: JobLookup<'_>,
) -> Result<Option<JobRecord>> {
    let row = match lookup {
        JobLookup::Id(id) => {
            sqlx::query(&format!("SELECT {JOB_COLUMNS} FROM job_queue WHERE id = ?"))
                .bind(id)
                .fetch_optional(pool)
                .await?
        }
        JobLookup::Key(key) => {
            sqlx::query(&format!(
                "SELECT {JOB_COLUMNS} FROM job_queue WHERE task_key = ?"
            ))
            .bind(key)
            .fetch_optional(pool)
            .await?
        }
    };
    row.as_ref().map(record_from_row).transpose()
}

pub(crate) fn record_from_row(r: &MySqlRow) -> Result<JobRecord> {
    let status = text(r, "status")?;
    Ok(JobRecord {
        id: r.try_get("id")?,
        queue: text(r, "queue")?,
        kind: text(r, "kind")?,
        task_key: key_text(r, "task_key")?,
        payload: r
            .try_get::<sqlx::types::Json<serde_json::Value>, _>("payload")
            .map(|j| j.0)?,
        status: status.parse::<JobStatus>()?,
        priority: r.try_get("priority")?,
        run_at: r.try_get("run_at")?,
        attempts: r.try_get("attempts")?,
        max_attempts: r.try_get("max_attempts")?,
        lease_owner: opt_text(r, "lease_owner")?,
        lease_until: r.try_get("lease_until")?,
        cancel_requested: r.try_get("cancel_requested")?,
        last_error: opt_text(r, "last_error")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        finished_at: r.try_get("finished_at")?,
    })
}

/// A text column. Columns with a binary collation (`utf8mb4_bin`, `ascii_bin`: keys and
/// queue names compare byte for byte) are reported as VARBINARY by the driver, so they are
/// read as bytes when the string decode refuses them.
pub(crate) fn text<I: sqlx::ColumnIndex<MySqlRow> + Copy>(
    r: &MySqlRow,
    i: I,
) -> sqlx::Result<String> {
    match r.try_get::<String, _>(i) {
        Ok(s) => Ok(s),
        Err(_) => {
            let bytes: Vec<u8> = r.try_get(i)?;
            String::from_utf8(bytes).map_err(|e| sqlx::Error::Decode(Box::new(e)))
        }
    }
}

/// A task key: bytes in the table, and a producer writing SQL may store any. A key that is
/// not UTF-8 is read lossily (U+FFFD for each bad sequence) rather than failing the read:
/// failing it would fail every claim that meets the row, and stop its queue.
fn key_text<I: sqlx::ColumnIndex<MySqlRow> + Copy>(r: &MySqlRow, i: I) -> sqlx::Result<String> {
    let bytes: Vec<u8> = r.try_get(i)?;
    Ok(match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// A nullable text column; see [`text`].
pub(crate) fn opt_text<I: sqlx::ColumnIndex<MySqlRow> + Copy>(
    r: &MySqlRow,
    i: I,
) -> sqlx::Result<Option<String>> {
    match r.try_get::<Option<String>, _>(i) {
        Ok(s) => Ok(s),
        Err(_) => {
            let bytes: Option<Vec<u8>> = r.try_get(i)?;
            bytes
                .map(|b| String::from_utf8(b).map_err(|e| sqlx::Error::Decode(Box::new(e))))
                .transpose()
        }
    }
}

/// `?, ?, ?` with `n` marks.
pub(crate) fn placeholders(n: usize) -> String {
    let mut s = String::with_capacity(n * 3);
    for i in 0..n {
        if i > 0 {
            s.push_str(", ");
        }
        s.push('?');
    }
    s
}

/// Each `IN (...)` arity is its own prepared statement on the server, which caps how many
/// there may be; padding lists to a power of two keeps the arities to a handful.
pub(crate) fn padded_len(n: usize) -> usize {
    // Four sizes cover every list the worker sends (claims take at most 100 rows; writes,
    // renewals and lease checks go in chunks of at most 128).
    match n {
        0..=1 => 1,
        2..=8 => 8,
        9..=32 => 32,
        33..=128 => 128,
        _ => n.next_power_of_two(),
    }
}

/// `items` padded to [`padded_len`] by repeating the last item (harmless inside `IN`).
pub(crate) fn padded<T: Clone>(items: &[T]) -> Vec<T> {
    let mut v = items.to_vec();
    if let Some(last) = items.last() {
        v.resize(padded_len(items.len()), last.clone());
    }
    v
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
