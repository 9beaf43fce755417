//! The claim: ready jobs taken for a worker in one short transaction (candidates by a plain
//! read of the claim index, then point locks by primary key), and why a claim found nothing.

use std::time::Duration;

use sqlx::Row;

use super::limits;
use super::*;
use crate::model::{Claimed, EmptyClaim};

/// The claim's first read: the ids of ready jobs of one queue (not paused) in claim order,
/// over the claim index. A plain read: it locks nothing, so it neither waits for nor holds
/// up anyone; [`claim_lock_sql`] then locks the ones it takes.
///
/// A locking read over the claim index would do both steps in one statement, but it locks
/// every secondary entry it passes (the ones of rows that other claims hold, and the
/// entries of rows claimed earlier that purge has not removed yet) before it can skip them,
/// and locks each row twice (the index entry, then the row): measured against this
/// two-step claim with the benchmark's loop on the same table and index, it drained 0.6-0.8x
/// as fast. Under REPEATABLE READ it would also lock the gaps it read, the one after the
/// last ready job included, where the next enqueue's row goes.
pub const CLAIM_SELECT: &str = "SELECT id FROM job_queue FORCE INDEX (job_queue_claim) \
     WHERE queue = ? AND status = 'ready' \
     AND NOT EXISTS (SELECT 1 FROM job_queue_pause p WHERE p.queue = ?) \
     ORDER BY priority, id LIMIT ?";

/// The claim's locking read of `n` ids that [`CLAIM_SELECT`] found: each row by primary
/// key (a point lock on the row, no gap, at any isolation level), skipping the rows another
/// transaction holds and keeping those still ready, with their limits.
pub fn claim_lock_sql(n: usize) -> String {
    format!(
        "SELECT id, attempts, max_attempts, lease_ms, priority, \
         concurrency_key, concurrency_limit, rate_key, rate_limit, rate_window_ms \
         FROM job_queue FORCE INDEX (PRIMARY) \
         WHERE id IN ({}) AND status = 'ready' FOR UPDATE SKIP LOCKED",
        placeholders(n)
    )
}

/// How many candidates [`CLAIM_SELECT`] reads per job a claim wants, plus
/// [`CANDIDATES_EXTRA`]: the rows at the head of the queue that other claims hold (their
/// commit not yet made) are read too, and skipped by the locking read.
const CANDIDATES_PER_JOB: usize = 2;

/// Candidates read beyond [`CANDIDATES_PER_JOB`] per job: many workers wanting one job each
/// read the same head of the queue at once, and each must find rows past those the others
/// lock, or it would come back empty with a backlog behind them.
const CANDIDATES_EXTRA: usize = 32;

/// Locks up to `want` ready jobs of `queue` for this transaction and returns their rows (the
/// columns of [`claim_lock_sql`]) in claim order: candidates by a plain read over the claim
/// index, then point locks on them by primary key, in claim order, as many at a time as
/// are still wanted, until `want` are locked or the candidates run out.
async fn lock_ready(
    conn: &mut MySqlConnection,
    queue: &str,
    want: usize,
) -> sqlx::Result<Vec<sqlx::mysql::MySqlRow>> {
    let candidates: Vec<u64> = sqlx::query_scalar(CLAIM_SELECT)
        .bind(queue)
        .bind(queue)
        .bind((want * CANDIDATES_PER_JOB + CANDIDATES_EXTRA) as u64)
        .fetch_all(&mut *conn)
        .await?;
    let mut locked = Vec::with_capacity(want.min(candidates.len()));
    let mut next = 0;
    while locked.len() < want && next < candidates.len() {
        let take = (want - locked.len()).min(candidates.len() - next);
        let chunk = &candidates[next..next + take];
        next += take;
        let sql = claim_lock_sql(padded_len(chunk.len()));
        let mut q = sqlx::query(&sql);
        for id in padded(chunk) {
            q = q.bind(id);
        }
        locked.extend(q.fetch_all(&mut *conn).await?);
    }
    // Each chunk comes back in id order; the chunks are in claim order already.
    let mut keyed = Vec::with_capacity(locked.len());
    for r in locked {
        keyed.push(((r.try_get::<i16, _>(4)?, r.try_get::<u64, _>(0)?), r));
    }
    keyed.sort_unstable_by_key(|(k, _)| *k);
    Ok(keyed.into_iter().map(|(_, r)| r).collect())
}

/// How many locking reads one claim makes at most when it finds jobs at their key's limit
/// (it blocks them and reads on, so that they do not hold up the jobs behind them).
const CLAIM_ROUNDS: usize = 4;

/// How many rows a claim's later reads take, when earlier ones found jobs to block.
const BLOCK_BATCH: usize = 100;

/// The idle probe for `queues` queues: whether any of them, not paused, has a ready job. A
/// plain read of one entry of the claim index per queue; it locks nothing.
pub fn ready_probe_sql(queues: usize) -> String {
    let one = "(EXISTS(SELECT 1 FROM job_queue FORCE INDEX (job_queue_claim) \
               WHERE queue = ? AND status = 'ready') \
               AND NOT EXISTS(SELECT 1 FROM job_queue_pause WHERE queue = ?))";
    format!("SELECT {}", vec![one; queues.max(1)].join(" OR "))
}

/// How long an idle probe may take before its connection is given up (it is a one-entry
/// index read; a server that takes this long is in trouble, and the claims' own error
/// handling takes over).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection of a worker's idle probes opened with the pool's options but outside the
/// pool: on a pool of the application's or a pool of one connection, where the probe must
/// not hold one of the pool's (see `ProbeConn` in `store/connect.rs`).
pub(crate) struct ProbeConnection(sqlx::MySqlConnection);

impl std::fmt::Debug for ProbeConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProbeConnection")
    }
}

impl Store {
    /// A connection for [`Store::probe_ready`].
    pub(crate) async fn probe_connection(&self) -> Result<ProbeConnection> {
        use sqlx::ConnectOptions as _;
        let options = self.mysql_pool()?.connect_options();
        let connect = options.connect();
        match tokio::time::timeout(PROBE_TIMEOUT, connect).await {
            Ok(conn) => Ok(ProbeConnection(conn?)),
            Err(_) => Err(timed_out(PROBE_TIMEOUT).into()),
        }
    }

    /// Whether any of `queues` (not paused) has a ready job, on `conn`. An error (the
    /// connection is then no longer usable: drop it) when the read failed or took longer
    /// than [`PROBE_TIMEOUT`].
    pub(crate) async fn probe_ready(
        &self,
        conn: &mut ProbeConnection,
        sql: &str,
        queues: &[String],
    ) -> Result<bool> {
        let mut q = sqlx::query_scalar::<_, bool>(sql);
        for queue in queues {
            q = q.bind(queue).bind(queue);
        }
        match tokio::time::timeout(PROBE_TIMEOUT, q.fetch_one(&mut conn.0)).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(timed_out(PROBE_TIMEOUT).into()),
        }
    }

    /// Claims up to `limit` ready jobs of `queue` for `owner`: a plain read of candidates over
    /// the claim index, `SELECT ... FOR UPDATE SKIP LOCKED` of them by primary key, then one
    /// `UPDATE` of exactly those rows, in one short transaction. Rows other claimers hold
    /// are skipped, never waited for, and no gap is locked. If the `UPDATE`
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
        on_postgres!(self, claim::claim(queue, owner, limit));
        if limit == 0 {
            return Ok(Vec::new());
        }
        // (id, attempt, max_attempts, lease_ms) of the rows the UPDATE took, set only once it
        // matched them all: an error after that can only be the COMMIT's.
        let mut taken: Vec<(u64, u32, u32, u32)> = Vec::new();
        // When the first UPDATE of the try that committed was sent: every job of the claim
        // gets its local deadline from it, the earliest, so that it is conservative for the
        // jobs of later rounds too.
        let mut first_sent: Option<std::time::Instant> = None;
        let committed: Result<()> = async {
            transaction!(self, |conn| {
                taken.clear();
                first_sent = None;
                let mut want = limit;
                let mut changed = false;
                for round in 0..CLAIM_ROUNDS {
                    // After a round that blocked jobs, a wider read: a key with a long
                    // backlog is moved out of the way many jobs at a time.
                    let read = if round == 0 { want } else { want.max(BLOCK_BATCH) };
                    let rows = lock_ready(conn, queue, read).await?;
                    if rows.is_empty() {
                        break;
                    }
                    let mut ids: Vec<u64> = Vec::new();
                    let mut round_taken = Vec::new();
                    let mut blocked = Vec::new();
                    // (id, attempt, limits): the row was read before the UPDATE increments
                    // `attempts`.
                    let mut read_rows = Vec::with_capacity(rows.len());
                    for r in &rows {
                        let attempt = r.try_get::<u32, _>(1)? + 1;
                        read_rows.push((r.try_get::<u64, _>(0)?, attempt, limits::RowLimits::read(r, 5)?));
                    }
                    let verdicts = if read_rows.iter().any(|r| r.2.is_some()) {
                        limits::take_slots_batch(conn, &read_rows, want).await?
                    } else {
                        // No limits: the first `want` rows, as ever.
                        (0..read_rows.len())
                            .map(|i| if i < want { limits::Verdict::Take } else { limits::Verdict::Leave })
                            .collect()
                    };
                    for ((r, (id, attempt, _)), verdict) in rows.iter().zip(&read_rows).zip(verdicts) {
                        match verdict {
                            limits::Verdict::Take => {
                                ids.push(*id);
                                round_taken.push((*id, *attempt, r.try_get(2)?, r.try_get(3)?));
                            }
                            limits::Verdict::Block(key) => {
                                blocked.push((*id, r.try_get::<i16, _>(4)?, key));
                            }
                            limits::Verdict::Leave => {}
                        }
                    }
                    if !blocked.is_empty() {
                        limits::block(conn, &blocked).await?;
                        changed = true;
                    }
                    if !ids.is_empty() {
                        let sql = format!(
                            "UPDATE job_queue SET status = 'running', lease_owner = ?, \
                             lease_until = UTC_TIMESTAMP(6) + INTERVAL lease_ms * 1000 MICROSECOND, \
                             attempts = attempts + 1, claimed_at = UTC_TIMESTAMP(6), \
                             updated_at = UTC_TIMESTAMP(6) \
                             WHERE id IN ({}) AND status = 'ready'",
                            placeholders(padded_len(ids.len()))
                        );
                        let mut q = sqlx::query(&sql).bind(owner);
                        for id in padded(&ids) {
                            q = q.bind(id);
                        }
                        // The server's lease starts while this statement runs: a local clock
                        // read just before it is never later than the server's, so deadlines
                        // derived from it are conservative.
                        first_sent.get_or_insert_with(std::time::Instant::now);
                        let matched = q.execute(&mut *conn).await?.rows_affected();
                        if matched != ids.len() as u64 {
                            tracing::warn!(
                                locked = ids.len(),
                                matched,
                                "claim matched fewer rows than it locked; rolled back"
                            );
                            taken.clear();
                            return Ok(((), false));
                        }
                        want -= ids.len();
                        taken.extend(round_taken);
                        changed = true;
                    }
                    if blocked.is_empty() || want == 0 || rows.len() < read {
                        break;
                    }
                }
                if !changed {
                    return Ok(((), false));
                }
                Ok(((), true))
            })
        }
        .await;
        if taken.is_empty() {
            return committed.map(|()| Vec::new());
        }
        let sent = first_sent.unwrap_or_else(std::time::Instant::now);
        match committed {
            Ok(()) => {
                // The rows are ours now: a failed read would leave them to run out their
                // lease unrun (and spend an attempt), so it is tried a few times.
                let mut delay = Duration::from_millis(50);
                let mut tries = 1;
                loop {
                    match self.read_claimed(owner, &taken, sent).await {
                        Ok(claimed) => {
                            if tries > 1 {
                                tracing::info!(
                                    jobs = claimed.len(),
                                    tries,
                                    "the jobs just claimed were read again"
                                );
                            }
                            break Ok(claimed);
                        }
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
            "SELECT id, attempts, status = 'running' AND lease_owner <=> ?, queue, kind, \
             COALESCE(released_key, task_key) AS task_key, payload, traceparent, metadata, \
             concurrency_key IS NOT NULL AND concurrency_limit > 0 AS holds_slot \
             FROM job_queue WHERE id IN ({})",
            placeholders(padded_len(ids.len()))
        );
        let rows = {
            let mut q = sqlx::query(&sql).bind(owner);
            for id in padded(&ids) {
                q = q.bind(id);
            }
            on_connection!(self, |conn| q.fetch_all(&mut *conn)).await?
        };
        // By id, decoded once: a claim of 256 jobs would otherwise decode 32,000 ids.
        let mut by_id = std::collections::HashMap::with_capacity(rows.len());
        for r in &rows {
            by_id.insert(r.try_get::<u64, _>(0)?, r);
        }
        let mut claimed = Vec::with_capacity(taken.len());
        for &(id, attempt, max_attempts, lease_ms) in taken {
            let Some(&r) = by_id.get(&id) else {
                continue;
            };
            if r.try_get::<u32, _>(1)? != attempt || !r.try_get::<bool, _>(2)? {
                continue;
            }
            let mut undecodable = Vec::new();
            // The key is bytes in the table: read as bytes first, so that the common case
            // builds no decoding error on the way.
            let key_bytes = r.try_get::<Vec<u8>, _>("task_key").ok();
            let mut column = |name: &'static str| match text(r, name) {
                Ok(s) => s,
                Err(e) => {
                    undecodable.push(format!("{name} is not valid UTF-8 ({e})"));
                    let bytes: Vec<u8> = r.try_get(name).unwrap_or_default();
                    String::from_utf8_lossy(&bytes).into_owned()
                }
            };
            let (queue, kind) = (column("queue"), column("kind"));
            let task_key = match key_bytes.map(String::from_utf8) {
                Some(Ok(key)) => key,
                _ => column("task_key"),
            };
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
                // A context that cannot be read only costs the job its trace.
                traceparent: super::decode::opt_text(r, "traceparent").ok().flatten(),
                holds_slot: r.try_get("holds_slot")?,
                // Metadata that cannot be read only costs the middleware its view of it.
                metadata: r
                    .try_get::<Option<sqlx::types::Json<serde_json::Value>>, _>("metadata")
                    .ok()
                    .flatten()
                    .map(|j| j.0),
            });
        }
        Ok(claimed)
    }

    /// Why a claim over `queues` found nothing (plain reads: they lock nothing).
    pub async fn classify_empty(&self, queues: &[String]) -> Result<EmptyClaim> {
        on_postgres!(self, claim::classify_empty(queues));
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
}
