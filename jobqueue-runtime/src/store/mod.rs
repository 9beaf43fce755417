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

use crate::error::{server_code, Error, Result};
use crate::metrics::Metrics;
pub use crate::model::{Claimed, EmptyClaim, Finish, LeaseState, Reclaimed};
use crate::model::{Enqueued, JobRecord, JobStatus, NewJob, TickPass};
use crate::retry::{conflict_delay, is_transient};

/// How many times a transaction is retried after a deadlock or lock wait timeout.
const CONFLICT_RETRIES: u32 = 8;

/// The longest `last_error` kept, in bytes (the column is `TEXT`).
const MAX_ERROR_BYTES: usize = 16 * 1024;

/// Runs `$body` (which yields `(value, commit)`) in a transaction at READ COMMITTED, retrying
/// the whole transaction after a deadlock (1213), lock wait timeout (1205) or MariaDB's
/// snapshot conflict (1020). The transaction is always rolled back explicitly on error: after
/// a 1205 the server has undone only the statement.
///
/// With a [`Store::call_timeout`], each try (`BEGIN` to `COMMIT`) must end within it. A try
/// that does not is dropped together with its connection, which is closed: a `BEGIN` or
/// `COMMIT` cut off half-way may have left a transaction open on it, and a pooled connection
/// waiting for a late reply would hang the next user.
macro_rules! transaction {
    ($store:expr, |$conn:ident| $body:block) => {{
        let store: &Store = $store;
        let mut retry = 0u32;
        loop {
            let mut pooled = acquire(store).await?;
            let one_try = async {
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
                sqlx::Result::Ok(match result {
                    Ok((value, true)) => {
                        tx.commit().await?;
                        Ok(value)
                    }
                    Ok((value, false)) => {
                        tx.rollback().await?;
                        Ok(value)
                    }
                    Err(e) => {
                        let _ = tx.rollback().await;
                        Err(e)
                    }
                })
            };
            let outcome = match store.call_timeout {
                None => one_try.await,
                Some(limit) => {
                    let bounded = tokio::time::timeout(limit, one_try).await;
                    match bounded {
                        Ok(r) => r,
                        Err(_) => {
                            drop(pooled.detach());
                            Err(timed_out(limit))
                        }
                    }
                }
            };
            match outcome {
                Err(e) => break Err(Error::from(e)),
                Ok(Ok(value)) => break Ok(value),
                Ok(Err(e)) => {
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
/// transient conflict. In the `|conn|` form the statement runs on one connection of the pool
/// within the store's [`Store::call_timeout`] (see [`on_connection!`]).
macro_rules! autocommit {
    ($store:expr, |$conn:ident| $stmt:expr) => {
        autocommit!($store, on_connection!($store, |$conn| $stmt))
    };
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

/// A future that runs `$stmt` (a future of a `sqlx::Result`, using `$conn`) on one connection
/// of the store's pool, within [`Store::call_timeout`] if it has one. A statement that runs out
/// of time is abandoned with its connection, which is closed instead of going back to the
/// pool: its reply may still arrive, or never (a dead peer), and the pool would test it with a
/// ping that waits as long.
macro_rules! on_connection {
    ($store:expr, |$conn:ident| $stmt:expr) => {
        async {
            let store: &Store = $store;
            let mut pooled = acquire(store).await?;
            let call = async {
                let $conn: &mut MySqlConnection = &mut pooled;
                $stmt.await
            };
            match store.call_timeout {
                None => call.await,
                Some(limit) => {
                    let bounded = tokio::time::timeout(limit, call).await;
                    match bounded {
                        Ok(r) => r,
                        Err(_) => {
                            drop(pooled.detach());
                            Err(timed_out(limit).into())
                        }
                    }
                }
            }
        }
    };
}

/// A connection of the store's pool, within [`Store::call_timeout`] when it has one (on top
/// of the pool's own acquire timeout).
async fn acquire(store: &Store) -> sqlx::Result<sqlx::pool::PoolConnection<sqlx::MySql>> {
    match store.call_timeout {
        None => store.pool.acquire().await,
        Some(limit) => tokio::time::timeout(limit, store.pool.acquire())
            .await
            .unwrap_or_else(|_| Err(timed_out(limit))),
    }
}

/// The error of a call that got no reply within `limit`.
fn timed_out(limit: Duration) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "no reply from the database within {limit:?}; the connection was closed and the call will be retried on a new one"
        ),
    ))
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
                if let Some((id, kind)) = existing_id(conn, &job.key).await? {
                    // A kind hidden by the caller's snapshot cannot be compared: the key is
                    // taken either way, and the job holding it is most likely this kind's.
                    return duplicate_of(job, id, kind.as_deref().unwrap_or(&job.kind));
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

/// The id and kind of the job holding `key`.
async fn existing_id(
    conn: &mut MySqlConnection,
    key: &str,
) -> Result<Option<(u64, Option<String>)>> {
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
    // then the kind is unknown.
    let kind: Option<String> =
        sqlx::query_scalar("SELECT CAST(kind AS CHAR) FROM job_queue WHERE id = ?")
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?;
    Ok(Some((id, kind)))
}

/// `Duplicate(id)` when job `id`, which holds `job`'s key, is of `job`'s kind. A job of
/// another kind is an error: its `Duplicate` would say that this job exists, and it does not.
fn duplicate_of(job: &NewJob, id: u64, kind: &str) -> Result<Enqueued> {
    if kind == job.kind {
        Ok(Enqueued::Duplicate(id))
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
            if let Some((id, kind)) = existing.get(k) {
                duplicate_of(j, *id, kind)
            } else {
                let (id, kind) = inserted
                    .get(k)
                    .ok_or_else(|| Error::NotFound(format!("with key {k:?} after insert")))?;
                if first.insert(k) {
                    Ok(Enqueued::New(*id))
                } else {
                    duplicate_of(j, *id, kind)
                }
            }
        })
        .collect()
}

/// The id and kind of the job holding each of `keys` that is taken.
async fn ids_by_key<'k>(
    conn: &mut MySqlConnection,
    keys: &[&'k str],
    locking: bool,
) -> Result<std::collections::HashMap<&'k str, (u64, String)>> {
    let mut map = std::collections::HashMap::new();
    if keys.is_empty() {
        return Ok(map);
    }
    let sql = format!(
        "SELECT id, task_key, kind FROM job_queue WHERE task_key IN ({}){}",
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
            map.insert(*k, (id, text(&row, 2)?));
        }
    }
    Ok(map)
}

/// How many times a job's lease may expire before reclaim fails it, unless the worker says
/// otherwise ([`WorkerBuilder::max_lease_expiries`](crate::WorkerBuilder::max_lease_expiries)).
pub const DEFAULT_MAX_LEASE_EXPIRIES: u32 = 3;

/// The low-level queue operations, with their conflict retries counted. Get one with
/// [`Queue::store`](crate::Queue::store).
#[derive(Clone, Debug)]
pub struct Store {
    pub(crate) pool: MySqlPool,
    pub(crate) set_isolation: bool,
    pub(crate) metrics: Arc<Metrics>,
    /// How long one call (a statement, or one try of a transaction) may wait for the server
    /// before it is given up and its connection closed. `None`: as long as it takes. The
    /// worker bounds every call of its own; a handle from [`Queue::store`](crate::Queue::store)
    /// does not.
    pub(crate) call_timeout: Option<Duration>,
}

impl Store {
    /// This store with every call bounded by `limit` (see [`Store::call_timeout`]).
    pub(crate) fn bounded(&self, limit: Duration) -> Store {
        Store {
            call_timeout: Some(limit),
            ..self.clone()
        }
    }

    /// The database's clock (`UTC_TIMESTAMP(6)`).
    pub(crate) async fn now(&self) -> Result<NaiveDateTime> {
        Ok(
            on_connection!(self, |conn| sqlx::query_scalar("SELECT UTC_TIMESTAMP(6)")
                .fetch_one(&mut *conn))
            .await?,
        )
    }

    /// Claims up to `limit` ready jobs of `queue` for `owner`: `SELECT ... FOR UPDATE SKIP
    /// LOCKED` over the claim index, then one `UPDATE` of exactly those rows, in one short
    /// transaction. Rows other claimers hold are skipped, never waited for. If the `UPDATE`
    /// matches fewer rows than were locked, something changed them under us: roll back and
    /// claim nothing.
    ///
    /// The locking read takes only small columns; payloads and keys are read by id after
    /// the COMMIT, so that the rows are locked for as short a time as possible. That read
    /// also names the owner and the attempt: after a COMMIT whose reply was lost (the
    /// connection died), it finds out whether the claim was made, and returns its jobs if
    /// so, instead of leaving them to run out their lease unrun. A row whose key, queue or
    /// kind cannot be decoded is returned with the reason in `payload`, so that it fails on
    /// its own instead of failing every claim of its queue.
    pub async fn claim(&self, queue: &str, owner: &str, limit: usize) -> Result<Vec<Claimed>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // (id, attempt, max_attempts, lease_ms) of the rows the UPDATE took, set only once it
        // matched them all: an error after that can only be the COMMIT's.
        let mut taken: Vec<(u64, u32, u32, u32)> = Vec::new();
        let mut sent = std::time::Instant::now();
        let committed: Result<()> = async {
            transaction!(self, |conn| {
                taken.clear();
                let rows = sqlx::query(
                    "SELECT id, attempts, max_attempts, lease_ms \
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
                    return Ok(((), false));
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
                // The server's lease starts while this statement runs: a local clock read
                // just before it is never later than the server's, so deadlines derived from
                // it are conservative.
                sent = std::time::Instant::now();
                let matched = q.execute(&mut *conn).await?.rows_affected();
                if matched != ids.len() as u64 {
                    tracing::warn!(
                        locked = ids.len(),
                        matched,
                        "claim matched fewer rows than it locked; rolled back"
                    );
                    return Ok(((), false));
                }
                for r in &rows {
                    // The row was read before the UPDATE incremented `attempts`.
                    let attempts: u32 = r.try_get(1)?;
                    taken.push((r.try_get(0)?, attempts + 1, r.try_get(2)?, r.try_get(3)?));
                }
                Ok(((), true))
            })
        }
        .await;
        if taken.is_empty() {
            return committed.map(|()| Vec::new());
        }
        match committed {
            Ok(()) => {
                // The rows are ours now: a failed read would leave them to run out their
                // lease unrun (and spend an attempt), so it is tried a few times.
                let mut delay = Duration::from_millis(50);
                let mut tries = 1;
                loop {
                    match self.read_claimed(owner, &taken, sent).await {
                        Ok(claimed) => break Ok(claimed),
                        Err(e) if tries >= 4 => break Err(e),
                        Err(e) => {
                            tracing::warn!(error = %e, jobs = taken.len(), "cannot read the jobs just claimed; retrying");
                            tokio::time::sleep(delay).await;
                            delay *= 2;
                            tries += 1;
                        }
                    }
                }
            }
            Err(e) => {
                // The COMMIT was sent; whether it took effect is unknown. The rows say.
                match self.read_claimed(owner, &taken, sent).await {
                    Ok(claimed) if !claimed.is_empty() => {
                        tracing::warn!(
                            error = %e,
                            jobs = claimed.len(),
                            "the claim's commit reply was lost, but the claim was made; running its jobs"
                        );
                        Ok(claimed)
                    }
                    _ => Err(e),
                }
            }
        }
    }

    /// Reads the rows of a claim just made (`taken`: id, attempt, max_attempts, lease_ms) by
    /// id, keeping those that `owner` holds at that attempt.
    async fn read_claimed(
        &self,
        owner: &str,
        taken: &[(u64, u32, u32, u32)],
        claimed_at: std::time::Instant,
    ) -> Result<Vec<Claimed>> {
        let ids: Vec<u64> = taken.iter().map(|t| t.0).collect();
        let sql = format!(
            "SELECT id, attempts, status = 'running' AND lease_owner <=> ?, queue, kind, task_key, payload \
             FROM job_queue WHERE id IN ({})",
            placeholders(padded_len(ids.len()))
        );
        let rows = {
            let mut q = sqlx::query(&sql).bind(owner);
            for id in padded(&ids) {
                q = q.bind(id);
            }
            q.fetch_all(&self.pool).await?
        };
        let mut claimed = Vec::with_capacity(taken.len());
        for &(id, attempt, max_attempts, lease_ms) in taken {
            let Some(r) = rows.iter().find(|r| r.get::<u64, _>(0) == id) else {
                continue;
            };
            if r.try_get::<u32, _>(1)? != attempt || !r.try_get::<bool, _>(2)? {
                continue;
            }
            let mut undecodable = Vec::new();
            let mut column = |name: &'static str| match text(r, name) {
                Ok(s) => s,
                Err(e) => {
                    undecodable.push(format!("{name} is not valid UTF-8 ({e})"));
                    let bytes: Vec<u8> = r.try_get(name).unwrap_or_default();
                    String::from_utf8_lossy(&bytes).into_owned()
                }
            };
            let (queue, kind, task_key) = (column("queue"), column("kind"), column("task_key"));
            let payload = if undecodable.is_empty() {
                r.try_get::<sqlx::types::Json<serde_json::Value>, _>("payload")
                    .map(|j| j.0)
                    .map_err(|e| format!("payload is not readable JSON: {e}"))
            } else {
                Err(format!(
                    "the row cannot be read: {}; fix it or delete the job",
                    undecodable.join("; ")
                ))
            };
            claimed.push(Claimed {
                id,
                queue,
                kind,
                task_key,
                payload,
                attempt,
                max_attempts,
                lease: Duration::from_millis(lease_ms.into()),
                claimed_at,
            });
        }
        Ok(claimed)
    }

    /// Why a claim over `queues` found nothing (plain reads: they lock nothing).
    pub async fn classify_empty(&self, queues: &[String]) -> Result<EmptyClaim> {
        let mut paused = 0;
        let mut reason = EmptyClaim::Idle;
        for queue in queues {
            let row = on_connection!(self, |conn| sqlx::query(
                "SELECT \
                   EXISTS(SELECT 1 FROM job_queue_pause WHERE queue = ?), \
                   EXISTS(SELECT 1 FROM job_queue WHERE queue = ? AND status = 'ready'), \
                   EXISTS(SELECT 1 FROM job_queue WHERE queue = ? AND status = 'running')",
            )
            .bind(queue)
            .bind(queue)
            .bind(queue)
            .fetch_one(&mut *conn))
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
            let matched = autocommit!(self, |conn| {
                let mut q = sqlx::query(&sql);
                for id in padded(&ids) {
                    q = q.bind(id);
                }
                q = q.bind(owner);
                for t in padded(&tokens) {
                    q = q.bind(t);
                }
                q.execute(&mut *conn)
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
    /// hand-back or a deferral ends `cancelled` when an operator's cancel was pending; a
    /// hand-back of the last attempt, or a deferral past its bound, ends `failed`), or
    /// `None` when the lease was lost: nothing was written.
    pub async fn finish(
        &self,
        owner: &str,
        id: u64,
        attempt: u32,
        how: &Finish,
    ) -> Result<Option<JobStatus>> {
        const FENCE: &str =
            "WHERE id = ? AND status = 'running' AND lease_owner = ? AND attempts = ?";
        // Binds in the order of the statement's marks, before the fence's.
        let mut delay_us = None;
        let mut errors = Vec::new();
        let sql = match how {
            Finish::Retry { delay, error } => {
                delay_us = Some(micros(*delay));
                errors.push(error.clone());
                format!(
                    "UPDATE job_queue SET status = IF(cancel_requested = 1, 'cancelled', 'scheduled'), \
                     run_at = IF(cancel_requested = 1, run_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), \
                     finished_at = IF(cancel_requested = 1, UTC_TIMESTAMP(6), NULL), \
                     cancel_requested = LAST_INSERT_ID(cancel_requested), unrunnable_since = NULL, \
                     lease_owner = NULL, lease_until = NULL, last_error = ?, updated_at = UTC_TIMESTAMP(6) {FENCE}"
                )
            }
            Finish::Fail { error } => {
                errors.push(error.clone());
                format!(
                    "UPDATE job_queue SET status = 'failed', lease_owner = NULL, lease_until = NULL, last_error = ?, \
                     finished_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6) {FENCE}"
                )
            }
            Finish::Cancelled { error } => {
                errors.push(error.clone());
                format!(
                    "UPDATE job_queue SET status = 'cancelled', lease_owner = NULL, lease_until = NULL, last_error = ?, \
                     finished_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6) {FENCE}"
                )
            }
            Finish::HandBack => format!(
                "UPDATE job_queue SET \
                 status = IF(cancel_requested = 1, 'cancelled', IF(attempts >= max_attempts, 'failed', 'ready')), \
                 finished_at = IF(cancel_requested = 1 OR attempts >= max_attempts, UTC_TIMESTAMP(6), NULL), \
                 last_error = IF(cancel_requested = 1, \
                   'cancelled on request; its worker shut down before the job stopped', \
                   IF(attempts >= max_attempts, LEFT(CONCAT('its worker shut down during the last attempt (', \
                     attempts, ' of ', max_attempts, '), which may have done part of its work; not run again', \
                     COALESCE(CONCAT('; previous error: ', last_error), '')), 16000), last_error)), \
                 cancel_requested = {code}, unrunnable_since = NULL, \
                 lease_owner = NULL, lease_until = NULL, updated_at = UTC_TIMESTAMP(6) {FENCE}",
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
                delay_us = Some(micros(*delay));
                let within = human_duration((*give_up_after).min(CENTURY));
                errors.push(format!(
                    "no worker could run it within {within} of the first try: {error}"
                ));
                errors.push(if *give_up_after >= CENTURY {
                    format!(
                        "waiting for a worker that can run it: {error} (not counted as an attempt)"
                    )
                } else {
                    format!(
                        "waiting for a worker that can run it: {error} (not counted as an attempt; \
                         fails if no worker can run it within {within} of the first try)"
                    )
                });
                format!(
                    "UPDATE job_queue SET \
                     status = IF(cancel_requested = 1, 'cancelled', IF({give_up}, 'failed', 'scheduled')), \
                     run_at = IF(cancel_requested = 1 OR {give_up}, run_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), \
                     max_attempts = IF(cancel_requested = 1 OR {give_up}, max_attempts, max_attempts + 1), \
                     finished_at = IF(cancel_requested = 1 OR {give_up}, UTC_TIMESTAMP(6), NULL), \
                     last_error = IF(cancel_requested = 1, 'cancelled on request before a worker could run it', \
                       IF({give_up}, ?, ?)), \
                     cancel_requested = {code}, \
                     unrunnable_since = COALESCE(unrunnable_since, UTC_TIMESTAMP(6)), \
                     lease_owner = NULL, lease_until = NULL, updated_at = UTC_TIMESTAMP(6) {FENCE}",
                    code = outcome_code(&give_up),
                )
            }
        };
        let errors: Vec<String> = errors
            .iter()
            .map(|e| truncate(e, MAX_ERROR_BYTES))
            .collect();
        let done = autocommit!(self, |conn| {
            let mut q = sqlx::query(&sql);
            if let Some(us) = delay_us {
                q = q.bind(us);
            }
            for e in &errors {
                q = q.bind(e.as_str());
            }
            q.bind(id).bind(owner).bind(attempt).execute(&mut *conn)
        })?;
        if done.rows_affected() != 1 {
            return Ok(None);
        }
        // A retry, hand-back or deferral can end otherwise than asked: cancelled when an
        // operator's request was pending, failed when out of attempts or time. The statement
        // reports which through `LAST_INSERT_ID(expr)` (see [`outcome_code`]), which puts the
        // value in the reply, so no second read is needed.
        Ok(Some(match (how, done.last_insert_id()) {
            (Finish::Fail { .. }, _) => JobStatus::Failed,
            (Finish::Cancelled { .. }, _) => JobStatus::Cancelled,
            (_, 1) => JobStatus::Cancelled,
            (_, 2) => JobStatus::Failed,
            (Finish::HandBack, _) => JobStatus::Ready,
            (Finish::Retry { .. } | Finish::Defer { .. }, _) => JobStatus::Scheduled,
        }))
    }

    /// Extends the leases of `ids` held by `owner`: one locking read and one update for all of
    /// them (per 128).
    /// Jobs with a pending cancel request are left out unless `with_cancel_requested`, so that
    /// a short count tells the caller to look. Rows that another session has locked are
    /// skipped, not waited for: they are not renewed this time. Returns the rows renewed.
    pub async fn renew(
        &self,
        owner: &str,
        ids: &[u64],
        with_cancel_requested: bool,
    ) -> Result<u64> {
        Ok(self
            .renew_ids(owner, ids, with_cancel_requested)
            .await?
            .len() as u64)
    }

    /// [`Store::renew`], returning which of `ids` were renewed, each with how much of its
    /// lease the server saw left just before (microseconds, by the server's clock).
    pub(crate) async fn renew_ids(
        &self,
        owner: &str,
        ids: &[u64],
        with_cancel_requested: bool,
    ) -> Result<Vec<(u64, i64)>> {
        let cancel = if with_cancel_requested {
            ""
        } else {
            " AND cancel_requested = 0"
        };
        let mut renewed = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(128) {
            // A locking read that skips rows other sessions hold, so that one locked job
            // cannot make the renewal of every other wait for it. It runs in autocommit: its
            // locks end with it, and a connection abandoned after it holds none. Both
            // statements go by primary key: a scan of a secondary index would lock (or wait
            // for) other running jobs' rows too.
            let sql = format!(
                "SELECT id, COALESCE(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_until), 0) \
                 FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({}) \
                 AND status = 'running' AND lease_owner = ?{cancel} FOR UPDATE SKIP LOCKED",
                placeholders(padded_len(chunk.len()))
            );
            let free: Vec<(u64, i64)> = on_connection!(self, |conn| {
                let mut q = sqlx::query_as(&sql);
                for id in padded(chunk) {
                    q = q.bind(id);
                }
                q.bind(owner).fetch_all(&mut *conn)
            })
            .await?;
            if free.is_empty() {
                continue;
            }
            let sql = format!(
                "UPDATE job_queue FORCE INDEX (PRIMARY) \
                 SET lease_until = UTC_TIMESTAMP(6) + INTERVAL lease_ms * 1000 MICROSECOND \
                 WHERE id IN ({}) AND status = 'running' AND lease_owner = ?{cancel}",
                placeholders(padded_len(free.len()))
            );
            let matched = on_connection!(self, |conn| {
                let mut q = sqlx::query(&sql);
                for (id, _) in padded(&free) {
                    q = q.bind(id);
                }
                q.bind(owner).execute(&mut *conn)
            })
            .await?
            .rows_affected();
            // A row changed between the two statements. Which one is unknown, so none counts
            // as renewed; the next round sorts it out.
            if matched == free.len() as u64 {
                renewed.extend(free);
            }
        }
        Ok(renewed)
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
            let rows = on_connection!(self, |conn| q.fetch_all(&mut *conn)).await?;
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

    /// [`Store::reclaim_with`] with the default bound of [`DEFAULT_MAX_LEASE_EXPIRIES`]
    /// expired leases per job.
    pub async fn reclaim(&self, limit: usize) -> Result<Reclaimed> {
        self.reclaim_with(limit, DEFAULT_MAX_LEASE_EXPIRIES).await
    }

    /// Takes back up to `limit` jobs whose lease expired, and counts the expiry in the
    /// job's `lease_expiries`:
    /// - to `cancelled` when a cancel was pending;
    /// - to `failed` when that was the last attempt;
    /// - to `failed` when this is the `max_lease_expiries`th expiry of the job: a job whose
    ///   worker crashed or stalled that often is taken to be what crashes them (a poison
    ///   job), and is not run again;
    /// - otherwise back to `ready` at once after a first expiry (a crashed or killed worker
    ///   is routine), and to `scheduled` after a later one, due after `lease × (2^(n-1) - 1)`
    ///   (±20 %, at most an hour) for the `n`th: 1, 3, 7... leases, so that a job that keeps
    ///   killing workers does not go round the fleet at full speed.
    ///
    /// Attempts are kept either way. Rows that another process is reclaiming are skipped.
    pub async fn reclaim_with(&self, limit: usize, max_lease_expiries: u32) -> Result<Reclaimed> {
        let max_lease_expiries = max_lease_expiries.max(1);
        transaction!(self, |conn| {
            let rows = sqlx::query(
                "SELECT id, attempts, max_attempts, cancel_requested, COALESCE(lease_owner, ''), \
                   lease_expiries, lease_ms \
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
                let (expiries, lease_ms): (u32, u32) = (r.try_get(5)?, r.try_get(6)?);
                let expiry = expiries.saturating_add(1);
                if cancel {
                    out.cancelled.push(id);
                } else if attempts >= max {
                    out.failed.push((id, attempts, owner));
                } else if expiry >= max_lease_expiries {
                    out.poison.push((id, attempts, owner));
                } else if expiry == 1 {
                    out.ready.push((id, attempts, owner));
                } else {
                    let delay = expiry_delay(Duration::from_millis(lease_ms.into()), expiry);
                    out.delayed
                        .push((id, attempts, owner, crate::retry::jitter(delay, 0.2)));
                }
            }
            const GUARD: &str = "AND status = 'running' AND lease_until < UTC_TIMESTAMP(6)";
            // Every SET reads `lease_expiries` and `lease_owner` before they are assigned.
            const COUNT: &str =
                "lease_expiries = lease_expiries + 1, lease_owner = NULL, lease_until = NULL, \
                 updated_at = UTC_TIMESTAMP(6)";
            let ready: Vec<u64> = out.ready.iter().map(|r| r.0).collect();
            let failed: Vec<u64> = out.failed.iter().map(|r| r.0).collect();
            let poison: Vec<u64> = out.poison.iter().map(|r| r.0).collect();
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
                    &poison,
                    "status = 'failed', finished_at = UTC_TIMESTAMP(6), last_error = LEFT(CONCAT('lease expired ', \
                     lease_expiries + 1, ' times (the last during attempt ', attempts, ', held by ', \
                     COALESCE(lease_owner, '?'), '): the job may be crashing or stalling the workers that run it; \
                     not run again', COALESCE(CONCAT('; previous error: ', last_error), '')), 16000)",
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
                    "UPDATE job_queue SET {set}, {COUNT} WHERE id IN ({}) {GUARD}",
                    placeholders(padded_len(ids.len()))
                );
                // Rare (only after a crash or a lost lease), and twelve texts in all: not
                // worth a place in the connection's statement cache.
                let mut q = sqlx::query(&sql).persistent(false);
                for id in padded(ids) {
                    q = q.bind(id);
                }
                let matched = q.execute(&mut *conn).await?.rows_affected();
                if matched != ids.len() as u64 {
                    return Ok((Reclaimed::default(), false));
                }
            }
            // Each delayed job has a delay of its own: one statement each (they are rare).
            for (id, _, _, delay) in &out.delayed {
                let sql = format!(
                    "UPDATE job_queue SET status = 'scheduled', \
                     run_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, \
                     last_error = LEFT(CONCAT('lease of ', COALESCE(lease_owner, '?'), \
                     ' expired during attempt ', attempts, ' (expiry ', lease_expiries + 1, ' of at most ', ?, \
                     '); taken back with a delay', COALESCE(CONCAT('; previous error: ', last_error), '')), 16000), \
                     {COUNT} WHERE id = ? {GUARD}"
                );
                let matched = sqlx::query(&sql)
                    .bind(micros(*delay))
                    .bind(max_lease_expiries - 1)
                    .bind(id)
                    .execute(&mut *conn)
                    .await?
                    .rows_affected();
                if matched != 1 {
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
            // Pruning runs once a minute: its statements are prepared for one use each, so
            // that they take no place in the connection's statement cache.
            let ids: Vec<u64> = sqlx::query_scalar(
                "SELECT id FROM job_queue FORCE INDEX (job_queue_finished) \
                 WHERE status = ? AND finished_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND \
                 ORDER BY finished_at, id LIMIT ? FOR UPDATE SKIP LOCKED",
            )
            .persistent(false)
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
            let mut q = sqlx::query(&sql).persistent(false);
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

    /// The queues an operator has paused.
    pub(crate) async fn paused_queues(&self) -> Result<Vec<String>> {
        let rows = on_connection!(self, |conn| sqlx::query(
            "SELECT queue FROM job_queue_pause"
        )
        .fetch_all(conn))
        .await?;
        rows.iter()
            .map(|r| text(r, 0).map_err(Error::from))
            .collect()
    }

    /// One scheduler pass over the periodic kind `kind`, in one short transaction with the
    /// kind's `job_queue_cron` row locked (SKIP LOCKED: a node that finds it locked leaves
    /// the pass to the node holding it).
    ///
    /// A kind without a row gets one starting at `now`, and no tick. Otherwise `due` turns
    /// the recorded `last_tick` into the ticks to deal with; each is enqueued (`job_of`
    /// builds its job), or skipped when `overlap` is off and the previous tick's job is
    /// still scheduled, ready or running. The row then moves to the last of them, fenced by
    /// the `last_tick` read, so a tick is enqueued by exactly one transaction, ever.
    pub(crate) async fn schedule_ticks(
        &self,
        kind: &str,
        now: NaiveDateTime,
        overlap: bool,
        due: impl Fn(NaiveDateTime) -> Vec<NaiveDateTime>,
        job_of: impl Fn(NaiveDateTime) -> NewJob,
    ) -> Result<TickPass> {
        let pass: Result<Result<TickPass>> = transaction!(self, |conn| {
            let row: Option<(NaiveDateTime, Option<u64>)> = sqlx::query_as(
                "SELECT last_tick, last_job_id FROM job_queue_cron WHERE kind = ? \
                 FOR UPDATE SKIP LOCKED",
            )
            .bind(kind)
            .fetch_optional(&mut *conn)
            .await?;
            let Some((last, mut last_job)) = row else {
                // No row, or another node holds it. A plain read tells which without waiting
                // for that node's lock (an insert would wait for it, to check the key).
                let exists: bool = sqlx::query_scalar(
                    "SELECT EXISTS(SELECT 1 FROM job_queue_cron WHERE kind = ?)",
                )
                .bind(kind)
                .fetch_one(&mut *conn)
                .await?;
                if exists {
                    return Ok((Ok(TickPass::Busy), false));
                }
                let created = sqlx::query(
                    "INSERT INTO job_queue_cron (kind, last_tick, last_job_id, updated_at) \
                     VALUES (?, ?, NULL, UTC_TIMESTAMP(6))",
                )
                .bind(kind)
                .bind(now)
                .execute(&mut *conn)
                .await;
                return match created {
                    Ok(_) => Ok((Ok(TickPass::Started(now)), true)),
                    Err(e) if is_key_conflict(&e) => Ok((Ok(TickPass::Busy), false)),
                    Err(e) => Err(e),
                };
            };
            let ticks = due(last);
            let Some(&end) = ticks.last() else {
                return Ok((
                    Ok(TickPass::Advanced {
                        last_tick: last,
                        new: Vec::new(),
                        skipped: 0,
                    }),
                    false,
                ));
            };
            let (mut new, mut skipped) = (Vec::new(), 0);
            for &tick in &ticks {
                if !overlap {
                    if let Some(id) = last_job {
                        // The latest committed state (READ COMMITTED), or this
                        // transaction's own insert of the tick before.
                        let status: Option<String> = sqlx::query_scalar(
                            "SELECT CAST(status AS CHAR) FROM job_queue WHERE id = ?",
                        )
                        .bind(id)
                        .fetch_optional(&mut *conn)
                        .await?;
                        if matches!(status.as_deref(), Some("scheduled" | "ready" | "running")) {
                            skipped += 1;
                            continue;
                        }
                    }
                }
                match insert(conn, &job_of(tick)).await {
                    Ok(Enqueued::New(id)) => {
                        new.push(id);
                        last_job = Some(id);
                    }
                    // Enqueued by hand, or by a node of an older release.
                    Ok(Enqueued::Duplicate(id)) => last_job = Some(id),
                    Err(Error::Database(e)) => return Err(e),
                    Err(other) => return Ok((Err(other), false)),
                }
            }
            let moved = sqlx::query(
                "UPDATE job_queue_cron SET last_tick = ?, last_job_id = ?, updated_at = UTC_TIMESTAMP(6) \
                 WHERE kind = ? AND last_tick = ?",
            )
            .bind(end)
            .bind(last_job)
            .bind(kind)
            .bind(last)
            .execute(&mut *conn)
            .await?
            .rows_affected();
            if moved != 1 {
                return Ok((Ok(TickPass::Busy), false));
            }
            Ok((
                Ok(TickPass::Advanced {
                    last_tick: end,
                    new,
                    skipped,
                }),
                true,
            ))
        });
        pass?
    }

    /// Inserts one job outside any transaction of the caller (see [`insert`]), retried after
    /// a deadlock. Two inserts of one key that both wait on a third session's uncommitted
    /// insert of it deadlock when that session rolls back; the victim's retry then finds the
    /// winner's row and reports `Duplicate`. A lock wait timeout (1205) is not retried: it
    /// has already made the caller wait `innodb_lock_wait_timeout`.
    pub(crate) async fn insert_autocommit(&self, job: &NewJob) -> Result<Enqueued> {
        let mut retry = 0u32;
        loop {
            let mut conn = acquire(self).await?;
            match insert(&mut conn, job).await {
                Err(e) if e.server_code() == Some(1213) && retry < CONFLICT_RETRIES => {
                    drop(conn);
                    retry += 1;
                    self.metrics.conflict(1213);
                    tokio::time::sleep(conflict_delay(retry)).await;
                }
                other => return other,
            }
        }
    }

    /// Makes up to `limit` due `scheduled` jobs `ready`. Returns how many.
    pub async fn promote(&self, limit: usize) -> Result<u64> {
        // A plain read first: most passes find nothing due, and a plain read locks nothing
        // and needs no transaction.
        let due: bool = on_connection!(self, |conn| sqlx::query_scalar(
            "SELECT EXISTS(SELECT 1 FROM job_queue FORCE INDEX (job_queue_due) \
             WHERE status = 'scheduled' AND run_at <= UTC_TIMESTAMP(6))",
        )
        .fetch_one(&mut *conn))
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

/// Which row [`fetch_job`] reads.
#[derive(Debug)]
pub(crate) enum JobLookup<'a> {
    Id(u64),
    Key(&'a str),
}

pub(crate) const JOB_COLUMNS: &str = "id, queue, kind, task_key, payload, CAST(status AS CHAR) AS status, priority, run_at, \
    attempts, max_attempts, lease_owner, lease_until, cancel_requested, last_error, created_at, updated_at, finished_at, \
    lease_expiries, unrunnable_since";

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
        lease_expiries: r.try_get("lease_expiries")?,
        unrunnable_since: r.try_get("unrunnable_since")?,
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

/// An assignment to `cancel_requested` that leaves it as it is and reports, through
/// `LAST_INSERT_ID(expr)`, how a statement ended: 1 cancelled (a cancel was pending), 2
/// failed (`failed_if` held), 0 as asked. It reads only columns that no earlier assignment
/// of the statement changes, so it means the same under MariaDB's `SIMULTANEOUS_ASSIGNMENT`.
fn outcome_code(failed_if: &str) -> String {
    format!("IF(LAST_INSERT_ID(IF(cancel_requested = 1, 1, IF({failed_if}, 2, 0))) = 1, 1, 0)")
}

/// How long a job waits after the `expiry`th expiry of its lease (from 2; the first one
/// returns it at once): `lease × (2^(expiry-1) - 1)`, at most an hour, before jitter.
fn expiry_delay(lease: Duration, expiry: u32) -> Duration {
    let leases = (1u32 << expiry.saturating_sub(1).min(20)) - 1;
    lease
        .checked_mul(leases)
        .unwrap_or(Duration::MAX)
        .min(Duration::from_secs(3600))
}

/// `d` for a message: `24h`, `90min`, `45s`, or as `Debug` writes it when not whole.
fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    match (secs, d.subsec_nanos()) {
        (0, _) | (_, 1..) => format!("{d:?}"),
        (s, _) if s % 3600 == 0 => format!("{}h", s / 3600),
        (s, _) if s % 60 == 0 => format!("{}min", s / 60),
        (s, _) => format!("{s}s"),
    }
}

/// `d` in whole microseconds, for `INTERVAL ? MICROSECOND`.
fn micros(d: Duration) -> i64 {
    d.as_micros().min(i64::MAX as u128) as i64
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_whose_lease_keeps_expiring_comes_back_later_each_time() {
        let lease = Duration::from_secs(30);
        let waits: Vec<u64> = (1..=5).map(|n| expiry_delay(lease, n).as_secs()).collect();
        assert_eq!(waits, [0, 30, 90, 210, 450]);
        assert_eq!(expiry_delay(lease, 40), Duration::from_secs(3600));
    }

    #[test]
    fn waiting_bounds_read_as_people_write_them() {
        assert_eq!(human_duration(Duration::from_secs(24 * 3600)), "24h");
        assert_eq!(human_duration(Duration::from_secs(5400)), "90min");
        assert_eq!(human_duration(Duration::from_secs(90)), "90s");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5s");
    }
}
